"""Readers on object storage opened across a replacement's switch, readers of datasets whose
meta/storage has no uid, and readers on fsspec's memory:// (blzarr.storage.readpins).

The switch is injected between an open's requests (at its listing of data/, after it read
meta/storage), each test asserting the injection was reached: the reader sees the old or the new
dataset whole, or gets ConcurrentWriterError naming the URL, never the new objects decoded with the
old dtype or length."""

import json
import time
import uuid

import numpy as np
import pytest

import blzarr
from object_store import refused_reads
from blzarr.containers.carray import array as carray_module
from blzarr.storage import bytestore, readpins
from blzarr.storage.files import json_bytes

N = 400
OLD = np.arange(N)
NEW = np.arange(N) + 0.5            # float64: decoded as int64 it would be other numbers
SLOW = pytest.mark.slow


def _make(kind, url, opts, values, fmt):
    if kind == "carray":
        blzarr.carray(values, rootdir=url, mode="w", chunklen=100, format=fmt, storage_options=opts).close()
    else:
        blzarr.ctable([values, values * 2], names=["a", "b"], rootdir=url, mode="w", chunklen=100,
                      format=fmt, storage_options=opts).close()


def _values(kind, obj):
    """What a reader holds, read whole: (dtype, values) of the carray or of the table's column a,
    after checking column b against it."""
    if kind == "carray":
        got = obj[:]
    else:
        got = obj["a"][:]
        np.testing.assert_array_equal(obj["b"][:], got * 2)
        assert len(obj) == len(got)
    assert len(obj) == len(got)
    return got


def _switch_at_listing(monkeypatch, store_root, then, every=False):
    """Patch FsspecStore.list so that the listing of data/ by the store rooted at `store_root` runs
    `then()` first (once, or at `every` such listing); returns the list of the times it ran."""
    real = bytestore.FsspecStore.list
    reached = []
    busy = []

    def listing(self, prefix="", etags=None, missing_ok=True):
        if prefix == "data" and self.root == store_root and not busy and (every or not reached):
            busy.append(1)
            try:
                then()
            finally:
                busy.pop()
            reached.append(self.root)
        return real(self, prefix, etags, missing_ok)
    monkeypatch.setattr(bytestore.FsspecStore, "list", listing)
    return reached


@pytest.mark.parametrize("kind, fmt", [
    pytest.param(kind, fmt, marks=() if (kind, fmt) == ("carray", "blz") else SLOW)
    for kind in ("carray", "ctable") for fmt in ("bcolz", "blz")])
def test_an_open_across_a_switch_sees_one_version(s3, monkeypatch, kind, fmt):
    # the reader's open reads meta/storage (or __rootdirs__ and column a) of the int64 dataset; then,
    # before it lists data/ (of column b, for a table), the URL is replaced by a float64 one: the open
    # notices and is made again, so the reader holds the new dataset whole
    bucket, opts = s3
    url = f"{bucket}/straddle-{kind}-{fmt}"
    _make(kind, url, opts, OLD, fmt)
    reached = _switch_at_listing(monkeypatch, url if kind == "carray" else f"{url}/b",
                                 lambda: _make(kind, url, opts, NEW, fmt))
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert reached
    got = _values(kind, r)
    assert got.dtype == NEW.dtype
    np.testing.assert_array_equal(got, NEW)


@SLOW
def test_an_open_that_every_switch_straddles_raises(s3, monkeypatch):
    # a replacement inside every attempt: after readpins.OPEN_TRIES of them, ConcurrentWriterError
    bucket, opts = s3
    url = f"{bucket}/straddled"
    _make("carray", url, opts, OLD, "blz")
    n = []

    def replace():
        n.append(1)
        _make("carray", url, opts, OLD * (len(n) + 1), "blz")
    reached = _switch_at_listing(monkeypatch, url, replace, every=True)
    with pytest.raises(blzarr.ConcurrentWriterError, match=f"'{url}' changed while it was being opened"):
        blzarr.open(url, mode="r", storage_options=opts)
    assert len(reached) == readpins.OPEN_TRIES
    monkeypatch.undo()
    np.testing.assert_array_equal(blzarr.open(url, mode="r", storage_options=opts)[:], OLD * (len(n) + 1))


class _Killed(BaseException):
    """The replacing writer stops right after its switch (killed there)."""


