"""Instruction counts of `blzarr.open(path, 'r')[i]` (the harness's disk_open_scalar, one open + one
scalar per op) and of open + K random scalars (disk_scalars_cold's shape), one op per `operator.call`:

    PYTHONPATH=/path/to/checkout OPENBLAS_NUM_THREADS=1 PYTHONHASHSEED=0 valgrind --tool=callgrind \\
        --collect-atstart=no --toggle-collect=_operator_call --callgrind-out-file=OUT.%p \\
        python bench/open_scalar_callgrind.py DIR R CASE [N]

CASE: open0 (the open alone), open1 (open + one a[i]), cold2000 (open + 2000 random a[i]; the block cache is emptied before
each op, as a fresh process would have it), or bcolz1 / bcolz2000 for the real bcolz on its own copy.
The fixture (the harness's walk of N float64, default 10M, LZ4 clevel 5 shuffle, BLZ layout) is
written into DIR if it is not there.  The case runs once untimed, then R times through
`operator.call`: the profile's total / R is one operation.  Garbage collector off.
"""
import gc
import operator
import os
import sys

import numpy as np


def build(d, n):
    import blzarr
    from blzarr.bench import CLEVEL, CNAME
    x = np.cumsum(np.random.default_rng(0).standard_normal(n))
    blzarr.carray(x, cparams=blzarr.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME),
                  rootdir=os.path.join(d, "blz"), mode="w").flush()
    try:
        import bcolz
        bcolz.carray(x, cparams=bcolz.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME),
                     rootdir=os.path.join(d, "bcolz"), mode="w").flush()
    except ImportError:
        pass


def main():
    d, r, case = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000_000
    if not os.path.exists(os.path.join(d, "blz")):
        os.makedirs(d, exist_ok=True)
        build(d, n)
    idx = [int(i) for i in np.random.default_rng(3).integers(0, n, 2000)]
    if case.startswith("bcolz"):
        import bcolz as m
        path = os.path.join(d, "bcolz")
        clear = lambda: None  # noqa: E731
    else:
        import blzarr as m
        path = os.path.join(d, "blz")
        from blzarr.storage import blockcache
        clear = blockcache.disk_blocks.clear
    k = 0 if case.endswith("0") and not case.endswith("2000") else \
        1 if case.endswith("1") else 2000
    pos = [0]

    def op():
        clear()
        a = m.open(path, mode="r")
        j = pos[0]
        pos[0] += 1
        if k == 0:
            return a
        if k == 1:
            return a[idx[j % len(idx)]]
        for i in idx:
            a[i]

    gc.collect()
    gc.disable()
    op()
    for _ in range(r):
        operator.call(op)


if __name__ == "__main__":
    main()
