"""What creating an on-disk carray does on the file system, observed at the I/O layer (blzarr.fileio):
each file of the new directory written once, the syncs issued together after all the writes, meta/sizes
last; a failed creation leaves no directory registered as being created."""

import os

import numpy as np
import pytest

import blzarr
from blzarr import fileio, files


class Events(fileio.OsIO):
    """Records (kind, real path) of the operations that write, sync or name files."""

    def __init__(self):
        self.events = []
        self._paths = {}

    def open(self, path, how="r", mode=0o666):
        fd = super().open(path, how, mode)
        self._paths[fd] = os.path.realpath(path)
        if how in ("new", "trunc"):
            self.events.append(("create", self._paths[fd]))
        return fd

    def close(self, fd):
        self._paths.pop(fd, None)
        super().close(fd)

    def write(self, fd, data):
        self.events.append(("write", self._paths.get(fd)))
        super().write(fd, data)

    def pwrite(self, fd, data, pos, where=None):
        self.events.append(("write", self._paths.get(fd)))
        super().pwrite(fd, data, pos, where)

    def fsync(self, fd):
        self.events.append(("sync", self._paths.get(fd)))
        super().fsync(fd)

    fdatasync = fsync

    def fsync_dir(self, path):
        self.events.append(("sync", os.path.realpath(path)))
        super().fsync_dir(path)

    def replace(self, src, dst):
        self.events.append(("replace", os.path.realpath(dst)))
        super().replace(src, dst)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_create_writes_each_file_once_and_syncs_together(tmp_path, fmt):
    root = os.path.realpath(str(tmp_path / "c"))
    x = np.arange(25_000, dtype=np.float64)
    kw = {"superchunklen": 4} if fmt == "blz" else {}
    rec = Events()
    with fileio.use(rec):
        c = blzarr.carray(x, rootdir=root, chunklen=1000, format=fmt, **kw)
    ev = rec.events
    meta = os.path.join(root, "meta")
    sizes = os.path.join(meta, "sizes")
    publish = next(i for i, e in enumerate(ev) if e == ("replace", sizes))
    before = ev[:publish]
    # every file other than meta/sizes (and meta/stats, written after it) is created in place, once:
    # no temporary file, no rename before meta/sizes; meta/storage is written once
    assert not [e for e in before if e[0] == "replace"]
    created = [e[1] for e in before if e[0] == "create"]
    tmp = [p for p in created if os.path.basename(p).startswith(".tmp-")]
    assert len(tmp) == 1                                    # meta/sizes' own temporary file
    created = [p for p in created if p not in tmp]
    assert len(created) == len(set(created))
    assert created.count(os.path.join(meta, "storage")) == 1
    # the syncs come together, after the last write of any file they cover
    writes = [i for i, e in enumerate(before) if e[0] == "write" and e[1] not in tmp]
    syncs = [i for i, e in enumerate(before) if e[0] == "sync"]
    assert syncs and min(syncs) > max(writes)
    synced = [e[1] for e in before if e[0] == "sync"]
    assert len(synced) == len(set(synced))                  # each file or directory once
    written = {e[1] for e in before if e[0] == "write" and e[1] not in tmp}
    assert written <= set(synced)
    for d in (os.path.join(root, "data"), root, os.path.dirname(root)):
        assert d in synced
    # meta/sizes: its temporary file synced, renamed, then meta/ synced (which names the others)
    assert ev[publish - 1] == ("sync", tmp[0])
    assert ev[publish + 1] == ("sync", meta)
    assert files._new_trees == {}
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)
    assert c.attrs.getall() == {}


def test_create_without_sync_writes_in_place(tmp_path):
    root = os.path.realpath(str(tmp_path / "c"))
    rec = Events()
    with fileio.use(rec), blzarr.defaults_ctx(fsync=False):
        blzarr.carray(np.arange(5000), rootdir=root, chunklen=1000)
    assert not [e for e in rec.events if e[0] == "sync"]
    assert [e for e in rec.events if e[0] == "replace"][0] == ("replace", os.path.join(root, "meta", "sizes"))
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(5000))


def test_later_writes_replace_atomically_again(tmp_path):
    """Once published, the directory's metadata is replaced through temporary files again."""
    root = os.path.realpath(str(tmp_path / "c"))
    c = blzarr.carray(np.arange(5000), rootdir=root, chunklen=1000)
    rec = Events()
    with fileio.use(rec):
        c.attrs["unit"] = "m"
        c.append(np.arange(10))
        c.flush()
    replaced = [e[1] for e in rec.events if e[0] == "replace"]
    assert os.path.join(root, "meta", "attributes") in replaced
    assert os.path.join(root, "meta", "sizes") in replaced
    assert blzarr.open(root, mode="r").attrs["unit"] == "m"


def test_failed_create_leaves_no_tree_registered(tmp_path):
    class FullDisk(fileio.OsIO):
        def pwrite(self, fd, data, pos, where=None):
            raise blzarr.StorageError("no space left (simulated)")

    root = str(tmp_path / "c")
    with fileio.use(FullDisk()), pytest.raises(blzarr.StorageError):
        blzarr.carray(np.arange(5000), rootdir=root, chunklen=1000)
    assert files._new_trees == {}
    assert files.new_tree_of(root) is None
    # the same path made again works, and is published
    blzarr.carray(np.arange(7), rootdir=root, mode="w")
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(7))


def test_fingerprints_kept_at_write_match_the_files(tmp_path):
    """The statistics file is stored with the fingerprints the store kept while writing: they are
    those read back from the files (a mismatch would make every entry stale at the next open)."""
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(20_000, dtype=np.float64), rootdir=root, chunklen=1000, superchunklen=8)
    c[1500] = -1.0                        # a rewrite: a new fingerprint for chunk 1
    c.flush()
    store = c._chunks.store
    kept = dict(store._fps)
    assert set(kept) >= set(range(20))
    store._fps.clear()
    for n, fp in kept.items():
        assert store.chunk_fingerprint(n) == fp
    again = blzarr.open(root, mode="r")
    assert again._stats.check(again._chunks, len(again._chunks)) == 0     # no entry found stale
    assert again._stats.unknown(len(again._chunks)) == []
    np.testing.assert_array_equal(again[:], c[:])
