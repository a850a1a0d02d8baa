"""The timing loop, the operations, the table and the JSON report of ``python -m bench``."""

import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from contextlib import nullcontext as _nothing

import numpy as np

from blzarr.bench import CLEVEL, CNAME, NTHREADS
from blzarr.bench import memory
from blzarr.bench import peers as P
from blzarr.bench import s3 as S3

N_SCALARS = 2000
N_SLICES, SLICE_LEN = 300, 1000
N_FANCY = 20_000
N_ITER = 1_000_000
APPEND_BATCH = 10_000
FLUSH_BATCH = 10_000      # disk_flushes: the first FLUSH_VALUES values appended by FLUSH_BATCH, flush() each
FLUSH_VALUES = 1_000_000
N_OPENS = 50              # disk_open_scalar: this many (open + one a[i]) per run
N_ROWS = 1000             # ct_row_appends: rows appended one by one to an on-disk ctable, then flush()
WHERE_QUANTILE = 0.9      # `where` keeps the top 10% of the values
CT_WHERE_QUANTILE = 0.99  # ctable `where`/`fetchwhere` keep the top 1% of the rows

COL_ATOM = 8              # disk_col0: the values as a 2-D array of N/8 rows of 8, then a[:, 0]

MEMORY_OPS = ("create", "read_all", "scalars", "slices", "fancy", "sum", "iter", "where", "select",
              "eval_sum")
DISK_OPS = ("disk_create", "disk_open_read", "disk_scalars_cold", "disk_scalars_warm",
            "disk_slices_cold", "disk_slices_warm", "disk_append", "disk_sum", "disk_col0", "disk_flushes", "disk_flushes_nosync", "disk_open_scalar")
CTABLE_OPS = ("ct_create", "ct_where", "ct_fetchwhere", "ct_todataframe", "ct_row_appends")
S3_OPS = S3.S3_OPS        # on a local S3 server (moto), blzarr and zarr only
ALL_OPS = MEMORY_OPS + DISK_OPS + CTABLE_OPS + S3_OPS

LABELS = {
    "create": "create from NumPy",
    "read_all": "read all a[:]",
    "scalars": "{scalars} random a[i]",
    "slices": "{slices} random a[i:i+%d]" % SLICE_LEN,
    "fancy": f"sorted fancy index of {N_FANCY}",
    "sum": "sum()",
    "iter": "iterate 1M values",
    "where": "where(mask), 10% true",
    "select": "a[mask] (bulk), 10% true",
    "eval_sum": "eval('a > x').sum(), 10% true",
    "disk_create": "disk: create + flush",
    "disk_open_read": "disk: open + read all",
    "disk_scalars_cold": "disk: open + {scalars} a[i] (cold)",
    "disk_scalars_warm": "disk: {scalars} a[i] (warm)",
    "disk_slices_cold": "disk: open + {slices} slices (cold)",
    "disk_slices_warm": "disk: {slices} slices (warm)",
    "disk_append": f"disk: append by {APPEND_BATCH} + flush",
    "disk_sum": "disk: open + sum()",
    "disk_col0": f"disk: open + a[:, 0] of (N/{COL_ATOM}, {COL_ATOM})",
    "disk_flushes": f"disk: {FLUSH_VALUES // FLUSH_BATCH} x (append {FLUSH_BATCH} + flush)",
    "disk_flushes_nosync": f"disk: {FLUSH_VALUES // FLUSH_BATCH} x (append + flush), fsync off",
    "disk_open_scalar": f"disk: {N_OPENS} x (open + one a[i])",
    "s3_read_all": "S3: open + read all",
    "s3_scalars": "S3: open + {scalars} a[i]",
    "s3_slices": "S3: open + {slices} slices",
    "ct_create": "ctable: create",
    "ct_where": "ctable: where (1%)",
    "ct_fetchwhere": "ctable: fetchwhere (1%)",
    "ct_todataframe": "ctable: todataframe",
    "ct_row_appends": f"ctable: {N_ROWS} x t.append(row) on disk + flush",
}


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor() or "?"
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    try:
        import subprocess
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except Exception:
        commit = None
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform(), "loadavg": load,
            "commit": commit}


