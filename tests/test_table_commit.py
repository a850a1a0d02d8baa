"""A BLZ table's one-row appends committed in one sync round, and the length rule that makes it safe.

When every column's flush is a one-barrier record (docs/FORMAT.rst, "meta/sizes"), the table writes
the last column's meta/sizes into the same barrier as the others' chunks and sizes.  A power loss may
then keep the last column's record (and its chunk) and lose another column's meta/sizes: the last
column is one flush ahead of that column.  The table's length is then the last record's "prev", when
that record is of another boot and its "prev" length is the shortest column's (`ctable._committed_rows`);
a writer's first write writes that "prev" down before it trims the longer columns.  These tests build
every state the crash simulator (tests/crashsim.py) finds for such appends and check that each opens
in 'r' and 'a' with the rows before or after each append, that `blzarr verify` passes, and that an
append retried from there works."""

import contextlib
import json
import os
import warnings

import numpy as np
import pytest

import blzarr
from blzarr import cli
from blzarr.storage import fileio, files
from blzarr.storage.blz import sizes as sizes_record

import crashsim

CHUNKLEN = 100
CP = blzarr.cparams(clevel=0)       # uncompressed: chunk sizes are known
NAMES = ["a", "b", "c"]


def _rows(n0, n1):
    i = np.arange(n0, n1)
    return [i.astype(np.int64), i * 0.25, (i % 7).astype(np.int32)]


def _make(root, n):
    t = blzarr.ctable(_rows(0, n), names=NAMES, rootdir=root, mode="w", format="blz", chunklen=CHUNKLEN,
                      cparams=CP)
    t.close()


def _sizes(col):
    with open(os.path.join(col, "meta", "sizes")) as f:
        return json.load(f)


@contextlib.contextmanager
def _no_check():
    """(the RuntimeWarning about columns of different lengths is expected in crash states)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _check(t, n):
    assert len(t) == n
    for name, want in zip(NAMES, _rows(0, n)):
        np.testing.assert_array_equal(t[name][:], want)


def _barrier_order(monkeypatch, order):
    """The simulator makes a barrier's syncs one after the other, in the order given ("given":
    columns in order, their chunks first, then their meta/sizes), or with the last column's files
    first ("last-first": its chunk and record durable while the other columns' meta/sizes are not)."""
    if order == "last-first":
        orig = files._sync_all

        def last_first(items, dirs=()):
            items = list(items)
            mine = [it for it in items if f"{os.sep}{NAMES[-1]}{os.sep}" in str(it[0])]
            return orig(mine + [it for it in items if not any(it is m for m in mine)], dirs)
        monkeypatch.setattr(files, "_sync_all", last_first)


def _record_appends(base, monkeypatch, order, nrows, start=250):
    root = str(base / "t")
    rec = crashsim.Recorder(str(base))
    states = [start]
    _barrier_order(monkeypatch, order)
    with fileio.use(rec):
        rec.mark("create")
        _make(root, start)
        t = blzarr.open(root, mode="a")
        for k in range(nrows):
            rec.mark(f"append {k}")
            n = start + k
            t.append((n, n * 0.25, n % 7))
            states.append(n + 1)
        rec.mark("close")
        t.close()
        states.append(states[-1])
    monkeypatch.undo()
    return rec, states


def test_appends_commit_in_one_round(tmp_path):
    """`t.append(row)` on a 3-column BLZ table: one sync round a row (every column's chunk and
    meta/sizes in one barrier) once the columns' meta/sizes are one-barrier records."""
    base = tmp_path / "base"
    base.mkdir()
    rec = crashsim.Recorder(str(base))
    root = str(base / "t")
    with fileio.use(rec):
        _make(root, 250)
        t = blzarr.open(root, mode="a")
        for k in range(4):
            rec.mark(f"append {k}")
            t.append((250 + k, (250 + k) * 0.25, (250 + k) % 7))
        rec.mark("close")
        t.close()
    calls = rec.calls()
    for label, i, end in calls[1:-1]:       # (the first append writes plain meta/sizes: ordered)
        rounds, cur = 0, False
        for e in rec.log[i:end]:
            if e[0] in ("fsync", "fsyncdir"):
                rounds += not cur
                cur = True
            elif e[0] in ("write", "trunc", "rename", "link", "unlink"):
                cur = False
        assert rounds == 1, (label, rounds)
    for col in NAMES:
        assert "prev" not in _sizes(os.path.join(root, col))       # close wrote them as plain text
    _check(blzarr.open(root, mode="r"), 254)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["last-first"])
