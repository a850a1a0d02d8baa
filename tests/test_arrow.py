"""ctables and Arrow: the PyCapsule stream read by pyarrow, Polars and DuckDB, fromarrow, Parquet
files (round trips and interrupted writes), and pandas round trips that keep missing values, time
zones and the index."""

import errno
import os
import signal
import subprocess
import sys
import itertools
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import blzarr
from blzarr import ctable
from blzarr.storage import fileio
from blzarr.io import arrow as arrow_io, colmeta, parquet as parquet_io
from helpers import examples

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

_SEQ = itertools.count()   # fresh names per example (hypothesis seeds NumPy's global generator)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _table(n, rootdir=None, fmt="blz", chunklen=None):
    """A ctable of every kind of column the stream exports, with nulls in some (Arrow side known)."""
    rng = np.random.default_rng(n)
    ints = rng.integers(-1000, 1000, n)
    words = np.array(["", "a", "héllo", "日本語", "x\x00y", "zz"])[rng.integers(0, 6, n)]
    cols = {
        "i": ints,
        "u8": rng.integers(0, 255, n).astype("u1"),
        "f": rng.normal(size=n).astype("f4"),
        "b": ints % 3 == 0,
        "s": words,
        "by": np.array([b"", b"ab", b"a\x00b", b"\xff"], "S3")[rng.integers(0, 4, n)],
        "ts": np.datetime64("2024-03-31T00:00:00", "us") + rng.integers(0, 10 ** 11, n).astype("m8[us]"),
        "d": np.datetime64("2020-01-01", "D") + ints.astype("m8[D]"),
        "dur": ints.astype("m8[ms]"),
    }
    iv = rng.random(n) > 0.3
    sv = rng.random(n) > 0.5
    kw = {} if chunklen is None else {"chunklen": chunklen}
    names = list(cols) + ["i_valid", "s_valid"]
    t = ctable(list(cols.values()) + [iv, sv], names, rootdir=rootdir, mode="w" if rootdir else None,
               **({"format": fmt} if rootdir else {}), **kw)
    t.cols["i"].attrs[colmeta.VALIDITY] = "i_valid"
    t.cols["s"].attrs[colmeta.VALIDITY] = "s_valid"
    t.cols["ts"].attrs[colmeta.TIMEZONE] = "Europe/Paris"
    return t, cols, {"i": iv, "s": sv}


def _expected_pylists(cols, valid):
    """The Python values pyarrow should give for `_table`'s columns."""
    out = {}
    for k, v in cols.items():
        vals = v.tolist()
        if k in valid:
            vals = [x if ok else None for x, ok in zip(vals, valid[k])]
        out[k] = vals
    return out


@pytest.mark.parametrize("n", [0, 1, 5000, 70_001])
def test_stream_read_by_pyarrow(n):
    t, cols, valid = _table(n, chunklen=997)
    at = pa.table(t)
    assert at.column_names == list(cols)
    assert at.schema.field("ts").type == pa.timestamp("us", tz="Europe/Paris")
    assert at.schema.field("d").type == pa.date32()
    assert at.schema.field("dur").type == pa.duration("ms")
    exp = _expected_pylists(cols, valid)
    got = at.to_pydict()
    for k in cols:
        if k == "ts":
            assert at.column("ts").cast(pa.int64()).to_pylist() == cols["ts"].astype("i8").tolist()
        elif k == "d":
            assert at.column("d").cast(pa.int32()).to_pylist() == cols["d"].astype("i8").tolist()
        elif k == "dur":
            assert at.column("dur").cast(pa.int64()).to_pylist() == cols["dur"].astype("i8").tolist()
        elif k == "f":
            np.testing.assert_array_equal(at.column("f").to_numpy(), cols["f"])
        else:
            assert got[k] == exp[k], k
    assert pa.schema(t) == at.schema                     # __arrow_c_schema__
    if n:
        # batches hold whole chunks: every batch but the last a multiple of the widest chunk
        sizes = [b.num_rows for b in pa.RecordBatchReader.from_stream(t)]
        widest = max(c.chunklen for c in t.cols.values())
        assert all(s % widest == 0 for s in sizes[:-1]) and sum(sizes) == n


