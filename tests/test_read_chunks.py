"""Long reads of BLZ files (``a[:]``, ``sum()``, ``a[:, j]``) through `_superchunk.ReadChunks`: every
whole chunk read, verified, validated and used on every thread in one call per thread.  Checked against
NumPy, against the chunk-by-chunk path, and with damaged or moved chunks (which fall back to the
chunk-by-chunk path and raise what it raises)."""

import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blzarr
from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.storage.blz.directory import BlzDir
from blzarr.errors import BlzarrError, ChecksumError, ChunkError
from helpers import examples

pytestmark = pytest.mark.skipif(not sc.native_checksum(2), reason="no C-level crc32 (zlib-ng) here")


def make(tmp_path, x, name="a", **kw):
    p = str(tmp_path / name)
    kw.setdefault("chunklen", 1000)
    blzarr.carray(x, rootdir=p, mode="w", **kw).flush()
    return p


@pytest.fixture
def no_chunk_path(monkeypatch):
    """Whole chunks must not go through the chunk-by-chunk reader."""
    def refuse(self, n, *args, **kwargs):
        raise AssertionError(f"chunk {n} read one by one")
    monkeypatch.setattr(BlzDir, "decode_chunk_into", refuse)


# ------------------------------------------------------------------ the acceptance test of a chunk
@settings(max_examples=examples(300), deadline=None)
@given(st.integers(0, 10**9), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1,
                                        max_size=4), st.sampled_from([0, 1]))
def test_chunk_valid_agrees_with_the_explained_checks(seed, flips, shuffle):
    x = np.cumsum(np.random.default_rng(seed).standard_normal(3000))
    c = bytearray(_chunk.compress(x, 8, 5, shuffle, "lz4", 4096, 1))
    for pos, val in flips:
        c[pos % len(c)] = val
    try:
        explained = _chunk.explain(bytes(c))
    except ChunkError:
        explained = None
    try:
        got = _chunk.validate(bytes(c))
    except ChunkError:
        got = None
    assert got == explained


def test_chunk_valid_rejects_a_wrong_size_and_a_cut():
    c = _chunk.compress(np.arange(5000.0), 8, 5, 1, "lz4", 4096, 1)
    assert _chunk.validate(c, 40000) == 40000
    with pytest.raises(ChunkError, match="40008 expected"):
        _chunk.validate(c, 40008)
    with pytest.raises(ChunkError):
        _chunk.validate(c[:-1])


# ------------------------------------------------------------------ results against NumPy
@pytest.mark.parametrize("dtype", ["f8", "f4", "i8", "i4", "u2", "i1", "u8"])
def test_read_all_and_sum_against_numpy(tmp_path, no_chunk_path, dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(25_437) * 100).astype(dtype)
    p = make(tmp_path, x, superchunklen=4)
    a = blzarr.open(p, mode="r")
    np.testing.assert_array_equal(a[:], x)
    np.testing.assert_array_equal(a[1000:24_000], x[1000:24_000])
    mem = blzarr.carray(x, chunklen=1000)
    s = a.sum()
    assert s == mem.sum()           # the same per-chunk pairwise sums, added in the same order
    if x.dtype.kind == "f":
        assert s == pytest.approx(x.sum(dtype=np.float64), rel=1e-5)
    else:
        assert s == x.sum()
    assert a.sum().dtype == x.sum().dtype


def test_slices_with_partial_chunks_and_offsets(tmp_path):
    x = np.arange(10_500, dtype="f8") * 0.5
    p = make(tmp_path, x)
    a = blzarr.open(p, mode="r")
    for lo, hi in [(0, 10_500), (999, 7001), (1000, 3000), (1500, 10_500), (0, 2000), (3000, 3500)]:
        np.testing.assert_array_equal(a[lo:hi], x[lo:hi])
    out = np.full(4000, -1.0)
    a.read_into(2000, 6000, out)
    np.testing.assert_array_equal(out, x[2000:6000])


def test_many_files_pin_a_bounded_number_of_descriptors(tmp_path, no_chunk_path):
    x = np.arange(40_000, dtype="i8")
    p = make(tmp_path, x, superchunklen=2)         # 20 files, more than FD_CACHE
    a = blzarr.open(p, mode="r")
    np.testing.assert_array_equal(a[:], x)
    assert a.sum() == x.sum()
    assert len(a._chunks.layoutdir._fds) <= 8 and not a._chunks.layoutdir._inuse


def test_io_is_counted(tmp_path):
    x = np.arange(20_000, dtype="f8")
    p = make(tmp_path, x)
    a = blzarr.open(p, mode="r")
    sc.io_stats(reset=True)
    a[:]
    nbytes, calls = sc.io_stats()
    cbytes = sum(os.path.getsize(os.path.join(p, "data", f)) for f in os.listdir(os.path.join(p, "data")))
    assert 0 < nbytes <= cbytes + 20 * 8 + 16 * 20 and calls >= 20


