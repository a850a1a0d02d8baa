"""In-memory carrays read, sum and take through one `_chunk` call per thread (DecodeChunks, SumChunks):
the results are NumPy's, bit for bit where the block engine's were (the same per-chunk sums added in
the same order), with any number of threads and when called from a pool thread."""

import gc
import importlib
import math
import os
import subprocess
import sys
import time
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blzarr
from blzarr import _chunk, _decode, _rows, _sums, _where
from blzarr.query import fused
from blzarr.runtime import parallel
from blzarr.storage.chunkstore import MemoryChunks
from blzarr.errors import ChunkError
from helpers import examples

INT_DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]


def _values(rng, n, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        # magnitudes over 12 decades: the order of the additions shows in the last bits
        return (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)


class _threads:
    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = blzarr.set_nthreads(self.n)

    def __exit__(self, *exc):
        blzarr.set_nthreads(self.old)


_RESIDENT = MemoryChunks.resident
_off = {"users": 0}
_off_lock = threading.Lock()


def _without_resident(fn):
    """fn() with the in-memory fast paths off (MemoryChunks.resident says None): the old block engine.
    Threads may call it at once (test_reads_and_sums_from_inside_pool_threads): the last one out puts
    the real method back (each restoring what it saw could leave the patch in place for good)."""
    with _off_lock:
        _off["users"] += 1
        MemoryChunks.resident = lambda self, ids: None
    try:
        return fn()
    finally:
        with _off_lock:
            _off["users"] -= 1
            if not _off["users"]:
                MemoryChunks.resident = _RESIDENT


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000), dtype=st.sampled_from(["f8", "f4"]),
       scale=st.sampled_from([1.0, 1e-300, 1e30]))
def test_pairwise_sum_is_numpys_bit_for_bit(seed, n, dtype, scale):
    rng = np.random.default_rng(seed)
    x = (_values(rng, n, "f8") * (scale if dtype == "f8" else 1.0)).astype(dtype)
    got = _sums.pairwise_sum(x)
    want = np.sum(x)
    assert np.array(got, dtype=dtype).tobytes() == np.array(want, dtype=dtype).tobytes()


def test_pairwise_sum_of_negative_zero_and_lengths_around_the_blocks():
    assert math.copysign(1.0, _sums.pairwise_sum(np.array([-0.0]))) == 1.0     # 0.0 + -0.0, as NumPy
    rng = np.random.default_rng(3)
    for n in [7, 8, 9, 127, 128, 129, 255, 256, 257, 1023, 65536, 65537]:
        x = _values(rng, n, "f8")
        assert _sums.pairwise_sum(x) == np.sum(x)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40000), chunklen=st.integers(1, 5000),
       dtype=st.sampled_from(["f8", "f4"] + INT_DTYPES), nthreads=st.sampled_from([1, 2, 3]))
def test_sum_equals_the_block_engine_bit_for_bit_and_numpy(seed, n, chunklen, dtype, nthreads):
    rng = np.random.default_rng(seed)
    x = _values(rng, n, dtype)
    a = blzarr.carray(x, chunklen=chunklen)
    with _threads(nthreads):
        got = a.sum()
    old = _without_resident(a.sum)
    want = np.sum(x)
    assert type(got) is type(want) is type(old)
    assert np.array(got).tobytes() == np.array(old).tobytes()
    if x.dtype.kind in "iu":
        assert got == want          # integer sums wrap modulo 2**64 in any order: exact
    else:
        # each chunk is NumPy's pairwise sum (error <= ~log2(chunklen) eps sum|x|), the chunk sums are
        # added one after the other (<= nchunks eps sum|x| more); NumPy's own sum is off by up to
        # ~log2(n) eps sum|x|: the two differ by at most the sum of those bounds (times 2 for slack)
        eps = np.finfo(x.dtype).eps
        nchunks = -(-n // chunklen)
        bound = 2 * (math.log2(max(n, 2)) + math.log2(max(chunklen, 2)) + nchunks) * eps * \
            float(np.sum(np.abs(x.astype("f8"))))
        assert abs(float(got) - float(want)) <= bound


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30000), chunklen=st.integers(1, 4000),
       dtype=st.sampled_from(["f8", "f4", "i4"]))
