"""NumPy and pandas interplay: __array__ as NumPy 2 expects, reductions with axis, the types of
len/iteration/slicing results, ctable <-> pandas round trips, ctable.to_arrow()."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import blzarr

NUMPY2 = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


@pytest.fixture(params=["memory", "bcolz", "blz"])
def where(request, tmp_path):
    """Keyword arguments putting a carray in memory or on disk in either layout."""
    if request.param == "memory":
        return {}
    return {"rootdir": str(tmp_path / "c"), "format": request.param}


# ------------------------------------------------------------------------------------ __array__
def test_asarray_and_array_protocol(where):
    a = np.arange(1000, dtype="i4").reshape(-1, 4)
    c = blzarr.carray(a, chunklen=33, **where)
    got = np.asarray(c)
    assert type(got) is np.ndarray and got.dtype == a.dtype and got.shape == a.shape
    assert_array_equal(got, a)
    assert np.asarray(c, dtype="f8").dtype == np.float64
    assert_array_equal(np.asarray(c, dtype="f8"), a.astype("f8"))
    assert_array_equal(c.__array__(None, copy=True), a)
    assert_array_equal(np.array(c), a)
    with pytest.raises(ValueError, match="copy"):
        c.__array__(copy=False)
    if NUMPY2:
        with pytest.raises(ValueError):
            np.array(c, copy=False)
        # np.asarray(copy=True) hands out a fresh array: writing to it leaves the carray alone
        b = np.asarray(c, copy=True)
        b[:] = -1
        assert_array_equal(c[:], a)
    # ufuncs and array functions go through __array__
    assert_array_equal(np.add(c, 1), a + 1)
    assert_array_equal(np.concatenate([c, c]), np.concatenate([a, a]))


def test_ctable_array_protocol():
    ra = np.array([(1, 2.5, b"x"), (2, 3.5, b"yy")], dtype="i4,f8,S2")
    t = blzarr.ctable(ra)
    got = np.asarray(t)
    assert got.dtype == ra.dtype and (got == ra).all()
    with pytest.raises(ValueError, match="copy"):
        t.__array__(copy=False)


# ------------------------------------------------------------------------------------ reductions
AXES = [None, 0, 1, 2, -1, (0, 1), (1, 2), (0, 2), (0, 1, 2)]


@pytest.mark.parametrize("op", ["sum", "mean", "min", "max"])
def test_reductions_with_axis(op, where):
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, size=(257, 3, 5)).astype("i8")
    c = blzarr.carray(a, chunklen=20, **where)
    for axis in AXES:
        for keepdims in (False, True):
            want = getattr(a, op)(axis=axis, keepdims=keepdims)
            got = getattr(c, op)(axis=axis, keepdims=keepdims)
            assert np.shape(got) == np.shape(want), (axis, keepdims)
            assert np.asarray(got).dtype == np.asarray(want).dtype, (axis, keepdims)
            assert_allclose(got, want, rtol=1e-12)
            # the NumPy functions dispatch to the methods
            np_got = getattr(np, op)(c, axis=axis, keepdims=keepdims)
            assert_allclose(np_got, want, rtol=1e-12)
    scalar = getattr(c, op)()
    assert isinstance(scalar, np.generic) and scalar == getattr(a, op)()


def test_reductions_dtype_out_and_floats():
    a = np.linspace(-3, 7, 3000, dtype="f4").reshape(-1, 2)
    c = blzarr.carray(a, chunklen=64)
    assert c.sum(dtype="f8").dtype == np.float64
    assert_allclose(c.sum(dtype="f8"), a.sum(dtype="f8"))
    assert c.mean(axis=0).dtype == np.float32
    assert_allclose(c.mean(axis=0), a.mean(axis=0), rtol=1e-5)
    out = np.empty(2, dtype="f8")
    r = c.max(axis=0, out=out)
    assert r is out
    assert_array_equal(out, a.max(axis=0))
    b = blzarr.carray(np.arange(10) % 3 == 0)
    assert b.sum() == 4 and b.sum().dtype == np.sum(np.arange(10) % 3 == 0).dtype
    assert b.mean() == pytest.approx(0.4)
    t = blzarr.carray(np.array(["2020-01-02", "2019-05-01", "2021-01-01"], dtype="M8[D]"))
    assert t.min() == np.datetime64("2019-05-01") and t.max() == np.datetime64("2021-01-01")


def test_reductions_on_empty_and_bad_input():
    e = blzarr.carray(np.zeros((0, 3)))
    assert_array_equal(e.sum(axis=0), np.zeros((0, 3)).sum(axis=0))
    assert e.sum(axis=1).shape == (0,)
    with pytest.raises(ValueError):
        e.min()
    with pytest.raises(ValueError):
        np.zeros((0, 3)).min()   # the same as NumPy
    c = blzarr.carray(np.arange(12).reshape(4, 3))
    with pytest.raises(np.exceptions.AxisError if NUMPY2 else np.AxisError):
        c.sum(axis=2)
    with pytest.raises(ValueError, match="repeated"):
        c.sum(axis=(0, 0))
    with pytest.raises(TypeError, match="axis"):
        c.sum(axis=1.5)
    with pytest.raises(TypeError, match="where"):
        c.min(where=True)
    with pytest.raises(TypeError, match="cannot"):
        blzarr.carray(np.array(["a", "b"])).sum()


# ------------------------------------------------------------------------------------ result types
def test_len_iteration_and_slicing_types(where):
    a = np.arange(300, dtype="i2")
    c = blzarr.carray(a, chunklen=16, **where)
    assert type(len(c)) is int and len(c) == 300
    for key in (slice(None), slice(3, 250, 7), slice(None, None, -3), [5, 1, 299], a % 5 == 0):
        got = c[key]
        assert type(got) is np.ndarray and got.dtype == a.dtype
        assert_array_equal(got, a[key])
    # elements: what bcolz gives (Python numbers for plain dtypes), equal to NumPy's
    assert [type(v) for v in (c[3], c[-1])] == [int, int]
    items = list(c)
    assert items == a.tolist()
    assert_array_equal(np.array(items, dtype=c.dtype), a)
    m = blzarr.carray(np.arange(60.0).reshape(20, 3), chunklen=7, **{k: v + "m" if k == "rootdir" else v
                                                                      for k, v in where.items()})
    rows = list(m)
    assert all(type(r) is np.ndarray and r.dtype == np.float64 and r.shape == (3,) for r in rows)
    assert_array_equal(np.array(rows), np.arange(60.0).reshape(20, 3))
    assert type(m[4]) is np.ndarray and m[4].shape == (3,)
    d = blzarr.carray(np.arange(5).astype("M8[s]"))
    assert [v.second for v in d] == [0, 1, 2, 3, 4]     # datetime.datetime, as bcolz gives
    for blk in blzarr.iterblocks(c, blen=100):
        assert type(blk) is np.ndarray and blk.dtype == a.dtype


# ------------------------------------------------------------------------------------ pandas
def _frame():
    pd = pytest.importorskip("pandas")
    n = 50
    return pd.DataFrame({
        "i1": np.arange(n, dtype="i1"), "i2": np.arange(n, dtype="i2"), "i4": np.arange(n, dtype="i4"),
        "i8": np.arange(n, dtype="i8") * 10**12, "u1": np.arange(n, dtype="u1"), "u8": np.arange(n, dtype="u8"),
        "f4": np.linspace(0, 1, n, dtype="f4"), "f8": np.linspace(-1, 1, n), "b": np.arange(n) % 2 == 0,
        "c16": np.arange(n) * (1 + 2j),
        "t_ns": pd.date_range("2021-03-04", periods=n, freq="min").as_unit("ns"),
        "t_s": pd.date_range("2021-03-04", periods=n, freq="D").as_unit("s"),
        "td": pd.to_timedelta(np.arange(n), unit="ms"),
        "s": [f"v{k}" for k in range(n)],
    })


@pytest.mark.parametrize("fmt", [None, "bcolz", "blz"])
def test_pandas_round_trip_keeps_dtypes(tmp_path, fmt):
    pd = pytest.importorskip("pandas")
    df = _frame()
    kw = {} if fmt is None else {"rootdir": str(tmp_path / "t"), "format": fmt}
    t = blzarr.ctable.fromdataframe(df, **kw)
    assert t.names == list(df.columns)
    for name in df.columns:
        if name != "s":
            assert t.cols[name].dtype == df[name].dtype, name
    assert t.cols["s"].dtype.kind == "U"
    if fmt is not None:
        t = blzarr.open(str(tmp_path / "t"), mode="r")
    back = t.todataframe()
    pd.testing.assert_frame_equal(back, df)
    assert list(back.dtypes) == list(df.dtypes)


def test_pandas_round_trip_of_selected_columns_and_extension_types():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": pd.array([1, 2, 3], dtype="Int32"), "b": pd.Categorical(["x", "y", "x"]),
                       "c": [1.5, 2.5, 3.5]})
    t = blzarr.ctable.fromdataframe(df)
    assert t.cols["a"].dtype == np.int32 and t.cols["b"].dtype.kind == "U"
    got = t.todataframe(columns=["c", "a"])
    assert list(got.columns) == ["c", "a"]
    assert_array_equal(got["a"].to_numpy(), [1, 2, 3])


# ------------------------------------------------------------------------------------ arrow
def test_to_arrow(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    n = 270_000   # more than one record batch
    cols = {"i": np.arange(n, dtype="i4"), "f": np.linspace(0, 1, n), "b": np.arange(n) % 3 == 0,
            "t": np.arange(n).astype("M8[ms]"), "s": np.array(["ab", "c"] * (n // 2)),
            "y": np.array([b"q", b"rr"] * (n // 2))}
    t = blzarr.ctable(list(cols.values()), names=list(cols), rootdir=str(tmp_path / "t"), format="blz")
    tbl = t.to_arrow()
    assert isinstance(tbl, pa.Table) and tbl.num_rows == n and tbl.column_names == list(cols)
    assert tbl.schema.field("i").type == pa.int32() and tbl.schema.field("f").type == pa.float64()
    assert tbl.schema.field("b").type == pa.bool_() and tbl.schema.field("t").type == pa.timestamp("ms")
    assert tbl.schema.field("s").type == pa.string() and tbl.schema.field("y").type == pa.binary()
    assert tbl.column("i").num_chunks > 1
    for name, a in cols.items():
        got = tbl.column(name).to_numpy()
        if name == "y":
            got = got.astype("S2")
        elif name == "s":
            got = got.astype("U2")
        assert_array_equal(got, a)
    assert t.to_arrow(columns=["f"]).column_names == ["f"]
    # arrow -> pandas agrees with todataframe
    pd.testing.assert_frame_equal(tbl.select(["i", "f", "b"]).to_pandas(), t.todataframe(columns=["i", "f", "b"]))


def test_to_arrow_edges():
    pa = pytest.importorskip("pyarrow")
    e = blzarr.ctable([np.zeros(0, "f8")], names=["x"])
    tbl = e.to_arrow()
    assert tbl.num_rows == 0 and tbl.schema.field("x").type == pa.float64()
    m = blzarr.ctable([np.zeros((4, 2))], names=["m"])
    with pytest.raises(ValueError, match="'m'.*1-d"):
        m.to_arrow()
    c = blzarr.ctable([np.arange(3) * 1j], names=["z"])
    with pytest.raises(TypeError, match="'z'"):
        c.to_arrow()
    with pytest.raises(KeyError, match="nope"):
        e.to_arrow(columns=["nope"])