@SLOW
@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_an_open_across_a_switch_left_at_its_redirect(s3, monkeypatch, fmt):
    # the switch falls after the open read meta/storage of the old dataset and before its listing,
    # and the replacing writer stops there (its roll-forward not run): the open made again meets the
    # redirect and reads the stage, the new dataset whole (before the open was confirmed it read the
    # old dataset whole here, the old objects being still in place: right too, but by luck)
    from blzarr.storage import replace
    bucket, opts = s3
    url = f"{bucket}/stage-{fmt}"
    _make("carray", url, opts, OLD, fmt)
    real_roll = replace.roll_forward
    stopped = []

    def stop_at_roll(store, rec, old_kind, keep_stages=False):
        stopped.append(rec["by"])
        raise _Killed()

    def switch():
        monkeypatch.setattr(replace, "roll_forward", stop_at_roll)
        try:
            _make("carray", url, opts, NEW, fmt)
        except _Killed:
            pass
        finally:
            monkeypatch.setattr(replace, "roll_forward", real_roll)
    reached = _switch_at_listing(monkeypatch, url, switch)
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert reached and stopped
    assert r.rootdir.endswith(stopped[0])
    got = r[:]
    assert got.dtype == NEW.dtype
    np.testing.assert_array_equal(got, NEW)
    monkeypatch.undo()
    np.testing.assert_array_equal(blzarr.open(url, mode="a", storage_options=opts)[:], NEW)    # rolls forward
    np.testing.assert_array_equal(blzarr.open(url, mode="r", storage_options=opts)[:], NEW)


# ------------------------------------------------------------------ meta/storage without uid
def _strip_uid(url, opts):
    """meta/storage as written before the uid existed (or by another program)."""
    import s3fs
    fs = s3fs.S3FileSystem(**opts)
    key = f"{url}/meta/storage"
    meta = json.loads(fs.cat(key))
    assert meta.pop("uid")
    fs.pipe(key, json_bytes(meta))
    fs.invalidate_cache()


def _without_uid(monkeypatch):
    """Carrays created from now on write no uid (a writer from before it existed); returns the list
    of the meta/storage writes that dropped one."""
    real = carray_module.carray._write_storage
    dropped = []

    def write_storage(self, uid=None):
        if uid is not None:
            dropped.append(uid)
        return real(self)
    monkeypatch.setattr(carray_module.carray, "_write_storage", write_storage)
    return dropped


@SLOW
@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_a_reader_of_a_dataset_without_uid_across_a_replacement(s3, monkeypatch, fmt):
    # both the old and the new meta/storage lack the uid and hold the same bytes (int64 replaced by
    # other int64 values of the same chunking): the reader's refused GET finds meta/storage equal,
    # but not at the version its open read (its Last-Modified, or a second the open could not tell)
    bucket, opts = s3
    url = f"{bucket}/nouid-{fmt}"
    _make("carray", url, opts, OLD, fmt)
    _strip_uid(url, opts)
    before = bytestore.open_bytestore(url, opts).get("meta/storage")
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r[5] == 5
    dropped = _without_uid(monkeypatch)
    _make("carray", url, opts, OLD[::-1].copy(), fmt)
    assert dropped
    assert bytestore.open_bytestore(url, opts).get("meta/storage") == before     # the same bytes
    with pytest.raises(blzarr.ConcurrentWriterError, match=url):
        r[:]
    np.testing.assert_array_equal(blzarr.open(url, mode="r", storage_options=opts)[:], OLD[::-1])


@SLOW
def test_a_reader_of_a_dataset_without_uid_beside_an_appender(s3, monkeypatch):
    # meta/storage without uid, written more than a second before the reader's open: an appender
    # re-uploads the superchunk file, the reader's GET of it is refused, meta/storage is at the
    # version the open read, so the reader goes on with the values it opened
    bucket, opts = s3
    url = f"{bucket}/nouid-append"
    _make("carray", url, opts, OLD, "blz")
    _strip_uid(url, opts)
    time.sleep(1.05)        # Last-Modified counts whole seconds: the open's read is in a later one
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r[5] == 5
    assert r._bytestore.pins.version.settled
    again = refused_reads(monkeypatch)
    w = blzarr.open(url, mode="a", storage_options=opts)
    w.append(np.arange(N, N + 250))
    w.close()
    np.testing.assert_array_equal(r[:], OLD)
    assert again
    np.testing.assert_array_equal(blzarr.open(url, mode="r", storage_options=opts)[:], np.arange(N + 250))


