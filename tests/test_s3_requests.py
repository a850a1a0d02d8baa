"""The requests a creation at a new URL and an open make on S3 (moto's server, every s3fs request
counted by `object_store.s3_calls`): a new URL is told by one LIST (no existence probes, no removal
of a prefix holding nothing), a missing object by one HEAD, and `blzarr.open` reads the commit
object once (its GET tells the kind and serves the open).  Each test also checks what the requests
are for: the values read back, and what a creation over other objects still does."""

import numpy as np
import pytest

import blzarr
from blzarr.storage import bytestore
from blzarr.storage.files import CREATING_FILE
from object_store import s3_calls

X = np.arange(20_000, dtype=np.int64)


def _names(calls, root):
    """(method, key below `root`) of each call."""
    cut = root.split("://", 1)[1].split("/", 1)[1]
    return [(m, k[len(cut):].lstrip("/") if k.startswith(cut) else k) for m, k in calls]


def _before_first_put(calls):
    out = []
    for m, k in calls:
        if m == "put_object":
            break
        out.append((m, k))
    return out


@pytest.mark.parametrize("fmt", [pytest.param("bcolz", marks=pytest.mark.slow), "blz"])
def test_a_carray_created_at_a_new_url_asks_one_list_first(s3, fmt):
    bucket, opts = s3
    url = f"{bucket}/new"
    # names beside it, sorting before and after its prefix, are not its objects
    fs = bytestore.open_bytestore(bucket, opts).fs
    for name in ("new-x", "new.txt", "new0/a", "newer/b"):
        fs.pipe_file(f"{bucket}/{name}"[5:], b"other")
    with s3_calls() as calls:
        blzarr.carray(X, rootdir=url, mode="w", format=fmt, storage_options=opts).close()
    calls = _names(calls, url)
    # on main: HEAD + LIST of meta/storage, of __rootdirs__, then remove_all's LIST, HEAD, LIST, HEAD, LIST
    assert _before_first_put(calls) == [("list_objects_v2", "")]
    assert ("put_object", CREATING_FILE) in calls and ("delete_object", CREATING_FILE) in calls
    assert not [c for c in calls if c[0] == "list_objects_v2" and c[1].endswith(("meta/sizes/", "storage/"))]
    np.testing.assert_array_equal(blzarr.open(url, mode="r", storage_options=opts)[:], X)
    for name in ("new-x", "new.txt", "new0/a", "newer/b"):
        assert fs.cat_file(f"{bucket}/{name}"[5:]) == b"other"


@pytest.mark.parametrize("mode", ["w", "a"])
def test_a_ctable_created_at_a_new_url_asks_one_list_first(s3, mode):
    bucket, opts = s3
    url = f"{bucket}/t"
    with s3_calls() as calls:
        blzarr.ctable([X, X * 0.5], names=["a", "b"], rootdir=url, mode=mode, format="blz",
                      storage_options=opts).close()
    calls = _names(calls, url)
    # on main (mode 'a'): 15 requests before the marker's put, __rootdirs__ and meta/storage asked twice
    assert _before_first_put(calls) == [("list_objects_v2", "")]
    # each column: one LIST of its prefix, no existence probe, no removal
    assert [c for c in calls if c[0] in ("list_objects_v2", "head_object", "delete_object", "delete_objects")] == [
        ("list_objects_v2", ""), ("list_objects_v2", "a"), ("head_object", "a/meta/sizes"),
        ("list_objects_v2", "b"), ("head_object", "b/meta/sizes"), ("delete_object", CREATING_FILE)]
    t = blzarr.open(url, mode="r", storage_options=opts)
    np.testing.assert_array_equal(t["a"][:], X)
    np.testing.assert_array_equal(t["b"][:], X * 0.5)


@pytest.mark.parametrize("kind", ["carray", "ctable"])
def test_a_creation_over_other_objects_still_finds_and_removes_them(s3, kind):
    # a prefix holding something (an object named as the root, another object below it): the LIST
    # says so, and the creation asks and removes as before
    bucket, opts = s3
    fs = bytestore.open_bytestore(bucket, opts).fs
    url = f"{bucket}/x"
    fs.pipe_file(url[5:], b"an object named as the prefix")
    fs.pipe_file(f"{url[5:]}/stray", b"another object")
    assert bytestore.open_bytestore(url, opts).holds_nothing() is False

    def make(mode):
        if kind == "carray":
            return blzarr.carray(X, rootdir=url, mode=mode, storage_options=opts)
        return blzarr.ctable([X], names=["a"], rootdir=url, mode=mode, storage_options=opts)
    if kind == "ctable":
        with pytest.raises(blzarr.StorageError, match="already exists"):
            make("a")           # other objects than a creation's debris: refused, left alone
        assert fs.cat_file(f"{url[5:]}/stray")
    make("w").close()
    for key in (url, f"{url}/stray", f"{url}/{CREATING_FILE}"):
        with pytest.raises(FileNotFoundError):
            fs.cat_file(key[5:])
    got = blzarr.open(url, mode="r", storage_options=opts)
    np.testing.assert_array_equal(got[:] if kind == "carray" else got["a"][:], X)


