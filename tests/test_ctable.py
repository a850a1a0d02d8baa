"""ctable behaviour checked against NumPy structured arrays (and pandas / PyTables round trips)."""

import io
import os

import numpy as np
import pytest

import blzarr
from blzarr import cli, ctable
from blzarr.errors import FormatError, ReadOnlyError, StorageError
from helpers import make_ra

N = 10_000


@pytest.fixture
def where(layout):
    """Keyword arguments that put a new ctable in memory, in the bcolz layout or in the BLZ layout."""
    return layout


@pytest.fixture
def table(where):
    ra = make_ra()
    return ctable(ra, chunklen=1000, **where), ra


def assert_rows_equal(got, want):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ construction
def test_from_structured_array(table):
    t, ra = table
    assert t.names == list(ra.dtype.names)
    assert t.dtype == ra.dtype
    assert len(t) == t.len == N and t.shape == (N,) and t.ndim == 1 and t.size == N
    assert t.nbytes == ra.nbytes
    assert t.cbytes > 0
    assert_rows_equal(t[:], ra)


def test_from_list_of_arrays_and_carrays():
    a, b = np.arange(100), np.linspace(0, 1, 100)
    t = ctable([a, blzarr.carray(b)], names=["x", "y"])
    np.testing.assert_array_equal(t["x"][:], a)
    np.testing.assert_array_equal(t["y"][:], b)
    t = ctable([a, b])
    assert t.names == ["f0", "f1"]
    t = ctable([[1, 2, 3], [4.0, 5.0, 6.0]], names="p q")
    assert t.names == ["p", "q"] and t[1].tolist() == (2, 5.0)


def test_in_memory_carray_columns_are_not_copied():
    c = blzarr.carray(np.arange(10))
    t = ctable([c], names=["x"])
    assert t.cols["x"] is c


def test_from_dict_keeps_order():
    t = ctable({"z": np.arange(5), "a": np.arange(5.0)})
    assert t.names == ["z", "a"]
    assert t.dtype == np.dtype([("z", "i8"), ("a", "f8")])


def test_from_ctable_and_multidim_column():
    m = np.arange(30).reshape(10, 3)
    t = ctable([np.arange(10), m], names=["i", "m"])
    assert t.dtype == np.dtype([("i", "i8"), ("m", "i8", (3,))])
    np.testing.assert_array_equal(t[4]["m"], m[4])
    np.testing.assert_array_equal(t[2:5]["m"], m[2:5])
    t2 = ctable(t)
    assert_rows_equal(t2[:], t[:])


@pytest.mark.parametrize("kwargs, exc", [
    (dict(columns=[np.arange(3), np.arange(4)]), ValueError),
    (dict(columns=[np.arange(3)], names=["a", "b"]), ValueError),
    (dict(columns=[np.arange(3), np.arange(3)], names=["a", "a"]), ValueError),
    (dict(columns=np.arange(3)), ValueError),
    (dict(columns=42), ValueError),
    (dict(), ValueError),
    (dict(columns=[np.arange(3)], bogus=1), TypeError),
    (dict(columns=[np.arange(3)], mode="x"), ValueError),
])
def test_bad_construction(kwargs, exc):
    with pytest.raises(exc):
        ctable(**kwargs)


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "/abs", "../up", "a\\b", "__rootdirs__", "__attrs__",
                                  "not valid", "1x", "class", 3])
def test_unsafe_names_refused(name, tmp_path):
    with pytest.raises(ValueError, match="name"):
        ctable([np.arange(3)], names=[name], rootdir=str(tmp_path / "t"))
    assert not os.path.exists(tmp_path / "t")
    t = ctable([np.arange(3)], names=["ok"])
    with pytest.raises(ValueError, match="name"):
        t.addcol(np.arange(3), name=name)
    assert t.names == ["ok"]


def test_unsafe_names_in_rootdirs_file(tmp_path):
    root = str(tmp_path / "t")
    ctable([np.arange(3)], names=["ok"], rootdir=root)
    with open(os.path.join(root, "__rootdirs__"), "w") as f:
        f.write('{"names": ["../../etc"]}')
    with pytest.raises(FormatError, match="__rootdirs__"):
        blzarr.open(root)
    with open(os.path.join(root, "__rootdirs__"), "w") as f:
        f.write('{"names": ["missing"]}')
    with pytest.raises(StorageError, match="missing"):
        blzarr.open(root)
    with open(os.path.join(root, "__rootdirs__"), "w") as f:
        f.write('[1, 2')
    with pytest.raises(FormatError, match="__rootdirs__"):
        ctable(rootdir=root)


def test_cparams_chunklen_expectedlen_forwarded():
    cp = blzarr.cparams(clevel=9, cname="zstd", shuffle=blzarr.BITSHUFFLE)
    t = ctable(make_ra(100), cparams=cp, chunklen=17)
    assert t.cparams == cp
    for name in t.names:
        assert t.cols[name].cparams == cp and t.cols[name].chunklen == 17
    t = ctable(make_ra(10), expectedlen=10_000_000)
    assert t.cols["a"].chunklen == blzarr.carray(np.arange(10), expectedlen=10_000_000).chunklen
    t = ctable(make_ra(10), format="bcolz")
    assert len(t) == 10
    with pytest.raises(ValueError, match="format"):
        ctable(make_ra(10), format="nope")


