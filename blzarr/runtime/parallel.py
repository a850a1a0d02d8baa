"""A process-wide thread pool for per-chunk work: the codec releases the GIL, so chunks decode at once."""

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from blzarr.runtime.params import get_nthreads

# fewer chunks than this are done in the calling thread: handing work to a pool costs ~10-20 us a task
MIN_TASKS = 4

_lock = threading.Lock()
_pool = {"n": 0, "executor": None}
_local = threading.local()          # .busy: this thread runs a share of run_all


@contextlib.contextmanager
def _busy():
    """Within the block this thread counts as running pool work (`_local.busy`); as before after it."""
    outer = getattr(_local, "busy", False)
    _local.busy = True
    try:
        yield
    finally:
        _local.busy = outer


def _after_fork_in_child():
    # a forked child has only the thread that forked: the parent's pool threads are not there, so a
    # task handed to the inherited executor would never run (and its lock may be held): start afresh
    global _lock, _local
    _lock = threading.Lock()
    _local = threading.local()
    _pool["n"], _pool["executor"] = 0, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def codec_threads():
    """Threads for one Blosc call: 1 inside a share of `run_all` (the chunks are already spread over the
    threads; C-Blosc 1's _ctx calls would also start and join threads of their own for every chunk),
    else get_nthreads()."""
    return 1 if getattr(_local, "busy", False) else get_nthreads()


def _executor(n):
    with _lock:
        if _pool["n"] != n:
            old = _pool["executor"]
            _pool["executor"] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="blzarr")
            _pool["n"] = n
            if old is not None:
                old.shutdown(wait=False)
        return _pool["executor"]


def _here_then_join(here, futures, on_error=None):
    """Run here() on the calling thread, then wait for every future; the first exception (here()'s,
    else the futures' in order) is raised once all have returned.  on_error() runs right after here()
    fails, before the wait (to let the other threads stop early)."""
    error = None
    try:
        here()
    except BaseException as e:  # noqa: B902 - re-raised below once all calls are done
        error = e
        if on_error is not None:
            on_error()
    for f in futures:
        try:
            f.result()
        except BaseException as e:  # noqa: B902
            if error is None:
                error = e
    if error is not None:
        raise error


def run_all(fn, items):
    """Call fn(item) for every item, on get_nthreads() threads when there are enough items.

    Exceptions propagate (the first one raised, after every call has finished).  `fn` must not itself
    wait on this pool.
    """
    n = get_nthreads()
    items = list(items)
    if n <= 1 or len(items) < MIN_TASKS or threading.current_thread().name.startswith("blzarr"):
        for item in items:
            fn(item)
        return
    # one task per thread, each a contiguous share of the items, the calling thread doing the first:
    # a future per chunk costs more in hand-offs than the chunk takes to decode, and contiguous shares
    # keep the threads out of each other's pages when they fault in a fresh output array
    step = -(-len(items) // n)

    def share(k):
        with _busy():
            for item in items[k * step:(k + 1) * step]:
                fn(item)
    futures = [_executor(n - 1).submit(share, k) for k in range(1, n)]
    _here_then_join(lambda: share(0), futures)


def run_each(fn, items):
    """Call fn(item) for every item, the threads taking the next item as they become free (the calling
    thread included): a thread that gets little CPU (a busy machine) holds up only the item it has.
    For work whose items cost about the same and write to separate places (compressing chunks)."""
    n = get_nthreads()
    items = list(items)
    if n <= 1 or len(items) < 2 or threading.current_thread().name.startswith("blzarr"):
        for item in items:
            fn(item)
        return
    it = iter(items)
    lock = threading.Lock()

    def loop():
        with _busy():
            while True:
                with lock:
                    item = next(it, _DONE)
                if item is _DONE:
                    return
                fn(item)
    futures = [_executor(n - 1).submit(loop) for _ in range(1, min(n, len(items)))]

    def drain():
        with lock:
            for _ in it:        # let the other threads stop early
                pass
    _here_then_join(loop, futures, on_error=drain)


_DONE = object()


def run_ordered(produce, consume, count, window=None):
    """consume(k, produce(k)) for k = 0 .. count-1: `produce` on every thread (the calling one
    included), `consume` on the calling thread, in order, as soon as item k is ready.

    Producing the next items overlaps consuming the earlier ones (compressing chunks while the
    calling thread writes the finished ones); at most `window` items (default 4 per thread) are
    produced ahead of the consumer, which bounds the memory they hold.  The first exception of either
    side stops the others and is raised."""
    n = get_nthreads()
    if n <= 1 or count < 2 or threading.current_thread().name.startswith("blzarr"):
        for k in range(count):
            consume(k, produce(k))
        return
    window = max(1, window or 4 * n)
    cond = threading.Condition()
    done = {}
    st = {"next": 0, "consumed": 0, "error": None, "stop": False}

    def claim():            # with cond held: the next item to produce, or None
        k = st["next"]
        if st["stop"] or k >= count or k >= st["consumed"] + window:
            return None
        st["next"] = k + 1
        return k

    def make(k):
        try:
            r = produce(k)
        except BaseException as e:  # noqa: B902 - handed to the calling thread
            with cond:
                if st["error"] is None:
                    st["error"] = e
                st["stop"] = True
                cond.notify_all()
            return
        with cond:
            done[k] = r
            cond.notify_all()

    def worker():
        with _busy():
            while True:
                with cond:
                    k = claim()
                    while k is None:
                        if st["stop"] or st["next"] >= count:
                            return
                        cond.wait()
                        k = claim()
                make(k)
    futures = [_executor(n - 1).submit(worker) for _ in range(n - 1)]
    try:
        with _busy():
            for k in range(count):
                while True:
                    with cond:
                        if st["error"] is not None:
                            raise st["error"]
                        if k in done:
                            r = done.pop(k)
                            break
                        j = claim()
                        if j is None:
                            cond.wait()
                            continue
                    make(j)             # nothing ready: produce one more here
                consume(k, r)
                del r
                with cond:
                    st["consumed"] = k + 1
                    cond.notify_all()
    finally:
        with cond:
            st["stop"] = True
            cond.notify_all()
        for f in futures:
            f.result()


def run_threads(fn, n):
    """Call fn() once on each of `n` threads at the same time (the calling thread is one of them), for
    work objects whose threads share the items among themselves (`blzarr._chunk`'s, which release the
    GIL).  Nested in a pool thread, or with n <= 1, fn() runs once here (it then does every item).
    The first exception is raised after every call has returned."""
    n = min(n, get_nthreads())
    if n <= 1 or threading.current_thread().name.startswith("blzarr"):
        fn()
        return
    futures = [_executor(get_nthreads() - 1).submit(fn) for _ in range(n - 1)]
    _here_then_join(fn, futures)
