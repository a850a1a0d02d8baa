"""Where a table's copy or group-by result is written: as in bcolz (``ctable.copy``, a constructor
in mode 'a') and bquery (``groupby(rootdir=...)``), a destination that holds something is refused
unless ``mode='w'`` asks to replace it, and one that overlaps the table itself is refused always."""

import os

import numpy as np
import pytest

import blzarr


def _table(path, n=100, fmt="blz"):
    return blzarr.ctable([np.arange(n) % 7, np.arange(n) * 1.5], names=["k", "v"], rootdir=str(path),
                         mode="w", format=fmt)


def _other(path):
    blzarr.carray(np.arange(10) - 3, rootdir=str(path), mode="w").close()


def _other_intact(path):
    np.testing.assert_array_equal(blzarr.open(str(path), mode="r")[:], np.arange(10) - 3)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_copy_refuses_an_existing_rootdir_without_mode_w(tmp_path, fmt):
    t = _table(tmp_path / "t", fmt=fmt)
    _other(tmp_path / "o")
    with pytest.raises(blzarr.StorageError, match="already exists"):
        t.copy(rootdir=str(tmp_path / "o"))
    _other_intact(tmp_path / "o")
    (tmp_path / "f").write_bytes(b"a file")
    with pytest.raises(blzarr.StorageError, match="already exists"):
        t.copy(rootdir=str(tmp_path / "f"))
    assert (tmp_path / "f").read_bytes() == b"a file"
    c = t.copy(rootdir=str(tmp_path / "o"), mode="w")
    np.testing.assert_array_equal(blzarr.open(str(tmp_path / "o"))["v"][:], np.arange(100) * 1.5)
    assert c.names == ["k", "v"]
    n = t.copy(rootdir=str(tmp_path / "new"))               # a new place needs no mode
    np.testing.assert_array_equal(n["k"][:], np.arange(100) % 7)


def _sums(n=100):
    k = np.arange(n) % 7
    return [float((np.arange(n) * 1.5)[k == g].sum()) for g in range(7)]


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_groupby_refuses_an_existing_rootdir_without_mode_w(tmp_path, fmt):
    t = _table(tmp_path / "t", fmt=fmt)
    _other(tmp_path / "o")
    with pytest.raises(blzarr.StorageError, match="already exists: pass mode='w'"):
        t.groupby(["k"], ["v"], rootdir=str(tmp_path / "o"))
    _other_intact(tmp_path / "o")
    r = t.groupby(["k"], ["v"], rootdir=str(tmp_path / "o"), mode="w")
    assert r["v"][:].tolist() == _sums()
    assert blzarr.open(str(tmp_path / "o"))["v"][:].tolist() == _sums()
    r = t.groupby(["k"], ["v"], rootdir=str(tmp_path / "fresh"))
    assert blzarr.open(str(tmp_path / "fresh"))["k"][:].tolist() == list(range(7))
    # other flavours write nothing, so a rootdir does not matter to them
    assert t.groupby(["k"], ["v"], rootdir=str(tmp_path / "o"), out_flavor="numpy")["v"].tolist() == _sums()


@pytest.mark.parametrize("dest", ["same", "slash", "inside", "link"])
def test_groupby_refuses_the_tables_own_directory(tmp_path, dest):
    t = _table(tmp_path / "t")
    os.symlink(tmp_path / "t", tmp_path / "l")
    path = {"same": str(tmp_path / "t"), "slash": str(tmp_path / "t") + "/",
            "inside": str(tmp_path / "t" / "sub"), "link": str(tmp_path / "l")}[dest]
    for mode in ("a", "w"):
        with pytest.raises(blzarr.StorageError, match="overlaps the table's"):
            t.groupby(["k"], ["v"], rootdir=path, mode=mode)
    t2 = blzarr.open(str(tmp_path / "t"), mode="r")
    np.testing.assert_array_equal(t2["v"][:], np.arange(100) * 1.5)
    assert not os.path.exists(tmp_path / "t" / "sub")


def test_groupby_mode_is_checked(tmp_path):
    t = _table(tmp_path / "t")
    with pytest.raises(ValueError, match="`mode` must be 'a' or 'w'"):
        t.groupby(["k"], ["v"], rootdir=str(tmp_path / "x"), mode="r")
    assert not os.path.exists(tmp_path / "x")


def test_groupby_refuses_before_aggregating(tmp_path, monkeypatch):
    # the refusal comes before the work: an aggregation over a large table is not thrown away
    from blzarr.query import groupby as qg
    t = _table(tmp_path / "t")
    _other(tmp_path / "o")
    calls = []
    real = qg.aggregate
    monkeypatch.setattr(qg, "aggregate", lambda *a, **k: calls.append(1) or real(*a, **k))
    t.groupby(["k"], ["v"])
    assert calls == [1]                                    # the patched function is the one used
    with pytest.raises(blzarr.StorageError):
        t.groupby(["k"], ["v"], rootdir=str(tmp_path / "o"))
    assert calls == [1]


def test_copy_onto_an_existing_directory_raises_as_bcolz_does(tmp_path):
    bcolz = pytest.importorskip("bcolz")
    d = [np.arange(10), np.arange(10) * 2.0]
    b = bcolz.ctable(d, names=["a", "b"])
    ours = blzarr.ctable(d, names=["a", "b"])
    for lib, t in (("bcolz", b), ("blzarr", ours)):
        dest = str(tmp_path / lib)
        t.copy(rootdir=dest)
        # bcolz's ctable raises a ValueError here: blzarr's error is one too (and an OSError)
        with pytest.raises(ValueError, match="already exists|cannot pass a `columns`"):
            t.copy(rootdir=dest)
        with pytest.raises(ValueError):
            type(t)([np.arange(3)], names=["z"], rootdir=dest)
        np.testing.assert_array_equal(blzarr.open(dest, mode="r")["b"][:], np.arange(10) * 2.0)


def test_overlap_of_paths_and_urls(tmp_path):
    # the one check every copy, group-by result, salvage and convert asks of its destination
    from blzarr.storage.bytestore import overlaps
    assert overlaps("s3://b/t", "s3://b/t/") and overlaps("s3://b/t/sub", "s3://b/t")
    assert overlaps("s3://b/t", "s3://b/t/sub/x")
    assert not overlaps("s3://b/t2", "s3://b/t") and not overlaps("s3://b/t", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    os.symlink(tmp_path / "t", tmp_path / "l")
    assert overlaps(str(tmp_path / "l"), str(tmp_path / "t" / "x"))
    assert overlaps(str(tmp_path / "t") + "/", str(tmp_path / "t" / ".." / "t"))
    assert not overlaps(str(tmp_path / "t2"), str(tmp_path / "t"))
