"""Queries with per-chunk statistics and the fused engine, against their peers, in one run.

    python bench/bench_queries.py [--n 50000000] [--n-expr 10000000] [--quick] [--big] [--json PATH]

Sections (medians of --repeats runs; a ratio is the peer's time / blzarr's, so > 1 means blzarr is
faster; lz4, clevel 5, byte shuffle, 2 threads for every library):

range     a 1% time range ``(ts >= lo) & (ts < hi)`` over a table of --n rows on disk (BLZ layout):
          ts sorted int64, px a float64 random walk, r uniform random.  The matching rows of all three
          columns as NumPy arrays.  Peers: the same query with the planner off (full scan), NumPy
          boolean indexing of the uncompressed in-memory columns, python-blosc2's persistent CTable
          ``where`` (its SUMMARY indexes, built when the table is closed) then reading the columns.
          Each of the four is run once untimed, then timed max(11, --repeats) times (a query of a
          few ms: its first runs fault in the pages of a fresh 12 MB result, later ones reuse them).
random    a query on the column with no order, ``(r > 0.5) & (r < 0.51)`` (nothing to skip): the
          planner's overhead, planner on vs off (target: off / on >= 0.95).
stats     creating an on-disk carray of --n-expr float64 (walk and smooth), and appending it in batches
          of 10,000, with and without statistics (target: without / with >= 0.95, i.e. <= 5% cost):
          max(21, 4 * --repeats + 1) pairs of runs next to each other, the order alternating; the row
          gives the median wall times, the target the median of the pairs' wall ratios, a note the
          same for CPU time.
expr      expressions without statistics' help (planner off), over two --n-expr float64 carrays in
          memory: ``sum(a * b)``, the count of ``(a > x) & (b < y)`` and fetching those rows.  Peers:
          blzarr's general path (the C kernel of blzarr.query.exprkernel off: numexpr block by block),
          numexpr on the uncompressed arrays (target: blzarr within 1.5x), python-blosc2 lazy
          expressions on NDArrays (target: blzarr 2x faster).
memory    (--big) peak RSS of queries over a 2 GiB on-disk table, each in a fresh process (< 200 MB).
"""

import argparse
import dataclasses
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import blzarr  # noqa: E402
from blzarr.query import exprkernel  # noqa: E402
from blzarr.query import planner
from blzarr.query import stats
from bench import CLEVEL, CNAME, NTHREADS  # noqa: E402
from bench import timing  # noqa: E402
from bench.timing import have  # noqa: E402

RANGE_EXPR = "(ts >= lo) & (ts < hi)"
RANDOM_EXPR = "(r > 0.5) & (r < 0.51)"


def cparams():
    return blzarr.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME)


def timeit(fn, repeats, budget=20.0, warmup=0):
    return timing.timeit(fn, repeats, budget, warmup)


class Report:
    def __init__(self):
        self.rows = []        # (section, label, {peer: seconds})
        self.targets = []     # (text, ok, ratio)
        self.notes = []

    def row(self, section, label, times):
        self.rows.append((section, label, times))
        base = times["blzarr"]
        parts = [f"{peer} {t * 1e3:9.2f} ms" + ("" if peer == "blzarr" else f" ({t / base:6.2f}x)")
                 for peer, t in times.items()]
        print(f"{section:7s} {label:44s} " + "  ".join(parts), flush=True)

    def target(self, text, ratio, want):
        ok = ratio is not None and ratio >= want
        self.targets.append((text, ok, ratio))


def interleaved(fn, module, repeats):
    """Times of fn with module.ENABLED True and False, alternating which runs first (a fixed order
    showed a bias of several percent either way on this shared machine)."""
    on, off = [], []
    for k in range(repeats):
        for flag in ((True, False) if k % 2 == 0 else (False, True)):
            module.ENABLED = flag
            try:
                (on if flag else off).append(timeit(fn, 1))
            finally:
                module.ENABLED = True
    return on, off


