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
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
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
