"""What a read-only open and the first a[i] read, and the checks that must stay: the layout check's
answer reused by the BLZ open (data/ missing or not a plain directory, superchunk files that are
links), the first read of a chunk taking its header from the chunk read whole, the leftover buffer
made at its first use, paths joined without os.path.join, a short read of a regular file taken as its
end.  Every value is NumPy's."""

import os
import shutil

import numpy as np
import pytest
from hypothesis import given, strategies as st

import blzarr
from blzarr import _superchunk as sc
from blzarr.storage import fileio
from blzarr.storage.files import detect

LAYOUTS = ["blz", "bcolz"]


def _make(root, fmt, n=25_500, chunklen=1000):
    x = np.arange(n, dtype=np.float64) * 0.25
    blzarr.carray(x, rootdir=root, mode="w", chunklen=chunklen, format=fmt).flush()
    return x


# ---------------------------------------------------------------- the first a[i] of a chunk
def test_first_scalar_read_takes_the_header_from_the_chunk(tmp_path, monkeypatch):
    root = str(tmp_path / "a")
    x = _make(root, "blz")
    heads = []
    real = sc.read_head

    def counting(*args, **kw):
        heads.append(args[1])
        return real(*args, **kw)
    monkeypatch.setattr(sc, "read_head", counting)
    for mode in ("r", "a"):
        a = blzarr.open(root, mode=mode)
        for i in (12_345, 12_999, 12_000, 3, 999, 24_999):
            assert a[i] == x[i]
        assert heads == []              # each chunk read whole once, its header from those bytes
        # a chunk verified earlier: its blocks are read alone, through the header cached
        a._chunks.layoutdir._chunks.clear()
        assert a[12_346] == x[12_346]
        assert a[25_321] == x[25_321]
        np.testing.assert_array_equal(a[:], x)


def test_first_scalar_read_of_a_damaged_chunk_names_it(tmp_path):
    root = str(tmp_path / "a")
    x = _make(root, "blz")
    off = blzarr.open(root, mode="r")._chunks.layoutdir._offset(7)[2]
    with open(os.path.join(root, "data", "__1__.bin"), "r+b") as fh:
        fh.seek(off + 40)
        fh.write(b"\x5a" * 32)
    b = blzarr.open(root, mode="r")
    with pytest.raises(blzarr.BlzarrError) as e:
        b[7_500]
    assert "__1__.bin" in str(e.value) and "chunk 7" in str(e.value)
    assert b[6_999] == x[6_999] and b[8_000] == x[8_000]


# ---------------------------------------------------------------- the leftover buffer
@pytest.mark.parametrize("fmt", LAYOUTS)
def test_leftover_buffer_made_at_first_use(tmp_path, fmt):
    root = str(tmp_path / "a")
    x = _make(root, fmt)
    a = blzarr.open(root, mode="r")
    assert a.__dict__["_last_v"] is None
    assert a[10] == x[10]
    assert a.__dict__["_last_v"] is None        # a read of a full chunk makes none
    assert a[-1] == x[-1]
    assert len(a.__dict__["_last_v"]) == 1000
    np.testing.assert_array_equal(a[24_900:], x[24_900:])


@pytest.mark.parametrize("fmt", LAYOUTS)
@pytest.mark.parametrize("n", [25_000, 25_500, 0])
def test_writes_after_an_open_that_made_no_leftover_buffer(tmp_path, fmt, n):
    root = str(tmp_path / "a")
    x = _make(root, fmt, n=n)
    for write in ("append", "setitem", "trim", "resize"):
        a = blzarr.open(root, mode="a")
        assert a.__dict__["_last_v"] is None
        y = x.copy()
        if write == "append":
            a.append(np.arange(1700.0))
            y = np.concatenate([y, np.arange(1700.0)])
        elif write == "setitem" and len(y):
            a[len(y) - 1] = -3.0
            y[-1] = -3.0
        elif write == "trim" and len(y) > 300:
            a.trim(300)
            y = y[:-300]
        elif write == "resize":
            a.resize(len(y) + 10)
            y = np.concatenate([y, np.zeros(10)])
        a.flush()
        np.testing.assert_array_equal(a[:], y)
        np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], y)
        a.close()
        x = y


# ---------------------------------------------------------------- the layout checks the open reuses
def test_blz_without_data_dir_names_it(tmp_path):
    root = str(tmp_path / "a")
    _make(root, "blz")
    shutil.rmtree(os.path.join(root, "data"))
    for mode in ("r", "a"):
        with pytest.raises(blzarr.StorageError, match="data directory '.*data' does not exist"):
            blzarr.open(root, mode=mode)


def test_blz_data_not_a_directory_names_it(tmp_path):
    root = str(tmp_path / "a")
    _make(root, "blz")
    shutil.rmtree(os.path.join(root, "data"))
    with open(os.path.join(root, "data"), "wb") as f:
        f.write(b"x")
    with pytest.raises(blzarr.StorageError, match="data directory '.*data' is not a directory"):
        blzarr.open(root, mode="r")


