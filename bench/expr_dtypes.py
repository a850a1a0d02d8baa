"""Expressions over operands of every numeric dtype (float64, int64, int32, float32, bool and their
mixes), blzarr's lazyexpr / eval over compressed carrays against numexpr on the uncompressed arrays
(interleaved rounds, medians, ratios).

    PYTHONPATH=/path/to/checkout python bench/expr_dtypes.py [N [ROUNDS [CLEVEL]]] [--cpu] [--json]
        [--rows NAME ...]

--cpu: time each call by the process's CPU time (every thread's, `time.process_time`) instead of the
wall clock: on a machine shared with other work the wall clock measures the load.  --json: one JSON
object of the medians (ms) on the last line, for a harness that alternates two checkouts.
Every row's result is checked against NumPy's on the uncompressed arrays first (integers exactly,
floats to a relative 1e-9, float32 sums to 1e-5).  numexpr computes some rows in another dtype than
NumPy (int32 arithmetic of small integers, float32 with a Python float in float64): it is timed on
them as it is.
"""
import argparse
import json
import statistics
import time

import numexpr as ne
import numpy as np

import blzarr
from blzarr.query import planner
from blzarr.runtime.params import get_nthreads

planner.ENABLED = False         # every row evaluates all its rows: no chunk skipped by statistics

# name: (blzarr expression, what it runs: "sum" (lazyexpr(...).sum()), "eval" (eval("sum(...)")) or
# "count" (lazyexpr(...).count_nonzero()))
ROWS = {
    "f8*f8 sum": ("a * b", "sum"),
    "f8*i8 sum": ("a * v", "sum"),
    "f8*i8 eval": ("a * v", "eval"),
    "f8*i8 count": ("a * v > 1e4", "count"),
    "f8*i4 sum": ("a * v4", "sum"),
    "f8*i4 eval": ("a * v4", "eval"),
    "f8*f4 sum": ("a * c", "sum"),
    "f8*b1 sum": ("a * m", "sum"),
    "f4*f4 sum": ("c * c", "sum"),
    "i8*i8 sum": ("v * v", "sum"),
    "i8*i4 sum": ("v * v4", "sum"),
    "i4+i4 sum": ("v4 + v4", "sum"),
    "f8 cmp count": ("a > 0", "count"),
    "i8 cmp count": ("v > 5000", "count"),
    "i4 cmp count": ("v4 > 5000", "count"),
    "f4 cmp count": ("c > 0", "count"),
    # computed in their own dtype by the kernel's typed registers
    "i4*i4-i4 sum": ("v4 * 3 - v4", "sum"),
    "i8*i8 eval": ("v * v", "eval"),
    "f4 poly sum": ("c * c - c", "sum"),
    "f4*f4 cmp count": ("c * c > 1.5", "count"),
    "i4 & f4 count": ("(v4 > 5000) & (c > 0)", "count"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=10_000_000)
    ap.add_argument("rounds", nargs="?", type=int, default=11)
    ap.add_argument("clevel", nargs="?", type=int, default=5)
    ap.add_argument("--cpu", action="store_true", help="time by process CPU time (all threads)")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON on the last line")
    ap.add_argument("--rows", nargs="+", choices=sorted(ROWS), help="only these rows")
    args = ap.parse_args()
    n = args.n
    clock = time.process_time if args.cpu else time.perf_counter
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.standard_normal(n))
    arrays = {"a": x, "b": x[::-1].copy(), "v": rng.integers(1, 10_000, n),
              "v4": rng.integers(1, 10_000, n).astype(np.int32), "c": (x / 7).astype(np.float32),
              "m": rng.random(n) < 0.3}
    cp = blzarr.cparams(clevel=args.clevel, cname="lz4")
    ops = {k: blzarr.carray(v, cparams=cp) for k, v in arrays.items()}
    assert len({c.chunklen for c in ops.values() if c.dtype.itemsize == 8}) == 1
    ne.set_num_threads(get_nthreads())      # the threads blzarr runs on

    def blz(expr, how):
        if how == "sum":
            return lambda: blzarr.lazyexpr(expr, user_dict=ops).sum()
        if how == "eval":
            return lambda: blzarr.eval(f"sum({expr})", user_dict=ops)
        return lambda: blzarr.lazyexpr(expr, user_dict=ops).count_nonzero()

    def nex(expr, how):
        if how == "count":
            return lambda: np.count_nonzero(ne.evaluate(expr, local_dict=arrays))
        return lambda: ne.evaluate(f"sum({expr})", local_dict=arrays)

    names = args.rows or list(ROWS)
    cases = {}
    for name in names:
        expr, how = ROWS[name]
        with np.errstate(all="ignore"):
            want = eval(expr, {}, dict(arrays))
        want = np.count_nonzero(want) if how == "count" else np.sum(want)
        got = blz(expr, how)()
        if np.asarray(want).dtype.kind in "biu":
            assert got == want, (name, got, want)
        else:
            rtol = 1e-5 if np.asarray(want).dtype == np.float32 else 1e-9
            assert np.isclose(got, want, rtol=rtol), (name, got, want)
        cases[f"{name}: blzarr"] = blz(expr, how)
        cases[f"{name}: numexpr"] = nex(expr, how)
    for f in cases.values():        # warm-up: numexpr's compile cache, the carrays' buffers
        f()
    times = {k: [] for k in cases}
    keys = list(cases)
    for r in range(args.rounds):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            t0 = clock()
            cases[k]()
            times[k].append(clock() - t0)
    med = {k: statistics.median(t) * 1e3 for k, t in times.items()}
    what = "CPU" if args.cpu else "wall"
    print(f"{'row':16s} {'blzarr ms':>10s} {'numexpr ms':>11s} {'ratio':>6s}   ({what}, medians of "
          f"{args.rounds}, n={n}, clevel {args.clevel})")
    for name in names:
        b, e = med[f"{name}: blzarr"], med[f"{name}: numexpr"]
        print(f"{name:16s} {b:10.1f} {e:11.1f} {b / e:6.2f}")
    print("load", open("/proc/loadavg").read().strip())
    if args.json:
        print(json.dumps(med))


if __name__ == "__main__":
    main()
