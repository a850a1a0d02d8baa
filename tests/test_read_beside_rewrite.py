"""A long read in one process while another process rewrites the chunks it reads sees one version.

Process A reads an on-disk carray of many chunks (``a[:]``, ``a.sum()``, a ``where``); half-way
through (a hook between its chunk reads, at the chunk store's calls), process B rewrites every chunk
(``b[:] = new``) and flushes.  A's answer must be all old or all new, never a mix, and the read must
not fail.
"""

import os

import numpy as np
import pytest

import blzarr
import blzarr.containers.carray.read as carray_read
import blzarr.storage.chunkstore as chunkstore
from blzarr.query import fused

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

N, CL = 20_000, 1000
OLD = np.arange(N, dtype=np.int64)
NEW = -np.arange(N, dtype=np.int64) - 1


def _in_another_process(work):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the rewriting process failed"


def _rewrite_in_another_process(path):
    def work():
        b = blzarr.open(path, mode="a")
        b[:] = NEW
        b.close()
    _in_another_process(work)


class Midway:
    """Runs `then()` once, between the first half and the second half of the chunks a read asks the
    chunk store for (whichever of its paths the read takes)."""

    def __init__(self, monkeypatch, store, then):
        self.then, self.done = then, False
        cls = type(store)
        for name in ("decode_whole", "sum_whole"):
            orig = getattr(cls, name)
            monkeypatch.setattr(cls, name, self._split(orig, name))
        orig_run_all = carray_read.run_all

        def run_all(fn, items, *args, **kwargs):
            items = list(items)
            if self.done or len(items) < 2:
                return orig_run_all(fn, items, *args, **kwargs)
            h = len(items) // 2
            first = orig_run_all(fn, items[:h], *args, **kwargs)
            self.fire()
            second = orig_run_all(fn, items[h:], *args, **kwargs)
            return (list(first) + list(second)) if first is not None and second is not None else None
        monkeypatch.setattr(carray_read, "run_all", run_all)
        monkeypatch.setattr(chunkstore, "run_all", run_all)     # the chunk store's reads of several chunks
        orig_blocks = fused.run_blocks

        def run_blocks(bounds, decoder, fn, *args, **kwargs):
            bounds = list(bounds)
            if self.done or len(bounds) < 2:
                return orig_blocks(bounds, decoder, fn, *args, **kwargs)
            h = len(bounds) // 2
            if kwargs.get("decode") is not None:
                raise AssertionError("a plan of blocks: not split here")
            first = orig_blocks(bounds[:h], decoder, fn, *args, **kwargs)
            self.fire()
            return list(first) + list(orig_blocks(bounds[h:], decoder, fn, *args, **kwargs))
        monkeypatch.setattr(fused, "run_blocks", run_blocks)

    def fire(self):
        if not self.done:
            self.done = True
            self.then()

    def _split(self, orig, name):
        def call(store, ids, *args):
            ids = list(ids)
            if self.done or len(ids) < 2:
                return orig(store, ids, *args)
            h = len(ids) // 2
            if name == "decode_whole":
                out, offsets = args
                if not orig(store, ids[:h], out, offsets[:h]):
                    return False
                self.fire()
                return orig(store, ids[h:], out, offsets[h:])
            first = orig(store, ids[:h], *args)
            if first is None:
                return None
            self.fire()
            second = orig(store, ids[h:], *args)
            return None if second is None else np.concatenate([first, second])
        return call


def _reader(tmp_path, fmt):
    path = str(tmp_path / "a")
    blzarr.carray(OLD, rootdir=path, mode="w", chunklen=CL, format=fmt).close()
    a = blzarr.open(path, mode="r")
    a[5]                                    # opened and touched, as a reader that went on reading
    return path, a


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_slice_spanning_a_rewrite_sees_one_version(tmp_path, fmt, monkeypatch):
    path, a = _reader(tmp_path, fmt)
    m = Midway(monkeypatch, a._chunks, lambda: _rewrite_in_another_process(path))
    got = a[:]
    assert m.done, "the hook did not run: the read took another path"
    assert (got == OLD).all() or (got == NEW).all(), \
        f"a mix: {int((got == OLD).sum())} old and {int((got == NEW).sum())} new values"


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_sum_spanning_a_rewrite_sees_one_version(tmp_path, fmt, monkeypatch):
    path, a = _reader(tmp_path, fmt)
    m = Midway(monkeypatch, a._chunks, lambda: _rewrite_in_another_process(path))
    got = a.sum()
    assert m.done, "the hook did not run: the sum took another path"
    assert got in (OLD.sum(), NEW.sum()), f"a sum of a mix: {got}"


def _rewrite_table_in_another_process(path):
    def work():
        t = blzarr.open(path, mode="a")
        t.cols["a"][:] = NEW
        t.cols["b"][:] = NEW * 0.5
        t.close()
    _in_another_process(work)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_table_read_spanning_a_rewrite_sees_one_version(tmp_path, fmt, monkeypatch):
    path = str(tmp_path / "t")
    blzarr.ctable([OLD, OLD * 0.5], names=["a", "b"], rootdir=path, mode="w", chunklen=CL, format=fmt).close()
    t = blzarr.open(path, mode="r")
    t[5]
    m = Midway(monkeypatch, t.cols["a"]._chunks, lambda: _rewrite_table_in_another_process(path))
    got = t[:]
    assert m.done, "the hook did not run: the read took another path"
    old = (got["a"] == OLD).all() and (got["b"] == OLD * 0.5).all()
    new = (got["a"] == NEW).all() and (got["b"] == NEW * 0.5).all()
    assert old or new, (f"a mix: column a {int((got['a'] == OLD).sum())} old / {int((got['a'] == NEW).sum())} "
                        f"new, column b {int((got['b'] == OLD * 0.5).sum())} old")


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_read_that_every_attempt_sees_spanned_returns_with_a_warning(tmp_path, fmt, monkeypatch):
    # another process commits during every attempt (here: just before each attempt's check): the
    # call neither fails nor loops for ever; it returns its last reading and says it may be a mix
    path, a = _reader(tmp_path, fmt)
    real = carray_read.read_again
    commits = []

    def commit_then_check(obj, attempt):
        commits.append(attempt)
        _rewrite_in_another_process(path)
        return real(obj, attempt)
    monkeypatch.setattr(carray_read, "read_again", commit_then_check)
    with pytest.warns(RuntimeWarning, match="changed by another process") as rec:
        got = a[:]
    assert path in str(rec[0].message)
    assert len(commits) == carray_read.READ_AGAIN
    np.testing.assert_array_equal(got, NEW)          # the last reading, after the first commit
