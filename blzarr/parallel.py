"""A process-wide thread pool for per-chunk work: the codec releases the GIL, so chunks decode at once."""

import threading
from concurrent.futures import ThreadPoolExecutor

from blzarr.params import get_nthreads

# fewer chunks than this are done in the calling thread: handing work to a pool costs ~10-20 us a task
MIN_TASKS = 4

_lock = threading.Lock()
_pool = {"n": 0, "executor": None}


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
        for item in items[k * step:(k + 1) * step]:
            fn(item)
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