@pytest.mark.parametrize("inside", [True, False])
def test_blz_superchunk_file_that_is_a_link(tmp_path, inside):
    """A link to a file inside the root is followed; one leading out of it is refused, naming it."""
    root = str(tmp_path / "a")
    x = _make(root, "blz")
    path = os.path.join(root, "data", "__1__.bin")
    target = os.path.join(root, "meta", "moved.bin") if inside else str(tmp_path / "moved.bin")
    os.rename(path, target)
    os.symlink(target, path)
    if inside:
        np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)
    else:
        with pytest.raises(blzarr.FormatError, match="__1__.bin' resolves to .*not a regular file inside"):
            blzarr.open(root, mode="r")


def test_blz_data_dir_linked_inside_the_root_opens(tmp_path):
    root = str(tmp_path / "a")
    x = _make(root, "blz")
    os.rename(os.path.join(root, "data"), os.path.join(root, "meta", "d"))
    os.symlink(os.path.join(root, "meta", "d"), os.path.join(root, "data"))
    a = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(a[:], x)


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_detect_without_a_probe_of_the_directory(tmp_path, fmt):
    root = str(tmp_path / "a")
    _make(root, fmt, n=10)
    assert detect(root) == "carray"
    assert detect(str(tmp_path / "missing")) is None
    f = tmp_path / "f"
    f.write_bytes(b"{}")
    assert detect(str(f)) is None
    assert detect("") is None
    t = str(tmp_path / "t")
    blzarr.ctable([np.arange(5)], names=["a"], rootdir=t, mode="w", format=fmt)
    assert detect(t) == "ctable"


# ---------------------------------------------------------------- helpers of the open path
_part = st.text(alphabet="ab._-", min_size=0, max_size=4)


@given(root=st.lists(_part, max_size=3).map("/".join) | st.just("/"),
       key=st.lists(_part, min_size=1, max_size=3).map("/".join))
def test_join_is_os_path_join(root, key):
    assert fileio.join(root, key) == os.path.join(root, *key.split("/"))


@pytest.mark.parametrize("size", [0, 1, 200, 65_535, 65_536, 65_537, 300_000])
def test_read_file_of_any_size(tmp_path, size, monkeypatch):
    p = tmp_path / "f"
    data = os.urandom(size)
    p.write_bytes(data)
    reads = []
    real = os.read

    def counting(fd, n):
        b = real(fd, n)
        reads.append(len(b))
        return b
    monkeypatch.setattr(os, "read", counting)
    assert fileio.read_file(str(p)) == data
    assert reads == [size]                  # one read: its shortness is the end
    reads.clear()
    assert fileio.read_file(str(p), 100) == data[:100]


def test_forksafe_registry_stays_bounded_and_releases_in_a_child():
    import gc
    import sys
    from blzarr.runtime import forksafe
    for _ in range(5000):
        forksafe.RLock()
        forksafe.Lock()
    gc.collect()
    assert len(forksafe._locks) < 400       # the dead ones are dropped as it grows
    held = forksafe.Lock()
    held.acquire()
    if not hasattr(os, "fork") or sys.platform == "darwin":
        return
    pid = os.fork()
    if pid == 0:                            # the child: the lock the parent holds is free here
        os._exit(0 if held.acquire(timeout=5) else 1)
    _, status = os.waitpid(pid, 0)
    held.release()
    assert os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("fmt", LAYOUTS)
@pytest.mark.parametrize("first", ["scalar", "len"])
def test_watch_reads_the_record_before_mapping_it(tmp_path, fmt, first):
    """A reader's first looks at the commit record are reads (no map made for an open and one
    a[i]), the third maps it; a commit by another writer is seen at every look."""
    root = str(tmp_path / "a")
    x = _make(root, fmt, n=25_500)
    r = blzarr.open(root, mode="r")
    w = r._watch
    assert (w._map is None) == (fmt == "blz")   # (a polled watch, bcolz layout: mapped at once)
    writer = blzarr.open(root, mode="a")
    writer.append(np.arange(7.0))
    writer.flush()                              # a commit between the open and the first read
    y = np.concatenate([x, np.arange(7.0)])
    if first == "scalar" and fmt == "blz":      # (the bcolz layout's scalar reads poll meta/sizes)
        assert r[25_503] == y[25_503]
    assert len(r) == len(y)
    for i in (5, 25_499, 25_506):
        assert r[i] == y[i]
    assert w._map is not None                   # mapped by now: later checks make no system call
    writer.append(np.arange(3.0))
    writer.flush()
    y = np.concatenate([y, np.arange(3.0)])
    np.testing.assert_array_equal(r[:], y)
    writer.close()