def test_repr_and_str_numpy2(table):
    t, ra = table
    r = repr(t)
    assert r.startswith(f"ctable(({N},), {ra.dtype})")
    assert "nbytes" in r and "cbytes" in r and "cparams" in r
    if t.rootdir:
        assert t.rootdir in r
    assert "..." in str(t)
    small = ctable(make_ra(3))
    assert "'u1'" in str(small) and "np." not in str(small)
    assert repr(ctable([np.arange(0)], names=["a"])).startswith("ctable((0,)")


def test_cols_accessor(table):
    t, ra = table
    assert list(t.cols) == t.names and len(t.cols) == len(ra.dtype.names)
    assert "a" in t.cols and "zz" not in t.cols
    np.testing.assert_array_equal(t.cols["b"][:], ra["b"])
    with pytest.raises(KeyError, match="zz"):
        t.cols["zz"]
    assert "a : " in repr(t.cols)


# ------------------------------------------------------------------ getitem
def test_getitem_int(table):
    t, ra = table
    for i in (0, 1, 999, 1000, N - 1, -1, -N):
        r = t[i]
        assert isinstance(r, np.void)
        assert r == ra[i]
    assert t[np.int32(7)] == ra[7]
    with pytest.raises(IndexError):
        t[N]
    with pytest.raises(IndexError):
        t[-N - 1]


@pytest.mark.parametrize("sl", [slice(None), slice(10, 20), slice(5, 9000, 7), slice(None, None, 1000),
                                slice(-50, None), slice(100, 10), slice(None, None, -3), slice(8000, 10, -11)])
def test_getitem_slice(table, sl):
    t, ra = table
    assert_rows_equal(t[sl], ra[sl])


def test_getitem_fancy_and_mask(table):
    t, ra = table
    idx = [5, 0, N - 1, 1234, 1234, -2]
    assert_rows_equal(t[idx], ra[idx])
    assert_rows_equal(t[np.array(idx)], ra[np.array(idx)])
    assert_rows_equal(t[[]], ra[[]])
    mask = (ra["a"] % 7 == 0) | (ra["b"] > 4000)
    assert_rows_equal(t[mask], ra[mask])
    assert_rows_equal(t[blzarr.carray(mask, chunklen=333)], ra[mask])
    with pytest.raises(IndexError):
        t[mask[:-1]]
    with pytest.raises(IndexError):
        t[[0, N]]
    with pytest.raises(IndexError):
        t[np.array([1.5])]
    with pytest.raises(IndexError):
        t[1, 2]


def test_getitem_names(table):
    t, ra = table
    c = t["b"]
    assert isinstance(c, blzarr.carray)
    np.testing.assert_array_equal(c[:], ra["b"])
    sub = t[["c", "a"]]
    assert isinstance(sub, ctable) and sub.names == ["c", "a"]
    assert_rows_equal(sub[:], ra[["c", "a"]].astype([("c", "U6"), ("a", "i8")]))


def test_getitem_expression(table):
    t, ra = table
    assert_rows_equal(t["(a > 3) & (b < 2)"], ra[(ra["a"] > 3) & (ra["b"] < 2)])
    assert_rows_equal(t["a % 3 == 1"], ra[ra["a"] % 3 == 1])
    lim = 4000.5
    assert_rows_equal(t["b > lim"], ra[ra["b"] > lim])
    assert_rows_equal(t["a < 0"], ra[:0])
    with pytest.raises(ValueError, match="boolean"):
        t["a + 1"]
    with pytest.raises(NameError, match="nosuch"):
        t["nosuch > 3"]


def test_string_and_datetime_queries(table):
    t, ra = table
    assert_rows_equal(t.fetchwhere("d == b'3'", out_flavor="numpy", vm="python"), ra[ra["d"] == b"3"])
    assert_rows_equal(t.fetchwhere("d == b'3'", out_flavor="numpy", vm="numexpr"), ra[ra["d"] == b"3"])


