# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""BLZ superchunk files, the low level: the 32-byte header, offsets tables, checksums, positioned reads.

A superchunk file is ``header | metadata (JSON) | offsets (int64[capacity]) | chunk, checksum, reserve ...``
(see docs/FORMAT.rst).  Every read is a positioned read with the GIL released, counted in `io_stats`, so
tests can check that lazy reads touch only what they need: `read_blocks_into` reads only the blocks of
a chunk that hold the wanted bytes, `fetch_decode` one whole chunk (verified, validated, decoded), and
`ReadChunks` many whole chunks on the threads of the work pool (`_workpool`) without the GIL.

What it does not do: know arrays or directories (that is `blzarr.blz`), or decode chunks itself
(`_chunk`, `_sums` and `_rows` do, called from here).
"""

import ctypes
import hashlib
import os

try:
    # zlib-ng's CRC-32 and Adler-32 are the same functions as zlib's, bit for bit, at 7-9x the speed
    # (SIMD folding); it is a dependency where wheels exist, and zlib is the fallback everywhere else.
    import zlib_ng.zlib_ng as _zng
    from zlib_ng.zlib_ng import adler32 as _adler32, crc32 as _crc32
    CHECKSUM_BACKEND = "zlib-ng"
except ImportError:  # pragma: no cover - depends on the platform's wheels
    from zlib import adler32 as _adler32, crc32 as _crc32
    _zng = None
    CHECKSUM_BACKEND = "zlib"

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy
from libc.errno cimport errno, EINTR
from posix.unistd cimport pread as c_pread, pwrite as c_pwrite
from posix.types cimport off_t

cimport numpy as cnp
import numpy as np

cdef extern from *:
    """
    #if defined(__linux__)
    #include <fcntl.h>
    #endif
    #if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    static int blzarr_start_writeback(int fd, long long pos, long long n) {
        return sync_file_range(fd, (off_t)pos, (off_t)n, SYNC_FILE_RANGE_WRITE);
    }
    #define BLZARR_HAVE_WRITEBACK 1
    #else
    static int blzarr_start_writeback(int fd, long long pos, long long n) {
        (void)fd; (void)pos; (void)n;
        return 0;
    }
    #define BLZARR_HAVE_WRITEBACK 0
    #endif
    """
    int blzarr_start_writeback(int fd, long long pos, long long n) nogil
    int BLZARR_HAVE_WRITEBACK

from blzarr import _chunk
from blzarr._chunk cimport header_t, chunk_valid, read_i32, decode_chunk
from blzarr._rows cimport rows_of_chunk
from blzarr._sums cimport sum_values, SUM_F8, SUM_F4, SUM_SIGNED, SUM_UNSIGNED
from blzarr._workpool cimport Work
from blzarr.errors import ChecksumError, ChunkError, FormatError, StorageError

cnp.import_array()

HEADER_SIZE = 32
MAGIC = b"blpk"
VERSION = 2
OPT_OFFSETS = 0x01
OPT_METADATA = 0x02

# checksum id -> (name, size in bytes of what is stored after each chunk)
CHECKSUMS = {
    0: ("none", 0),
    1: ("adler32", 4),
    2: ("crc32", 4),
    3: ("md5", 16),
    4: ("sha1", 20),
    5: ("sha224", 28),
    6: ("sha256", 32),
    7: ("sha384", 48),
    8: ("sha512", 64),
}
CHECKSUM_IDS = {name: cid for cid, (name, _) in CHECKSUMS.items()}

# bytes and calls of every pread made by this module since the last reset
cdef Py_ssize_t _stat_bytes = 0
cdef Py_ssize_t _stat_calls = 0


def io_stats(reset=False):
    """(bytes read, pread calls) since the last reset; `reset=True` zeroes the counters after reading."""
    global _stat_bytes, _stat_calls
    out = (_stat_bytes, _stat_calls)
    if reset:
        _stat_bytes = 0
        _stat_calls = 0
    return out


cdef inline void _put_i32(uint8_t *p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = u & 0xff
    p[1] = (u >> 8) & 0xff
    p[2] = (u >> 16) & 0xff
    p[3] = (u >> 24) & 0xff


cdef inline void _put_i64(uint8_t *p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    cdef int k
    for k in range(8):
        p[k] = (u >> (8 * k)) & 0xff


cdef inline int64_t _get_i64(const uint8_t *p) noexcept nogil:
    cdef uint64_t u = 0
    cdef int k
    for k in range(8):
        u |= (<uint64_t>p[k]) << (8 * k)
    return <int64_t>u


def checksum_id(value):
    """The checksum id for a name ('crc32'...), an id (0-8) or None (no checksum)."""
    if value is None:
        return 0
    if isinstance(value, str):
        key = value.lower()
        if key in CHECKSUM_IDS:
            return CHECKSUM_IDS[key]
    elif isinstance(value, int) and not isinstance(value, bool) and value in CHECKSUMS:
        return value
    raise ValueError(f"checksum must be None or one of {sorted(CHECKSUM_IDS)} (ids 0-8), got {value!r}")


def checksum_size(int cid):
    if cid not in CHECKSUMS:
        raise ValueError(f"unknown checksum id {cid}")
    return CHECKSUMS[cid][1]


def checksum(int cid, buf):
    """The checksum of `buf` as stored after a chunk: adler32/crc32 as 4 little-endian bytes, hashes raw.

    The CRC-32 and Adler-32 are zlib's (computed by zlib-ng when installed: `CHECKSUM_BACKEND`); they and
    hashlib release the GIL themselves on large buffers.
    """
    if cid == 0:
        return b""
    if cid == 2:
        return (_crc32(buf) & 0xFFFFFFFF).to_bytes(4, "little")
    if cid == 1:
        return (_adler32(buf) & 0xFFFFFFFF).to_bytes(4, "little")
    if cid in CHECKSUMS:
        return hashlib.new(CHECKSUMS[cid][0], buf).digest()
    raise ValueError(f"unknown checksum id {cid}")


def verify_checksum(int cid, buf, stored, where=None):
    """Raise ChecksumError naming `where` and the algorithm unless `stored` is the checksum of `buf`."""
    if cid == 0:
        return
    expect = checksum(cid, buf)
    if bytes(stored) != expect:
        raise ChecksumError(
            f"{CHECKSUMS[cid][0]} checksum mismatch{f' in {where}' if where else ''}: "
            f"stored {bytes(stored).hex()}, computed {expect.hex()}")


def pack_header(int checksum_id, int typesize, int chunk_size, int last_chunk, int64_t nchunks,
                int meta_size, int options=OPT_OFFSETS | OPT_METADATA, int version=VERSION):
    """The 32-byte superchunk header."""
    cdef bytearray out = bytearray(32)
    cdef uint8_t *p = <uint8_t *><char *>out
    if checksum_id not in CHECKSUMS:
        raise ValueError(f"unknown checksum id {checksum_id}")
    if not 0 <= typesize <= 255:
        raise ValueError(f"typesize must fit in a byte, got {typesize}")
    if not 0 <= options <= 255 or not 0 <= version <= 255:
        raise ValueError("options and version must fit in a byte")
    if meta_size < 0:
        raise ValueError(f"meta_size must be >= 0, got {meta_size}")
    p[0] = b'b'; p[1] = b'l'; p[2] = b'p'; p[3] = b'k'
    p[4] = version
    p[5] = options
    p[6] = checksum_id
    p[7] = typesize
    _put_i32(p + 8, chunk_size)
    _put_i32(p + 12, last_chunk)
    _put_i64(p + 16, nchunks)
    _put_i32(p + 24, meta_size)
    _put_i32(p + 28, 0)
    return bytes(out)


def unpack_header(buf, where=None):
    """The fields of a 32-byte superchunk header as a dict, every one checked."""
    cdef const uint8_t[::1] v = buf
    w = f" '{where}'" if where else ""
    if v.shape[0] < 32:
        raise FormatError(f"superchunk file{w} is truncated: {v.shape[0]} bytes, fewer than the 32-byte header")
    cdef const uint8_t *p = &v[0]
    if bytes(buf[:4]) != MAGIC:
        raise FormatError(f"superchunk file{w} does not start with the magic 'blpk' (got {bytes(buf[:4])!r})")
    h = dict(version=p[4], options=p[5], checksum=p[6], typesize=p[7], chunk_size=read_i32(p + 8),
             last_chunk=read_i32(p + 12), nchunks=_get_i64(p + 16), meta_size=read_i32(p + 24),
             reserved=read_i32(p + 28))
    if h["version"] != VERSION:
        raise FormatError(f"superchunk file{w}: header version {h['version']}, this reader knows {VERSION} "
                          "(version 1 is the single-chunk bcolz 1.x '.blp' file)")
    if h["options"] & ~(OPT_OFFSETS | OPT_METADATA):
        raise FormatError(f"superchunk file{w}: unknown option bits {h['options']:#04x}")
    if not h["options"] & OPT_OFFSETS:
        raise FormatError(f"superchunk file{w}: has no offsets table (option bit 0), which BLZ requires")
    if h["checksum"] not in CHECKSUMS:
        raise FormatError(f"superchunk file{w}: unknown checksum id {h['checksum']}")
    if h["typesize"] == 0:
        raise FormatError(f"superchunk file{w}: typesize 0")
    if h["chunk_size"] < -1 or h["last_chunk"] < -1:
        raise FormatError(f"superchunk file{w}: negative chunk-size or last-chunk")
    if h["nchunks"] < 0:
        raise FormatError(f"superchunk file{w}: nchunks {h['nchunks']} (unknown counts are not allowed here)")
    if h["meta_size"] < 0 or (h["meta_size"] and not h["options"] & OPT_METADATA):
        raise FormatError(f"superchunk file{w}: bad meta-size {h['meta_size']}")
    h["checksum_name"] = CHECKSUMS[h["checksum"]][0]
    h["checksum_size"] = CHECKSUMS[h["checksum"]][1]
    return h


def pack_offsets(offsets):
    """An int64 little-endian offsets table as bytes."""
    return np.ascontiguousarray(offsets, dtype="<i8").tobytes()


def pack_i64(int64_t value):
    cdef bytearray out = bytearray(8)
    _put_i64(<uint8_t *><char *>out, value)
    return bytes(out)


cdef Py_ssize_t _pread_nogil(int fd, char *dest, Py_ssize_t n, int64_t pos, Py_ssize_t *calls,
                             int *err) noexcept nogil:
    """pread until `n` bytes, the end of the file or an error (its errno into `*err`, else 0); the
    count read.  `*calls` counts the system calls (for io_stats)."""
    cdef Py_ssize_t done = 0, r
    err[0] = 0
    while done < n:
        r = c_pread(fd, dest + done, n - done, <off_t>(pos + done))
        calls[0] += 1
        if r < 0:
            if errno == EINTR:
                continue
            err[0] = errno
            break
        if r == 0:
            break
        done += r
    return done


cdef Py_ssize_t _pread_all(int fd, char *dest, Py_ssize_t n, int64_t pos) except -2:
    """`_pread_nogil` with the GIL released, counted in io_stats; an error raises StorageError."""
    global _stat_bytes, _stat_calls
    cdef Py_ssize_t done, calls = 0
    cdef int err
    with nogil:
        done = _pread_nogil(fd, dest, n, pos, &calls, &err)
    _stat_calls += calls
    _stat_bytes += done
    if err:
        raise StorageError(err, f"{os.strerror(err)} (reading {n} bytes at {pos})")
    return done


def pread_into(int fd, buf, int64_t pos, where=None):
    """Fill the writable buffer `buf` with the bytes of file `fd` at position `pos` (all or error)."""
    cdef uint8_t[::1] v = buf
    cdef Py_ssize_t n = v.shape[0], got
    if pos < 0:
        raise FormatError(f"negative file position {pos}{f' in {where}' if where else ''}")
    if n == 0:
        return 0
    got = _pread_all(fd, <char *>&v[0], n, pos)
    if got != n:
        raise FormatError(f"{where or 'file'} is truncated: {n} bytes wanted at {pos}, only {got} there")
    return n


def empty_buffer(Py_ssize_t n):
    """A bytearray of `n` bytes, not zeroed (for buffers that reads fill)."""
    if n < 0:
        raise ValueError(f"negative buffer size {n}")
    return PyByteArray_FromStringAndSize(NULL, n)


def pread(int fd, Py_ssize_t n, int64_t pos, where=None):
    """`n` bytes of file `fd` at `pos` as a bytearray (all or FormatError).

    The bytearray is not zeroed first (pread fills it): `bytearray(n)` would memset a chunk-sized
    buffer with the GIL held, a third of a parallel read-all's time."""
    if n < 0:
        raise ValueError(f"negative read size {n}{f' in {where}' if where else ''}")
    out = PyByteArray_FromStringAndSize(NULL, n)
    pread_into(fd, out, pos, where)
    return out