def test_without_native_checksums_the_chunk_path_gives_the_same(tmp_path, monkeypatch):
    x = np.cumsum(np.random.default_rng(5).standard_normal(30_000))
    p = make(tmp_path, x)
    a = blzarr.open(p, mode="r")
    fast_sum, fast = a.sum(), a[:]
    monkeypatch.setattr(sc, "native_checksum", lambda cid: False)
    b = blzarr.open(p, mode="r")
    assert b.sum() == fast_sum
    np.testing.assert_array_equal(b[:], fast)
    np.testing.assert_array_equal(fast, x)


@pytest.mark.parametrize("checksum", [None, "adler32", "sha256"])
def test_other_checksums(tmp_path, checksum):
    x = np.arange(12_000, dtype="i4")
    p = make(tmp_path, x, checksum=checksum)
    a = blzarr.open(p, mode="r")
    np.testing.assert_array_equal(a[:], x)
    assert a.sum() == x.sum()


# ------------------------------------------------------------------ damage and writers
def chunk_pos(p, n):
    """(path, offset of chunk n) in a BLZ directory of one file."""
    d = BlzDir.open(p, mode="r")
    f, fd, off = d._offset(n)
    path = d._path(f.fno)
    d.close()
    return path, off


def flip(p, n, at, mask):
    """XOR one byte, `at` bytes into chunk `n`'s stored bytes, with `mask`."""
    path, off = chunk_pos(p, n)
    with open(path, "r+b") as f:
        f.seek(off + at)
        b = f.read(1)
        f.seek(off + at)
        f.write(bytes([b[0] ^ mask]))


@pytest.mark.parametrize("what", ["read", "sum"])
def test_a_damaged_chunk_raises_naming_it(tmp_path, what):
    x = np.cumsum(np.random.default_rng(2).standard_normal(8000))
    p = make(tmp_path, x)
    flip(p, 5, 200, 0x55)
    a = blzarr.open(p, mode="r")
    with pytest.raises(ChecksumError, match="chunk 5"):
        a[:] if what == "read" else a.sum()
    # the other chunks still read
    np.testing.assert_array_equal(a[:5000], x[:5000])


def test_a_bad_header_past_the_file_raises(tmp_path):
    x = np.arange(8000, dtype="f8")
    p = make(tmp_path, x, checksum=None)
    path, off = chunk_pos(p, 2)
    with open(path, "r+b") as f:
        f.seek(off + 12)
        f.write((10**8).to_bytes(4, "little"))
    a = blzarr.open(p, mode="r")
    with pytest.raises(BlzarrError, match="chunk 2"):
        a[:]


def read_args(d, nchunks):
    """ReadChunks' lists for chunks 0..nchunks-1 of the open BlzDir `d`: each chunk's offset, file
    descriptor, file length and table entry position."""
    offs, fds, lims, ents = [], [], [], []
    for n in range(nchunks):
        f, fd, off = d._offset(n)
        offs.append(off)
        fds.append(fd)
        lims.append(f.fstate[1])
        ents.append(f.table_pos + 8 * n)
    return offs, fds, lims, ents


def test_read_chunks_reports_failures_per_chunk(tmp_path):
    x = np.arange(4000, dtype="f8")
    p = make(tmp_path, x)
    d = BlzDir.open(p, mode="r")
    offs, fds, lims, ents = read_args(d, 4)
    offs[1] += 1                        # not where chunk 1 starts
    ents[2] = ents[3]                   # chunk 2's entry names another chunk: "moved"
    out = np.zeros(4000)
    w = sc.ReadChunks(fds, offs, lims, ents, 2, 8000, 2).decode_into(out, [0, 8000, 16000, 24000])
    w.run()
    w.run()
    assert w.status.tolist()[0] == 0 and w.status[1] != 0 and w.status[2] != 0 and w.status[3] == 0
    np.testing.assert_array_equal(out[:1000], x[:1000])
    np.testing.assert_array_equal(out[3000:], x[3000:])
    assert w.cts[0] > 16 and w.cts[3] > 16
    with pytest.raises(ValueError, match="do not fit"):
        sc.ReadChunks(fds, offs, lims, ents, 2, 8000).decode_into(out, [0, 8000, 16000, 24001])
    with pytest.raises(ValueError, match="cannot sum"):
        sc.ReadChunks(fds, offs, lims, ents, 2, 8000).sum_as("c16")
    d.close()


