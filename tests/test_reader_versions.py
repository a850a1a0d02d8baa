"""A reader (mode 'r') beside a writer in another process, at the exact moments that matter, made
deterministic by hooks between the two processes' steps.

1. A reader that opened while a rewrite record stood reads the chunks that record switches where it
   says.  If, while one read call of the reader is in flight, the writer finishes that switch,
   rewrites those chunks again and compacts the file, the record's offsets name bytes of another
   generation of the file: the read must neither fail nor return them.
2. A read call that ends after a writer switched its rewritten chunks but before the writer bumped
   the commit record returns one version (BLZ switched the chunks of one superchunk file by one
   write and bumped the record only after meta/sizes: the call returned a mix).
"""

import os

import numpy as np
import pytest

import blzarr
from tests.helpers import read_line

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

N, CL, SCL = 20_000, 500, 8
BASE = np.arange(N, dtype=np.int64)
SPAN = slice(7900, 8100)        # chunks 15 and 16: the last of file 2, the first of file 3
AGAIN = slice(7600, 7700)       # inside chunk 15


def _record_version():
    v = BASE.copy()
    v[SPAN] = -BASE[SPAN]
    return v


def _final_version():
    v = _record_version()
    v[AGAIN] = BASE[AGAIN] * 7
    return v


def _writer(root, to_parent, from_parent):
    """A child: a rewrite over two superchunk files (so under a rewrite record), paused with the
    record written and announced until the parent says "go"; then the switch, the flush's end, three
    more rewrites of chunk 15 and a compaction; then "done"."""
    code = 1
    try:
        w = blzarr.open(root, mode="a")
        w[SPAN] = -BASE[SPAN]
        store = w._chunks.layoutdir
        switch = store.switch_pending

        def paused_switch():
            os.write(to_parent, b"record\n")
            assert read_line(from_parent) == "go"
            switch()
        store.switch_pending = paused_switch
        w.flush()
        del store.switch_pending
        for _ in range(3):
            w[AGAIN] = BASE[AGAIN] * 7
            w.flush()
        assert w.compact() > 0
        w.close()
        os.write(to_parent, b"done\n")
        code = 0
    finally:
        os._exit(code)


def _reader_beside_record(tmp_path):
    """(reader opened while the record stood, function that lets the writer finish, writer pid)."""
    root = str(tmp_path / "a")
    blzarr.carray(BASE, rootdir=root, mode="w", chunklen=CL, format="blz", superchunklen=SCL).close()
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(up_r)
        os.close(down_w)
        _writer(root, up_w, down_r)
    os.close(up_w)
    os.close(down_r)
    assert read_line(up_r) == "record"
    r = blzarr.open(root, mode="r")
    assert r._chunks.layoutdir._overlay, "the reader did not open through the rewrite record"

    def let_writer_finish():
        try:
            os.write(down_w, b"go\n")
            assert read_line(up_r) == "done", "the writer failed"
        finally:
            os.close(down_w)
            os.close(up_r)
    return r, let_writer_finish, pid


@pytest.mark.parametrize("key", [slice(None), slice(7500, 8000), 7600, 7950, "sum"])
def test_reader_through_a_rewrite_record_beside_its_switch_rewrites_and_compaction(tmp_path, key):
    r, let_writer_finish, pid = _reader_beside_record(tmp_path)
    reads = r._chunks.layoutdir._reads       # the directory's read strategy looks offsets up
    real_offset = reads.offset
    fired = []

    def offset(d, n):
        # the first time the read call looks for chunk 15: the writer switches, rewrites it again
        # and compacts file 2 before the reader goes on
        if n == 15 and not fired:
            fired.append(n)
            let_writer_finish()
        return real_offset(d, n)
    reads.offset = offset
    try:
        got = r.sum() if key == "sum" else r[key]
    finally:
        if not fired:
            let_writer_finish()
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert fired, "the hook did not run: the read took another path"
    versions = [_record_version(), _final_version()]
    if key == "sum":
        assert got in [int(v.sum()) for v in versions]
    else:
        assert any(np.array_equal(got, v[key]) for v in versions), (key, got)
    # and the next call reads the last version
    np.testing.assert_array_equal(r[:], _final_version())


