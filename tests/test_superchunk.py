"""blzarr._superchunk: the 32-byte header, checksums, offsets and positioned lazy block reads, checked
against bytes built by hand with struct, zlib and hashlib."""

import hashlib
import os
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.errors import ChecksumError, ChunkError, FormatError
from helpers import examples


def hand_header(version=2, options=3, checksum=2, typesize=8, chunk_size=8000, last_chunk=4000,
                nchunks=5, meta_size=100, reserved=0):
    return struct.pack("<4sBBBBiiqii", b"blpk", version, options, checksum, typesize, chunk_size,
                       last_chunk, nchunks, meta_size, reserved)


def test_header_pack_matches_hand_built_bytes():
    got = sc.pack_header(2, 8, 8000, 4000, 5, 100)
    assert len(got) == sc.HEADER_SIZE == 32
    assert got == hand_header()
    # field by field at the documented positions
    assert got[:4] == b"blpk" and got[4] == 2 and got[5] == 3 and got[6] == 2 and got[7] == 8
    assert int.from_bytes(got[8:12], "little", signed=True) == 8000
    assert int.from_bytes(got[12:16], "little", signed=True) == 4000
    assert int.from_bytes(got[16:24], "little", signed=True) == 5
    assert int.from_bytes(got[24:28], "little", signed=True) == 100
    assert got[28:32] == b"\0\0\0\0"
    # -1 (unknown chunk-size), big counts
    assert sc.pack_header(0, 1, -1, -1, 2 ** 40, 0) == hand_header(
        checksum=0, typesize=1, chunk_size=-1, last_chunk=-1, nchunks=2 ** 40, meta_size=0)


def test_header_unpack_hand_built_bytes():
    h = sc.unpack_header(hand_header(checksum=6, typesize=4, chunk_size=123, last_chunk=7, nchunks=9,
                                     meta_size=40))
    assert (h["version"], h["options"], h["checksum"], h["typesize"]) == (2, 3, 6, 4)
    assert (h["chunk_size"], h["last_chunk"], h["nchunks"], h["meta_size"]) == (123, 7, 9, 40)
    assert h["checksum_name"] == "sha256" and h["checksum_size"] == 32
    # round trip of every checksum id
    for cid in range(9):
        assert sc.unpack_header(sc.pack_header(cid, 2, 10, 10, 1, 8))["checksum"] == cid


@pytest.mark.parametrize("raw, msg", [
    (hand_header()[:31], "truncated"),
    (b"BLPK" + hand_header()[4:], "magic"),
    (hand_header(version=1), "version 1"),
    (hand_header(version=3), "version 3"),
    (hand_header(checksum=9), "checksum id 9"),
    (hand_header(options=0x07), "option bits"),
    (hand_header(options=0x02), "offsets"),
    (hand_header(typesize=0), "typesize 0"),
    (hand_header(nchunks=-1), "nchunks"),
    (hand_header(meta_size=-4), "meta-size"),
    (hand_header(chunk_size=-2), "chunk-size"),
])
def test_header_unpack_rejects_bad_headers(raw, msg):
    with pytest.raises(FormatError, match=msg) as e:
        sc.unpack_header(raw, "some/file.bin")
    assert "some/file.bin" in str(e.value)


def test_pack_header_rejects_bad_arguments():
    with pytest.raises(ValueError):
        sc.pack_header(9, 8, 1, 1, 1, 0)
    with pytest.raises(ValueError):
        sc.pack_header(2, 256, 1, 1, 1, 0)
    with pytest.raises(ValueError):
        sc.pack_header(2, 8, 1, 1, 1, -1)


INDEPENDENT = {
    0: lambda b: b"",
    1: lambda b: struct.pack("<I", zlib.adler32(b) & 0xFFFFFFFF),
    2: lambda b: struct.pack("<I", zlib.crc32(b) & 0xFFFFFFFF),
    3: lambda b: hashlib.md5(b).digest(),
    4: lambda b: hashlib.sha1(b).digest(),
    5: lambda b: hashlib.sha224(b).digest(),
    6: lambda b: hashlib.sha256(b).digest(),
    7: lambda b: hashlib.sha384(b).digest(),
    8: lambda b: hashlib.sha512(b).digest(),
}


