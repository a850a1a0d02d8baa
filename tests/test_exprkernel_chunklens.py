"""The fused expression kernel over operands whose chunks hold different numbers of rows (a float64
column and an int32, float32 or bool one at their default chunk lengths), and over byte-shuffled
small integers, whose long LZ4 matches blzarr's own decoder reads: NumPy's values, and the general
path's sums bit for bit (blocks of the query's block length)."""

import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st
from helpers import examples

import blzarr
from blzarr import _exprkernel
from blzarr.query import exprkernel
from test_exprkernel import (blockwise_sum, kernel_calls, nthreads,  # noqa: F401,F811 (fixtures)
                             same_number, same_values)
from test_exprkernel_dtypes import KINDS, arithmetic, make_values, numpy_value, predicate

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                                        "ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), ka=st.sampled_from(KINDS), kb=st.sampled_from(KINDS),
       blen=st.sampled_from([8, 64]), ra=st.sampled_from([1, 2, 4]), rb=st.sampled_from([1, 2, 8]),
       rows=st.integers(1, 2000), raw=st.booleans(), extreme=st.booleans(),
       q=st.sampled_from([3, -2, 0.5]), sum_expr=arithmetic(), count_expr=predicate())
def test_chunk_lengths_differ(nthreads, kernel_calls, seed, ka, kb, blen, ra, rb, rows, raw, extreme, q,
                              sum_expr, count_expr):
    """Operands of chunk lengths blen * ra, blen * rb and blen (float64 `c`), any number of rows (a
    part of a group, several groups, a tail longer than a block)."""
    rng = np.random.default_rng(seed)
    env = {"a": make_values(ka, rows, rng, extreme), "b": make_values(kb, rows, rng, extreme),
           "c": make_values("f8", rows, rng, extreme)}
    cp = blzarr.cparams(clevel=0 if raw else 5)
    lens = {"a": blen * ra, "b": blen * rb, "c": blen}
    ops = {k: blzarr.carray(v, chunklen=lens[k], cparams=cp) for k, v in env.items()}
    ops["q"] = env["q"] = q
    arrays = {k: ops[k] for k in "abc"}
    for expression in (sum_expr, count_expr):
        try:
            value = numpy_value(expression, env)
        except (TypeError, OverflowError):
            continue
        p = exprkernel.prepare(expression, arrays, {"q": q}, blen)
        # (with chunk lengths 4 and 8 neither divides the other: the general path)
        used = {lens[k] for k in "abc" if k in expression}
        if p is not None and len(used) > 1:
            assert p.clens is not None and max(used) % min(used) == 0
            event("several chunk lengths, tail longer than a block" if p.tails is not None
                  and len(p.tails[0]) > blen else "several chunk lengths")
        kernel_calls.clear()
        e = blzarr.lazyexpr(expression, user_dict=ops, vm="python", blen=blen)
        same_values(e[:], value)
        if value.dtype == np.float64:
            same_number(e.sum(), blockwise_sum(value, blen))
            same_number(blzarr.eval(f"sum({expression})", user_dict=ops, vm="python", blen=blen),
                        blockwise_sum(value, blen))
        elif value.dtype == np.bool_:
            assert e.count_nonzero() == np.count_nonzero(value)
            same_number(e.sum(), np.sum(value))
            assert e.any() == bool(value.any()) and e.all() == bool(value.all())
        assert bool(kernel_calls) == (p is not None), (expression, kernel_calls)


@pytest.mark.parametrize("vm", ["numexpr", "python"])
def test_default_chunk_lengths(nthreads, kernel_calls, vm):
    """A float64 price times int32, float32 and bool columns at their default chunk lengths (32768,
    65536 and 262144 rows): the kernel, equal to the kernel-off path's bits and to NumPy."""
    rng = np.random.default_rng(5)
    n = 3 * 262144 + 40000
    env = {"px": np.round(rng.uniform(1, 500, n), 2), "v4": rng.integers(1, 10_000, n).astype(np.int32),
           "f4": rng.uniform(0, 2, n).astype(np.float32), "m": rng.random(n) < 0.3}
    ops = {k: blzarr.carray(v) for k, v in env.items()}
    assert sorted({ops[k].chunklen for k in env}) == [32768, 65536, 262144]
    for expr in ("px * v4", "px * f4 - v4", "px * m", "(px * v4 > 1e6) & (f4 < px * 0.01)"):
        results = []
        for on in (True, False):
            kernel_calls.clear()
            exprkernel.ENABLED = on
            try:
                e = blzarr.lazyexpr(expr, user_dict=ops, vm=vm)
                if e.dtype == np.float64:
                    results.append((e.sum(), blzarr.eval(f"sum({expr})", user_dict=ops, vm=vm)))
                else:
                    results.append((e.count_nonzero(), e.sum()))
            finally:
                exprkernel.ENABLED = True
            assert bool(kernel_calls) == on, expr
        ref = numpy_value(expr, env)
        (s1, t1), (s2, t2) = results
        same_number(s1, s2)
        if ref.dtype == np.float64:
            assert np.isclose(s1, np.sum(ref), rtol=1e-12) and np.isclose(t1, np.sum(ref), rtol=1e-12)
            same_number(s1, blockwise_sum(ref, 32768))
            if vm == "python":          # (numexpr's own sum adds in another order)
                same_number(t1, t2)
        else:
            assert s1 == np.count_nonzero(ref) and t1 == t2 == np.sum(ref)


