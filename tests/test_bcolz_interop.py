"""Interoperability with the real bcolz (bcolz-zipline) in the bcolz 1.x directory layout.

Three directions, each compared value by value with the NumPy source:
  * blzarr opens what bcolz wrote;
  * blzarr modifies a bcolz directory (append, setitem, resize, trim) and bcolz reads the result;
  * bcolz opens what blzarr wrote (format='bcolz'), and can append to it for blzarr to read back.
"""

import ast
import datetime
import json
import os

import numpy as np
import pytest

bcolz = pytest.importorskip("bcolz")

import blzarr  # noqa: E402
from helpers import assert_same  # noqa: E402
from blzarr.errors import PickleNotAllowedError  # noqa: E402

CHUNKLEN = 8
# empty, shorter than a chunk, exact multiples, multiples plus a leftover
LENGTHS = [0, 5, CHUNKLEN, 2 * CHUNKLEN, 2 * CHUNKLEN + 3]

# dtypes bcolz can persist: its meta writer needs a JSON-able `dflt.tolist()`, which rules out
# complex and datetime64/timedelta64 in units coarser than ns.
BCOLZ_DTYPES = [
    "?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", ">i4", ">f8",
    "M8[ns]", "m8[ns]", "S1", "S7", "S300", "U1", "U6", "U70", "V4", "V300",
]
# dtypes blzarr writes in the bcolz layout (bcolz reads all of these)
# complex and coarse datetimes: bcolz writes their chunks, only its JSON writer fails on the default
UNJSONABLE_DTYPES = ["c8", "c16", "M8[s]", "M8[ms]", "M8[us]", "M8[D]", "m8[s]", "m8[ms]", "m8[D]"]
BLZARR_DTYPES = BCOLZ_DTYPES + UNJSONABLE_DTYPES + ["i4,f8,S3", [("a", "u2"), ("b", "f4", (2,))]]
CODECS = ["blosclz", "lz4", "lz4hc", "zlib", "zstd"]