def test_mean_equals_the_block_engine_bit_for_bit(seed, n, chunklen, dtype):
    x = _values(np.random.default_rng(seed), n, dtype)
    a = blzarr.carray(x, chunklen=chunklen)
    got, old = a.mean(), _without_resident(a.mean)
    assert type(got) is type(old) is type(np.mean(x))
    assert np.array(got).tobytes() == np.array(old).tobytes()
    if x.dtype.kind == "f":
        # the sum's bound (see above) over the count, plus one rounding of the division
        eps = np.finfo(x.dtype).eps
        bound = 2 * (math.log2(max(n, 2)) + math.log2(max(chunklen, 2)) + -(-n // chunklen) + 1) * eps * \
            float(np.sum(np.abs(x.astype("f8")))) / n
        assert abs(float(got) - float(np.mean(x))) <= bound


def test_sum_of_non_finite_values_warns_as_numpy():
    x = np.full(100_000, 3e38, dtype="f4")
    a = blzarr.carray(x, chunklen=1000)
    with pytest.warns(RuntimeWarning):
        got = a.sum()
    with pytest.warns(RuntimeWarning):      # the other path warns too (NumPy's reduce): not leaked
        ref = _without_resident(a.sum)
    assert got == np.float32(np.inf) == ref
    y = np.arange(50_000, dtype="f8")
    y[12_345] = np.nan
    assert np.isnan(blzarr.carray(y, chunklen=777).sum())


def test_sum_chunks_rejects_what_it_cannot_sum():
    data = [blzarr.chunk(np.arange(10, dtype="f8"), "f8").getdata()]
    for dt in ["c16", "f2", "bool", ">f8", "S3"]:
        with pytest.raises(ValueError):
            _sums.SumChunks(data, dt)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 30000), chunklen=st.integers(1, 4000),
       atom=st.sampled_from(["f8", "i2", "u1", "S3", ("f4", (3,)), "U2", [("a", "i4"), ("b", "i1")]]),
       nthreads=st.sampled_from([1, 2, 4]), data=st.data())
def test_slices_of_in_memory_chunks_equal_numpy(seed, n, chunklen, atom, nthreads, data):
    rng = np.random.default_rng(seed)
    dt = np.dtype(atom)
    raw = rng.integers(0, 255, n * dt.itemsize, dtype=np.uint8)
    x = raw.view(dt.base).reshape((n,) + dt.shape) if dt.shape else raw.view(dt)
    if dt.kind == "U":
        x = np.array([chr(65 + v % 26) * 2 for v in raw[:n]], dtype=dt)
    a = blzarr.carray(x, chunklen=chunklen)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    with _threads(nthreads):
        for got, want in ((a[start:stop], x[start:stop]), (a[:], x)):
            # bytes, not values: random bytes make NaNs
            assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def test_decode_chunks_parts_not_in_typesize_units_and_errors():
    values = np.arange(20_000, dtype="f8")
    c = blzarr.chunk(values, "f8", blzarr.cparams(clevel=5))
    raw = values.view(np.uint8)
    out = np.zeros(100, np.uint8)
    # a part whose ends are not whole typesize (8-byte) units: cut from a whole decode
    w = _decode.DecodeChunks([c.getdata(), c.getdata()], out, np.array([0, 50], np.intp),
                            np.array([3, 80_001], np.intp), np.array([45, 50], np.intp))
    parallel.run_threads(w.run, w.nparts)
    w.check()
    assert out[:45].tobytes() == raw[3:48].tobytes() and out[50:].tobytes() == raw[80_001:80_051].tobytes()
    with pytest.raises(ValueError, match="do not fit"):
        _decode.DecodeChunks([c.getdata()], out, np.array([60], np.intp), np.array([0], np.intp),
                            np.array([50], np.intp))
    with pytest.raises(IndexError, match="outside chunk 0"):
        _decode.DecodeChunks([c.getdata()], out, np.array([0], np.intp), np.array([159_990], np.intp),
                            np.array([20], np.intp))
    with pytest.raises(ChunkError, match="chunk 1 of a batch"):
        _decode.DecodeChunks([c.getdata(), c.getdata()[:-3]], out, np.zeros(2, np.intp),
                            np.zeros(2, np.intp), np.zeros(2, np.intp))
    with pytest.raises(ValueError, match="C-contiguous"):
        _decode.DecodeChunks([c.getdata()], np.zeros((20, 20), np.uint8)[:, ::2], np.zeros(1, np.intp),
                            np.zeros(1, np.intp), np.zeros(1, np.intp))


