"""The group-by's block buffers kept per thread between queries (`_Reader.release`, `_SCRATCH`): a
later query on the same thread reuses them, whatever its tables' dtypes and columns, and its results
are pandas' as before; a thread keeps no more than SCRATCH_KEEP bytes."""

import os
import signal
import time

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
        for i, (kdt, vdt, aggs) in enumerate(cases):
            t, k, v, w = _table(rng, 20_000 + 997 * i, kdt, vdt,
                                rootdir=str(tmp_path / f"t{i}") if i % 2 else None)
            _check(t, k, v, w, aggs)
            popped = []
            real = gbmod._Reader.bufs

            def spy(self):
                # a reader's first buffer on a thread: taken from the buffers that thread kept?
                if getattr(self.tls, "b", None) is None:
                    popped.append(bool(_kept()))
                return real(self)
            gbmod._Reader.bufs = spy
            try:
                _check(t, k, v, w, aggs)
            finally:
                gbmod._Reader.bufs = real
            assert popped and any(popped)   # the reader took buffers an earlier one kept
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


@pytest.mark.parametrize("aggs", [
    [("v", "sum"), ("w", "mean")],                      # the one-pass path (direct_sums)
    [("v", "min"), ("w", "max"), ("v", "first")],       # the general path's fields
])
@pytest.mark.parametrize("nthreads", [1, 2])
def test_kept_partial_states_are_reset_before_use(aggs, nthreads):
    rng = np.random.default_rng(8)
    t, k, v, w = _table(rng, 40_000, np.int32, np.int64)
    spec = [[c, op, f"{c}_{op}"] for c, op in aggs]
    old = blzarr.set_nthreads(nthreads)
    try:
        ref = t.groupby(["k"], spec, out_flavor="numpy")
        df = pd.DataFrame({"k": k, "v": v, "w": w})
        want = df.groupby("k", sort=False).agg(**{f"{c}_{op}": (c, op) for c, op in aggs})
        assert ref["k"].tolist() == want.index.tolist()
        for c, op in aggs:
            np.testing.assert_allclose(ref[f"{c}_{op}"], want[f"{c}_{op}"].to_numpy(float), rtol=1e-12)
        kept = list(gbmod._KEPT)
        assert kept
        for b in kept:
            b.view(np.uint8)[:] = 0x7f      # what a kept buffer held must not leak into a result
        taken = []
        real = gbmod._state_words

        def spy(n):
            got = real(n)
            taken.append(any(got is b for b in kept))
            return got
        gbmod._state_words = spy
        try:
            again = t.groupby(["k"], spec, out_flavor="numpy")
        finally:
            gbmod._state_words = real
        assert taken and all(taken)         # every partial of the second query was a kept buffer
        assert again.tobytes() == ref.tobytes()
    finally:
        blzarr.set_nthreads(old)


def test_states_over_keep_state_are_not_kept(monkeypatch):
    rng = np.random.default_rng(9)
    t, k, v, w = _table(rng, 20_000, np.int64, np.float64)
    monkeypatch.setattr(gbmod, "KEEP_STATE", 1000)
    _check(t, k, v, w, [("v", "sum")])
    assert gbmod._KEPT == []
    monkeypatch.setattr(gbmod, "KEEP_STATE", 32 << 20)
    _check(t, k, v, w, [("v", "sum")])
    assert gbmod._KEPT and sum(b.nbytes for b in gbmod._KEPT) <= gbmod.KEEP_STATE


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_the_kept_states_are_locked_groups():
    """A child forked while another thread of the parent held the lock of the kept states goes on
    (the lock is given back in the child) instead of waiting forever at its first group-by."""
    G = gbmod
    t = blzarr.ctable({"k": np.arange(1000) % 7, "v": np.arange(1000)})
    expected = t.groupby(["k"], ["v"], out_flavor="numpy")
    G._KEPT_LOCK.acquire()          # as another thread holding it at the fork
    try:
        pid = os.fork()
        if pid == 0:                # (the child: its exit status is the verdict)
            try:
                got = t.groupby(["k"], ["v"], out_flavor="numpy")
                os._exit(0 if (got == expected).all() else 3)
            except BaseException:
                os._exit(4)
    finally:
        G._KEPT_LOCK.release()
    for _ in range(200):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung at its group-by")
    assert os.waitstatus_to_exitcode(status) == 0