# ------------------------------------------------------------------ a read ending inside a flush
def _switching_writer(root, fmt, to_parent, from_parent):
    """A child: rewrites chunks 3 and 30 of the one superchunk file (two chunk files in the bcolz
    layout) and flushes, paused right after the switch of the rewritten chunks (before meta/sizes and
    the commit record's bump) until the parent says "go"."""
    code = 1
    try:
        w = blzarr.open(root, mode="a")
        w[3 * CL:3 * CL + 10] = -1
        w[30 * CL:30 * CL + 10] = -1
        store = w._chunks.layoutdir
        switch = store.switch_pending

        def switch_then_pause():
            switch()
            os.write(to_parent, b"switched\n")
            assert read_line(from_parent) == "go"
        store.switch_pending = switch_then_pause
        w.flush()
        w.close()
        code = 0
    finally:
        os._exit(code)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_read_ending_between_a_switch_and_the_commit_sees_one_version(tmp_path, fmt):
    # a reader's a[:] reads chunks 0-19 (0-7 where it reads chunk by chunk), the writer switches its
    # rewrites of chunks 3 and 30, the reader reads the rest and returns, all before the writer's
    # meta/sizes and its bump of the commit record: chunk 3 old, chunk 30 new, unless the switch
    # was announced (a rewrite record) before it was made
    root = str(tmp_path / "a")
    # (BLZ: all 40 chunks in one superchunk file)
    blzarr.carray(BASE, rootdir=root, mode="w", chunklen=CL, format=fmt,
                  **({"superchunklen": 64} if fmt == "blz" else {})).close()
    new = BASE.copy()
    new[3 * CL:3 * CL + 10] = -1
    new[30 * CL:30 * CL + 10] = -1
    r = blzarr.open(root, mode="r")
    assert r[5] == 5
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    pids = []
    cls = type(r._chunks)
    real = {name: cls.__dict__[name] for name in ("decode_whole", "_get") if name in cls.__dict__}

    def start_writer():
        pid = os.fork()
        if pid == 0:
            _switching_writer(root, fmt, up_w, down_r)
        pids.append(pid)
        assert read_line(up_r) == "switched", "the writer failed"

    def decode_whole(chunks, ids, out, offsets):
        ids = list(ids)
        if pids or len(ids) < 2:
            return real["decode_whole"](chunks, ids, out, offsets)
        h = len(ids) // 2
        ok = real["decode_whole"](chunks, ids[:h], out, offsets[:h])
        start_writer()
        return ok and real["decode_whole"](chunks, ids[h:], out, offsets[h:])

    def get(chunks, i):
        if i == 8 and not pids:
            start_writer()
        return real["_get"](chunks, i)
    try:
        if "decode_whole" in real:
            cls.decode_whole = decode_whole
        if "_get" in real:
            cls._get = get
        got = r[:]
    finally:
        for name, fn in real.items():
            setattr(cls, name, fn)
        os.write(down_w, b"go\n")
        for fd in (up_r, up_w, down_r, down_w):
            os.close(fd)
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert pids, "the hook did not run: the read took another path"
    assert np.array_equal(got, BASE) or np.array_equal(got, new), \
        f"a mix: chunk 3 {'new' if got[3 * CL] == -1 else 'old'}, chunk 30 {'new' if got[30 * CL] == -1 else 'old'}"
    np.testing.assert_array_equal(r[:], new)


# ------------------------------------------------------------------ the real bcolz as the writer
class _Clock:
    """A monotonic clock the test moves (commitrec reads it to pace its look at meta/sizes)."""

    def __init__(self):
        self.ns = 10 ** 12

    def monotonic_ns(self):
        return self.ns