# ------------------------------------------------------------------ setitem
def test_setitem_rows_and_slices(table):
    t, ra = table
    ra = ra.copy()
    t[3] = (-1, -1.5, "x", b"y", np.datetime64("1999-01-01T00:00:00"))
    ra[3] = (-1, -1.5, "x", b"y", np.datetime64("1999-01-01T00:00:00"))
    t[10:20] = ra[100:110]
    ra[10:20] = ra[100:110]
    t[5000:9000:333] = (7, 7.0, "s", b"s", np.datetime64("2001-01-01T00:00:00"))
    ra[5000:9000:333] = (7, 7.0, "s", b"s", np.datetime64("2001-01-01T00:00:00"))
    t[[1, 2, N - 1]] = [(9, 9.0, "n", b"n", ra["e"][0])] * 3
    ra[[1, 2, N - 1]] = [(9, 9.0, "n", b"n", ra["e"][0])] * 3
    t["a > 9990"] = (0, 0.0, "z", b"z", ra["e"][1])
    ra[ra["a"] > 9990] = (0, 0.0, "z", b"z", ra["e"][1])
    assert_rows_equal(t[:], ra)
    newb = np.arange(N) * 2.0
    t["b"] = newb
    np.testing.assert_array_equal(t["b"][:], newb)
    if t.rootdir:
        assert_rows_equal(blzarr.open(t.rootdir)[:], t[:])
    with pytest.raises(ValueError):
        t[0] = ("not a number", 1.0, "a", b"b", ra["e"][0])
    with pytest.raises(ValueError, match="length"):
        t["b"] = np.arange(3)


# ------------------------------------------------------------------ append / resize / trim
def test_append_forms(table):
    t, ra = table
    row = (N, 0.25, "new", b"nw", np.datetime64("2030-01-01T00:00:00"))
    t.append(row)
    extra = make_ra(5)
    t.append(extra)
    t.append([extra[n] for n in extra.dtype.names])
    t.append([blzarr.carray(extra[n]) for n in extra.dtype.names])
    t.append(ctable(extra))
    t.append(extra[0])
    t.append({n: extra[n][:2] for n in extra.dtype.names})
    t.append([tuple(r) for r in extra[:3]])
    want = np.concatenate([ra, np.array([row], dtype=ra.dtype), extra, extra, extra, extra, extra[:1],
                           extra[:2], extra[:3]])
    assert len(t) == len(want)
    assert_rows_equal(t[:], want)
    if t.rootdir:
        assert_rows_equal(blzarr.open(t.rootdir, mode="r")[:], want)


def test_append_is_atomic_on_error():
    t = ctable(make_ra(10))
    before = t[:]
    with pytest.raises(ValueError, match="same length"):
        t.append([np.arange(2), np.arange(3.0), ["a"] * 2, [b"b"] * 2, before["e"][:2]])
    with pytest.raises((TypeError, ValueError)):
        t.append([np.arange(2), np.arange(2.0), ["a"] * 2, [b"b"] * 2, ["not a date", "x"]])
    with pytest.raises(ValueError):
        t.append((1, 2))
    assert len(t) == 10
    for n in t.names:
        assert len(t.cols[n]) == 10
    assert_rows_equal(t[:], before)


def test_resize_trim(table):
    t, ra = table
    t.trim(3)
    assert_rows_equal(t[:], ra[:-3])
    t.resize(N + 5)
    assert len(t) == N + 5
    assert_rows_equal(t[:N - 3], ra[:-3])
    assert t[N + 4]["a"] == 0 and t[N + 4]["c"] == ""
    t.resize(10)
    assert_rows_equal(t[:], ra[:10])
    if t.rootdir:
        assert_rows_equal(blzarr.open(t.rootdir)[:], ra[:10])
    with pytest.raises(ValueError):
        t.trim(11)
    with pytest.raises(ValueError):
        t.resize(-1)


# ------------------------------------------------------------------ columns
def test_addcol_delcol(table, where):
    t, ra = table
    t.addcol(np.arange(N) * 3, name="x")
    t.addcol(blzarr.carray(np.ones(N)), name="y", pos=0)
    t.addcol(list(range(N)), pos=2)
    assert t.names == ["y", "a", "f2", "b", "c", "d", "e", "x"]
    np.testing.assert_array_equal(t["x"][:], np.arange(N) * 3)
    np.testing.assert_array_equal(t[5]["y"], 1.0)
    with pytest.raises(ValueError, match="already exists"):
        t.addcol(np.arange(N), name="x")
    with pytest.raises(ValueError, match="length"):
        t.addcol(np.arange(N - 1), name="w")
    with pytest.raises(ValueError, match="pos"):
        t.addcol(np.arange(N), name="w", pos=99)
    t.delcol("x")
    t.delcol(pos=0)
    t.delcol(pos=1)
    assert t.names == list(ra.dtype.names)
    assert_rows_equal(t[:], ra)
    with pytest.raises(ValueError):
        t.delcol()
    with pytest.raises(ValueError):
        t.delcol("a", pos=0)
    with pytest.raises(ValueError, match="zz"):
        t.delcol("zz")
    if where.name in ("bcolz", "blz"):   # the column directories are at root/<name> in both layouts
        assert sorted(os.listdir(t.rootdir)) == sorted(["__attrs__", "__rootdirs__"] + t.names)
    if t.rootdir:
        assert blzarr.open(t.rootdir).names == t.names


def test_delcol_keep_on_disk(tmp_path):
    root = str(tmp_path / "t")
    t = ctable(make_ra(50), rootdir=root, format="bcolz")
    t.delcol("b", keep=True)
    assert os.path.isdir(os.path.join(root, "b"))
    t.delcol("c")
    assert not os.path.exists(os.path.join(root, "c"))
    t2 = blzarr.open(root)
    assert t2.names == ["a", "d", "e"]
    np.testing.assert_array_equal(blzarr.open(os.path.join(root, "b"))[:], make_ra(50)["b"])


