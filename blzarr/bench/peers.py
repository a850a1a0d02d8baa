"""One adapter per library: the same operations, each written the way that library's users write them.

Every adapter uses lz4, clevel 5, byte shuffle and 2 threads, and lets its library pick its own
default chunk length.  An adapter whose library is missing raises `Unavailable` from `setup()`; an
operation a library has no native form of is written with its public API in the obvious way (noted in
`NOTES`), or left out (the harness reports it as skipped).
"""

import collections
import contextlib
import itertools
import os
import shutil

import numpy as np

import blzarr
from blzarr.bench import CLEVEL, CNAME, NTHREADS


class Unavailable(Exception):
    """The peer's library is not installed, or cannot be set up here."""


class Unsupported(Exception):
    """This operation has no form in this library; the harness reports it as skipped."""


def _consume(iterable, n=None):
    """Exhaust an iterator at C speed (optionally only its first `n` values); return nothing."""
    if n is not None:
        iterable = itertools.islice(iterable, n)
    collections.deque(iterable, maxlen=0)


def _rmtree(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


class Peer:
    name = "?"
    NOTES = ()

    def setup(self):
        """Import the library and set its thread count; raise `Unavailable` when it cannot run."""

    def version(self):
        return "?"

    # in memory
    def create(self, x):
        raise Unsupported

    def read_all(self, a):
        return a[:]

    def fancy(self, a, idx):
        return a[idx]

    def sum(self, a):
        return a.sum()

    def iterate(self, a, n):
        _consume(iter(a), n)

    def make_mask(self, mask):
        return mask

    def where(self, a, mask):
        raise Unsupported

    def select(self, a, mask):
        """The values where `mask` (from make_mask) is true, as one array: the library's bulk form
        of `where` (by default the same call as `where`)."""
        return self.where(a, mask)

    def eval_sum(self, a, thr):
        """How many values exceed `thr`, through the library's expression engine."""
        raise Unsupported

    def col0(self, a):
        """The first column of a 2-D array, as a NumPy array."""
        return a[:, 0]

    def nbytes_stored(self, a):
        return None

    # on disk (path is a fresh, non-existing path inside the harness's temporary directory)
    def disk_create(self, x, path):
        raise Unsupported

    def disk_open(self, path):
        raise Unsupported

    def disk_sum(self, path):
        return self.sum(self.disk_open(path))

    def append_open(self, path, dtype, total):
        raise Unsupported

    def append(self, a, batch):
        a.append(batch)

    def append_close(self, a):
        a.flush()

    def flush(self, a):
        """Make what was appended so far durable on disk (a library without a flush: Unsupported)."""
        raise Unsupported

    # ctable (columns: a dict name -> 1-d array)
    def ct_create(self, cols):
        raise Unsupported

    def ct_where(self, t, expr):
        raise Unsupported

    def ct_fetchwhere(self, t, expr):
        raise Unsupported

    def ct_todataframe(self, t):
        raise Unsupported

    def ct_open_rows(self, path):
        """A new, empty on-disk table at `path` of columns (int64, float64, int32)."""
        raise Unsupported

    def ct_append_rows(self, t, rows):
        """Append `rows` (tuples) one by one, then make them durable (flush)."""
        raise Unsupported


class _CarrayLike(Peer):
    """blzarr and bcolz share the carray API, so they share the adapter: only the module differs."""

    module = None

    def _cparams(self):
        return self.mod.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME)

    def version(self):
        return self.mod.__version__

    def create(self, x):
        return self.mod.carray(x, cparams=self._cparams())

    def make_mask(self, mask):
        return self.mod.carray(mask, cparams=self._cparams())

    def where(self, a, mask):
        return np.fromiter(a.where(mask), dtype=a.dtype)

    def select(self, a, mask):
        return a[mask]          # a boolean carray as the key (bcolz too)

    def eval_sum(self, a, thr):
        return self.mod.eval(f"a > {thr!r}", user_dict={"a": a}).sum()

    def iterate(self, a, n):
        _consume(a.iter(0, n))

    def nbytes_stored(self, a):
        return int(a.cbytes)

    def disk_create(self, x, path):
        a = self.mod.carray(x, cparams=self._cparams(), rootdir=path, mode="w")
        a.flush()
        return a

    def disk_open(self, path):
        return self.mod.open(path, mode="r")

    def append_open(self, path, dtype, total):
        return self.mod.carray(np.empty(0, dtype=dtype), cparams=self._cparams(), rootdir=path,
                               mode="w", expectedlen=total)

    def flush(self, a):
        a.flush()

    def ct_create(self, cols):
        return self.mod.ctable(columns=list(cols.values()), names=list(cols.keys()),
                               cparams=self._cparams())

    def ct_where(self, t, expr):
        _consume(t.where(expr))

    def ct_fetchwhere(self, t, expr):
        return t.fetchwhere(expr)

    def ct_todataframe(self, t):
        return t.todataframe()

    def ct_open_rows(self, path):
        cols = [np.zeros(0, "i8"), np.zeros(0, "f8"), np.zeros(0, "i4")]
        return self.mod.ctable(columns=cols, names=["id", "x", "k"], rootdir=path, mode="w",
                               cparams=self._cparams())

    def ct_append_rows(self, t, rows):
        for r in rows:
            t.append(r)
        t.flush()


