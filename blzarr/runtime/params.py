"""Compression parameters (`cparams`) and the process-wide defaults (`defaults`, `defaults_ctx`)."""

import os
from contextlib import contextmanager

from blzarr import _chunk
from blzarr.runtime.optional import have

#: ``cparams(shuffle=NOSHUFFLE)``: the bytes of each value are compressed as they are.
NOSHUFFLE = 0
#: ``cparams(shuffle=SHUFFLE)`` (the default): byte shuffle, the k-th bytes of all values together.
SHUFFLE = 1
#: ``cparams(shuffle=BITSHUFFLE)``: bit shuffle, the k-th bits of all values together.
BITSHUFFLE = 2

# The blocksize blzarr asks Blosc for: small enough that a random read decodes little, large enough to
# compress well and to give every thread several blocks of a chunk.
# whether writers sync what they publish: BLZARR_FSYNC=0 skips every fsync/fdatasync (scratch data:
# faster, not durable); `defaults.fsync` reads and sets it
FSYNC = os.environ.get("BLZARR_FSYNC", "1") != "0"

DEFAULT_BLOCKSIZE = 16 * 1024

_state = {"nthreads": None}


def detect_number_of_cores():
    """The number of cores this process may run on (its CPU affinity when the OS tells it).

    Examples
    --------
    >>> import blzarr
    >>> blzarr.detect_number_of_cores() >= 1
    True
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def get_nthreads():
    if _state["nthreads"] is None:
        _state["nthreads"] = min(detect_number_of_cores(), 8)
    return _state["nthreads"]


def blosc_set_nthreads(nthreads):
    """Set the number of threads Blosc uses to compress and decompress a chunk.

    Parameters
    ----------
    nthreads : int
        A positive number (capped at 256).  The default is the number of cores, at most 8.

    Returns
    -------
    int
        The previous number.

    Raises
    ------
    ValueError
        `nthreads` is not a positive int.

    Examples
    --------
    >>> import blzarr
    >>> previous = blzarr.blosc_set_nthreads(1)
    >>> blzarr.blosc_set_nthreads(previous)
    1
    """
    if not isinstance(nthreads, int) or isinstance(nthreads, bool) or nthreads < 1:
        raise ValueError(f"nthreads must be a positive integer, got {nthreads!r}")
    previous = get_nthreads()
    _state["nthreads"] = min(nthreads, 256)
    return previous


def set_nthreads(nthreads):
    """Set the number of threads of Blosc and, when numexpr is installed, of numexpr.

    `nthreads`, the result (Blosc's previous number) and the errors are those of `blosc_set_nthreads`.

    Examples
    --------
    >>> import blzarr
    >>> previous = blzarr.set_nthreads(2)
    >>> blzarr.set_nthreads(previous)
    2
    """
    previous = blosc_set_nthreads(nthreads)
    try:
        import numexpr
    except ImportError:
        pass
    else:
        numexpr.set_num_threads(nthreads)
    return previous


_CODECS = []


def _codecs():
    """The codec names of this build of C-Blosc (they cannot change while it is loaded)."""
    if not _CODECS:
        _CODECS.extend(_chunk.compressor_list())
    return _CODECS


def _check(clevel, shuffle, cname, quantize):
    if clevel is not None:
        if not isinstance(clevel, int) or isinstance(clevel, bool) or not 0 <= clevel <= 9:
            raise ValueError(f"cparams: `clevel` must be an int between 0 and 9, got {clevel!r}")
    if shuffle is not None:
        if isinstance(shuffle, bool):
            shuffle = int(shuffle)
        if shuffle not in (NOSHUFFLE, SHUFFLE, BITSHUFFLE):
            raise ValueError(
                f"cparams: `shuffle` must be NOSHUFFLE (0), SHUFFLE (1) or BITSHUFFLE (2), got {shuffle!r}")
    if cname is not None:
        if isinstance(cname, bytes):
            cname = cname.decode()
        if cname not in _codecs():
            raise ValueError(
                f"cparams: `cname` {cname!r} is not a compressor available in this build "
                f"(available: {', '.join(_chunk.compressor_list())})")
    if quantize is not None:
        if not isinstance(quantize, int) or isinstance(quantize, bool) or quantize < 0:
            raise ValueError(f"cparams: `quantize` must be 0 or a positive int, got {quantize!r}")
    return clevel, shuffle, cname, quantize


class cparams:
    """cparams(clevel=None, shuffle=None, cname=None, quantize=None)

    Compression parameters of a carray or ctable (immutable); what is not given comes from
    ``blzarr.defaults.cparams``.  Wherever blzarr takes ``cparams=``, a dict of the same fields
    works too.

    Parameters
    ----------
    clevel : int, optional
        Compression level, 0 (no compression) to 9.  Default 5.
    shuffle : {0, 1, 2}, optional
        ``blzarr.NOSHUFFLE``, ``blzarr.SHUFFLE`` (default, byte shuffle) or ``blzarr.BITSHUFFLE``.
    cname : str, optional
        The codec inside Blosc: one of `blzarr.blosc_compressor_list()` ('lz4' by default,
        'blosclz', 'lz4hc', 'zlib', 'zstd', ...).
    quantize : int, optional
        For floating-point data, keep about this many significant decimal digits (lossy, but it
        compresses much better); 0 (default) is lossless.

    Raises
    ------
    ValueError
        A value is out of range or the codec is not in this build.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> blzarr.cparams(clevel=9, cname='zstd')
    cparams(clevel=9, shuffle=1, cname='zstd', quantize=0)
    >>> a = blzarr.carray(np.zeros(1000), cparams={"clevel": 1, "shuffle": blzarr.BITSHUFFLE})
    >>> a.cparams.clevel, a.cparams.shuffle
    (1, 2)
    >>> blzarr.cparams(cname="nope")
    Traceback (most recent call last):
        ...
    ValueError: cparams: `cname` 'nope' is not a compressor available in this build (...)
    """

    __slots__ = ("_clevel", "_shuffle", "_cname", "_quantize")

    def __init__(self, clevel=None, shuffle=None, cname=None, quantize=None):
        clevel, shuffle, cname, quantize = _check(clevel, shuffle, cname, quantize)
        d = defaults.cparams
        self._clevel = d["clevel"] if clevel is None else clevel
        self._shuffle = d["shuffle"] if shuffle is None else shuffle
        self._cname = d["cname"] if cname is None else cname
        self._quantize = d["quantize"] if quantize is None else quantize

    clevel = property(lambda self: self._clevel, doc="The compression level (0-9).")
    shuffle = property(lambda self: self._shuffle, doc="The shuffle filter (0, 1 or 2).")
    cname = property(lambda self: self._cname, doc="The codec inside Blosc.")
    quantize = property(lambda self: self._quantize, doc="Significant digits kept (0: lossless).")

    @staticmethod
    def setdefaults(clevel=None, shuffle=None, cname=None, quantize=None):
        """Change the process-wide defaults used where a parameter is not given.

        Parameters that are None keep their current default.  `blzarr.defaults_ctx` changes them
        for a ``with`` block only.

        Examples
        --------
        >>> import blzarr
        >>> saved = blzarr.defaults.cparams
        >>> blzarr.cparams.setdefaults(clevel=7)
        >>> blzarr.cparams().clevel
        7
        >>> blzarr.defaults.cparams = saved
        """
        clevel, shuffle, cname, quantize = _check(clevel, shuffle, cname, quantize)
        new = dict(defaults.cparams)
        for k, v in (("clevel", clevel), ("shuffle", shuffle), ("cname", cname), ("quantize", quantize)):
            if v is not None:
                new[k] = v
        defaults.cparams = new

    @classmethod
    def coerce(cls, value):
        """A cparams from None (the defaults), a cparams (itself) or a dict of its fields.

        Examples
        --------
        >>> import blzarr
        >>> blzarr.cparams.coerce({"cname": "zlib"}).cname
        'zlib'
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - {"clevel", "shuffle", "cname", "quantize"}
            if unknown:
                raise ValueError(f"cparams: unknown entries {sorted(unknown)}")
            return cls(**value)
        raise ValueError(f"`cparams` must be a blzarr.cparams or a dict, not {type(value).__name__}")

    def to_dict(self):
        """The four fields as a dict (what is stored in the ``meta/storage`` file)."""
        return {"clevel": self._clevel, "shuffle": self._shuffle, "cname": self._cname,
                "quantize": self._quantize}

    def __eq__(self, other):
        return isinstance(other, cparams) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(tuple(self.to_dict().values()))

    def __repr__(self):
        return (f"cparams(clevel={self._clevel}, shuffle={self._shuffle}, cname='{self._cname}', "
                f"quantize={self._quantize})")



class Defaults:
    """The process-wide defaults; its one instance is ``blzarr.defaults``.

    Attributes
    ----------
    cparams : dict
        The compression parameters used where none are given: ``{'clevel': 5, 'shuffle': 1,
        'cname': 'lz4', 'quantize': 0}`` at start.  Set it to a dict of the four fields or to a
        `blzarr.cparams`.
    vm : {'numexpr', 'python', 'dask'}
        How `blzarr.eval` and the ctable queries evaluate expressions: 'numexpr' when it is
        installed, else 'python' (NumPy).  ``eval_vm`` is an alias.
    out_flavor : {'bcolz', 'carray', 'numpy'}
        What `blzarr.eval` returns: a carray ('bcolz' and 'carray', the default) or a NumPy
        array.  ``eval_out_flavor`` is an alias.
    format : {'blz', 'bcolz'}
        The layout of every new carray or ctable directory whose ``format`` is not given: 'blz'
        (the default; checksummed superchunk files) or 'bcolz' (the bcolz 1.x layout, which bcolz
        itself opens: set it where bcolz processes read what blzarr writes).  Existing
        directories keep their own layout.
    fsync : bool
        Whether writers make what they publish durable (fsync/fdatasync before the metadata that
        makes it visible, directories too): True at start, unless the environment has
        ``BLZARR_FSYNC=0``.  False trades power-loss durability for speed (a process kill still
        loses nothing flushed); see the guide's "Guarantees" (docs/guide/guarantees.rst).

    Examples
    --------
    >>> import blzarr
    >>> blzarr.defaults.cparams["cname"]
    'lz4'
    >>> blzarr.defaults.out_flavor
    'bcolz'
    >>> blzarr.defaults.vm = "cobol"
    Traceback (most recent call last):
        ...
    ValueError: 'cobol' is incorrect value for 'vm' default; choose one of ('numexpr', 'python', 'dask')
    """

    _vms = ("numexpr", "python", "dask")
    _flavors = ("bcolz", "carray", "numpy")
    _formats = ("blz", "bcolz")

    def __init__(self):
        self._cparams = {"clevel": 5, "shuffle": SHUFFLE, "cname": "lz4", "quantize": 0}
        self._vm = None
        self._out_flavor = "bcolz"
        self._format = "blz"

    @property
    def format(self):
        return self._format

    @format.setter
    def format(self, value):
        if value not in self._formats:
            raise ValueError(f"'{value}' is incorrect value for 'format' default; choose one of {self._formats}")
        self._format = value

    @property
    def fsync(self):
        return FSYNC

    @fsync.setter
    def fsync(self, value):
        if not isinstance(value, (bool, int)) or value not in (0, 1):
            raise ValueError(f"'{value}' is incorrect value for 'fsync' default; choose True or False")
        global FSYNC
        FSYNC = bool(value)

    @property
    def vm(self):
        if self._vm is None:
            self._vm = "numexpr" if have("numexpr") else "python"
        return self._vm

    @vm.setter
    def vm(self, value):
        if value not in self._vms:
            raise ValueError(f"'{value}' is incorrect value for 'vm' default; choose one of {self._vms}")
        if value != "python":
            if not have(value):
                raise ValueError(f"cannot use the `{value}` virtual machine: it is not installed")
        self._vm = value

    eval_vm = vm

    @property
    def out_flavor(self):
        return self._out_flavor

    @out_flavor.setter
    def out_flavor(self, value):
        if value not in self._flavors:
            raise ValueError(
                f"'{value}' is incorrect value for 'out_flavor' default; choose one of {self._flavors}")
        self._out_flavor = value

    eval_out_flavor = out_flavor

    @property
    def cparams(self):
        return self._cparams

    @cparams.setter
    def cparams(self, value):
        if isinstance(value, cparams):
            value = value.to_dict()
        if not isinstance(value, dict) or set(value) != {"clevel", "shuffle", "cname", "quantize"}:
            raise ValueError("defaults.cparams needs a cparams or a dict with clevel, shuffle, cname, quantize")
        clevel, shuffle, cname, quantize = _check(
            value["clevel"], value["shuffle"], value["cname"], value["quantize"])
        self._cparams = {"clevel": clevel, "shuffle": shuffle, "cname": cname, "quantize": quantize}


defaults = Defaults()


@contextmanager
def defaults_ctx(cparams=None, vm=None, out_flavor=None, format=None, fsync=None):
    """defaults_ctx(cparams=None, vm=None, out_flavor=None, format=None, fsync=None)

    A context manager that changes `blzarr.defaults` inside a ``with`` block and restores all of
    them when the block ends (also on an exception).

    Parameters
    ----------
    cparams : cparams or dict, optional
        The default compression parameters inside the block (a dict must give all four fields).
    vm : {'numexpr', 'python', 'dask'}, optional
        The default virtual machine of `blzarr.eval` and the queries.
    out_flavor : {'bcolz', 'carray', 'numpy'}, optional
        The default result type of `blzarr.eval`.
    format : {'blz', 'bcolz'}, optional
        The layout of new directories inside the block.
    fsync : bool, optional
        Whether writers sync what they flush inside the block (``defaults.fsync``).

    Yields
    ------
    blzarr.defaults

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> with blzarr.defaults_ctx(cparams=blzarr.cparams(clevel=9), out_flavor="numpy"):
    ...     a = blzarr.carray(np.arange(1000))
    ...     b = blzarr.eval("a + 1")
    >>> a.cparams.clevel, type(b).__name__
    (9, 'ndarray')
    >>> blzarr.defaults.cparams["clevel"], blzarr.defaults.out_flavor
    (5, 'bcolz')
    """
    saved = (defaults.cparams, defaults._vm, defaults.out_flavor, defaults.format, defaults.fsync)
    try:
        if fsync is not None:
            defaults.fsync = fsync
        if format is not None:
            defaults.format = format
        if cparams is not None:
            defaults.cparams = cparams
        if vm is not None:
            defaults.vm = vm
        if out_flavor is not None:
            defaults.out_flavor = out_flavor
        yield defaults
    finally:
        defaults._cparams, defaults._vm, defaults._out_flavor, defaults._format, saved_fsync = saved
        defaults.fsync = saved_fsync
