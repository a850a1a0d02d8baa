"""Top-level constructors and helpers, against NumPy and (for shapes and chunklens) real bcolz."""

import os

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import blzarr


def same(c, expected):
    got = c[:]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert_array_equal(got, expected)


@pytest.mark.parametrize("shape", [0, 1, 10, 12345, (7, 3), (100, 2, 2), 5.0, np.int32(4)])
@pytest.mark.parametrize("dtype", ["f8", "i1", "u4", "?", "c8", "S3", "M8[D]", ("i2", (2,))])
def test_zeros_ones_fill(bcolz, shape, dtype):
    npshape = (int(shape),) if np.ndim(shape) == 0 else shape
    dt = np.dtype(dtype)
    full = npshape + dt.shape
    z = blzarr.zeros(shape, dtype=dtype)
    same(z, np.zeros(full, dtype=dt.base))
    assert z.shape == full
    if dt.kind not in "SM":
        same(blzarr.ones(shape, dtype=dtype), np.ones(full, dtype=dt.base))
    value = {"f": 2.5, "i": -3, "u": 7, "b": True, "c": 1 + 1j, "S": b"ab", "M": np.datetime64("2020-01-02")}[
        dt.base.kind]
    f = blzarr.fill(shape, value, dtype=dtype)
    same(f, np.full(full, value, dtype=dt.base))
    assert f.dflt == np.array(value, dtype=dt.base)
    if not dt.shape:
        assert f.chunklen == bcolz.fill(npshape, value, dtype=dtype).chunklen


def test_fill_default_float_and_kwargs(bcolz, tmp_path):
    f = blzarr.fill(10, 3)
    assert f.dtype == np.float64
    same(f, np.full(10, 3.0))
    p = str(tmp_path / "z")
    z = blzarr.zeros(1000, dtype="i4", rootdir=p, format="bcolz", chunklen=64,
                     cparams=blzarr.cparams(clevel=9))
    assert z.chunklen == 64 and z.cparams.clevel == 9
    same(blzarr.open(p), np.zeros(1000, "i4"))
    same(bcolz.open(p), np.zeros(1000, "i4"))
    with pytest.raises(ValueError):
        blzarr.zeros(-1)
    with pytest.raises(TypeError):
        blzarr.zeros("abc")
    with pytest.raises(ValueError):
        blzarr.fill(3, "abc", dtype="i4")


def test_structured_fill_gives_ctable_like_bcolz(bcolz):
    z = blzarr.zeros(5, dtype="i4,f8")
    b = bcolz.zeros(5, dtype="i4,f8")
    assert type(z).__name__ == type(b).__name__ == "ctable"
    assert z[:].tobytes() == np.zeros(5, "i4,f8").tobytes()
    o = blzarr.ones(3, dtype=[("a", "i2"), ("b", "f4")])
    assert o[:].tolist() == [(1, 1.0)] * 3


@pytest.mark.parametrize("args", [(10,), (3, 20), (3, 20, 4), (20, 3, -2), (0,), (-5,), (5, 3),
                                  (0.0, 1.0, 0.1), (1.5, 7.25, 0.5), (10 ** 6,), (-10, 10 ** 5, 7)])
def test_arange_like_numpy(args):
    same(blzarr.arange(*args), np.arange(*args))


@pytest.mark.parametrize("dtype", ["i1", "u2", "f4", "i8", "f8"])
def test_arange_dtype(dtype):
    same(blzarr.arange(0, 100, 3, dtype=dtype), np.arange(0, 100, 3, dtype=dtype))


def test_arange_kwargs_and_errors(bcolz, tmp_path):
    c = blzarr.arange(100, chunklen=7)
    assert c.chunklen == 7 and c.nchunks == 14
    assert blzarr.arange(10 ** 5).chunklen == bcolz.arange(10 ** 5).chunklen
    p = str(tmp_path / "ar")
    blzarr.arange(50, rootdir=p, format="bcolz")
    same(bcolz.open(p), np.arange(50))
    with pytest.raises(ValueError):
        blzarr.arange()
    with pytest.raises(ValueError):
        blzarr.arange(0, 10, 0)


def test_fromiter(bcolz):
    same(blzarr.fromiter(iter(range(100)), dtype="i4", count=100), np.arange(100, dtype="i4"))
    same(blzarr.fromiter(range(100), dtype="f8", count=10), np.arange(10.0))
    same(blzarr.fromiter((x * 0.5 for x in range(10000)), dtype="f8", count=-1), np.arange(10000) * 0.5)
    same(blzarr.fromiter([], dtype="i2", count=-1), np.empty(0, "i2"))
    same(blzarr.fromiter(iter([b"a", b"bc"]), dtype="S2", count=2), np.array([b"a", b"bc"]))
    c = blzarr.fromiter(range(1000), dtype="i8", count=1000, chunklen=33)
    assert c.chunklen == 33
    same(c, np.arange(1000))
    assert blzarr.fromiter(range(5000), "f8", 5000).chunklen == bcolz.fromiter(range(5000), "f8", 5000).chunklen
    t = blzarr.fromiter(((i, i * 2.0) for i in range(10)), dtype="i4,f8", count=10)
    assert type(t).__name__ == "ctable"
    assert t[:].tolist() == [(i, i * 2.0) for i in range(10)]
    o = blzarr.fromiter(iter([[1], "x", None]), dtype=object, count=3)
    assert list(o[:]) == [[1], "x", None]
    # a shorter iterable than `count` is fine, as in bcolz (count is also an estimate)
    same(blzarr.fromiter(range(3), dtype="i4", count=5), np.arange(3, dtype="i4"))
    assert len(bcolz.fromiter(range(3), dtype="i4", count=5)) == 3
    same(blzarr.fromiter(((i, 1.0) for i in range(3)), dtype="i4,f8", count=50)["f0"], np.arange(3, dtype="i4"))
    with pytest.raises(ValueError):
        blzarr.fromiter(["a", "b"], dtype="i4", count=2)


