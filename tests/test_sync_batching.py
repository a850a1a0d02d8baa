"""BLZ rewrites (``__setitem__``) sync per file per flush, not per chunk, in the order that keeps a
completed flush through a power loss: the new bytes of every rewritten chunk are synced (one
fdatasync per file) before the offsets entries are switched to them, and the switch is synced (one
more per file) before the old bytes can be written again.  The crash-state simulator
(test_crashsim.py) checks the states this leaves; here, the count and the order of the operations."""

import gc
import os

import numpy as np
import pytest

import blzarr
from blzarr.storage import fileio

from helpers import FileOpLog

K, CL = 8, 100


def _make(root, rng):
    x = rng.integers(0, 1 << 40, K * CL * 2)           # two superchunk files of 8 chunks
    blzarr.carray(x, rootdir=root, mode="w", chunklen=CL, superchunklen=K, format="blz").close()
    return x


def _layout(c, fno):
    f = c._chunks.layoutdir._file(fno)
    return f.table_pos, f.data_start


def test_rewrites_sync_twice_per_file_per_flush_in_order(tmp_path):
    rng = np.random.default_rng(11)
    root = str(tmp_path / "c")
    x = _make(root, rng)
    c = blzarr.open(root)
    rec = FileOpLog()
    with fileio.use(rec):
        # every chunk of both files rewritten, twice, some growing (relocated), some not
        x[::7] = -1
        c[::7] = -1
        new = rng.integers(0, 1 << 62, 700)
        x[50:750] = new
        c[50:750] = new
        x[1000:1100] = 3
        c[1000:1100] = 3
        before_flush = len(rec.log)
        r = blzarr.open(root, mode="r")                  # another object: the flushed values until flush
        assert r[0] == blzarr.open(root, mode="r")[0] != -1
        c.flush()
    sc = [e for e in rec.log if e[1].endswith(".bin")]
    # before the flush: no sync of the rewritten data (nor of the committed meta/sizes: a cleanly
    # closed directory's is marked durable, tests/test_writer_open_sync.py)
    early = [e[1] for e in rec.log[:before_flush] if e[0] == "sync"]
    assert early == [], f"setitem synced: not batched ({early})"
    for fno in (1, 2):
        path = os.path.join(root, "data", f"__{fno}__.bin")
        ops = [e for e in sc if e[1] == path]
        syncs = [i for i, e in enumerate(ops) if e[0] == "sync"]
        assert len(syncs) == 2, ops                      # per file per flush, not per chunk (16 chunks)
        table_pos, data_start = _layout(c, fno)
        # chunk bytes first, synced; then the entries (and header), synced; at most a cut after
        data = [i for i, e in enumerate(ops) if e[0] == "write" and e[2] >= data_start]
        entries = [i for i, e in enumerate(ops) if e[0] == "write" and e[2] < data_start]
        assert data and entries
        assert max(data) < syncs[0] < min(entries) and max(entries) < syncs[1], ops
        assert all(ops[i][2] >= table_pos or ops[i][2] == 0 for i in entries)
        assert all(e[0] == "trunc" for e in ops[syncs[1] + 1:]), ops
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)
    np.testing.assert_array_equal(c[:], x)
    c.verify()


def test_rewritten_bytes_never_go_where_the_table_still_points(tmp_path):
    """Between two flushes, many rewrites of the same chunks (growing and shrinking) never write over
    the bytes the file's offsets table names (a reader in another process, or a power loss, sees the
    flushed values whole), and the last values are there after the flush."""
    rng = np.random.default_rng(12)
    root = str(tmp_path / "c")
    x = _make(root, rng)
    c = blzarr.open(root)
    store = c._chunks.layoutdir
    named = {}
    for fno in (1, 2):
        f = store._file(fno)
        named[fno] = [(int(o), int(o) + store._ctbytes_at(store._fd(fno), int(o), f) + store.cksize)
                      for o in store._full_table(f)[:f.nchunks]]
    rec = FileOpLog()
    with fileio.use(rec):
        for k in range(12):
            a = int(rng.integers(0, len(x) - 300))
            vals = rng.integers(0, 1 << (8 + 5 * (k % 7)), 300)      # compress well or badly
            x[a:a + 300] = vals
            c[a:a + 300] = vals
            np.testing.assert_array_equal(c[:], x)
            np.testing.assert_array_equal(blzarr.open(root, mode="r")[:][a:a + 300],
                                          blzarr.open(root, mode="r")[a:a + 300])
        writes = [e for e in rec.log if e[0] == "write" and e[1].endswith(".bin")]
        for _, path, pos, n in writes:
            fno = int(os.path.basename(path)[2:-6])
            for p0, p1 in named[fno]:
                assert pos + n <= p0 or pos >= p1, (path, pos, n, p0, p1)
        c.flush()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)
    blzarr.open(root, mode="r").verify()


def test_rewrites_reach_the_files_when_the_object_is_dropped(tmp_path):
    """A rewrite not flushed is switched when the store is closed or dropped, as the chunk files of
    bcolz were written at once."""
    rng = np.random.default_rng(13)
    root = str(tmp_path / "c")
    x = _make(root, rng)
    c = blzarr.open(root)
    c[3] = 42
    c[1500] = 43
    del c
    gc.collect()
    x[3], x[1500] = 42, 43
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)


def test_without_syncs_nothing_is_synced(tmp_path):
    rng = np.random.default_rng(14)
    root = str(tmp_path / "c")
    x = _make(root, rng)
    c = blzarr.open(root)
    rec = FileOpLog()
    with blzarr.defaults_ctx(fsync=False), fileio.use(rec):
        c[::7] = -2
        c.flush()
    assert not [e for e in rec.log if e[0] == "sync"]
    x[::7] = -2
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], x)
