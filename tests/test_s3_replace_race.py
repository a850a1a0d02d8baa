"""Two writers racing a replacement of one URL on moto's S3 server (blzarr.storage.replace): the
interleavings are injected at the byte store between the writers' calls, and each test asserts the
injection point was reached.  The URL ends holding one writer's whole dataset, the other writer gets a
clear error, and `blzarr verify` is clean."""

import io
import json
import threading

import numpy as np
import pytest

import blzarr
from blzarr import cli
from blzarr.storage import bytestore, replace

OLD = np.arange(300)
A = np.arange(400) * 3
B = np.arange(250) + 0.5
SLOW = pytest.mark.slow
# the default run takes the BLZ carray cases of two tests (a few S3 requests); the rest is slow
BOTH = [pytest.param("bcolz", marks=SLOW), "blz"]


def _make(kind, url, opts, values, fmt):
    if kind == "carray":
        return blzarr.carray(values, rootdir=url, mode="w", chunklen=100, format=fmt, storage_options=opts)
    return blzarr.ctable([values, -values], names=["x", "y"], rootdir=url, mode="w", chunklen=100,
                         format=fmt, storage_options=opts)


def _holds(url, opts, kind, values):
    obj = blzarr.open(url, mode="r", storage_options=opts)
    np.testing.assert_array_equal(obj[:] if kind == "carray" else obj["x"][:], values)
    if kind == "ctable":
        np.testing.assert_array_equal(obj["y"][:], -values)
    out = io.StringIO()
    assert cli.main(["verify", url, "--storage-options", json.dumps(opts)], out=out) == 0, out.getvalue()


def _first_put_under_stage(monkeypatch, then):
    """Patch FsspecStore.put so that this thread's second put into a stage runs `then()` first (the
    build has begun: its first object is in the stage)."""
    real = bytestore.FsspecStore.put
    me = threading.get_ident()
    reached, puts = [], []

    def put(self, key, data, **kw):
        if not reached and threading.get_ident() == me and replace.STAGE_PREFIX in self.root + "/" + key:
            puts.append(key)
            if len(puts) == 2:
                reached.append(key)
                then()
        return real(self, key, data, **kw)
    monkeypatch.setattr(bytestore.FsspecStore, "put", put)
    return reached


@pytest.mark.parametrize("kind, fmt", [
    pytest.param(kind, fmt, marks=() if (kind, fmt) == ("carray", "blz") else SLOW)
    for kind in ("carray", "ctable") for fmt in ("bcolz", "blz")])
def test_a_replacement_completed_while_another_builds(s3, monkeypatch, kind, fmt):
    # A begins and starts building its stage; B replaces the URL whole meanwhile; A's switch is then
    # refused: the URL holds B's dataset, A gets ConcurrentWriterError naming it
    bucket, opts = s3
    url = f"{bucket}/race1-{kind}-{fmt}"
    _make(kind, url, opts, OLD, fmt).close()
    reached = _first_put_under_stage(monkeypatch, lambda: _make(kind, url, opts, B, fmt).close())
    with pytest.raises(blzarr.ConcurrentWriterError, match=url):
        _make(kind, url, opts, A, fmt)
    assert reached
    _holds(url, opts, kind, B)
    assert not [k for k in bytestore.open_bytestore(url, opts).find("") if replace.STAGE_PREFIX in k]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["carray", "ctable"])
@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_a_replacement_that_begins_while_another_builds(s3, monkeypatch, kind, fmt):
    # A starts building; B (another thread) begins and builds its stage, and waits at its switch; A
    # completes (its stage untouched by B's begin), then B switches: refused, the URL holds A's
    bucket, opts = s3
    url = f"{bucket}/race2-{kind}-{fmt}"
    _make(kind, url, opts, OLD, fmt).close()
    at_switch, a_done, errors = threading.Event(), threading.Event(), []
    real_publish = replace.publish

    def publish(store, stage, old_kind, *args, **kw):
        if threading.current_thread().name == "B":
            at_switch.set()
            assert a_done.wait(60)
        return real_publish(store, stage, old_kind, *args, **kw)
    monkeypatch.setattr(replace, "publish", publish)

    def run_b():
        try:
            _make(kind, url, opts, B, fmt).close()
        except Exception as e:      # noqa: BLE001 - handed to the main thread
            errors.append(e)
        at_switch.set()

    b = threading.Thread(target=run_b, name="B")

    def start_b():
        b.start()
        assert at_switch.wait(60)
    reached = _first_put_under_stage(monkeypatch, start_b)
    _make(kind, url, opts, A, fmt).close()
    a_done.set()
    b.join(60)
    assert reached and not b.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], blzarr.ConcurrentWriterError), errors
    assert url in str(errors[0])
    _holds(url, opts, kind, A)
    assert not [k for k in bytestore.open_bytestore(url, opts).find("") if replace.STAGE_PREFIX in k]


@pytest.mark.parametrize("fmt", BOTH)
def test_an_appender_beside_a_replacement(s3, fmt):
    # a writer opened (mode 'a') before a replacement appends after it: refused, naming the URL; the
    # URL holds the replacement whole
    bucket, opts = s3
    url = f"{bucket}/append-{fmt}"
    _make("carray", url, opts, OLD, fmt).close()
    w = blzarr.open(url, mode="a", storage_options=opts)
    assert w[5] == 5
    _make("carray", url, opts, B, fmt).close()
    with pytest.raises(blzarr.ConcurrentWriterError, match=url):
        w.append(np.arange(250))
        w.flush()
    del w
    _holds(url, opts, "carray", B)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_an_append_committed_while_a_replacement_builds(s3, monkeypatch, fmt):
    # the append commits before the replacement's switch: the replacement then puts its whole
    # dataset in place (the append is ordered before it)
    bucket, opts = s3
    url = f"{bucket}/append2-{fmt}"
    _make("carray", url, opts, OLD, fmt).close()

    def append():
        w = blzarr.open(url, mode="a", storage_options=opts)
        w.append(np.arange(250))
        w.flush()
        w.close()
    reached = _first_put_under_stage(monkeypatch, append)
    _make("carray", url, opts, A, fmt).close()
    assert reached
    _holds(url, opts, "carray", A)


@pytest.mark.slow
def test_a_journaled_assignment_while_a_replacement_builds(s3, monkeypatch):
    # a writer's assignment across chunk objects (bcolz layout: under the carray journal, which
    # stages a copy of the carray) runs while a replacement builds its stage: the journal leaves the
    # other stage alone, the replacement then puts its whole dataset in place
    bucket, opts = s3
    url = f"{bucket}/journal"
    _make("carray", url, opts, OLD, "bcolz").close()
    journals = []
    real_journaled = replace.journaled

    def journaled(store, rolled_back):
        journals.append(store.root)
        return real_journaled(store, rolled_back)
    monkeypatch.setattr(replace, "journaled", journaled)

    def assign():
        w = blzarr.open(url, mode="a", storage_options=opts)
        w[50:250] = -7
        w.flush()
        w.close()
        assert journals == [url]        # the assignment ran under the journal
    reached = _first_put_under_stage(monkeypatch, assign)
    _make("carray", url, opts, A, "bcolz").close()
    assert reached
    _holds(url, opts, "carray", A)
    assert not [k for k in bytestore.open_bytestore(url, opts).find("") if replace.STAGE_PREFIX in k]
