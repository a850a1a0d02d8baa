"""The fused kernel's typed registers: float32 arithmetic in float32, integer arithmetic in int64 wrapped
to the operation's dtype after every step, integer sums in int64 / uint64, float32 sums pairwise in
float32, and NumPy 2's promotion of mixes and Python scalars (NEP 50).  Every value, sum and count is
compared with NumPy's bit for bit, at the edges of each dtype (its minimum and maximum, wrap-around,
division by zero, NaN)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from helpers import examples

import blzarr
from blzarr import _exprkernel
from blzarr.query import exprkernel
from test_exprkernel import arithmetic, blockwise_sum, kernel_calls, nthreads, same_number, same_values  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                                        "ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")

TYPED = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "f4", "b1"]


def values_of(kind, n, rng):
    """`n` values of `kind`: small ones mixed with the dtype's edges (min, max, 0, -1; NaN, infinities,
    signed zeros and float32's largest for float32)."""
    dt = np.dtype(kind)
    if dt.kind == "b":
        return rng.random(n) < 0.5
    if dt.kind == "f":
        x = np.round(rng.uniform(-4, 4, n), 2).astype(dt)
        edges = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3.4e38, -3.4e38, 1e-45], dt)
    else:
        info = np.iinfo(dt)
        x = rng.integers(max(info.min, -9), 10, n).astype(dt)
        edges = np.array([info.min, info.max, 0, 1, info.max - 1] + ([-1, info.min + 1] if dt.kind == "i" else []), dt)
    pick = rng.random(n) < 0.25
    x[pick] = rng.choice(edges, int(pick.sum()))
    return x


def typed_expression():
    return arithmetic(leaves=("a", "b", "a", "b", "q"), ops=("+", "-", "*", "/", "*", "+"), kinds=4)


def check(expression, env, chunklen, ops, calls):
    """The expression's values, sum and (for booleans) count from blzarr equal NumPy's, and the kernel
    ran where it compiles; returns whether it compiled (None where NumPy refuses the expression)."""
    try:
        with np.errstate(all="ignore"):
            value = np.asarray(eval(expression, {}, dict(env)))
    except (TypeError, OverflowError):
        return None
    arrays = {k: v for k, v in ops.items() if k in "ab"}
    ok = exprkernel.prepare(expression, arrays, {"q": env["q"]}, chunklen) is not None
    calls.clear()
    e = blzarr.lazyexpr(expression, user_dict=ops, vm="python", blen=chunklen)
    same_values(e[:], value)
    if value.dtype == np.bool_:
        assert e.count_nonzero() == np.count_nonzero(value)
    else:
        same_number(e.sum(), blockwise_sum(value, chunklen))
        same_number(blzarr.eval(f"sum({expression})", user_dict=ops, vm="python", blen=chunklen),
                    blockwise_sum(value, chunklen))
    assert bool(calls) == ok, (expression, calls)
    return ok


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), ka=st.sampled_from(TYPED), kb=st.sampled_from(TYPED),
       chunklen=st.sampled_from([1, 7, 64, 300]), extra=st.sampled_from([-1, 0, 5]),
       nchunks=st.sampled_from([1, 3]), raw=st.booleans(),
       q=st.sampled_from([3, -2, 200, 70000, 2 ** 40, 0.5, -1.25, 1e39, np.float32(0.25), np.int8(-3),
                          np.int32(7), np.uint16(9), np.float64(2.5)]),
       expression=typed_expression(), cmp=st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
def test_typed_arithmetic_equals_numpy(nthreads, kernel_calls, seed, ka, kb, chunklen, extra, nchunks, raw, q,
                                       expression, cmp):
    n = max(1, chunklen * nchunks + extra)
    rng = np.random.default_rng(seed)
    env = {"a": values_of(ka, n, rng), "b": values_of(kb, n, rng), "q": q}
    cp = blzarr.cparams(clevel=0 if raw else 5)
    ops = {k: blzarr.carray(env[k], chunklen=chunklen, cparams=cp) for k in "ab"}
    ops["q"] = q
    if "a" not in expression and "b" not in expression:
        expression = f"({expression} + a)"
    check(expression, env, chunklen, ops, kernel_calls)
    check(f"({expression}) {cmp} b", env, chunklen, ops, kernel_calls)
    check(f"(a {cmp} q) & ~(b {cmp} a)", env, chunklen, ops, kernel_calls)


