"""A reader (mode 'r') beside a writer in another process, at the exact moments that matter, made
deterministic by hooks between the two processes' steps.

1. A reader that opened while a rewrite record stood reads the chunks that record switches where it
   says.  If, while one read call of the reader is in flight, the writer finishes that switch,
   rewrites those chunks again and compacts the file, the record's offsets name bytes of another
   generation of the file: the read must neither fail nor return them.
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
        os.write(down_w, b"go\n")
        assert read_line(up_r) == "done", "the writer failed"
    return r, let_writer_finish, pid


@pytest.mark.parametrize("key", [slice(None), slice(7500, 8000), 7600, 7950, "sum"])
def test_reader_through_a_rewrite_record_beside_its_switch_rewrites_and_compaction(tmp_path, key):
    r, let_writer_finish, pid = _reader_beside_record(tmp_path)
    store = r._chunks.layoutdir
    real_offset = store._offset
    fired = []

    def offset(n):
        # the first time the read call looks for chunk 15: the writer switches, rewrites it again
        # and compacts file 2 before the reader goes on
        if n == 15 and not fired:
            fired.append(n)
            let_writer_finish()
        return real_offset(n)
    store._offset = offset
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