def pwrite_all(int fd, data, int64_t pos, where=None):
    """Write all of `data` at `pos` (GIL released)."""
    cdef const uint8_t[::1] v = data
    cdef Py_ssize_t n = v.shape[0], done = 0, r = 0
    cdef int err = 0
    if n == 0:
        return 0
    with nogil:
        while done < n:
            r = c_pwrite(fd, <const char *>&v[done], n - done, <off_t>(pos + done))
            if r < 0:
                if errno == EINTR:
                    continue
                err = errno
                break
            done += r
    if err:
        raise StorageError(err, f"{os.strerror(err)} (writing {n} bytes at {pos} of {where or 'a file'})")
    return n


HAVE_WRITEBACK = bool(BLZARR_HAVE_WRITEBACK)
HAVE_PWRITEV = hasattr(os, "pwritev")
_IOV_MAX = 512


def pwritev_all(int fd, bufs, int64_t pos, where=None):
    """Write the buffers `bufs` one after the other from `pos`, all of them (os.pwritev: one system
    call for a few buffers; the GIL is released by os)."""
    views = [memoryview(b).cast("B") for b in bufs if len(b)]
    total = sum(len(v) for v in views)
    done = 0
    while views:
        try:
            n = os.pwritev(fd, views[:_IOV_MAX], pos + done)
        except InterruptedError:
            continue
        except OSError as e:
            raise StorageError(e.errno, f"{os.strerror(e.errno)} (writing {total} bytes at {pos} of "
                                        f"{where or 'a file'})") from None
        done += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return total


