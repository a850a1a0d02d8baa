"""ctable <-> pandas DataFrame and ctable <-> HDF5 (PyTables Table) conversions.

These are the functions behind `ctable.fromdataframe`, `ctable.todataframe`, `ctable.fromhdf5` and
`ctable.tohdf5`; pandas and PyTables are imported only when one of them is called.
"""

import os

import numpy as np

from blzarr.runtime import integrations
from blzarr.errors import StorageError
from blzarr.containers.ctable.table import ctable
from blzarr.runtime.params import cparams as _cparams


def _need(module, what):
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"{what} needs the '{module}' package, which is not installed") from None


def _column_from_series(pd, name, series):
    """A NumPy array for one DataFrame column (strings as 'U'/'S', categoricals as their values)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(series.dtype.categories.dtype)
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        # stored as UTC datetime64 (NumPy has no time zones)
        return series.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    kind = getattr(series.dtype, "kind", "O")
    if kind in "biufcmM" and isinstance(series.dtype, np.dtype):
        return series.to_numpy()
    if kind in "biufc" and not series.isna().any():
        # pandas extension numbers without missing values (Int64, Float64, boolean...)
        return series.to_numpy(dtype=series.dtype.numpy_dtype if hasattr(series.dtype, "numpy_dtype")
                               else None)
    vals = series.to_numpy(dtype=object)
    if len(vals) and series.isna().any():
        return vals  # missing values: kept as Python objects, nothing is silently replaced
    inferred = pd.api.types.infer_dtype(vals, skipna=False)
    if inferred in ("string", "unicode", "empty"):
        width = max((len(v) for v in vals), default=1) or 1
        return vals.astype(f"U{width}")
    if inferred == "bytes":
        width = max((len(v) for v in vals), default=1) or 1
        return vals.astype(f"S{width}")
    return vals


def fromdataframe(df, **kwargs):
    """A ctable from a pandas DataFrame; see `blzarr.ctable.fromdataframe`.

    Raises
    ------
    TypeError
        `df` is not a DataFrame.
    ValueError
        Repeated column names, or `names` of the wrong length.
    ImportError
        pandas is not installed.

    Examples
    --------
    >>> import pandas as pd
    >>> from blzarr.io.pandas_hdf5 import fromdataframe
    >>> t = fromdataframe(pd.DataFrame({"k": pd.Categorical(["a", "b", "a"]), "v": [1.0, 2.0, 3.0]}))
    >>> t["k"][:].tolist(), t["v"].dtype
    (['a', 'b', 'a'], dtype('float64'))
    """
    pd = _need("pandas", "fromdataframe()")
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"fromdataframe() needs a pandas DataFrame, got {type(df).__name__}")
    names = kwargs.pop("names", None)
    if names is None:
        names = list(df.columns)
    if df.columns.has_duplicates:
        raise ValueError(f"the DataFrame has repeated column names: {list(df.columns)}")
    if len(names) != df.shape[1]:
        raise ValueError(f"`names` has {len(names)} names, the DataFrame {df.shape[1]} columns")
    cols = [_column_from_series(pd, label, df.iloc[:, i]) for i, label in enumerate(df.columns)]
    return ctable(cols, [str(n) if not isinstance(n, str) else n for n in names], **kwargs)


def todataframe(t, columns=None, orient="columns"):
    """ctable `t` as a pandas DataFrame; see `blzarr.ctable.todataframe`.

    Raises
    ------
    ValueError
        A bad `orient`, or a multidimensional column.
    ImportError
        pandas is not installed.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> from blzarr.io.pandas_hdf5 import todataframe
    >>> t = blzarr.ctable([np.arange(2), np.array(["x", "y"])], names=["n", "s"])
    >>> todataframe(t, orient="index").shape
    (2, 2)
    >>> todataframe(t, columns=["s"])["s"].tolist()
    ['x', 'y']
    """
    pd = _need("pandas", "todataframe()")
    if orient not in ("columns", "index"):
        raise ValueError(f"orient must be 'columns' or 'index', got {orient!r}")
    keys = t.names if (columns is None or orient == "index") else list(columns)
    data = {}
    for k in keys:
        col = t.cols[k]
        if col.ndim != 1:
            raise ValueError(f"column {k!r} has shape {col.shape}: a DataFrame column must be 1-d")
        data[k] = col[:]
    if orient == "index":
        return pd.DataFrame.from_dict(data, orient="index", columns=columns)
    return pd.DataFrame(data, columns=keys, copy=False)  # the arrays are fresh: no second copy


def fromhdf5(filepath, nodepath="/ctable", **kwargs):
    """A ctable from the PyTables Table at `nodepath` of an HDF5 file; see `blzarr.ctable.fromhdf5`."""
    tb = _need("tables", "fromhdf5()")
    filepath = os.fspath(filepath)
    if not os.path.exists(filepath):
        raise StorageError(f"HDF5 file '{filepath}' does not exist")
    with tb.open_file(filepath, mode="r") as f:
        try:
            node = f.get_node(nodepath)
        except tb.NoSuchNodeError:
            raise KeyError(f"HDF5 file '{filepath}' has no node '{nodepath}'") from None
        if not isinstance(node, tb.Table):
            raise ValueError(f"node '{nodepath}' of '{filepath}' is a {type(node).__name__}, not a Table")
        names = kwargs.pop("names", None) or list(node.colnames)
        src = list(node.colnames)
        if len(names) != len(src):
            raise ValueError(f"`names` has {len(names)} names, the Table {len(src)} columns")
        kwargs.setdefault("expectedlen", len(node))
        stored = _stored_dtypes(node, filepath, nodepath)
        coldt = {c: np.dtype((stored[c], node.coldtypes[c].shape)) if c in stored else node.coldtypes[c]
                 for c in src}
        empty = [np.empty((0,) + coldt[c].shape, dtype=coldt[c].base) for c in src]
        ct = ctable(empty, names, **kwargs)
        flush = ct.auto_flush
        ct.auto_flush = False
        bs = max(node.chunkshape[0] if node.chunkshape else 0, 1) * 16
        for s in range(0, len(node), bs):
            block = node.read(s, min(s + bs, len(node)))
            ct.append([_from_stored(block[c], coldt[c].base) if c in stored else block[c] for c in src])
        for key in node.attrs._f_list("user"):
            if key == DTYPES_ATTR:
                continue
            try:
                ct.attrs[key] = _jsonable(node.attrs[key])
            except TypeError:
                pass  # attributes JSON cannot hold are left out
        ct.auto_flush = flush
        ct.flush()
    return ct


# HDF5 (PyTables) has no unicode or datetime columns: tohdf5 stores them as UTF-8 bytes / int64 and
# records their NumPy dtypes, as JSON {name: dtype}, in this attribute of the Table
DTYPES_ATTR = "BLZARR_DTYPES"


def _hdf5_dtype(dt):
    """The dtype PyTables stores for a column of NumPy dtype `dt` (None: as it is)."""
    if dt.base.kind == "U":
        return np.dtype((f"S{max(dt.base.itemsize, 4)}", dt.shape))  # 4 UTF-8 bytes per character at most
    if dt.base.kind in "mM":
        return np.dtype(("i8", dt.shape))
    return None


def _to_stored(values, stored):
    if values.dtype.kind == "U":
        return np.char.encode(values, "utf-8").astype(stored.base)
    return values.view("i8")


def _from_stored(values, dt):
    if dt.kind == "U":
        return np.char.decode(values, "utf-8").astype(dt)
    return values.view(dt)


def _stored_dtypes(node, filepath, nodepath):
    import json
    if DTYPES_ATTR not in node.attrs._f_list("user"):
        return {}
    try:
        spec = json.loads(str(node.attrs[DTYPES_ATTR]))
        return {str(k): np.dtype(str(v)) for k, v in spec.items() if k in node.colnames}
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"attribute {DTYPES_ATTR} of '{nodepath}' in '{filepath}' is not valid: {e}") from None


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def tohdf5(t, filepath, nodepath="/ctable", mode="w", cparams=None, cname=None):
    """Write ctable `t` as a PyTables Table in an HDF5 file; see `blzarr.ctable.tohdf5`."""
    tb = _need("tables", "tohdf5()")
    filepath = os.fspath(filepath)
    if mode not in ("w", "a"):
        raise ValueError(f"mode must be 'w' or 'a', got {mode!r}")
    if mode == "w" and os.path.exists(filepath):
        raise StorageError(f"'{filepath}' already exists (remove it, or pass mode='a' to add a node)")
    cp = _cparams.coerce(cparams if cparams is not None else t.cparams)
    if cname is None:
        cname = "blosc:" + cp.cname
    filters = tb.Filters(complevel=cp.clevel, shuffle=bool(cp.shuffle == 1),
                         bitshuffle=bool(cp.shuffle == 2), complib=cname)
    stored = {n: _hdf5_dtype(t.dtype[n]) for n in t.names}
    stored = {n: d for n, d in stored.items() if d is not None}
    h5dtype = np.dtype([(n, stored.get(n, t.dtype[n])) for n in t.names])
    for name in t.names:
        try:
            tb.description.descr_from_dtype(np.dtype([(name, h5dtype[name])]))
        except (NotImplementedError, TypeError, ValueError) as e:
            raise TypeError(f"column {name!r} of dtype {t.dtype[name]} cannot be stored in HDF5 by "
                            f"PyTables: {e}") from None
    parent, _, leaf = nodepath.rstrip("/").rpartition("/")
    if not leaf:
        raise ValueError(f"nodepath {nodepath!r} does not name a node")
    with tb.open_file(filepath, mode=mode) as f:
        table = f.create_table(parent or "/", leaf, h5dtype, filters=filters,
                               expectedrows=max(len(t), 1), createparents=True)
        for key, val in t.attrs:
            table.attrs[key] = val
        if stored:
            import json
            table.attrs[DTYPES_ATTR] = json.dumps({n: t.dtype[n].base.str for n in stored})
        blen = t.chunklen
        for s in range(0, len(t), blen):
            block = t[s:s + blen]
            if stored:
                out = np.empty(len(block), dtype=h5dtype)
                for n in t.names:
                    out[n] = _to_stored(block[n], h5dtype[n]) if n in stored else block[n]
                block = out
            table.append(block)
        table.flush()


# what carray's and ctable's methods call (blzarr.runtime.integrations)
integrations.register("fromdataframe", fromdataframe)
integrations.register("todataframe", todataframe)
integrations.register("fromhdf5", fromhdf5)
integrations.register("tohdf5", tohdf5)
