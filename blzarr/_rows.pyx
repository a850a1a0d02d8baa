# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Rows: a byte range of every row of in-memory or file chunks, and fields written into rows.

`rows_of_chunk` takes bytes [cstart, cstart + csize) of every row of one chunk (``a[:, j]`` of a 2-D
carray, a column of rows), straight out of its LZ4 blocks where the chunk allows it (blz_gather.h);
`RowsChunks` runs it over many in-memory chunks on the work pool, and `_superchunk.ReadChunks` over
the chunks it reads from files.  `zip_fields` is the other direction: the columns of a ctable written
as fields of the rows of one structured array, a cache-sized tile of rows at a time.

What it does not do: decode whole chunks into arrays (`_decode`), or rows at scattered positions
(`_decode.TakeChunks` with a row size as the item size).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

cimport numpy as cnp

from blzarr._blosc cimport blosc_decompress_ctx
from blzarr._chunk cimport (header_t, read_i32, bytes_view, parse_header, C_MEMCPYED, C_DONT_SPLIT,
                            MIN_SPLIT_ITEMS)
from blzarr._workpool cimport ChunkWork

cnp.import_array()


# Columns of rows straight out of byte-shuffled LZ4 blocks (``a[:, j]`` of a 2-D carray).  A block of
# typesize t that Blosc byte-shuffled holds byte b of its element e at ``b * (bsize // t) + e`` (its
# ``bsize % t`` last bytes are stored as they are, which whole rows of whole elements never leave).
# When every block is one LZ4 stream (the "don't split" flag, blzarr's default) each block is decoded
# alone into a small buffer that stays in the core's first-level cache, and only the bytes of the
# wanted elements are gathered from it into the result: no unshuffle of the whole block, no
# chunk-sized buffer, no strided copy afterwards.  Any other chunk is the caller's (decoded whole).
cdef extern from "blz_gather.h":
    int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity) nogil
    int BLZ_GATHER_LE
    void blz_gather8(const uint8_t *s, int64_t neq, int64_t nrows, int64_t epr, int64_t c0, int64_t nc,
                     uint8_t *out) noexcept nogil
    int blz_avx2_ok() noexcept nogil
    int blz_gather_avx2


# whether the CPU has AVX2, asked once here at import (the threads then only read the answer)
blz_gather_avx2 = blz_avx2_ok()
GATHER_AVX2 = bool(blz_gather_avx2)


def _use_gather_avx2(bint on):
    """Use the AVX2 gather (where the CPU has it) or the scalar loop; the previous setting (tests)."""
    global blz_gather_avx2
    old = bool(blz_gather_avx2)
    blz_gather_avx2 = 1 if on and GATHER_AVX2 else 0
    return old


cdef bint _rows_by_block(const header_t *h, Py_ssize_t rowsize, Py_ssize_t cstart,
                         Py_ssize_t csize) noexcept nogil:
    """Whether `rows_of_chunk` takes bytes [cstart, cstart + csize) of rows of `rowsize` bytes out of
    the chunk of header `h` block by block: LZ4, byte shuffle, 8-byte values, one stream per block,
    whole values of whole rows in every block, on a little-endian machine."""
    if (not BLZ_GATHER_LE or h.flags & C_MEMCPYED or (h.flags >> 5) != 1 or (h.flags & 0x05) != 0x01
            or h.typesize != 8 or h.nblocks <= 0 or rowsize <= 0 or rowsize % 8 or cstart % 8 or csize % 8
            or csize <= 0 or cstart + csize > rowsize or h.blocksize % rowsize or h.nbytes % rowsize):
        return False
    # the scalar gather costs ~2 operations per byte taken, Blosc's SIMD unshuffle of a whole block a
    # small fraction of one per byte: block by block only for one value of rows of 8 with AVX2, or
    # for at most an eighth of each row (measured: a[:, 2:6] or a[:, 1] of rows of 4 were slower)
    if not ((blz_gather_avx2 and rowsize == 64 and csize == 8) or csize * 8 <= rowsize):
        return False
    # a full block is split into 8 streams unless the chunk says "don't split" or the block is small
    return bool(h.flags & C_DONT_SPLIT) or h.blocksize // 8 < MIN_SPLIT_ITEMS