# ------------------------------------------------------------------ fsspec's memory://
@pytest.fixture
def mem():
    pytest.importorskip("fsspec")
    url = f"memory://straddle-{uuid.uuid4().hex[:12]}"
    yield url
    bytestore.open_bytestore(url).remove_all()


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_a_memory_reader_across_a_replacement(mem, fmt):
    # every read call gives the values the reader opened (what it had cached) or raises naming the URL
    _make("carray", mem, None, OLD, fmt)
    r = blzarr.open(mem, mode="r")
    assert r[5] == 5
    _make("carray", mem, None, NEW, fmt)
    raised = 0
    for call, want in ((lambda: r[387], OLD[387]), (lambda: r[100:300], OLD[100:300]), (lambda: r[:], OLD),
                       (lambda: r.sum(), OLD.sum())):
        try:
            got = call()
        except blzarr.ConcurrentWriterError as e:
            assert mem in str(e)
            raised += 1
            continue
        assert np.asarray(got).dtype == OLD.dtype
        np.testing.assert_array_equal(got, want)
    assert raised           # r[:] needs chunks it had not read
    np.testing.assert_array_equal(blzarr.open(mem, mode="r")[:], NEW)


@pytest.mark.parametrize("kind", ["carray", "ctable"])
def test_a_memory_open_across_a_switch(mem, monkeypatch, kind):
    _make(kind, mem, None, OLD, "blz")
    reached = _switch_at_listing(monkeypatch, mem if kind == "carray" else f"{mem}/b",
                                 lambda: _make(kind, mem, None, NEW, "blz"))
    r = blzarr.open(mem, mode="r")
    assert reached
    got = _values(kind, r)
    assert got.dtype == NEW.dtype
    np.testing.assert_array_equal(got, NEW)


def test_a_memory_reader_beside_an_appender(mem, monkeypatch):
    _make("carray", mem, None, OLD, "blz")
    r = blzarr.open(mem, mode="r")
    assert r[5] == 5
    again = refused_reads(monkeypatch)
    w = blzarr.open(mem, mode="a")
    w.append(np.arange(N, N + 250))
    w.close()
    np.testing.assert_array_equal(r[:], OLD)
    assert again and all(k.startswith("data/__") for k in again)
    np.testing.assert_array_equal(blzarr.open(mem, mode="r")[:], np.arange(N + 250))


def test_a_memory_reader_of_a_dataset_without_uid_across_a_replacement(mem, monkeypatch):
    # as the S3 case: the same meta/storage bytes before and after, but another creation time
    import fsspec
    fs = fsspec.filesystem("memory")
    key = f"{mem}/meta/storage"
    _make("carray", mem, None, OLD, "blz")
    meta = json.loads(fs.cat(key))
    assert meta.pop("uid")
    fs.pipe(key, json_bytes(meta))
    r = blzarr.open(mem, mode="r")
    assert r[5] == 5
    dropped = _without_uid(monkeypatch)
    _make("carray", mem, None, OLD[::-1].copy(), "blz")
    assert dropped and fs.cat(key) == json_bytes(meta)
    with pytest.raises(blzarr.ConcurrentWriterError, match=mem):
        r[:]
    np.testing.assert_array_equal(blzarr.open(mem, mode="r")[:], OLD[::-1])


def test_versions_compare_by_etag_and_whole_seconds():
    # a HEAD answered from a listing gives Last-Modified in milliseconds, a GET in seconds; some S3
    # compatibles give none: the ETag decides then
    import datetime
    t = datetime.datetime(2026, 11, 27, 7, 0, 1, tzinfo=datetime.timezone.utc)
    assert readpins._same(('"e1"', t), ('"e1"', t.replace(microsecond=250000)))
    assert readpins._same(('"e1"', t), ('"e1"', None)) and readpins._same(('"e1"', ""), ('"e1"', t))
    assert not readpins._same(('"e1"', t), ('"e2"', t))
    assert not readpins._same(('"e1"', t), ('"e1"', t + datetime.timedelta(seconds=1)))
    assert not readpins._same(None, ('"e1"', t))        # (gone)
    assert readpins._same(1795760257.59338, 1795760257.59338) and not readpins._same(1.0, 2.0)