def test_holds_nothing_needs_the_page_that_would_hold_the_prefix(s3, monkeypatch):
    bucket, opts = s3
    store = bytestore.open_bytestore(f"{bucket}/p", opts)
    assert store.holds_nothing() is True
    # a page cut before 'p/' would sort: not told (the creation asks as before)
    monkeypatch.setattr(store, "_s3_call", lambda *a, **k: {"Contents": [{"Key": "p-1"}], "IsTruncated": True})
    assert store.holds_nothing() is None
    monkeypatch.setattr(store, "_s3_call", lambda *a, **k: {"Contents": [{"Key": "p-1"}], "IsTruncated": True,
                                                            "CommonPrefixes": [{"Prefix": "pq/"}]})
    assert store.holds_nothing() is True
    assert bytestore.open_bytestore("memory://nothing-here").holds_nothing() is None


@pytest.mark.parametrize("fmt", [pytest.param("bcolz", marks=pytest.mark.slow), "blz"])
def test_open_reads_the_commit_object_once(s3, fmt):
    bucket, opts = s3
    url, turl = f"{bucket}/c", f"{bucket}/t"
    blzarr.carray(X, rootdir=url, mode="w", format=fmt, storage_options=opts).close()
    blzarr.ctable([X, X * 2], names=["a", "b"], rootdir=turl, mode="w", format=fmt,
                  storage_options=opts).close()
    with s3_calls() as calls:
        a = blzarr.open(url, mode="r", storage_options=opts)
    calls = _names(calls, url)
    # on main: HEAD meta/storage (the kind), GET meta/storage (the open), ..., HEAD (its confirmation)
    assert calls[0] == ("get_object", "meta/storage")
    assert calls.count(("get_object", "meta/storage")) == 1
    assert [c for c in calls if c[0] == "head_object"] == [("head_object", "meta/storage")]
    assert calls[-1] == ("head_object", "meta/storage")
    np.testing.assert_array_equal(a[:], X)
    with s3_calls() as calls:
        t = blzarr.open(turl, mode="r", storage_options=opts)
    calls = _names(calls, turl)
    # on main: HEAD + LIST of meta/storage, HEAD __rootdirs__, GET __rootdirs__ ... HEAD __rootdirs__
    assert calls[:2] == [("get_object", "meta/storage"), ("get_object", "__rootdirs__")]
    assert calls.count(("get_object", "__rootdirs__")) == 1
    assert [c for c in calls if c[0] == "head_object"] == [("head_object", "__rootdirs__")]
    np.testing.assert_array_equal(t["b"][:], X * 2)
    w = blzarr.open(turl, mode="a", storage_options=opts)      # (a writer's open takes it too)
    w.append((X[:5], X[:5] * 2))
    w.flush()
    assert len(blzarr.open(turl, mode="r", storage_options=opts)) == len(X) + 5


def test_a_handed_commit_object_is_confirmed_like_one_read_by_the_open(s3, monkeypatch):
    # a replacement between blzarr.open's GET (which tells the kind) and the end of the open: the
    # open's confirmation sees another version and opens again, so the new dataset is read whole
    from blzarr.storage import readpins
    bucket, opts = s3
    url = f"{bucket}/h"
    blzarr.carray(X, rootdir=url, mode="w", format="blz", storage_options=opts).close()
    new = np.arange(20_000, dtype=np.float64) * 0.25
    real = readpins.handed
    reached = []

    def handed_then_replaced(store, key, read):
        reached.append(key)
        blzarr.carray(new, rootdir=url, mode="w", format="blz", storage_options=opts).close()
        return real(store, key, read)
    monkeypatch.setattr(readpins, "handed", handed_then_replaced)
    got = blzarr.open(url, mode="r", storage_options=opts)
    assert reached == ["meta/storage"]
    assert got.dtype == new.dtype
    np.testing.assert_array_equal(got[:], new)
