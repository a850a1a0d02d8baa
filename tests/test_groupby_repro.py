"""Floating-point group-by results repeat bit for bit: the same table and number of threads give the
same bits whichever thread runs which blocks, and in whatever order the threads finish."""

import threading

import numpy as np
import pandas as pd
import pytest

import blzarr
from blzarr.query import groupby as gbmod
from blzarr.runtime import parallel

AGGS = [["v", "sum", "s"], ["v", "mean", "m"], ["v", "std", "d"], ["w", "sum", "ws"]]


def _table(n, nkeys, key_kind, rootdir=None, seed=7):
    rng = np.random.default_rng(seed)
    # magnitudes from 1e-6 to 1e6: a float sum then depends on the order of its additions
    v = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)
    w = rng.random(n).astype(np.float32)
    k = rng.integers(0, nkeys, n)
    key = {"int": k.astype(np.int64), "str": np.char.add(b"k", k.astype("S8")),
           "float": k * 0.5}[key_kind]
    cols = [key, v, w]
    # chunks of the smallest block the engine reads: many blocks to share among the threads
    return blzarr.ctable(cols, names=["k", "v", "w"], rootdir=rootdir, mode="w",
                         chunklen=gbmod.MIN_BLEN), pd.DataFrame({"k": key, "v": v, "w": w})


def _bits(res):
    return {name: np.ascontiguousarray(res[name]).view(np.uint8).tobytes() for name in res.dtype.names}


@pytest.fixture
def two_threads():
    prev = blzarr.set_nthreads(2)
    yield
    blzarr.set_nthreads(prev)


def _reversed_run_each(fn, items):
    """run_each as a thread that gets the parts in the opposite order would run them."""
    for item in reversed(list(items)):
        fn(item)


def _one_thread_run_each(fn, items):
    for item in items:
        fn(item)


@pytest.mark.parametrize("key_kind", ["int", "str", "float"])
@pytest.mark.parametrize("disk", [False, True])
def test_same_bits_whatever_order_the_parts_run(tmp_path, monkeypatch, two_threads, key_kind, disk):
    # 20,000 groups: past the size where the kernels prefetch the state
    t, df = _table(300_000, 20_000, key_kind, str(tmp_path / "t") if disk else None)
    ref = t.groupby(["k"], AGGS, out_flavor="numpy")
    want = _bits(ref)
    # the reference against pandas: the engine is right, not only repeatable
    exp = df.groupby("k", sort=False).agg(s=("v", "sum"), m=("v", "mean"), w=("w", "sum"))
    assert list(ref["k"]) == list(exp.index)
    np.testing.assert_allclose(ref["s"], exp["s"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ref["m"], exp["m"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ref["ws"], exp["w"], rtol=1e-5)
    for fake in (_reversed_run_each, _one_thread_run_each):
        monkeypatch.setattr(parallel, "run_each", fake)
        assert _bits(t.groupby(["k"], AGGS, out_flavor="numpy")) == want, fake.__name__
    monkeypatch.undo()
    assert _bits(t.groupby(["k"], AGGS, out_flavor="numpy")) == want


def test_same_bits_run_after_run_with_a_loaded_thread(two_threads):
    """Twenty runs on two threads, half of them beside a thread that keeps a core busy (in NumPy,
    without the GIL), so that the pool's threads take the parts at different paces."""
    t, _ = _table(400_000, 20_000, "int")
    want = _bits(t.groupby(["k"], AGGS, out_flavor="numpy"))
    stop = threading.Event()

    def hog():
        x = np.random.default_rng(1).random(1 << 18)
        while not stop.is_set():
            np.sort(x)

    for run in range(20):
        th = None
        if run % 2:
            th = threading.Thread(target=hog)
            th.start()
        try:
            assert _bits(t.groupby(["k"], AGGS, out_flavor="numpy")) == want, f"run {run}"
        finally:
            if th is not None:
                stop.set()
                th.join()
                stop.clear()


def test_filtered_and_empty_parts(two_threads):
    """A filter that keeps rows of the last blocks only (the first part has no partial) and one that
    keeps nothing: the groups still come in the order of their first kept rows."""
    t, df = _table(200_000, 20_000, "int")
    keep = np.zeros(len(df), bool)
    keep[150_000:] = df["v"].to_numpy()[150_000:] > 0
    got = t.groupby(["k"], [["v", "sum", "s"]], bool_arr=keep, out_flavor="numpy")
    exp = df[keep].groupby("k", sort=False)["v"].sum()
    assert list(got["k"]) == list(exp.index)
    np.testing.assert_allclose(got["s"], exp.to_numpy(), rtol=1e-9, atol=1e-9)
    none = t.groupby(["k"], [["v", "sum", "s"]], bool_arr=np.zeros(len(df), bool), out_flavor="numpy")
    assert len(none) == 0


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_parts_cut_by_threads_only(nthreads):
    prev = blzarr.set_nthreads(nthreads)
    try:
        for nblocks in (0, 1, 2, 5, 153):
            cut = gbmod._parts(nblocks)
            assert cut[0] == 0 and cut[-1] == nblocks
            assert len(cut) - 1 == max(1, min(nthreads, nblocks))
            assert all(a <= b for a, b in zip(cut, cut[1:]))
    finally:
        blzarr.set_nthreads(prev)
