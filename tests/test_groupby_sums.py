"""The one-pass path of the group-by (`_gb.direct_sums`): one integer key of a small range and at most
one integer sum and one float sum or mean, checked against NumPy and pandas, taken only where it
applies, repeating its float bits, and refusing a key outside the range the statistics gave."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blzarr
from blzarr import _groupby as _gb
from blzarr.query import groupby as gbmod


def _calls(monkeypatch, kernels=("direct_sums", "direct_sums32")):
    """Record the calls that reach `_gb.direct_sums` or `_gb.direct_sums32` (the engine's own
    references to the kernels)."""
    seen = []

    def spy_on(name):
        real = getattr(gbmod._gb, name)

        def spy(*a, **k):
            seen.append(len(a[0]))
            return real(*a, **k)
        monkeypatch.setattr(gbmod._gb, name, spy)
    for name in kernels:
        spy_on(name)
    return seen


@pytest.mark.parametrize("kdtype", [np.int8, np.uint16, np.int32, np.int64])
@pytest.mark.parametrize("nslots", [40, 20_000])        # the second past where the kernel prefetches
@pytest.mark.parametrize("cols", [(1, 2, 4), (2, 1, 4), (None, 1, 2), (1, None, 2)])
def test_kernel_against_numpy(kdtype, nslots, cols):
    icol, fcol, w = cols
    rng = np.random.default_rng(3)
    n = 5000
    lo = -3 if np.dtype(kdtype).kind == "i" else 2
    keys = (rng.integers(0, min(nslots, np.iinfo(kdtype).max - 2), n) + lo).astype(kdtype)
    iv = rng.integers(-10**12, 10**12, n)
    fv = rng.standard_normal(n)
    mask = (rng.random(n) < 0.7).astype(np.uint8)
    state = np.zeros((nslots, w), np.int64)
    order = np.zeros(nslots, np.int64)
    got = _gb.direct_sums(keys, lo, state, order, 0, iv if icol else None, icol or 1,
                          fv if fcol else None, fcol or 1, mask)
    g = keys.astype(np.int64)[mask == 1] - lo
    assert got == len(np.unique(g))
    np.testing.assert_array_equal(state[:, 0], np.bincount(g, minlength=nslots))
    if icol:
        want = np.zeros(nslots, np.int64)
        np.add.at(want, g, iv[mask == 1])
        np.testing.assert_array_equal(state[:, icol], want)
    if fcol:
        # float sums in row order, one group at a time: the same bits as adding the rows in a loop
        want = np.zeros(nslots)
        for s, x in zip(g.tolist(), fv[mask == 1].tolist()):
            want[s] += x
        assert np.ascontiguousarray(state[:, fcol]).view(np.float64).tobytes() == want.tobytes()
    unused = [c for c in range(1, w) if c not in (icol, fcol)]
    assert not state[:, unused].any()
    # groups in the order of their first rows
    assert order[:got].tolist() == list(dict.fromkeys(g.tolist()))


def test_kernel_only_counts_without_values():
    keys = np.array([5, 7, 5, 9], np.int64)
    state, order = np.zeros((5, 1), np.int64), np.zeros(5, np.int64)
    assert _gb.direct_sums(keys, 5, state, order, 0) == 3
    assert state[:, 0].tolist() == [2, 0, 1, 0, 1] and order[:3].tolist() == [0, 2, 4]


@pytest.mark.parametrize("bad", [4, 10, -(2**40)])
def test_kernel_refuses_a_key_outside_the_slots(bad):
    keys = np.array([5, 6, bad, 7], np.int64)
    state, order = np.zeros((5, 2), np.int64), np.zeros(5, np.int64)
    assert _gb.direct_sums(keys, 5, state, order, 0) == -1
    # the kernels of the other direct paths refuse it too
    nrows, codes = np.zeros(5, np.int64), np.zeros(4, np.int64)
    assert _gb.direct_rows(keys, 5, codes, nrows, np.zeros(5, np.int64), 0) == -1
    assert _gb.direct_codes(keys, 5, 1, codes, True, None, 5) is False
    assert _gb.direct_codes(keys, 5, 1, codes, True) is True        # no span given: not checked
    codes[:] = 0
    assert _gb.direct_codes(keys, 5, 1, codes, False, None, 5) is False


def test_kernel_refuses_bad_arguments():
    keys = np.array([5, 6], np.int64)
    state, order = np.zeros((5, 2), np.int64), np.zeros(5, np.int64)
    with pytest.raises(ValueError):         # values shorter than the keys
        _gb.direct_sums(keys, 5, state, order, 0, np.zeros(1, np.int64), 1)
    with pytest.raises(ValueError):         # a column the state does not have
        _gb.direct_sums(keys, 5, state, order, 0, None, 1, np.zeros(2), 2)
    with pytest.raises(ValueError):         # both sums in one column
        _gb.direct_sums(keys, 5, state, order, 0, np.zeros(2, np.int64), 1, np.zeros(2), 1)
    with pytest.raises(ValueError):         # an order array shorter than the slots
        _gb.direct_sums(keys, 5, state, np.zeros(4, np.int64), 0)


def _table(tmp_path, n=40_000, seed=5):
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 20_000, n)      # past the number of groups where the kernels prefetch
    v1 = rng.integers(1, 6, n)
    v3 = np.round(rng.random(n) * 100, 6)
    v3[::997] = np.nan
    b = rng.random(n) < 0.5
    u = rng.integers(0, 2**63, n, dtype=np.uint64)
    f4 = rng.random(n).astype(np.float32)
    names = ["k", "v1", "v3", "b", "u", "f4"]
    cols = [k, v1, v3, b, u, f4]
    t = blzarr.ctable(cols, names=names, rootdir=str(tmp_path / "t"), mode="w", chunklen=gbmod.MIN_BLEN)
    return t, pd.DataFrame(dict(zip(names, cols)))


def _nan_sum(grp, col):
    """pandas' sums with NaN propagated, as bquery's sum and mean do (pandas skips NaN)."""
    want = np.array(grp[col].sum(), dtype=np.float64)
    want[(grp[col].size() - grp[col].count()).to_numpy() > 0] = np.nan
    return want


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return _table(tmp_path_factory.mktemp("sums"))


@pytest.mark.parametrize("aggs", [
    [["v1", "sum", "s"]],
    [["v3", "mean", "m"]],
    [["v3", "sum", "s"], ["v1", "count", "c"]],
    [["b", "sum", "s"], ["b", "count", "c"]],
    [["f4", "mean", "m"]],
    [["u", "sum", "s"]],
    [["v1", "mean", "m"]],
    [["v1", "sum", "s"], ["v3", "mean", "m"]],          # two value columns
    [["u", "sum", "s"], ["v3", "sum", "m"], ["b", "count", "c"]],
])
@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("narrow", [True, False])
def test_engine_takes_the_one_pass_path(table, monkeypatch, aggs, filtered, narrow):
    t, df = table
    if not narrow:
        monkeypatch.setattr(gbmod, "NARROW_MAX", 0)     # no 32-bit state, however small the sums
    # an integer sum of small values (v1 holds 1..5, b 0..1): 32 bits suffice
    small = any(op == "sum" and col in ("v1", "b") for col, op, _ in aggs)
    seen = _calls(monkeypatch, ["direct_sums32" if narrow and small else "direct_sums"])
    bool_arr = (df["v1"] > 2).to_numpy() if filtered else None
    got = t.groupby(["k"], aggs, bool_arr=bool_arr, out_flavor="pandas")
    assert seen, "the one-pass kernel was not reached"
    sel = df[bool_arr] if filtered else df
    grp = sel.groupby("k", sort=False)
    assert got["k"].tolist() == grp.size().index.tolist() == list(dict.fromkeys(sel["k"]))
    for col, op, out in aggs:
        if op == "sum":
            if sel[col].dtype.kind == "f":
                np.testing.assert_allclose(got[out].to_numpy(), _nan_sum(grp, col), rtol=1e-12)
            elif sel[col].dtype.kind == "u":
                # uint64 sums wrap modulo 2**64 (as NumPy's do): pandas' object-free sum of int64 views
                as_i8 = pd.Series(sel[col].to_numpy().view(np.int64), index=sel.index)
                want = as_i8.groupby(sel["k"], sort=False).sum().to_numpy().view(np.uint64)
                assert got[out].tolist() == want.tolist()
            else:
                assert got[out].tolist() == grp[col].sum().astype(np.int64).tolist()
        elif op == "mean":
            want = _nan_sum(grp, col) / grp.size().to_numpy()
            np.testing.assert_allclose(got[out].to_numpy(), want, rtol=1e-6)
        else:
            assert got[out].tolist() == grp[col].count().tolist()


@pytest.mark.parametrize("aggs", [
    [["v1", "sum", "s"], ["v1", "sum", "t"]],           # two integer sums
    [["v3", "std", "d"]],
    [["v3", "count", "c"]],                             # a count that skips NaN
    [["v1", "min", "m"]],
])
def test_engine_leaves_other_queries_to_the_general_path(table, monkeypatch, aggs):
    t, df = table
    seen = _calls(monkeypatch)
    got = t.groupby(["k"], aggs, out_flavor="pandas")
    assert not seen
    assert got["k"].tolist() == list(dict.fromkeys(df["k"]))
    seen2 = _calls(monkeypatch)
    t.groupby(["k", "v1"], [["v1", "sum", "s"]])     # two keys: not this path either
    assert not seen2


def test_same_bits_with_two_threads_in_any_order(tmp_path, monkeypatch):
    t, df = _table(tmp_path, n=150_000)
    prev = blzarr.set_nthreads(2)
    try:
        aggs = [["v3", "sum", "s"], ["v1", "count", "c"]]
        ref = t.groupby(["k"], aggs, out_flavor="numpy")
        # the two parts' partials folded into the right answer
        grp = df.groupby("k", sort=False)
        assert ref["k"].tolist() == grp.size().index.tolist()
        assert ref["c"].tolist() == grp["v1"].count().tolist()
        np.testing.assert_allclose(ref["s"], _nan_sum(grp, "v3"), rtol=1e-12)
        seen = _calls(monkeypatch)

        def backwards(fn, items):
            for item in reversed(list(items)):
                fn(item)
        monkeypatch.setattr(gbmod.parallel, "run_each", backwards)
        got = t.groupby(["k"], aggs, out_flavor="numpy")
        assert seen
        assert len(gbmod._parts(len(seen))) > 2, "the query ran as one part: nothing to reorder"
        assert got.tobytes() == ref.tobytes()
    finally:
        blzarr.set_nthreads(prev)


@pytest.mark.parametrize("keys, aggs, kernel", [
    (["k"], [["v1", "sum", "s"]], "direct_sums32"),
    (["k"], [["u", "sum", "s"]], "direct_sums"),
    (["k"], [["v1", "min", "s"]], "direct_rows"),
    (["k", "v1"], [["v3", "sum", "s"]], "direct_codes"),
    (["v1", "k"], [["v3", "sum", "s"]], "direct_codes"),
])
def test_a_key_outside_its_statistics_is_an_error(table, monkeypatch, keys, aggs, kernel):
    t, _ = table
    calls = []
    real_kernel = getattr(gbmod._gb, kernel)

    def spy(*a, **k):
        calls.append(1)
        return real_kernel(*a, **k)
    monkeypatch.setattr(gbmod._gb, kernel, spy)
    real = gbmod._int_range
    reached = []

    def narrow(col):
        r = real(col)
        if r is not None and np.dtype(col.dtype) == np.int64 and r[1] > 1000:
            reached.append(r)
            return r[0] + 10, r[1] - 20          # statistics that leave out the lowest and highest keys
        return r
    monkeypatch.setattr(gbmod, "_int_range", narrow)
    with pytest.raises(ValueError, match="'k'.*outside"):
        t.groupby(keys, aggs)
    assert reached and calls


@pytest.mark.parametrize("fcol", [1, 2, 4])
def test_fold_adds_integers_and_the_float_column(fcol):
    rng = np.random.default_rng(11)
    a = rng.integers(-2**40, 2**40, (50, 4))
    b = rng.integers(-2**40, 2**40, (50, 4))
    if fcol < 4:
        a[:, fcol] = rng.standard_normal(50).view(np.int64)
        b[:, fcol] = rng.standard_normal(50).view(np.int64)
    want = a + b
    if fcol < 4:
        want[:, fcol] = (a[:, fcol].view(np.float64) + b[:, fcol].view(np.float64)).view(np.int64)
    got = a.copy()
    _gb.fold_sums(got, b, fcol)
    assert got.tobytes() == want.tobytes()
    with pytest.raises(ValueError):
        _gb.fold_sums(got, b[:10], fcol)


@pytest.mark.parametrize("masked", [False, True])
def test_narrow_kernel_gives_the_wide_kernels_bits(masked):
    rng = np.random.default_rng(11)
    n, nslots = 30_000, 20_000
    keys = rng.integers(7, 7 + nslots, n).astype(np.int32)
    iv = rng.integers(-1000, 1001, n)
    fv = rng.standard_normal(n)
    mask = (rng.random(n) < 0.6).astype(np.uint8) if masked else None
    wide, worder = np.zeros((nslots, 4), np.int64), np.zeros(nslots, np.int64)
    narrow, norder = np.zeros((nslots, 4), np.int32), np.zeros(nslots, np.int64)
    half = n // 2
    # two blocks into one state, then a second state folded in: both kernels, both folds
    wide2, narrow2 = np.zeros_like(wide), np.zeros_like(narrow)
    kw = _gb.direct_sums(keys[:half], 7, wide, worder, 0, iv[:half], 1, fv[:half], 2,
                         None if mask is None else mask[:half])
    kn = _gb.direct_sums32(keys[:half], 7, narrow, norder, 0, iv[:half], fv[:half],
                           None if mask is None else mask[:half], 10)
    assert kw == kn and worder[:kw].tolist() == norder[:kn].tolist()
    _gb.direct_sums(keys[half:], 7, wide2, worder, 0, iv[half:], 1, fv[half:], 2,
                    None if mask is None else mask[half:])
    _gb.direct_sums32(keys[half:], 7, narrow2, norder, 0, iv[half:], fv[half:],
                      None if mask is None else mask[half:], 10)
    _gb.fold_sums(wide, wide2, 2)
    _gb.fold_sums32(narrow, narrow2)
    assert narrow[:, 0].astype(np.int64).tolist() == wide[:, 0].tolist()
    assert narrow[:, 1].astype(np.int64).tolist() == wide[:, 1].tolist()
    assert np.ascontiguousarray(narrow[:, 2:4]).tobytes() == np.ascontiguousarray(wide[:, 2]).tobytes()
    g = keys.astype(np.int64) - 7
    keep = np.ones(n, bool) if mask is None else mask.astype(bool)
    np.testing.assert_array_equal(narrow[:, 0], np.bincount(g[keep], minlength=nslots))


@pytest.mark.parametrize("w", [2, 4])
@pytest.mark.parametrize("masked", [False, True])
def test_narrow_kernel_refuses_a_value_past_its_bound(w, masked):
    """Values must lie in -2**vbits..2**vbits - 1: the ends pass, one past either end is refused
    (-2), wherever it lies in the block; a row the filter drops is not checked."""
    keys = np.array([1, 2, 3, 2], np.int64)
    fv = np.zeros(4) if w == 4 else None
    mask = np.array([1, 1, 1, 1], np.uint8) if masked else None
    order = np.zeros(4, np.int64)
    ok = np.array([7, -8, 0, 1], np.int64)            # vbits 3: -8..7
    state = np.zeros((4, w), np.int32)
    assert _gb.direct_sums32(keys, 0, state, order, 0, ok, fv, mask, 3) == 3
    assert state[:, 0].tolist() == [0, 1, 2, 1] and state[:, 1].tolist() == [0, 7, -7, 0]
    for bad in (8, -9, 2**62, -2**63, 2**63 - 1):
        for at in range(4):
            iv = ok.copy()
            iv[at] = bad
            assert _gb.direct_sums32(keys, 0, np.zeros((4, w), np.int32), order, 0, iv, fv, mask, 3) == -2
            if masked:
                m = mask.copy()
                m[at] = 0
                assert _gb.direct_sums32(keys, 0, np.zeros((4, w), np.int32), order, 0, iv, fv, m, 3) >= 0
    big = np.array([0, 2**62, 0, 0], np.int64)        # far past the bound, no overflow in the check
    assert _gb.direct_sums32(keys, 0, np.zeros((4, w), np.int32), order, 0, big, fv, mask, 31) == -2
    assert _gb.direct_sums32(keys, 0, np.zeros((4, w), np.int32), order, 0,
                             np.array([2**31 - 1, -2**31, 0, 0]), fv, mask, 31) == 3


def test_narrow_kernel_refuses_bad_arguments():
    keys = np.array([1, 2, 3, 2], np.int64)
    iv, order = np.ones(4, np.int64), np.zeros(4, np.int64)
    with pytest.raises(ValueError):                   # rows too narrow for a float sum
        _gb.direct_sums32(keys, 0, np.zeros((4, 2), np.int32), order, 0, iv, np.zeros(4))
    with pytest.raises(ValueError):                   # rows of 3 int32 are not whole 64-bit words
        _gb.direct_sums32(keys, 0, np.zeros((4, 3), np.int32), order, 0, iv)
    with pytest.raises(ValueError):                   # a bound past 32 bits
        _gb.direct_sums32(keys, 0, np.zeros((4, 2), np.int32), order, 0, iv, None, None, 32)
    with pytest.raises(ValueError):                   # a state not on an 8-byte boundary
        _gb.direct_sums32(keys, 0, np.zeros(9, np.int32)[1:].reshape(4, 2), order, 0, iv)


def test_a_value_outside_its_statistics_is_an_error_on_the_narrow_path(table, monkeypatch):
    t, _ = table
    real = gbmod._int_range
    narrowed = []

    def lying(col):
        got = real(col)
        if getattr(col, "dtype", None) == t["v1"].dtype and len(col) == len(t) and col is t["v1"]:
            narrowed.append(1)
            return got[0], 2        # v1 holds 1..5: the statistics now say 1..2
        return got
    monkeypatch.setattr(gbmod, "_int_range", lying)
    seen = _calls(monkeypatch, ["direct_sums32"])
    with pytest.raises(ValueError, match="'v1'.*outside"):
        t.groupby(["k"], [["v1", "sum", "s"], ["v3", "mean", "m"]])
    assert narrowed and seen


def _parts_states(keys, iv, fv, nslots, nparts, narrow):
    """The one-pass states of `nparts` contiguous runs of the rows, as the engine's parts make them."""
    states, orders = [], []
    cuts = [len(keys) * p // nparts for p in range(nparts + 1)]
    for p in range(nparts):
        s, e = cuts[p], cuts[p + 1]
        order = np.zeros(nslots, np.int64)
        if narrow:
            st = np.zeros((nslots, 4), np.int32)
            got = _gb.direct_sums32(keys[s:e], 0, st, order, 0, iv[s:e], fv[s:e])
        else:
            st = np.zeros((nslots, 4), np.int64)
            got = _gb.direct_sums(keys[s:e], 0, st, order, 0, iv[s:e], 1, fv[s:e], 2)
        assert got >= 0
        states.append(st)
        orders.append(order[:got])
    return states, orders


def _folded(states, orders, narrow):
    """What `_fold` and `_finish` give: the states folded in part order, then taken in the groups' order."""
    G = states[0].copy()
    order = list(orders[0])
    seen = G[:, 0] != 0
    for st, o in zip(states[1:], orders[1:]):
        order += [g for g in o if not seen[g]]
        (_gb.fold_sums32 if narrow else _gb.fold_sums)(G, st, *(() if narrow else (2,)))
        seen = G[:, 0] != 0
    order = np.array(order, np.int64)
    if narrow:
        return order, G[order, 0].astype(np.int64), G[order, 1].astype(np.int64), \
            np.ascontiguousarray(G[:, 2:4]).view(np.float64)[order, 0]
    return order, G[order, 0], G[order, 1], G[order, 2].view(np.float64)


@given(seed=st.integers(0, 2**32 - 1), nparts=st.integers(1, 4), nslots=st.sampled_from([1, 7, 300, 20_000]),
       n=st.integers(0, 3000), narrow=st.booleans())
@settings(max_examples=40, deadline=None)
def test_gather_gives_the_folds_bits(seed, nparts, nslots, n, narrow):
    rng = np.random.default_rng(seed)
    # keys drawn from a range that grows along the rows: later parts meet groups the earlier lack
    keys = (rng.random(n) * np.linspace(1, nslots, n)).astype(np.int64) if n else np.zeros(0, np.int64)
    iv = rng.integers(-1000, 1000, n)
    fv = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6, n)
    fv[rng.random(n) < 0.01] = -0.0
    states, orders = _parts_states(keys, iv, fv, nslots, nparts, narrow)
    order, cnt, isum, fsum = _folded(states, orders, narrow)
    lo = -17
    kv, c, i, f = (np.full(nslots, 99, np.int64), np.zeros(nslots, np.int64), np.zeros(nslots, np.int64),
                   np.zeros(nslots))
    got = _gb.gather_sums(states, orders, narrow, 1, 2, lo, kv, c, i, f)
    assert got == len(order) == len(np.unique(keys))
    assert kv[:got].tolist() == (order + lo).tolist()
    assert c[:got].tolist() == cnt.tolist()
    assert i[:got].tolist() == isum.tolist()
    assert f[:got].tobytes() == fsum.tobytes()
    # and against NumPy: the groups in the order of their first rows, their counts and sums
    first = np.unique(keys, return_index=True)[1]
    assert order.tolist() == keys[np.sort(first)].tolist()
    assert c[:got].tolist() == np.bincount(keys, minlength=nslots)[order].tolist()


