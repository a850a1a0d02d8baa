"""The block engine of queries: operands decoded chunk by chunk on every thread, fused with what uses them.

The rows ``[0, n)`` are cut into blocks of `blen` rows (the operands' chunk length, so a block decodes
each chunk once).  The blocks are shared among ``blzarr.set_nthreads`` threads, each taking a
contiguous run; a thread decodes every operand's block into buffers of its own (allocated once per
query and reused, so they stay in its cache), and calls a function on them at once: evaluate and
reduce, evaluate and write into an output, or evaluate a mask and compact the selected rows.  Only
that function's small result leaves the thread, so a reduction or a count never materializes the
evaluated array.

This module knows no blzarr class.  An operand is a NumPy array (used in place), an object with
``len()``, ``dtype``, ``shape`` and ``read_into(start, stop, out)`` (decoded into the thread's
buffer: a carray), or anything else with ``len()`` and slicing.
"""

import contextlib
import functools
import os
import threading

import numpy as np

from blzarr.runtime.params import get_nthreads
from blzarr.runtime.parallel import MIN_TASKS, run_all, run_each

# blocks per thread handed out at once by `map_blocks` (results of one window are held in memory)
WINDOW_PER_THREAD = 8

_ne_lock = threading.Lock()
_ne_state = {"users": 0, "saved": None}


def _after_fork_in_child():
    global _ne_lock
    _ne_lock = threading.Lock()     # a parent thread may have held it when the process forked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def numexpr_serial(numexpr):
    """numexpr on one thread for the duration: the blocks are already evaluated on every core, and
    numexpr's own pool would serialize the concurrent calls on its global lock."""
    if numexpr is None or get_nthreads() <= 1:
        yield
        return
    with _ne_lock:
        if _ne_state["users"] == 0:
            _ne_state["saved"] = numexpr.set_num_threads(1)
        _ne_state["users"] += 1
    try:
        yield
    finally:
        with _ne_lock:
            _ne_state["users"] -= 1
            if _ne_state["users"] == 0:
                numexpr.set_num_threads(_ne_state["saved"])


def block_bounds(n, blen):
    """The (start, stop) of consecutive blocks of `blen` rows over ``[0, n)`` (a new list)."""
    return list(_block_bounds(int(n), int(blen)))


@functools.lru_cache(maxsize=64)
def _block_bounds(n, blen):
    return tuple((s, min(s + blen, n)) for s in range(0, n, blen))


class Decoder:
    """Reads blocks of the array operands into per-thread buffers (one Decoder per query)."""

    def __init__(self, arrays, blen):
        self.arrays = dict(arrays)
        self.blen = blen
        self._tls = threading.local()
        self._buffered = {}
        for name, v in self.arrays.items():
            if isinstance(v, np.ndarray):
                continue
            dt = getattr(v, "dtype", None)
            if hasattr(v, "read_into") and dt is not None and dt != object:
                self._buffered[name] = ((blen,) + tuple(v.shape[1:]), dt)

    def scratch(self, name, shape, dtype):
        """Give every thread a buffer `name` of its own, besides the operands' (call before reading)."""
        self._buffered[name] = (tuple(shape), np.dtype(dtype))

    def buffers(self):
        bufs = getattr(self._tls, "bufs", None)
        if bufs is None:
            bufs = {name: np.empty(shape, dtype=dt) for name, (shape, dt) in self._buffered.items()}
            self._tls.bufs = bufs
        return bufs

    def read(self, s, e):
        """{name: rows [s, e) of that operand}; buffered ones are views of this thread's buffers."""
        bufs = self.buffers()
        local = {}
        for name, v in self.arrays.items():
            buf = bufs.get(name)
            if buf is not None:
                local[name] = v.read_into(s, e, buf[:e - s])
            else:
                local[name] = v[s:e]
        return local

    def owns(self, result):
        """Whether `result` may share memory with a buffer of this thread (it must be copied out)."""
        if not isinstance(result, np.ndarray):
            return False
        return any(np.may_share_memory(result, b) for b in self.buffers().values())


def run_blocks(bounds, decoder, fn, serial=None, decode=None, dynamic=False):
    """[fn(s, e, local) for every block], computed on all threads (contiguous runs per thread).

    `serial`: the numexpr module when `fn` calls it (kept on one thread meanwhile), or None.
    `decode`: per block, whether to decode the operands; where False, `local` is None (a block the
    query planner takes whole reads none of the predicate's operands).
    `dynamic`: the threads take the next block as they become free instead of contiguous runs (for
    `fn` that writes no shared output, a reduction: a thread the machine starves of CPU then holds
    up one block, not half of them)."""
    results = [None] * len(bounds)

    def one(k):
        s, e = bounds[k]
        results[k] = fn(s, e, decoder.read(s, e) if decode is None or decode[k] else None)
    if len(bounds) < MIN_TASKS:
        serial = None       # run_all keeps so few blocks in this thread: numexpr may use its own
    with numexpr_serial(serial):
        (run_each if dynamic and len(bounds) >= MIN_TASKS else run_all)(one, range(len(bounds)))
    return results


def map_blocks(bounds, decoder, fn, serial=None, window=None, decode=None):
    """Yield fn(s, e, local) for every block, in order, computed a window of blocks at a time on all
    threads: memory holds one window's results, and a consumer that stops early wastes one window."""
    if window is None:
        window = max(1, WINDOW_PER_THREAD * get_nthreads())
    # numexpr on one thread once for the whole query (switching its pool costs ~0.1 ms of thread
    # joins and starts a time; the windows' own switches then only count users)
    with numexpr_serial(serial if len(bounds) > window else None):
        for w in range(0, len(bounds), window):
            yield from run_blocks(bounds[w:w + window], decoder, fn, serial,
                                  None if decode is None else decode[w:w + window])