def test_addcol_disk_carray_copy_and_move(tmp_path):
    root = str(tmp_path / "t")
    t = ctable(make_ra(20), rootdir=root)
    src = blzarr.carray(np.arange(20) * 2, rootdir=str(tmp_path / "src"))
    t.addcol(src, name="copied")
    assert os.path.isdir(tmp_path / "src")
    src2 = blzarr.carray(np.arange(20) * 5, rootdir=str(tmp_path / "src2"))
    t.addcol(src2, name="moved", move=True)
    assert not os.path.exists(tmp_path / "src2")
    t2 = blzarr.open(root)
    np.testing.assert_array_equal(t2["copied"][:], np.arange(20) * 2)
    np.testing.assert_array_equal(t2["moved"][:], np.arange(20) * 5)


# ------------------------------------------------------------------ disk behaviour
def test_open_modes(tmp_path):
    root = str(tmp_path / "t")
    ra = make_ra(100)
    t = ctable(ra, rootdir=root)
    t.attrs["unit"] = "m"
    with pytest.raises(StorageError, match="already exists"):
        ctable(ra, rootdir=root)
    r = ctable(rootdir=root, mode="r")
    assert_rows_equal(r[:], ra)
    assert r.attrs["unit"] == "m"
    for op in (lambda: r.append(ra[:1]), lambda: r.addcol(np.arange(100), "z"), lambda: r.delcol("a"),
               lambda: r.__setitem__(0, ra[1]), lambda: r.trim(1), lambda: r.resize(3)):
        with pytest.raises(ReadOnlyError):
            op()
    assert_rows_equal(blzarr.open(root)[:], ra)
    w = blzarr.open(root, mode="w")
    assert len(w) == 0 and w.dtype == ra.dtype
    with pytest.raises(StorageError):
        ctable(rootdir=str(tmp_path / "nothing"), mode="r")
    with pytest.raises(StorageError):
        ctable(rootdir=str(tmp_path / "nothing"))


def test_walk_finds_tables(tmp_path):
    ctable(make_ra(5), rootdir=str(tmp_path / "t1"))
    blzarr.carray(np.arange(3), rootdir=str(tmp_path / "c1"))
    kinds = sorted(type(o).__name__ for o in blzarr.walk(str(tmp_path)))
    assert kinds == ["carray", "ctable"]
    assert [o.names for o in blzarr.walk(str(tmp_path), classname="ctable")] == [list(make_ra(1).dtype.names)]


def test_copy(table, tmp_path):
    t, ra = table
    c = t.copy()
    assert c.rootdir is None
    assert_rows_equal(c[:], ra)
    c.append(ra[:1])
    assert len(t) == N
    d = t.copy(rootdir=str(tmp_path / "copy"), cparams=blzarr.cparams(clevel=1))
    assert d.cparams.clevel == 1 and d.cols["a"].cparams.clevel == 1
    assert_rows_equal(blzarr.open(str(tmp_path / "copy"))[:], ra)
    if t.rootdir:
        with pytest.raises(StorageError):
            t.copy(rootdir=t.rootdir)


def test_flush_free_cachemem_context(tmp_path):
    root = str(tmp_path / "t")
    with ctable(make_ra(10), rootdir=root, auto_flush=False) as t:
        t.append(make_ra(3))
    assert len(blzarr.open(root)) == 13
    t.free_cachemem()
    assert_rows_equal(t[:], blzarr.open(root)[:])


def test_attrs_persist(tmp_path):
    root = str(tmp_path / "t")
    t = ctable(make_ra(3), rootdir=root)
    t.attrs["a"] = 1
    t.attrs["b"] = [1, 2]
    assert blzarr.open(root).attrs.getall() == {"a": 1, "b": [1, 2]}


# ------------------------------------------------------------------ iteration and queries
def test_iter(table):
    t, ra = table
    rows = list(t.iter(3, 3000, 7))
    assert len(rows) == len(ra[3:3000:7])
    assert rows[5] == tuple(ra[3 + 35])
    assert rows[5]._fields == tuple(ra.dtype.names)
    r = list(t.iter(outcols="b, nrow__", skip=3, limit=4))
    assert [x.nrow__ for x in r] == [3, 4, 5, 6]
    assert [x.b for x in r] == ra["b"][3:7].tolist()
    assert list(t.iter(0, 5, outcols=["a"], out_flavor=tuple)) == [(i,) for i in range(5)]
    arr_rows = list(t.iter(0, 2, out_flavor=np.ndarray))
    assert arr_rows[1].dtype == ra.dtype and arr_rows[1][0] == ra[1]
    assert sum(1 for _ in t) == N
    with pytest.raises(NotImplementedError):
        t.iter(step=-1)
    with pytest.raises(ValueError, match="outcols"):
        t.iter(outcols=["nope"])