def test_gather_takes_only_the_columns_asked_for():
    keys = np.array([3, 1, 3, 0], np.int64)
    states, orders = _parts_states(keys, np.array([5, 6, 7, 8]), np.array([0.5, 1.5, 2.5, 3.5]), 4, 2, False)
    kv = np.zeros(4, np.int64)
    assert _gb.gather_sums(states, orders, False, 1, 2, 10, kv) == 3
    assert kv[:3].tolist() == [13, 11, 10]
    f = np.zeros(4)
    assert _gb.gather_sums([np.ascontiguousarray(s[:, :3]) for s in states], orders, False, 1, 2, 0, kv, None, None, f) == 3
    assert f[:3].tolist() == [3.0, 1.5, 3.5]


def test_gather_refuses_bad_arguments():
    st = np.zeros((4, 2), np.int64)
    o = np.zeros(0, np.int64)
    kv = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="one order per state"):
        _gb.gather_sums([st, st], [o], False, 1, 2, 0, kv)
    with pytest.raises(ValueError, match="different shapes"):
        _gb.gather_sums([st, np.zeros((5, 2), np.int64)], [o, o], False, 1, 2, 0, kv)
    with pytest.raises(ValueError, match="not in the state"):
        _gb.gather_sums([st], [o], False, 1, 2, 0, kv, None, None, np.zeros(4))
    with pytest.raises(ValueError, match="shorter than the slots"):
        _gb.gather_sums([st], [o], False, 1, 2, 0, np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="outside the slots"):
        _gb.gather_sums([st], [np.array([4], np.int64)], False, 1, 2, 0, kv)
    with pytest.raises(ValueError, match="narrow rows"):
        _gb.gather_sums([np.zeros((4, 2), np.int32)], [o], True, 1, 2, 0, kv, None, None, np.zeros(4))


