"""The group-by's reads of whole chunks through the columns' chunk readers (`carray.chunk_reader`,
BLZ: `storage.blz.read.ChunkReader`): the same results as pandas, every descriptor released after,
the chunks remembered as verified, and a chunk the one-call path cannot read (a damaged header) sent
to the chunk-by-chunk read, which names it.

The tables are written without checksums, so the one-call path applies with or without zlib-ng's C
checksums (crc32 tables take it only with them)."""

import os

import numpy as np
import pandas as pd
import pytest

import blzarr
from blzarr.errors import BlzarrError
from blzarr.query import groupby as gbmod
from blzarr.storage.blz import read as blzread

CL = 1024               # chunks of the engine's smallest block (patched below): one block, one chunk


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(gbmod, "MIN_BLEN", CL)


def _table(path, n, superchunklen=2, seed=3):
    """A BLZ table at `path` whose columns have no checksums and `superchunklen` chunks a file."""
    rng = np.random.default_rng(seed)
    cols = {"k": rng.integers(0, 500, n).astype(np.int64), "s": np.char.add(b"k", rng.integers(0, 40, n).astype("S3")),
            "v": rng.integers(-5, 6, n).astype(np.int64), "x": np.round(rng.random(n) * 100, 3)}
    with blzarr.defaults_ctx(fsync=False):
        blzarr.ctable(list(cols.values()), names=list(cols), rootdir=path, mode="w", chunklen=CL)
        for name, vals in cols.items():
            blzarr.carray(vals, rootdir=os.path.join(path, name), mode="w", chunklen=CL, checksum=None,
                          superchunklen=superchunklen).flush()
    return pd.DataFrame(cols)


@pytest.fixture
def counted(monkeypatch):
    """The chunks read through ChunkReader.read, and the ones sent on to decode_chunk_into."""
    seen = {"reader": [], "slow": []}
    read, slow = blzread.ChunkReader.read, blzread.BlzReads.decode_chunk_into

    def counting_read(self, n, out):
        seen["reader"].append(n)
        return read(self, n, out)

    def counting_slow(self, n, out, *args, **kwargs):
        seen["slow"].append(n)
        return slow(self, n, out, *args, **kwargs)
    monkeypatch.setattr(blzread.ChunkReader, "read", counting_read)
    monkeypatch.setattr(blzread.BlzReads, "decode_chunk_into", counting_slow)
    return seen


@pytest.mark.parametrize("nthreads", [1, 2])
def test_groupby_through_chunk_readers_matches_pandas(tmp_path, counted, nthreads):
    n = 11 * CL + 123                     # 11 full chunks (6 files of 2) and a short last one
    df = _table(str(tmp_path / "t"), n)
    t = blzarr.open(str(tmp_path / "t"), mode="r")
    prev = blzarr.set_nthreads(nthreads)
    try:
        got = t.groupby(["k"], [["v", "sum", "v"], ["x", "mean", "x"]], out_flavor="pandas")
    finally:
        blzarr.set_nthreads(prev)
    # every full chunk of both value columns and of the key went through the readers, once
    assert sorted(counted["reader"]) == sorted(list(range(11)) * 3)
    assert counted["slow"] == []
    ref = df.groupby("k", sort=False).agg(v=("v", "sum"), x=("x", "mean")).reset_index()
    np.testing.assert_array_equal(got["k"].to_numpy(), ref["k"].to_numpy())
    np.testing.assert_array_equal(got["v"].to_numpy(), ref["v"].to_numpy())
    np.testing.assert_allclose(got["x"].to_numpy(), ref["x"].to_numpy(), rtol=1e-12)
    for name in ("k", "v", "x"):
        d = t[name]._chunks.layoutdir
        assert d._inuse == {}             # no descriptor left pinned
        verified = set().union(*(f.verified for f in d._files.values()))
        assert set(range(11)) <= verified