def test_stream_read_by_polars_and_duckdb():
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    pd = pytest.importorskip("pandas")
    n = 100_003
    t, cols, valid = _table(n, chunklen=4096)
    df = pl.DataFrame(t)
    assert df.columns == list(cols)
    iv = valid["i"]
    np.testing.assert_array_equal(df["i"].is_null().to_numpy(), ~iv)
    np.testing.assert_array_equal(df["i"].drop_nulls().to_numpy(), cols["i"][iv])
    np.testing.assert_array_equal(df["f"].to_numpy(), cols["f"])
    np.testing.assert_array_equal(df["b"].to_numpy(), cols["b"])
    s = df["s"].to_list()
    assert s == [x if ok else None for x, ok in zip(cols["s"].tolist(), valid["s"])]
    assert str(df["ts"].dtype.time_zone) == "Europe/Paris"
    np.testing.assert_array_equal(df["ts"].dt.epoch("us").to_numpy(), cols["ts"].astype("i8"))
    # DuckDB finds the Python variable `t` by its name (a replacement scan of the stream)
    got = duckdb.sql("SELECT count(*), count(i), sum(i), sum(CASE WHEN b THEN 1 ELSE 0 END), "
                     "count(s), min(d) FROM t").fetchall()[0]
    assert got[0] == n and got[1] == iv.sum() and got[2] == cols["i"][iv].sum()
    assert got[3] == cols["b"].sum() and got[4] == valid["s"].sum()
    assert pd.Timestamp(got[5]) == pd.Timestamp(cols["d"].min())
    by = duckdb.sql("SELECT b, sum(f::DOUBLE) AS x FROM t GROUP BY b ORDER BY b").fetchall()
    f64 = cols["f"].astype("f8")
    assert by[0][1] == pytest.approx(f64[~cols["b"]].sum()) and by[1][1] == pytest.approx(f64[cols["b"]].sum())


def test_stream_casts_to_a_requested_schema():
    t = ctable([np.arange(5), np.arange(5) * 0.5], names=["a", "b"])
    want = pa.schema([("a", pa.float64()), ("b", pa.float32())])
    capsule = t.__arrow_c_stream__(want.__arrow_c_schema__())

    class Given:
        def __arrow_c_stream__(self, requested_schema=None):
            return capsule
    got = pa.RecordBatchReader.from_stream(Given()).read_all()
    assert got.schema == want
    assert got.to_pydict() == {"a": [0.0, 1.0, 2.0, 3.0, 4.0], "b": [0.0, 0.5, 1.0, 1.5, 2.0]}


def test_stream_refuses_columns_without_arrow_type():
    t = ctable([np.zeros(3, complex), np.arange(3)], names=["z", "a"])
    with pytest.raises(TypeError, match="'z'"):
        pa.table(t)
    t = ctable([np.zeros((3, 2)), np.arange(3)], names=["m", "a"])
    with pytest.raises(ValueError, match="'m'.*1-d"):
        pa.table(t)


def test_missing_pyarrow_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    t = ctable([np.arange(3)], names=["a"])
    with pytest.raises(ImportError, match="pip install pyarrow"):
        t.__arrow_c_stream__()
    with pytest.raises(ImportError, match="pip install pyarrow"):
        t.toparquet("x.parquet")


# ------------------------------------------------------------------------------ fromarrow
_ARROW_TYPES = {
    "i1": pa.int8(), "i8": pa.int64(), "u2": pa.uint16(), "u8": pa.uint64(), "f4": pa.float32(),
    "f8": pa.float64(), "b": pa.bool_(), "s": pa.string(), "ls": pa.large_string(), "by": pa.binary(),
    "ts": pa.timestamp("ns", tz="America/New_York"), "tsn": pa.timestamp("ms"), "d32": pa.date32(),
    "dur": pa.duration("us"),
}


def _values(kind, draw, n):
    typ = _ARROW_TYPES[kind]
    if pa.types.is_boolean(typ):
        el = st.booleans()
    elif pa.types.is_integer(typ):
        el = st.integers(-(2 ** (typ.bit_width - 1)) if pa.types.is_signed_integer(typ) else 0,
                         2 ** (typ.bit_width - (1 if pa.types.is_signed_integer(typ) else 0)) - 1)
    elif pa.types.is_floating(typ):
        el = st.floats(width=typ.bit_width, allow_nan=False)
    elif kind in ("s", "ls"):
        el = st.text(st.characters(exclude_categories=["Cs"]), max_size=6).filter(lambda s: not s.endswith("\x00"))
    elif kind == "by":
        el = st.binary(max_size=5).filter(lambda s: not s.endswith(b"\x00"))
    elif kind == "d32":
        el = st.integers(-700_000, 700_000)
    else:
        el = st.integers(-10 ** 12, 10 ** 12)
    return draw(st.lists(st.one_of(st.none(), el) if draw(st.booleans()) else el, min_size=n, max_size=n))