@pytest.mark.parametrize("aggs", [
    [["v1", "sum", "s"]],
    [["v1", "sum", "s"], ["v3", "mean", "m"]],
    [["v3", "sum", "s"], ["v1", "count", "c"], ["b", "count", "c2"]],
])
@pytest.mark.parametrize("filtered", [False, True])
def test_engine_gathers_the_parts_without_a_fold(table, monkeypatch, aggs, filtered):
    """On two threads the one-pass path's parts go to `gather_sums`, never through `fold_sums` or
    `_finish`, and the result is pandas' (the keys in the order of their first rows)."""
    t, df = table
    gathered, folded = [], []
    real = gbmod._gb.gather_sums

    def spy(states, *a, **k):
        gathered.append(len(states))
        return real(states, *a, **k)
    monkeypatch.setattr(gbmod._gb, "gather_sums", spy)
    for name in ("fold_sums", "fold_sums32"):
        monkeypatch.setattr(gbmod._gb, name, lambda *a, **k: folded.append(1))
    monkeypatch.setattr(gbmod, "_finish", lambda *a, **k: folded.append(1))
    bool_arr = (df["v1"] > 2).to_numpy() if filtered else None
    prev = blzarr.set_nthreads(2)
    try:
        got = t.groupby(["k"], aggs, bool_arr=bool_arr)
    finally:
        blzarr.set_nthreads(prev)
    # two states, or one when a thread took every run of an integer-only query before the other woke
    assert gathered in ([2], [1] if aggs[0][1:] == ["sum", "s"] and len(aggs) == 1 else [2]) and not folded
    assert got.names == ["k"] + [a[2] for a in aggs]
    sel = df[bool_arr] if filtered else df
    grp = sel.groupby("k", sort=False)
    assert got["k"][:].tolist() == list(dict.fromkeys(sel["k"]))
    assert got["k"].dtype == df["k"].dtype
    for col, op, out in aggs:
        if op == "count":
            assert got[out][:].tolist() == grp[col].count().tolist()
        elif sel[col].dtype.kind == "f":
            want = _nan_sum(grp, col) / (grp.size().to_numpy() if op == "mean" else 1)
            np.testing.assert_allclose(got[out][:], want, rtol=1e-12)
        else:
            assert got[out][:].tolist() == grp[col].sum().tolist()


