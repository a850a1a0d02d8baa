# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The sum of each of many in-memory chunks, bit for bit what ``np.sum`` gives for its values.

`SumChunks` decodes each chunk on a thread of the work pool into that thread's buffer (it stays in
the core's cache) and sums it there: the decoded values never go to memory.  Floats are summed with
NumPy's pairwise loop step for step (`pairwise`, in `_sums.pxd`), so a carray's ``sum()`` is NumPy's
to the last bit, not merely close; integers wrap as NumPy's int64 / uint64 additions do.
`sum_values` is the same per-chunk sum for the chunks that `_superchunk.ReadChunks` reads from files.

What it does not do: combine the chunks' sums (the caller adds them in NumPy's order) or sum
expressions (`_exprkernel` does, with the same pairwise loop).
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cimport numpy as cnp

from blzarr._chunk cimport C_MEMCPYED, decode_chunk_ahead
from blzarr._workpool cimport ChunkWork

cnp.import_array()

from numpy import dtype as np_dtype, zeros as np_zeros

np_f8 = np_dtype("f8")
np_f4 = np_dtype("f4")
np_i8 = np_dtype("i8")
np_u8 = np_dtype("u8")


def pairwise_sum(cnp.ndarray a not None):
    """NumPy's sum of a C-contiguous float64 or float32 array, computed by this module's loop (for the
    tests: it must be bit-identical to ``np.sum``)."""
    cdef double d
    cdef float f
    if not cnp.PyArray_IS_C_CONTIGUOUS(a) or a.dtype not in (np_f8, np_f4):
        raise ValueError("pairwise_sum: a C-contiguous native float64 or float32 array is needed")
    if a.dtype == np_f8:
        d = 0.0
        d += pairwise(<const double *>cnp.PyArray_DATA(a), cnp.PyArray_SIZE(a))
        return d
    f = 0.0
    f += pairwise(<const float *>cnp.PyArray_DATA(a), cnp.PyArray_SIZE(a))
    return f


cdef void sum_values(int kind, Py_ssize_t isz, bint is_signed, const char *v, Py_ssize_t n, char *sums,
                     Py_ssize_t k) noexcept nogil:
    """sums[k] = NumPy's sum of the `n` values at `v` (see SumChunks)."""
    cdef Py_ssize_t i
    cdef double d
    cdef float f
    cdef uint64_t u = 0
    # the float result goes through a typed local before it is stored: the sum of a float32 chunk is
    # float32 arithmetic all the way, as NumPy's is
    if kind == SUM_F8:
        d = 0.0
        d += pairwise(<const double *>v, n)
        (<double *>sums)[k] = d
    elif kind == SUM_F4:
        f = 0.0
        f += pairwise(<const float *>v, n)
        (<float *>sums)[k] = f
    else:
        # integer sums wrap modulo 2**64 as NumPy's int64 / uint64 additions do: any order is exact
        if isz == 8:
            for i in range(n):
                u += <uint64_t>(<const uint64_t *>v)[i]
        elif isz == 4:
            if is_signed:
                for i in range(n):
                    u += <uint64_t>(<int64_t>(<const int32_t *>v)[i])
            else:
                for i in range(n):
                    u += <uint64_t>(<const uint32_t *>v)[i]
        elif isz == 2:
            if is_signed:
                for i in range(n):
                    u += <uint64_t>(<int64_t>(<const int16_t *>v)[i])
            else:
                for i in range(n):
                    u += <uint64_t>(<const uint16_t *>v)[i]
        else:
            if is_signed:
                for i in range(n):
                    u += <uint64_t>(<int64_t>(<const int8_t *>v)[i])
            else:
                for i in range(n):
                    u += <uint64_t>(<const uint8_t *>v)[i]
        (<uint64_t *>sums)[k] = u


cdef class SumChunks(ChunkWork):
    """SumChunks(bufs, dtype, nparts=1, wheres=None): the sum of every chunk of `bufs`, as NumPy's
    ``np.sum`` of its values gives it (pairwise for floats, bit for bit), in `sums` (float64 for
    float64, float32 for float32, int64 / uint64 for signed / unsigned integers).

    Each thread decodes a chunk into a buffer of its own (in its cache) and sums it there: the decoded
    values never go to memory.
    """

    cdef int kind
    cdef Py_ssize_t isz
    cdef bint is_signed
    cdef object sums_arr
    cdef char *sums

    def __init__(self, list bufs not None, dtype, Py_ssize_t nparts=1, wheres=None):
        cdef Py_ssize_t k
        dt = np_dtype(dtype)
        if not dt.isnative:
            raise ValueError(f"SumChunks: dtype {dt} is not in native byte order")
        if dt == np_f8:
            self.kind, acc = SUM_F8, np_f8
        elif dt == np_f4:
            self.kind, acc = SUM_F4, np_f4
        elif dt.kind == "i":
            self.kind, acc = SUM_SIGNED, np_i8
        elif dt.kind == "u":
            self.kind, acc = SUM_UNSIGNED, np_u8
        else:
            raise ValueError(f"SumChunks: cannot sum dtype {dt}")
        if dt.itemsize not in (1, 2, 4, 8):
            raise ValueError(f"SumChunks: cannot sum dtype {dt}")
        self.isz = dt.itemsize
        self.is_signed = dt.kind != "u"
        self._set_chunks(bufs, nparts, wheres)
        for k in range(self.nitems):
            if self.hdr[k].nbytes % self.isz:
                raise ValueError(f"SumChunks: chunk {k} holds {self.hdr[k].nbytes} bytes, not whole "
                                 f"{dt} values")
            self.scratch_bytes = max(self.scratch_bytes, self.hdr[k].nbytes)
        # one slot per chunk: the threads write different slots, and the caller adds them in order
        self.sums_arr = np_zeros(self.nitems, acc)
        self.sums = <char *>cnp.PyArray_DATA(<cnp.ndarray>self.sums_arr)

    @property
    def sums(self):
        """The sum of each chunk (valid after every `run()` has returned and `check()` passed)."""
        return self.sums_arr

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        cdef Py_ssize_t nb = self.hdr[k].nbytes, n = nb // self.isz
        cdef const char *v
        cdef int ret
        if nb == 0:
            return 0
        if self.hdr[k].flags & C_MEMCPYED:
            v = <const char *>self.src[k] + 16        # summed where it lies
        else:
            # into this thread's buffer, still in its cache when the sum reads it
            ret = decode_chunk_ahead(self.src[k], self.hdr[k].ctbytes, scratch, nb)
            if ret != nb:
                return ret if ret != 0 else -1
            v = scratch
        sum_values(self.kind, self.isz, self.is_signed, v, n, self.sums, k)
        return 0

