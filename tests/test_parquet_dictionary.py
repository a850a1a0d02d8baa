"""``ctable.fromparquet`` reads string and binary columns stored with a dictionary as dictionary
arrays and converts each distinct value once: the table must be the one the plain reading gives
(values, missing values, widths), whatever the row groups and the nulls."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from blzarr import ctable
from blzarr.io import colmeta, parquet as parquet_io

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
