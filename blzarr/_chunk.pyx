# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One Blosc 1.x chunk: validate, compress, decompress into a caller's buffer, read the items of some blocks.

This module knows nothing of files or arrays of chunks.  Every compressed input is checked against its
real length (header fields, bstarts and the split streams of the blocks about to be decoded) before the
C library sees it, because the C decoders trust the sizes written in the header.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport malloc, free, qsort
from libc.string cimport memcpy
from cpython.ref cimport PyObject, Py_XDECREF

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
    MIN_SPLIT_ITEMS = 128      # blocksize / typesize from which a block is split into typesize streams
    MAX_SPLITS = 16


cdef struct header_t:
    int version
    int versionlz
    int flags
    int typesize
    Py_ssize_t nbytes
    Py_ssize_t blocksize
    Py_ssize_t ctbytes
    Py_ssize_t nblocks


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


cdef int _check_blocks(const uint8_t *p, header_t *h, Py_ssize_t first, Py_ssize_t last,
                       object where) except -1:
    """Check every bstart, and the split streams of blocks first..last (inclusive), before decoding."""
    cdef Py_ssize_t nb = h.nblocks, j, k, lo = 16 + 4 * h.nblocks
    cdef int32_t *sorted_starts
    cdef int32_t b, end
    cdef Py_ssize_t bsize, nsplits, neblock, pos, s
    cdef int32_t csize
    cdef bint leftover
    if nb == 0:
        return 0
    sorted_starts = <int32_t *>malloc(nb * sizeof(int32_t))
    if sorted_starts == NULL:
        raise MemoryError()
    try:
        for j in range(nb):
            b = _read_i32(p + 16 + 4 * j)
            if b < lo or <Py_ssize_t>b + 4 > h.ctbytes:
                raise ChunkError(
                    f"bad Blosc chunk{_where(where)}: block {j} starts at {b}, outside [{lo}, {h.ctbytes})")
            sorted_starts[j] = b
        qsort(sorted_starts, nb, sizeof(int32_t), _cmp_i32)
        for j in range(1, nb):
            if sorted_starts[j] == sorted_starts[j - 1]:
                raise ChunkError(f"bad Blosc chunk{_where(where)}: two blocks start at {sorted_starts[j]}")
        for j in range(first, last + 1):
            b = _read_i32(p + 16 + 4 * j)
            # the block ends where the next block in file order starts (blocks may be stored out of order)
            end = <int32_t>h.ctbytes
            for k in range(nb):
                if sorted_starts[k] > b:
                    end = sorted_starts[k]
                    break
            leftover = (j == nb - 1) and (h.nbytes % h.blocksize != 0)
            bsize = h.nbytes - j * h.blocksize if leftover else h.blocksize
            if (not (h.flags & FLAG_DONT_SPLIT) and h.typesize <= MAX_SPLITS
                    and h.blocksize // h.typesize >= MIN_SPLIT_ITEMS and not leftover):
                nsplits = h.typesize
            else:
                nsplits = 1
            neblock = bsize // nsplits
            pos = b
            for s in range(nsplits):
                if pos + 4 > end:
                    raise ChunkError(f"bad Blosc chunk{_where(where)}: block {j} is truncated")
                csize = _read_i32(p + pos)
                if csize <= 0 or csize > neblock or pos + 4 + csize > end:
                    raise ChunkError(
                        f"bad Blosc chunk{_where(where)}: block {j} stream {s} claims {csize} bytes "
                        f"(at most {min(neblock, end - pos - 4)} possible)")
                pos += 4 + csize
    finally:
        free(sorted_starts)
    return 0


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
    _parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, where, False)
    if expected_nbytes >= 0 and h.nbytes != expected_nbytes:
        raise ChunkError(
            f"bad Blosc chunk{_where(where)}: it holds {h.nbytes} bytes, {expected_nbytes} expected")
    _check_blocks(&v[0], &h, 0, h.nblocks - 1, where)
    return h.nbytes


