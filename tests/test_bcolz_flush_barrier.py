"""The bcolz layout's flush: chunk files no meta/sizes names are written in place and synced in one
barrier with data/; only a committed chunk file (the short last chunk's, a rewrite) goes through a
synced temporary file and a rename.

The order of every flush is read from the log of the recording I/O layer (tests/crashsim.py): the
syncs that follow one another with nothing in between are one barrier (`files.sync_together` issues
them together).  The power-loss states of a workload that takes every path are checked with blzarr
and with the real bcolz (bcolz-zipline), which must read each one as the state before or after the
interrupted call, and with `blzarr verify`.
"""

import io
import os

import numpy as np
import pytest

import blzarr
from blzarr.cli import main as cli_main
from blzarr.storage import fileio

import crashsim
from test_crashsim import Run, _carray_repair, _check_values, _opens, _simulate

bcolz = pytest.importorskip("bcolz")

CHUNKLEN = 100
CP = blzarr.cparams(clevel=0)
SYNCS = ("fsync", "fsyncdir")


def _make(root, n):
    c = blzarr.carray(np.arange(n, dtype=np.int64), rootdir=root, mode="w", format="bcolz",
                      chunklen=CHUNKLEN, cparams=CP)
    c.flush()
    return c


def _recorded(base, fn):
    """The operations `fn()` makes under `base` (crashsim.Recorder's log, without its 'init' entries)."""
    rec = crashsim.Recorder(str(base))
    with fileio.use(rec):
        fn()
    return [e for e in rec.log if e[0] != "init"]


def _barriers(log):
    """The runs of consecutive syncs in `log` (each a list of (kind, what)), in order."""
    runs, cur = [], None
    for e in log:
        if e[0] in SYNCS:
            if cur is None:
                cur = []
                runs.append(cur)
            cur.append(e)
        else:
            cur = None
    return runs


def _check_bcolz_reads(root, expected):
    b = bcolz.open(root, mode="r")
    np.testing.assert_array_equal(b[:], expected)


def test_new_chunk_files_need_one_barrier(tmp_path):
    """A flush whose chunk files are all new (meta/sizes counted whole chunks only): no temporary file,
    no rename; the new files and data/ synced together, then meta/sizes written and synced."""
    root = str(tmp_path / "c")
    c = _make(root, 2 * CHUNKLEN)
    x = np.arange(2 * CHUNKLEN, 5 * CHUNKLEN + 40, dtype=np.int64)

    def work():
        c.append(x[:CHUNKLEN + 10])
        c.append(x[CHUNKLEN + 10:])
        c.flush()
    log = _recorded(tmp_path, work)
    assert not [e for e in log if e[0] == "rename"], log
    data = os.path.realpath(os.path.join(root, "data"))
    made = sorted(os.path.basename(e[1]) for e in log if e[0] == "link")
    assert made == ["__2.blp", "__3.blp", "__4.blp", "__5.blp"], made
    runs = _barriers(log)
    assert len(runs) == 2, runs
    first = runs[0]
    created = {e[2] for e in log if e[0] == "link"}
    assert {e[1] for e in first if e[0] == "fsync"} == created
    assert ("fsyncdir", data) in first
    # then meta/sizes: written after the barrier, synced alone
    i_bar = log.index(first[-1])
    i_sizes = log.index(runs[1][0])
    writes = [e for e in log[i_bar + 1:i_sizes] if e[0] == "write"]
    assert writes and all(e[1] == runs[1][0][1] for e in writes), log[i_bar + 1:i_sizes]
    assert len(runs[1]) == 1
    c.close()
    expected = np.concatenate([np.arange(2 * CHUNKLEN), x])
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], expected)
    _check_bcolz_reads(root, expected)


def test_short_last_chunk_rewrite_is_renamed_after_its_sync(tmp_path):
    """A flush that only grows the short last chunk: its committed file is replaced by a staged file
    synced before the rename, the rename made durable (data/) before meta/sizes: three rounds."""
    root = str(tmp_path / "c")
    c = _make(root, CHUNKLEN + 30)

    def work():
        c.append(np.arange(500, 520))
        c.flush()
    log = _recorded(tmp_path, work)
    renames = [i for i, e in enumerate(log) if e[0] == "rename"]
    assert len(renames) == 1
    src, dst = log[renames[0]][1:]
    assert os.path.basename(dst) == "__1.blp" and os.path.basename(src).startswith(".__1.blp.blzarr-new-")
    staged_ino = next(e[2] for e in log if e[0] == "link" and e[1] == src)
    runs = _barriers(log)
    assert len(runs) == 3, runs
    assert runs[0] == [("fsync", staged_ino)]
    assert log.index(runs[0][-1]) < renames[0] < log.index(runs[1][0])
    assert runs[1] == [("fsyncdir", os.path.dirname(dst))]
    c.close()
    expected = np.concatenate([np.arange(CHUNKLEN + 30), np.arange(500, 520)])
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], expected)
    _check_bcolz_reads(root, expected)


