"""ctable <-> pandas DataFrame and ctable <-> HDF5 (PyTables Table) conversions.

These are the functions behind `ctable.fromdataframe`, `ctable.todataframe`, `ctable.fromhdf5` and
`ctable.tohdf5`; pandas and PyTables are imported only when one of them is called.
"""

import os

import numpy as np

from blzarr.runtime import integrations
from blzarr.io import need_package as _need
from blzarr.errors import StorageError
from blzarr.containers.ctable.table import ctable
from blzarr.runtime.params import cparams as _cparams
from blzarr.io import colmeta


def _column_from_series(pd, name, series):
    """(NumPy values, validity or None, column attributes) for one DataFrame column.

    Strings become 'U'/'S' columns and categoricals their values.  Missing values of a column of
    strings, or of a pandas nullable dtype (``Int64``, ``boolean``, ``Float64``, ``string``...), are
    a validity column beside the values; a time zone is the column attribute ``blzarr:timezone``
    (the values are UTC); pandas dtypes NumPy has not are recorded to be given back."""
    attrs = {}
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(series.dtype.categories.dtype)
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        attrs[colmeta.TIMEZONE] = str(series.dtype.tz)
        return series.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(), None, attrs
    if isinstance(series.dtype, np.dtype) and series.dtype.kind in "biufcmM":
        return series.to_numpy(), None, attrs
    kind = getattr(series.dtype, "kind", "O")
    missing = series.isna().to_numpy(dtype=bool)
    has_missing = bool(missing.any())
    if not isinstance(series.dtype, np.dtype):
        attrs[colmeta.PANDAS_DTYPE] = str(series.dtype)
    if kind in "biuf" and hasattr(series.dtype, "numpy_dtype"):
        # pandas' nullable numbers and booleans: the values with a fill where they are missing
        dt = series.dtype.numpy_dtype
        values = series.to_numpy(dtype=dt, na_value=colmeta.fill_value(dt)) if has_missing \
            else series.to_numpy(dtype=dt)
        return values, (~missing if has_missing else None), attrs
    vals = series.to_numpy(dtype=object)
    present = vals[~missing] if has_missing else vals
    inferred = pd.api.types.infer_dtype(present, skipna=False) if len(present) else "empty"
    if inferred in ("string", "unicode", "empty", "bytes"):
        fill = b"" if inferred == "bytes" else ""
        if has_missing:
            vals = vals.copy()
            vals[missing] = fill
        width = max((len(v) for v in present), default=1) or 1
        if series.dtype == np.dtype(object) and has_missing:
            # given back as Python strings with None, as bcolz (which pickled such a column) does;
            # without missing values it comes back as bcolz gives it, a column of pandas' own strings
            attrs[colmeta.PANDAS_DTYPE] = "object"
        out = vals.astype(f"{'S' if inferred == 'bytes' else 'U'}{width}")
        return out, (~missing if has_missing else None), attrs
    attrs.pop(colmeta.PANDAS_DTYPE, None)
    return vals, None, attrs  # other Python objects, missing ones included: stored as objects


def _index_names(df, taken):
    """Column names for the levels of `df`'s index, as ``DataFrame.reset_index`` names them."""
    levels = list(df.index.names)
    out = []
    for k, lvl in enumerate(levels):
        if isinstance(lvl, str) and lvl:
            name = lvl
        else:
            name = "index" if len(levels) == 1 else f"level_{k}"
        if name in taken or name in out:
            raise ValueError(f"the index level {lvl!r} would be the column {name!r}, which the "
                             "DataFrame already has: rename the index (df.rename_axis) first")
        out.append(name)
    return out


