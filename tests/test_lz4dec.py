"""blzarr's own decoder of LZ4 chunks (blzarr/_include/blz_lz4dec.h, used by `_chunk.decompress_into`):
the same bytes as C-Blosc's decoder (`_chunk.decompress_blosc`) and as the data compressed, for every
codec, shuffle, level and block size, and a clear ChunkError for malformed LZ4 streams."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from blzarr import _chunk
from blzarr.errors import ChunkError

DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8", "S5", "?"]


def _both(c, like):
    """(decompress_into's bytes, C-Blosc's bytes) of the chunk `c`, decoded into arrays like `like`."""
    new = np.full_like(like, 0)
    ref = np.full_like(like, 0)
    assert _chunk.decompress_into(c, new) == like.nbytes
    assert _chunk.decompress_blosc(c, ref) == like.nbytes
    return new.tobytes(), ref.tobytes()


def _values(dtype, n, k, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "S":
        return np.array([b"id%03d" % i for i in rng.integers(0, k, n)], dtype=dt)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if dt.kind == "f":
        return np.round(rng.uniform(0, k, n), 3).astype(dt)
    return rng.integers(0, min(k, np.iinfo(dt).max), n).astype(dt)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(1, 70_000), st.sampled_from([1, 2, 5, 100, 10_000, 1 << 40]),
       st.integers(0, 9), st.sampled_from([0, 1, 2]), st.sampled_from(["lz4", "lz4hc", "blosclz"]),
       st.sampled_from([0, 1000, 4096, 16384, 65536]), st.integers(0, 99))
def test_same_bytes_as_c_blosc(dtype, n, k, clevel, shuffle, cname, blocksize, seed):
    a = _values(dtype, n, k, seed)
    c = _chunk.compress(a, a.dtype.itemsize, clevel, shuffle, cname, blocksize)
    new, ref = _both(c, a)
    assert new == ref == a.tobytes()


@pytest.mark.parametrize("period", range(1, 20))
@pytest.mark.parametrize("clevel", [1, 5, 9])
def test_long_matches_of_every_short_period(period, clevel):
    """A block of a repeating pattern of every period under 20 and then zeros: long matches at every
    small offset (the decoder's pattern path) and at offsets of 16 or more."""
    rng = np.random.default_rng(period)
    pat = rng.integers(1, 256, period).astype(np.uint8)
    a = np.concatenate([np.tile(pat, 40_000 // period), np.zeros(9_000, np.uint8),
                        rng.integers(0, 3, 777).astype(np.uint8)])
    for shuffle in (0, 1):
        c = _chunk.compress(a, 1, clevel, shuffle, "lz4", 16384)
        new, ref = _both(c, a)
        assert new == ref == a.tobytes()
    for dt in (np.int64, np.int32):                              # small values, byte-shuffled
        b = (np.arange(60_000) % period + 1).astype(dt)
        c = _chunk.compress(b, b.dtype.itemsize, clevel, 1, "lz4", 16384)
        new, ref = _both(c, b)
        assert new == ref == b.tobytes()


def test_chunk_boundaries_and_short_last_block():
    """Items that do not fill the last block, and fewer items than one SIMD round of the unshuffle."""
    for n in (1, 2, 15, 16, 17, 31, 32, 33, 2047, 2048, 2049, 65_537):
        for dt in (np.int64, np.int32, np.float32):
            a = (np.arange(n) % 5 + 1).astype(dt)
            for bs in (0, 1000, 16384):
                c = _chunk.compress(a, a.dtype.itemsize, 5, 1, "lz4", bs)
                new, ref = _both(c, a)
                assert new == ref == a.tobytes(), (n, dt, bs)


def _lz4_chunk(stream, nbytes):
    """A Blosc chunk of one LZ4 block of `nbytes` bytes (typesize 1, no shuffle, whole blocks) whose
    stream is `stream`."""
    flags = (1 << 5) | 0x10
    head = struct.pack("<BBBBiii", 2, 1, flags, 1, nbytes, nbytes, 16 + 4 + 4 + len(stream))
    return head + struct.pack("<i", 20) + struct.pack("<i", len(stream)) + stream


def _literals_then_match(lits, offset, mlen, tail):
    """An LZ4 stream: `lits` literals, a match of `mlen` bytes at `offset`, then `tail` literals."""
    tok = (min(len(lits), 15) << 4) | min(mlen - 4, 15)
    out = bytes([tok])
    if len(lits) >= 15:
        r = len(lits) - 15
        out += b"\xff" * (r // 255) + bytes([r % 255])
    out += lits + struct.pack("<H", offset)
    if mlen - 4 >= 15:
        r = mlen - 4 - 15
        out += b"\xff" * (r // 255) + bytes([r % 255])
    return out + bytes([min(len(tail), 15) << 4]) + (bytes([len(tail) - 15]) if len(tail) >= 15 else b"") + tail


@pytest.mark.parametrize("offset", [1, 2, 3, 5, 7, 9, 15, 16, 17])
@pytest.mark.parametrize("mlen", [16, 18, 19, 31, 32, 100, 1000])
def test_hand_made_streams_decode_as_c_blosc(offset, mlen):
    lits = bytes(range(1, 21))
    stream = _literals_then_match(lits, offset, mlen, b"tail!")
    n = len(lits) + mlen + 5
    c = _lz4_chunk(stream, n)
    like = np.zeros(n, np.uint8)
    new, ref = _both(c, like)
    want = bytearray(lits)
    for _ in range(mlen):
        want.append(want[-offset])
    assert new == ref == bytes(want) + b"tail!"


def test_offset_zero_is_refused():
    """A match at offset 0 (no LZ4 compressor writes one) is an error here; the LZ4 inside C-Blosc
    1.x copies the match from itself instead, giving bytes nobody wrote."""
    c = _lz4_chunk(_literals_then_match(b"abcdefgh" * 3, 0, 20, b"tail!"), 49)
    with pytest.raises(ChunkError, match="decompression failed"):
        _chunk.decompress_into(c, np.zeros(49, np.uint8), check=False)



@pytest.mark.parametrize("version", [0, 2, 255])
def test_unknown_lz4_format_version_is_left_to_c_blosc(version):
    """Byte 1 of the header, the codec's format version, is 1 for every LZ4 chunk; C-Blosc refuses
    another, and so does decompress_into instead of decoding it as today's LZ4."""
    a = (np.arange(5000) % 5 + 1).astype(np.int64)
    c = bytearray(_chunk.compress(a, 8, 5, 1, "lz4", 16384))
    assert c[1] == 1
    c[1] = version
    assert _chunk.decompress_blosc(bytes(c), np.zeros(a.nbytes, np.uint8)) < 0
    with pytest.raises(ChunkError, match="decompression failed"):
        _chunk.decompress_into(bytes(c), np.zeros(a.nbytes, np.uint8))

@pytest.mark.parametrize("stream, n, why", [
    (_literals_then_match(b"abcdefgh" * 3, 25, 20, b"tail!"), 49, "offset before the output's start"),
    (_literals_then_match(b"abcdefgh" * 3, 8, 20, b"tail!"), 40, "a match past the output's end"),
    (_literals_then_match(b"abcdefgh" * 3, 8, 20, b"tail!"), 60, "a stream short of the output"),
    (_literals_then_match(b"abcdefgh" * 3, 8, 20, b"tail!")[:-3], 49, "the stream cut short"),
    (b"\xf0\xff\xff", 600, "a literal run past the stream's end"),
    (_literals_then_match(b"abcdefgh" * 3, 8, 20, b""), 44, "a match in the last five bytes"),
])
def test_malformed_streams_raise_chunk_error(stream, n, why):
    c = _lz4_chunk(stream, n)
    with pytest.raises(ChunkError):
        _chunk.decompress_into(c, np.zeros(n, np.uint8), check=False)
    # C-Blosc refuses it as well (or the structure check before it does): the two decoders agree on
    # what is malformed here
    try:
        code = _chunk.decompress_blosc(c, np.zeros(n, np.uint8))
    except ChunkError:
        code = 0
    assert code <= 0, why


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 300_000), st.sampled_from([1, 2, 5, 100, 100_000]), st.integers(0, 9),
       st.sampled_from(["blz", "bcolz"]))
def test_group_by_of_small_integers_on_disk_matches_pandas(tmp_path_factory, n, k, clevel, fmt):
    """The db-benchmark shape (byte-shuffled int64 keys and values 1-k), written at any level and read
    back from disk through the decoder: sums and means per group as pandas gives them."""
    import blzarr
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(n)
    id3 = rng.integers(1, k + 1, n)
    v1 = rng.integers(1, 6, n)
    v3 = np.round(rng.uniform(0, 100, n), 6)
    root = str(tmp_path_factory.mktemp("gb") / "t")
    blzarr.ctable([id3, v1, v3], names=["id3", "v1", "v3"], rootdir=root, mode="w", format=fmt,
                  cparams=blzarr.cparams(clevel=clevel, shuffle=1, cname="lz4")).flush()
    t = blzarr.open(root, mode="r")
    got = t.groupby(["id3"], [["v1", "sum"], ["v3", "mean", "m3"]], out_flavor="pandas")
    ref = pd.DataFrame({"id3": id3, "v1": v1, "v3": v3}).groupby("id3", sort=False).agg(
        v1=("v1", "sum"), m3=("v3", "mean")).reset_index()
    np.testing.assert_array_equal(got["id3"].to_numpy(), ref["id3"].to_numpy())
    np.testing.assert_array_equal(got["v1"].to_numpy(), ref["v1"].to_numpy())
    np.testing.assert_allclose(got["m3"].to_numpy(), ref["m3"].to_numpy(), rtol=1e-12)


def _damaged_cases():
    """Real chunks as blzarr writes them (16 KiB blocks, byte shuffle) of the column shapes the
    decoder takes: (name, decoded size, chunk)."""
    rng = np.random.default_rng(7)
    n = 12_000
    arrays = {"int64 1-5": rng.integers(1, 6, n).astype(np.int64),
              "int64 ids": rng.integers(1, 100_001, n).astype(np.int64),
              "float64": np.round(rng.random(n) * 100, 6),
              "int32": rng.integers(0, 1000, n).astype(np.int32),
              "S5": np.array([b"id%03d" % i for i in rng.integers(0, 100, n)])}
    out = []
    for name, a in arrays.items():
        for clevel in (1, 5, 9):
            for cname in ("lz4", "lz4hc"):
                c = _chunk.compress(a, a.dtype.itemsize, clevel, 1, cname, 16384)
                out.append((f"{name} {cname} {clevel}", a.nbytes, bytes(c)))
    return out


DAMAGED = _damaged_cases()


def _damage(c, how, pos, val, block):
    """`c` damaged in one of the ways a disk or a transfer damages it, or the fields the decoder
    trusts least: a byte set, the chunk cut short or grown (with its size field made to agree), a
    block's offset or compressed size, or two bytes inside a block's LZ4 stream."""
    b = bytearray(c)
    nbytes, bs = struct.unpack_from("<ii", c, 4)
    nblocks = (nbytes + bs - 1) // bs
    j = block % nblocks
    start = struct.unpack_from("<i", c, 16 + 4 * j)[0]
    csize = struct.unpack_from("<i", c, start)[0]
    if how == "byte":
        b[pos % len(b)] = val & 255
    elif how == "cut":
        b = b[:max(16, pos % len(b))]
        struct.pack_into("<i", b, 12, len(b))
    elif how == "insert":
        at = 16 + pos % (len(b) - 16)
        b[at:at] = bytes([val & 255]) * (1 + val % 7)
        struct.pack_into("<i", b, 12, len(b))
    elif how == "bstart":
        struct.pack_into("<i", b, 16 + 4 * j, start + (val % 81) - 40)
    elif how == "csize":
        struct.pack_into("<i", b, start, csize + (val % 61) - 30)
    else:                                          # a token, length or offset in the stream
        at = start + 4 + pos % max(csize - 1, 1)
        struct.pack_into("<H", b, at, val & 0xFFFF)
    return bytes(b)


def _check_damaged(case, how, pos, val, block):
    name, nbytes, c = DAMAGED[case % len(DAMAGED)]
    bad = _damage(c, how, pos, val, block)
    # the output is a window of a larger buffer whose 64 bytes either side must stay untouched
    buf = np.full(nbytes + 128, 0xA5, np.uint8)
    out = buf[64:64 + nbytes]
    try:
        got = _chunk.decompress_into(bad, out)
    except ChunkError:
        got = None
    except ValueError as e:                        # a header that asks for more room than the chunk had
        assert "output array holds" in str(e)
        got = None
    assert (buf[:64] == 0xA5).all() and (buf[64 + nbytes:] == 0xA5).all(), (name, how)
    if got is not None:
        ref = np.zeros(got, np.uint8)
        assert _chunk.decompress_blosc(bad, ref) == got, (name, how)
        assert out[:got].tobytes() == ref.tobytes(), (name, how)


DAMAGE = st.sampled_from(["byte", "cut", "insert", "bstart", "csize", "stream"])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10_000), DAMAGE, st.integers(0, 1 << 30), st.integers(0, 1 << 20), st.integers(0, 99))
def test_damaged_chunks_raise_or_decode_as_c_blosc(case, how, pos, val, block):
    """A damaged chunk is a ChunkError, or (where the damage leaves a valid chunk) decodes to C-Blosc's
    bytes; nothing is written outside the output."""
    _check_damaged(case, how, pos, val, block)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(st.integers(0, 10_000), DAMAGE, st.integers(0, 1 << 30), st.integers(0, 1 << 20), st.integers(0, 99))
