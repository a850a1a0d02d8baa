"""The rules every query shares (blzarr.query.rules) and the Selection object (blzarr.query.selection)
against NumPy: skip/limit over any cut of a stream, the compaction rule's rows, the block length, and a
Selection's rows, count and fetch over carrays and NumPy arrays, with and without the fused engine."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blzarr
from blzarr.query import rules
from blzarr.query.selection import Selection


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 7), max_size=8), skip=st.integers(0, 40),
       limit=st.one_of(st.none(), st.integers(0, 40)))
def test_skip_limit_equals_slicing_the_whole(sizes, skip, limit):
    flat = np.arange(sum(sizes))
    parts = np.split(flat, np.cumsum(sizes)[:-1]) if sizes else []
    asked = []

    def stream():
        for p in parts:
            asked.append(len(p))
            yield p
    got = list(rules.skip_limit(stream(), skip, limit))
    want = flat[skip:None if limit is None else skip + limit]
    assert all(len(g) for g in got)            # no empty part is given
    assert np.array_equal(np.concatenate(got) if got else np.empty(0, flat.dtype), want)
    if limit == 0:
        assert asked == []                     # a limit of 0 asks for nothing
    elif limit is not None and len(want) == limit:
        # the stream is not read past the part that completes the limit
        assert sum(asked[:-1]) < skip + limit <= sum(asked)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2 ** 32 - 1), density=st.sampled_from([0.01, 0.3, 1.0]),
       start=st.integers(0, 50))
def test_gather_gives_the_rows_at_the_positions(n, seed, density, start):
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(rng.random(n) < density)
    if idx.size == 0:
        idx = np.array([rng.integers(n)])
    col = rng.random(start + n)
    c = blzarr.carray(col, chunklen=16)
    assert np.array_equal(rules.gather(col, start, idx), col[idx + start])
    assert np.array_equal(rules.gather(c, start, idx), col[idx + start])


def test_block_length_rule():
    a = blzarr.carray(np.arange(100_000), chunklen=10_000)
    b = blzarr.carray(np.arange(100_000), chunklen=20_000)
    small = blzarr.carray(np.arange(100), chunklen=10)
    assert rules.block_length([a, b, np.arange(3), 5]) == 10_000
    assert rules.block_length([small]) == rules.MIN_BLEN
    assert rules.block_length([np.arange(3)]) == rules.DEFAULT_BLEN
    assert rules.block_length([], fallback=1000) == rules.MIN_BLEN
    assert rules.block_length([], fallback=100_000) == 100_000


def test_parse_is_shared_and_fresh_on_request():
    e = "(a > 1) & (b < 2)"
    assert rules.parse(e) is rules.parse(e)
    assert rules.parse(e, fresh=True) is not rules.parse(e)
    with pytest.raises(SyntaxError):
        rules.parse("a >")


@pytest.mark.parametrize("vm", ["numexpr", "python", "dask"])
@pytest.mark.parametrize("kind", ["expression", "mask array", "mask carray"])
@pytest.mark.parametrize("skip,limit", [(0, None), (3, None), (0, 5), (1000, 7), (5, 0)])
def test_selection_equals_numpy(vm, kind, skip, limit):
    rng = np.random.default_rng(7)
    n = 30_000
    ts = np.arange(n)
    v = rng.random(n)
    cts, cv = blzarr.carray(ts, chunklen=1000), blzarr.carray(v, chunklen=700)
    mask = (ts >= 2_500) & (ts < 21_000) & (v > 0.4)
    if kind == "expression":
        sel = Selection("(ts >= 2_500) & (ts < 21_000) & (v > lo)", {"ts": cts, "v": cv, "lo": 0.4}, n, vm)
        assert sel.blen == 4096 and sel.explain().useful
    else:
        sel = Selection(mask if kind == "mask array" else blzarr.carray(mask, chunklen=900), None, n, vm)
    pos = np.flatnonzero(mask)[skip:None if limit is None else skip + limit]
    outputs = [("positions", None), ("operand", "v") if kind == "expression" else ("read", cv), ("read", cts)]
    rows = list(sel.rows(outputs, skip, limit))
    got = [np.concatenate([r[k] for r in rows]) if rows else np.empty(0) for k in range(3)]
    assert np.array_equal(got[0], pos) and np.array_equal(got[1], v[pos]) and np.array_equal(got[2], ts[pos])
    out = sel.fetch(outputs, [("p", np.int_), ("v", "f8"), ("t", ts.dtype)], skip, limit)
    assert np.array_equal(out["p"], pos) and np.array_equal(out["v"], v[pos]) and np.array_equal(out["t"], ts[pos])
    assert sel.count(skip, limit) == len(pos)
    assert np.array_equal(sel.positions(), np.flatnonzero(mask))


def test_where_reads_the_callers_variables_at_the_call():
    """The names of a query are resolved when where()/whereblocks()/fetchwhere() is called, as the
    real bcolz evaluates the expression then: rebinding a variable before iterating changes nothing,
    and count() and explain() see the same values as the rows."""
    a = np.arange(10)
    t = blzarr.ctable([a], names=["a"])
    lo = 5
    q = t.where("a > lo")
    blocks = t.whereblocks("a > lo", blen=3)
    lo = 8
    want = a[a > 5].tolist()
    assert [int(r.a) for r in q] == want
    assert [x for b in blocks for x in b["a"].tolist()] == want
    assert t.where("a > lo").count() == np.count_nonzero(a > lo)
    bcolz = pytest.importorskip("bcolz")
    bt = bcolz.ctable([a], names=["a"])
    lo = 5
    bq = bt.where("a > lo")
    lo = 8
    assert [int(r.a) for r in bq] == want
