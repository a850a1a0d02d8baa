"""What the repository's benchmark scripts (bench_ctable.py, bench_queries.py, bench_groupby.py) time
with and check for: the median of a call's wall times, and whether an optional peer is installed."""

import gc
import statistics
import time


def timeit(fn, repeats, budget=None, warmup=0):
    """The median wall time of `repeats` calls of `fn` (after `warmup` untimed ones), each after a
    garbage collection; fewer calls once their times add up to more than `budget` seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if budget is not None and sum(times) > budget:
            break
    return statistics.median(times)


def have(name):
    """Whether the module `name` can be imported."""
    try:
        __import__(name)
        return True
    except ImportError:
        return False
