"""How `fetchwhere(..., out_flavor='numpy')` writes the rows of a range into its result
(`chunked_eval.select_into`): pieces whose every field is a one-dimensional column are decoded column by
column into buffers and written row by row (`_rows.zip_fields`), the others field by field; and the
plans kept between queries (`planner.plan`) are reused only while the statistics they came from hold.
Every result is checked against NumPy's."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from helpers import assert_same, examples

import blzarr
from blzarr import _rows
from blzarr.query import planner

CL = 8192          # 4 Blosc blocks of 16 KB per int64/float64 chunk: range ends fall inside blocks
N = 3 * CL + 1000  # and a short last chunk


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def nthreads(request):
    old = blzarr.set_nthreads(request.param)
    yield request.param
    blzarr.set_nthreads(old)


@pytest.fixture(params=["streamed", "cached"])
def stores(request):
    """Rows of packed 8-byte fields written by streaming stores from any size on, or never."""
    old = _rows._zip_stream_min(0 if request.param == "streamed" else 1 << 62)
    yield request.param
    _rows._zip_stream_min(old)


def make_table(layout, n=N):
    rng = np.random.default_rng(7)
    cols = {
        "ts": np.cumsum(rng.integers(0, 3, n)).astype("i8"),   # sorted, with repeats
        "px": rng.standard_normal(n),
        "f": rng.random(n).astype("f4"),
        "q": rng.integers(-300, 300, n).astype("i2"),
        "b": rng.random(n) < 0.5,
        "s": rng.integers(0, 10 ** 5, n).astype("S5"),
        "m": rng.random((n, 2)),
    }
    kw = dict(layout, mode="w") if layout.on_disk else {}
    t = blzarr.ctable([blzarr.carray(v, chunklen=CL) for v in cols.values()], names=list(cols), **kw)
    return t, cols


# rows [a, b) of the sorted ts: ends inside a Blosc block, on chunk edges, in the short last chunk
RANGES = [(CL + 1000, 2 * CL + 3000), (CL, 2 * CL), (CL - 1, 2 * CL + 1), (0, N), (3 * CL + 10, N - 7),
          (2 * CL + 2047, 3 * CL + 1), (5, 6), (3 * CL, N), (100, CL + 100)]
OUTCOLS = [None, ["ts", "px", "f"], ["px", "nrow__", "ts"], ["m", "ts"], ["s", "b", "q", "px"], ["px"], ["px", "ts"]]


@pytest.mark.parametrize("rows", RANGES, ids=[f"{a}-{b}" for a, b in RANGES])
def test_ranges_equal_numpy(layout, nthreads, stores, rows):
    t, cols = make_table(layout)
    ts = cols["ts"]
    lo, hi = int(ts[rows[0]]), int(ts[rows[1] - 1])
    try:
        for expression in (f"(ts >= {lo}) & (ts <= {hi})", f"(ts > {lo}) & (ts < {hi}) & (px > -0.5)",
                           f"(ts >= {lo}) & (ts < {hi}) | (q > 290)"):
            mask = eval(expression, {}, cols)
            pos = np.flatnonzero(mask)
            for outcols in OUTCOLS:
                got = t.fetchwhere(expression, outcols=outcols, out_flavor="numpy")
                names = list(cols) if outcols is None else outcols
                assert got.dtype.names == tuple(names) and len(got) == len(pos), (expression, outcols)
                for k in names:
                    assert_same(got[k], pos if k == "nrow__" else cols[k][pos])
    finally:
        if layout.on_disk:
            t.close()


def test_rows_written_together_or_field_by_field(layout, monkeypatch):
    """One-dimensional columns go through `zip_fields`; a query with a 2-d column writes its pieces field
    by field, one with row numbers the pieces taken whole: the same rows as NumPy either way."""
    t, cols = make_table(layout)
    ts = cols["ts"]
    expression = f"(ts >= {int(ts[CL + 100])}) & (ts < {int(ts[3 * CL + 500])})"
    pos = np.flatnonzero(eval(expression, {}, cols))
    calls = []
    real = _rows.zip_fields

    def counted(*args):
        calls.append(1)
        return real(*args)
    monkeypatch.setattr(sys.modules["blzarr.chunked_eval"]._rows, "zip_fields", counted)
    for outcols, zipped in ((["ts", "px", "f", "q", "b", "s"], True), (["m", "px"], False),
                            (["nrow__", "ts"], None)):
        del calls[:]
        got = t.fetchwhere(expression, outcols=outcols, out_flavor="numpy")
        assert zipped is None or bool(calls) == zipped, outcols
        for k in outcols:
            assert_same(got[k], pos if k == "nrow__" else cols[k][pos])
    if layout.on_disk:
        t.close()


@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(0, 300), row=st.integers(0, 50), seed=st.integers(0, 2 ** 32 - 1),
       fields=st.lists(st.sampled_from(["i8", "f8", "f4", "i2", "u1", "?", "S3", "S7", "c16"]), min_size=1, max_size=5))
def test_zip_fields_equals_numpy(n, row, seed, fields):
    for stream in (0, 1 << 62):
        old = _rows._zip_stream_min(stream)
        try:
            _check_zip_fields(n, row, seed, fields)
        finally:
            _rows._zip_stream_min(old)


def test_zip_fields_streamed_rows_equal_numpy():
    """Packed 8-byte fields past `_ZIP_STREAM_MIN` (streaming stores), at every row offset."""
    for nf in (1, 2, 3, 5):
        for row in (0, 1, 3):
            _check_zip_fields(70_000, row, nf * 10 + row, ["i8", "f8", "u8", "M8[s]", "c8"][:nf])


def _check_zip_fields(n, row, seed, fields):
    rng = np.random.default_rng(seed)
    dt = np.dtype([(f"c{k}", f) for k, f in enumerate(fields)])
    out = np.zeros(n + row + 3, dt)
    want = out.copy()
    srcs = [np.frombuffer(rng.bytes(n * np.dtype(f).itemsize), f).copy() for f in fields]
    assert _rows.zip_fields(out, row, srcs, [dt.fields[f"c{k}"][1] for k in range(len(fields))]) == n
    for k, s in enumerate(srcs):
        want[f"c{k}"][row:row + n] = s
    assert out.tobytes() == want.tobytes()


def test_zip_fields_refuses_what_it_cannot_do():
    dt = np.dtype([("a", "i8"), ("b", "f4")])
    out = np.zeros(10, dt)
    a, b = np.arange(4), np.arange(4, dtype="f4")
    with pytest.raises(IndexError, match="outside the output"):
        _rows.zip_fields(out, 7, [a, b], [0, 8])
    with pytest.raises(IndexError, match="outside the output"):
        _rows.zip_fields(out, -1, [a, b], [0, 8])
    with pytest.raises(ValueError, match="holds 3 values, 4 expected"):
        _rows.zip_fields(out, 0, [a, b[:3]], [0, 8])
    with pytest.raises(ValueError, match="outside a row"):
        _rows.zip_fields(out, 0, [a, b], [0, 10])
    with pytest.raises(ValueError, match="outside a row"):
        _rows.zip_fields(out, 0, [a, b], [-1, 8])
    with pytest.raises(ValueError, match="offsets"):
        _rows.zip_fields(out, 0, [a, b], [0])
    with pytest.raises(ValueError, match="not a C-contiguous"):
        _rows.zip_fields(out, 0, [np.arange(8)[::2], b], [0, 8])
    with pytest.raises(ValueError, match="not a C-contiguous"):
        _rows.zip_fields(out, 0, [np.zeros((4, 1)), b], [0, 8])
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        _rows.zip_fields(out[::2], 0, [a, b], [0, 8])
    ro = out.copy()
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        _rows.zip_fields(ro, 0, [a, b], [0, 8])
    with pytest.raises(TypeError):
        _rows.zip_fields(out, 0, [[1, 2], b], [0, 8])
    assert out.tobytes() == bytes(out.nbytes)      # nothing written by the calls refused


def test_kept_plans_follow_the_statistics(layout, monkeypatch):
    """A query plans once and reuses its plan while the blocks, the constants and the statistics of the
    operands it compared are those the plan came from; any write that changes the statistics (an
    append, a rewritten chunk), other constants or other operands plan again.  Results equal NumPy's."""
    # (on disk the table's columns get the chunk length the table is given, as bcolz's)
    kw = dict(layout, mode="w", chunklen=CL // 8) if layout.on_disk else {}
    ts = np.arange(20 * CL // 8, dtype="i8")
    px = np.arange(len(ts)) * 0.5
    t = blzarr.ctable([blzarr.carray(ts, chunklen=CL // 8), blzarr.carray(px, chunklen=CL // 8)],
                      names=["ts", "px"], **kw)
    planned = []
    real = planner._Classifier.boolean

    def counting(self, node):
        planned.append(1)
        return real(self, node)
    monkeypatch.setattr(planner._Classifier, "boolean", counting)
    planner._PLANS.clear()

    def check(lo, hi, cols):
        before = len(planned)
        got = t.fetchwhere("(ts >= lo) & (ts < hi)", user_dict={"lo": lo, "hi": hi}, out_flavor="numpy")
        pos = np.flatnonzero((cols[0] >= lo) & (cols[0] < hi))
        assert_same(got["ts"], cols[0][pos])
        assert_same(got["px"], cols[1][pos])
        return len(planned) > before

    cols = [ts.copy(), px.copy()]
    assert check(1000, 1500, cols)
    assert not check(1000, 1500, cols)             # the same plan
    assert check(1000, 1501, cols)                 # another constant
    assert check(np.int64(1000), 1500, cols)       # a constant of another type
    # a chunk rewritten: values out of the order the old plan relied on
    t["ts"][1100] = 10 ** 9
    cols[0][1100] = 10 ** 9
    assert check(1000, 1500, cols)
    assert not check(1000, 1500, cols)
    t.append([np.arange(5000, 5000 + CL, dtype="i8"), np.ones(CL)])
    cols = [np.concatenate([cols[0], np.arange(5000, 5000 + CL)]), np.concatenate([cols[1], np.ones(CL)])]
    assert check(1000, 1500, cols)
    assert check(5100, 5200, cols)
    assert not check(5100, 5200, cols)
    t["ts"][len(cols[0]) - 3] = 5150                # the leftover rows
    cols[0][len(cols[0]) - 3] = 5150
    assert check(5100, 5200, cols)
    assert not check(5100, 5200, cols)
    # an unhashable constant: planned every time, the same rows
    assert check(np.array(1000), 1500, cols)
    assert check(np.array(1000), 1500, cols)
    if layout.on_disk:
        t.close()


def test_no_evaluator_for_the_ends_of_a_sorted_range(monkeypatch):
    """The ends of a range on a sorted column are found by binary searches: no evaluator is built
    (numexpr is not probed); a block with no order still is evaluated."""
    ts = np.arange(10 * CL, dtype="i8")
    t = blzarr.ctable([blzarr.carray(ts, chunklen=CL), blzarr.carray(ts * 2.0, chunklen=CL)], names=["ts", "px"])
    made = []
    ce = sys.modules["blzarr.chunked_eval"]
    real = ce.make_kernel

    def counted(*args):
        made.append(1)
        return real(*args)
    monkeypatch.setattr(ce, "make_kernel", counted)
    got = t.fetchwhere(f"(ts >= {CL + 5}) & (ts < {3 * CL - 5})", out_flavor="numpy")
    assert_same(got["ts"], ts[CL + 5:3 * CL - 5])
    assert not made
    t["ts"][CL + 10] = -1                          # that block has no order any more
    got = t.fetchwhere(f"(ts >= {CL + 5}) & (ts < {3 * CL - 5})", out_flavor="numpy")
    want = np.flatnonzero((t["ts"][:] >= CL + 5) & (t["ts"][:] < 3 * CL - 5))
    assert_same(got["ts"], t["ts"][:][want])
    assert_same(got["px"], ts[want] * 2.0)
    assert made