def test_damaged_chunks_raise_or_decode_as_c_blosc_many(case, how, pos, val, block):
    _check_damaged(case, how, pos, val, block)


def _long_matches(chunk):
    """(offset, length) of every match of 64 bytes or more in the LZ4 streams of `chunk` (typesize
    any, whole blocks, no split streams): which decoder paths a chunk reaches."""
    nbytes, bs = struct.unpack_from("<ii", chunk, 4)
    out = []
    for j in range((nbytes + bs - 1) // bs):
        start = struct.unpack_from("<i", chunk, 16 + 4 * j)[0]
        size = struct.unpack_from("<i", chunk, start)[0]
        s, ip = chunk[start + 4:start + 4 + size], 0
        if size == min(bs, nbytes - j * bs):
            continue                                    # stored as it is
        while True:
            tok = s[ip]
            ip += 1
            lit = tok >> 4
            if lit == 15:
                while True:
                    lit += s[ip]
                    ip += 1
                    if s[ip - 1] != 255:
                        break
            ip += lit
            if ip == len(s):
                break
            off = s[ip] | s[ip + 1] << 8
            ip += 2
            mlen = tok & 15
            if mlen == 15:
                while True:
                    mlen += s[ip]
                    ip += 1
                    if s[ip - 1] != 255:
                        break
            if mlen + 4 >= 64:
                out.append((off, mlen + 4))
    return out


def test_long_matches_of_periods_16_to_64():
    """A match of a period of 16 to 63 bytes and 64 bytes or more is stored from a pattern of the
    period (blz_dec_match_wide): every such period, lengths about the thresholds (64 under 32 bytes,
    128 from 32) and lengths whose last period is cut anywhere."""
    lits = bytes(range(1, 101))
    for offset in range(16, 65):
        for mlen in (63, 64, 65, 96, 127, 128, 129, 130, 200, 1000, 8170, 8170 + offset // 2):
            stream = _literals_then_match(lits, offset, mlen, b"tail!")
            n = len(lits) + mlen + 5
            new, ref = _both(_lz4_chunk(stream, n), np.zeros(n, np.uint8))
            want = bytearray(lits)
            for _ in range(mlen):
                want.append(want[-offset])
            assert new == ref == bytes(want) + b"tail!", (offset, mlen)


@pytest.mark.parametrize("clevel", [1, 5])
@pytest.mark.parametrize("blocksize", [0, 16384])
def test_int32_small_values_reach_the_pattern_path(clevel, blocksize):
    """int32 values under 65,536, byte-shuffled: each block's two zero planes are one long match 17 to
    45 bytes back (a carray's 16 KiB blocks at level 5: 17), the case the pattern path is for.  The
    chunk is checked to hold such a match first, so the test cannot pass without reaching that
    path."""
    rng = np.random.default_rng(clevel)
    a = rng.integers(1, 10_000, 131_072).astype(np.int32)
    c = _chunk.compress(a, 4, clevel, 1, "lz4", blocksize)
    wide = [(o, m) for o, m in _long_matches(c) if 16 <= o < 64 and m >= (64 if o < 32 else 128)]
    assert wide, _long_matches(c)[:5]
    new, ref = _both(c, a)
    assert new == ref == a.tobytes()
