"""What opening an on-disk carray reads now and what it leaves for first use: the statistics file is
read by the first query that plans with it, the short last chunk is read at open (the version opened)
but decoded at its first use.  Every answer must still be NumPy's, and bad files must still raise
errors naming them."""

import os

import numpy as np
import pytest

import blzarr
from blzarr.storage.chunkstore import ChunkStore

LAYOUTS = ["blz", "bcolz"]


def _make(root, fmt, n=25_000, chunklen=1000):
    x = np.arange(n, dtype=np.float64) * 0.5
    a = blzarr.carray(x, rootdir=root, mode="w", chunklen=chunklen, format=fmt)
    assert a.where("a > 100").count() == int(np.count_nonzero(x > 100))   # statistics computed
    a.flush()                                                               # and stored
    return x


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_stats_file_read_at_first_query(tmp_path, fmt, monkeypatch):
    root = str(tmp_path / "a")
    x = _make(root, fmt)
    reads = []
    real = ChunkStore.read_stats

    def counting(self):
        reads.append(1)
        return real(self)
    monkeypatch.setattr(ChunkStore, "read_stats", counting)
    for mode in ("r", "a"):
        reads.clear()
        a = blzarr.open(root, mode=mode)
        assert a[12_345] == x[12_345]
        assert a[-1] == x[-1]
        np.testing.assert_array_equal(a[100:2100], x[100:2100])
        assert reads == []                  # no query planned: meta/stats not read
        got = np.fromiter(a.where("(a > 3000) & (a < 3100)"), dtype=np.float64)
        np.testing.assert_array_equal(got, x[(x > 3000) & (x < 3100)])
        assert reads == [1]                 # read once, by the query
        st = a.stats_state()
        assert st["chunks"] == len(x) // 1000 and st["known"] == st["chunks"]
        assert reads == [1]


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_stale_stats_file_read_late_is_checked(tmp_path, fmt):
    """A reader opened before a writer rewrote a chunk and read meta/stats only after that commit
    must not plan with the new entry against the chunks it shows (nor with the old one against new
    chunks): every answer is NumPy's on the version the call reads."""
    root = str(tmp_path / "a")
    x = _make(root, fmt)
    r = blzarr.open(root, mode="r")
    assert r[5] == x[5]                     # opened; statistics not read yet
    w = blzarr.open(root, mode="a")
    w[3000:4000] = -7.0                     # one whole chunk, far below every threshold below
    w.flush()
    y = x.copy()
    y[3000:4000] = -7.0
    for expr, mask in (("r < 0", y < 0), ("r > 1000", y > 1000), ("(r >= 1400) & (r < 2100)",
                                                                   (y >= 1400) & (y < 2100))):
        got = np.fromiter(r.where(expr), dtype=np.float64)
        np.testing.assert_array_equal(got, y[mask])
    w.close()


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_short_chunk_decoded_on_first_use(tmp_path, fmt):
    root = str(tmp_path / "a")
    x = _make(root, fmt, n=25_500)          # 500 atoms in the short last chunk
    for mode in ("r", "a"):
        a = blzarr.open(root, mode=mode)
        assert "_last_due" in a.__dict__                     # nothing decoded by the open
        assert a[10] == x[10]
        assert "_last_due" in a.__dict__                     # nor by a read of a full chunk
        assert a[25_321] == x[25_321]
        assert "_last_due" not in a.__dict__
        np.testing.assert_array_equal(a[:], x)
    # writes that start with the leftover still undecoded keep every row
    a = blzarr.open(root, mode="a")
    a.append([1.0, 2.0])
    a.flush()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.concatenate([x, [1.0, 2.0]]))
    a = blzarr.open(root, mode="a")
    a.trim(700)                             # into the last full chunk
    a.flush()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x[:25_500 + 2 - 700])
    a = blzarr.open(root, mode="a")
    a[3] = -1.0                              # a full chunk only: the leftover stays as stored
    a.flush()
    y = x[:24_802].copy()
    y[3] = -1.0
    r = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(r[:], y)
    v = r.view()
    np.testing.assert_array_equal(v[-802:], y[-802:])
    assert r.sum() == y.sum()


def test_short_chunk_bytes_are_those_of_the_version_opened(tmp_path):
    """The short last chunk's bytes are read at open: a later change of that file that no commit
    published (a writer filling it in place before its flush) does not reach the reader's rows."""
    root = str(tmp_path / "a")
    x = _make(root, "bcolz", n=25_500)
    r = blzarr.open(root, mode="r")
    assert "_last_due" in r.__dict__
    last = os.path.join(root, "data", "__25.blp")
    with open(last, "r+b") as f:
        f.write(b"\xff" * 64)               # damaged after the open, no commit
    np.testing.assert_array_equal(r[25_000:], x[25_000:])


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_damaged_short_chunk_still_names_the_file(tmp_path, fmt):
    root = str(tmp_path / "a")
    x = _make(root, fmt, n=25_500)
    if fmt == "bcolz":
        target = os.path.join(root, "data", "__25.blp")
        with open(target, "r+b") as f:
            f.seek(16)
            f.write(b"\xff" * 64)
    else:
        target = os.path.join(root, "data", "__1__.bin")
        size = os.path.getsize(target)
        with open(target, "r+b") as f:
            f.seek(size - 200)
            f.write(b"\xff" * 64)
    a = blzarr.open(root, mode="r")                 # opens: the other rows read
    np.testing.assert_array_equal(a[:1000], x[:1000])
    with pytest.raises(blzarr.BlzarrError) as info:
        a[25_400]
    assert target in str(info.value) or os.path.basename(target) in str(info.value)


def test_broken_attrs_still_raise_at_open(tmp_path):
    root = str(tmp_path / "a")
    _make(root, "blz")
    target = os.path.join(root, "meta", "attributes")
    with open(target, "wb") as f:
        f.write(b"[1, 2]")
    with pytest.raises(blzarr.BlzarrError, match="attributes"):
        blzarr.open(root, mode="r")
    os.remove(target)
    assert blzarr.open(root, mode="r").attrs.getall() == {}


def test_open_errors_name_the_path(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(blzarr.BlzarrError, match="does not exist"):
        blzarr.open(missing)
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(blzarr.BlzarrError, match="is a file"):
        blzarr.open(str(f))
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(blzarr.BlzarrError, match="neither a carray nor a ctable"):
        blzarr.open(str(d))