@st.composite
def arrow_tables(draw):
    n = draw(st.integers(0, 300))
    kinds = draw(st.lists(st.sampled_from(sorted(_ARROW_TYPES)), min_size=1, max_size=5, unique=True))
    arrays = [pa.array(_values(k, draw, n), type=_ARROW_TYPES[k]) for k in kinds]
    table = pa.table(arrays, names=[f"c_{k}" for k in kinds])
    nb = draw(st.integers(1, 4))
    return table, max(1, n // nb)


def _same(got, table):
    """`got` (a pyarrow Table from a ctable) holds `table`'s values (nulls included)."""
    assert got.column_names == table.column_names
    for name in table.column_names:
        exp, have = table.column(name), got.column(name)
        if pa.types.is_large_string(exp.type):
            exp = exp.cast(pa.string())
        assert have.type == exp.type, name
        assert have.to_pylist() == exp.to_pylist(), name


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])
@given(data=arrow_tables(), fmt=st.sampled_from([None, "blz", "bcolz"]), stream=st.booleans(),
       chunklen=st.sampled_from([None, 7, 64]))
def test_fromarrow_roundtrip(tmp_path, data, fmt, stream, chunklen):
    table, batch = data
    src = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(batch)) if stream else table
    kw = {} if chunklen is None else {"chunklen": chunklen}
    root = None if fmt is None else str(tmp_path / f"t{next(_SEQ)}")
    t = ctable.fromarrow(src, rootdir=root, mode="w", **({"format": fmt} if fmt else {}), **kw)
    assert len(t) == table.num_rows
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            width = max([len(s) for s in col.to_pylist() if s is not None] or [1]) or 1
            assert t.dtype[name] == np.dtype(f"U{width}")
        has_nulls = col.null_count > 0 and not pa.types.is_temporal(col.type)
        assert (colmeta.validity_of(t, name) is not None) == has_nulls
    _same(pa.table(t), table)
    if root is not None:
        _same(pa.table(blzarr.open(root, mode="r")), table)


def test_fromarrow_widens_and_adds_validity_mid_stream():
    b1 = pa.record_batch([pa.array([1, 2]), pa.array(["a", "b"])], names=["n", "s"])
    b2 = pa.record_batch([pa.array([None, 4]), pa.array(["longer", None])], names=["n", "s"])
    t = ctable.fromarrow(pa.RecordBatchReader.from_batches(b1.schema, [b1, b2]), chunklen=1)
    assert t.dtype["s"] == np.dtype("U6")
    assert t.names == ["n", "n_valid", "s", "s_valid"]
    assert pa.table(t).to_pydict() == {"n": [1, 2, None, 4], "s": ["a", "b", "longer", None]}


def test_fromarrow_refuses_what_a_ctable_cannot_hold():
    with pytest.raises(TypeError, match="'l'"):
        ctable.fromarrow(pa.table({"a": [1], "l": [[1, 2]]}))
    with pytest.raises(TypeError, match="'dec'"):
        ctable.fromarrow(pa.table({"dec": pa.array([1], pa.decimal128(5, 2))}))
    with pytest.raises(ValueError, match="'s'.*NUL"):
        ctable.fromarrow(pa.table({"s": ["ab\x00"]}))
    with pytest.raises(ValueError, match="bad name"):
        ctable.fromarrow(pa.table({"bad name": [1]}))
    with pytest.raises(TypeError, match="Arrow data"):
        ctable.fromarrow([1, 2, 3])
    d = pa.table({"k": pa.array(["x", "y", "x"]).dictionary_encode()})
    assert ctable.fromarrow(d)["k"][:].tolist() == ["x", "y", "x"]


def test_fromarrow_polars_and_duckdb_sources(tmp_path):
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    df = pl.DataFrame({"a": [1, None, 3], "s": ["x", "yy", None]})
    t = ctable.fromarrow(df, rootdir=str(tmp_path / "p"))
    assert pa.table(t).to_pydict() == {"a": [1, None, 3], "s": ["x", "yy", None]}
    rel = duckdb.sql("SELECT range AS r, (range * 0.5)::DOUBLE AS h FROM range(10000)")
    t = ctable.fromarrow(rel)
    np.testing.assert_array_equal(t["r"][:], np.arange(10000))
    np.testing.assert_array_equal(t["h"][:], np.arange(10000) * 0.5)


