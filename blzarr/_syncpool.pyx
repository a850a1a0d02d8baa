# cython: language_level=3, boundscheck=False, wraparound=False
"""One sync barrier over open descriptors: fsync/fdatasync of every one issued at once, from the
caller's thread and up to `MAX_HELPERS` plain C threads kept between calls.

A journaling file system makes one journal commit serve every sync waiting for it, so syncs issued
together cost about one commit where syncs one after the other cost one each.  The helpers never take
the GIL: a barrier hands each its batch through a lock of its own (one wake-up), the items are claimed
from an atomic counter by the helpers and by the caller, who does its share instead of waiting, and the
last thread to finish an item or to leave the batch wakes the caller.  A helper that has not started
when the caller has run out of items to claim is not waited for: the caller takes its job back.  A barrier of n syncs thus costs
n - 1 wake-ups and one wait, where a pool of Python threads paid for a future, a queue and the GIL's
hand-offs per sync.

When no thread can be started (the caller's platform refuses one) or the caller asks for it
(`serial`), the caller issues every sync itself.  In the child of a fork the parent's helpers do not
exist: the child forgets them and starts its own when it needs them.
"""

import os as _os

from libc.stdlib cimport malloc, calloc, free
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_acquire_lock, PyThread_release_lock, PyThread_start_new_thread,
                               WAIT_LOCK, NOWAIT_LOCK)


cdef extern from *:
    """
    #include <errno.h>
    #if defined(_WIN32)
    #include <io.h>
    static int blz_sync_fd(int fd, int data_only) {
        (void)data_only;
        return _commit(fd) == 0 ? 0 : errno;
    }
    #else
    #include <unistd.h>
    static int blz_sync_fd(int fd, int data_only) {
        int r;
        do {
    #if defined(__linux__)
            r = data_only ? fdatasync(fd) : fsync(fd);
    #else
            (void)data_only;
            r = fsync(fd);
    #endif
        } while (r != 0 && errno == EINTR);
        return r == 0 ? 0 : errno;
    }
    #endif
    #if defined(_MSC_VER)
    #include <intrin.h>
    #if defined(_WIN64)
    #define BLZ_SYNC_DEC(p) ((Py_ssize_t)_InterlockedExchangeAdd64((volatile __int64 *)(p), -1))
    #define BLZ_SYNC_CLAIM(p) ((Py_ssize_t)_InterlockedExchangeAdd64((volatile __int64 *)(p), 1))
    #define BLZ_SYNC_TAKE_BACK(p, o) (_InterlockedCompareExchange64((volatile __int64 *)(p), 0, (__int64)(o)) == (__int64)(o))
    #else
    #define BLZ_SYNC_DEC(p) ((Py_ssize_t)_InterlockedExchangeAdd((volatile long *)(p), -1))
    #define BLZ_SYNC_CLAIM(p) ((Py_ssize_t)_InterlockedExchangeAdd((volatile long *)(p), 1))
    #define BLZ_SYNC_TAKE_BACK(p, o) (_InterlockedCompareExchange((volatile long *)(p), 0, (long)(o)) == (long)(o))
    #endif
    #else
    /* acquire-release: what a thread wrote for its items is seen by the one that finishes last */
    #define BLZ_SYNC_DEC(p) __atomic_fetch_add((p), -1, __ATOMIC_ACQ_REL)
    #define BLZ_SYNC_CLAIM(p) __atomic_fetch_add((p), 1, __ATOMIC_RELAXED)
    /* *p = 0 if *p is still o (a job not taken yet, of this very batch: another caller may have
       handed the same helper a new one since) */
    static inline int blz_sync_take_back(Py_ssize_t *p, Py_ssize_t o) {
        return __atomic_compare_exchange_n(p, &o, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    #define BLZ_SYNC_TAKE_BACK(p, o) blz_sync_take_back((p), (o))
    #endif
    """
    int blz_sync_fd(int fd, int data_only) nogil
    Py_ssize_t BLZ_SYNC_DEC(Py_ssize_t *p) nogil
    Py_ssize_t BLZ_SYNC_CLAIM(Py_ssize_t *p) nogil
    bint BLZ_SYNC_TAKE_BACK(Py_ssize_t *p, Py_ssize_t o) nogil

