"""The fused expression kernel over operands of every numeric dtype (integers, float32, bool, and
their mixes): each operation computed in the dtype NumPy's type promotion gives it (float64, float32,
or an integer dtype wrapped as NumPy wraps it), NumPy's values and sums bit for bit; what it does not
compute that way (uint64 arithmetic, integer division, bool arithmetic) stays on the general path,
with NumPy's answer too."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from helpers import assert_same, examples

import blzarr
from blzarr.query import rules
from blzarr import _exprkernel
from blzarr.query import exprkernel
from test_exprkernel import (blockwise_sum, kernel_calls, nthreads,  # noqa: F401,F811 (fixtures)
                             same_number, same_values)

# a drawn expression may divide by zero: blzarr's vms warn as NumPy itself does
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                                        "ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")


def numpy_value(expression, env):
    """NumPy's value of `expression`; TypeError or OverflowError where NumPy refuses it (the negation
    of booleans, a Python int out of an integer dtype's range)."""
    with np.errstate(all="ignore"):
        return np.asarray(eval(expression, {}, dict(env)))


KINDS = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8", "b1"]


def make_values(kind, n, rng, extreme):
    """`n` values of dtype `kind`: small ones, and with `extreme` the dtype's limits and (64-bit
    integers) values past 2**53, which float64 rounds."""
    dt = np.dtype(kind)
    if dt.kind == "b":
        return rng.random(n) < 0.5
    if dt.kind == "f":
        x = np.round(rng.uniform(-4, 4, n), 2).astype(dt)
        if extreme:
            pick = rng.random(n) < 0.1
            x[pick] = rng.choice(np.array([np.nan, np.inf, -0.0, 0.0, 3.4e38], dt), int(pick.sum()))
        return x
    info = np.iinfo(dt)
    x = rng.integers(max(info.min, -50), 50, n).astype(dt)
    if extreme:
        special = [info.min, info.max, 0, 1]
        if dt.itemsize == 8:
            special += [2 ** 53 + 1, 2 ** 62 + 3]
        pick = rng.random(n) < 0.2
        x[pick] = rng.choice(np.array(special, dt), int(pick.sum()))
    return x


@st.composite
def arithmetic(draw, depth=2):
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(["a", "b", "c", "a", "b"]))
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return f"(-{draw(arithmetic(depth - 1))})"
    if kind == 1:
        return f"({draw(arithmetic(depth - 1))} {draw(st.sampled_from(['*', '+', '/']))} " \
               f"{draw(st.sampled_from(['2', '0.5', '-1.25', 'q']))})"
    return f"({draw(arithmetic(depth - 1))} {draw(st.sampled_from(['+', '-', '*', '/']))} {draw(arithmetic(depth - 1))})"


@st.composite
def predicate(draw, depth=1):
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        x, y = draw(arithmetic(1)), draw(st.sampled_from(["a", "b", "c", "0.5", "3", "q"]))
        return f"({x} {draw(st.sampled_from(['<', '<=', '>', '>=', '==', '!=']))} {y})"
    if draw(st.booleans()):
        return f"(~{draw(predicate(depth - 1))})"
    return f"({draw(predicate(depth - 1))} {draw(st.sampled_from(['&', '|', '^']))} {draw(predicate(depth - 1))})"


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), ka=st.sampled_from(KINDS), kb=st.sampled_from(KINDS),
       chunklen=st.sampled_from([1, 7, 64, 300]), extra=st.sampled_from([-1, 0, 5]),
       nchunks=st.sampled_from([1, 3]), raw=st.booleans(), extreme=st.booleans(),
       q=st.sampled_from([3, -2, 0.5, np.float32(0.25), np.int64(7)]),
       sum_expr=arithmetic(), count_expr=predicate())
