"""The main job: create, persist, reopen, query and time a carray and a ctable (after `pip install .`).

    python examples/demo.py [--dir DIR] [--n N]

The data are written to DIR (default: blzarr-demo in the system's temporary directory, replaced on
each run) and left there, so that `blzarr info` and `blzarr ls` can show them afterwards.
"""

import argparse
import os
import tempfile
import time

import numpy as np

import blzarr as bcolz

REPEAT = 5


def best_time(fn, repeat=REPEAT):
    """The best of `repeat` runs of fn(), in seconds (the least disturbed by other work)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def compare(label, ours, numpy, what):
    """One line: blzarr's time, NumPy's for the same result, and what the pair shows."""
    a, b = best_time(ours), best_time(numpy)
    print(f"  {label:<34} {a * 1e3:9.2f} ms  {b * 1e3:9.2f} ms  {what}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "blzarr-demo"),
                    help="where the data are written and left (default: %(default)s)")
    ap.add_argument("--n", type=int, default=5_000_000, help="values in the series (default: 5,000,000)")
    args = ap.parse_args(argv)
    n, root = args.n, os.path.abspath(args.dir)
    os.makedirs(root, exist_ok=True)
    series, trades = os.path.join(root, "series.blz"), os.path.join(root, "trades.blz")
    bcolz.print_versions()
    print(f"The demo writes its data to {root} (the BLZ layout, blzarr's default) and leaves them there.\n")

    # a carray: a compressed, chunked array on disk
    data = np.arange(n) * 0.25
    with bcolz.carray(data, rootdir=series, mode="w") as a:    # leaving the block flushes and closes it
        a.attrs["source"] = "demo"
    b = bcolz.open(series, mode="r")
    assert len(b) == n and b.attrs["source"] == "demo" and np.array_equal(b[:], data)
    print(repr(b))
    print(f"reopened {series}: {len(b):,} values, {b.nbytes / 2**20:.1f} MiB uncompressed, "
          f"{b.cbytes / 2**20:.2f} MiB compressed (ratio {b.nbytes / b.cbytes:.1f}), sum {b.sum():.1f}")
    print("query b in (1000, 1001):", b["(b > 1000) & (b < 1001)"].tolist())

    # a ctable: one carray per column; a query reads only the columns it names, block by block
    rng = np.random.default_rng(1)
    m = max(n // 5, 1)
    price = 100 + rng.normal(size=m)
    qty = rng.integers(1, 500, m)
    with bcolz.ctable(columns=[price, qty], names=["price", "qty"], rootdir=trades, mode="w"):
        pass
    t = bcolz.open(trades, mode="r")
    query = "(qty > 490) & (price > 100)"
    hits = t.fetchwhere(query, out_flavor="numpy")
    want = (qty > 490) & (price > 100)
    assert len(hits) == int(want.sum()) and np.array_equal(hits["qty"], qty[want])
    print(f"table {trades}: {len(t):,} rows; {len(hits):,} where {query}\n")

    def numpy_query():
        # the whole query in NumPy: the condition over both columns, then the matching rows
        mask = (qty > 490) & (price > 100)
        out = np.empty(int(mask.sum()), dtype=hits.dtype)
        out["price"], out["qty"] = price[mask], qty[mask]
        return out

    idx = np.random.default_rng(0).integers(0, n, 2000).tolist()
    print(f"Timings, best of {REPEAT} runs.  blzarr reads the compressed data from disk (the OS has the files "
          "in its cache) and\ndecompresses it; NumPy works on the same values already in memory, "
          "uncompressed: the NumPy column is the\nfloor that compression adds its cost to.\n")
    print(f"  {'operation':<34} {'blzarr':>12}  {'NumPy':>12}  what it shows")
    compare("compress into chunks (in memory)", lambda: bcolz.carray(data), data.copy,
            "the cost of compressing vs a plain copy")
    compare("read all into an array", lambda: b[:], data.copy,
            "decompressing everything vs copying it")
    compare("2000 random elements b[i]", lambda: [b[i] for i in idx], lambda: [data[i] for i in idx],
            "one element decodes one small block, not its chunk")
    compare("300 random slices of 1000", lambda: [b[i:i + 1000] for i in idx[:300]],
            lambda: [data[i:i + 1000].copy() for i in idx[:300]], "a slice decodes only the blocks it spans")
    compare("sum()", b.sum, data.sum, "a reduction decodes chunk by chunk, in parallel")
    compare("query: fetchwhere(...)", lambda: t.fetchwhere(query, out_flavor="numpy"), numpy_query,
            "the whole query on both sides: condition + rows")

    print(f"\nThe data are still in {root}: look at them with\n"
          f"  blzarr ls {root}\n  blzarr info {series}\n  blzarr verify {root}\n"
          f"and delete the directory when done (each run of the demo replaces what it wrote there).")
    print("demo finished")


if __name__ == "__main__":
    main()
