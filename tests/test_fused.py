"""The parallel, fused block engine (blzarr.query.fused) behind eval, lazyexpr, queries and reductions:
every result must equal NumPy's on the same data, whatever the layout, thread count and block size."""


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from helpers import assert_same, examples

import blzarr
from blzarr.query import rules
from blzarr.query import fused


COLS = {"a": "i8", "b": "f8", "c": "i4", "d": "u2", "f": "f4", "g": "?"}
NUMERIC = ["a", "b", "c", "d", "f"]


def make_data(n, seed):
    rng = np.random.default_rng(seed)
    ra = np.empty(n, dtype=list(COLS.items()))
    ra["a"] = rng.integers(-10, 110, n)
    ra["b"] = np.round(rng.uniform(-10, 110, n), 1)
    ra["b"][rng.random(n) < 0.05] = np.nan
    ra["c"] = rng.integers(0, 100, n)
    ra["d"] = rng.integers(0, 100, n)
    ra["f"] = rng.uniform(-5, 5, n).astype("f4")
    ra["f"][rng.random(n) < 0.05] = np.nan
    ra["g"] = rng.random(n) < 0.5
    return ra


@st.composite
def comparisons(draw):
    name = draw(st.sampled_from(NUMERIC))
    op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    if draw(st.booleans()):
        return f"({name} {op} {draw(st.sampled_from(NUMERIC))})"
    return f"({name} {op} {draw(st.integers(-20, 120))})"


def predicates():
    return st.recursive(
        st.one_of(comparisons(), st.just("g")),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["&", "|"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda e: f"(~{e})")),
        max_leaves=4)


@st.composite
def arithmetic(draw):
    x, y = draw(st.sampled_from(NUMERIC)), draw(st.sampled_from(NUMERIC))
    op = draw(st.sampled_from(["+", "-", "*"]))
    return f"({x} {op} {y})"


def numpy_value(expression, ra, vm="python"):
    """The expression over the whole uncompressed columns: numexpr's result with vm='numexpr' (its
    types are bcolz's), NumPy's otherwise or where numexpr does not support the expression."""
    env = {n: ra[n] for n in COLS}
    if vm == "numexpr":
        import numexpr
        try:
            return numexpr.evaluate(expression, local_dict=env, global_dict={})
        except (TypeError, ValueError, NotImplementedError, KeyError):
            pass
    with np.errstate(all="ignore"):
        return np.asarray(eval(expression, {"__builtins__": {}}, env))


def lazy_value(expression, ra, vm):
    """What a lazy expression gives: NumPy's type always; numexpr's values with vm='numexpr' where
    numexpr computes in that type."""
    ours = numpy_value(expression, ra)
    if vm == "numexpr":
        theirs = numpy_value(expression, ra, vm)
        if theirs.dtype == ours.dtype:
            return theirs
    return ours


def blockwise(f, combine, value, blen):
    """The reduction computed the engine's way: block by block, combined in order."""
    res = None
    for s in range(0, len(value), blen):
        p = f(value[s:s + blen])
        res = p if res is None else combine(res, p)
    return res


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def nthreads(request):
    old = blzarr.set_nthreads(request.param)
    yield request.param
    blzarr.set_nthreads(old)


@settings(max_examples=examples(40))
@given(n=st.sampled_from([0, 1, 2, 37, 1000, 3001]), seed=st.integers(0, 2 ** 32 - 1),
       expression=st.one_of(predicates(), arithmetic()), blen=st.integers(1, 400),
       vm=st.sampled_from(["numexpr", "python"]), chunklen=st.sampled_from([7, 100, 1024]))