def test_mixed_dtypes_equal_numpy(nthreads, kernel_calls, seed, ka, kb, chunklen, extra, nchunks, raw, extreme,
                                  q, sum_expr, count_expr):
    kernel_calls.clear()
    n = max(1, chunklen * nchunks + extra)
    rng = np.random.default_rng(seed)
    env = {"a": make_values(ka, n, rng, extreme), "b": make_values(kb, n, rng, extreme),
           "c": make_values("f8", n, rng, extreme)}
    cp = blzarr.cparams(clevel=0 if raw else 5)
    ops = {k: blzarr.carray(v, chunklen=chunklen, cparams=cp) for k, v in env.items()}
    ops["q"] = env["q"] = q
    arrays = {k: ops[k] for k in "abc"}
    for expression in (sum_expr, count_expr):
        try:
            value = numpy_value(expression, env)
        except (TypeError, OverflowError):          # NumPy refuses it
            continue
        ok = exprkernel.prepare(expression, arrays, {"q": q}, chunklen) is not None
        kernel_calls.clear()
        e = blzarr.lazyexpr(expression, user_dict=ops, vm="python", blen=chunklen)
        same_values(e[:], value)
        same_values(blzarr.eval(expression, user_dict=ops, vm="python", blen=chunklen, out_flavor="numpy"), value)
        if value.dtype.kind in "fiu":
            same_number(e.sum(), blockwise_sum(value, chunklen))
            same_number(blzarr.eval(f"sum({expression})", user_dict=ops, vm="python", blen=chunklen),
                        blockwise_sum(value, chunklen))
        elif value.dtype == np.bool_:
            assert e.count_nonzero() == np.count_nonzero(value)
            same_number(e.sum(), np.sum(value))
        assert bool(kernel_calls) == ok, (expression, kernel_calls)
        if ok:
            assert kernel_calls.count("values") == 2
            # (a boolean's sum is its count)
            assert kernel_calls.count("sum") + kernel_calls.count("count") == 2


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), ka=st.sampled_from(KINDS), chunklen=st.sampled_from([1, 7, 300]),
       extra=st.sampled_from([-1, 0, 3]), nchunks=st.sampled_from([1, 3]), raw=st.booleans(),
       extreme=st.booleans(), expression=predicate(),
       outcols=st.sampled_from([None, ["a", "nrow__"], ["c", "a"], ["b", "g"]]))
def test_fetchwhere_over_mixed_dtypes(nthreads, kernel_calls, monkeypatch, seed, ka, chunklen, extra, nchunks, raw,
                                      extreme, expression, outcols):
    """The selected rows of a column that is also an operand of another dtype are the column's own
    values (the kernel converts its operand to float64 to compute, not to output)."""
    monkeypatch.setattr(rules, "MIN_BLEN", 1)
    n = max(1, chunklen * nchunks + extra)
    rng = np.random.default_rng(seed)
    cols = {"a": make_values(ka, n, rng, extreme), "b": make_values("i8", n, rng, extreme),
            "c": make_values("f8", n, rng, extreme), "g": make_values("b1", n, rng, False)}
    env = dict(cols, q=0.5)
    try:
        mask = np.broadcast_to(numpy_value(expression, env), (n,))
    except (TypeError, OverflowError):
        return
    cp = blzarr.cparams(clevel=0 if raw else 5)
    t = blzarr.ctable([blzarr.carray(v, chunklen=chunklen, cparams=cp) for v in cols.values()], names=list(cols))
    kernel_calls.clear()
    pos = np.flatnonzero(mask)
    names = list(cols) if outcols is None else outcols
    expected = np.empty(len(pos), dtype=[(k, "i8" if k == "nrow__" else cols[k].dtype) for k in names])
    for k in names:
        expected[k] = pos if k == "nrow__" else cols[k][pos]
    # (the python vm: numexpr computes small integers in int32, where NumPy wraps them)
    got = t.fetchwhere(expression, user_dict={"q": 0.5}, outcols=outcols, out_flavor="numpy", vm="python")
    assert_same(got, expected)
    ok = exprkernel.prepare(expression, {k: t.cols[k] for k in "abc"}, {"q": 0.5}, chunklen) is not None
    assert kernel_calls.count("select") == ok