@pytest.mark.parametrize("cid", range(9))
def test_every_checksum_id(cid):
    data = bytes(range(256)) * 3 + b"tail"
    got = sc.checksum(cid, data)
    assert got == INDEPENDENT[cid](data)
    assert len(got) == sc.checksum_size(cid) == [0, 4, 4, 16, 20, 28, 32, 48, 64][cid]
    sc.verify_checksum(cid, data, got, "x")
    if cid:
        bad = bytearray(data)
        bad[100] ^= 1
        with pytest.raises(ChecksumError, match=f"{sc.CHECKSUMS[cid][0]} checksum mismatch in chunk 3"):
            sc.verify_checksum(cid, bytes(bad), got, "chunk 3")


@settings(max_examples=examples(200), deadline=None)
@given(data=st.binary(max_size=5000), start=st.integers(0, 64), cid=st.sampled_from([1, 2]))
def test_crc32_and_adler32_equal_zlibs(data, start, cid):
    # the fast backend (zlib-ng when installed) must give zlib's bytes on any length and alignment,
    # including memoryviews, so files written with either verify with the other
    buf = memoryview(b"\0" * start + data)[start:]
    assert sc.checksum(cid, buf) == INDEPENDENT[cid](data)


def test_checksum_backend_is_fast_where_installed():
    try:
        import zlib_ng  # noqa: F401
    except ImportError:
        assert sc.CHECKSUM_BACKEND == "zlib"
    else:
        assert sc.CHECKSUM_BACKEND == "zlib-ng"
    big = np.random.default_rng(3).integers(0, 256, 3 << 20, dtype=np.uint8)
    assert sc.checksum(2, big) == INDEPENDENT[2](big.tobytes())
    assert sc.checksum(1, big) == INDEPENDENT[1](big.tobytes())


def test_checksum_ids_by_name():
    assert sc.checksum_id(None) == 0
    assert sc.checksum_id("crc32") == 2 and sc.checksum_id("SHA512") == 8 and sc.checksum_id(3) == 3
    for bad in ("crc64", 9, -1, True, 2.0):
        with pytest.raises(ValueError, match="checksum must be"):
            sc.checksum_id(bad)


def test_offsets_table_and_positioned_reads(tmp_path):
    p = tmp_path / "f.bin"
    offs = np.array([100, -1, 2 ** 40, 7], dtype=np.int64)
    raw = sc.pack_offsets(offs)
    assert raw == struct.pack("<4q", 100, -1, 2 ** 40, 7)
    p.write_bytes(b"x" * 10 + raw)
    fd = os.open(p, os.O_RDONLY)
    try:
        sc.io_stats(reset=True)
        assert sc.read_offset(fd, 10, 2) == 2 ** 40
        assert sc.io_stats(reset=True) == (8, 1)
        np.testing.assert_array_equal(sc.read_offsets(fd, 10, 4), offs)
        assert sc.io_stats()[0] == 32
        with pytest.raises(FormatError, match="truncated"):
            sc.read_offset(fd, 10, 4)
        with pytest.raises(FormatError, match="truncated"):
            sc.pread(fd, 100, 0, "f.bin")
    finally:
        os.close(fd)


def test_pwrite_and_pread_round_trip(tmp_path):
    p = tmp_path / "w.bin"
    p.write_bytes(b"")
    fd = os.open(p, os.O_RDWR)
    try:
        sc.pwrite_all(fd, b"hello", 3)
        assert bytes(sc.pread(fd, 8, 0)) == b"\0\0\0hello"
        buf = bytearray(3)
        sc.pread_into(fd, buf, 5)
        assert buf == b"llo"
    finally:
        os.close(fd)


def _chunk_file(tmp_path, arr, blocksize=512, pad=1000, clevel=5):
    """A file holding `pad` junk bytes, then one chunk of `arr`, then junk.

    `blocksize` is what C-Blosc is asked for (requests this small are kept exactly)."""
    arr = np.ascontiguousarray(arr)
    data = _chunk.compress(arr, arr.dtype.itemsize, clevel, 1, "blosclz", blocksize, 1)
    if clevel:
        assert _chunk.header(data)["blocksize"] == blocksize
    p = tmp_path / "c.bin"
    p.write_bytes(b"\xAB" * pad + data + b"\xCD" * 77)
    return p, data