def datasets(n, which=("smooth", "walk"), seed=12345):
    """The two series of the benchmark: `arange(n) * 0.25` and a random walk (cumsum of N(0, 1))."""
    out = {}
    if "smooth" in which:
        out["smooth"] = np.arange(n, dtype=np.float64) * 0.25
    if "walk" in which:
        out["walk"] = np.cumsum(np.random.default_rng(seed).standard_normal(n))
    return out


class Timer:
    """Median of `repeats` runs of fn(*setup()), with setup outside the clock.

    When one run takes longer than `budget` seconds, the remaining repeats are dropped (the
    median of what ran is reported) so that a slow peer cannot stretch the whole run.
    """

    def __init__(self, repeats, budget):
        self.repeats = repeats
        self.budget = budget

    @staticmethod
    def once(fn, setup=None, teardown=None):
        """Seconds of one fn(*setup()) call, the garbage collector off while the clock runs."""
        args = setup() if setup is not None else ()
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            res = fn(*args)
            dt = time.perf_counter() - t0
        finally:
            gc.enable()
        if teardown is not None:
            teardown(res)
        return dt

    def __call__(self, fn, setup=None, teardown=None):
        times = []
        for _ in range(self.repeats):
            times.append(self.once(fn, setup, teardown))
            if sum(times) > self.budget:
                break
        return statistics.median(times), times


