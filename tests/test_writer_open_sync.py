"""A BLZ writer's open syncs the committed meta/sizes only when that text may not be durable.

A plain meta/sizes that a writer killed between its write and its sync left in the page cache must be
made durable before a second writer cuts or reuses the bytes the commit before it names
(tests/test_killed_writer_sizes.py).  A text written once its commit was durable (a creation's,
synced before the rename that lets any writer open it; the text close() writes over a synced commit)
carries the durable mark (docs/FORMAT.rst), and a writer opening it makes no sync before its first
flush; a text without the mark is synced as before."""

import json
import os

import numpy as np
import pytest

import blzarr
from blzarr.runtime import params
from blzarr.storage import fileio
from blzarr.storage.blz import sizes as sizes_record

CHUNKLEN = 100
CP = blzarr.cparams(clevel=0)


class SyncLog(fileio.OsIO):
    """The operating system's calls, with every sync (file or directory) logged by path between marks."""

    def __init__(self):
        self.paths = {}
        self.log = []

    def mark(self, label):
        self.log.append(("mark", label))

    def open(self, path, how="r", mode=0o666):
        fd = super().open(path, how, mode)
        self.paths[fd] = os.path.abspath(path)
        return fd

    def fsync(self, fd):
        self.log.append(("sync", self.paths.get(fd)))
        super().fsync(fd)

    def fdatasync(self, fd):
        self.log.append(("sync", self.paths.get(fd)))
        super().fdatasync(fd)

    def fsync_dir(self, path):
        self.log.append(("sync", os.path.abspath(path)))
        return super().fsync_dir(path)

    def between(self, a, b):
        """The syncs logged between marks `a` and `b` (b None: the end)."""
        i = self.log.index(("mark", a))
        j = self.log.index(("mark", b)) if b is not None else len(self.log)
        return [p for kind, p in self.log[i:j] if kind == "sync"]


def _sizes(root):
    with open(os.path.join(root, "meta", "sizes")) as f:
        return json.load(f)


def _make(root, n=250):
    return blzarr.carray(np.arange(n, dtype=np.int64), rootdir=root, mode="w", format="blz",
                         chunklen=CHUNKLEN, cparams=CP)


def _first_write(root, want):
    """Open `root` for writing, append and flush under a `SyncLog`: the syncs of the open and first
    append (before the flush), and of the flush."""
    log = SyncLog()
    with fileio.use(log):
        log.mark("open")
        w = blzarr.open(root, mode="a")
        w.append([-5, -6])
        log.mark("flush")
        w.flush()
        w.close()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.r_[want, [-5, -6]])
    return log.between("open", "flush"), log.between("flush", None)


@pytest.mark.parametrize("last", ["created", "record", "ordered"])
def test_a_cleanly_closed_array_is_opened_without_a_sync(tmp_path, monkeypatch, last):
    # created: the creation's own meta/sizes; record: a one-barrier flush's record, written over as
    # plain text at close; ordered: no boot id, a flush with ordered syncs (plain, synced) then close
    root = str(tmp_path / "c")
    _make(root).close()
    want = np.arange(250)
    if last != "created":
        if last == "ordered":
            monkeypatch.setattr(sizes_record, "_boot", "")
        c = blzarr.open(root, mode="a")
        c.append(np.arange(60))
        c.flush()
        if last == "record":
            assert "prev" in _sizes(root)       # (the case meant: a one-barrier record)
        c.close()
        want = np.r_[want, np.arange(60)]
    text = _sizes(root)
    before, flush = _first_write(root, want)
    assert flush, "the log saw no sync of the flush: it is not the file layer in use"
    assert before == []
    assert text.get(sizes_record.DURABLE) is True


def test_a_plain_text_without_the_mark_is_synced_at_the_writers_open(tmp_path):
    # what a writer killed between its plain meta/sizes and that file's sync leaves: no mark
    root = str(tmp_path / "c")
    _make(root).close()
    path = os.path.join(root, "meta", "sizes")
    obj = _sizes(root)
    del obj[sizes_record.DURABLE]
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        text = json.dumps(obj).encode("ascii")
        f.write(text + b" " * (size - len(text) - 1) + b"\n")
    before, flush = _first_write(root, np.arange(250))
    assert flush
    assert os.path.abspath(path) in before


def test_no_mark_without_syncs(tmp_path, monkeypatch):
    # a creation or a close that synced nothing says nothing of durability
    monkeypatch.setattr(params, "FSYNC", False)
    assert not fileio.sync_enabled()
    root = str(tmp_path / "c")
    _make(root).close()
    assert sizes_record.DURABLE not in _sizes(root)
    c = blzarr.open(root, mode="a")
    c.append(np.arange(60))
    c.flush()
    c.close()
    assert sizes_record.DURABLE not in _sizes(root)


def test_a_durable_mark_is_not_carried_into_a_later_commit(tmp_path, monkeypatch):
    # a writer's commit is written from what it counts, not from the text it read: killed after
    # writing it and before its sync (an ordered flush: no boot id), the text bears no mark
    monkeypatch.setattr(sizes_record, "_boot", "")
    root = str(tmp_path / "c")
    _make(root).close()
    assert _sizes(root).get(sizes_record.DURABLE) is True
    c = blzarr.open(root, mode="a")
    c.append(np.arange(60))
    c.flush()
    assert sizes_record.DURABLE not in _sizes(root)
    assert _sizes(root)["shape"] == [310]
    c.close()
    assert _sizes(root).get(sizes_record.DURABLE) is True
