"""The carray API, asserted against NumPy, and against real bcolz where bcolz defines it."""

import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blzarr
from blzarr import _where, carray
from helpers import assert_item, assert_same, examples

DTYPES = ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16",
          "M8[ns]", "M8[D]", "m8[s]", "S5", "U4", "i4,f8,S3", [("a", "i2"), ("b", "f4", (2,))]]


def sample(dtype, n, seed=0):
    """n values of `dtype` that differ from each other (so a wrong position shows)."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype.names:
        out = np.zeros(n, dtype=dtype)
        for i, name in enumerate(dtype.names):
            out[name] = sample(dtype[name].base, n, seed + i + 1).reshape(
                (n,) + (1,) * len(dtype[name].shape))
        return out
    if dtype.kind == "b":
        return rng.random(n) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if dtype.kind == "f":
        return (rng.standard_normal(n) * 1000).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    if dtype.kind in "mM":
        return rng.integers(-10 ** 9, 10 ** 9, n).astype(dtype)
    if dtype.kind == "S":
        return np.array([("%x" % v).encode()[:dtype.itemsize] for v in rng.integers(0, 2 ** 40, n)],
                        dtype=dtype)
    if dtype.kind == "U":
        return np.array([("é%x" % v)[:dtype.itemsize // 4] for v in rng.integers(0, 2 ** 40, n)],
                        dtype=dtype)
    raise AssertionError(dtype)


@pytest.fixture
def where(layout):
    """Keyword arguments that put a new carray in memory, in the bcolz layout or in the BLZ layout."""
    return layout


# ------------------------------------------------------------------------------- constructor
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_every_dtype(dtype, where):
    a = sample(dtype, 1000)
    c = carray(a, chunklen=64, **where)
    assert c.dtype == a.dtype
    assert len(c) == 1000 and c.shape == (1000,)
    assert_same(c[:], a)
    assert_same(c[10:900:7], a[10:900:7])
    assert_item(c[-1], a[-1])
    assert_item(c[5], a[5])
    if where:
        r = blzarr.open(where["rootdir"], mode="r")
        assert r.dtype == a.dtype
        assert_same(r[:], a)
        assert_item(r[-1], a[-1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtype_argument_converts(dtype):
    a = np.arange(20) % 2
    c = carray(a, dtype=dtype)
    assert c.dtype == np.dtype(dtype)
    assert_same(c[:], a.astype(dtype))


def test_defaults_match_bcolz(bcolz):
    a = np.arange(10)
    c, b = carray(a), bcolz.carray(a)
    assert c.chunklen == b.chunklen
    assert c.rootdir is None and c.mode == "a"
    assert c.safe is True
    assert c.dflt == 0 and c.dflt.dtype == a.dtype
    assert c.cparams == blzarr.cparams()
    assert c.expectedlen == 10


@pytest.mark.parametrize("expectedlen", [None, 0, 1, 100, 10 ** 4, 10 ** 6, 10 ** 8, 10 ** 11])
@pytest.mark.parametrize("dtype", ["i1", "f8", "c16", "S33", "U7", ("f8", (3, 4)), "i2,f8,S2", "S20000"])
def test_automatic_chunklen_like_bcolz(bcolz, expectedlen, dtype):
    dtype = np.dtype(dtype)
    a = np.zeros(3, dtype=dtype)
    kw = {} if expectedlen is None else {"expectedlen": expectedlen}
    assert carray(a, **kw).chunklen == bcolz.carray(a, **kw).chunklen


def test_explicit_chunklen_and_bad_arguments():
    assert carray(np.arange(10), chunklen=3).chunklen == 3
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises((ValueError, TypeError), match="chunklen"):
            carray(np.arange(10), chunklen=bad)
    with pytest.raises(ValueError, match="mode"):
        carray(np.arange(3), mode="x")
    with pytest.raises(ValueError, match="format"):
        carray(np.arange(3), format="nope")
    with pytest.raises(TypeError, match="bogus"):
        carray(np.arange(3), bogus=1)
    with pytest.raises(ValueError):
        carray()
    assert carray(5)[:].tolist() == [5]      # a one-element carray, as in bcolz
    with pytest.raises(ValueError, match="cparams"):
        carray(np.arange(3), cparams={"clevel": 11})
    with pytest.raises(ValueError, match="dflt"):
        carray(np.arange(3), dflt="abc")
    with pytest.raises(ValueError, match="chunklen"):
        carray(np.arange(3), chunklen=10 ** 12)  # never tries to allocate the leftover buffer
    with pytest.raises(TypeError, match="expectedlen"):
        carray(np.arange(3), expectedlen="many")
    assert carray(np.array([1], dtype=object), chunklen=10 ** 12)[0] == 1


def test_construct_from_list_carray_and_dtype_only():
    c = carray([1, 2, 3])
    assert_same(c[:], np.array([1, 2, 3]))
    d = carray(c)
    assert_same(d[:], np.array([1, 2, 3]))
    e = carray([], dtype="f4")
    assert len(e) == 0 and e.dtype == np.float32
    f = carray(np.empty(0, dtype="i2"))
    assert f.shape == (0,)
    assert_same(f[:], np.empty(0, "i2"))


def test_cparams_argument_forms():
    for cp in (blzarr.cparams(clevel=9, cname="zstd"), {"clevel": 9, "cname": "zstd"}):
        c = carray(np.arange(10000), cparams=cp)
        assert c.cparams.clevel == 9 and c.cparams.cname == "zstd"
        assert_same(c[:], np.arange(10000))
    c0 = carray(np.arange(10000), cparams=blzarr.cparams(clevel=0))
    assert c0.cparams.clevel == 0
    assert_same(c0[:], np.arange(10000))


@pytest.mark.parametrize("cname", blzarr.blosc_compressor_list())
@pytest.mark.parametrize("shuffle", [blzarr.NOSHUFFLE, blzarr.SHUFFLE, blzarr.BITSHUFFLE])
def test_every_codec_and_shuffle(cname, shuffle, tmp_path):
    a = np.linspace(0, 1, 5003)
    c = carray(a, cparams=blzarr.cparams(clevel=5, shuffle=shuffle, cname=cname), chunklen=1000,
               rootdir=str(tmp_path / "x"), format="bcolz")
    assert_same(c[:], a)
    assert c.cbytes > 0
    r = blzarr.open(str(tmp_path / "x"))
    assert r.cparams.cname == cname and r.cparams.shuffle == shuffle
    assert_same(r[:], a)


# ------------------------------------------------------------------------------- properties
def test_properties_against_numpy_and_bcolz(bcolz):
    a = np.arange(1234, dtype="i4")
    c, b = carray(a, chunklen=100), bcolz.carray(a, chunklen=100)
    assert c.len == len(c) == 1234
    assert c.shape == a.shape and c.ndim == 1 and c.size == a.size
    assert c.dtype == a.dtype and c.itemsize == 4 and c.atomsize == 4
    assert c.nbytes == a.nbytes
    assert c.nchunks == b.nchunks == 12
    assert c.nleftover == b.nleftover == 34
    assert c.leftover_elements == 34
    assert c.leftover_bytes == 34 * 4
    assert c.leftover_array.shape == (100,)
    assert_same(c.leftover_array[:34], a[1200:])
    assert c.leftover_ptr == c.leftover_array.ctypes.data
    assert list(c.partitions) == [tuple(p) for p in b.partitions]
    assert len(c.chunks) == 12
    assert all(isinstance(ch, blzarr.chunk) for ch in c.chunks)
    for i, ch in enumerate(c.chunks):
        assert len(ch) == 100
        assert_same(ch[:], a[i * 100:(i + 1) * 100])
        assert_same(np.asarray(ch), a[i * 100:(i + 1) * 100])
        assert ch[3] == a[i * 100 + 3]
    assert c.chunks[-1][-1] == a[1199]
    assert c.chunks[2].getudata() == a[200:300].tobytes()
    assert len(c.chunks[2].getdata()) == c.chunks[2].cbytes
    with pytest.raises(NotImplementedError):
        c.chunks[0][0] = 1
    own = blzarr.chunk(a[:100], a.dtype, blzarr.cparams(clevel=9))
    assert len(own) == 100 and own.nbytes == 400
    assert_same(own[:], a[:100])
    assert_same(own[10:20], a[10:20])
    assert_same(own[::-3], a[:100][::-3])
    assert own[-1] == a[99]
    assert "chunk" in repr(own) and str(own) == str(a[:100])
    assert 0 < c.cbytes
    assert isinstance(c.attrs, blzarr.attrs.attrs)


def test_multidim_properties(bcolz):
    a = np.arange(2 * 3 * 40, dtype="f8").reshape(40, 3, 2)
    c, b = carray(a, chunklen=7), bcolz.carray(a, chunklen=7)
    assert c.shape == b.shape == (40, 3, 2)
    assert c.ndim == 3 and c.size == a.size
    assert c.dtype == np.dtype("f8")
    assert c.itemsize == 8 and c.atomsize == 48 == b.atomsize
    assert c.nbytes == a.nbytes
    assert c.nchunks == 5 and c.nleftover == 5
    assert c.leftover_bytes == 5 * 48
    assert c.leftover_array.shape == (7, 3, 2)
    assert_same(c[:], a)


def test_cbytes_tracks_disk(tmp_path):
    c = carray(np.zeros(100000), chunklen=1000, rootdir=str(tmp_path / "z"), format="bcolz")
    assert c.cbytes < c.nbytes / 10
    r = blzarr.open(str(tmp_path / "z"))
    assert r.nchunks == 100 and r.nleftover == 0


def test_repr_str_info():
    a = np.arange(10)
    c = carray(a)
    r = repr(c)
    assert r.startswith("carray((10,), int64)")
    assert "nbytes := 80;" in r and "cparams := cparams(" in r and "chunklen :=" in r
    assert str(c) == str(a)
    big = carray(np.arange(5000))
    assert str(big) == str(np.arange(5000))
    a2 = np.arange(3000.).reshape(1500, 2)
    assert str(carray(a2)) == str(a2)
    a3 = np.arange(6000).reshape(2000, 3)
    assert str(carray(a3, chunklen=7)) == str(a3)
    m = carray(np.arange(6).reshape(3, 2))
    assert str(m) == str(np.arange(6).reshape(3, 2))
    s = carray(np.array([(1, b"x")], dtype="i4,S2"))
    assert "b'x'" in str(s)
    assert carray(np.empty(0)).__str__() == "[]"
    info = repr(c.info)
    assert "type" in info and "shape" in info and "(10,)" in info and "nbytes" in info and "chunklen" in info


def test_repr_shows_rootdir(tmp_path):
    p = str(tmp_path / "r")
    c = carray(np.arange(3), rootdir=p, format="bcolz")
    assert f"rootdir := '{p}'" in repr(c) and "mode    := 'a'" in repr(c)


# ------------------------------------------------------------------------------- getitem
@pytest.fixture
def pair(where):
    a = np.arange(1003, dtype="i8") * 3 - 500
    return carray(a, chunklen=50, **where), a


def test_getitem_int(pair):
    c, a = pair
    for i in (0, 1, 49, 50, 51, 999, 1000, 1002, -1, -50, -1003):
        v = c[i]
        assert v == a[i] and type(v) is int  # a Python scalar, as bcolz gives
    assert c[np.int32(7)] == a[7]
    for bad in (1003, -1004, 10 ** 12):
        with pytest.raises(IndexError):
            c[bad]


@pytest.mark.parametrize("key", [
    slice(None), slice(3, 17), slice(-20, None), slice(None, -3), slice(0, 1003, 2), slice(1, 999, 7),
    slice(49, 51), slice(None, None, 50), slice(None, None, 1000), slice(900, 10000), slice(20, 10),
    slice(None, None, -1), slice(None, None, -3), slice(500, 20, -7), slice(-1, -10, -1),
    slice(1000, None, -51), slice(5, 5), slice(10, 20, -1), slice(-5000, 5000, 3)])
def test_getitem_slice(pair, key):
    c, a = pair
    assert_same(c[key], a[key])


def test_getitem_slice_step_zero(pair):
    c, a = pair
    with pytest.raises(ValueError):
        c[::0]


@pytest.mark.parametrize("key", [[0], [5, 3, 5, 1002, -1, 0], np.array([999, 0, 50, 49]),
                                 np.array([], dtype=int), np.arange(0, 1003, 13)[::-1],
                                 np.array([7], dtype=np.uint8)])
def test_getitem_fancy(pair, key):
    c, a = pair
    assert_same(c[key], a[np.asarray(key, dtype=np.intp) if len(key) == 0 else key])


def test_getitem_fancy_errors(pair):
    c, _ = pair
    with pytest.raises(IndexError):
        c[[0, 1003]]
    with pytest.raises(IndexError):
        c[[-1004]]
    with pytest.raises(IndexError):
        c[np.array([1.5, 2.0])]


def test_getitem_bool_mask(pair):
    c, a = pair
    m = (a % 7 == 0) | (a > 2000)
    assert_same(c[m], a[m])
    assert_same(c[carray(m, chunklen=33)], a[m])
    assert_same(c[list(m)], a[m])
    assert_same(c[np.zeros(len(a), bool)], a[np.zeros(len(a), bool)])
    with pytest.raises(IndexError):
        c[m[:-1]]
    with pytest.raises(IndexError):
        c[carray(m[:-1])]


def test_getitem_expression(pair):
    c, a = pair
    assert_same(c["(c > 100) & (c < 900)"], a[(a > 100) & (a < 900)])
    with pytest.raises((ValueError, SyntaxError)):
        c["c >"]


def test_getitem_multidim():
    a = np.arange(4 * 5 * 97).reshape(97, 5, 4)
    c = carray(a, chunklen=10)
    keys = [5, -1, (5, 2), (5, 2, 3), (slice(3, 40), 1), (slice(None, None, 3), slice(1, 3), 0),
            (slice(80, 2, -9), -1, slice(None)), ([1, 50, 3], 2), (Ellipsis, 1), (slice(None), Ellipsis, 0),
            (np.array([4, 4, 90]),), (slice(None), [0, 4]), (-2, slice(None, None, -1)), ()]
    for key in keys:
        got, exp = c[key], a[key]
        assert_same(got, exp)
    m = a[:, 0, 0] % 3 == 0
    assert_same(c[m], a[m])
    assert_same(c[m, 1], a[m, 1])
    # a row is a copy, not a view of any cache
    row = c[5]
    row[...] = -1
    assert_same(c[5], a[5])
    with pytest.raises(IndexError):
        c[(0, 5)]


def test_getitem_structured():
    a = sample("i4,f8,S3", 300)
    c = carray(a, chunklen=16)
    assert_item(c[3], a[3])          # a tuple, as bcolz gives
    assert_same(c[:]["f1"], a["f1"])
    assert_item(c[-1], a[-1])        # from the uncompressed leftover
    assert_same(c[[3, 1, 299]], a[[3, 1, 299]])


def test_getitem_scalar_on_many_positions_uses_cache_consistently(where):
    a = np.random.default_rng(1).standard_normal(20000)
    c = carray(a, chunklen=3000, **where)
    rng = np.random.default_rng(2)
    idx = rng.integers(-20000, 20000, 500)
    assert [c[int(i)] for i in idx] == [a[i] for i in idx]


# ------------------------------------------------------------------------------- setitem
def test_setitem_int_and_negative(pair):
    c, a = pair
    for i, v in ((0, 7), (-1, 8), (50, 9), (1001, 10), (-1003, 11), (np.int16(3), 12)):
        c[i] = v
        a[i] = v
    assert_same(c[:], a)
    with pytest.raises(IndexError):
        c[1003] = 1


@pytest.mark.parametrize("key", [slice(None), slice(3, 170), slice(-20, None), slice(0, 1003, 2),
                                 slice(1, 999, 77), slice(None, None, -1), slice(500, 20, -7),
                                 slice(40, 60), slice(50, 100), slice(1000, 1003), slice(20, 10)])
def test_setitem_slice(pair, key):
    c, a = pair
    n = len(a[key])
    vals = np.arange(n) * 11 + 1
    c[key] = vals
    a[key] = vals
    assert_same(c[:], a)
    c[key] = -4  # broadcast a scalar
    a[key] = -4
    assert_same(c[:], a)


def test_setitem_fancy_mask_expression(pair):
    c, a = pair
    c[[5, 900, -1, 3]] = [1, 2, 3, 4]
    a[[5, 900, -1, 3]] = [1, 2, 3, 4]
    assert_same(c[:], a)
    m = a % 5 == 0
    c[m] = 0
    a[m] = 0
    assert_same(c[:], a)
    m2 = a > 1000
    c[carray(m2)] = np.arange(m2.sum())
    a[m2] = np.arange(m2.sum())
    assert_same(c[:], a)
    c["c < -100"] = 77
    a[a < -100] = 77
    assert_same(c[:], a)
    with pytest.raises(ValueError):
        c[[1, 2]] = [1, 2, 3]
    with pytest.raises(IndexError):
        c[[1, 5000]] = 1


def test_setitem_persists(bcolz, tmp_path):
    p = str(tmp_path / "s")
    a = np.arange(205.0)
    c = carray(a, chunklen=20, rootdir=p, format="bcolz")
    c[3:150:4] = -1.0
    a[3:150:4] = -1.0
    c[-1] = 9.5
    a[-1] = 9.5
    c.flush()
    assert_same(blzarr.open(p)[:], a)
    assert_same(bcolz.open(p)[:], a)


def test_setitem_multidim():
    a = np.zeros((53, 3, 2), dtype="i4")
    c = carray(a, chunklen=5)
    ops = [((4,), 1), ((4, 1), [7, 8]), ((slice(10, 30, 3), 2, 1), 5), ((slice(None), 0), 3),
           (([1, 50],), np.ones((2, 3, 2), dtype="i8")), ((-1, -1, -1), 99), ((slice(None, None, -2),), 4)]
    for key, v in ops:
        c[key] = v
        a[key] = v
        assert_same(c[:], a)


def test_setitem_dtype_conversion_and_errors():
    c = carray(np.zeros(10, dtype="i4"))
    with pytest.raises(TypeError, match="same_kind"):      # NumPy's 'same_kind' rule, as append
        c[2] = 3.7
    c[2] = np.float64(3.7).astype("i4")
    assert c[2] == 3
    with pytest.raises((TypeError, ValueError)):
        c[3] = "abc"
    s = carray(np.zeros(4, dtype="S3"))
    s[1] = b"abcdef"
    assert s[1] == b"abc"


# ------------------------------------------------------------------------------- growth
def test_append(where):
    c = carray(np.arange(7), chunklen=5, **where)
    a = np.arange(7)
    for block in ([1], np.arange(13), [], np.arange(5), 42, np.arange(2)):
        c.append(block)
        a = np.concatenate([a, np.atleast_1d(np.asarray(block, dtype=a.dtype))])
        assert_same(c[:], a)
        assert c.nchunks == len(a) // 5 and c.nleftover == len(a) % 5
    c.append(carray(np.arange(9)))
    a = np.concatenate([a, np.arange(9)])
    assert_same(c[:], a)
    c.flush()
    if where:
        assert_same(blzarr.open(where["rootdir"])[:], a)


def test_append_conversion_rules():
    c = carray(np.zeros(3, dtype="f8"))
    c.append([1, 2])  # ints into floats: fine
    assert_same(c[:], np.array([0, 0, 0, 1, 2.0]))
    i = carray(np.zeros(3, dtype="i4"))
    with pytest.raises(TypeError):
        i.append(np.array([1.5]))  # safe: floats do not silently become ints
    u = carray(np.zeros(3, dtype="i4"), safe=False)
    u.append(np.array([1.5]))
    assert u[-1] == 1
    m = carray(np.zeros((2, 3)))
    m.append(np.ones(3))
    m.append(np.ones((2, 3)) * 2)
    assert_same(m[:], np.array([[0] * 3, [0] * 3, [1] * 3, [2] * 3, [2] * 3], dtype=float))
    with pytest.raises(ValueError):
        m.append(np.ones((2, 4)))


def test_resize_and_trim(where):
    c = carray(np.arange(23), chunklen=5, dflt=-7, **where)
    a = np.arange(23)
    for n in (23, 40, 40, 13, 10, 0, 3, 11):
        c.resize(n)
        a = a[:n] if n <= len(a) else np.concatenate([a, np.full(n - len(a), -7)])
        assert_same(c[:], a)
        assert len(c) == n
    c.trim(4)
    a = a[:-4]
    assert_same(c[:], a)
    c.trim(-3)  # negative: grows
    a = np.concatenate([a, [-7, -7, -7]])
    assert_same(c[:], a)
    c.trim(0)
    assert_same(c[:], a)
    with pytest.raises(ValueError):
        c.trim(len(c) + 1)
    with pytest.raises(ValueError):
        c.resize(-1)
    with pytest.raises(TypeError):
        c.resize("3")
    with pytest.raises(TypeError):
        c.resize(2.5)
    n = len(c)
    c.resize(float(n + 1))  # integral floats are lengths, as in bcolz
    c.trim(1.0)
    assert len(c) == n
    if where:
        r = blzarr.open(where["rootdir"])
        assert_same(r[:], a)
    if where.name == "bcolz":
        bcolz = pytest.importorskip("bcolz")
        assert_same(bcolz.open(where["rootdir"])[:], a)


def test_resize_multidim_and_strings():
    c = carray(np.ones((3, 2)), dflt=5.0, chunklen=2)
    c.resize(6)
    assert_same(c[:], np.array([[1, 1]] * 3 + [[5, 5]] * 3, dtype=float))
    s = carray(np.array([b"ab"]), dflt=b"zz")
    s.resize(3)
    assert_same(s[:], np.array([b"ab", b"zz", b"zz"]))


# ------------------------------------------------------------------------------- derived objects
def test_reshape():
    a = np.arange(60)
    c = carray(a, chunklen=7)
    for shape in ((60,), (6, 10), (-1, 5), (3, 4, 5), (3, -1, 2), 60, (60, 1)):
        r = c.reshape(shape)
        assert isinstance(r, carray)
        assert_same(r[:], a.reshape(shape))
    assert_same(c.reshape((6, 10)).reshape(-1)[:], a)
    with pytest.raises(ValueError):
        c.reshape((7, 9))
    with pytest.raises(ValueError):
        c.reshape((-1, -1))
    assert carray(np.empty(0)).reshape((0, 4)).shape == (0, 4)


def test_view_shares_chunks():
    a = np.arange(20)
    c = carray(a, chunklen=5)
    v = c.view()
    assert isinstance(v, carray) and v is not c
    assert_same(v[:], a)
    v.append([99])
    v[0] = -5
    assert len(c) == 20 and len(v) == 21
    assert_same(c[:], a)


def test_view_of_disk_carray_is_read_only(tmp_path):
    a = np.arange(20)
    c = carray(a, chunklen=6, rootdir=str(tmp_path / "v"), format="bcolz")
    v = c.view()
    assert_same(v[:], a)
    assert v.mode == "r"
    with pytest.raises(blzarr.ReadOnlyError):
        v.append([1])
    with pytest.raises(blzarr.ReadOnlyError):
        v[0] = 1
    assert_same(blzarr.open(str(tmp_path / "v"))[:], a)


def test_copy(bcolz, where, tmp_path):
    a = sample("f8", 1000)
    c = carray(a, chunklen=64, cparams=blzarr.cparams(clevel=1), **where)
    d = c.copy()
    assert_same(d[:], a)
    # as in bcolz, what is not passed comes from the defaults, not from the original
    assert d.rootdir is None and d.cparams == blzarr.cparams() != c.cparams
    assert d.chunklen == bcolz.carray(a, expectedlen=len(a)).chunklen
    with blzarr.defaults_ctx(cparams=blzarr.cparams(clevel=0)):
        assert c.copy().cparams.clevel == 0
    assert c.copy(chunklen=5).chunklen == 5
    e = c.copy(cparams=blzarr.cparams(clevel=9, cname="zlib"))
    assert e.cparams.clevel == 9 and e.cparams.cname == "zlib"
    assert_same(e[:], a)
    p = str(tmp_path / "copy")
    f = c.copy(rootdir=p, format="bcolz")
    assert f.rootdir == p
    assert_same(blzarr.open(p)[:], a)
    assert_same(bcolz.open(p)[:], a)
    g = c.copy(expectedlen=10 ** 7)
    assert g.chunklen == bcolz.carray(a, expectedlen=10 ** 7).chunklen
    assert_same(g[:], a)
    d[0] = 1.0
    assert c[0] == a[0]


def test_copy_of_multidim_and_dtype():
    a = np.arange(24).reshape(8, 3)
    c = carray(a, chunklen=3)
    assert_same(c.copy()[:], a)
    assert_same(c.copy(dtype="f4")[:], a.astype("f4"))


# ------------------------------------------------------------------------------- iteration
def test_len_iter_array(pair):
    c, a = pair
    assert len(c) == len(a)
    assert list(c) == list(a)
    assert_same(np.asarray(c), a)
    assert_same(np.array(c), a)
    assert_same(np.asarray(c, dtype="f4"), a.astype("f4"))
    assert_same(c.__array__(), a)
    assert_same(c.__array__(copy=True), a)
    with pytest.raises(ValueError):
        c.__array__(copy=False)  # NumPy 2 semantics: a carray has no memory to view
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        with pytest.raises(ValueError):
            np.array(c, copy=False)
    assert np.sum(c) == a.sum()


@pytest.mark.parametrize("kw", [dict(), dict(start=5), dict(stop=-3), dict(start=3, stop=900, step=7),
                                dict(step=51), dict(limit=10), dict(skip=990), dict(skip=3, limit=4),
                                dict(start=100, step=3, skip=5, limit=100), dict(start=2000),
                                dict(limit=0), dict(skip=5000)])
def test_iter_arguments(bcolz, pair, kw):
    c, a = pair
    start, stop, step = kw.get("start", 0), kw.get("stop"), kw.get("step", 1)
    exp = list(a[start:stop:step])
    exp = exp[kw.get("skip", 0):]
    if kw.get("limit") is not None:
        exp = exp[:kw["limit"]]
    assert list(c.iter(**kw)) == exp
    assert list(bcolz.carray(a, chunklen=50).iter(**kw)) == exp


def test_iter_dtype_and_negative_step(pair):
    c, a = pair
    got = list(c.iter(0, 10, dtype="f4"))
    assert got == a[:10].astype("f4").tolist() and all(type(v) is float for v in got)
    with pytest.raises(NotImplementedError):
        c.iter(step=-1)


def test_iter_multidim_rows():
    a = np.arange(30).reshape(10, 3)
    rows = list(carray(a, chunklen=4))
    assert len(rows) == 10
    for r, e in zip(rows, a):
        assert_same(r, e)


def test_where_and_wheretrue(bcolz, pair):
    c, a = pair
    m = a % 3 == 0
    assert list(c.where(m)) == list(a[m])
    assert list(c.where(carray(m, chunklen=17))) == list(a[m])
    assert list(c.where("c > 1000")) == list(a[a > 1000])
    assert list(c.where(m, limit=5)) == list(a[m][:5])
    assert list(c.where(m, skip=7)) == list(a[m][7:])
    assert list(c.where(m, limit=5, skip=300)) == list(a[m][300:305])
    assert list(c.where(m, skip=100000)) == []
    b = carray(m, chunklen=40)
    assert list(b.wheretrue()) == list(np.flatnonzero(m))
    assert list(b.wheretrue(limit=3, skip=2)) == list(np.flatnonzero(m)[2:5])
    assert list(b.wheretrue(limit=0)) == []
    bb = bcolz.carray(m, chunklen=40)
    assert list(b.wheretrue(limit=10, skip=11)) == list(bb.wheretrue(limit=10, skip=11))
    with pytest.raises(ValueError):
        list(c.where(np.ones(3, bool)))
    with pytest.raises(ValueError):
        list(c.where(a))
    with pytest.raises(ValueError):
        list(c.wheretrue())


@pytest.mark.parametrize("dtype", ["?", "i1", "u1", "i4", "u8", "f4", "f8", "c16", "m8[s]"])
def test_sum(dtype):
    a = sample(dtype, 777)
    if dtype in ("i1", "u1", "i4", "u8"):
        a = a % 100  # no overflow: NumPy's accumulator type decides the result type
    c = carray(a, chunklen=50)
    got, exp = c.sum(), a.sum()
    assert type(got) is type(exp)
    if a.dtype.kind in "fc":
        np.testing.assert_allclose(got, exp, rtol=1e-5)
    else:
        assert got == exp
    if dtype not in ("m8[s]", "c16"):
        got = c.sum(dtype="f8")
        assert np.asarray(got).dtype == np.float64
        np.testing.assert_allclose(got, a.sum(dtype="f8"), rtol=1e-9)


def test_sum_multidim_and_empty():
    a = np.arange(60).reshape(20, 3)
    c = carray(a, chunklen=6)
    assert c.sum() == a.sum()
    assert_same(c.sum(axis=0), a.sum(axis=0))
    assert carray(np.empty(0)).sum() == 0.0
    with pytest.raises(TypeError):
        carray(np.array([b"x"])).sum()


# ------------------------------------------------------------------------------- persistence, modes
def test_modes_like_bcolz(bcolz, tmp_path):
    p = str(tmp_path / "m")
    c = carray(np.arange(10), rootdir=p, format="bcolz", chunklen=4)
    c.attrs["k"] = 1
    # 'a' with an array over an existing directory refuses, like bcolz
    with pytest.raises(OSError):
        carray(np.arange(3), rootdir=p)
    with pytest.raises(OSError):
        bcolz.carray(np.arange(3), rootdir=p)
    # 'a' without an array opens it
    r = carray(rootdir=p)
    assert_same(r[:], np.arange(10))
    r.append([10])
    r.flush()
    assert_same(blzarr.open(p, mode="r")[:], np.arange(11))
    # 'w' with an array replaces
    w = carray(np.arange(5.0), rootdir=p, mode="w", format="bcolz")
    assert_same(w[:], np.arange(5.0))
    assert_same(blzarr.open(p)[:], np.arange(5.0))
    assert "k" not in blzarr.open(p).attrs
    # 'w' without an array: opened, emptied
    e = carray(rootdir=p, mode="w")
    assert len(e) == 0 and e.dtype == np.float64
    assert len(blzarr.open(p)) == 0
    assert len(bcolz.open(p)) == 0
    # opening a missing directory
    with pytest.raises(OSError):
        carray(rootdir=str(tmp_path / "missing"), mode="r")
    with pytest.raises(OSError):
        blzarr.open(str(tmp_path / "missing"))


def test_mode_r_refuses_every_write(tmp_path):
    p = str(tmp_path / "ro")
    c = carray(np.arange(30), rootdir=p, format="bcolz", chunklen=8)
    c.attrs["a"] = 1
    before = {n: os.path.getmtime(os.path.join(p, "data", n)) for n in os.listdir(os.path.join(p, "data"))}
    r = blzarr.open(p, mode="r")
    assert r.mode == "r"
    writes = [lambda: r.append([1]), lambda: r.__setitem__(0, 5), lambda: r.__setitem__(slice(2, 5), 5),
              lambda: r.__setitem__([1, 2], 5), lambda: r.resize(3), lambda: r.resize(50),
              lambda: r.trim(2), lambda: r.purge(), lambda: r.attrs.__setitem__("b", 2),
              lambda: r.attrs.__delitem__("a"), lambda: r.__setitem__("r > 3", 0)]
    for w in writes:
        with pytest.raises(blzarr.ReadOnlyError):
            w()
        assert isinstance(blzarr.ReadOnlyError("x"), OSError)
    r.flush()  # a no-op, not an error
    with r:
        pass
    assert_same(blzarr.open(p)[:], np.arange(30))
    assert blzarr.open(p).attrs["a"] == 1
    after = {n: os.path.getmtime(os.path.join(p, "data", n)) for n in os.listdir(os.path.join(p, "data"))}
    assert after == before


def test_reopen_keeps_everything(bcolz, tmp_path):
    p = str(tmp_path / "k")
    a = np.arange(1000, dtype="i2").reshape(250, 4)
    c = carray(a, chunklen=33, rootdir=p, format="bcolz", dflt=3,
               cparams=blzarr.cparams(clevel=7, cname="zlib", shuffle=blzarr.BITSHUFFLE))
    c.attrs["name"] = "x"
    c.attrs["list"] = [1, 2]
    del c
    r = blzarr.open(p)
    assert r.shape == (250, 4) and r.dtype == np.dtype("i2")
    assert r.chunklen == 33 and r.dflt == 3
    assert r.cparams == blzarr.cparams(clevel=7, cname="zlib", shuffle=blzarr.BITSHUFFLE)
    assert r.attrs["name"] == "x" and r.attrs["list"] == [1, 2]
    assert dict(r.attrs) == {"name": "x", "list": [1, 2]}
    assert_same(r[:], a)
    assert r.rootdir == p and r.mode == "a"
    b = bcolz.open(p)
    assert_same(b[:], a)
    assert b.attrs["name"] == "x"


def test_context_manager_flushes(bcolz, tmp_path):
    p = str(tmp_path / "cm")
    with carray(np.arange(3), rootdir=p, format="bcolz", chunklen=100) as c:
        c.append([3, 4])
    assert_same(blzarr.open(p)[:], np.arange(5))
    assert_same(bcolz.open(p)[:], np.arange(5))


def test_flush_free_cachemem_purge(tmp_path):
    p = str(tmp_path / "fp")
    c = carray(np.arange(100), rootdir=p, format="bcolz", chunklen=16)
    c.append(np.arange(5))
    c.flush()
    assert len(blzarr.open(p)) == 105
    c[3]
    c.free_cachemem()
    assert c[3] == 3 and c[-1] == 4
    c.purge()
    assert not os.path.exists(p)
    m = carray(np.arange(4))
    m.flush()
    m.free_cachemem()
    m.purge()  # in memory: nothing to remove
    assert_same(m[:], np.arange(4))


def test_object_dtype_needs_allow_pickle(bcolz, tmp_path):
    p = str(tmp_path / "obj")
    objs = [1, "two", [3], {"four": 4}, None, (5.0,)]
    c = carray(np.array(objs, dtype=object), rootdir=p, format="bcolz")
    assert c.dtype == np.dtype(object)
    assert list(c[:]) == objs and c[3] == {"four": 4} and c[-1] == (5.0,)
    assert list(c[1:5:2]) == objs[1:5:2]
    assert list(c[[5, 0]]) == [objs[5], objs[0]]
    c.append(["six"])
    assert c[-1] == "six"
    c.flush()
    with pytest.raises(blzarr.PickleNotAllowedError, match="allow_pickle"):
        blzarr.open(p)
    with pytest.raises(blzarr.PickleNotAllowedError, match="allow_pickle"):
        carray(rootdir=p)
    r = blzarr.open(p, allow_pickle=True)
    assert list(r[:]) == objs + ["six"]
    assert list(bcolz.open(p)[:]) == objs + ["six"]
    m = carray(objs, dtype=object)
    assert list(m) == objs


def test_pickle_carray(tmp_path):
    a = np.arange(50)
    c = carray(a, chunklen=7)
    c2 = pickle.loads(pickle.dumps(c))
    assert_same(c2[:], a)
    assert c2.chunklen == 7 and c2.cparams == c.cparams
    p = str(tmp_path / "pk")
    d = carray(a, rootdir=p, format="bcolz")
    d2 = pickle.loads(pickle.dumps(d))
    assert d2.rootdir == p
    assert_same(d2[:], a)


def test_safe_property():
    assert carray(np.arange(3)).safe is True
    assert carray(np.arange(3), safe=False).safe is False


def test_dflt_roundtrip_special_values(tmp_path):
    for k, (dt, d) in enumerate((("f8", np.nan), ("f8", -np.inf), ("c16", 1 + 2j), ("M8[s]", np.datetime64(5, "s")),
                                 ("S3", b"ab"), ("U2", "é"), ("i4,f4", (1, 2.5)), ("?", True))):
        p = str(tmp_path / f"d{k}")     # (a 16-bit hash of the case named two cases alike in one CI run)
        carray(np.zeros(2, dtype=dt), dflt=d, rootdir=p, format="bcolz")
        r = blzarr.open(p)
        exp = np.array(d, dtype=dt) if dt != "i4,f4" else np.array(d, dtype=np.dtype(dt))
        assert r.dflt.dtype == np.dtype(dt)
        assert r.dflt.tobytes() == exp.tobytes(), (dt, r.dflt, exp)
        r.resize(3)
        assert r[:][2:].tobytes() == exp.reshape(1).tobytes()


def test_getitem_integer_array_shapes(pair):
    c, a = pair
    assert c[np.array(3)] == a[np.array(3)]
    k = np.array([[1, 2, -1], [1000, 0, 50]])
    assert_same(c[k], a[k])
    m = carray(np.arange(40).reshape(20, 2), chunklen=3)
    assert_same(m[k % 20], np.arange(40).reshape(20, 2)[k % 20])


def test_iter_where_reject_negative_limit_skip(pair):
    c, a = pair
    for kw in (dict(limit=-1), dict(skip=-1), dict(limit="3")):
        with pytest.raises((ValueError, TypeError)):
            c.iter(**kw)
        with pytest.raises((ValueError, TypeError)):
            c.where(a > 0, **kw)
        with pytest.raises((ValueError, TypeError)):
            carray(a > 0).wheretrue(**kw)
    with pytest.raises(NotImplementedError):
        c.iter(step=0)
    assert list(c.where([True] * len(a), limit=2)) == list(a[:2])


def test_disk_chunks_sequence(tmp_path):
    a = np.arange(30)
    c = carray(a, chunklen=7, rootdir=str(tmp_path / "dc"), format="bcolz")
    r = blzarr.open(str(tmp_path / "dc"), mode="r")
    for obj in (c, r):
        assert len(obj.chunks) == obj.nchunks == 4
        assert [len(ch) for ch in obj.chunks] == [7] * 4
        assert all(isinstance(ch, blzarr.chunk) for ch in obj.chunks)
        assert_same(obj.chunks[-1][:], a[21:28])
        assert_same(np.concatenate([ch[:] for ch in obj.chunks[1:3]]), a[7:21])
        assert_same(obj.leftover_array[:obj.nleftover], a[28:])
        assert obj.leftover_bytes == 2 * a.itemsize
        with pytest.raises(IndexError):
            obj.chunks[4]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_element_types_match_bcolz(bcolz, dtype, where):
    """Elements come out as bcolz gives them: NumPy's ``.item()`` (Python numbers, bytes, str,
    datetime objects, or ints for nanosecond datetimes, tuples for records)."""
    a = sample(dtype, 50)
    c = carray(a, chunklen=16, **where)
    b = bcolz.carray(a, chunklen=16)
    subarrays = a.dtype.names and any(a.dtype[n].shape for n in a.dtype.names)
    for i in (0, 17, -1):
        v = c[i]
        assert_item(v, a[i])
        if not subarrays:   # bcolz's tuples of records with subarrays hold views of a reused buffer
            assert type(v) is type(b[i]) and v == b[i]
    got = list(c)
    for v, x in zip(got, a):
        assert_item(v, x)
    if not subarrays:
        assert [type(v) for v in got] == [type(v) for v in b]
        assert got == list(b)
        assert list(c.where(a == a)) == list(b.where(a == a))


def test_next_purge_and_mode_r_creation(tmp_path):
    a = np.arange(7)
    c = carray(a, chunklen=2)
    assert [next(c) for _ in range(7)] == a.tolist()
    with pytest.raises(StopIteration):
        next(c)
    assert next(c) == 0  # a new pass starts
    p = str(tmp_path / "pr")
    d = carray(a, rootdir=p, format="bcolz")
    d.purge()
    with pytest.raises(OSError, match="pr"):
        d.purge()
    with pytest.raises(OSError, match="mode 'r'"):   # mode 'r' never writes (bcolz raises too)
        carray([1, 2], rootdir=p, mode="r", format="bcolz")
    assert not os.path.exists(p)


def test_filters_names(bcolz):
    assert blzarr.filters == bcolz.filters


def test_object_sources_like_bcolz(bcolz):
    src = [(i, "s" * i) for i in range(10)]
    c = carray(src, dtype=object)
    assert c.shape == (10,) and c[3] == (3, "sss") and type(c[3]) is tuple
    rec = np.empty(4, dtype="u1,O")
    rec[:] = [(i, "x" * i) for i in range(4)]
    r = carray(rec, dtype=object)
    assert r.shape == (4,) and r[2][0] == 2 and r[2][1] == "xx"
    with pytest.raises(TypeError, match="object"):
        carray(src, dtype="O,O")
    with pytest.raises(TypeError, match="object"):
        carray(rec)
    with pytest.raises(TypeError):
        bcolz.carray(rec)


def test_reshape_on_disk_replaces_the_directory_like_bcolz(bcolz, tmp_path):
    p = str(tmp_path / "rs")
    b = blzarr.arange(16, rootdir=p, format="bcolz").reshape((2, 2, 4))
    assert b.rootdir == p and b.shape == (2, 2, 4)
    assert_same(b[:], np.arange(16).reshape(2, 2, 4))
    assert_same(blzarr.open(p)[:], np.arange(16).reshape(2, 2, 4))
    assert_same(bcolz.open(p)[:], np.arange(16).reshape(2, 2, 4))
    assert [n for n in os.listdir(str(tmp_path)) if n.startswith(".reshape")] == []
    r = blzarr.open(p, mode="r").reshape(-1)  # read-only: an in-memory result, the directory kept
    assert r.rootdir is None
    assert_same(r[:], np.arange(16))
    assert blzarr.open(p).shape == (2, 2, 4)


def test_codec_threads_inside_and_outside_a_parallel_read():
    # inside run_all's shares each Blosc call gets one thread (the chunks are already spread over the
    # threads); outside, the configured number
    from blzarr.runtime.parallel import codec_threads, run_all
    import threading
    old = blzarr.set_nthreads(2)
    try:
        seen, lock = [], threading.Lock()

        def record(i):
            with lock:
                seen.append(codec_threads())
        run_all(record, range(16))
        assert seen == [1] * 16
        assert codec_threads() == 2
        seen.clear()
        run_all(record, range(2))            # too few items: done in the calling thread, not a share
        assert seen == [2, 2]
    finally:
        blzarr.set_nthreads(old)


@pytest.mark.parametrize("ondisk", [False, True])
def test_parallel_compression_writes_the_same_chunks_in_order(tmp_path, ondisk):
    # full chunks of an append are compressed a batch at a time on the pool; the chunks written must
    # be the ones one thread writes, in the same order
    ref = np.cumsum(np.random.default_rng(5).standard_normal(101_003))
    made = {}
    for nthreads in (1, 2):
        old = blzarr.set_nthreads(nthreads)
        try:
            kw = dict(rootdir=str(tmp_path / f"c{nthreads}"), mode="w") if ondisk else {}
            c = blzarr.carray(ref[:7], chunklen=1000, **kw)
            c.append(ref[7:50_000])
            c.append(ref[50_000:])
            c.flush()
            made[nthreads] = c
        finally:
            blzarr.set_nthreads(old)
    one, two = made[1], made[2]
    assert one.nchunks == two.nchunks == 101
    assert [bytes(one.chunks[i].getdata()) for i in range(101)] == \
        [bytes(two.chunks[i].getdata()) for i in range(101)]
    np.testing.assert_array_equal(two[:], ref)
    if ondisk:
        np.testing.assert_array_equal(blzarr.open(str(tmp_path / "c2"), mode="r")[:], ref)


def test_run_each_calls_every_item_once_and_raises_the_first_error():
    from blzarr.runtime.parallel import run_each
    import threading
    old = blzarr.set_nthreads(2)
    try:
        seen, lock = [], threading.Lock()

        def record(i):
            with lock:
                seen.append(i)
        run_each(record, range(100))
        assert sorted(seen) == list(range(100))

        def fail(i):
            if i == 3:
                raise ValueError("item 3")
        with pytest.raises(ValueError, match="item 3"):
            run_each(fail, range(50))
    finally:
        blzarr.set_nthreads(old)


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_run_ordered_consumes_in_order_and_raises_the_first_error(nthreads):
    from blzarr.runtime.parallel import run_ordered
    import threading
    import time
    old = blzarr.set_nthreads(nthreads)
    try:
        made, got, lock = set(), [], threading.Lock()
        ahead = []

        def produce(k):
            time.sleep(0.0005 * (k % 3))            # finish out of order
            with lock:
                made.add(k)
                ahead.append(len(made) - len(got))
            return k * k

        def consume(k, v):
            assert threading.current_thread() is threading.main_thread()
            got.append((k, v))
        run_ordered(produce, consume, 60, window=4)
        assert got == [(k, k * k) for k in range(60)]
        assert max(ahead) <= 4 + 1                  # never more than the window ahead of the consumer

        def bad_produce(k):
            if k == 7:
                raise ValueError("made 7")
            return k
        got.clear()
        with pytest.raises(ValueError, match="made 7"):
            run_ordered(bad_produce, lambda k, v: got.append(k), 40)
        assert got == list(range(len(got))) and len(got) <= 7

        def bad_consume(k, v):
            if k == 5:
                raise KeyError("used 5")
        with pytest.raises(KeyError, match="used 5"):
            run_ordered(lambda k: k, bad_consume, 40)
    finally:
        blzarr.set_nthreads(old)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30_000), p=st.sampled_from([0.0, 0.01, 0.5, 1.0]),
       skip=st.integers(0, 40_000), dtype=st.sampled_from(["f8", "f4", "i8", "i1", "u2", "?", ">i4", "f2", "c8"]),
       kind=st.sampled_from(["carray", "numpy", "list"]), limit=st.sampled_from([None, 0, 1, 999, 5000]),
       nthreads=st.sampled_from([1, 2]))
@settings(max_examples=examples(40), deadline=None)
def test_where_equals_numpy_through_every_mask_kind(seed, n, p, skip, dtype, kind, limit, nthreads):
    # the selected values of each chunk are produced ahead of the caller (on a thread of their own
    # with 2 threads); they come out as Python scalars in order, skip and limit applied across chunks
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 100).astype(dtype)
    m = rng.random(n) < p
    a = blzarr.carray(x, chunklen=1000)
    key = {"carray": lambda: blzarr.carray(m, chunklen=777), "numpy": lambda: m, "list": lambda: m.tolist()}[kind]()
    old = blzarr.set_nthreads(nthreads)
    try:
        got = list(a.where(key, skip=skip, limit=limit))
    finally:
        blzarr.set_nthreads(old)
    ref = x[m][skip:].tolist()[:limit]
    assert got == ref
    assert [type(v) for v in got] == [type(v) for v in ref]
    assert _where.where_threads() == 0
