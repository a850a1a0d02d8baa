"""The fused C kernel of expressions (blzarr.query.exprkernel, _exprkernel.ExprChunks): lazy sums and counts
and fetchwhere over in-memory float64 carrays must give NumPy's values, bit for bit the general path's,
whatever the chunk edges, NaN, infinities, signed zeros, raw (uncompressed) chunks and thread count."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from helpers import assert_same, examples

import blzarr
from blzarr.query import rules
from blzarr import _exprkernel
from blzarr.query import exprkernel
from blzarr.query import planner


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5])


def make_floats(n, seed, special):
    rng = np.random.default_rng(seed)
    x = np.round(rng.uniform(-4, 4, n), 2)
    if special:
        pick = rng.random(n) < 0.1
        x[pick] = rng.choice(SPECIAL, int(pick.sum()))
    return x


SCALARS = st.one_of(st.integers(-5, 5), st.sampled_from([0.5, -1.25, 2.0, 0.0, 1e300]))


@st.composite
def arithmetic(draw, depth=2, leaves=("a", "b", "c", "a", "q"), ops=("+", "-", "*", "/"), kinds=3):
    """An arithmetic expression of `leaves` and `ops` (test_exprkernel_typed draws its own leaves, ops
    and a higher chance of a binary operation through `kinds`)."""
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(list(leaves)))
    kind = draw(st.integers(0, kinds))
    if kind == 0:
        return f"(-{draw(arithmetic(depth - 1, leaves, ops, kinds))})"
    x, y = draw(arithmetic(depth - 1, leaves, ops, kinds)), draw(arithmetic(depth - 1, leaves, ops, kinds))
    if x == y == "q":
        y = "a"
    return f"({x} {draw(st.sampled_from(list(ops)))} {y})"


@st.composite
def predicate(draw, depth=2):
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        x, y = draw(arithmetic(1)), draw(st.sampled_from(["a", "b", "q", "-1", "0.5"]))
        if not any(k in x for k in "abc"):
            x = "c"             # a comparison of scalars is a Python bool, whose ~ is an int
        return f"({x} {draw(st.sampled_from(['<', '<=', '>', '>=', '==', '!=']))} {y})"
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return f"(~{draw(predicate(depth - 1))})"
    return f"({draw(predicate(depth - 1))} {draw(st.sampled_from(['&', '|', '^']))} {draw(predicate(depth - 1))})"


def numpy_value(expression, env):
    with np.errstate(all="ignore"):
        return np.asarray(eval(expression, {"__builtins__": {}}, dict(env)))


def blockwise_sum(value, blen):
    res = None
    with np.errstate(all="ignore"):
        for s in range(0, len(value), blen):
            p = np.sum(value[s:s + blen])
            res = p if res is None else res + p
    return res


def same_number(got, expected):
    """Equal with the dtype, or both NaN (which NaN a sum of two different NaNs keeps is the CPU's)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype
    if expected.dtype.kind == "f" and np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got.tobytes() == expected.tobytes(), (got, expected)


def same_values(got, expected):
    """Equal arrays of the same dtype, signed zeros included, any NaN equal to any NaN."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    if expected.dtype.kind == "f":
        assert (np.signbit(got) == np.signbit(expected))[~np.isnan(expected)].all()


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def nthreads(request):
    old = blzarr.set_nthreads(request.param)
    yield request.param
    blzarr.set_nthreads(old)


@pytest.fixture
def kernel_calls(monkeypatch):
    """How many times the C kernel ran (to check that the tests reach it); the planner off (statistics
    would take its place wherever they know the answer)."""
    monkeypatch.setattr(planner, "ENABLED", False)
    calls = []
    work = exprkernel._work

    def counted(*args, **kwargs):
        calls.append(args[1])
        return work(*args, **kwargs)
    monkeypatch.setattr(exprkernel, "_work", counted)
    return calls


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), chunklen=st.sampled_from([1, 7, 64, 129, 300]),
       extra=st.sampled_from([-1, 0, 1, 5]), nchunks=st.sampled_from([1, 2, 5]), special=st.booleans(),
       raw=st.booleans(), q=SCALARS, sum_expr=arithmetic(), count_expr=predicate(),
       vm=st.sampled_from(["numexpr", "python"]))
def test_lazy_sum_and_count_equal_numpy(nthreads, kernel_calls, seed, chunklen, extra, nchunks, special,
                                        raw, q, sum_expr, count_expr, vm):
    kernel_calls.clear()
    if not any(k in sum_expr for k in "abc"):
        sum_expr = f"({sum_expr} * a)"          # a lazy expression names an array
    if not any(k in count_expr for k in "abc"):
        count_expr = "(a > q)"                  # (Python's ~ of a bool scalar is an int)
    n = max(1, chunklen * nchunks + extra)
    env = {k: make_floats(n, seed + i, special) for i, k in enumerate("abc")}
    cp = blzarr.cparams(clevel=0 if raw else 5)
    ops = {k: blzarr.carray(v, chunklen=chunklen, cparams=cp) for k, v in env.items()}
    ops["q"] = q
    env["q"] = np.asarray(q)[()]       # a NumPy scalar for the reference: ~ of its comparisons is a bool
    value = numpy_value(sum_expr, env)
    e = blzarr.lazyexpr(sum_expr, user_dict=ops, vm=vm, blen=chunklen)
    total = blockwise_sum(value, chunklen)
    same_number(e.sum(), total)
    with np.errstate(all="ignore"):
        same_number(e.mean(), np.true_divide(total, n, dtype=total.dtype))
    mask = numpy_value(count_expr, env)
    c = blzarr.lazyexpr(count_expr, user_dict=ops, vm=vm, blen=chunklen)
    assert c.count_nonzero() == np.count_nonzero(mask)
    same_number(c.sum(), np.sum(mask))
    assert c.any() == bool(np.any(mask)) and c.all() == bool(np.all(mask))
    same_values(e[:], value)
    same_values(c[:], mask)
    same_values(blzarr.eval(sum_expr, user_dict=ops, vm=vm, blen=chunklen, out_flavor="numpy"), value)
    same_values(blzarr.eval(count_expr, user_dict=ops, vm=vm, blen=chunklen, out_flavor="numpy"), mask)
    arrays = {k: ops[k] for k in "abc"}
    sum_ok = exprkernel.prepare(sum_expr, arrays, {"q": q}, chunklen) is not None
    count_ok = exprkernel.prepare(count_expr, arrays, {"q": q}, chunklen) is not None
    assert kernel_calls.count("sum") == 2 * sum_ok and kernel_calls.count("count") == 4 * count_ok
    assert kernel_calls.count("values") == 2 * (sum_ok + count_ok)


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), chunklen=st.sampled_from([1, 7, 64, 300]),
       extra=st.sampled_from([-1, 0, 3]), nchunks=st.sampled_from([1, 3]), special=st.booleans(),
       raw=st.booleans(), q=SCALARS, expression=predicate(),
       outcols=st.sampled_from([None, ["b", "nrow__"], ["i", "s", "a"], ["f", "g"]]))
def test_fetchwhere_equals_numpy(nthreads, kernel_calls, monkeypatch, seed, chunklen, extra, nchunks, special,
                                 raw, q, expression, outcols):
    monkeypatch.setattr(rules, "MIN_BLEN", 1)
    kernel_calls.clear()
    n = max(1, chunklen * nchunks + extra)
    rng = np.random.default_rng(seed)
    env = {k: make_floats(n, seed + i, special) for i, k in enumerate("abc")}
    cols = dict(env, i=rng.integers(-99, 99, n), s=rng.integers(0, 9, (n, 3)).astype("u1").view("S3")[:, 0],
                f=rng.uniform(0, 1, n).astype("f4"), g=rng.random(n) < 0.5)
    cp = blzarr.cparams(clevel=0 if raw else 5)
    t = blzarr.ctable([blzarr.carray(v, chunklen=chunklen, cparams=cp) for v in cols.values()],
                      names=list(cols))
    env["q"] = np.asarray(q)[()]
    mask = np.broadcast_to(numpy_value(expression, env), (n,))      # a predicate of scalars holds for all rows or none
    pos = np.flatnonzero(mask)
    names = list(cols) if outcols is None else outcols
    expected = np.empty(len(pos), dtype=[(k, "i8" if k == "nrow__" else cols[k].dtype) for k in names])
    for k in names:
        expected[k] = pos if k == "nrow__" else cols[k][pos]
    got = t.fetchwhere(expression, user_dict={"q": q}, outcols=outcols, out_flavor="numpy")
    assert_same(got, expected)
    if exprkernel.prepare(expression, {k: t.cols[k] for k in "abc"}, {"q": q}, chunklen) is not None:
        assert kernel_calls.count("select") == 1


def test_kernel_on_and_off_agree_on_large_data(nthreads):
    """Bit for bit the general path's results, over chunks of the default size (many windows, a
    pairwise tree of many leaves, a short last chunk)."""
    rng = np.random.default_rng(5)
    n = 3 * 65536 + 1234
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    x[rng.random(n) < 0.001] = np.nan
    a, b = blzarr.carray(x, chunklen=65536), blzarr.carray(y, chunklen=65536)
    t = blzarr.ctable([a, b], names=["a", "b"])
    results = []
    for on in (True, False):
        exprkernel.ENABLED = on
        try:
            results.append((blzarr.lazyexpr("a * b - 1.5").sum(), blzarr.lazyexpr("(a > 0.1) & (b < 0)").count_nonzero(),
                            blzarr.lazyexpr("a * (b + 2)", user_dict={"a": a, "b": b}).sum(),
                            t.fetchwhere("(a > 0.1) & (b < 0)", out_flavor="numpy")))
        finally:
            exprkernel.ENABLED = True
    (s1, c1, n1, f1), (s2, c2, n2, f2) = results
    same_number(s1, s2)
    assert np.isnan(s1)
    same_number(n1, n2)
    assert c1 == c2 == np.count_nonzero((x > 0.1) & (y < 0))
    assert_same(f1, f2)


def test_what_the_kernel_compiles():
    a = blzarr.carray(np.arange(10.0), chunklen=5)
    arrays = {"a": a, "b": a}
    for expr in ("a", "a * b", "-a / (b - 1)", "+a - -2", "(a > 1) & ~(b <= q) | (a == -q) ^ (a != 2.5)",
                 "q < a", "(-q) * a", "a >= b"):
        assert exprkernel.prepare(expr, arrays, {"q": 3}, 5) is not None, expr


def test_what_the_kernel_leaves_to_the_general_path():
    a = blzarr.carray(np.arange(10.0), chunklen=5)
    i = blzarr.carray(np.arange(10), chunklen=5)
    arrays = {"a": a, "i": i, "x": np.arange(10.0)}
    for expr in ("a * x", "sqrt(a)", "a ** 2", "a < 3 < 5", "1 + 2", "a & a", "~a", "-(a > 1)", "a * True",
                 "(a > 1) + (a > 2)", "i // 2", "i ** 2"):
        assert exprkernel.prepare(expr, arrays, {"True": True}, 5) is None, expr
    for expr in ("i * 2", "(a > 1) + 1"):                              # int64 arithmetic, as NumPy's
        assert exprkernel.prepare(expr, arrays, {}, 5) is not None, expr
    assert exprkernel.prepare("a * 2", arrays, {}, 4) is None          # a block length not the chunk's
    assert exprkernel.prepare("a * 2", arrays, {}, 5) is not None
    assert exprkernel.prepare("a * q", arrays, {"q": 2 ** 60}, 5) is None   # not exact as a float64
    assert exprkernel.prepare("a * q", arrays, {"q": np.float32(0.5)}, 5) is not None


def test_malformed_programs_are_refused():
    a = blzarr.carray(np.arange(10.0), chunklen=5)
    chunks = [a.resident_chunks()[0]]
    ok = np.array([[_exprkernel.EXPR_OPCODES["mul"], 1, 0, 0]], np.int32)
    consts = np.zeros(0)
    w = _exprkernel.ExprChunks(chunks, ok, consts, 2, 1, "sum", 5)
    w.run()
    w.check()
    assert w.values.tolist() == [30.0, 255.0]
    for prog, nregs, result, mode in ((np.array([[99, 1, 0, 0]], np.int32), 2, 1, "sum"),
                                      (np.array([[0, 0, 0, 0]], np.int32), 2, 1, "sum"),   # writes an operand
                                      (np.array([[0, 1, 0, 5]], np.int32), 2, 1, "sum"),
                                      (np.array([[0, 1, 0, -1]], np.int32), 2, 1, "sum"),  # a binary op, one operand
                                      (ok, 2, 2, "sum"), (ok, 2, 1, "mean"), (ok, 1, 0, "sum")):
        with pytest.raises(ValueError):
            _exprkernel.ExprChunks(chunks, prog, consts, nregs, result, mode, 5)
    with pytest.raises(ValueError):
        _exprkernel.ExprChunks(chunks, ok, consts, 2, 1, "sum", 4)             # chunks of another length
    with pytest.raises(ValueError):
        _exprkernel.ExprChunks(chunks, ok, consts, 2, 1, "select", 5, [("operand", 3)])
    with pytest.raises(ValueError):
        _exprkernel.ExprChunks(chunks, ok, consts, 2, 1, "select", 5, [("chunks", (chunks[0][:1], 8))])
    with pytest.raises(blzarr.ChunkError):
        _exprkernel.ExprChunks([[chunks[0][0][:-1], chunks[0][1]]], ok, consts, 2, 1, "sum", 5)
    # the rows after the full chunks: one more item, read in place
    w = _exprkernel.ExprChunks(chunks, ok, consts, 2, 1, "sum", 5, (), 2, None, [np.array([3.0, 4.0])])
    w.run()
    w.check()
    assert w.values.tolist() == [30.0, 255.0, 25.0]
    w = _exprkernel.ExprChunks([[]], ok, consts, 2, 1, "sum", 5, (), 1, None, [np.array([3.0])])
    w.run()
    assert w.values.tolist() == [9.0]
    for tails in ([np.array([1, 2])], [np.arange(4.0)[::2]], [np.zeros(0)], [np.zeros(1), np.zeros(1)]):
        with pytest.raises(ValueError):
            _exprkernel.ExprChunks(chunks, ok, consts, 2, 1, "sum", 5, (), 1, None, tails)
    with pytest.raises(ValueError):
        _exprkernel.ExprChunks([[]], ok, consts, 2, 1, "sum", 5)                 # nothing to do
    sel = np.array([[_exprkernel.EXPR_OPCODES["gt"], 1, 0, 0]], np.int32)
    with pytest.raises(ValueError):                                        # a column without its tail
        _exprkernel.ExprChunks(chunks, sel, consts, 2, 1, "select", 5, [("chunks", (chunks[0], 8))], 1, None,
                          [np.array([3.0])])
    w = _exprkernel.ExprChunks(chunks, sel, consts, 2, 1, "select", 5, [("operand", 0)])
    w.run()
    w.check()
    with pytest.raises(ValueError):
        w.fill(0, np.zeros(3), 0, 5)                                        # chunks outside
    with pytest.raises(ValueError):
        w.fill(0, np.zeros(3))                                              # not the rows found
    with pytest.raises(ValueError):
        w.fill(1, np.zeros(0))                                              # no such output


def test_statistics_keep_their_path(monkeypatch):
    """Where the per-chunk statistics know blocks (a range of a sorted column), the planner's path
    runs, not the kernel (which would decode every chunk); the values are the same."""
    calls = []
    work = exprkernel._work
    monkeypatch.setattr(exprkernel, "_work", lambda *a, **k: (calls.append(a[1]), work(*a, **k))[1])
    x = np.arange(50_000.0)
    ts = blzarr.carray(x, chunklen=5_000)
    e = blzarr.lazyexpr("(ts >= 12_000) & (ts < 21_000.5)")
    assert e.count_nonzero() == 9_001 and e.any() and not e.all()
    assert_same(e[:], (x >= 12_000) & (x < 21_000.5))
    assert_same(blzarr.eval("(ts >= 12_000) & (ts < 21_000.5)", out_flavor="numpy"), (x >= 12_000) & (x < 21_000.5))
    t = blzarr.ctable([ts], names=["ts"])
    assert_same(t.fetchwhere("(ts >= 12_000) & (ts < 21_000.5)", out_flavor="numpy")["ts"], x[12_000:21_001])
    assert calls == []
    assert blzarr.lazyexpr("ts * 2").sum() == np.sum(x * 2) and calls == ["sum"]