def paired(fn, module, rounds):
    """Wall and CPU (process_time: every thread of this process) times of fn with module.ENABLED True
    and False, run in pairs, the order alternating from one pair to the next, after one untimed run of
    each (the first runs allocate what the next ones reuse).  Returns lists of (wall, cpu) for on
    and off, pair by pair: a cost is read as the median of the pairs' ratios, each taken between two
    runs next to each other, so that what the machine does meanwhile moves both sides alike."""
    on, off = [], []
    try:
        for flag in (True, False):
            module.ENABLED = flag
            fn()
        for k in range(rounds):
            for flag in ((True, False) if k % 2 == 0 else (False, True)):
                module.ENABLED = flag
                gc.collect()
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                (on if flag else off).append((time.perf_counter() - t0, time.process_time() - c0))
    finally:
        module.ENABLED = True
    return on, off


# ---------------------------------------------------------------------------------------- range
def make_range_data(n, seed=1):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(1, 2000, n, dtype=np.int64)) + 1_600_000_000_000
    px = 100 + np.cumsum(rng.standard_normal(n)) * 0.01
    r = rng.random(n)
    return ts, px, r


def write_blzarr_table(root, ts, px, r):
    t = blzarr.ctable([ts, px, r], names=["ts", "px", "r"], rootdir=root, mode="w", cparams=cparams())
    t.close()


def write_blosc2_table(path, ts, px, r):
    import blosc2

    @dataclasses.dataclass
    class Row:
        ts: int = blosc2.field(blosc2.int64())
        px: float = blosc2.field(blosc2.float64())
        r: float = blosc2.field(blosc2.float64())
    cp = {"codec": blosc2.Codec.LZ4, "clevel": CLEVEL, "filters": [blosc2.Filter.SHUFFLE], "nthreads": NTHREADS}
    t = blosc2.CTable(Row, urlpath=path, mode="w", expected_size=len(ts), cparams=cp,
                      dparams={"nthreads": NTHREADS})
    step = 4_000_000
    for s in range(0, len(ts), step):
        t.extend({"ts": ts[s:s + step], "px": px[s:s + step], "r": r[s:s + step]}, validate=False)
    t.close()          # builds the SUMMARY indexes