def test_scalar_reads_see_a_bcolz_flush_within_the_poll_without_a_stat_each(tmp_path, monkeypatch):
    bcolz = pytest.importorskip("bcolz")
    from blzarr.storage import commitrec
    root = str(tmp_path / "a")
    blzarr.carray(BASE, rootdir=root, mode="w", chunklen=CL, format="bcolz").close()
    clock = _Clock()
    monkeypatch.setattr(commitrec, "CLOCK", clock.monotonic_ns)
    looks = []
    real = commitrec.sizes_fingerprint
    monkeypatch.setattr(commitrec, "sizes_fingerprint", lambda root: looks.append(root) or real(root))
    r = blzarr.open(root, mode="r")
    assert r[205] == 205
    looks.clear()
    assert [r[i] for i in range(0, N, 7)] == list(range(0, N, 7))
    assert looks == [], "scalar reads looked at meta/sizes before the poll was due"
    b = bcolz.open(root, mode="a")
    b[205] = -1                     # bcolz rewrites chunk 0's file in place, then meta/sizes
    b[15_005] = -2
    b.flush()
    del b
    clock.ns += commitrec.POLL_NS
    assert r[205] == -1             # the first scalar read once the poll is due sees the flush
    assert r[15_005] == -2
    assert r[204] == 204
    # a BLZ reader's scalar reads compare the mapped record only (no poll: bcolz cannot write BLZ)
    blz = str(tmp_path / "b")
    blzarr.carray(BASE, rootdir=blz, mode="w", chunklen=CL, format="blz").close()
    assert not blzarr.open(blz, mode="r")._watch.polled


def test_read_spanning_a_bcolz_rewrite_and_flush_sees_one_version(tmp_path):
    # the real bcolz rewrites chunks 3 and 30 in place and flushes while a blzarr reader's a[:] is
    # between them: the reader reads again (meta/sizes' fingerprint changed during the call)
    bcolz = pytest.importorskip("bcolz")
    root = str(tmp_path / "a")
    blzarr.carray(BASE, rootdir=root, mode="w", chunklen=CL, format="bcolz").close()
    new = BASE.copy()
    new[3 * CL:3 * CL + 10] = -1
    new[30 * CL:30 * CL + 10] = -1
    r = blzarr.open(root, mode="r")
    assert r[5] == 5
    cls = type(r._chunks)
    real_get = cls._get
    fired = []
    threads = blzarr.set_nthreads(1)        # the chunks read one after the other, in order

    def get(chunks, i):
        if i == 8 and not fired:
            fired.append(i)
            b = bcolz.open(root, mode="a")
            b[3 * CL:3 * CL + 10] = -1
            b[30 * CL:30 * CL + 10] = -1
            b.flush()
            del b
        return real_get(chunks, i)
    cls._get = get
    try:
        got = r[:]
    finally:
        cls._get = real_get
        blzarr.set_nthreads(threads)
    assert fired, "the hook did not run: the read took another path"
    assert np.array_equal(got, BASE) or np.array_equal(got, new), \
        f"a mix: chunk 3 {'new' if got[3 * CL] == -1 else 'old'}, chunk 30 {'new' if got[30 * CL] == -1 else 'old'}"
    np.testing.assert_array_equal(r[:], new)


def test_table_reads_see_a_bcolz_flush_within_the_poll(tmp_path, monkeypatch):
    bcolz = pytest.importorskip("bcolz")
    from blzarr.storage import commitrec
    root = str(tmp_path / "t")
    blzarr.ctable([BASE, BASE * 0.5], names=["a", "b"], rootdir=root, mode="w", chunklen=CL,
                  format="bcolz").close()
    clock = _Clock()
    monkeypatch.setattr(commitrec, "CLOCK", clock.monotonic_ns)
    t = blzarr.open(root, mode="r")
    assert tuple(t[205]) == (205, 102.5) and t.cols["b"][206] == 103.0
    b = bcolz.open(root, mode="a")
    b.cols["a"][205] = -1
    b.cols["b"][206] = -2.0
    b.flush()
    del b
    clock.ns += commitrec.POLL_NS
    assert t.cols["b"][206] == -2.0     # a warm scalar read of a column first (main kept 103.0)
    assert tuple(t[205]) == (-1, 102.5)
    got = t[:]
    ref_a, ref_b = BASE.copy(), BASE * 0.5
    ref_a[205], ref_b[206] = -1, -2.0
    np.testing.assert_array_equal(got["a"], ref_a)
    np.testing.assert_array_equal(got["b"], ref_b)
