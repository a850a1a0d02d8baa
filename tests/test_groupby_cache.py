"""The factorization cache in use: where_terms(cache=True) answered from the codes (checked against
NumPy, and checked not to decode the column), and the cache's life with its column (delcol removes
it, an addcol of the same name sees none)."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import blzarr
from blzarr.query import factor_cache
from blzarr.query import groupby as gbmod
from helpers import examples

POOLS = {
    "i8": np.array([-(2 ** 40), 0, 5, 7, 2 ** 40], "i8"),
    "u1": np.array([0, 3, 255], "u1"),
    "f8": np.array([np.nan, -0.0, 0.0, 1.5, -2.25]),
    "S": np.array([b"", b"a", b"abcdefghijk", b"zz"]),
    "U": np.array(["", "\u00e9t\u00e9", "x", "long string"]),
    "M8": np.array(["2020-01-01", "NaT", "1969-12-31T23:59:59"], "M8[s]"),
}
OPS = ["==", "!=", "in", "not in", "nin", ">", ">=", "<", "<="]
NP_CMP = {"==": np.equal, "!=": np.not_equal, ">": np.greater, ">=": np.greater_equal,
          "<": np.less, "<=": np.less_equal}


def _numpy_term(a, op, value):
    if op in ("in", "not in", "nin"):
        vals = np.array(value, dtype=a.dtype)
        hit = np.isin(a, vals)
        missing = np.isnan if a.dtype.kind == "f" else np.isnat if a.dtype.kind == "M" else None
        if missing is not None and missing(vals).any():
            hit |= missing(a)               # blzarr's `in` matches NaN to NaN (NaT to NaT), as pandas' isin
        return hit if op == "in" else ~hit
    return NP_CMP[op](a, value)


def _layout(where, tmp_path):
    if where == "memory":
        return {}
    return {"rootdir": str(tmp_path / "t"), "mode": "w", "format": where}


class _ReadCounter:
    """Counts the block reads of each array by the group-by engine's reader."""

    def __init__(self, monkeypatch):
        self.seen = []
        orig = gbmod._Reader.read
        seen = self.seen

        def read(reader, arr, s, e, tag=""):
            seen.append(id(arr))
            return orig(reader, arr, s, e, tag)
        monkeypatch.setattr(gbmod._Reader, "read", read)

    def reads_of(self, arr):
        return self.seen.count(id(arr))


@pytest.mark.parametrize("where", ["memory", "blz", "bcolz"])
@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_where_terms_cached_equals_numpy_and_uncached(tmp_path_factory, where, data):
    kind = data.draw(st.sampled_from(sorted(POOLS)))
    pool = POOLS[kind]
    n = data.draw(st.integers(1, 300))
    idx = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n))
    k = pool[np.array(idx)]
    v = np.arange(n)
    op = data.draw(st.sampled_from(OPS))
    if op in (">", ">=", "<", "<=") and kind in ("S", "U"):
        op = "=="
    picks = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=3))
    value = [pool[i] for i in picks] if op in ("in", "not in", "nin") else pool[picks[0]]
    t = blzarr.ctable([k, v], names=["k", "v"], chunklen=32,
                      **_layout(where, tmp_path_factory.mktemp("w")))
    t.cache_factor(["k"])
    assert factor_cache.load(t, "k") is not None
    got = t.where_terms([("k", op, value), ("v", ">=", 3)], cache=True)
    ref = _numpy_term(k, op, value) & (v >= 3)
    assert isinstance(got, blzarr.carray) and got.dtype == bool
    assert got[:].tolist() == ref.tolist()
    assert t.where_terms([("k", op, value), ("v", ">=", 3)])[:].tolist() == ref.tolist()