@pytest.mark.parametrize("blen", [None, 1, 7, 100, 5000])
@pytest.mark.parametrize("start,stop", [(0, None), (5, 900), (33, 34), (500, 100000), (999, None)])
def test_iterblocks_carray(bcolz, blen, start, stop):
    a = np.arange(1000) * 2
    c = blzarr.carray(a, chunklen=64)
    b = bcolz.carray(a, chunklen=64)
    got = list(blzarr.iterblocks(c, blen, start, stop))
    exp = list(bcolz.iterblocks(b, blen, start, stop))
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        assert_array_equal(g, e)
    flat = np.concatenate([np.atleast_1d(g) for g in got]) if got else np.empty(0, a.dtype)
    assert_array_equal(flat, a[start:stop])
    if blen is None:
        assert all(len(g) <= 64 for g in got)


def test_iterblocks_multidim_and_ctable():
    a = np.arange(60).reshape(20, 3)
    blocks = list(blzarr.iterblocks(blzarr.carray(a, chunklen=6), 8))
    assert [b.shape for b in blocks] == [(8, 3), (8, 3), (4, 3)]
    assert_array_equal(np.concatenate(blocks), a)
    t = blzarr.ctable([np.arange(10), np.arange(10) * 1.5], names=["x", "y"])
    blocks = list(blzarr.iterblocks(t, 4))
    assert [len(b) for b in blocks] == [4, 4, 2]
    assert np.concatenate(blocks).tolist() == t[:].tolist()
    with pytest.raises(ValueError):
        list(blzarr.iterblocks(blzarr.carray(a), 0))


def test_open_and_walk(bcolz, tmp_path):
    root = str(tmp_path)
    blzarr.carray(np.arange(3), rootdir=os.path.join(root, "a"), format="bcolz")
    os.makedirs(os.path.join(root, "sub", "deeper"))
    blzarr.carray(np.arange(4.0), rootdir=os.path.join(root, "sub", "b"), format="bcolz")
    blzarr.carray(np.arange(5), rootdir=os.path.join(root, "sub", "deeper", "c"), format="bcolz")
    blzarr.ctable([np.arange(2)], names=["x"], rootdir=os.path.join(root, "sub", "t"))
    open(os.path.join(root, "plain.txt"), "w").close()
    found = sorted((type(o).__name__, o.rootdir) for o in blzarr.walk(root))
    assert found == sorted([("carray", os.path.join(root, "a")), ("carray", os.path.join(root, "sub", "b")),
                            ("carray", os.path.join(root, "sub", "deeper", "c")),
                            ("ctable", os.path.join(root, "sub", "t"))])
    assert sorted(len(o) for o in blzarr.walk(root, classname="carray")) == [3, 4, 5]
    assert [type(o).__name__ for o in blzarr.walk(root, classname="ctable")] == ["ctable"]
    assert all(o.mode == "r" for o in blzarr.walk(root, mode="r"))
    with pytest.raises(ValueError):
        list(blzarr.walk(root, classname="table"))
    bfound = sorted(o.rootdir for o in bcolz.walk(root, classname="carray"))
    assert bfound == sorted(o.rootdir for o in blzarr.walk(root, classname="carray"))
    # open(): carray, ctable, missing, not a container
    assert type(blzarr.open(os.path.join(root, "a"))).__name__ == "carray"
    assert type(blzarr.open(os.path.join(root, "sub", "t"))).__name__ == "ctable"
    with pytest.raises(OSError, match="missing"):
        blzarr.open(os.path.join(root, "missing"))
    with pytest.raises(OSError, match="sub"):
        blzarr.open(os.path.join(root, "sub"))


def test_open_modes(bcolz, tmp_path):
    p = str(tmp_path / "m")
    blzarr.carray(np.arange(10), rootdir=p, format="bcolz")
    with pytest.raises(blzarr.ReadOnlyError):
        blzarr.open(p, mode="r").append([1])
    c = blzarr.open(p, mode="a")
    c.append([10])
    c.flush()
    same(blzarr.open(p, "r"), np.arange(11))
    w = blzarr.open(p, mode="w")
    assert len(w) == 0
    w.append([5, 6])
    w.flush()
    same(blzarr.open(p), np.array([5, 6]))
    same(bcolz.open(p), np.array([5, 6]))
    with pytest.raises(ValueError):
        blzarr.open(p, mode="q")


def test_import_as_bcolz_runs_bcolz_code():
    import blzarr as bc
    a = bc.arange(1e5)
    b = bc.eval("a * 2 + 1")
    assert isinstance(b, bc.carray)
    assert_array_equal(b[:], np.arange(1e5) * 2 + 1)
    assert b.sum() == (np.arange(1e5) * 2 + 1).sum()
    assert [x for x in b.iter(0, 3)] == [1.0, 3.0, 5.0]
