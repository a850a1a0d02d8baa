"""carrays and ctables on object storage: moto's S3 server and a plain HTTP server with Range
support, both local (fixtures in conftest.py, started once per session)."""

import os
import shutil

import numpy as np
import pytest

import blzarr
from blzarr import ConcurrentWriterError, MissingError
from blzarr.errors import ChunkError, FormatError, StorageError

N = 200_000


def data(n=N):
    return (np.arange(n, dtype="f8") * 0.5) ** 1.5


def evict(r):
    """Drop the compressed chunks an object-storage carray keeps (not what it knows of them)."""
    st = r.chunkstore.layoutdir
    st._chunks.clear()
    st._reads.recent = (None, None, None)
    r._blockcache = None


def gets(obj):
    b = obj._bytestore if hasattr(obj, "_bytestore") else obj
    return b.stats["get"]


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_roundtrip_every_read(s3, fmt):
    url, opts = s3
    a = data()
    c = blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, format=fmt,
                      **({"superchunklen": 8} if fmt == "blz" else {}), storage_options=opts)
    c.attrs["unit"] = "m"
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    assert isinstance(r, blzarr.carray) and len(r) == N and r.attrs["unit"] == "m"
    np.testing.assert_array_equal(r[:], a)
    np.testing.assert_array_equal(r[12345:67891:7], a[12345:67891:7])
    idx = np.random.default_rng(1).integers(0, N, 300)
    np.testing.assert_array_equal(r[idx], a[idx])
    for i in (0, 1, 4999, 5000, N - 1, -1):
        assert r[i] == a[i]
    assert r.sum() == pytest.approx(a.sum())
    with pytest.raises(blzarr.ReadOnlyError):
        r[0] = 1


def test_s3_scalar_reads_cost_one_get_after_first_touch(s3):
    url, opts = s3
    a = data()
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, superchunklen=8, storage_options=opts)
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    g = gets(r)
    assert r[12345] == a[12345]
    assert gets(r) - g == 1            # the whole chunk, verified (its file's table came at open)
    for i in (12346, 14999, 10000):
        evict(r)                           # the chunk leaves the cache; it stays verified (its head too)
        g = gets(r)
        assert r[i] == a[i]
        assert gets(r) - g == 1            # only the block that holds it
    # a file not touched at open: its header + table, then the chunk
    g = gets(r)
    assert r[5000 * 8 * 2 + 3] == a[5000 * 8 * 2 + 3]
    assert gets(r) - g == 2


def test_s3_read_all_coalesces(s3):
    url, opts = s3
    a = data()
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, superchunklen=8, storage_options=opts)
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    g = gets(r)
    np.testing.assert_array_equal(r[:], a)
    nfiles = -(-N // (5000 * 8))
    # one GET per superchunk file: the files whose table open did not read come whole, table and chunks
    assert gets(r) - g == nfiles
    assert r.verify()["chunks"] == -(-N // 5000)


def test_s3_appends_flush_and_writer_crash(s3):
    url, opts = s3
    a = data()
    c = blzarr.carray(a[:1000], rootdir=f"{url}/x.blz", mode="w", chunklen=500, superchunklen=4,
                      storage_options=opts)
    c.append(a[1000:30_000])
    c.flush()
    # the writer goes on, then dies without flushing: files may be uploaded, meta/sizes is not
    c.append(a[30_000:60_000])
    c._chunks.layoutdir.flush_files()
    c._owner_pid = None     # as in a killed process: nothing flushes it at GC or exit
    del c
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    assert len(r) == 30_000
    np.testing.assert_array_equal(r[:], a[:30_000])
    w = blzarr.open(f"{url}/x.blz", mode="a", storage_options=opts)
    w.append(a[30_000:31_234])
    w[5] = -1.0
    w.flush()
    exp = a[:31_234].copy()
    exp[5] = -1.0
    np.testing.assert_array_equal(blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)[:], exp)
    w.resize(777)
    w.flush()
    np.testing.assert_array_equal(blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)[:], exp[:777])
    w.purge()
    with pytest.raises(StorageError, match="does not exist"):
        blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)


