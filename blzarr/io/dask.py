"""blzarr and dask: dask arrays and dataframes over carrays and ctables.

* ``carray.to_dask()`` / ``ctable.to_dask()``: a dask array / dataframe with one partition per
  superchunk file (BLZ) or per group of chunks (bcolz layout, in memory); every task reads its own
  rows only.  The carray or ctable is one object of the graph: on disk it pickles by reference (the
  worker reopens the directory read-only), in memory by value.
* ``blzarr.from_dask(x, rootdir, **kwargs)``: write a dask array (as a carray) or a dask dataframe (as
  a ctable) with one task per partition, each writing its own chunk files (bcolz layout) or its own
  superchunk file (BLZ); the sizes are written once, at the end.
* ``blzarr.eval(..., vm='dask')``: the expression evaluated by dask.array over the operands.
"""

import builtins
import os
import uuid

import numpy as np

from blzarr.runtime import integrations
from blzarr.io import need_package as _need
from blzarr.errors import StorageError
from blzarr.storage.chunk import blosc_typesize, compress_array
from blzarr.runtime.params import cparams
from blzarr.storage.layouts import partition_writer
from blzarr.containers.carray.array import carray, creation_completed_by_caller
from blzarr.storage.files import META_DIR, ObjectPath, read_json, SIZES_FILE, write_json
from blzarr.storage.bytestore import is_url, occupied, open_bytestore
from blzarr.storage import intent, replace
from blzarr.containers.ctable.table import check_name, ctable


def _dask_array():
    _need("dask", "dask support")
    import dask.array as da
    return da


# ----------------------------------------------------------------------------------- partitions
def _superchunklen(c):
    """Chunks per partition of carray `c`: its superchunk capacity (BLZ) or the same rule (else)."""
    return c.chunkstore.partition_chunks()


def partition_rows(c, partition_chunks=None):
    """Rows per partition of carray `c`: a whole number of chunks (one superchunk file for BLZ)."""
    if partition_chunks is None:
        k = _superchunklen(c)
    else:
        if isinstance(partition_chunks, bool) or not isinstance(partition_chunks, (int, np.integer)) \
                or partition_chunks < 1:
            raise ValueError(f"partition_chunks must be a positive integer, got {partition_chunks!r}")
        k = int(partition_chunks)
    per_chunk = 1 if c.dtype.kind == "O" else c.chunklen
    return k * per_chunk


def _bounds(n, rows):
    return [(s, min(s + rows, n)) for s in range(0, n, rows)]


def _sizes(n, rows):
    return tuple(b - a for a, b in _bounds(n, rows)) or (0,)


def _flush_for_workers(obj):
    """Workers reopen on-disk objects from their directory: what is buffered must be there first."""
    if obj.rootdir is not None and obj.mode != "r":
        obj.flush()


# ----------------------------------------------------------------------------------- carray -> dask
def carray_to_dask(c, partition_chunks=None):
    """A dask array over carray `c`: one block per superchunk (BLZ) or group of chunks."""
    da = _dask_array()
    _flush_for_workers(c)
    rows = partition_rows(c, partition_chunks)
    chunks = (_sizes(len(c), rows),) + tuple((s,) for s in c.shape[1:])
    meta = np.empty((0,) * c.ndim, dtype=c.dtype)
    return da.from_array(c, chunks=chunks, name=f"blzarr-carray-{uuid.uuid4().hex}", lock=False,
                         asarray=True, fancy=False, meta=meta)


# ----------------------------------------------------------------------------------- ctable -> dask
def _frame(t, start, stop, names=None):
    """Rows [start, stop) of ctable `t` as a pandas DataFrame indexed start..stop-1."""
    import pandas as pd
    names = t.names if names is None else names
    data = {}
    for n in names:
        col = t.cols[n]
        if col.ndim != 1:
            raise ValueError(f"column {n!r} has shape {col.shape}: a dataframe column must be 1-d")
        data[n] = col[start:stop]
    return pd.DataFrame(data, columns=list(names), index=pd.RangeIndex(start, stop), copy=False)


def table_partition_rows(t, partition_chunks=None):
    if not t.names:
        raise ValueError("a ctable with no columns cannot become a dataframe")
    return min(partition_rows(t.cols[n], partition_chunks) for n in t.names)


