"""a[:, 0] over a large on-disk 2-D array: peak memory and time, blzarr against python-blosc2.

    python bench/bench_col2d.py                 # 2 GiB of float64, 32 columns (a 64 MiB column)
    python bench/bench_col2d.py --gib 0.25 --cols 8 --runs 3

The array (a random walk per column) is written once per library, block by block (never whole in
memory), with each library's default chunking and lz4 / clevel 5 / byte shuffle / 2 threads.  Every
measurement runs in a fresh interpreter that opens the array and takes ``a[:, 0]``, so its peak
resident memory (VmHWM) is that of the operation alone; the runs of the libraries are interleaved
and the column of each is checked against the other's.  The target: a peak under 200 MB with a
2 GiB array and a time at least python-blosc2's.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CLEVEL, CNAME, NTHREADS = 5, "lz4", 2
WRITE_ROWS = 1 << 18


def peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def blocks(nrows, ncols, seed=11):
    rng = np.random.default_rng(seed)
    last = np.zeros(ncols)
    for s in range(0, nrows, WRITE_ROWS):
        b = np.cumsum(rng.standard_normal((min(WRITE_ROWS, nrows - s), ncols)), axis=0) + last
        last = b[-1].copy()
        yield s, b


def write(lib, path, nrows, ncols):
    if lib == "blzarr":
        import blzarr
        blzarr.set_nthreads(NTHREADS)
        a = blzarr.carray(np.empty((0, ncols)), cparams=blzarr.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME),
                          rootdir=path, mode="w", expectedlen=nrows)
        for _, b in blocks(nrows, ncols):
            a.append(b)
        a.flush()
    else:
        import blosc2
        blosc2.set_nthreads(NTHREADS)
        a = blosc2.empty((nrows, ncols), dtype="f8", urlpath=path, mode="w",
                         cparams=blosc2.CParams(codec=blosc2.Codec.LZ4, clevel=CLEVEL,
                                                filters=[blosc2.Filter.SHUFFLE], nthreads=NTHREADS),
                         dparams=blosc2.DParams(nthreads=NTHREADS))
        for s, b in blocks(nrows, ncols):
            a[s:s + len(b)] = b


def measure(lib, path):
    if lib == "blzarr":
        import blzarr as mod
    else:
        import blosc2 as mod
    mod.set_nthreads(NTHREADS)
    before = peak_rss()
    t0 = time.perf_counter()
    a = mod.open(path, mode="r")
    col = a[:, 0]
    dt = time.perf_counter() - t0
    print(json.dumps({"lib": lib, "seconds": dt, "peak": peak_rss(), "peak_before": before,
                      "result_bytes": int(col.nbytes), "sum": float(np.sum(col)), "n": len(col)}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("write", "measure"):
        if sys.argv[1] == "write":
            write(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        else:
            measure(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(prog="python bench/bench_col2d.py")
    ap.add_argument("--gib", type=float, default=2.0, help="size of the array (default 2 GiB)")
    ap.add_argument("--cols", type=int, default=32, help="columns (default 32: a 64 MiB column of 2 GiB)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--libs", nargs="+", default=["blzarr", "blosc2"])
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args()
    nrows = int(args.gib * 1024 ** 3) // (8 * args.cols)
    root = tempfile.mkdtemp(prefix="blzarr-col2d-", dir=args.tmpdir)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.pathsep + env.get(
        "PYTHONPATH", "")
    me = os.path.abspath(__file__)
    try:
        paths = {}
        for lib in args.libs:
            paths[lib] = os.path.join(root, lib + (".b2nd" if lib == "blosc2" else ""))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, me, "write", lib, paths[lib], str(nrows), str(args.cols)],
                           check=True, env=env)
            print(f"{lib}: wrote {nrows:,} x {args.cols} float64 in {time.perf_counter() - t0:.1f} s",
                  flush=True)
        res = {lib: [] for lib in args.libs}
        for _ in range(args.runs):
            for lib in args.libs:
                out = subprocess.run([sys.executable, me, "measure", lib, paths[lib]], check=True, env=env,
                                     capture_output=True, text=True).stdout
                res[lib].append(json.loads(out.strip().splitlines()[-1]))
        sums = {lib: r[0]["sum"] for lib, r in res.items()}
        if len(set(round(v, 6) for v in sums.values())) > 1:
            print(f"WRONG RESULT: the columns differ: {sums}")
        mib = 1024 ** 2
        print(f"\na[:, 0] of a {nrows * args.cols * 8 / 1024 ** 3:.2f} GiB ({nrows:,} x {args.cols}) on-disk "
              f"float64 array; median of {args.runs} fresh processes")
        print(f"{'lib':8s} {'time s':>8s} {'peak RSS MiB':>13s} {'result MiB':>11s} {'peak - result':>14s} "
              f"{'before MiB':>11s}")
        for lib, r in res.items():
            t = statistics.median(x["seconds"] for x in r)
            peak = statistics.median(x["peak"] for x in r) / mib
            print(f"{lib:8s} {t:8.3f} {peak:13.0f} {r[0]['result_bytes'] / mib:11.0f} "
                  f"{peak - r[0]['result_bytes'] / mib:14.0f} {r[0]['peak_before'] / mib:11.0f}")
        if "blosc2" in res and "blzarr" in res:
            q = statistics.median(x["seconds"] for x in res["blosc2"]) / statistics.median(
                x["seconds"] for x in res["blzarr"])
            print(f"blosc2 time / blzarr time: {q:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