class Runner:
    def __init__(self, n, repeats, budget, tmpdir, ops, peers, log=print, n_scalars=N_SCALARS,
                 n_slices=N_SLICES):
        self.n = n
        self.counts = {"scalars": n_scalars, "slices": n_slices}
        self.timer = Timer(repeats, budget)
        self.tmpdir = tmpdir
        self.ops = ops
        self.log = log
        self.notes = []
        self.results = []      # one dict per (dataset, op)
        self.sizes = {}        # dataset -> peer -> compressed bytes in memory
        self.peers = []
        self.versions = {}
        for cls in peers:
            p = cls()
            try:
                p.setup()
            except Exception as exc:  # Unavailable, or anything else that breaks the import
                if cls.name == "blzarr":   # nothing to compare the peers with: no table at all
                    raise RuntimeError(f"blzarr cannot be set up, so there is nothing to benchmark: "
                                       f"{exc}") from exc
                self.note(f"{cls.name}: skipped, {exc}")
                continue
            self.peers.append(p)
            self.versions[p.name] = p.version()
            self.notes.extend(p.NOTES)
        rng = np.random.default_rng(2024)
        m = max(n, 1)
        self.scalar_idx = [int(i) for i in rng.integers(0, m, n_scalars)]
        self.slice_starts = [int(i) for i in rng.integers(0, max(m - SLICE_LEN, 1), n_slices)]
        self.fancy_idx = np.sort(rng.choice(m, min(N_FANCY, m), replace=False))
        self._seq = 0

    def note(self, text):
        self.notes.append(text)
        self.log("note: " + text)

    def path(self, peer, tag):
        self._seq += 1
        return os.path.join(self.tmpdir, f"{peer.name}-{tag}-{self._seq}")

    # ------------------------------------------------------------------ one measurement
    def measure(self, row, peer, op, fn, setup=None, teardown=None):
        """Queue one peer's measurement of `row`; `finish_row` runs the queue.

        The repeats are interleaved across peers (A B C A B C ...), so that a change in the machine's
        load during a row weighs on every peer alike instead of on whichever ran at that moment.
        """
        row["_jobs"].append({"peer": peer, "op": op, "fn": fn, "setup": setup, "teardown": teardown,
                             "times": [], "done": False})

    def _run_jobs(self, row):
        jobs = row.pop("_jobs")
        for _ in range(self.timer.repeats):
            for j in jobs:
                if j["done"]:
                    continue
                name = j["peer"].name
                try:
                    j["times"].append(self.timer.once(j["fn"], j["setup"], j["teardown"]))
                except P.Unsupported:
                    row["skipped"][name] = "not supported"
                    j["done"], j["times"] = True, []
                    continue
                except Exception as exc:
                    msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    row["skipped"][name] = msg
                    self.note(f"{name} {j['op']} on {row['dataset']}: failed, {msg}")
                    if os.environ.get("BLZARR_BENCH_TRACEBACK"):
                        traceback.print_exc()
                    j["done"], j["times"] = True, []
                    continue
                if sum(j["times"]) > self.timer.budget:
                    j["done"] = True
        for j in jobs:
            if j["times"]:
                row["times"][j["peer"].name] = statistics.median(j["times"])
                row["runs"][j["peer"].name] = j["times"]

    def new_row(self, dataset, op):
        row = {"dataset": dataset, "op": op, "label": LABELS[op].format(**self.counts), "times": {}, "runs": {},
               "skipped": {}, "_jobs": []}
        self.results.append(row)
        return row

    def finish_row(self, row):
        self._run_jobs(row)
        base = row["times"].get("blzarr")
        row["ratios"] = {}
        if base:
            for k, v in row["times"].items():
                if k != "blzarr":
                    row["ratios"][k] = v / base
        parts = [f"{k} {v * 1e3:.2f} ms" for k, v in row["times"].items()]
        self.log(f"  {row['dataset']:6s} {row['label']:38s} " + ", ".join(parts))

    # ------------------------------------------------------------------ the operations
    def run_array(self, dname, x):
        thr = float(np.quantile(x, WHERE_QUANTILE))
        mask = x > thr
        objs, masks = {}, {}
        self.sizes[dname] = {}
        for p in self.peers:
            try:
                objs[p.name] = p.create(x)
                masks[p.name] = p.make_mask(mask) if {"where", "select"} & set(self.ops) else None
                self.sizes[dname][p.name] = p.nbytes_stored(objs[p.name])
            except Exception as exc:
                self.note(f"{p.name}: cannot create the in-memory array on {dname}: "
                          f"{type(exc).__name__}: {exc}")
        sidx, sst, fidx = self.scalar_idx, self.slice_starts, self.fancy_idx

        def scalars(a):
            for i in sidx:
                a[i]

        def slices(a):
            for s in sst:
                a[s:s + SLICE_LEN]

        for op in MEMORY_OPS:
            if op not in self.ops:
                continue
            row = self.new_row(dname, op)
            for p in self.peers:
                a = objs.get(p.name)
                if a is None:
                    row["skipped"][p.name] = "no in-memory array"
                    continue
                fn = {  # default arguments bind this peer's objects: the calls run later
                    "create": lambda p=p: p.create(x),
                    "read_all": lambda p=p, a=a: p.read_all(a),
                    "scalars": lambda a=a: scalars(a),
                    "slices": lambda a=a: slices(a),
                    "fancy": lambda p=p, a=a: p.fancy(a, fidx),
                    "sum": lambda p=p, a=a: p.sum(a),
                    "iter": lambda p=p, a=a: p.iterate(a, min(N_ITER, len(x))),
                    "where": lambda p=p, a=a: p.where(a, masks[p.name]),
                    "select": lambda p=p, a=a: p.select(a, masks[p.name]),
                    "eval_sum": lambda p=p, a=a: p.eval_sum(a, thr),
                }[op]
                self.measure(row, p, op, fn)
            self.finish_row(row)
        del objs
        masks.clear()       # named by the closures above: emptied, not deleted
        self.check_results(dname, x, mask)

    def check_results(self, dname, x, mask):
        """A benchmark of wrong answers is worthless: check each peer once against NumPy."""
        for p in self.peers:
            try:
                a = p.create(x[: min(len(x), 300_000)])
                ref = x[: min(len(x), 300_000)]
                ok = (np.array_equal(np.asarray(p.read_all(a)), ref)
                      and np.isclose(float(p.sum(a)), float(ref.sum()), rtol=1e-9, atol=1e-6))
                if len(ref):
                    ok = ok and float(a[len(ref) // 2]) == float(ref[len(ref) // 2])
                    if "where" in self.ops:
                        m = mask[: len(ref)]
                        ok = ok and np.array_equal(np.asarray(p.where(a, p.make_mask(m))), ref[m])
                    if "select" in self.ops:
                        m = mask[: len(ref)]
                        ok = ok and np.array_equal(np.asarray(p.select(a, p.make_mask(m))), ref[m])
                if not ok:
                    self.note(f"{p.name}: WRONG RESULT on {dname} (read all, sum, a[i], where or a[mask] "
                              f"differ from NumPy)")
            except P.Unsupported:
                pass
            except Exception as exc:
                self.note(f"{p.name}: result check on {dname} failed: {type(exc).__name__}: {exc}")

    def run_disk(self, dname, x):
        sidx, sst = self.scalar_idx, self.slice_starts
        paths = {}
        disk_ops = [op for op in DISK_OPS if op in self.ops]
        if not disk_ops:
            return
        for op in disk_ops:
            row = self.new_row(dname, op)
            for p in self.peers:
                if op == "disk_create":
                    def setup(p=p):
                        path = self.path(p, "create")
                        return (path,)

                    def fn(path, p=p):
                        p.disk_create(x, path)
                        return path
                    self.measure(row, p, op, fn, setup, teardown=P._rmtree)
                    continue
                if op == "disk_append":
                    total = len(x)
                    batches = [x[s:s + APPEND_BATCH] for s in range(0, total, APPEND_BATCH)]

                    def fn(path, p=p):
                        h = p.append_open(path, x.dtype, total)
                        for b in batches:
                            p.append(h, b)
                        p.append_close(h)
                        return path
                    self.measure(row, p, op, fn, lambda p=p: (self.path(p, "append"),),
                                 teardown=P._rmtree)
                    continue
                if op in ("disk_flushes", "disk_flushes_nosync"):
                    part = x[:FLUSH_VALUES]
                    fbatches = [part[s:s + FLUSH_BATCH] for s in range(0, len(part), FLUSH_BATCH)]

                    def fn(path, p=p, fbatches=fbatches, nosync=op == "disk_flushes_nosync"):
                        # what durability costs: a flush after every batch, with the syncs of a
                        # durable flush (the default) and without them (blzarr only)
                        if nosync and not hasattr(p, "without_fsync"):
                            raise P.Unsupported
                        with p.without_fsync() if nosync else _nothing():
                            h = p.append_open(path, x.dtype, len(fbatches) * FLUSH_BATCH)
                            for b in fbatches:
                                p.append(h, b)
                                p.flush(h)
                            p.append_close(h)
                        return path
                    self.measure(row, p, op, fn, lambda p=p: (self.path(p, "flushes"),),
                                 teardown=P._rmtree)
                    continue
                if op == "disk_col0":
                    key = p.name + ":2d"
                    if key not in paths:
                        paths[key] = None
                        x2 = x[:len(x) // COL_ATOM * COL_ATOM].reshape(-1, COL_ATOM)
                        try:
                            path = self.path(p, "read2d")
                            p.disk_create(x2, path)
                            paths[key] = path
                        except P.Unsupported:
                            pass
                        except Exception as exc:
                            self.note(f"{p.name}: cannot write the 2-D {dname} array to disk: "
                                      f"{type(exc).__name__}: {exc}")
                    if paths[key] is None:
                        row["skipped"][p.name] = "no on-disk 2-D array"
                        continue
                    self.measure(row, p, op, lambda p=p, path=paths[key]: p.col0(p.disk_open(path)))
                    continue
                # the ops below read one array written once per (peer, dataset)
                if p.name not in paths:
                    path = self.path(p, "read")
                    try:
                        p.disk_create(x, path)
                        paths[p.name] = path
                    except P.Unsupported:
                        paths[p.name] = None
                    except Exception as exc:
                        paths[p.name] = None
                        self.note(f"{p.name}: cannot write {dname} to disk: {type(exc).__name__}: "
                                  f"{exc}")
                path = paths[p.name]
                if path is None:
                    row["skipped"][p.name] = "no on-disk array"
                    continue
                if op == "disk_sum":
                    self.measure(row, p, op, lambda p=p, path=path: p.disk_sum(path))
                elif op == "disk_open_scalar":
                    def fn(p=p, path=path):
                        for i in sidx[:N_OPENS]:
                            p.disk_open(path)[i]
                    self.measure(row, p, op, fn)
                elif op == "disk_open_read":
                    reader = getattr(p, "disk_read_all", None)
                    fn = (lambda path=path, reader=reader: reader(path)) if reader else (
                        lambda p=p, path=path: p.read_all(p.disk_open(path)))
                    self.measure(row, p, op, fn)
                elif op in ("disk_scalars_cold", "disk_slices_cold"):
                    def fn(p=p, path=path, op=op):
                        a = p.disk_open(path)
                        if op == "disk_scalars_cold":
                            for i in sidx:
                                a[i]
                        else:
                            for s in sst:
                                a[s:s + SLICE_LEN]
                    self.measure(row, p, op, fn)
                else:
                    def warm(a, op=op):
                        if op == "disk_scalars_warm":
                            for i in sidx:
                                a[i]
                        else:
                            for s in sst:
                                a[s:s + SLICE_LEN]
                    handle = []

                    def setup(p=p, path=path, handle=handle, warm=warm):
                        if not handle:  # open once; one untimed pass loads whatever the library caches
                            handle.append(p.disk_open(path))
                            warm(handle[0])
                        return (handle[0],)
                    self.measure(row, p, op, warm, setup)
            self.finish_row(row)
        for path in paths.values():
            if path:
                P._rmtree(path)

    def run_ctable(self, data):
        ct_ops = [op for op in CTABLE_OPS if op in self.ops]
        if not ct_ops:
            return
        smooth = data.get("smooth")
        walk = data.get("walk")
        n = len(next(iter(data.values())))
        if smooth is None:
            smooth = np.arange(n) * 0.25
        if walk is None:
            walk = np.cumsum(np.random.default_rng(1).standard_normal(n))
        cols = {"smooth": smooth, "walk": walk, "id": np.arange(n, dtype=np.int64)}
        thr = float(np.quantile(walk, CT_WHERE_QUANTILE)) if n else 0.0
        expr = f"walk > {thr!r}"
        tables = {}
        for p in self.peers:
            try:
                tables[p.name] = p.ct_create(cols)
            except P.Unsupported:
                pass
            except NotImplementedError as exc:
                self.note(f"{p.name}: ctable skipped, not implemented yet ({exc})")
            except Exception as exc:
                self.note(f"{p.name}: ctable skipped, {type(exc).__name__}: {exc}")
        rows = [(i, i * 0.25, i % 7) for i in range(N_ROWS)]
        for op in ct_ops:
            row = self.new_row("table", op)
            for p in self.peers:
                if op == "ct_row_appends":
                    def setup(p=p):
                        path = self.path(p, "rows")
                        return (p.ct_open_rows(path), path)

                    def fn(t, path, p=p):
                        p.ct_append_rows(t, rows)
                        return path
                    self.measure(row, p, op, fn, setup, teardown=P._rmtree)
                    continue
                t = tables.get(p.name)
                if t is None:
                    row["skipped"][p.name] = "no ctable"
                    continue
                fn = {  # default arguments bind this peer's objects: the calls run later
                    "ct_create": lambda p=p: p.ct_create(cols),
                    "ct_where": lambda p=p, t=t: p.ct_where(t, expr),
                    "ct_fetchwhere": lambda p=p, t=t: p.ct_fetchwhere(t, expr),
                    "ct_todataframe": lambda p=p, t=t: p.ct_todataframe(t),
                }[op]
                self.measure(row, p, op, fn)
            self.finish_row(row)


# ---------------------------------------------------------------------- the report
def format_table(results, peer_names, sizes=None):
    """An reStructuredText simple table: median ms per library, then peer/blzarr ratios.

    A ratio above 1 means blzarr is faster than that peer (peer time / blzarr time).
    """
    others = [p for p in peer_names if p != "blzarr"]
    head = ["dataset", "operation"] + [f"{p} ms" for p in peer_names] + [f"{p}/blzarr" for p in others]
    rows = []
    for r in results:
        cells = [r["dataset"], r["label"]]
        for p in peer_names:
            t = r["times"].get(p)
            cells.append(f"{t * 1e3:.3f}" if t is not None and t < 0.01 else
                         f"{t * 1e3:.1f}" if t is not None else "--")
        for p in others:
            q = r.get("ratios", {}).get(p)
            cells.append(f"{q:.2f}" if q is not None else "--")
        rows.append(cells)
    if sizes:
        for d, per in sizes.items():
            cells = [d, "compressed MB in memory"]
            for p in peer_names:
                v = per.get(p)
                cells.append(f"{v / 1e6:.2f}" if v is not None else "--")
            cells += [""] * len(others)
            rows.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in rows)) if rows else len(h) for i, h in enumerate(head)]
    rule = "  ".join("=" * w for w in widths)
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([rule, fmt(head), rule] + [fmt(c) for c in rows] + [rule])