def test_where(table):
    t, ra = table
    want = ra[(ra["a"] > 100) & (ra["b"] < 200)]
    got = list(t.where("(a > 100) & (b < 200)"))
    assert len(got) == len(want)
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    got = list(t.where("(a > 100) & (b < 200)", outcols="nrow__, c", limit=5, skip=10))
    assert [r.nrow__ for r in got] == list(range(111, 116))
    assert [r.c for r in got] == ra["c"][111:116].tolist()
    mask = ra["a"] % 11 == 0
    assert [r.a for r in t.where(blzarr.carray(mask))] == ra["a"][mask].tolist()
    assert [r[0] for r in t.where(mask, out_flavor=tuple, outcols=["a"])] == ra["a"][mask].tolist()
    assert [r.a for r in t.where("a < v", user_dict={"v": 3})] == [0, 1, 2]
    with pytest.raises(NameError):
        t.where("qq > 1")
    with pytest.raises(ValueError):
        list(t.where("a + 1"))
    with pytest.raises(ValueError):
        t.where(42)
    with pytest.raises(ValueError, match="length"):
        t.where(mask[:-1])


def test_where_vms_agree(table):
    t, ra = table
    expr = "(b > 10) & (a < 5000) | (a == 7)"
    want = ra[((ra["b"] > 10) & (ra["a"] < 5000)) | (ra["a"] == 7)]
    for vm in ("python", "numexpr", "dask"):
        if not getattr(blzarr, f"{vm}_here", True):
            with pytest.raises(ImportError, match=vm):
                t.fetchwhere(expr, vm=vm, out_flavor="numpy")
            continue
        assert_rows_equal(t.fetchwhere(expr, vm=vm, out_flavor="numpy"), want)


def test_whereblocks(table):
    t, ra = table
    want = ra[ra["a"] % 2 == 0]
    blocks = list(t.whereblocks("a % 2 == 0", blen=777))
    assert all(len(b) == 777 for b in blocks[:-1]) and 0 < len(blocks[-1]) <= 777
    assert_rows_equal(np.concatenate(blocks), want)
    blocks = list(t.whereblocks("a % 2 == 0", blen=100, outcols=["nrow__", "b"], limit=250, skip=5))
    got = np.concatenate(blocks)
    assert got.dtype.names == ("nrow__", "b")
    np.testing.assert_array_equal(got["nrow__"], np.flatnonzero(ra["a"] % 2 == 0)[5:255])
    with pytest.raises(ValueError):
        t.whereblocks("a > 1", blen=0)


def test_fetchwhere(table, tmp_path):
    t, ra = table
    want = ra[ra["b"] > 3000]
    got = t.fetchwhere("b > 3000")
    assert isinstance(got, ctable)
    assert_rows_equal(got[:], want)
    got = t.fetchwhere("b > 3000", out_flavor="numpy", outcols=["e", "a"], limit=10, skip=1)
    assert got.dtype.names == ("e", "a")
    np.testing.assert_array_equal(got["a"], want["a"][1:11])
    disk = t.fetchwhere("b > 3000", rootdir=str(tmp_path / "res"))
    assert_rows_equal(blzarr.open(str(tmp_path / "res"))[:], want)
    assert disk.rootdir == str(tmp_path / "res")
    none = t.fetchwhere("a < 0")
    assert len(none) == 0 and none.dtype == ra.dtype
    with pytest.raises(ValueError):
        t.fetchwhere("a > 0", out_flavor="nope")


