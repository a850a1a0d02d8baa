"""Early writeback: files that a later barrier syncs start their way to the disk as soon as they are
written (Linux sync_file_range, a hint).  The hints never replace a sync: a creation still syncs
every file it publishes before the rename that publishes it, a flush every chunk before the
meta/sizes that counts it; a hint that fails changes nothing; with syncs off there are none."""

import errno
import os
import re

import numpy as np
import pytest

import blzarr
from blzarr import _superchunk as sc
from blzarr.storage import fileio
from blzarr.storage.blz import write as blz_write

from helpers import FileOpLog


class HintLog(FileOpLog):
    """`FileOpLog` that also logs the writeback hints, as ("hint", path, pos, nbytes)."""

    def start_writeback(self, fd, pos, n):
        super().start_writeback(fd, pos, n)
        self.log.append(("hint", self._path(fd), pos, n))


class FailingHints(FileOpLog):
    """`FileOpLog` whose writeback hints fail as the call fails where it is missing or refused."""

    def __init__(self, err):
        super().__init__()
        self.err = err
        self.tried = 0

    def start_writeback(self, fd, pos, n):
        self.tried += 1
        raise OSError(self.err, os.strerror(self.err))


def _data(n, seed=3):
    # a random walk: chunks that compress little, so that the files hold many pages
    return np.cumsum(np.random.default_rng(seed).standard_normal(n))


def _stage_free(entry, root):
    """`entry` with the random parts of hidden names taken out (two runs compare equal)."""
    def fix(p):
        if not isinstance(p, str):
            return p
        p = re.sub(r"\.blzarr-new-[0-9a-f]+", ".blzarr-new-X", p)
        return re.sub(r"\.tmp-[0-9a-f]+", ".tmp-X", p).replace(str(root), "ROOT")
    return tuple(fix(p) for p in entry)


def _barriers_as_sets(log):
    """`log` with each run of consecutive syncs sorted: the syncs of one barrier are unordered (a
    barrier's directories of the same depth come in any order)."""
    out, run = [], []
    for e in log + [("end",)]:
        if e[0] in ("sync", "syncdir"):
            run.append(e)
            continue
        out += sorted(run)
        run = []
        out.append(e)
    return out[:-1]


def _published(log, final):
    """The index of the rename that publishes `final`."""
    return next(i for i, e in enumerate(log) if e[0] == "rename" and e[2] == final)


def _written_files(log, upto):
    # meta/stats and meta/commit are written in place and never synced, by design (docs/FORMAT.rst:
    # checksummed, a reader does without a torn or missing one)
    return {e[1] for e in log[:upto] if e[0] in ("write", "trunc")
            and not e[1].endswith((os.sep + os.path.join("meta", "stats"),
                                   os.sep + os.path.join("meta", "commit")))}


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_creation_syncs_every_file_it_publishes_hints_or_not(tmp_path, fmt):
    x = _data(200_000)
    final = str(tmp_path / "a")
    rec = HintLog()
    with fileio.use(rec):
        a = blzarr.carray(x, rootdir=final, mode="w", chunklen=4096, format=fmt,
                          **({"superchunklen": 8} if fmt == "blz" else {}))
        a.flush()
    at = _published(rec.log, final)
    before = rec.log[:at]
    synced = {e[1] for e in before if e[0] == "sync"}
    written = _written_files(rec.log, at)
    assert written and written <= synced           # nothing published that is not durable
    hints = [e for e in before if e[0] == "hint"]
    assert hints                                    # and the hints were given, before the barrier
    for kind, path, pos, n in hints:
        assert path in written and n > 0 and pos >= 0
        first_sync = next(i for i, e in enumerate(before) if e[0] == "sync" and e[1] == path)
        hinted_at = next(i for i, e in enumerate(before) if e[0] == "hint" and e[1] == path)
        assert hinted_at < first_sync               # a hint is worth something only before the sync
    if fmt == "blz":
        # 200,000 values in chunks of 4,096, 8 chunks to a superchunk file: 7 files; each one that
        # was full when the next was started is hinted up to its end, not just to its last page
        sizes = {}
        for e in before:
            if e[0] == "write" and e[1].endswith(".bin"):
                sizes[e[1]] = max(sizes.get(e[1], 0), (e[2] or 0) + e[3])
        files = sorted(sizes, key=lambda p: int(re.search(r"__(\d+)__", p).group(1)))
        assert len(files) == 7
        for p in files[:-1]:
            ends = [pos + n for kind, q, pos, n in hints if q == p]
            assert max(ends) == sizes[p], p
    else:
        chunk_files = {p for p in written if p.endswith(".blp")}
        assert chunk_files and chunk_files <= {h[1] for h in hints}
    b = blzarr.open(final, mode="r")
    np.testing.assert_array_equal(b[:], x)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_appends_hinted_are_synced_before_the_flush_counts_them(tmp_path, fmt, monkeypatch):
    monkeypatch.setattr(blz_write, "WRITEBACK_BYTES", 64 * 1024)
    x = _data(300_000, seed=5)
    root = str(tmp_path / "a")
    a = blzarr.carray(np.empty(0), rootdir=root, mode="w", chunklen=8192, format=fmt,
                      expectedlen=len(x))
    rec = HintLog()
    with fileio.use(rec):
        for s in range(0, len(x), 10_000):
            a.append(x[s:s + 10_000])
        a.flush()
    sizes = os.path.join(root, "meta", "sizes")
    # the flush's commit point: meta/sizes written over in place, or a new one renamed over it
    sizes_at = max(i for i, e in enumerate(rec.log) if (e[0] == "write" and e[1] == sizes)
                   or (e[0] == "rename" and e[2] == sizes))
    hints = [e for e in rec.log[:sizes_at] if e[0] == "hint"]
    assert hints
    synced = {e[1] for e in rec.log[:sizes_at] if e[0] == "sync"}
    assert {h[1] for h in hints} <= synced          # every hinted file synced before meta/sizes
    data_written = {e[1] for e in rec.log[:sizes_at] if e[0] == "write" and "/data/" in e[1]}
    assert data_written <= synced
    if fmt == "blz":
        # the hinted ranges of a growing file follow each other and end on a page boundary
        ends = 0
        for kind, path, pos, n in hints:
            assert pos == ends and (pos + n) % 4096 == 0
            ends = pos + n
    a.close()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)