def test_fromarrow_into_an_existing_rootdir(tmp_path):
    root = str(tmp_path / "t")
    ctable.fromarrow(pa.table({"a": [1, 2]}), rootdir=root)
    with pytest.raises(blzarr.StorageError, match="already exists"):
        ctable.fromarrow(pa.table({"a": [3]}), rootdir=root)
    t = ctable.fromarrow(pa.table({"b": [3]}), rootdir=root, mode="w")
    assert t.names == ["b"] and blzarr.open(root)["b"][:].tolist() == [3]
    assert sorted(os.listdir(tmp_path)) == ["t"]


# ------------------------------------------------------------------------------ Parquet
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])
@given(data=arrow_tables(), fmt=st.sampled_from([None, "blz", "bcolz"]), rg=st.sampled_from([None, 5, 64]))
def test_parquet_roundtrip(tmp_path, data, fmt, rg):
    table, _ = data
    table = table.select([c for c in table.column_names if c != "c_dur"])   # Parquet has no duration
    if not table.num_columns:
        return
    k = next(_SEQ)
    src = str(tmp_path / f"in{k}.parquet")
    pq.write_table(table, src, row_group_size=rg or 1000)
    root = None if fmt is None else str(tmp_path / f"t{k}")
    t = ctable.fromparquet(src, rootdir=root, **({"format": fmt} if fmt else {}))
    _same(pa.table(t), table)
    out = str(tmp_path / f"out{k}.parquet")
    t.toparquet(out, row_group_size=rg)
    back = pq.read_table(out)
    _same(back, table)
    if rg and table.num_rows:
        assert pq.ParquetFile(out).metadata.row_group(0).num_rows <= rg


@pytest.mark.parametrize("fmt", [None, "blz", "bcolz"])
def test_fromparquet_and_fromarrow_chunks_sized_for_all_rows(tmp_path, fmt):
    n = 200_000
    cols = {"a": np.arange(n), "f": np.arange(n) * 0.5, "b": np.arange(n) % 3 == 0,
            "s": np.array(["ab", "cde"])[np.arange(n) % 2]}
    src = str(tmp_path / "in.parquet")
    table = pa.table(cols)
    pq.write_table(table, src, row_group_size=30_000)
    kw = {} if fmt is None else {"rootdir": str(tmp_path / "t"), "mode": "w", "format": fmt}
    like = ctable(list(cols.values()), list(cols))             # the chunks of a table of these arrays
    for t in (ctable.fromparquet(src, **kw), ctable.fromarrow(table, **kw)):
        assert [t.cols[c].chunklen for c in cols] == [like.cols[c].chunklen for c in cols]
        assert pa.table(t).cast(table.schema).equals(table)
    t = ctable.fromparquet(src, chunklen=1000)                      # what the caller asks for wins
    assert {t.cols[c].chunklen for c in cols} == {1000}


def test_parquet_pandas_file_and_columns(tmp_path):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": np.arange(50_000), "s": [f"k{i % 7}" for i in range(50_000)],
                       "when": pd.date_range("2024-01-01", periods=50_000, freq="min", tz="Asia/Tokyo")})
    path = str(tmp_path / "df.parquet")
    df.to_parquet(path, index=False, row_group_size=7000)
    t = ctable.fromparquet(path, columns=["when", "a"])
    assert t.names == ["when", "a"]
    assert colmeta.get(t.cols["when"], colmeta.TIMEZONE) == "Asia/Tokyo"
    back = t.todataframe()
    pd.testing.assert_frame_equal(back, df[["when", "a"]])
    with pytest.raises(KeyError, match="nope"):
        ctable.fromparquet(path, columns=["nope"])
    with pytest.raises(blzarr.StorageError, match="does not exist"):
        ctable.fromparquet(str(tmp_path / "missing.parquet"))
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(blzarr.StorageError, match="bad.parquet"):
        ctable.fromparquet(str(bad))


def _old_file(tmp_path):
    path = str(tmp_path / "out.parquet")
    pq.write_table(pa.table({"old": [1, 2, 3]}), path)
    return path


def _assert_old_or_new(path, t):
    got = pq.read_table(path)
    if got.column_names == ["old"]:
        assert got.column("old").to_pylist() == [1, 2, 3]
    else:
        _same(got, pa.table(t))