def test_decode_one_reads_a_chunk_with_the_same_checks(tmp_path):
    x = np.cumsum(np.random.default_rng(4).standard_normal(4000))
    p = make(tmp_path, x)
    flip(p, 3, 100, 0x55)               # chunk 3's bytes no longer match its crc32
    d = BlzDir.open(p, mode="r")
    offs, fds, lims, ents = read_args(d, 4)
    ents[2] = ents[1]                   # chunk 2's entry names another chunk: "moved"
    w = sc.ReadChunks(fds, offs, lims, ents, 2, 8000)
    buf = bytearray(w.read_bytes)
    out = np.zeros(1000)
    for k in (1, 0):
        assert w.decode_one(k, out, buf) == 0 and w.status[k] == 0 and w.cts[k] > 16
        np.testing.assert_array_equal(out, x[k * 1000:(k + 1) * 1000])
    assert w.decode_one(2, out, buf) != 0 and w.status[2] != 0          # moved
    assert w.decode_one(3, out, buf) != 0 and w.status[3] != 0          # checksum
    with pytest.raises(IndexError):
        w.decode_one(4, out, buf)
    with pytest.raises(ValueError, match="8000 bytes"):
        w.decode_one(0, np.zeros(999), buf)
    with pytest.raises(ValueError, match="read buffer"):
        w.decode_one(0, out, bytearray(10))
    d.close()


def test_beside_a_writer_of_this_process_the_chunk_path_is_used(tmp_path):
    x = np.arange(20_000, dtype="f8")
    p = make(tmp_path, x)
    a = blzarr.open(p, mode="a")
    a.append(np.arange(5000.0))
    a[1500] = -1.0
    want = np.concatenate([x, np.arange(5000.0)])
    want[1500] = -1.0
    np.testing.assert_array_equal(a[:], want)
    assert a.sum() == want.sum()
    a.flush()
    b = blzarr.open(p, mode="r")
    np.testing.assert_array_equal(b[:], want)
    assert b.sum() == blzarr.carray(want, chunklen=1000).sum()


# ------------------------------------------------------------------ columns of 2-D carrays
@pytest.mark.parametrize("key", [np.s_[:, 0], np.s_[:, 3], np.s_[:, 1:3], np.s_[:, -1], np.s_[5:9000, 2],
                                 np.s_[1000:5000, 0:4], np.s_[:, 4:2]])
def test_columns_against_numpy(tmp_path, key):
    x = np.cumsum(np.random.default_rng(9).standard_normal((10_007, 5)), axis=0)
    p = make(tmp_path, x, chunklen=700, superchunklen=3)
    a = blzarr.open(p, mode="r")
    got = a[key]
    np.testing.assert_array_equal(got, x[key])
    assert got.shape == x[key].shape and got.flags.c_contiguous


def test_columns_of_3d_rows(tmp_path, no_chunk_path):
    x = np.arange(6000 * 12, dtype="i4").reshape(6000, 3, 4)
    p = make(tmp_path, x, chunklen=500)
    a = blzarr.open(p, mode="r")
    for key in [np.s_[:, 1], np.s_[:, 0, 2], np.s_[:, 2, 1:3]]:
        np.testing.assert_array_equal(a[key], x[key])


def test_a_damaged_chunk_in_a_column_read_raises(tmp_path):
    x = np.cumsum(np.random.default_rng(4).standard_normal((8000, 4)), axis=0)
    p = make(tmp_path, x, chunklen=1000)
    flip(p, 3, 100, 0xFF)
    a = blzarr.open(p, mode="r")
    with pytest.raises(ChecksumError, match="chunk 3"):
        a[:, 1]


def test_a_second_long_read_skips_the_checksums_it_verified(tmp_path, no_chunk_path):
    x = np.cumsum(np.random.default_rng(8).standard_normal(30_000))
    p = make(tmp_path, x)
    a = blzarr.open(p, mode="r")
    sc.io_stats(reset=True)
    first = a[:]
    b1, c1 = sc.io_stats(reset=True)
    second = a[:]
    b2, c2 = sc.io_stats(reset=True)
    np.testing.assert_array_equal(first, x)
    np.testing.assert_array_equal(second, x)
    assert a.sum() == blzarr.carray(x, chunklen=1000).sum()
    # 30 full chunks: the 4 bytes of each crc32 not read again, nor the header apart (its size is
    # known: one pread less each); and the offsets table, read whole once by the first
    superchunklen = a._chunks.layoutdir.superchunklen
    assert b1 - b2 == 30 * 4 + 8 * superchunklen and c1 - c2 == 30 + 1


def test_a_verified_reader_sees_a_rewrite_flushed_since(tmp_path):
    x = np.cumsum(np.random.default_rng(8).standard_normal(30_000))
    p = make(tmp_path, x)
    a = blzarr.open(p, mode="r")
    np.testing.assert_array_equal(a[:], x)          # every chunk verified
    w = blzarr.open(p, mode="a")
    w[5] = -1.0
    w[12_345] = -2.0
    w.flush()
    x[5], x[12_345] = -1.0, -2.0
    a._blockcache = None
    np.testing.assert_array_equal(a[:], x)          # the moved chunks read where they are now
    assert a.sum() == blzarr.carray(x, chunklen=1000).sum()