@pytest.mark.parametrize("where", ["memory", "blz", "bcolz"])
def test_where_terms_cache_is_used_not_the_column(tmp_path, where, monkeypatch):
    rng = np.random.default_rng(3)
    names = np.array([b"id%03d" % i for i in range(1, 101)])
    k = names[rng.integers(0, 100, 200_000)]
    x = rng.integers(0, 1000, 200_000)
    t = blzarr.ctable([k, x], names=["k", "x"], chunklen=8192, **_layout(where, tmp_path))
    terms = [("k", "in", ["id007", "id042", b"id100", "nope"]), ("x", "<", 700)]
    ref = np.isin(k, [b"id007", b"id042", b"id100"]) & (x < 700)

    counter = _ReadCounter(monkeypatch)
    assert np.array_equal(t.where_terms(terms, cache=True)[:], ref)   # no cache yet: the column
    assert counter.reads_of(t["k"]) > 0

    t.cache_factor(["k"])
    counter.seen.clear()
    assert np.array_equal(t.where_terms(terms, cache=True)[:], ref)
    assert counter.reads_of(t["k"]) == 0            # answered from the codes
    assert counter.reads_of(t["x"]) > 0
    counter.seen.clear()
    assert np.array_equal(t.where_terms(terms)[:], ref)              # cache=False: the column
    assert counter.reads_of(t["k"]) > 0
    counter.seen.clear()
    assert np.array_equal(t.where_terms([("k", "==", "id050")], cache=True)[:], k == b"id050")
    assert np.array_equal(t.where_terms([("k", "nin", ["id050"])], cache=True)[:], k != b"id050")
    assert counter.reads_of(t["k"]) == 0


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_where_terms_stale_cache_is_not_used(tmp_path, fmt):
    root = str(tmp_path / "t")
    k = np.array([1, 2, 3, 1] * 100)
    t = blzarr.ctable([k], names=["k"], rootdir=root, mode="w", format=fmt, chunklen=64)
    t.cache_factor(["k"])
    t["k"][5] = 9
    t.flush()
    k[5] = 9
    assert np.array_equal(t.where_terms([("k", "==", 9)], cache=True)[:], k == 9)
    assert np.array_equal(t.where_terms([("k", "in", [2, 9])], cache=True)[:], np.isin(k, [2, 9]))


def test_where_terms_cache_with_auto_cache_builds_it(tmp_path):
    root = str(tmp_path / "t")
    k = np.array([b"a", b"b", b"c"] * 100)
    blzarr.ctable([k], names=["k"], rootdir=root, mode="w")
    t = blzarr.ctable(rootdir=root, mode="a", auto_cache=True)
    assert factor_cache.load(t, "k") is None
    assert np.array_equal(t.where_terms([("k", "in", ["b"])], cache=True)[:], k == b"b")
    assert factor_cache.load(t, "k") is not None


@pytest.mark.parametrize("k", [np.array([b"b", b"a", b"b"]), np.array(["b", "a", "b"]), np.array([2.5, 1.0, 2.5])])
def test_in_memory_cache_of_any_dtype_is_found(k):
    # a lookup that compared columns with == (elementwise for a carray) failed on string columns
    t = blzarr.ctable([k, np.array([1, 2, 3])], names=["k", "v"])
    t.cache_factor(["k"])
    codes, uniques = factor_cache.load(t, "k")
    assert codes.tolist() == [0, 1, 0] and uniques.tolist() == [k[0], k[1]]
    assert t.groupby(["k"], ["v"])["v"][:].tolist() == [4, 2]
    t2 = blzarr.ctable([k.copy(), np.array([1, 2, 3])], names=["k", "v"])
    assert factor_cache.load(t2, "k") is None       # an equal column of another table: no cache


