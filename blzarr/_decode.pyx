# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Many in-memory chunks decoded into one output array, on the threads of the work pool.

`DecodeChunks` decodes a byte range of each chunk (a slice ``a[i:j]`` over several chunks: whole
chunks in one Blosc call each, the partial ones at the ends through their blocks); `TakeChunks` takes
items at given positions (fancy indexing, a boolean mask), decoding each touched block once, with
`_chunk.take_core`.  Both write straight into the caller's preallocated output: no chunk-sized
temporary is made per chunk.

What it does not do: reductions (`_sums`), column ranges of rows (`_rows`) or expressions
(`_exprkernel`); and it reads no file (`_superchunk.ReadChunks` does).  Each chunk's header is
checked against its length before any thread starts (`ChunkWork`); a chunk that then fails to decode
fails its item, which `check()` raises as `ChunkError`.
"""

from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

cimport numpy as cnp

from blzarr._blosc cimport blosc_decompress_ctx, blosc_getitem
from blzarr._chunk cimport header_t, C_MEMCPYED, take_core, decode_chunk
from blzarr._workpool cimport ChunkWork

cnp.import_array()


cdef class DecodeChunks(ChunkWork):
    """DecodeChunks(bufs, dest, offsets, starts, sizes, nparts=1, wheres=None)

    Decode bytes ``[starts[k], starts[k] + sizes[k])`` of chunk ``bufs[k]`` into the C-contiguous
    array `dest` at byte ``offsets[k]``, for every k: a whole chunk in one Blosc call, part of one
    through its blocks.  Call `run()` from up to `nparts` threads, then `check()`.
    """

    cdef char *out
    cdef Py_ssize_t *offs
    cdef Py_ssize_t *starts
    cdef Py_ssize_t *sizes
    cdef object dest

    def __init__(self, list bufs not None, cnp.ndarray dest not None, const cnp.intp_t[::1] offsets not None,
                 const cnp.intp_t[::1] starts not None, const cnp.intp_t[::1] sizes not None,
                 Py_ssize_t nparts=1, wheres=None):
        cdef Py_ssize_t k, total, n = len(bufs), ts
        if offsets.shape[0] != n or starts.shape[0] != n or sizes.shape[0] != n:
            raise ValueError("DecodeChunks: one offset, start and size per chunk are needed")
        self._set_chunks(bufs, nparts, wheres)
        if not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest):
            raise ValueError("DecodeChunks: the output array must be C-contiguous and writeable")
        self.dest = dest            # alive as long as the threads may write into it
        self.out = <char *>cnp.PyArray_DATA(dest)
        total = cnp.PyArray_NBYTES(dest)
        # every range checked here, with the GIL: the threads write without checking
        self.offs = <Py_ssize_t *>malloc(max(1, n) * sizeof(Py_ssize_t))
        self.starts = <Py_ssize_t *>malloc(max(1, n) * sizeof(Py_ssize_t))
        self.sizes = <Py_ssize_t *>malloc(max(1, n) * sizeof(Py_ssize_t))
        if self.offs == NULL or self.starts == NULL or self.sizes == NULL:
            raise MemoryError()
        for k in range(n):
            if starts[k] < 0 or sizes[k] < 0 or starts[k] + sizes[k] > self.hdr[k].nbytes:
                raise IndexError(f"DecodeChunks: bytes [{starts[k]}, {starts[k] + sizes[k]}) outside "
                                 f"chunk {k}'s {self.hdr[k].nbytes}")
            if offsets[k] < 0 or offsets[k] + sizes[k] > total:
                raise ValueError(f"DecodeChunks: {sizes[k]} bytes at {offsets[k]} do not fit in the "
                                 f"output's {total} bytes")
            self.offs[k] = offsets[k]
            self.starts[k] = starts[k]
            self.sizes[k] = sizes[k]
            ts = self.hdr[k].typesize
            if (sizes[k] and sizes[k] != self.hdr[k].nbytes and not (self.hdr[k].flags & C_MEMCPYED)
                    and (starts[k] % ts or sizes[k] % ts)):
                # Blosc reads parts only in whole typesize units: such a part is cut from a whole decode
                self.scratch_bytes = max(self.scratch_bytes, self.hdr[k].nbytes)

    def __dealloc__(self):
        free(self.offs)
        free(self.starts)
        free(self.sizes)

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        cdef header_t *h = &self.hdr[k]
        cdef Py_ssize_t nb = self.sizes[k], st = self.starts[k], ts = h.typesize
        cdef char *dst = self.out + self.offs[k]
        cdef int ret
        if nb == 0:
            return 0
        # one Blosc thread per call: the parallelism is the pool's, one chunk per thread
        if nb == h.nbytes:
            ret = decode_chunk(self.src[k], h.ctbytes, dst, nb, 1)
        elif h.flags & C_MEMCPYED:
            memcpy(dst, self.src[k] + 16 + st, nb)
            return 0
        elif st % ts or nb % ts:
            ret = blosc_decompress_ctx(self.src[k], scratch, h.nbytes, 1)
            if ret != h.nbytes:
                return ret if ret != 0 else -1
            memcpy(dst, scratch + st, nb)
            return 0
        else:
            # a part of whole items: only its blocks are decoded
            ret = blosc_getitem(self.src[k], <int>(st // ts), <int>(nb // ts), dst)
        return 0 if ret == nb else (ret if ret != 0 else -1)


cdef class TakeChunks(ChunkWork):
    """TakeChunks(bufs, positions, starts, stops, bases, itemsize, dest, rows=None, nparts=1, wheres=None)

    Group k takes the items ``positions[starts[k]:stops[k]] - bases[k]`` of chunk ``bufs[k]`` into the
    C-contiguous array `dest` (rows of `itemsize` bytes): position i goes to row ``rows[i]``, or to row
    i without `rows`.  `positions` is ascending.  Each group is one chunk's work for `take_core`: its
    touched blocks decoded once (or the whole chunk when they are most of it) into the thread's buffer.
    """

    cdef const cnp.intp_t *pos
    cdef const cnp.intp_t *rowp
    cdef Py_ssize_t *gstart
    cdef Py_ssize_t *gstop
    cdef Py_ssize_t *gbase
    cdef char *gwhole
    cdef Py_ssize_t isz
    cdef char *out
    cdef object arrays

    def __init__(self, list bufs not None, const cnp.intp_t[::1] positions not None,
                 const cnp.intp_t[::1] starts not None, const cnp.intp_t[::1] stops not None,
                 const cnp.intp_t[::1] bases not None, Py_ssize_t itemsize, cnp.ndarray dest not None,
                 const cnp.intp_t[::1] rows=None, Py_ssize_t nparts=1, wheres=None):
        cdef Py_ssize_t n = len(bufs), k, i, r, nrows, npos = positions.shape[0], ts
        if starts.shape[0] != n or stops.shape[0] != n or bases.shape[0] != n:
            raise ValueError("TakeChunks: one start, stop and base per chunk are needed")
        if rows is not None and rows.shape[0] != npos:
            raise ValueError("TakeChunks: rows and positions differ in length")
        if itemsize <= 0:
            raise ValueError(f"TakeChunks: itemsize must be positive, got {itemsize}")
        if not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest):
            raise ValueError("TakeChunks: the output array must be C-contiguous and writeable")
        self._set_chunks(bufs, nparts, wheres)
        nrows = cnp.PyArray_NBYTES(dest) // itemsize
        for i in range(npos):
            r = rows[i] if rows is not None else i
            if r < 0 or r >= nrows:
                raise IndexError(f"TakeChunks: row {r} outside the output's {nrows}")
            if i and positions[i] < positions[i - 1]:
                raise IndexError("TakeChunks: the positions are not ascending")
        self.gstart = <Py_ssize_t *>malloc(max(1, n) * sizeof(Py_ssize_t))
        self.gstop = <Py_ssize_t *>malloc(max(1, n) * sizeof(Py_ssize_t))
        self.gbase = <Py_ssize_t *>malloc(max(1, n) * sizeof(Py_ssize_t))
        self.gwhole = <char *>malloc(max(1, n))
        if self.gstart == NULL or self.gstop == NULL or self.gbase == NULL or self.gwhole == NULL:
            raise MemoryError()
        for k in range(n):
            ts = self.hdr[k].typesize
            # Blosc reads parts only in typesize units: a chunk whose items or blocks are not whole
            # typesize units is decoded whole
            self.gwhole[k] = (itemsize % ts or self.hdr[k].blocksize % ts or self.hdr[k].nbytes % ts) != 0
            if not (0 <= starts[k] < stops[k] <= npos):
                raise IndexError(f"TakeChunks: group {k} [{starts[k]}, {stops[k]}) outside the {npos} positions")
            if (positions[starts[k]] < bases[k]
                    or (positions[stops[k] - 1] - bases[k] + 1) * itemsize > self.hdr[k].nbytes):
                raise IndexError(f"TakeChunks: group {k} has items outside chunk {k}'s "
                                 f"{self.hdr[k].nbytes // itemsize}")
            self.gstart[k] = starts[k]
            self.gstop[k] = stops[k]
            self.gbase[k] = bases[k]
            self.scratch_bytes = max(self.scratch_bytes, self.hdr[k].nbytes)
        self.isz = itemsize
        self.out = <char *>cnp.PyArray_DATA(dest)
        self.pos = &positions[0] if npos else NULL
        self.rowp = &rows[0] if rows is not None and npos else NULL
        self.arrays = (positions, rows, dest)      # the memory the threads read and write

    def __dealloc__(self):
        free(self.gstart)
        free(self.gstop)
        free(self.gbase)
        free(self.gwhole)

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        cdef Py_ssize_t s = self.gstart[k], ndec = 0
        return take_core(self.src[k], &self.hdr[k], self.pos + s, self.gstop[k] - s, self.gbase[k], self.isz,
                         self.out, self.rowp + s if self.rowp != NULL else NULL, s, scratch, &ndec,
                         self.gwhole[k] != 0)