@pytest.mark.parametrize("fault", ["enospc", "interrupt"])
def test_toparquet_interrupted_leaves_the_old_file(tmp_path, monkeypatch, fault):
    t, _, _ = _table(300_000)
    path = _old_file(tmp_path)
    if fault == "enospc":
        calls = {"n": 0}
        real = fileio.write

        def failing(fd, data):
            calls["n"] += 1
            if calls["n"] > 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            real(fd, data)
        monkeypatch.setattr(fileio, "write", failing)
        with pytest.raises(OSError):
            t.toparquet(path, row_group_size=70_000)
    else:
        real = arrow_io._Export.array
        calls = {"n": 0}

        def interrupted(self, j, s, e):
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt
            return real(self, j, s, e)
        monkeypatch.setattr(arrow_io._Export, "array", interrupted)
        with pytest.raises(KeyboardInterrupt):
            t.toparquet(path, row_group_size=70_000)
    assert calls["n"] > 3                                          # the fault was reached
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["out.parquet"]
    assert pq.read_table(path).to_pydict() == {"old": [1, 2, 3]}
    t.toparquet(path, row_group_size=70_000)                       # a retry works
    assert pq.read_table(path).equals(pa.table(t))                 # (Arrow's comparison: _same's lists take seconds)


@pytest.mark.parametrize("fault", ["enospc", "interrupt"])
def test_fromparquet_interrupted_leaves_the_old_table(tmp_path, monkeypatch, fault):
    src = str(tmp_path / "in.parquet")
    n = 200_000
    pq.write_table(pa.table({"a": np.arange(n), "s": np.array(["ab", "c"])[np.arange(n) % 2]}), src,
                   row_group_size=20_000)
    root = str(tmp_path / "t")
    ctable([np.arange(3)], names=["old"], rootdir=root, mode="w").close()
    calls = {"n": 0}
    if fault == "enospc":
        real = fileio.pwrite

        def failing(*a, **k):
            calls["n"] += 1
            if calls["n"] > 5:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*a, **k)
        monkeypatch.setattr(fileio, "pwrite", failing)
        if hasattr(fileio, "pwritev"):
            monkeypatch.setattr(fileio, "pwritev", lambda fd, bufs, pos, where=None:
                                [failing(fd, b, pos + sum(len(x) for x in bufs[:i]), where)
                                 for i, b in enumerate(bufs)])
        real_new = fileio.write_new

        def failing_new(*a, **k):
            calls["n"] += 1
            if calls["n"] > 5:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_new(*a, **k)
        monkeypatch.setattr(fileio, "write_new", failing_new)
        with pytest.raises((OSError, blzarr.StorageError)):
            ctable.fromparquet(src, rootdir=root, mode="w", chunklen=1000)
    else:
        real = arrow_io._Builder.append

        def interrupted(self, batch):
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt
            return real(self, batch)
        monkeypatch.setattr(arrow_io._Builder, "append", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ctable.fromparquet(src, rootdir=root, mode="w")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["in.parquet", "t"]
    assert blzarr.open(root, mode="r")[:].tolist() == [(0,), (1,), (2,)]
    t = ctable.fromparquet(src, rootdir=root, mode="w")            # a retry works
    np.testing.assert_array_equal(blzarr.open(root, mode="r")["a"][:], np.arange(n))
    assert t.dtype["s"] == np.dtype("U2")


_KILL_CHILD = textwrap.dedent("""
    import sys, numpy as np, blzarr, pyarrow as pa, pyarrow.parquet as pq
    from blzarr.io import arrow as arrow_io
    what, path, src = sys.argv[1:4]
    real = arrow_io._Builder.append if what == "from" else arrow_io._Export.array
    calls = [0]
    def slow(*a):
        calls[0] += 1
        if calls[0] == 3:
            print("ready", flush=True)
            import time; time.sleep(60)
        return real(*a)
    if what == "from":
        arrow_io._Builder.append = slow
        blzarr.ctable.fromparquet(src, rootdir=path, mode="w")
    else:
        arrow_io._Export.array = slow
        t = blzarr.ctable([np.arange(300_000)], names=["a"])
        t.toparquet(path, row_group_size=70_000)
""")


@pytest.mark.slow
@pytest.mark.parametrize("what", ["from", "to"])
def test_killed_parquet_writes_leave_before(tmp_path, what):
    src = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"a": np.arange(300_000)}), src, row_group_size=50_000)
    if what == "from":
        path = str(tmp_path / "t")
        ctable([np.arange(3)], names=["old"], rootdir=path, mode="w").close()
    else:
        path = _old_file(tmp_path)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", _KILL_CHILD, what, path, src], stdout=subprocess.PIPE, env=env)
    assert p.stdout.readline().strip() == b"ready"
    p.send_signal(signal.SIGKILL)
    p.wait()
    if what == "from":
        assert blzarr.open(path, mode="r")[:].tolist() == [(0,), (1,), (2,)]
        assert any(n.startswith(".t.building-") for n in os.listdir(tmp_path))   # the killed build's
        ctable.fromparquet(src, rootdir=path, mode="w")
        np.testing.assert_array_equal(blzarr.open(path)["a"][:], np.arange(300_000))
        assert sorted(os.listdir(tmp_path)) == ["in.parquet", "t"]              # removed by the retry
    else:
        assert pq.read_table(path).to_pydict() == {"old": [1, 2, 3]}
        assert any(n.startswith(".out.parquet.writing-") for n in os.listdir(tmp_path))
        t = ctable([np.arange(300_000)], names=["a"])
        t.toparquet(path)
        _same(pq.read_table(path), pa.table(t))
        assert sorted(os.listdir(tmp_path)) == ["in.parquet", "out.parquet"]    # removed by the retry


