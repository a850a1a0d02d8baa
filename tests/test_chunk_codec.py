"""The Cython codec of one Blosc chunk (blzarr._chunk): round trips, partial reads, and hostile input."""

import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, strategies as st

from blzarr import _chunk
from blzarr.errors import ChunkError

CNAMES = _chunk.compressor_list()


def smooth(n, dtype="f8"):
    return (np.arange(n) * 0.25).astype(dtype)


@pytest.mark.parametrize("cname", CNAMES)
@pytest.mark.parametrize("shuffle", [0, 1, 2])
@pytest.mark.parametrize("blocksize", [0, 4096, 1000])
def test_round_trip_every_codec_shuffle_blocksize(cname, shuffle, blocksize):
    a = smooth(50_000)
    c = _chunk.compress(a, 8, 5, shuffle, cname, blocksize, 2)
    assert isinstance(c, bytes)
    h = _chunk.header(c)
    assert h["ctbytes"] == len(c) and h["nbytes"] == a.nbytes and h["typesize"] == 8
    assert h["shuffle"] == (shuffle if not h["memcpyed"] else h["shuffle"])
    assert _chunk.validate(c, a.nbytes) == a.nbytes
    out = np.empty_like(a)
    assert _chunk.decompress_into(c, out, 2) == a.nbytes
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("clevel", range(10))
def test_every_clevel(clevel):
    a = np.random.default_rng(clevel).integers(0, 100, 20_000).astype("i4")
    c = _chunk.compress(a, 4, clevel, 1, "lz4")
    out = np.zeros_like(a)
    _chunk.decompress_into(c, out)
    np.testing.assert_array_equal(out, a)
    if clevel == 0:
        assert _chunk.header(c)["memcpyed"]


def test_compressed_size_is_exact_and_compresses():
    a = np.zeros(100_000, dtype="i8")
    c = _chunk.compress(a, 8)
    assert len(c) < a.nbytes // 50
    assert _chunk.header(c)["ctbytes"] == len(c)


def test_empty_and_tiny_buffers():
    for n in (0, 1, 7, 200):
        a = np.arange(n, dtype="u1")
        c = _chunk.compress(a, 1)
        out = np.zeros(n, dtype="u1")
        assert _chunk.decompress_into(c, out) == n
        np.testing.assert_array_equal(out, a)


def test_decompress_at_offset_into_larger_buffer():
    a = smooth(1000)
    c = _chunk.compress(a, 8)
    out = np.full(1500, -1.0)
    _chunk.decompress_into(c, out, offset=8 * 250)
    np.testing.assert_array_equal(out[250:1250], a)
    assert (out[:250] == -1).all() and (out[1250:] == -1).all()


def test_output_buffer_checks_name_both_sizes():
    c = _chunk.compress(smooth(1000), 8)
    with pytest.raises(ValueError, match="8000"):
        _chunk.decompress_into(c, np.empty(999))
    ro = np.empty(1000)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _chunk.decompress_into(c, ro)
    with pytest.raises(ValueError, match="contiguous"):
        _chunk.decompress_into(c, np.empty(2000)[::2])


@given(st.integers(0, 39_999), st.integers(0, 600), st.sampled_from(CNAMES), st.sampled_from([0, 1, 2]))
def test_getitem_matches_numpy(start, n, cname, shuffle):
    a = np.random.default_rng(1).normal(size=40_000).cumsum()
    c = _chunk.compress(a, 8, 5, shuffle, cname, 4096)
    n = min(n, 40_000 - start)
    out = np.zeros(n)
    assert _chunk.getitem_into(c, start * 8, n * 8, out) == n * 8
    np.testing.assert_array_equal(out, a[start:start + n])


