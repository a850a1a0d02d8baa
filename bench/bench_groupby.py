"""Group-by and where_terms of a ctable on disk against pandas, Polars and DuckDB, in one run.

    python bench/bench_groupby.py [--n 10000000] [--repeats 7] [--quick] [--clevel L] [--json PATH]

Data: db-benchmark's group-by table at --n rows: ``id1`` 100 string keys (id001..id100, S5), ``id3``
100,000 integer keys, ``v1`` integers 1-5, ``v3`` floats (0-100, six decimals).  blzarr reads its
ctable from disk (BLZ layout, lz4, clevel 5, byte shuffle, page cache warm); pandas, Polars and DuckDB
hold the same rows uncompressed in memory (their best case); 2 threads everywhere (pandas has one).
Every peer's result is first checked against pandas'.  ``--clevel`` sets the level of blzarr's table
and of python-blosc2's (default: the harness's level, 5).  With LZ4 the level is Blosc's acceleration
(10 - level): at 8 or 9 the low-cardinality ``v1`` decodes about 2.7 times faster than at 5.

Every row prints the wall time of each peer and, in brackets, its CPU time (``time.process_time``,
all of the process's threads): on a machine other work keeps busy, the wall times mostly measure the
waits for a core, and the CPU times are the comparable numbers.

Sections (interleaved: each round runs every peer once, the order rotating from round to round;
a time is the median over --repeats rounds; a ratio is the peer's time / blzarr's, > 1 = blzarr
faster):

groupby   sum(v1) by id1; sum(v1) by id3; sum(v1) and mean(v3) by id3.  blzarr without a cached
          factorization, and "blzarr cached" after ``cache_factor`` of the key.  Peers: pandas
          (``groupby(sort=False)``), Polars (id1 as a string column), DuckDB (a table in memory), and
          Polars and DuckDB reading the same rows from a Parquet file (zstd), and python-blosc2's
          CTable ``group_by(key).agg(...)`` on its own persisted table (same codec and level).
terms     ``where_terms([('id3', 'in', 20 values)])`` against ``np.isin`` on the uncompressed column,
          and ``[('id1', 'in', 3 values)]`` against np.isin on the S5 column.
"""

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

os.environ.setdefault("POLARS_MAX_THREADS", "2")

import blzarr  # noqa: E402
from bench import CLEVEL, CNAME, NTHREADS  # noqa: E402
from bench.timing import have  # noqa: E402


def make_data(n, seed=108):
    rng = np.random.default_rng(seed)
    names = np.array([b"id%03d" % i for i in range(1, 101)])
    return {"id1": names[rng.integers(0, 100, n)],
            "id3": rng.integers(1, 100_001, n).astype(np.int64),
            "v1": rng.integers(1, 6, n).astype(np.int64),
            "v3": np.round(rng.random(n) * 100, 6)}


