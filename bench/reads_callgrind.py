"""Instruction counts of the BLZ layout's local reads, one operation per `operator.call`:

    PYTHONPATH=/path/to/checkout OPENBLAS_NUM_THREADS=1 PYTHONHASHSEED=0 valgrind --tool=callgrind \
        --collect-atstart=no --toggle-collect=_operator_call --dump-after=_operator_call \
        python bench/reads_callgrind.py DIR R [OP ...]

It writes the fixture into DIR if it is not there (1,000,000 int64 in chunks of 16,384, BLZ, and the
same in the bcolz layout), sets every operation up, runs each once untimed, then R times each through
`operator.call`, which nothing else calls: callgrind counts only inside those calls and writes one
profile per call, so the k-th profile's total is one call of the (k // R)-th operation.  One thread,
the cyclic garbage collector off (a collection falls where the heap's history puts it).

The operations (BLZ unless named):
    open_ai      open read-only + one a[i]
    ai_warm      200 a[i] at spread i on an open carray whose chunks were read before
    aij          a[1000:50000] (four chunks, two of them in part)
    apos         a[positions]: 2,000 sorted positions spread over the array (seeded)
    bcolz_open_ai  open + one a[i] of the bcolz layout (its reads did not change: a control)
"""

import gc
import operator
import os
import sys

import numpy as np

import blzarr

OPS = ("open_ai", "ai_warm", "aij", "apos", "bcolz_open_ai")
N = 1_000_000


def make(root):
    for fmt in ("bcolz", "blz"):
        path = os.path.join(root, fmt)
        if not os.path.exists(path):
            blzarr.carray(np.arange(N, dtype="i8"), chunklen=16384, rootdir=path, mode="w", format=fmt).flush()


def setup(op, root):
    blz = os.path.join(root, "blz")
    if op == "open_ai":
        return lambda: int(blzarr.open(blz, mode="r")[123_456])
    if op == "bcolz_open_ai":
        return lambda: int(blzarr.open(os.path.join(root, "bcolz"), mode="r")[123_456])
    a = blzarr.open(blz, mode="r")
    if op == "ai_warm":
        idx = list(range(0, N, 5000))
        return lambda: sum(int(a[i]) for i in idx)
    if op == "aij":
        return lambda: int(a[1000:50000].sum())
    if op == "apos":
        pos = np.sort(np.random.default_rng(7).choice(N, 2000, replace=False))
        return lambda: int(a[pos].sum())
    raise SystemExit(f"unknown op {op}")


def main():
    root, rounds = sys.argv[1], int(sys.argv[2])
    ops = sys.argv[3:] or OPS
    blzarr.set_nthreads(1)
    make(root)
    calls = [(op, setup(op, root)) for op in ops]
    expect = {}
    for op, f in calls:
        expect[op] = f()        # untimed: the chunks read, the code paths warm
    gc.collect()
    gc.disable()
    for op, f in calls:
        for _ in range(rounds):
            assert operator.call(f) == expect[op], op
    print(" ".join(ops))


if __name__ == "__main__":
    main()