def test_crash_states_of_one_round_appends(tmp_path, monkeypatch, order):
    """Every tree a power loss could leave during one-row appends committed in one round, read after
    a reboot: in 'r' and 'a' the rows before or after the append running, verify passes, and an
    append retried there works.  Some states hold the last column one row ahead of another column
    (the state the one round adds), and read as the row before."""
    base = tmp_path / "base"
    base.mkdir()
    rec, states = _record_appends(base, monkeypatch, order, nrows=2)
    calls = rec.calls()
    monkeypatch.setattr(sizes_record, "_boot", sizes_record.boot_id())    # crash_states reboots
    scratch = str(tmp_path / "state")
    root = os.path.join(scratch, "t")
    distinct = ahead = 0
    for st in crashsim.distinct_states(rec, scratch, seed=5, exhaustive=4, samples=4):
        js = [j for j in crashsim.calls_at(rec, st.kmin, st.kmax) if j >= 0]
        if 0 in js:
            continue            # the creating call was cut: nothing was promised yet
        distinct += 1
        where = f"state {st.kind} in {[calls[j][0] for j in js]}"
        allowed = {states[j - 1] for j in js} | {states[j] for j in js}
        last = _sizes(os.path.join(root, NAMES[-1]))
        with _no_check():
            r = blzarr.open(root, mode="r")
        n = len(r)
        assert n in allowed, f"{where}: {n} rows"
        _check(r, n)
        if "prev" in last and last["shape"][0] > n:
            ahead += 1
        summary, _ = cli.verify_ctable(root)
        assert f"{n} rows" in summary, (where, summary)
        with blzarr.defaults_ctx(fsync=False), _no_check():
            w = blzarr.open(root, mode="a")
            _check(w, n)
            w.append((n, n * 0.25, n % 7))      # the append retried
            w.close()
        again = blzarr.open(root, mode="r")
        _check(again, n + 1)
        assert len({len(again[c]) for c in NAMES}) == 1, where
    assert distinct > 20
    assert ahead > 0, "no crash state held the last column ahead of another"




class OpLog(fileio.OsIO):
    """The operating system's calls, with the writes and syncs of files logged by path."""

    def __init__(self):
        self.paths = {}
        self.log = []

    def open(self, path, how="r", mode=0o666):
        fd = super().open(path, how, mode)
        self.paths[fd] = os.path.abspath(path)
        return fd

    def _note(self, kind, fd):
        self.log.append((kind, self.paths.get(fd, "?")))

    def pwrite(self, fd, data, pos, where=None):
        self._note("write", fd)
        return super().pwrite(fd, data, pos, where)

    def pwritev(self, fd, bufs, pos, where=None):
        self._note("write", fd)
        return super().pwritev(fd, bufs, pos, where)

    def write(self, fd, data):
        self._note("write", fd)
        return super().write(fd, data)

    def truncate(self, fd, size):
        self._note("write", fd)
        return super().truncate(fd, size)

    def fsync(self, fd):
        self._note("sync", fd)
        super().fsync(fd)

    def fdatasync(self, fd):
        self._note("sync", fd)
        super().fdatasync(fd)

    def replace(self, src, dst):
        self.log.append(("write", os.path.abspath(dst)))
        return super().replace(src, dst)

    def fsync_dir(self, path):
        self.log.append(("sync", os.path.abspath(path)))
        return super().fsync_dir(path)