@pytest.mark.parametrize("err", [errno.EINVAL, errno.ENOSYS, errno.EIO])
@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_failing_hint_changes_nothing(tmp_path, fmt, err):
    x = _data(120_000, seed=7)
    kw = dict(chunklen=4096, format=fmt, **({"superchunklen": 8} if fmt == "blz" else {}))
    logs = []
    for name, rec in (("ok", FileOpLog()), ("failing", FailingHints(err))):
        root = tmp_path / name
        root.mkdir()
        with fileio.use(rec):
            a = blzarr.carray(x[:70_000], rootdir=str(root / "a"), mode="w", **kw)
            a.append(x[70_000:])
            a.flush()
            a.close()
        logs.append(_barriers_as_sets([_stage_free(e, root) for e in rec.log]))
        np.testing.assert_array_equal(blzarr.open(str(root / "a"), mode="r")[:], x)
    assert rec.tried > 0
    assert logs[0] == logs[1]       # the same writes, cuts, syncs and renames, in the same order


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_no_hints_when_syncs_are_off(tmp_path, fmt):
    x = _data(100_000, seed=9)
    rec = HintLog()
    with blzarr.defaults_ctx(fsync=False), fileio.use(rec):
        a = blzarr.carray(x, rootdir=str(tmp_path / "a"), mode="w", chunklen=4096, format=fmt)
        a.append(x)
        a.flush()
        a.close()
    assert not [e for e in rec.log if e[0] in ("hint", "sync", "syncdir")]
    np.testing.assert_array_equal(blzarr.open(str(tmp_path / "a"), mode="r")[:],
                                  np.concatenate([x, x]))


def test_the_system_call_s_own_errors_are_ignored(tmp_path):
    r, w = os.pipe()                # sync_file_range refuses a pipe (ESPIPE)
    try:
        sc.start_writeback(w, 0, 4096)
    finally:
        os.close(r)
        os.close(w)
    p = tmp_path / "f"
    p.write_bytes(b"x" * 10_000)
    fd = os.open(p, os.O_RDONLY)
    try:
        sc.start_writeback(fd, 0, 10_000)
        sc.start_writeback(fd, 5_000, 1 << 62)  # past the end
        sc.start_writeback(fd, -1, 10)          # nothing (a negative position)
    finally:
        os.close(fd)
    assert p.read_bytes() == b"x" * 10_000



# counted on OsIO itself: a `fileio` implementation that overrides pwrite gets a pwrite per buffer of
# a pwritev (`OsIO.pwritev`), which would hide what the system sees
def test_a_chunk_appended_alone_is_one_pwritev(tmp_path, monkeypatch):
    x = _data(100_000, seed=11)
    a = blzarr.carray(np.empty(0), rootdir=str(tmp_path / "a"), mode="w", chunklen=4096,
                      format="blz")
    counts = {"pwrite": 0, "pwritev": 0}
    real_pwrite, real_pwritev = fileio.OsIO.pwrite, fileio.OsIO.pwritev

    def pwrite(self, fd, data, pos, where=None):
        counts["pwrite"] += 1
        real_pwrite(self, fd, data, pos, where)

    def pwritev(self, fd, bufs, pos, where=None):
        counts["pwritev"] += 1
        if sc.HAVE_PWRITEV:
            sc.pwritev_all(fd, bufs, pos, where)
        else:
            for b in bufs:
                real_pwrite(self, fd, b, pos, where)
                pos += len(b)

    monkeypatch.setattr(fileio.OsIO, "pwrite", pwrite)
    monkeypatch.setattr(fileio.OsIO, "pwritev", pwritev)
    for s in range(0, len(x), 1000):        # each append fills at most one chunk
        a.append(x[s:s + 1000])
    full = len(x) // 4096
    # each full chunk: one pwritev (its bytes and checksum), its offsets entry and the header
    assert counts["pwritev"] == full
    assert counts["pwrite"] == 2 * full
    monkeypatch.undo()
    a.flush()
    a.close()
    np.testing.assert_array_equal(blzarr.open(str(tmp_path / "a"), mode="r")[:], x)