def _runs_states(keys, iv, nslots, cuts, owner, narrow):
    """The states of threads that took the runs of rows [cuts[r], cuts[r + 1]) in ascending order,
    run r by thread owner[r], and the (state, start, end) rows `gather_sums` takes, in run order."""
    states, orders, norders, runs = {}, {}, {}, []
    for r, t in enumerate(owner):
        if t not in states:
            states[t] = np.zeros((nslots, 2), np.int32 if narrow else np.int64)
            orders[t], norders[t] = np.zeros(nslots, np.int64), 0
        s, e = cuts[r], cuts[r + 1]
        if narrow:
            got = _gb.direct_sums32(keys[s:e], 0, states[t], orders[t], norders[t], iv[s:e], None, None, 31)
        else:
            got = _gb.direct_sums(keys[s:e], 0, states[t], orders[t], norders[t], iv[s:e], 1)
        assert got >= 0
        runs.append((t, norders[t], got))
        norders[t] = got
    ts = sorted(states)
    at = {t: i for i, t in enumerate(ts)}
    return ([states[t] for t in ts], [orders[t][:norders[t]] for t in ts],
            np.array([(at[t], a, b) for t, a, b in runs], np.int64).reshape(-1, 3))


@given(seed=st.integers(0, 2**32 - 1), nthreads=st.integers(1, 3), nruns=st.integers(1, 12),
       nslots=st.sampled_from([1, 7, 300, 20_000]), n=st.integers(0, 3000), narrow=st.booleans())