def start_writeback(int fd, int64_t pos, int64_t n):
    """Start writing bytes [pos, pos+n) of file `fd` to the disk, without waiting (Linux's
    sync_file_range with SYNC_FILE_RANGE_WRITE; nothing elsewhere).  A hint, not a sync: a later
    fdatasync then has less left to wait for.  Errors are ignored (the fdatasync reports them)."""
    if n <= 0 or pos < 0:
        return
    with nogil:
        blzarr_start_writeback(fd, pos, n)


def fetch_decode(int fd, int64_t off, int64_t ct, int64_t limit, int cid, buf, cnp.ndarray out not None,
                 Py_ssize_t expected_nbytes, int nthreads, int64_t entry_pos, where):
    """One whole-chunk read of a BLZ superchunk file, in one call: the chunk at `off` of file `fd`
    (`ct` compressed bytes; < 0: read from its Blosc header) and its stored checksum are read into the
    bytearray `buf` (a new, larger one when it is too small), the checksum verified, the structure
    validated (holding `expected_nbytes` when >= 0), then, with `entry_pos` >= 0, the chunk's offsets
    entry there read again and required to still say `off` (a reader beside a writer), and the chunk
    decoded whole into `out`.  Returns (buf, ct).  The reads and the decoding release the GIL."""
    cdef uint8_t h16[16]
    cdef Py_ssize_t got, total, cksize
    cdef uint8_t ebuf[8]
    if cid not in CHECKSUMS:
        raise ValueError(f"unknown checksum id {cid}")
    cksize = CHECKSUMS[cid][1]
    if off < 0:
        raise FormatError(f"negative file position {off}{f' in {where}' if where else ''}")
    if ct < 0:
        got = _pread_all(fd, <char *>h16, 16, off)
        if got != 16:
            raise FormatError(f"{where or 'file'} is truncated: 16 bytes wanted at {off}, only {got} there")
        ct = read_i32(h16 + 12)
    if ct < 16 or off + ct + cksize > limit:
        raise FormatError(f"{where}: the chunk claims {ct} bytes (+{cksize} of checksum), "
                          f"past the end of the file ({limit} bytes)")
    total = ct + cksize
    if buf is None or len(buf) < total:
        buf = PyByteArray_FromStringAndSize(NULL, total + total // 8)
    got = _pread_all(fd, PyByteArray_AS_STRING(buf), total, off)
    if got != total:
        raise FormatError(f"{where or 'file'} is truncated: {total} bytes wanted at {off}, only {got} there")
    with memoryview(buf) as mv, mv[:ct] as view:
        if cid:
            verify_checksum(cid, view, mv[ct:total], where)
        _chunk.validate(view, expected_nbytes, where)
        if entry_pos >= 0:
            got = _pread_all(fd, <char *>ebuf, 8, entry_pos)
            if got != 8:
                raise FormatError(f"{where or 'superchunk file'} is truncated inside its offsets table")
            if _get_i64(ebuf) != off:
                raise FormatError(f"{where}: the chunk moved while it was read (a writer rewrote it)")
        _chunk.decompress_into(view, out, nthreads, False, where)
    return buf, ct


def read_offset(int fd, int64_t table_pos, Py_ssize_t slot, where=None):
    """One int64 entry of an offsets table, read alone (8 bytes)."""
    cdef uint8_t buf[8]
    cdef Py_ssize_t got = _pread_all(fd, <char *>buf, 8, table_pos + 8 * slot)
    if got != 8:
        raise FormatError(f"{where or 'superchunk file'} is truncated inside its offsets table")
    return _get_i64(buf)


def read_offsets(int fd, int64_t table_pos, Py_ssize_t count, where=None):
    """The whole offsets table (`count` entries) as an int64 array."""
    out = np.empty(count, dtype="<i8")
    if count:
        pread_into(fd, out.view("u1"), table_pos, where)
    return out.astype(np.int64, copy=False)


def read_head(int fd, int64_t offset, int64_t limit, where=None):
    """The Blosc header and block starts of the chunk at `offset`, as bytes, checked against `limit`
    (the end of the file): 16 bytes, then 4 per block for compressed chunks."""
    cdef uint8_t h16[16]
    cdef Py_ssize_t got
    cdef int32_t nbytes, blocksize, ctbytes
    cdef int flags
    cdef Py_ssize_t nblocks
    if offset < 0 or offset + 16 > limit:
        raise FormatError(f"{where}: chunk offset {offset} is outside the file ({limit} bytes)")
    got = _pread_all(fd, <char *>h16, 16, offset)
    if got != 16:
        raise FormatError(f"{where}: truncated Blosc header at {offset}")
    flags = h16[2]
    nbytes = read_i32(h16 + 4)
    blocksize = read_i32(h16 + 8)
    ctbytes = read_i32(h16 + 12)
    if ctbytes < 16 or offset + ctbytes > limit:
        raise FormatError(f"{where}: the chunk at {offset} claims {ctbytes} bytes, past the end of the file "
                          f"({limit} bytes)")
    if nbytes < 0:
        raise ChunkError(f"bad Blosc chunk ({where}): nbytes {nbytes}")
    if flags & 0x02 or nbytes == 0:
        return bytes(h16[:16])
    if blocksize <= 0:
        raise ChunkError(f"bad Blosc chunk ({where}): blocksize {blocksize}")
    nblocks = (<Py_ssize_t>nbytes + blocksize - 1) // blocksize   # in 64 bits: nbytes near 2**31 must not wrap
    if 16 + 4 * nblocks > ctbytes:
        raise ChunkError(f"bad Blosc chunk ({where}): {nblocks} block offsets do not fit in {ctbytes} bytes")
    out = bytearray(16 + 4 * nblocks)
    out[:16] = h16[:16]
    pread_into(fd, memoryview(out)[16:], offset + 16, where)
    return bytes(out)


def read_blocks_into(int fd, int64_t offset, head, Py_ssize_t start, Py_ssize_t nbytes,
                     cnp.ndarray dest not None, Py_ssize_t dest_offset=0, where=None, bytearray scratch=None):
    """Decode bytes [start, start+nbytes) of the chunk at file position `offset` into `dest`.

    `head` is the chunk's header and block starts (from `read_head`).  Only the byte ranges of the
    blocks holding the wanted bytes are read from the file (positioned reads, contiguous ranges merged),
    into a lazy chunk buffer of ctbytes length, which `_chunk.getitem_into` then decodes.
    `scratch`, a bytearray grown as needed, is reused as that buffer (its stale bytes outside the header,
    bstarts and wanted blocks are never read by the decoder).
    Returns the number of bytes read from the file.
    """
    cdef bytes hb = bytes(head)
    cdef Py_ssize_t ctbytes = read_i32(<const uint8_t *><const char *>hb + 12) if len(hb) >= 16 else 0
    cdef Py_ssize_t b, e, total = 0
    head = hb
    if ctbytes < 16:
        raise ChunkError(f"bad Blosc chunk ({where}): header too short")
    ranges = _chunk.block_ranges(head, start, nbytes, where)
    if scratch is not None and len(scratch) < ctbytes:
        try:
            scratch.extend(bytes(ctbytes - len(scratch)))
        except BufferError:           # still exported somewhere: use a fresh buffer this time
            scratch = None
    lazy = memoryview(bytearray(ctbytes) if scratch is None else scratch)[:ctbytes]
    hl = len(head)
    lazy[:hl] = hb
    merged = []
    for b, e in sorted(ranges):
        if e <= hl:
            continue
        if b < hl:
            b = hl
        if e > ctbytes or b < 0 or b > e:
            raise ChunkError(f"bad Blosc chunk ({where}): block bytes [{b}, {e}) outside its {ctbytes} bytes")
        if merged and b <= merged[len(merged) - 1][1]:
            last = merged[len(merged) - 1]
            last[1] = max(last[1], e)
        else:
            merged.append([b, e])
    try:
        for b, e in merged:
            pread_into(fd, lazy[b:e], offset + b, where)
            total += e - b
        _chunk.getitem_into(lazy, start, nbytes, dest, dest_offset, True, where)
    finally:
        try:
            lazy.release()
        except BufferError:
            pass
    return total + hl


# ---------------------------------------------------------------------------------------------------
# Many whole chunks of superchunk files, read, verified, validated and used (decoded into an output,
# summed, or a byte range of each row copied out) by every thread at once, without the GIL: a long
# read (`a[:]`, `sum()`, `a[:, j]` over a file) pays no Python per chunk.

ctypedef uint32_t (*cksum_fn)(uint32_t, const uint8_t *, uint32_t) noexcept nogil

cdef cksum_fn _c_crc32 = NULL
cdef cksum_fn _c_adler32 = NULL


def _native_checksums():
    """Point the C-level CRC-32 and Adler-32 at zlib-ng's own C functions (`zng_crc32`, `zng_adler32`,
    exported by the `zlib_ng` module's library), each checked against the Python functions on a test
    buffer first; False (the C path unavailable) when they cannot be found or disagree."""
    global _c_crc32, _c_adler32
    if _zng is None:
        return False
    try:
        lib = ctypes.CDLL(_zng.__file__)
        crc = ctypes.cast(lib.zng_crc32, ctypes.c_void_p).value
        adl = ctypes.cast(lib.zng_adler32, ctypes.c_void_p).value
    except (OSError, AttributeError, TypeError):
        return False
    if not crc or not adl:
        return False
    cdef bytes probe = bytes(range(256)) * 7 + b"blzarr"
    cdef const uint8_t *pp = <const uint8_t *><const char *>probe
    cdef cksum_fn c = <cksum_fn><uintptr_t>crc
    cdef cksum_fn a = <cksum_fn><uintptr_t>adl
    if c(0, pp, len(probe)) != (_crc32(probe) & 0xFFFFFFFF) or \
            a(1, pp, len(probe)) != (_adler32(probe) & 0xFFFFFFFF):
        return False
    _c_crc32, _c_adler32 = c, a
    return True


NATIVE_CHECKSUMS = _native_checksums()


def native_checksum(int cid):
    """Whether `ReadChunks` verifies checksum `cid` without the GIL (none, and adler32 / crc32 with
    zlib-ng's C functions at hand)."""
    return cid == 0 or (cid in (1, 2) and NATIVE_CHECKSUMS)


# the head of a thread's scratch: its counts of bytes read and pread calls (added to io_stats when the
# thread is done, with the GIL), then the read buffer (`cap`), then the decode buffer of the mode
cdef enum:
    RC_LEAD = 64
    RC_KEEP_BYTES = 8 * 1024 * 1024 + RC_LEAD   # ReadChunks' buffers kept in the work pool between calls

cdef enum:
    RC_NONE = 0
    RC_DECODE = 1       # each chunk decoded whole into dest at dest_offsets[k]
    RC_SUM = 2          # each chunk's sum into sums[k]
    RC_ROWS = 3         # bytes [cstart, cstart + csize) of each row of rowsize bytes, packed into dest


cdef class ReadChunks(Work):
    """ReadChunks(fds, offsets, limits, entries, cid, expected_nbytes, nparts=1)

    Item k is the chunk at byte ``offsets[k]`` of file descriptor ``fds[k]`` (whose size is
    ``limits[k]``), holding `expected_nbytes` decoded bytes: each calling thread reads chunks into a
    buffer of its own, verifies the checksum `cid` (0, adler32 or crc32: see `native_checksum`),
    validates the structure (`_chunk.validate`'s test), then, with ``entries[k]`` >= 0, reads the
    chunk's offsets entry there again and requires it to still be ``offsets[k]`` (a reader beside a
    writer), and uses the chunk as set by `decode_into`, `sum_as` or `rows_into`.  Call `run()` from up
    to `nparts` threads (the work pool of `_workpool`: each thread's own share first, then the
    others').  Nothing raises for a chunk: ``status[k]`` is 0 for a chunk done, nonzero for one that
    was not (a short read, a checksum or structure that does not hold, a moved chunk, a failed
    decode): the caller reads those again its slow way, which says what is wrong (or retries).
    ``cts[k]`` is chunk k's compressed size once read.
    """

    cdef Py_ssize_t expected, cksize, cap, work_bytes
    cdef int cid, mode, kind
    cdef Py_ssize_t isz, rowsize, cstart, csize
    cdef bint is_signed
    cdef const int64_t *fd
    cdef const int64_t *off
    cdef const int64_t *lim
    cdef const int64_t *ent
    cdef const int64_t *doff
    cdef const int64_t *known
    cdef const int8_t *ver
    cdef int8_t *st
    cdef int64_t *ct
    cdef char *out
    cdef char *sums
    cdef Py_ssize_t outbytes
    cdef readonly object status, cts, sums_arr
    cdef object keep

    def __init__(self, fds, offsets, limits, entries, int cid, Py_ssize_t expected_nbytes,
                 Py_ssize_t nparts=1, ctbytes=None, verified=None):
        cdef Py_ssize_t n
        if not native_checksum(cid):
            raise ValueError(f"ReadChunks: checksum {cid} is not verified without the GIL here")
        if expected_nbytes <= 0:
            raise ValueError("ReadChunks: whole chunks of a known, positive size are needed")
        n = len(fds)
        if ctbytes is None:
            ctbytes = np.full(n, -1, dtype=np.int64)
        if verified is None:
            verified = np.zeros(n, dtype=np.int8)
        arrs = [np.ascontiguousarray(a, dtype=np.int64) for a in (fds, offsets, limits, entries, ctbytes)]
        arrs.append(np.ascontiguousarray(verified, dtype=np.int8))
        if any(a.ndim != 1 or a.shape[0] != n for a in arrs):
            raise ValueError("ReadChunks: one descriptor, offset, limit, entry position, compressed size "
                             "and verified flag per chunk")
        self.keep = arrs
        self.known = <const int64_t *>cnp.PyArray_DATA(arrs[4])
        self.ver = <const int8_t *>cnp.PyArray_DATA(arrs[5])
        self.fd = <const int64_t *>cnp.PyArray_DATA(arrs[0])
        self.off = <const int64_t *>cnp.PyArray_DATA(arrs[1])
        self.lim = <const int64_t *>cnp.PyArray_DATA(arrs[2])
        self.ent = <const int64_t *>cnp.PyArray_DATA(arrs[3])
        self._share(n, min(nparts, 64))
        self.keep_bytes = RC_KEEP_BYTES
        self.cid = cid
        self.cksize = CHECKSUMS[cid][1]
        self.expected = expected_nbytes
        self.cap = expected_nbytes + 16 + self.cksize       # a valid chunk is at most nbytes + 16
        self.status = np.ones(n, dtype=np.int8)
        self.cts = np.full(n, -1, dtype=np.int64)
        self.st = <int8_t *>cnp.PyArray_DATA(self.status)
        self.ct = <int64_t *>cnp.PyArray_DATA(self.cts)
        self._set_mode(RC_NONE, 0)

    cdef int _set_mode(self, int mode, Py_ssize_t work_bytes) except -1:
        self.mode = mode
        self.work_bytes = work_bytes
        self.scratch_bytes = RC_LEAD + self.cap + work_bytes
        return 0

    cdef int _set_dest(self, cnp.ndarray dest, dest_offsets, Py_ssize_t each) except -1:
        cdef Py_ssize_t k
        if not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest):
            raise ValueError("ReadChunks: the output array must be C-contiguous and writeable")
        d = np.ascontiguousarray(dest_offsets, dtype=np.int64)
        if d.ndim != 1 or d.shape[0] != self.nitems:
            raise ValueError("ReadChunks: one output offset per chunk")
        self.outbytes = cnp.PyArray_NBYTES(dest)
        if self.nitems and (d.min() < 0 or d.max() + each > self.outbytes):
            raise ValueError(f"ReadChunks: {each} bytes at the offsets given do not fit in the output's "
                             f"{self.outbytes} bytes")
        self.keep = self.keep + [dest, d]
        self.out = <char *>cnp.PyArray_DATA(dest)
        self.doff = <const int64_t *>cnp.PyArray_DATA(d)
        return 0

    def decode_into(self, cnp.ndarray dest not None, dest_offsets):
        """Decode chunk k whole into `dest` at byte ``dest_offsets[k]``."""
        self._set_dest(dest, dest_offsets, self.expected)
        self._set_mode(RC_DECODE, 0)
        return self

    def rows_into(self, cnp.ndarray dest not None, dest_offsets, Py_ssize_t rowsize, Py_ssize_t cstart,
                  Py_ssize_t csize):
        """Copy bytes [cstart, cstart + csize) of every row of `rowsize` bytes of chunk k, one after the
        other, into `dest` from byte ``dest_offsets[k]`` (a column range of a 2-D array's rows)."""
        if rowsize <= 0 or self.expected % rowsize or cstart < 0 or csize <= 0 or cstart + csize > rowsize:
            raise ValueError(f"ReadChunks: bytes [{cstart}, {cstart + csize}) of rows of {rowsize} bytes")
        self._set_dest(dest, dest_offsets, self.expected // rowsize * csize)
        self.rowsize, self.cstart, self.csize = rowsize, cstart, csize
        self._set_mode(RC_ROWS, self.expected)
        return self

    def sum_as(self, dtype):
        """NumPy's sum of chunk k's values of `dtype` into ``sums[k]`` (as `_sums.SumChunks`)."""
        dt = np.dtype(dtype)
        if not dt.isnative or not (dt.kind in "iu" or dt.char in "fd") or dt.itemsize not in (1, 2, 4, 8):
            raise ValueError(f"ReadChunks: cannot sum dtype {dt}")
        if self.expected % dt.itemsize:
            raise ValueError(f"ReadChunks: {self.expected} bytes are not whole {dt} values")
        if dt.char == "d":
            self.kind, acc = SUM_F8, dt
        elif dt.char == "f":
            self.kind, acc = SUM_F4, dt
        elif dt.kind == "i":
            self.kind, acc = SUM_SIGNED, np.dtype(np.int64)
        else:
            self.kind, acc = SUM_UNSIGNED, np.dtype(np.uint64)
        self.isz = dt.itemsize
        self.is_signed = dt.kind != "u"
        self.sums_arr = np.zeros(self.nitems, acc)
        self.sums = <char *>cnp.PyArray_DATA(self.sums_arr)
        self._set_mode(RC_SUM, self.expected)
        return self

    cdef int _fetch(self, Py_ssize_t k, char *rbuf, Py_ssize_t *nread, Py_ssize_t *calls,
                    header_t *h) noexcept nogil:
        """Chunk k read into `rbuf`, verified, validated (its header into `h`) and its entry checked:
        0 (its compressed size then in ``ct[k]``), else the status code."""
        cdef int fd = <int>self.fd[k]
        cdef int64_t off = self.off[k], pos
        cdef Py_ssize_t got, ct = self.known[k], have = 0, total, nb = self.expected
        cdef uint32_t stored, cs
        cdef uint8_t ebuf[8]
        cdef bint check = self.cid != 0 and not self.ver[k]
        cdef int err         # a failed read is a short one here: the slow path says what went wrong
        if off < 0:
            return 2
        if ct < 0:
            got = _pread_nogil(fd, rbuf, 16, off, calls, &err)
            if got != 16:
                return 3
            nread[0] += got
            have = 16
            ct = read_i32(<const uint8_t *>rbuf + 12)
        if ct < 16 or ct + self.cksize > self.cap or off + ct + self.cksize > self.lim[k]:
            return 4
        # a chunk verified before at this offset in this state of its file is read without its
        # checksum (as the lazy block reads and decode_chunk_into do); its entry is still re-checked
        total = ct + self.cksize if check else ct
        got = _pread_nogil(fd, rbuf + have, total - have, off + have, calls, &err)
        if got != total - have:
            return 3
        nread[0] += got
        if check:
            stored = <uint32_t>read_i32(<const uint8_t *>rbuf + ct)
            if self.cid == 2:
                cs = _c_crc32(0, <const uint8_t *>rbuf, <uint32_t>ct)
            else:
                cs = _c_adler32(1, <const uint8_t *>rbuf, <uint32_t>ct)
            if cs != stored:
                return 5
        if not chunk_valid(<const uint8_t *>rbuf, ct, nb, h):
            return 6
        pos = self.ent[k]
        if pos >= 0:
            got = _pread_nogil(fd, <char *>ebuf, 8, pos, calls, &err)
            if got != 8:
                return 3
            nread[0] += 8
            if _get_i64(ebuf) != off:
                return 7
        self.ct[k] = ct
        return 0

    cdef int _one(self, Py_ssize_t k, char *rbuf, char *scratch, Py_ssize_t *nread,
                  Py_ssize_t *calls) noexcept nogil:
        cdef Py_ssize_t ct, nb = self.expected
        cdef header_t h
        cdef const char *v
        cdef int r = self._fetch(k, rbuf, nread, calls, &h)
        if r != 0:
            return r
        ct = self.ct[k]
        if self.mode == RC_DECODE:
            if decode_chunk(<const uint8_t *>rbuf, ct, self.out + self.doff[k], nb, 1) != nb:
                return 8
            return 0
        if self.mode == RC_ROWS:
            # the wanted bytes of every row (one LZ4 block at a time where the chunk allows)
            if rows_of_chunk(<const uint8_t *>rbuf, &h, self.out + self.doff[k], self.rowsize,
                             self.cstart, self.csize, scratch, self.work_bytes) != 0:
                return 8
            return 0
        if h.flags & 0x02:
            v = rbuf + 16
        else:
            if decode_chunk(<const uint8_t *>rbuf, ct, scratch, nb, 1) != nb:
                return 8
            v = scratch
        sum_values(self.kind, self.isz, self.is_signed, v, nb // self.isz, self.sums, k)
        return 0

    @property
    def read_bytes(self):
        """The size of the buffer `decode_one` reads a chunk into."""
        return self.cap

    def decode_one(self, Py_ssize_t k, cnp.ndarray dest not None, bytearray buf not None):
        """Chunk k read, verified and validated as `run()` does, and decoded whole into `dest` (C-contiguous,
        writeable, `expected_nbytes` bytes at least), on the calling thread, without the GIL and
        without a Python call between the read and the decoding; `buf` (at least `read_bytes` long)
        holds the compressed bytes.  Returns ``status[k]``, which it sets: 0 when `dest` holds the
        chunk, else the caller reads it its slow way (as after `run()`).  Any mode, or none, may be set."""
        global _stat_bytes, _stat_calls
        cdef header_t h
        cdef Py_ssize_t counts[2]
        cdef char *rbuf
        cdef char *out
        cdef int r
        if not 0 <= k < self.nitems:
            raise IndexError(f"ReadChunks: chunk {k} of {self.nitems}")
        if not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest) \
                or cnp.PyArray_NBYTES(dest) < self.expected:
            raise ValueError(f"ReadChunks: the output must be a C-contiguous, writeable array of "
                             f"{self.expected} bytes at least")
        if len(buf) < self.cap:
            raise ValueError(f"ReadChunks: the read buffer must hold {self.cap} bytes")
        rbuf = PyByteArray_AS_STRING(buf)
        out = <char *>cnp.PyArray_DATA(dest)
        counts[0] = 0
        counts[1] = 0
        with nogil:
            r = self._fetch(k, rbuf, &counts[0], &counts[1], &h)
            if r == 0 and decode_chunk(<const uint8_t *>rbuf, self.ct[k], out, self.expected, 1) != self.expected:
                r = 8
        self.st[k] = r
        _stat_bytes += counts[0]
        _stat_calls += counts[1]
        return r

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        # a chunk that cannot be used here is not a failure of the work: its status sends it to the
        # caller's slow path, and the other chunks go on
        cdef Py_ssize_t *counts = <Py_ssize_t *>scratch
        self.st[k] = self._one(k, scratch + RC_LEAD, scratch + RC_LEAD + self.cap, &counts[0], &counts[1])
        return 0

    cdef int _ready(self) except -1:
        if self.mode == RC_NONE:
            raise ValueError("ReadChunks: call decode_into, sum_as or rows_into first")
        return 0

    cdef void _started(self, char *scratch) noexcept:
        (<Py_ssize_t *>scratch)[0] = 0
        (<Py_ssize_t *>scratch)[1] = 0

    cdef void _finished(self, char *scratch) noexcept:
        global _stat_bytes, _stat_calls
        _stat_bytes += (<Py_ssize_t *>scratch)[0]
        _stat_calls += (<Py_ssize_t *>scratch)[1]