@pytest.mark.parametrize("clevel", [1, 5, 9])
@pytest.mark.parametrize("hi", [2, 6, 100])
def test_small_integers_shuffled(nthreads, kernel_calls, clevel, hi):
    """int64 and int32 columns of small integers, byte-shuffled: their zero byte planes are long LZ4
    matches of a short period, which blzarr's decoder copies without reading back its own stores."""
    rng = np.random.default_rng(clevel * 1000 + hi)
    n = 4 * 65536 + 123
    env = {"v": rng.integers(1, hi, n), "w": rng.integers(0, hi, n).astype(np.int32),
           "x": np.round(rng.uniform(-3, 3, n), 3)}
    ops = {k: blzarr.carray(v, cparams=blzarr.cparams(clevel=clevel, shuffle=1, cname="lz4"))
           for k, v in env.items()}
    for expr in ("x * v", "x * w + v", "(v * 1.0 > 2.5) & (x < w)"):
        ref = numpy_value(expr, env)
        kernel_calls.clear()
        e = blzarr.lazyexpr(expr, user_dict=ops, vm="python")
        if ref.dtype == np.float64:
            same_number(e.sum(), blockwise_sum(ref, 32768))
        else:
            assert e.count_nonzero() == np.count_nonzero(ref)
        same_values(e[:], ref)
        assert kernel_calls


def test_a_damaged_chunk_is_an_error():
    """A chunk whose LZ4 stream is damaged (its header intact) fails the work with ChunkError."""
    v = blzarr.carray(np.arange(4096) % 5, chunklen=1024, cparams=blzarr.cparams(clevel=5, shuffle=1))
    chunks, _ = v.resident_chunks()
    bad = bytearray(chunks[1])
    start = int.from_bytes(bad[16:20], "little")         # the first block's stream, after its size
    bad[start + 4:start + 40] = b"\xff" * 36              # literal lengths that run past the stream
    prog = np.array([[_exprkernel.EXPR_OPCODES["add"], 1, 0, 0]], np.int32)
    w = _exprkernel.ExprChunks([[chunks[0], bytes(bad)] + list(chunks[2:])], prog, np.zeros(0), 2, 1, "sum",
                               1024, kinds=["i8"])
    w.run()
    with pytest.raises(blzarr.ChunkError):
        w.check()


def test_chunk_lengths_are_checked():
    a = blzarr.carray(np.arange(40.0), chunklen=10)
    b = blzarr.carray(np.arange(40, dtype=np.int32), chunklen=20)
    ca, cb = a.resident_chunks()[0], b.resident_chunks()[0]
    prog = np.array([[_exprkernel.EXPR_OPCODES["mul"], 2, 0, 1]], np.int32)

    def make(ops, clens, mode="sum", chunklen=10, outputs=()):
        return _exprkernel.ExprChunks(ops, prog, np.zeros(0), 3, 2, mode, chunklen, outputs,
                                      kinds=["f8", "i4"], clens=clens)
    w = make([ca, cb], [10, 20])
    w.run()
    w.check()
    ref = np.arange(40.0) * np.arange(40)
    assert w.values.tolist() == [ref[s:s + 10].sum() for s in range(0, 40, 10)]
    for clens in ([10, 15], [10, 5], [10], [10, 20, 40], [20, 20]):   # not multiples, one missing, ...
        with pytest.raises(ValueError):
            make([ca, cb], clens)
    with pytest.raises(ValueError):                                    # chunks for other rows
        make([ca, cb[:1]], [10, 20])
    with pytest.raises(ValueError):                                    # selections need one length
        make([ca, cb], [10, 20], "select", outputs=[("positions", None)])
    # the rows after the groups: blocks of 10 rows, the last one shorter
    w = _exprkernel.ExprChunks([ca[:2], cb[:1]], prog, np.zeros(0), 3, 2, "sum", 10, (), 1, None,
                               [np.arange(20.0, 45.0), np.arange(20, 45, dtype=np.int32)], kinds=["f8", "i4"],
                               clens=[10, 20])
    w.run()
    w.check()
    ref = np.arange(45.0) * np.arange(45)
    assert w.values.tolist() == [ref[s:s + 10].sum() for s in range(0, 45, 10)]