# ----------------------------------------------------------------------------- delcol / addcol
def _hidden(root):
    return sorted(e for e in os.listdir(root) if e.startswith("."))


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("keep", [False, True])
def test_delcol_removes_the_cache_and_addcol_sees_none(tmp_path, fmt, keep):
    root = str(tmp_path / "t")
    k = np.array([b"x", b"y", b"x", b"z"] * 50)
    t = blzarr.ctable([k, np.arange(200)], names=["k", "v"], rootdir=root, mode="w", format=fmt)
    t.cache_factor(["k", "v"])
    assert os.path.isdir(os.path.join(root, "k.factor"))
    kept = t.delcol("k", keep=keep)
    assert not os.path.exists(os.path.join(root, "k.factor"))
    assert os.path.isdir(os.path.join(root, "v.factor"))             # other caches stay
    assert _hidden(root) == [] or all(not e.startswith(".k") for e in _hidden(root))
    if keep:
        assert kept[:].tolist() == k.tolist()
        assert blzarr.open(os.path.join(root, "k"), mode="r")[:].tolist() == k.tolist()
        kept.close()
        import shutil
        shutil.rmtree(os.path.join(root, "k"))      # the kept directory, out of the new column's way
    # a new column of the same name, of another length class of values: no stale cache is found
    new = np.array([b"q", b"r", b"r", b"q"] * 50)
    t.addcol(new, name="k")
    assert factor_cache.load(t, "k") is None
    assert t.unique("k") == [b"q", b"r"]
    r = t.where_terms([("k", "==", "r")], cache=True)
    assert np.array_equal(r[:], new == b"r")
    t.cache_factor(["k"])
    assert factor_cache.load(blzarr.open(root), "k")[1].tolist() == [b"q", b"r"]
    assert blzarr.open(root).groupby(["k"], ["v"])["k"][:].tolist() == [b"q", b"r"]


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_addcol_ignores_an_orphan_cache_of_its_name(tmp_path, fmt):
    # an orphan cache left beside the table (by an older blzarr's delcol): addcol removes it
    root = str(tmp_path / "t")
    t = blzarr.ctable([np.array([1, 2, 1, 3] * 25), np.arange(100)], names=["k", "v"],
                      rootdir=root, mode="w", format=fmt)
    t.cache_factor(["k"])
    t.delcol("k")
    t.close()
    import shutil
    src = str(tmp_path / "s")
    blzarr.ctable([np.array([1, 2, 1, 3] * 25)], names=["k"], rootdir=src, mode="w", format=fmt).cache_factor(["k"])
    shutil.copytree(os.path.join(src, "k.factor"), os.path.join(root, "k.factor"))
    t = blzarr.open(root, mode="a")
    t.addcol(np.array([7, 7, 8, 9] * 25), name="k")
    assert not os.path.exists(os.path.join(root, "k.factor"))
    assert factor_cache.load(t, "k") is None and t.unique("k") == [7, 8, 9]
    assert not any(e.startswith(".k") for e in os.listdir(root))


def test_in_memory_delcol_then_addcol_has_no_stale_cache():
    t = blzarr.ctable([np.array([1, 2, 1]), np.arange(3)], names=["k", "v"])
    t.cache_factor(["k"])
    t.delcol("k")
    t.addcol(np.array([5, 5, 6]), name="k")
    assert factor_cache.load(t, "k") is None and t.unique("k") == [5, 6]


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("fault", ["interrupt", "enospc"])
def test_delcol_with_a_cache_interrupted_anywhere(tmp_path, fmt, fault):
    """An interrupt before any file operation of delcol: the table has the column (with a valid
    cache or none) or has neither column nor cache; a retry completes it and leaves nothing."""
    from faults import count_calls, run_faulted
    root = str(tmp_path / "t")
    k = np.array([3, 1, 3, 2] * 250)

    def setup():
        t = blzarr.ctable([k, np.arange(1000)], names=["k", "v"], rootdir=root, mode="w",
                          format=fmt, chunklen=100)
        t.cache_factor(["k"])
        t.close()

    def op():
        t = blzarr.open(root, mode="a")
        if "k" in t.names:
            t.delcol("k")
    setup()
    n, _ = count_calls(op)
    assert n > 3
    for at in range(1, n + 1):
        setup()
        run_faulted(op, at, fault)
        t = blzarr.open(root, mode="r")
        if "k" in t.names:
            got = factor_cache.load(t, "k")
            assert got is None or got[1].tolist() == [3, 1, 2], at
            assert t["k"][:].tolist() == k.tolist()
        else:
            assert not os.path.exists(os.path.join(root, "k.factor")), at
        op()
        t = blzarr.open(root, mode="r")
        assert t.names == ["v"] and not os.path.exists(os.path.join(root, "k.factor")), at
        assert _hidden(root) == [], (at, _hidden(root))