def test_query_reads_blockwise(monkeypatch):
    """A query never asks a column for more than one block of rows at a time."""
    t = ctable(make_ra(50_000), chunklen=1000)
    seen = []
    orig = blzarr.carray.__getitem__

    def spy(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            seen.append(stop - start)
        return orig(self, key)

    monkeypatch.setattr(blzarr.carray, "__getitem__", spy)
    n = len(t.fetchwhere("(a > 10) & (b < 20000)", out_flavor="numpy"))
    assert n == ((make_ra(50_000)["a"] > 10) & (make_ra(50_000)["b"] < 20000)).sum()
    assert seen and max(seen) <= 4096


def test_eval(table):
    t, ra = table
    k = 3  # noqa: F841 (used by the expression)
    r = t.eval("a * k + b")
    assert isinstance(r, blzarr.carray)
    np.testing.assert_allclose(r[:], ra["a"] * 3 + ra["b"])
    np.testing.assert_allclose(t.eval("a * k + b", out_flavor="numpy", vm="python"), ra["a"] * 3 + ra["b"])
    np.testing.assert_allclose(t.eval("a + q", user_dict={"q": 0.5}, out_flavor="numpy"), ra["a"] + 0.5)


def test_iterblocks_toplevel(table):
    t, ra = table
    got = np.concatenate(list(blzarr.iterblocks(t, blen=3001)))
    assert_rows_equal(got, ra)


def test_empty_ctable():
    t = ctable([np.empty(0, "i4"), np.empty(0, "f8")], names=["a", "b"])
    assert len(t) == 0
    assert t[:].dtype == np.dtype([("a", "i4"), ("b", "f8")])
    assert list(t.where("a > 0")) == []
    assert len(t.fetchwhere("a > 0", out_flavor="numpy")) == 0
    t.append((1, 2.0))
    assert t[0].tolist() == (1, 2.0)


# ------------------------------------------------------------------ pandas
def test_dataframe_roundtrip(where):
    pd = pytest.importorskip("pandas")
    n = 1000
    df = pd.DataFrame({
        "i": np.arange(n, dtype="i4"),
        "f": np.linspace(0, 1, n),
        "when": pd.date_range("2021-01-01", periods=n, freq="h"),
        "s": [f"name{i % 17}" for i in range(n)],
        "u": [f"é{i % 5}ü" for i in range(n)],
        "cat": pd.Categorical([["lo", "mid", "hi"][i % 3] for i in range(n)]),
        "flag": np.arange(n) % 2 == 0,
    })
    t = ctable.fromdataframe(df, **where)
    assert t.names == list(df.columns)
    assert t.dtype["s"].kind == "U" and t.dtype["cat"].kind == "U" and t.dtype["when"].kind == "M"
    np.testing.assert_array_equal(t["u"][:], df["u"].to_numpy(dtype=str))
    back = t.todataframe()
    assert list(back.columns) == list(df.columns)
    expected = df.assign(cat=df["cat"].astype(str), s=df["s"].astype(object), u=df["u"].astype(object))
    for c in df.columns:
        np.testing.assert_array_equal(back[c].to_numpy(), expected[c].to_numpy(), err_msg=c)
    sub = t.todataframe(columns=["f", "i"])
    assert list(sub.columns) == ["f", "i"]
    q = t.fetchwhere("(i > 10) & (f < 0.5)", out_flavor="numpy")
    np.testing.assert_array_equal(q["i"], df.query("i > 10 and f < 0.5")["i"].to_numpy())
    if where:
        t2 = blzarr.open(where["rootdir"])
        np.testing.assert_array_equal(t2.todataframe()["s"].to_numpy(), df["s"].to_numpy(dtype=object))


def test_dataframe_bytes_missing_and_bad_names():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"b": [b"x", b"yy"], "m": ["a", None], "x": [1, 2]})
    t = ctable.fromdataframe(df)
    assert t.dtype["b"] == np.dtype("S2")
    # a missing string is a validity column beside the values, not a pickled object
    assert t.dtype["m"] == np.dtype("U1") and t.names == ["b", "m", "m_valid", "x"]
    assert t["m"][:].tolist() == ["a", ""] and t["m_valid"][:].tolist() == [True, False]
    back = t.todataframe()
    assert list(back.columns) == ["b", "m", "x"] and back["m"][0] == "a" and pd.isna(back["m"][1])
    with pytest.raises(ValueError, match="name"):
        ctable.fromdataframe(pd.DataFrame({"bad name": [1]}))
    with pytest.raises(ValueError, match="1-d"):
        ctable([np.zeros((2, 3))], names=["m"]).todataframe()


# ------------------------------------------------------------------ HDF5
def test_hdf5_roundtrip(tmp_path):
    tables = pytest.importorskip("tables")
    ra = make_ra(3000)[["a", "b", "d"]].copy()
    ra = np.array(ra, dtype=[("a", "i8"), ("b", "f8"), ("d", "S4")])
    t = ctable(ra)
    t.attrs["origin"] = "test"
    path = str(tmp_path / "t.h5")
    t.tohdf5(path)
    with tables.open_file(path) as f:
        np.testing.assert_array_equal(f.root.ctable.read(), ra)
        assert f.root.ctable.attrs["origin"] == "test"
    with pytest.raises(StorageError, match="exists"):
        t.tohdf5(path)
    t.tohdf5(path, nodepath="/grp/other", mode="a", cparams=blzarr.cparams(cname="zstd"))
    t2 = ctable.fromhdf5(path, nodepath="/grp/other", rootdir=str(tmp_path / "fromh5"))
    assert_rows_equal(t2[:], ra)
    assert t2.attrs["origin"] == "test"
    assert_rows_equal(ctable.fromhdf5(path)[:], ra)
    with pytest.raises(KeyError):
        ctable.fromhdf5(path, nodepath="/nothing")
    with pytest.raises(StorageError):
        ctable.fromhdf5(str(tmp_path / "missing.h5"))


# ------------------------------------------------------------------ BLZ format
def _blz_available(tmp_path):
    try:
        blzarr.carray(np.arange(2), rootdir=str(tmp_path / "probe"), format="blz")
        return True
    except ValueError:
        return False


