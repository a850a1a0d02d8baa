"""The operations each Cython kernel module serves, for before/after comparisons of a refactor.

    PYTHONPATH=/path/to/checkout python bench/kernel_ops.py OP N        # OP done N times after setup
    PYTHONPATH=/path/to/checkout python bench/kernel_ops.py --wall [OP ...] [--rounds R]

With OP and N it builds the data (seeded, so every run builds the same), runs OP N times and exits:
run it under ``valgrind --tool=callgrind`` with N and with 0, and the difference of the two instruction
counts divided by N is OP's cost, free of the setup's and of the machine's load.  One thread
(`blzarr.set_nthreads(1)`) keeps the counts repeatable.  With --wall it prints one JSON line
{op: median seconds of one call} (R rounds of a few calls each) for interleaved wall-clock runs.

The operations and the kernel module behind each:
    scalar      a[i], random i                       _chunk.getitem_into
    slices      a[s:s + 1000], random s              _decode.DecodeChunks / _chunk
    read_all    a[:]                                 _decode.DecodeChunks
    fancy       a[sorted random positions]           _decode.TakeChunks / _chunk.take_core
    sum         a.sum()                              _sums.SumChunks
    where       the values of a where a mask holds   _where.WhereChunks, WhereIter
    col0        a[:, 0] of an (N/8, 8) array          _rows.RowsChunks
    expr_sum    lazyexpr("a * b + 1").sum()          _exprkernel.ExprChunks (sum)
    expr_count  eval("a > t") counted                _exprkernel.ExprChunks (count)
    expr_select ctable.fetchwhere("(a > t) & ...")   _exprkernel.ExprChunks (select), _rows.zip_fields
    create      carray(x): compress + statistics     _chunk.compress + _minmax
    blz_read    BLZ on disk: open, a[:]               _superchunk.ReadChunks (decode)
    blz_sum     BLZ on disk: open, sum()              _superchunk.ReadChunks (sum)
    blz_col0    BLZ on disk: a[:, 0]                  _superchunk.ReadChunks (rows)
"""

import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import blzarr

N = 1 << 20
OPS = ("scalar", "slices", "read_all", "fancy", "sum", "where", "col0", "expr_sum", "expr_count",
       "expr_select", "create", "blz_read", "blz_sum", "blz_col0")


def setup(op, tmp):
    """The call of `op` over its data, which is built here (only what `op` needs)."""
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.standard_normal(N))
    if op in ("scalar", "slices", "read_all", "fancy", "sum", "where"):
        a = blzarr.carray(x)
        if op == "scalar":
            idx = [int(i) for i in rng.integers(0, N, 500)]
            return lambda: [a[i] for i in idx]
        if op == "slices":
            starts = [int(i) for i in rng.integers(0, N - 1000, 100)]
            return lambda: [a[s:s + 1000] for s in starts]
        if op == "fancy":
            pos = np.sort(rng.integers(0, N, 20000))
            return lambda: a[pos]
        if op == "where":
            mask = x > np.quantile(x, 0.7)
            return lambda: sum(1 for _ in a.where(mask))
        return (lambda: a[:]) if op == "read_all" else (lambda: a.sum())
    if op == "col0":
        a2 = blzarr.carray(x.reshape(-1, 8))
        return lambda: a2[:, 0]
    if op.startswith("expr_"):
        y = rng.standard_normal(N)
        thr = float(np.quantile(x, 0.9))
        if op == "expr_select":
            t = blzarr.ctable([x, y], names=["a", "b"])
            return lambda: t.fetchwhere(f"(a > {thr!r}) & (b > 0)")
        a, b = blzarr.carray(x), blzarr.carray(y)
        if op == "expr_sum":
            return lambda: blzarr.lazyexpr("a * b + 1", user_dict={"a": a, "b": b}).sum()
        return lambda: blzarr.eval(f"a > {thr!r}", user_dict={"a": a}).sum()
    if op == "create":
        return lambda: blzarr.carray(x)
    root = os.path.join(tmp, "blz")
    if op == "blz_col0":
        blzarr.carray(x.reshape(-1, 8), rootdir=root, mode="w", format="blz").flush()
        d2 = blzarr.open(root, mode="r")
        return lambda: d2[:, 0]
    blzarr.carray(x, rootdir=root, mode="w", format="blz").flush()
    if op == "blz_read":
        return lambda: blzarr.open(root, mode="r")[:]
    return lambda: blzarr.open(root, mode="r").sum()


def main(argv):
    blzarr.set_nthreads(1)
    with tempfile.TemporaryDirectory() as tmp:
        if argv and argv[0] == "--wall":
            rounds = 7
            if "--rounds" in argv:
                rounds = int(argv[argv.index("--rounds") + 1])
                argv = argv[:argv.index("--rounds")] + argv[argv.index("--rounds") + 2:]
            names = argv[1:] or OPS
            out = {}
            for name in names:
                fn = setup(name, tmp)
                fn()
                times = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    for _ in range(3):
                        fn()
                    times.append((time.perf_counter() - t0) / 3)
                out[name] = statistics.median(times)
            print(json.dumps(out))
            return
        op, n = argv[0], int(argv[1])
        fn = setup(op, tmp)
        for _ in range(n):
            fn()


if __name__ == "__main__":
    main(sys.argv[1:])
