"""Calls that applications built on bcolz make (odo's bcolz backend and its tests, blaze's bcolz
compute, old dask's from_bcolz, bcolz's own tutorial notebooks), where blzarr answered differently
from bcolz: each is checked against NumPy on the same data and against the real bcolz."""

import os

import numpy as np
import pytest

import blzarr

ROWS = np.array([(1, 1.0, b"a"), (2, 4.0, b"bb"), (3, 9.0, b"c"), (4, 16.0, b"dd")],
                dtype=[("f0", "i4"), ("f1", "f8"), ("s", "S2")])
MASK = np.array([True, False, True, True])


def _keys(mod):
    """The keys that select rows by a condition: a boolean array, a boolean carray, an expression."""
    return {"mask": MASK, "bool carray": mod.carray(MASK), "expression": "(f0 != 2) & (f1 > 0)"}


@pytest.mark.parametrize("key", ["mask", "bool carray", "expression"])
@pytest.mark.parametrize("where", ["memory", "blz", "bcolz"])
def test_rows_a_condition_selects_are_records(tmp_path, key, where):
    # bcolz's tutorial reads ct["(f0>0) & (f1<10)"] and code iterates it as rows with attributes:
    # bcolz gives an ndarray of NumPy's record dtype there, so each row is a numpy.record
    kw = {} if where == "memory" else dict(rootdir=str(tmp_path / "t"), format=where)
    t = blzarr.ctable(ROWS, **kw)
    got = t[_keys(blzarr)[key]]
    want = ROWS[MASK]
    assert type(got) is np.ndarray
    assert got.dtype.type is np.record and got.dtype == ROWS.dtype
    assert got.dtype.names == ROWS.dtype.names
    assert got.tolist() == want.tolist()
    assert isinstance(got[0], np.record)
    assert [(r.f0, r.f1, r.s) for r in got] == [(1, 1.0, b"a"), (3, 9.0, b"c"), (4, 16.0, b"dd")]
    assert type(got[0].f0) is np.int32


def test_rows_a_condition_selects_match_bcolz(bcolz):
    t, b = blzarr.ctable(ROWS), bcolz.ctable(ROWS)
    for key in ("mask", "bool carray", "expression"):
        got, want = t[_keys(blzarr)[key]], b[_keys(bcolz)[key]]
        assert got.dtype == want.dtype and got.dtype.type is want.dtype.type, key
        assert type(got[0]) is type(want[0]), key
        assert got.tolist() == want.tolist(), key
    # an empty selection too
    assert t["f0 > 100"].dtype.type is b["f0 > 100"].dtype.type is np.record
    assert len(t["f0 > 100"]) == 0


def test_other_row_keys_stay_plain_structured_arrays(bcolz):
    # positions, slices and single rows give plain structured rows in bcolz: numpy.void
    t, b = blzarr.ctable(ROWS), bcolz.ctable(ROWS)
    for key in (slice(1, 3), [0, 2], np.array([3, 1]), 1):
        got, want = t[key], b[key]
        assert got.dtype.type is want.dtype.type is np.void, key
        assert np.asarray(got).tolist() == np.asarray(want).tolist() == np.asarray(ROWS[key]).tolist()
    # and fetchwhere's NumPy output, whereblocks' blocks
    assert t.fetchwhere("f0 > 1", out_flavor="numpy").dtype.type is np.void
    assert next(t.whereblocks("f0 > 1")).dtype.type is np.void


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_read_meta_gives_what_bcolz_gives(tmp_path, bcolz, fmt):
    # odo's tests read the stored expectedlen through carray._read_meta(): bcolz has no other way
    def made(mod, name, **extra):
        a = mod.carray(np.arange(10.0), rootdir=str(tmp_path / name), mode="w", expectedlen=500, dflt=1.5,
                       cparams=mod.cparams(clevel=7, cname="zstd"), **extra)
        a.flush()
        return a
    ours = made(blzarr, "ours", format=fmt)._read_meta()
    theirs = made(bcolz, "theirs")._read_meta()
    assert len(ours) == 7
    shape, cparams, dtype, dflt, expectedlen, cbytes, chunklen = ours
    assert (shape, dtype, dflt, expectedlen, chunklen) == (
        theirs[0], theirs[2], theirs[3], theirs[4], theirs[6]) == ((10,), np.dtype("f8"), 1.5, 500, 8192)
    assert repr(cparams) == repr(theirs[1])
    assert isinstance(cbytes, int) and cbytes > 0
    # a column of a table, which odo reads column by column
    t = blzarr.ctable(ROWS, rootdir=str(tmp_path / "t"), expectedlen=200, format=fmt)
    assert [t[n]._read_meta()[4] for n in t.names] == [200, 200, 200]
    assert t["s"]._read_meta()[2] == np.dtype("S2")


