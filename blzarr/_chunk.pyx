# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One Blosc 1.x chunk: validate, compress, decompress into a caller's buffer, read the items of some blocks.

Every function here takes one chunk (bytes, a bytearray, a memoryview or a NumPy array of its bytes)
and a caller's preallocated NumPy output.  Every compressed input is checked against its real length
(header fields, bstarts and the split streams of the blocks about to be decoded) before the C library
sees it, because the C decoders trust the sizes written in the header; a chunk that fails raises
`ChunkError` naming `where` (the caller's description of the chunk: a file, a chunk number).

What it does not do: it knows nothing of files, of arrays of chunks or of threads of its own.  Many
chunks at once are the work of `_decode`, `_sums`, `_rows`, `_exprkernel` and `_where` (all on the
pool of `_workpool`); superchunk files are `_superchunk`'s; the min/max pass that `compress` may run
first is `_minmax`'s.  Other Cython modules use its C level through `_chunk.pxd`.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport malloc, free, qsort
from libc.string cimport memcpy
from cpython.ref cimport PyObject, Py_XDECREF, Py_INCREF
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

cimport numpy as cnp

from blzarr._blosc cimport (
    BLOSC_MAX_OVERHEAD, BLOSC_MAX_TYPESIZE, BLOSC_MAX_BUFFERSIZE, BLOSC_VERSION_FORMAT,
    BLOSC_VERSION_STRING, BLOSC_VERSION_DATE, BLOSC_MAX_THREADS,
    blosc_compress_ctx, blosc_decompress_ctx, blosc_getitem, blosc_list_compressors,
    blosc_get_complib_info, blosc_compname_to_compcode, blosc_get_version_string,
    blosc_set_splitmode, BLOSC_NEVER_SPLIT,
)
from blzarr._minmax cimport MM_NONE, minmax_kind, minmax_run
from blzarr.errors import ChunkError

cnp.import_array()

# Blocks are compressed whole, never split into typesize streams.  In split mode C-Blosc 1.x
# multiplies a requested blocksize by the typesize and never makes blocks under 64 KB, so a random
# read would decode 64 KB or more; whole 16 KB blocks cost about 1% in size on real data and decode
# 3-8x faster.  Chunks record the choice in their header (flag 0x10), and every C-Blosc 1.x reader,
# bcolz's included, decodes them.  This is process-wide state of the library, set once here.
blosc_set_splitmode(BLOSC_NEVER_SPLIT)

cdef extern from "blz_lz4dec.h" nogil:
    int64_t BLZ_DEC_OTHER
    int64_t blz_decode_chunk(const uint8_t *src, int64_t srclen, uint8_t *dst, int64_t destsize)
    int64_t blz_decode_chunk_ahead(const uint8_t *src, int64_t srclen, uint8_t *dst, int64_t destsize)

cdef extern from "blz_blockdec.h" nogil:
    int64_t blz_decode_block(const uint8_t *src, int64_t srclen, int64_t j, uint8_t *dst, int64_t bsize)

cdef extern from "numpy/arrayobject.h":
    # steals a reference to `descr`
    object _array_empty "PyArray_Empty"(int nd, cnp.npy_intp *dims, PyObject *descr, int fortran)

cdef extern from "Python.h":
    PyObject *_bytes_new "PyBytes_FromStringAndSize"(const char *v, Py_ssize_t n)
    char *_bytes_ptr "PyBytes_AS_STRING"(PyObject *o)
    int _bytes_resize "_PyBytes_Resize"(PyObject **o, Py_ssize_t n) except -1

HEADER_SIZE = 16
MAX_OVERHEAD = BLOSC_MAX_OVERHEAD
MAX_TYPESIZE = BLOSC_MAX_TYPESIZE
MAX_BUFFERSIZE = BLOSC_MAX_BUFFERSIZE

FLAG_SHUFFLE = 0x01
FLAG_MEMCPYED = 0x02
FLAG_BITSHUFFLE = 0x04
FLAG_DONT_SPLIT = 0x10

# codec id in the top three flag bits -> the name of its library format
CODEC_FORMATS = {0: "blosclz", 1: "lz4", 2: "snappy", 3: "zlib", 4: "zstd"}
CNAMES = ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")

# C-Blosc's _ctx calls start and join their threads on every call (~100-500 us), which costs more
# than compressing a chunk of a few MB: below this size a call uses one thread, and callers get
# parallelism by working on several chunks at once (the GIL is released).
cdef Py_ssize_t _PARALLEL_MIN = 16 * 1024 * 1024
PARALLEL_MIN_BYTES = _PARALLEL_MIN

cdef inline int _threads_for(int nthreads, Py_ssize_t nbytes) noexcept:
    # Blosc's own threads only for a chunk large enough to pay for starting them (see above)
    if nbytes < _PARALLEL_MIN:
        return 1
    return max(1, min(nthreads, BLOSC_MAX_THREADS))


cdef str located(object where):
    """The ` (where)` that error messages append, or nothing when the caller named no place."""
    return f" ({where})" if where else ""


cdef inline void _read_fields(const uint8_t *p, header_t *h) noexcept nogil:
    # the 16-byte header's fields as stored, unchecked: both parsers below check them their own way
    h.version = p[0]
    h.versionlz = p[1]
    h.flags = p[2]
    h.typesize = p[3]
    h.nbytes = read_i32(p + 4)
    h.blocksize = read_i32(p + 8)
    h.ctbytes = read_i32(p + 12)


cdef int parse_header(const uint8_t *p, Py_ssize_t buflen, header_t *h, object where,
                       bint lazy) except -1:
    """Fill `h` from the 16-byte header and check every field against the buffer length.

    With `lazy`, the buffer may be only partially filled in, but it still has its full ctbytes length.
    """
    if buflen < 16:
        raise ChunkError(f"truncated Blosc chunk{located(where)}: {buflen} bytes, fewer than the 16-byte header")
    _read_fields(p, h)
    # every field the C decoder trusts is checked here: a wrong one would make it read or write
    # outside the buffers, not fail
    if h.version != BLOSC_VERSION_FORMAT:
        raise ChunkError(f"bad Blosc chunk{located(where)}: format version {h.version}, expected {BLOSC_VERSION_FORMAT}")
    if h.flags & 0x08:
        raise ChunkError(f"bad Blosc chunk{located(where)}: reserved flag bit 0x08 is set")
    if (h.flags >> 5) > 4:
        raise ChunkError(f"bad Blosc chunk{located(where)}: unknown codec id {h.flags >> 5}")
    if h.typesize == 0:
        raise ChunkError(f"bad Blosc chunk{located(where)}: typesize is 0")
    if h.nbytes < 0 or h.nbytes > BLOSC_MAX_BUFFERSIZE:
        raise ChunkError(f"bad Blosc chunk{located(where)}: nbytes {h.nbytes} out of range")
    if h.ctbytes != buflen:
        raise ChunkError(
            f"corrupted or truncated Blosc chunk{located(where)}: header says {h.ctbytes} compressed bytes, "
            f"the buffer holds {buflen}")
    if h.flags & FLAG_MEMCPYED:
        # stored raw (Blosc's choice when compressing saves nothing): the bytes follow the header
        h.nblocks = 0
        if h.ctbytes != h.nbytes + 16:
            raise ChunkError(
                f"bad Blosc chunk{located(where)}: stored raw, but {h.ctbytes} bytes do not hold "
                f"16 + {h.nbytes}")
        return 0
    if h.blocksize <= 0:
        raise ChunkError(f"bad Blosc chunk{located(where)}: blocksize {h.blocksize}")
    if h.nbytes == 0:
        raise ChunkError(f"bad Blosc chunk{located(where)}: compressed chunk with nbytes 0")
    if h.blocksize > h.nbytes:
        raise ChunkError(f"bad Blosc chunk{located(where)}: blocksize {h.blocksize} > nbytes {h.nbytes}")
    if h.ctbytes > h.nbytes + 16:
        # longer than raw storage, which Blosc would have chosen instead
        raise ChunkError(f"bad Blosc chunk{located(where)}: {h.ctbytes} compressed bytes for {h.nbytes} bytes")
    # the last block may be short; the header is followed by one 4-byte start per block
    h.nblocks = (h.nbytes + h.blocksize - 1) // h.blocksize
    if 16 + 4 * h.nblocks > h.ctbytes:
        raise ChunkError(
            f"bad Blosc chunk{located(where)}: {h.nblocks} block offsets do not fit in {h.ctbytes} bytes")
    return 0


cdef int _cmp_i32(const void *a, const void *b) noexcept nogil:
    # qsort's order of block starts; (x > y) - (x < y) rather than x - y, which could overflow
    cdef int32_t x = (<const int32_t *>a)[0]
    cdef int32_t y = (<const int32_t *>b)[0]
    return (x > y) - (x < y)


cdef struct fault_t:
    int kind                # one of the FAULT_* values
    Py_ssize_t block        # the block at fault (FAULT_TWO_STARTS: the index in start order)
    Py_ssize_t stream
    Py_ssize_t pos          # where the stream's 4-byte size stands
    Py_ssize_t neblock      # the most bytes a stream of that block may hold
    int32_t value           # the block's start, or the size a stream claims
    int32_t end             # where the block ends (the next start in file order, or ctbytes)


cdef enum:
    FAULT_NONE = 0
    FAULT_START = 1         # a block starts outside the chunk's data
    FAULT_TWO_STARTS = 2    # two blocks start at the same byte
    FAULT_TRUNCATED = 3     # a stream's size runs past the block's end
    FAULT_STREAM = 4        # a stream claims more bytes than its block holds or the data has


cdef int _walk_blocks(const uint8_t *p, const header_t *h, int32_t *st, Py_ssize_t first, Py_ssize_t last,
                      fault_t *f) noexcept nogil:
    """Check every block start of the chunk at `p` (header `h`, nblocks > 0) and the split streams of
    blocks first..last (inclusive), with `st` scratch for nblocks starts; 0 when all fit, else 1 with
    the first fault in `f` (starts in block order, then repeats in start order, then the streams)."""
    cdef Py_ssize_t nb = h.nblocks, j, k, lo = 16 + 4 * h.nblocks, s, bsize, nsplits, pos
    cdef int32_t b, csize
    cdef bint leftover
    for j in range(nb):
        b = read_i32(p + 16 + 4 * j)
        if b < lo or <Py_ssize_t>b + 4 > h.ctbytes:
            f.kind, f.block, f.value = FAULT_START, j, b
            return 1
        st[j] = b
    qsort(st, nb, sizeof(int32_t), _cmp_i32)
    for j in range(1, nb):
        if st[j] == st[j - 1]:
            f.kind, f.block, f.value = FAULT_TWO_STARTS, j, st[j]
            return 1
    for j in range(first, last + 1):
        # block j ends where the next block in file order starts (blocks may be stored out of order)
        b = read_i32(p + 16 + 4 * j)
        lo = 0
        k = nb
        while lo < k:                   # the first sorted start above b
            s = (lo + k) // 2
            if st[s] <= b:
                lo = s + 1
            else:
                k = s
        f.end = st[lo] if lo < nb else <int32_t>h.ctbytes
        leftover = (j == nb - 1) and (h.nbytes % h.blocksize != 0)
        bsize = h.nbytes - j * h.blocksize if leftover else h.blocksize
        if (not (h.flags & C_DONT_SPLIT) and h.typesize <= MAX_SPLITS
                and h.blocksize // h.typesize >= MIN_SPLIT_ITEMS and not leftover):
            nsplits = h.typesize
        else:
            nsplits = 1
        f.neblock = bsize // nsplits
        pos = b
        for s in range(nsplits):
            f.block, f.stream, f.pos = j, s, pos
            if pos + 4 > f.end:
                f.kind = FAULT_TRUNCATED
                return 1
            csize = read_i32(p + pos)
            if csize <= 0 or csize > f.neblock or pos + 4 + csize > f.end:
                f.kind, f.value = FAULT_STREAM, csize
                return 1
            pos += 4 + csize
    f.kind = FAULT_NONE
    return 0


cdef int _check_blocks(const uint8_t *p, header_t *h, Py_ssize_t first, Py_ssize_t last,
                       object where) except -1:
    """Check every bstart, and the split streams of blocks first..last (inclusive), before decoding."""
    cdef int32_t *st
    cdef fault_t f
    cdef int bad
    if h.nblocks == 0:
        return 0
    st = <int32_t *>malloc(h.nblocks * sizeof(int32_t))
    if st == NULL:
        raise MemoryError()
    bad = _walk_blocks(p, h, st, first, last, &f)
    free(st)
    if not bad:
        return 0
    if f.kind == FAULT_START:
        raise ChunkError(f"bad Blosc chunk{located(where)}: block {f.block} starts at {f.value}, outside "
                         f"[{16 + 4 * h.nblocks}, {h.ctbytes})")
    if f.kind == FAULT_TWO_STARTS:
        raise ChunkError(f"bad Blosc chunk{located(where)}: two blocks start at {f.value}")
    if f.kind == FAULT_TRUNCATED:
        raise ChunkError(f"bad Blosc chunk{located(where)}: block {f.block} is truncated")
    raise ChunkError(
        f"bad Blosc chunk{located(where)}: block {f.block} stream {f.stream} claims {f.value} bytes "
        f"(at most {min(f.neblock, f.end - f.pos - 4)} possible)")


cdef int chunk_valid(const uint8_t *p, Py_ssize_t buflen, Py_ssize_t expected_nbytes,
                     header_t *h) noexcept nogil:
    """1 when the `buflen` bytes at `p` are a well-formed chunk (holding `expected_nbytes` when >= 0),
    with `h` filled in; else 0.  The acceptance test of `validate` (which explains a rejection), without
    the GIL: every check of `parse_header` and `_check_blocks` over all blocks."""
    cdef Py_ssize_t nb
    cdef int32_t *st
    cdef fault_t f
    cdef int ok
    # the checks of parse_header, answered yes or no: this runs on reader threads without the GIL,
    # where no exception can be made; `explain` says what is wrong when it matters
    if buflen < 16 or p == NULL:
        return 0
    _read_fields(p, h)
    if (h.version != BLOSC_VERSION_FORMAT or h.flags & 0x08 or (h.flags >> 5) > 4 or h.typesize == 0
            or h.nbytes < 0 or h.nbytes > BLOSC_MAX_BUFFERSIZE or h.ctbytes != buflen):
        return 0
    if expected_nbytes >= 0 and h.nbytes != expected_nbytes:
        return 0
    if h.flags & C_MEMCPYED:
        h.nblocks = 0
        return 1 if h.ctbytes == h.nbytes + 16 else 0
    if h.blocksize <= 0 or h.nbytes == 0 or h.blocksize > h.nbytes or h.ctbytes > h.nbytes + 16:
        return 0
    h.nblocks = (h.nbytes + h.blocksize - 1) // h.blocksize
    nb = h.nblocks
    if 16 + 4 * nb > h.ctbytes:
        return 0
    st = <int32_t *>malloc(nb * sizeof(int32_t))
    if st == NULL:
        return 0
    ok = not _walk_blocks(p, h, st, 0, nb - 1, &f)
    free(st)
    return ok


cdef const uint8_t[::1] bytes_view(object buf):
    """The bytes of `buf` (anything with the buffer protocol; an array of any dtype or shape, by its
    bytes), read-only, without a copy."""
    if isinstance(buf, cnp.ndarray):
        buf = (<cnp.ndarray>buf).reshape(-1).view("u1")
    return buf


def header(buf, where=None):
    """The fields of a chunk's 16-byte header as a dict (checked against the buffer length)."""
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    return dict(version=h.version, versionlz=h.versionlz, flags=h.flags, typesize=h.typesize,
                nbytes=h.nbytes, blocksize=h.blocksize, ctbytes=h.ctbytes, nblocks=h.nblocks,
                codec=CODEC_FORMATS[h.flags >> 5],
                shuffle=(2 if h.flags & FLAG_BITSHUFFLE else (1 if h.flags & FLAG_SHUFFLE else 0)),
                memcpyed=bool(h.flags & FLAG_MEMCPYED))


def validate(buf, Py_ssize_t expected_nbytes=-1, where=None):
    """Check the whole structure of a chunk; return its uncompressed size.

    `expected_nbytes` >= 0 also requires the chunk to hold exactly that many bytes.
    """
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    if chunk_valid(&v[0] if v.shape[0] else NULL, v.shape[0], expected_nbytes, &h):
        return h.nbytes
    # only a rejected chunk pays for the checks that build a message; should they find nothing,
    # the generic error below still rejects it
    explain(buf, expected_nbytes, where)
    raise ChunkError(f"bad Blosc chunk{located(where)}: its structure does not hold together")


def explain(buf, Py_ssize_t expected_nbytes=-1, where=None):
    """Raise the ChunkError that says why `validate` rejects `buf` (field by field, block by block);
    return its uncompressed size when these checks find nothing (the tests require that they then
    agree with `chunk_valid`)."""
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    if expected_nbytes >= 0 and h.nbytes != expected_nbytes:
        raise ChunkError(
            f"bad Blosc chunk{located(where)}: it holds {h.nbytes} bytes, {expected_nbytes} expected")
    _check_blocks(&v[0], &h, 0, h.nblocks - 1, where)
    return h.nbytes


def compress(cnp.ndarray src not None, int typesize, int clevel=5, int shuffle=1, cname="lz4",
             Py_ssize_t blocksize=0, int nthreads=1, cnp.ndarray mins=None, cnp.ndarray maxs=None,
             Py_ssize_t at=0, bint nat=False):
    """Compress the bytes of a C-contiguous array into one chunk (a bytes object sized exactly).

    With `mins` and `maxs` (1-d contiguous arrays of src's dtype), the same GIL-free call first
    takes src's smallest and largest items into mins[at] and maxs[at] as `minmax` does (`nat`: src
    is the int64 view of datetimes, NaT left out) -- a pass that brings the chunk into this core's
    cache, from where the compressor reads it -- and returns (bytes, count of NaN/NaT).  When every
    item is NaN/NaT, mins[at] and maxs[at] hold nothing meaningful."""
    cdef Py_ssize_t nbytes, cap, nitems = 0
    cdef int which = MM_NONE
    cdef char *omin = NULL
    cdef char *omax = NULL
    cdef int64_t nan = 0
    cdef const char *csrc
    cdef char *dest
    cdef PyObject *out
    cdef int ret
    cdef bytes bcname
    cdef const char *ccname
    cdef object result = None
    if not cnp.PyArray_IS_C_CONTIGUOUS(src):
        raise ValueError("compress: the source array must be C-contiguous")
    if not 0 <= clevel <= 9:
        raise ValueError(f"clevel must be an integer between 0 and 9, got {clevel}")
    if shuffle not in (0, 1, 2):
        raise ValueError(f"shuffle must be 0 (NOSHUFFLE), 1 (SHUFFLE) or 2 (BITSHUFFLE), got {shuffle}")
    if not 1 <= typesize <= BLOSC_MAX_TYPESIZE:
        raise ValueError(f"typesize must be between 1 and {BLOSC_MAX_TYPESIZE}, got {typesize}")
    if cname not in CNAMES or blosc_compname_to_compcode((<str>cname).encode()) < 0:
        raise ValueError(f"compressor {cname!r} is not available; choose one of {compressor_list()}")
    if blocksize < 0:
        raise ValueError(f"blocksize must be >= 0, got {blocksize}")
    if mins is not None or maxs is not None:
        nitems = src.shape[0] if src.ndim == 1 else 0
        if nitems == 0 or mins is None or maxs is None:
            raise ValueError("compress: statistics need a non-empty 1-d source, mins and maxs")
        for o in (mins, maxs):
            if o.dtype != src.dtype or o.ndim != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(o) \
                    or not 0 <= at < o.shape[0]:
                raise ValueError(f"compress: mins and maxs must be contiguous 1-d arrays of {src.dtype} "
                                 f"holding index {at}")
        which = minmax_kind(src, nat)
        if which == MM_NONE:
            raise ValueError(f"compress: no statistics for dtype {src.dtype}")
        omin = <char *>cnp.PyArray_DATA(mins) + at * cnp.PyArray_ITEMSIZE(src)
        omax = <char *>cnp.PyArray_DATA(maxs) + at * cnp.PyArray_ITEMSIZE(src)
    nbytes = cnp.PyArray_NBYTES(src)
    nthreads = _threads_for(nthreads, nbytes)
    if nbytes > BLOSC_MAX_BUFFERSIZE:
        raise ValueError(f"a chunk can hold at most {BLOSC_MAX_BUFFERSIZE} bytes, got {nbytes}")
    # the result is a bytes object allocated for the worst case and shrunk in place afterwards: the
    # compressed bytes are written once, where they stay
    cap = nbytes + BLOSC_MAX_OVERHEAD
    bcname = (<str>cname).encode()
    ccname = bcname
    out = _bytes_new(NULL, cap)
    if out == NULL:
        raise MemoryError()
    try:
        dest = _bytes_ptr(out)
        csrc = <const char *>cnp.PyArray_DATA(src)
        with nogil:
            if which != MM_NONE:
                nan = minmax_run(which, csrc, nitems, omin, omax)
            ret = blosc_compress_ctx(clevel, shuffle, typesize, nbytes, csrc, dest, cap,
                                     ccname, blocksize, nthreads)
        if ret <= 0:
            raise ChunkError(f"Blosc compression failed (return code {ret})")
        if ret < cap:
            _bytes_resize(&out, ret)   # shrinks in place; frees `out` and sets it NULL on failure
        result = <object>out
    finally:
        Py_XDECREF(out)
    if which != MM_NONE:
        return result, nan
    return result


cdef char *_dest_ptr(cnp.ndarray dest, Py_ssize_t offset, Py_ssize_t n, str what) except NULL:
    # the caller's output, checked before any decoder writes `n` bytes at `offset` of it
    if not cnp.PyArray_IS_C_CONTIGUOUS(dest):
        raise ValueError(f"{what}: the output array must be C-contiguous")
    if not cnp.PyArray_ISWRITEABLE(dest):
        raise ValueError(f"{what}: the output array is read-only")
    if offset < 0 or offset + n > cnp.PyArray_NBYTES(dest):
        raise ValueError(
            f"{what}: the output array holds {cnp.PyArray_NBYTES(dest)} bytes, "
            f"{offset + n} needed")
    return <char *>cnp.PyArray_DATA(dest) + offset


def decompress_into(buf, cnp.ndarray dest not None, int nthreads=1, bint check=True, where=None,
                    Py_ssize_t offset=0):
    """Decompress a whole chunk into `dest` (at byte `offset`); return the number of bytes written.

    `check=False` skips the structural checks: only for buffers that passed `validate` before.
    """
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    cdef char *out
    cdef int ret
    parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    out = _dest_ptr(dest, offset, h.nbytes, "decompress_into")
    if h.nbytes == 0:
        return 0
    if check:
        _check_blocks(&v[0], &h, 0, h.nblocks - 1, where)
    nthreads = _threads_for(nthreads, h.nbytes)
    # straight into the caller's array: no intermediate bytes object
    with nogil:
        ret = decode_chunk(&v[0], v.shape[0], out, h.nbytes, nthreads)
    if ret != h.nbytes:
        raise ChunkError(f"corrupted Blosc chunk{located(where)}: decompression failed (return code {ret})")
    return ret


cdef int decode_chunk(const uint8_t *src, Py_ssize_t srclen, char *out, Py_ssize_t nbytes,
                      int nthreads) noexcept nogil:
    """Decode a whole chunk (`nbytes` decoded bytes) into `out`: the LZ4 chunks of the default
    parameters by blz_lz4dec.h (the same bytes as C-Blosc's, faster where a long match repeats a
    short period: byte-shuffled small integers), any other by C-Blosc.  Returns the bytes written or
    a value <= 0."""
    cdef int64_t r
    if nthreads <= 1:
        r = blz_decode_chunk(src, srclen, <uint8_t *>out, nbytes)
        if r != BLZ_DEC_OTHER:
            return <int>r if r >= 0 else -1
    return blosc_decompress_ctx(src, out, nbytes, nthreads)


cdef int decode_chunk_ahead(const uint8_t *src, Py_ssize_t srclen, char *out, Py_ssize_t nbytes) noexcept nogil:
    """`decode_chunk` on one thread into a buffer the caller reuses (it stays in cache), asking for the
    compressed bytes ahead of the decoder: where they come from memory, the decode stalls less."""
    cdef int64_t r = blz_decode_chunk_ahead(src, srclen, <uint8_t *>out, nbytes)
    if r != BLZ_DEC_OTHER:
        return <int>r if r >= 0 else -1
    return blosc_decompress_ctx(src, out, nbytes, 1)


def decompress_blosc(buf, cnp.ndarray dest not None):
    """Decompress a whole chunk into `dest` by C-Blosc alone (`decompress_into`'s reference in the
    tests and benchmarks); returns C-Blosc's return code.  The chunk's structure is checked first, as
    C-Blosc trusts the sizes in it."""
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef char *out = _dest_ptr(dest, 0, cnp.PyArray_NBYTES(dest), "decompress_blosc")
    cdef Py_ssize_t n = cnp.PyArray_NBYTES(dest)
    cdef header_t h
    cdef int r
    if not chunk_valid(&v[0] if v.shape[0] else NULL, v.shape[0], n, &h):
        raise ChunkError(f"decompress_blosc: not a well-formed chunk of {n} bytes")
    with nogil:
        r = blosc_decompress_ctx(&v[0], out, n, 1)
    return r


def getitem_into(buf, Py_ssize_t start, Py_ssize_t nbytes, cnp.ndarray dest not None, Py_ssize_t offset=0,
                 bint check=True, where=None):
    """Decode bytes [start, start+nbytes) of a chunk into `dest` at byte `offset`, touching only the
    blocks that hold them.

    `buf` may be a "lazy" chunk: ctbytes long, with only the header, the bstarts and the bytes of those
    blocks filled in.  `start` and `nbytes` must be multiples of the chunk's typesize.
    """
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    cdef char *out
    cdef int ret
    cdef Py_ssize_t ts
    parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, True)
    if start < 0 or nbytes < 0 or start + nbytes > h.nbytes:
        raise IndexError(f"getitem_into: bytes [{start}, {start + nbytes}) outside the chunk's {h.nbytes}")
    ts = h.typesize
    if start % ts or nbytes % ts:
        raise ValueError(f"getitem_into: start {start} and size {nbytes} must be multiples of typesize {ts}")
    out = _dest_ptr(dest, offset, nbytes, "getitem_into")
    if nbytes == 0:
        return 0
    if h.flags & FLAG_MEMCPYED:
        with nogil:
            memcpy(out, &v[0] + 16 + start, nbytes)
        return nbytes
    if check:
        # only the blocks about to be decoded: a lazy chunk holds nothing else worth checking
        _check_blocks(&v[0], &h, start // h.blocksize, (start + nbytes - 1) // h.blocksize, where)
    with nogil:
        ret = blosc_getitem(&v[0], <int>(start // ts), <int>(nbytes // ts), out)
    if ret != nbytes:
        raise ChunkError(f"corrupted Blosc chunk{located(where)}: block decoding failed (return code {ret})")
    return ret


def block_at(chunks, Py_ssize_t cid, Py_ssize_t local, Py_ssize_t chunklen, cnp.dtype atom not None):
    """(lo, block): the atoms of the in-memory full chunk ``chunks[cid]`` (a `storage.chunk.chunk`)
    that share a Blosc block with atom `local`, atoms [lo, lo + len(block)), decoded from that block
    alone into a new array of dtype `atom`; or None where the chunk's blocks do not hold whole atoms
    or its typesize does not divide them (the caller reads such a chunk otherwise).

    The scalar read of an in-memory carray: what `ChunkStore.read_block` and `chunk.read_block` do for
    such a chunk, in one call, the block decoded straight into the new array."""
    # a list (MemoryChunks) holding chunk `cid`; anything else (a write's undo log standing in for
    # the list while another thread appends, a list that a truncation made shorter) is read the
    # caller's other way.  The GIL is held from the check to the reference taken.
    if not isinstance(chunks, list) or not 0 <= cid < PyList_GET_SIZE(chunks):
        return None
    ch = <object>PyList_GET_ITEM(chunks, cid)
    data = ch._data
    if type(data) is not bytes:
        return None
    cdef const uint8_t *p = <const uint8_t *>_bytes_ptr(<PyObject *>data)
    cdef Py_ssize_t n = len(<bytes>data)
    cdef header_t h
    cdef Py_ssize_t isz = atom.itemsize, bs, per, lo, hi, start, nbytes, ts
    cdef cnp.npy_intp dim
    cdef int64_t r = BLZ_DEC_OTHER
    cdef int ret
    cdef char *out
    parse_header(p, n, &h, ch._where, False)
    ts = h.typesize
    bs = h.blocksize
    if isz == 0 or isz % ts or bs < isz or bs % isz:
        return None
    per = bs // isz
    lo = local // per * per
    hi = min(lo + per, chunklen)
    start = lo * isz
    nbytes = (hi - lo) * isz
    if lo < 0 or hi <= lo or start + nbytes > h.nbytes:
        raise IndexError(f"getitem_into: bytes [{start}, {start + nbytes}) outside the chunk's {h.nbytes}")
    dim = hi - lo
    Py_INCREF(atom)
    block = _array_empty(1, &dim, <PyObject *>atom, 0)
    out = <char *>cnp.PyArray_DATA(<cnp.ndarray>block)
    if h.flags & FLAG_MEMCPYED:
        memcpy(out, p + 16 + start, nbytes)
        return lo, block
    with nogil:
        # a whole block (the usual case: the block of `local`, which hi cuts short only at the end of
        # a chunk shorter than its header says, a damaged one) straight into the array
        if start + nbytes == min(start + bs, h.nbytes):
            r = blz_decode_block(p, n, start // bs, <uint8_t *>out, nbytes)
        if r == BLZ_DEC_OTHER:
            ret = blosc_getitem(p, <int>(start // ts), <int>(nbytes // ts), out)
        else:
            ret = <int>r
    if ret != nbytes:
        raise ChunkError(f"corrupted Blosc chunk{located(ch._where)}: block decoding failed (return code {ret})")
    return lo, block


cdef int take_core(const uint8_t *src, header_t *h, const cnp.intp_t *pos, Py_ssize_t n, Py_ssize_t base,
                    Py_ssize_t itemsize, char *out, const cnp.intp_t *rows, Py_ssize_t first_row,
                    char *scratch, Py_ssize_t *ndec, bint whole) noexcept nogil:
    """Items ``pos[k] - base`` (ascending, checked by the caller) of the chunk at `src` into rows of `out`
    (``rows[k]``, or ``first_row + k`` when `rows` is NULL).  `scratch` holds the chunk's nbytes.

    Each Blosc block that holds a wanted item is decoded once, into `scratch`, and nothing else is
    decoded; when those blocks are two thirds of the chunk or more, the whole chunk is decoded at once
    instead (blosc_getitem allocates its buffers and copies each block once more: a block read alone
    costs about 1.5x its share of a whole decode), and always with `whole` (a chunk whose typesize does
    not divide its items: Blosc reads parts only in typesize units).  Returns 0, or the failing Blosc
    return code (or -1); `ndec` counts the blocks decoded."""
    cdef Py_ssize_t k, r, b0, j, cur = -1, bstart, blen, ntouched = 0, ts = h.typesize, bs = h.blocksize
    cdef int ret
    if h.flags & C_MEMCPYED:
        for k in range(n):
            r = rows[k] if rows != NULL else first_row + k
            memcpy(out + r * itemsize, src + 16 + (pos[k] - base) * itemsize, itemsize)
        return 0
    # the blocks touched, counted first: that decides between block reads and one whole decode
    for k in range(n):
        j = (pos[k] - base) * itemsize // bs
        if j != cur:
            ntouched += 1
            cur = j
    cur = -1
    if whole or ntouched * 3 >= h.nblocks * 2:
        ret = blosc_decompress_ctx(src, scratch, h.nbytes, 1)
        if ret != h.nbytes:
            return ret if ret != 0 else -1
        if rows != NULL:
            for k in range(n):
                memcpy(out + rows[k] * itemsize, scratch + (pos[k] - base) * itemsize, itemsize)
        else:
            # rows in order: a run of consecutive items (a boolean mask's) is one copy
            k = 0
            while k < n:
                j = k + 1
                while j < n and pos[j] == pos[j - 1] + 1:
                    j += 1
                memcpy(out + (first_row + k) * itemsize, scratch + (pos[k] - base) * itemsize,
                       (j - k) * itemsize)
                k = j
        ndec[0] += h.nblocks
        return 0
    for k in range(n):
        r = rows[k] if rows != NULL else first_row + k
        b0 = (pos[k] - base) * itemsize
        j = b0 // bs
        if (b0 + itemsize - 1) // bs != j:
            # an item across two blocks: decode just its bytes
            ret = blosc_getitem(src, <int>(b0 // ts), <int>(itemsize // ts), out + r * itemsize)
            if ret != itemsize:
                return ret if ret != 0 else -1
            ndec[0] += 2
            continue
        if j != cur:
            bstart = j * bs
            blen = h.nbytes - bstart if h.nbytes - bstart < bs else bs
            ret = blosc_getitem(src, <int>(bstart // ts), <int>(blen // ts), scratch)
            if ret != blen:
                return ret if ret != 0 else -1
            cur = j
            ndec[0] += 1
        memcpy(out + r * itemsize, scratch + (b0 - j * bs), itemsize)
    return 0


def take_into(buf, const cnp.intp_t[::1] local, Py_ssize_t itemsize, cnp.ndarray dest not None,
              const cnp.intp_t[::1] rows=None, Py_ssize_t first_row=0, bint check=True, where=None):
    """Copy items `local` (ascending) of a chunk of `itemsize`-byte items into rows of `dest`.

    Item k goes to row ``rows[k]`` of `dest` (or ``first_row + k`` without `rows`).  Each Blosc block
    that holds a wanted item is decoded once, into a scratch block, and nothing else is decoded; when
    those blocks are two thirds of the chunk or more, the whole chunk is decoded at once instead (a
    block read alone costs about 1.5x its share of a whole decode).  The loop runs without the GIL.
    Returns the number of blocks decoded.
    """
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    cdef Py_ssize_t n = local.shape[0], k, r, nrows, ts, bs, ndec = 0, ntouched = 0, cur, j
    cdef char *scratch = NULL
    cdef int ret = 0
    parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    if itemsize <= 0:
        raise ValueError(f"take_into: itemsize must be positive, got {itemsize}")
    if rows is not None and rows.shape[0] != n:
        raise ValueError("take_into: rows and local differ in length")
    ts = h.typesize
    bs = h.blocksize
    if itemsize % ts or bs % ts or h.nbytes % ts:
        raise ValueError(f"take_into: the chunk's typesize {ts} does not divide its items and blocks")
    if not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest):
        raise ValueError("take_into: the output array must be C-contiguous and writeable")
    nrows = cnp.PyArray_NBYTES(dest) // itemsize
    for k in range(n):
        if local[k] < 0 or (local[k] + 1) * itemsize > h.nbytes or (k and local[k] < local[k - 1]):
            raise IndexError(f"take_into: item {local[k]} out of order or outside the chunk's "
                             f"{h.nbytes // itemsize}")
        r = rows[k] if rows is not None else first_row + k
        if r < 0 or r >= nrows:
            raise IndexError(f"take_into: row {r} outside the output's {nrows}")
    if n == 0:
        return 0
    if check and not (h.flags & FLAG_MEMCPYED):
        # the streams of the blocks from the first item's to the last's, or of all of them when
        # take_core will decode the whole chunk (two thirds of the blocks touched)
        cur = -1
        for k in range(n):
            j = local[k] * itemsize // bs
            if j != cur:
                ntouched += 1
                cur = j
        if ntouched * 3 >= h.nblocks * 2:
            _check_blocks(&v[0], &h, 0, h.nblocks - 1, where)
        else:
            _check_blocks(&v[0], &h, local[0] * itemsize // bs, ((local[n - 1] + 1) * itemsize - 1) // bs, where)
    if not (h.flags & FLAG_MEMCPYED):
        scratch = <char *>malloc(max(1, h.nbytes))
        if scratch == NULL:
            raise MemoryError()
    try:
        with nogil:
            ret = take_core(&v[0], &h, &local[0], n, 0, itemsize, <char *>cnp.PyArray_DATA(dest),
                             &rows[0] if rows is not None else NULL, first_row, scratch, &ndec, False)
    finally:
        free(scratch)
    if ret != 0:
        raise ChunkError(f"corrupted Blosc chunk{located(where)}: block decoding failed (return code {ret})")
    return ndec


def block_ranges(buf, Py_ssize_t start, Py_ssize_t nbytes, where=None):
    """The byte ranges of the chunk that `getitem_into` needs for bytes [start, start+nbytes).

    `buf` needs only the header and the bstarts filled in (the rest may be zeros); it must be
    ctbytes long, or be exactly the header plus bstarts with `ctbytes` taken from the header.
    Returns a list of (begin, end) pairs, the header and bstarts first.
    """
    cdef const uint8_t[::1] v = bytes_view(buf)
    cdef header_t h
    cdef Py_ssize_t j, first, last, k, nb
    cdef int32_t b, end, s
    if v.shape[0] < 16:
        raise ChunkError(f"truncated Blosc chunk{located(where)}: fewer than 16 bytes")
    # parse against the length the header claims; the caller reads only what we return
    parse_header(&v[0], read_i32(&v[0] + 12), &h, where, True)
    if h.flags & FLAG_MEMCPYED:
        return [(0, 16), (16 + start, 16 + start + nbytes)]
    nb = h.nblocks
    if v.shape[0] < 16 + 4 * nb:
        raise ChunkError(f"truncated Blosc chunk{located(where)}: bstarts missing")
    if start < 0 or nbytes <= 0 or start + nbytes > h.nbytes:
        return [(0, 16 + 4 * nb)]
    first = start // h.blocksize
    last = (start + nbytes - 1) // h.blocksize
    ranges = [(0, 16 + 4 * nb)]
    for j in range(first, last + 1):
        b = read_i32(&v[0] + 16 + 4 * j)
        if b < 16 + 4 * nb or b >= h.ctbytes:
            raise ChunkError(f"bad Blosc chunk{located(where)}: block {j} starts at {b}, outside the chunk")
        # a block ends where the next one in file order starts (Blosc's threads may store blocks out
        # of order), or at the end of the chunk
        end = <int32_t>h.ctbytes
        for k in range(nb):
            s = read_i32(&v[0] + 16 + 4 * k)
            if b < s < end:
                end = s
        ranges.append((b, end))
    return ranges


def compressor_list():
    """The codec names this build of C-Blosc supports."""
    return (<bytes>blosc_list_compressors()).decode().split(",")


def complib_info(cname):
    """(library name, version) of the library behind a codec name."""
    cdef char *lib
    cdef char *ver
    cdef int code = blosc_get_complib_info((<str>cname).encode(), &lib, &ver)
    if code < 0:
        raise ValueError(f"compressor {cname!r} is not available")
    # both strings are malloc'ed by C-Blosc for the caller to free
    try:
        return (<bytes>lib).decode(), (<bytes>ver).decode()
    finally:
        free(lib)
        free(ver)


def blosc_version():
    """(version string, date string) of the linked C-Blosc."""
    return ((<bytes>blosc_get_version_string()).decode(), (<bytes>BLOSC_VERSION_DATE).decode())

