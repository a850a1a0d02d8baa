"""What creating an on-disk carray does on the file system, observed at the I/O layer (blzarr.storage.fileio):
each file of the new directory written once, the syncs issued together after all the writes, meta/sizes
last; a failed creation leaves no directory registered as being created."""

import json
import os

import numpy as np
import pytest

import blzarr
from blzarr.storage import fileio
from blzarr.storage import files


class Events(fileio.OsIO):
    """Records (kind, real path) of the operations that write, sync or name files under `under`.

    Only paths under `under` count: a collected array of an earlier test may flush while this one records
    (its writes and syncs are of other files, or of descriptors opened before recording began)."""

    def __init__(self, under):
        self.under = os.path.realpath(str(under))
        self.events = []
        self._paths = {}

    def _add(self, kind, path):
        if path is not None and (path == self.under or path.startswith(self.under + os.sep)):
            self.events.append((kind, path))

    def _path(self, fd):
        if fd not in self._paths:                     # opened before recording began
            try:
                self._paths[fd] = os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                return None
        return self._paths[fd]

    def open(self, path, how="r", mode=0o666):
        fd = super().open(path, how, mode)
        self._paths[fd] = os.path.realpath(path)
        if how in ("new", "trunc"):
            self._add("create", self._paths[fd])
        return fd

    def close(self, fd):
        self._paths.pop(fd, None)
        super().close(fd)

    def write(self, fd, data):
        self._add("write", self._path(fd))
        super().write(fd, data)

    def pwrite(self, fd, data, pos, where=None):
        self._add("write", self._path(fd))
        super().pwrite(fd, data, pos, where)

    def fsync(self, fd):
        self._add("sync", self._path(fd))
        super().fsync(fd)

    fdatasync = fsync

    def fsync_dir(self, path):
        self._add("sync", os.path.realpath(path))
        super().fsync_dir(path)

    def replace(self, src, dst):
        self._add("replace", os.path.realpath(dst))
        super().replace(src, dst)

    def rename(self, src, dst):
        self._add("rename", os.path.realpath(dst))
        super().rename(src, dst)


def _stage_of(events, final):
    """The hidden directory a new array at `final` was written in (the parent of its first file)."""
    prefix = os.path.join(os.path.dirname(final), "." + os.path.basename(final) + ".blzarr-new-")
    for _, path in events:
        if path and path.startswith(prefix):
            return path[:len(prefix) + 12]
    raise AssertionError(f"no stage of '{final}' in {events[:5]}")


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_create_writes_each_file_once_and_syncs_together(tmp_path, fmt):
    root = os.path.realpath(str(tmp_path / "c"))
    x = np.arange(25_000, dtype=np.float64)
    kw = {"superchunklen": 4} if fmt == "blz" else {}
    rec = Events(tmp_path)
    with fileio.use(rec):
        c = blzarr.carray(x, rootdir=root, chunklen=1000, format=fmt, **kw)
    ev = rec.events
    # the array is written beside its rootdir under a hidden name, then renamed into place: that
    # rename is the commit, after one barrier of syncs that covers every file and directory
    final = root
    root = _stage_of(ev, final)
    published = ev.index(("rename", final))
    assert ("sync", os.path.dirname(final)) in ev[published:]
    meta = os.path.join(root, "meta")
    sizes = os.path.join(meta, "sizes")
    before = ev[:published]
    # every file, meta/sizes included, is created in place, once: no temporary file, no rename or
    # replacement inside the new directory; meta/storage is written once
    assert not [e for e in before if e[0] in ("replace", "rename")]
    created = [e[1] for e in before if e[0] == "create"]
    assert not [p for p in created if os.path.basename(p).startswith(".tmp-")]
    assert len(created) == len(set(created))
    assert created.count(os.path.join(meta, "storage")) == 1
    assert sizes in created
    # the syncs come together, after the last write of meta/sizes and of every file they cover
    # (meta/stats and meta/commit, written after the barrier, are disposable: readers check them)
    last_sizes = max(i for i, e in enumerate(before) if e == ("write", sizes))
    syncs = [i for i, e in enumerate(before) if e[0] == "sync"]
    assert syncs and min(syncs) > last_sizes
    assert max(syncs) - min(syncs) == len(syncs) - 1                  # one run: nothing between
    synced = [e[1] for e in before if e[0] == "sync"]
    assert len(synced) == len(set(synced))                  # each file or directory once
    written = {e[1] for e in before[:min(syncs)] if e[0] == "write"}
    assert sizes in written and written <= set(synced)
    assert not [e for e in before[min(syncs):] if e[0] == "write" and os.path.basename(e[1]) not in ("stats", "commit")]
    for d in (os.path.join(root, "data"), meta, root):
        assert d in synced
    # the parent holds the hidden name only until the rename, whose own sync covers the parent: no
    # sync of it in the barrier
    assert os.path.dirname(root) not in synced
    assert files._new_trees == {}
    np.testing.assert_array_equal(blzarr.open(final, mode="r")[:], x)
    assert c.attrs.getall() == {}


