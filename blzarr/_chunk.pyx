# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One Blosc 1.x chunk: validate, compress, decompress into a caller's buffer, read the items of some blocks.

This module knows nothing of files or arrays of chunks.  Every compressed input is checked against its
real length (header fields, bstarts and the split streams of the blocks about to be decoded) before the
C library sees it, because the C decoders trust the sizes written in the header.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free, qsort
from libc.string cimport memcpy
from cpython.ref cimport PyObject, Py_XDECREF
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize

cimport numpy as cnp

from blzarr._blosc cimport (
    BLOSC_MAX_OVERHEAD, BLOSC_MAX_TYPESIZE, BLOSC_MAX_BUFFERSIZE, BLOSC_VERSION_FORMAT,
    BLOSC_VERSION_STRING, BLOSC_VERSION_DATE, BLOSC_MAX_THREADS,
    blosc_compress_ctx, blosc_decompress_ctx, blosc_getitem, blosc_list_compressors,
    blosc_get_complib_info, blosc_compname_to_compcode, blosc_get_version_string,
    blosc_set_splitmode, BLOSC_NEVER_SPLIT,
)
from blzarr.errors import ChunkError

cnp.import_array()

from numpy import dtype as np_dtype, frombuffer as np_frombuffer, zeros as np_zeros

np_f8 = np_dtype("f8")
np_f4 = np_dtype("f4")
np_i8 = np_dtype("i8")
np_u8 = np_dtype("u8")

# Blocks are compressed whole, never split into typesize streams.  In split mode C-Blosc 1.x
# multiplies a requested blocksize by the typesize and never makes blocks under 64 KB, so a random
# read would decode 64 KB or more; whole 16 KB blocks cost about 1% in size on real data and decode
# 3-8x faster.  Chunks record the choice in their header (flag 0x10), and every C-Blosc 1.x reader,
# bcolz's included, decodes them.  This is process-wide state of the library, set once here.
blosc_set_splitmode(BLOSC_NEVER_SPLIT)

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

cdef enum:
    C_MEMCPYED = 0x02          # FLAG_MEMCPYED, for code without the GIL
    C_DONT_SPLIT = 0x10        # FLAG_DONT_SPLIT
    MIN_SPLIT_ITEMS = 128      # blocksize / typesize from which a block is split into typesize streams
    MAX_SPLITS = 16


cdef inline int32_t _read_i32(const uint8_t *p) noexcept nogil:
    return <int32_t>(<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24))


cdef inline int _threads_for(int nthreads, Py_ssize_t nbytes) noexcept:
    if nbytes < _PARALLEL_MIN:
        return 1
    return max(1, min(nthreads, BLOSC_MAX_THREADS))


cdef str _where(object where):
    return f" ({where})" if where else ""


cdef int _parse_header(const uint8_t *p, Py_ssize_t buflen, header_t *h, object where,
                       bint lazy) except -1:
    """Fill `h` from the 16-byte header and check every field against the buffer length.

    With `lazy`, the buffer may be only partially filled in, but it still has its full ctbytes length.
    """
    if buflen < 16:
        raise ChunkError(f"truncated Blosc chunk{_where(where)}: {buflen} bytes, fewer than the 16-byte header")
    h.version = p[0]
    h.versionlz = p[1]
    h.flags = p[2]
    h.typesize = p[3]
    h.nbytes = _read_i32(p + 4)
    h.blocksize = _read_i32(p + 8)
    h.ctbytes = _read_i32(p + 12)
    if h.version != BLOSC_VERSION_FORMAT:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: format version {h.version}, expected {BLOSC_VERSION_FORMAT}")
    if h.flags & 0x08:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: reserved flag bit 0x08 is set")
    if (h.flags >> 5) > 4:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: unknown codec id {h.flags >> 5}")
    if h.typesize == 0:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: typesize is 0")
    if h.nbytes < 0 or h.nbytes > BLOSC_MAX_BUFFERSIZE:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: nbytes {h.nbytes} out of range")
    if h.ctbytes != buflen:
        raise ChunkError(
            f"corrupted or truncated Blosc chunk{_where(where)}: header says {h.ctbytes} compressed bytes, "
            f"the buffer holds {buflen}")
    if h.flags & FLAG_MEMCPYED:
        h.nblocks = 0
        if h.ctbytes != h.nbytes + 16:
            raise ChunkError(
                f"bad Blosc chunk{_where(where)}: stored raw, but {h.ctbytes} bytes do not hold "
                f"16 + {h.nbytes}")
        return 0
    if h.blocksize <= 0:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: blocksize {h.blocksize}")
    if h.nbytes == 0:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: compressed chunk with nbytes 0")
    if h.blocksize > h.nbytes:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: blocksize {h.blocksize} > nbytes {h.nbytes}")
    if h.ctbytes > h.nbytes + 16:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: {h.ctbytes} compressed bytes for {h.nbytes} bytes")
    h.nblocks = (h.nbytes + h.blocksize - 1) // h.blocksize
    if 16 + 4 * h.nblocks > h.ctbytes:
        raise ChunkError(
            f"bad Blosc chunk{_where(where)}: {h.nblocks} block offsets do not fit in {h.ctbytes} bytes")
    return 0


cdef int _cmp_i32(const void *a, const void *b) noexcept nogil:
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
        b = _read_i32(p + 16 + 4 * j)
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
        b = _read_i32(p + 16 + 4 * j)
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
            csize = _read_i32(p + pos)
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
        raise ChunkError(f"bad Blosc chunk{_where(where)}: block {f.block} starts at {f.value}, outside "
                         f"[{16 + 4 * h.nblocks}, {h.ctbytes})")
    if f.kind == FAULT_TWO_STARTS:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: two blocks start at {f.value}")
    if f.kind == FAULT_TRUNCATED:
        raise ChunkError(f"bad Blosc chunk{_where(where)}: block {f.block} is truncated")
    raise ChunkError(
        f"bad Blosc chunk{_where(where)}: block {f.block} stream {f.stream} claims {f.value} bytes "
        f"(at most {min(f.neblock, f.end - f.pos - 4)} possible)")


cdef int chunk_valid(const uint8_t *p, Py_ssize_t buflen, Py_ssize_t expected_nbytes,
                     header_t *h) noexcept nogil:
    """1 when the `buflen` bytes at `p` are a well-formed chunk (holding `expected_nbytes` when >= 0),
    with `h` filled in; else 0.  The acceptance test of `validate` (which explains a rejection), without
    the GIL: every check of `_parse_header` and `_check_blocks` over all blocks."""
    cdef Py_ssize_t nb
    cdef int32_t *st
    cdef fault_t f
    cdef int ok
    if buflen < 16 or p == NULL:
        return 0
    h.version = p[0]
    h.versionlz = p[1]
    h.flags = p[2]
    h.typesize = p[3]
    h.nbytes = _read_i32(p + 4)
    h.blocksize = _read_i32(p + 8)
    h.ctbytes = _read_i32(p + 12)
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


cdef const uint8_t[::1] _as_bytes_view(object buf):
    if isinstance(buf, cnp.ndarray):
        buf = (<cnp.ndarray>buf).reshape(-1).view("u1")
    return buf


def header(buf, where=None):
    """The fields of a chunk's 16-byte header as a dict (checked against the buffer length)."""
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    return dict(version=h.version, versionlz=h.versionlz, flags=h.flags, typesize=h.typesize,
                nbytes=h.nbytes, blocksize=h.blocksize, ctbytes=h.ctbytes, nblocks=h.nblocks,
                codec=CODEC_FORMATS[h.flags >> 5],
                shuffle=(2 if h.flags & FLAG_BITSHUFFLE else (1 if h.flags & FLAG_SHUFFLE else 0)),
                memcpyed=bool(h.flags & FLAG_MEMCPYED))


def validate(buf, Py_ssize_t expected_nbytes=-1, where=None):
    """Check the whole structure of a chunk; return its uncompressed size.

    `expected_nbytes` >= 0 also requires the chunk to hold exactly that many bytes.
    """
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    if chunk_valid(&v[0] if v.shape[0] else NULL, v.shape[0], expected_nbytes, &h):
        return h.nbytes
    explain(buf, expected_nbytes, where)
    raise ChunkError(f"bad Blosc chunk{_where(where)}: its structure does not hold together")


def explain(buf, Py_ssize_t expected_nbytes=-1, where=None):
    """Raise the ChunkError that says why `validate` rejects `buf` (field by field, block by block);
    return its uncompressed size when these checks find nothing (the tests require that they then
    agree with `chunk_valid`)."""
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    if expected_nbytes >= 0 and h.nbytes != expected_nbytes:
        raise ChunkError(
            f"bad Blosc chunk{_where(where)}: it holds {h.nbytes} bytes, {expected_nbytes} expected")
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
        which = _minmax_kind(src, nat)
        if which == MM_NONE:
            raise ValueError(f"compress: no statistics for dtype {src.dtype}")
        omin = <char *>cnp.PyArray_DATA(mins) + at * cnp.PyArray_ITEMSIZE(src)
        omax = <char *>cnp.PyArray_DATA(maxs) + at * cnp.PyArray_ITEMSIZE(src)
    nbytes = cnp.PyArray_NBYTES(src)
    nthreads = _threads_for(nthreads, nbytes)
    if nbytes > BLOSC_MAX_BUFFERSIZE:
        raise ValueError(f"a chunk can hold at most {BLOSC_MAX_BUFFERSIZE} bytes, got {nbytes}")
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
                nan = _minmax_run(which, csrc, nitems, omin, omax)
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
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    cdef char *out
    cdef int ret
    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    out = _dest_ptr(dest, offset, h.nbytes, "decompress_into")
    if h.nbytes == 0:
        return 0
    if check:
        _check_blocks(&v[0], &h, 0, h.nblocks - 1, where)
    nthreads = _threads_for(nthreads, h.nbytes)
    with nogil:
        ret = blosc_decompress_ctx(&v[0], out, h.nbytes, nthreads)
    if ret != h.nbytes:
        raise ChunkError(f"corrupted Blosc chunk{_where(where)}: decompression failed (return code {ret})")
    return ret