def interleaved(fns, repeats, cpu=None):
    """{name: [wall seconds]}: every round runs each function once, the order rotating; `cpu`, a
    dict, receives {name: [CPU seconds of the process]} of the same runs."""
    names = list(fns)
    times = {k: [] for k in names}
    cpus = {k: [] for k in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
            cpus[k].append(time.process_time() - c0)
    if cpu is not None:
        cpu.update(cpus)
    return times


def as_frame(obj, keys, vals):
    """A pandas frame of the keys (bytes as str) and values, sorted by the keys, for checking."""
    import pandas as pd
    if hasattr(obj, "to_pandas"):
        obj = obj.to_pandas()
    elif isinstance(obj, dict):
        obj = pd.DataFrame(obj)
    elif not isinstance(obj, pd.DataFrame):
        obj = obj.todataframe()
    obj = obj.reset_index() if keys[0] not in obj.columns else obj
    out = pd.DataFrame({c: obj[c] for c in keys + vals})
    for c in keys:
        if out[c].dtype == object and len(out) and isinstance(out[c].iloc[0], bytes):
            out[c] = out[c].str.decode("ascii")
    return out.sort_values(keys).reset_index(drop=True)


def check(name, got, ref, keys, vals):
    g, r = as_frame(got, keys, vals), ref
    if len(g) != len(r) or not all(np.array_equal(g[k].to_numpy(), r[k].to_numpy()) for k in keys):
        raise AssertionError(f"{name}: groups differ from pandas'")
    for v in vals:
        if not np.allclose(g[v].to_numpy(dtype=float), r[v].to_numpy(dtype=float), rtol=1e-9):
            raise AssertionError(f"{name}: {v} differs from pandas'")


QUERIES = [
    ("sum(v1) by id1", ["id1"], [("v1", "sum")]),
    ("sum(v1) by id3", ["id3"], [("v1", "sum")]),
    ("sum(v1), mean(v3) by id3", ["id3"], [("v1", "sum"), ("v3", "mean")]),
]


def run_groupby(args, data, root, tmp, report):
    import pandas as pd
    t = blzarr.open(root)
    df = pd.DataFrame(data)
    peers = {}
    sql = {"sum": "sum", "mean": "avg"}
    pq = os.path.join(tmp, "g.parquet")
    if have("polars"):
        import polars as pl
        pdf = pl.DataFrame({"id1": data["id1"].astype(str), "id3": data["id3"], "v1": data["v1"], "v3": data["v3"]})
        pdf.write_parquet(pq, compression="zstd")
        peers["polars"] = pdf
    if have("blosc2") and hasattr(__import__("blosc2"), "CTable"):
        peers["blosc2"] = blosc2_table(data, os.path.join(tmp, "g.b2d"), args.clevel)
    if have("duckdb"):
        import duckdb
        con = duckdb.connect()
        con.execute(f"SET threads={NTHREADS}")
        src = df.assign(id1=data["id1"].astype(str))
        con.register("src", src)
        con.execute("CREATE TABLE g AS SELECT * FROM src")
        con.unregister("src")
        peers["duckdb"] = con
    for label, keys, aggs in QUERIES:
        fns = {}
        bq = [[c, op, c] for c, op in aggs]
        fns["blzarr"] = lambda bq=bq, keys=keys: t.groupby(keys, bq)
        spec = {c: op for c, op in aggs}
        fns["pandas"] = lambda keys=keys, spec=spec: df.groupby(keys, sort=False).agg(spec)
        if "polars" in peers:
            import polars as pl
            exprs = [getattr(pl.col(c), op)() for c, op in aggs]
            fns["polars"] = lambda keys=keys, exprs=exprs: peers["polars"].group_by(keys).agg(exprs)
            fns["polars parquet"] = lambda keys=keys, exprs=exprs: pl.read_parquet(pq).group_by(keys).agg(exprs)
        if "blosc2" in peers:
            b2t = peers["blosc2"]
            fns["blosc2 ctable"] = lambda keys=keys, spec=spec: b2t.group_by(keys[0] if len(keys) == 1 else keys).agg(spec)
        if "duckdb" in peers:
            sel = ", ".join(f"{sql[op]}({c}) AS {c}" for c, op in aggs)
            q = f"SELECT {', '.join(keys)}, {sel} FROM g GROUP BY {', '.join(keys)}"
            qp = f"SELECT {', '.join(keys)}, {sel} FROM read_parquet('{pq}') GROUP BY {', '.join(keys)}"
            fns["duckdb"] = lambda q=q: peers["duckdb"].execute(q).df()
            fns["duckdb parquet"] = lambda q=qp: peers["duckdb"].execute(q).df()
        vals = [c for c, _ in aggs]
        ref = as_frame(fns["pandas"](), keys, vals)
        for name, fn in fns.items():
            if name == "blosc2 ctable":     # its result columns are named <column>_<op>
                got = fn().to_pandas().rename(columns={f"{c}_{op}": c for c, op in aggs})
                check(name, got, ref, keys, vals)
            elif name != "pandas":
                check(name, fn(), ref, keys, vals)
        cpu = {}
        times = interleaved(fns, args.repeats, cpu)
        report.row("groupby", label, times, cpu)
        # the cached factorization of the key, timed apart (the uncached rounds must not see it)
        t.cache_factor(keys)
        t2 = blzarr.open(root)
        check("blzarr cached", t2.groupby(keys, bq), ref, keys, vals)
        ccpu = {}
        cached = interleaved({"blzarr cached": lambda bq=bq, keys=keys: t2.groupby(keys, bq)}, args.repeats, ccpu)
        report.extra("groupby", label, "blzarr cached", cached["blzarr cached"], ccpu["blzarr cached"])
        for k in keys:
            shutil.rmtree(os.path.join(root, k + ".factor"), ignore_errors=True)
        best = statistics.median(times["blzarr"])
        for peer, want in (("pandas", 5.0), ("polars", 1.0), ("duckdb", 1.0)):
            if peer in times:
                report.target(f"{label}: {peer} / blzarr >= {want}", statistics.median(times[peer]) / best, want)


def blosc2_table(data, path, clevel=CLEVEL):
    """python-blosc2's CTable of the same rows, persisted at `path` (reopened from disk), id1 as
    fixed-width strings of 5 (its default, variable-length UTF-8, took minutes to write here)."""
    import blosc2
    import pyarrow as pa
    blosc2.set_nthreads(NTHREADS)
    n = len(data["id3"])
    tab = pa.table({"id1": data["id1"].astype(str), "id3": data["id3"], "v1": data["v1"], "v3": data["v3"]})
    t = blosc2.CTable.from_arrow(tab.schema, tab.to_batches(max_chunksize=1 << 20), urlpath=path, mode="w",
                                 capacity_hint=n, string_max_length=5,
                                 cparams={"codec": getattr(blosc2.Codec, CNAME.upper()), "clevel": clevel})
    t.close()
    return blosc2.CTable.open(path)


def run_terms(args, data, root, report):
    t = blzarr.open(root)
    rng = np.random.default_rng(7)
    cases = [("id3 in 20 values", "id3", [int(x) for x in rng.integers(1, 100_001, 20)]),
             ("id1 in 3 values", "id1", ["id007", "id042", "id099"])]
    for label, col, values in cases:
        raw = data[col]
        npvals = np.array(values, dtype=raw.dtype) if raw.dtype.kind != "S" else np.array([v.encode() for v in values])
        ref = np.isin(raw, npvals)
        got = t.where_terms([(col, "in", values)])
        if not np.array_equal(got[:], ref):
            raise AssertionError(f"where_terms {label}: differs from np.isin")
        cpu = {}
        times = interleaved({"blzarr": lambda: t.where_terms([(col, "in", values)]),
                             "numpy isin": lambda: np.isin(raw, npvals)}, args.repeats, cpu)
        report.row("terms", label, times, cpu)
        report.target(f"where_terms {label}: within 1.5x of np.isin",
                      statistics.median(times["numpy isin"]) / statistics.median(times["blzarr"]), 1 / 1.5)


class Report:
    def __init__(self):
        self.rows, self.targets = [], []

    def row(self, section, label, times, cpu):
        med = {k: statistics.median(v) for k, v in times.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        self.rows.append({"section": section, "label": label, "median_s": med, "median_cpu_s": cmed})
        base = med["blzarr"]
        parts = [f"{k} {v * 1e3:8.1f} ms [cpu {cmed[k] * 1e3:7.1f}]" + ("" if k == "blzarr" else f" ({v / base:5.2f}x)")
                 for k, v in med.items()]
        print(f"{section:8s} {label:28s} " + "  ".join(parts), flush=True)

    def extra(self, section, label, name, times, cpu):
        med, cmed = statistics.median(times), statistics.median(cpu)
        self.rows[-1]["median_s"][name] = med
        self.rows[-1]["median_cpu_s"][name] = cmed
        print(f"{'':8s} {'':28s} {name} {med * 1e3:8.1f} ms [cpu {cmed * 1e3:7.1f}]", flush=True)

    def target(self, text, ratio, want):
        self.targets.append({"target": text, "ratio": ratio, "met": bool(ratio >= want)})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=10_000_000, help="rows (default 10,000,000)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="1,000,000 rows, 3 repeats")
    p.add_argument("--sections", nargs="+", default=["groupby", "terms"], choices=["groupby", "terms"])
    p.add_argument("--clevel", type=int, default=CLEVEL, choices=range(10),
                   help=f"compression level of blzarr's and python-blosc2's tables (default {CLEVEL})")
    p.add_argument("--tmpdir", default=None)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 1_000_000, 3
    blzarr.set_nthreads(NTHREADS)
    tmp = tempfile.mkdtemp(prefix="blzarr-gb-", dir=args.tmpdir)
    report = Report()
    try:
        data = make_data(args.n)
        root = os.path.join(tmp, "g.blz")
        with blzarr.defaults_ctx(fsync=False):
            blzarr.ctable([data[c] for c in data], names=list(data), rootdir=root, mode="w",
                          cparams=blzarr.cparams(clevel=args.clevel, shuffle=1, cname=CNAME)).flush()
        blzarr.open(root)["id1"][:]     # the page cache warm
        print(f"{args.n:,} rows; {CNAME} clevel {args.clevel}; blzarr {blzarr.__version__}, {NTHREADS} threads; medians of "
              f"{args.repeats} interleaved rounds", flush=True)
        if "groupby" in args.sections:
            run_groupby(args, data, root, tmp, report)
        if "terms" in args.sections:
            run_terms(args, data, root, report)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\ntargets:")
    for tg in report.targets:
        print(f"  [{'met' if tg['met'] else 'MISSED'}] {tg['target']}: {tg['ratio']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": args.n, "repeats": args.repeats, "clevel": args.clevel, "rows": report.rows,
                       "targets": report.targets}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