def _last_column_ahead(tmp_path):
    """A copy of a table taken while its writer was open after two one-row appends (the second one
    committed in one round), with column 'a's meta/sizes as it was before that append: the state a
    power loss leaves when it keeps the last column's record and loses 'a's.  Its path."""
    root = str(tmp_path / "t")
    _make(root, 250)
    t = blzarr.open(root, mode="a")
    t.append((250, 62.5, 250 % 7))
    kept = open(os.path.join(root, "a", "meta", "sizes"), "rb").read()
    t.append((251, 62.75, 251 % 7))
    assert all("prev" in _sizes(os.path.join(root, c)) for c in NAMES)    # one-barrier records
    state = str(tmp_path / "state")
    import shutil
    shutil.copytree(root, state)
    t.close()
    with open(os.path.join(state, "a", "meta", "sizes"), "wb") as f:
        f.write(kept)
    return state


def test_the_last_column_one_flush_ahead_reads_as_its_prev(tmp_path, monkeypatch):
    """After a reboot, the last column's record one flush ahead of column 'a' reads as its "prev":
    251 rows in 'r', verify passes; a writer's first write writes that "prev" down (synced) before
    it trims column 'b', and then appends.  Within the boot that wrote it, the same state is damage
    (a kill cannot leave it): verify reports it."""
    state = _last_column_ahead(tmp_path)
    with pytest.raises(cli.CLIError, match="fewer rows than the last column"):
        cli.verify_ctable(state)
    crashsim.reboot()
    monkeypatch.setattr(sizes_record, "_boot", sizes_record._boot)
    with pytest.warns(RuntimeWarning, match="different lengths"):
        r = blzarr.open(state, mode="r")
    _check(r, 251)
    summary, notes = cli.verify_ctable(state)
    assert "251 rows" in summary and any("'c'" in x for x in notes), (summary, notes)
    with _no_check():
        report = blzarr.salvage(state, str(tmp_path / "copy"))
    assert report["rows"] == 251 and not report["lost"], report
    _check(blzarr.open(str(tmp_path / "copy"), mode="r"), 251)
    log = OpLog()
    with fileio.use(log), _no_check():
        w = blzarr.open(state, mode="a")
        _check(w, 251)
        w.append((251, 62.75, 251 % 7))
        w.close()
    c_sizes = os.path.join(state, "c", "meta", "sizes")
    b_files = os.path.join(state, "b") + os.sep
    first_c = log.log.index(("write", c_sizes))
    assert log.log[first_c + 1] == ("sync", c_sizes)            # "prev" written down, durably
    first_b = min(k for k, (_, p) in enumerate(log.log) if p.startswith(b_files))
    assert first_c < first_b, log.log[:first_b + 1]              # ... before 'b' is trimmed
    _check(blzarr.open(state, mode="r"), 252)
    summary, notes = cli.verify_ctable(state)
    assert "252 rows" in summary and not notes


def test_a_table_writer_reopening_after_close_syncs_no_meta_sizes(tmp_path):
    """A table whose flushes committed every column inside the table's barrier: close() marks each
    column's meta/sizes durable, so a writer reopening it makes no sync before its first flush."""
    root = str(tmp_path / "t")
    _make(root, 250)
    t = blzarr.open(root, mode="a")
    for k in range(3):
        t.append((250 + k, (250 + k) * 0.25, (250 + k) % 7))
    t.close()
    for col in NAMES:
        assert _sizes(os.path.join(root, col)).get(sizes_record.DURABLE) is True, col
    log = OpLog()
    with fileio.use(log):
        w = blzarr.open(root, mode="a")
        w.auto_flush = False
        w.append((253, 63.25, 253 % 7))
        before = list(log.log)
        w.flush()
        assert len(log.log) > len(before)           # (the log sees the flush's syncs)
        w.close()
    assert [p for kind, p in before if kind == "sync"] == []
    assert any(kind == "sync" for kind, _ in log.log[len(before):])
    _check(blzarr.open(root, mode="r"), 254)