def ctable_to_dask(t, columns=None, partition_chunks=None):
    """A dask DataFrame over ctable `t` (index: the row numbers), one partition per superchunk
    (of the column with the smallest superchunks) or group of chunks."""
    _need("dask", "ctable.to_dask()")
    _need("pandas", "ctable.to_dask()")
    import dask
    import dask.dataframe as dd
    names = t.names if columns is None else list(columns)
    for n in names:
        if n not in t.cols:
            raise KeyError(f"no column named {n!r} (columns: {t.names})")
    _flush_for_workers(t)
    meta = _frame(t, 0, 0, names)
    n = len(t)
    rows = table_partition_rows(t, partition_chunks)
    bounds = _bounds(n, rows) or [(0, 0)]
    ref = dask.delayed(t, name=f"blzarr-ctable-{uuid.uuid4().hex}", traverse=False)
    read = dask.delayed(_frame, pure=True)
    parts = [read(ref, a, b, names) for a, b in bounds]
    divisions = tuple(a for a, _ in bounds) + (max(n - 1, 0),) if n else (None, None)
    return dd.from_delayed(parts, meta=meta, divisions=divisions, verify_meta=False)


# ----------------------------------------------------------------------------------- dask -> disk
def _store_state(c):
    """What a worker needs to write chunks of carray `c` (picklable: plain values)."""
    return {"store": c.chunkstore.config(), "chunklen": c.chunklen,
            "typesize": blosc_typesize(c.dtype), "cparams": c.cparams.to_dict()}


