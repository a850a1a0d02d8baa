"""One sync barrier over open descriptors (`blzarr._syncpool`) and what the barriers of `files` hand it.

The syncs of a barrier run on C threads kept between calls and on the caller's thread.  Checked: every
sync of a call has been issued and has returned, with its own result, when the call returns (a pipe,
which fdatasync refuses with EINVAL, at known places among regular files); many threads at once; a
child made by fork while another thread of the parent is inside barriers; a table's flush syncing its
files through the descriptors its writers hold (no reopening by path, none left open); a failed sync
raising from the flush as a failed sync of the recording I/O layer does, and a retry keeping every row.
"""

import errno
import gc
import os
import random
import threading

import numpy as np
import pytest

import blzarr
from blzarr import _syncpool
from blzarr.errors import StorageError
from blzarr.storage import fileio, files

from helpers import run_forked

CHILD_SECONDS = 60


def _scratch_files(tmp_path, n):
    fds = []
    for i in range(n):
        fd = os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"x" * (100 + i))
        fds.append(fd)
    return fds


def _close(fds):
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 9, 40])
def test_every_sync_has_returned_with_its_own_result(tmp_path, n):
    rng = random.Random(n)
    fds = _scratch_files(tmp_path, n)
    r, w = os.pipe()
    try:
        for trial in range(20):
            bad = {k for k in range(n) if rng.random() < 0.3}
            items = [r if k in bad else fds[k] for k in range(n)]
            flags = [rng.random() < 0.5 for _ in range(n)]
            errs = _syncpool.sync_fds(items, flags, serial=trial % 5 == 4)
            assert errs == [errno.EINVAL if k in bad else 0 for k in range(n)]
    finally:
        _close(fds + [r, w])


def test_the_caller_alone_when_asked(tmp_path):
    fds = _scratch_files(tmp_path, 4)
    try:
        before = _syncpool.helpers()
        assert _syncpool.sync_fds(fds, [True] * 4, serial=True) == [0] * 4
        assert _syncpool.helpers() == before
        assert _syncpool.sync_fds([], []) == []
        with pytest.raises(ValueError, match="data_only has 1 flags for 4 descriptors"):
            _syncpool.sync_fds(fds, [True])
        assert _syncpool.sync_fds(fds, [False] * 4) == [0] * 4
        assert 1 <= _syncpool.helpers() <= _syncpool.MAX_THREADS - 1
    finally:
        _close(fds)


def test_barriers_from_many_threads_at_once(tmp_path):
    fds = _scratch_files(tmp_path, 12)
    r, w = os.pipe()
    failures = []

    def work(seed):
        rng = random.Random(seed)
        try:
            for _ in range(30):
                k = rng.randint(1, 12)
                pick = rng.sample(range(12), k)
                bad = rng.randrange(k + 1)          # k: no bad item
                items = [r if i == bad else fds[p] for i, p in enumerate(pick)]
                got = _syncpool.sync_fds(items, [True] * k)
                want = [errno.EINVAL if i == bad else 0 for i in range(k)]
                if got != want:
                    failures.append((got, want))
        except BaseException as e:      # noqa: BLE001 - reported by the test
            failures.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a barrier never returned"
        assert failures == []
        assert _syncpool.helpers() <= _syncpool.MAX_THREADS - 1
    finally:
        _close(fds + [r, w])


def _rows(n, start=0):
    i = np.arange(start, start + n)
    return np.rec.fromarrays([i, i * 0.25, (i % 7).astype(np.int32)], names="a,b,c")


def _table(root):
    empty = [np.zeros(0, "i8"), np.zeros(0, "f8"), np.zeros(0, "i4")]
    return blzarr.ctable(empty, names=["a", "b", "c"], rootdir=str(root), mode="w")


def _same(root, want):
    t = blzarr.open(str(root), mode="r")
    got = t[:]
    for name in ("a", "b", "c"):
        np.testing.assert_array_equal(got[name], want[name])


def _child(fn):
    code = run_forked(fn, CHILD_SECONDS)
    assert code != 2, "the child hung in a sync barrier"
    assert code == 0, "the child failed (see its stderr)"