class Blzarr(_CarrayLike):
    name = "blzarr"

    def setup(self):
        self.mod = blzarr
        blzarr.set_nthreads(NTHREADS)

    def without_fsync(self):
        """blzarr with its syncs off (BLZARR_FSYNC=0): a completed flush survives a process crash,
        not a power loss."""
        return blzarr.defaults_ctx(fsync=False)


class Bcolz(_CarrayLike):
    name = "bcolz"

    def setup(self):
        try:
            import bcolz
        except Exception as exc:  # ImportError, or a binary built for another NumPy
            raise Unavailable(f"bcolz (bcolz-zipline) cannot be imported: {exc}") from None
        self.mod = bcolz
        bcolz.set_nthreads(NTHREADS)

    def without_fsync(self):
        """bcolz syncs nothing: its "fsync off" row is the same work as its default one."""
        return contextlib.nullcontext()


class Blosc2(Peer):
    name = "blosc2"
    NOTES = ("blosc2: `where` is `a[mask]` with a compressed boolean NDArray; appends are "
             "`resize` + slice assignment (NDArray has no append); `eval_sum` is `(a > x)[:].sum()` "
             "(faster here than the lazy `(a > x).sum()`).",)

    def setup(self):
        try:
            import blosc2
        except Exception as exc:
            raise Unavailable(f"python-blosc2 cannot be imported: {exc}") from None
        self.b2 = blosc2
        blosc2.set_nthreads(NTHREADS)
        self.kw = dict(cparams=blosc2.CParams(codec=blosc2.Codec.LZ4, clevel=CLEVEL,
                                              filters=[blosc2.Filter.SHUFFLE], nthreads=NTHREADS),
                       dparams=blosc2.DParams(nthreads=NTHREADS))

    def version(self):
        return self.b2.__version__

    def create(self, x):
        return self.b2.asarray(x, **self.kw)

    def make_mask(self, mask):
        return self.b2.asarray(mask, **self.kw)

    def where(self, a, mask):
        return a[mask]

    def eval_sum(self, a, thr):
        return (a > thr)[:].sum()       # faster here than the lazy (a > thr).sum()

    def nbytes_stored(self, a):
        return int(a.schunk.cbytes)

    def disk_create(self, x, path):
        a = self.b2.asarray(x, urlpath=path, mode="w", **self.kw)
        return a

    def disk_open(self, path):
        return self.b2.open(path, mode="r")

    def append_open(self, path, dtype, total):
        chunks, blocks = self.b2.compute_chunks_blocks((total,), dtype=np.dtype(dtype))
        a = self.b2.empty((0,), dtype=dtype, chunks=chunks, blocks=blocks, urlpath=path, mode="w",
                          **self.kw)
        return a

    def append(self, a, batch):
        n = a.shape[0]
        a.resize((n + len(batch),))
        a[n:n + len(batch)] = batch

    def append_close(self, a):
        pass  # every write reaches the file