def test_read_meta_reads_the_files(tmp_path):
    # as bcolz, what was flushed: rows appended since are not in it until the next flush
    a = blzarr.carray(np.arange(5), rootdir=str(tmp_path / "a"), mode="w")
    a.flush()
    a.append(np.arange(3))
    assert a._read_meta()[0] == (5,)
    a.flush()
    assert a._read_meta()[0] == (8,)
    reopened = blzarr.open(str(tmp_path / "a"), mode="r")
    assert reopened._read_meta()[0] == (8,) and reopened._read_meta()[6] == a.chunklen
    with pytest.raises(TypeError, match="in memory"):
        blzarr.carray(np.arange(3))._read_meta()
    assert os.path.isdir(str(tmp_path / "a"))


@pytest.mark.parametrize("args", [(1e5,), (10 * 1e4,), (0, 5.0), (0.0, 5), (0, 5, 1.0), (np.float32(7),),
                                  (7,), (np.int32(7),), (np.int8(-3), 4), (10, 0, -3), (0.5, 3)])
def test_arange_takes_numpys_dtype(args):
    # bcolz's tutorial starts from bcolz.arange(1e8): floats in NumPy and in bcolz (blzarr gave int64,
    # then refused the tutorial's b.append(np.arange(10.)))
    got, want = blzarr.arange(*args), np.arange(*args)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got[:], want)


def test_arange_of_a_float_stop_like_bcolz(bcolz):
    got, theirs = blzarr.arange(2e4), bcolz.arange(2e4)
    assert got.dtype == theirs.dtype == np.float64
    np.testing.assert_array_equal(got[:], theirs[:])
    got.append(np.arange(10.0))
    assert len(got) == 20_010 and got[-1] == 9.0


def test_iterators_answer_the_carrays_methods(bcolz):
    # bcolz's iterators are the carray itself: its bench (column-iter.py) sizes a fromiter with
    # count=c.wheretrue().sum(), which is the bool carray's sum, i.e. how many values are true
    mask = np.arange(100) % 3 == 0
    values = np.arange(100.0)
    for mod in (blzarr, bcolz):
        c, a = mod.carray(mask, chunklen=16), mod.carray(values, chunklen=16)
        w = c.wheretrue()
        assert w.sum() == mask.sum() == 34
        assert list(w) == np.flatnonzero(mask).tolist()
        assert list(c.wheretrue(limit=3, skip=1)) == [3, 6, 9]
        it = a.iter(3, 9)
        assert it.sum() == values.sum() and it.dtype == values.dtype and it.chunklen == 16
        assert list(it) == values[3:9].tolist()
        n = int(c.wheretrue().sum())
        r = mod.fromiter((x for x in a.where(c)), dtype=a.dtype, count=n)
        assert r.sum() == values[mask].sum()
    with pytest.raises(AttributeError):
        blzarr.carray(mask).wheretrue().no_such_method


def test_fromiter_takes_one_record_per_item_like_bcolz(bcolz):
    dt = np.dtype([("f%d" % i, "f8") for i in range(40)])
    rows = [tuple(float(i + j) for j in range(40)) for i in range(5)]
    for mod in (blzarr, bcolz):
        t = mod.fromiter(iter(rows), dtype=dt, count=5)
        assert t[:].tolist() == np.array(rows, dtype=dt).tolist()
        t = mod.fromiter(iter(np.array(rows, dtype=dt)), dtype=dt, count=-1)
        assert len(t) == 5 and t["f39"][4] == 43.0
    # an item that is an array or a list is no record: refused at once, as numpy.fromiter refuses it
    # (blzarr broadcast each into every field first, 40 x 40 values a row here)
    with pytest.raises(ValueError, match="fromiter"):
        blzarr.fromiter((np.arange(40.0) for _ in range(1000)), dtype=dt, count=1000)
    with pytest.raises(ValueError):
        bcolz.fromiter((np.arange(40.0) for _ in range(1000)), dtype=dt, count=1000)
    with pytest.raises(ValueError, match="fromiter"):
        blzarr.fromiter(iter([[1.0] * 40]), dtype=dt, count=1)
