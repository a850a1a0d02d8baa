"""Top-level constructors and helpers: open, zeros, ones, fill, arange, fromiter, iterblocks, walk."""

import itertools
import operator
import os
import platform
import sys

import numpy as np

from blzarr import _chunk
from blzarr.carray import carray
from blzarr.errors import StorageError
from blzarr.storage import ROOTDIRS_FILE, BcolzDir


def open(rootdir, mode="a", allow_pickle=False):
    """open(rootdir, mode='a', allow_pickle=False)

    Open the carray or ctable stored at `rootdir`: mode 'r' read-only, 'w' empties it, 'a' read/write.
    Data holding pickled Python objects opens only with ``allow_pickle=True``.
    """
    rootdir = os.fspath(rootdir)
    if not os.path.isdir(rootdir):
        raise StorageError(f"'{rootdir}' does not exist or is not a directory")
    if os.path.exists(os.path.join(rootdir, ROOTDIRS_FILE)):
        from blzarr.ctable import ctable
        return ctable(rootdir=rootdir, mode=mode, allow_pickle=allow_pickle)
    if not BcolzDir.holds_carray(rootdir):
        raise StorageError(f"'{rootdir}' holds neither a carray nor a ctable")
    return carray(rootdir=rootdir, mode=mode, allow_pickle=allow_pickle)


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


def _ctable_from_blocks(dtype, blocks, kwargs):
    from blzarr.ctable import ctable
    out = ctable(np.empty(0, dtype=dtype), **kwargs)
    for block in blocks:
        out.append(block)
    out.flush()
    return out


def fill(shape, dflt=None, dtype=float, **kwargs):
    """fill(shape, dflt=None, dtype=float, **kwargs)

    A carray of `shape` filled with `dflt` (zeros when None), which also becomes its `dflt`;
    written chunk by chunk, never whole in memory.  A structured `dtype` gives a ctable, as in bcolz.
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
    out = carray(np.empty((0,) + atom.shape, dtype=atom.base), **kwargs)
    blen = max(out.chunklen, 1)
    block = np.empty((min(blen, n),) + atom.shape, dtype=atom.base)
    block[...] = value
    for s in range(0, n, blen):
        out.append(block[:min(blen, n - s)])
    out.flush()
    return out


def zeros(shape, dtype=float, **kwargs):
    """zeros(shape, dtype=float, **kwargs): a carray (a ctable for a structured dtype) of zeros."""
    return fill(shape, None, dtype, **kwargs)


def ones(shape, dtype=float, **kwargs):
    """ones(shape, dtype=float, **kwargs): a carray (a ctable for a structured dtype) of ones."""
    dtype = np.dtype(dtype)
    if dtype.names is not None:
        one = np.zeros((), dtype=dtype)
        for name in dtype.names:
            one[name] = 1
        return fill(shape, one[()], dtype, **kwargs)
    return fill(shape, 1, dtype, **kwargs)


def arange(start=None, stop=None, step=None, dtype=None, **kwargs):
    """arange([start,] stop[, step,], dtype=None, **kwargs)

    Like numpy.arange (same values, same default dtype), built chunk by chunk.
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
        dtype = np.arange(start, start + step, step).dtype
    dtype = np.dtype(dtype)
    if dtype.names is not None:
        raise ValueError("arange() does not make structured arrays (ctables)")
    n = max(int(np.ceil((stop - start) / step)), 0)
    kwargs.setdefault("expectedlen", n)
    out = carray(np.empty(0, dtype=dtype), **kwargs)
    blen = max(out.chunklen, 1)
    for s in range(0, n, blen):
        e = min(s + blen, n)
        # NumPy's rule: element i is start + i * step, computed in the result's type
        if dtype.kind in "iu" and isinstance(start, (int, np.integer)) and isinstance(step, (int, np.integer)):
            block = np.arange(start + s * step, start + e * step, step, dtype=dtype)
        else:
            block = (start + np.arange(s, e, dtype=np.float64) * step).astype(dtype)
        out.append(block)
    out.flush()
    return out


def fromiter(iterable, dtype, count, **kwargs):
    """fromiter(iterable, dtype, count, **kwargs)

    A carray (a ctable for a structured `dtype`) from an iterable, reading at most `count` items
    (``-1``: until it is exhausted), in chunk-sized blocks.  `count` also sizes the chunks; as in
    bcolz, an iterable shorter than `count` is fine (it is an estimate as much as a limit).
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
    out = carray(np.empty((0,) + dtype.shape, dtype=dtype.base), **kwargs)
    for block in blocks(max(out.chunklen, 1)):
        out.append(block)
    out.flush()
    return out


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
        return np.array(items, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"fromiter(): the items do not convert to dtype {dtype}: {e}") from None


def iterblocks(cobj, blen=None, start=0, stop=None):
    """iterblocks(cobj, blen=None, start=0, stop=None)

    Iterate over `cobj` (carray or ctable) in NumPy blocks of `blen` rows (default: the chunklen,
    the smallest column chunklen for a ctable).  With ``blen == 1`` a carray yields its elements.
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


def walk(dir, classname=None, mode="a", allow_pickle=False):
    """walk(dir, classname=None, mode='a', allow_pickle=False)

    Iterate over the carrays and ctables stored below `dir` (recursively; each object opened with
    `mode`), keeping only those of class `classname` ('carray' or 'ctable') when given.
    """
    if classname not in (None, "carray", "ctable"):
        raise ValueError(f"classname must be None, 'carray' or 'ctable', got {classname!r}")
    dirs = []
    for name in sorted(os.listdir(dir)):
        node = os.path.join(dir, name)
        if not os.path.isdir(node):
            continue
        if os.path.exists(os.path.join(node, ROOTDIRS_FILE)) or BcolzDir.holds_carray(node):
            obj = open(node, mode=mode, allow_pickle=allow_pickle)
            if classname is None or type(obj).__name__ == classname:
                yield obj
        else:
            dirs.append(node)
    for d in dirs:
        yield from walk(d, classname, mode, allow_pickle)


def blosc_version():
    """(version, date) of the linked C-Blosc."""
    return _chunk.blosc_version()


def blosc_compressor_list():
    """The codecs this build of C-Blosc supports."""
    return _chunk.compressor_list()


def print_versions():
    """Print the versions of blzarr, its C library and the optional packages."""
    import blzarr
    from blzarr.params import detect_number_of_cores
    lines = [("blzarr", blzarr.__version__), ("NumPy", np.__version__),
             ("C-Blosc", "%s (%s)" % blzarr.blosc_version()),
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