# ------------------------------------------------------------------------------ pandas
def _as_given_back(pd, df):
    """`df` as todataframe gives it back: an ``object`` column of strings without a missing value
    comes back as bcolz gives it, what pandas makes of a NumPy ``U`` array (pandas' default string
    dtype); a column of bytes as what pandas makes of an ``S`` array, bytes objects (as it went in);
    everything else as it went in."""
    cols = {}
    for c in df.columns:
        kind = pd.api.types.infer_dtype(df[c], skipna=False)
        if df[c].dtype == np.dtype(object) and not df[c].isna().any() and kind in ("string", "empty"):
            cols[c] = df[c].to_numpy(dtype=str) if len(df) else np.zeros(0, "U1")
        else:
            cols[c] = df[c].reset_index(drop=True)
    return pd.DataFrame(cols, columns=list(df.columns), copy=False).set_axis(df.index)   # as todataframe builds it


def _frame(pd, n, rng):
    miss = rng.random(n) < 0.3
    words = np.array(["a", "bb", "ççç", ""], dtype=object)[rng.integers(0, 4, n)]
    s = words.copy()
    s[miss] = None
    ints = pd.array(rng.integers(-5, 5, n), dtype="Int64")
    ints[rng.random(n) < 0.2] = pd.NA
    flags = pd.array(rng.random(n) < 0.5, dtype="boolean")
    flags[rng.random(n) < 0.1] = pd.NA
    return pd.DataFrame({
        "s": pd.Series(s, dtype=object),
        "st": pd.array(words, dtype="string"),
        "i": ints,
        "u": pd.array(rng.integers(0, 9, n), dtype="UInt16"),
        "flag": flags,
        "f": np.where(miss, np.nan, rng.normal(size=n)),
        "when": pd.Series(pd.date_range("2024-10-27", periods=n, freq="7min", tz="Europe/Berlin")),
        "naive": pd.Series(pd.date_range("2024-01-01", periods=n, freq="s")),
    })


@pytest.mark.parametrize("fmt", [None, "blz", "bcolz"])
@pytest.mark.parametrize("n", [0, 1, 3000])
def test_dataframe_roundtrip_keeps_missing_zones_and_index(tmp_path, fmt, n):
    pd = pytest.importorskip("pandas")
    df = _frame(pd, n, np.random.default_rng(n))
    df.index = pd.Index(np.arange(n) * 3 + 7, name="key")
    root = None if fmt is None else str(tmp_path / "t")
    t = ctable.fromdataframe(df, index=True, rootdir=root, **({"format": fmt, "mode": "w"} if fmt else {}))
    assert all(c.dtype != np.dtype(object) for c in t.cols.values())   # no pickles
    if root is not None:
        t = blzarr.open(root, mode="r")                                  # no allow_pickle needed
    back = t.todataframe()
    pd.testing.assert_frame_equal(back, _as_given_back(pd, df))
    flat = t.todataframe(index=False)
    assert list(flat.columns) == ["key"] + list(df.columns)
    # the stream carries the same: nulls where pandas has NA, zoned timestamps
    at = pa.table(t)
    assert at.column("i").null_count == df["i"].isna().sum()
    assert at.schema.field("when").type.tz == "Europe/Berlin"
    if n:
        assert pa.table(t).column("s").to_pylist() == [None if pd.isna(x) else x for x in df["s"]]


def test_dataframe_multiindex_and_unnamed_index():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"v": [1.0, 2.0, 3.0]},
                      index=pd.MultiIndex.from_tuples([("a", 1), ("b", 2), ("a", 3)], names=[None, "n"]))
    t = ctable.fromdataframe(df, index=True)
    assert t.names == ["level_0", "n", "v"]
    pd.testing.assert_frame_equal(t.todataframe(), df)
    df2 = pd.DataFrame({"index": [1]})
    with pytest.raises(ValueError, match="rename"):
        ctable.fromdataframe(df2, index=True)
    assert ctable.fromdataframe(df2).todataframe()["index"].tolist() == [1]