def test_s3_second_writer_is_detected(s3):
    url, opts = s3
    blzarr.carray(data(1000), rootdir=f"{url}/x.blz", mode="w", chunklen=100, storage_options=opts)
    w1 = blzarr.open(f"{url}/x.blz", mode="a", storage_options=opts)
    w2 = blzarr.open(f"{url}/x.blz", mode="a", storage_options=opts)
    w1.append(np.ones(10))
    w1.flush()
    w2.append(np.zeros(10))
    with pytest.raises(ConcurrentWriterError, match="another writer"):
        w2.flush()
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    np.testing.assert_array_equal(r[1000:], np.ones(10))


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_ctable(s3, fmt):
    url, opts = s3
    n = 20_000
    t = blzarr.ctable({"i": np.arange(n), "f": data(n)}, rootdir=f"{url}/t", mode="w", format=fmt,
                      storage_options=opts)
    t.append((np.arange(n, n + 10), np.zeros(10)))
    t.flush()
    r = blzarr.open(f"{url}/t", mode="r", storage_options=opts)
    assert isinstance(r, blzarr.ctable) and len(r) == n + 10
    np.testing.assert_array_equal(r["i"][:], np.arange(n + 10))
    assert tuple(r[n - 1]) == (n - 1, data(n)[-1])
    assert [tuple(x) for x in r.where("i > 19995")] == [(k, data(n)[k] if k < n else 0.0)
                                                          for k in range(19996, n + 10)]


def test_s3_errors(s3, moto_server):
    url, opts = s3
    assert issubclass(ConcurrentWriterError, blzarr.StorageError)
    assert issubclass(MissingError, blzarr.StorageError) and issubclass(MissingError, FileNotFoundError)
    with pytest.raises(StorageError, match="s3://no-such-bucket-xyz/x"):
        blzarr.open("s3://no-such-bucket-xyz/x", mode="r", storage_options=opts)
    with pytest.raises(StorageError, match=f"{url}/missing"):
        blzarr.open(f"{url}/missing", mode="r", storage_options=opts)
    with pytest.raises(MissingError, match=f"{url}/missing"):
        blzarr.carray(rootdir=f"{url}/missing", mode="r", storage_options=opts)
    with pytest.raises(StorageError, match="s3://no-such-bucket-xyz"):
        blzarr.carray(np.arange(10), rootdir="s3://no-such-bucket-xyz/y", mode="w", storage_options=opts)


@pytest.fixture
def http_blz(http_root):
    root, base, httpd = http_root
    name = f"d{len(os.listdir(root))}"
    a = data()
    blzarr.carray(a, rootdir=str(root / name), mode="w", chunklen=5000, superchunklen=8)
    yield f"{base}/{name}", root / name, a, httpd
    httpd.fail_next = 0
    httpd.deny = None
    httpd.no_listing = False


def test_http_read_only(http_blz):
    url, path, a, httpd = http_blz
    r = blzarr.open(url, mode="r")
    np.testing.assert_array_equal(r[:], a)
    np.testing.assert_array_equal(r[100:200], a[100:200])
    assert r[N - 1] == a[N - 1]
    with pytest.raises(blzarr.ReadOnlyError):
        r.append([1.0])


def test_http_dropped_connection_retried_then_clear_error(http_blz):
    url, path, a, httpd = http_blz
    r = blzarr.open(url, mode="r")
    httpd.fail_next = 1
    assert r[77_777] == a[77_777]          # retried
    httpd.fail_next = 100
    with pytest.raises(StorageError, match=r"data/__4__\.bin"):
        r[150_001]


def test_http_denied(http_blz):
    url, path, a, httpd = http_blz
    httpd.deny = "/" + url.rsplit("/", 1)[1] + "/data"
    requests = httpd.requests
    with pytest.raises(StorageError, match=r"access to 'http://.*/data.*' denied \(HTTP 403\)"):
        blzarr.open(url, mode="r")[:]
    assert httpd.requests - requests < 8          # a denial is not retried


def test_http_truncated_object_is_a_chunk_error(http_blz):
    url, path, a, httpd = http_blz
    f = path / "data" / "__2__.bin"
    raw = f.read_bytes()
    f.write_bytes(raw[:len(raw) - 5000])
    r = blzarr.open(url, mode="r")
    assert r[3] == a[3]
    with pytest.raises((ChunkError, FormatError)):
        r[:]
    with pytest.raises((ChunkError, FormatError)):
        r[5000 * 16 - 1]