def test_a_forked_child_beside_barriers_in_flight(tmp_path):
    fds = _scratch_files(tmp_path, 6)
    stop = threading.Event()

    def barriers():
        while not stop.is_set():
            _syncpool.sync_fds(fds, [True] * 6)

    busy = threading.Thread(target=barriers)
    busy.start()
    try:
        for k in range(3):
            root = tmp_path / f"child{k}"

            def in_child(root=root):
                assert _syncpool.helpers() == 0         # the parent's threads are not here
                assert _syncpool.sync_fds(fds, [True] * 6) == [0] * 6
                t = _table(root)
                for r in _rows(5):
                    t.append(tuple(r))
                t.flush()
                _same(root, _rows(5))
            _child(in_child)
            _same(root, _rows(5))
    finally:
        stop.set()
        busy.join()
        _close(fds)


class _Recording:
    """Stands for `blzarr._syncpool` in `files`: records each barrier (the file behind each descriptor,
    its flag) and fails the syncs of `fail` (a path) with EIO after issuing every one."""

    def __init__(self, fail=None):
        self.barriers = []
        self.fail = fail

    def sync_fds(self, fds, data_only, serial=False):
        seen = [(os.fstat(fd).st_ino, bool(f)) for fd, f in zip(fds, data_only)]
        self.barriers.append(seen)
        errs = _syncpool.sync_fds(fds, data_only, serial)
        if self.fail is not None:
            bad = os.stat(self.fail).st_ino
            errs = [errno.EIO if ino == bad else e for (ino, _), e in zip(seen, errs)]
        return errs