def check_targets(results):
    """blzarr's performance targets, evaluated on this run: a list of (target, ok or None, detail)."""
    out = []

    def ratio(d, op, peer):
        for r in results:
            if r["dataset"] == d and r["op"] == op:
                return r.get("ratios", {}).get(peer)
        return None

    for d in ("smooth", "walk"):
        q = ratio(d, "read_all", "numpy")
        if d == "smooth":
            out.append((f"{d}: read all no slower than a NumPy copy", None if q is None else q >= 1.0, q))
        for op in ("scalars", "disk_scalars_cold", "disk_scalars_warm"):
            q = ratio(d, op, "bcolz")
            out.append((f"{d}: {op} >= 50x faster than bcolz", None if q is None else q >= 50, q))
            q = ratio(d, op, "blosc2")
            out.append((f"{d}: {op} faster than blosc2", None if q is None else q > 1, q))
        q = ratio(d, "slices", "bcolz")
        out.append((f"{d}: slices >= 5x faster than bcolz", None if q is None else q >= 5, q))
        q = ratio(d, "sum", "bcolz")
        out.append((f"{d}: sum >= 2x faster than bcolz", None if q is None else q >= 2, q))
        q = ratio(d, "sum", "numpy")
        out.append((f"{d}: sum within 3x of NumPy", None if q is None else q >= 1 / 3, q))
        for op in ("create", "read_all", "fancy", "iter", "where", "disk_create", "disk_open_read",
                   "disk_slices_cold", "disk_slices_warm", "disk_append", "disk_flushes",
                   "disk_open_scalar"):
            q = ratio(d, op, "bcolz")
            out.append((f"{d}: {op} at least as fast as bcolz", None if q is None else q >= 1, q))
        # every operation at least as fast as python-blosc2, zarr and bcolz; a[:] as fast as
        # a NumPy copy, sum() within 1.5x of NumPy's
        for op in MEMORY_OPS + DISK_OPS:
            for peer in ("blosc2", "zarr"):
                q = ratio(d, op, peer)
                out.append((f"{d}: {op} at least as fast as {peer}", None if q is None else q >= 1, q))
        for op in ("eval_sum", "disk_sum", "disk_col0"):
            q = ratio(d, op, "bcolz")
            out.append((f"{d}: {op} at least as fast as bcolz", None if q is None else q >= 1, q))
        q = ratio(d, "sum", "numpy")
        out.append((f"{d}: sum within 1.5x of NumPy", None if q is None else q >= 1 / 1.5, q))
    # on the local S3 server: at most one GET per random a[i] after warm-up, fewer bytes
    # than zarr per scalar read, read-all throughput at least zarr's
    for d in ("smooth", "walk"):
        row = next((r for r in results if r["dataset"] == d and r["op"] == "s3_scalars"), None)
        req = (row or {}).get("requests", {})
        g = req["blzarr"]["get_per_op"] if "blzarr" in req else None
        out.append((f"{d}: s3_scalars at most one GET per a[i] (GETs per a[i])", None if g is None else g <= 1, g))
        q = (req["zarr"]["bytes_per_op"] / req["blzarr"]["bytes_per_op"]
             if "zarr" in req and "blzarr" in req and req["blzarr"]["bytes_per_op"] else None)
        out.append((f"{d}: s3_scalars fewer GET bytes per a[i] than zarr (zarr/blzarr bytes)",
                    None if q is None else q > 1, q))
        for op in S3_OPS:
            q = ratio(d, op, "zarr")
            out.append((f"{d}: {op} at least as fast as zarr", None if q is None else q >= 1, q))
    for op in CTABLE_OPS:
        q = ratio("table", op, "bcolz")
        out.append((f"table: {op} at least as fast as bcolz", None if q is None else q >= 1, q))
    return out


