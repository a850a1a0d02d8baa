# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The work-sharing pool of the many-chunk kernels: items done by every thread that calls `run()`.

A kernel object holds everything its items need as C pointers (read once, with the GIL), and `run()`
does the items with the GIL released.  Several threads call `run()` on the same object (the callers'
threads: `blzarr.runtime.parallel` runs one call per pool thread): the items are cut into one contiguous share
per thread; a thread does its own share first (so threads that fault in a fresh output touch separate
pages), then helps with the others' (a thread that gets no core holds up only the item it has).  Items
are claimed with one atomic counter per share; the first item that fails stops every thread, and
`check()` raises for it afterwards.

Each thread gets a scratch buffer of `scratch_bytes` for the call (a decoded chunk, a file read),
taken from a pool of buffers kept between calls: a fresh chunk-sized buffer comes from mmap and costs
its page faults and zeroing on every call.

`Work` knows items only by number; `ChunkWork` adds one in-memory chunk per item, its header parsed
and checked before any thread starts.  What it does not do: decode anything itself (the subclasses'
`_do` does: `_decode`, `_sums`, `_rows`, `_exprkernel`; `_superchunk.ReadChunks` reads files) or
start threads (`_where` has its own producer thread, and uses only the scratch pool and the chunks).
"""

from libc.stdlib cimport malloc, free
from cpython.ref cimport PyObject
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize

cimport numpy as cnp

from blzarr._chunk cimport header_t, located, bytes_view, parse_header
from blzarr.errors import ChunkError

cnp.import_array()

cdef extern from "Python.h":
    char *_bytes_ptr "PyBytes_AS_STRING"(PyObject *o)


# The scratch buffers of the threads, kept for the next call.  The pool is taken from and given back
# to with the GIL held, which is its only lock.  At most 8 buffers stay allocated between calls, each
# at most `keep_bytes` (4 MB unless the kernel says otherwise): larger ones are freed after the call,
# so an occasional huge chunk does not stay resident.
cdef list _scratch_pool = []
cdef Py_ssize_t SCRATCH_KEEP_BYTES = 4 * 1024 * 1024
cdef Py_ssize_t SCRATCH_KEEP_COUNT = 8


cdef bytearray take_scratch(Py_ssize_t n):
    """A buffer of at least `n` bytes (not zeroed): the first kept one large enough, else a new one."""
    cdef Py_ssize_t i
    cdef bytearray b
    for i in range(len(_scratch_pool)):
        b = _scratch_pool[i]
        if len(b) >= n:
            del _scratch_pool[i]
            return b
    return PyByteArray_FromStringAndSize(NULL, n)


cdef void give_scratch(bytearray b, Py_ssize_t keep_bytes=SCRATCH_KEEP_BYTES):
    """Give back a buffer of `take_scratch`: kept when at most `keep_bytes`, the oldest kept one
    freed when the pool is full."""
    if len(b) <= keep_bytes:
        _scratch_pool.append(b)
        if len(_scratch_pool) > SCRATCH_KEEP_COUNT:
            del _scratch_pool[0]


cdef class Work:
    """Items 0..nitems-1 done by every thread that calls `run()` (see the module's docstring); a
    subclass sets the items with `_share` and does one in `_do`."""

    def __cinit__(self, *args, **kwargs):
        self.nxt = NULL
        self.end = NULL
        self.failed = -1
        self.failed_ret = 0
        self.keep_bytes = SCRATCH_KEEP_BYTES

    def __dealloc__(self):
        free(self.nxt)
        free(self.end)

    cdef int _share(self, Py_ssize_t nitems, Py_ssize_t nparts) except -1:
        """Cut the `nitems` items into one contiguous share per thread, for at most `nparts` threads."""
        cdef Py_ssize_t p
        free(self.nxt)
        free(self.end)
        self.nitems = nitems
        self.nparts = max(1, min(nparts, nitems))
        self.nxt = <Py_ssize_t *>malloc(self.nparts * sizeof(Py_ssize_t))
        self.end = <Py_ssize_t *>malloc(self.nparts * sizeof(Py_ssize_t))
        if self.nxt == NULL or self.end == NULL:
            raise MemoryError()
        for p in range(self.nparts):
            self.nxt[p] = nitems * p // self.nparts
            self.end[p] = nitems * (p + 1) // self.nparts
        return 0

    cdef object _name_of(self, Py_ssize_t k):
        """How errors name item k: the caller's `wheres[k]`, or its number."""
        if self.wheres is None:
            return f"chunk {k} of a batch"
        return self.wheres[k]

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        """Item k, with this thread's `scratch`: 0 done, else the code that `check()` reports."""
        return 0

    cdef void _loop(self, Py_ssize_t t, char *scratch) noexcept nogil:
        cdef Py_ssize_t r, p, k, none = -1
        cdef int ret
        for r in range(self.nparts):
            p = (t + r) % self.nparts
            while True:
                if BLZ_LOAD(&self.failed) >= 0:
                    return
                k = BLZ_FETCH_ADD(&self.nxt[p], 1)
                if k >= self.end[p]:
                    break
                ret = self._do(k, scratch)
                if ret != 0:
                    # the first failure wins; `none` is where the CAS puts the value it found
                    if BLZ_CAS(&self.failed, none, k):
                        self.failed_ret = ret
                    return

    cdef int _ready(self) except -1:
        """Raise when the work cannot run yet (before any buffer is taken)."""
        return 0

    cdef void _started(self, char *scratch) noexcept:
        """A thread's scratch before its first item (with the GIL)."""
        pass

    cdef void _finished(self, char *scratch) noexcept:
        """A thread's scratch after its last item (with the GIL), also when the loop did not run."""
        pass

    def run(self):
        """Do items until none is left (call it from up to `nparts` threads at once)."""
        cdef Py_ssize_t t
        cdef char *scratch = NULL
        cdef bytearray buf = None
        if self.nxt == NULL:
            raise ValueError(f"{type(self).__name__}: no items to work on (the object was not set up)")
        self._ready()
        t = BLZ_FETCH_ADD(&self.callers, 1) % self.nparts
        if self.scratch_bytes > 0:
            buf = take_scratch(self.scratch_bytes)
            scratch = PyByteArray_AS_STRING(buf)
        try:
            self._started(scratch)
            with nogil:
                self._loop(t, scratch)
        finally:
            self._finished(scratch)
            if buf is not None:
                give_scratch(buf, self.keep_bytes)

    def check(self):
        """Raise `ChunkError` for the first item that failed (after every `run()` has returned)."""
        if self.failed >= 0:
            raise ChunkError(f"corrupted Blosc chunk{located(self._name_of(self.failed))}: decoding failed "
                             f"(return code {self.failed_ret})")


cdef class ChunkWork(Work):
    """Items over in-memory chunks: `_set_chunks` keeps each item's chunk (and a reference to it) with
    its header parsed and checked against its length, so `_do` needs no further checks of the header."""

    def __cinit__(self, *args, **kwargs):
        self.src = NULL
        self.hdr = NULL

    def __dealloc__(self):
        free(self.src)
        free(self.hdr)

    cdef int _set_chunks(self, list bufs, Py_ssize_t nparts, object wheres) except -1:
        """The items' chunks (one per item), shared among at most `nparts` threads; `wheres[k]` names
        chunk k in errors."""
        cdef Py_ssize_t n = len(bufs), k, ln
        cdef const uint8_t[::1] v
        cdef object b
        self.wheres = wheres
        self.keep = []
        self.src = <const uint8_t **>malloc(max(1, n) * sizeof(uint8_t *))
        self.hdr = <header_t *>malloc(max(1, n) * sizeof(header_t))
        if self.src == NULL or self.hdr == NULL:
            raise MemoryError()
        self._share(n, nparts)
        for k in range(n):
            b = bufs[k]
            if type(b) is bytes:
                # the common case, without a memoryview's cost
                self.src[k] = <const uint8_t *>_bytes_ptr(<PyObject *>b)
                ln = len(<bytes>b)
                self.keep.append(b)
            else:
                v = bytes_view(b)
                self.src[k] = &v[0] if v.shape[0] else NULL
                ln = v.shape[0]
                self.keep.append(v)
            # the chunk's name is made only for the error (a name per chunk cost more than the checks)
            try:
                parse_header(self.src[k], ln, &self.hdr[k], None, False)
            except ChunkError:
                parse_header(self.src[k], ln, &self.hdr[k], self._name_of(k), False)
                raise
        return 0