def test_blz_format_layout(tmp_path):
    if not _blz_available(tmp_path):
        pytest.skip("the carray has no 'blz' format yet")
    root = str(tmp_path / "t")
    ra = make_ra(3000)
    t = ctable(ra, rootdir=root, format="blz", chunklen=500)
    assert t.format == "blz"
    t.append(make_ra(10))
    t.addcol(np.arange(3010), name="z")
    t.delcol("c")
    t.attrs["k"] = "v"
    import json
    with open(os.path.join(root, "__rootdirs__")) as f:
        assert json.load(f) == {"names": ["a", "b", "d", "e", "z"], "format": "blz"}
    assert sorted(os.listdir(root)) == ["__attrs__", "__rootdirs__", "a", "b", "d", "e", "z"]
    o = blzarr.open(root)
    assert o.format == "blz" and all(o.cols[n].format == "blz" for n in o.names)
    want = np.concatenate([ra, make_ra(10)])
    for n in ["a", "b", "d", "e"]:
        np.testing.assert_array_equal(o[n][:], want[n])
    np.testing.assert_array_equal(o.fetchwhere("a > 2990", out_flavor="numpy")["z"], np.arange(2991, 3000))
    assert o.attrs["k"] == "v"
    c = o.copy(rootdir=str(tmp_path / "c"))
    assert c.format == "blz"
    b = t.copy(rootdir=str(tmp_path / "b"), format="bcolz")
    assert b.format == "bcolz" and os.path.isdir(os.path.join(str(tmp_path / "b"), "a", "meta"))


def test_bcolz_format_is_default_layout(tmp_path):
    t = ctable(make_ra(5), rootdir=str(tmp_path / "t"), format="bcolz")
    assert t.format == "bcolz" and ctable(make_ra(5)).format is None
    import json
    with open(os.path.join(str(tmp_path / "t"), "__rootdirs__")) as f:
        assert json.load(f) == {"names": ["a", "b", "c", "d", "e"]}
    with open(os.path.join(str(tmp_path / "t"), "__rootdirs__"), "w") as f:
        f.write('{"names": ["a"], "format": "zarr"}')
    with pytest.raises(FormatError, match="format"):
        blzarr.open(str(tmp_path / "t"))


# ------------------------------------------------------------------ odds and ends
def _one_column_trimmed(tmp_path, name):
    """A bcolz-layout table of make_ra(20) whose column `name` is 3 atoms shorter than the others (its
    root, and a reader of it, open): a reader warns of the lengths and shows the first 17 rows."""
    root = str(tmp_path / "t")
    ctable(make_ra(20), rootdir=root, format="bcolz")
    col = blzarr.open(os.path.join(root, name))
    col.trim(3)
    del col
    with pytest.warns(RuntimeWarning, match="different lengths"):
        t = blzarr.open(root, mode="r")
    assert len(t) == 17 and t[:].tolist() == make_ra(20)[:17].tolist()
    return root, t


def test_columns_of_different_lengths_on_disk(tmp_path):
    # what a writer killed between two column flushes of an append leaves: the columns before the
    # last one are longer; the last column's length is the table's.  A reader shows those rows and
    # leaves the files, a writer drops the extra atoms
    root, t = _one_column_trimmed(tmp_path, "e")
    assert len(blzarr.open(os.path.join(root, "a"), mode="r")) == 20
    del t
    with pytest.warns(RuntimeWarning, match="different lengths"):
        t = blzarr.open(root, mode="a")
    # opening with mode 'a' reads as 'r' does until the first write, which drops the extra atoms
    assert len(t) == 17 and len(blzarr.open(os.path.join(root, "a"), mode="r")) == 20
    t.attrs["first write"] = 1
    assert len(t) == 17 and all(len(blzarr.open(os.path.join(root, n), mode="r")) == 17 for n in t.names)
    t.append(make_ra(20)[17:])
    assert blzarr.open(root, mode="r")[:].tolist() == make_ra(20).tolist()


def test_a_column_shorter_than_the_last_is_reported_never_repaired(tmp_path):
    # no interrupted write leaves a column shorter than the last one: the rows the others hold are
    # committed, and no writer drops them to make the lengths agree
    root, t = _one_column_trimmed(tmp_path, "b")
    del t
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        t = blzarr.open(root, mode="a")
    with pytest.raises(blzarr.StorageError, match=r"columns \['b'\].*fewer rows.*salvage"):
        t.append(make_ra(1))
    with pytest.warns(RuntimeWarning), pytest.raises(blzarr.StorageError, match="fewer rows"):
        blzarr.open(root, mode="a").attrs["x"] = 1
    assert all(len(blzarr.open(os.path.join(root, n), mode="r")) == 20 for n in "acde")
    out = io.StringIO()
    with pytest.warns(RuntimeWarning):
        assert cli.main(["verify", root], out=out) == 1
    assert "fewer rows" in out.getvalue()


def test_cols_setitem_and_array_protocol():
    ra = make_ra(50)
    t = ctable(ra)
    t.cols["b"] = np.arange(50)  # replaces, keeps the float dtype
    assert t.dtype["b"] == np.dtype("f8")
    np.testing.assert_array_equal(t["b"][:], np.arange(50.0))
    t.cols["extra"] = np.ones(50, dtype="i2")  # a new name adds a column
    assert t.names[-1] == "extra" and t.dtype["extra"] == np.dtype("i2")
    arr = np.asarray(t)
    assert arr.dtype == t.dtype and len(arr) == 50
    np.testing.assert_array_equal(arr["a"], ra["a"])


