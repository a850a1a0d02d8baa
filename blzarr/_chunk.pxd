# What `_superchunk` uses of `_chunk` at the C level (reading, checking and reducing chunks of files
# without the GIL): the parsed header, the acceptance test of a chunk, the per-chunk sum.

from libc.stdint cimport uint8_t

cdef struct header_t:
    int version
    int versionlz
    int flags
    int typesize
    Py_ssize_t nbytes
    Py_ssize_t blocksize
    Py_ssize_t ctbytes
    Py_ssize_t nblocks

cdef enum:
    SUM_F8 = 0
    SUM_F4 = 1
    SUM_SIGNED = 2       # accumulated in int64, wrapping as NumPy's does
    SUM_UNSIGNED = 3     # accumulated in uint64

cdef int chunk_valid(const uint8_t *p, Py_ssize_t buflen, Py_ssize_t expected_nbytes,
                     header_t *h) noexcept nogil
cdef void sum_values(int kind, Py_ssize_t isz, bint is_signed, const char *v, Py_ssize_t n, char *sums,
                     Py_ssize_t k) noexcept nogil
cdef int rows_of_chunk(const uint8_t *p, const header_t *h, char *dst, Py_ssize_t rowsize,
                       Py_ssize_t cstart, Py_ssize_t csize, char *scratch,
                       Py_ssize_t scratch_bytes) noexcept nogil
