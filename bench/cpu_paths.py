"""CPU time (user+sys of the process, threads included) of a fixed workload over the paths the layering refactor
moved (create/append, scalar/slice/fancy reads, sum, where, disk create/append/open/read/scalars/sum in both
layouts, ctable where/fetchwhere/append): one JSON line {op: best CPU seconds of 3 batches of 10 calls}.
CPU time moves far less than wall time on a loaded box; run it interleaved on two checkouts:

    PYTHONPATH=/path/to/checkout python bench/cpu_paths.py
"""
import json, os, resource, shutil, tempfile
import numpy as np
import blzarr

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

out = {}
def timed(name, fn, reps=3, inner=10):
    best = None
    for _ in range(reps):
        t = cpu()
        for _ in range(inner):
            fn()
        d = cpu() - t
        best = d if best is None else min(best, d)
    out[name] = best

rng = np.random.default_rng(0)
x = np.cumsum(rng.standard_normal(1_000_000))
a = blzarr.carray(x)
idx = rng.integers(0, len(x), 3000)
sl = rng.integers(0, len(x) - 1000, 300)
timed("create", lambda: blzarr.carray(x))
timed("scalars", lambda: [a[int(i)] for i in idx])
timed("slices", lambda: [a[int(s):int(s) + 1000] for s in sl])
timed("read_all", lambda: a[:])
timed("fancy", lambda: a[np.sort(idx)])
timed("sum", lambda: a.sum())
timed("where", lambda: sum(1 for _ in a.where(a[:] > 0, limit=100000)))
timed("append", lambda: [blzarr.carray(x[:1000]).append(x[k:k + 5000]) for k in range(0, 200000, 5000)])
tmp = tempfile.mkdtemp()
for fmt in ("blz", "bcolz"):
    p = os.path.join(tmp, fmt)
    def dcreate():
        c = blzarr.carray(x, rootdir=p, mode="w", format=fmt); c.flush()
    timed(f"{fmt}_create", dcreate)
    def dappend():
        c = blzarr.carray(x[:10], rootdir=p, mode="w", format=fmt)
        for k in range(0, 500000, 50000):
            c.append(x[k:k + 50000])
        c.flush()
    timed(f"{fmt}_append", dappend)
    blzarr.carray(x, rootdir=p, mode="w", format=fmt).flush()
    timed(f"{fmt}_open_read", lambda: blzarr.open(p, mode="r")[:])
    d = blzarr.open(p, mode="r")
    timed(f"{fmt}_scalars", lambda: [d[int(i)] for i in idx])
    timed(f"{fmt}_sum", lambda: blzarr.open(p, mode="r").sum())
t = blzarr.ctable([x, np.arange(len(x)) % 7], names=["a", "b"])
timed("ct_where", lambda: sum(1 for _ in t.where("(a > 0) & (b == 3)")))
timed("ct_fetchwhere", lambda: t.fetchwhere("(a > 0) & (b == 3)"))
timed("ct_append", lambda: blzarr.ctable([x[:10], np.arange(10)], names=["a", "b"]).append([x[:100000], np.arange(100000)]))
shutil.rmtree(tmp)
print(json.dumps(out))
