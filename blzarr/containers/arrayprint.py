"""bcolz's ``bcolz.arrayprint``: how carrays and ctables print, and the options that change it.

`array2string` formats a carray, a ctable or any array like NumPy's function of the same name,
reading only the rows it shows (the first and last `edgeitems` once the length passes
`threshold`).  `set_printoptions` / `get_printoptions` hold blzarr's own options, with bcolz's
names and defaults; NumPy's options are left alone.

Examples
--------
>>> import numpy as np, blzarr
>>> a = blzarr.arange(10_000)
>>> print(a)
[   0    1    2 ... 9997 9998 9999]
>>> blzarr.set_printoptions(edgeitems=1)
>>> print(a)
[   0 ... 9999]
>>> blzarr.set_printoptions(edgeitems=3)
>>> blzarr.get_printoptions()["threshold"]
1000
"""

import numpy as np

__all__ = ["array2string", "get_printoptions", "set_printoptions"]

_options = {"precision": 8, "threshold": 1000, "edgeitems": 3, "linewidth": 75, "suppress": False,
            "nanstr": "nan", "infstr": "inf", "formatter": None}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, suppress=None,
                     nanstr=None, infstr=None, formatter=None):
    """Set how carrays and ctables print (the options of NumPy's function of the same name).

    Only the options given change.  ``formatter`` is a dict as NumPy takes it; None keeps
    the current one.

    Raises
    ------
    ValueError
        A negative or non-integer `precision`, `threshold`, `edgeitems` or `linewidth`.
    """
    new = {"precision": precision, "threshold": threshold, "edgeitems": edgeitems,
           "linewidth": linewidth, "suppress": suppress, "nanstr": nanstr, "infstr": infstr,
           "formatter": formatter}
    for k in ("precision", "threshold", "edgeitems", "linewidth"):
        v = new[k]
        if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0):
            raise ValueError(f"set_printoptions: `{k}` must be a non-negative int, got {v!r}")
    _options.update({k: v for k, v in new.items() if v is not None})
    if suppress is not None:
        _options["suppress"] = bool(suppress)


def get_printoptions():
    """The current print options, as a dict (a copy)."""
    return dict(_options)


def _sample(a, edge):
    """The rows a summarized print shows: the first and last `edge`, with one row between
    (NumPy then prints exactly 'first ... last' for it)."""
    n = len(a)
    return np.concatenate([np.asarray(a[:edge + 1]), np.asarray(a[n - edge:])]) if edge else \
        np.asarray(a[:1])


def array2string(a, max_line_width=None, precision=None, suppress_small=None, separator=" ",
                 prefix="", style=None, formatter=None, threshold=None, edgeitems=None):
    """The text of `a` (a carray, a ctable or an array), summarized past `threshold` items.

    Arguments left None take the value of `get_printoptions`.
    """
    opt = _options
    threshold = opt["threshold"] if threshold is None else threshold
    edgeitems = opt["edgeitems"] if edgeitems is None else edgeitems
    n = len(a) if np.ndim(a) else 1
    if n > threshold and n > 2 * edgeitems and np.ndim(a):
        arr = _sample(a, edgeitems)
        # the sample has 2*edgeitems+1 rows: printed summarized, it shows the same text
        threshold_np = 0
    else:
        arr = np.asarray(a[:]) if np.ndim(a) else np.asarray(a)
        threshold_np = threshold
    with np.printoptions(nanstr=opt["nanstr"], infstr=opt["infstr"]):
        return np.array2string(
            arr, max_line_width=opt["linewidth"] if max_line_width is None else max_line_width,
            precision=opt["precision"] if precision is None else precision,
            suppress_small=opt["suppress"] if suppress_small is None else suppress_small,
            separator=separator, prefix=prefix,
            formatter=opt["formatter"] if formatter is None else formatter,
            threshold=threshold_np, edgeitems=edgeitems)
