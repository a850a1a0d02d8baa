"""User errors lose nothing: an exception in the middle of append, __setitem__ or a ctable append (a
wrong dtype or shape, a full disk) leaves the object and its files as they were before the call.

The full disk is simulated: the k-th file write (the buffered writes of atomic replacements and the
positioned writes into superchunk files) writes half its bytes and raises OSError(ENOSPC), for every k
until the call gets through; after each failure the object's values and the files are compared with
those of before the call, then the same call is retried without the fault and must succeed.
"""

import errno
import os

import numpy as np
import pytest

import blzarr
from helpers import tree as _tree
from blzarr.storage import fileio

FORMATS = ["bcolz", "blz"]


class _Faults:
    def __init__(self):
        self.budget = None      # writes left before the failing one; None: no fault
        self.hits = 0

    def tick(self):
        """True when this write must fail: one write, the budget-th from now (a disk that is full at
        that moment; the writes that undo the call then get through)."""
        if self.budget is None:
            return False
        if self.budget == 0:
            self.hits += 1
            self.budget = None
            return True
        self.budget -= 1
        return False


def _enospc():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def faults(monkeypatch):
    f = _Faults()

    class FullDisk(fileio.OsIO):
        """Every write of the I/O layer counts; the one the budget runs out at writes half, then
        fails as a full disk does."""

        def write(self, fd, data):
            if f.tick():
                super().write(fd, bytes(data)[:len(data) // 2])
                raise _enospc()
            super().write(fd, data)

        def pwrite(self, fd, data, pos, where=None):
            if f.tick():
                super().pwrite(fd, bytes(data)[:len(data) // 2], pos, where)
                raise _enospc()
            super().pwrite(fd, data, pos, where)

    monkeypatch.setattr(fileio, "_impl", FullDisk())
    return f



def _make_carray(root, fmt):
    c = blzarr.carray(np.arange(250, dtype=np.int64), rootdir=root, chunklen=100, format=fmt,
                      **({"superchunklen": 2} if fmt == "blz" else {}))
    c.flush()          # 2 full chunks and a flushed short chunk of 50
    return c


def _check_unchanged(c, root, fmt, values, tree):
    np.testing.assert_array_equal(c[:], values)
    assert len(c) == len(values)
    if fmt == "bcolz":
        assert _tree(root) == tree            # byte for byte
    else:
        # the BLZ files keep their values (a failed write may have left unused bytes past the ends)
        r = blzarr.open(root, mode="r")
        np.testing.assert_array_equal(r[:], values)
        del r
    c.flush()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], values)


OPS = {
    "append across chunks": lambda c: c.append(np.arange(1000, 1390)),
    "append into the leftover": lambda c: c.append([7, 8]),
    "setitem across chunks": lambda c: c.__setitem__(slice(30, 290), np.arange(260) * -1),
    "setitem fancy": lambda c: c.__setitem__([5, 150, 249, 120], [-1, -2, -3, -4]),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_full_disk_in_the_middle_of_a_write_changes_nothing(tmp_path, faults, fmt, op):
    root = str(tmp_path / "c")
    c = _make_carray(root, fmt)
    if op == "setitem across chunks":
        c.append(np.arange(250, 300))      # unflushed atoms in the leftover too
    c.flush()
    ref = blzarr.carray(c[:])              # the same call in memory gives the expected result
    OPS[op](ref)
    expected = ref[:]
    values, tree = c[:], _tree(root)
    failures = 0
    for k in range(200):
        faults.budget, faults.hits = k, 0
        try:
            OPS[op](c)
        except OSError as e:
            assert e.errno == errno.ENOSPC or "No space left" in str(e), e
            failures += 1
            _check_unchanged(c, root, fmt, values, tree)
            continue
        faults.budget = None
        if faults.hits == 0:
            break
    assert failures >= (1 if op != "append into the leftover" else 0) and faults.hits == 0
    np.testing.assert_array_equal(c[:], expected)
    # a flush that fails leaves the object as it is (the data still to write), and nothing that was
    # flushed is lost
    failures = 0
    on_disk = blzarr.open(root, mode="r")[:]
    for k in range(50):
        faults.budget, faults.hits = k, 0
        try:
            c.flush()
        except OSError:
            failures += 1
            np.testing.assert_array_equal(c[:], expected)
            got = blzarr.open(root, mode="r")[:]
            # every element holds its last flushed value or its new one (the data goes before the sizes)
            assert len(got) in (len(on_disk), len(expected))
            m = min(len(got), len(on_disk))
            ok = np.zeros(len(got), bool)
            ok[:m] = got[:m] == on_disk[:m]
            ok |= got == expected[:len(got)]
            assert ok.all()
            continue
        if faults.hits == 0:
            break
    faults.budget = None
    assert failures >= 1
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_full_disk_in_the_middle_of_a_ctable_append(tmp_path, faults, fmt):
    root = str(tmp_path / "t")
    t = blzarr.ctable([np.arange(250), np.arange(250) * 0.5], names=["a", "b"], rootdir=root, chunklen=100,
                      format=fmt)
    rows = [np.arange(1000, 1333), np.arange(1000, 1333) * 0.5]
    before, tree = t[:], _tree(root)
    failures = 0
    for k in range(200):
        faults.budget, faults.hits = k, 0
        try:
            t.append(rows)
        except OSError:
            faults.budget = None
            failures += 1
            assert t[:].tolist() == before.tolist() and len(t) == 250
            assert blzarr.open(root, mode="r")[:].tolist() == before.tolist()
            if fmt == "bcolz":
                # byte for byte, but for the commit records of the columns the undo flushed again
                # (a generation number, which readers take as "load again")
                def data(t):
                    return {k: v for k, v in t.items() if os.path.basename(k) != "commit"}
                assert data(_tree(root)) == data(tree)
            continue
        faults.budget = None
        if faults.hits == 0:
            break
    assert failures >= 2
    assert len(t) == 583 and blzarr.open(root, mode="r")["a"][:].tolist() == list(range(250)) + list(
        range(1000, 1333))


@pytest.mark.parametrize("fmt", [None, "bcolz", "blz"])
def test_wrong_dtype_or_shape_changes_nothing(tmp_path, fmt):
    kw = {} if fmt is None else dict(rootdir=str(tmp_path / "c"), format=fmt)
    c = blzarr.carray(np.arange(250, dtype=np.int64), chunklen=100, **kw)
    c.append([1, 2, 3])                     # unflushed leftover atoms
    values = c[:]
    tree = _tree(kw["rootdir"]) if kw else None
    bad = [
        (TypeError, lambda: c.append(["a", "b"])),
        (TypeError, lambda: c.append([1.5, object()])),
        ((TypeError, ValueError), lambda: c.append(np.ones((3, 2)))),
        (TypeError, lambda: c.__setitem__(slice(0, 3), ["x", "y", "z"])),
        (ValueError, lambda: c.__setitem__(slice(0, 200), np.arange(7))),
        (IndexError, lambda: c.__setitem__([1, 2, 10 ** 6], 5)),
        (ValueError, lambda: c.__setitem__(slice(95, 105), np.ones((10, 3)))),
        (IndexError, lambda: c.__setitem__(10 ** 9, 1)),
    ]
    for exc, fn in bad:
        with pytest.raises(exc):
            fn()
        np.testing.assert_array_equal(c[:], values)
        if tree is not None:
            assert _tree(kw["rootdir"]) == tree
    c.append([4])
    assert c[-4:].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("fmt", [None, "bcolz", "blz"])
def test_ctable_append_with_a_bad_column_changes_nothing(tmp_path, fmt):
    kw = {} if fmt is None else dict(rootdir=str(tmp_path / "t"), format=fmt)
    t = blzarr.ctable([np.arange(10), np.arange(10) * 0.5, np.array(["x"] * 10)], names=["a", "b", "s"], **kw)
    before = t[:]
    tree = _tree(kw["rootdir"]) if kw else None
    for rows, exc in (([[1, 2], ["no", "float"], ["s", "s"]], (TypeError, ValueError)),
                      ([[1, 2], [1.0], ["s", "s"]], ValueError),
                      ((1, 2.0), ValueError),
                      ({"a": [1], "b": [1.0]}, (ValueError, KeyError))):
        with pytest.raises(exc):
            t.append(rows)
        assert t[:].tolist() == before.tolist() and all(len(c) == 10 for c in t.cols.values())
        if tree is not None:
            assert _tree(kw["rootdir"]) == tree
    t.append((10, 5.0, "y"))
    assert len(t) == 11


def test_an_interrupt_in_the_middle_of_an_append_changes_nothing(tmp_path, monkeypatch):
    # any exception, KeyboardInterrupt included, is undone the same way
    root = str(tmp_path / "c")
    c = _make_carray(root, "bcolz")
    values, tree = c[:], _tree(root)
    store = c._layoutdir
    real = store.write_chunk
    calls = []

    def write_chunk(n, data):
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(n, data)

    monkeypatch.setattr(store, "write_chunk", write_chunk)
    with pytest.raises(KeyboardInterrupt):
        c.append(np.arange(1000))
    monkeypatch.undo()
    np.testing.assert_array_equal(c[:], values)
    assert _tree(root) == tree
    c.append(np.arange(5))
    c.flush()
    assert blzarr.open(root, mode="r")[:].tolist() == values.tolist() + list(range(5))