def test_lazyexpr_equals_numpy(nthreads, n, seed, expression, blen, vm, chunklen):
    ra = make_data(n, seed)
    ops = {k: (blzarr.carray(ra[k], chunklen=chunklen) if i % 2 == 0 else ra[k])
           for i, k in enumerate(COLS)}
    expected = lazy_value(expression, ra, vm)
    e = blzarr.lazyexpr(expression, user_dict=ops, vm=vm, blen=blen)
    assert len(e) == n and e.shape == expected.shape and e.dtype == expected.dtype
    assert_same(e[:], expected)
    if n == 0:
        # empty, typed as NumPy types it; the reductions NumPy refuses on no values are refused
        assert e.count_nonzero() == 0 and not e.any() and e.all()
        with pytest.raises(ValueError):
            e.min()
        return
    i, j = n // 3, n - n // 4
    assert_same(e[i:j], expected[i:j])
    assert e.count_nonzero() == np.count_nonzero(expected)
    assert e.any() == bool(np.any(expected)) and e.all() == bool(np.all(expected))
    assert_same(np.asarray(e.min()), np.asarray(np.min(expected)))
    assert_same(np.asarray(e.max()), np.asarray(np.max(expected)))
    # sums: exactly the blockwise sum, and NumPy's dtype and value up to rounding
    total = e.sum()
    assert_same(np.asarray(total), np.asarray(blockwise(np.sum, np.add, expected, blen)))
    assert np.asarray(total).dtype == np.sum(expected).dtype
    np.testing.assert_allclose(total, np.sum(expected), rtol=1e-5 if expected.dtype == "f4" else 1e-12)
    mean = e.mean()
    assert np.asarray(mean).dtype == np.mean(expected).dtype
    np.testing.assert_allclose(mean, np.mean(expected), rtol=1e-5 if expected.dtype == "f4" else 1e-12)


@pytest.fixture(params=["memory", pytest.param("bcolz", marks=pytest.mark.slow), "blz"])
def layout(request, tmp_path_factory):
    return request.param, tmp_path_factory


def make_table(ra, layout, chunklen):
    kind, factory = layout
    kw = {}
    if kind != "memory":
        kw = {"rootdir": str(factory.mktemp("t") / "t"), "format": kind}
    cols = [blzarr.carray(ra[k], chunklen=chunklen) for k in COLS]
    return blzarr.ctable(cols, names=list(COLS), **kw)


@settings(max_examples=examples(25))
@given(n=st.sampled_from([0, 1, 5, 900, 2500]), seed=st.integers(0, 2 ** 32 - 1), expression=predicates(),
       vm=st.sampled_from(["numexpr", "python"]), limit=st.sampled_from([None, 0, 3, 500]),
       skip=st.sampled_from([0, 2, 400]), outcols=st.sampled_from([None, ["b", "nrow__"], ["d"]]))
def test_queries_equal_numpy(nthreads, layout, monkeypatch, n, seed, expression, vm, limit, skip, outcols):
    monkeypatch.setattr(rules, "MIN_BLEN", 1)  # many blocks, so the threads share them
    ra = make_data(n, seed)
    t = make_table(ra, layout, chunklen=64)
    mask = numpy_value(expression, ra, vm)
    pos = np.flatnonzero(mask)[skip:]
    pos = pos if limit is None else pos[:limit]
    names = list(COLS) if outcols is None else outcols
    expected = np.empty(len(pos), dtype=[(k, "i8" if k == "nrow__" else COLS[k]) for k in names])
    for k in names:
        expected[k] = pos if k == "nrow__" else ra[k][pos]
    got = t.fetchwhere(expression, outcols=outcols, limit=limit, skip=skip, vm=vm, out_flavor="numpy")
    assert_same(got, expected)
    got = t.fetchwhere(expression, outcols=outcols, limit=limit, skip=skip, vm=vm)
    assert_same(got[:], expected)
    rows = list(t.where(expression, outcols=outcols, limit=limit, skip=skip, vm=vm, out_flavor=tuple))
    assert_same(np.array(rows, dtype=expected.dtype) if rows else expected[:0], expected)
    blocks = list(t.whereblocks(expression, blen=7, outcols=outcols, limit=limit, skip=skip, vm=vm))
    assert_same(np.concatenate(blocks) if blocks else expected[:0], expected)
    if limit is None and skip == 0 and outcols is None and expression not in COLS:
        # t[name] is the column itself (bcolz's meaning), not the rows where it is true
        assert_same(t[expression], expected)
    t_eval = t.eval(expression, out_flavor="numpy", vm=vm)
    assert_same(t_eval, mask)


