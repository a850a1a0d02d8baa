"""Random query expressions on random tables: ctable results must equal NumPy boolean indexing."""

import numpy as np
from hypothesis import given, strategies as st

import blzarr

COLS = {"a": "i8", "b": "f8", "c": "i4", "d": "u2"}


@st.composite
def comparisons(draw):
    name = draw(st.sampled_from(sorted(COLS)))
    op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    value = draw(st.integers(-20, 120))
    if draw(st.booleans()):
        other = draw(st.sampled_from(sorted(COLS)))
        return f"({name} {op} {other})"
    return f"({name} {op} {value})"


def expressions():
    return st.recursive(
        comparisons(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["&", "|"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda e: f"(~{e})")),
        max_leaves=5)


@st.composite
def tables(draw):
    n = draw(st.integers(0, 3000))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    ra = np.empty(n, dtype=list(COLS.items()))
    ra["a"] = rng.integers(-10, 110, n)
    ra["b"] = np.round(rng.uniform(-10, 110, n), 1)
    ra["c"] = rng.integers(0, 100, n)
    ra["d"] = rng.integers(0, 100, n)
    chunklen = draw(st.sampled_from([1, 7, 100, 1024, 5000]))
    return ra, chunklen


def numpy_mask(ra, expr):
    env = {k: ra[k] for k in COLS}
    return np.asarray(eval(expr, {"__builtins__": {}}, env), dtype=bool)


@given(tables(), expressions(), st.sampled_from(["python", "numexpr"]),
       st.integers(0, 50), st.one_of(st.none(), st.integers(0, 200)))
def test_query_matches_numpy(data, expr, vm, skip, limit):
    ra, chunklen = data
    if vm == "numexpr" and not blzarr.numexpr_here:
        vm = "python"
    t = blzarr.ctable(ra, chunklen=chunklen)
    mask = numpy_mask(ra, expr)
    want = ra[mask]
    np.testing.assert_array_equal(t.fetchwhere(expr, vm=vm, out_flavor="numpy"), want)
    if vm == "python":
        np.testing.assert_array_equal(t[expr], want)
    stop = None if limit is None else skip + limit
    got = list(t.where(expr, outcols=["nrow__", "b"], skip=skip, limit=limit, vm=vm))
    np.testing.assert_array_equal(np.array([r.nrow__ for r in got], dtype=np.intp),
                                  np.flatnonzero(mask)[skip:stop])
    np.testing.assert_array_equal(np.array([r.b for r in got], dtype="f8"), ra["b"][mask][skip:stop])
    blocks = list(t.whereblocks(expr, blen=97, vm=vm))
    assert all(len(b) == 97 for b in blocks[:-1])
    got = np.concatenate(blocks) if blocks else np.empty(0, ra.dtype)
    np.testing.assert_array_equal(got, want)


@given(tables(), st.integers(-3500, 3500), st.one_of(st.none(), st.integers(-3500, 3500)),
       st.integers(1, 2500), st.integers(0, 100), st.one_of(st.none(), st.integers(0, 300)))
def test_iter_matches_numpy_slicing(data, start, stop, step, skip, limit):
    ra, chunklen = data
    t = blzarr.ctable(ra, chunklen=chunklen)
    want = ra[start:stop:step][skip:None if limit is None else skip + limit]
    got = list(t.iter(start, stop, step, outcols="a, nrow__", skip=skip, limit=limit, out_flavor=tuple))
    assert [r[0] for r in got] == want["a"].tolist()
    rows = np.arange(len(ra))[start:stop:step][skip:None if limit is None else skip + limit]
    assert [r[1] for r in got] == rows.tolist()
    np.testing.assert_array_equal(t[start:stop:step], ra[start:stop:step])
