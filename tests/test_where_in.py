"""`in` and `not in` in query strings: where, fetchwhere, whereblocks, carray where and eval against
NumPy's isin, and the chunks their statistics let a query skip."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import blzarr
from blzarr.query import planner
from helpers import examples


@pytest.fixture(params=["memory", "blz", "bcolz"])
def where(request, tmp_path):
    if request.param == "memory":
        return {}
    return {"rootdir": str(tmp_path / "t"), "mode": "w", "format": request.param}


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(0, 300), values=st.lists(st.integers(-3, 40), min_size=1, max_size=14),
       negate=st.booleans(), lo=st.integers(-5, 45))
def test_in_against_isin(n, values, negate, lo, where):
    if where:
        where = dict(where, rootdir=where["rootdir"] + f"{n}-{len(values)}-{lo}")
    rng = np.random.default_rng(n)
    a = rng.integers(0, 40, n)
    f = rng.random(n) * 50
    t = blzarr.ctable([a, f], names=["a", "f"], chunklen=16, **where)
    op = "not in" if negate else "in"
    expr = f"a {op} {tuple(values)!r} & (f > {lo})"
    ref = (~np.isin(a, values) if negate else np.isin(a, values)) & (f > lo)
    got = t.fetchwhere(expr, out_flavor="numpy")
    assert got["a"].tolist() == a[ref].tolist() and got["f"].tolist() == f[ref].tolist()
    assert [r.a for r in t.where(expr)] == a[ref].tolist()
    assert t.where(expr).count() == int(ref.sum())
    blocks = list(t.whereblocks(expr, blen=7))
    assert sum(len(b) for b in blocks) == int(ref.sum())
    c = t["a"]
    assert list(c.where(f"c {op} {tuple(values)!r}")) == a[~np.isin(a, values) if negate else np.isin(a, values)].tolist()
    assert np.array_equal(blzarr.eval(f"a {op} {list(values)!r}", out_flavor="numpy"),
                          ~np.isin(a, values) if negate else np.isin(a, values))


def test_strings_the_issue_example_and_precedence(where):
    sym = np.array([b"AAPL", b"MSFT", b"IBM", b"AAPL"])
    px = np.array([5.0, 20.0, 30.0, 40.0])
    t = blzarr.ctable([sym, px], names=["sym", "px"], **where)
    assert [r.px for r in t.where("sym in ('AAPL', 'MSFT') & (px > 10)")] == [20.0, 40.0]
    assert [r.sym for r in t.where("sym not in ['AAPL'] | (px < 10)")] == [b"AAPL", b"MSFT", b"IBM"]
    assert t.fetchwhere("sym in {'IBM'}", out_flavor="numpy")["px"].tolist() == [30.0]
    assert t.fetchwhere("(px > 10) & (sym in (b'AAPL',))", out_flavor="numpy")["px"].tolist() == [40.0]
    u = blzarr.ctable([sym.astype("U"), px], names=["sym", "px"])
    many = tuple(f"S{i}" for i in range(30)) + ("IBM",)
    assert u.fetchwhere(f"sym in {many!r}", out_flavor="numpy")["px"].tolist() == [30.0]       # the isin form
    assert t.fetchwhere(f"sym not in {many!r}", out_flavor="numpy")["px"].tolist() == [5.0, 20.0, 40.0]


def test_statistics_skip_chunks_no_value_can_be_in():
    a = np.arange(100_000)
    t = blzarr.ctable([a, a * 0.5], names=["a", "b"], chunklen=1000)
    few = t.explain("a in (5, 70000)")
    assert few.skipped > 0 and few.scanned <= 2
    many = tuple(range(50_000, 50_020))
    p = t.explain(f"a in {many!r}")
    assert p.scanned == 1 and p.whole == 0
    assert t.fetchwhere(f"a in {many!r}", out_flavor="numpy")["a"].tolist() == list(many)
    neg = t.explain(f"a not in {many!r}")
    assert neg.whole > 0 and neg.scanned == 1
    assert len(t.fetchwhere(f"a not in {many!r}")) == 100_000 - 20


def test_rewrite_leaves_other_expressions_alone_and_names_bad_input():
    assert planner.rewrite_in("(a > 1) & (b < 2)") == "(a > 1) & (b < 2)"
    assert planner.rewrite_in("a in (1, 2)") == "(a == 1) | (a == 2)"
    assert planner.rewrite_in("a not in (1,)") == "a != 1"
    t = blzarr.ctable([np.arange(5)], names=["a"])
    with pytest.raises(ValueError, match="literal tuple"):
        list(t.where("a in b"))
    with pytest.raises(ValueError, match="chained"):
        t.fetchwhere("0 < a in (1, 2)")
    assert len(t.fetchwhere("a in ()")) == 0 and len(t.fetchwhere("a not in []")) == 5
