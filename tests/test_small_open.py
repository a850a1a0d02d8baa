"""Opening a small on-disk table or carray: the per-open work that is shared or left to its first use
(session smallopen) still happens when needed, the checks of the open stay as strong."""

import os
import shutil

import numpy as np
import pytest

import blzarr
from blzarr.query import stats as _stats
from blzarr.containers.carray.stats import LAZY


def _table(root, fmt, n=2000):
    cols = [np.arange(n, dtype="i4"), np.arange(n, dtype="f8") * 0.5, np.arange(n, dtype="u2") % 7]
    blzarr.ctable(columns=cols, names=["a", "b", "c"], rootdir=root, mode="w", format=fmt).flush()
    return cols


# ------------------------------------------------------------------ column directories and links
@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("mode", ["r", "a"])
def test_a_column_linked_outside_the_table_is_refused(tmp_path, fmt, mode):
    root = str(tmp_path / "t")
    _table(root, fmt)
    outside = str(tmp_path / "elsewhere")
    shutil.move(os.path.join(root, "b"), outside)
    os.symlink(outside, os.path.join(root, "b"))
    with pytest.raises(blzarr.FormatError, match="column directory '.*b' listed in .* resolves to .*elsewhere"):
        blzarr.ctable(rootdir=root, mode=mode)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_column_linked_to_the_root_is_refused(tmp_path, fmt):
    root = str(tmp_path / "t")
    _table(root, fmt)
    shutil.rmtree(os.path.join(root, "b"))
    os.symlink(root, os.path.join(root, "b"))
    with pytest.raises(blzarr.FormatError, match="resolves to"):
        blzarr.open(root, mode="r")


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_column_linked_inside_the_table_opens(tmp_path, fmt):
    root = str(tmp_path / "t")
    cols = _table(root, fmt)
    os.makedirs(os.path.join(root, "moved"))
    shutil.move(os.path.join(root, "b"), os.path.join(root, "moved", "b"))
    os.symlink(os.path.join(root, "moved", "b"), os.path.join(root, "b"))
    t = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(t["b"][:], cols[1])


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_table_reached_through_a_linked_parent_opens(tmp_path, fmt):
    """The root's own path may hold links: a column is inside the root's real path."""
    real = tmp_path / "real"
    real.mkdir()
    cols = _table(str(real / "t"), fmt)
    os.symlink(str(real), str(tmp_path / "link"))
    t = blzarr.ctable(rootdir=str(tmp_path / "link" / "t"), mode="r")
    np.testing.assert_array_equal(t["c"][:], cols[2])


@pytest.mark.parametrize("what", ["missing", "file", "dangling"])
def test_a_column_directory_that_is_not_one_is_named(tmp_path, what):
    root = str(tmp_path / "t")
    _table(root, "blz")
    d = os.path.join(root, "b")
    shutil.rmtree(d)
    if what == "file":
        with open(d, "wb") as f:
            f.write(b"x")
    elif what == "dangling":
        os.symlink(str(tmp_path / "nothing"), d)
    with pytest.raises(blzarr.StorageError, match="column directory '.*b' listed in .* does not exist"):
        blzarr.ctable(rootdir=root, mode="r")


# ------------------------------------------------------------------ what an open leaves to first use
@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_the_statistics_are_made_at_their_first_use(tmp_path, fmt):
    root = str(tmp_path / "a")
    x = np.arange(100_000, dtype="i8")
    a = blzarr.carray(x, rootdir=root, mode="w", format=fmt, chunklen=8192)
    a.chunk_stats()
    a.flush()
    b = blzarr.open(root, mode="r")
    assert b.__dict__["_stats_v"] is LAZY        # none made by the open
    mins, maxs, flags, chunklen = b.chunk_stats()
    assert chunklen == 8192
    np.testing.assert_array_equal(mins, x[::8192])
    np.testing.assert_array_equal(maxs, np.minimum(x[::8192] + 8191, x[-1]))
    assert isinstance(b.__dict__["_stats_v"], _stats.ChunkStats)
    # a query the planner prunes with them gives NumPy's answer
    assert b.wheretrue is not None
    np.testing.assert_array_equal(blzarr.eval("(b > 50000) & (b < 50010)", user_dict={"b": b})[:],
                                  (x > 50000) & (x < 50010))