def format_targets(targets):
    lines = []
    for name, ok, q in targets:
        if ok is None:
            continue
        lines.append(f"  [{'ok' if ok else 'MISS'}] {name} (ratio {q:.2f})")
    return "\n".join(lines)


def summarize_targets(targets, quick=False):
    """One line: how many of the targets this run could check it met (the JSON report lists each)."""
    checked = [ok for _, ok, _ in targets if ok is not None]
    if not checked:
        return ""
    met = sum(checked)
    line = f"targets: {met} of {len(checked)} met"
    if quick:
        line += " (they are set for the full run: a --quick run, on less data, misses more; --json lists each)"
    elif met < len(checked):
        line += ", missed:"
    return line


def run(args, log=print):
    ops = set(args.ops) if args.ops else set(ALL_OPS)
    peer_classes = [c for c in P.ALL if not args.peers or c.name in args.peers or c.name == "blzarr"]
    tmp = tempfile.mkdtemp(prefix="blzarr-bench-", dir=args.tmpdir)
    started = time.time()
    try:
        runner = Runner(args.n, args.repeats, args.budget, tmp, ops, peer_classes, log=log,
                        n_scalars=args.scalars, n_slices=args.slices)
        data = datasets(args.n, args.datasets)
        s3rows = S3.S3Rows(runner, SLICE_LEN)
        try:
            for dname, x in data.items():
                log(f"[{dname}] n={len(x):,} float64")
                runner.run_array(dname, x)
                runner.run_disk(dname, x)
                s3rows.run(dname, x)
        finally:
            s3rows.close()          # the S3 server stops with the run
        if ops & set(CTABLE_OPS):
            log("[table] smooth, walk, id columns")
            runner.run_ctable(data)
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    names = [p.name for p in runner.peers]
    report = {
        "command": "python -m bench " + " ".join(args.argv),
        "machine": machine(),
        "versions": runner.versions,
        "settings": {"n": args.n, "repeats": args.repeats, "budget_s": args.budget, "cname": CNAME,
                     "clevel": CLEVEL, "shuffle": "byte", "nthreads": NTHREADS,
                     "quick": bool(args.quick), "scalars": args.scalars, "slices": args.slices,
                     "slice_len": SLICE_LEN, "fancy": N_FANCY, "iter": N_ITER,
                     "append_batch": APPEND_BATCH, "datasets": list(data),
                     "s3_chunk": S3.S3_CHUNK, "s3_shard": S3.S3_SHARD},
        "peers": names,
        "ratio_definition": "peer median time / blzarr median time (> 1: blzarr is faster)",
        "results": runner.results,
        "compressed_bytes": runner.sizes,
        "notes": runner.notes,
        "elapsed_s": None,
        "memory": [],
    }
    if args.memory:
        report["memory"] = memory.run(args, log=log)
    report["elapsed_s"] = time.time() - started
    report["machine"] = machine()  # again, so the load average covers the run
    report["targets"] = [{"target": t, "ok": ok, "ratio": q} for t, ok, q in check_targets(runner.results)]
    return report