# ----------------------------------------------------------------------------- one committed version
@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_groupby_of_a_reader_checks_the_version_once_and_sees_commits(tmp_path, fmt, monkeypatch):
    from blzarr.storage import commitrec
    root = str(tmp_path / "t")
    rng = np.random.default_rng(2)
    k = rng.integers(0, 50, 100_000)
    v = rng.integers(0, 9, 100_000)
    blzarr.ctable([k, v], names=["k", "v"], rootdir=root, mode="w", format=fmt, chunklen=1000).close()
    r = blzarr.open(root, mode="r")
    w = blzarr.open(root, mode="a")
    w.append([np.array([77]), np.array([5])])
    w.flush()
    calls = []
    orig = commitrec.Watch.changed

    def changed(self):
        calls.append(1)
        return orig(self)
    monkeypatch.setattr(commitrec.Watch, "changed", changed)
    got = r.groupby(["k"], ["v"], out_flavor="pandas")
    # the reader sees the row committed before the call (one version, checked at the start) ...
    ref = pd_groupby_sum(np.append(k, 77), np.append(v, 5))
    assert dict(zip(got["k"], got["v"])) == ref
    # ... and checks it a few times, not once per column per block (100 blocks here)
    assert len(calls) <= 2 * len(r.names) + 2, len(calls)
    calls.clear()
    m = r.where_terms([("k", "in", [1, 77])])
    assert len(calls) <= 2 * len(r.names) + 2 and m[:].sum() == int(np.isin(np.append(k, 77), [1, 77]).sum())


def pd_groupby_sum(k, v):
    import pandas as pd
    s = pd.Series(v).groupby(k).sum()
    return {int(a): int(b) for a, b in s.items()}


# ----------------------------------------------------------------------------- bquery's own cache
# bquery (0.2.14) keeps a column's factorization as two bcolz carrays, <col>.factor (the codes) and
# <col>.values (the distinct values), and trusts them whenever <col>/__attrs__ and
# <col>.values/__attrs__ exist (its ctable.cache_valid), then opens <col>.factor as a carray.  The
# pair is written here with the real bcolz, as bquery's cache_factor writes it.
def _bquery_pair(bcolz, root, name, codes, values):
    bcolz.carray(np.asarray(codes, "i8"), rootdir=os.path.join(root, name + ".factor"), mode="w").flush()
    bcolz.carray(np.asarray(values), rootdir=os.path.join(root, name + ".values"), mode="w").flush()


def _bquery_trusts(root, name):
    return os.path.exists(os.path.join(root, name, "__attrs__")) and \
        os.path.exists(os.path.join(root, name + ".values", "__attrs__"))


def _bquery_would_work(bcolz, root, name, nrows):
    """What bquery's factorize_groupby_cols does with a trusted pair works: <col>.factor opens as a
    bcolz carray of one code per row."""
    if not _bquery_trusts(root, name):
        return True                       # bquery factorizes again and writes its own pair
    try:
        return len(bcolz.carray(rootdir=os.path.join(root, name + ".factor"), mode="r")) == nrows
    except (OSError, ValueError, KeyError):
        return False


def test_cache_factor_over_bquerys_pair_leaves_bquery_a_working_state(tmp_path):
    bcolz = pytest.importorskip("bcolz")
    root = str(tmp_path / "t")
    k = np.array([3, 1, 3, 2] * 25)
    s = np.array([b"a", b"b"] * 50)
    blzarr.ctable([k, s], names=["k", "s"], rootdir=root, mode="w", format="bcolz").close()
    _bquery_pair(bcolz, root, "k", [0, 1, 0, 2] * 25, [3, 1, 2])
    _bquery_pair(bcolz, root, "s", [0, 1] * 50, [b"a", b"b"])
    assert _bquery_trusts(root, "k") and _bquery_would_work(bcolz, root, "k", 100)
    t = blzarr.open(root, mode="a")
    assert factor_cache.load(t, "k") is None          # bquery's pair is not taken for blzarr's cache
    t.cache_factor(["k"])
    assert factor_cache.load(t, "k")[1].tolist() == [3, 1, 2]
    assert not _bquery_trusts(root, "k") and _bquery_would_work(bcolz, root, "k", 100)
    assert _bquery_trusts(root, "s") and _bquery_would_work(bcolz, root, "s", 100)   # not its column's
    assert t.groupby(["k"], [["s", "count"]])["s"][:].tolist() == [50, 25, 25]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["interrupt", "enospc"])
