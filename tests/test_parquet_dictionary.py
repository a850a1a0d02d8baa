"""``ctable.fromparquet`` reads string and binary columns stored with a dictionary as dictionary
arrays and converts each distinct value once: the table must be the one the plain reading gives
(values, missing values, widths), whatever the row groups and the nulls."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from blzarr import ctable
from blzarr.io import arrow as arrow_io, colmeta, parquet as parquet_io

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

_SEQ = itertools.count()


def _expected(values, kind):
    """NumPy values (nulls as empty) and validity of a list of optional str/bytes."""
    empty = "" if kind == "U" else b""
    filled = [empty if v is None else v for v in values]
    width = max([len(v) for v in filled] + [1])
    return np.array(filled, dtype=f"{kind}{width}"), np.array([v is not None for v in values])


def _check(t, name, values, kind):
    want, valid = _expected(values, kind)
    got = t[name][:]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    links = colmeta.validity_columns(t)
    if valid.all():
        assert name not in links
    else:
        np.testing.assert_array_equal(t[links[name]][:], valid)


_text = st.lists(st.one_of(st.none(), st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                                              max_size=6)), min_size=0, max_size=300)
_bytes = st.lists(st.one_of(st.none(), st.binary(max_size=5).filter(lambda b: not b.endswith(b"\x00"))),
                  min_size=0, max_size=300)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=_text, blobs=_bytes, rg=st.integers(1, 120), pool=st.integers(1, 8))
def test_dictionary_columns_read_as_plain_ones(tmp_path, words, blobs, rg, pool):
    n = min(len(words), len(blobs))
    # few distinct values, so the writer keeps its dictionary
    words = [None if w is None else words[i % pool] or "x" for i, w in enumerate(words[:n])]
    blobs = blobs[:n]
    src = str(tmp_path / f"d{next(_SEQ)}.parquet")
    pq.write_table(pa.table({"w": pa.array(words, pa.string()), "b": pa.array(blobs, pa.binary()),
                             "i": np.arange(n)}), src, row_group_size=rg)
    md = pq.ParquetFile(src).metadata
    if n:
        assert parquet_io._dictionary_columns(md, ["w", "b"]) == ["w", "b"]
    t = ctable.fromparquet(src)
    _check(t, "w", words, "U")
    _check(t, "b", blobs, "S")
    np.testing.assert_array_equal(t["i"][:], np.arange(n))


def test_unused_dictionary_values_do_not_widen(tmp_path):
    # a pandas Categorical keeps categories no row uses; the column must be as wide as the rows
    pd = pytest.importorskip("pandas")
    cat = pd.Categorical(["ab", "c", None, "ab"], categories=["ab", "c", "a very long unused category"])
    src = str(tmp_path / "c.parquet")
    pd.DataFrame({"k": cat}).to_parquet(src)
    t = ctable.fromparquet(src)
    _check(t, "k", ["ab", "c", None, "ab"], "U")


def test_columns_without_dictionary_and_a_later_longer_value(tmp_path):
    n = 50_000
    words = np.where(np.arange(n) < 30_000, "ab", "a longer one").tolist()
    plain = [f"v{i}" for i in range(n)]
    src = str(tmp_path / "m.parquet")
    pq.write_table(pa.table({"w": words, "p": plain}), src, row_group_size=10_000,
                   use_dictionary=["w"])
    assert parquet_io._dictionary_columns(pq.ParquetFile(src).metadata, ["w", "p"]) == ["w"]
    t = ctable.fromparquet(src, rootdir=str(tmp_path / "t"), mode="w", columns=["p", "w"])
    assert t.names == ["p", "w"]
    _check(t, "w", words, "U")
    _check(t, "p", plain, "U")


def test_dictionary_from_a_stream(tmp_path):
    # fromarrow takes dictionary arrays the same way (a pyarrow Table of them)
    arr = pa.array(["x", None, "yz", "x", "é"]).dictionary_encode()
    t = ctable.fromarrow(pa.table({"d": arr}), rootdir=str(tmp_path / "t"), mode="w")
    _check(t, "d", ["x", None, "yz", "x", "é"], "U")


def _order_of_making_and_reading(monkeypatch):
    """Events "table" (the builder makes the ctable) and "batch" (the first record batch is taken
    from fromparquet's reading thread), in the order they happen."""
    events = []
    make = arrow_io._Builder.__init__

    def builder(self, *a, **k):
        events.append("table")
        make(self, *a, **k)
    monkeypatch.setattr(arrow_io._Builder, "__init__", builder)
    items = parquet_io._Ahead.__iter__

    def iterate(self):
        for i, item in enumerate(items(self)):
            if i == 0:
                events.append("batch")
            yield item
    monkeypatch.setattr(parquet_io._Ahead, "__iter__", iterate)
    return events


@pytest.mark.parametrize("dictionary, rootdir", [(True, True), (False, True), (True, False)])
def test_the_table_is_made_while_row_group_0_is_read(tmp_path, monkeypatch, dictionary, rootdir):
    # into a directory, with every string column stored with a dictionary, their widths come from row
    # group 0's string columns read on their own, and the table is made before the first batch is
    # awaited; a plain string column needs the first batch first, and so does a table in memory
    # (cheaper to make than the read).  The widest value only in a later row group widens
    n = 3000
    words = [("w" * (1 + i % 3)) if i < 2000 else "a longer value" for i in range(n)]
    words[5] = None
    src = str(tmp_path / "o.parquet")
    pq.write_table(pa.table({"w": pa.array(words, pa.string()), "i": np.arange(n)}), src,
                   row_group_size=1000, use_dictionary=dictionary)
    assert parquet_io._dictionary_columns(pq.ParquetFile(src).metadata, ["w"]) == (["w"] if dictionary else [])
    events = _order_of_making_and_reading(monkeypatch)
    t = ctable.fromparquet(src, rootdir=str(tmp_path / "t") if rootdir else None, mode="w" if rootdir else None)
    assert events == (["table", "batch"] if dictionary and rootdir else ["batch", "table"])
    _check(t, "w", words, "U")
    np.testing.assert_array_equal(t["i"][:], np.arange(n))


def test_a_first_batch_dictionary_column_is_taken_apart_once(monkeypatch):
    # the widths of the first batch and its conversion share one _dict_parts per column
    calls = []
    parts = arrow_io._dict_parts

    def spy(*a, **k):
        calls.append(1)
        return parts(*a, **k)
    monkeypatch.setattr(arrow_io, "_dict_parts", spy)
    values = [["ab", None, "c"], ["ab", "def", "ab"], ["ghij", "c", None]]
    schema = pa.schema([pa.field("d", pa.dictionary(pa.int32(), pa.string()))])
    batches = [pa.record_batch([pa.array(v).dictionary_encode()], schema=schema) for v in values]
    t = ctable.fromarrow(pa.RecordBatchReader.from_batches(schema, batches))
    assert len(calls) == len(batches)
    _check(t, "d", sum(values, []), "U")


@pytest.mark.parametrize("index_type", ["int8", "uint16", "int32", "int64"])
@pytest.mark.parametrize("kind", ["U", "S"])
def test_dictionary_rows_are_gathered_by_arrow_take(monkeypatch, index_type, kind):
    # a dictionary column's rows are gathered by Arrow's take over the dictionary seen as fixed-size
    # binary, straight from the Arrow indices of any integer type: nulls in the indices and in the
    # dictionary, a dictionary value wider than every row, a batch sliced at an offset, a row that
    # points at a null dictionary value
    import pyarrow.compute as pc
    calls = []
    take = pc.take

    def spy(values, indices, *a, **k):
        calls.append((values.type, indices.type))
        return take(values, indices, *a, **k)
    monkeypatch.setattr(pc, "take", spy)
    conv = (lambda v: v) if kind == "U" else (lambda v: None if v is None else v.encode())
    words = [conv(w) for w in ["ab", None, "é", "ab", "xyz", None, "ab", "c"]]
    dictionary = pa.array([conv(w) for w in ["ab", "é", "xyz", "a value no row uses", "c", None]],
                          pa.string() if kind == "U" else pa.binary())
    pos = {w: i for i, w in enumerate(dictionary.to_pylist())}
    codes = [None if w is None else pos[w] for w in words]
    codes[3] = 5                                  # this row points at the dictionary's null
    words[3] = None
    arr = pa.DictionaryArray.from_arrays(pa.array(codes, getattr(pa, index_type)()), dictionary)
    batch = pa.record_batch([arr], names=["d"]).slice(1)
    t = ctable.fromarrow(pa.table(batch))
    _check(t, "d", words[1:], kind)
    assert any(pa.types.is_fixed_size_binary(v) and i == getattr(pa, index_type)() for v, i in calls)


def test_dictionary_rows_gathered_without_nulls_are_not_copied(monkeypatch):
    # without nulls the gathered values are Arrow's output buffer as it is, given to the table
    seen = []
    append = arrow_io.ctable.append

    def spy(self, cols, *a, **k):
        seen.extend(c for c in cols if c.dtype.kind == "U")
        return append(self, cols, *a, **k)
    monkeypatch.setattr(arrow_io.ctable, "append", spy)
    arr = pa.array(["ab", "c", "ab"] * 100).dictionary_encode()
    t = ctable.fromarrow(pa.table({"d": arr}))
    assert seen and all(isinstance(v.base, pa.Buffer) for v in seen)
    _check(t, "d", ["ab", "c", "ab"] * 100, "U")
