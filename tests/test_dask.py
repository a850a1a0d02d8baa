"""dask: carray/ctable.to_dask, pickling by reference, from_dask, eval(vm='dask'), on a LocalCluster
with worker processes (one for the module)."""

import os
import pickle

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import blzarr

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                       dashboard_address=None, memory_limit="1GiB")
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def blz_carray(path, a, chunklen=50, superchunklen=2, **kw):
    c = blzarr.carray(a, rootdir=str(path), format="blz", chunklen=chunklen, superchunklen=superchunklen, **kw)
    c.flush()
    return c


# ------------------------------------------------------------------------------------ to_dask
def test_carray_to_dask_one_block_per_superchunk(tmp_path, client):
    a = np.arange(1234, dtype="f8") * 0.5
    c = blz_carray(tmp_path / "c", a)
    x = c.to_dask()
    assert x.chunks == ((100,) * 12 + (34,),)     # 2 chunks of 50 a superchunk file
    assert len(os.listdir(tmp_path / "c" / "data")) == 13
    assert x.dtype == a.dtype
    assert_array_equal(x.compute(), a)             # on the cluster's worker processes
    assert float(x.sum().compute()) == a.sum()
    assert_array_equal((x[x > 300] * 2).compute(), a[a > 300] * 2)


def test_carray_to_dask_multidimensional_and_bcolz(tmp_path, client):
    a = np.arange(3000, dtype="i4").reshape(-1, 3, 2)
    c = blzarr.carray(a, rootdir=str(tmp_path / "b"), format="bcolz", chunklen=40)
    x = c.to_dask(partition_chunks=3)
    assert x.chunks[0] == (120, 120, 120, 120, 20) and x.chunks[1:] == ((3,), (2,))
    assert_array_equal(x.compute(), a)
    assert_array_equal(x.sum(axis=0).compute(), a.sum(axis=0))
    assert_array_equal(x.mean(axis=(0, 2)).compute(), a.mean(axis=(0, 2)))
    m = blzarr.carray(a, chunklen=40)    # in memory: pickled by value to the workers
    assert_array_equal(m.to_dask(partition_chunks=5).compute(), a)


def test_carray_to_dask_reads_only_its_own_superchunk(tmp_path):
    a = np.arange(600, dtype="i8")
    c = blz_carray(tmp_path / "c", a, superchunklen=4)
    x = c.to_dask()
    assert x.numblocks == (3,)
    # damage a chunk of the third superchunk file: block 1 never reads that file
    path = tmp_path / "c" / "data" / "__3__.bin"
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    c.free_cachemem()
    assert_array_equal(x.blocks[1].compute(scheduler="sync"), a[200:400])
    with pytest.raises(blzarr.ChecksumError, match="__3__.bin"):
        x.blocks[2].compute(scheduler="sync")


