"""Top-level constructors and helpers: open, zeros, ones, fill, arange, fromiter, iterblocks, walk."""

import os
import platform
import sys

import numpy as np

from blzarr import _chunk
from blzarr.carray import carray
from blzarr.errors import StorageError
from blzarr.storage import ROOTDIRS_FILE, BcolzDir


def open(rootdir, mode="a", allow_pickle=False):
    """Open the carray or ctable stored at `rootdir` ('r', 'w' empties it, 'a')."""
    rootdir = os.fspath(rootdir)
    if not os.path.isdir(rootdir):
        raise StorageError(f"'{rootdir}' does not exist or is not a directory")
    if os.path.exists(os.path.join(rootdir, ROOTDIRS_FILE)):
        from blzarr.ctable import ctable
        return ctable(rootdir=rootdir, mode=mode)
    if not BcolzDir.holds_carray(rootdir):
        raise StorageError(f"'{rootdir}' holds neither a carray nor a ctable")
    return carray(rootdir=rootdir, mode=mode, allow_pickle=allow_pickle)


def _shape_of(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def fill(shape, dflt=None, dtype=float, **kwargs):
    """A carray of `shape` filled with `dflt` (written chunk by chunk, never whole in memory)."""
    shape = _shape_of(shape)
    dtype = np.dtype(dtype)
    n, tail = shape[0], shape[1:]
    kwargs.setdefault("expectedlen", n)
    atom = np.dtype((dtype, tail)) if tail else dtype
    if dtype.shape:
        atom = dtype
        dtype = dtype.base
    value = np.zeros((), dtype=dtype)
    if dflt is not None:
        value[()] = dflt
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
    """A carray of zeros."""
    return fill(shape, 0, dtype, **kwargs)


def ones(shape, dtype=float, **kwargs):
    """A carray of ones."""
    return fill(shape, 1, dtype, **kwargs)


def arange(start=None, stop=None, step=None, dtype=None, **kwargs):
    """Like numpy.arange, built chunk by chunk."""
    if start is None and stop is None:
        raise ValueError("arange() needs at least `stop`")
    if stop is None:
        start, stop = 0, start
    if start is None:
        start = 0
    if step is None:
        step = 1
    n = len(range(0, 1)) and int(np.ceil((stop - start) / step)) if step else 0
    if step == 0:
        raise ValueError("arange(): step must not be zero")
    n = max(n, 0)
    dtype = np.dtype(dtype) if dtype is not None else np.arange(start, start + step, step).dtype
    kwargs.setdefault("expectedlen", n)
    out = carray(np.empty(0, dtype=dtype), **kwargs)
    blen = max(out.chunklen, 1)
    for s in range(0, n, blen):
        e = min(s + blen, n)
        out.append(np.arange(start + s * step, start + e * step, step, dtype=dtype)[:e - s])
    out.flush()
    return out


def fromiter(iterable, dtype, count, **kwargs):
    """A carray from an iterable, reading at most `count` items (-1: all)."""
    dtype = np.dtype(dtype)
    if count is not None and count >= 0:
        kwargs.setdefault("expectedlen", count)
    out = carray(np.empty(0, dtype=dtype), **kwargs)
    blen = max(out.chunklen, 1)
    it = iter(iterable)
    remaining = count if count is not None and count >= 0 else None
    while remaining is None or remaining > 0:
        k = blen if remaining is None else min(blen, remaining)
        block = np.fromiter(it, dtype=dtype, count=-1 if False else k) if False else _take(it, dtype, k)
        if len(block):
            out.append(block)
        if remaining is not None:
            remaining -= len(block)
            if len(block) < k:
                raise ValueError(f"iterator too short: {count} items asked, {count - remaining} given")
        if len(block) < k:
            break
    out.flush()
    return out


def _take(it, dtype, k):
    import itertools
    items = list(itertools.islice(it, k))
    return np.array(items, dtype=dtype) if items else np.empty(0, dtype=dtype)


def iterblocks(cobj, blen=None, start=0, stop=None):
    """Iterate over `cobj` (carray or ctable) in NumPy blocks of `blen` rows."""
    n = len(cobj)
    stop = n if stop is None or stop > n else stop
    if blen is None:
        blen = cobj.chunklen if isinstance(cobj, carray) else min(
            cobj.cols[name].chunklen for name in cobj.names)
    if blen < 1:
        raise ValueError("blen must be positive")
    for s in range(start, stop, blen):
        block = cobj[s:min(s + blen, stop)]
        if blen == 1 and isinstance(cobj, carray):
            block = block[0]
        yield block


def walk(dir, classname=None, mode="a"):
    """Iterate over the carrays and ctables stored below `dir`."""
    dirs = []
    for name in sorted(os.listdir(dir)):
        node = os.path.join(dir, name)
        if not os.path.isdir(node):
            continue
        obj = None
        if os.path.exists(os.path.join(node, ROOTDIRS_FILE)) or BcolzDir.holds_carray(node):
            try:
                obj = open(node, mode=mode)
            except Exception:
                obj = None
        if obj is None:
            dirs.append(node)
            continue
        if classname is None or type(obj).__name__ == classname:
            yield obj
    for d in dirs:
        yield from walk(d, classname, mode)


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
