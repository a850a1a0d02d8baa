# What `_superchunk.ReadChunks` uses of `_rows`: a byte range of every row of one chunk it has read.

from libc.stdint cimport uint8_t
from blzarr._chunk cimport header_t

cdef int rows_of_chunk(const uint8_t *p, const header_t *h, char *dst, Py_ssize_t rowsize,
                       Py_ssize_t cstart, Py_ssize_t csize, char *scratch,
                       Py_ssize_t scratch_bytes) noexcept nogil