@settings(max_examples=40, deadline=None)
def test_gather_by_runs_gives_one_passes_groups(seed, nthreads, nruns, nslots, n, narrow):
    """Runs of rows taken by threads in any ascending assignment, each thread one state: gathered by
    runs, the groups come in the order of their first rows with the counts and integer sums of one
    pass over all the rows."""
    rng = np.random.default_rng(seed)
    keys = (rng.random(n) * np.linspace(1, nslots, n)).astype(np.int64) if n else np.zeros(0, np.int64)
    iv = rng.integers(-1000, 1000, n)
    cuts = np.sort(np.r_[0, rng.integers(0, n + 1, nruns - 1), n])
    owner = rng.integers(0, nthreads, nruns).tolist()
    states, orders, runs = _runs_states(keys, iv, nslots, cuts, owner, narrow)
    kv, c, i = np.full(nslots, 99, np.int64), np.zeros(nslots, np.int64), np.zeros(nslots, np.int64)
    got = _gb.gather_sums(states, orders, narrow, 1, 2, 5, kv, c, i, None, runs)
    first = np.unique(keys, return_index=True)[1]
    order = keys[np.sort(first)]
    assert got == len(order)
    assert kv[:got].tolist() == (order + 5).tolist()
    assert c[:got].tolist() == np.bincount(keys, minlength=nslots)[order].tolist()
    want = np.zeros(nslots, np.int64)
    np.add.at(want, keys, iv)
    assert i[:got].tolist() == want[order].tolist()


