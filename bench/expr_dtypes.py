"""A float64 price times an int64 volume through the fused kernel, against the general path and
numexpr on the uncompressed arrays (interleaved rounds, medians).

    PYTHONPATH=/path/to/checkout python bench/expr_dtypes.py [N [ROUNDS [CLEVEL]]]
"""
import statistics, time, sys, json
import numpy as np, numexpr as ne
import blzarr
from blzarr.query import exprkernel, planner
planner.ENABLED = False
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 11
rng = np.random.default_rng(0)
x = np.cumsum(rng.standard_normal(n)); y = x[::-1].copy()
w = rng.integers(1, 10_000, n)
cp = blzarr.cparams(clevel=int(sys.argv[3]) if len(sys.argv) > 3 else 5, cname="lz4")
a, v, b = blzarr.carray(x, cparams=cp), blzarr.carray(w, cparams=cp), blzarr.carray(y, cparams=cp)
assert a.chunklen == v.chunklen
ops = {"a": a, "v": v, "b": b}
ne.set_num_threads(2)             # the threads blzarr runs on here

def off(f):
    def g():
        exprkernel.ENABLED = False
        try: return f()
        finally: exprkernel.ENABLED = True
    return g
cases = {
  "blzarr sum(a*v) int64 v": lambda: blzarr.lazyexpr("a * v", user_dict=ops).sum(),
  "blzarr sum(a*v) general path": off(lambda: blzarr.lazyexpr("a * v", user_dict=ops).sum()),
  "numexpr sum(x*w) uncompressed": lambda: ne.evaluate("sum(x * w)", local_dict={"x": x, "w": w}),
  "blzarr sum(a*b) float64": lambda: blzarr.lazyexpr("a * b", user_dict=ops).sum(),
  "numexpr sum(x*y) float64": lambda: ne.evaluate("sum(x * y)", local_dict={"x": x, "y": y}),
  "blzarr eval(sum(a*v))": lambda: blzarr.eval("sum(a * v)", user_dict=ops),
  "blzarr count(a*v > 1e4) int64 v": lambda: blzarr.lazyexpr("a * v > 1e4", user_dict=ops).count_nonzero(),
  "numexpr count(x*w > 1e4)": lambda: np.count_nonzero(ne.evaluate("x * w > 1e4", local_dict={"x": x, "w": w})),
}
r1 = cases["blzarr sum(a*v) int64 v"](); r2 = cases["blzarr sum(a*v) general path"]()
assert r1 == r2, (r1, r2)
assert np.isclose(r1, np.sum(x * w), rtol=1e-9)
times = {k: [] for k in cases}
for r in range(rounds):
    for k, f in cases.items():
        t0 = time.perf_counter(); f(); times[k].append(time.perf_counter() - t0)
med = {k: statistics.median(t) for k, t in times.items()}
for k, t in med.items():
    print(f"{k:40s} {t*1e3:8.1f} ms")
print("int sum / numexpr:", med["blzarr sum(a*v) int64 v"] / med["numexpr sum(x*w) uncompressed"])
print("int count / numexpr:", med["blzarr count(a*v > 1e4) int64 v"] / med["numexpr count(x*w > 1e4)"])
print("float sum / numexpr:", med["blzarr sum(a*b) float64"] / med["numexpr sum(x*y) float64"])
print("eval int sum / numexpr:", med["blzarr eval(sum(a*v))"] / med["numexpr sum(x*w) uncompressed"])
print("general / kernel:", med["blzarr sum(a*v) general path"] / med["blzarr sum(a*v) int64 v"])
print("load", open("/proc/loadavg").read().strip())