@given(st.integers(0, 39_999), st.integers(1, 3000))
def test_lazy_chunk_decodes_with_only_needed_blocks(start, n):
    a = np.random.default_rng(2).integers(0, 1000, 40_000).astype("i8")
    c = _chunk.compress(a, 8, 5, 1, "lz4", 4096)
    h = _chunk.header(c)
    n = min(n, 40_000 - start)
    ranges = _chunk.block_ranges(c[:16 + 4 * h["nblocks"]], start * 8, n * 8)
    lazy = bytearray(len(c))
    for b, e in ranges:
        lazy[b:e] = c[b:e]
    needed = sum(e - b for b, e in ranges)
    assert needed < len(c) or h["nblocks"] <= 2
    out = np.zeros(n, dtype="i8")
    _chunk.getitem_into(bytes(lazy), start * 8, n * 8, out)
    np.testing.assert_array_equal(out, a[start:start + n])


def test_getitem_range_and_alignment_checks():
    c = _chunk.compress(smooth(100), 8)
    with pytest.raises(IndexError):
        _chunk.getitem_into(c, 0, 808, np.empty(101))
    with pytest.raises(ValueError, match="typesize"):
        _chunk.getitem_into(c, 3, 8, np.empty(1))


def test_compress_argument_errors_name_the_argument():
    a = smooth(10)
    with pytest.raises(ValueError, match="clevel"):
        _chunk.compress(a, 8, 10)
    with pytest.raises(ValueError, match="shuffle"):
        _chunk.compress(a, 8, 5, 3)
    with pytest.raises(ValueError, match="typesize"):
        _chunk.compress(a, 0)
    with pytest.raises(ValueError, match="typesize"):
        _chunk.compress(a, 256)
    with pytest.raises(ValueError, match="compressor"):
        _chunk.compress(a, 8, 5, 1, "nope")
    with pytest.raises(ValueError, match="contiguous"):
        _chunk.compress(np.arange(10.0)[::2], 8)


def test_codec_names_and_versions():
    assert {"blosclz", "lz4", "lz4hc", "zlib", "zstd"} <= set(CNAMES)
    assert _chunk.blosc_version()[0].startswith("1.")
    assert _chunk.complib_info("zstd")[0] == "Zstd"
    with pytest.raises(ValueError):
        _chunk.complib_info("nope")


# ---------------------------------------------------------------- hostile input

def _good():
    return bytearray(_chunk.compress(np.random.default_rng(3).integers(0, 50, 20_000).astype("i8"),
                                     8, 5, 1, "lz4", 4096))


def _set_i32(buf, pos, value):
    buf[pos:pos + 4] = struct.pack("<i", value)


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b.__setitem__(0, 3), "format version"),
    (lambda b: b.__setitem__(2, b[2] | 0x08), "reserved flag"),
    (lambda b: b.__setitem__(2, (b[2] & 0x1f) | (7 << 5)), "codec"),
    (lambda b: b.__setitem__(3, 0), "typesize is 0"),
    (lambda b: _set_i32(b, 4, -5), "nbytes"),
    (lambda b: _set_i32(b, 4, 2 ** 31 - 1), "nbytes|compressed bytes|blocksize"),
    (lambda b: _set_i32(b, 8, 0), "blocksize"),
    (lambda b: _set_i32(b, 8, -1), "blocksize"),
    (lambda b: _set_i32(b, 12, len(b) + 1), "header says"),
    (lambda b: _set_i32(b, 12, 2 ** 31 - 1), "header says"),
    (lambda b: _set_i32(b, 16, 3), "block 0 starts"),
    (lambda b: _set_i32(b, 16, 2 ** 31 - 1), "block 0 starts"),
    (lambda b: _set_i32(b, 20, struct.unpack("<i", b[16:20])[0]), "two blocks start"),
])
def test_malformed_headers_raise_chunk_error(mutate, message):
    b = _good()
    mutate(b)
    with pytest.raises(ChunkError, match=message):
        _chunk.validate(bytes(b), where="chunk 7 of 'x.blp'")
    with pytest.raises(ChunkError, match=r"chunk 7 of 'x.blp'"):
        _chunk.decompress_into(bytes(b), np.empty(20_000, dtype="i8"), where="chunk 7 of 'x.blp'")