def _open_fds():
    return len(os.listdir(f"/proc/{os.getpid()}/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_table_flush_syncs_through_the_writers_descriptors(tmp_path, monkeypatch):
    assert type(fileio.current()) is fileio.OsIO
    root = tmp_path / "t"
    t = _table(root)
    for r in _rows(3):
        t.append(tuple(r))
    rec = _Recording()
    monkeypatch.setattr(files, "_syncpool", rec)
    opened = []
    real_open = fileio.open

    def counting_open(path, how="r", mode=0o666):
        opened.append((os.path.abspath(path), how))
        return real_open(path, how, mode)

    monkeypatch.setattr(fileio, "open", counting_open)
    # objects of earlier tests in this process, collected during the loop, would close their own
    # descriptors and hide a leak (or fail the count): collect them first, none during the loop
    gc.collect()
    gc.disable()
    try:
        fds_before = _open_fds()
        rows = _rows(20, 3)
        for r in rows:
            t.append(tuple(r))
        fds_after = _open_fds()
    finally:
        gc.enable()
    assert fds_after == fds_before          # every descriptor a barrier took is closed again
    ino = lambda *p: os.stat(os.path.join(root, *p)).st_ino      # noqa: E731
    data = {ino(c, "data", "__1__.bin") for c in "abc"}
    sizes = {ino(c, "meta", "sizes") for c in "abc"}
    # one barrier per row: every column's data file and meta/sizes (the table's commit in one round,
    # each column's flush a one-barrier record); a barrier of an earlier test's object that a
    # finalizer flushed meanwhile touches none of this table's files
    ours = [b for b in rec.barriers if {i for i, _ in b} & (data | sizes)]
    assert len(ours) == 20
    for b in ours:
        assert sorted(b) == sorted((i, True) for i in data | sizes)
    # no file is opened by path for its sync: only meta/sizes, once per column per row (its write)
    assert not [p for p, _ in opened if "data" in p.split(os.sep)]
    by_path = {}
    for p, _ in opened:
        by_path[p] = by_path.get(p, 0) + 1
    assert by_path == {os.path.join(str(root), c, "meta", "sizes"): 20 for c in "abc"}
    t.close()
    _same(root, np.concatenate([_rows(3), rows]))


class _FailingSync(fileio.OsIO):
    """The recording route (one sync after the other): the fdatasync of `path` fails with EIO."""

    def __init__(self, path):
        self.path = path
        self.paths = {}

    def open(self, path, how="r", mode=0o666):
        fd = super().open(path, how, mode)
        self.paths[fd] = os.path.abspath(path)
        return fd

    def close(self, fd):
        self.paths.pop(fd, None)
        super().close(fd)

    def _fail(self, fd):
        if self.paths.get(fd) == self.path:
            raise OSError(errno.EIO, os.strerror(errno.EIO), self.path)

    def fsync(self, fd):
        self._fail(fd)
        super().fsync(fd)

    def fdatasync(self, fd):
        self._fail(fd)
        super().fdatasync(fd)


@pytest.mark.filterwarnings("ignore:the columns of ctable")      # a reader between the two flushes
@pytest.mark.parametrize("route", ["threads", "one after the other"])
@pytest.mark.parametrize("which", [("b", "data", "__1__.bin"), ("a", "meta", "sizes")])
def test_a_failed_sync_fails_the_flush_and_a_retry_keeps_every_row(tmp_path, monkeypatch, route, which):
    root = tmp_path / "t"
    t = _table(root)
    t.auto_flush = False
    first = _rows(31)
    t.append(first[:30])
    t.flush()
    t.append(tuple(first[30]))      # its meta/sizes are now written in place: the flush below syncs
    t.flush()                       # the files `which` names, not a new file renamed over them
    more = _rows(6, 31)
    for r in more:
        t.append(tuple(r))
    path = os.path.join(str(root), *which)
    if route == "threads":
        monkeypatch.setattr(files, "_syncpool", _Recording(fail=path))
        ctx = None
    else:
        ctx = fileio.use(_FailingSync(path))
    with pytest.raises(StorageError, match=r"cannot flush .*Input/output error"):
        if ctx is None:
            t.flush()
        else:
            with ctx:
                t.flush()
    # what a reader finds is the last flush or this one, never less
    n = len(blzarr.open(str(root), mode="r"))
    assert n in (31, 37)
    monkeypatch.setattr(files, "_syncpool", _syncpool)
    t.flush()           # the retry
    t.close()
    _same(root, np.concatenate([first, more]))


def test_no_helper_thread_can_start(tmp_path):
    """Where no thread can be started (here: a stack size no system grants), the caller issues every
    sync itself and each returns its result; helpers start once threads can be had again.  In a
    forked child, which starts with no helpers."""
    import threading
    fds = [os.open(str(tmp_path / f"f{i}"), os.O_CREAT | os.O_RDWR) for i in range(6)]
    for fd in fds:
        os.write(fd, b"x")

    def child():
        assert _syncpool.helpers() == 0
        threading.stack_size(1 << 40)
        try:
            with pytest.raises(RuntimeError):       # (the start of a thread is really refused)
                threading.Thread(target=lambda: None).start()
            assert _syncpool.sync_fds(fds, [True] * 6) == [0] * 6
            assert _syncpool.helpers() == 0
            assert _syncpool.sync_fds(fds + [-1], [True] * 7) == [0] * 6 + [errno.EBADF]
        finally:
            threading.stack_size(0)
        assert _syncpool.sync_fds(fds, [False] * 6) == [0] * 6
        assert _syncpool.helpers() > 0
    try:
        _child(child)
    finally:
        _close(fds)


def test_no_pool_lock(tmp_path):
    """Where the pool's lock could not be allocated (at import or in a forked child), the caller
    issues every sync itself, each with its own result, and no helper is started (none could be
    handed work without that lock)."""
    fds = [os.open(str(tmp_path / f"f{i}"), os.O_CREAT | os.O_RDWR) for i in range(5)]
    for fd in fds:
        os.write(fd, b"x")

    def child():
        assert _syncpool.helpers() == 0
        _syncpool._without_pool_lock()
        assert _syncpool.sync_fds(fds, [True] * 5) == [0] * 5
        assert _syncpool.sync_fds(fds + [-1], [False] * 6) == [0] * 5 + [errno.EBADF]
        assert _syncpool.helpers() == 0
    try:
        _child(child)
    finally:
        _close(fds)