def test_create_without_sync_writes_in_place(tmp_path):
    root = os.path.realpath(str(tmp_path / "c"))
    rec = Events(tmp_path)
    with fileio.use(rec), blzarr.defaults_ctx(fsync=False):
        blzarr.carray(np.arange(5000), rootdir=root, chunklen=1000)
    assert not [e for e in rec.events if e[0] == "sync"]
    stage = _stage_of(rec.events, root)
    assert not [e for e in rec.events if e[0] == "replace"]
    assert ("create", os.path.join(stage, "meta", "sizes")) in rec.events
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(5000))


def test_later_writes_replace_atomically_again(tmp_path):
    """Once published, the directory's metadata is replaced through temporary files again; meta/sizes,
    whose text keeps its length here, is written over in place and synced (no rename)."""
    root = os.path.realpath(str(tmp_path / "c"))
    c = blzarr.carray(np.arange(5000), rootdir=root, chunklen=1000)
    sizes = os.path.join(root, "meta", "sizes")
    rec = Events(tmp_path)
    with fileio.use(rec):
        c.attrs["unit"] = "m"
        c.append(np.arange(10))
        c.flush()
    replaced = [e[1] for e in rec.events if e[0] == "replace"]
    assert os.path.join(root, "meta", "attributes") in replaced
    assert sizes not in replaced
    last = max(i for i, e in enumerate(rec.events) if e == ("write", sizes))
    assert rec.events[last + 1] == ("sync", sizes)
    assert blzarr.open(root, mode="r").attrs["unit"] == "m"
    assert len(blzarr.open(root, mode="r")) == 5010


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
    store = c._chunks.layoutdir
    kept = dict(store._fps)
    assert set(kept) >= set(range(20))
    store._fps.clear()
    for n, fp in kept.items():
        assert store.chunk_fingerprint(n) == fp
    again = blzarr.open(root, mode="r")
    assert again._stats.check(again._chunks, len(again._chunks)) == 0     # no entry found stale
    assert again._stats.unknown(len(again._chunks)) == []
    np.testing.assert_array_equal(again[:], c[:])


# ---- meta/sizes written over in place (one sector, its size kept), meta/stats rewritten in place