def fromdataframe(df, index=False, **kwargs):
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
    names = [str(n) if not isinstance(n, str) else n for n in names]
    series = [df.iloc[:, i] for i in range(df.shape[1])]
    idx_attrs = []
    if index:
        inames = _index_names(df, set(names))
        for k, iname in enumerate(inames):
            series.insert(k, df.index.get_level_values(k).to_series(index=pd.RangeIndex(len(df))))
            lvl = df.index.names[k]
            idx_attrs.append({colmeta.INDEX: k, colmeta.INDEX_NAME: lvl if isinstance(lvl, (str, int)) else None})
        names = inames + names
    cols, out_names, attrs = [], [], {}
    taken = set(names)
    for k, (name, s) in enumerate(zip(names, series)):
        values, valid, a = _column_from_series(pd, name, s)
        if k < len(idx_attrs):
            a.update(idx_attrs[k])
        cols.append(values)
        out_names.append(name)
        if valid is not None:
            vname = colmeta.validity_name(name, taken)
            taken.add(vname)
            a[colmeta.VALIDITY] = vname
            cols.append(valid)
            out_names.append(vname)
        if a:
            attrs[name] = a
    t = ctable(cols, out_names, **kwargs)
    for name, a in attrs.items():
        for key, v in a.items():
            t.cols[name].attrs[key] = v
    return t


def _series_of(pd, t, name, valid_name):
    """The pandas values of column `name` of `t` as it went in (missing values, zone, dtype)."""
    col = t.cols[name]
    values = col[:]
    missing = ~t.cols[valid_name][:] if valid_name is not None else None
    if missing is not None and not missing.any():
        missing = None
    tz = colmeta.get(col, colmeta.TIMEZONE) if values.dtype.kind == "M" else None
    pdt = colmeta.get(col, colmeta.PANDAS_DTYPE)
    if tz is not None:
        return pd.Series(pd.DatetimeIndex(values).tz_localize("UTC").tz_convert(tz)).array
    if pdt is None and missing is None:
        # a bytes column as pandas makes one of a NumPy 'S' array, Python bytes objects (bcolz gives
        # the same): DataFrame(copy=False) would keep the 'S' array, a dtype pandas does not support
        return values.astype(object) if values.dtype.kind == "S" else values
    if pdt in ("float16", "float32", "float64"):
        values = values.astype(pdt)             # NumPy floats: missing values are NaN
        if missing is not None:
            values[missing] = np.nan
        return values
    if values.dtype.kind in "US" or pdt is not None and values.dtype.kind == "O":
        obj = values.astype(object)
        if missing is not None:
            obj[missing] = None
        if pdt == "object":
            return pd.Series(obj, dtype=object, copy=False)   # pandas would infer its str dtype
        return obj if pdt is None else pd.array(obj, dtype=pdt)
    if pdt is None:
        pdt = {"b": "boolean", "f": f"Float{values.dtype.itemsize * 8}"}.get(
            values.dtype.kind, f"{'U' if values.dtype.kind == 'u' else ''}Int{values.dtype.itemsize * 8}")
    arr = pd.array(values, dtype=pdt)
    if missing is not None:
        arr[missing] = pd.NA
    return arr


def todataframe(t, columns=None, orient="columns", index=None):
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
    links = colmeta.validity_columns(t)
    data_names = colmeta.data_names(t)
    keys = data_names if (columns is None or orient == "index") else list(columns)
    data = {}
    for k in keys:
        col = t.cols[k]
        if col.ndim != 1:
            raise ValueError(f"column {k!r} has shape {col.shape}: a DataFrame column must be 1-d")
        data[k] = _series_of(pd, t, k, links.get(k))
    if orient == "index":
        return pd.DataFrame.from_dict(data, orient="index", columns=columns)
    df = pd.DataFrame(data, columns=keys, copy=False)  # the arrays are fresh: no second copy
    levels = sorted((colmeta.get(t.cols[k], colmeta.INDEX), k) for k in keys
                    if isinstance(colmeta.get(t.cols[k], colmeta.INDEX), int))
    if levels and index is not False:
        df = df.set_index([k for _, k in levels])
        df.index.names = [colmeta.get(t.cols[k], colmeta.INDEX_NAME) for _, k in levels]
    elif index:
        raise ValueError("todataframe(index=True): the table has no column that was a DataFrame's "
                         "index (written by fromdataframe(df, index=True))")
    return df


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
