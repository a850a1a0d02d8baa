"""The query paths of a carray and a ctable, for before/after comparisons of a refactor of them.

    PYTHONPATH=/path/to/checkout python bench/query_ops.py OP N      # OP done N times after setup
    PYTHONPATH=/path/to/checkout valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect=_operator_call --dump-after=_operator_call python bench/query_ops.py --all R [OP ...]

It builds the data (seeded, so every run builds the same), runs OP N times and exits: run it under
``valgrind --tool=callgrind`` with N and with 0, and the difference of the two instruction counts
divided by N is OP's cost, free of the setup's and of the machine's load.  With --all it sets every
operation up (or the OPs given), runs each once untimed, then R times each through `operator.call`,
which nothing else calls: with the options above callgrind counts only inside those calls and writes
one profile per call, so the k-th profile's total is one call of the (k // R)-th operation.  One
thread (`blzarr.set_nthreads(1)`) keeps the counts repeatable.  The table has 200,000 rows in memory
in chunks of 8,192 (sorted int64 ``a``, uniform float64 ``b``, int32 ``k``); the carray on disk (BLZ)
is ``b`` again.

The operations:
    ct_where        the rows of a 1% query (two columns), iterated
    ct_where_sl     the same with skip=100, limit=1000
    ct_blocks       whereblocks of the same, blen=1000
    ct_count        where(...).count()
    ct_fetch        fetchwhere(..., out_flavor="numpy") (the engine writes the result)
    ct_fetch_sl     the same with skip=10, limit=500 (the rows block by block)
    ct_fetch_ct     fetchwhere(...) into a new ctable
    ct_range        fetchwhere of a range of the sorted column (the planner skips blocks)
    ct_mask         where over a boolean carray mask, iterated
    ct_count_mask   where(mask).count() over a boolean carray mask
    ct_explain      explain(...)
    ct_getitem      t["expression"]
    c_where_sl      the values of the on-disk carray where a mask holds, skip=10, limit=5000
    c_wheretrue     wheretrue of a boolean carray, skip=7, limit=20,000
    c_iter_sl       iter(skip=1000, limit=30,000) of the in-memory carray
    c_where_expr    the in-memory carray's where("expression"), 1% of the values, iterated
    c_where_mem     the in-memory carray's where(mask), 10% of the values, iterated
    c_where_big     the in-memory carray's where(mask), 90% of the values, iterated
    c_where_disk    the on-disk carray's where(mask), 10%, iterated (no limit: the fused engine)
    c_where_dexpr   the on-disk carray's where("expression"), 1%, iterated
    c_where_obj     where(mask) of an object carray of 20,000 values, iterated (the positions' path)
    c_getitem       the in-memory carray's a["expression"]
    c_count         the in-memory carray's where("expression").count()
    c_explain       the in-memory carray's where("expression").explain()
    c_getitem_mask  the in-memory carray's a[boolean carray] (10%)
    c_count_mask    the in-memory carray's where(boolean carray).count()
    ct_getitem_mask the table's t[boolean carray] (10%)
"""

import os
import shutil
import sys
import tempfile

import numpy as np

import blzarr

ROWS = 200_000
OPS = ("ct_where", "ct_where_sl", "ct_blocks", "ct_count", "ct_fetch", "ct_fetch_sl", "ct_fetch_ct",
       "ct_range", "ct_mask", "ct_count_mask", "ct_explain", "ct_getitem", "c_where_sl", "c_wheretrue", "c_iter_sl",
       "c_where_expr", "c_where_mem", "c_where_big", "c_where_disk", "c_where_dexpr", "c_where_obj",
       "c_getitem", "c_count", "c_explain", "c_getitem_mask", "ct_getitem_mask",
       "c_count_mask")
QUERY = "(b > 0.3) & (b < 0.31) & (k != 5)"
CQUERY = "(c > 0.3) & (c < 0.31)"
RANGE = "(a >= 50_000) & (a < 52_000)"