def _sizes(root):
    return os.path.join(root, "meta", "sizes")


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_flushes_write_meta_sizes_over_in_place_while_its_text_fits(tmp_path, fmt):
    root = os.path.realpath(str(tmp_path / "c"))
    x = np.random.default_rng(0).random(40_000)     # barely compressible: cbytes about nbytes
    c = blzarr.carray(x[:20_000], rootdir=root, chunklen=4096, format=fmt)
    # (the first flush's text may outgrow the file the creation wrote: BLZ's first one-barrier
    # record, which names the chunk it filled, replaces it once, with room for the next ones)
    c.append(x[20_000:21_000])
    c.flush()
    path = _sizes(root)
    ino, size = os.stat(path).st_ino, os.path.getsize(path)
    rec = Events(tmp_path)
    with fileio.use(rec):
        for s in range(21_000, 40_000, 1000):     # shape, nbytes and cbytes keep their digit counts
            c.append(x[s:s + 1000])
            c.flush()
            assert len(blzarr.open(root, mode="r")) == s + 1000
    ev = rec.events
    assert not [e for e in ev if e[0] == "replace" and e[1] == path]
    assert not [e for e in ev if e[0] == "create" and os.path.dirname(e[1]) == os.path.dirname(path)
                and os.path.basename(e[1]).startswith(".tmp-")]
    assert ("sync", os.path.dirname(path)) not in ev              # no name changed: no directory sync
    writes = [i for i, e in enumerate(ev) if e == ("write", path)]
    assert len(writes) == 19
    for i in writes:
        # durable before flush() goes on (in one barrier with the superchunk file, when the flush
        # only rewrote the short last chunk: nothing written between them)
        after = ev[i + 1:i + 3]
        assert ("sync", path) in after and all(e[0] == "sync" for e in after[:after.index(("sync", path))])
        chunk_writes = [j for j, e in enumerate(ev[:i]) if e[0] == "write" and e[1] != path]
        assert ev[max(chunk_writes) + 1:i].count(("sync", path)) == 0
    st = os.stat(path)
    assert (st.st_ino, st.st_size) == (ino, size)
    raw = open(path, "rb").read()
    assert json.loads(raw)["shape"] == [40_000] and raw.rstrip(b" \n").endswith(b"}") and raw.endswith(b"\n")
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)


def test_a_shorter_text_is_padded_and_a_longer_one_replaces_the_file(tmp_path):
    root = os.path.realpath(str(tmp_path / "c"))
    c = blzarr.carray(np.arange(123_456, dtype=np.int64), rootdir=root, chunklen=1000)
    path = _sizes(root)
    with open(path, "rb") as f:
        obj = json.load(f)
    obj.pop("durable")                  # (a mark an older blzarr did not write)
    text = json.dumps(obj).encode() + b"\n"
    with open(path, "wb") as f:         # as an older blzarr left it: no room to grow
        f.write(text)
    ino, size = os.stat(path).st_ino, os.path.getsize(path)
    c.trim(123_456 - 7)                     # shape [7]: a shorter text, padded to the file's size
    st = os.stat(path)
    assert (st.st_ino, st.st_size) == (ino, size)
    raw = open(path, "rb").read()
    got = json.loads(raw)
    assert got == {"shape": [7], "nbytes": 56, "cbytes": got["cbytes"], "last": [0, got["last"][1], 56]}
    assert raw.rstrip(b"\n").endswith(b" ") and raw.endswith(b"\n")
    assert blzarr.open(root, mode="r")[:].tolist() == list(range(7))
    c.append(np.arange(7, 2_000_007))       # longer than the file: replaced atomically
    c.flush()
    assert os.stat(path).st_ino != ino
    raw = open(path, "rb").read()
    assert json.loads(raw)["shape"] == [2_000_007]
    assert raw.endswith(b" " * 40 + b"\n")   # the replacement keeps room for the text to grow
    assert len(blzarr.open(root, mode="r")) == 2_000_007


class NoLocks(fileio.OsIO):
    """A file system that refuses flock."""

    def flock(self, fd, how):
        return None


@pytest.mark.parametrize("why", ["hard link", "symbolic link", "larger than a sector", "reader holds a lock",
                                 "no flock"])
def test_meta_sizes_is_replaced_when_writing_over_it_is_not_safe(tmp_path, why):
    root = os.path.realpath(str(tmp_path / "c"))
    c = blzarr.carray(np.arange(5000, dtype=np.int64), rootdir=root, chunklen=1000)
    path = _sizes(root)
    before = open(path, "rb").read()
    held = None
    if why == "hard link":
        os.link(path, str(tmp_path / "snapshot"))
    elif why == "symbolic link":
        os.replace(path, str(tmp_path / "snapshot"))
        os.symlink(str(tmp_path / "snapshot"), path)
    elif why == "larger than a sector":
        with open(path, "wb") as f:       # still valid JSON, but beyond one sector
            f.write(before[:-1] + b" " * 600 + b"\n")
    else:
        import fcntl
        held = os.open(path, os.O_RDONLY)
        fcntl.flock(held, fcntl.LOCK_SH)  # a reader that does not let go: the writer does not wait
    ino = os.lstat(path).st_ino
    c.append(np.arange(5000, 5010))
    with fileio.use(NoLocks() if why == "no flock" else fileio.current()):
        c.flush()
        assert len(blzarr.open(root, mode="r")) == 5010
    assert os.lstat(path).st_ino != ino and not os.path.islink(path)
    assert json.loads(open(path, "rb").read())["shape"] == [5010]
    if why in ("hard link", "symbolic link"):
        assert open(str(tmp_path / "snapshot"), "rb").read() == before
    if held is not None:
        os.close(held)
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(5010))