@pytest.mark.parametrize("kb", KINDS)
@pytest.mark.parametrize("ka", KINDS)
def test_which_mixes_the_kernel_compiles(ka, kb):
    """An arithmetic operation compiles where NumPy computes it in float64, float32 or an integer dtype
    other than uint64; a comparison where NumPy compares in float64 and one side is a float, or in
    float32, or in an integer dtype other than uint64."""
    a = blzarr.carray(np.zeros(10, ka), chunklen=5)
    b = blzarr.carray(np.zeros(10, kb), chunklen=5)
    c = blzarr.carray(np.zeros(10), chunklen=5)
    arrays = {"a": a, "b": b, "c": c}
    ea, eb = np.zeros(0, ka), np.zeros(0, kb)
    typed = ("f8", "f4", "i1", "i2", "i4", "i8", "u1", "u2", "u4")
    for op, ufunc in (("+", np.add), ("*", np.multiply), ("/", np.true_divide), ("-", np.subtract)):
        try:
            computed = ufunc(ea, eb).dtype.str[1:] in typed
        except TypeError:
            computed = False
        assert (exprkernel.prepare(f"a {op} b", arrays, {}, 5) is not None) == computed, (ka, op, kb)
        # with a float64 operand it is float64, whatever the other
        assert exprkernel.prepare(f"(a {op} c) * b", arrays, {}, 5) is not None
    rt = np.result_type(ea, eb)
    compares = ((rt == np.float64 and "f" in (ea.dtype.kind, eb.dtype.kind))
                or rt == np.float32 or (rt.kind in "iu" and rt != np.uint64))
    assert (exprkernel.prepare("(a > b) | (c < 0)", arrays, {}, 5) is not None) == compares, (ka, kb)
    assert exprkernel.prepare("a > c", arrays, {}, 5) is not None
    # a float Python scalar: float64 arithmetic for integers and booleans, float32 for float32
    assert exprkernel.prepare("a * 0.5", arrays, {}, 5) is not None
    # an int one: the operand's own arithmetic (int64 for a bool), but not uint64's
    assert (exprkernel.prepare("a * 2", arrays, {}, 5) is not None) == (ka != "u8")
    # compared with an int the dtype holds, in its dtype (a uint64 column: float64, under 2**53)
    assert exprkernel.prepare("a > 2", arrays, {}, 5) is not None
    assert (exprkernel.prepare("a > 0.1", arrays, {}, 5) is not None)
    assert (exprkernel.prepare("a > 300", arrays, {}, 5) is not None) == (ka not in ("i1", "u1"))
    if ka in ("i8", "u8"):      # 2**53: float64 cannot tell 2**53 + 1 from it; int64 can
        assert (exprkernel.prepare("a > 9007199254740992", arrays, {}, 5) is None) == (ka == "u8")
    assert (exprkernel.prepare("-a + c", arrays, {}, 5) is not None) == (ka not in ("b1", "u8"))


def test_what_stays_on_the_general_path():
    i = blzarr.carray(np.arange(10), chunklen=5)
    f = blzarr.carray(np.arange(10, dtype="f4"), chunklen=5)
    x = blzarr.carray(np.arange(10.0), chunklen=5)
    u = blzarr.carray(np.arange(10, dtype="u8"), chunklen=5)
    big = blzarr.carray(np.arange(10, dtype=">i8"), chunklen=5)
    arrays = {"i": i, "f": f, "x": x, "big": big, "u": u}
    for expr in ("i // 2", "(i > x) & i", "big * x", "f < 1e39", "i % 2 * x", "big > 3", "u * u", "u + 1",
                 "-u", "u > u", "i > u", "i ** 2", "i + 9223372036854775808", "f * 1e39", "(i > 1) - (i > 2)"):
        assert exprkernel.prepare(expr, arrays, {}, 5) is None, expr
    for expr in ("i * x", "i / 2", "i * 1.5 + f", "f * x", "i / i", "(i > x) & (f <= 0.5 * x)", "i < 2.5",
                 "+i * x", "f * i", "f < 0.5", "f == f", "i > 3", "i != -9007199254740991", "i", "+i", "i * i",
                 "f * f", "f * 2.0", "i > 9007199254740992", "i == i", "-i", "u > 3", "u / 2", "i + 4611686018427387904"):
        assert exprkernel.prepare(expr, arrays, {}, 5) is not None, expr


@pytest.mark.parametrize("ka, kb, expression", [
    ("i4", "f4", "a * b"), ("f4", "i8", "a + b"), ("f4", "f4", "a * 2.5"), ("u1", "u1", "a * b"),
    ("i1", "i1", "a + b"), ("u4", "u4", "a * b"), ("i4", "i4", "abs(a) + b"), ("b1", "b1", "a + 1")])