def setup(op, tmp):
    rng = np.random.default_rng(5)
    a = np.arange(ROWS, dtype=np.int64)
    b = rng.random(ROWS)
    k = rng.integers(0, 10, ROWS).astype(np.int32)
    t = blzarr.ctable([a, b, k], names=["a", "b", "k"], chunklen=8192)
    mask = blzarr.carray(b > 0.9, chunklen=8192)
    if op == "ct_where":
        return lambda: sum(1 for _ in t.where(QUERY))
    if op == "ct_where_sl":
        return lambda: sum(1 for _ in t.where(QUERY, skip=100, limit=1000))
    if op == "ct_blocks":
        return lambda: sum(len(x) for x in t.whereblocks(QUERY, blen=1000))
    if op == "ct_count":
        return lambda: t.where(QUERY).count()
    if op == "ct_fetch":
        return lambda: t.fetchwhere(QUERY, out_flavor="numpy")
    if op == "ct_fetch_sl":
        return lambda: t.fetchwhere(QUERY, out_flavor="numpy", skip=10, limit=500)
    if op == "ct_fetch_ct":
        return lambda: t.fetchwhere(QUERY)
    if op == "ct_range":
        return lambda: t.fetchwhere(RANGE, out_flavor="numpy")
    if op == "ct_mask":
        return lambda: sum(1 for _ in t.where(mask, outcols=["a"]))
    if op == "ct_count_mask":
        return lambda: t.where(mask).count()
    if op == "ct_explain":
        return lambda: str(t.explain(RANGE))
    if op == "ct_getitem":
        return lambda: t[QUERY]
    if op == "c_where_sl":
        d = blzarr.carray(b, chunklen=8192, rootdir=os.path.join(tmp, "b"), mode="w", format="blz")
        d.flush()
        d = blzarr.open(os.path.join(tmp, "b"), mode="r")
        return lambda: sum(1 for _ in d.where(mask, skip=10, limit=5000))
    if op == "c_wheretrue":
        return lambda: sum(1 for _ in mask.wheretrue(skip=7, limit=20_000))
    if op == "c_iter_sl":
        c = t.cols["b"]
        return lambda: sum(1 for _ in c.iter(skip=1000, limit=30_000))
    c = t.cols["b"]
    if op == "c_where_expr":
        return lambda: sum(1 for _ in c.where(CQUERY))
    if op == "c_where_mem":
        return lambda: sum(1 for _ in c.where(mask))
    if op == "c_where_big":
        big = blzarr.carray(b > 0.1, chunklen=8192)
        return lambda: sum(1 for _ in c.where(big))
    if op in ("c_where_disk", "c_where_dexpr"):
        d = blzarr.carray(b, chunklen=8192, rootdir=os.path.join(tmp, "b"), mode="w", format="blz")
        d.flush()
        d = blzarr.open(os.path.join(tmp, "b"), mode="r")
        if op == "c_where_disk":
            return lambda: sum(1 for _ in d.where(mask))
        return lambda: sum(1 for _ in d.where("(d > 0.3) & (d < 0.31)"))
    if op == "c_where_obj":
        o = blzarr.carray(np.array([str(x) for x in range(20_000)], dtype=object), chunklen=4096)
        om = blzarr.carray(b[:20_000] > 0.5, chunklen=4096)
        return lambda: sum(1 for _ in o.where(om))
    if op == "c_getitem_mask":
        return lambda: c[mask]
    if op == "c_count_mask":
        return lambda: c.where(mask).count()
    if op == "ct_getitem_mask":
        return lambda: t[mask]
    if op == "c_getitem":
        return lambda: c[CQUERY]
    if op == "c_count":
        return lambda: c.where(CQUERY).count()
    if op == "c_explain":
        return lambda: str(c.where(CQUERY).explain())
    raise SystemExit(f"unknown operation {op!r}; one of {' '.join(OPS)}")


def main(argv):
    if argv[0] == "--all":
        import operator
        blzarr.set_nthreads(1)
        tmp = tempfile.mkdtemp(prefix="blzarr-query-ops-")
        try:
            fns = [setup(op, tmp) for op in (argv[2:] or OPS)]
            for fn in fns:
                fn()
            for fn in fns:
                for _ in range(int(argv[1])):
                    operator.call(fn)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    op, n = argv[0], int(argv[1])
    blzarr.set_nthreads(1)
    tmp = tempfile.mkdtemp(prefix="blzarr-query-ops-")
    try:
        fn = setup(op, tmp)
        for _ in range(n):
            fn()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