class Zarr(Peer):
    name = "zarr"
    NOTES = ("zarr: has no iterator, `iterate` reads chunk by chunk and iterates each NumPy chunk; "
             "`where` is `a.vindex[mask]` with an uncompressed NumPy mask; `sum` is `a[:].sum()`, "
             "`eval_sum` `(a[:] > x).sum()`.",)

    def setup(self):
        try:
            import zarr
            import numcodecs
        except Exception as exc:
            raise Unavailable(f"zarr cannot be imported: {exc}") from None
        self.zarr = zarr
        numcodecs.blosc.set_nthreads(NTHREADS)
        if int(zarr.__version__.split(".")[0]) >= 3:
            from zarr.codecs import BloscCodec
            self.kw = dict(compressors=[BloscCodec(cname=CNAME, clevel=CLEVEL, shuffle="shuffle")])
            self.v3 = True
        else:
            self.kw = dict(compressor=numcodecs.Blosc(cname=CNAME, clevel=CLEVEL,
                                                      shuffle=numcodecs.Blosc.SHUFFLE))
            self.v3 = False

    def version(self):
        return self.zarr.__version__

    def _new(self, store, data=None, shape=None, dtype=None, chunks="auto"):
        if self.v3:
            if data is not None:
                return self.zarr.create_array(store=store, data=data, **self.kw)
            return self.zarr.create_array(store=store, shape=shape, dtype=dtype, chunks=chunks,
                                          **self.kw)
        if data is not None:
            return self.zarr.array(data, store=store, **self.kw)
        return self.zarr.zeros(shape, dtype=dtype, store=store,
                               chunks=True if chunks == "auto" else chunks, **self.kw)

    def create(self, x):
        store = self.zarr.storage.MemoryStore() if self.v3 else None
        return self._new(store, data=x)

    def sum(self, a):
        return a[:].sum()

    def iterate(self, a, n):
        step = a.chunks[0]
        for s in range(0, min(n, a.shape[0]), step):
            _consume(iter(a[s:min(s + step, n)]))

    def fancy(self, a, idx):
        return a.oindex[idx]

    def where(self, a, mask):
        return a.vindex[mask]

    def eval_sum(self, a, thr):
        return (a[:] > thr).sum()

    def nbytes_stored(self, a):
        try:
            return int(a.nbytes_stored())
        except Exception:
            return None

    def disk_create(self, x, path):
        return self._new(path, data=x)

    def disk_open(self, path):
        return self.zarr.open_array(path, mode="r")

    def append_open(self, path, dtype, total):
        probe = self._new(self.zarr.storage.MemoryStore() if self.v3 else None, shape=(total,),
                          dtype=dtype)
        return self._new(path, shape=(0,), dtype=dtype, chunks=probe.chunks)

    def append_close(self, a):
        pass


class Numpy(Peer):
    name = "numpy"
    NOTES = ("numpy: `create`/`read all` are `x.copy()`; on disk `np.save`/`np.load` (open+read) and "
             "`np.load(mmap_mode='r')` for scalars, slices and a[:, 0] (copied); `disk_sum` is "
             "`np.load(path).sum()`; appends write raw bytes to one file; ctable peer is pandas.",)

    def setup(self):
        self.pd = None
        try:
            import pandas
            self.pd = pandas
        except Exception:
            pass

    def version(self):
        return np.__version__ + (f" (pandas {self.pd.__version__})" if self.pd else "")

    def create(self, x):
        return x.copy()

    def read_all(self, a):
        return a.copy()

    def where(self, a, mask):
        return a[mask]

    def eval_sum(self, a, thr):
        return (a > thr).sum()

    def col0(self, a):
        return np.ascontiguousarray(a[:, 0])    # a copy: the memory-mapped column is only a view

    def disk_sum(self, path):
        return np.load(path).sum()

    def nbytes_stored(self, a):
        return int(a.nbytes)

    def disk_create(self, x, path):
        with open(path, "wb") as f:
            np.save(f, x)
        return None

    def disk_open(self, path):
        return np.load(path, mmap_mode="r")

    def disk_read_all(self, path):
        return np.load(path)

    def append_open(self, path, dtype, total):
        return open(path, "wb")

    def append(self, f, batch):
        f.write(batch.tobytes())

    def append_close(self, f):
        f.close()

    def ct_create(self, cols):
        if self.pd is None:
            raise Unsupported
        return self.pd.DataFrame(cols)

    def ct_where(self, df, expr):
        _consume(df.query(expr).itertuples(index=False))

    def ct_fetchwhere(self, df, expr):
        return df.query(expr)

    def ct_todataframe(self, df):
        return df.copy()


ALL = (Blzarr, Bcolz, Blosc2, Zarr, Numpy)