def make(dtype, n, shape=()):
    """A deterministic, non-trivial array of `n` atoms of `dtype` (atoms of `shape`)."""
    dt = np.dtype(dtype)
    size = n * int(np.prod(shape, dtype=np.int64))
    i = np.arange(size, dtype=np.int64)
    if dt.names:
        out = np.zeros(size, dtype=dt)
        for name in dt.names:
            out[name] = make(dt[name].base, size, dt[name].shape)
        return out.reshape((n,) + shape)
    if dt.kind == "b":
        v = (i % 3) == 1
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        span = int(info.max) - int(info.min) + 1
        v = ((i * 7919 + 13) % min(span, 1 << 62) + int(info.min)).astype(dt)
        if size:
            v[-1] = info.max  # extremes survive the round trip
            v[0] = info.min
    elif dt.kind == "f":
        v = (i * 1.25 - 7.5).astype(dt)
        if size > 2:
            v[1] = np.inf
            v[2] = np.nan
    elif dt.kind == "c":
        v = (i * 0.5 - 1j * i).astype(dt)
    elif dt.kind in "mM":
        v = (i * 1000003 - 5000).astype(dt)
        if size > 1:
            v[1] = np.array("NaT", dtype=dt)
    elif dt.kind == "S":
        v = np.array([(b"x%dyz" % k)[:dt.itemsize] for k in range(size)], dtype=dt)
    elif dt.kind == "U":
        v = np.array([("\u00e9\u4e2d%d" % k)[:dt.itemsize // 4] for k in range(size)], dtype=dt)
    elif dt.kind == "V":
        v = np.frombuffer(bytes((k * 37 + 1) % 256 for k in range(size * dt.itemsize)), dtype=dt)
    else:
        raise AssertionError(dt)
    return np.asarray(v, dtype=dt).reshape((n,) + shape)


def bcolz_write(path, arr, chunklen=CHUNKLEN, **kw):
    c = bcolz.carray(arr, rootdir=str(path), mode="w", chunklen=chunklen, **kw)
    c.flush()
    return c


def blzarr_write(path, arr, chunklen=CHUNKLEN, **kw):
    c = blzarr.carray(arr, rootdir=str(path), mode="w", chunklen=chunklen, format="bcolz", **kw)
    c.flush()
    return c


def check_blzarr_reads(path, expected, **kw):
    a = blzarr.open(str(path), mode="r", **kw)
    assert len(a) == len(expected)
    assert a.shape == expected.shape
    assert_same(a[:], expected)
    if len(expected):
        # scalars and partial reads too, leftover included
        assert_same(np.asarray([a[len(expected) - 1]], dtype=expected.dtype), expected[-1:])
        assert_same(a[1:len(expected):3], expected[1::3])
    return a


def check_bcolz_reads(path, expected):
    b = bcolz.open(str(path), mode="r")
    assert len(b) == len(expected)
    assert tuple(b.shape) == expected.shape
    assert_same(b[:], expected)
    if len(expected):
        # bcolz returns Python scalars for some dtypes, and squeezes atoms of shape (1,):
        # compare the values, cast to the dtype
        last = np.asarray(b[len(expected) - 1], dtype=expected.dtype)
        assert_same(last.reshape((1,) + expected.shape[1:]), expected[-1:])
    return b


# ---------------------------------------------------------------- bcolz writes, blzarr reads

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", BCOLZ_DTYPES)
def test_blzarr_reads_bcolz_dtypes(tmp_path, dtype, n):
    expected = make(dtype, n)
    bcolz_write(tmp_path / "d", expected)
    a = check_blzarr_reads(tmp_path / "d", expected)
    assert a.chunklen == CHUNKLEN
    assert a.nchunks == n // CHUNKLEN
    assert a.nleftover == n % CHUNKLEN


class _LenientJSON:
    """Stands in for the json module inside bcolz's extension, so that bcolz can persist dtypes
    whose default value `tolist()` makes complex or datetime objects (as blzarr stores them)."""

    loads = staticmethod(json.loads)

    @staticmethod
    def dumps(obj, **kw):
        def default(o):
            if isinstance(o, complex):
                return [o.real, o.imag]
            if isinstance(o, (datetime.date, datetime.timedelta)):
                return 0
            raise TypeError(f"{o!r} is not JSON serializable")
        return json.dumps(obj, default=default, **kw)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", UNJSONABLE_DTYPES)
def test_blzarr_reads_bcolz_chunks_of_complex_and_datetimes(tmp_path, monkeypatch, dtype, n):
    monkeypatch.setattr(bcolz.carray_ext, "json", _LenientJSON)
    expected = make(dtype, n)
    bcolz_write(tmp_path / "d", expected)
    check_blzarr_reads(tmp_path / "d", expected)
    a = blzarr.open(str(tmp_path / "d"))
    a.append(make(dtype, 3))
    a.flush()
    check_bcolz_reads(tmp_path / "d", np.concatenate([expected, make(dtype, 3)]))


@pytest.mark.parametrize("shuffle", [0, 1, 2])
@pytest.mark.parametrize("cname", CODECS)
def test_blzarr_reads_bcolz_codecs(tmp_path, cname, shuffle):
    expected = make("f8", 3 * 64 + 17)
    bcolz_write(tmp_path / "d", expected, chunklen=64,
                cparams=bcolz.cparams(clevel=7, shuffle=shuffle, cname=cname))
    a = check_blzarr_reads(tmp_path / "d", expected)
    assert (a.cparams.cname, a.cparams.shuffle, a.cparams.clevel) == (cname, shuffle, 7)


@pytest.mark.parametrize("clevel", [0, 1, 9])
def test_blzarr_reads_bcolz_clevels(tmp_path, clevel):
    expected = make("i4", 1000)
    bcolz_write(tmp_path / "d", expected, chunklen=300, cparams=bcolz.cparams(clevel=clevel))
    check_blzarr_reads(tmp_path / "d", expected)


@pytest.mark.parametrize("chunklen", [1, 2, 3, 7, 100])
def test_blzarr_reads_bcolz_small_chunklen(tmp_path, chunklen):
    expected = make("i2", 23)
    bcolz_write(tmp_path / "d", expected, chunklen=chunklen)
    a = check_blzarr_reads(tmp_path / "d", expected)
    assert a.chunklen == chunklen
    assert a.nchunks == 23 // chunklen


def test_blzarr_reads_bcolz_default_chunklen(tmp_path):
    expected = make("i8", 70000)
    c = bcolz.carray(expected, rootdir=str(tmp_path / "d"), mode="w")
    c.flush()
    a = check_blzarr_reads(tmp_path / "d", expected)
    assert a.chunklen == c.chunklen


@pytest.mark.parametrize("n", [0, 3, 2 * CHUNKLEN + 1])
@pytest.mark.parametrize("shape,dtype", [((3,), "f8"), ((2, 3), "i4"), ((4,), "U3"), ((1,), "u1")])
def test_blzarr_reads_bcolz_multidim(tmp_path, shape, dtype, n):
    expected = make(dtype, n, shape)
    bcolz_write(tmp_path / "d", expected)
    a = check_blzarr_reads(tmp_path / "d", expected)
    assert a.ndim == 1 + len(shape)
    if n:
        assert_same(a[n - 1, 0], expected[n - 1, 0])


@pytest.mark.parametrize("n", [0, 3, 2 * CHUNKLEN + 1])
@pytest.mark.parametrize("dtype", ["i4,f8", [("a", "u2"), ("b", "f4"), ("c", "?")],
                                   np.dtype([("a", "u1"), ("b", "<i4")], align=True),
                                   [("p", [("x", "i2"), ("y", "f4")]), ("q", "i8")]])
def test_blzarr_reads_bcolz_structured(tmp_path, dtype, n):
    # bcolz writes these (but cannot reopen them: NumPy does not parse the str() of the dtype;
    # nor write those with a bytes field: its JSON writer chokes on the default value)
    expected = make(dtype, n)
    bcolz_write(tmp_path / "d", expected)
    check_blzarr_reads(tmp_path / "d", expected)


def test_blzarr_reads_bcolz_attrs(tmp_path):
    expected = make("i8", 20)
    c = bcolz_write(tmp_path / "d", expected)
    attrs = {"temp": 22.5, "name": "caf\u00e9", "n": 3, "nested": {"a": [1, 2, None]}, "flag": True}
    for k, v in attrs.items():
        c.attrs[k] = v
    a = check_blzarr_reads(tmp_path / "d", expected)
    assert a.attrs.getall() == attrs
    assert a.attrs["nested"] == {"a": [1, 2, None]}


def test_blzarr_reads_bcolz_dflt(tmp_path):
    expected = make("f4", 10)
    bcolz_write(tmp_path / "d", expected, dflt=2.5)
    a = blzarr.open(str(tmp_path / "d"))
    assert a.dflt == np.float32(2.5)
    a.resize(13)
    assert_same(a[10:], np.full(3, 2.5, dtype="f4"))


def test_bcolz_object_dtype_needs_opt_in(tmp_path):
    objs = [1, "two", None, [3, {"four": 4.0}], (5,), b"six", 7.5, {"eight"}, "nine", 10]
    expected = np.empty(len(objs), dtype=object)
    expected[:] = objs
    bcolz_write(tmp_path / "d", expected)
    with pytest.raises(PickleNotAllowedError, match="allow_pickle=True") as info:
        blzarr.open(str(tmp_path / "d"))
    assert str(tmp_path / "d") in str(info.value)
    with pytest.raises(PickleNotAllowedError):
        blzarr.carray(rootdir=str(tmp_path / "d"))
    a = blzarr.open(str(tmp_path / "d"), mode="r", allow_pickle=True)
    assert len(a) == len(objs)
    assert a[:].tolist() == objs
    assert a[3] == [3, {"four": 4.0}]
    assert a[-2] == "nine"
    assert a[1:8:3].tolist() == objs[1:8:3]


# ---------------------------------------------------------------- blzarr modifies, bcolz reads

@pytest.mark.parametrize("dtype", BCOLZ_DTYPES)
def test_blzarr_modifies_bcolz_dtypes(tmp_path, dtype):
    src = make(dtype, 40)
    bcolz_write(tmp_path / "d", src[:19])
    a = blzarr.open(str(tmp_path / "d"))
    a[3:12] = src[20:29]
    a[[0, 17]] = src[30:32]
    a.trim(3)
    a.resize(21)
    a.append(src[32:40])
    a.flush()
    expected = src[:19].copy()
    expected[3:12] = src[20:29]
    expected[[0, 17]] = src[30:32]
    expected = np.concatenate([expected[:16], np.zeros(5, dtype=src.dtype), src[32:40]]).astype(src.dtype)
    check_bcolz_reads(tmp_path / "d", expected)
    check_blzarr_reads(tmp_path / "d", expected)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", BCOLZ_DTYPES)
def test_blzarr_appends_to_bcolz(tmp_path, dtype, n):
    src = make(dtype, n + 30)
    expected = src[:n]
    bcolz_write(tmp_path / "d", expected)
    a = blzarr.open(str(tmp_path / "d"))
    # piece by piece: single atoms, a fraction of a chunk, more than a chunk
    for lo, hi in [(n, n + 1), (n + 1, n + 4), (n + 4, n + 4 + CHUNKLEN + 2), (n + 14, n + 30)]:
        a.append(src[lo:hi])
    a.flush()
    check_bcolz_reads(tmp_path / "d", src)
    check_blzarr_reads(tmp_path / "d", src)


def test_blzarr_append_then_bcolz_append(tmp_path):
    src = make("i4", 60)
    bcolz_write(tmp_path / "d", src[:11])
    a = blzarr.open(str(tmp_path / "d"))
    a.append(src[11:30])
    a.flush()
    b = bcolz.open(str(tmp_path / "d"))
    b.append(src[30:45])
    b.flush()
    a = blzarr.open(str(tmp_path / "d"))
    a.append(src[45:])
    a.flush()
    check_bcolz_reads(tmp_path / "d", src)
    check_blzarr_reads(tmp_path / "d", src)


def test_blzarr_setitem_on_bcolz(tmp_path):
    expected = make("f8", 3 * CHUNKLEN + 5)
    bcolz_write(tmp_path / "d", expected)
    expected = expected.copy()
    a = blzarr.open(str(tmp_path / "d"))
    for key, value in [(0, -1.0), (-1, -2.0), (slice(3, 20), 9.5), (slice(None, None, 5), 7.0),
                       ([1, 10, 27], [0.25, 0.5, 0.75]), (slice(24, 29), np.arange(5.0) + 100)]:
        a[key] = value
        expected[key] = value
    mask = (np.arange(len(expected)) % 4) == 2
    a[mask] = -3.0
    expected[mask] = -3.0
    a.flush()
    check_bcolz_reads(tmp_path / "d", expected)
    check_blzarr_reads(tmp_path / "d", expected)


@pytest.mark.parametrize("newlen", [0, 3, CHUNKLEN, 2 * CHUNKLEN + 1, 4 * CHUNKLEN, 4 * CHUNKLEN + 7])
def test_blzarr_resize_on_bcolz(tmp_path, newlen):
    n = 3 * CHUNKLEN + 2
    src = make("i8", n)
    bcolz_write(tmp_path / "d", src, dflt=-5)
    a = blzarr.open(str(tmp_path / "d"))
    a.resize(newlen)
    a.flush()
    expected = np.concatenate([src, np.full(max(newlen - n, 0), -5, dtype="i8")])[:newlen]
    check_bcolz_reads(tmp_path / "d", expected)
    check_blzarr_reads(tmp_path / "d", expected)
    # bcolz keeps working on the result
    b = bcolz.open(str(tmp_path / "d"))
    b.append(src[:4])
    b.flush()
    check_blzarr_reads(tmp_path / "d", np.concatenate([expected, src[:4]]))


@pytest.mark.parametrize("ntrim", [0, 1, 2, 3, CHUNKLEN, CHUNKLEN + 3, 3 * CHUNKLEN + 2])
def test_blzarr_trim_on_bcolz(tmp_path, ntrim):
    src = make("U6", 3 * CHUNKLEN + 2)
    bcolz_write(tmp_path / "d", src)
    a = blzarr.open(str(tmp_path / "d"))
    a.trim(ntrim)
    a.flush()
    expected = src[:len(src) - ntrim]
    check_bcolz_reads(tmp_path / "d", expected)
    check_blzarr_reads(tmp_path / "d", expected)
    b = bcolz.open(str(tmp_path / "d"))
    b.append(src[:CHUNKLEN + 1])
    b.flush()
    check_blzarr_reads(tmp_path / "d", np.concatenate([expected, src[:CHUNKLEN + 1]]))


def test_blzarr_modifies_bcolz_multidim(tmp_path):
    src = make("i4", 30, (2, 3))
    bcolz_write(tmp_path / "d", src[:13])
    a = blzarr.open(str(tmp_path / "d"))
    a.append(src[13:])
    a[2] = src[2] * 0 + 77
    a[5:9, 1] = -1
    a.flush()
    expected = src.copy()
    expected[2] = 77
    expected[5:9, 1] = -1
    check_bcolz_reads(tmp_path / "d", expected)
    a.trim(4)
    a.flush()
    check_bcolz_reads(tmp_path / "d", expected[:-4])
    a.resize(len(a) + 11)
    a.flush()
    grown = np.concatenate([expected[:-4], np.zeros((11, 2, 3), dtype="i4")])
    check_bcolz_reads(tmp_path / "d", grown)
    b = bcolz.open(str(tmp_path / "d"))
    b.append(src[:2])
    b.flush()
    check_blzarr_reads(tmp_path / "d", np.concatenate([grown, src[:2]]))


def test_blzarr_attrs_on_bcolz_dir(tmp_path):
    bcolz_write(tmp_path / "d", make("i8", 5))
    a = blzarr.open(str(tmp_path / "d"))
    a.attrs["unit"] = "m/s"
    a.attrs["scale"] = [1, 2.5]
    b = bcolz.open(str(tmp_path / "d"), mode="r")
    assert dict(b.attrs) == {"unit": "m/s", "scale": [1, 2.5]}


def test_blzarr_appends_to_bcolz_objects(tmp_path):
    objs = ["a", 1, None]
    arr = np.empty(3, dtype=object)
    arr[:] = objs
    bcolz_write(tmp_path / "d", arr)
    a = blzarr.open(str(tmp_path / "d"), allow_pickle=True)
    a.append([{"k": 1}, [2, 3]])
    a.flush()
    b = bcolz.open(str(tmp_path / "d"), mode="r")
    assert b[:].tolist() == objs + [{"k": 1}, [2, 3]]


# ---------------------------------------------------------------- blzarr writes, bcolz reads

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", BLZARR_DTYPES)
def test_bcolz_reads_blzarr_dtypes(tmp_path, dtype, n):
    expected = make(dtype, n)
    blzarr_write(tmp_path / "d", expected)
    if np.dtype(dtype).names:
        # bcolz cannot parse the str() of a structured dtype it wrote itself; check the chunks instead
        b = None
        storage = json.loads((tmp_path / "d" / "meta" / "storage").read_text())
        assert np.dtype(ast.literal_eval(storage["dtype"])) == expected.dtype
    else:
        b = check_bcolz_reads(tmp_path / "d", expected)
        assert b.chunklen == CHUNKLEN
        assert b.dtype == expected.dtype
    check_blzarr_reads(tmp_path / "d", expected)


@pytest.mark.parametrize("shuffle", [0, 1, 2])
@pytest.mark.parametrize("cname", CODECS)
def test_bcolz_reads_blzarr_codecs(tmp_path, cname, shuffle):
    expected = make("i8", 3 * 64 + 17)
    blzarr_write(tmp_path / "d", expected, chunklen=64,
                 cparams=blzarr.cparams(clevel=7, shuffle=shuffle, cname=cname))
    b = check_bcolz_reads(tmp_path / "d", expected)
    cname_b = b.cparams.cname.decode() if isinstance(b.cparams.cname, bytes) else b.cparams.cname
    assert (cname_b, b.cparams.shuffle, b.cparams.clevel) == (cname, shuffle, 7)


def test_bcolz_reads_blzarr_big_chunks(tmp_path):
    # chunks of many Blosc blocks, with the blocksize blzarr chooses
    expected = make("f8", 300000)
    blzarr_write(tmp_path / "d", expected, chunklen=65536)
    b = check_bcolz_reads(tmp_path / "d", expected)
    assert_same(b[123457:123470], expected[123457:123470])
    assert b[299999] == expected[299999]


@pytest.mark.parametrize("chunklen", [1, 2, 3, 7, 100])
def test_bcolz_reads_blzarr_small_chunklen(tmp_path, chunklen):
    expected = make("u4", 23)
    blzarr_write(tmp_path / "d", expected, chunklen=chunklen)
    b = check_bcolz_reads(tmp_path / "d", expected)
    assert b.chunklen == chunklen
    assert b.nchunks == 23 // chunklen


@pytest.mark.parametrize("n", [0, 3, 2 * CHUNKLEN + 1])
@pytest.mark.parametrize("shape,dtype", [((3,), "f8"), ((2, 3), "i4"), ((4,), "U3"), ((1,), "u1")])
def test_bcolz_reads_blzarr_multidim(tmp_path, shape, dtype, n):
    expected = make(dtype, n, shape)
    blzarr_write(tmp_path / "d", expected)
    b = check_bcolz_reads(tmp_path / "d", expected)
    assert b.ndim == 1 + len(shape)


def test_bcolz_reads_blzarr_attrs(tmp_path):
    expected = make("i8", 20)
    a = blzarr_write(tmp_path / "d", expected)
    attrs = {"temp": 22.5, "name": "caf\u00e9", "n": 3, "nested": {"a": [1, 2, None]}}
    for k, v in attrs.items():
        a.attrs[k] = v
    b = check_bcolz_reads(tmp_path / "d", expected)
    assert dict(b.attrs) == attrs


def test_bcolz_reads_blzarr_objects(tmp_path):
    objs = [1, "two", None, [3, {"four": 4.0}], b"five", 6.5, "seven", 8, 9, "ten"]
    arr = np.empty(len(objs), dtype=object)
    arr[:] = objs
    blzarr_write(tmp_path / "d", arr)
    b = bcolz.open(str(tmp_path / "d"), mode="r")
    assert b[:].tolist() == objs
    assert b[3] == [3, {"four": 4.0}]


@pytest.mark.parametrize("dtype", ["i8", "f4", "S7", "U6", "M8[ns]", "c8", "c16", "M8[s]", "m8[D]"])
def test_bcolz_reads_blzarr_dflt(tmp_path, dtype):
    src = make(dtype, 12)
    blzarr_write(tmp_path / "d", src[:10], dflt=src[11])
    b = bcolz.open(str(tmp_path / "d"))
    b.resize(12)
    b.flush()
    expected = np.concatenate([src[:10], src[11:12], src[11:12]])
    check_blzarr_reads(tmp_path / "d", expected)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", BCOLZ_DTYPES + UNJSONABLE_DTYPES)
def test_bcolz_appends_to_blzarr(tmp_path, dtype, n):
    src = make(dtype, n + 2 * CHUNKLEN + 3)
    blzarr_write(tmp_path / "d", src[:n])
    b = bcolz.open(str(tmp_path / "d"))
    b.append(src[n:n + 2])
    b.append(src[n + 2:])
    b.flush()
    check_blzarr_reads(tmp_path / "d", src)
    a = blzarr.open(str(tmp_path / "d"))
    a.trim(CHUNKLEN + 1)
    a.flush()
    check_bcolz_reads(tmp_path / "d", src[:len(src) - CHUNKLEN - 1])


def test_bcolz_modifies_blzarr(tmp_path):
    src = make("i2", 3 * CHUNKLEN + 4)
    blzarr_write(tmp_path / "d", src)
    b = bcolz.open(str(tmp_path / "d"))
    b[2:20] = 5
    b.trim(3)
    b.flush()
    expected = src[:-3].copy()
    expected[2:20] = 5
    check_blzarr_reads(tmp_path / "d", expected)


def test_blzarr_writes_bcolz_meta_keys(tmp_path):
    """The meta files carry every key bcolz's reader looks up, with the types it expects."""
    blzarr_write(tmp_path / "d", make("f8", 11, (2,)), dflt=1.5,
                 cparams=blzarr.cparams(clevel=3, shuffle=2, cname="zstd"))
    storage = json.loads((tmp_path / "d" / "meta" / "storage").read_text())
    sizes = json.loads((tmp_path / "d" / "meta" / "sizes").read_text())
    assert storage == {"dtype": "float64", "cparams": {"clevel": 3, "shuffle": 2, "cname": "zstd",
                                                        "quantize": 0},
                       "chunklen": CHUNKLEN, "expectedlen": 11, "dflt": 1.5}
    assert sizes["shape"] == [11, 2]
    assert sizes["nbytes"] == 11 * 2 * 8
    assert os.path.isfile(tmp_path / "d" / "__attrs__")


# ---------------------------------------------------------------- more ways in and out

def test_blzarr_toplevel_constructors_write_bcolz_layout(tmp_path):
    made = {
        "zeros": (blzarr.zeros(21, dtype="i4", rootdir=str(tmp_path / "zeros"), format="bcolz", chunklen=8),
                  np.zeros(21, dtype="i4")),
        "ones2d": (blzarr.ones((13, 2), dtype="f4", rootdir=str(tmp_path / "ones2d"), format="bcolz", chunklen=4),
                   np.ones((13, 2), dtype="f4")),
        "fill": (blzarr.fill(11, dflt=7, dtype="u2", rootdir=str(tmp_path / "fill"), format="bcolz", chunklen=5),
                 np.full(11, 7, dtype="u2")),
        "arange": (blzarr.arange(3, 40, 2, dtype="i8", rootdir=str(tmp_path / "arange"), format="bcolz", chunklen=6),
                   np.arange(3, 40, 2, dtype="i8")),
        "fromiter": (blzarr.fromiter((i * i for i in range(30)), dtype="i8", count=30,
                                     rootdir=str(tmp_path / "fromiter"), format="bcolz", chunklen=7),
                     np.arange(30, dtype="i8") ** 2),
    }
    for name, (a, expected) in made.items():
        a.flush()
        check_bcolz_reads(tmp_path / name, expected)
        assert sorted(os.listdir(tmp_path / name)) == ["__attrs__", "data", "meta"]


def test_blzarr_copy_to_bcolz_layout(tmp_path):
    expected = make("f8", 45)
    a = blzarr.carray(expected, chunklen=10)
    c = a.copy(rootdir=str(tmp_path / "c"), cparams=blzarr.cparams(clevel=9, cname="zlib"), format="bcolz")
    c.flush()
    b = check_bcolz_reads(tmp_path / "c", expected)
    assert b.cparams.clevel == 9


def test_blzarr_mode_w_empties_bcolz_dir(tmp_path):
    bcolz_write(tmp_path / "d", make("i4", 20))
    a = blzarr.open(str(tmp_path / "d"), mode="w")
    assert len(a) == 0
    a.append(make("i4", 3))
    a.flush()
    check_bcolz_reads(tmp_path / "d", make("i4", 3))


def test_bcolz_layout_kept_on_append(tmp_path):
    src = make("i8", 50)
    bcolz_write(tmp_path / "d", src[:10])
    with blzarr.open(str(tmp_path / "d")) as a:
        a.append(src[10:])
    assert sorted(os.listdir(tmp_path / "d")) == ["__attrs__", "data", "meta"]
    assert sorted(os.listdir(tmp_path / "d" / "data")) == sorted(f"__{i}.blp" for i in range(7))
    # meta/stats and meta/commit: blzarr's per-chunk statistics and commit record, which bcolz
    # ignores (check_bcolz_reads)
    assert sorted(os.listdir(tmp_path / "d" / "meta")) == ["commit", "sizes", "stats", "storage"]
    check_bcolz_reads(tmp_path / "d", src)


@pytest.mark.parametrize("dtype,dflt", [("U4", "\u00e9t\u00e9"), ("S3", b"ab"), ("?", True), ("u8", 2 ** 64 - 1),
                                        ("f8", -0.5), ("f8", np.nan), ("f4", -np.inf), ("m8[ns]", 12345)])
def test_dflt_both_ways(tmp_path, dtype, dflt):
    expected = np.concatenate([make(dtype, 5), np.full(4, dflt, dtype=dtype)])
    # bcolz writes the default, blzarr uses it
    bcolz_write(tmp_path / "b", make(dtype, 5), dflt=dflt)
    a = blzarr.open(str(tmp_path / "b"))
    a.resize(9)
    a.flush()
    check_bcolz_reads(tmp_path / "b", expected)
    # blzarr writes the default, bcolz uses it
    blzarr_write(tmp_path / "z", make(dtype, 5), dflt=dflt)
    b = bcolz.open(str(tmp_path / "z"))
    b.resize(9)
    b.flush()
    check_blzarr_reads(tmp_path / "z", expected)


def test_quantize_like_bcolz(tmp_path):
    data = np.linspace(-3, 3, 101)
    bcolz_write(tmp_path / "b", data, cparams=bcolz.cparams(quantize=3))
    a = blzarr.open(str(tmp_path / "b"))
    assert a.cparams.quantize == 3
    ref = bcolz.open(str(tmp_path / "b"))[:]
    assert not np.array_equal(ref, data)  # the data really was quantized
    assert_same(a[:], ref)
    # appending through blzarr quantizes exactly as bcolz does (element-wise, so the chunk
    # boundaries, which differ here, do not matter)
    a.append(data)
    a.flush()
    assert_same(bcolz.open(str(tmp_path / "b"))[:], np.concatenate([ref, ref]))


# ---------------------------------------------------------------- random interleavings, checked against NumPy

from hypothesis import given, strategies as st  # noqa: E402

_op = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3 * CHUNKLEN)),
    st.tuples(st.just("setslice"), st.integers(-40, 40), st.integers(-40, 40), st.integers(1, 4)),
    st.tuples(st.just("setfancy"), st.lists(st.integers(0, 60), max_size=6)),
    st.tuples(st.just("trim"), st.integers(0, 2 * CHUNKLEN)),
    st.tuples(st.just("resize"), st.integers(0, 60)),
    st.tuples(st.just("reopen"), st.sampled_from(["blzarr", "bcolz"])),
    st.tuples(st.just("flush")),
)