def test_walk_and_cli_on_urls(s3, tmp_path):
    import io
    import json
    from blzarr.cli import main
    url, opts = s3
    a = data(30_000)
    blzarr.carray(a, rootdir=f"{url}/top/x", mode="w", chunklen=1000, storage_options=opts)
    blzarr.ctable({"v": np.arange(50)}, rootdir=f"{url}/top/sub/t", mode="w", format="bcolz",
                  storage_options=opts)
    found = [(type(o).__name__, o.rootdir) for o in blzarr.walk(f"{url}/top", mode="r", storage_options=opts)]
    assert found == [("carray", f"{url}/top/x"), ("ctable", f"{url}/top/sub/t")]
    so = ["--storage-options", json.dumps(opts)]

    def run(*argv):
        out = io.StringIO()
        rc = main(list(argv) + so, out=out)
        return rc, out.getvalue()
    rc, text = run("info", f"{url}/top/x", "--json")
    assert rc == 0 and json.loads(text)["shape"] == [30_000]
    rc, text = run("ls", f"{url}/top", "--json")
    assert rc == 0 and [r["path"] for r in json.loads(text)] == ["x", "sub/t"]
    rc, text = run("verify", f"{url}/top")
    assert rc == 0 and text.count("OK ") == 2
    # convert: S3 -> local, local -> S3 in the other layout
    rc, _ = run("convert", f"{url}/top/x", str(tmp_path / "x"), "--format", "bcolz")
    assert rc == 0
    np.testing.assert_array_equal(blzarr.open(str(tmp_path / "x"), mode="r")[:], a)
    rc, _ = run("convert", str(tmp_path / "x"), f"{url}/y", "--format", "blz", "--chunklen", "700")
    assert rc == 0
    y = blzarr.open(f"{url}/y", mode="r", storage_options=opts)
    assert y.chunklen == 700 and y.format == "blz"
    np.testing.assert_array_equal(y[:], a)
    rc, _ = run("convert", str(tmp_path / "x"), f"{url}/y")
    assert rc == 1        # exists, no --overwrite
    # damage is found: a chunk byte flipped in the superchunk object
    import s3fs
    fs = s3fs.S3FileSystem(**opts)
    key = f"{url}/y/data/__1__.bin"
    raw = bytearray(fs.cat_file(key))
    raw[-10] ^= 0xFF
    fs.pipe_file(key, bytes(raw))
    rc, text = run("verify", f"{url}/y")
    assert rc == 1 and "DAMAGED" in text


@pytest.mark.slow
def test_dask_cluster_of_processes_without_shared_disk(s3):
    """Workers are processes that open the store themselves from the pickled URL + options."""
    pytest.importorskip("distributed")
    da = pytest.importorskip("dask.array")
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    from distributed import Client, LocalCluster
    url, opts = s3
    n = 120_000
    x = da.from_array(data(n), chunks=25_000)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster):
        c = blzarr.from_dask(x, f"{url}/d.blz", chunklen=5000, superchunklen=4, storage_options=opts)
        assert len(c) == n and c._chunks.layoutdir.nfiles == 6
        np.testing.assert_array_equal(c[:], data(n))
        r = blzarr.open(f"{url}/d.blz", mode="r", storage_options=opts)
        y = r.to_dask()
        assert y.numblocks == (6,)
        assert float((y * 2).sum().compute()) == pytest.approx(2 * data(n).sum())
        df = dd.from_pandas(pd.DataFrame({"i": np.arange(n), "f": data(n)}), npartitions=3)
        t = blzarr.from_dask(df, f"{url}/t", format="bcolz", chunklen=4000, storage_options=opts)
        assert len(t) == n
        back = blzarr.open(f"{url}/t", mode="r", storage_options=opts).to_dask().compute()
        np.testing.assert_array_equal(back["f"].to_numpy(), data(n))
        np.testing.assert_array_equal(back.index.to_numpy(), np.arange(n))


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_http_server_without_directory_listings(http_root, fmt):
    """Static hosting lists no directory: the files come from meta/sizes, their sizes from HEAD."""
    root, base, httpd = http_root
    name = f"nolist-{fmt}"
    a = data(50_003)
    blzarr.carray(a, rootdir=str(root / name), mode="w", chunklen=3000, format=fmt,
                  **({"superchunklen": 4} if fmt == "blz" else {}))
    httpd.no_listing = True
    try:
        r = blzarr.open(f"{base}/{name}", mode="r")
        np.testing.assert_array_equal(r[:], a)
        assert r[50_002] == a[50_002] and r[7] == a[7]
    finally:
        httpd.no_listing = False


