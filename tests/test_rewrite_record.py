"""Rewrites of several chunks switched in one step (blzarr.storage.rewrite): what the fault matrix does
not look at directly.  A killed writer's crash state with a rewrite record is read through by readers
(also by a reader opened before the kill) and completed by the next writer; a rewritten chunk reads
back before it is switched; the temporary files killed writes leave are removed by a writer's open
and are not damage; the bcolz layout stays readable by the real bcolz."""

import io
import os

import numpy as np
import pytest

import blzarr
from blzarr import cli
from blzarr.storage import rewrite
from faults import run_killed

FORMATS = ["bcolz", "blz"]
N, CL = 1000, 100


def _carray(path, fmt):
    kw = {"superchunklen": 2} if fmt == "blz" else {}
    blzarr.carray(np.arange(N, dtype=np.int64), rootdir=path, mode="w", chunklen=CL, format=fmt, **kw).close()


def _table(path, fmt):
    blzarr.ctable([np.arange(N, dtype=np.int64), np.arange(N) * 0.5], names=["a", "b"], rootdir=path,
                  mode="w", chunklen=CL, format=fmt).close()


def _verify(path):
    out = io.StringIO()
    assert cli.main(["verify", path], out=out) == 0, out.getvalue()


def _kill_after_record(path, record, op):
    """Run `op()` in a child killed, once `record` exists, before its second file operation on a data
    file (one rename made in the bcolz layout, one offsets table written in BLZ): the files then hold
    a mix of old and new chunks."""
    from faults import Injector

    class AfterRecord(Injector):
        seen = 0

        def _tick(self, what, p=None):
            if os.path.exists(record) and p is not None and f"{os.sep}data{os.sep}" in str(p):
                self.seen += 1
                if self.seen == 2:
                    os.kill(os.getpid(), 9)
            super()._tick(what, p)

    assert run_killed(op, None, injector=lambda at, fault: AfterRecord(None, None))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fmt", FORMATS)
def test_carray_record_read_through_then_completed(tmp_path, fmt):
    x = str(tmp_path / "x")
    _carray(x, fmt)
    early = blzarr.open(x, mode="r")        # a reader open before the writer starts
    assert early[:].tolist() == list(range(N))
    want = np.arange(N)
    want[50:350] = -7

    def op():
        a = blzarr.open(x, mode="a")
        a[50:350] = -7
        a.flush()

    _kill_after_record(x, rewrite.carray_record_path(x), op)
    assert os.path.exists(rewrite.carray_record_path(x))
    # the files hold a mix; every reader sees the rewrite whole, through the record
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], want)
    np.testing.assert_array_equal(early[:], want)
    _verify(x)
    assert os.path.exists(rewrite.carray_record_path(x))     # readers write nothing
    a = blzarr.open(x, mode="a")
    a[0] = 5                               # the first write completes the record
    assert not os.path.exists(rewrite.carray_record_path(x))
    a.close()
    want[0] = 5
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], want)
    _verify(x)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fmt", FORMATS)
def test_table_record_covers_every_column(tmp_path, fmt):
    t = str(tmp_path / "t")
    _table(t, fmt)
    rec = rewrite.table_record_path(t)

    def op():
        tt = blzarr.open(t, mode="a")
        tt[10:400] = (1, 2.0)

    _kill_after_record(t, rec, op)
    assert os.path.exists(rec)
    a = np.arange(N)
    b = np.arange(N) * 0.5
    a[10:400], b[10:400] = 1, 2.0
    got = blzarr.open(t, mode="r")
    np.testing.assert_array_equal(got["a"][:], a)
    np.testing.assert_array_equal(got["b"][:], b)
    # a column opened alone reads through its table's record too
    np.testing.assert_array_equal(blzarr.open(os.path.join(t, "b"), mode="r")[:], b)
    _verify(t)
    tt = blzarr.open(t, mode="a")
    tt.append((-1, -1.0))
    tt.close()
    assert not os.path.exists(rec)
    got = blzarr.open(t, mode="r")
    np.testing.assert_array_equal(got["a"][:], np.append(a, -1))
    np.testing.assert_array_equal(got["b"][:], np.append(b, -1.0))


