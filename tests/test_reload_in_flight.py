"""A read in flight on one thread while another thread of the process swaps the object to a new
version: the first write of a mode 'a' handle (it takes the lock and loads the directory again), or a
reader loading what another handle committed.  The read is held inside the storage layer (a hook
blocks it after it took its file descriptor and before it reads through it) until the swap is done;
then it must finish with the values of one committed version, and later reads must see the new one.
"""

import os
import threading

import numpy as np
import pytest

import blzarr
from blzarr.storage import bcolz_layout, commitrec
from blzarr.storage.blz import local as blz_local, read as blz_read

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX descriptors")

N, CHUNK, BIG = 1000, 100, 10 ** 6


class _Gate:
    """Blocks the first storage read of one chosen thread until `go` is set."""

    def __init__(self):
        self.thread = None
        self.entered = threading.Event()
        self.go = threading.Event()
        self.hits = 0
        self.armed = lambda: True

    def wait_here(self):
        if threading.get_ident() == self.thread and not self.entered.is_set() and self.armed():
            self.hits += 1
            self.entered.set()
            assert self.go.wait(20), "the test never released the read"


class _HeldSuperchunk:
    """The `_superchunk` module as the BLZ layout's descriptor reads (blzarr.storage.blz.local) see it,
    each read by descriptor gated."""

    def __init__(self, real, gate):
        self._real = real
        self._gate = gate

    def __getattr__(self, name):
        fn = getattr(self._real, name)
        if name in ("pread", "pread_into", "fetch_decode", "read_blocks_into"):
            def held(*a, **k):
                self._gate.wait_here()
                return fn(*a, **k)
            return held
        return fn


@pytest.fixture
def gate(monkeypatch):
    g = _Gate()
    monkeypatch.setattr(blz_local, "sc", _HeldSuperchunk(blz_local.sc, g))
    real_run = blz_read.run_threads

    def run_threads(*a, **k):
        g.wait_here()
        return real_run(*a, **k)
    monkeypatch.setattr(blz_read, "run_threads", run_threads)
    real_chunk = bcolz_layout.BcolzDir.read_chunk

    def read_chunk(store, n):
        g.wait_here()
        return real_chunk(store, n)
    monkeypatch.setattr(bcolz_layout.BcolzDir, "read_chunk", read_chunk)
    yield g
    g.go.set()


def _make(kind, root, fmt):
    if kind == "carray":
        c = blzarr.carray(np.arange(N, dtype=np.int64), rootdir=root, mode="w", chunklen=CHUNK, format=fmt)
    else:
        c = blzarr.ctable([np.arange(N), np.arange(N) * 2.0], names=["a", "b"], rootdir=root, mode="w",
                          chunklen=CHUNK, format=fmt)
    c.close()


def _values(x, kind):
    x = np.asarray(x)
    return x["a"] if x.dtype.names else x


def _in_flight(gate, read):
    """Start `read()` on a thread and return once it is held inside the storage layer."""
    out = {}

    def run():
        gate.thread = threading.get_ident()
        try:
            out["value"] = read()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    assert gate.entered.wait(20), "the read never reached the storage layer"
    return t, out


def _finish(gate, t, out):
    gate.go.set()
    t.join(20)
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


