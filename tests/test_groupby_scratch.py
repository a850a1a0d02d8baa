"""The group-by's block buffers kept per thread between queries (`_Reader.release`, `_SCRATCH`): a
later query on the same thread reuses them, whatever its tables' dtypes and columns, and its results
are pandas' as before; a thread keeps no more than SCRATCH_KEEP bytes."""

import threading

import numpy as np
import pandas as pd
import pytest

import blzarr
from blzarr.query import groupby as gbmod


def _table(rng, n, kdt, vdt, rootdir=None):
    k = rng.integers(0, 300, n)
    if np.dtype(kdt).kind == "S":
        k = np.array([b"k%d" % x for x in k], dtype=kdt)
    else:
        k = k.astype(kdt)
    v = (rng.standard_normal(n) * 100).astype(vdt) if np.dtype(vdt).kind == "f" else \
        rng.integers(-1000, 1000, n).astype(vdt)
    w = rng.integers(0, 7, n).astype(np.int16)
    return blzarr.ctable([k, v, w], names=["k", "v", "w"], chunklen=4096, rootdir=rootdir), k, v, w


def _check(t, k, v, w, aggs):
    got = t.groupby(["k"], [[c, op, c] for c, op in aggs], out_flavor="pandas")
    # the reference in float64 (the engine adds floats as float64; pandas adds float32 as float32)
    df = pd.DataFrame({"k": k, "v": v.astype(np.float64) if v.dtype.kind == "f" else v, "w": w})
    want = df.groupby("k", sort=False).agg({c: op for c, op in aggs}).reset_index()
    assert got["k"].tolist() == want["k"].tolist()
    for c, op in aggs:
        if op == "mean" or np.dtype(df[c].dtype).kind == "f":
            rtol = 1e-6 if op == "sum" and v.dtype == np.float32 else 1e-9
            np.testing.assert_allclose(got[c].to_numpy(float), want[c].to_numpy(float), rtol=rtol)
        else:
            assert got[c].tolist() == want[c].tolist()


def _kept():
    """The buffers this thread keeps for its next reader (a list of dicts of arrays)."""
    return getattr(gbmod._SCRATCH, "free", None) or []


@pytest.mark.parametrize("nthreads", [1, 2])
def test_queries_in_turn_reuse_the_buffers_and_match_pandas(nthreads, tmp_path):
    rng = np.random.default_rng(5)
    cases = [(np.int64, np.float64, [("v", "sum"), ("w", "sum")]),
             (np.int32, np.float32, [("v", "mean")]),
             ("S4", np.int64, [("v", "sum"), ("w", "mean")]),
             (np.uint16, np.int8, [("v", "sum")]),
             (np.int64, np.float64, [("v", "mean"), ("w", "sum")])]
    old = blzarr.set_nthreads(nthreads)
    try:
        for i, (kdt, vdt, aggs) in enumerate(cases * 2):
            t, k, v, w = _table(rng, 30_000 + 997 * i, kdt, vdt,
                                rootdir=str(tmp_path / f"t{i}") if i % 2 else None)
            _check(t, k, v, w, aggs)
            # the calling thread ran a part, and kept that part's buffers
            kept = _kept()
            assert len(kept) == 1 and kept[0]
            before = {id(a) for a in kept[0].values()}
            reused = []
            real = gbmod._Reader.bufs

            def spy(self):
                b = real(self)
                if threading.current_thread() is threading.main_thread():
                    reused.append(any(id(a) in before for a in b.values()))
                return b
            gbmod._Reader.bufs = spy
            try:
                _check(t, k, v, w, aggs)
            finally:
                gbmod._Reader.bufs = real
            assert reused and reused[0]     # the next query's reader took the kept buffers
    finally:
        blzarr.set_nthreads(old)


def test_a_thread_keeps_no_more_than_scratch_keep(monkeypatch):
    rng = np.random.default_rng(6)
    t, k, v, w = _table(rng, 20_000, np.int64, np.float64)
    old = blzarr.set_nthreads(1)
    try:
        gbmod._SCRATCH.free = []
        monkeypatch.setattr(gbmod, "SCRATCH_KEEP", 4096 * 8 - 1)   # less than one block's buffer
        _check(t, k, v, w, [("v", "sum")])
        assert _kept() == []
        monkeypatch.setattr(gbmod, "SCRATCH_KEEP", 8 << 20)
        _check(t, k, v, w, [("v", "sum")])
        assert len(_kept()) == 1
        assert sum(a.nbytes for a in _kept()[0].values()) <= gbmod.SCRATCH_KEEP
    finally:
        blzarr.set_nthreads(old)
