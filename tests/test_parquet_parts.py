"""toparquet writing the file in pieces (blzarr.io.parquet_parts): the column chunks made and encoded
on several threads and put together give pyarrow's own file byte for byte, read back by pyarrow,
Polars and DuckDB; options that need one writer, and footers with fields not known here, go through
one ParquetWriter; failures in a piece leave the old file."""

import errno
import itertools
import os
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import blzarr
from blzarr import ctable
from blzarr.storage import fileio
from blzarr.io import arrow as arrow_io, colmeta, parquet as parquet_io, parquet_parts
from helpers import examples

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

_SEQ = itertools.count()


def _table(n, seed=0, chunklen=None):
    """Every kind of column toparquet writes, nulls in two of them."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(-1000, 1000, n)
    cols = {
        "i": ints,
        "u2": rng.integers(0, 60000, n).astype("u2"),
        "f": rng.normal(size=n).astype("f4"),
        "x": np.cumsum(rng.normal(size=n)),
        "b": ints % 3 == 0,
        "s": np.array(["", "a", "héllo", "日本語", "x\x00y", "zz"])[rng.integers(0, 6, n)],
        "key": np.array([f"id{k:03d}" for k in range(100)])[rng.integers(0, 100, n)],
        "by": np.array([b"", b"ab", b"a\x00b", b"\xff"], "S3")[rng.integers(0, 4, n)],
        "ts": np.datetime64("2024-03-31T00:00:00", "us") + rng.integers(0, 10 ** 11, n).astype("m8[us]"),
        "d": np.datetime64("2020-01-01", "D") + ints.astype("m8[D]"),
        "dur": ints.astype("m8[ms]"),
        "i_valid": rng.random(n) > 0.3,
        "s_valid": rng.random(n) > 0.5,
    }
    t = ctable(list(cols.values()), list(cols), **({} if chunklen is None else {"chunklen": chunklen}))
    t.cols["i"].attrs[colmeta.VALIDITY] = "i_valid"
    t.cols["s"].attrs[colmeta.VALIDITY] = "s_valid"
    t.cols["ts"].attrs[colmeta.TIMEZONE] = "Europe/Paris"
    return t


def _pyarrows_file(t, rg, **options):
    """The bytes pyarrow's write_table gives for the rows of `t` (one contiguous array per column)."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(t).combine_chunks(), sink, row_group_size=rg or (1 << 20), **options)
    return sink.getvalue().to_pybytes()


@pytest.fixture(autouse=True)
def _pieces_at_any_length(monkeypatch):
    # pieces are taken for long row groups and with several threads only; here the short ones are
    # written in pieces as well, whatever the machine's cores
    monkeypatch.setattr(parquet_io, "PIECES_MIN_ROWS", 1)
    monkeypatch.setattr(parquet_io, "get_nthreads", lambda: 2)


class _Spy:
    """Counts the calls of a module function and still runs it."""

    def __init__(self, monkeypatch, owner, name):
        self.calls, real = 0, getattr(owner, name)

        def spy(*a, **k):
            self.calls += 1
            return real(*a, **k)
        monkeypatch.setattr(owner, name, spy)


_OPTIONS = [{}, {"compression": "zstd", "compression_level": 3}, {"compression": None, "use_dictionary": False},
            {"write_statistics": False, "data_page_size": 4096}, {"version": "1.0", "data_page_version": "2.0"},
            {"compression": "gzip", "dictionary_pagesize_limit": 1000, "write_batch_size": 100}]


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(n=st.integers(1, 3000), rg=st.sampled_from([None, 1, 300, 1000]), options=st.sampled_from(_OPTIONS),
       chunklen=st.sampled_from([None, 100, 999]), nthreads=st.sampled_from([2, 3]))