def test_lazy_block_reads_touch_only_needed_blocks(tmp_path):
    rng = np.random.default_rng(1)
    arr = rng.integers(0, 2 ** 20, 64 * 1024)          # 512 KB, about 2x compressible, 1024 blocks of 512 bytes
    p, data = _chunk_file(tmp_path, arr)
    h = _chunk.header(data)
    assert h["nblocks"] >= 64
    fd = os.open(p, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        sc.io_stats(reset=True)
        head = sc.read_head(fd, 1000, size, "c.bin")
        assert head == data[:16 + 4 * h["nblocks"]]
        head_bytes = sc.io_stats(reset=True)[0]
        assert head_bytes == len(head)
        per_block = h["blocksize"]
        for start_item, n in [(0, 1), (12345, 1), (len(arr) - 1, 1), (5000, 300), (511, 2)]:
            out = np.empty(n, dtype=arr.dtype)
            sc.io_stats(reset=True)
            got = sc.read_blocks_into(fd, 1000, head, start_item * 8, n * 8, out)
            read, calls = sc.io_stats(reset=True)
            np.testing.assert_array_equal(out, arr[start_item:start_item + n])
            nblocks_needed = (start_item + n - 1) * 8 // per_block - start_item * 8 // per_block + 1
            assert got == read + len(head)
            # only the blocks' bytes (a compressed block is at most blocksize + its stream headers)
            assert read <= nblocks_needed * (per_block + 64), (start_item, n, read)
            assert read < len(data) / 20
            assert calls <= nblocks_needed
    finally:
        os.close(fd)


def test_lazy_read_scales_with_blocks_not_chunk_size(tmp_path):
    rng = np.random.default_rng(2)
    reads = []
    for nitems in (16 * 1024, 256 * 1024):
        arr = rng.integers(0, 2 ** 20, nitems)
        p, data = _chunk_file(tmp_path, arr)
        fd = os.open(p, os.O_RDONLY)
        try:
            head = sc.read_head(fd, 1000, os.fstat(fd).st_size)
            out = np.empty(10, dtype=arr.dtype)
            sc.io_stats(reset=True)
            sc.read_blocks_into(fd, 1000, head, 800, 80, out)
            reads.append(sc.io_stats()[0])
            np.testing.assert_array_equal(out, arr[100:110])
        finally:
            os.close(fd)
    # 16x larger chunk, same single block read
    assert reads[1] <= reads[0] + 64
    assert reads[0] < 2 * 512 + 64


def test_lazy_read_of_memcpyed_chunk(tmp_path):
    arr = np.arange(1000, dtype=np.int32)
    p, data = _chunk_file(tmp_path, arr, blocksize=0, clevel=0)
    assert _chunk.header(data)["memcpyed"]
    fd = os.open(p, os.O_RDONLY)
    try:
        head = sc.read_head(fd, 1000, os.fstat(fd).st_size)
        assert len(head) == 16
        out = np.empty(3, dtype=np.int32)
        sc.io_stats(reset=True)
        sc.read_blocks_into(fd, 1000, head, 400, 12, out)
        assert sc.io_stats()[0] == 12
        np.testing.assert_array_equal(out, [100, 101, 102])
    finally:
        os.close(fd)


def test_read_head_rejects_chunks_past_the_file(tmp_path):
    arr = np.random.default_rng(3).integers(0, 2 ** 20, 4096)
    p, data = _chunk_file(tmp_path, arr)
    fd = os.open(p, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        with pytest.raises(FormatError, match="outside the file"):
            sc.read_head(fd, size - 8, size, "c.bin")
        with pytest.raises(FormatError, match="past the end"):
            sc.read_head(fd, 1000, 1000 + len(data) - 1, "c.bin")
        with pytest.raises((ChunkError, FormatError)):
            # junk bytes read as a header
            sc.read_head(fd, 0, size, "c.bin")
    finally:
        os.close(fd)


def test_lazy_read_detects_bad_block_streams(tmp_path):
    arr = np.random.default_rng(4).integers(0, 2 ** 20, 8192)
    data = bytearray(_chunk.compress(arr, 8, 5, 1, "blosclz", 512, 1))
    h = _chunk.header(bytes(data))
    assert h["nblocks"] == 128
    # corrupt the first stream size of block 3
    b3 = int.from_bytes(data[16 + 12:16 + 16], "little")
    data[b3:b3 + 4] = (10 ** 8).to_bytes(4, "little")
    p = tmp_path / "bad.bin"
    p.write_bytes(bytes(data))
    fd = os.open(p, os.O_RDONLY)
    try:
        head = sc.read_head(fd, 0, len(data))
        out = np.empty(1, dtype=arr.dtype)
        sc.read_blocks_into(fd, 0, head, 0, 8, out)   # block 0 is fine
        assert out[0] == arr[0]
        start = 3 * h["blocksize"]
        with pytest.raises(ChunkError, match="block 3"):
            sc.read_blocks_into(fd, 0, head, start, 8, out, 0, "bad.bin")
    finally:
        os.close(fd)


from hypothesis import given, strategies as st  # noqa: E402


@given(cid=st.integers(0, 8), typesize=st.integers(1, 255), chunk_size=st.integers(-1, 2 ** 31 - 1),
       last_chunk=st.integers(-1, 2 ** 31 - 1), nchunks=st.integers(0, 2 ** 63 - 1),
       meta_size=st.integers(0, 2 ** 31 - 1))
def test_header_round_trip_matches_struct(cid, typesize, chunk_size, last_chunk, nchunks, meta_size):
    raw = sc.pack_header(cid, typesize, chunk_size, last_chunk, nchunks, meta_size)
    assert raw == hand_header(checksum=cid, typesize=typesize, chunk_size=chunk_size, last_chunk=last_chunk,
                              nchunks=nchunks, meta_size=meta_size)
    h = sc.unpack_header(raw)
    assert (h["checksum"], h["typesize"], h["chunk_size"], h["last_chunk"], h["nchunks"], h["meta_size"]) == \
        (cid, typesize, chunk_size, last_chunk, nchunks, meta_size)


@given(raw=st.binary(min_size=32, max_size=32))
def test_header_unpack_never_crashes_on_junk(raw):
    try:
        h = sc.unpack_header(b"blpk" + raw[4:])
    except FormatError:
        return
    assert h["version"] == 2 and h["checksum"] in range(9) and h["nchunks"] >= 0


def test_read_head_nbytes_near_int32_max_is_a_chunk_error(tmp_path):
    """nbytes + blocksize - 1 overflowed int32 once and gave a negative block count."""
    import struct as _struct
    from blzarr import _superchunk
    from blzarr.errors import ChunkError as _ChunkError
    p = tmp_path / "x.bin"
    p.write_bytes(bytes([2, 1, 1, 8]) + _struct.pack("<iii", 2 ** 31 - 1, 16384, 4000) + bytes(4000))
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(_ChunkError, match="block offsets do not fit"):
            _superchunk.read_head(fd, 0, 4016, where="x.bin")
    finally:
        os.close(fd)


def test_fetch_decode_reads_verifies_checks_and_decodes(tmp_path):
    """One call per chunk on the long-read path: the chunk and its stored checksum read (its size from
    the header when not given), verified, validated, the offsets entry checked, decoded whole."""
    x = np.arange(5000, dtype=np.float64) * 0.5
    data = _chunk.compress(x, 8, 5, 1, "lz4")
    ck = sc.checksum(2, data)
    path = str(tmp_path / "f")
    off, entry = 64, 8
    with open(path, "wb") as f:
        f.write(b"\0" * off + data + ck + b"tail")
    with open(path, "r+b") as f:
        f.seek(entry)
        f.write(struct.pack("<q", off))
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        out = np.empty_like(x)
        buf, ct = sc.fetch_decode(fd, off, -1, size, 2, None, out, x.nbytes, 1, entry, "chunk 0")
        assert ct == len(data) and len(buf) >= len(data) + 4
        np.testing.assert_array_equal(out, x)
        small = bytearray(10)                       # too small: a larger buffer comes back
        buf2, _ = sc.fetch_decode(fd, off, len(data), size, 2, small, out, -1, 1, -1, "chunk 0")
        assert buf2 is not small and len(buf2) >= len(data) + 4
        big = bytearray(len(data) + 100)            # large enough: reused
        assert sc.fetch_decode(fd, off, len(data), size, 2, big, out, -1, 1, -1, "w")[0] is big
        with pytest.raises(ChunkError, match="holds 40000 bytes, 8 expected"):
            sc.fetch_decode(fd, off, -1, size, 2, None, out, 8, 1, -1, "chunk 0")
        with pytest.raises(FormatError, match="chunk 0: the chunk moved while it was read"):
            sc.fetch_decode(fd, off, -1, size, 2, None, out, -1, 1, 0, "chunk 0")
        with pytest.raises(FormatError, match="past the end of the file"):
            sc.fetch_decode(fd, off, -1, off + len(data), 2, None, out, -1, 1, -1, "chunk 0")
    finally:
        os.close(fd)
    with open(path, "r+b") as f:                    # one flipped byte in the chunk
        f.seek(off + 40)
        b = f.read(1)
        f.seek(off + 40)
        f.write(bytes([b[0] ^ 0xFF]))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ChecksumError, match="crc32 checksum mismatch in chunk 0"):
            sc.fetch_decode(fd, off, -1, size, 2, None, out, -1, 1, entry, "chunk 0")
    finally:
        os.close(fd)
