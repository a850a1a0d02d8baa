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
       start=st.integers(0, 50), small=st.sampled_from([0, 8, rules.SMALL_RANGE]),
       width=st.sampled_from([0, 1, 3]))
def test_gather_gives_the_rows_at_the_positions(n, seed, density, start, small, width):
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(rng.random(n) < density)
    if idx.size == 0:
        idx = np.array([rng.integers(n)])
    col = rng.random((start + n, width) if width else start + n)
    c = blzarr.carray(col, chunklen=16)
    saved, rules.SMALL_RANGE = rules.SMALL_RANGE, small      # every branch of the rule
    try:
        assert np.array_equal(rules.gather(col, start, idx), col[idx + start])
        assert np.array_equal(rules.gather(c, start, idx), col[idx + start])
    finally:
        rules.SMALL_RANGE = saved


class _Asked:
    """A column that records the keys it is read with."""

    def __init__(self, values):
        self.values, self.keys = values, []

    def __getitem__(self, key):
        self.keys.append("range" if isinstance(key, slice) else "rows")
        return self.values[key]


@pytest.mark.parametrize("rows, wanted, width, asked", [
    (100, [3, 4, 5], 1, ["range"]),                       # a run: one slice
    (100, [3, 50, 90], 1, ["range"]),                     # sparse but small: the range, then a pick
    (1 << 16, [3, 40_000, 60_000], 1, ["rows"]),          # sparse, 60,000 rows between: the rows
    (1 << 16, [3, 40_000, 60_000], 4, ["rows"]),
    (1 << 15, [0, 9_000, (1 << 15) - 1], 2, ["range"]),   # 32,768 rows between: small
    (1 << 16, [0, 1 << 15], 1, ["rows"]),                 # one row more: not
    (1 << 16, list(range(0, 1 << 16, 3)), 1, ["range"]),  # dense: the range
])
def test_gather_reads_a_range_when_small_or_dense(rows, wanted, width, asked):
    values = np.arange(rows * width, dtype="f8").reshape((rows, width) if width > 1 else rows)
    col = _Asked(values)
    idx = np.asarray(wanted)
    assert np.array_equal(rules.gather(col, 0, idx), values[idx])
    assert col.keys == asked


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


# ---------------------------------------------------------------- one array's values (carray.where)
def _chunked_mask(rng, n, chunklen, pattern):
    """A boolean mask of `n` values whose chunks of `chunklen` are all false, all true or random, so
    that a carray of it has the statistics that skip blocks or take them whole."""
    mask = np.zeros(n, bool)
    for k, s in enumerate(range(0, n, chunklen)):
        how = pattern[k % len(pattern)]
        e = min(s + chunklen, n)
        mask[s:e] = True if how == "T" else False if how == "F" else rng.random(e - s) < 0.2
    return mask


@pytest.fixture(scope="module")
def disk_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("values")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(1, 9000), pattern=st.sampled_from(["R", "TFR", "FFT", "T"]),
       mask_kind=st.sampled_from(["numpy", "carray"]), where=st.sampled_from(["memory", "blz", "bcolz"]),
       dtype=st.sampled_from(["f8", "i4", "c16", "U3"]), skip=st.integers(0, 3000),
       limit=st.one_of(st.none(), st.integers(0, 3000)))
def test_values_at_the_true_rows_equal_numpys(disk_dir, seed, n, pattern, mask_kind, where, dtype, skip, limit):
    """`Selection.values` (and carray.where over it) gives NumPy's ``target[mask][skip:skip + limit]``
    by each of its strategies: chunks in memory (the C iterator for plain dtypes, the producer thread
    for others), on disk (the fused engine without a limit, the positions with one), masks with and
    without statistics."""
    rng = np.random.default_rng(seed)
    values = (rng.random(n) * 1000).astype(dtype)
    mask = _chunked_mask(rng, n, 512, pattern)
    if where == "memory":
        target = blzarr.carray(values, chunklen=512)
    else:
        root = str(disk_dir / f"{where}-{seed}-{n}")
        target = blzarr.carray(values, chunklen=512, rootdir=root, mode="w", format=where)
        target.flush()
        target = blzarr.open(root, mode="r")
    m = mask if mask_kind == "numpy" else blzarr.carray(mask, chunklen=512)
    want = values[mask][skip:None if limit is None else skip + limit].tolist()
    sel = Selection(m, None, n)
    assert list(sel.values(target, skip, limit, lambda block: block.tolist())) == want
    assert list(target.where(m, skip=skip, limit=limit)) == want
    assert target.where(m, skip=skip, limit=limit).count() == len(want)
    assert np.array_equal(sel.positions(), np.flatnonzero(mask))
    assert np.array_equal(target[m], values[mask])


def test_positions_of_a_mask_with_statistics_equal_numpys():
    """A chunked mask's positions (a[mask], t[mask], wheretrue) skip its all-false chunks and take its
    all-true ones from the statistics, with NumPy's result."""
    rng = np.random.default_rng(3)
    mask = _chunked_mask(rng, 20_000, 1000, "TFRFT")
    cm = blzarr.carray(mask, chunklen=1000)
    assert cm.chunk_stats() is not None
    v = rng.random(20_000)
    t = blzarr.ctable([np.arange(20_000), v], names=["i", "v"], chunklen=1500)
    got = Selection(cm, None, len(cm)).positions()
    assert got.dtype == np.intp and np.array_equal(got, np.flatnonzero(mask))
    assert np.array_equal(t[cm]["v"], v[mask]) and np.array_equal(t[cm]["i"], np.flatnonzero(mask))
    assert np.array_equal(blzarr.carray(v, chunklen=700)[cm], v[mask])
    assert list(cm.wheretrue(skip=10, limit=5000)) == np.flatnonzero(mask)[10:5010].tolist()


def test_evaluate_makes_a_boolean_result_the_mask():
    a = blzarr.carray(np.arange(10_000), chunklen=1000)
    sel = Selection("a % 3 == 0", {"a": a}, len(a))
    got = sel.evaluate()
    assert np.array_equal(got, np.arange(10_000) % 3 == 0) and sel.mask is got
    assert sel.count(skip=5) == 3334 - 5                 # the mask counted, not evaluated again
    assert sel.explain().expression == "a % 3 == 0"     # the plan is the expression's
    numbers = Selection("a * 2", {"a": a}, len(a))
    assert np.array_equal(numbers.evaluate(), np.arange(10_000) * 2) and numbers.mask is None


def test_carray_where_resolves_and_plans_its_expression_at_the_call():
    """carray.where, as ctable.where, resolves the names when it is called: explain() later plans the
    values the rows were selected with; an ``in`` is planned as it is evaluated (rewritten), so a
    carray's plan equals a table's."""
    c = blzarr.carray(np.arange(100_000) // 10, chunklen=10_000)
    lo = 9_500
    q = c.where("c >= lo")
    lo = 0
    assert str(q.explain()).startswith("10 blocks: 9 skipped") and q.count() == 5_000
    t = blzarr.ctable([c], names=["c"])
    for e in ["c in (3, 7_000)", "(c > 10) & (c not in (11, 12))"]:
        assert c.where(e).explain().summary() == t.where(e).explain().summary()
        assert list(c.where(e)) == [int(r[0]) for r in t.where(e, outcols="c", out_flavor=tuple)]