@given(start=st.integers(0, 3 * CHUNKLEN), ops=st.lists(_op, max_size=8),
       first=st.sampled_from(["blzarr", "bcolz"]), dtype=st.sampled_from(["i8", "f4", "U6", "S7", "M8[ns]"]))
def test_random_interleaving_of_both_libraries(tmp_path_factory, start, ops, first, dtype):
    root = str(tmp_path_factory.mktemp("mix") / "d")
    counter = iter(range(10 ** 6))
    dflt = make(dtype, 3)[2]

    def fresh(k):
        off = 5 * next(counter)
        return make(dtype, off + k)[off:].copy()

    model = fresh(start)
    lib = {"blzarr": blzarr, "bcolz": bcolz}
    if first == "bcolz":
        bcolz_write(root, model, dflt=dflt)
    else:
        blzarr_write(root, model, dflt=dflt)
    cur = lib[first].open(root)
    for op in ops:
        if op[0] == "append":
            vals = fresh(op[1])
            cur.append(vals)
            model = np.concatenate([model, vals])
        elif op[0] == "setslice":
            key = slice(op[1], op[2], op[3])
            n = len(range(*key.indices(len(model))))
            vals = fresh(n)
            cur[key] = vals
            model[key] = vals
        elif op[0] == "setfancy":
            pos = sorted({p for p in op[1] if p < len(model)})
            if not pos:
                continue
            vals = fresh(len(pos))
            if len(pos) == 1 and not isinstance(cur, blzarr.carray):
                # bcolz raises TypeError for c[[i]] = [v] and c[i] = v on a carray of one element
                cur[pos[0]:pos[0] + 1] = vals
            else:
                cur[pos] = vals
            model[pos] = vals
        elif op[0] == "trim":
            k = min(op[1], len(model))
            cur.trim(k)
            model = model[:len(model) - k]
        elif op[0] == "resize":
            cur.resize(op[1])
            model = np.concatenate([model, np.full(max(op[1] - len(model), 0), dflt, dtype=dtype)])[:op[1]]
        elif op[0] == "flush":
            cur.flush()
        else:
            cur.flush()
            cur = lib[op[1]].open(root)
    cur.flush()
    check_blzarr_reads(root, model)
    check_bcolz_reads(root, model)


def test_unusual_directory_names_both_ways(tmp_path):
    expected = make("i4", 21)
    root = tmp_path / "d\u00e9j\u00e0 vu, \u4e2d & spaces"
    root.mkdir()
    bcolz_write(root / "from bcolz", expected)
    a = blzarr.open(root / "from bcolz")   # a pathlib.Path works too
    a.append(expected[:3])
    a.flush()
    check_bcolz_reads(root / "from bcolz", np.concatenate([expected, expected[:3]]))
    blzarr.carray(expected, rootdir=root / "from blzarr", chunklen=CHUNKLEN, format="bcolz").flush()
    check_bcolz_reads(root / "from blzarr", expected)