def test_a_reader_does_not_wait_long_for_a_held_sizes_lock(tmp_path):
    import fcntl
    root = os.path.realpath(str(tmp_path / "c"))
    blzarr.carray(np.arange(5000, dtype=np.int64), rootdir=root, chunklen=1000).flush()
    held = os.open(_sizes(root), os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a writer stopped in the middle of its write would
        np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(5000))
    finally:
        os.close(held)


def test_statistics_file_is_rewritten_in_place(tmp_path):
    root = os.path.realpath(str(tmp_path / "c"))
    c = blzarr.carray(np.arange(3000, dtype=np.float64), rootdir=root, chunklen=1000)
    stats = os.path.join(root, "meta", "stats")
    ino = os.stat(stats).st_ino
    rec = Events(tmp_path)
    with fileio.use(rec):
        for s in range(3000, 9000, 1000):
            c.append(np.arange(s, s + 1000, dtype=np.float64))
            c.flush()
    assert os.stat(stats).st_ino == ino
    assert not [e for e in rec.events if e[0] in ("replace", "create") and e[1] == stats]
    assert [e for e in rec.events if e == ("write", stats)]
    assert (c[:] > 8500).sum() == 499
    r = blzarr.open(root, mode="r")
    assert r._stats is not None and r._stats.n == 9            # the file was read back whole
    os.link(stats, str(tmp_path / "other"))                      # a hard link: replaced, not written through
    c.append(np.arange(9000, 10000, dtype=np.float64))
    c.flush()
    assert os.stat(stats).st_ino != ino
    assert os.path.getsize(str(tmp_path / "other")) < os.path.getsize(stats)


def test_a_writers_running_cbytes_matches_the_files(tmp_path):
    # a BLZ writer keeps cbytes as a running total (appends add to it, anything else recounts):
    # after every kind of change it equals what a reader sums from the files
    root = str(tmp_path / "c")
    rng = np.random.default_rng(3)
    c = blzarr.carray(rng.random(5000), rootdir=root, chunklen=500, format="blz", superchunklen=4)
    steps = [lambda: c.append(rng.random(1234)),
             lambda: c.append(np.zeros(3000)),                         # compresses differently
             lambda: c.__setitem__(slice(100, 900), np.ones(800)),     # rewrites two chunks
             lambda: c.resize(len(c) - 2100),
             lambda: c.append(rng.random(17)),
             lambda: c.trim(500),
             lambda: c.append(rng.random(4000)),
             lambda: c.resize(len(c) + 1000)]
    for step in steps:
        step()
        c.flush()
        r = blzarr.open(root, mode="r")
        assert c.cbytes == r.cbytes
        assert json.loads(open(_sizes(root), "rb").read())["cbytes"] == r.cbytes
        np.testing.assert_array_equal(r[:], c[:])


def test_real_bcolz_reads_a_meta_sizes_written_over_in_place(tmp_path):
    bcolz = pytest.importorskip("bcolz")
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(123_456, dtype=np.int64), rootdir=root, chunklen=1000, format="bcolz")
    ino = os.stat(_sizes(root)).st_ino
    c.trim(123_456 - 7)                 # a shorter text, padded
    c.close()
    assert os.stat(_sizes(root)).st_ino == ino and b"  " in open(_sizes(root), "rb").read()
    assert bcolz.open(root, mode="r")[:].tolist() == list(range(7))
    c = blzarr.open(root, mode="a")
    c.append(np.arange(7, 20))          # a text of the same length: in place again
    c.close()
    assert os.stat(_sizes(root)).st_ino == ino
    assert bcolz.open(root, mode="r")[:].tolist() == list(range(20))
