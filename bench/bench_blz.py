"""Random scalar and short-slice reads from disk: blzarr's BLZ layout vs blzarr's bcolz layout vs bcolz.

    python bench/bench_blz.py                       # 4M float64, 2000 random reads per run
    python bench/bench_blz.py --n 10000000 --reads 5000 --json out.json

Every run opens the dataset afresh (empty in-process caches; the OS page cache stays warm), then reads
`--reads` random scalars `a[i]`, or random slices `a[i:i+--slice]`, and the median time of `--repeats`
runs is reported in microseconds per read.  For the BLZ layout the bytes read from the files per access
(`blzarr._superchunk.io_stats`) are reported too.  Two data sets: "walk" (a random walk: compresses
a little) and "smooth" (a slow sine: compresses a lot).

The BLZ variants: checksum=None (every read lazy from the first) and crc32 (the default: a chunk is
read whole and verified once, then lazily).  "warm" repeats the same random positions on the same open
object (verified chunks, cached offsets and headers).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import blzarr  # noqa: E402
from blzarr import _superchunk as sc  # noqa: E402


def datasets(n):
    rng = np.random.default_rng(0)
    return {
        "walk": np.cumsum(rng.standard_normal(n)),
        "smooth": np.sin(np.arange(n) / 1e4) * 1000,
    }


def build(kind, path, arr, chunklen):
    cp = dict(clevel=5, shuffle=1, cname="lz4")
    if kind == "bcolz":
        import bcolz
        bcolz.carray(arr, rootdir=path, mode="w", chunklen=chunklen, cparams=bcolz.cparams(**cp)).flush()
    elif kind == "blzarr-bcolz":
        blzarr.carray(arr, rootdir=path, mode="w", chunklen=chunklen, cparams=blzarr.cparams(**cp),
                      format="bcolz").flush()
    else:
        checksum = None if kind == "blz-nocheck" else "crc32"
        blzarr.carray(arr, rootdir=path, mode="w", chunklen=chunklen, cparams=blzarr.cparams(**cp),
                      format="blz", checksum=checksum).flush()


def opener(kind):
    if kind == "bcolz":
        import bcolz
        return lambda p: bcolz.open(p, mode="r")
    return lambda p: blzarr.open(p, mode="r")


def run(kind, path, arr, positions, width, warm):
    op = opener(kind)
    c = op(path)
    if warm:
        for i in positions:
            c[i] if width == 0 else c[i:i + width]
    sc.io_stats(reset=True)
    t0 = time.perf_counter()
    if width == 0:
        for i in positions:
            c[i]
    else:
        for i in positions:
            c[i:i + width]
    dt = time.perf_counter() - t0
    nbytes = sc.io_stats(reset=True)[0]
    # correctness of a sample
    for i in positions[:20]:
        v = c[i] if width == 0 else c[i:i + width]
        assert np.array_equal(v, arr[i] if width == 0 else arr[i:i + width]), (kind, i)
    return dt / len(positions) * 1e6, nbytes / len(positions)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--slice", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunklen", type=int, default=None, help="default: bcolz's automatic chunklen")
    ap.add_argument("--kinds", nargs="+", default=["blz-nocheck", "blz-crc32", "blzarr-bcolz", "bcolz"])
    ap.add_argument("--json", default=None)
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args(argv)
    if "bcolz" in args.kinds:
        try:
            import bcolz  # noqa: F401
        except ImportError:
            print("bcolz is not installed: skipping it")
            args.kinds = [k for k in args.kinds if k != "bcolz"]
    tmp = tempfile.mkdtemp(prefix="bench_blz_", dir=args.tmpdir)
    results = []
    try:
        rng = np.random.default_rng(1)
        for dname, arr in datasets(args.n).items():
            chunklen = args.chunklen or blzarr.carray(arr[:0], expectedlen=len(arr)).chunklen
            positions = rng.integers(0, len(arr) - args.slice, args.reads).tolist()
            for kind in args.kinds:
                path = os.path.join(tmp, f"{dname}-{kind}")
                build(kind, path, arr, chunklen)
                size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
                for what, width in (("scalar", 0), ("slice", args.slice)):
                    for warm in (False, True):
                        runs = [run(kind, path, arr, positions, width, warm) for _ in range(args.repeats)]
                        us = statistics.median(r[0] for r in runs)
                        rb = statistics.median(r[1] for r in runs)
                        results.append(dict(dataset=dname, layout=kind, op=what, warm=warm, us_per_read=us,
                                            bytes_read_per_read=rb if kind.startswith("blz-") else None,
                                            disk_bytes=size, chunklen=chunklen))
                shutil.rmtree(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"n={args.n} reads={args.reads} slice={args.slice} repeats={args.repeats} (median µs per read)")
    print(f"{'dataset':8} {'op':7} {'cache':5} " + " ".join(f"{k:>14}" for k in args.kinds)
          + "   BLZ bytes read/access")
    for dname in datasets(16):
        for what in ("scalar", "slice"):
            for warm in (False, True):
                row = {r["layout"]: r for r in results
                       if r["dataset"] == dname and r["op"] == what and r["warm"] == warm}
                if not row:
                    continue
                b = " / ".join(f"{row[k]['bytes_read_per_read']:.0f}" for k in args.kinds if k in row
                               and row[k]["bytes_read_per_read"] is not None)
                print(f"{dname:8} {what:7} {'warm' if warm else 'cold':5} "
                      + " ".join(f"{row[k]['us_per_read']:14.1f}" for k in args.kinds if k in row) + f"   {b}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "results": results}, f, indent=1)
    return results


if __name__ == "__main__":
    main()