def test_s3_bcolz_second_writer_is_detected(s3):
    url, opts = s3
    blzarr.carray(data(1000), rootdir=f"{url}/x", mode="w", chunklen=100, format="bcolz", storage_options=opts)
    w1 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w2 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w1.append(np.ones(300))
    w1.flush()
    with pytest.raises(ConcurrentWriterError, match="another writer"):
        w2.append(np.zeros(300))      # its first chunk upload checks meta/sizes: refused before any write
    np.testing.assert_array_equal(blzarr.open(f"{url}/x", mode="r", storage_options=opts)[1000:], np.ones(300))


def test_s3_read_all_in_batches_fetched_ahead(s3, monkeypatch):
    import sys
    carray_mod = sys.modules["blzarr.storage.chunkstore"]      # where the read path takes its batch size
    url, opts = s3
    a = data()
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, superchunklen=8, storage_options=opts)
    monkeypatch.setattr(carray_mod, "PREFETCH_BATCH_BYTES", 7 * 5000 * 8)     # 7 chunks a batch
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    g = gets(r)
    np.testing.assert_array_equal(r[:], a)
    np.testing.assert_array_equal(r[3:N - 3], a[3:N - 3])
    assert gets(r) - g <= 2 * (-(-N // 5000 // 7)) + 8


def test_s3_first_touch_is_one_get_without_chunk_cache(s3):
    url, opts = s3
    a = data()
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, superchunklen=8, storage_options=opts)
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    r.chunkstore.layoutdir._chunks.limit = 0           # as when the data are much larger than the chunk cache
    for i in (1, 12_345, 39_999):
        g = gets(r)
        assert r[i] == a[i]
        assert gets(r) - g == 1               # the chunk whole, verified, the atom decoded from it
    evict(r)
    g = gets(r)
    assert r[12_346 + 2000] == a[12_346 + 2000]
    assert gets(r) - g == 1                   # verified before: only the block


@pytest.mark.parametrize("checksum", [None, "sha256"])
def test_s3_checksums(s3, checksum):
    url, opts = s3
    a = data(50_000)
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=4000, superchunklen=4, checksum=checksum,
                  storage_options=opts)
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    assert r[4001] == a[4001] and r[-1] == a[-1]
    np.testing.assert_array_equal(r[:], a)
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    np.testing.assert_array_equal(r[8000:16000], a[8000:16000])      # whole chunks, no cache used
    np.testing.assert_array_equal(r[::7], a[::7])
    assert r.verify()["checksum"] == (checksum or "none")


def test_s3_ctable_add_and_remove_columns(s3):
    url, opts = s3
    t = blzarr.ctable({"a": np.arange(1000)}, rootdir=f"{url}/t", mode="w", storage_options=opts)
    t.addcol(np.arange(1000) * 2.0, "b")
    t.addcol(blzarr.carray(np.arange(1000) % 3), "c", move=True)
    t.delcol("a")
    t.flush()
    r = blzarr.open(f"{url}/t", mode="r", storage_options=opts)
    assert r.names == ["b", "c"]
    np.testing.assert_array_equal(r["b"][:], np.arange(1000) * 2.0)
    np.testing.assert_array_equal(r["c"][:], np.arange(1000) % 3)
    from blzarr.storage.bytestore import open_bytestore
    assert open_bytestore(f"{url}/t", opts).child("a").list("") == {}     # its objects are gone


def test_s3_without_credentials_is_denied_at_once(s3, monkeypatch):
    url, opts = s3
    blzarr.carray(np.arange(10), rootdir=f"{url}/x", mode="w", storage_options=opts)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bare = {"client_kwargs": opts["client_kwargs"], "skip_instance_cache": True}
    with pytest.raises(StorageError, match=f"access to '{url}/x.*' denied"):
        blzarr.open(f"{url}/x", mode="r", storage_options=bare)