READS = {
    "scalar": (lambda c, kind: c[250] if kind == "carray" else c.cols["a"][250], np.int64(250)),
    "slice": (lambda c, kind: c[150:450], np.arange(150, 450)),
    "chunks": (lambda c, kind: c[:], np.arange(N)),
}


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("kind", ["carray", "ctable"])
@pytest.mark.parametrize("how", sorted(READS))
def test_first_write_beside_a_read_in_flight(tmp_path, gate, fmt, kind, how):
    """The handle's first write (an append) takes the lock and loads its state again, while another
    thread of the process is inside a read of the same handle."""
    root = str(tmp_path / "d")
    _make(kind, root, fmt)
    c = blzarr.open(root, mode="a")
    read, want = READS[how]
    t, out = _in_flight(gate, lambda: read(c, kind))
    if kind == "carray":
        c.append(np.arange(N, N + 50))
    else:
        c.append([np.arange(N, N + 50), np.arange(N, N + 50) * 2.0])
    got = _finish(gate, t, out)
    assert np.array_equal(_values(got, kind), want)
    c.flush()
    assert _values(c[:], kind).tolist() == list(range(N + 50))
    c.close()
    assert _values(blzarr.open(root, mode="r")[:], kind).tolist() == list(range(N + 50))


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("kind", ["carray", "ctable"])
def test_reload_beside_a_scalar_read_in_flight(tmp_path, gate, fmt, kind):
    """A reader's scalar read is held; another handle rewrites every value and appends, and flushes;
    a scalar read of the reader on the main thread loads that version.  The held read returns the
    value of one of the two versions, and the reader shows the new one afterwards."""
    root = str(tmp_path / "d")
    _make(kind, root, fmt)
    r = blzarr.open(root, mode="r")
    col = r if kind == "carray" else r.cols["a"]
    assert col[5] == 5                              # the reader has loaded its state (and opened files)
    t, out = _in_flight(gate, lambda: col[250])
    w = blzarr.open(root, mode="a")
    if kind == "carray":
        w[:] = np.arange(N) + BIG
        w.append(np.arange(N, N + 50) + BIG)
    else:
        w.cols["a"][:] = np.arange(N) + BIG
        w.append([np.arange(N, N + 50) + BIG, np.arange(N, N + 50) * 2.0])
    w.flush()
    assert col[700] == 700 + BIG                    # this thread loads the new version
    got = _finish(gate, t, out)
    assert got in (250, 250 + BIG)
    assert col[250] == 250 + BIG
    assert _values(r[:], kind).tolist() == list(range(BIG, BIG + N + 50))
    w.close()
    r.close()


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("kind", ["carray", "ctable"])
def test_no_reload_while_a_call_of_another_thread_is_in_flight(tmp_path, gate, monkeypatch, fmt, kind):
    """Thread B's scalar read has seen a commit and is about to load it; thread A's whole read
    starts, loads that commit itself and is held inside the storage layer; another commit lands;
    then B goes on.  B must not load the newer version under A's read: A returns the rows of the
    version it started on (its short last chunk included, which the newer version fills)."""
    root = str(tmp_path / "d")
    _make(kind, root, fmt)
    r = blzarr.open(root, mode="r")
    col = r if kind == "carray" else r.cols["a"]
    assert col[5] == 5
    w = blzarr.open(root, mode="a")

    half = N + CHUNK // 2

    def commit(g):
        if g == 1:
            rows = np.arange(N, half)
            w.append(rows if kind == "carray" else [rows, rows * 2.0])
        else:
            # only the short last chunk's rows, which a reader keeps in memory
            if kind == "carray":
                w[N:half] = -1
            else:
                w.cols["b"][N:half] = -1.0
        w.flush()
    commit(1)

    seen = _Gate()
    real_changed = commitrec.Watch.changed

    def changed(self):
        out = real_changed(self)
        if out:
            seen.wait_here()
        return out
    monkeypatch.setattr(commitrec.Watch, "changed", changed)
    b, b_out = _in_flight(seen, lambda: col[700])    # held where it finds the new version
    gate.armed = lambda: r._pinned > 0              # held in the read, not in loading the version
    a, a_out = _in_flight(gate, lambda: r[:])      # loads version 1, then is held reading it
    commit(2)
    assert _finish(seen, b, b_out) == 700
    got = np.asarray(_finish(gate, a, a_out))
    ref = np.arange(half)
    # A reads one version: the one it started on, or (run again, as a read that a commit spanned
    # is) the newer one whole
    newer = ref[:N].tolist() + [-1] * (half - N)
    if kind == "carray":
        assert got.tolist() in (ref.tolist(), newer)
    else:
        assert got["a"].tolist() == ref.tolist() and got["b"].tolist() in (
            (ref * 2.0).tolist(), (ref[:N] * 2.0).tolist() + [-1.0] * (half - N))
    got = np.asarray(r[:])                          # the newer version from now on
    if kind == "carray":
        assert got.tolist() == ref[:N].tolist() + [-1] * (half - N)
    else:
        assert got["b"].tolist() == (ref[:N] * 2.0).tolist() + [-1.0] * (half - N)
    w.close()
    r.close()


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_block_read_before_a_reload_is_not_kept_for_the_new_version(tmp_path, monkeypatch, fmt):
    """A scalar read decoded its block from the old version, and is held before it keeps the block;
    meanwhile another handle rewrites every value and flushes, and a scalar read on this thread
    loads that version.  The held read returns the old value, and no later scalar read of the new
    version finds its block (neither the last block kept by the carray nor the process-wide block
    cache)."""
    from blzarr.containers.carray import read as carray_read
    root = str(tmp_path / "d")
    _make("carray", root, fmt)
    r = blzarr.open(root, mode="r")
    assert r[5] == 5
    held = _Gate()
    real = carray_read.disk_blocks

    class Blocks:
        def get(self, key):
            return real.get(key)

        def put(self, key, buf):
            held.wait_here()
            return real.put(key, buf)
    monkeypatch.setattr(carray_read, "disk_blocks", Blocks())
    t, out = _in_flight(held, lambda: r[250])
    w = blzarr.open(root, mode="a")
    w[:] = np.arange(N) + BIG
    w.flush()
    assert r[700] == 700 + BIG
    assert _finish(held, t, out) == 250
    assert r[250] == 250 + BIG
    assert r[251] == 251 + BIG
    assert r[:].tolist() == list(range(BIG, BIG + N))
    w.close()
    r.close()