def getitem_into(buf, Py_ssize_t start, Py_ssize_t nbytes, cnp.ndarray dest not None, Py_ssize_t offset=0,
                 bint check=True, where=None):
    """Decode bytes [start, start+nbytes) of a chunk into `dest` at byte `offset`, touching only the
    blocks that hold them.

    `buf` may be a "lazy" chunk: ctbytes long, with only the header, the bstarts and the bytes of those
    blocks filled in.  `start` and `nbytes` must be multiples of the chunk's typesize.
    """
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    cdef char *out
    cdef int ret
    cdef Py_ssize_t ts
    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, True)
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
        _check_blocks(&v[0], &h, start // h.blocksize, (start + nbytes - 1) // h.blocksize, where)
    with nogil:
        ret = blosc_getitem(&v[0], <int>(start // ts), <int>(nbytes // ts), out)
    if ret != nbytes:
        raise ChunkError(f"corrupted Blosc chunk{_where(where)}: block decoding failed (return code {ret})")
    return ret


cdef int _take_core(const uint8_t *src, header_t *h, const cnp.intp_t *pos, Py_ssize_t n, Py_ssize_t base,
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
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    cdef Py_ssize_t n = local.shape[0], k, r, nrows, ts, bs, ndec = 0, ntouched = 0, cur, j
    cdef char *scratch = NULL
    cdef int ret = 0
    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
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
        # _take_core will decode the whole chunk (two thirds of the blocks touched)
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
            ret = _take_core(&v[0], &h, &local[0], n, 0, itemsize, <char *>cnp.PyArray_DATA(dest),
                             &rows[0] if rows is not None else NULL, first_row, scratch, &ndec, False)
    finally:
        free(scratch)
    if ret != 0:
        raise ChunkError(f"corrupted Blosc chunk{_where(where)}: block decoding failed (return code {ret})")
    return ndec


def block_ranges(buf, Py_ssize_t start, Py_ssize_t nbytes, where=None):
    """The byte ranges of the chunk that `getitem_into` needs for bytes [start, start+nbytes).

    `buf` needs only the header and the bstarts filled in (the rest may be zeros); it must be
    ctbytes long, or be exactly the header plus bstarts with `ctbytes` taken from the header.
    Returns a list of (begin, end) pairs, the header and bstarts first.
    """
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    cdef Py_ssize_t j, first, last, k, nb
    cdef int32_t b, end, s
    if v.shape[0] < 16:
        raise ChunkError(f"truncated Blosc chunk{_where(where)}: fewer than 16 bytes")
    # parse against the length the header claims; the caller reads only what we return
    _parse_header(&v[0], _read_i32(&v[0] + 12), &h, where, True)
    if h.flags & FLAG_MEMCPYED:
        return [(0, 16), (16 + start, 16 + start + nbytes)]
    nb = h.nblocks
    if v.shape[0] < 16 + 4 * nb:
        raise ChunkError(f"truncated Blosc chunk{_where(where)}: bstarts missing")
    if start < 0 or nbytes <= 0 or start + nbytes > h.nbytes:
        return [(0, 16 + 4 * nb)]
    first = start // h.blocksize
    last = (start + nbytes - 1) // h.blocksize
    ranges = [(0, 16 + 4 * nb)]
    for j in range(first, last + 1):
        b = _read_i32(&v[0] + 16 + 4 * j)
        if b < 16 + 4 * nb or b >= h.ctbytes:
            raise ChunkError(f"bad Blosc chunk{_where(where)}: block {j} starts at {b}, outside the chunk")
        end = <int32_t>h.ctbytes
        for k in range(nb):
            s = _read_i32(&v[0] + 16 + 4 * k)
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
    try:
        return (<bytes>lib).decode(), (<bytes>ver).decode()
    finally:
        free(lib)
        free(ver)


def blosc_version():
    """(version string, date string) of the linked C-Blosc."""
    return ((<bytes>blosc_get_version_string()).decode(), (<bytes>BLOSC_VERSION_DATE).decode())


# ---------------------------------------------------------------------------------------------------
# Columns of rows straight out of byte-shuffled LZ4 blocks (``a[:, j]`` of a 2-D carray).  A block of
# typesize t that Blosc byte-shuffled holds byte b of its element e at ``b * (bsize // t) + e`` (its
# ``bsize % t`` last bytes are stored as they are, which whole rows of whole elements never leave).
# When every block is one LZ4 stream (the "don't split" flag, blzarr's default) each block is decoded
# alone into a small buffer that stays in the core's first-level cache, and only the bytes of the
# wanted elements are gathered from it into the result: no unshuffle of the whole block, no
# chunk-sized buffer, no strided copy afterwards.  Any other chunk is the caller's (decoded whole).
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity);

    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    #define BLZ_GATHER_LE 1
    #else
    #define BLZ_GATHER_LE 0
    #endif

    /* elements c0 .. c0+nc-1 of each of the `nrows` rows of `epr` 8-byte elements of a block shuffled
       with typesize 8 (`neq` elements), packed row after row into `out` */
    static void blz_gather8_scalar(const uint8_t *s, int64_t neq, int64_t nrows, int64_t epr,
                                   int64_t c0, int64_t nc, uint8_t *out) {
        int64_t r, c, e;
        const uint8_t *p0 = s, *p1 = s + neq, *p2 = s + 2 * neq, *p3 = s + 3 * neq;
        const uint8_t *p4 = s + 4 * neq, *p5 = s + 5 * neq, *p6 = s + 6 * neq, *p7 = s + 7 * neq;
        for (r = 0; r < nrows; r++) {
            for (c = 0; c < nc; c++) {
                e = r * epr + c0 + c;
                uint8_t *o = out + 8 * (r * nc + c);
                o[0] = p0[e]; o[1] = p1[e]; o[2] = p2[e]; o[3] = p3[e];
                o[4] = p4[e]; o[5] = p5[e]; o[6] = p6[e]; o[7] = p7[e];
            }
        }
    }

    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    #define BLZ_HAVE_AVX2_GATHER 1
    /* one element of each row of 8 elements (epr == 8, nc == 1): from each of the 8 byte planes a
       32-byte load holds 4 rows; a byte shuffle puts byte c0 of each row at byte b of that row's
       output word, and the 8 planes are or-ed together */
    __attribute__((target("avx2")))
    static void blz_gather8_col_avx2(const uint8_t *s, int64_t neq, int64_t nrows, int64_t c0,
                                     uint8_t *out) {
        __m256i m[8];
        int b, k;
        int64_t r;
        for (b = 0; b < 8; b++) {
            int8_t idx[32];
            /* output byte k of a 16-byte lane is byte k % 8 of row k / 8 of the lane */
            for (k = 0; k < 32; k++)
                idx[k] = (int8_t)((k % 8) == b ? ((k % 16) / 8) * 8 + c0 : -1);
            m[b] = _mm256_loadu_si256((const __m256i *)idx);
        }
        for (r = 0; r + 4 <= nrows; r += 4) {
            const uint8_t *p = s + 8 * r;
            __m256i acc = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)p), m[0]);
            for (b = 1; b < 8; b++)
                acc = _mm256_or_si256(acc, _mm256_shuffle_epi8(
                    _mm256_loadu_si256((const __m256i *)(p + b * neq)), m[b]));
            _mm256_storeu_si256((__m256i *)(out + 8 * r), acc);
        }
        if (r < nrows)
            blz_gather8_scalar(s + 8 * r, neq, nrows - r, 8, c0, 1, out + 8 * r);
    }
    static int blz_avx2_ok(void) {
        static int ok = -1;
        if (ok < 0) {
            __builtin_cpu_init();
            ok = __builtin_cpu_supports("avx2") ? 1 : 0;
        }
        return ok;
    }
    #else
    #define BLZ_HAVE_AVX2_GATHER 0
    static void blz_gather8_col_avx2(const uint8_t *s, int64_t neq, int64_t nrows, int64_t c0,
                                     uint8_t *out) { (void)s; (void)neq; (void)nrows; (void)c0; (void)out; }
    static int blz_avx2_ok(void) { return 0; }
    #endif

    /* the AVX2 gather in use: set once at import (and by tests, to run the scalar loop) */
    static int blz_gather_avx2 = 0;

    static void blz_gather8(const uint8_t *s, int64_t neq, int64_t nrows, int64_t epr, int64_t c0,
                            int64_t nc, uint8_t *out) {
        if (epr == 8 && nc == 1 && blz_gather_avx2)
            blz_gather8_col_avx2(s, neq, nrows, c0, out);
        else
            blz_gather8_scalar(s, neq, nrows, epr, c0, nc, out);
    }
    """
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
    cdef const uint8_t[::1] v = _as_bytes_view(buf)
    cdef header_t h
    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, None, False)
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
        b = _read_i32(p + 16 + 4 * j)
        if b < lo or <Py_ssize_t>b + 4 > h.ctbytes:
            return -1
        cs = _read_i32(p + b)
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


# ---------------------------------------------------------------------------------------- statistics
# One pass over a chunk for its statistics (blzarr.stats): minimum, maximum and the count of NaN/NaT,
# in the call that compresses the chunk, before compressing it (the pass brings the chunk into this
# core's cache, from where the compressor reads it).  NumPy has no fused min/max, and its two passes
# cost 5-10% of writing data that compresses fast.  Every loop is integer min/max the compiler
# vectorizes, with enough independent accumulators (256 bytes of each) that no vector waits for the
# previous one's result; floats are taken by their bits as integers (see blz_minmax_f64), NaN and NaT
# found in the same pass and handled in a second one only for a chunk holding them.  On x86-64 with
# GCC each loop is built for AVX-512, AVX2 and the baseline, chosen at load time.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    #define BLZ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
    #else
    #define BLZ_CLONES
    #endif
    #define BLZ_LANES(T) (256 / (int)sizeof(T))
    /* the items before the first 64-byte boundary (at most n): the vector loop starts there, as loads
       across two cache lines run at half speed (NumPy's data starts 16 bytes past one) */
    #define BLZ_HEAD(p, T, n) ((int64_t)(((64 - ((uintptr_t)(p) & 63)) & 63) / sizeof(T)) < (n) ? \\
                               (int64_t)(((64 - ((uintptr_t)(p) & 63)) & 63) / sizeof(T)) : (n))

    /* min and max of n > 0 integers; BLZ_LANES independent accumulators (no dependency chain from one
       vector to the next), folded at the end. */
    #define BLZ_INT_MINMAX(NAME, T) \\
    static BLZ_CLONES void NAME(const void *vv, int64_t n, void *mn, void *mx) { \\
        typedef T __attribute__((may_alias)) T##_al; \\
        const T##_al *v = (const T##_al *)vv; \\
        T a[BLZ_LANES(T)], b[BLZ_LANES(T)], A = v[0], B = v[0]; \\
        int64_t i = 0, head = BLZ_HEAD(vv, T, n); \\
        for (int j = 0; j < BLZ_LANES(T); j++) { a[j] = A; b[j] = B; } \\
        for (; i < head; i++) { T x = v[i]; A = x < A ? x : A; B = x > B ? x : B; } \\
        for (; i + BLZ_LANES(T) <= n; i += BLZ_LANES(T)) \\
            for (int j = 0; j < BLZ_LANES(T); j++) { T x = v[i + j]; a[j] = x < a[j] ? x : a[j]; b[j] = x > b[j] ? x : b[j]; } \\
        for (; i < n; i++) { T x = v[i]; A = x < A ? x : A; B = x > B ? x : B; } \\
        for (int j = 0; j < BLZ_LANES(T); j++) { A = a[j] < A ? a[j] : A; B = b[j] > B ? b[j] : B; } \\
        *(T *)mn = A; *(T *)mx = B; \\
    }
    BLZ_INT_MINMAX(blz_minmax_i8, int8_t)
    BLZ_INT_MINMAX(blz_minmax_u8, uint8_t)
    BLZ_INT_MINMAX(blz_minmax_i16, int16_t)
    BLZ_INT_MINMAX(blz_minmax_u16, uint16_t)
    BLZ_INT_MINMAX(blz_minmax_i32, int32_t)
    BLZ_INT_MINMAX(blz_minmax_u32, uint32_t)
    BLZ_INT_MINMAX(blz_minmax_i64, int64_t)
    BLZ_INT_MINMAX(blz_minmax_u64, uint64_t)

    /* signed min, signed max and unsigned max of n > 0 integers of type I (U unsigned), in one pass */
    #define BLZ_SSU(NAME, I, U) \\
    static BLZ_CLONES void NAME(const void *vv, int64_t n, I *smin, I *smax, U *umax) { \\
        typedef I __attribute__((may_alias)) I##_al; \\
        const I##_al *v = (const I##_al *)vv; \\
        I a[BLZ_LANES(I)], b[BLZ_LANES(I)], A = v[0], B = v[0]; U c[BLZ_LANES(I)], C = (U)v[0]; \\
        int64_t i = 0, head = BLZ_HEAD(vv, I, n); \\
        for (int j = 0; j < BLZ_LANES(I); j++) { a[j] = A; b[j] = B; c[j] = C; } \\
        for (; i < head; i++) { I x = v[i]; U y = (U)x; A = x < A ? x : A; B = x > B ? x : B; C = y > C ? y : C; } \\
        for (; i + BLZ_LANES(I) <= n; i += BLZ_LANES(I)) \\
            for (int j = 0; j < BLZ_LANES(I); j++) { \\
                I x = v[i + j]; U y = (U)x; \\
                a[j] = x < a[j] ? x : a[j]; b[j] = x > b[j] ? x : b[j]; c[j] = y > c[j] ? y : c[j]; } \\
        for (; i < n; i++) { I x = v[i]; U y = (U)x; A = x < A ? x : A; B = x > B ? x : B; C = y > C ? y : C; } \\
        for (int j = 0; j < BLZ_LANES(I); j++) { A = a[j] < A ? a[j] : A; B = b[j] > B ? b[j] : B; C = c[j] > C ? c[j] : C; } \\
        *smin = A; *smax = B; *umax = C; \\
    }
    BLZ_SSU(blz_ssu64, int64_t, uint64_t)
    BLZ_SSU(blz_ssu32, int32_t, uint32_t)

    /* int64 with NaT (INT64_MIN) left out; returns the count of NaT.  NaT is the smallest int64: one
       min/max pass, then only for a chunk whose minimum is NaT, a pass counting them and one for the
       minimum without them. */
    static int64_t blz_minmax_nat(const void *vv, int64_t n, void *mn, void *mx) {
        const int64_t *v = (const int64_t *)vv;
        int64_t a, b, nat = 0;
        blz_minmax_i64(vv, n, &a, &b);
        if (a == INT64_MIN) {
            a = INT64_MAX;
            for (int64_t i = 0; i < n; i++) {
                int64_t x = v[i];
                nat += x == INT64_MIN;
                if (x != INT64_MIN && x < a) a = x;
            }
        }
        *(int64_t *)mn = a; *(int64_t *)mx = b;
        return nat;
    }

    /* Floats by their bits as integers: among values without NaN, the signed integer order is the
       float order for non-negative values and the reverse for negative ones, so the smallest float is
       the largest unsigned bits when a negative value is there (else the smallest signed), and the
       largest float the largest signed bits when a non-negative value is there (else the smallest
       signed).  NaN shows in the same pass (a positive NaN's bits above +inf's as signed, a negative
       NaN's above -inf's as unsigned); only then a second pass counts NaN and takes min and max
       without them (floats compared as integers ordered like them: the bits of a negative value with
       every bit but the sign flipped).  Returns the count of NaN. */
    #define BLZ_FLIP(I, U, k) ((k) ^ (I)(((U)((k) >> (8 * sizeof(I) - 1))) >> 1))
    #define BLZ_FLOAT_MINMAX(NAME, SSU, I, U, ABSMASK, INF) \\
    static int64_t NAME(const void *vv, int64_t n, void *kmin, void *kmax) { \\
        typedef I __attribute__((may_alias)) I##_al; \\
        const I##_al *v = (const I##_al *)vv; \\
        I smin, smax; U umax; int64_t nan = 0; \\
        SSU(vv, n, &smin, &smax, &umax); \\
        if (smax <= (I)INF && umax <= ((U)INF | ((U)1 << (8 * sizeof(I) - 1)))) { \\
            *(I *)kmin = smin < 0 ? (I)umax : smin; \\
            *(I *)kmax = smax >= 0 ? smax : smin; \\
            return 0; \\
        } \\
        I a = (I)ABSMASK, b = (I)(~(U)ABSMASK); \\
        for (int64_t i = 0; i < n; i++) { \\
            I u = v[i]; \\
            if ((u & (I)ABSMASK) > (I)INF) { nan++; continue; } \\
            I k = BLZ_FLIP(I, U, u); \\
            a = k < a ? k : a; b = k > b ? k : b; \\
        } \\
        *(I *)kmin = BLZ_FLIP(I, U, a); \\
        *(I *)kmax = BLZ_FLIP(I, U, b); \\
        return nan; \\
    }
    BLZ_FLOAT_MINMAX(blz_minmax_f64, blz_ssu64, int64_t, uint64_t, 0x7fffffffffffffffLL, 0x7ff0000000000000LL)
    BLZ_FLOAT_MINMAX(blz_minmax_f32, blz_ssu32, int32_t, uint32_t, 0x7fffffff, 0x7f800000)
    """
    void blz_minmax_i8(const void *v, int64_t n, void *mn, void *mx) nogil
    void blz_minmax_u8(const void *v, int64_t n, void *mn, void *mx) nogil
    void blz_minmax_i16(const void *v, int64_t n, void *mn, void *mx) nogil
    void blz_minmax_u16(const void *v, int64_t n, void *mn, void *mx) nogil
    void blz_minmax_i32(const void *v, int64_t n, void *mn, void *mx) nogil
    void blz_minmax_u32(const void *v, int64_t n, void *mn, void *mx) nogil
    void blz_minmax_i64(const void *v, int64_t n, void *mn, void *mx) nogil
    void blz_minmax_u64(const void *v, int64_t n, void *mn, void *mx) nogil
    int64_t blz_minmax_nat(const void *v, int64_t n, void *mn, void *mx) nogil
    int64_t blz_minmax_f64(const void *v, int64_t n, void *mn, void *mx) nogil
    int64_t blz_minmax_f32(const void *v, int64_t n, void *mn, void *mx) nogil


