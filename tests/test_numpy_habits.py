"""NumPy habits a newcomer brings to a carray answer as NumPy answers, or raise; never a bare bool.

* ``a == 3``, ``a > 3`` (every comparison, scalars, arrays and carrays on the other side) give NumPy's
  element-wise answer (a lazy boolean expression), whose truth value is ambiguous as NumPy's is.
* ``a[a == 3]``, ``a[True]``, ``a[False]`` select what NumPy selects.
* ``a.where(...)`` has ``count()`` and ``explain()``, as a ctable's query has; ``blzarr info X --where``
  takes the array under any one name.
"""

import json
import operator

import numpy as np
import pytest
from hypothesis import given, strategies as st

import blzarr

OPS = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@pytest.mark.parametrize("op", OPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("other", ["scalar", "array", "carray", "list"])
def test_comparisons_are_element_wise(op, other, layout):
    n = np.arange(5000) % 17 * 0.5
    a = blzarr.carray(n, chunklen=1000, **layout)
    o = {"scalar": 3.0, "array": n[::-1].copy(), "carray": blzarr.carray(n[::-1].copy(), chunklen=700),
         "list": list(n[::-1])}[other]
    want = op(n, o[:] if other == "carray" else o)
    got = op(a, o)
    assert not isinstance(got, (bool, np.bool_))
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(got[:], want)
    assert got.sum() == want.sum()
    np.testing.assert_array_equal(a[got], n[want])      # a mask, as in NumPy
    with pytest.raises(ValueError, match="ambiguous"):
        bool(got)


def test_reflected_comparisons_and_lengths():
    n = np.arange(10)
    a = blzarr.carray(n, chunklen=4)
    np.testing.assert_array_equal(np.asarray(3 < a), 3 < n)
    np.testing.assert_array_equal(np.asarray(n == a), n == n)
    with pytest.raises(ValueError):
        a == np.arange(3)        # NumPy: shapes (10,) and (3,) do not broadcast
    # a carray stays hashable (a dict key, a set member) although == is element-wise
    assert {a: 1}[a] == 1 and a in {a}
    assert len([x for x in [a, blzarr.carray(n)] if x is a]) == 1


@given(st.lists(st.integers(-5, 5), min_size=1, max_size=40), st.integers(-5, 5))
def test_mask_from_a_comparison_matches_numpy(values, x):
    n = np.array(values)
    a = blzarr.carray(n, chunklen=7)
    np.testing.assert_array_equal(a[a == x], n[n == x])
    np.testing.assert_array_equal(a[a >= x], n[n >= x])


@pytest.mark.parametrize("key", [True, False, np.True_, np.False_])
def test_a_boolean_scalar_key_selects_as_numpy(key):
    n = np.arange(6.0)
    a = blzarr.carray(n, chunklen=4)
    np.testing.assert_array_equal(a[key], n[key])
    assert a[key].shape == n[key].shape


def test_comparing_with_what_does_not_compare_raises_clearly():
    a = blzarr.carray(np.arange(4))
    with pytest.raises(TypeError, match="compare"):
        a < "x"


# ====================================================== carray.where(...): count() and explain()
@pytest.mark.parametrize("limit,skip", [(None, 0), (None, 7), (5, 0), (5, 3), (10_000, 0), (0, 0), (None, 10**6)])
def test_carray_where_count_and_explain(layout, limit, skip):
    n = np.arange(20_000) % 101
    a = blzarr.carray(n, chunklen=1000, **layout)
    want = n[n > 90][skip:][:limit]
    for key in ("a > 90", a > 90, n > 90, blzarr.carray(n > 90)):
        q = a.where(key, limit=limit, skip=skip)
        assert q.count() == len(want)
        assert q.count() == len(want)        # counting does not consume the rows
        np.testing.assert_array_equal(np.fromiter(q, dtype=n.dtype), want)
        plan = q.explain()
        assert "blocks" in str(plan)
    other = dict(layout, rootdir=layout["rootdir"] + "2") if layout.on_disk else {}
    s = blzarr.carray(np.arange(20_000), chunklen=1000, **other)
    plan = s.where("s >= 19_500").explain()
    assert plan.skipped == len(plan.bounds) - 1 and plan.scanned == 1, str(plan)
    assert s.where("s >= 19_500").count() == 500


def test_cli_info_where_accepts_the_arrays_own_name(tmp_path):
    from test_cli import run, one_error_line
    p = str(tmp_path / "series.blz")
    blzarr.carray(np.arange(10_000), rootdir=p, mode="w", chunklen=1000).flush()
    plans = []
    for expr in ("b > 8_999", "x > 8_999", "series > 8_999"):
        rc, out, err = run("info", p, "--where", expr, "--json")
        assert rc == 0, err
        plans.append(json.loads(out)["query"])
    assert len({q.rsplit(";", 1)[0] for q in plans}) == 1 and " 2 skipped" in plans[0], plans
    rc, out, err = run("info", p, "--where", "(a > 1) & (b < 3)")
    assert rc != 0
    line = one_error_line(err)
    assert "one name" in line and "'a'" in line and "'b'" in line


# ================================================================== multidimensional carrays
@pytest.mark.parametrize("shape", [(9, 3), (7, 2, 3)])
def test_where_and_masks_on_nd_carrays_give_numpys_result(layout, shape):
    n = np.arange(np.prod(shape)).reshape(shape)
    a = blzarr.carray(n, chunklen=4, **layout)
    x = n.size - 7
    want = n[n > x]
    np.testing.assert_array_equal(np.array(list(a.where("a > x"))), want)
    np.testing.assert_array_equal(np.array(list(a.where(n > x, limit=3, skip=2))), want[2:5])
    assert a.where("a > x").count() == len(want)
    # one by one as a 1-d carray gives its elements: Python scalars (NumPy's .item(), as in bcolz)
    assert {type(v) for v in a.where("a > x")} == {type(v) for v in a.where(n > x)} == {int}
    np.testing.assert_array_equal(a["a > x"], want)
    np.testing.assert_array_equal(a[a > x], want)
    np.testing.assert_array_equal(a[n > x], want)
    lead = n.reshape(len(n), -1)[:, 0] > 10          # a mask of the first axis: rows, as before
    np.testing.assert_array_equal(a[lead], n[lead])
    with pytest.raises(ValueError, match="does not fit"):
        a.where(np.ones((len(n), 99), dtype=bool))


def test_too_many_indices_as_numpy():
    n = np.arange(5.0)
    a = blzarr.carray(n)
    with pytest.raises(IndexError, match="too many indices") as e:
        a[1, 2]
    with pytest.raises(IndexError) as e2:
        n[1, 2]
    assert str(e.value) == str(e2.value)
    b = blzarr.carray(np.zeros((4, 2)))
    with pytest.raises(IndexError, match="too many indices"):
        b[1, 1, 0]


# ================================================================ datetimes read can be written back
@pytest.mark.parametrize("unit", ["s", "ms", "D"])
def test_datetimes_are_accepted_as_numpy_accepts_them(layout, unit):
    import datetime
    dt = np.dtype(f"M8[{unit}]")
    n = np.array(["2024-01-01", "2024-01-03"], dtype=dt)
    a = blzarr.carray(n, **layout)
    values = [a[0], datetime.datetime(2024, 1, 2), "2024-01-02T12", np.datetime64("2024-01-05"),
              datetime.date(2024, 1, 6), np.datetime64("2024-01-07T10:00:00.5", "ms")]
    want = np.array(list(n) + [np.asarray(v, dtype=dt)[()] for v in values], dtype=dt)
    for v in values:
        a.append([v])
    np.testing.assert_array_equal(a[:], want)
    a.append(values[2])                                  # a scalar too
    a[0] = "2023-12-31"
    a[1:3] = [datetime.datetime(2023, 1, 1), "2023-01-02"]
    ref = np.concatenate([want, np.asarray([values[2]], dtype=dt)])
    ref[0] = "2023-12-31"
    ref[1:3] = [datetime.datetime(2023, 1, 1), "2023-01-02"]
    np.testing.assert_array_equal(a[:], ref)
    with pytest.raises(ValueError, match="cannot convert"):
        a.append(["not a date"])
    np.testing.assert_array_equal(a[:], ref)


def test_ctable_rows_with_datetimes_are_accepted():
    import datetime
    t = blzarr.ctable([np.array(["2024-01-01"], dtype="M8[s]"), np.array([1.0])], names=["ts", "v"])
    t.append((datetime.datetime(2024, 1, 2), 2.0))
    t.append((t[0]["ts"], 3.0))
    t.append([["2024-01-04", "2024-01-05"], [4.0, 5.0]])
    assert t["ts"][:].tolist() == [datetime.datetime(2024, 1, d) for d in (1, 2, 1, 4, 5)]


def test_queries_compare_datetimes_with_iso_strings(layout):
    n = np.arange("2024-01-01", "2024-03-01", dtype="M8[h]")
    c = blzarr.carray(n, chunklen=100, **layout)
    lo = np.datetime64("2024-01-02")
    np.testing.assert_array_equal(np.array(list(c.where("c < '2024-01-02'")), dtype=n.dtype), n[n < lo])
    np.testing.assert_array_equal(c["'2024-01-02' > c"], n[n < lo])
    assert c.where("c < '2024-01-02'").count() == (n < lo).sum()
    t = blzarr.ctable([n, np.arange(len(n)) * 1.0], names=["ts", "v"])
    got = t.fetchwhere("(ts >= '2024-02-01T06') & (v > 0)", out_flavor="numpy")
    np.testing.assert_array_equal(got["ts"], n[n >= np.datetime64("2024-02-01T06")])
    with pytest.raises(ValueError, match="no date"):
        c["c < 'yesterday-ish'"]


# ======================================================================== NumPy's same-kind casting
CAST_DTYPES = ["?", "i1", "u2", "i8", "f4", "f8", "c16", "U3", "S3", "M8[s]"]


@given(src=st.sampled_from(CAST_DTYPES), dst=st.sampled_from(CAST_DTYPES),
       how=st.sampled_from(["append", "setitem", "setslice"]))
def test_writes_follow_numpys_same_kind_rule(src, dst, how):
    values = np.zeros(3, dtype=src)
    a = blzarr.carray(np.zeros(4, dtype=dst))
    before = a[:]
    allowed = np.can_cast(values.dtype, a.dtype, "same_kind") or (
        values.dtype.kind in "iub" and a.dtype.kind in "iufcb") or (
        values.dtype.kind in "SU" and a.dtype.kind in "M")     # ISO text into datetimes, as datetime64 reads it
    do = {"append": lambda: a.append(values), "setitem": lambda: a.__setitem__(0, values[0]),
          "setslice": lambda: a.__setitem__(slice(0, 3), values)}[how]
    if allowed:
        try:
            do()
        except ValueError:
            assert values.dtype.kind in "SU"       # '' is no date: refused as NumPy refuses it
        return
    with pytest.raises(TypeError, match="same_kind") as e:
        do()
    assert str(a.dtype) in str(e.value)
    np.testing.assert_array_equal(a[:], before)


def test_floats_into_ints_need_an_explicit_conversion():
    a = blzarr.carray(np.arange(3))
    for bad in (lambda: a.append([1.7]), lambda: a.__setitem__(0, 1.7), lambda: a.__setitem__(slice(0, 2), [1.5, 2.5])):
        with pytest.raises(TypeError, match="same_kind"):
            bad()
    a.append(np.asarray([1.7]).astype(a.dtype))          # what the message suggests
    assert a[:].tolist() == [0, 1, 2, 1]
    f = blzarr.carray(np.zeros(2))
    with pytest.raises(TypeError, match="same_kind"):
        f.append(["1.5"])
    f.append(np.asarray(["1.5"]).astype(float))
    assert f[-1] == 1.5
    # unsafe=False is the default; safe=False skips the check (bcolz's fast path), NumPy's unsafe cast
    u = blzarr.carray(np.arange(3), safe=False)
    u.append([1.7])
    assert u[-1] == 1


def test_a_carray_works_as_a_weak_key_and_in_a_weak_set():
    import weakref
    a, b = blzarr.carray(np.arange(5)), blzarr.carray(np.arange(5))
    d = weakref.WeakKeyDictionary({a: 1, b: 2})
    assert d[a] == 1 and d[b] == 2 and a in d
    s = weakref.WeakSet([a])
    s.add(a)
    assert len(s) == 1 and a in s and b not in s
    np.testing.assert_array_equal(np.asarray(a == a), np.ones(5, bool))     # still element-wise
    f = blzarr.carray(np.array([1.0, np.nan]))
    np.testing.assert_array_equal(np.asarray(f == f), [True, False])       # as NumPy, NaN != NaN