def _write_part(block, first_row, state):
    """Compress `block` (rows first_row.. of the array) into chunks and write their files.
    Returns the compressed bytes written."""
    block = np.ascontiguousarray(block)
    cl = state["chunklen"]
    if first_row % cl:
        raise ValueError(f"partition starting at row {first_row} is not aligned to chunks of {cl}")
    cp = cparams(**state["cparams"])
    n0 = first_row // cl
    try:
        store = partition_writer(state["store"], n0, -(-len(block) // cl))
    except ValueError:
        raise ValueError(f"partition at row {first_row} does not fill exactly one superchunk") from None
    cbytes = 0
    try:
        for j, s in enumerate(range(0, len(block), cl)):
            data = compress_array(block[s:s + cl], state["typesize"], cp)
            store.write_chunk(n0 + j, data)
            cbytes += len(data)
    finally:
        store.close()
    return cbytes


def _aligned(x, rows):
    """`x` rechunked so that its blocks along axis 0 are `rows` long (the last one shorter)."""
    if any(np.isnan(s) for s in x.shape):
        x = x.compute_chunk_sizes()
    target = (_sizes(x.shape[0], rows),) + tuple((s,) for s in x.shape[1:])
    return x if x.chunks == target else x.rechunk(target)


def _write_block(block, state, block_info=None):
    start = block_info[0]["array-location"][0][0]
    return np.array([_write_part(block, start, state)], dtype=np.int64)


def _part_tasks(x, c):
    """Lazy writes of the blocks of dask array `x` into the files of the empty carray `c`: a dask
    array of the compressed bytes each block wrote (one element a block)."""
    state = _store_state(c)
    rows = partition_rows(c)
    if len(x) == 0:
        return []
    x = _aligned(x, rows)
    return [x.map_blocks(_write_block, state, dtype=np.int64, chunks=((1,) * x.numblocks[0],),
                         drop_axis=list(range(1, x.ndim)), meta=np.empty(0, dtype=np.int64))]


def _finish(rootdir, length, mode, allow_pickle=False, storage_options=None, created=None):
    """Write meta/sizes of a carray whose chunk files are all written; return it opened.  `created`:
    the carray as its creation left it, whose commit on object storage is made here."""
    kw = {}
    if is_url(rootdir):
        kw["storage_options"] = storage_options
        path = ObjectPath(open_bytestore(rootdir, storage_options), f"{META_DIR}/{SIZES_FILE}")
    else:
        path = os.path.join(rootdir, META_DIR, SIZES_FILE)
    sizes = read_json(path, "meta/sizes")
    sizes["shape"] = [int(length)] + list(sizes["shape"][1:])
    write_json(path, sizes)
    if created is not None:
        created._commit_creation()
    c = carray(rootdir=rootdir, mode="r", allow_pickle=allow_pickle, **kw)
    sizes.update(nbytes=c.nbytes, cbytes=c.cbytes)
    write_json(path, sizes)
    if mode != "r":
        c = carray(rootdir=rootdir, mode="a", allow_pickle=allow_pickle, **kw)
    return c


def _check_target(rootdir, kwargs):
    if rootdir is None:
        raise ValueError("from_dask() needs a `rootdir` to write to")
    rootdir = os.fspath(rootdir)
    mode = kwargs.pop("mode", "w")
    if mode not in ("w", "a", "r"):
        raise ValueError(f"mode must be 'w', 'a' or 'r', got {mode!r}")
    if kwargs.pop("overwrite", True) is False:
        if occupied(rootdir, kwargs.get("storage_options")):
            raise StorageError(f"'{rootdir}' already exists (overwrite=False)")
    return rootdir, mode


def from_dask(x, rootdir, **kwargs):
    """from_dask(x, rootdir, **kwargs)

    Write a dask array as an on-disk carray, or a dask (or pandas) DataFrame as an on-disk ctable,
    with one task per partition.

    `x` is first rechunked so that every partition covers whole chunks (bcolz layout) or exactly one
    superchunk file (BLZ layout); each task then compresses and writes its own files, so the work
    runs in parallel on whatever scheduler is active (threads, processes, or a distributed cluster
    whose workers share the file system), and the sizes are written once, at the end.  The dataset
    is written beside an existing one at `rootdir` (on object storage, under a stage inside its
    prefix) and replaces it in one step once complete: if any task fails or the process is
    interrupted, `rootdir` holds what it held before, or the complete new dataset.

    Parameters
    ----------
    x : dask.array.Array, numpy.ndarray, dask.dataframe.DataFrame or pandas.DataFrame
        The data (at least one dimension; no Python objects).  A DataFrame's index is not stored.
    rootdir : str
        The directory to write.  An existing one is replaced unless ``overwrite=False``.
    **kwargs
        Those of `blzarr.carray` (``cparams``, ``chunklen``, ``format``, ``checksum``,
        ``superchunklen``, ...; ``names`` for a DataFrame), plus ``mode`` ('w' by default: the
        mode of the returned object) and ``overwrite`` (True by default).

    Returns
    -------
    carray or ctable
        The written object, opened with `mode`.

    Raises
    ------
    blzarr.StorageError
        `rootdir` exists and ``overwrite=False``.
    TypeError
        `x` is not an array or DataFrame, or holds Python objects.
    ImportError
        dask is not installed.

    Examples
    --------
    >>> import dask.array as da, pandas as pd, blzarr, shutil
    >>> c = blzarr.from_dask(da.arange(10, chunks=4), "from_dask_array", chunklen=4, mode="r")
    >>> c[:].tolist(), c.mode, c.chunklen
    ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 'r', 4)
    >>> t = blzarr.from_dask(pd.DataFrame({"x": [1, 2, 3], "s": ["a", "bb", "c"]}), "from_dask_frame")
    >>> t[:].tolist()
    [(1, 'a'), (2, 'bb'), (3, 'c')]
    >>> shutil.rmtree("from_dask_array"); shutil.rmtree("from_dask_frame")
    """
    _need("dask", "from_dask()")
    import dask
    kwargs = dict(kwargs)
    rootdir, mode = _check_target(rootdir, kwargs)
    if _is_dataframe(x):
        return _frame_from_dask(x, rootdir, mode, kwargs)
    da = _dask_array()
    if not isinstance(x, da.Array):
        if isinstance(x, np.ndarray):
            x = da.from_array(x)
        else:
            raise TypeError(f"from_dask() needs a dask array or dataframe, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("from_dask() needs an array of at least one dimension")
    if x.dtype.kind == "O":
        raise TypeError("from_dask(): arrays of Python objects are not supported (convert them to a "
                        "NumPy dtype first)")
    if any(np.isnan(s) for s in x.shape):
        x = x.compute_chunk_sizes()
    kwargs.setdefault("expectedlen", x.shape[0])
    opts = kwargs.get("storage_options")

    def build(path):
        # (on object storage the carray is committed once its chunks and meta/sizes are written: an
        # interrupt before leaves nothing at a new URL, never an empty or partial carray)
        with creation_completed_by_caller(path):
            c = carray(np.empty((0,) + x.shape[1:], dtype=x.dtype), rootdir=path, mode="w", **kwargs)
        tasks = _part_tasks(x, c)
        _release(c)
        dask.compute(*tasks)
        return _finish(path, x.shape[0], "r", storage_options=opts, created=c)

    kw = {"storage_options": opts} if is_url(rootdir) else {}
    return _published(rootdir, opts, build,
                      lambda: carray(rootdir=rootdir, mode="r" if mode == "r" else "a", **kw))


def _published(rootdir, storage_options, build, reopen):
    """``build(path)`` writes the whole dataset at `path` and returns it; what it wrote replaces
    `rootdir` in one step, as the constructors' mode 'w' does: locally built beside it and renamed
    in (blzarr.storage.intent), on object storage built in a stage and switched in
    (blzarr.storage.replace), so an interrupt leaves the dataset that was there, or the new one.
    Returns ``reopen()``."""
    if is_url(rootdir):
        store = open_bytestore(rootdir, storage_options)

        def make(url):
            # where nothing was stored the dataset is written in place: a failed task removes it
            with _removed_on_failure(url, storage_options):
                out = build(url)
            if url != store.root:
                return out          # in a stage: closed and switched in by replace.build
            out.close()
            return reopen()
        return replace.build(store.root, store, make, reopen)
    intent.build_then_publish(rootdir, build)
    return reopen()


class _removed_on_failure:
    """Remove the half-written `rootdir` when the writing fails: no partial dataset is left."""

    def __init__(self, rootdir, storage_options=None):
        self.rootdir = rootdir
        self.storage_options = storage_options

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            if is_url(self.rootdir):
                try:
                    open_bytestore(self.rootdir, self.storage_options).remove_all()
                except Exception:
                    pass
            else:
                import shutil
                shutil.rmtree(self.rootdir, ignore_errors=True)
        return False


def _release(c):
    c.chunkstore.close()


def _is_dataframe(x):
    for mod, cls in (("dask.dataframe", "DataFrame"), ("pandas", "DataFrame")):
        m = __import__("sys").modules.get(mod)
        if m is not None and isinstance(x, getattr(m, cls)):
            return True
    return False


def _string_like(dtype):
    import pandas as pd
    return dtype == object or isinstance(dtype, pd.StringDtype) or str(dtype) == "str"


def _column_to_numpy(series, dtype):
    """One partition of a dataframe column as a NumPy array of `dtype` (missing values refused)."""
    import pandas as pd
    if dtype.kind == "U":
        if series.isna().any():
            raise ValueError(f"column {series.name!r} has missing values: a fixed-width string "
                             "column cannot hold them")
        vals = series.to_numpy(dtype=object)
        bad = [v for v in vals[:1000] if not isinstance(v, str)]
        if bad:
            raise TypeError(f"column {series.name!r} holds {type(bad[0]).__name__} values, not strings")
        return vals.astype(dtype)
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        return series.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype=dtype)
    if series.isna().any() and dtype.kind in "biu":
        raise ValueError(f"column {series.name!r} has missing values: an integer column cannot hold them")
    return series.to_numpy(dtype=dtype)


def _numpy_dtype(name, dtype, df):
    """The NumPy dtype a dataframe column is stored with."""
    import pandas as pd
    if isinstance(dtype, pd.CategoricalDtype):
        raise TypeError(f"column {name!r} is categorical: convert it (e.g. .astype(str)) first")
    if isinstance(dtype, pd.DatetimeTZDtype):
        return np.dtype(f"M8[{getattr(dtype, 'unit', 'ns')}]")
    if _string_like(dtype):
        return None  # the width is measured
    if isinstance(dtype, np.dtype):
        return dtype
    numpy_dtype = getattr(dtype, "numpy_dtype", None)
    if numpy_dtype is not None and numpy_dtype.kind in "biufc":
        return np.dtype(numpy_dtype)
    raise TypeError(f"column {name!r} has dtype {dtype}, which a ctable cannot store")


def _frame_from_dask(df, rootdir, mode, kwargs):
    import dask
    import dask.dataframe as dd
    import pandas as pd
    if isinstance(df, pd.DataFrame):
        df = dd.from_pandas(df, npartitions=max(1, min(8, len(df) // 65536 + 1)))
    names = kwargs.pop("names", None) or [str(c) for c in df.columns]
    if len(names) != len(df.columns):
        raise ValueError(f"`names` has {len(names)} names, the dataframe {len(df.columns)} columns")
    if len(set(df.columns)) != len(df.columns):
        raise ValueError(f"the dataframe has repeated column names: {list(df.columns)}")
    names = [check_name(n) for n in names]
    dtypes = {c: _numpy_dtype(c, df.dtypes[c], df) for c in df.columns}
    lengths = tuple(int(n) for n in df.map_partitions(len).compute())
    n = sum(lengths)
    strings = [c for c, dt in dtypes.items() if dt is None]
    if strings:
        widths = dask.compute(*[df[c].astype(object).map(
            lambda v: len(v) if isinstance(v, str) else 0, meta=(c, "i8")).max() for c in strings])
        for c, w in zip(strings, widths):
            w = int(w) if n and not pd.isna(w) else 0
            dtypes[c] = np.dtype(f"U{max(w, 1)}")
    kwargs.setdefault("expectedlen", n)
    empty = [np.empty(0, dtype=dtypes[c]) for c in df.columns]
    opts = kwargs.get("storage_options")

    def build(path):
        # at a URL the table is committed (its __rootdirs__) once its columns are written
        with creation_completed_by_caller(path):
            t = ctable(empty, names, rootdir=path, mode="w", **kwargs)
        t.flush()
        return _write_frame(df, t, names, dtypes, lengths, n, path, opts)

    kw = {"storage_options": opts} if is_url(rootdir) else {}
    return _published(rootdir, opts, build,
                      lambda: ctable(rootdir=rootdir, mode="a" if mode == "w" else mode, **kw))


def _write_frame(df, t, names, dtypes, lengths, n, rootdir, storage_options=None):
    """The columns of `df` written into the empty on-disk ctable `t` at `rootdir`; returns it reopened."""
    import dask
    tasks = []
    for c, name in zip(df.columns, names):
        col = t.cols[name]
        dt = dtypes[c]
        series = df[c].astype(object) if dt.kind == "U" else df[c]
        arr = series.to_dask_array(lengths=lengths).map_blocks(
            _series_block, c, dt, dtype=dt, meta=np.empty(0, dtype=dt))
        tasks += _part_tasks(arr, col)
        _release(col)
    dask.compute(*tasks)
    kw = {"storage_options": storage_options} if is_url(rootdir) else {}
    for name in names:
        _finish(t.cols[name].rootdir, n, "r", **kw)
    t._commit_creation()
    return ctable(rootdir=rootdir, mode="r", **kw)


def _series_block(block, name, dtype):
    import pandas as pd
    return _column_to_numpy(pd.Series(block, name=name), dtype)


# ----------------------------------------------------------------------------------- eval
def eval_dask(expression, code, operands, namespace, out_flavor, kwargs):
    """`expression` over dask arrays made from the operands; NotImplemented when dask cannot build
    it (the caller then evaluates it block by block with NumPy)."""
    da = _dask_array()
    arrays = {k: v for k, v in operands.items() if isinstance(v, (carray, np.ndarray)) and np.ndim(v) > 0}
    if any(isinstance(v, ctable) for v in operands.values()):
        return NotImplemented
    lengths = {len(v) for v in arrays.values()}
    if len(lengths) > 1:
        raise ValueError(f"the arrays in the expression have different lengths: {sorted(lengths)}")
    local = {k: v for k, v in operands.items() if k not in arrays}
    ref = next((v for v in arrays.values() if isinstance(v, carray)), None)
    rows = partition_rows(ref) if ref is not None else 1 << 20
    for k, v in arrays.items():
        if isinstance(v, carray):
            local[k] = v.to_dask()
        else:
            local[k] = da.from_array(v, chunks=(_sizes(len(v), rows),) + tuple((s,) for s in v.shape[1:]))
    try:
        result = builtins.eval(code, {"__builtins__": {}, **namespace}, local)
    except (TypeError, NotImplementedError, AttributeError):
        return NotImplemented  # e.g. a NumPy function dask does not dispatch
    if not isinstance(result, da.Array):
        result = np.asarray(result)
        if result.ndim == 0 or out_flavor == "numpy":
            return result[()] if result.ndim == 0 else result
        return carray(result, **kwargs)
    if result.ndim == 0:
        return result.compute()[()]
    if out_flavor == "numpy":
        return np.asarray(result.compute())
    if kwargs.get("rootdir") is not None:
        kw = dict(kwargs)
        return from_dask(result, kw.pop("rootdir"), **kw)
    import dask
    kw = dict(kwargs)
    kw.setdefault("expectedlen", result.shape[0])
    out = carray(np.empty((0,) + result.shape[1:], dtype=result.dtype), **kw)
    blocks = result.to_delayed().reshape(-1) if result.ndim == 1 else \
        result.rechunk({i: -1 for i in range(1, result.ndim)}).to_delayed().reshape(-1)
    window = 8
    for s in range(0, len(blocks), window):
        for b in dask.compute(*blocks[s:s + window]):
            out.append(b)
    out.flush()
    return out


# what carray's and ctable's methods, and eval(..., vm='dask'), call (blzarr.runtime.integrations)
integrations.register("eval_dask", eval_dask)
integrations.register("carray_to_dask", carray_to_dask)
integrations.register("ctable_to_dask", ctable_to_dask)