def test_gather_by_runs_refuses_floats_and_bad_runs():
    keys = np.array([3, 1, 3, 0], np.int64)
    states, orders, runs = _runs_states(keys, np.arange(4), 4, [0, 2, 4], [0, 1], False)
    kv = np.zeros(4, np.int64)
    assert _gb.gather_sums(states, orders, False, 1, 2, 0, kv, None, None, None, runs) == 3
    with pytest.raises(ValueError, match="not for float sums"):
        _gb.gather_sums(states, orders, False, 1, 2, 0, kv, None, None, np.zeros(4), runs)
    for bad in ([[2, 0, 1]], [[0, 0, 3]], [[1, 1, 0]], [[0, -1, 1]]):
        with pytest.raises(ValueError, match="a run outside"):
            _gb.gather_sums(states, orders, False, 1, 2, 0, kv, None, None, None, np.array(bad, np.int64))
    with pytest.raises(ValueError, match="runs are"):
        _gb.gather_sums(states, orders, False, 1, 2, 0, kv, None, None, None, np.zeros((1, 2), np.int64))


def _two_threads(pattern):
    """A `parallel.run_each` that runs item i on thread pattern[i % len(pattern)] (0 or 1), the items
    one after the other in order, on two threads that keep their thread-local state."""
    from concurrent.futures import ThreadPoolExecutor

    def run_each(fn, items):
        pools = [ThreadPoolExecutor(1), ThreadPoolExecutor(1)]
        try:
            for i, item in enumerate(items):
                pools[pattern[i % len(pattern)]].submit(fn, item).result()
        finally:
            for p in pools:
                p.shutdown()
    return run_each


