"""Chunk statistics of carrays on object storage (blzarr.storage.objstats): meta/stats is written as an
object, read by a new session, checked against the version tags of the objects holding the chunks
(no request per chunk), and then lets a query skip chunks without fetching them; an entry whose
chunk was rewritten behind its back is never trusted.  moto's S3 server (conftest.py), both layouts;
fsspec's memory filesystem, which gives no version tags."""

import io
import json
import uuid

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from helpers import examples

import blzarr
from blzarr.cli import main

CHUNKLEN = 5000
N = 40 * CHUNKLEN


def layout_kw(fmt):
    return {"format": fmt, **({"superchunklen": 8} if fmt == "blz" else {})}


def requests(r):
    """All requests the carray's byte store made so far (gets, lists, heads, puts)."""
    s = r._bytestore.stats
    return s["get"] + s["list"] + s["head"] + s["put"]


def fs_of(opts):
    import s3fs
    return s3fs.S3FileSystem(**opts)


def make(url, opts, fmt, a):
    c = blzarr.carray(a, rootdir=url, mode="w", chunklen=CHUNKLEN, storage_options=opts, **layout_kw(fmt))
    c.flush()
    return c


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_new_session_skips_chunks_by_stored_statistics(s3, fmt):
    base, opts = s3
    url = f"{base}/x"
    a = np.arange(N, dtype="f8") * 0.5
    make(url, opts, fmt, a)
    assert fs_of(opts).exists(f"{url}/meta/stats")

    r = blzarr.open(url, mode="r", storage_options=opts)
    before = requests(r)
    assert r.stats_state() == {"chunks": 40, "known": 40, "unchecked": 0}
    assert requests(r) == before            # checked against the tags of the listing: no request
    lo = 0.5 * (N - 2 * CHUNKLEN) + 3.0
    g = r._bytestore.stats["get"]
    b = r._bytestore.stats["get_bytes"]
    got = r["r >= lo"]
    # the operand's first row (a dtype probe) and the two chunks holding matches, not 40: 3 GETs
    # of about 4 KB (without meta/stats, below: 40 to 43 GETs of 70 to 95 KB)
    assert r._bytestore.stats["get"] - g <= 3
    assert r._bytestore.stats["get_bytes"] - b < 8_000
    np.testing.assert_array_equal(got, a[a >= lo])
    g = r._bytestore.stats["get"]
    np.testing.assert_array_equal(np.fromiter(r.where("r >= lo"), "f8"), a[a >= lo])
    assert r._bytestore.stats["get"] - g <= 3       # where() fetches the values of those chunks only
    g = r._bytestore.stats["get"]
    assert r.searchsorted(12_345.5) == np.searchsorted(a, 12_345.5)
    assert r._bytestore.stats["get"] - g <= 1

    # without meta/stats a new session reads every chunk for the same query
    fs_of(opts).rm_file(f"{url}/meta/stats")
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r.stats_state() == {"chunks": 40, "known": 0, "unchecked": 0}
    g = r._bytestore.stats["get"]
    b = r._bytestore.stats["get_bytes"]
    np.testing.assert_array_equal(r["r >= lo"], a[a >= lo])
    assert r._bytestore.stats["get"] - g >= 40
    assert r._bytestore.stats["get_bytes"] - b > 60_000


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_query_results_equal_numpy_with_stored_statistics(s3, fmt):
    base, opts = s3
    url = f"{base}/x"
    rng = np.random.default_rng(7)
    a = np.repeat(rng.uniform(-100, 100, 40), CHUNKLEN) + rng.uniform(0, 1, N)  # one level a chunk
    a[rng.integers(0, N, 50)] = np.nan
    a[7 * CHUNKLEN:8 * CHUNKLEN] = np.nan                                        # a chunk of NaN only
    make(url, opts, fmt, a)
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r.stats_state()["known"] == 40
    for lo, hi in [(-50.0, -20.0), (10.0, 10.5), (99.0, 200.0), (-1e9, 1e9)]:
        np.testing.assert_array_equal(r["(r > lo) & (r <= hi)"], a[(a > lo) & (a <= hi)])
        assert r.where("(r > lo) & (r <= hi)").count() == np.count_nonzero((a > lo) & (a <= hi))


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_statistics_of_chunks_rewritten_behind_their_back_are_not_trusted(s3, fmt):
    """Another writer rewrites a chunk and meta/stats is put back as it was (a writer killed before
    it stored the statistics): the entry of that chunk is stale, found so, and the query equals NumPy."""
    base, opts = s3
    url = f"{base}/x"
    fs = fs_of(opts)
    a = np.arange(N, dtype="f8")
    make(url, opts, fmt, a)
    old_stats = fs.cat_file(f"{url}/meta/stats")

    w = blzarr.open(url, mode="a", storage_options=opts)
    w[3 * CHUNKLEN + 10] = 1e9
    a[3 * CHUNKLEN + 10] = 1e9
    w.flush()
    del w
    fs.pipe_file(f"{url}/meta/stats", old_stats)

    r = blzarr.open(url, mode="r", storage_options=opts)
    # BLZ: the 8 chunks of the superchunk file that changed are dropped; bcolz: the chunk's object
    assert r.stats_state() == {"chunks": 40, "known": 32 if fmt == "blz" else 39, "unchecked": 0}
    np.testing.assert_array_equal(r["r > 1e8"], a[a > 1e8])
    assert r.where("r > 1e8").count() == 1

    # a writer's query computes them again and stores them: known again in a new session
    w = blzarr.open(url, mode="a", storage_options=opts)
    w.append([N + 1.0])
    a = np.append(a, N + 1.0)
    np.testing.assert_array_equal(w["w > 1e8"], a[a > 1e8])
    w.flush()
    del w
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r.stats_state() == {"chunks": 40, "known": 40, "unchecked": 0}
    np.testing.assert_array_equal(r["r > 1e8"], a[a > 1e8])


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_writer_handle_stores_what_a_new_reader_trusts(s3, fmt):
    """A writer handle rewrites one chunk and flushes, staying open; a reader opened then trusts
    every entry (in BLZ the superchunk file was uploaded again: the entries of its other chunks were
    carried to its new tag) and the query reads only the chunk that matches."""
    base, opts = s3
    url = f"{base}/x"
    a = np.arange(N, dtype="i8")
    make(url, opts, fmt, a)
    w = blzarr.open(url, mode="a", storage_options=opts)
    w[5 * CHUNKLEN:5 * CHUNKLEN + 3] = [-7, -8, -9]
    a[5 * CHUNKLEN:5 * CHUNKLEN + 3] = [-7, -8, -9]
    w.flush()
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r.stats_state() == {"chunks": 40, "known": 40, "unchecked": 0}
    g = r._bytestore.stats["get"]
    np.testing.assert_array_equal(r["r < 0"], a[a < 0])
    assert r._bytestore.stats["get"] - g <= 2
    np.testing.assert_array_equal(w["w < 0"], a[a < 0])
    w.close()