def test_filling_the_short_chunk_and_starting_the_next_takes_three_rounds(tmp_path):
    """An append that fills the committed short last chunk (replaced: synced temporary file, rename)
    and starts new files, then a flush: the new files and data/ in one barrier before meta/sizes."""
    root = str(tmp_path / "c")
    c = _make(root, CHUNKLEN + 30)

    def work():
        c.append(np.arange(1000, 1000 + 2 * CHUNKLEN))
        c.flush()
    log = _recorded(tmp_path, work)
    renames = [e for e in log if e[0] == "rename"]
    assert [os.path.basename(e[2]) for e in renames] == ["__1.blp"]
    runs = _barriers(log)
    assert len(runs) == 3, runs
    new = {e[2] for e in log if e[0] == "link" and os.path.basename(e[1]) in ("__2.blp", "__3.blp")}
    assert len(new) == 2
    assert new <= {e[1] for e in runs[1] if e[0] == "fsync"}
    assert any(e[0] == "fsyncdir" for e in runs[1])
    c.close()
    expected = np.concatenate([np.arange(CHUNKLEN + 30), np.arange(1000, 1000 + 2 * CHUNKLEN)])
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], expected)
    _check_bcolz_reads(root, expected)


def test_several_rewrites_sync_their_files_together(tmp_path):
    """Assignments over several committed chunks: their staged files are synced in one barrier with
    data/ (not one sync each as they are written), before the rewrite record."""
    root = str(tmp_path / "c")
    c = _make(root, 6 * CHUNKLEN)

    def work():
        c[50:550] = -1
        c.flush()
    log = _recorded(tmp_path, work)
    staged = {e[2] for e in log if e[0] == "link" and ".blzarr-new-" in e[1]}
    assert len(staged) == 6
    runs = _barriers(log)
    first = runs[0]
    assert {e[1] for e in first if e[0] == "fsync"} == staged
    assert any(e[0] == "fsyncdir" for e in first)
    c.close()
    expected = np.arange(6 * CHUNKLEN)
    expected[50:550] = -1
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], expected)
    _check_bcolz_reads(root, expected)


def test_an_existing_stray_file_is_replaced_not_written_over(tmp_path):
    """A file past the end that a killed writer left (here: garbage) is not written over in place:
    the chunk goes through a temporary file, and both readers see the right values."""
    root = str(tmp_path / "c")
    _make(root, 2 * CHUNKLEN).close()
    stray = os.path.join(root, "data", "__2.blp")
    with open(stray, "wb") as f:
        f.write(b"blpk" + b"\x00" * 40)
    c = blzarr.open(root, mode="a")
    c.append(np.arange(7, 7 + CHUNKLEN + 5))
    c.flush()
    c.close()
    expected = np.concatenate([np.arange(2 * CHUNKLEN), np.arange(7, 7 + CHUNKLEN + 5)])
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], expected)
    _check_bcolz_reads(root, expected)


def test_a_failed_write_of_a_new_file_leaves_the_flushed_state(tmp_path):
    """ENOSPC from each call of an append + flush that writes a new chunk file in place: the error
    names the file, the directory holds the flushed rows (or the new ones, when the error came after
    meta/sizes) for blzarr and bcolz, and the same call again completes it."""
    from faults import Injector
    root = str(tmp_path / "c")
    c = _make(root, 2 * CHUNKLEN)
    x = np.arange(900, 900 + CHUNKLEN)
    inj = Injector()
    with fileio.use(inj):
        c.append(x)
        c.flush()
    c.close()
    assert inj.n > 3
    # ENOSPC from each call that changes the disk on (a full disk stays full)
    for at in range(1, inj.n + 1):
        root2 = str(tmp_path / f"d{at}")
        d = _make(root2, 2 * CHUNKLEN)
        appended = False
        with fileio.use(Injector(at=at, fault="enospc")):
            with pytest.raises(blzarr.StorageError, match="No space left"):
                d.append(x)
                appended = True
                d.flush()
        # before, or after when the error came once meta/sizes was written (the statistics)
        expected = np.concatenate([np.arange(2 * CHUNKLEN), x])
        got = blzarr.open(root2, mode="r")[:]
        assert len(got) in (2 * CHUNKLEN, 3 * CHUNKLEN), (at, len(got))
        np.testing.assert_array_equal(got, expected[:len(got)])
        _check_bcolz_reads(root2, expected[:len(got)])
        # the same call again on the same object (a failed append was undone; a failed flush keeps
        # the appended rows to flush)
        if not appended:
            d.append(x)
        d.flush()
        d.close()
        np.testing.assert_array_equal(blzarr.open(root2, mode="r")[:], expected)
        _check_bcolz_reads(root2, expected)


