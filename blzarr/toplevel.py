"""Top-level constructors and helpers: open, zeros, ones, fill, arange, fromiter, iterblocks, walk.

The constructors build a carray chunk by chunk, so the result never has to fit in memory uncompressed;
every keyword they do not use themselves (``rootdir``, ``mode``, ``cparams``, ``chunklen``, ``format``,
...) goes to `blzarr.carray` (or to `blzarr.ctable` for a structured dtype).
"""

import contextlib
import itertools
import operator
import os
import platform
import sys

import numpy as np

from blzarr import _chunk
from blzarr.storage import intent, readpins, replace
from blzarr.storage.locking import lock_dir
from blzarr.containers.carray.array import carray, commit_creation, creation_completed_by_caller
from blzarr.errors import BlzarrError, MissingError, StorageError
from blzarr.storage.files import META_DIR, STORAGE_FILE
from blzarr.storage.files import ROOTDIRS_FILE as ROOTDIRS, detect, detect_store, nothing_stored  # noqa: F401  (bcolz.toplevel's ROOTDIRS)
from blzarr.storage.bytestore import find_objects, is_url, local_path, occupied, open_bytestore, overlaps
from blzarr.containers.ctable.table import ctable
from blzarr.runtime.params import cparams, detect_number_of_cores, set_nthreads  # noqa: F401  (bcolz.toplevel's names)


def open(rootdir, mode="a", allow_pickle=False, storage_options=None):
    """open(rootdir, mode='a', allow_pickle=False, storage_options=None)

    Open the carray or ctable stored in the directory `rootdir`, in either on-disk layout.
    `rootdir` may be a URL (``s3://bucket/prices.blz``, ``http(s)://...``, anything fsspec reaches),
    with the fsspec `storage_options` of its protocol (see the guide's "Object storage",
    docs/guide/object-storage.rst).

    Parameters
    ----------
    rootdir : str or os.PathLike
        A directory written by blzarr (``format='blz'`` or ``'bcolz'``) or by bcolz 1.x.
    mode : {'a', 'r', 'w'}, optional
        'a' (default) reads and writes, 'r' is read-only (writes raise `blzarr.ReadOnlyError`),
        'w' empties the object but keeps its dtype, chunk length and compression parameters.
    allow_pickle : bool, optional
        Data of dtype ``object`` is stored as pickles, and unpickling an untrusted file can run
        arbitrary code: such a directory opens only with True.

    Returns
    -------
    carray or ctable
        A ctable when the directory holds a ``__rootdirs__`` file, else a carray.

    Raises
    ------
    blzarr.StorageError
        `rootdir` is missing, not a directory, or holds neither a carray nor a ctable.
    blzarr.PickleNotAllowedError
        The data holds Python objects and `allow_pickle` is False.

    Examples
    --------
    >>> import blzarr
    >>> a = blzarr.arange(5, rootdir="open_example", mode="w")
    >>> b = blzarr.open("open_example", mode="r")
    >>> b[:].tolist(), b.mode
    ([0, 1, 2, 3, 4], 'r')
    >>> b.append([5])
    Traceback (most recent call last):
        ...
    blzarr.errors.ReadOnlyError: cannot modify data: the carray was opened with mode 'r' (...)
    >>> import shutil; shutil.rmtree("open_example")
    """
    if mode not in ("r", "a", "w"):
        raise ValueError(f"mode must be 'r', 'a' or 'w', got {mode!r}")
    rootdir = local_path(os.fspath(rootdir))
    handed = contextlib.nullcontext()
    if is_url(rootdir) or storage_options:
        store = open_bytestore(rootdir, storage_options)
        kind, key, read = _read_kind(store)
        rootdir = store.root
        kw = {"storage_options": storage_options}
        if kind is None:
            raise StorageError(f"'{rootdir}' does not exist ({nothing_stored(store)})")
        if mode != "w":
            # the open below reads the commit object just read here (with its version) instead of
            # asking for it again
            handed = readpins.handed(store, key, read)
    else:
        kind = detect(rootdir)      # (None for a missing directory: the checks below say which)
        kw = {}
        if kind is None and not os.path.isdir(rootdir):
            if os.path.exists(rootdir):
                raise StorageError(f"'{rootdir}' is a file, not a carray or ctable directory")
            raise StorageError(f"'{rootdir}' does not exist")
    if kind is None:
        raise StorageError(f"'{rootdir}' holds neither a carray nor a ctable")
    if not kw and mode != "w" and kind == "carray":
        return carray._open_local(rootdir, mode, allow_pickle)
    try:
        with handed:
            return (ctable if kind == "ctable" else carray)(rootdir=rootdir, mode=mode, allow_pickle=allow_pickle,
                                                             **kw)
    except replace.OtherKind as e:
        # object storage: replaced by a dataset of the other kind (blzarr.storage.replace)
        return (ctable if e.kind == "ctable" else carray)(rootdir=e.url, mode=mode, allow_pickle=allow_pickle, **kw)