def test_an_object_carray_has_no_statistics_after_an_open(tmp_path):
    root = str(tmp_path / "o")
    blzarr.carray(np.array(["x", "y"], dtype=object), rootdir=root, mode="w").flush()
    b = blzarr.open(root, mode="r", allow_pickle=True)
    assert b._stats is None


# ------------------------------------------------------------------ one read of each meta file
def _count_reads(monkeypatch):
    from blzarr.storage import fileio, files
    seen = []
    real_read, real_shared = fileio.read_file, files._read_shared

    def read_file(path, limit=None):
        seen.append(os.fspath(path))
        return real_read(path, limit)

    def read_shared(path, *args, **kwargs):
        seen.append(os.fspath(path))
        return real_shared(path, *args, **kwargs)
    monkeypatch.setattr(fileio, "read_file", read_file)
    monkeypatch.setattr(files, "_read_shared", read_shared)
    return seen


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("mode", ["r", "a"])
def test_an_open_reads_each_meta_file_once(tmp_path, monkeypatch, fmt, mode):
    root = str(tmp_path / "t")
    cols = _table(root, fmt)
    seen = _count_reads(monkeypatch)
    t = blzarr.ctable(rootdir=root, mode=mode)
    for name in ("a", "b", "c"):
        for meta in ("storage", "sizes"):
            p = os.path.join(root, name, "meta", meta)
            assert seen.count(p) == 1, (p, seen)
    assert seen.count(os.path.join(root, "__rootdirs__")) == 1
    # no file read twice, but the table's rewrite record (absent here): each column's open looks
    # for it after its version watch starts, so a rewrite committed during the table's open is seen
    rest = [p for p in seen if os.path.basename(p) != ".blzarr-rewrite"]
    assert len(rest) == len(set(rest)), seen
    np.testing.assert_array_equal(t["a"][:], cols[0])   # (the reads stay right)


# ------------------------------------------------------------------ session open2: the open's reads
def _blz_files(root, n=5000, chunklen=500, superchunklen=4):
    x = np.arange(n, dtype="f8") * 0.5
    blzarr.carray(x, rootdir=root, mode="w", chunklen=chunklen, superchunklen=superchunklen,
                  format="blz").flush()
    return x


def test_an_open_loads_each_superchunk_file_once(tmp_path, monkeypatch):
    """The full-files check reuses the state of file 1 that the open just read (its header and
    metadata were read twice): every file's state is loaded once, and the values are the same."""
    from blzarr.storage.blz import local
    root = str(tmp_path / "a")
    x = _blz_files(root)            # 10 chunks of 500 in files of 4: files 1, 2, 3 (short)
    loads = []
    real = local.FileReads.load_file

    def spy(self, d, fno):
        loads.append(fno)
        return real(self, d, fno)
    monkeypatch.setattr(local.FileReads, "load_file", spy)
    a = blzarr.open(root, mode="r")
    assert sorted(loads) == [1, 2, 3]
    assert len(loads) == len(set(loads))
    np.testing.assert_array_equal(a[:], x)
    assert a[4321] == x[4321]


@pytest.mark.parametrize("mode", ["r", "a"])
def test_a_first_file_short_of_chunks_is_still_damage(tmp_path, mode):
    """File 1 (not the last) whose header counts fewer chunks than a full file holds: its chunks
    raise, naming why, the other files' rows read (the check is made on the state the open read)."""
    from blzarr import _superchunk as sc
    root = str(tmp_path / "a")
    x = _blz_files(root)
    path = os.path.join(root, "data", "__1__.bin")
    with open(path, "r+b") as f:
        h = sc.unpack_header(f.read(32))
        f.seek(0)
        f.write(sc.pack_header(h["checksum"], h["typesize"], h["chunk_size"], h["last_chunk"], 3,
                               h["meta_size"], h["options"], h["version"]))
    a = blzarr.open(root, mode=mode)
    with pytest.raises(blzarr.FormatError, match="must be full"):
        a[10]
    np.testing.assert_array_equal(a[2000:5000], x[2000:5000])