def test_local_bytestore_goes_through_fileio(tmp_path):
    """The local byte store does its file operations through blzarr.storage.fileio (what the crash
    simulator records), as the local layouts do."""
    from blzarr.storage import fileio
    from blzarr.storage.bytestore import open_bytestore
    seen = []

    class Recorder(fileio.OsIO):
        def open(self, path, how="r", mode=0o666):
            seen.append(("open", how))
            return super().open(path, how, mode)

        def replace(self, src, dst):
            seen.append(("replace", os.path.basename(dst)))
            return super().replace(src, dst)

        def unlink(self, path):
            seen.append(("unlink", os.path.basename(path)))
            return super().unlink(path)

    s = open_bytestore(str(tmp_path / "root"))
    with fileio.use(Recorder()):
        s.put_atomic("meta/sizes", b"{}")
        assert s.get_range("meta/sizes", 0, 1) == b"{"
        s.delete("meta/sizes")
    assert ("replace", "sizes") in seen and ("open", "r") in seen and ("unlink", "sizes") in seen


# ---------------------------------------------------------------------- conditional puts (S3)
def _dir(c):
    return c._chunks.layoutdir


def test_s3_conditional_put_refuses_a_stale_or_existing_object(s3):
    from blzarr.storage.bytestore import open_bytestore
    url, opts = s3
    s = open_bytestore(f"{url}/c", opts)
    assert s.conditional
    t0 = s.put("meta/sizes", b"0", if_none_match=True)
    assert t0 and t0 == s.version("meta/sizes")
    with pytest.raises(ConcurrentWriterError, match=f"'{url}/c/meta/sizes' was changed by another writer"):
        s.put("meta/sizes", b"1", if_none_match=True)
    t1 = s.put("meta/sizes", b"1", if_match=t0)
    with pytest.raises(ConcurrentWriterError, match=f"{url}/c/meta/sizes"):
        s.put("meta/sizes", b"2", if_match=t0)          # stale: another writer put t1 meanwhile
    s.delete("meta/sizes")
    with pytest.raises(ConcurrentWriterError, match=f"{url}/c/meta/sizes"):
        s.put("meta/sizes", b"3", if_match=t1)          # gone: removed by another writer
    assert not s.exists("meta/sizes")
    assert s.put("x", b"no conditions") == s.version("x")


def test_s3_store_without_conditional_writes_falls_back(s3, monkeypatch):
    """An S3 compatible that answers conditional puts with NotImplemented: plain puts from then on."""
    from botocore.exceptions import ClientError
    from blzarr.storage.bytestore import open_bytestore
    url, opts = s3
    s = open_bytestore(f"{url}/c", opts)
    real = s.fs.pipe_file
    seen = []

    def pipe_file(path, data, **kw):
        seen.append(sorted(kw))
        if "IfMatch" in kw or "IfNoneMatch" in kw:
            raise OSError("not implemented") from ClientError(
                {"Error": {"Code": "NotImplemented", "Message": "A header you provided implies "
                           "functionality that is not implemented"},
                 "ResponseMetadata": {"HTTPStatusCode": 501}}, "PutObject")
        return real(path, data, **kw)
    monkeypatch.setattr(s.fs, "pipe_file", pipe_file)
    s.put("meta/sizes", b"0", if_none_match=True)
    assert s.get("meta/sizes") == b"0" and not s.conditional
    s.put("meta/sizes", b"1", if_match='"stale"')        # no longer conditional: the caller's checks only
    assert s.get("meta/sizes") == b"1"
    assert seen == [["IfNoneMatch", "chunksize"], [], []]