def test_s3_blz_append_into_the_last_file_keeps_its_older_entries(s3):
    """Appending re-uploads the last superchunk file (a new ETag): the entries of its chunks that
    were not rewritten are carried to the new tag and stored again, not dropped."""
    base, opts = s3
    url = f"{base}/x"
    a = np.arange(37 * CHUNKLEN, dtype="f8")          # the last file holds 5 of its 8 chunks
    make(url, opts, "blz", a)
    for step in [CHUNKLEN, 1, CHUNKLEN]:
        # a full chunk, then a row (the short last chunk only: no entry changes, the file does)
        w = blzarr.open(url, mode="a", storage_options=opts)
        extra = np.arange(len(a), len(a) + step, dtype="f8")
        w.append(extra)
        a = np.concatenate([a, extra])
        w.flush()
        del w
        r = blzarr.open(url, mode="r", storage_options=opts)
        nch = len(a) // CHUNKLEN
        assert r.stats_state() == {"chunks": nch, "known": nch, "unchecked": 0}
        g = r._bytestore.stats["get"]
        np.testing.assert_array_equal(r["r < 2.5 * 5000"], a[a < 2.5 * CHUNKLEN])
        assert r._bytestore.stats["get"] - g <= 3       # chunks 0, 1 and 2 (0 is also the dtype probe)