from blzarr._workpool cimport BLZ_XCHG_SC


# helper threads at most (the caller's own thread makes one more)
cdef enum:
    MAX_HELPERS = 7
MAX_THREADS = MAX_HELPERS + 1


ctypedef struct batch_t:
    const int *fds
    const char *data_only       # 1: fdatasync, 0: fsync
    int *errs                   # the errno of each sync (0: done)
    Py_ssize_t n
    Py_ssize_t next             # the next item to claim
    Py_ssize_t left             # items not done + helpers not gone: 0 wakes the caller
    PyThread_type_lock done     # held until `left` reaches 0


ctypedef struct helper_t:
    PyThread_type_lock go       # released to hand the helper `job`
    Py_ssize_t job              # the batch_t * handed over (0: none); taken by one exchange
    helper_t *next_idle


ctypedef struct donelock_t:
    PyThread_type_lock lock     # held while on the free stack
    donelock_t *next


cdef PyThread_type_lock _pool_lock = PyThread_allocate_lock()
cdef helper_t *_idle = NULL         # helpers waiting for a batch (a stack)
# the locks barriers wait on, kept for the next barrier rather than freed: a helper that releases
# one may still be inside that call when the caller's wait returns, so it is never freed under it
cdef donelock_t *_free_done = NULL
cdef Py_ssize_t _nhelpers = 0       # helpers started (in this process)


def _after_fork_in_child():
    # the parent's helpers do not exist here; a lock one of them held stays held: made anew
    global _pool_lock, _idle, _nhelpers, _free_done
    _pool_lock = PyThread_allocate_lock()
    _idle = NULL
    _free_done = NULL
    _nhelpers = 0


if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)


def _without_pool_lock():
    """Act as if the pool's lock could not be allocated (for the tests: nothing else can make that
    allocation fail).  Only in a process with no helpers yet, such as a fresh forked child."""
    global _pool_lock
    if _nhelpers:
        raise RuntimeError("the pool has helpers that use its lock")
    if _pool_lock != NULL:
        PyThread_free_lock(_pool_lock)
    _pool_lock = NULL


def helpers():
    """How many helper threads this process has started."""
    return _nhelpers


cdef inline void _leave(batch_t *b) noexcept nogil:
    if BLZ_SYNC_DEC(&b.left) == 1 and b.done != NULL:
        PyThread_release_lock(b.done)


cdef void _do_items(batch_t *b) noexcept nogil:
    cdef Py_ssize_t k
    while True:
        k = BLZ_SYNC_CLAIM(&b.next)
        if k >= b.n:
            return
        b.errs[k] = blz_sync_fd(b.fds[k], b.data_only[k])
        _leave(b)


cdef void _helper(void *arg) noexcept nogil:
    # a plain C thread that never takes the GIL; it lives as long as the process
    global _idle
    cdef helper_t *h = <helper_t *>arg
    cdef batch_t *b
    while True:
        PyThread_acquire_lock(h.go, WAIT_LOCK)
        b = <batch_t *>BLZ_XCHG_SC(&h.job, 0)
        if b == NULL:
            # the caller finished the batch before this thread ran and took the job back
            PyThread_acquire_lock(_pool_lock, WAIT_LOCK)
            h.next_idle = _idle
            _idle = h
            PyThread_release_lock(_pool_lock)
            continue
        _do_items(b)
        # leave the batch first (the last touch of it): the caller waits for nothing else, not
        # even for this thread to get the idle stack's lock, which another helper may hold
        _leave(b)
        PyThread_acquire_lock(_pool_lock, WAIT_LOCK)
        h.next_idle = _idle
        _idle = h
        PyThread_release_lock(_pool_lock)


cdef helper_t *_new_helper() noexcept:
    """A started helper, waiting for its first batch; NULL when no thread can be had."""
    cdef helper_t *h = <helper_t *>calloc(1, sizeof(helper_t))
    if h == NULL:
        return NULL
    h.go = PyThread_allocate_lock()
    if h.go == NULL:
        free(h)
        return NULL
    PyThread_acquire_lock(h.go, NOWAIT_LOCK)
    if PyThread_start_new_thread(_helper, <void *>h) == -1:
        PyThread_free_lock(h.go)
        free(h)
        return NULL
    return h


