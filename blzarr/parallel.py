"""A process-wide thread pool for per-chunk work: the codec releases the GIL, so chunks decode at once."""

import threading
from concurrent.futures import ThreadPoolExecutor

from blzarr.params import get_nthreads

# fewer chunks than this are done in the calling thread: handing work to a pool costs ~10-20 us a task
MIN_TASKS = 4

_lock = threading.Lock()
_pool = {"n": 0, "executor": None}
_local = threading.local()          # .busy: this thread runs a share of run_all


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
        outer = getattr(_local, "busy", False)
        _local.busy = True
        try:
            for item in items[k * step:(k + 1) * step]:
                fn(item)
        finally:
            _local.busy = outer
    futures = [_executor(n - 1).submit(share, k) for k in range(1, n)]
    error = None
    try:
        share(0)
    except BaseException as e:  # noqa: B902 - re-raised below once all calls are done
        error = e
    for f in futures:
        try:
            f.result()
        except BaseException as e:  # noqa: B902
            if error is None:
                error = e
    if error is not None:
        raise error


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
        outer = getattr(_local, "busy", False)
        _local.busy = True
        try:
            while True:
                with lock:
                    item = next(it, _DONE)
                if item is _DONE:
                    return
                fn(item)
        finally:
            _local.busy = outer
    futures = [_executor(n - 1).submit(loop) for _ in range(1, min(n, len(items)))]
    error = None
    try:
        loop()
    except BaseException as e:  # noqa: B902 - re-raised below once the others are done
        error = e
        with lock:
            for _ in it:        # let the other threads stop early
                pass
    for f in futures:
        try:
            f.result()
        except BaseException as e:  # noqa: B902
            if error is None:
                error = e
    if error is not None:
        raise error


_DONE = object()