def test_cache_factor_over_bquerys_pair_interrupted_anywhere(tmp_path, fault):
    """A fault before any file operation of cache_factor over bquery's pair: bquery trusts only a
    pair it can open, blzarr's cache is valid or absent, and a retry leaves blzarr's cache."""
    bcolz = pytest.importorskip("bcolz")
    from faults import count_calls, run_faulted
    root = str(tmp_path / "t")
    k = np.array([3, 1, 3, 2] * 25)

    def setup():
        blzarr.ctable([k], names=["k"], rootdir=root, mode="w", format="bcolz").close()
        _bquery_pair(bcolz, root, "k", [0, 1, 0, 2] * 25, [3, 1, 2])

    def op():
        blzarr.open(root, mode="a").cache_factor(["k"], refresh=True)
    setup()
    n, calls = count_calls(op)
    # the pair's removal is among the counted operations, before the cache's rename into place
    assert any(".values" in str(c) for c in calls), calls
    for at in range(1, n + 1):
        setup()
        run_faulted(op, at, fault)
        assert _bquery_would_work(bcolz, root, "k", 100), at
        got = factor_cache.load(blzarr.open(root, mode="r"), "k")
        assert got is None or got[1].tolist() == [3, 1, 2], at
        op()
        assert not _bquery_trusts(root, "k"), at
        assert factor_cache.load(blzarr.open(root, mode="r"), "k")[1].tolist() == [3, 1, 2], at


def test_addcol_over_bquerys_leftover_pair(tmp_path):
    # bquery's pair of an earlier column of the name (bcolz's delcol leaves it): the new column must
    # not be described by it, for blzarr nor for bquery
    bcolz = pytest.importorskip("bcolz")
    root = str(tmp_path / "t")
    t = blzarr.ctable([np.arange(100)], names=["v"], rootdir=root, mode="w", format="bcolz")
    _bquery_pair(bcolz, root, "k", [0, 1] * 50, [10, 20])
    t.addcol(np.array([7, 7, 8, 9] * 25), name="k")
    assert not _bquery_trusts(root, "k")
    assert factor_cache.load(t, "k") is None and t.unique("k") == [7, 8, 9]


# ----------------------------------------------------------------------------- bqueryd's calls
@pytest.mark.parametrize("where", ["memory", "blz", "bcolz"])
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_where_terms_factorization_check_against_numpy(tmp_path_factory, where, data):
    """False exactly when a term on a cached column holds for no row (NumPy's answer); a term on a
    column without a cache never makes it False."""
    kind = data.draw(st.sampled_from(sorted(POOLS)))
    pool = POOLS[kind]
    n = data.draw(st.integers(0, 60))
    k = pool[np.array(data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n)), dtype=int)]
    v = np.arange(n)
    terms = []
    for _ in range(data.draw(st.integers(1, 2))):
        op = data.draw(st.sampled_from(OPS))
        if op in (">", ">=", "<", "<=") and kind in ("S", "U"):
            op = "=="
        picks = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=3))
        terms.append(("k", op, [pool[i] for i in picks] if op in ("in", "not in", "nin") else pool[picks[0]]))
    terms.append(("v", "<", -1))                   # matches nothing, but v has no cache
    t = blzarr.ctable([k, v], names=["k", "v"], chunklen=16, **_layout(where, tmp_path_factory.mktemp("w")))
    assert t.where_terms_factorization_check(terms) is True and not t.cache_valid("k")
    t.cache_factor(["k"])
    assert t.cache_valid("k") and not t.cache_valid("v")
    ref = all(bool(_numpy_term(k, op, value).any()) for _, op, value in terms[:-1])
    assert t.where_terms_factorization_check(terms) is ref
    # where the check says no row can match, where_terms agrees
    if not ref:
        assert not t.where_terms(terms[:-1])[:].any()


@pytest.mark.parametrize("where", ["memory", "blz", "bcolz"])
def test_where_terms_factorization_check_ignores_a_stale_cache(tmp_path, where):
    t = blzarr.ctable([np.array([1, 2, 1, 2] * 10)], names=["k"], chunklen=8, **_layout(where, tmp_path))
    t.cache_factor(["k"])
    assert t.where_terms_factorization_check([("k", "==", 9)]) is False
    t["k"][3] = 9
    t.flush()
    assert not t.cache_valid("k")
    assert t.where_terms_factorization_check([("k", "==", 9)]) is True
    t.cache_factor(["k"])
    assert t.where_terms_factorization_check([("k", "in", [9, 7])]) is True
    assert t.where_terms_factorization_check([("k", ">", 9)]) is False
    with pytest.raises(KeyError, match="'nope'"):
        t.where_terms_factorization_check([("nope", "==", 1)])
    with pytest.raises(KeyError, match="'nope'"):
        t.cache_valid("nope")
    t.clean_tmp_rootdir()                           # bquery's cleanup: nothing to clean, no error