def test_string_keys_and_a_filter(tmp_path, counted):
    n = 5 * CL + 7
    df = _table(str(tmp_path / "t"), n)
    t = blzarr.open(str(tmp_path / "t"), mode="r")
    keep = (df["v"] > 0).to_numpy()
    got = t.groupby(["s"], [["x", "sum", "x"]], bool_arr=keep, out_flavor="pandas")
    assert counted["reader"]              # the chunk readers were used
    ref = df[keep].groupby("s", sort=False).agg(x=("x", "sum")).reset_index()
    np.testing.assert_array_equal(got["s"].to_numpy(), ref["s"].to_numpy())
    np.testing.assert_allclose(got["x"].to_numpy(), ref["x"].to_numpy(), rtol=1e-12)


def test_runs_of_more_files_than_pinned_at_once(tmp_path):
    """One chunk a file: a thread's run crosses several jobs of FD_CACHE files."""
    n = 20 * CL
    df = _table(str(tmp_path / "t"), n, superchunklen=1)
    t = blzarr.open(str(tmp_path / "t"), mode="r")
    col = t["v"]
    r = col.chunk_reader(0, 20)
    assert r is not None
    out = np.empty(CL, np.int64)
    for k in range(20):
        np.testing.assert_array_equal(r.read(k, out), df["v"].to_numpy()[k * CL:(k + 1) * CL])
        assert 0 < len(col._chunks.layoutdir._inuse) <= blzread.FD_CACHE
    r.close()
    assert col._chunks.layoutdir._inuse == {}
    r.close()                             # a second close is harmless


def test_a_damaged_chunk_goes_to_the_slow_read_which_names_it(tmp_path, counted):
    n = 6 * CL
    _table(str(tmp_path / "t"), n)
    t = blzarr.open(str(tmp_path / "t"), mode="r")
    d = t["v"]._chunks.layoutdir
    f, fd, off = d._reads.offset(d, 3)
    with open(f.path, "r+b") as fh:       # chunk 3's Blosc blocksize: 0, an invalid header
        fh.seek(off + 8)
        fh.write(b"\0\0\0\0")
    t = blzarr.open(str(tmp_path / "t"), mode="r")
    with pytest.raises(BlzarrError, match="chunk 3|blocksize"):
        t.groupby(["k"], [["v", "sum", "v"]])
    assert 3 in counted["reader"] and 3 in counted["slow"]
    assert t["v"]._chunks.layoutdir._inuse == {}


def test_stores_without_the_reads_give_none(tmp_path):
    assert blzarr.carray(np.arange(3 * CL), chunklen=CL).chunk_reader(0, 3) is None
    bc = blzarr.carray(np.arange(3 * CL), chunklen=CL, rootdir=str(tmp_path / "b"), mode="w", format="bcolz")
    assert bc.chunk_reader(0, 3) is None
    blz = blzarr.carray(np.arange(3 * CL), chunklen=CL, rootdir=str(tmp_path / "z"), mode="w")
    blz.flush()
    assert blz.chunk_reader(0, 4) is None          # past the full chunks


def test_a_job_that_cannot_be_set_up_leaves_the_chunks_to_the_slow_reads(tmp_path, counted, monkeypatch):
    from blzarr.errors import FormatError
    from blzarr.storage.blz import local
    asked = []

    def failing(self, d, ns, expected_nbytes):
        asked.append(int(ns[0]))
        raise FormatError("injected: a file header read while a writer replaced the file")
    monkeypatch.setattr(local.FileReads, "whole_work", failing)
    df = _table(str(tmp_path / "t"), 4 * CL + 5)
    t = blzarr.open(str(tmp_path / "t"), mode="r")
    got = t.groupby(["k"], [["v", "sum", "v"]], out_flavor="pandas")
    assert asked                          # the injected failure was reached
    assert sorted(counted["slow"]) == sorted(list(range(4)) * 2)
    ref = df.groupby("k", sort=False).agg(v=("v", "sum")).reset_index()
    np.testing.assert_array_equal(got["k"].to_numpy(), ref["k"].to_numpy())
    np.testing.assert_array_equal(got["v"].to_numpy(), ref["v"].to_numpy())
