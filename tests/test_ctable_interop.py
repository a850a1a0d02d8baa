"""ctable directories shared with real bcolz (bcolz-zipline) in both directions."""

import json
import os

import numpy as np
import pytest

import blzarr

from helpers import make_typed_ra  # noqa: E402

bcolz = pytest.importorskip("bcolz")


LENGTHS = [0, 1, 999, 3000, 10_007]


@pytest.mark.parametrize("n", LENGTHS)
def test_bcolz_reads_blzarr_table(tmp_path, n):
    root = str(tmp_path / "t")
    ra = make_typed_ra(n)
    t = blzarr.ctable(ra, rootdir=root, chunklen=1000, cparams=blzarr.cparams(cname="zstd", clevel=3),
                      format="bcolz")
    t.attrs["who"] = "blzarr"
    b = bcolz.open(root, mode="r")
    assert isinstance(b, bcolz.ctable)
    assert b.names == list(ra.dtype.names)
    assert len(b) == n
    np.testing.assert_array_equal(b[:], ra)
    assert b.attrs["who"] == "blzarr"
    with open(os.path.join(root, "__rootdirs__"), "rb") as f:
        assert json.loads(f.read().decode("ascii")) == {"names": list(ra.dtype.names)}


@pytest.mark.parametrize("n", LENGTHS)
def test_blzarr_reads_and_appends_bcolz_table(tmp_path, n):
    root = str(tmp_path / "t")
    ra = make_typed_ra(n)
    b = bcolz.ctable(ra, rootdir=root, mode="w", chunklen=700)
    b.attrs["who"] = "bcolz"
    b.flush()
    t = blzarr.open(root)
    assert isinstance(t, blzarr.ctable)
    assert t.names == list(ra.dtype.names) and t.dtype == ra.dtype
    np.testing.assert_array_equal(t[:], ra)
    assert t.attrs["who"] == "bcolz"
    sel = (ra["i"] % 3 == 0) & (ra["f"] < 1000)
    np.testing.assert_array_equal(t.fetchwhere("(i % 3 == 0) & (f < 1000)", out_flavor="numpy"), ra[sel])
    more = make_typed_ra(1234, start=n)
    t.append(more)
    t.flush()
    b2 = bcolz.open(root, mode="a")
    np.testing.assert_array_equal(b2[:], np.concatenate([ra, more]))
    # and bcolz can keep appending after blzarr
    b2.append(make_typed_ra(10, start=n + 1234))
    b2.flush()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], make_typed_ra(n + 1244))


def test_addcol_delcol_seen_by_bcolz(tmp_path):
    root = str(tmp_path / "t")
    ra = make_typed_ra(2500)
    b = bcolz.ctable(ra, rootdir=root, mode="w")
    b.flush()
    t = blzarr.open(root)
    t.delcol("u")
    t.addcol(np.arange(2500) * 2, name="new", pos=1)
    t.delcol("s", keep=True)
    b2 = bcolz.open(root)
    assert b2.names == ["i", "new", "f", "t", "v", "ok", "small"]
    np.testing.assert_array_equal(b2["new"][:], np.arange(2500) * 2)
    np.testing.assert_array_equal(b2["v"][:], ra["v"])
    assert not os.path.exists(os.path.join(root, "u"))
    assert os.path.isdir(os.path.join(root, "s"))
    # bcolz's own addcol/delcol are understood by blzarr
    b2.addcol(np.ones(2500), name="ones")
    b2.delcol("f")
    b2.flush()
    t2 = blzarr.open(root)
    assert t2.names == ["i", "new", "t", "v", "ok", "small", "ones"]
    np.testing.assert_array_equal(t2["ones"][:], np.ones(2500))


def test_setitem_resize_seen_by_bcolz(tmp_path):
    root = str(tmp_path / "t")
    ra = make_typed_ra(3000)
    t = blzarr.ctable(ra, rootdir=root, chunklen=512, format="bcolz")
    t[100:200] = ra[1000:1100]
    t.resize(2000)
    t.resize(2100)
    want = ra[:2100].copy()
    want[100:200] = ra[1000:1100]
    want[2000:] = np.zeros(100, dtype=ra.dtype)
    np.testing.assert_array_equal(bcolz.open(root)[:], want)


def test_bcolz_fetchwhere_matches_blzarr(tmp_path):
    ra = make_typed_ra(20_000)
    root = str(tmp_path / "t")
    blzarr.ctable(ra, rootdir=root, format="bcolz")
    b = bcolz.open(root)
    t = blzarr.open(root)
    expr = "(f > 100) & (i < 15000) & ~ok"
    cols = ["i", "f", "s", "u", "t", "ok", "small"]  # bcolz's where cannot return multidimensional columns
    np.testing.assert_array_equal(t.fetchwhere(expr, outcols=cols, out_flavor="numpy"),
                                  b.fetchwhere(expr, outcols=cols, out_flavor="numpy"))
    np.testing.assert_array_equal(t.fetchwhere(expr, out_flavor="numpy"), ra[(ra["f"] > 100) & (ra["i"] < 15000) & ~ra["ok"]])
    assert [tuple(r) for r in t.where(expr, outcols="i, f, s", limit=5)] == \
        [tuple(r) for r in b.where(expr, outcols="i, f, s", limit=5)]
