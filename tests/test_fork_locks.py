"""A process made while another thread holds one of blzarr's locks works in the child.

A forked child has only the thread that forked: a lock that another thread of the parent held at
that moment (an object's call lock or version lock, its store's lock, the decoded-block cache's, the
thread pool's) stays held in the child for good, and the child's first call that takes it would
wait forever.  Thread A holds them here while the main thread forks; the child reads, queries, sums,
and appends to a copy, each under an alarm that turns a hang into a failure.  Children made with
forkserver and spawn start clean anyway: they open the same objects by path.
"""

import contextlib
import multiprocessing as mp
import os
import threading

import numpy as np
import pytest

import blzarr
from blzarr.runtime import parallel
from blzarr.storage import blockcache

from helpers import run_forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

N = 20_000
CHILD_SECONDS = 30
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _objects(root, fmt):
    a = blzarr.carray(np.arange(N, dtype=np.int64), rootdir=os.path.join(root, "a"), mode="w", chunklen=1000,
                      format=fmt)
    a.close()
    t = blzarr.ctable([np.arange(N), np.arange(N) * 0.5], names=["i", "f"], rootdir=os.path.join(root, "t"),
                      mode="w", chunklen=1000, format=fmt)
    t.close()
    return blzarr.open(os.path.join(root, "a"), mode="r"), blzarr.open(os.path.join(root, "t"), mode="r")


def _locks_of(obj, depth=4, seen=None):
    """The locks reachable from `obj` through its attributes (its own, its store's, its columns')."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, _LOCK_TYPES):
        return [obj]
    out = []
    if isinstance(obj, dict):
        values = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        values = list(obj)
    else:
        values = list(getattr(obj, "__dict__", {}).values())
    for v in values:
        if isinstance(v, (np.ndarray, str, bytes, int, float)) or v is None:
            continue
        out += _locks_of(v, depth - 1, seen)
    return out


def _work(a, t, root):
    """What the child does: every kind of read, a query, a sum, and a write of a copy."""
    exp = np.arange(N, dtype=np.int64)
    assert (a[:] == exp).all() and a[1234] == 1234 and a.sum() == exp.sum()
    assert list(a.where(a[:] > N - 3)) == [N - 2, N - 1]
    assert t.eval("i * 2")[:].sum() == 2 * exp.sum()
    assert [int(x) for x in t.fetchwhere(f"i > {N - 3}")["i"]] == [N - 2, N - 1]
    assert [r.i for r in t.where("i < 2")] == [0, 1]
    assert len(t) == N and t[5]["f"] == 2.5
    c = a.copy(rootdir=os.path.join(root, f"copy-{os.getpid()}"), mode="w")
    c.append(np.arange(10))
    c.flush()
    assert len(blzarr.open(c.rootdir, mode="r")) == N + 10
    c.close()


def _fork_and_wait(fn):
    code = run_forked(fn, CHILD_SECONDS)
    assert code != 2, "the child hung (a lock held by another thread of the parent when it forked)"
    assert code == 0, "the child failed (see its stderr)"


@contextlib.contextmanager
def _held_by_another_thread(locks, seconds):
    """`locks` held by another thread (for at most `seconds`) while the block runs."""
    held, go = threading.Event(), threading.Event()

    def hold():
        for lk in locks:
            lk.acquire()
        held.set()
        go.wait(seconds)
        for lk in reversed(locks):
            lk.release()
    th = threading.Thread(target=hold)
    th.start()
    try:
        assert held.wait(30)
        yield
    finally:
        go.set()
        th.join()


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_fork_while_another_thread_holds_the_locks(tmp_path, fmt):
    a, t = _objects(str(tmp_path), fmt)
    a[:10], t[:10], a.sum(), list(t.where("i < 3"))        # stores, caches and pool in use
    locks = _locks_of(a) + _locks_of(t) + _locks_of(blockcache.disk_blocks) + [parallel._lock]
    assert len(locks) >= 4
    with _held_by_another_thread(locks, 60):
        _fork_and_wait(lambda: _work(a, t, str(tmp_path)))
    _work(a, t, str(tmp_path))              # the parent goes on


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_fork_beside_a_thread_in_long_reads(tmp_path, fmt):
    a, t = _objects(str(tmp_path), fmt)
    blzarr.set_nthreads(2)
    stop = threading.Event()
    errors = []

    def reader():
        try:
            while not stop.is_set():
                a[:].sum(), a.sum(), list(a.where(a[:] > N - 5)), t["f"].sum(), t.fetchwhere("i > 19990")
        except BaseException as e:     # noqa: B902
            errors.append(e)
    th = threading.Thread(target=reader)
    th.start()
    try:
        for _ in range(6):
            _fork_and_wait(lambda: _work(a, t, str(tmp_path)))
    finally:
        stop.set()
        th.join()
    assert not errors


def _by_path(root):
    a, t = blzarr.open(os.path.join(root, "a"), mode="r"), blzarr.open(os.path.join(root, "t"), mode="r")
    _work(a, t, root)


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_multiprocessing_children_beside_held_locks(tmp_path, method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} here")
    a, t = _objects(str(tmp_path), "blz")
    a[:10], a.sum(), list(t.where("i < 3"))
    locks = _locks_of(a) + _locks_of(t) + _locks_of(blockcache.disk_blocks) + [parallel._lock]
    with _held_by_another_thread(locks, 120):
        ctx = mp.get_context(method)
        p = ctx.Process(target=_by_path, args=(str(tmp_path),))
        p.start()
        p.join(90)
        hung = p.is_alive()
        if hung:
            p.kill()
            p.join()
        assert not hung, f"a {method} child hung"
        assert p.exitcode == 0


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_forked_child_reloads_although_a_parent_thread_was_in_a_call(tmp_path, fmt):
    # a call of another thread in flight at the fork never ends in the child: it must not hold the
    # child's objects on the version they showed then
    from blzarr.containers.carray.read import pin_version, unpin_version
    a, t = _objects(str(tmp_path), fmt)
    a[:10], t[:10]
    pinned, go = threading.Event(), threading.Event()

    def in_call():
        la, lt = pin_version(a), pin_version(t)
        pinned.set()
        go.wait(60)
        unpin_version(t, lt)
        unpin_version(a, la)
    th = threading.Thread(target=in_call)
    th.start()

    def child():
        for path in ("a", "t"):
            w = blzarr.open(os.path.join(str(tmp_path), path), mode="a")
            w.append(np.arange(5) if path == "a" else (np.arange(5), np.arange(5) * 0.5))
            w.close()
        assert len(a) == N + 5 and a[N + 4] == 4 and (a[:] == np.r_[np.arange(N), np.arange(5)]).all()
        assert len(t) == N + 5 and t["i"][N + 4] == 4
    try:
        assert pinned.wait(30)
        _fork_and_wait(child)
    finally:
        go.set()
        th.join()
