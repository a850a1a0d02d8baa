"""The checks that refuse an existing destination, at URLs: `os.path` knows nothing of URLs
(``os.path.lexists('s3://...')`` is always False), so each asks the byte store
(`bytestore.occupied`)."""

import io
import json
import os

import numpy as np
import pytest

import blzarr
from blzarr import cli
from blzarr.storage import bytestore
from blzarr.storage.files import CREATING_FILE


@pytest.fixture
def s3env(s3, moto_server, monkeypatch):
    """(bucket URL, storage options), the server named by the environment too (salvage takes no
    storage options)."""
    url, opts = s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", opts["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", opts["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", opts["client_kwargs"]["region_name"])
    return url, opts


def test_occupied_local(tmp_path):
    p = tmp_path / "d"
    assert not bytestore.occupied(str(p)) and not bytestore.occupied(f"file://{p}")
    os.symlink(tmp_path / "nowhere", p)             # a dangling link is something there
    assert bytestore.occupied(str(p)) and bytestore.occupied(f"file://{p}")


def test_existing_urls_are_refused(s3env, tmp_path):
    import s3fs
    bucket, opts = s3env
    fs = s3fs.S3FileSystem(**opts)
    blzarr.carray(np.arange(50), rootdir=f"{bucket}/a", mode="w", storage_options=opts).close()
    blzarr.ctable([np.arange(50)], names=["t"], rootdir=f"{bucket}/t", mode="w", storage_options=opts).close()
    fs.pipe(f"{bucket}/other/notes.txt", b"not a dataset")
    fs.pipe(f"{bucket}/debris/{CREATING_FILE}", b"{}")      # a creation that never committed
    assert [bytestore.occupied(f"{bucket}/{k}", opts) for k in ("a", "t", "other", "debris", "none")] == \
        [True, True, True, False, False]
    src = str(tmp_path / "src")
    blzarr.carray(np.arange(10), rootdir=src, mode="w").close()

    def unchanged():
        fs.invalidate_cache()
        assert fs.cat(f"{bucket}/other/notes.txt") == b"not a dataset"
        np.testing.assert_array_equal(blzarr.open(f"{bucket}/a", mode="r", storage_options=opts)[:], np.arange(50))
        assert blzarr.open(f"{bucket}/t", mode="r", storage_options=opts)["t"][:].tolist() == list(range(50))

    for dst in ("a", "other"):
        with pytest.raises(blzarr.StorageError, match=f"cannot salvage into '{bucket}/{dst}': it exists"):
            blzarr.salvage(src, f"{bucket}/{dst}")
    pa = pytest.importorskip("pyarrow")
    for dst in ("t", "other"):
        with pytest.raises(blzarr.StorageError, match=f"'{bucket}/{dst}' already exists: pass mode='w'"):
            blzarr.ctable.fromarrow(pa.table({"p": np.arange(3)}), rootdir=f"{bucket}/{dst}", storage_options=opts)
    unchanged()
    # where only a creation's debris is, it writes
    assert blzarr.salvage(src, f"{bucket}/debris")["rows"] == 10
    np.testing.assert_array_equal(blzarr.open(f"{bucket}/debris", mode="r", storage_options=opts)[:],
                                  np.arange(10))


@pytest.mark.slow
def test_convert_writes_where_only_a_creations_objects_are(s3env, tmp_path):
    # a convert to a URL killed midway leaves its creation's objects there (the marker, no dataset):
    # run again as it was (no --overwrite), it writes; a prefix holding other objects is refused
    import s3fs
    bucket, opts = s3env
    fs = s3fs.S3FileSystem(**opts)
    src = str(tmp_path / "src")
    blzarr.carray(np.arange(10), rootdir=src, mode="w").close()
    fs.pipe(f"{bucket}/other/notes.txt", b"not a dataset")
    fs.pipe(f"{bucket}/debris/{CREATING_FILE}", b"{}")

    def convert(dst):
        return cli.main(["convert", src, f"{bucket}/{dst}", "--storage-options", json.dumps(opts)],
                        out=io.StringIO())
    assert convert("other") != 0
    fs.invalidate_cache()
    assert fs.find(f"{bucket}/other") == [f"{bucket[5:]}/other/notes.txt"]
    assert convert("debris") == 0
    np.testing.assert_array_equal(blzarr.open(f"{bucket}/debris", mode="r", storage_options=opts)[:],
                                  np.arange(10))


def test_from_dask_refuses_a_prefix_holding_other_objects(s3env):
    pytest.importorskip("dask")
    import s3fs
    bucket, opts = s3env
    s3fs.S3FileSystem(**opts).pipe(f"{bucket}/other/notes.txt", b"not a dataset")
    with pytest.raises(blzarr.StorageError, match="already exists"):
        blzarr.from_dask(np.arange(10), f"{bucket}/other", overwrite=False, storage_options=opts)
    c = blzarr.from_dask(np.arange(10), f"{bucket}/new", overwrite=False, storage_options=opts)
    assert c[:].tolist() == list(range(10))


def test_table_copies_and_groupby_results_refuse_existing_urls(s3env, tmp_path):
    bucket, opts = s3env
    blzarr.carray(np.arange(50), rootdir=f"{bucket}/a", mode="w", storage_options=opts).close()
    t = blzarr.ctable([np.arange(20) % 3, np.arange(20.0)], names=["k", "v"], rootdir=str(tmp_path / "t"),
                      mode="w")
    with pytest.raises(blzarr.StorageError, match="already exists"):
        t.copy(rootdir=f"{bucket}/a")
    with pytest.raises(blzarr.StorageError, match="already exists"):      # a carray is there
        blzarr.ctable([np.arange(3)], names=["z"], rootdir=f"{bucket}/a", storage_options=opts)
    with pytest.raises(blzarr.StorageError, match="already exists: pass mode='w'"):
        t.groupby(["k"], ["v"], rootdir=f"{bucket}/a")
    np.testing.assert_array_equal(blzarr.open(f"{bucket}/a", mode="r", storage_options=opts)[:], np.arange(50))
    t.copy(rootdir=f"{bucket}/a", mode="w").close()
    np.testing.assert_array_equal(blzarr.open(f"{bucket}/a", mode="r", storage_options=opts)["v"][:],
                                  np.arange(20.0))