def _read_kind(store):
    """(kind, its commit object's key, (bytes, version) of it) of what the prefix of `store` holds, told
    by reading the commit object (`readpins.read_commit`: one GET on S3, which the open then takes
    instead of its own), meta/storage first as `detect_store` asks; (None, None, None): nothing."""
    for kind, key in (("carray", f"{META_DIR}/{STORAGE_FILE}"), ("ctable", ROOTDIRS)):
        try:
            return kind, key, readpins.read_commit(store, key)
        except MissingError:
            pass
    return None, None, None


def _shape_of(shape):
    if isinstance(shape, (int, np.integer, float)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(operator.index(s) if not isinstance(s, float) else int(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if not shape or any(s < 0 for s in shape):
        raise ValueError(f"shape must be non-empty with non-negative lengths, got {shape!r}")
    return shape


def _never_writes(rootdir):
    # bcolz raises an OSError here too, but only after it has created the directory
    return StorageError(f"cannot create '{os.fspath(rootdir)}' with mode 'r' (it never writes): pass "
                        "mode='w'")


def _built(make, kwargs, fill, held=True):
    """`make(**kwargs)` filled by `fill(out)`.  On disk it is written whole beside its rootdir and then
    put in place (blzarr.storage.intent): an interrupt leaves what was there, never a part.  `held`
    (a carray): its files are synced once, together, before it is put in place
    (`intent.stage_then_publish`), not at each of its flushes."""
    rootdir = kwargs.get("rootdir")
    if rootdir is None or is_url(os.fspath(rootdir)) or kwargs.get("storage_options"):
        def build(url=rootdir):
            # a carray at a URL is committed once filled: an interrupt leaves nothing, never a part
            with creation_completed_by_caller(url):
                out = make(**dict(kwargs, rootdir=url))
            fill(out)
            commit_creation(out)
            return out
        if rootdir is not None and kwargs.get("mode") == "r":
            raise _never_writes(rootdir)
        if rootdir is None or kwargs.get("mode") != "w":
            return build()
        # object storage, replacing what is there: built in a stage, switched in (blzarr.storage.replace)
        store = open_bytestore(os.fspath(rootdir), kwargs.get("storage_options"))
        return replace.build(store.root, store, build, lambda: open(store.root, mode="a", allow_pickle=True,
                                                                    storage_options=kwargs.get("storage_options")))
    mode = kwargs.get("mode")
    if os.path.exists(rootdir) and mode != "w":
        raise StorageError(f"'{rootdir}' already exists and mode is {mode or 'a'!r}: pass mode='w' to "
                           "replace it, or open it (blzarr.open) and append")
    if mode == "r":
        raise _never_writes(rootdir)

    def build(path):
        out = make(**dict(kwargs, rootdir=path, mode="w"))
        fill(out)
        out.flush()
        return out
    intent.build_then_publish(rootdir, build, held=held)
    return open(rootdir, mode="a", allow_pickle=True)


def _ctable_from_blocks(dtype, blocks, kwargs):
    def fill(out):
        for block in blocks:
            out.append(block)
    return _built(lambda **kw: ctable(np.empty(0, dtype=dtype), **kw), kwargs, fill, held=False)


def fill(shape, dflt=None, dtype=float, **kwargs):
    """fill(shape, dflt=None, dtype=float, **kwargs)

    A carray of `shape` whose every element is `dflt`, written chunk by chunk (never whole in memory).

    Parameters
    ----------
    shape : int or tuple of ints
        The length, or the full shape (the first axis is the one that grows).
    dflt : scalar, optional
        The value of every element (zero when None).  It also becomes the carray's `dflt`, the value
        that `resize` gives new elements.
    dtype : dtype, optional
        The dtype (float64 by default).  A structured dtype gives a ctable, as in bcolz.
    **kwargs
        Passed to `blzarr.carray` (or `blzarr.ctable`): ``rootdir``, ``mode``, ``cparams``,
        ``chunklen``, ``format``, ...

    Returns
    -------
    carray or ctable

    Raises
    ------
    ValueError
        `dflt` cannot be stored in `dtype`, or `shape` is negative.
    blzarr.StorageError
        (an OSError) `rootdir` with mode 'r', which never writes, or a `rootdir` that exists without
        mode 'w'.  zeros, ones, arange and fromiter raise it too.

    Examples
    --------
    >>> import blzarr
    >>> a = blzarr.fill(4, 7, dtype="i2")
    >>> a[:].tolist(), int(a.dflt)
    ([7, 7, 7, 7], 7)
    >>> a.resize(6); a[:].tolist()
    [7, 7, 7, 7, 7, 7]
    """
    shape = _shape_of(shape)
    dtype = np.dtype(dtype)
    n, tail = shape[0], shape[1:]
    kwargs.setdefault("expectedlen", n)
    atom = np.dtype((dtype.base, tail + dtype.shape)) if (tail or dtype.shape) else dtype
    if dtype.names is not None and not atom.shape:
        value = np.zeros((), dtype=dtype)
        if dflt is not None:
            value[()] = dflt
        block = np.empty(min(n, 65536), dtype=dtype)
        block[...] = value
        return _ctable_from_blocks(dtype, (block[:min(len(block), n - s)] for s in range(0, n, 65536)),
                                   kwargs)
    value = np.zeros((), dtype=atom.base)
    if dflt is not None:
        try:
            value[()] = dflt
        except (TypeError, ValueError) as e:
            raise ValueError(f"dflt {dflt!r} does not fit dtype {atom.base}: {e}") from None
    kwargs.setdefault("dflt", value[()])
    def fill_with(out):
        blen = max(out.chunklen, 1)
        block = np.empty((min(blen, n),) + atom.shape, dtype=atom.base)
        block[...] = value
        for s in range(0, n, blen):
            out.append(block[:min(blen, n - s)])
    return _built(lambda **kw: carray(np.empty((0,) + atom.shape, dtype=atom.base), **kw), kwargs, fill_with)


def zeros(shape, dtype=float, **kwargs):
    """zeros(shape, dtype=float, **kwargs)

    A carray of zeros (a ctable for a structured `dtype`); ``fill(shape, None, dtype, **kwargs)``.

    Parameters
    ----------
    shape : int or tuple of ints
        The length, or the full shape.
    dtype : dtype, optional
        float64 by default.
    **kwargs
        Passed to `blzarr.carray` (or `blzarr.ctable`).

    Returns
    -------
    carray or ctable

    Examples
    --------
    >>> import blzarr
    >>> blzarr.zeros(3)[:]
    array([0., 0., 0.])
    >>> t = blzarr.zeros(2, dtype="i4,f8")
    >>> type(t).__name__, t.names
    ('ctable', ['f0', 'f1'])
    """
    return fill(shape, None, dtype, **kwargs)


def ones(shape, dtype=float, **kwargs):
    """ones(shape, dtype=float, **kwargs)

    A carray of ones (a ctable for a structured `dtype`, every field set to 1), with the parameters
    and the result of `zeros`.

    Examples
    --------
    >>> import blzarr
    >>> blzarr.ones((2, 3), dtype="i4")[:]
    array([[1, 1, 1],
           [1, 1, 1]], dtype=int32)
    """
    dtype = np.dtype(dtype)
    if dtype.names is not None:
        one = np.zeros((), dtype=dtype)
        for name in dtype.names:
            one[name] = 1
        return fill(shape, one[()], dtype, **kwargs)
    return fill(shape, 1, dtype, **kwargs)


def _arange_dtype(start, stop, step):
    """The dtype numpy.arange(start, stop, step) gives, without making its values.  NumPy takes it from
    the types of all three (arange(1e8) is float64, as in bcolz), so it is asked for an empty range whose
    stop has the type of `stop`."""
    try:
        return np.arange(start, type(stop)(start), step).dtype
    except (TypeError, ValueError, OverflowError):
        # a stop type that cannot hold `start` (an unsigned stop, a negative start)
        return np.arange(start, stop, step).dtype


def arange(start=None, stop=None, step=None, dtype=None, **kwargs):
    """arange([start,] stop[, step,], dtype=None, **kwargs)

    A carray of evenly spaced values, like `numpy.arange` (same values, same default dtype), built
    chunk by chunk.

    Parameters
    ----------
    start, stop, step : numbers
        As in `numpy.arange`: ``arange(stop)``, ``arange(start, stop)`` or ``arange(start, stop, step)``.
    dtype : dtype, optional
        The dtype NumPy would choose when None.
    **kwargs
        Passed to `blzarr.carray`.

    Returns
    -------
    carray

    Raises
    ------
    ValueError
        No `stop`, a zero `step`, or a structured `dtype`.

    Examples
    --------
    >>> import blzarr
    >>> blzarr.arange(5)[:]
    array([0, 1, 2, 3, 4])
    >>> blzarr.arange(0, 1, 0.25)[:]
    array([0.  , 0.25, 0.5 , 0.75])
    >>> blzarr.arange(10, 0, -3, dtype="i2")[:]
    array([10,  7,  4,  1], dtype=int16)
    """
    if start is None and stop is None:
        raise ValueError("arange() needs at least `stop`")
    if stop is None:
        start, stop = 0, start
    if start is None:
        start = 0
    if step is None:
        step = 1
    if step == 0:
        raise ValueError("arange(): step must not be zero")
    if dtype is None:
        dtype = _arange_dtype(start, stop, step)
    dtype = np.dtype(dtype)
    if dtype.names is not None:
        raise ValueError("arange() does not make structured arrays (ctables)")
    n = max(int(np.ceil((stop - start) / step)), 0)
    kwargs.setdefault("expectedlen", n)

    def fill_range(out):
        blen = max(out.chunklen, 1)
        for s in range(0, n, blen):
            e = min(s + blen, n)
            # NumPy's rule: element i is start + i * step, computed in the result's type
            if dtype.kind in "iu" and isinstance(start, (int, np.integer)) and isinstance(step, (int, np.integer)):
                block = np.arange(start + s * step, start + e * step, step, dtype=dtype)
            else:
                block = (start + np.arange(s, e, dtype=np.float64) * step).astype(dtype)
            out.append(block)
    return _built(lambda **kw: carray(np.empty(0, dtype=dtype), **kw), kwargs, fill_range)


def fromiter(iterable, dtype, count, **kwargs):
    """fromiter(iterable, dtype, count, **kwargs)

    A carray (a ctable for a structured `dtype`) from the items of an iterable, read in
    chunk-sized blocks, so a long generator never sits whole in memory.

    Parameters
    ----------
    iterable : iterable
        Scalars (or tuples, for a structured `dtype`).
    dtype : dtype
        The dtype of the result.
    count : int
        Read at most this many items; -1 reads until the iterable is exhausted.  It also sets
        ``expectedlen`` (and so the chunk length) unless that is given; as in bcolz, an iterable
        shorter than `count` is not an error.
    **kwargs
        Passed to `blzarr.carray` (or `blzarr.ctable`).

    Returns
    -------
    carray or ctable
        The items read (at most `count`), flushed when it is on disk.

    Raises
    ------
    ValueError
        An item does not convert to `dtype`.

    Examples
    --------
    >>> import blzarr
    >>> blzarr.fromiter((i * i for i in range(100)), dtype="i8", count=5)[:]
    array([ 0,  1,  4,  9, 16])
    >>> t = blzarr.fromiter(iter([(1, 0.5), (2, 1.5)]), dtype="i4,f8", count=-1)
    >>> t["f1"][:]
    array([0.5, 1.5])
    """
    dtype = np.dtype(dtype)
    count = operator.index(count)
    it = iter(iterable)
    if count >= 0:
        kwargs.setdefault("expectedlen", count)
    else:
        hint = operator.length_hint(it, -1)
        if hint >= 0:
            kwargs.setdefault("expectedlen", hint)
    remaining = count if count >= 0 else None

    def blocks(blen):
        nonlocal remaining
        while remaining is None or remaining > 0:
            k = blen if remaining is None else min(blen, remaining)
            block = _take(it, dtype, k)
            if remaining is not None:
                remaining -= len(block)
            if len(block):
                yield block
            if len(block) < k:
                break

    if dtype.names is not None:
        return _ctable_from_blocks(dtype, blocks(65536), kwargs)
    def fill(out):
        for block in blocks(max(out.chunklen, 1)):
            out.append(block)
    return _built(lambda **kw: carray(np.empty((0,) + dtype.shape, dtype=dtype.base), **kw), kwargs, fill)


def _take(it, dtype, k):
    items = list(itertools.islice(it, k))
    if dtype.kind == "O":
        out = np.empty(len(items), dtype=object)
        for i, v in enumerate(items):
            out[i] = v
        return out
    if not items:
        return np.empty((0,) + dtype.shape, dtype=dtype.base)
    try:
        if dtype.names is not None:
            # one record per item, as bcolz (numpy.fromiter) takes them: np.array would broadcast an
            # item that is a sequence into every field, a (k, nfields) block (31 GiB for bcolz's
            # bench/ctable-query.py, 253 fields) before refusing it
            return np.fromiter(items, dtype=dtype, count=len(items))
        return np.array(items, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"fromiter(): the items do not convert to dtype {dtype}: {e}") from None


def iterblocks(cobj, blen=None, start=0, stop=None):
    """iterblocks(cobj, blen=None, start=0, stop=None)

    Iterate over a carray or ctable in NumPy blocks of `blen` rows; only one block is decompressed
    at a time.

    Parameters
    ----------
    cobj : carray or ctable
        What to read.
    blen : int, optional
        Rows per block (the last one may be shorter).  Default: the chunk length (the smallest
        column chunk length for a ctable).  With ``blen=1`` a carray yields its elements.
    start, stop : int, optional
        The range of rows to read (non-negative; `stop` defaults to the length).

    Yields
    ------
    numpy.ndarray
        Consecutive blocks: plain arrays for a carray, structured arrays for a ctable.

    Examples
    --------
    >>> import blzarr
    >>> a = blzarr.arange(10)
    >>> [b.tolist() for b in blzarr.iterblocks(a, blen=4)]
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    >>> sum(int(b.sum()) for b in blzarr.iterblocks(a, blen=3, start=5))
    35
    """
    n = len(cobj)
    stop = n if stop is None or stop > n else operator.index(stop)
    start = operator.index(start)
    if start < 0 or stop < 0:
        raise ValueError(f"start and stop must be non-negative, got {start}, {stop}")
    if blen is None:
        blen = cobj.chunklen if isinstance(cobj, carray) else min(
            cobj.cols[name].chunklen for name in cobj.names)
    blen = operator.index(blen)
    if blen < 1:
        raise ValueError(f"blen must be positive, got {blen}")
    for s in range(start, stop, blen):
        block = cobj[s:min(s + blen, stop)]
        if blen == 1 and isinstance(cobj, carray):
            block = block[0]
        yield block


def walk(dir, classname=None, mode="a", allow_pickle=False, storage_options=None):
    """walk(dir, classname=None, mode='a', allow_pickle=False, storage_options=None)

    Iterate over the carrays and ctables stored below a directory, recursively, in name order.

    A directory that holds a carray or a ctable is opened and not searched further (the columns of
    a ctable are not listed on their own); other directories are searched after the objects found
    at their level.

    Parameters
    ----------
    dir : str
        The directory to search, or a URL (``s3://bucket/prefix``) with its fsspec `storage_options`.
    classname : {None, 'carray', 'ctable'}, optional
        Keep only the objects of this class.
    mode : {'a', 'r'}, optional
        The mode each object is opened with.
    allow_pickle : bool, optional
        As in `open`.

    Yields
    ------
    carray or ctable

    Examples
    --------
    >>> import numpy as np, blzarr, shutil
    >>> x = blzarr.arange(3, rootdir="walk_example/x", mode="w")
    >>> t = blzarr.ctable([np.arange(2)], names=["v"], rootdir="walk_example/sub/t", mode="w")
    >>> [(type(o).__name__, o.rootdir) for o in blzarr.walk("walk_example", mode="r")]
    [('carray', 'walk_example/x'), ('ctable', 'walk_example/sub/t')]
    >>> [o.rootdir for o in blzarr.walk("walk_example", classname="ctable")]
    ['walk_example/sub/t']
    >>> shutil.rmtree("walk_example")
    """
    if classname not in (None, "carray", "ctable"):
        raise ValueError(f"classname must be None, 'carray' or 'ctable', got {classname!r}")
    if is_url(os.fspath(dir)) or storage_options:
        store = open_bytestore(os.fspath(dir), storage_options)
        for url, kind in find_objects(store):
            if url == store.root:
                continue        # as below: the objects inside `dir`, not `dir` itself
            if classname is None or kind == classname:
                yield open(url, mode=mode, allow_pickle=allow_pickle, storage_options=storage_options)
        return
    dirs = []
    for name in sorted(os.listdir(dir)):
        node = os.path.join(dir, name)
        if not os.path.isdir(node):
            continue
        if detect(node) is not None:
            obj = open(node, mode=mode, allow_pickle=allow_pickle)
            if classname is None or type(obj).__name__ == classname:
                yield obj
        else:
            dirs.append(node)
    for d in dirs:
        yield from walk(d, classname, mode, allow_pickle)


def _salvaged_rows(col, a, b, lost, name=None):
    """col[a:b], chunk by chunk when that fails: the chunks that cannot be read are filled with the
    default value and noted in `lost` as (first row, end row, column name or None, reason)."""
    try:
        return col[a:b]
    except (BlzarrError, OSError) as e:
        if b - a <= col.chunklen:
            lost.append((a, b, name, str(e).splitlines()[0]))
            out = np.empty((b - a,) + col.shape[1:], dtype=col.dtype)
            out[...] = col.dflt
            return out
    cl = col.chunklen
    edges = [a] + list(range((a // cl + 1) * cl, b, cl)) + [b]
    return np.concatenate([_salvaged_rows(col, s, e, lost, name) for s, e in zip(edges, edges[1:])])


def salvage(src, dst, format=None, overwrite=False):
    """Copy everything readable of the carray or ctable `src` into a new directory `dst` (in `format`,
    the source's by default) and report what was lost.

    The source is opened read-only and copied chunk by chunk: the rows of a chunk that cannot be read
    (a missing, truncated or garbled superchunk or chunk file, a checksum error) are written with the
    default value (``dflt``) and listed in the report; everything else is copied as it is.

    Returns
    -------
    dict
        ``{"rows": rows copied, "lost": [(first row, end row, column or None, reason), ...],
        "lost_rows": rows lost (counted once per column)}``.

    Examples
    --------
    >>> import numpy as np, blzarr, os, shutil
    >>> a = blzarr.carray(np.arange(4000), rootdir="salvage_src", mode="w", chunklen=500, superchunklen=2)
    >>> a.close()
    >>> os.remove("salvage_src/data/__2__.bin")          # chunks 2 and 3: rows 1000-1999
    >>> report = blzarr.salvage("salvage_src", "salvage_dst")
    >>> report["lost_rows"], [(r[0], r[1]) for r in report["lost"]]
    (1000, [(1000, 1500), (1500, 2000)])
    >>> b = blzarr.open("salvage_dst", mode="r")
    >>> b[999], b[2000], len(b)
    (999, 2000, 4000)
    >>> shutil.rmtree("salvage_src"); shutil.rmtree("salvage_dst")
    """
    src = os.fspath(src)
    dst = os.fspath(dst)
    remote = is_url(src) or is_url(dst)
    if overlaps(src, dst):
        raise StorageError(f"cannot salvage '{src}' into '{dst}': the two overlap (the copy must go to "
                           "another directory)")
    if not overwrite and occupied(dst):
        raise StorageError(f"cannot salvage into '{dst}': it exists (pass overwrite=True to replace it)")
    if remote and is_url(dst):
        # object storage: what is at DST is replaced by one switch once the copy is complete
        store = open_bytestore(dst)
        report = []
        replace.build(store.root, store, lambda url: report.append(_salvage(src, url, format)), lambda: None)
        return report[0]
    if remote:
        return _salvage(src, dst, format)
    # DST's writer lock (never replace what another process writes); the copy is written beside DST and
    # swapped in at the end (blzarr.storage.intent): an interrupt leaves DST as it was, or complete
    lock = lock_dir(dst) if os.path.isdir(dst) and not os.path.islink(dst) else None
    stage = intent.stage_path(dst)
    try:
        report = _salvage(src, stage, format)
        intent.publish(stage, dst)
    except BaseException as e:
        intent.abandon(stage, e)
        raise
    finally:
        if lock is not None:
            lock.release()
    return report


def _salvage(src, dst, format):
    obj = open(src, mode="r", allow_pickle=True)
    fmt = format or obj.format
    lost = []
    if isinstance(obj, ctable):
        cols = [obj.cols[n] for n in obj.names]
        out = ctable([np.empty((0,) + c.shape[1:], dtype=c.dtype) for c in cols], names=list(obj.names),
                     rootdir=dst, mode="w", format=fmt, chunklen=cols[0].chunklen if cols else None)
        cl = cols[0].chunklen if cols else 1
        for a in range(0, len(obj), cl * 16):
            b = min(a + cl * 16, len(obj))
            out.append([_salvaged_rows(c, a, b, lost, n) for c, n in zip(cols, obj.names)])
    else:
        # (at a URL, committed below once filled: an interrupt leaves nothing there)
        with creation_completed_by_caller(dst):
            out = carray(np.empty((0,) + obj.shape[1:], dtype=obj.dtype), rootdir=dst, mode="w", format=fmt,
                         chunklen=obj.chunklen, cparams=obj.cparams, expectedlen=len(obj),
                         **({"dflt": obj.dflt[()]} if obj.dtype.kind != "O" else {}))
        cl = obj.chunklen
        for a in range(0, len(obj), cl * 16):
            out.append(_salvaged_rows(obj, a, min(a + cl * 16, len(obj)), lost))
    try:
        for k, v in obj.attrs:
            out.attrs[k] = v
    except (BlzarrError, OSError) as e:
        lost.append((0, 0, None, f"attributes: {str(e).splitlines()[0]}"))
    if isinstance(out, carray):
        commit_creation(out)
    else:
        out.flush()
    rows = len(out)
    out.close()
    return {"rows": rows, "lost": lost, "lost_rows": sum(b - a for a, b, _, _ in lost)}


def _blosc_version_text():
    """'1.21.7.dev (2024-06-24)': the date without the version-control keyword around it."""
    version, date = blosc_version()
    date = date.strip().removeprefix("$Date::").removesuffix("$").strip().rstrip("#").strip()
    return f"{version} ({date})" if date else version


def blosc_version():
    """The version and date of the C-Blosc library blzarr is linked with.

    Returns
    -------
    tuple of str
        ``(version, date)``.

    Examples
    --------
    >>> import blzarr
    >>> version, date = blzarr.blosc_version()
    >>> version.startswith("1.")
    True
    """
    return _chunk.blosc_version()


def blosc_compressor_list():
    """The codecs this build of C-Blosc supports (the values ``cparams(cname=...)`` accepts).

    Examples
    --------
    >>> import blzarr
    >>> "lz4" in blzarr.blosc_compressor_list()
    True
    """
    return _chunk.compressor_list()


def print_versions():
    """Print the versions of blzarr, its C library and the optional packages."""
    package = sys.modules[__name__.rpartition(".")[0]]     # blzarr, loaded before this module runs
    lines = [("blzarr", package.__version__), ("NumPy", np.__version__),
             ("C-Blosc", _blosc_version_text()),
             ("Codecs", ", ".join(blosc_compressor_list()))]
    for mod in ("numexpr", "pandas", "tables", "dask"):
        try:
            lines.append((mod, __import__(mod).__version__))
        except Exception:
            lines.append((mod, "not installed"))
    lines += [("Python", sys.version.split()[0]), ("Platform", platform.platform()),
              ("Cores", str(detect_number_of_cores()))]
    print("-" * 60)
    for k, v in lines:
        print(f"{k + ':':12}{v}")
    print("-" * 60)
