"""Readers on moto's S3 server that stay open while another writer replaces or appends to what they
opened (blzarr.storage.readpins): each read call returns the values the reader opened, or raises a
StorageError naming the URL; it never decodes the new objects with the old metadata."""

import numpy as np
import pytest

import blzarr
from object_store import refused_reads

N = 400
SLOW = pytest.mark.slow


def _carray(url, opts, fmt, values):
    blzarr.carray(values, rootdir=url, mode="w", chunklen=100, format=fmt, storage_options=opts).close()


def _ctable(url, opts, fmt, values):
    blzarr.ctable([values, values * 2], names=["a", "b"], rootdir=url, mode="w", chunklen=100, format=fmt,
                  storage_options=opts).close()


def _carray_calls(r):
    return {
        "scalar": lambda: r[387],
        "slice": lambda: r[100:300],
        "all": lambda: r[:],
        "iter": lambda: list(r.iter(0, N, 7)),
        "sum": lambda: r.sum(),
        "query": lambda: r["r > 250"],
        "eval": lambda: blzarr.eval("a * 2", user_dict={"a": r})[:],
        "where": lambda: list(blzarr.eval("a < 50", user_dict={"a": r}).wheretrue()),
    }


def _ctable_calls(t):
    return {
        "scalar": lambda: tuple(t[387]),
        "slice": lambda: t[100:300]["b"],
        "all": lambda: t[:]["a"],
        "iter": lambda: [row.b for row in t.iter(0, N, 7)],
        "sum": lambda: t["b"].sum(),
        "where": lambda: [row.a for row in t.where("a > 250")],
        "fetchwhere": lambda: t.fetchwhere("b < 100")["a"],
        "eval": lambda: t.eval("a + b")[:],
    }


def _want(kind, a):
    if kind == "carray":
        return {"scalar": a[387], "slice": a[100:300], "all": a, "iter": a[::7].tolist(), "sum": a.sum(),
                "query": a[a > 250], "eval": a * 2, "where": np.flatnonzero(a < 50).tolist()}
    b = a * 2
    return {"scalar": (a[387], b[387]), "slice": b[100:300], "all": a, "iter": b[::7].tolist(), "sum": b.sum(),
            "where": a[a > 250].tolist(), "fetchwhere": a[b < 100], "eval": a + b}


def _check(kind, url, reader, old):
    """Each read call of `reader` gives the values of `old` or a StorageError naming `url`: the names
    of the calls that raised."""
    calls = (_carray_calls if kind == "carray" else _ctable_calls)(reader)
    want = _want(kind, old)
    raised = []
    for name, call in calls.items():
        try:
            got = call()
        except blzarr.StorageError as e:
            assert url in str(e), (name, str(e))
            raised.append(name)
            continue
        if isinstance(want[name], np.ndarray):
            assert np.asarray(got).dtype == want[name].dtype, name
            np.testing.assert_array_equal(got, want[name], err_msg=name)
        else:
            assert got == want[name], name
    return raised


# the default run takes one case (a few S3 requests); the others are in the slow set
@pytest.mark.parametrize("new, kind, fmt", [
    pytest.param(new, kind, fmt, marks=() if (new, kind, fmt) == ("same dtype", "carray", "blz") else SLOW)
    for new in ("float64", "same dtype") for kind in ("carray", "ctable") for fmt in ("bcolz", "blz")])
def test_every_read_call_of_a_reader_open_across_a_replacement(s3, fmt, kind, new):
    # int64 replaced by float64 of the same shape, or by other int64 values with the same meta/storage
    # bytes but for its creation's uid: the reads either hit what the reader had cached or fail
    bucket, opts = s3
    url = f"{bucket}/{kind}-{fmt}"
    make = _carray if kind == "carray" else _ctable
    old = np.arange(N)
    make(url, opts, fmt, old)
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert (r[5] if kind == "carray" else r[5]["a"]) == 5
    make(url, opts, fmt, old + 0.5 if new == "float64" else old[::-1].copy())
    raised = _check(kind, url, r, old)
    assert "all" in raised          # nothing cached holds every chunk: the replacement was met
    # a reader opened now reads the new dataset
    fresh = blzarr.open(url, mode="r", storage_options=opts)
    col = fresh if kind == "carray" else fresh["a"]
    np.testing.assert_array_equal(col[:], old + 0.5 if new == "float64" else old[::-1])


@pytest.mark.parametrize("fmt", [pytest.param("bcolz", marks=SLOW), "blz"])
def test_a_reader_beside_an_appender_reads_what_it_opened(s3, fmt, monkeypatch):
    # an appender re-uploads the BLZ superchunk file it appends to: the reader's conditional GET of it
    # is refused, meta/storage is what the reader opened, so the file is read again and the reader
    # goes on with the values it opened (the bytes it counted did not change)
    bucket, opts = s3
    url = f"{bucket}/append-{fmt}"
    old = np.arange(N)
    _carray(url, opts, fmt, old)
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r[5] == 5
    again = refused_reads(monkeypatch)
    w = blzarr.open(url, mode="a", storage_options=opts)
    w.append(np.arange(N, N + 250))
    w.flush()
    w.close()
    assert _check("carray", url, r, old) == []
    if fmt == "blz":
        assert again and all(k.startswith("data/__") for k in again)    # the refused GET was met
    np.testing.assert_array_equal(blzarr.open(url, mode="r", storage_options=opts)[:], np.arange(N + 250))