def test_decode_failure_is_a_chunk_error_naming_the_chunk():
    values = np.arange(20_000, dtype="f8")
    good = blzarr.chunk(values, "f8", blzarr.cparams(clevel=5)).getdata()
    bad = bytearray(good)
    # the first block's stream: claim more compressed bytes than the block holds (decoding then fails)
    start = int.from_bytes(bad[16:20], "little")
    bad[start:start + 4] = (2**30).to_bytes(4, "little")
    out = np.zeros(3 * values.nbytes, np.uint8)
    w = _decode.DecodeChunks([good, bytes(bad), good], out, np.arange(3, dtype=np.intp) * values.nbytes,
                            np.zeros(3, np.intp), np.full(3, values.nbytes, np.intp), 2,
                            ["first", "the damaged one", "third"])
    parallel.run_threads(w.run, w.nparts)
    with pytest.raises(ChunkError, match="the damaged one"):
        w.check()


def test_reads_and_sums_from_inside_pool_threads():
    x = np.arange(300_000, dtype="f8") * 0.5
    a = blzarr.carray(x, chunklen=1000)
    results = {}

    def work(k):
        results[k] = (np.array_equal(a[k:k + 100_000], x[k:k + 100_000]), a.sum() == _without_resident(a.sum))
    with _threads(2):
        parallel.run_all(work, range(8))
        threads = [threading.Thread(target=work, args=(100 + k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 11 and all(r == (True, True) for r in results.values())


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30000), chunklen=st.integers(1, 4000),
       k=st.integers(1, 3000), atom=st.sampled_from(["f8", "i2", "S3", ("f4", (3,))]),
       sort=st.booleans(), nthreads=st.sampled_from([1, 2, 3]))
def test_fancy_index_of_in_memory_chunks_equals_numpy(seed, n, chunklen, k, atom, sort, nthreads):
    rng = np.random.default_rng(seed)
    dt = np.dtype(atom)
    x = rng.integers(0, 120, (n,) + dt.shape).astype(dt.base)
    a = blzarr.carray(x, chunklen=chunklen)
    idx = rng.integers(-n, n, k)           # duplicates and negative positions included
    if sort:
        idx = np.sort(idx % n)
    with _threads(nthreads):
        got = a[idx]
    assert got.dtype == x.dtype and np.array_equal(got, x[idx])
    assert np.array_equal(_without_resident(lambda: a[idx]), got)


def test_take_chunks_with_a_typesize_that_does_not_divide_the_items():
    # chunks written elsewhere may shuffle with any typesize: their items come from a whole decode
    values = np.arange(30_000, dtype="f8")
    data = _chunk.compress(values, 3, 5, 1, "lz4", 4096)
    assert _chunk.header(data)["typesize"] == 3
    pos = np.array([1, 2, 2, 29_999, 30_000 + 5, 30_000 + 7], np.intp)
    out = np.zeros(6, "f8")
    w = _decode.TakeChunks([data, data], pos, np.array([0, 4], np.intp), np.array([4, 6], np.intp),
                          np.array([0, 30_000], np.intp), 8, out, None, 2)
    parallel.run_threads(w.run, w.nparts)
    w.check()
    assert out.tolist() == [1, 2, 2, 29_999, 5, 7]
    with pytest.raises(IndexError, match="outside chunk 1"):
        _decode.TakeChunks([data, data], pos, np.array([0, 4], np.intp), np.array([4, 6], np.intp),
                          np.array([0, 0], np.intp), 8, out)
    with pytest.raises(IndexError, match="not ascending"):
        _decode.TakeChunks([data], pos[::-1].copy(), np.array([0], np.intp), np.array([6], np.intp),
                          np.array([0], np.intp), 8, out)
    with pytest.raises(IndexError, match="row 9"):
        _decode.TakeChunks([data], pos[:1].copy(), np.array([0], np.intp), np.array([1], np.intp),
                          np.array([0], np.intp), 8, out, np.array([9], np.intp))


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 30000), chunklen=st.integers(1, 3000),
       mchunklen=st.integers(1, 5000), runs=st.integers(1, 6), skip=st.integers(0, 50),
       dtype=st.sampled_from(["f8", "i4", "u1", "?", "f4"]))