@settings(max_examples=examples(30))
@given(n=st.sampled_from([1, 2, 999, 5000]), seed=st.integers(0, 2 ** 32 - 1),
       name=st.sampled_from(NUMERIC + ["g"]), chunklen=st.sampled_from([3, 64, 1000]))
def test_carray_reductions_equal_numpy(nthreads, n, seed, name, chunklen):
    x = make_data(n, seed)[name]
    a = blzarr.carray(x, chunklen=chunklen)
    for op, combine in (("min", np.minimum), ("max", np.maximum), ("sum", np.add)):
        assert_same(np.asarray(getattr(a, op)()), np.asarray(blockwise(getattr(np, op), combine, x, chunklen)))
    np.testing.assert_allclose(a.sum(), np.sum(x), rtol=1e-5 if x.dtype == "f4" else 1e-12)
    np.testing.assert_allclose(a.mean(), np.mean(x), rtol=1e-5 if x.dtype == "f4" else 1e-12)


def test_eval_numpy_flavor_many_blocks(nthreads):
    x = np.arange(50_000, dtype="f8")
    a = blzarr.carray(x, chunklen=1000)
    y = np.arange(50_000) % 7
    out = blzarr.eval("a * 2 + y", out_flavor="numpy", blen=1000)
    assert_same(out, x * 2 + y)
    assert_same(blzarr.eval("a > y", blen=1000)[:], x > y)
    assert_same(blzarr.eval("where(a > 3, a, y)", out_flavor="numpy", vm="python", blen=1000),
                np.where(x > 3, x, y))


def test_lazyexpr_errors_and_compute():
    a = blzarr.carray(np.arange(10))
    b = np.arange(11)
    with pytest.raises(ValueError, match="different lengths"):
        blzarr.lazyexpr("a + b")
    with pytest.raises(ValueError, match="reduces"):
        blzarr.lazyexpr("sum(a)")
    with pytest.raises(ValueError, match="no array"):
        blzarr.lazyexpr("1 + 2")
    with pytest.raises(NameError, match="nope"):
        blzarr.lazyexpr("a + nope")
    with pytest.raises(ValueError, match="vm"):
        blzarr.lazyexpr("a + 1", vm="dask")
    e = blzarr.lazyexpr("a * 3")
    c = e.compute()
    assert isinstance(c, blzarr.carray) and c[:].tolist() == (np.arange(10) * 3).tolist()
    assert_same(e[[1, 3]], np.array([3, 9]))
    assert_same(np.asarray(e), np.arange(10) * 3)
    s = blzarr.lazyexpr("a > 4")
    with pytest.raises(TypeError):
        blzarr.lazyexpr("x + x", user_dict={"x": blzarr.carray(np.array([b"a", b"b"]))}).sum()
    assert s.count_nonzero() == 5 and int(s.sum()) == 5


def test_query_errors_from_workers(monkeypatch):
    monkeypatch.setattr(rules, "MIN_BLEN", 1)
    t = blzarr.ctable([np.arange(1000), np.arange(1000) * 0.5], names=["a", "b"], chunklen=10)
    with pytest.raises(ValueError, match="does not give booleans"):
        t.fetchwhere("a + b")
    with pytest.raises(ValueError, match="does not give booleans"):
        list(t.where("a * 2"))


def test_numexpr_threads_restored():
    numexpr = pytest.importorskip("numexpr")
    before = numexpr.set_num_threads(2)
    try:
        a = blzarr.carray(np.arange(100_000), chunklen=1000)
        assert blzarr.lazyexpr("a * 2", blen=1000).sum() == 2 * np.arange(100_000).sum()
        assert numexpr.set_num_threads(2) == 2
    finally:
        numexpr.set_num_threads(before)


def test_decoder_buffers_are_per_thread(nthreads):
    a = blzarr.carray(np.arange(20_000), chunklen=100)
    dec = fused.Decoder({"a": a, "b": np.arange(20_000)}, 100)
    bounds = fused.block_bounds(20_000, 100)
    got = fused.run_blocks(bounds, dec, lambda s, e, loc: (int(loc["a"][0]), int(loc["a"].sum()),
                                                           int(loc["b"][-1])))
    assert got == [(s, int(np.arange(s, e).sum()), e - 1) for s, e in bounds]