def print_report(report, out=sys.stdout):
    m = report["machine"]
    print(f"\ncommand: {report['command']}", file=out)
    print(f"machine: {m['nproc']} cpus, {m['cpu']}, Python {m['python']}, NumPy {m['numpy']}"
          + (f"; load average at the end {m['loadavg']}" if m.get("loadavg") else "")
          + (f"; commit {m['commit']}" if m.get("commit") else ""), file=out)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()), file=out)
    print(f"median of up to {report['settings']['repeats']} runs; "
          f"ratio = {report['ratio_definition']}\n", file=out)
    if report["results"]:
        print(format_table(report["results"], report["peers"], report.get("compressed_bytes")), file=out)
    req = S3.format_requests(report["results"])
    if req:
        print(f"\nS3 requests (moto's S3 server on this machine; chunks of {S3.S3_CHUNK:,} values, "
              f"{S3.S3_SHARD} chunks per superchunk file / zarr shard; medians over the runs):\n" + req, file=out)
    if report.get("memory"):
        print("\n" + memory.format_table(report["memory"]), file=out)
    targets = [(t["target"], t["ok"], t["ratio"]) for t in report["targets"]]
    summary = summarize_targets(targets, quick=report["settings"].get("quick"))
    if summary:
        print("\n" + summary, file=out)
        missed = format_targets([t for t in targets if t[1] is False])
        if missed and not report["settings"].get("quick"):
            print(missed, file=out)
    if report["notes"]:
        print("\nnotes:", file=out)
        for n in report["notes"]:
            print("  - " + n, file=out)
    print(f"\nelapsed: {report['elapsed_s']:.1f} s", file=out)


def write_json(report, path):
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