def sync_fds(fds, data_only, bint serial=False):
    """Make the files behind the descriptors `fds` durable, all issued at once: fdatasync where the
    item of `data_only` (a sequence of flags as long as `fds`) is true, fsync elsewhere.  Returns a
    list of each sync's errno (0: done); every sync was issued and has returned when this returns.
    `serial`: the caller's thread issues them all, one after the other."""
    global _idle, _nhelpers, _free_done
    cdef Py_ssize_t n = len(fds), i, k = 0, want
    cdef batch_t b
    cdef helper_t *hs[MAX_HELPERS]
    cdef helper_t *h
    cdef int *fdv
    cdef char *dov
    cdef int *errs
    cdef donelock_t *dl = NULL
    if len(data_only) != n:
        raise ValueError(f"data_only has {len(data_only)} flags for {n} descriptors")
    if n == 0:
        return []
    fdv = <int *>malloc(n * sizeof(int))
    dov = <char *>malloc(n)
    errs = <int *>calloc(n, sizeof(int))
    if fdv == NULL or dov == NULL or errs == NULL:
        free(fdv); free(dov); free(errs)
        raise MemoryError()
    try:
        for i in range(n):
            fdv[i] = fds[i]
            dov[i] = 1 if data_only[i] else 0
        b.fds = fdv
        b.data_only = dov
        b.errs = errs
        b.n = n
        b.next = 0
        # without the pool's lock (its allocation failed, at import or in a forked child) no
        # helper can be handed work safely: the caller syncs alone
        want = 0 if serial or _pool_lock == NULL else min(n - 1, MAX_HELPERS)
        if want > 0:
            PyThread_acquire_lock(_pool_lock, WAIT_LOCK)
            while k < want and _idle != NULL:
                hs[k] = _idle
                _idle = _idle.next_idle
                k += 1
            while k < want and _nhelpers < MAX_HELPERS:
                h = _new_helper()
                if h == NULL:
                    break       # no more threads: the caller and the helpers it has do the rest
                _nhelpers += 1
                hs[k] = h
                k += 1
            PyThread_release_lock(_pool_lock)
        b.left = n + k
        b.done = NULL
        dl = NULL
        if k:
            PyThread_acquire_lock(_pool_lock, WAIT_LOCK)
            dl = _free_done
            if dl != NULL:
                _free_done = dl.next
            PyThread_release_lock(_pool_lock)
            if dl == NULL:
                dl = <donelock_t *>calloc(1, sizeof(donelock_t))
                if dl != NULL:
                    dl.lock = PyThread_allocate_lock()
                    if dl.lock == NULL:
                        free(dl)
                        dl = NULL
                    else:
                        PyThread_acquire_lock(dl.lock, NOWAIT_LOCK)
            if dl != NULL:
                b.done = dl.lock
            if b.done == NULL:
                # no lock to wait on: give the helpers back unused and sync alone
                PyThread_acquire_lock(_pool_lock, WAIT_LOCK)
                for i in range(k):
                    hs[i].next_idle = _idle
                    _idle = hs[i]
                PyThread_release_lock(_pool_lock)
                k = 0
                b.left = n
        with nogil:
            for i in range(k):
                hs[i].job = <Py_ssize_t>&b
                PyThread_release_lock(hs[i].go)
            _do_items(&b)
            # a helper that has not taken its job yet (no core for it on a busy machine) is not
            # waited for: the caller took its items, and takes the job back and leaves for it
            for i in range(k):
                if BLZ_SYNC_TAKE_BACK(&hs[i].job, <Py_ssize_t>&b):
                    _leave(&b)
            if k:
                PyThread_acquire_lock(b.done, WAIT_LOCK)    # every helper has left the batch
        if dl != NULL:
            # held again (by the wait above): back on the free stack as it came
            PyThread_acquire_lock(_pool_lock, WAIT_LOCK)
            dl.next = _free_done
            _free_done = dl
            PyThread_release_lock(_pool_lock)
        return [errs[i] for i in range(n)]
    finally:
        free(fdv)
        free(dov)
        free(errs)