def test_dataframe_with_validity_opens_in_bcolz(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("bcolz")
    root = str(tmp_path / "t")
    df = pd.DataFrame({"s": ["a", None, "ccc"], "i": pd.array([1, None, 3], dtype="Int64")})
    ctable.fromdataframe(df, rootdir=root, format="bcolz")
    code = ("import bcolz, sys; t = bcolz.open(sys.argv[1], mode='r'); "
            "print(t.names, t['s'][:].tolist(), t['s_valid'][:].tolist(), t['i'][:].tolist(), "
            "t.cols['s'].attrs['blzarr:validity'])")
    out = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True, check=True,
                         cwd=str(tmp_path)).stdout.strip()
    assert out == "['s', 's_valid', 'i', 'i_valid'] ['a', '', 'ccc'] [True, False, True] [1, 0, 3] s_valid"


def test_dangling_validity_link_warns():
    pd = pytest.importorskip("pandas")
    t = ctable.fromdataframe(pd.DataFrame({"i": pd.array([1, None], dtype="Int64")}))
    t.delcol("i_valid")
    with pytest.warns(RuntimeWarning, match="i_valid"):
        df = t.todataframe()
    assert df["i"].tolist() == [1, 0]


@pytest.mark.parametrize("rootdir", [False, True])
def test_copy_keeps_validity_and_zone(tmp_path, rootdir):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"i": pd.array([1, None, 3], dtype="Int64"),
                       "when": pd.date_range("2024-01-01", periods=3, tz="Asia/Kolkata")})
    t = ctable.fromdataframe(df)
    kw = {"rootdir": str(tmp_path / "c")} if rootdir else {}
    c = t.copy(names=["j", "j_ok", "w"], **kw)
    assert c.cols["j"].attrs[colmeta.VALIDITY] == "j_ok"
    pd.testing.assert_frame_equal(c.todataframe(), df.rename(columns={"i": "j", "when": "w"}))


@pytest.mark.slow
def test_bench_arrow_runs(tmp_path):
    pytest.importorskip("polars")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_arrow.py"), "--n", "20000",
                          "--repeats", "1", "--tmpdir", str(tmp_path), "--floor"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    for row in ("toparquet", "toparquet (fsync off)", "fromparquet (in memory)", "fromparquet (BLZ directory)", "Arrow stream into Polars",
                "pyarrow read of the row groups, coded", "Blosc compression (one thread)", "floor: "):
        assert row in out


def test_fromparquet_does_not_replace_a_table_another_process_writes(tmp_path):
    root = str(tmp_path / "t")
    ctable([np.arange(3)], names=["old"], rootdir=root, mode="w").close()
    src = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"a": [1, 2]}), src)
    code = ("import sys, time, blzarr; t = blzarr.open(sys.argv[1], mode='a'); t.attrs['x'] = 1; "
            "print('ready', flush=True); time.sleep(60)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", code, root], stdout=subprocess.PIPE, env=env)
    try:
        assert p.stdout.readline().strip() == b"ready"
        with pytest.raises(blzarr.LockError):
            ctable.fromparquet(src, rootdir=root, mode="w")
    finally:
        p.kill()
        p.wait()
    assert sorted(os.listdir(tmp_path)) == ["in.parquet", "t"]
    assert blzarr.open(root, mode="r")["old"][:].tolist() == [0, 1, 2]
    ctable.fromparquet(src, rootdir=root, mode="w")
    assert blzarr.open(root, mode="r")["a"][:].tolist() == [1, 2]


@pytest.mark.parametrize("fmt", [None, "bcolz"])
def test_parquet_written_by_pandas_comes_back_whole(tmp_path, fmt):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"v": [1.5, 2.5, None], "i": pd.array([1, None, 3], dtype="Int64"),
                       "s": ["x", None, "zz"], "b": pd.array([True, None, False], dtype="boolean")},
                      index=pd.Index(["a", "b", "c"], name="key"))
    path = str(tmp_path / "df.parquet")
    df.to_parquet(path)
    kw = {"rootdir": str(tmp_path / "t"), "format": fmt} if fmt else {}
    t = ctable.fromparquet(path, **kw)
    pd.testing.assert_frame_equal(t.todataframe(), df)          # NaN floats, NA ints, the index
    unnamed = pd.DataFrame({"v": [1, 2]}, index=pd.Index([5, 7]))
    unnamed.to_parquet(path)
    pd.testing.assert_frame_equal(ctable.fromparquet(path).todataframe(), unnamed)


