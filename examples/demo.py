"""The main job: create, persist, reopen, query and time a carray and a ctable (after `pip install .`)."""

import os
import shutil
import tempfile
import time

import numpy as np

import blzarr as bcolz


def timed(label, fn, repeat=5):
    best = min(_once(fn) for _ in range(repeat))
    print(f"  {label:<38} {best * 1e3:9.3f} ms")


def _once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    bcolz.print_versions()
    n = 5_000_000
    data = np.arange(n) * 0.25
    root = tempfile.mkdtemp(prefix="blzarr-demo-")
    path = os.path.join(root, "series")
    try:
        a = bcolz.carray(data, rootdir=path, mode="w")
        a.attrs["source"] = "demo"
        a.flush()
        print(repr(a))
        b = bcolz.open(path, mode="r")
        assert len(b) == n and b.attrs["source"] == "demo"
        assert np.array_equal(b[:], data)
        print(f"reopened: {len(b)} values, ratio {b.nbytes / b.cbytes:.1f}x, sum {b.sum():.1f}")
        sel = b["(b > 1000) & (b < 1001)"]
        print("query b in (1000, 1001):", sel.tolist())
        rng = np.random.default_rng(0)
        idx = rng.integers(0, n, 2000)
        print("timings (best of 5):")
        timed("create in memory", lambda: bcolz.carray(data))
        timed("read all from disk", lambda: b[:])
        timed("NumPy copy of the same data", lambda: data.copy())
        timed("2000 random scalars from disk", lambda: [b[i] for i in idx.tolist()])
        timed("300 random slices of 1000", lambda: [b[i:i + 1000] for i in idx[:300].tolist()])
        timed("sum()", b.sum)

        # a table: columns stored apart, queried block by block
        tpath = os.path.join(root, "trades")
        rng = np.random.default_rng(1)
        m = 1_000_000
        price = 100 + rng.normal(size=m)
        qty = rng.integers(1, 500, m)
        t = bcolz.ctable(columns=[price, qty], names=["price", "qty"], rootdir=tpath, mode="w")
        t.flush()
        t = bcolz.open(tpath, mode="r")
        hits = t.fetchwhere("(qty > 490) & (price > 100)")
        want = (qty > 490) & (price > 100)
        assert len(hits) == int(want.sum()) and np.array_equal(hits["qty"], qty[want])
        print(f"table: {len(t)} rows, {len(hits)} rows where qty > 490 and price > 100")
        timed("ctable fetchwhere (query)", lambda: t.fetchwhere("(qty > 490) & (price > 100)"))
        timed("NumPy boolean indexing, same query", lambda: (price[want], qty[want]))
    finally:
        shutil.rmtree(root)
    print("demo finished")


if __name__ == "__main__":
    main()