def test_partition_writer_close_syncs_new_files(tmp_path):
    """A dask partition writer writes new chunk files in place: its close() syncs them and data/
    (meta/sizes is written by the caller afterwards)."""
    from blzarr.storage.bcolz_layout import BcolzDir
    root = str(tmp_path / "c")
    c = blzarr.carray(np.empty(0, dtype=np.int64), rootdir=root, mode="w", format="bcolz",
                      chunklen=CHUNKLEN, cparams=CP)
    c.flush()
    c.close()
    payload = blzarr.carray(np.arange(CHUNKLEN), chunklen=CHUNKLEN, cparams=CP).chunks[0].getdata()

    def work():
        w = BcolzDir(root)
        w.write_chunk(0, payload)
        w.write_chunk(1, payload)
        w.close()
    log = _recorded(tmp_path, work)
    new = {e[2] for e in log if e[0] == "link"}
    assert len(new) == 2 and not [e for e in log if e[0] == "rename"]
    runs = _barriers(log)
    assert len(runs) == 1
    assert {e[1] for e in runs[0] if e[0] == "fsync"} == new
    assert ("fsyncdir", os.path.realpath(os.path.join(root, "data"))) in runs[0]


# ------------------------------------------------------------------ power loss, blzarr and bcolz reading
def _w_barrier_paths():
    def workload(base, rec):
        root = os.path.join(base, "c")
        c = None
        run = Run(rec, lambda: c[:])

        def make():
            nonlocal c
            c = blzarr.carray(np.arange(250, dtype=np.int64), rootdir=root, mode="w", format="bcolz",
                              chunklen=CHUNKLEN, cparams=CP)
            c.flush()
        run.call("create", make, flushes=True)
        # fills the committed short chunk (renamed) and a new full chunk: 400, no short chunk
        run.call("append 150", lambda: c.append(np.arange(1000, 1150)))
        run.call("flush", c.flush, flushes=True)
        # only new files (two full, one short)
        run.call("append 230", lambda: c.append(np.arange(2000, 2230)))
        run.call("flush", c.flush, flushes=True)
        # only the short chunk's file rewritten
        run.call("append 20", lambda: c.append(np.arange(3000, 3020)))
        run.call("flush", c.flush, flushes=True)
        # several committed chunks rewritten (a rewrite record)
        run.call("c[50:350] = -1", lambda: c.__setitem__(slice(50, 350), -1))
        run.call("flush", c.flush, flushes=True)
        run.call("trim(360)", lambda: c.trim(360), flushes=True)
        run.call("append 260", lambda: c.append(np.arange(4000, 4260)))
        run.call("close", c.close, flushes=True)
        return run
    return workload


def _check_both(path, states, j, where):
    root = os.path.join(path, "c")
    if j == 0 and not _opens(root):
        return None
    arr = blzarr.open(root, mode="r")[:]
    _check_values(arr, states, where)
    b = bcolz.open(root, mode="r")
    got = b[:]
    assert len(got) == len(arr), f"{where}: bcolz reads {len(got)} rows, blzarr {len(arr)}"
    _check_values(got, states, f"{where} (bcolz)")
    out = io.StringIO()
    assert cli_main(["verify", root], out=out) == 0, f"{where}: verify: {out.getvalue()}"
    return arr


@pytest.mark.slow
def test_power_loss_states_read_by_blzarr_and_bcolz(tmp_path):
    _simulate(tmp_path, "bcolz flush barrier", _w_barrier_paths(), _check_both, _carray_repair("c"))


class _CountingIO(fileio.OsIO):
    """The OS's calls, counting the ones that look at one file's type or size."""

    def __init__(self):
        self.looks = 0

    def isfile(self, path):
        self.looks += 1
        return super().isfile(path)

    def getsize(self, path):
        self.looks += 1
        return super().getsize(path)


@pytest.mark.parametrize("nchunks", [3, 60])
def test_a_flush_on_a_chunk_boundary_looks_at_no_chunk_file(tmp_path, nchunks):
    """A flush whose length ends on a chunk boundary removes the files past the end from the names
    of data/ alone: no stat of each chunk file at every such flush, whatever their number."""
    root = str(tmp_path / "c")
    c = _make(root, nchunks * CHUNKLEN)
    c.append(np.arange(CHUNKLEN))
    c.flush()       # (the first may list data/ with sizes once: the compressed size of the chunks)
    io = _CountingIO()
    with fileio.use(io):
        c.append(np.arange(CHUNKLEN))
        c.flush()
    assert io.looks == 0
    c.close()
    expected = np.concatenate([np.arange(nchunks * CHUNKLEN), np.arange(CHUNKLEN), np.arange(CHUNKLEN)])
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], expected)
    _check_bcolz_reads(root, expected)
