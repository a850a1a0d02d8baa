# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""where(): the values where a boolean mask holds, chunk by chunk, produced ahead of the caller.

The caller of a carray's where() iterates Python scalars holding the GIL the whole time (NumPy's
fromiter, itertools.chain and a memoryview's iterator are all C code).  `WhereChunks` produces the
selected values of every chunk of the values in order on a C thread of its own that never takes the
GIL, at most `window` chunks ahead of the caller, each into a slot of its own; `next_part()` hands the
caller the next ready slot, and waits without the GIL when it has caught up.  The two sides meet only
through atomic counters and two wake-up locks (PyThread locks work without the GIL): no chunk costs a
hand-off of the GIL.  `WhereIter` turns the parts into Python scalars without a NumPy call per value.

What it does not do: decide which chunks a query may skip or take whole (the caller passes a mode
per chunk, from the statistics), evaluate expressions (`_exprkernel` makes masks and selections of
expressions), or run on the work pool's threads: it uses only the pool's chunks and scratch buffers.
"""

import os as _os

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free, calloc
from libc.string cimport memcpy
from cpython.ref cimport PyObject
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.bool cimport PyBool_FromLong
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_acquire_lock, PyThread_release_lock, NOWAIT_LOCK,
                               PyThread_start_new_thread)

cimport numpy as cnp

from blzarr._blosc cimport blosc_decompress_ctx
from blzarr._chunk cimport header_t, C_MEMCPYED, located
from blzarr._exprkernel cimport XK_WINDOW, xk_positions, gather
from blzarr._workpool cimport (ChunkWork, take_scratch, give_scratch, BLZ_FETCH_ADD, BLZ_CAS, BLZ_XCHG_SC,
                               BLZ_LOAD_SC, BLZ_PAUSE)
from blzarr.errors import ChunkError

cnp.import_array()

from numpy import dtype as np_dtype, frombuffer as np_frombuffer

cdef extern from "pythread.h":
    int PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds, int intr_flag) nogil

# a waiter polls this many times (a few microseconds) before it sleeps: the other side is
# usually about to deliver, and a sleep and wake-up cost more
cdef enum:
    WAIT_SPINS = 500


cdef inline void _wake(Py_ssize_t *waiting, PyThread_type_lock lock) noexcept nogil:
    """Wake the other side if it sleeps in `_wait_past` on `lock` (after changing what it waits on)."""
    if BLZ_XCHG_SC(waiting, 0):
        PyThread_release_lock(lock)


cdef void _wait_past(Py_ssize_t *counter, Py_ssize_t target, Py_ssize_t *stop, Py_ssize_t *waiting,
                     PyThread_type_lock lock) noexcept nogil:
    """Sleep until ``*counter > target`` or `*stop`.  `lock` is held while nobody signals it: the
    sleeper says so in `*waiting`, checks again, and blocks on the lock until `_wake` releases it (the
    timeout only bounds a wake-up that raced with a timeout before)."""
    cdef int i
    for i in range(WAIT_SPINS):
        if BLZ_LOAD_SC(counter) > target or BLZ_LOAD_SC(stop):
            return
        BLZ_PAUSE()
    while BLZ_LOAD_SC(counter) <= target and not BLZ_LOAD_SC(stop):
        BLZ_XCHG_SC(waiting, 1)
        if BLZ_LOAD_SC(counter) > target or BLZ_LOAD_SC(stop):
            BLZ_XCHG_SC(waiting, 0)
            return
        PyThread_acquire_lock_timed(lock, 100000, 0)
        BLZ_XCHG_SC(waiting, 0)


cdef extern from "Python.h":
    ctypedef struct PyFloatObject:
        double ob_fval
    Py_ssize_t _refcnt "Py_REFCNT"(PyObject *o) noexcept nogil

cdef extern from *:
    """
    /* a reference count of 1 says "only this holder" only where the GIL orders every change of it */
    #ifdef Py_GIL_DISABLED
    #define BLZ_REUSE_FLOATS 0
    #else
    #define BLZ_REUSE_FLOATS 1
    #endif
    """
    bint BLZ_REUSE_FLOATS


# producer threads of `WhereChunks` running now (for the tests: none is left once its work is gone)
cdef Py_ssize_t _where_alive = 0
# bumped in the child of a fork: the producer threads of the parent do not exist there
cdef Py_ssize_t _fork_generation = 0


def _after_fork_in_child():
    global _fork_generation, _where_alive
    _fork_generation += 1
    _where_alive = 0


if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)


def where_threads():
    """How many producer threads of `WhereChunks` are running."""
    return BLZ_LOAD_SC(&_where_alive)


cdef void _where_thread(void *work) noexcept nogil:
    # a plain C thread: it never takes the GIL, and the work outlives it (its dealloc waits for it)
    (<WhereChunks>work)._ahead()


cdef struct mask_cache_t:
    Py_ssize_t j                # the mask chunk decoded last into a thread's scratch (-1: none)
    const uint8_t *p


cdef class WhereChunks(ChunkWork):
    """WhereChunks(values, vtail, masks, mtail, chunklen, mchunklen, dtype, modes, window=4, ahead=True, wheres=None)

    The values where a boolean mask is true, part by part: part k holds the selected values of rows
    ``[k * chunklen, (k + 1) * chunklen)`` (the last part: up to the end).

    `values`: the compressed bytes of the full chunks of the values (`chunklen` items of `dtype`
    each), `vtail` the rows after them (a C-contiguous array of `dtype`).  `masks`, `mtail`: the same
    for the mask (`mchunklen` booleans a chunk; no chunks and the whole mask as `mtail` for a NumPy
    mask).  `modes[k]` (uint8): 0 part k selects nothing (nothing decoded), 1 it selects all its rows
    (only the values decoded), 2 the mask decides.  `wheres[i]` names item i (the value chunks, then the
    mask chunks) in errors.

    With `ahead`, the first `next_part()` starts a thread of its own (a C thread that never takes the
    GIL) that produces the parts in order, at most `window` ahead of the caller; the caller produces a
    part itself when it needs one the thread has not begun (the thread gets no core on a busy
    machine, or has not started yet), so it never sleeps waiting for a thread that is not running.
    Without `ahead`, the caller produces every part.  `next_part()` gives an array of the next part's values (valid until the
    next call), None after the last, and raises `ChunkError` at a part whose chunk fails to decode.
    `close()` (or dropping the object) stops the thread and waits until it has returned.
    """

    cdef readonly Py_ssize_t win    # slots: parts ready ahead of the caller at most
    cdef Py_ssize_t nrows, nv, nm, vcl, mcl, isz, total, taken, idx_off
    # the parts claimed (by either side) and taken by the caller; stop / halted / exited: the caller
    # wants no more, the thread produces no more, the thread has returned; bad: the part that failed;
    # pwait / cwait: the producer / the caller sleeps on its lock; nvdec / nmdec: chunks decoded
    cdef Py_ssize_t claimed, consumed, stop, halted, exited, bad, pwait, cwait, nvdec, nmdec
    cdef Py_ssize_t *done            # per slot: 1 + the part it holds, once that part is ready
    cdef mask_cache_t cmc           # the caller's mask chunk
    cdef bint ahead, started
    cdef Py_ssize_t generation      # _fork_generation when the thread started
    cdef const char *vtail
    cdef const uint8_t *mtail
    cdef char *modes
    cdef Py_ssize_t *chunk_of
    cdef Py_ssize_t *counts
    cdef char *slots
    cdef char *pscr                 # the producer thread's scratch
    cdef char *cscr                 # the caller's
    cdef PyThread_type_lock plock
    cdef PyThread_type_lock clock
    cdef readonly object slots_arr
    cdef object slots_buf, pscr_buf, cscr_buf, tails

    def __cinit__(self, *args, **kwargs):
        # Cython has set every C field to 0 / NULL (what __dealloc__ expects of one never filled in);
        # these two start elsewhere
        self.cmc.j = -1
        self.bad = -1

    def __init__(self, list values not None, cnp.ndarray vtail not None, list masks not None,
                 cnp.ndarray mtail not None, Py_ssize_t chunklen, Py_ssize_t mchunklen, dtype,
                 const uint8_t[::1] modes not None, Py_ssize_t window=4, bint ahead=True, wheres=None):
        cdef Py_ssize_t k, nv = len(values), nm = len(masks), ntail = cnp.PyArray_DIM(vtail, 0)
        dt = np_dtype(dtype)
        self.isz = dt.itemsize
        if chunklen < 1 or mchunklen < 1 or self.isz < 1 or window < 1:
            raise ValueError("WhereChunks: chunk lengths, item size and window must be positive")
        if (cnp.PyArray_NDIM(vtail) != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(vtail)
                or cnp.PyArray_ITEMSIZE(vtail) != self.isz):
            raise ValueError(f"WhereChunks: vtail must be a 1-d C-contiguous array of {dt}")
        if (cnp.PyArray_NDIM(mtail) != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(mtail)
                or cnp.PyArray_ITEMSIZE(mtail) != 1):
            raise ValueError("WhereChunks: mtail must be a 1-d C-contiguous array of booleans")
        self.nv, self.nm, self.vcl, self.mcl = nv, nm, chunklen, mchunklen
        self.nrows = nv * chunklen + ntail
        if nm * mchunklen + cnp.PyArray_DIM(mtail, 0) != self.nrows:
            raise ValueError(f"WhereChunks: the mask holds {nm * mchunklen + cnp.PyArray_DIM(mtail, 0)} "
                             f"rows, the values {self.nrows}")
        if modes.shape[0] != nv + (ntail > 0):
            raise ValueError(f"WhereChunks: {modes.shape[0]} modes for {nv + (ntail > 0)} chunks")
        # the value chunks are items 0..nv-1, the mask's nv..; one "part" of the pool (the pool's
        # threads are not used: the producer is this object's own thread)
        self._set_chunks(values + masks, 1, wheres)
        for k in range(nv + nm):
            if self.hdr[k].nbytes != (chunklen * self.isz if k < nv else mchunklen):
                raise ChunkError(f"bad Blosc chunk{located(self._name_of(k))}: it holds {self.hdr[k].nbytes} "
                                 f"bytes, not {chunklen * self.isz if k < nv else mchunklen}")
        self.tails = (vtail, mtail)
        self.vtail = <const char *>cnp.PyArray_DATA(vtail)
        self.mtail = <const uint8_t *>cnp.PyArray_DATA(mtail)
        # the parts: the chunks that select something (the others are never waited for)
        self.modes = <char *>malloc(max(1, modes.shape[0]))
        self.chunk_of = <Py_ssize_t *>malloc(max(1, modes.shape[0]) * sizeof(Py_ssize_t))
        if self.modes == NULL or self.chunk_of == NULL:
            raise MemoryError()
        self.total = 0
        for k in range(modes.shape[0]):
            if modes[k] > 2:
                raise ValueError(f"WhereChunks: mode {modes[k]} of chunk {k} is not 0, 1 or 2")
            self.modes[k] = modes[k]
            if modes[k]:
                self.chunk_of[self.total] = k
                self.total += 1
        self.win = max(1, min(window, self.total))
        self.counts = <Py_ssize_t *>calloc(self.win, sizeof(Py_ssize_t))
        self.done = <Py_ssize_t *>calloc(self.win, sizeof(Py_ssize_t))
        if self.counts == NULL or self.done == NULL:
            raise MemoryError()
        self.slots_buf = take_scratch(self.win * chunklen * self.isz)
        self.slots = PyByteArray_AS_STRING(self.slots_buf)
        self.slots_arr = np_frombuffer(self.slots_buf, dt, self.win * chunklen).reshape(self.win, chunklen)
        # the thread's scratch: a chunk of values, a chunk of the mask, the positions of a window
        self.idx_off = (chunklen * self.isz + (mchunklen if nm else 0) + 63) // 64 * 64
        self.cscr_buf = take_scratch(self.idx_off + XK_WINDOW * sizeof(int32_t))
        self.cscr = PyByteArray_AS_STRING(self.cscr_buf)
        if ahead:
            self.pscr_buf = take_scratch(self.idx_off + XK_WINDOW * sizeof(int32_t))
            self.pscr = PyByteArray_AS_STRING(self.pscr_buf)
        self.ahead = ahead
        self.plock = PyThread_allocate_lock()
        self.clock = PyThread_allocate_lock()
        if self.plock == NULL or self.clock == NULL:
            raise MemoryError()
        # held while nobody signals (see _wait_past)
        PyThread_acquire_lock(self.plock, NOWAIT_LOCK)
        PyThread_acquire_lock(self.clock, NOWAIT_LOCK)

    def __dealloc__(self):
        self._close()
        free(self.modes)
        free(self.chunk_of)
        free(self.counts)
        free(self.done)
        if self.plock != NULL:
            PyThread_free_lock(self.plock)
        if self.clock != NULL:
            PyThread_free_lock(self.clock)
        if self.cscr_buf is not None:
            give_scratch(self.cscr_buf)
        if self.pscr_buf is not None:
            give_scratch(self.pscr_buf)
        self.slots_arr = None
        # the slots go back to the pool only when no view of them is left
        if self.slots_buf is not None and _refcnt(<PyObject *>self.slots_buf) == 1:
            give_scratch(self.slots_buf)

    cdef Py_ssize_t _produce(self, Py_ssize_t part, char *scr, mask_cache_t *mc, int *err) noexcept nogil:
        """Part `part` into its slot with the scratch `scr` and mask cache `mc` of the calling thread:
        -1, or the item (chunk) that failed to decode with Blosc's return code in `*err`."""
        cdef Py_ssize_t k = self.chunk_of[part]
        cdef Py_ssize_t r0 = k * self.vcl, r1 = min(r0 + self.vcl, self.nrows), isz = self.isz
        cdef Py_ssize_t cnt = 0, pos, j, c0, c1, w, sel, nb = (r1 - r0) * isz
        cdef char *dst = self.slots + (part % self.win) * self.vcl * isz
        cdef const char *v
        cdef const uint8_t *mp
        cdef int mode = self.modes[k], ret
        cdef int32_t *idx = <int32_t *>(scr + self.idx_off)
        if k >= self.nv:
            v = self.vtail
        elif self.hdr[k].flags & C_MEMCPYED:
            v = <const char *>self.src[k] + 16
        else:
            # a part taken whole is decoded straight into its slot
            ret = blosc_decompress_ctx(self.src[k], dst if mode == 1 else scr, nb, 1)
            if ret != nb:
                err[0] = ret if ret != 0 else -1
                return k
            BLZ_FETCH_ADD(&self.nvdec, 1)
            v = dst if mode == 1 else scr
        if mode == 1:
            if v != dst:
                memcpy(dst, v, nb)
            cnt = r1 - r0
        else:
            # the mask's chunks need not line up with the values' (another chunk length, or a NumPy
            # mask as one tail): walk the part's rows mask chunk by mask chunk, a window at a time
            pos = r0
            while pos < r1:
                j = pos // self.mcl
                if j < self.nm:
                    c0 = j * self.mcl
                    c1 = c0 + self.mcl
                    if j != mc.j:
                        mc.j = -1
                        if self.hdr[self.nv + j].flags & C_MEMCPYED:
                            mc.p = self.src[self.nv + j] + 16
                        else:
                            mc.p = <const uint8_t *>scr + self.vcl * isz
                            ret = blosc_decompress_ctx(self.src[self.nv + j], <char *>mc.p, self.mcl, 1)
                            if ret != self.mcl:
                                err[0] = ret if ret != 0 else -1
                                return self.nv + j
                            BLZ_FETCH_ADD(&self.nmdec, 1)
                        mc.j = j
                    mp = mc.p
                else:
                    c0 = self.nm * self.mcl
                    c1 = self.nrows
                    mp = self.mtail
                c1 = min(c1, r1)
                while pos < c1:
                    w = min(<Py_ssize_t>XK_WINDOW, c1 - pos)
                    sel = xk_positions(mp + (pos - c0), w, idx)
                    if sel:
                        gather(dst + cnt * isz, v + (pos - r0) * isz, idx, sel, w, isz)
                        cnt += sel
                    pos += w
        self.counts[part % self.win] = cnt
        return -1

    cdef void _ahead(self) noexcept nogil:
        """The producer thread's whole job: claim the next part not claimed yet (the caller may take
        one itself), produce it, say it is done."""
        cdef Py_ssize_t k, item
        cdef int err = 0
        cdef mask_cache_t mc
        mc.j = -1
        while not BLZ_LOAD_SC(&self.stop):
            k = BLZ_LOAD_SC(&self.claimed)
            if k >= self.total:
                break
            if BLZ_LOAD_SC(&self.consumed) <= k - self.win:
                # the window is full: sleep until half of it is free, then fill it in one go (a busy
                # machine then switches between the two threads once per half window, not per part)
                _wait_past(&self.consumed, k - self.win + self.win // 2, &self.stop, &self.pwait, self.plock)
                continue
            if not BLZ_CAS(&self.claimed, k, k + 1):
                continue
            item = self._produce(k, self.pscr, &mc, &err)
            if item >= 0:
                self.failed = item
                self.failed_ret = err
                BLZ_XCHG_SC(&self.bad, k)
                break
            BLZ_XCHG_SC(&self.done[k % self.win], k + 1)
            _wake(&self.cwait, self.clock)
        BLZ_XCHG_SC(&self.halted, 1)
        _wake(&self.cwait, self.clock)
        BLZ_FETCH_ADD(&_where_alive, -1)
        BLZ_XCHG_SC(&self.exited, 1)       # the last touch of this object by the thread

    cdef int _start(self) except -1:
        self.started = True
        self.generation = _fork_generation
        BLZ_FETCH_ADD(&_where_alive, 1)
        if PyThread_start_new_thread(_where_thread, <void *>self) == -1:
            # no thread to be had: the caller produces each part itself
            BLZ_FETCH_ADD(&_where_alive, -1)
            self.started = False
            self.ahead = False
        return 0

    cdef void _close(self) noexcept:
        """Stop the producer thread and wait until it has returned."""
        cdef int i = 0
        BLZ_XCHG_SC(&self.stop, 1)
        if not self.started or self.generation != _fork_generation:
            return          # no thread, or it stayed in the parent of a fork
        _wake(&self.pwait, self.plock)
        with nogil:
            while not BLZ_LOAD_SC(&self.exited):
                if i < WAIT_SPINS:
                    BLZ_PAUSE()
                    i += 1
                else:
                    # a sleep: nobody releases this lock while this thread does not say it waits
                    PyThread_acquire_lock_timed(self.clock, 100, 0)

    def close(self):
        """Stop producing (the producer thread, if any, has returned when this returns)."""
        self._close()

    @property
    def running(self):
        """Whether the producer thread runs."""
        return self.started and self.generation == _fork_generation and not BLZ_LOAD_SC(&self.exited)

    @property
    def decoded(self):
        """(value chunks, mask chunks) decoded so far (exact once the work is closed)."""
        return self.nvdec, self.nmdec

    cdef int _take(self, const char **ptr, Py_ssize_t *cnt) except -1:
        """The next part's values at `*ptr` (valid until the next call), `*cnt` of them: 1, or 0 after
        the last part; raises `ChunkError` at a part whose chunk failed to decode."""
        cdef Py_ssize_t k = self.taken, s = k % max(1, self.win), item, c
        cdef int err = 0
        if k >= self.total:
            return 0
        if BLZ_LOAD_SC(&self.stop):
            raise RuntimeError("WhereChunks: closed")
        # the parts before k are free again
        BLZ_XCHG_SC(&self.consumed, k)
        if self.started and self.generation != _fork_generation:
            raise RuntimeError("WhereChunks: the iteration began before a fork; its thread stayed in "
                               "the parent process (start the iteration again in the child)")
        if self.ahead and not self.started:
            self._start()
        if self.started:
            _wake(&self.pwait, self.plock)
        while BLZ_LOAD_SC(&self.done[s]) != k + 1:
            c = k
            if BLZ_LOAD_SC(&self.claimed) == k and BLZ_CAS(&self.claimed, c, k + 1):
                # not begun by the thread: made here, at once
                with nogil:
                    item = self._produce(k, self.cscr, &self.cmc, &err)
                if item >= 0:
                    self.failed = item
                    self.failed_ret = err
                    self.check()
                break
            # the thread has part k in hand
            with nogil:
                _wait_past(&self.done[s], k, &self.halted, &self.cwait, self.clock)
            if BLZ_LOAD_SC(&self.done[s]) != k + 1 and BLZ_LOAD_SC(&self.halted):
                if BLZ_LOAD_SC(&self.bad) == k:
                    self.check()
                raise RuntimeError("WhereChunks: closed")
        self.taken = k + 1
        ptr[0] = self.slots + s * self.vcl * self.isz
        cnt[0] = self.counts[s]
        return 1

    def next_part(self):
        """The selected values of the next part (a view, valid until the next call), or None after the last."""
        cdef const char *ptr
        cdef Py_ssize_t cnt, s = self.taken % max(1, self.win)
        if not self._take(&ptr, &cnt):
            return None
        return self.slots_arr[s, :cnt]


cdef enum:
    IT_F8 = 0
    IT_F4 = 1
    IT_SIGNED = 2
    IT_UNSIGNED = 3
    IT_BOOL = 4

# the dtypes whose values `WhereIter` makes into Python scalars itself (native order): what iterating
# a memoryview of them gives (float, int, bool)
WHERE_ITER_CHARS = frozenset("?bBhHiIlLqQfd")


cdef class WhereIter:
    """WhereIter(work, skip=0, limit=-1)

    The values of a `WhereChunks` one by one, as Python scalars (float, int or bool: what iterating a
    memoryview of them gives), after skipping `skip` and at most `limit` of them (-1: all).  The work
    is closed (its thread stopped and gone) when the iteration ends, fails, or the iterator is closed
    or dropped."""

    cdef readonly WhereChunks work      # (the tests look at it)
    cdef bint done
    cdef object last
    cdef const char *cur
    cdef Py_ssize_t pos, end, isz, skip, left
    cdef int kind

    def __init__(self, WhereChunks work not None, Py_ssize_t skip=0, Py_ssize_t limit=-1):
        dt = work.slots_arr.dtype
        if not dt.isnative or dt.char not in WHERE_ITER_CHARS:
            raise ValueError(f"WhereIter: no Python scalars for dtype {dt}")
        self.kind = (IT_F8 if dt.char == "d" else IT_F4 if dt.char == "f" else IT_BOOL if dt.char == "?"
                     else IT_UNSIGNED if dt.kind == "u" else IT_SIGNED)
        self.isz = dt.itemsize
        self.work = work
        self.skip = skip
        self.left = limit

    def __iter__(self):
        return self

    cdef int _finish(self) except -1:
        self.done = True
        self.end = self.pos = 0
        self.work._close()
        return 0

    cdef int _advance(self) except -1:
        """The next part with values in `cur` (1), or 0 at the end (the work closed)."""
        cdef const char *ptr
        cdef Py_ssize_t cnt
        while not self.done and self.left != 0:
            try:
                if not self.work._take(&ptr, &cnt):
                    break
            except BaseException:
                self._finish()
                raise
            if self.skip:
                if self.skip >= cnt:
                    self.skip -= cnt
                    continue
                ptr += self.skip * self.isz
                cnt -= self.skip
                self.skip = 0
            if self.left >= 0:
                if cnt >= self.left:
                    cnt = self.left
                    BLZ_XCHG_SC(&self.work.stop, 1)     # nothing more is needed
                self.left -= cnt
            if cnt:
                self.cur, self.pos, self.end = ptr, 0, cnt
                return 1
        self._finish()
        return 0

    def __next__(self):
        cdef const char *p
        cdef double v
        if self.pos >= self.end:
            if not self._advance():
                raise StopIteration
        p = self.cur + self.pos * self.isz
        self.pos += 1
        if self.kind == IT_F8 or self.kind == IT_F4:
            v = (<const double *>p)[0] if self.kind == IT_F8 else (<const float *>p)[0]
            # the float given last is given again with the new value when nobody else holds it any
            # more (the caller used and dropped it: fromiter, sum, a loop that computes), as CPython's
            # zip() and dict.items() reuse their tuples: no float is made and freed per value
            if BLZ_REUSE_FLOATS and _refcnt(<PyObject *>self.last) == 1:    # (`last`: None or a float made here)
                (<PyFloatObject *>self.last).ob_fval = v
                return self.last
            self.last = PyFloat_FromDouble(v)
            return self.last
        if self.kind == IT_BOOL:
            return PyBool_FromLong(p[0] != 0)
        if self.kind == IT_SIGNED:
            if self.isz == 8:
                return PyLong_FromLongLong((<const int64_t *>p)[0])
            if self.isz == 4:
                return PyLong_FromLongLong((<const int32_t *>p)[0])
            if self.isz == 2:
                return PyLong_FromLongLong((<const int16_t *>p)[0])
            return PyLong_FromLongLong((<const int8_t *>p)[0])
        if self.isz == 8:
            return PyLong_FromUnsignedLongLong((<const uint64_t *>p)[0])
        if self.isz == 4:
            return PyLong_FromUnsignedLongLong((<const uint32_t *>p)[0])
        if self.isz == 2:
            return PyLong_FromUnsignedLongLong((<const uint16_t *>p)[0])
        return PyLong_FromUnsignedLongLong((<const uint8_t *>p)[0])

    def close(self):
        """End the iteration (the producer thread stops and is gone when this returns)."""
        self._finish()