def test_where_with_mask_statistics_equals_numpy(seed, n, chunklen, mchunklen, runs, skip, dtype):
    # masks made of long runs: whole chunks all true or all false, which the statistics skip
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 100, n).astype(dtype)
    cuts = np.sort(rng.integers(0, n + 1, 2 * runs))
    m = np.zeros(n, bool)
    for a0, b0 in zip(cuts[0::2], cuts[1::2]):
        m[a0:b0] = True
    a = blzarr.carray(x, chunklen=chunklen)
    got = list(a.where(blzarr.carray(m, chunklen=mchunklen), skip=skip))
    want = x[m][skip:].tolist()
    assert got == want and [type(v) for v in got] == [type(v) for v in want]


def test_where_decodes_no_block_the_mask_statistics_rule_out(monkeypatch):
    x = np.arange(100_000, dtype="f8")
    m = np.zeros(100_000, bool)
    m[95_500:96_000] = True          # one block of 1,000 values holds selected ones
    m[20_000:22_000] = True          # two blocks all true: their values only
    a = blzarr.carray(x, chunklen=1000)
    mc = blzarr.carray(m, chunklen=1000)
    for nthreads in (1, 2):
        old = blzarr.set_nthreads(nthreads)
        try:
            it = a.where(mc)
            assert list(it) == x[m].tolist()
        finally:
            blzarr.set_nthreads(old)
        # the values of chunks 20, 21 and 95, the mask of chunk 95 only
        assert it.work.decoded == (3, 1)
    # a mask in a store that is not in memory goes through the block engine, with the same rule
    reads = []
    real = fused.Decoder.read

    def counting(self, s, e):
        reads.append(s)
        return real(self, s, e)
    monkeypatch.setattr(fused.Decoder, "read", counting)
    monkeypatch.setattr(type(mc), "resident_chunks", lambda self: None)
    assert list(a.where(mc)) == x[m].tolist()
    assert reads == [95_000]


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 30000), chunklen=st.integers(1, 3000),
       mchunklen=st.integers(1, 5000), runs=st.integers(0, 6), dtype=st.sampled_from(["f8", "i2", "S3"]))
def test_boolean_carray_key_equals_numpy(seed, n, chunklen, mchunklen, runs, dtype):
    # runs of true (whole mask chunks all true or all false, which the statistics skip) plus scattered ones
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 100, n).astype(dtype)
    m = rng.random(n) < 0.01
    cuts = np.sort(rng.integers(0, n + 1, 2 * runs))
    for a0, b0 in zip(cuts[0::2], cuts[1::2]):
        m[a0:b0] = True
    a = blzarr.carray(x, chunklen=chunklen)
    got = a[blzarr.carray(m, chunklen=mchunklen)]
    assert got.dtype == x.dtype and np.array_equal(got, x[m])
    if n:
        with pytest.raises(IndexError, match="boolean index has length"):
            a[blzarr.carray(m[:-1], chunklen=mchunklen)]


