"""Counts of a comparison: the kernel counts where the program's last comparison holds without storing
its booleans.  Every comparison of every kind it compares in (float64, float32, int64, int32), against a
constant and between columns, with NaN, infinities and each dtype's edges, is counted as NumPy counts."""

import operator

import numpy as np
import pytest

import blzarr
from blzarr.query import exprkernel
from test_exprkernel import nthreads  # noqa: F401
from test_exprkernel_typed import values_of

OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
       "!=": operator.ne}


@pytest.fixture
def works(monkeypatch):
    """The kernel's work objects of the calls made (asserted reached by each test)."""
    from blzarr.query import planner
    monkeypatch.setattr(planner, "ENABLED", False)
    out = []
    work = exprkernel._work

    def kept(*args, **kwargs):
        w = work(*args, **kwargs)
        out.append(w)
        return w
    monkeypatch.setattr(exprkernel, "_work", kept)
    return out


@pytest.mark.parametrize("kind", ["f8", "f4", "i8", "i4"])
def test_comparison_counts_equal_numpy(nthreads, works, kind):
    rng = np.random.default_rng(7)
    n, chunklen = 5 * 64 + 9, 64
    a, b = values_of(kind, n, rng), values_of(kind, n, rng)
    b[::5] = a[::5]                        # equal values, for == and the non-strict comparisons
    q = a.dtype.type(1)
    ops = {k: blzarr.carray(v, chunklen=chunklen) for k, v in {"a": a, "b": b}.items()}
    for sym, op in OPS.items():
        for expr, want in ((f"a {sym} b", op(a, b)), (f"a {sym} q", op(a, q))):
            works.clear()
            got = blzarr.lazyexpr(expr, user_dict=dict(ops, q=q), blen=chunklen).count_nonzero()
            assert got == np.count_nonzero(want), (kind, expr)
            assert [w.compare_count for w in works] == [True], (kind, expr)


def test_other_counts_store_their_booleans(nthreads, works):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    a[::7] = np.nan
    ops = {"a": blzarr.carray(a, chunklen=128), "b": blzarr.carray(b, chunklen=128)}
    for expr, want in (("(a > 0) & (b < 0.5)", (a > 0) & (b < 0.5)), ("~(a > b)", ~(a > b))):
        works.clear()
        assert blzarr.lazyexpr(expr, user_dict=ops, blen=128).count_nonzero() == np.count_nonzero(want)
        assert [w.compare_count for w in works] == [False], expr
