# The work-sharing pool that every many-chunk kernel runs on (see _workpool.pyx), and the atomics its
# users share.  A kernel is a subclass of `Work` (items of its own) or of `ChunkWork` (one in-memory
# chunk per item) that implements `_do`.

from libc.stdint cimport uint8_t
from blzarr._chunk cimport header_t

cdef extern from "blz_atomic.h" nogil:
    Py_ssize_t BLZ_FETCH_ADD(Py_ssize_t *p, Py_ssize_t v)
    bint BLZ_CAS(Py_ssize_t *p, Py_ssize_t o, Py_ssize_t n)
    Py_ssize_t BLZ_LOAD(Py_ssize_t *p)
    Py_ssize_t BLZ_XCHG_SC(Py_ssize_t *p, Py_ssize_t v)
    Py_ssize_t BLZ_LOAD_SC(Py_ssize_t *p)
    void BLZ_PAUSE()

cdef bytearray take_scratch(Py_ssize_t n)
cdef void give_scratch(bytearray b, Py_ssize_t keep_bytes=*)


cdef class Work:
    cdef readonly Py_ssize_t nparts, nitems
    cdef Py_ssize_t callers, failed, scratch_bytes, keep_bytes
    cdef int failed_ret
    cdef Py_ssize_t *nxt
    cdef Py_ssize_t *end
    cdef object wheres

    cdef int _share(self, Py_ssize_t nitems, Py_ssize_t nparts) except -1
    cdef object _name_of(self, Py_ssize_t k)
    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil
    cdef void _loop(self, Py_ssize_t t, char *scratch) noexcept nogil
    cdef int _ready(self) except -1
    cdef void _started(self, char *scratch) noexcept
    cdef void _finished(self, char *scratch) noexcept


cdef class ChunkWork(Work):
    cdef const uint8_t **src
    cdef header_t *hdr
    cdef list keep

    cdef int _set_chunks(self, list bufs, Py_ssize_t nparts, object wheres) except -1