_PD_KINDS = ("obj_str", "str", "Int64", "UInt8", "boolean", "float", "tz", "naive", "bytes")


@st.composite
def frames(draw):
    pd = pytest.importorskip("pandas")
    n = draw(st.integers(0, 40))
    kinds = draw(st.lists(st.sampled_from(_PD_KINDS), min_size=1, max_size=4, unique=True))
    miss = lambda: draw(st.lists(st.booleans(), min_size=n, max_size=n))   # noqa: E731
    cols = {}
    text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=5).filter(
        lambda s: not s.endswith("\x00"))
    for k in kinds:
        m = miss()
        if k in ("obj_str", "str"):
            vals = [None if x else draw(text) for x in m]
            cols[k] = pd.Series(vals, dtype=object if k == "obj_str" else "string")
        elif k == "bytes":
            cols[k] = pd.Series([draw(st.binary(min_size=1, max_size=4).filter(lambda b: not b.endswith(b"\x00")))
                                 for _ in range(n)], dtype=object)
        elif k in ("Int64", "UInt8"):
            hi = 255 if k == "UInt8" else 2 ** 62
            lo = 0 if k == "UInt8" else -hi
            cols[k] = pd.array([None if x else draw(st.integers(lo, hi)) for x in m], dtype=k)
        elif k == "boolean":
            cols[k] = pd.array([None if x else draw(st.booleans()) for x in m], dtype="boolean")
        elif k == "float":
            cols[k] = np.array([np.nan if x else draw(st.floats(allow_nan=False)) for x in m])
        else:
            secs = np.array(draw(st.lists(st.integers(0, 2 * 10 ** 9), min_size=n, max_size=n)), dtype="i8")
            vals = pd.to_datetime(secs, unit="s")
            vals = vals.where(~np.array(m, dtype=bool)) if n else vals
            cols[k] = pd.Series(vals).dt.tz_localize("UTC").dt.tz_convert("America/Sao_Paulo") \
                if k == "tz" else pd.Series(vals)
    df = pd.DataFrame(cols)
    if draw(st.booleans()):
        df.index = pd.Index(draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), name="k")
    return df


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])
@given(df=frames(), fmt=st.sampled_from([None, "blz", "bcolz"]))
def test_dataframe_roundtrip_hypothesis(tmp_path, df, fmt):
    pd = pytest.importorskip("pandas")
    index = df.index.name == "k"
    root = None if fmt is None else str(tmp_path / f"t{next(_SEQ)}")
    t = ctable.fromdataframe(df, index=index, **({"rootdir": root, "format": fmt} if fmt else {}))
    assert all(c.dtype != np.dtype(object) for c in t.cols.values())
    if root is not None:
        t = blzarr.open(root, mode="r")
    back = t.todataframe()
    if not index:
        back = back.set_axis(df.index)
    # (an empty frame's index is typed by how it was made, not by its values)
    pd.testing.assert_frame_equal(back, _as_given_back(pd, df), check_index_type="equiv" if len(df) else False)


def test_numbers_and_times_are_compressed_straight_from_the_arrow_buffers(monkeypatch):
    # a column without nulls is not copied between Arrow and the compressor: every full chunk the
    # carray compresses lies inside the Arrow array's own values buffer
    from blzarr.containers.carray import write as carray_write
    pieces = []
    compress = carray_write.compress_array

    def spy(arr, *a, **k):
        pieces.append((arr.__array_interface__["data"][0], arr.nbytes))
        return compress(arr, *a, **k)
    monkeypatch.setattr(carray_write, "compress_array", spy)
    n = 40_000
    table = pa.table({"i": pa.array(np.arange(n, dtype="i8")),
                      "t": pa.array(np.arange(n).astype("M8[us]"))})
    t = ctable.fromarrow(table, chunklen=4096)
    assert len(pieces) == 2 * (n // 4096)          # the full chunks; the short last ones are copies
    for name in ("i", "t"):
        buf = table.column(name).chunk(0).buffers()[1]
        inside = [p for p in pieces if buf.address <= p[0] and p[0] + p[1] <= buf.address + buf.size]
        assert len(inside) == n // 4096, name
    np.testing.assert_array_equal(t["i"][:], np.arange(n))
    np.testing.assert_array_equal(t["t"][:], np.arange(n).astype("M8[us]"))