def test_numexpr_as_the_vm_gives_numpy_types(nthreads, kernel_calls, ka, kb, expression):
    """With numexpr evaluating the blocks (the default vm), a lazy expression is typed as NumPy types
    it where numexpr would compute in another type (int32 * float32 in float32, int8 + int8 in
    int32), so its values wrap and round as NumPy's; its sum, through the kernel where the kernel
    computes it, equals eval's 'sum(...)' with either vm and any block length."""
    rng = np.random.default_rng(5)
    n = 3 * 64 + 9
    env = {"a": make_values(ka, n, rng, True), "b": make_values(kb, n, rng, True)}
    ops = {k: blzarr.carray(v, chunklen=64) for k, v in env.items()}
    value = numpy_value(expression, env)
    e = blzarr.lazyexpr(expression, user_dict=ops, vm="numexpr", blen=64)
    same_values(e[:], value)
    kernel_calls.clear()
    same_number(e.sum(), blockwise_sum(value, 64))
    assert bool(kernel_calls) == (exprkernel.prepare(expression, ops, {}, 64) is not None)
    if ka == "i4" and kb == "f4":
        assert kernel_calls == ["sum"]
    for blen, vm in itertools.product((None, 64, 7), ("numexpr", "python")):
        # (the kernel takes whole chunks only: not blocks of 7)
        total = blzarr.eval(f"sum({expression})", user_dict=ops, vm=vm, blen=blen)
        same_number(total, blockwise_sum(value, 64 if blen is None else blen))


def test_int64_rounding_matches_numpy():
    """Integers past 2**53 are rounded to float64 as NumPy rounds them, in sums, comparisons and
    values, chunk and tail alike."""
    v = np.array([2 ** 53 + 1, 2 ** 63 - 1, -(2 ** 63), 2 ** 53 + 3, 7] * 40, np.int64)
    u = np.array([2 ** 64 - 1, 2 ** 53 + 1, 0, 1, 2 ** 63 + 1] * 40, np.uint64)
    p = np.linspace(-1, 1, len(v))
    ops = {"v": blzarr.carray(v, chunklen=64), "u": blzarr.carray(u, chunklen=64), "p": blzarr.carray(p, chunklen=64)}
    arrays = {k: ops[k] for k in "vup"}
    for expr in ("v * p", "u * p + v", "u - v", "v / 3", "u / v"):
        assert exprkernel.prepare(expr, arrays, {}, 64) is not None, expr
        with np.errstate(all="ignore"):
            ref = eval(expr, {}, {"v": v, "u": u, "p": p})
        e = blzarr.lazyexpr(expr, user_dict=ops, vm="python", blen=64)   # (numexpr has no uint64)
        same_values(e[:], ref)
        same_number(e.sum(), blockwise_sum(ref, 64))
    for expr in ("(v * 1.0) == (u * 1.0)", "v < p * 1e19", "u >= v * 1.0"):
        ref = eval(expr, {}, {"v": v, "u": u, "p": p})
        assert exprkernel.prepare(expr, arrays, {}, 64) is not None, expr
        assert blzarr.lazyexpr(expr, user_dict=ops, vm="python", blen=64).count_nonzero() == np.count_nonzero(ref)


@pytest.mark.parametrize("vm", ["numexpr", "python"])
def test_price_times_volume(nthreads, kernel_calls, vm):
    """The case the kernel was widened for: a float64 price times an int64 volume, summed, over
    chunks of the default length and a short last chunk, equal to the kernel-off path's bits."""
    rng = np.random.default_rng(11)
    n = 3 * 32768 + 777
    px, vol = np.round(rng.uniform(1, 500, n), 2), rng.integers(1, 10_000, n)
    ops = {"px": blzarr.carray(px), "vol": blzarr.carray(vol)}
    assert ops["px"].chunklen == ops["vol"].chunklen
    results = []
    for on in (True, False):
        exprkernel.ENABLED = on
        try:
            results.append((blzarr.lazyexpr("px * vol", user_dict=ops, vm=vm).sum(),
                            blzarr.eval("sum(px * vol)", user_dict=ops, vm=vm),
                            blzarr.lazyexpr("px * vol > 1e6", user_dict=ops, vm=vm).count_nonzero()))
        finally:
            exprkernel.ENABLED = True
    assert kernel_calls.count("sum") == 2 and kernel_calls.count("count") == 1
    (s1, t1, c1), (s2, t2, c2) = results
    same_number(s1, s2)
    assert np.isclose(s1, np.sum(px * vol), rtol=1e-12)
    assert np.isclose(t1, np.sum(px * vol), rtol=1e-12) and np.isclose(t2, np.sum(px * vol), rtol=1e-12)
    if vm == "python":          # (the same blocks' pairwise sums; numexpr's own sum adds in another order)
        same_number(t1, t2)
    assert c1 == c2 == np.count_nonzero(px * vol > 1e6)


