"""Redirects (blzarr.storage.replace) that name no complete stage, on moto's S3 server: a stage that is
gone, or a redirect object that is malformed or hostile.  Opens fail with an error naming the URL, and
a replacement (mode 'w') writes over them as over any damaged dataset."""

import json

import numpy as np
import pytest

import blzarr
from blzarr.storage import replace

COMMIT = {"carray": "meta/storage", "ctable": "__rootdirs__"}


def _dataset(url, kind, opts):
    if kind == "carray":
        blzarr.carray(np.arange(10), rootdir=url, mode="w", storage_options=opts).close()
    else:
        blzarr.ctable([np.arange(10)], names=["a"], rootdir=url, mode="w", storage_options=opts).close()


def _redirect(s3, kind, by, name):
    """A dataset of `kind` whose commit object is a redirect naming `by`: (its URL, options, fs)."""
    import s3fs
    bucket, opts = s3
    url = f"{bucket}/{name}"
    _dataset(url, kind, opts)
    fs = s3fs.S3FileSystem(**opts)
    fs.pipe(f"{url}/{COMMIT[kind]}", json.dumps({"replaced": {"version": 1, "by": by, "kind": kind}}).encode())
    fs.invalidate_cache()
    return url, opts, fs


def _replaced_by_new(url, opts, fs):
    a = blzarr.carray(np.arange(5) * 3, rootdir=url, mode="w", storage_options=opts)
    a.close()
    np.testing.assert_array_equal(blzarr.open(url, mode="r", storage_options=opts)[:], np.arange(5) * 3)
    fs.invalidate_cache()
    assert not [p for p in fs.find(url) if ".blzarr-" in p]


@pytest.mark.parametrize("kind", ["carray", "ctable"])
def test_a_redirect_to_a_stage_that_is_gone(s3, kind):
    # readers and writers say which replacement is missing; a new dataset can be written there
    stage = ".blzarr-new-0123456789ab"
    url, opts, fs = _redirect(s3, kind, stage, f"gone-{kind}")
    for mode in ("r", "a"):
        with pytest.raises(blzarr.FormatError, match=f"'{url}/{COMMIT[kind]}' names the replacement "
                                                     f"'{url}/{stage}', which holds no {kind}"):
            blzarr.open(url, mode=mode, storage_options=opts)
    _replaced_by_new(url, opts, fs)


@pytest.mark.parametrize("by", [".blzarr-new-x?y=1", ".blzarr-new-", ".blzarr-new-0123456789AB",
                                ".blzarr-new-0123456789abc", ".blzarr-new-..", "meta"])
def test_a_malformed_redirect(s3, by):
    # a stage name other than the ones replace makes: refused by readers and writers, naming the
    # commit object; a new dataset can be written there
    url, opts, fs = _redirect(s3, "carray", by, "bad")
    for mode in ("r", "a"):
        with pytest.raises(blzarr.FormatError, match=f"'{url}/meta/storage': its replacement record is malformed"):
            blzarr.open(url, mode=mode, storage_options=opts)
    _replaced_by_new(url, opts, fs)


def test_a_reader_meeting_a_replacement_that_completes(s3, monkeypatch):
    # a reader reads the redirect, the writer finishes the replacement and removes the stage before
    # the reader looks into it: the reader opens the completed dataset instead of failing
    import s3fs
    bucket, opts = s3
    url = f"{bucket}/race"
    _dataset(url, "carray", opts)
    blzarr.carray(np.arange(7) * 2, rootdir=f"{url}/{'.blzarr-new-00000000000a'}", mode="w",
                  storage_options=opts).close()
    fs = s3fs.S3FileSystem(**opts)
    fs.pipe(f"{url}/meta/storage", replace.redirect_bytes(".blzarr-new-00000000000a", "carray"))
    fs.invalidate_cache()
    real = replace.follow
    reached = []

    def follow_after_the_writer(store, rec, kind, mode):
        if not reached:
            reached.append(rec["by"])
            replace.roll_forward(store, rec, "carray")      # the writer completes the replacement
        return real(store, rec, kind, mode)
    monkeypatch.setattr(replace, "follow", follow_after_the_writer)
    a = blzarr.open(url, mode="r", storage_options=opts)
    assert reached == [".blzarr-new-00000000000a"]
    np.testing.assert_array_equal(a[:], np.arange(7) * 2)
    assert a.rootdir.rstrip("/") == url


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_a_reader_open_across_a_replacement(s3, fmt):
    # a reader opened before an int64 carray is replaced by a float64 one of the same shape: it may
    # read the values it opened, or fail; it must not decode the new objects as the old dtype
    bucket, opts = s3
    url = f"{bucket}/reader-{fmt}"
    blzarr.carray(np.arange(1000), rootdir=url, mode="w", chunklen=100, format=fmt, storage_options=opts).close()
    r = blzarr.open(url, mode="r", storage_options=opts)
    assert r[5] == 5
    blzarr.carray(np.arange(1000) + 0.5, rootdir=url, mode="w", chunklen=100, format=fmt,
                  storage_options=opts).close()
    try:
        got = r[:]
    except blzarr.StorageError:
        return
    np.testing.assert_array_equal(got, np.arange(1000))