def test_dataframe_tz_categorical_numbers_and_names():
    pd = pytest.importorskip("pandas")
    n = 40
    df = pd.DataFrame({
        "tz": pd.date_range("2022-03-01", periods=n, freq="D", tz="Europe/Paris"),
        "ci": pd.Categorical(np.arange(n) % 4 * 10),
        "nullable": pd.array(np.arange(n), dtype="Int64"),
    })
    t = ctable.fromdataframe(df, names=["x", "y", "z"])
    assert t.names == ["x", "y", "z"]
    assert t.dtype["x"].kind == "M"
    np.testing.assert_array_equal(t["x"][:], df["tz"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy())
    assert t.dtype["y"].kind == "i"
    np.testing.assert_array_equal(t["y"][:], np.arange(n) % 4 * 10)
    np.testing.assert_array_equal(t["z"][:], np.arange(n))
    with pytest.raises(TypeError):
        ctable.fromdataframe({"a": [1]})


def test_text_into_bytes_columns_and_bad_column_replacement(tmp_path):
    root = str(tmp_path / "t")
    with ctable(np.empty(0, dtype=[("s", "S5"), ("i", "i4")]), rootdir=root) as t:
        t.append(("abcde", 1))
        t.append([["x", "yz"], [2, 3]])
        with pytest.raises(ValueError, match="ASCII"):
            t.append(("é", 4))
        with pytest.raises(ValueError, match="'i'"):
            t["i"] = {"a": 1, "b": 2, "c": 3}
    back = blzarr.open(root)
    assert back["s"][:].tolist() == [b"abcde", b"x", b"yz"]
    assert back["i"][:].tolist() == [1, 2, 3]


def test_delcol_flushes_on_disk(tmp_path):
    root = str(tmp_path / "t")
    t = ctable(make_ra(105), rootdir=root, chunklen=30)
    t.append(make_ra(2))
    t.delcol("b")
    np.testing.assert_array_equal(blzarr.open(root)["a"][:], np.r_[np.arange(105), 0, 1])


def test_expression_with_outside_arrays_and_bad_vm(table):
    t, ra = table
    other = np.arange(N)[::-1].copy()
    assert_rows_equal(t["(a < other) & (a > 4990)"], ra[(ra["a"] < other) & (ra["a"] > 4990)])
    short = np.arange(5)  # noqa: F841 (used by the expression)
    with pytest.raises(ValueError, match="length"):
        t.where("a < short")
    with pytest.raises(ValueError, match="vm"):
        t.where("a > 1", vm="bogus")
    with pytest.raises(ValueError, match="vm"):
        t.fetchwhere("a > 1", vm="bogus")


def test_hdf5_unicode_and_datetimes_roundtrip(tmp_path):
    tables = pytest.importorskip("tables")
    ra = make_ra(2500)
    ra["c"][:3] = ["é€x", "ü", ""]
    t = ctable(ra, chunklen=700)
    path = str(tmp_path / "u.h5")
    t.tohdf5(path)
    with tables.open_file(path) as f:
        raw = f.root.ctable.read()
        assert raw["c"][0] == "é€x".encode("utf-8")
        np.testing.assert_array_equal(raw["e"], ra["e"].view("i8"))
    back = ctable.fromhdf5(path)
    assert back.dtype == ra.dtype
    assert_rows_equal(back[:], ra)
    assert "BLZARR_DTYPES" not in back.attrs


def test_creating_over_the_source_columns_is_refused(tmp_path):
    root = str(tmp_path / "t")
    t = ctable(make_ra(10), rootdir=root)
    with pytest.raises(ValueError, match="inside the rootdir"):
        ctable([t["a"], t["b"]], names=["a", "b"], rootdir=root, mode="w")
    assert_rows_equal(blzarr.open(root)[:], make_ra(10))


def test_interleaved_iterators_do_not_interfere(table):
    t, ra = table
    w1 = t.where("a % 2 == 0", outcols="a")
    w2 = t.where("a % 3 == 0", outcols="a")
    it = t.iter(outcols="b")
    got1, got2, got3 = [], [], []
    for r1, r2, r3 in zip(w1, w2, it):
        got1.append(r1.a)
        got2.append(r2.a)
        got3.append(r3.b)
    n = len(got2)
    assert got1 == ra["a"][ra["a"] % 2 == 0][:n].tolist()
    assert got2 == ra["a"][ra["a"] % 3 == 0].tolist()
    assert got3 == ra["b"][:n].tolist()


def test_multidim_column_queries():
    m = np.arange(3000).reshape(1000, 3)
    t = ctable([np.arange(1000), m], names=["i", "m"], chunklen=64)
    got = t.fetchwhere("i > 990", out_flavor="numpy")
    np.testing.assert_array_equal(got["m"], m[991:])
    rows = list(t.where("i < 2", outcols="m"))
    np.testing.assert_array_equal(rows[1].m, m[1])