def test_the_file_is_pyarrows_byte_for_byte(tmp_path, monkeypatch, n, rg, options, chunklen, nthreads):
    if rg == 1:
        n = min(n, 20)                   # a row group per row: keep it quick
    t = _table(n, seed=n, chunklen=chunklen)
    path = str(tmp_path / f"o{next(_SEQ)}.parquet")
    with monkeypatch.context() as m:
        spy = _Spy(m, parquet_parts, "write")
        m.setattr(parquet_io, "get_nthreads", lambda: nthreads)
        t.toparquet(path, row_group_size=rg, **options)
    assert spy.calls == 1                               # written in pieces
    with open(path, "rb") as f:
        assert f.read() == _pyarrows_file(t, rg, **options)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_on_disk_one_column_and_many(tmp_path, monkeypatch, fmt):
    # the threads read the same column at once (one column), or 20 of them (a footer's long lists)
    monkeypatch.setattr(parquet_io, "get_nthreads", lambda: 3)
    n = 3_000
    rng = np.random.default_rng(9)
    for k, cols in enumerate(({"x": np.cumsum(rng.normal(size=n))},
                              {f"c{j}": rng.integers(-50, 50, n).astype("i4") * j for j in range(20)})):
        root = str(tmp_path / f"t{k}")
        t = ctable(list(cols.values()), list(cols), rootdir=root, mode="w", format=fmt, chunklen=400)
        t = blzarr.open(root, mode="r")
        path = str(tmp_path / f"o{k}.parquet")
        spy = _Spy(monkeypatch, parquet_parts, "write")
        t.toparquet(path, row_group_size=1000)
        assert spy.calls == 1
        with open(path, "rb") as f:
            assert f.read() == _pyarrows_file(t, 1000)
        assert pq.read_table(path).equals(pa.table(t))


def test_read_back_by_pyarrow_polars_and_duckdb(tmp_path, monkeypatch):
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    n = 12_011
    t = _table(n, seed=3, chunklen=1000)
    path = str(tmp_path / "o.parquet")
    spy = _Spy(monkeypatch, parquet_parts, "write")
    t.toparquet(path, row_group_size=3000)
    assert spy.calls == 1
    md = pq.ParquetFile(path).metadata
    assert md.num_rows == n and [md.row_group(k).num_rows for k in range(md.num_row_groups)] == \
        [3000] * 4 + [n - 12000]
    assert md.row_group(0).column(0).compression == "SNAPPY"
    st0 = md.row_group(1).column(md.schema.names.index("x")).statistics
    x = t["x"][:]
    assert st0.min == x[3000:6000].min() and st0.max == x[3000:6000].max()
    source = pa.table(t)
    assert pq.read_table(path).equals(source)
    assert pl.read_parquet(path).equals(pl.from_arrow(source))
    i, iv, s, sv = t["i"][:], t["i_valid"][:], t["s"][:], t["s_valid"][:]
    got = duckdb.sql(f"SELECT count(*), count(i), sum(i), count(s), sum(CASE WHEN b THEN 1 ELSE 0 END), "
                     f"min(d), max(x), count(DISTINCT key) FROM read_parquet('{path}')").fetchall()[0]
    assert got[:5] == (n, iv.sum(), i[iv].sum(), sv.sum(), t["b"][:].sum())
    assert np.datetime64(got[5], "D") == t["d"][:].min() and got[6] == x.max() and got[7] == 100
    assert duckdb.sql(f"SELECT s FROM read_parquet('{path}') WHERE s IS NOT NULL").fetchnumpy()["s"].tolist() \
        == s[sv].tolist()


@pytest.mark.parametrize("options", [{"compression": {"i": "zstd", "x": "snappy"}}, {"write_page_index": True},
                                     {"use_dictionary": ["key"]}, {"sorting_columns": None}])
def test_options_for_one_writer(tmp_path, monkeypatch, options):
    t = _table(3000, seed=1, chunklen=500)
    path = str(tmp_path / "o.parquet")
    spy = _Spy(monkeypatch, parquet_io, "_ahead")
    stitched = _Spy(monkeypatch, parquet_parts, "write")
    t.toparquet(path, row_group_size=1000, **options)
    assert spy.calls == 1 and stitched.calls == 0       # one ParquetWriter
    assert pq.read_table(path).equals(pa.table(t))
    with open(path, "rb") as f:
        assert f.read() == _pyarrows_file(t, 1000, **options)


def test_a_footer_field_not_known_here_means_one_writer(tmp_path, monkeypatch):
    t = _table(2000, seed=2)
    probe = pa.Table.from_batches([arrow_io._Export(pa, t).batch(0, 1)])
    assert parquet_parts.stitchable(pa, pq, probe, {"compression": "snappy"}) is not None
    # as if a newer pyarrow wrote a column chunk field whose meaning for offsets is not known
    monkeypatch.setattr(parquet_parts, "_CHUNK_FIELDS", {3})
    assert parquet_parts.stitchable(pa, pq, probe, {"compression": "snappy"}) is None
    spy = _Spy(monkeypatch, parquet_io, "_ahead")
    path = str(tmp_path / "o.parquet")
    t.toparquet(path, row_group_size=500)
    assert spy.calls == 1
    assert pq.read_table(path).equals(pa.table(t))