def test_ctable_to_dask(tmp_path, client):
    n = 1000
    data = {"i": np.arange(n, dtype="i4"), "f": np.linspace(0, 1, n), "b": np.arange(n) % 3 == 0,
            "t": np.arange(n).astype("M8[s]"), "s": np.array(["ab", "c", "def", "g"] * (n // 4))}
    t = blzarr.ctable(list(data.values()), names=list(data), rootdir=str(tmp_path / "t"), format="blz",
                      chunklen=64)
    df = t.to_dask(partition_chunks=None)
    want = t.todataframe()
    got = df.compute()
    pd.testing.assert_frame_equal(got, want)
    assert df.known_divisions and df.divisions[0] == 0 and df.divisions[-1] == n - 1
    # the smallest superchunk (1-byte bools: 65536 rows of 64-row chunks is the capacity) bounds them
    assert df.npartitions == 1
    df4 = t.to_dask(partition_chunks=4)
    assert df4.npartitions == -(-n // 256)
    pd.testing.assert_frame_equal(df4.compute(), want)
    assert int(df4["i"][df4["b"]].sum().compute()) == int(data["i"][data["b"]].sum())
    pd.testing.assert_frame_equal(t.to_dask(columns=["f", "s"], partition_chunks=2).compute(),
                                  want[["f", "s"]])
    with pytest.raises(KeyError, match="nope"):
        t.to_dask(columns=["nope"])


def test_ctable_to_dask_in_memory_and_empty(client):
    t = blzarr.ctable([np.arange(300), np.arange(300) * 2.0], names=["a", "b"], chunklen=32)
    df = t.to_dask(partition_chunks=2)
    assert df.npartitions == 5
    pd.testing.assert_frame_equal(df.compute(), t.todataframe())
    e = blzarr.ctable([np.zeros(0, "i8")], names=["z"])
    got = e.to_dask().compute()
    assert len(got) == 0 and got["z"].dtype == np.int64


# ------------------------------------------------------------------------------------ pickling
def test_on_disk_objects_pickle_by_reference(tmp_path):
    a = np.random.default_rng(0).random(50_000)
    c = blzarr.carray(a, rootdir=str(tmp_path / "c"), format="blz")
    c.append([1.0, 2.0])            # buffered: pickling flushes it first
    blob = pickle.dumps(c)
    assert len(blob) < 1000         # the directory, not the data
    r = pickle.loads(blob)
    assert r.mode == "r" and r.rootdir == c.rootdir
    assert_array_equal(r[:], np.concatenate([a, [1.0, 2.0]]))
    with pytest.raises(blzarr.ReadOnlyError):
        r.append([3.0])
    t = blzarr.ctable([a, a * 2], names=["x", "y"], rootdir=str(tmp_path / "t"))
    blob = pickle.dumps(t)
    assert len(blob) < 1000
    rt = pickle.loads(blob)
    assert rt.mode == "r" and rt.names == ["x", "y"] and (rt[:] == t[:]).all()
    # a directory gone by the time of unpickling: a clear error naming it
    blob = pickle.dumps(blzarr.carray(np.arange(3), rootdir=str(tmp_path / "gone")))
    import shutil
    shutil.rmtree(tmp_path / "gone")
    with pytest.raises(blzarr.StorageError, match="gone"):
        pickle.loads(blob)


def test_in_memory_objects_pickle_by_value():
    a = np.arange(10_000)
    c = blzarr.carray(a, chunklen=1000)
    r = pickle.loads(pickle.dumps(c))
    assert r.rootdir is None and r.chunklen == 1000
    assert_array_equal(r[:], a)
    t = blzarr.ctable([a, a * 0.5], names=["i", "f"])
    t.attrs["unit"] = "s"
    rt = pickle.loads(pickle.dumps(t))
    assert rt.rootdir is None and rt.names == ["i", "f"] and rt.attrs["unit"] == "s"
    assert (rt[:] == t[:]).all()


def test_objects_on_worker_processes(tmp_path, client):
    c = blz_carray(tmp_path / "c", np.arange(500))
    fut = client.submit(lambda x: (x.mode, x.rootdir, int(x.sum()), os.getpid()), c)
    mode, rootdir, total, pid = fut.result()
    assert (mode, rootdir, total) == ("r", c.rootdir, int(np.arange(500).sum()))
    assert pid != os.getpid()


# ------------------------------------------------------------------------------------ from_dask
@pytest.mark.parametrize("fmt", ["blz", pytest.param("bcolz", marks=pytest.mark.slow)])
def test_from_dask_array(tmp_path, client, fmt):
    a = np.arange(10_007, dtype="f8").reshape(-1, 1) * np.array([[1.0, -1.0]])
    x = da.from_array(a, chunks=(777, 2))          # not aligned to chunks: rechunked
    kw = dict(chunklen=100, format=fmt)
    if fmt == "blz":
        kw.update(superchunklen=4, checksum="sha256")
    c = blzarr.from_dask(x * 3, str(tmp_path / "o"), **kw)
    assert c.format == fmt and c.shape == a.shape and c.chunklen == 100 and c.mode == "a"
    assert_array_equal(c[:], a * 3)
    summary = c.verify()
    if fmt == "blz":
        assert summary["files"] == 26 and summary["chunks"] == 101 and summary["checksum"] == "sha256"
        assert sorted(os.listdir(tmp_path / "o" / "data")) == sorted(f"__{i}__.bin" for i in range(1, 27))
    else:
        assert len(os.listdir(tmp_path / "o" / "data")) == 101
        import bcolz
        assert_array_equal(bcolz.open(str(tmp_path / "o"), mode="r")[:], a * 3)
    r = blzarr.open(str(tmp_path / "o"), mode="r")     # the sizes were written
    assert r.shape == a.shape and r.nbytes == a.nbytes
    c.append(np.ones((3, 2)))                          # and it keeps working as a carray
    assert_array_equal(c[-4:], np.vstack([a[-1:] * 3, np.ones((3, 2))]))


def test_from_dask_edge_cases(tmp_path, client):
    e = blzarr.from_dask(da.zeros((0, 3), dtype="i2", chunks=5), str(tmp_path / "e"), format="blz")
    assert e.shape == (0, 3) and e.dtype == np.dtype("i2")
    a = np.arange(2000)
    x = da.from_array(a, chunks=300)
    y = x[x % 7 == 0]                                  # unknown chunk sizes
    c = blzarr.from_dask(y, str(tmp_path / "u"), format="blz", chunklen=16, superchunklen=3)
    assert_array_equal(c[:], a[a % 7 == 0])
    assert c.verify()["chunks"] == -(-len(c) // 16)
    c2 = blzarr.from_dask(a, str(tmp_path / "np"), format="bcolz", mode="r")   # a NumPy array too
    assert c2.mode == "r"
    assert_array_equal(c2[:], a)
    with pytest.raises(TypeError, match="dask array or dataframe"):
        blzarr.from_dask([1, 2, 3], str(tmp_path / "l"))
    with pytest.raises(ValueError, match="rootdir"):
        blzarr.from_dask(x, None)
    with pytest.raises(TypeError, match="objects"):
        blzarr.from_dask(da.from_array(np.array([{}, []], dtype=object), chunks=1), str(tmp_path / "o"))
    with pytest.raises(ValueError, match="mode"):
        blzarr.from_dask(x, str(tmp_path / "m"), mode="x")
    with pytest.raises(blzarr.StorageError, match="exists"):
        blzarr.from_dask(x, str(tmp_path / "np"), overwrite=False)
    assert_array_equal(blzarr.open(str(tmp_path / "np"))[:], a)
    c3 = blzarr.from_dask(x + 1, str(tmp_path / "np"), format="bcolz", overwrite=True)   # replaced
    assert_array_equal(c3[:], a + 1)


@pytest.mark.parametrize("fmt", ["blz", pytest.param("bcolz", marks=pytest.mark.slow)])
def test_from_dask_dataframe(tmp_path, client, fmt):
    n = 2500
    pdf = pd.DataFrame({"i": np.arange(n, dtype="i2"), "f": np.linspace(-1, 1, n, dtype="f4"),
                        "b": np.arange(n) % 2 == 0, "t": pd.date_range("2020-01-01", periods=n, freq="h"),
                        "s": [("x" * (k % 5)) for k in range(n)]})
    ddf = dd.from_pandas(pdf, npartitions=7)
    t = blzarr.from_dask(ddf, str(tmp_path / "t"), format=fmt, chunklen=128)
    assert t.format == fmt and len(t) == n and t.names == ["i", "f", "b", "t", "s"]
    assert [t.cols[k].dtype for k in t.names] == [np.dtype("i2"), np.dtype("f4"), np.dtype("?"),
                                                  pdf["t"].dtype, np.dtype("U4")]
    pd.testing.assert_frame_equal(t.todataframe(), pdf)
    for name in t.names:
        t.cols[name].verify()
    if fmt == "bcolz":
        import bcolz
        assert (bcolz.open(str(tmp_path / "t"), mode="r")["i"][:] == pdf["i"].to_numpy()).all()
    # and a round trip through to_dask
    back = blzarr.open(str(tmp_path / "t"), mode="r").to_dask(partition_chunks=3)
    pd.testing.assert_frame_equal(back.compute(), pdf)


def test_from_dask_dataframe_refusals(tmp_path):
    ddf = dd.from_pandas(pd.DataFrame({"s": ["a", None, "c"]}), npartitions=2)
    with pytest.raises(ValueError, match="'s'.*missing"):
        blzarr.from_dask(ddf, str(tmp_path / "a"))
    assert not (tmp_path / "a").exists()     # no half-written table is left behind
    ddf = dd.from_pandas(pd.DataFrame({"c": pd.Categorical(["a", "b"])}), npartitions=1)
    with pytest.raises(TypeError, match="'c'.*categorical"):
        blzarr.from_dask(ddf, str(tmp_path / "b"))
    ddf = dd.from_pandas(pd.DataFrame({"not valid": [1, 2]}), npartitions=1)
    with pytest.raises(ValueError, match="not valid"):
        blzarr.from_dask(ddf, str(tmp_path / "c"))


# ------------------------------------------------------------------------------------ eval
@pytest.mark.slow
def test_eval_vm_dask(tmp_path, client):
    a = np.arange(5000, dtype="f8")
    b = np.linspace(0, 1, 5000)
    ca = blz_carray(tmp_path / "a", a, chunklen=200, superchunklen=3)
    cb = blzarr.carray(b, chunklen=300)
    nb = b.copy()
    for expr in ("ca * 2 + cb", "sqrt(ca) - cb ** 2", "where(ca > 100, ca, -cb)", "(ca > 50) & (cb < 0.5)",
                 "ca * nb + 1", "sum(ca * cb)", "sum(ca)", "ca + 3"):
        want = blzarr.eval(expr, vm="python", out_flavor="numpy")
        got = blzarr.eval(expr, vm="dask", out_flavor="numpy")
        assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype, expr
        np.testing.assert_allclose(got, want, err_msg=expr)
    out = blzarr.eval("ca * 2", vm="dask")                       # a carray by default
    assert isinstance(out, blzarr.carray) and out.rootdir is None
    assert_array_equal(out[:], a * 2)
    out = blzarr.eval("ca - cb", vm="dask", rootdir=str(tmp_path / "res"), format="blz", chunklen=500)
    assert out.rootdir == str(tmp_path / "res") and out.format == "blz" and out.chunklen == 500
    assert_array_equal(out[:], a - b)
    m = np.arange(12.0).reshape(4, 3)
    cm = blzarr.carray(m)
    assert_array_equal(blzarr.eval("sum(cm, axis=1)", vm="dask", out_flavor="numpy"), m.sum(axis=1))
    assert blzarr.eval("2 * 3", vm="dask") == 6
    # what dask cannot do falls back to NumPy block by block, with the same result
    s = blzarr.carray(np.array(["abc", "xbz", "b"]))
    assert_array_equal(blzarr.eval("contains(s, 'b')", vm="dask", out_flavor="numpy"),
                       blzarr.eval("contains(s, 'b')", vm="python", out_flavor="numpy"))
    with pytest.raises(ValueError, match="lengths"):
        short = np.arange(3)
        blzarr.eval("ca + short", vm="dask")


def test_ctable_eval_vm_dask_and_refusals():
    t = blzarr.ctable([np.arange(1000), np.linspace(0, 1, 1000)], names=["a", "b"], chunklen=100)
    assert_array_equal(t.eval("a * b + 1", vm="dask", out_flavor="numpy"),
                       t.eval("a * b + 1", vm="python", out_flavor="numpy"))
    m = blzarr.ctable([np.zeros((4, 2)), np.arange(4)], names=["m", "i"])
    with pytest.raises(ValueError, match="'m'"):
        m.to_dask()
    pd.testing.assert_frame_equal(m.to_dask(columns=["i"]).compute(scheduler="sync"),
                                  pd.DataFrame({"i": np.arange(4)}))
    with pytest.raises(ValueError, match="partition_chunks"):
        blzarr.carray(np.arange(10)).to_dask(partition_chunks=0)