def test_stream_sizes_are_checked_before_decoding():
    b = _good()
    first = struct.unpack("<i", b[16:20])[0]
    _set_i32(b, first, 10 ** 6)
    with pytest.raises(ChunkError, match="stream"):
        _chunk.validate(bytes(b))
    with pytest.raises(ChunkError, match="stream"):
        _chunk.getitem_into(bytes(b), 0, 8, np.empty(1))


def test_truncated_chunks():
    b = bytes(_good())
    for n in (0, 5, 15, 16, 40, len(b) - 1):
        with pytest.raises(ChunkError):
            _chunk.validate(b[:n])
        with pytest.raises(ChunkError):
            _chunk.decompress_into(b[:n], np.empty(20_000, dtype="i8"))


def test_expected_size_mismatch_is_refused():
    b = bytes(_good())
    with pytest.raises(ChunkError, match="160000 bytes, 8 expected"):
        _chunk.validate(b, 8)


def _check_decodes(data, expected=None):
    """What any decode of `data` must give: an error, or the size its header announces, the same bytes
    on every decode, the same bytes through a partial read, and `expected` when it is known."""
    try:
        n = _chunk.validate(data)
    except ChunkError:
        assert expected is None, "a well-formed chunk was refused"
        return
    h = _chunk.header(data)
    assert n == h["nbytes"]
    out = np.full(n, 0xA5, dtype="u1")
    try:
        _chunk.decompress_into(data, out)
    except ChunkError:
        assert expected is None, "a well-formed chunk did not decode"
        return
    if expected is not None:
        assert out.tobytes() == expected
    again = np.full(n, 0x5A, dtype="u1")
    _chunk.decompress_into(data, again)
    assert again.tobytes() == out.tobytes()
    ts = max(h["typesize"], 1)
    k = min(n, 64) // ts * ts
    part = np.empty(64, dtype="u1")
    try:
        _chunk.getitem_into(data, 0, k, part)
    except (ChunkError, IndexError, ValueError):
        assert expected is None, "a partial read of a well-formed chunk failed"
        return
    assert part[:k].tobytes() == out[:k].tobytes()


@given(st.binary(min_size=0, max_size=400))
def test_random_bytes_decode_consistently_or_raise(data):
    _check_decodes(data)


@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), min_size=1, max_size=8),
       st.sampled_from(CNAMES))
def test_flipped_bytes_decode_consistently_or_raise(flips, cname):
    values = np.random.default_rng(4).integers(0, 9, 2000).astype("i2")
    good = _chunk.compress(values, 2, 5, 1, cname, 512)
    _check_decodes(bytes(good), values.tobytes())
    bad = bytearray(good)
    for pos, val in flips:
        bad[pos % len(bad)] = val
    _check_decodes(bytes(bad), values.tobytes() if bytes(bad) == bytes(good) else None)


def test_corruption_matrix_in_a_subprocess_does_not_crash():
    """Every single-byte corruption of a small chunk's header and offsets, run where a crash would show."""
    code = textwrap.dedent("""
        import numpy as np
        from blzarr import _chunk
        from blzarr.errors import ChunkError
        good = _chunk.compress(np.arange(4000, dtype="i4") % 7, 4, 5, 1, "lz4", 1024)
        for pos in range(0, 80):
            for val in (0, 1, 0x7f, 0x80, 0xff):
                b = bytearray(good); b[pos] = val; b = bytes(b)
                try:
                    n = _chunk.validate(b)
                    out = np.empty(n, dtype="u1")
                    _chunk.decompress_into(b, out)
                except ChunkError:
                    continue
                assert n == _chunk.header(b)["nbytes"]
                if b == bytes(good):
                    assert out.tobytes() == (np.arange(4000, dtype="i4") % 7).tobytes()
        print("survived")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "survived" in r.stdout
