"""Group-by on one hashed key column of at most 8 bytes a value (S1..S8, U1..U2, integers beyond the
direct range, floats): `KeyTable.ids_rows` looks the keys up and counts the rows in one pass
(`KeyTable.ids_sums` adds an integer and a float sum in the same pass, without group ids), and the
one-word table is kept sparse.  The results are pandas' (same groups, same order of first rows, same
values) and the same as the two-pass path's (`ids_column` + `rows_seen`, then the sums kernels)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import blzarr
from blzarr import _groupby as _gb
from blzarr.query import groupby as gbmod


class _SpyTable(_gb.KeyTable):
    calls = 0           # ids_rows
    sums_calls = 0      # ids_sums

    def ids_rows(self, *args):
        type(self).calls += 1
        return super().ids_rows(*args)

    def ids_sums(self, *args):
        type(self).sums_calls += 1
        return super().ids_sums(*args)


@pytest.fixture
def spy(monkeypatch):
    _SpyTable.calls = _SpyTable.sums_calls = 0
    monkeypatch.setattr(_gb, "KeyTable", _SpyTable)
    return _SpyTable


def _keys(rng, n, dtype, ndistinct):
    dtype = np.dtype(dtype)
    width = dtype.itemsize // (4 if dtype.kind == "U" else 1)
    alphabet = "ab\u00e9" if dtype.kind == "U" else "ab"
    pool = set()
    for _ in range(4 * ndistinct):
        ln = int(rng.integers(0, width + 1))
        pool.add("".join(alphabet[int(c)] for c in rng.integers(0, len(alphabet), ln)))
    pool = sorted(pool)[:ndistinct]
    vals = np.array(pool, dtype=dtype if dtype.kind == "U" else "U%d" % width)
    if dtype.kind == "S":
        vals = vals.astype(dtype)
    return vals[rng.integers(0, len(vals), n)]


def _check(t, k, v, mask=None, nthreads=1):
    old = blzarr.set_nthreads(nthreads)
    try:
        got = t.groupby(["k"], [["v", "sum", "s"], ["v", "count", "c"], ["w", "mean", "m"]],
                        bool_arr=None if mask is None else blzarr.carray(mask), out_flavor="pandas")
    finally:
        blzarr.set_nthreads(old)
    df = pd.DataFrame({"k": list(k), "v": v, "w": v.astype(np.float64) / 3})
    if mask is not None:
        df = df[mask]
    want = df.groupby("k", sort=False).agg(s=("v", "sum"), c=("v", "count"), m=("w", "mean")).reset_index()
    assert got["k"].tolist() == want["k"].tolist()
    assert got["s"].tolist() == want["s"].tolist()
    assert got["c"].tolist() == want["c"].tolist()
    np.testing.assert_allclose(got["m"].to_numpy(float), want["m"].to_numpy(float), rtol=1e-9, atol=1e-12)


_CASES = dict(dtype=st.sampled_from(["S1", "S2", "S3", "S5", "S7", "S8", "U1", "U2", "S9", "U3"]),
              n=st.sampled_from([0, 1, 2, 7, 300, 3000]), ndistinct=st.integers(1, 300),
              filt=st.sampled_from([None, "some", "none", "all"]), nthreads=st.sampled_from([1, 2]),
              chunklen=st.sampled_from([64, 1000]), seed=st.integers(0, 2**32 - 1))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(**_CASES)
def test_string_keys_of_every_width_against_pandas(dtype, n, ndistinct, filt, nthreads, chunklen, seed):
    _string_case(dtype, n, ndistinct, filt, nthreads, chunklen, seed)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(**_CASES)
def test_string_keys_of_every_width_against_pandas_longer(dtype, n, ndistinct, filt, nthreads, chunklen, seed):
    _string_case(dtype, n, ndistinct, filt, nthreads, chunklen, seed)


def _string_case(dtype, n, ndistinct, filt, nthreads, chunklen, seed):
    rng = np.random.default_rng(seed)
    k = _keys(rng, n, dtype, ndistinct)
    v = rng.integers(-50, 50, n).astype(np.int64)
    t = blzarr.ctable([k, v, v.astype(np.float64) / 3], names=["k", "v", "w"], chunklen=chunklen)
    mask = None if filt is None else {"some": rng.random(n) < 0.5, "none": np.zeros(n, bool),
                                      "all": np.ones(n, bool)}[filt]
    _check(t, k, v, mask, nthreads)


@pytest.mark.parametrize("dtype", ["S5", "U2", np.int64, np.float64, np.float32, "S8"])
def test_the_one_pass_lookup_runs_and_matches_the_two_pass_path(spy, monkeypatch, dtype):
    rng = np.random.default_rng(11)
    n = 40_000
    if np.dtype(dtype).kind in "SU":
        k = _keys(rng, n, dtype, 120)
    elif np.dtype(dtype).kind == "f":
        k = rng.integers(0, 150, n).astype(dtype) / 4
        k[::97] = np.nan
        k[::89] = -0.0
    else:
        k = rng.integers(0, 150, n) * 1_000_003_001      # no direct range: hashed
    v = rng.integers(-5, 6, n).astype(np.int64)
    t = blzarr.ctable([k, v, v / 3], names=["k", "v", "w"], chunklen=4096)
    mask = rng.random(n) < 0.8
    aggs = [["v", "sum", "s"], ["w", "mean", "m"], ["w", "max", "x"]]     # max: not ids_sums'
    one = t.groupby(["k"], aggs, bool_arr=blzarr.carray(mask), out_flavor="numpy")
    assert spy.calls > 0 and spy.sums_calls == 0    # the one-pass kernel did the lookups
    spy.calls = 0
    monkeypatch.setattr(gbmod, "HASH_ROWS_MAX", 0)  # the two-pass path
    two = t.groupby(["k"], aggs, bool_arr=blzarr.carray(mask), out_flavor="numpy")
    assert spy.calls == 0 and spy.sums_calls == 0
    assert one.tobytes() == two.tobytes()
    if np.dtype(dtype).kind != "f":                 # pandas makes -0.0 and 0.0 one group as well,
        _check(t, k, v, mask)                       # but NaN keys none: compared with the other path


def test_groups_outgrowing_the_partial_mid_block(spy):
    # thousands of new keys in one block: the kernel stops where a group has no slot in the
    # partial's arrays, they grow, and it goes on from that row
    rng = np.random.default_rng(3)
    n = 30_000
    k = np.array([b"%07d" % x for x in rng.integers(0, 9_000, n)], dtype="S7")
    v = rng.integers(0, 1000, n).astype(np.int64)
    t = blzarr.ctable([k, v, v / 3], names=["k", "v", "w"], chunklen=n)
    _check(t, k, v)
    assert spy.sums_calls > 5


def _two_pass(keys, fk, mask, cap):
    t = _gb.KeyTable(1)
    out = np.empty(len(keys), np.int64)
    nrows, order = np.zeros(cap, np.int64), np.empty(cap, np.int64)
    t.ids_column(keys, fk, out, mask)
    norder = _gb.rows_seen(out, nrows, order, 0)
    return t, out, nrows, order[:norder]


@pytest.mark.parametrize("isz,fk", [(1, 0), (3, 0), (5, 0), (8, 0), (4, 4), (8, 8)])
def test_ids_rows_is_ids_column_and_rows_seen(isz, fk):
    rng = np.random.default_rng(isz + fk)
    n = 10_007
    if fk:
        vals = (rng.integers(0, 60, n) / 8).astype(np.float32 if fk == 4 else np.float64)
        vals[rng.random(n) < 0.05] = np.nan
        vals[rng.random(n) < 0.05] = -0.0
        keys = vals.view(np.uint8).reshape(n, fk)
    else:
        pool = rng.integers(0, 256, (500, isz), dtype=np.uint8)
        keys = np.ascontiguousarray(pool[rng.integers(0, 500, n)])
    mask = (rng.random(n) < 0.9).astype(np.uint8)
    ref_t, ref_out, ref_nrows, ref_order = _two_pass(keys, fk, mask, 600)
    t = _gb.KeyTable(1)
    out = np.full(n, 77, np.int64)
    cap, stops = 4, 0
    nrows, order, norder, i = np.zeros(cap, np.int64), np.empty(cap, np.int64), 0, 0
    while True:
        i, norder = t.ids_rows(keys, fk, out, nrows, order, norder, mask, i)
        if i >= n:
            break
        stops += 1
        assert t.n > cap                   # it stopped on a group with no entry
        nrows = np.concatenate([nrows, np.zeros(cap, np.int64)])
        order = np.concatenate([order, np.empty(cap, np.int64)])
        cap *= 2
    assert stops > 0
    assert t.n == ref_t.n
    assert (out == ref_out).all()
    assert (nrows[:t.n] == ref_nrows[:t.n]).all()
    assert (order[:norder] == ref_order).all()
    assert (t.keys_array() == ref_t.keys_array()).all()


def test_sparse_one_word_table_grows_and_finds_every_key():
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 2**63, 200_000, dtype=np.int64).view(np.uint64)
    keys[:1000] = np.arange(1000, dtype=np.uint64)         # close keys as well as spread ones
    uniq, first = np.unique(keys, return_index=True)
    want = keys[np.sort(first)]
    t = _gb.KeyTable(1)
    ids = np.empty(len(keys), np.int64)
    t.ids(keys.reshape(-1, 1), ids)
    assert t.n == len(uniq)
    assert (t.keys_array()[:, 0] == want).all()
    assert (t.keys_array()[ids, 0] == keys).all()
    again = np.empty(len(keys), np.int64)
    t.ids(keys.reshape(-1, 1), again, None, False)
    assert (again == ids).all()
    miss = np.empty(3, np.int64)
    t.ids(np.array([[2**63 + 5], [2**63 + 7], [2**64 - 1]], np.uint64), miss, None, False)
    assert (miss == -1).all()


def test_one_pass_lookup_past_the_slots_that_keep_their_keys(spy, monkeypatch):
    # more groups than a table keeps slot keys for (SKEY_SLOTS): the one pass, kept on by a raised
    # HASH_ROWS_MAX, goes on comparing the keys in id order
    monkeypatch.setattr(gbmod, "HASH_ROWS_MAX", 1 << 30)
    rng = np.random.default_rng(21)
    n = 120_000
    k = np.array([b"%08d" % x for x in rng.integers(0, 60_000, n)], dtype="S8")
    v = rng.integers(0, 9, n).astype(np.int64)
    t = blzarr.ctable([k, v, v / 3], names=["k", "v", "w"], chunklen=n // 3)
    _check(t, k, v)
    assert spy.sums_calls > 0


# agg lists `ids_sums` takes (an integer sum, a float sum or mean, counts of columns without NaN)
_SUMS_AGGS = [[["v", "sum", "s"]],
              [["v", "sum", "s"], ["w", "mean", "m"]],
              [["v", "count", "c"]],
              [["f", "sum", "fs"], ["v", "count", "c"], ["b", "sum", "bs"]],
              [["v", "mean", "m"], ["u", "sum", "us"]]]


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("dtype", ["S5", "U2", np.int64, np.float64, "S8"])
def test_ids_sums_runs_and_gives_the_two_pass_bits(spy, monkeypatch, dtype, nthreads):
    rng = np.random.default_rng(17)
    n = 8_000
    if np.dtype(dtype).kind in "SU":
        k = _keys(rng, n, dtype, 150)
    elif np.dtype(dtype).kind == "f":
        k = rng.integers(0, 150, n).astype(dtype) / 4
        k[::97] = np.nan
        k[::89] = -0.0
    else:
        k = rng.integers(0, 150, n) * 1_000_003_001      # no direct range: hashed
    v = rng.integers(-5, 6, n).astype(np.int64)
    cols = [k, v, v / 3, (rng.random(n) * 1e6).astype(np.float32), v > 0, v.astype(np.uint32)]
    t = blzarr.ctable(cols, names=["k", "v", "w", "f", "b", "u"], chunklen=1024)
    mask = blzarr.carray(rng.random(n) < 0.7)
    old = blzarr.set_nthreads(nthreads)
    try:
        for aggs in _SUMS_AGGS:
            for bool_arr in (None, mask):
                spy.calls = spy.sums_calls = 0
                monkeypatch.setattr(gbmod, "HASH_ROWS_MAX", 1 << 14)
                one = t.groupby(["k"], aggs, bool_arr=bool_arr, out_flavor="numpy")
                assert spy.sums_calls > 0 and spy.calls == 0, aggs
                monkeypatch.setattr(gbmod, "HASH_ROWS_MAX", 0)      # ids_column, rows_seen, sum_*
                two = t.groupby(["k"], aggs, bool_arr=bool_arr, out_flavor="numpy")
                assert one.tobytes() == two.tobytes(), aggs
                if np.dtype(dtype).kind != "f":
                    df = pd.DataFrame({"k": list(k), "v": v, "w": v / 3, "f": cols[3].astype(np.float64),
                                       "b": cols[4].astype(np.int64), "u": cols[5].astype(np.int64)})
                    if bool_arr is not None:
                        df = df[mask[:]]
                    want = df.groupby("k", sort=False).agg(**{o: (c, op) for c, op, o in aggs}).reset_index()
                    assert list(one["k"]) == want["k"].tolist()
                    for c, op, o in aggs:
                        np.testing.assert_allclose(one[o].astype(float), want[o].to_numpy(float), rtol=1e-6, atol=1e-9)
    finally:
        blzarr.set_nthreads(old)


@pytest.mark.parametrize("isz,fk", [(1, 0), (3, 0), (5, 0), (8, 0), (4, 4), (8, 8)])
@pytest.mark.parametrize("sums", ["i", "f", "if", ""])
def test_ids_sums_is_ids_rows_and_the_sums_kernels(isz, fk, sums):
    rng = np.random.default_rng(isz + 7 * fk)
    n = 10_007
    if fk:
        vals = (rng.integers(0, 60, n) / 8).astype(np.float32 if fk == 4 else np.float64)
        vals[rng.random(n) < 0.05] = np.nan
        vals[rng.random(n) < 0.05] = -0.0
        keys = vals.view(np.uint8).reshape(n, fk)
    else:
        pool = rng.integers(0, 256, (500, isz), dtype=np.uint8)
        keys = np.ascontiguousarray(pool[rng.integers(0, 500, n)])
    mask = (rng.random(n) < 0.9).astype(np.uint8)
    iv = rng.integers(-10**12, 10**12, n) if "i" in sums else None
    fv = rng.standard_normal(n) * 1e3 if "f" in sums else None
    ref_t, ref_out, ref_nrows, ref_order = _two_pass(keys, fk, mask, 600)
    ref_i, ref_f = np.zeros(600, np.int64), np.zeros(600, np.float64)
    if iv is not None:
        _gb.sum_int(ref_out, iv, ref_i)
    if fv is not None:
        _gb.sum_float(ref_out, fv, ref_f)
    t = _gb.KeyTable(1)
    cap, stops = 4, 0
    nrows, order, norder, i = np.zeros(cap, np.int64), np.empty(cap, np.int64), 0, 0
    ia, fa = np.zeros(cap, np.int64), np.zeros(cap, np.float64)
    while True:
        i, norder = t.ids_sums(keys, fk, nrows, order, norder, iv, ia if iv is not None else None,
                               fv, fa if fv is not None else None, mask, i)
        if i >= n:
            break
        stops += 1
        assert t.n > cap                   # it stopped on a group with no entry
        nrows, ia, fa = (np.concatenate([a, np.zeros(cap, a.dtype)]) for a in (nrows, ia, fa))
        order = np.concatenate([order, np.empty(cap, np.int64)])
        cap *= 2
    assert stops > 0
    assert t.n == ref_t.n
    assert (nrows[:t.n] == ref_nrows[:t.n]).all()
    assert (order[:norder] == ref_order).all()
    assert (t.keys_array() == ref_t.keys_array()).all()
    assert (ia[:t.n] == (ref_i[:t.n] if iv is not None else 0)).all()
    assert fa[:t.n].tobytes() == (ref_f[:t.n] if fv is not None else np.zeros(t.n)).tobytes()


def test_ids_sums_refuses_bad_arguments():
    t = _gb.KeyTable(1)
    keys = np.zeros((10, 4), np.uint8)
    z = np.zeros(16, np.int64)
    with pytest.raises(ValueError, match="without its state"):
        t.ids_sums(keys, 0, z, z.copy(), 0, np.zeros(10, np.int64), None)
    with pytest.raises(ValueError, match="shorter"):
        t.ids_sums(keys, 0, z, z.copy(), 0, np.zeros(9, np.int64), z.copy())
    with pytest.raises(ValueError, match="start outside"):
        t.ids_sums(keys, 0, z, z.copy(), 0, start=11)
    with pytest.raises(ValueError, match="one-word"):
        _gb.KeyTable(2).ids_sums(keys, 0, z, z.copy(), 0)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_key_chunks_not_the_blocks_read_whole_once(tmp_path, spy, monkeypatch, nthreads):
    # on disk, S5 keys' chunks (52,428 rows) are not the int64 column's (32,768, the blocks): the key
    # is read as views of its chunks decoded whole, a range across two chunks in two pieces, the
    # rows after the last full chunk by range reads
    rng = np.random.default_rng(5)
    n = 150_000
    k = np.array([b"k%04d" % x for x in range(300)], dtype="S5")[rng.integers(0, 300, n)]
    v = rng.integers(-9, 10, n).astype(np.int64)
    with blzarr.defaults_ctx(fsync=False):
        blzarr.ctable([k, v, v / 7], names=["k", "v", "w"], rootdir=str(tmp_path / "t"), mode="w").flush()
    t = blzarr.open(str(tmp_path / "t"))
    assert t["k"].chunklen != t["v"].chunklen
    seen, real = [], gbmod._Reader.pieces

    def pieces(self, arr, s, e):
        got = real(self, arr, s, e)
        seen.append(None if got is None else len(got))
        return got
    monkeypatch.setattr(gbmod._Reader, "pieces", pieces)
    mask = rng.random(n) < 0.6
    old = blzarr.set_nthreads(nthreads)
    try:
        aggs = [["v", "sum", "s"], ["w", "mean", "m"], ["v", "count", "c"]]
        for bool_arr in (None, blzarr.carray(mask)):
            if True:
                seen.clear()
                monkeypatch.setattr(gbmod, "HASH_ROWS_MAX", 1 << 14)
                one = t.groupby(["k"], aggs, bool_arr=bool_arr, out_flavor="numpy")
                assert spy.sums_calls > 0
                assert 2 in seen and None in seen and 1 in seen      # across chunks, tail, inside one
                monkeypatch.setattr(gbmod, "HASH_ROWS_MAX", 0)
                two = t.groupby(["k"], aggs, bool_arr=bool_arr, out_flavor="numpy")
                assert one.tobytes() == two.tobytes()
                df = pd.DataFrame({"k": k.astype("U5"), "v": v, "w": v / 7})
                if bool_arr is not None:
                    df = df[mask]
                want = df.groupby("k", sort=False).agg(**{o: (c, op) for c, op, o in aggs}).reset_index()
                assert one["k"].astype("U5").tolist() == want["k"].tolist()
                assert (one["s"] == want["s"].to_numpy()).all()
                assert (one["c"] == want["c"].to_numpy()).all()
    finally:
        blzarr.set_nthreads(old)