# ------------------------------------------------------------------ columns of rows (RowsChunks)
def _rows_ref(x2, cstart, csize):
    """Bytes [cstart, cstart + csize) of every row of the 2-D array `x2`, packed."""
    b = np.ascontiguousarray(x2).reshape(len(x2), -1).view(np.uint8)
    return np.ascontiguousarray(b[:, cstart:cstart + csize])


@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), nrows=st.integers(1, 1500),
       ncols=st.sampled_from([8, 8, 8, 4, 16, 1, 2, 3, 5, 12, 18]), blocksize=st.sampled_from([0, 128, 1024, 4096, 16384]),
       cname=st.sampled_from(["lz4", "lz4", "blosclz", "zstd"]), shuffle=st.sampled_from([1, 1, 0, 2]),
       kind=st.sampled_from(["smooth", "random", "zeros"]), dtype=st.sampled_from(["f8", "f8", "i8", "f4", "u2"]),
       data=st.data())
def test_rows_chunks_equal_numpy(seed, nrows, ncols, blocksize, cname, shuffle, kind, dtype, data):
    # LZ4 + byte shuffle + 8-byte values goes block by block (short last blocks, streams stored raw
    # when random values do not compress); every other chunk is decoded whole first
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if kind == "smooth":
        x = np.cumsum(rng.standard_normal(nrows * ncols)).astype(dt) if dt.kind == "f" else \
            np.cumsum(rng.integers(-9, 9, nrows * ncols)).astype(dt)
    elif kind == "random":
        x = rng.integers(0, 256, nrows * ncols * dt.itemsize, dtype=np.uint8).view(dt)
    else:
        x = np.zeros(nrows * ncols, dt)
    x2 = x.reshape(nrows, ncols)
    isz = dt.itemsize
    rowsize = ncols * isz
    c0 = data.draw(st.integers(0, ncols - 1))
    c1 = c0 + 1 if data.draw(st.booleans()) else data.draw(st.integers(c0 + 1, ncols))   # often one column
    cstart, csize = c0 * isz, (c1 - c0) * isz
    if data.draw(st.sampled_from([False, False, False, True])) and isz > 1:
        cstart, csize = cstart + 1, csize - 1 if csize > 1 else 1   # not whole elements: decoded whole
        csize = min(csize, rowsize - cstart)
    bufs = [_chunk.compress(x2, isz, 5, shuffle, cname, blocksize), _chunk.compress(x2[::-1].copy(), isz, 5, shuffle,
                                                                                    cname, blocksize)]
    h = _chunk.header(bufs[0])
    if (cname == "lz4" and shuffle == 1 and isz == 8 and cstart % 8 == 0 and csize % 8 == 0
            and not h["memcpyed"] and h["blocksize"] % rowsize == 0 and _cheap_gather(rowsize, csize)):
        assert _rows.rows_by_block(bufs[0], rowsize, cstart, csize)
    each = nrows * csize
    out = np.full(2 * each + 3, 0xAB, np.uint8)
    w = _rows.RowsChunks(bufs, out, np.array([0, each + 3], np.intp), rowsize, cstart, csize,
                          data.draw(st.sampled_from([1, 2])))
    parallel.run_threads(w.run, w.nparts)
    w.check()
    assert out[:each].tobytes() == _rows_ref(x2, cstart, csize).tobytes()
    assert out[each:each + 3].tobytes() == b"\xab" * 3
    assert out[each + 3:].tobytes() == _rows_ref(x2[::-1], cstart, csize).tobytes()


def _cheap_gather(rowsize, csize, avx2=_rows.GATHER_AVX2):
    """Whether the block-by-block path takes `csize` bytes of rows of `rowsize` (at most an eighth of
    each row, or one value of rows of 8 with the AVX2 gather in use)."""
    return csize * 8 <= rowsize or (rowsize == 64 and csize == 8 and avx2)