def compress(cnp.ndarray src not None, int typesize, int clevel=5, int shuffle=1, cname="lz4",
             Py_ssize_t blocksize=0, int nthreads=1):
    """Compress the bytes of a C-contiguous array into one chunk (a bytes object sized exactly)."""
    cdef Py_ssize_t nbytes, cap
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
            ret = blosc_compress_ctx(clevel, shuffle, typesize, nbytes, csrc, dest, cap,
                                     ccname, blocksize, nthreads)
        if ret <= 0:
            raise ChunkError(f"Blosc compression failed (return code {ret})")
        if ret < cap:
            _bytes_resize(&out, ret)   # shrinks in place; frees `out` and sets it NULL on failure
        result = <object>out
    finally:
        Py_XDECREF(out)
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
    cdef Py_ssize_t n = local.shape[0], k, r, b0, j, cur = -1, bstart, blen, ndec = 0, nrows, ts, bs
    cdef Py_ssize_t ntouched = 0
    cdef char *out
    cdef char *scratch = NULL
    cdef const uint8_t *src
    cdef int ret = 0
    cdef bint memcpyed, failed = False
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
    memcpyed = (h.flags & FLAG_MEMCPYED) != 0
    if check and not memcpyed:
        _check_blocks(&v[0], &h, local[0] * itemsize // bs, ((local[n - 1] + 1) * itemsize - 1) // bs, where)
    out = <char *>cnp.PyArray_DATA(dest)
    src = &v[0]
    if not memcpyed:
        # blocks holding a wanted item; when they are most of the chunk, one decode of the whole chunk
        # is cheaper: blosc_getitem allocates its buffers and copies each block once more
        for k in range(n):
            j = local[k] * itemsize // bs
            if j != cur:
                ntouched += 1
                cur = j
        cur = -1
        if ntouched * 3 >= h.nblocks * 2:
            if check:
                _check_blocks(&v[0], &h, 0, h.nblocks - 1, where)
            scratch = <char *>malloc(h.nbytes)
            if scratch == NULL:
                raise MemoryError()
            try:
                with nogil:
                    ret = blosc_decompress_ctx(src, scratch, h.nbytes, 1)
                    if ret == h.nbytes:
                        for k in range(n):
                            r = rows[k] if rows is not None else first_row + k
                            memcpy(out + r * itemsize, scratch + local[k] * itemsize, itemsize)
            finally:
                free(scratch)
            if ret != h.nbytes:
                raise ChunkError(f"corrupted Blosc chunk{_where(where)}: decompression failed (return code {ret})")
            return h.nblocks
        scratch = <char *>malloc(bs)
        if scratch == NULL:
            raise MemoryError()
    try:
        with nogil:
            for k in range(n):
                r = rows[k] if rows is not None else first_row + k
                b0 = local[k] * itemsize
                if memcpyed:
                    memcpy(out + r * itemsize, src + 16 + b0, itemsize)
                    continue
                j = b0 // bs
                if (b0 + itemsize - 1) // bs != j:
                    # an item across two blocks: decode just its bytes
                    ret = blosc_getitem(src, <int>(b0 // ts), <int>(itemsize // ts), out + r * itemsize)
                    if ret != itemsize:
                        failed = True
                        break
                    ndec += 2
                    continue
                if j != cur:
                    bstart = j * bs
                    blen = h.nbytes - bstart if h.nbytes - bstart < bs else bs
                    ret = blosc_getitem(src, <int>(bstart // ts), <int>(blen // ts), scratch)
                    if ret != blen:
                        failed = True
                        break
                    cur = j
                    ndec += 1
                memcpy(out + r * itemsize, scratch + (b0 - j * bs), itemsize)
    finally:
        free(scratch)
    if failed:
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


# ---------------------------------------------------------------------------------------- statistics
# One pass over a chunk for its statistics (blzarr.stats): minimum, maximum and the count of NaN/NaT,
# on the thread that compresses the chunk while it is in that core's cache.  NumPy has no fused
# min/max, and its two passes cost 5-10% of writing data that compresses fast.  Floats are compared
# as integers ordered like them (the bits of a negative float with every bit but the sign flipped),
# NaN and NaT left out by a select, so that every loop is integer min/max the compiler vectorizes;
# on x86-64 with GCC each loop is built for AVX-512, AVX2 and the baseline, chosen at load time.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    #define BLZ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
    #else
    #define BLZ_CLONES
    #endif

    #define BLZ_INT_MINMAX(NAME, T) \\
    static BLZ_CLONES void NAME(const void *vv, int64_t n, void *mn, void *mx) { \\
        const T *v = (const T *)vv; T a = v[0], b = v[0]; \\
        for (int64_t i = 1; i < n; i++) { T x = v[i]; a = x < a ? x : a; b = x > b ? x : b; } \\
        *(T *)mn = a; *(T *)mx = b; \\
    }
    BLZ_INT_MINMAX(blz_minmax_i8, int8_t)
    BLZ_INT_MINMAX(blz_minmax_u8, uint8_t)
    BLZ_INT_MINMAX(blz_minmax_i16, int16_t)
    BLZ_INT_MINMAX(blz_minmax_u16, uint16_t)
    BLZ_INT_MINMAX(blz_minmax_i32, int32_t)
    BLZ_INT_MINMAX(blz_minmax_u32, uint32_t)
    BLZ_INT_MINMAX(blz_minmax_i64, int64_t)
    BLZ_INT_MINMAX(blz_minmax_u64, uint64_t)

    /* int64 with NaT (INT64_MIN) left out; returns the count of NaT.  NaT is the smallest int64, so
       only the minimum needs a second pass, and only when a NaT is there (vectorized first pass). */
    static BLZ_CLONES int64_t blz_minmax_nat(const void *vv, int64_t n, void *mn, void *mx) {
        const int64_t *v = (const int64_t *)vv;
        int64_t a = INT64_MAX, b = INT64_MIN, nat = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t x = v[i];
            nat += x == INT64_MIN;
            a = x < a ? x : a;
            b = x > b ? x : b;
        }
        if (nat) {
            a = INT64_MAX;
            for (int64_t i = 0; i < n; i++)
                if (v[i] != INT64_MIN && v[i] < a) a = v[i];
        }
        *(int64_t *)mn = a; *(int64_t *)mx = b;
        return nat;
    }

    /* floats as ordered integers (the bits of a negative float with every bit but the sign flipped);
       returns the count of NaN.  The first pass (vectorized) takes min and max over every key and
       counts NaN; only a chunk holding NaN is passed again with the NaN left out. */
    #define BLZ_FLIP(I, U, k) ((k) ^ (I)(((U)((k) >> (8 * sizeof(I) - 1))) >> 1))
    #define BLZ_FLOAT_MINMAX(NAME, I, U, ABSMASK, INF) \\
    typedef I __attribute__((may_alias)) NAME##_alias; \\
    static BLZ_CLONES int64_t NAME(const void *vv, int64_t n, void *kmin, void *kmax) { \\
        const NAME##_alias *v = (const NAME##_alias *)vv; \\
        I a = (I)ABSMASK, b = (I)(~(U)ABSMASK); int64_t nan = 0; \\
        for (int64_t i = 0; i < n; i++) { \\
            I u = v[i]; \\
            I k = BLZ_FLIP(I, U, u); \\
            nan += (u & (I)ABSMASK) > (I)INF; \\
            a = k < a ? k : a; b = k > b ? k : b; \\
        } \\
        if (nan) { \\
            a = (I)ABSMASK; b = (I)(~(U)ABSMASK); \\
            for (int64_t i = 0; i < n; i++) { \\
                I u = v[i]; \\
                if ((u & (I)ABSMASK) > (I)INF) continue; \\
                I k = BLZ_FLIP(I, U, u); \\
                a = k < a ? k : a; b = k > b ? k : b; \\
            } \\
        } \\
        *(I *)kmin = BLZ_FLIP(I, U, a); \\
        *(I *)kmax = BLZ_FLIP(I, U, b); \\
        return nan; \\
    }
    BLZ_FLOAT_MINMAX(blz_minmax_f64, int64_t, uint64_t, 0x7fffffffffffffffLL, 0x7ff0000000000000LL)
    BLZ_FLOAT_MINMAX(blz_minmax_f32, int32_t, uint32_t, 0x7fffffff, 0x7f800000)
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


def minmax(cnp.ndarray a not None, cnp.ndarray out not None, bint nat=False):
    """Put the smallest and largest value of the 1-d contiguous array `a` into out[0] and out[1] (an
    array of a's dtype) in one pass, NaN (floats) left out, and with `nat` the smallest int64 (NaT:
    pass the int64 view of a datetime64 or timedelta64); return the count of NaN/NaT.

    `a` must be native-endian, of a bool, integer or float dtype, and not empty.  When every value
    is NaN, out holds nothing meaningful (the count equals len(a))."""
    cdef Py_ssize_t n = a.shape[0] if a.ndim == 1 else 0
    cdef const void *p
    cdef void *o
    cdef int64_t nan = 0
    cdef char kind = ord(a.dtype.kind)
    cdef Py_ssize_t size = a.itemsize
    if a.ndim != 1 or n == 0 or not cnp.PyArray_IS_C_CONTIGUOUS(a) or not a.dtype.isnative:
        raise ValueError("minmax needs a non-empty, contiguous, native-endian 1-d array")
    if out.dtype != a.dtype or out.ndim != 1 or out.shape[0] < 2 or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ValueError("minmax needs an output of two items of the array's dtype")
    p = cnp.PyArray_DATA(a)
    o = cnp.PyArray_DATA(out)
    if kind == b'f' and size == 8:
        with nogil:
            nan = blz_minmax_f64(p, n, o, <char *>o + 8)
    elif kind == b'f' and size == 4:
        with nogil:
            nan = blz_minmax_f32(p, n, o, <char *>o + 4)
    elif kind == b'i' and size == 8:
        with nogil:
            if nat:
                nan = blz_minmax_nat(p, n, o, <char *>o + 8)
            else:
                blz_minmax_i64(p, n, o, <char *>o + 8)
    elif kind == b'i' and size == 4:
        with nogil:
            blz_minmax_i32(p, n, o, <char *>o + 4)
    elif kind == b'i' and size == 2:
        with nogil:
            blz_minmax_i16(p, n, o, <char *>o + 2)
    elif kind == b'i' and size == 1:
        with nogil:
            blz_minmax_i8(p, n, o, <char *>o + 1)
    elif kind == b'u' and size == 8:
        with nogil:
            blz_minmax_u64(p, n, o, <char *>o + 8)
    elif kind == b'u' and size == 4:
        with nogil:
            blz_minmax_u32(p, n, o, <char *>o + 4)
    elif kind == b'u' and size == 2:
        with nogil:
            blz_minmax_u16(p, n, o, <char *>o + 2)
    elif (kind == b'u' or kind == b'b') and size == 1:
        with nogil:
            blz_minmax_u8(p, n, o, <char *>o + 1)
    else:
        raise ValueError(f"minmax does not support dtype {a.dtype}")
    return nan