def run_range(args, rep, tmp):
    n = args.n
    ts, px, r = make_range_data(n)
    lo, hi = int(ts[n // 2]), int(ts[n // 2 + n // 100])
    mask = (ts >= lo) & (ts < hi)
    want = {"ts": ts[mask], "px": px[mask], "r": r[mask]}
    root = os.path.join(tmp, "range.blz")
    t0 = time.perf_counter()
    write_blzarr_table(root, ts, px, r)
    print(f"range: wrote {n:,} rows with blzarr in {time.perf_counter() - t0:.1f} s", flush=True)
    t = blzarr.open(root, mode="r")
    user = {"lo": lo, "hi": hi}

    def blz_query():
        return t.fetchwhere(RANGE_EXPR, user_dict=user, out_flavor="numpy")
    got = blz_query()
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    plan = t.explain(RANGE_EXPR, user_dict=user)
    rep.notes.append(f"range plan: {plan}")
    rr = max(11, args.repeats)
    times = {"blzarr": timeit(blz_query, rr, warmup=1)}
    planner.ENABLED = False
    try:
        times["full scan"] = timeit(blz_query, rr, warmup=1)
    finally:
        planner.ENABLED = True

    def np_query():
        m = (ts >= lo) & (ts < hi)
        return ts[m], px[m], r[m]
    times["numpy"] = timeit(np_query, rr, warmup=1)
    if have("blosc2"):
        import blosc2
        path = os.path.join(tmp, "range.b2d")
        t0 = time.perf_counter()
        write_blosc2_table(path, ts, px, r)
        print(f"range: wrote {n:,} rows with blosc2 in {time.perf_counter() - t0:.1f} s", flush=True)
        b = blosc2.CTable.open(path)

        def b2_query():
            v = b.where(f"(ts >= {lo}) & (ts < {hi})")
            return v["ts"][:], v["px"][:], v["r"][:]
        g = b2_query()
        assert all(np.array_equal(x, want[k]) for x, k in zip(g, ("ts", "px", "r")))
        times["blosc2 CTable"] = timeit(b2_query, rr, warmup=1)
    else:
        rep.notes.append("python-blosc2 is not installed: its CTable is not measured")
    rep.row("range", f"1% range of sorted ts, {n:,} rows on disk", times)
    rep.target("range: >= 20x faster than the full scan", times["full scan"] / times["blzarr"], 20)
    rep.target("range: >= 10x faster than NumPy boolean indexing", times["numpy"] / times["blzarr"], 10)
    if "blosc2 CTable" in times:
        rep.target("range: faster than blosc2 CTable.where (summary index)",
                   times["blosc2 CTable"] / times["blzarr"], 1)

    # data with no order: nothing to skip, the planner's cost alone
    def rnd():
        return t.fetchwhere(RANDOM_EXPR, out_flavor="numpy", outcols=["r"])
    assert np.array_equal(rnd()["r"], r[(r > 0.5) & (r < 0.51)])
    rep.notes.append(f"random plan: {t.explain(RANDOM_EXPR)}")
    on, off = interleaved(rnd, planner, max(4, args.repeats))
    times = {"blzarr": statistics.median(on), "planner off": statistics.median(off)}
    rep.row("random", f"(r > 0.5) & (r < 0.51), {n:,} rows on disk", times)
    rep.target("random: planner overhead < 5% (off / on >= 0.95)", times["planner off"] / times["blzarr"], 0.95)
    del t
    shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------- stats cost
def run_stats_cost(args, rep, tmp):
    from bench.harness import datasets
    for dname, x in datasets(args.n_expr).items():
        path = os.path.join(tmp, "cost")

        def create():
            blzarr.carray(x, rootdir=path, mode="w", cparams=cparams()).close()

        def append():
            a = blzarr.carray(np.empty(0), rootdir=path, mode="w", cparams=cparams(), expectedlen=len(x))
            for s in range(0, len(x), 10_000):
                a.append(x[s:s + 10_000])
            a.close()
        for label, fn in (("create on disk", create), ("append 10,000 at a time on disk", append)):
            on, off = paired(fn, stats, max(21, 4 * args.repeats + 1))
            times = {"blzarr": statistics.median(w for w, _ in on), "no statistics": statistics.median(w for w, _ in off)}
            rep.row("stats", f"{dname}: {label}, {len(x):,} float64", times)
            wall = statistics.median(b[0] / a[0] for a, b in zip(on, off))
            cpu = statistics.median(b[1] / a[1] for a, b in zip(on, off))
            rep.notes.append(f"stats: {dname} {label}: off/on of {len(on)} pairs, median wall {wall:.3f}, "
                             f"CPU {cpu:.3f} (CPU ms on {statistics.median(c for _, c in on) * 1e3:.1f}, "
                             f"off {statistics.median(c for _, c in off) * 1e3:.1f})")
            rep.target(f"stats: {dname} {label} costs <= 5%", wall, 0.95)
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------- expressions
def run_expr(args, rep):
    from bench.harness import datasets
    ne = __import__("numexpr") if have("numexpr") else None
    b2 = __import__("blosc2") if have("blosc2") else None
    if ne is not None:
        ne.set_num_threads(NTHREADS)
    if b2 is not None:
        b2.set_nthreads(NTHREADS)
    planner.ENABLED = False         # the engine alone: no statistics' help
    try:
        for dname, x in datasets(args.n_expr).items():
            y = x[::-1].copy()
            qa, qb = float(np.quantile(x, 0.9)), float(np.quantile(y, 0.5))
            a, b = blzarr.carray(x, cparams=cparams()), blzarr.carray(y, cparams=cparams())
            t = blzarr.ctable([a, b], names=["a", "b"])
            ops = {"a": a, "b": b, "qa": qa, "qb": qb}
            cases = {
                "sum(a * b)": (lambda: blzarr.lazyexpr("a * b", user_dict=ops).sum(),
                               lambda: ne.evaluate("sum(x * y)", local_dict={"x": x, "y": y}),
                               "a * b", "sum"),
                "count (a > qa) & (b < qb)": (
                    lambda: blzarr.lazyexpr("(a > qa) & (b < qb)", user_dict=ops).count_nonzero(),
                    lambda: np.count_nonzero(ne.evaluate("(x > qa) & (y < qb)",
                                                         local_dict={"x": x, "y": y, "qa": qa, "qb": qb})),
                    "(a > qa) & (b < qb)", "count"),
                "fetchwhere (a > qa) & (b < qb)": (
                    lambda: t.fetchwhere("(a > qa) & (b < qb)", user_dict={"qa": qa, "qb": qb},
                                         out_flavor="numpy"),
                    lambda: (lambda m: (x[m], y[m]))(ne.evaluate("(x > qa) & (y < qb)", local_dict={
                        "x": x, "y": y, "qa": qa, "qb": qb})),
                    None, None),
            }
            # a float64 price times an int64 volume (the kernel converts the volume as it reads it)
            vol = np.random.default_rng(1).integers(1, 10_000, len(x))
            ops["v"] = blzarr.carray(vol, cparams=cparams())
            cases["sum(a * v), v int64"] = (lambda: blzarr.lazyexpr("a * v", user_dict=ops).sum(),
                                            lambda: ne.evaluate("sum(x * w)", local_dict={"x": x, "w": vol}),
                                            None, None)
            if b2 is not None:
                kw = dict(cparams=b2.CParams(codec=b2.Codec.LZ4, clevel=CLEVEL, filters=[b2.Filter.SHUFFLE],
                                             nthreads=NTHREADS), dparams=b2.DParams(nthreads=NTHREADS))
                A, B = b2.asarray(x, **kw), b2.asarray(y, **kw)
            # decoding both operands into preallocated arrays in memory, nothing evaluated (the general
            # path's floor; the fused kernel decodes into per-thread buffers in cache and can run below it), against
            # numexpr's whole sum(x * y) and its element-wise mask (which runs on every thread)
            if ne is not None:
                bx, by = np.empty_like(x), np.empty_like(y)

                def decode_only():
                    a.read_into(0, len(a), bx)
                    b.read_into(0, len(b), by)
                times = {"blzarr": timeit(decode_only, args.repeats),
                         "numexpr sum(x * y)": timeit(cases["sum(a * b)"][1], args.repeats),
                         "numexpr mask": timeit(lambda: ne.evaluate("(x > qa) & (y < qb)", local_dict={
                             "x": x, "y": y, "qa": qa, "qb": qb}), args.repeats)}
                rep.row("expr", f"{dname}: decode a, b to memory only, {len(x):,}", times)
                rep.notes.append(f"expr {dname}: decoding the operands alone takes "
                                 f"{times['blzarr'] / times['numexpr sum(x * y)']:.2f}x numexpr's sum(x * y) "
                                 f"and {times['blzarr'] / times['numexpr mask']:.2f}x its mask "
                                 "(to memory: the general path's floor; the fused kernel decodes into cache and can run below it)")
            for label, (mine, theirs, b2expr, b2op) in cases.items():
                times = {"blzarr": timeit(mine, args.repeats)}
                exprkernel.ENABLED = False          # blzarr's general path (numexpr per block), before the kernel
                try:
                    times["general path"] = timeit(mine, args.repeats)
                finally:
                    exprkernel.ENABLED = True
                if ne is not None:
                    times["numexpr (uncompressed)"] = timeit(theirs, args.repeats)
                if b2 is not None and b2expr is not None:
                    le = b2.lazyexpr(b2expr, operands={"a": A, "b": B, "qa": qa, "qb": qb})
                    f = le.sum if b2op == "sum" else le.sum
                    times["blosc2 lazyexpr"] = timeit(f, args.repeats)
                rep.row("expr", f"{dname}: {label}, {len(x):,}", times)
                if "numexpr (uncompressed)" in times:
                    rep.target(f"expr {dname} {label}: within 1.5x of numexpr",
                               times["numexpr (uncompressed)"] / times["blzarr"], 1 / 1.5)
                if "blosc2 lazyexpr" in times:
                    rep.target(f"expr {dname} {label}: >= 2x faster than blosc2 lazyexpr",
                               times["blosc2 lazyexpr"] / times["blzarr"], 2)
    finally:
        planner.ENABLED = True


# ---------------------------------------------------------------------------------------- memory
MEM_QUERIES = {
    "range": "len(t.fetchwhere('(ts >= lo) & (ts < hi)', user_dict=U, out_flavor='numpy'))",
    "count": "t.where('(px > 100) & (r < 0.5)').count()",
    "fetchwhere": "len(t.fetchwhere('(r > 0.5) & (r < 0.501)', out_flavor='numpy'))",
    "sum": "float(blzarr.lazyexpr('px * r', user_dict={'px': t.cols['px'], 'r': t.cols['r']}).sum())",
}


def write_big_table(root, rows, step=4_000_000):
    t = None
    for s in range(0, rows, step):
        ts, px, r = make_range_data(min(step, rows - s), seed=s + 1)
        ts += s * 1000
        if t is None:
            t = blzarr.ctable([ts, px, r], names=["ts", "px", "r"], rootdir=root, mode="w", cparams=cparams(),
                              expectedlen=rows)
        else:
            t.append([ts, px, r])
    t.close()


def measure_one(root, which):
    """In a fresh process: run one query, print its peak RSS (bytes) as JSON."""
    from bench.memory import peak_rss_bytes, rss_bytes
    blzarr.set_nthreads(NTHREADS)
    t = blzarr.open(root, mode="r")
    n = len(t)
    ts = t.cols["ts"]
    U = {"lo": int(ts[n // 2]), "hi": int(ts[n // 2 + n // 100])}
    base = rss_bytes()
    value = eval(MEM_QUERIES[which], {"t": t, "U": U, "blzarr": blzarr})
    print(json.dumps({"peak": peak_rss_bytes(), "base": base, "value": value}))


def run_memory(args, rep, tmp):
    root = os.path.join(tmp, "big.blz")
    rows = (2 * 1024 ** 3) // 24            # three 8-byte columns: 2 GiB uncompressed
    t0 = time.perf_counter()
    write_big_table(root, rows)
    print(f"memory: wrote {rows:,} rows (2 GiB) in {time.perf_counter() - t0:.1f} s", flush=True)
    for which in MEM_QUERIES:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", root, which],
                             capture_output=True, text=True, cwd=os.path.dirname(HERE))
        if out.returncode:
            rep.notes.append(f"memory {which}: failed: {out.stderr[-500:]}")
            continue
        d = json.loads(out.stdout.strip().splitlines()[-1])
        mb = d["peak"] / 2 ** 20
        print(f"memory  {which:12s} peak RSS {mb:7.1f} MB (after opening: {d['base'] / 2 ** 20:.1f} MB)",
              flush=True)
        rep.rows.append(("memory", f"{which}: peak RSS MB", {"blzarr": mb}))
        rep.targets.append((f"memory: {which} over a 2 GiB table < 200 MB", mb < 200, mb))
    shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=50_000_000, help="rows of the range table (default 50,000,000)")
    p.add_argument("--n-expr", type=int, default=10_000_000, help="elements of the expression operands")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="2,000,000 rows, 1,000,000 elements, 3 repeats")
    p.add_argument("--sections", nargs="+", default=["range", "stats", "expr"],
                   choices=["range", "stats", "expr", "memory"])
    p.add_argument("--big", action="store_true", help="also the peak RSS over a 2 GiB table (memory)")
    p.add_argument("--tmpdir", default=None)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        return measure_one(*args.measure)
    if args.quick:
        args.n, args.n_expr, args.repeats = 2_000_000, 1_000_000, 3
    if args.big and "memory" not in args.sections:
        args.sections.append("memory")
    blzarr.set_nthreads(NTHREADS)
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="bench-queries-", dir=args.tmpdir)
    try:
        if "range" in args.sections:
            run_range(args, rep, tmp)
        if "stats" in args.sections:
            run_stats_cost(args, rep, tmp)
        if "expr" in args.sections:
            run_expr(args, rep)
        if "memory" in args.sections:
            run_memory(args, rep, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    for note in rep.notes:
        print("note:", note)
    print("\ntargets:")
    for text, ok, ratio in rep.targets:
        print(f"  [{'ok' if ok else 'MISS'}] {text}: {ratio:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rep.rows, "targets": rep.targets, "notes": rep.notes}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