def test_kinds_are_checked():
    x = blzarr.carray(np.arange(10), chunklen=5)
    chunks = [x.resident_chunks()[0]]
    prog = np.array([[_exprkernel.EXPR_OPCODES["mul"], 1, 0, 0]], np.int32)
    w = _exprkernel.ExprChunks(chunks, prog, np.zeros(0), 2, 1, "sum", 5, kinds=["i8"])
    w.run()
    w.check()
    assert w.values.tolist() == [30.0, 255.0]
    for kinds in (["i4"], ["u2"], ["x"], ["i8", "i8"]):          # chunks of 40 bytes read as another size
        with pytest.raises(ValueError):
            _exprkernel.ExprChunks(chunks, prog, np.zeros(0), 2, 1, "sum", 5, kinds=kinds)
    with pytest.raises(ValueError):                                # a tail of another dtype
        _exprkernel.ExprChunks(chunks, prog, np.zeros(0), 2, 1, "sum", 5, (), 1, None, [np.array([1.0])],
                               kinds=["i8"])
    sel = np.array([[_exprkernel.EXPR_OPCODES["gt"], 1, 0, 0]], np.int32)
    with pytest.raises(ValueError):                                # its register is not the column's values
        _exprkernel.ExprChunks(chunks, sel, np.zeros(0), 2, 1, "select", 5, [("operand", 0)], kinds=["i8"])


@pytest.mark.parametrize("kind", ["i1", "i2", "i4", "u1", "u2", "u4", "b1", "f4", "i8", "u8"])
def test_comparisons_with_constants(nthreads, kernel_calls, kind):
    """A column compared with constants at the edges of what its dtype or float32 holds: NumPy's
    answer, whether the kernel (the constant converted as NumPy converts it) or the general path
    computes it."""
    rng = np.random.default_rng(3)
    x = make_values(kind, 700, rng, True)
    if np.dtype(kind).kind == "f":
        x[:20] = [0.1, 16777216, 16777218, -0.0, 3.4e38, np.inf, -np.inf, np.nan, 1e-45, 0.5] * 2
    consts = [0, 1, -1, 0.1, 0.5, 127, 128, -129, 255, 256, 32767, 65536, 2 ** 31 - 1, 2 ** 31, -(2 ** 31) - 1,
              2 ** 32, 16777217, 1e39, float("nan"), float("inf"), -2.5, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 1,
              -(2 ** 53) + 1, 2 ** 63 - 1]
    if kind in ("i8", "u8"):
        # values next to 2**53, where float64 starts to round, and the extremes
        near = np.array([2 ** 53 - 1, 2 ** 53, 2 ** 53 + 1, 2 ** 53 + 2, 2 ** 63 - 1], np.uint64).astype(kind)
        x[:5] = near
        x[5:10] = x[:5] if kind == "u8" else -x[:5]
    ops = {"x": blzarr.carray(x, chunklen=64), "y": blzarr.carray(x[::-1].copy(), chunklen=64)}
    compiled = 0
    for q in consts:
        for op in ("<", "<=", ">", ">=", "==", "!="):
            expression = f"x {op} q"
            try:
                with np.errstate(all="ignore"):
                    value = np.asarray(eval(expression, {}, {"x": x, "q": q}))
            except (TypeError, OverflowError):
                continue
            ok = exprkernel.prepare(expression, {"x": ops["x"]}, {"q": q}, 64) is not None
            compiled += ok and type(q) is int
            kernel_calls.clear()
            with np.errstate(all="ignore"):
                e = blzarr.lazyexpr(expression, user_dict=dict(ops, q=q), vm="python", blen=64)
                same_values(e[:], value)
                assert e.count_nonzero() == np.count_nonzero(value), (expression, q)
            assert bool(kernel_calls) == ok
    assert compiled > 0
    # two columns of the dtype: compared in it, or in float64 (float64 holds their values)
    value = x < x[::-1]
    ok = exprkernel.prepare("x < y", {"x": ops["x"], "y": ops["y"]}, {}, 64) is not None
    assert ok == (kind not in ("u8", "b1"))
    assert blzarr.lazyexpr("x < y", user_dict=ops, vm="python", blen=64).count_nonzero() == np.count_nonzero(value)