cdef enum:
    MM_NONE = 0
    MM_F64, MM_F32, MM_NAT, MM_I64, MM_I32, MM_I16, MM_I8, MM_U64, MM_U32, MM_U16, MM_U8


cdef int _minmax_kind(cnp.ndarray a, bint nat) except -1:
    """Which loop of `_minmax_run` takes the items of `a` (MM_NONE: none does)."""
    cdef char kind = ord(a.dtype.kind)
    cdef Py_ssize_t size = a.itemsize
    if not a.dtype.isnative:
        return MM_NONE
    if kind == b'f':
        return MM_F64 if size == 8 else MM_F32 if size == 4 else MM_NONE
    if kind == b'i':
        if size == 8:
            return MM_NAT if nat else MM_I64
        return MM_I32 if size == 4 else MM_I16 if size == 2 else MM_I8 if size == 1 else MM_NONE
    if kind == b'u':
        return MM_U64 if size == 8 else MM_U32 if size == 4 else MM_U16 if size == 2 else MM_U8 if size == 1 else MM_NONE
    if kind == b'b' and size == 1:
        return MM_U8
    return MM_NONE


cdef int64_t _minmax_run(int which, const void *p, int64_t n, void *mn, void *mx) noexcept nogil:
    """The smallest item of p[:n] into *mn, the largest into *mx (NaN/NaT left out); the count of
    NaN/NaT.  n > 0."""
    if which == MM_F64:
        return blz_minmax_f64(p, n, mn, mx)
    if which == MM_F32:
        return blz_minmax_f32(p, n, mn, mx)
    if which == MM_NAT:
        return blz_minmax_nat(p, n, mn, mx)
    if which == MM_I64:
        blz_minmax_i64(p, n, mn, mx)
    elif which == MM_I32:
        blz_minmax_i32(p, n, mn, mx)
    elif which == MM_I16:
        blz_minmax_i16(p, n, mn, mx)
    elif which == MM_I8:
        blz_minmax_i8(p, n, mn, mx)
    elif which == MM_U64:
        blz_minmax_u64(p, n, mn, mx)
    elif which == MM_U32:
        blz_minmax_u32(p, n, mn, mx)
    elif which == MM_U16:
        blz_minmax_u16(p, n, mn, mx)
    else:
        blz_minmax_u8(p, n, mn, mx)
    return 0


