# What the other Cython modules use of `_chunk` at the C level: the parsed header of a chunk, how it is
# parsed and checked (with the GIL, raising ChunkError; or without it, as a yes/no), and the item
# reader of one chunk that the batch classes run on their threads.

from libc.stdint cimport int32_t, uint8_t, uint32_t
cimport numpy as cnp

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
    C_MEMCPYED = 0x02          # the header flag of a chunk stored raw, for code without the GIL
    C_DONT_SPLIT = 0x10        # the header flag of a chunk whose blocks are one stream each
    MIN_SPLIT_ITEMS = 128      # blocksize / typesize from which a block is split into typesize streams
    MAX_SPLITS = 16


cdef inline int32_t read_i32(const uint8_t *p) noexcept nogil:
    # little-endian whatever the machine: the header's fields are stored so
    return <int32_t>(<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24))


cdef str located(object where)
cdef const uint8_t[::1] bytes_view(object buf)
cdef int parse_header(const uint8_t *p, Py_ssize_t buflen, header_t *h, object where,
                      bint lazy) except -1
cdef int chunk_valid(const uint8_t *p, Py_ssize_t buflen, Py_ssize_t expected_nbytes,
                     header_t *h) noexcept nogil
cdef int take_core(const uint8_t *src, header_t *h, const cnp.intp_t *pos, Py_ssize_t n, Py_ssize_t base,
                   Py_ssize_t itemsize, char *out, const cnp.intp_t *rows, Py_ssize_t first_row,
                   char *scratch, Py_ssize_t *ndec, bint whole) noexcept nogil
cdef int decode_chunk(const uint8_t *src, Py_ssize_t srclen, char *out, Py_ssize_t nbytes,
                      int nthreads) noexcept nogil
cdef int decode_chunk_ahead(const uint8_t *src, Py_ssize_t srclen, char *out, Py_ssize_t nbytes) noexcept nogil