def _race(monkeypatch, loser, winner):
    """Make `loser`'s next flush pass its check of meta/sizes, then let `winner` flush in the gap
    before the loser's uploads (the race the check alone cannot see)."""
    d = _dir(loser)
    real = d._check_sole_writer

    def check():
        real()
        monkeypatch.setattr(d, "_check_sole_writer", real)
        winner.flush()
    monkeypatch.setattr(d, "_check_sole_writer", check)


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_s3_racing_writers_the_second_is_refused_nothing_interleaved(s3, monkeypatch, fmt):
    url, opts = s3
    a = data(1000)
    blzarr.carray(a, rootdir=f"{url}/x", mode="w", chunklen=100, format=fmt, storage_options=opts)
    w1 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w2 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w1.append(np.ones(50))
    w2.append(np.full(50, 2.0))
    _race(monkeypatch, w2, w1)          # w2 checked meta/sizes, then w1 committed before w2 uploads
    with pytest.raises(ConcurrentWriterError, match=f"'{url}/x/(data|meta)/.*' was changed by another writer"):
        w2.flush()
    r = blzarr.open(f"{url}/x", mode="r", storage_options=opts)
    np.testing.assert_array_equal(r[:], np.concatenate([a, np.ones(50)]))      # w1's state, all of it
    # the refused writer stays refused (it never saw w1's commit); a new writer goes on
    with pytest.raises(ConcurrentWriterError):
        w2.flush()
    w3 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w3.append(np.full(5, 3.0))
    w3.flush()
    np.testing.assert_array_equal(blzarr.open(f"{url}/x", mode="r", storage_options=opts)[1045:],
                                  [1.0] * 5 + [3.0] * 5)


def test_s3_bcolz_chunk_objects_of_two_writers_never_mix(s3):
    """The bcolz layout uploads a chunk object as soon as it fills: the second writer's upload of
    the same chunk is refused before anything of it lands (the check of meta/sizes saw no commit)."""
    url, opts = s3
    a = data(1000)
    blzarr.carray(a, rootdir=f"{url}/x", mode="w", chunklen=100, format="bcolz", storage_options=opts)
    w1 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w2 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w1.append(np.ones(250))
    with pytest.raises(ConcurrentWriterError, match=rf"'{url}/x/data/__10\.blp' was changed by another writer"):
        w2.append(np.full(250, 2.0))
    w1.flush()
    np.testing.assert_array_equal(blzarr.open(f"{url}/x", mode="r", storage_options=opts)[:],
                                  np.concatenate([a, np.ones(250)]))


def test_s3_blz_race_at_the_commit_point(s3, monkeypatch):
    """The loser uploaded its files first: the winner's upload of the same file is refused, so the
    first to upload a shared file wins and the other commits nothing."""
    url, opts = s3
    a = data(1000)
    blzarr.carray(a, rootdir=f"{url}/x", mode="w", chunklen=100, storage_options=opts)
    w1 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w2 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    w1.append(np.ones(30))
    w2.append(np.full(30, 2.0))
    d2 = _dir(w2)
    real = d2.flush_files
    raised = []

    def flush_files(*args, **kw):
        real(*args, **kw)                # w2's files are up; w1 flushes before w2's meta/sizes
        if kw.get("check") is False and not raised:
            with pytest.raises(ConcurrentWriterError, match=r"data/__1__\.bin' was changed by another writer"):
                w1.flush()
            raised.append(1)
    monkeypatch.setattr(d2, "flush_files", flush_files)
    w2.flush()
    assert raised
    np.testing.assert_array_equal(blzarr.open(f"{url}/x", mode="r", storage_options=opts)[:],
                                  np.concatenate([a, np.full(30, 2.0)]))


@pytest.mark.parametrize("conditional", [True, False])
def test_s3_writer_checks_meta_sizes_before_reading_it(s3, monkeypatch, conditional):
    """A writer takes the version of meta/sizes before it reads it: a commit between the two makes
    its own commit fail rather than overwrite what it never saw (also where the store has no
    conditional puts and only the writer's check of the ETag can tell)."""
    url, opts = s3
    blzarr.carray(data(1000), rootdir=f"{url}/x", mode="w", chunklen=100, storage_options=opts)
    from blzarr.storage.bytestore import FsspecStore
    real = FsspecStore.get_many
    if not conditional:
        init = FsspecStore.__init__

        def plain(self, *args, **kw):
            init(self, *args, **kw)
            self.conditional = False
        monkeypatch.setattr(FsspecStore, "__init__", plain)
    w1 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)

    def get_many(self, keys):
        if not getattr(get_many, "done", False):
            get_many.done = True
            w1.append(np.ones(100))
            w1.flush()                         # committed after w2 took meta/sizes's version
        return real(self, keys)
    monkeypatch.setattr(FsspecStore, "get_many", get_many)
    w2 = blzarr.open(f"{url}/x", mode="a", storage_options=opts)
    assert getattr(get_many, "done", False)
    assert len(w2) == 1100                     # it read the new sizes...
    w2.append(np.zeros(10))
    with pytest.raises(ConcurrentWriterError):
        w2.flush()                             # ...but commits only over the version it took first