@pytest.mark.parametrize("fmt", FORMATS)
def test_rewritten_chunks_read_back_before_the_flush(tmp_path, fmt):
    x = str(tmp_path / "x")
    _carray(x, fmt)
    a = blzarr.open(x, mode="a")
    want = np.arange(N)
    for i in (5, 150, 151, 777, 999):
        a[i] = -i
        want[i] = -i
        a.free_cachemem()               # read again from the files, not from a cache
        np.testing.assert_array_equal(a[:], want)
    other = blzarr.open(x, mode="r")
    np.testing.assert_array_equal(other[:], np.arange(N))  # not switched before the flush
    a.flush()
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], want)
    a.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_writer_open_removes_debris_verify_ignores_it(tmp_path, fmt):
    x, t = str(tmp_path / "x"), str(tmp_path / "t")
    _carray(x, fmt)
    _table(t, fmt)
    junk = [os.path.join(x, "data", ".tmp-0123456789ab"), os.path.join(x, "meta", ".tmp-abcdef012345"),
            os.path.join(t, ".tmp-00112233aabb"), os.path.join(t, "a", "meta", ".tmp-445566778899")]
    if fmt == "bcolz":
        junk.append(os.path.join(x, "data", ".__3.blp.blzarr-new-0123456789ab"))
    keep = [os.path.join(x, "data", ".tmp-notours"), os.path.join(x, "keep.txt")]
    for p in junk + keep:
        with open(p, "wb") as f:
            f.write(b"x" * 10)
    _verify(x)
    _verify(t)
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], np.arange(N))
    assert all(os.path.exists(p) for p in junk)    # readers (and mode 'a' before a write) write nothing
    a = blzarr.open(x, mode="a")
    a[1] = 0
    a.close()
    tt = blzarr.open(t, mode="a")
    tt[0] = (9, 9.0)
    tt.close()
    assert [p for p in junk if os.path.exists(p)] == []
    assert all(os.path.exists(p) for p in keep)


def test_bcolz_reads_a_multichunk_rewrite(tmp_path):
    bcolz = pytest.importorskip("bcolz")
    x, t = str(tmp_path / "x"), str(tmp_path / "t")
    _carray(x, "bcolz")
    _table(t, "bcolz")
    a = blzarr.open(x, mode="a")
    a[50:650] = -3
    a.close()
    tt = blzarr.open(t, mode="a")
    tt[::7] = (4, 4.5)
    tt.close()
    want = np.arange(N)
    want[50:650] = -3
    np.testing.assert_array_equal(bcolz.open(x, mode="r")[:], want)
    got = bcolz.open(t, mode="r")
    a = np.arange(N)
    b = np.arange(N) * 0.5
    a[::7], b[::7] = 4, 4.5
    np.testing.assert_array_equal(got["a"][:], a)
    np.testing.assert_array_equal(got["b"][:], b)
    assert [f for f in os.listdir(os.path.join(x, "data")) if f.startswith(".")] == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_record_that_cannot_be_removed_is_removed_before_the_next_switch(tmp_path, fmt):
    """The switches are made but the record stays (its removal fails): the directory holds the result,
    and the writer removes the record before it switches anything again (applied again at a writer's
    open, the record would undo that later switch)."""
    import errno
    from blzarr.storage import fileio

    x = str(tmp_path / "x")
    _carray(x, fmt)
    rec = rewrite.carray_record_path(x)

    class NoRemove(fileio.OsIO):
        def unlink(self, path):
            if path == rec:
                raise OSError(errno.EIO, "injected", path)
            super().unlink(path)

    a = blzarr.open(x, mode="a")
    a[50:350] = -7
    with fileio.use(NoRemove()):
        with pytest.raises(OSError):
            a.flush()
    assert os.path.exists(rec)
    want = np.arange(N)
    want[50:350] = -7
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], want)
    a[60] = 1                   # one chunk: switched without a record of its own
    a.flush()
    assert not os.path.exists(rec)
    a.close()
    want[60] = 1
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], want)
    b = blzarr.open(x, mode="a")
    b.attrs["k"] = 1            # a writer's open: nothing stale to apply
    b.close()
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], want)
    _verify(x)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_second_writer_object_leaves_the_first_ones_staged_files(tmp_path, fmt):
    """Objects of one process share a directory's lock: the open of a second one removes only debris,
    not the rewrites the first one staged and has yet to switch."""
    x = str(tmp_path / "x")
    _carray(x, fmt)
    a = blzarr.open(x, mode="a")
    a[50:350] = -7
    b = blzarr.open(x, mode="a")
    b.attrs["k"] = 1                        # b's first write: its open for writing
    a.flush()
    want = np.arange(N)
    want[50:350] = -7
    np.testing.assert_array_equal(blzarr.open(x, mode="r")[:], want)
    a.close()
    b.close()
    _verify(x)