def rows_by_block(buf, Py_ssize_t rowsize, Py_ssize_t cstart, Py_ssize_t csize):
    """Whether `RowsChunks` (and the BLZ reader) take bytes [cstart, cstart + csize) of the rows of
    `rowsize` bytes out of the chunk `buf` block by block, rather than decoding it whole first."""
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, None, False)
    return bool(_rows_by_block(&h, rowsize, cstart, csize))


cdef int rows_of_chunk(const uint8_t *p, const header_t *h, char *dst, Py_ssize_t rowsize,
                       Py_ssize_t cstart, Py_ssize_t csize, char *scratch,
                       Py_ssize_t scratch_bytes) noexcept nogil:
    """Bytes [cstart, cstart + csize) of every row of `rowsize` bytes of the chunk at `p` (its header
    parsed into `h`, its nbytes whole rows), packed one row after the other into `dst`: a raw chunk
    in place, an LZ4 chunk of byte-shuffled 8-byte values one block at a time (`_rows_by_blocks`),
    any other decoded whole into `scratch` (`scratch_bytes`, at least the chunk's nbytes) first.
    0 done, else Blosc's negative code or -1."""
    cdef int ret
    if h.nbytes == 0:
        return 0
    if h.flags & C_MEMCPYED:
        copy_rows(<const char *>p + 16, h.nbytes // rowsize, rowsize, cstart, csize, dst)
        return 0
    ret = _rows_by_blocks(p, h, dst, rowsize, cstart, csize, scratch, scratch_bytes)
    if ret <= 0:
        return ret
    # not a chunk for the block path: decoded whole, then the wanted bytes copied out row by row
    ret = blosc_decompress_ctx(p, scratch, h.nbytes, 1)
    if ret != h.nbytes:
        return ret if ret != 0 else -1
    copy_rows(scratch, h.nbytes // rowsize, rowsize, cstart, csize, dst)
    return 0


cdef int _rows_by_blocks(const uint8_t *p, const header_t *h, char *dst, Py_ssize_t rowsize,
                         Py_ssize_t cstart, Py_ssize_t csize, char *scratch,
                         Py_ssize_t scratch_bytes) noexcept nogil:
    """`rows_of_chunk` one LZ4 block at a time through `scratch` (at least a block): 0 done; 1 not a
    chunk for this path (`_rows_by_block`: the caller decodes it whole); -1 a block whose start or
    stream size does not fit, or that does not decode to its size."""
    cdef Py_ssize_t nb = h.nblocks, j, bsize, per, lo = 16 + 4 * h.nblocks
    cdef int32_t b, cs
    cdef const uint8_t *s
    if not _rows_by_block(h, rowsize, cstart, csize) or h.blocksize > scratch_bytes:
        return 1
    per = h.blocksize // rowsize * csize        # output bytes per block
    for j in range(nb):
        bsize = h.blocksize
        if j == nb - 1 and h.nbytes % h.blocksize:
            bsize = h.nbytes - j * h.blocksize
        # this path calls LZ4 itself, past Blosc: the block's start and stream size are checked here,
        # and LZ4's _safe decoder neither reads past `cs` bytes nor writes past `bsize`
        b = read_i32(p + 16 + 4 * j)
        if b < lo or <Py_ssize_t>b + 4 > h.ctbytes:
            return -1
        cs = read_i32(p + b)
        if cs <= 0 or cs > bsize or <Py_ssize_t>b + 4 + cs > h.ctbytes:
            return -1
        if cs == bsize:
            s = p + b + 4                   # stored raw (still shuffled)
        else:
            if LZ4_decompress_safe(<const char *>(p + b + 4), scratch, cs, <int>bsize) != bsize:
                return -1
            s = <const uint8_t *>scratch
        blz_gather8(s, bsize // 8, bsize // rowsize, rowsize // 8, cstart // 8, csize // 8,
                    <uint8_t *>(dst + j * per))
    return 0




cdef void copy_rows(const char *v, Py_ssize_t nrows, Py_ssize_t rowsize, Py_ssize_t cstart,
                    Py_ssize_t csize, char *dst) noexcept nogil:
    """Bytes [cstart, cstart + csize) of each of the `nrows` rows of `rowsize` bytes at `v`, packed
    one row after the other into `dst`."""
    cdef Py_ssize_t r
    v = v + cstart
    if csize == 8:
        for r in range(nrows):
            memcpy(dst + 8 * r, v + r * rowsize, 8)
    elif csize == 4:
        for r in range(nrows):
            memcpy(dst + 4 * r, v + r * rowsize, 4)
    else:
        for r in range(nrows):
            memcpy(dst + r * csize, v + r * rowsize, csize)


cdef class RowsChunks(ChunkWork):
    """RowsChunks(bufs, dest, offsets, rowsize, cstart, csize, nparts=1, wheres=None)

    Bytes [cstart, cstart + csize) of every row of `rowsize` bytes of chunk ``bufs[k]``, packed one
    row after the other into the C-contiguous array `dest` from byte ``offsets[k]`` (a column range
    of a 2-D carray): an LZ4 chunk of byte-shuffled 8-byte values one block at a time
    (`rows_of_chunk`), a raw one in place, any other decoded whole into a buffer of the thread first.
    Call `run()` from up to `nparts` threads, then `check()`.
    """

    cdef char *out
    cdef Py_ssize_t *offs
    cdef Py_ssize_t rowsize, cstart, csize
    cdef object dest

    def __init__(self, list bufs not None, cnp.ndarray dest not None, const cnp.intp_t[::1] offsets not None,
                 Py_ssize_t rowsize, Py_ssize_t cstart, Py_ssize_t csize, Py_ssize_t nparts=1, wheres=None):
        cdef Py_ssize_t k, total, n = len(bufs), each
        if offsets.shape[0] != n:
            raise ValueError("RowsChunks: one output offset per chunk is needed")
        if rowsize <= 0 or cstart < 0 or csize <= 0 or cstart + csize > rowsize:
            raise ValueError(f"RowsChunks: bytes [{cstart}, {cstart + csize}) of rows of {rowsize} bytes")
        self._set_chunks(bufs, nparts, wheres)
        if not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest):
            raise ValueError("RowsChunks: the output array must be C-contiguous and writeable")
        self.dest = dest
        self.out = <char *>cnp.PyArray_DATA(dest)
        total = cnp.PyArray_NBYTES(dest)
        self.rowsize, self.cstart, self.csize = rowsize, cstart, csize
        self.offs = <Py_ssize_t *>malloc(max(1, n) * sizeof(Py_ssize_t))
        if self.offs == NULL:
            raise MemoryError()
        for k in range(n):
            if self.hdr[k].nbytes % rowsize:
                raise ValueError(f"RowsChunks: chunk {k}'s {self.hdr[k].nbytes} bytes are not whole rows "
                                 f"of {rowsize} bytes")
            each = self.hdr[k].nbytes // rowsize * csize
            if offsets[k] < 0 or offsets[k] + each > total:
                raise ValueError(f"RowsChunks: {each} bytes at {offsets[k]} do not fit in the output's "
                                 f"{total} bytes")
            self.offs[k] = offsets[k]
            if not (self.hdr[k].flags & C_MEMCPYED):
                self.scratch_bytes = max(self.scratch_bytes, self.hdr[k].nbytes)

    def __dealloc__(self):
        free(self.offs)

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        return rows_of_chunk(self.src[k], &self.hdr[k], self.out + self.offs[k], self.rowsize, self.cstart,
                             self.csize, scratch, self.scratch_bytes)



# ---------------------------------------------------------------------------------------------------
# Fields into the rows of a structured array (a ctable's rows made from its columns)

cdef enum:
    _ZIP_TILE = 512     # rows per tile: the tile's rows of the result (12 KB for 3 fields of 8 bytes) stay in L1


cdef extern from "blz_zip.h":
    int blz_zip8_stream(char *dst, const char **src, Py_ssize_t nsrc, Py_ssize_t n) nogil


# rows written by streaming stores from this many bytes of the result on (more than a core's L2: the
# rows would leave the cache before anything reads them, and writing lines whole saves reading them)
cdef Py_ssize_t _ZIP_STREAM_MIN = 1 << 20


def _zip_stream_min(Py_ssize_t nbytes):
    """Set the size from which `zip_fields` writes with streaming stores (tests run both ways);
    returns the previous one."""
    global _ZIP_STREAM_MIN
    old = _ZIP_STREAM_MIN
    _ZIP_STREAM_MIN = nbytes
    return old


cdef void _zip_field(char *dst, Py_ssize_t rowsize, const char *src, Py_ssize_t isz, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if isz == 8:
        for i in range(n):
            memcpy(dst + i * rowsize, src + 8 * i, 8)
    elif isz == 4:
        for i in range(n):
            memcpy(dst + i * rowsize, src + 4 * i, 4)
    elif isz == 2:
        for i in range(n):
            memcpy(dst + i * rowsize, src + 2 * i, 2)
    elif isz == 1:
        for i in range(n):
            dst[i * rowsize] = src[i]
    else:
        for i in range(n):
            memcpy(dst + i * rowsize, src + isz * i, isz)


def zip_fields(cnp.ndarray dest not None, Py_ssize_t row, list sources not None, offsets not None):
    """Write the contiguous arrays `sources` (one per field, each of n values) as fields of rows
    ``row`` to ``row + n`` of the C-contiguous array `dest`, source k at byte `offsets[k]` of each
    row, a tile of rows at a time: each row of `dest` is written while in the cache, where one
    strided copy per field would bring every row in once per field.  Returns n."""
    cdef Py_ssize_t nsrc = len(sources), k, n = -1, rowsize, t, m, nrows
    cdef bint packed
    cdef Py_ssize_t *isz
    cdef Py_ssize_t *off
    cdef const char **ptr
    cdef char *base
    cdef cnp.ndarray s
    if len(offsets) != nsrc:
        raise ValueError(f"zip_fields: {nsrc} sources but {len(offsets)} offsets")
    if not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest) or cnp.PyArray_NDIM(dest) != 1:
        raise ValueError("zip_fields: the output must be a writeable C-contiguous one-dimensional array")
    rowsize = cnp.PyArray_ITEMSIZE(dest)
    nrows = cnp.PyArray_DIM(dest, 0)
    isz = <Py_ssize_t *>malloc(sizeof(Py_ssize_t) * (nsrc + 1))
    off = <Py_ssize_t *>malloc(sizeof(Py_ssize_t) * (nsrc + 1))
    ptr = <const char **>malloc(sizeof(char *) * (nsrc + 1))
    if isz == NULL or off == NULL or ptr == NULL:
        free(isz); free(off); free(ptr)
        raise MemoryError()
    try:
        for k in range(nsrc):
            s = sources[k]
            if not cnp.PyArray_IS_C_CONTIGUOUS(s) or cnp.PyArray_NDIM(s) != 1:
                raise ValueError(f"zip_fields: source {k} is not a C-contiguous one-dimensional array")
            if n < 0:
                n = cnp.PyArray_DIM(s, 0)
            elif cnp.PyArray_DIM(s, 0) != n:
                raise ValueError(f"zip_fields: source {k} holds {cnp.PyArray_DIM(s, 0)} values, {n} expected")
            isz[k] = cnp.PyArray_ITEMSIZE(s)
            off[k] = offsets[k]
            if off[k] < 0 or off[k] + isz[k] > rowsize:
                raise ValueError(f"zip_fields: field {k} ({isz[k]} bytes at {off[k]}) outside a row of {rowsize}")
            ptr[k] = <const char *>cnp.PyArray_DATA(s)
        if n <= 0:
            return 0
        if row < 0 or row + n > nrows:
            raise IndexError(f"zip_fields: rows [{row}, {row + n}) outside the output's {nrows}")
        base = <char *>cnp.PyArray_DATA(dest) + row * rowsize
        packed = rowsize == 8 * nsrc
        for k in range(nsrc):
            packed = packed and isz[k] == 8 and off[k] == 8 * k
        with nogil:
            if packed and n * rowsize >= _ZIP_STREAM_MIN and blz_zip8_stream(base, ptr, nsrc, n):
                t = n
            else:
                t = 0
            while t < n:
                m = n - t if n - t < _ZIP_TILE else _ZIP_TILE
                for k in range(nsrc):
                    _zip_field(base + t * rowsize + off[k], rowsize, ptr[k] + t * isz[k], isz[k], m)
                t += m
        return n
    finally:
        free(isz); free(off); free(ptr)