def test_s3_cli_info_tells_the_statistics(s3):
    base, opts = s3
    url = f"{base}/x"
    make(url, opts, "blz", np.arange(3 * CHUNKLEN + 7, dtype="f8"))
    out = io.StringIO()
    assert main(["info", url, "--storage-options", json.dumps(opts)], out=out) == 0
    assert "min/max/NaN of 3 of 3 chunks" in out.getvalue()
    fs_of(opts).rm_file(f"{url}/meta/stats")
    out = io.StringIO()
    assert main(["info", url, "--storage-options", json.dumps(opts)], out=out) == 0
    assert "min/max/NaN of 0 of 3 chunks (the others, missing or stale" in out.getvalue()


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_fsspec_memory_statistics_written_never_trusted_without_tags(fmt):
    """fsspec's memory filesystem gives no version tags: meta/stats is written, but a new session
    cannot tell whether its entries are current, so it computes them (and the answers are NumPy's)."""
    pytest.importorskip("fsspec")
    url = f"memory://stats-{uuid.uuid4().hex[:8]}/x"
    a = np.arange(8 * CHUNKLEN, dtype="f8")
    c = blzarr.carray(a, rootdir=url, mode="w", chunklen=CHUNKLEN, **layout_kw(fmt))
    c.flush()
    assert c._bytestore.exists("meta/stats")
    r = blzarr.open(url, mode="r")
    assert r.stats_state() == {"chunks": 8, "known": 0, "unchecked": 0}
    np.testing.assert_array_equal(r["r > 30_000.5"], a[a > 30_000.5])


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_failed_statistics_upload_loses_nothing_and_is_stored_later(s3, fmt, monkeypatch):
    """meta/stats is uploaded after meta/sizes: when that upload fails the flush reports it, the data
    stay committed, the old meta/stats is found stale where the chunks changed, and the next flush
    stores the statistics."""
    from blzarr.errors import StorageError
    from blzarr.storage import objstats
    base, opts = s3
    url = f"{base}/x"
    a = np.arange(N, dtype="f8")
    make(url, opts, fmt, a)
    real = objstats.write

    def broken(store, raw):
        raise StorageError(f"cannot write '{store.where(objstats.STATS_KEY)}': injected")
    monkeypatch.setattr(objstats, "write", broken)
    w = blzarr.open(url, mode="a", storage_options=opts)
    w[3 * CHUNKLEN + 1] = 1e9
    a[3 * CHUNKLEN + 1] = 1e9
    with pytest.raises(StorageError, match="meta/stats"):
        w.flush()
    monkeypatch.setattr(objstats, "write", real)

    r = blzarr.open(url, mode="r", storage_options=opts)
    np.testing.assert_array_equal(r[:], a)
    assert r.stats_state()["known"] == (32 if fmt == "blz" else 39)
    np.testing.assert_array_equal(r["r > 1e8"], a[a > 1e8])

    w.append(np.arange(3.0))
    a = np.concatenate([a, np.arange(3.0)])
    w.flush()
    r = blzarr.open(url, mode="r", storage_options=opts)
    np.testing.assert_array_equal(r[:], a)
    assert r.stats_state() == {"chunks": 40, "known": 40, "unchecked": 0}
    np.testing.assert_array_equal(r["r > 1e8"], a[a > 1e8])


@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(0, 3000), chunklen=st.integers(1, 400), seed=st.integers(0, 2 ** 32 - 1),
       kind=st.sampled_from(["runs", "random", "none", "all"]), skip=st.integers(0, 50),
       limit=st.one_of(st.none(), st.integers(0, 500)), ondisk=st.booleans())
