"""Run one blzarr operation of the harness in a loop, for a profiler.

    python -m bench.profile_ops OP [--n N] [--seconds S] [--dataset smooth|walk] [--cprofile]
    py-spy record --native -o prof.svg -- python -m bench.profile_ops scalars

OP is one of: read_all scalars slices fancy sum iter where disk_scalars disk_slices append
create disk_create.  With --cprofile it prints the 25 most expensive functions (cumulative).
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import blzarr
from bench import CLEVEL, CNAME, NTHREADS
from bench.harness import APPEND_BATCH, SLICE_LEN, datasets

OPS = ("read_all", "scalars", "slices", "fancy", "sum", "iter", "where", "disk_scalars",
       "disk_slices", "append", "create", "disk_create", "disk_open_read", "disk_sum", "eval_sum",
       "col2d")


def build(op, x, tmp):
    cp = blzarr.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME)
    rng = np.random.default_rng(1)
    n = len(x)
    if op == "col2d":
        x = x[:len(x) // 8 * 8].reshape(-1, 8)        # as the harness's disk_col0: N/8 rows of 8
    if (op.startswith("disk_") and op != "disk_create") or op == "col2d":
        root = os.path.join(tmp, "a")
        blzarr.carray(x, cparams=cp, rootdir=root, mode="w").flush()
        a = blzarr.open(root, mode="r")
    else:
        a = blzarr.carray(x, cparams=cp)
    idx = [int(i) for i in rng.integers(0, n, 2000)]
    starts = [int(i) for i in rng.integers(0, n - SLICE_LEN, 300)]
    fancy = np.sort(rng.choice(n, 20_000, replace=False))
    mask = blzarr.carray(x > np.quantile(x, 0.9), cparams=cp)

    def scalars():
        for i in idx:
            a[i]

    def slices():
        for s in starts:
            a[s:s + SLICE_LEN]

    def append():
        root = os.path.join(tmp, "app")
        b = blzarr.carray(np.empty(0), cparams=cp, rootdir=root, mode="w", expectedlen=n)
        for s in range(0, n, APPEND_BATCH):
            b.append(x[s:s + APPEND_BATCH])
        b.flush()

    def disk_open_read():
        return blzarr.open(os.path.join(tmp, "a"), mode="r")[:]

    def disk_sum():
        return blzarr.open(os.path.join(tmp, "a"), mode="r").sum()

    thr = float(np.quantile(x, 0.9)) if op == "eval_sum" else 0.0

    def disk_create():
        blzarr.carray(x, cparams=cp, rootdir=os.path.join(tmp, "dc"), mode="w").flush()

    return {
        "read_all": lambda: a[:],
        "scalars": scalars, "disk_scalars": scalars,
        "slices": slices, "disk_slices": slices,
        "fancy": lambda: a[fancy],
        "sum": lambda: a.sum(),
        "iter": lambda: sum(1 for _ in a.iter(0, 1_000_000)),
        "where": lambda: np.fromiter(a.where(mask), dtype=a.dtype),
        "append": append,
        "create": lambda: blzarr.carray(x, cparams=cp),
        "disk_create": disk_create,
        "disk_open_read": disk_open_read,
        "disk_sum": disk_sum,
        "eval_sum": lambda: blzarr.eval(f"a > {thr!r}", user_dict={"a": a}).sum(),
        "col2d": lambda: a[:, 0],
    }[op]


def main():
    ap = argparse.ArgumentParser(prog="python -m bench.profile_ops")
    ap.add_argument("op", choices=OPS)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--dataset", choices=("smooth", "walk"), default="smooth")
    ap.add_argument("--cprofile", action="store_true")
    args = ap.parse_args()
    blzarr.set_nthreads(NTHREADS)
    x = datasets(args.n, (args.dataset,))[args.dataset]
    tmp = tempfile.mkdtemp(prefix="blzarr-prof-")
    try:
        fn = build(args.op, x, tmp)
        fn()  # warm up
        if args.cprofile:
            import cProfile
            import pstats
            pr = cProfile.Profile()
            pr.enable()
            t0, k = time.perf_counter(), 0
            while time.perf_counter() - t0 < args.seconds:
                fn()
                k += 1
            pr.disable()
            pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
        else:
            t0, k = time.perf_counter(), 0
            while time.perf_counter() - t0 < args.seconds:
                fn()
                k += 1
        dt = time.perf_counter() - t0
        print(f"{args.op} on {args.dataset} n={args.n:,}: {k} runs, {dt / k * 1e3:.3f} ms each")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