def minmax(cnp.ndarray a not None, cnp.ndarray out not None, bint nat=False):
    """Put the smallest and largest value of the 1-d contiguous array `a` into out[0] and out[1] (an
    array of a's dtype) in one pass, NaN (floats) left out, and with `nat` the smallest int64 (NaT:
    pass the int64 view of a datetime64 or timedelta64); return the count of NaN/NaT.

    `a` must be native-endian, of a bool, integer or float dtype, and not empty.  When every value
    is NaN, out holds nothing meaningful (the count equals len(a))."""
    cdef Py_ssize_t n = a.shape[0] if a.ndim == 1 else 0
    cdef const void *p
    cdef char *o
    cdef int64_t nan = 0
    cdef int which
    cdef Py_ssize_t isz = cnp.PyArray_ITEMSIZE(a)
    if a.ndim != 1 or n == 0 or not cnp.PyArray_IS_C_CONTIGUOUS(a) or not a.dtype.isnative:
        raise ValueError("minmax needs a non-empty, contiguous, native-endian 1-d array")
    if out.dtype != a.dtype or out.ndim != 1 or out.shape[0] < 2 or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ValueError("minmax needs an output of two items of the array's dtype")
    which = _minmax_kind(a, nat)
    if which == MM_NONE:
        raise ValueError(f"minmax does not support dtype {a.dtype}")
    p = cnp.PyArray_DATA(a)
    o = <char *>cnp.PyArray_DATA(out)
    with nogil:
        nan = _minmax_run(which, p, n, o, o + isz)
    return nan


# ---------------------------------------------------------------------------------------------------
# Work over many in-memory chunks, one call per thread
#
# A `_ChunkWork` holds the chunks' pointers and headers (read with the GIL once), and `run()` does the
# work with the GIL released.  Several threads call `run()` on the same object: the items are cut into
# one contiguous share per thread; a thread does its own share first (so threads that fault in a fresh
# output touch separate pages), then helps with the others' (a thread that gets no core holds up only
# the item it has).  Items are claimed with an atomic counter per share.

cdef extern from *:
    """
    #if defined(_MSC_VER)
    #include <intrin.h>
    #if defined(_WIN64)
    #define BLZ_FETCH_ADD(p, v) ((Py_ssize_t)_InterlockedExchangeAdd64((volatile __int64 *)(p), (__int64)(v)))
    #define BLZ_CAS(p, o, n) (_InterlockedCompareExchange64((volatile __int64 *)(p), (__int64)(n), (__int64)(o)) == (__int64)(o))
    #else
    #define BLZ_FETCH_ADD(p, v) ((Py_ssize_t)_InterlockedExchangeAdd((volatile long *)(p), (long)(v)))
    #define BLZ_CAS(p, o, n) (_InterlockedCompareExchange((volatile long *)(p), (long)(n), (long)(o)) == (long)(o))
    #endif
    #define BLZ_LOAD(p) (*(volatile Py_ssize_t *)(p))
    #else
    #define BLZ_FETCH_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
    #define BLZ_CAS(p, o, n) __atomic_compare_exchange_n((p), &(o), (n), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
    #define BLZ_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
    #endif
    """
    Py_ssize_t BLZ_FETCH_ADD(Py_ssize_t *p, Py_ssize_t v) noexcept nogil
    bint BLZ_CAS(Py_ssize_t *p, Py_ssize_t o, Py_ssize_t n) noexcept nogil
    Py_ssize_t BLZ_LOAD(Py_ssize_t *p) noexcept nogil


# Scratch buffers of the threads (a decoded chunk each), kept for the next call: a fresh buffer of a
# chunk's size comes from mmap and costs its page faults and zeroing every time.  The pool is taken
# from and given back to with the GIL held.
cdef list _scratch_pool = []
# At most 8 buffers of at most 4 MB each (32 MB) stay allocated between calls.
cdef Py_ssize_t SCRATCH_KEEP_BYTES = 4 * 1024 * 1024     # larger buffers are freed after the call
cdef Py_ssize_t SCRATCH_KEEP_COUNT = 8


cdef bytearray _take_scratch(Py_ssize_t n):
    cdef Py_ssize_t i
    cdef bytearray b
    for i in range(len(_scratch_pool)):
        b = _scratch_pool[i]
        if len(b) >= n:
            del _scratch_pool[i]
            return b
    return PyByteArray_FromStringAndSize(NULL, n)


cdef void _give_scratch(bytearray b):
    if len(b) <= SCRATCH_KEEP_BYTES:
        _scratch_pool.append(b)
        if len(_scratch_pool) > SCRATCH_KEEP_COUNT:
            del _scratch_pool[0]


cdef class _ChunkWork:
    """Items over in-memory chunks, done by every thread that calls `run()` (see above)."""

    cdef readonly Py_ssize_t nparts
    cdef Py_ssize_t nitems, callers, failed, scratch_bytes
    cdef int failed_ret
    cdef Py_ssize_t *nxt
    cdef Py_ssize_t *end
    cdef const uint8_t **src
    cdef header_t *hdr
    cdef list keep
    cdef object wheres

    def __cinit__(self, *args, **kwargs):
        self.nxt = NULL
        self.end = NULL
        self.src = NULL
        self.hdr = NULL
        self.failed = -1
        self.failed_ret = 0

    def __dealloc__(self):
        free(self.nxt)
        free(self.end)
        free(self.src)
        free(self.hdr)

    cdef int _set_chunks(self, list bufs, Py_ssize_t nparts, object wheres) except -1:
        """The items' chunks (one per item), their headers parsed and checked against their lengths."""
        cdef Py_ssize_t n = len(bufs), k, p
        cdef const uint8_t[::1] v
        cdef object b
        self.nitems = n
        self.nparts = max(1, min(nparts, n))
        self.wheres = wheres
        self.keep = []
        self.src = <const uint8_t **>malloc(max(1, n) * sizeof(uint8_t *))
        self.hdr = <header_t *>malloc(max(1, n) * sizeof(header_t))
        self.nxt = <Py_ssize_t *>malloc(self.nparts * sizeof(Py_ssize_t))
        self.end = <Py_ssize_t *>malloc(self.nparts * sizeof(Py_ssize_t))
        if self.src == NULL or self.hdr == NULL or self.nxt == NULL or self.end == NULL:
            raise MemoryError()
        for k in range(n):
            b = bufs[k]
            if type(b) is bytes:
                self.src[k] = <const uint8_t *>_bytes_ptr(<PyObject *>b)
                _parse_header(self.src[k], len(<bytes>b), &self.hdr[k], self._where(k), False)
                self.keep.append(b)
            else:
                v = _as_bytes_view(b)
                self.src[k] = &v[0] if v.shape[0] else NULL
                _parse_header(self.src[k], v.shape[0], &self.hdr[k], self._where(k), False)
                self.keep.append(v)
        for p in range(self.nparts):
            self.nxt[p] = n * p // self.nparts
            self.end[p] = n * (p + 1) // self.nparts
        return 0

    cdef object _where(self, Py_ssize_t k):
        if self.wheres is None:
            return f"chunk {k} of a batch"
        return self.wheres[k]

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
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
                    if BLZ_CAS(&self.failed, none, k):
                        self.failed_ret = ret
                    return

    def run(self):
        """Do items until none is left (call it from up to `nparts` threads at once)."""
        cdef Py_ssize_t t = BLZ_FETCH_ADD(&self.callers, 1) % self.nparts
        cdef char *scratch = NULL
        cdef bytearray buf = None
        if self.scratch_bytes > 0:
            buf = _take_scratch(self.scratch_bytes)
            scratch = PyByteArray_AS_STRING(buf)
        try:
            with nogil:
                self._loop(t, scratch)
        finally:
            if buf is not None:
                _give_scratch(buf)

    def check(self):
        """Raise `ChunkError` for the first item that failed (after every `run()` has returned)."""
        if self.failed >= 0:
            raise ChunkError(f"corrupted Blosc chunk{_where(self._where(self.failed))}: decoding failed "
                             f"(return code {self.failed_ret})")