def test_s3_read_all_decodes_each_part_while_later_parts_are_fetched(s3, monkeypatch):
    """Parts of whole superchunk files, several in flight: the first part is decoded before the last
    one is even asked for, and every part is one file."""
    import sys
    from blzarr.storage.blz.remote import RangedReads
    carray_mod = sys.modules["blzarr.storage.chunkstore"]
    url, opts = s3
    a = data()
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, superchunklen=8, storage_options=opts)
    monkeypatch.setattr(carray_mod, "PREFETCH_PART_BYTES", 8 * 5000 * 8)          # one file a part
    monkeypatch.setattr(carray_mod, "PREFETCH_BATCH_BYTES", 2 * 8 * 5000 * 8)     # two parts in flight
    events = []
    prefetch, fetch = RangedReads.prefetch, RangedReads.fetch_chunk

    def logged_prefetch(self, d, ns):
        events.append(("fetch", sorted(ns)))
        return prefetch(self, d, ns)

    def logged_fetch(self, d, n, *args):
        events.append(("decode", n))
        return fetch(self, d, n, *args)
    monkeypatch.setattr(RangedReads, "prefetch", logged_prefetch)
    monkeypatch.setattr(RangedReads, "fetch_chunk", logged_fetch)
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    events.clear()
    g = gets(r)
    np.testing.assert_array_equal(r[:], a)
    fetches = [ns for kind, ns in events if kind == "fetch"]
    assert fetches == [list(range(k, min(k + 8, 40))) for k in range(0, 40, 8)]
    first_decode = events.index(("decode", 0))
    last_fetch = events.index(("fetch", list(range(32, 40))))
    assert first_decode < last_fetch
    assert gets(r) - g == 5


def test_s3_read_all_with_a_truncated_middle_file_is_a_chunk_error(s3):
    import s3fs
    url, opts = s3
    a = data()
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, superchunklen=8, storage_options=opts)
    fs = s3fs.S3FileSystem(**opts)
    key = f"{url}/x.blz/data/__3__.bin"
    fs.pipe_file(key, fs.cat_file(key)[:-3000])
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    with pytest.raises(ChunkError, match=r"__3__\.bin|chunk 23"):
        r[:]
    np.testing.assert_array_equal(r[:5000 * 16], a[:5000 * 16])        # files 1 and 2 are sound
    assert r[5000 * 16] == a[5000 * 16]                                   # so is file 3's first chunk


def test_s3_open_reads_each_meta_file_once(s3, monkeypatch):
    """Opening a BLZ carray: meta/storage, meta/sizes, meta/attributes and meta/stats one GET each
    (meta/sizes is parsed twice, by the layout and by the carray), the first and the last file's
    tables, and the short last chunk."""
    from blzarr.storage.bytestore import FsspecStore
    from blzarr.storage import readpins
    url, opts = s3
    a = data(100_003)
    blzarr.carray(a, rootdir=f"{url}/x.blz", mode="w", chunklen=5000, superchunklen=8, storage_options=opts)
    asked = []
    real_get, real_many = FsspecStore.get, FsspecStore.get_many

    def get(self, key):
        if key not in self._primed:
            asked.append(key)
        return real_get(self, key)

    def get_many(self, keys):
        asked.extend(keys)
        return real_many(self, keys)
    real_commit = readpins.ReadPins.read_commit.__func__

    def read_commit(cls, store, key):       # (the commit object, read with its version)
        asked.append(key)
        return real_commit(cls, store, key)
    monkeypatch.setattr(FsspecStore, "get", get)
    monkeypatch.setattr(FsspecStore, "get_many", get_many)
    monkeypatch.setattr(readpins.ReadPins, "read_commit", classmethod(read_commit))
    r = blzarr.open(f"{url}/x.blz", mode="r", storage_options=opts)
    assert sorted(asked) == ["meta/attributes", "meta/sizes", "meta/stats", "meta/storage"]
    # (meta/storage's GET is blzarr.open's, which told the kind by it and handed it to the carray)
    assert gets(r) == 6
    assert r[100_002] == a[-1]
