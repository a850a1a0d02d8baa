"""Opening small on-disk tables, as zipline and bqueryd do: CPU per open against bcolz, in one process.

Cases (each: open + what zipline then does, all in mode 'r' unless named):
  ctable_r      open a 5-column 2,000-row ctable, read one column whole
  ctable_a      the same in mode 'a'
  carray_r      open one column's directory as a carray, read it whole
  open_r        blzarr.open(path, 'r') on the ctable (detects the kind), read one column
for blzarr's BLZ layout, blzarr's bcolz layout, and the real bcolz (bcolz-zipline) on its own files.
Libraries are interleaved per round; the figure is the median over rounds of the best-of-`inner`
CPU time per operation (time.process_time), in microseconds.

    python bench/small_open.py [--rounds 7] [--inner 200] [--cases ctable_r,carray_r] [--libs blz,bcolzfmt,bcolz]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np


def build(tmp):
    build_into(tmp)
    return {"blz": os.path.join(tmp, "t_blz"), "bcolzfmt": os.path.join(tmp, "t_bcolz"),
            "bcolz": os.path.join(tmp, "t_real")}


def build_into(tmp):
    import blzarr
    import bcolz
    n = 2000
    cols = [np.arange(n, dtype="u4"), np.arange(n, dtype="u4") * 2, np.arange(n, dtype="u4") + 7,
            np.arange(n, dtype="u4") % 13, np.arange(n, dtype="u4") * 3]
    names = ["open", "high", "low", "close", "volume"]
    for fmt in ("blz", "bcolz"):
        blzarr.ctable(columns=cols, names=names, rootdir=os.path.join(tmp, f"t_{fmt}"), mode="w",
                      format=fmt).flush()
    bcolz.ctable(columns=cols, names=names, rootdir=os.path.join(tmp, "t_real"), mode="w").flush()


def ops(lib, path):
    if lib == "bcolz":
        import bcolz as m
    else:
        import blzarr as m
    col = os.path.join(path, "close")

    def ctable_r():
        return m.ctable(rootdir=path, mode="r")["close"][:]

    def ctable_a():
        return m.ctable(rootdir=path, mode="a")["close"][:]

    def carray_r():
        return m.carray(rootdir=col, mode="r")[:]

    def open_r():
        return m.open(path, mode="r")["close"][:]

    return {"ctable_r": ctable_r, "ctable_a": ctable_a, "carray_r": carray_r, "open_r": open_r}


def best(fn, inner):
    out = []
    for _ in range(inner):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    # process_time's tick is coarse on some kernels: take the mean of the faster half, not the min
    out.sort()
    half = out[: max(1, len(out) // 2)]
    return sum(half) / len(half)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--cases", default="ctable_r,ctable_a,carray_r,open_r")
    ap.add_argument("--libs", default="blz,bcolzfmt,bcolz")
    ap.add_argument("--dir", default=None, help="where to write the tables (default: a temp dir)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(dir=a.dir)
    try:
        paths = build(tmp)
        cases = a.cases.split(",")
        libs = a.libs.split(",")
        table = {lib: ops(lib, paths[lib]) for lib in libs}
        for lib in libs:   # warm imports and caches; check all three give the same column
            for c in cases:
                got = table[lib][c]()
                assert np.array_equal(got, np.arange(2000, dtype="u4") % 13), (lib, c)
        res = {(lib, c): [] for lib in libs for c in cases}
        for _ in range(a.rounds):
            for c in cases:
                for lib in libs:
                    res[(lib, c)].append(best(table[lib][c], a.inner) * 1e6)
        print(f"{'case':10s} " + " ".join(f"{lib:>10s}" for lib in libs) + "   (us CPU per op, median of rounds)")
        for c in cases:
            print(f"{c:10s} " + " ".join(f"{statistics.median(res[(lib, c)]):10.0f}" for lib in libs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