cdef class DecodeChunks(_ChunkWork):
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
        self.dest = dest
        self.out = <char *>cnp.PyArray_DATA(dest)
        total = cnp.PyArray_NBYTES(dest)
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
            if (sizes[k] and sizes[k] != self.hdr[k].nbytes and not (self.hdr[k].flags & FLAG_MEMCPYED)
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
        if nb == h.nbytes:
            ret = blosc_decompress_ctx(self.src[k], dst, nb, 1)
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
            ret = blosc_getitem(self.src[k], <int>(st // ts), <int>(nb // ts), dst)
        return 0 if ret == nb else (ret if ret != 0 else -1)


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


cdef class RowsChunks(_ChunkWork):
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
            if not (self.hdr[k].flags & FLAG_MEMCPYED):
                self.scratch_bytes = max(self.scratch_bytes, self.hdr[k].nbytes)

    def __dealloc__(self):
        free(self.offs)

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        return rows_of_chunk(self.src[k], &self.hdr[k], self.out + self.offs[k], self.rowsize, self.cstart,
                             self.csize, scratch, self.scratch_bytes)


# NumPy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src), step for step, so that the sum
# of a chunk is bit-identical to ``np.sum`` of the same values: blocks of at most 128 values summed with
# eight accumulators, longer runs split in two (at a multiple of 8) and the halves added.
ctypedef fused real_t:
    double
    float

cdef real_t _pairwise(const real_t *a, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i, n2
    cdef real_t res, r0, r1, r2, r3, r4, r5, r6, r7
    if n < 8:
        res = 0
        for i in range(n):
            res += a[i]
        return res
    if n <= 128:
        r0 = a[0]; r1 = a[1]; r2 = a[2]; r3 = a[3]
        r4 = a[4]; r5 = a[5]; r6 = a[6]; r7 = a[7]
        i = 8
        while i < n - (n % 8):
            r0 += a[i]; r1 += a[i + 1]; r2 += a[i + 2]; r3 += a[i + 3]
            r4 += a[i + 4]; r5 += a[i + 5]; r6 += a[i + 6]; r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, n2) + _pairwise(a + n2, n - n2)


def pairwise_sum(cnp.ndarray a not None):
    """NumPy's sum of a C-contiguous float64 or float32 array, computed by this module's loop (for the
    tests: it must be bit-identical to ``np.sum``)."""
    cdef double d
    cdef float f
    if not cnp.PyArray_IS_C_CONTIGUOUS(a) or a.dtype not in (np_f8, np_f4):
        raise ValueError("pairwise_sum: a C-contiguous native float64 or float32 array is needed")
    if a.dtype == np_f8:
        d = 0.0
        d += _pairwise(<const double *>cnp.PyArray_DATA(a), cnp.PyArray_SIZE(a))
        return d
    f = 0.0
    f += _pairwise(<const float *>cnp.PyArray_DATA(a), cnp.PyArray_SIZE(a))
    return f


cdef void sum_values(int kind, Py_ssize_t isz, bint is_signed, const char *v, Py_ssize_t n, char *sums,
                     Py_ssize_t k) noexcept nogil:
    """sums[k] = NumPy's sum of the `n` values at `v` (see SumChunks)."""
    cdef Py_ssize_t i
    cdef double d
    cdef float f
    cdef uint64_t u = 0
    if kind == SUM_F8:
        d = 0.0
        d += _pairwise(<const double *>v, n)
        (<double *>sums)[k] = d
    elif kind == SUM_F4:
        f = 0.0
        f += _pairwise(<const float *>v, n)
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


cdef class SumChunks(_ChunkWork):
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
            v = <const char *>self.src[k] + 16
        else:
            ret = blosc_decompress_ctx(self.src[k], scratch, nb, 1)
            if ret != nb:
                return ret if ret != 0 else -1
            v = scratch
        sum_values(self.kind, self.isz, self.is_signed, v, n, self.sums, k)
        return 0


cdef class TakeChunks(_ChunkWork):
    """TakeChunks(bufs, positions, starts, stops, bases, itemsize, dest, rows=None, nparts=1, wheres=None)

    Group k takes the items ``positions[starts[k]:stops[k]] - bases[k]`` of chunk ``bufs[k]`` into the
    C-contiguous array `dest` (rows of `itemsize` bytes): position i goes to row ``rows[i]``, or to row
    i without `rows`.  `positions` is ascending.  Each group is one chunk's work for `_take_core`: its
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
        self.arrays = (positions, rows, dest)

    def __dealloc__(self):
        free(self.gstart)
        free(self.gstop)
        free(self.gbase)
        free(self.gwhole)

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        cdef Py_ssize_t s = self.gstart[k], ndec = 0
        return _take_core(self.src[k], &self.hdr[k], self.pos + s, self.gstop[k] - s, self.gbase[k], self.isz,
                          self.out, self.rowp + s if self.rowp != NULL else NULL, s, scratch, &ndec,
                          self.gwhole[k] != 0)


# ---------------------------------------------------------------------------------------------------
# The fused expression kernel (lazy expressions' reductions and queries over in-memory chunks)
#
# `ExprChunks` runs a small register program (compiled by `blzarr.exprkernel` from an element-wise
# expression over float64 operands) over windows of a chunk: each thread decodes one window (one or a
# few Blosc blocks) of every operand into registers of its own, a few tens of KB that stay in its
# cache, runs the program over the window, and at once reduces the result there (a sum, a count) or
# compacts the rows where it holds (a query).  No decoded chunk, evaluated array or mask reaches memory.

from libc.stdlib cimport realloc, calloc

cdef enum:
    XK_ADD = 0
    XK_SUB = 1
    XK_MUL = 2
    XK_DIV = 3
    XK_NEG = 4
    XK_GT = 5
    XK_GE = 6
    XK_LT = 7
    XK_LE = 8
    XK_EQ = 9
    XK_NE = 10
    XK_AND = 11
    XK_OR = 12
    XK_XOR = 13
    XK_NOT = 14
    XK_NOPS = 15
    XK_WINDOW = 2048    # values per window
    XK_LEAF = 128       # a leaf of NumPy's pairwise sum holds at most this many values (_pairwise)

cdef enum:
    XK_SUM = 0          # the result (float64) summed per chunk, as np.sum sums the chunk's values
    XK_COUNT = 1        # the result (booleans) counted per chunk
    XK_SELECT = 2       # the rows where the result (booleans) holds, of each output, per chunk
    XK_VALUES = 3       # the result itself, into an array of every row

EXPR_OPCODES = {"add": XK_ADD, "sub": XK_SUB, "mul": XK_MUL, "div": XK_DIV, "neg": XK_NEG,
                "gt": XK_GT, "ge": XK_GE, "lt": XK_LT, "le": XK_LE, "eq": XK_EQ, "ne": XK_NE,
                "and": XK_AND, "or": XK_OR, "xor": XK_XOR, "not": XK_NOT}
EXPR_MODES = {"sum": XK_SUM, "count": XK_COUNT, "select": XK_SELECT, "values": XK_VALUES}


cdef int64_t *_pairwise_plan(Py_ssize_t n, Py_ssize_t *nplan) except NULL:
    """NumPy's pairwise tree over n values in postfix (malloc'ed): a leaf's length (> 0) or 0 (add the
    two partial sums on top of the stack)."""
    cdef list out = []
    cdef int64_t *plan
    cdef Py_ssize_t i
    _pairwise_postfix(n, out)
    nplan[0] = len(out)
    plan = <int64_t *>malloc(max(1, len(out)) * sizeof(int64_t))
    if plan == NULL:
        raise MemoryError()
    for i in range(len(out)):
        plan[i] = out[i]
    return plan


cdef void _pairwise_postfix(Py_ssize_t n, list out):
    """The tree of `_pairwise` over n values in postfix (see _pairwise_plan)."""
    cdef Py_ssize_t n2
    if n <= XK_LEAF:
        out.append(n)
        return
    n2 = n // 2
    n2 -= n2 % 8
    _pairwise_postfix(n2, out)
    _pairwise_postfix(n - n2, out)
    out.append(0)


# The operations over a window, in C with restrict pointers so that every loop vectorizes (built for
# AVX-512, AVX2 and the baseline like the min/max above).  Booleans are bytes 0 or 1.
cdef extern from *:
    """
    #define XK_LOOP(EXPR) for (int64_t i = 0; i < m; i++) { EXPR; }
    static BLZ_CLONES void xk_exec(const int32_t *prog, int64_t nins, char **rp, int64_t m) {
        for (int64_t t = 0; t < nins; t++) {
            const int32_t *ins = prog + 4 * t;
            double *restrict d = (double *)rp[ins[1]];
            const double *restrict a = (const double *)rp[ins[2]];
            const double *restrict b = ins[3] >= 0 ? (const double *)rp[ins[3]] : a;
            uint8_t *restrict bd = (uint8_t *)rp[ins[1]];
            const uint8_t *restrict ba = (const uint8_t *)rp[ins[2]];
            const uint8_t *restrict bb = (const uint8_t *)b;
            switch (ins[0]) {
            case 0: XK_LOOP(d[i] = a[i] + b[i]) break;
            case 1: XK_LOOP(d[i] = a[i] - b[i]) break;
            case 2: XK_LOOP(d[i] = a[i] * b[i]) break;
            case 3: XK_LOOP(d[i] = a[i] / b[i]) break;
            case 4: XK_LOOP(d[i] = -a[i]) break;
            case 5: XK_LOOP(bd[i] = a[i] > b[i]) break;
            case 6: XK_LOOP(bd[i] = a[i] >= b[i]) break;
            case 7: XK_LOOP(bd[i] = a[i] < b[i]) break;
            case 8: XK_LOOP(bd[i] = a[i] <= b[i]) break;
            case 9: XK_LOOP(bd[i] = a[i] == b[i]) break;
            case 10: XK_LOOP(bd[i] = a[i] != b[i]) break;
            case 11: XK_LOOP(bd[i] = ba[i] & bb[i]) break;
            case 12: XK_LOOP(bd[i] = ba[i] | bb[i]) break;
            case 13: XK_LOOP(bd[i] = ba[i] ^ bb[i]) break;
            case 14: XK_LOOP(bd[i] = ba[i] ^ 1) break;
            }
        }
    }
    static BLZ_CLONES int64_t xk_count(const uint8_t *restrict v, int64_t m) {
        uint32_t c = 0;
        for (int64_t i = 0; i < m; i++) c += v[i];
        return c;
    }
    /* the positions of the true bytes of v[0:m] into idx; returns their number.  Eight bytes at a
       time: all false (most of a selective query's) and all true (a range's) need no byte loop. */
    static int64_t xk_positions(const uint8_t *restrict v, int64_t m, int32_t *restrict idx) {
        int64_t s = 0, i = 0;
        for (; i + 8 <= m; i += 8) {
            uint64_t w;
            memcpy(&w, v + i, 8);
            if (w == 0) continue;
            if (w == 0x0101010101010101ULL) {
                for (int k = 0; k < 8; k++) idx[s + k] = (int32_t)(i + k);
                s += 8;
                continue;
            }
            for (int k = 0; k < 8; k++) { idx[s] = (int32_t)(i + k); s += v[i + k]; }
        }
        for (; i < m; i++) { idx[s] = (int32_t)i; s += v[i]; }
        return s;
    }
    """
    void xk_exec(const int32_t *prog, int64_t nins, char **rp, int64_t m) nogil
    int64_t xk_count(const uint8_t *v, int64_t m) nogil
    int64_t xk_positions(const uint8_t *v, int64_t m, int32_t *idx) nogil


cdef inline void _gather(char *dst, const char *src, const int32_t *idx, Py_ssize_t sel, Py_ssize_t m,
                         Py_ssize_t isz) noexcept nogil:
    """The `sel` items of `isz` bytes at positions `idx` of the `m` at `src`, packed into `dst`."""
    cdef Py_ssize_t i
    if sel == m:
        memcpy(dst, src, m * isz)
    elif isz == 8:
        for i in range(sel):
            (<int64_t *>dst)[i] = (<const int64_t *>src)[idx[i]]
    elif isz == 4:
        for i in range(sel):
            (<int32_t *>dst)[i] = (<const int32_t *>src)[idx[i]]
    else:
        for i in range(sel):
            memcpy(dst + i * isz, src + idx[i] * isz, isz)


cdef class ExprChunks(_ChunkWork):
    """ExprChunks(operands, program, consts, nregs, result, mode, chunklen, outputs=(), nparts=1, wheres=None)

    Evaluate a register program over the full chunks of float64 operands, window by window, on every
    thread that calls `run()` (then call `check()`).

    `operands`: one list of chunk bytes per operand, all of `chunklen` float64 values; register i is
    operand i's window.  `consts`: float64 values, registers ``len(operands) + j``.  `program`: int32
    rows ``(opcode, dst, a, b)`` (`EXPR_OPCODES`; b is -1 for a unary op); `nregs` registers in all;
    `result` the register that holds the expression.  `mode` (`EXPR_MODES`):

    - "sum": `values` holds each chunk's sum of the (float64) result, bit for bit NumPy's sum of it;
    - "count": `counts` holds each chunk's number of true (boolean) results;
    - "values": the result of every row into `dest` (float64, or bool for a boolean result);
    - "select": for each of `outputs`, the rows of each chunk where the (boolean) result holds, and
      `counts` their number; `fill(j, dest)` copies output j's rows of every chunk into `dest`.  An
      output is ``("operand", i)`` (operand i's values), ``("positions", None)`` (int64 row numbers)
      or ``("chunks", (list of chunk bytes, itemsize[, tail]))``, another column with the same chunk
      length.

    `tails`: the rows after the full chunks (a carray's last, uncompressed rows), one 1-d C-contiguous
    float64 array per operand, all of one length, and a tail array for every "chunks" output: one
    more item after the chunks, without decoding.
    """

    cdef Py_ssize_t nops, nconst, nregs_, nins, res, mode, clen, win, nouts, nchunks
    cdef int32_t *prog
    cdef double *consts
    cdef int64_t *plan
    cdef Py_ssize_t nplan
    cdef int64_t *tplan            # the pairwise tree of the tail
    cdef Py_ssize_t ntplan, ntail
    cdef char **tptr               # the tail of each operand, and of each output ("chunks" kind)
    cdef char **otail
    cdef object values_arr, counts_arr, dest_arr
    cdef char *dest
    cdef Py_ssize_t disz
    cdef double *vals
    cdef int64_t *cnts
    # outputs: kind (0 operand, 1 positions, 2 chunks), operand index or column, itemsize
    cdef int *okind
    cdef Py_ssize_t *oarg
    cdef Py_ssize_t *osize
    cdef Py_ssize_t *ooff          # each output's decode buffer in the thread's scratch
    cdef const uint8_t **osrc      # [column chunk pointers], nchunks per column output
    cdef header_t *ohdr            # their headers
    cdef char **obuf               # [chunk * nouts + j]: the selected rows
    cdef Py_ssize_t *ocap
    cdef Py_ssize_t regs_bytes, idx_off, carry_off, ptr_off, whole_off

    def __cinit__(self, *args, **kwargs):
        self.prog = NULL
        self.consts = NULL
        self.plan = NULL
        self.tplan = NULL
        self.tptr = NULL
        self.otail = NULL
        self.ntail = 0
        self.okind = NULL
        self.oarg = NULL
        self.osize = NULL
        self.ooff = NULL
        self.osrc = NULL
        self.ohdr = NULL
        self.obuf = NULL
        self.ocap = NULL
        self.nouts = 0
        self.nchunks = 0

    def __init__(self, list operands not None, const int32_t[:, ::1] program not None,
                 const double[::1] consts not None, Py_ssize_t nregs, Py_ssize_t result, mode,
                 Py_ssize_t chunklen, outputs=(), Py_ssize_t nparts=1, wheres=None, tails=None, dest=None):
        cdef Py_ssize_t nops = len(operands), n, k, i, j, t, off, nitems
        cdef cnp.ndarray ta
        cdef list flat = []
        cdef header_t *h
        if nops < 1:
            raise ValueError("ExprChunks: at least one operand is needed")
        n = len(operands[0])
        for i in range(nops):
            if len(operands[i]) != n:
                raise ValueError("ExprChunks: every operand needs the same number of chunks")
        if chunklen < 1:
            raise ValueError(f"ExprChunks: chunklen must be positive, got {chunklen}")
        if mode not in EXPR_MODES:
            raise ValueError(f"ExprChunks: unknown mode {mode!r}")
        self.mode = EXPR_MODES[mode]
        self.nops = nops
        self.nconst = consts.shape[0]
        self.nregs_ = nregs
        self.nins = program.shape[0]
        self.res = result
        self.clen = chunklen
        self.nchunks = n
        if program.shape[1] != 4 or nregs < nops + self.nconst or not 0 <= result < nregs:
            raise ValueError("ExprChunks: a malformed program")
        for t in range(self.nins):
            if not 0 <= program[t, 0] < XK_NOPS or not nops + self.nconst <= program[t, 1] < nregs \
                    or not 0 <= program[t, 2] < nregs or not -1 <= program[t, 3] < nregs:
                raise ValueError(f"ExprChunks: instruction {t} is malformed")
            if program[t, 3] < 0 and program[t, 0] not in (XK_NEG, XK_NOT):
                raise ValueError(f"ExprChunks: instruction {t} lacks its second operand")
        # the chunks in item order: chunk k of operand i is item k * nops + i
        for k in range(n):
            for i in range(nops):
                flat.append(operands[i][k])
        self._set_chunks(flat, nparts, wheres)
        self.tptr = <char **>calloc(nops, sizeof(char *))
        if self.tptr == NULL:
            raise MemoryError()
        if tails is not None:
            if len(tails) != nops:
                raise ValueError("ExprChunks: one tail per operand is needed")
            for i in range(nops):
                ta = tails[i]
                if (ta.dtype != np_f8 or cnp.PyArray_NDIM(ta) != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(ta)
                        or cnp.PyArray_DIM(ta, 0) != cnp.PyArray_DIM(<cnp.ndarray>tails[0], 0)
                        or cnp.PyArray_DIM(ta, 0) < 1):
                    raise ValueError("ExprChunks: the tails must be C-contiguous float64 arrays of one "
                                     "positive length")
                self.tptr[i] = <char *>cnp.PyArray_DATA(ta)
                self.keep.append(ta)
            self.ntail = cnp.PyArray_DIM(<cnp.ndarray>tails[0], 0)
        # one item per chunk (all its operands), then the tail: the threads' shares over them
        nitems = n + (self.ntail > 0)
        if nitems < 1:
            raise ValueError("ExprChunks: no chunk and no tail")
        self.nitems = nitems
        self.nparts = max(1, min(nparts, nitems))
        for t in range(self.nparts):
            self.nxt[t] = nitems * t // self.nparts
            self.end[t] = nitems * (t + 1) // self.nparts
        for k in range(n * nops):
            h = &self.hdr[k]
            if h.nbytes != chunklen * 8:
                raise ValueError(f"ExprChunks: a chunk holds {h.nbytes} bytes, not {chunklen} float64")
            if 8 % h.typesize:
                raise ValueError(f"ExprChunks: typesize {h.typesize} does not divide float64 values")
        # the window: the temporaries of 2048 values each stay in L1/L2
        self.win = max(XK_LEAF, min(chunklen, XK_WINDOW))
        self.prog = <int32_t *>malloc(max(1, self.nins * 4) * sizeof(int32_t))
        self.consts = <double *>malloc(max(1, self.nconst) * sizeof(double))
        if self.prog == NULL or self.consts == NULL:
            raise MemoryError()
        for t in range(self.nins):
            for j in range(4):
                self.prog[4 * t + j] = program[t, j]
        for j in range(self.nconst):
            self.consts[j] = consts[j]
        if self.mode == XK_SUM:
            self.plan = _pairwise_plan(chunklen, &self.nplan)
            if self.ntail:
                self.tplan = _pairwise_plan(self.ntail, &self.ntplan)
            self.values_arr = np_zeros(nitems, np_f8)
            self.vals = <double *>cnp.PyArray_DATA(<cnp.ndarray>self.values_arr)
        self.counts_arr = np_zeros(nitems, np_i8)
        if self.mode == XK_VALUES:
            if (not isinstance(dest, cnp.ndarray) or cnp.PyArray_NDIM(dest) != 1
                    or not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest)
                    or cnp.PyArray_ITEMSIZE(dest) not in (1, 8)
                    or cnp.PyArray_DIM(dest, 0) != n * chunklen + self.ntail):
                raise ValueError(f"ExprChunks: mode 'values' needs a writeable C-contiguous array of "
                                 f"{n * chunklen + self.ntail} items of 8 (float64) or 1 (bool) bytes")
            self.dest_arr = dest
            self.dest = <char *>cnp.PyArray_DATA(<cnp.ndarray>dest)
            self.disz = cnp.PyArray_ITEMSIZE(<cnp.ndarray>dest)
        self.cnts = <int64_t *>cnp.PyArray_DATA(<cnp.ndarray>self.counts_arr)
        self._set_outputs(list(outputs) if self.mode == XK_SELECT else [], n, chunklen)
        # the thread's scratch: registers, the outputs' windows, the selected positions, the carry
        # of a pairwise leaf across two windows, then the register pointers
        self.regs_bytes = nregs * self.win * 8
        off = self.regs_bytes
        for j in range(self.nouts):
            self.ooff[j] = off
            if self.okind[j] == 2:
                off += (self.win * self.osize[j] + 63) // 64 * 64
        self.idx_off = off
        off += self.win * sizeof(int32_t)
        self.carry_off = off
        off += 2 * XK_LEAF * 8
        self.ptr_off = off
        off += (nregs + nops) * sizeof(char *)
        self.whole_off = (off + 63) // 64 * 64
        self.scratch_bytes = self.whole_off + nops * chunklen * 8

    cdef int _set_outputs(self, list outputs, Py_ssize_t n, Py_ssize_t chunklen) except -1:
        cdef Py_ssize_t j, k, ncol = 0, c = 0, isz
        cdef cnp.ndarray ta
        cdef const uint8_t[::1] v
        cdef header_t h
        self.nouts = len(outputs)
        m = max(1, self.nouts)
        self.okind = <int *>malloc(m * sizeof(int))
        self.oarg = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
        self.osize = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
        self.ooff = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
        self.obuf = <char **>calloc(max(1, self.nitems * self.nouts), sizeof(char *))
        self.ocap = <Py_ssize_t *>calloc(max(1, self.nitems * self.nouts), sizeof(Py_ssize_t))
        self.otail = <char **>calloc(m, sizeof(char *))
        if (self.okind == NULL or self.oarg == NULL or self.osize == NULL or self.ooff == NULL
                or self.obuf == NULL or self.ocap == NULL or self.otail == NULL):
            raise MemoryError()
        for kind, arg in outputs:
            if kind == "chunks":
                ncol += 1
        self.osrc = <const uint8_t **>malloc(max(1, ncol * n) * sizeof(uint8_t *))
        self.ohdr = <header_t *>malloc(max(1, ncol * n) * sizeof(header_t))
        if self.osrc == NULL or self.ohdr == NULL:
            raise MemoryError()
        for j, (kind, arg) in enumerate(outputs):
            if kind == "operand":
                if not 0 <= arg < self.nops:
                    raise ValueError(f"ExprChunks: output {j} names operand {arg} of {self.nops}")
                self.okind[j], self.oarg[j], self.osize[j] = 0, arg, 8
            elif kind == "positions":
                self.okind[j], self.oarg[j], self.osize[j] = 1, 0, 8
            elif kind == "chunks":
                bufs, isz = arg[0], arg[1]
                if len(bufs) != n or isz < 1:
                    raise ValueError(f"ExprChunks: output {j} needs {n} chunks of items of a positive size")
                self.okind[j], self.oarg[j], self.osize[j] = 2, c * n, isz
                if self.ntail:
                    ta = arg[2] if len(arg) > 2 else None
                    if (not isinstance(ta, cnp.ndarray) or cnp.PyArray_NDIM(ta) != 1
                            or not cnp.PyArray_IS_C_CONTIGUOUS(ta) or cnp.PyArray_ITEMSIZE(ta) != isz
                            or cnp.PyArray_DIM(ta, 0) != self.ntail):
                        raise ValueError(f"ExprChunks: output {j} needs a C-contiguous tail of {self.ntail} "
                                         f"items of {isz} bytes")
                    self.otail[j] = <char *>cnp.PyArray_DATA(ta)
                    self.keep.append(ta)
                for k in range(n):
                    b = bufs[k]
                    v = _as_bytes_view(b)
                    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, self._where(k), False)
                    if h.nbytes != chunklen * isz:
                        raise ValueError(f"ExprChunks: output {j}'s chunk {k} holds {h.nbytes} bytes, "
                                         f"not {chunklen} items of {isz}")
                    if isz % h.typesize or (not (h.flags & C_MEMCPYED) and h.blocksize % h.typesize):
                        raise ValueError(f"ExprChunks: output {j}'s typesize does not divide its items")
                    self.osrc[c * n + k] = &v[0]
                    self.ohdr[c * n + k] = h
                    self.keep.append(v)
                c += 1
            else:
                raise ValueError(f"ExprChunks: unknown output kind {kind!r}")
        return 0

    def __dealloc__(self):
        cdef Py_ssize_t i
        free(self.prog)
        free(self.consts)
        free(self.plan)
        free(self.tplan)
        free(self.tptr)
        free(self.otail)
        free(self.okind)
        free(self.oarg)
        free(self.osize)
        free(self.ooff)
        free(self.osrc)
        free(self.ohdr)
        if self.obuf != NULL:
            for i in range(self.nitems * self.nouts):
                free(self.obuf[i])
        free(self.obuf)
        free(self.ocap)

    @property
    def values(self):
        """Each chunk's sum (mode "sum"), valid after `check()`."""
        return self.values_arr

    @property
    def counts(self):
        """Each chunk's count of true results (modes "count" and "select"), valid after `check()`."""
        return self.counts_arr

    def fill(self, Py_ssize_t j, cnp.ndarray dest not None, Py_ssize_t k0=0, Py_ssize_t k1=-1):
        """Copy output j's selected rows of chunks k0 to k1 (excluded; -1: to the last), in order, into
        the 1-d array `dest` (whose items are that output's size; it may be strided, e.g. a field of a
        structured array).  Calls for different outputs or chunks may run on several threads at once."""
        cdef Py_ssize_t total = 0, k, i, isz, stride, m
        cdef char *d
        cdef const char *s
        if self.mode != XK_SELECT or not 0 <= j < self.nouts:
            raise ValueError(f"ExprChunks.fill: no output {j}")
        if k1 < 0:
            k1 = self.nitems
        if not 0 <= k0 <= k1 <= self.nitems:
            raise ValueError(f"ExprChunks.fill: chunks [{k0}, {k1}) outside the {self.nitems}")
        isz = self.osize[j]
        for k in range(k0, k1):
            total += self.cnts[k]
        if cnp.PyArray_NDIM(dest) != 1 or cnp.PyArray_DIM(dest, 0) != total \
                or cnp.PyArray_ITEMSIZE(dest) != isz or not cnp.PyArray_ISWRITEABLE(dest):
            raise ValueError(f"ExprChunks.fill: dest must be a writeable 1-d array of {total} items of "
                             f"{isz} bytes")
        stride = cnp.PyArray_STRIDE(dest, 0)
        d = <char *>cnp.PyArray_DATA(dest)
        with nogil:
            for k in range(k0, k1):
                m = self.cnts[k]
                s = self.obuf[k * self.nouts + j]
                if m == 0:
                    continue
                if stride == isz:
                    memcpy(d, s, m * isz)
                    d += m * isz
                elif isz == 8:
                    for i in range(m):
                        (<int64_t *>d)[0] = (<const int64_t *>s)[i]
                        d += stride
                else:
                    for i in range(m):
                        memcpy(d, s + i * isz, isz)
                        d += stride
        return total

    cdef int _decode(self, const uint8_t *src, header_t *h, Py_ssize_t isz, Py_ssize_t w0, Py_ssize_t m,
                     char *dst, char **where) noexcept nogil:
        """Values [w0, w0 + m) of a chunk of `isz`-byte items: `where` points at them (into the chunk
        when it is stored raw, else at `dst`, where they are decoded)."""
        cdef int ret
        cdef Py_ssize_t ts = h.typesize
        if h.flags & C_MEMCPYED:
            where[0] = <char *>src + 16 + w0 * isz
            return 0
        ret = blosc_getitem(src, <int>(w0 * isz // ts), <int>(m * isz // ts), dst)
        if ret != m * isz:
            return ret if ret != 0 else -1
        where[0] = dst
        return 0

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        cdef Py_ssize_t i, j, w0, m, W = self.win, n = self.clen, nops = self.nops, sel, cnt = 0
        cdef Py_ssize_t li = 0, lo = 0, pi = 0, sp = 0, fill = 0, need, isz, cap, t
        cdef char **rp = <char **>(scratch + self.ptr_off)
        cdef char **whole = rp + self.nregs_
        cdef int32_t *idx = <int32_t *>(scratch + self.idx_off)
        cdef double *carry = <double *>(scratch + self.carry_off)
        cdef double stack[72]
        cdef double *v
        cdef double s
        cdef const uint8_t *mask
        cdef const uint8_t *col
        cdef char *src
        cdef char *dst
        cdef char *nb
        cdef int ret
        cdef int64_t count = 0, row0 = k * n
        cdef const int64_t *plan = self.plan
        cdef Py_ssize_t nplan = self.nplan
        cdef bint tail = k == self.nchunks
        if tail:
            n = self.ntail
            plan = self.tplan
            nplan = self.ntplan
        for i in range(self.nregs_):
            rp[i] = scratch + i * W * 8
        for j in range(self.nconst):
            v = <double *>rp[nops + j]
            s = self.consts[j]
            for i in range(W):
                v[i] = s
        w0 = 0
        # every operand's chunk decoded whole into the thread's buffers (a whole decode writes each
        # block straight to its place; blosc_getitem of a block copies it once more, ~1.4x the CPU)
        for i in range(nops):
            j = k * nops + i
            if tail:
                whole[i] = self.tptr[i]
            elif self.hdr[j].flags & C_MEMCPYED:
                whole[i] = <char *>self.src[j] + 16
            else:
                whole[i] = scratch + self.whole_off + i * n * 8
                ret = blosc_decompress_ctx(self.src[j], whole[i], n * 8, 1)
                if ret != n * 8:
                    return ret if ret != 0 else -1
        while w0 < n:
            m = min(W, n - w0)
            for i in range(nops):
                rp[i] = whole[i] + w0 * 8
            xk_exec(self.prog, self.nins, rp, m)
            if self.mode == XK_COUNT:
                count += xk_count(<const uint8_t *>rp[self.res], m)
            elif self.mode == XK_VALUES:
                memcpy(self.dest + (row0 + w0) * self.disz, rp[self.res], m * self.disz)
            elif self.mode == XK_SELECT:
                sel = xk_positions(<const uint8_t *>rp[self.res], m, idx)
                if sel:
                    for j in range(self.nouts):
                        isz = self.osize[j]
                        t = k * self.nouts + j
                        need = cnt + sel
                        if need > self.ocap[t]:
                            cap = max(need, 2 * self.ocap[t], min(n, 4096))
                            nb = <char *>realloc(self.obuf[t], cap * isz)
                            if nb == NULL:
                                return -2
                            self.obuf[t] = nb
                            self.ocap[t] = cap
                        dst = self.obuf[t] + cnt * isz
                        if self.okind[j] == 1:
                            for i in range(sel):
                                (<int64_t *>dst)[i] = row0 + w0 + idx[i]
                            continue
                        if self.okind[j] == 0:
                            src = rp[self.oarg[j]]
                        elif tail:
                            src = self.otail[j] + w0 * isz
                        else:
                            ret = self._decode(self.osrc[self.oarg[j] + k], &self.ohdr[self.oarg[j] + k], isz, w0, m,
                                               scratch + self.ooff[j], &src)
                            if ret != 0:
                                return ret
                        _gather(dst, src, idx, sel, m, isz)
                    cnt += sel
            else:
                # NumPy's pairwise sum of the chunk, leaf by leaf as the windows come (a leaf across two
                # windows is gathered in `carry`)
                v = <double *>rp[self.res]
                while pi < nplan:
                    if plan[pi] == 0:
                        sp -= 1
                        stack[sp - 1] = stack[sp - 1] + stack[sp]
                        pi += 1
                        continue
                    t = plan[pi]
                    if lo + t > w0 + m:
                        # the leaf ends in a later window: keep its values here so far
                        i = max(lo, w0)
                        memcpy(carry + fill, v + (i - w0), (w0 + m - i) * 8)
                        fill += w0 + m - i
                        break
                    if lo >= w0:
                        s = _pairwise(<const double *>(v + (lo - w0)), t)
                    else:
                        memcpy(carry + fill, v, (lo + t - w0) * 8)
                        s = _pairwise(<const double *>carry, t)
                        fill = 0
                    stack[sp] = s
                    sp += 1
                    lo += t
                    pi += 1
            w0 += m
        if self.mode == XK_SUM:
            s = 0.0
            s += stack[0]
            self.vals[k] = s
        elif self.mode == XK_COUNT:
            self.cnts[k] = count
        else:
            self.cnts[k] = cnt
        return 0


# ---------------------------------------------------------------------------------------------------
# where(): the values where a boolean mask holds, chunk by chunk, produced ahead of the caller
#
# The caller of a carray's where() iterates Python scalars holding the GIL the whole time (NumPy's
# fromiter, itertools.chain and a memoryview's iterator are all C code).  `WhereChunks.run()`, called
# once on a thread of its own, produces the selected values of every chunk of the values in order,
# without the GIL from its start to its end, at most `window` chunks ahead of the caller, each into a
# slot of its own; `next_part()` hands the caller the next ready slot, and waits without the GIL when
# it has caught up.  The two sides meet only through counters and two wake-up locks (PyThread locks
# work without the GIL): no chunk costs a hand-off of the GIL.

from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_acquire_lock, PyThread_release_lock, NOWAIT_LOCK,
                               PyThread_start_new_thread)

cdef extern from "pythread.h":
    int PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds, int intr_flag) nogil

cdef extern from *:
    """
    #if defined(_MSC_VER)
    #if defined(_WIN64)
    #define BLZ_XCHG_SC(p, v) ((Py_ssize_t)_InterlockedExchange64((volatile __int64 *)(p), (__int64)(v)))
    #else
    #define BLZ_XCHG_SC(p, v) ((Py_ssize_t)_InterlockedExchange((volatile long *)(p), (long)(v)))
    #endif
    #define BLZ_LOAD_SC(p) BLZ_FETCH_ADD(p, 0)
    #else
    #define BLZ_XCHG_SC(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
    #define BLZ_LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
    #endif
    """
    Py_ssize_t BLZ_XCHG_SC(Py_ssize_t *p, Py_ssize_t v) noexcept nogil
    Py_ssize_t BLZ_LOAD_SC(Py_ssize_t *p) noexcept nogil

cdef extern from *:
    """
    #if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
    #include <immintrin.h>
    #define BLZ_PAUSE() _mm_pause()
    #elif defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    #define BLZ_PAUSE() __builtin_ia32_pause()
    #elif defined(__GNUC__) && defined(__aarch64__)
    #define BLZ_PAUSE() __asm__ __volatile__("yield")
    #else
    #define BLZ_PAUSE() ((void)0)
    #endif
    """
    void BLZ_PAUSE() noexcept nogil

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


import os as _os
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


cdef class WhereChunks(_ChunkWork):
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
        self.modes = NULL
        self.chunk_of = NULL
        self.counts = NULL
        self.plock = NULL
        self.clock = NULL
        self.done = NULL
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
        self._set_chunks(values + masks, 1, wheres)
        for k in range(nv + nm):
            if self.hdr[k].nbytes != (chunklen * self.isz if k < nv else mchunklen):
                raise ChunkError(f"bad Blosc chunk{_where(self._where(k))}: it holds {self.hdr[k].nbytes} "
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
        self.slots_buf = _take_scratch(self.win * chunklen * self.isz)
        self.slots = PyByteArray_AS_STRING(self.slots_buf)
        self.slots_arr = np_frombuffer(self.slots_buf, dt, self.win * chunklen).reshape(self.win, chunklen)
        # the thread's scratch: a chunk of values, a chunk of the mask, the positions of a window
        self.idx_off = (chunklen * self.isz + (mchunklen if nm else 0) + 63) // 64 * 64
        self.cscr_buf = _take_scratch(self.idx_off + XK_WINDOW * sizeof(int32_t))
        self.cscr = PyByteArray_AS_STRING(self.cscr_buf)
        if ahead:
            self.pscr_buf = _take_scratch(self.idx_off + XK_WINDOW * sizeof(int32_t))
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
            _give_scratch(self.cscr_buf)
        if self.pscr_buf is not None:
            _give_scratch(self.pscr_buf)
        self.slots_arr = None
        # the slots go back to the pool only when no view of them is left
        if self.slots_buf is not None and _refcnt(<PyObject *>self.slots_buf) == 1:
            _give_scratch(self.slots_buf)

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
                        _gather(dst + cnt * isz, v + (pos - r0) * isz, idx, sel, w, isz)
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

from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.bool cimport PyBool_FromLong


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


# ---------------------------------------------------------------------- rows of a structured array
cdef enum:
    _ZIP_TILE = 512     # rows per tile: the tile's rows of the result (12 KB for 3 fields of 8 bytes) stay in L1


cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__x86_64__) && defined(__SSE2__)
    #include <emmintrin.h>
    /* rows of `nsrc` 8-byte fields packed one after the other, row by row with streaming stores: the
       result's lines are written whole without being read first (the 8-byte aligned `dst`) */
    static int blz_zip8_stream(char *dst, const char *const *src, Py_ssize_t nsrc, Py_ssize_t n) {
        Py_ssize_t i, k;
        long long *d = (long long *)dst;
        if (((uintptr_t)dst & 7) != 0)
            return 0;
        for (i = 0; i < n; i++) {
            for (k = 0; k < nsrc; k++) {
                long long v;
                memcpy(&v, src[k] + 8 * i, 8);
                _mm_stream_si64(d + i * nsrc + k, v);
            }
        }
        _mm_sfence();
        return 1;
    }
    #else
    static int blz_zip8_stream(char *dst, const char *const *src, Py_ssize_t nsrc, Py_ssize_t n) {
        (void)dst; (void)src; (void)nsrc; (void)n;
        return 0;
    }
    #endif
    """
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