@pytest.fixture(params=["avx2", "scalar"])
def gather(request):
    """The AVX2 gather where the CPU has it, then the scalar loop."""
    old = _rows._use_gather_avx2(request.param == "avx2")
    yield request.param
    _rows._use_gather_avx2(old)


@pytest.mark.parametrize("ncols", [8, 4, 16, 32, 2])
@pytest.mark.parametrize("nrows,blocksize", [(3000, 0), (1000, 4096), (777, 1024), (5, 0), (2049, 16384)])
def test_rows_chunks_block_by_block_every_column_range(ncols, nrows, blocksize, gather):
    # each column and a few ranges, block by block where that is cheap (else decoded whole), on
    # values whose bytes all differ (random walks and random bits: some streams compress, some are
    # stored raw), short last blocks, with the AVX2 gather and with the scalar loop
    rng = np.random.default_rng(nrows * ncols)
    x2 = np.cumsum(rng.standard_normal((nrows, ncols)), axis=0)
    x2[: nrows // 3] = rng.integers(0, 2**63, (nrows // 3, ncols)).view("f8")
    buf = _chunk.compress(x2, 8, 5, 1, "lz4", blocksize)
    ranges = [(j, j + 1) for j in range(ncols)] + [(0, ncols), (1, ncols), (0, max(1, ncols // 2))]
    for c0, c1 in ranges:
        cstart, csize = 8 * c0, 8 * (c1 - c0)
        # (5 rows do not compress: the chunk is stored raw, its rows copied in place)
        expect = _cheap_gather(8 * ncols, csize, gather == "avx2" and _rows.GATHER_AVX2)
        assert _rows.rows_by_block(buf, 8 * ncols, cstart, csize) == (expect and not _chunk.header(buf)["memcpyed"])
        out = np.empty(nrows * csize, np.uint8)
        w = _rows.RowsChunks([buf], out, np.zeros(1, np.intp), 8 * ncols, cstart, csize)
        parallel.run_threads(w.run, w.nparts)
        w.check()
        assert out.tobytes() == _rows_ref(x2, cstart, csize).tobytes(), (c0, c1)


def test_rows_chunks_of_a_raw_chunk_and_argument_errors():
    x2 = np.arange(4000 * 8, dtype="f8").reshape(4000, 8)
    raw = _chunk.compress(x2, 8, 0, 1, "lz4")                  # clevel 0: stored raw (memcpyed)
    assert _chunk.header(raw)["memcpyed"]
    out = np.empty(4000 * 16, np.uint8)
    w = _rows.RowsChunks([raw], out, np.zeros(1, np.intp), 64, 16, 16)
    parallel.run_threads(w.run, w.nparts)
    w.check()
    np.testing.assert_array_equal(out.view("f8").reshape(4000, 2), x2[:, 2:4])
    with pytest.raises(ValueError, match="do not fit"):
        _rows.RowsChunks([raw], out, np.array([8], np.intp), 64, 16, 16)
    with pytest.raises(ValueError, match="rows of 64 bytes"):
        _rows.RowsChunks([raw], out, np.zeros(1, np.intp), 64, 60, 8)
    with pytest.raises(ValueError, match="whole rows"):
        _rows.RowsChunks([raw], out, np.zeros(1, np.intp), 48, 0, 8)
    with pytest.raises(ValueError, match="C-contiguous"):
        _rows.RowsChunks([raw], np.zeros((20, 20), np.uint8)[:, ::2], np.zeros(1, np.intp), 64, 0, 8)


@pytest.mark.parametrize("damage", ["stream size", "lz4 payload", "block start"])
def test_rows_chunks_of_a_damaged_lz4_chunk_is_a_chunk_error_naming_it(damage):
    x2 = np.cumsum(np.random.default_rng(3).standard_normal((3000, 8)), axis=0)
    good = _chunk.compress(x2, 8, 5, 1, "lz4")
    assert _chunk.header(good)["flags"] == 0x31 and _rows.rows_by_block(good, 64, 8, 8)
    bad = bytearray(good)
    start = int.from_bytes(bad[20:24], "little")      # block 1
    if damage == "stream size":
        bad[start:start + 4] = (2**30).to_bytes(4, "little")
    elif damage == "lz4 payload":
        # a literal run claiming far more bytes than the block: LZ4 stops short of the block's size
        bad[start + 4:start + 105] = b"\xff" * 101       # a literal run longer than the block
    else:
        bad[20:24] = (len(bad) + 10).to_bytes(4, "little")
    if damage == "lz4 payload":
        _chunk.validate(bytes(bad))                   # the structure holds: LZ4 itself must refuse it
    out = np.empty(3 * 3000 * 8, np.uint8)
    w = _rows.RowsChunks([good, bytes(bad), good], out, np.arange(3, dtype=np.intp) * 3000 * 8, 64, 8, 8, 2,
                          ["first", "the damaged one", "third"])
    parallel.run_threads(w.run, w.nparts)
    with pytest.raises(ChunkError, match="the damaged one"):
        w.check()


def _corrupt(chunk_obj):
    """The chunk with its compressed streams garbled (header and block starts intact): decoding fails."""
    data = bytearray(chunk_obj._data)
    nblocks = -(-chunk_obj.nbytes // chunk_obj.blocksize)
    data[16 + 4 * nblocks:] = b"\xff" * (len(data) - 16 - 4 * nblocks)
    chunk_obj._data = bytes(data)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_where_stops_producing_when_the_caller_stops(nthreads):
    # a caller that stops early (break, limit, close, an error in its loop, dropping the iterator)
    # leaves no producer thread behind, and the producer never runs more than a window ahead
    rng = np.random.default_rng(5)
    x = rng.standard_normal(200_000)
    m = x > 0.5
    a = blzarr.carray(x, chunklen=1000)
    mc = blzarr.carray(m, chunklen=3000)
    want = x[m].tolist()
    old = blzarr.set_nthreads(nthreads)
    try:
        for v in a.where(mc):
            assert v == want[0]
            break
        assert _where.where_threads() == 0
        it = a.where(mc)
        first = [next(it) for _ in range(10)]
        assert first == want[:10]
        time.sleep(0.05)
        # the parts handed out, plus at most a window of them ready ahead
        assert it.work.win == importlib.import_module("blzarr.storage.chunk").SELECT_WINDOW
        assert it.work.decoded[0] <= 1 + it.work.win
        assert it.work.running == (nthreads > 1)
        it.close()
        assert not it.work.running and _where.where_threads() == 0
        # chunks of 4 MB: a window of 16 MB of them
        big = blzarr.carray(np.arange(2_000_000.0), chunklen=500_000)
        it = big.where(np.ones(len(big), bool))
        assert next(it) == 0.0 and it.work.win == 4
        it.close()
        assert list(it) == []
        assert list(a.where(mc, limit=1234)) == want[:1234]
        assert _where.where_threads() == 0
        with pytest.raises(ZeroDivisionError):
            for k, v in enumerate(a.where(mc)):
                if k == 5000:
                    1 / 0
        assert _where.where_threads() == 0
        it = a.where(mc)
        next(it)
        del it
        gc.collect()
        assert _where.where_threads() == 0
    finally:
        blzarr.set_nthreads(old)


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("which", ["values", "mask"])
def test_where_raises_a_corrupt_chunk_when_its_turn_comes(nthreads, which):
    x = np.arange(50_000, dtype="f8")
    m = (x % 7 == 0) | (x > 40_000)
    a = blzarr.carray(x, chunklen=1000)
    mc = blzarr.carray(m, chunklen=2000)
    _corrupt((a if which == "values" else mc).chunks[10])
    got = []
    old = blzarr.set_nthreads(nthreads)
    try:
        with pytest.raises(ChunkError, match=f"chunk 10 of the {which}"):
            for v in a.where(mc):
                got.append(v)
    finally:
        blzarr.set_nthreads(old)
    # every value before the bad chunk came out first
    first = 10_000 if which == "values" else 20_000
    assert got == x[m][x[m] < first].tolist()
    assert _where.where_threads() == 0


def test_where_floats_kept_by_the_caller_stay_put():
    # a float is given again with a new value only when the caller no longer holds it
    x = np.arange(30_000) * 0.5
    a = blzarr.carray(x, chunklen=1000)
    it = a.where(x > 100)
    v1, v2 = next(it), next(it)
    held = [next(it) for _ in range(1000)]
    assert (v1, v2) == (100.5, 101.0)
    assert held == (x[x > 100][2:1002]).tolist()
    assert sum(it) == float(np.sum(x[x > 100][1002:].tolist()))
    assert (v1, v2) == (100.5, 101.0) and held == (x[x > 100][2:1002]).tolist()
    f4 = blzarr.carray(x.astype("f4"), chunklen=999)
    assert np.fromiter(f4.where(x > 3), float).tolist() == x.astype("f4")[x > 3].tolist()


def test_where_chunks_checks_its_input():
    c = blzarr.carray(np.arange(100.0), chunklen=10)
    chunks, tail = c.resident_chunks()
    mtail = np.ones(100, bool)
    modes = np.full(10, 2, np.uint8)
    with pytest.raises(ValueError, match="the mask holds 99 rows, the values 100"):
        _where.WhereChunks(chunks, tail, [], mtail[:99], 10, 99, "f8", modes)
    with pytest.raises(ValueError, match="9 modes for 10 chunks"):
        _where.WhereChunks(chunks, tail, [], mtail, 10, 100, "f8", modes[:9])
    with pytest.raises(ChunkError, match="it holds 80 bytes, not 40"):
        _where.WhereChunks(chunks, tail.astype("f4"), [], mtail, 10, 100, "f4", modes, wheres=["c0"] * 10)
    w = _where.WhereChunks(chunks, tail, [], mtail, 10, 100, "f8", np.array([0, 1] * 5, np.uint8), 3, False)
    parts = []
    while (p := w.next_part()) is not None:
        parts.append(p.tolist())
    assert parts == [list(range(10 * k + 10, 10 * k + 20)) for k in range(0, 10, 2)]
    with pytest.raises(ValueError, match="no Python scalars"):
        h = blzarr.carray(np.arange(100, dtype="f2"), chunklen=10)
        _where.WhereIter(_where.WhereChunks(*h.resident_chunks(), [], mtail, 10, 100, "f2", modes))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_where_begun_before_a_fork_neither_hangs_nor_lies_in_the_child():
    # the producer thread stays in the parent: in the child the iterator says so instead of waiting
    # for it, and dropping it does not wait either; a new where() in the child works
    x = np.arange(200_000) * 0.5
    a = blzarr.carray(x, chunklen=1000)
    old = blzarr.set_nthreads(2)
    try:
        it = a.where(x > 10)
        assert next(it) == 10.5
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    list(it)
                except RuntimeError as e:
                    code = 0 if "fork" in str(e) else 2
                del it
                if list(a.where(x > 99_990)) != (x[x > 99_990]).tolist():
                    code = 3
            finally:
                os.write(w, bytes([code]))
                os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.waitpid(pid, 0)
        assert got == b"\x00"
        assert list(it) == (x[x > 10][1:]).tolist()
    finally:
        blzarr.set_nthreads(old)


def test_a_work_object_never_set_up_raises_instead_of_crashing():
    """run() on a work object whose items were never set (the pool's base classes made directly)
    raises ValueError, rather than dividing by a share count of 0 (SIGFPE).  In a child process, so that
    a crash fails this test only."""
    code = ("from blzarr import _workpool\n"
            "for cls in (_workpool.Work, _workpool.ChunkWork):\n"
            "    try:\n"
            "        cls().run()\n"
            "    except ValueError as e:\n"
            "        assert 'no items' in str(e), e\n"
            "    else:\n"
            "        raise SystemExit('no error')\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr)
