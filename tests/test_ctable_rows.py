"""One row at a time: `ctable.append(row)` of a tuple or list of scalars, whose plain values go
straight into each column's leftover buffer (`carray._one_atom` / `_put_atom`), against NumPy's
conversion of the same rows, and the checks that must still refuse bad rows."""

import errno

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blzarr
from blzarr.containers.carray.write import CarrayWrites
from blzarr.errors import StorageError

DT = np.dtype([("a", "i1"), ("b", "u2"), ("c", "f8"), ("d", "?"), ("e", "i8")])


def _empty(rootdir=None, chunklen=None, dtype=DT):
    kw = {"rootdir": rootdir, "mode": "w"} if rootdir else {}
    if chunklen:
        kw["chunklen"] = chunklen
    return blzarr.ctable(np.zeros(0, dtype=dtype), **kw)


@pytest.fixture
def counted(monkeypatch):
    """Counts the atoms that took the direct path (so a test knows it tested that path)."""
    calls = []
    orig = CarrayWrites._put_atom

    def put(self, value):
        calls.append(value)
        return orig(self, value)
    monkeypatch.setattr(CarrayWrites, "_put_atom", put)
    return calls


rows = st.tuples(st.integers(-128, 127), st.integers(0, 65535),
                 st.one_of(st.floats(allow_nan=False), st.integers(-2 ** 53, 2 ** 53)),
                 st.booleans(), st.integers(-2 ** 63, 2 ** 63 - 1))


@settings(max_examples=15, deadline=None)
@given(st.lists(rows, max_size=12), st.sampled_from([None, 3]))
def test_rows_one_by_one_equal_numpy(counted, rs, chunklen):
    counted.clear()
    t = _empty(chunklen=chunklen)
    for i, r in enumerate(rs):
        t.append(r if i % 2 else list(r))
    expect = np.array(rs, dtype=DT)
    got = t[:]
    assert got.dtype == DT and len(t) == len(rs)
    for n in DT.names:
        np.testing.assert_array_equal(got[n], expect[n])
    if chunklen is None and rs:
        assert len(counted) == 5 * len(rs)      # every row took the direct path


def test_on_disk_rows_reopen(tmp_path, counted):
    root = str(tmp_path / "t")
    t = _empty(root, chunklen=4)
    rs = [(i - 60, 3 * i, i / 3, i % 2 == 0, -(2 ** 40) * i) for i in range(10)]
    for r in rs:
        t.append(r)
    assert counted       # the rows that fill no chunk went the direct way, the others the general one
    assert len(counted) < 5 * len(rs)
    t.close()
    got = blzarr.open(root, mode="r")[:]
    expect = np.array(rs, dtype=DT)
    for n in DT.names:
        np.testing.assert_array_equal(got[n], expect[n])


def test_numpy_scalars_and_conversions():
    t = _empty()
    t.append((np.int8(-5), np.uint16(7), np.float64(0.5), np.bool_(True), np.int64(9)))
    t.append((True, 1, 3, 1, 2.0 == 2.0))       # bools into numbers, ints into float and bool
    t.append((np.int16(3), np.int64(4), np.float32(1.5), 0, np.int32(-1)))
    assert t[:].tolist() == [(-5, 7, 0.5, True, 9), (1, 1, 3.0, True, 1), (3, 4, 1.5, False, -1)]


BAD = [
    ((1000, 1, 1.0, True, 1), OverflowError),           # int8 out of range, as NumPy 2
    ((-1, -1, 1.0, True, 1), OverflowError),            # uint16
    ((1, 1, 1.0, True, 2 ** 63), OverflowError),        # int64
    ((np.int64(200), 1, 1.0, True, 1), OverflowError),  # a NumPy scalar of a wider dtype
    ((1.5, 1, 1.0, True, 1), TypeError),                # a float into an integer column
    (("x", 1, 1.0, True, 1), TypeError),                # text into numbers
    ((1, 1, "y", True, 1), TypeError),
    ((1, 1, 1.0, True), ValueError),                    # one item short
    ((1, 1, 1.0, True, 1, 1), ValueError),              # one too many
]


@pytest.mark.parametrize("ondisk, bad, error", [(False, b, e) for b, e in BAD]
                         + [(True, b, e) for b, e in BAD[::4]])
def test_bad_rows_raise_and_change_nothing(tmp_path, ondisk, bad, error):
    t = _empty(str(tmp_path / "t") if ondisk else None)
    t.append((1, 2, 3.0, False, 4))
    with pytest.raises(error):
        t.append(bad)
    assert len(t) == 1 and all(len(c) == 1 for c in t.cols.values())
    t.append((5, 6, 7.0, True, 8))
    assert t[:].tolist() == [(1, 2, 3.0, False, 4), (5, 6, 7.0, True, 8)]
    if ondisk:
        t.close()
        assert blzarr.open(str(tmp_path / "t"), mode="r")[:].tolist() == [
            (1, 2, 3.0, False, 4), (5, 6, 7.0, True, 8)]


def test_overflow_message_is_numpys():
    t = _empty()
    with pytest.raises(OverflowError) as got:
        t.append((1000, 1, 1.0, True, 1))
    with pytest.raises(OverflowError) as numpy_says:
        np.asarray(1000, dtype="i1")
    assert str(got.value) == str(numpy_says.value)


def test_read_only_table_refuses_the_row(tmp_path):
    root = str(tmp_path / "t")
    _empty(root).close()
    t = blzarr.open(root, mode="r")
    with pytest.raises(blzarr.ReadOnlyError):
        t.append((1, 2, 3.0, False, 4))
    assert len(t) == 0


def test_a_failed_flush_undoes_the_row_in_every_column(tmp_path, monkeypatch, counted):
    root = str(tmp_path / "t")
    t = _empty(root)
    t.append((1, 2, 3.0, False, 4))
    col = t.cols["c"]
    reached = []
    orig = type(col)._flush_data

    def full(self):
        if self is col and not reached:        # once: the undo's own flush then succeeds
            reached.append(1)
            raise OSError(errno.ENOSPC, "No space left on device")
        return orig(self)
    monkeypatch.setattr(type(col), "_flush_data", full)
    counted.clear()
    with pytest.raises(StorageError):
        t.append((5, 6, 7.0, True, 8))
    assert reached and len(counted) == 5        # the direct path ran, then the flush failed
    assert len(t) == 1 and all(len(c) == 1 for c in t.cols.values())
    monkeypatch.setattr(type(col), "_flush_data", orig)
    t.append((9, 10, 11.0, True, 12))
    t.close()
    assert blzarr.open(root, mode="r")[:].tolist() == [(1, 2, 3.0, False, 4), (9, 10, 11.0, True, 12)]


def test_an_atom_that_fills_the_buffer_takes_the_general_way(monkeypatch):
    # (another thread may fill the leftover buffer between `_room_for_one` and `_put_atom`)
    a = blzarr.carray(np.arange(3, dtype="i2"), chunklen=4)
    assert not a._room_for_one()
    general = []
    orig = CarrayWrites.append

    def append(self, arr):
        general.append(np.asarray(arr).tolist())
        return orig(self, arr)
    monkeypatch.setattr(CarrayWrites, "append", append)
    a._put_atom(a._one_atom(7))
    assert general == [[7]]
    a._put_atom(a._one_atom(8))         # room again: the direct way
    assert general == [[7]]
    np.testing.assert_array_equal(a[:], np.array([0, 1, 2, 7, 8], dtype="i2"))
    assert a.nchunks == 1