def test_thrift_compact_codec():
    fields = [[1, 5, -3], [2, 6, 2 ** 40], [20, 8, b"x" * 200], [21, 1, True], [22, 2, False],
              [40, 9, (12, [[[1, 6, k]] for k in range(20)])], [41, 9, (1, [1, 2, 1])],
              [42, 12, [[1, 3, 7], [2, 4, -1], [3, 7, b"\x00" * 8]]]]
    data = parquet_parts.encode_struct(fields)
    back, end = parquet_parts._read(memoryview(data), 0, 12)
    assert end == len(data) and back == fields
    with pytest.raises(parquet_parts.FormatError):
        parquet_parts.split_file(b"PAR1" + b"\x00" * 10)


@pytest.mark.parametrize("fault", ["array", "encode", "enospc"])
def test_a_failing_piece_leaves_the_old_file(tmp_path, monkeypatch, fault):
    t = _table(20_000, seed=4, chunklen=1000)
    path = str(tmp_path / "out.parquet")
    pq.write_table(pa.table({"old": [1, 2, 3]}), path)
    calls = {"n": 0}
    if fault == "array":
        owner, name, exc = arrow_io._Export, "array", KeyboardInterrupt
    elif fault == "encode":
        owner, name, exc = parquet_parts, "_encode", pa.ArrowInvalid
    else:
        owner, name, exc = fileio, "write", OSError
    real = getattr(owner, name)

    def failing(*a):
        calls["n"] += 1
        if calls["n"] == 20:
            raise (OSError(errno.ENOSPC, "No space left on device") if exc is OSError else exc("injected"))
        return real(*a)
    monkeypatch.setattr(owner, name, failing)
    before = {th.ident for th in threading.enumerate()}
    with pytest.raises(exc):
        t.toparquet(path, row_group_size=2000)
    assert calls["n"] >= 20                                     # the fault was reached
    assert not [th for th in threading.enumerate() if th.ident not in before and th.name.startswith("blzarr-parquet")]
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["out.parquet"]
    assert pq.read_table(path).to_pydict() == {"old": [1, 2, 3]}
    t.toparquet(path, row_group_size=2000)                     # a retry works
    assert pq.read_table(path).equals(pa.table(t))


def test_short_row_groups_and_one_thread_go_through_one_writer(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_io, "PIECES_MIN_ROWS", 1000)
    t = _table(3000, seed=5)
    path = str(tmp_path / "o.parquet")
    for rg, pieces in ((999, 0), (1000, 1), (None, 1)):
        stitched = _Spy(monkeypatch, parquet_parts, "write")
        t.toparquet(path, row_group_size=rg)
        assert stitched.calls == pieces
        with open(path, "rb") as f:
            assert f.read() == _pyarrows_file(t, rg)
    t = _table(999, seed=5)
    stitched = _Spy(monkeypatch, parquet_parts, "write")
    t.toparquet(path)
    assert stitched.calls == 0 and pq.read_table(path).equals(pa.table(t))
    # one thread asked for (blzarr.set_nthreads(1)): one writer, its next row group made on the side
    t = _table(3000, seed=5)
    monkeypatch.setattr(parquet_io, "get_nthreads", lambda: 1)
    stitched = _Spy(monkeypatch, parquet_parts, "write")
    t.toparquet(path)
    assert stitched.calls == 0 and pq.read_table(path).equals(pa.table(t))


def test_an_empty_table_and_one_row(tmp_path):
    for n in (0, 1):
        t = _table(n)
        path = str(tmp_path / f"o{n}.parquet")
        t.toparquet(path)
        back = pq.read_table(path)
        assert back.num_rows == n and back.equals(pa.table(t))
        if n:
            with open(path, "rb") as f:
                assert f.read() == _pyarrows_file(t, None)
    assert blzarr.ctable.fromparquet(str(tmp_path / "o1.parquet"))["key"][:].tolist() == t["key"][:].tolist()