def test_where_with_an_evaluated_mask_equals_numpy(tmp_path_factory, n, chunklen, seed, kind, skip, limit, ondisk):
    """where(expression) reads the values of the blocks where the evaluated mask has a true row only:
    the rows it gives are NumPy's, with blocks all true, all false and mixed."""
    rng = np.random.default_rng(seed)
    if kind == "runs":
        a = np.repeat(rng.integers(0, 3, n // 50 + 1), 50)[:n].astype("i4")
    elif kind == "random":
        a = rng.integers(0, 3, n).astype("i4")
    else:
        a = np.full(n, 1 if kind == "all" else 0, "i4")
    kw = {"rootdir": str(tmp_path_factory.mktemp("w") / "x"), "mode": "w"} if ondisk else {}
    c = blzarr.carray(a, chunklen=chunklen, **kw)
    m = (a % 3 == 1) | (a > 5)
    got = list(c.where("(c % 3 == 1) | (c > 5)", skip=skip, limit=limit))
    want = a[m][skip:None if limit is None else skip + limit]
    assert got == want.tolist()


def test_s3_ctable_columns_keep_statistics_through_an_append(s3):
    base, opts = s3
    url = f"{base}/t"
    n = 10 * 10_000
    ts, px = np.arange(n), np.arange(n) * 0.5
    t = blzarr.ctable({"ts": ts, "px": px, "s": np.array(["x"] * n)}, rootdir=url, mode="w",
                      chunklen=10_000, storage_options=opts)
    t.close()
    t = blzarr.open(url, mode="a", storage_options=opts)
    t.append((n, n * 0.5, "y"))
    t.close()
    ts, px = np.append(ts, n), np.append(px, n * 0.5)
    out = io.StringIO()
    assert main(["info", url, "--storage-options", json.dumps(opts)], out=out) == 0
    cols = {ln.split()[0]: ln.split()[-1] for ln in out.getvalue().splitlines()[-3:]}
    assert cols == {"ts": "10/10", "px": "10/10", "s": "-"}
    r = blzarr.open(url, mode="r", storage_options=opts)
    g = {k: r.cols[k]._bytestore.stats["get"] for k in ("ts", "px")}
    rows = r.fetchwhere("(ts >= 25_000) & (ts < 50_000)", out_flavor="numpy")
    m = (ts >= 25_000) & (ts < 50_000)
    np.testing.assert_array_equal(rows["ts"], ts[m])
    np.testing.assert_array_equal(rows["px"], px[m])
    assert r.cols["ts"]._bytestore.stats["get"] - g["ts"] <= 4      # the 3 chunks holding matches (+ a probe)


def test_http_statistics_are_not_fetched_without_tags_to_check_them(http_root, monkeypatch):
    """A plain HTTP server gives no version tags: the local directory's meta/stats is not asked for,
    the statistics are computed, and the answers are NumPy's."""
    from blzarr.storage.bytestore import FsspecStore
    asked = []
    real_get = FsspecStore.get

    def get(self, key):
        asked.append(key)
        return real_get(self, key)
    monkeypatch.setattr(FsspecStore, "get", get)
    root, base, httpd = http_root
    name = f"s{uuid.uuid4().hex[:8]}"
    a = np.arange(8 * CHUNKLEN, dtype="f8")
    blzarr.carray(a, rootdir=str(root / name), mode="w", chunklen=CHUNKLEN, superchunklen=4).flush()
    assert (root / name / "meta" / "stats").exists()
    r = blzarr.open(f"{base}/{name}", mode="r")
    assert r.stats_state() == {"chunks": 8, "known": 0, "unchecked": 0}
    np.testing.assert_array_equal(r["r > 30_000.5"], a[a > 30_000.5])
    assert "meta/sizes" in asked and "meta/stats" not in asked