@pytest.fixture(scope="module")
def small_chunks(tmp_path_factory):
    rng = np.random.default_rng(8)
    n = 40_000
    df = pd.DataFrame({"k": rng.integers(0, 20_000, n), "v1": rng.integers(1, 6, n), "b": rng.random(n) < 0.5,
                       "u": rng.integers(0, 2**63, n, dtype=np.uint64)})
    t = blzarr.ctable([df[c].to_numpy() for c in df], names=list(df), chunklen=1024,
                      rootdir=str(tmp_path_factory.mktemp("runs") / "t"), mode="w")
    return t, df


def test_runs_need_more_than_the_parts():
    m = gbmod.RUNS_PER_THREAD
    assert gbmod._runs(153, 2) == [153 * r // (2 * m) for r in range(2 * m + 1)]
    assert gbmod._runs(5, 2) is None            # two runs of 2 blocks: no better than the halves
    assert gbmod._runs(7, 2) == [0, 2, 4, 7]
    assert gbmod._runs(40, 1) == [40 * r // m for r in range(m + 1)]


@pytest.mark.parametrize("pattern", [[0], [1], [0, 1], [1, 0, 0], [0, 0, 1, 1, 1]])
@pytest.mark.parametrize("aggs", [[["v1", "sum", "s"]], [["b", "sum", "s"], ["v1", "count", "c"]],
                                  [["u", "sum", "s"]]])
@pytest.mark.parametrize("filtered", [False, True])
def test_integer_sums_take_runs_of_blocks_on_any_thread(small_chunks, monkeypatch, pattern, aggs, filtered):
    """On two threads an integer-only sums query hands out runs of blocks (`_runs`) to whichever
    thread is free: whatever thread takes which run, the groups, their order and the sums are
    pandas', and `gather_sums` got the runs."""
    t, df = small_chunks
    monkeypatch.setattr(gbmod, "MIN_BLEN", 1024)
    runs = []
    real = gbmod._gb.gather_sums

    def spy(*a, **k):
        runs.append(a[10] if len(a) > 10 else k.get("runs"))
        return real(*a, **k)
    monkeypatch.setattr(gbmod._gb, "gather_sums", spy)
    monkeypatch.setattr(gbmod.parallel, "run_each", _two_threads(pattern))
    bool_arr = (df["v1"] > 2).to_numpy() if filtered else None
    prev = blzarr.set_nthreads(2)
    try:
        got = t.groupby(["k"], aggs, bool_arr=bool_arr, out_flavor="pandas")
    finally:
        blzarr.set_nthreads(prev)
    assert len(runs) == 1 and runs[0] is not None, "the runs path was not taken"
    assert len(runs[0]) == 2 * gbmod.RUNS_PER_THREAD
    assert set(runs[0][:, 0].tolist()) == set(range(len(set(pattern[:len(runs[0])]))))
    sel = df[bool_arr] if filtered else df
    grp = sel.groupby("k", sort=False)
    assert got["k"].tolist() == list(dict.fromkeys(sel["k"]))
    for col, op, out in aggs:
        if op == "count":
            assert got[out].tolist() == grp[col].count().tolist()
        elif col == "u":
            as_i8 = pd.Series(sel[col].to_numpy().view(np.int64), index=sel.index)
            assert got[out].tolist() == as_i8.groupby(sel["k"], sort=False).sum().to_numpy().view(np.uint64).tolist()
        else:
            assert got[out].tolist() == grp[col].sum().astype(np.int64).tolist()


@given(seed=st.integers(0, 2**32 - 1), span=st.sampled_from([3, 500, 20_000]), vmax=st.sampled_from([1, 5, 2**20, 2**40]),
       neg=st.booleans(), filtered=st.booleans(), nthreads=st.integers(1, 2), mean=st.booleans())
@settings(max_examples=12, deadline=None)
def test_sums_by_an_integer_key_against_pandas(seed, span, vmax, neg, filtered, nthreads, mean):
    """sum (and mean) by an integer key over in-memory tables of several blocks: narrow or wide
    states, one or two threads, with and without a filter, as pandas gives them."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 20_000))
    k = rng.integers(-span // 3, span - span // 3, n)
    v = rng.integers(-vmax if neg else 0, vmax + 1, n)
    f = rng.standard_normal(n)
    t = blzarr.ctable([k, v, f], names=["k", "v", "f"], chunklen=1024)
    aggs = [["v", "sum", "s"]] + ([["f", "mean", "m"]] if mean else [])
    bool_arr = rng.random(n) < 0.7 if filtered else None
    prev = blzarr.set_nthreads(nthreads)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(gbmod, "MIN_BLEN", 1024)       # up to 20 blocks: runs of blocks on two threads
            got = t.groupby(["k"], aggs, bool_arr=bool_arr, out_flavor="pandas")
    finally:
        blzarr.set_nthreads(prev)
    df = pd.DataFrame({"k": k, "v": v, "f": f})
    sel = df[bool_arr] if filtered else df
    grp = sel.groupby("k", sort=False)
    assert got["k"].tolist() == grp.size().index.tolist()
    assert got["s"].tolist() == grp["v"].sum().tolist()
    if mean:
        # pandas adds in another order: a mean near 0 differs in its last bits
        np.testing.assert_allclose(got["m"].to_numpy(), grp["f"].mean().to_numpy(), rtol=1e-9, atol=1e-12)
