"""Locks that a forked child finds free.

A child made by fork has only the thread that forked.  A lock another thread of the parent held at
that moment (a long read holding an object's call lock, its store's lock, a cache's) stays held in the
child for good, and the child's first call that takes it waits forever.  `Lock()` and `RLock()` make
the usual locks and remember them (weakly); in a forked child each is made free again before the
child goes on (`_at_fork_reinit`, as the threading module does for its own locks), and the objects
that count the calls in flight on them (`counts_calls`) start with none.  The state those
locks guarded is the parent's as it was at the fork: the caches and pools that may hold work of
threads gone in the child are emptied by their own modules' fork hooks.

Taking these locks costs what taking a plain lock costs: they are the plain locks.
"""

import _thread
import os
import threading
import weakref

# np.unique (called by reader threads) reaches numpy.ma through numpy's lazy module attribute, and
# the first access imports it.  A fork while another thread is inside that import leaves the
# module's import lock held in the child (CPython 3.11 does not free module locks at fork), and the
# child's first np.unique waits forever.  Imported here, before any thread of ours runs.
import numpy.ma  # noqa: F401,E402

# weak references to the locks made, without callbacks (a lock is made for every open of a carray:
# its registration must cost no Python call when made or when the lock goes); the dead ones are
# dropped whenever the list has doubled since the last time
_locks = []
_prune_at = 64
_guard = threading.Lock()


def _remember(lock):
    global _locks, _prune_at
    with _guard:
        _locks.append(weakref.ref(lock))
        if len(_locks) >= _prune_at:
            _locks = [r for r in _locks if r() is not None]
            _prune_at = max(64, 2 * len(_locks))
    return lock


def Lock():
    """A `threading.Lock` that a forked child gets released."""
    return _remember(_thread.allocate_lock())


def RLock():
    """A `threading.RLock` that a forked child gets released."""
    return _remember(_thread.RLock())


def counts_calls(obj):
    """Remember `obj`, whose ``_pinned`` counts the calls of threads in flight on it (no reload while
    one is): a forked child has none of those threads, so it starts with no call in flight (else a
    call of a parent thread that never ends there would hold the child on the version of the fork)."""
    key = id(obj)

    def gone(ref, key=key):
        if _counted.get(key) is ref:
            del _counted[key]
    # by identity (a WeakSet would compare the objects, and a carray's == is elementwise)
    with _guard:
        _counted[key] = weakref.ref(obj, gone)


_counted = {}       # id -> weak reference


def _after_fork_in_child():
    global _guard
    _guard = threading.Lock()
    for ref in list(_locks):
        lock = ref()
        if lock is not None:
            lock._at_fork_reinit()
    for ref in list(_counted.values()):
        obj = ref()
        if obj is not None:
            obj.__dict__.pop("_pinned", None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
