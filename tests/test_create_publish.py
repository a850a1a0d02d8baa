"""A new on-disk carray is written under a hidden name and renamed into place; the object that wrote
it goes on at the final path with the files it holds, without opening or reading the directory
again, and behaves as one opened there: appends, rewrites, attributes, a reopen, another writer."""

import os

import numpy as np
import pytest

import blzarr
from blzarr.storage import fileio
from blzarr.storage.locking import LockError


class Opens(fileio.OsIO):
    """Records (real path, event) of opens, reads and renames under `under`."""

    def __init__(self, under):
        self.under = os.path.realpath(str(under))
        self.events = []

    def _add(self, kind, path):
        path = os.path.realpath(os.fspath(path))
        if path == self.under or path.startswith(self.under + os.sep):
            self.events.append((kind, path))

    def open(self, path, how="r", mode=0o666):
        self._add("open", path)
        return super().open(path, how, mode)

    def read_file(self, path, *args, **kwargs):
        self._add("read", path)
        return super().read_file(path, *args, **kwargs)

    def rename(self, src, dst):
        super().rename(src, dst)
        self._add("rename", dst)

    def exchange(self, a, b):
        super().exchange(a, b)
        self._add("rename", b)


def _after_publish(events, final):
    i = events.index(("rename", final))
    return [e for e in events[i + 1:] if e[1] != os.path.dirname(final)]


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("replace", [False, True])
def test_created_array_goes_on_at_the_final_path(tmp_path, fmt, replace):
    final = os.path.realpath(str(tmp_path / "a"))
    if replace:
        blzarr.carray(np.arange(10.0), rootdir=final, mode="w", format=fmt).flush()
    x = np.linspace(0, 1, 25_000)
    rec = Opens(tmp_path)
    with fileio.use(rec):
        a = blzarr.carray(x, rootdir=final, mode="w", chunklen=1000, format=fmt)
    # nothing in the new directory is opened or read once it is in place (only the parent is synced)
    assert _after_publish(rec.events, final) == []
    assert a.rootdir == final
    assert a._layoutdir.rootdir == final
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]      # no stage, no old copy left
    # it writes there: appends, a rewrite of a stored chunk, attributes
    a.append(x[:3500])
    a[10] = -1.0
    a.attrs["unit"] = "m"
    a.flush()
    want = np.concatenate([x, x[:3500]])
    want[10] = -1.0
    np.testing.assert_array_equal(a[:], want)
    b = blzarr.open(final, mode="r")
    np.testing.assert_array_equal(b[:], want)
    assert b.attrs["unit"] == "m"
    assert a._layoutdir.rootdir == final
    # no file was written under any other name
    assert sorted(os.listdir(tmp_path)) == ["a"]


def test_the_lock_taken_on_the_stage_holds_at_the_final_path(tmp_path):
    final = str(tmp_path / "a")
    a = blzarr.carray(np.arange(5000), rootdir=final, mode="w", chunklen=1000)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                    # another process: the directory's lock is the creator's
        try:
            blzarr.open(final, mode="a").append([1])
            code = 1
        except LockError:
            code = 0
        except BaseException:
            code = 2
        os.write(write, bytes([code]))
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"\0"
    a.append(np.arange(3))
    a.close()
    np.testing.assert_array_equal(blzarr.open(final, mode="r")[:], np.r_[np.arange(5000), np.arange(3)])
    # closed: another writer may take it
    c = blzarr.open(final, mode="a")
    c.append([7])
    c.flush()
    assert len(blzarr.open(final, mode="r")) == 5004


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_reader_beside_the_new_array_sees_its_flushes(tmp_path, fmt):
    final = str(tmp_path / "a")
    a = blzarr.carray(np.arange(2500.0), rootdir=final, mode="w", chunklen=1000, format=fmt)
    r = blzarr.open(final, mode="r")
    assert len(r) == 2500
    a.append(np.arange(1700.0))
    a.flush()
    assert len(r) == 4200
    np.testing.assert_array_equal(r[:], np.r_[np.arange(2500.0), np.arange(1700.0)])