@pytest.mark.parametrize("kind", ["i1", "i2", "i4", "i8", "u1", "u2", "u4"])
def test_integers_wrap_as_numpy(nthreads, kernel_calls, kind):
    """Each operation wraps in the operation's dtype (int32 + int32 in int32), the sum is NumPy's int64
    or uint64 sum; all of it in the kernel."""
    info = np.iinfo(kind)
    x = np.array([info.min, info.max, info.max, 0, 1, info.min + 1, info.max // 2 + 1] * 300, kind)
    y = x[::-1].copy()
    ops = {"x": blzarr.carray(x, chunklen=64), "y": blzarr.carray(y, chunklen=64)}
    for expression in ("x + y", "x - y", "x * y", "x * x * x", "-x", "x + 1", "x * 3 - y", "x - y > x",
                       "x + y == x", "-x < 0", "x / y", "x * 2.5"):
        with np.errstate(all="ignore"):
            value = eval(expression, {}, {"x": x, "y": y})
        kernel_calls.clear()
        e = blzarr.lazyexpr(expression, user_dict=ops, vm="python", blen=64)
        same_values(e[:], value)
        if value.dtype == np.bool_:
            assert e.count_nonzero() == np.count_nonzero(value)
        else:
            with np.errstate(all="ignore"):
                same_number(e.sum(), blockwise_sum(value, 64))
        assert kernel_calls, expression
    # the sum of an int32 column past int32's range: int64, as NumPy's
    if kind == "i4":
        total = blzarr.lazyexpr("x + x", user_dict=ops, vm="python", blen=64).sum()
        assert total.dtype == np.int64 and total == np.sum((x + x).astype(np.int64) * 0 + (x + x))


def test_float32_in_float32(nthreads, kernel_calls):
    """float32 arithmetic and sums in float32 (NumPy's pairwise sum of each block, in float32), NaN,
    infinities and division by zero included; float32 against a Python float is float32, against a
    NumPy float64 or an int32 column float64 (NEP 50)."""
    rng = np.random.default_rng(5)
    c = rng.standard_normal(5000).astype(np.float32)
    c[::97] = 0.0
    c[::101] = np.nan
    c[::103] = np.inf
    i4 = rng.integers(-5, 5, 5000).astype(np.int32)
    i2 = rng.integers(-5, 5, 5000).astype(np.int16)
    ops = {"c": blzarr.carray(c, chunklen=256), "i4": blzarr.carray(i4, chunklen=256),
           "i2": blzarr.carray(i2, chunklen=256)}
    env = {"c": c, "i4": i4, "i2": i2}
    for expression, dtype in (("c * c", "f4"), ("c / c", "f4"), ("1 / c", "f4"), ("c * 1.1 - c / 3", "f4"),
                              ("c * d", "f8"), ("c + i4", "f8"), ("c + i2", "f4"), ("i2 / c", "f4"),
                              ("-c", "f4"), ("c * 3", "f4"), ("c > 0.1", "?"), ("c * c >= i2", "?")):
        scalars = {"d": np.float64(1.1)}
        with np.errstate(all="ignore"):
            value = eval(expression, {}, dict(env, **scalars))
        assert value.dtype == np.dtype(dtype), expression
        kernel_calls.clear()
        e = blzarr.lazyexpr(expression, user_dict=dict(ops, **scalars), vm="python", blen=256)
        same_values(e[:], value)
        if dtype == "?":
            assert e.count_nonzero() == np.count_nonzero(value)
        else:
            same_number(e.sum(), blockwise_sum(value, 256))
            same_number(blzarr.eval(f"sum({expression})", user_dict=dict(ops, **scalars), vm="python", blen=256),
                        blockwise_sum(value, 256))
        assert kernel_calls, expression


def test_constants_numpy_refuses_stay_on_the_general_path(kernel_calls):
    """A Python int the operation's dtype cannot hold: NumPy 2 raises OverflowError; the kernel does not
    compile it (what the general path makes of it is the general path's)."""
    x = np.arange(100, dtype=np.int8)
    ops = {"x": blzarr.carray(x, chunklen=10)}
    for expression in ("x + 300", "x * -129", "x - 1000"):
        assert exprkernel.prepare(expression, ops, {}, 10) is None
        with pytest.raises(OverflowError):
            eval(expression, {}, {"x": x})
    assert exprkernel.prepare("x + 127", ops, {}, 10) is not None
    # comparisons with such an int are NumPy's answer, not an error
    kernel_calls.clear()
    assert blzarr.lazyexpr("x < 300", user_dict=ops, vm="python", blen=10).count_nonzero() == 100


def test_typed_programs_are_checked():
    """ExprChunks refuses a typed program that would read an operand as another kind, or a conversion
    or wrap to a kind it does not have."""
    x = blzarr.carray(np.arange(20, dtype=np.int32), chunklen=10)
    chunks = [x.resident_chunks()[0]]
    op = _exprkernel.EXPR_OPCODES
    kinds = _exprkernel.OPERAND_KINDS
    good = np.array([[op["cvt_i8"], 1, 0, -2 - kinds["i4"]], [op["i8_mul"], 2, 1, 1],
                     [op["wrap"], 3, 2, -2 - kinds["i4"]]], np.int32)
    w = _exprkernel.ExprChunks(chunks, good, np.zeros(0), 4, 3, "sum", 10, kinds=["i4"], raw=True, rkind="i8")
    w.run()
    w.check()
    assert w.values.dtype == np.int64 and w.values.tolist() == [285, 2185]
    bad = [
        [[op["mul"], 1, 0, 0]],                             # an int32 operand read as float64
        [[op["cvt_i8"], 1, 0, -2 - kinds["i8"]]],           # converted from another kind than its own
        [[op["cvt_i8"], 1, 0, 0]],                          # a conversion without its kind
        [[op["cvt_i8"], 1, 0, -2 - 99]],                    # an unknown kind
        [[op["cvt_i8"], 1, 0, -2 - kinds["i4"]], [op["cvt_i8"], 2, 1, -2 - kinds["f8"]]],   # float to int
        [[op["cvt_i8"], 1, 0, -2 - kinds["i4"]], [op["wrap"], 2, 1, -2 - kinds["f4"]]],     # wrap to a float
        [[op["cvt_i8"], 1, 0, -2 - kinds["i4"]], [op["i8_neg"], 2, 1, 1]],                  # unary, two operands
    ]
    for prog in bad:
        with pytest.raises(ValueError):
            _exprkernel.ExprChunks(chunks, np.array(prog, np.int32), np.zeros(0), 3, 2, "sum", 10, kinds=["i4"],
                                   raw=True, rkind="i8")
    with pytest.raises(ValueError):
        _exprkernel.ExprChunks(chunks, good, np.zeros(0), 4, 3, "sum", 10, kinds=["i4"], raw=True, rkind="x")
    with pytest.raises(ValueError):                  # one kind per constant
        _exprkernel.ExprChunks(chunks, good, np.zeros(1), 5, 4, "sum", 10, kinds=["i4"], raw=True, ckinds=[])
    with pytest.raises(ValueError):                  # the values of an int64 result into 3-byte items
        _exprkernel.ExprChunks(chunks, good, np.zeros(0), 4, 3, "values", 10, (), 1, None, None,
                               np.zeros(20, "S3"), kinds=["i4"], raw=True, rkind="i8")
    dest = np.zeros(20, np.int16)
    w = _exprkernel.ExprChunks(chunks, good, np.zeros(0), 4, 3, "values", 10, (), 1, None, None, dest,
                               kinds=["i4"], raw=True, rkind="i8")
    w.run()
    w.check()
    assert dest.tolist() == [v * v for v in range(20)]


def test_float32_sums_over_deep_pairwise_trees(nthreads, kernel_calls):
    """A float32 block's sum over many windows (a pairwise tree several levels deep, leaves across
    windows) is NumPy's float32 sum of the block to the last bit."""
    rng = np.random.default_rng(8)
    c = (rng.standard_normal(3 * 8192 + 1001) * 1000).astype(np.float32)
    ops = {"c": blzarr.carray(c, chunklen=8192)}
    value = c * c - c
    kernel_calls.clear()
    got = blzarr.lazyexpr("c * c - c", user_dict=ops, vm="python", blen=8192).sum()
    assert kernel_calls == ["sum"]
    same_number(got, blockwise_sum(value, 8192))


def test_bool_columns_with_other_true_bytes(nthreads, kernel_calls):
    """A bool column whose true bytes are not all 1 (a view of uint8 data): NumPy reads every non-zero
    byte as true, in logic, negation, counts and arithmetic, and so does the kernel."""
    m = np.frombuffer(bytes([0, 2, 1, 0, 255, 3, 128]) * 300, dtype=bool)
    a = np.arange(len(m), dtype=np.float64) - 3
    ops = {"m": blzarr.carray(m, chunklen=210), "a": blzarr.carray(a, chunklen=210)}
    assert ops["m"][:7].view(np.uint8).tolist() == [0, 2, 1, 0, 255, 3, 128]     # stored as given
    for expression in ("m & (a > 0)", "~m", "m", "m ^ (a > 0)", "(a > 0) | ~m", "m * 3", "a * m", "m > 0"):
        value = eval(expression, {}, {"m": m, "a": a})
        kernel_calls.clear()
        e = blzarr.lazyexpr(expression, user_dict=ops, vm="python", blen=210)
        same_values(e[:], value)
        if value.dtype == np.bool_:
            assert e.count_nonzero() == np.count_nonzero(value), expression
        else:
            same_number(e.sum(), blockwise_sum(value, 210))
        assert kernel_calls, expression
