"""Time ctable <-> Parquet and the Arrow stream against pyarrow and pandas on the same rows.

    python bench/bench_arrow.py [--n 5000000] [--repeats 7] [--quick] [--compression snappy] [--cpu]
                                [--floor]

Rows (each the median of `--repeats` runs, the two sides of a row run one after the other in every
repeat, so load on the machine falls on both; ratios are peer time / blzarr time, > 1 means blzarr
is faster):

    toparquet        t.toparquet(path)  vs  pyarrow.parquet.write_table(table, path) of the same rows
                     held in memory as an Arrow table (same compression, same row group size); the
                     file is the same, byte for byte.  toparquet syncs the file before it renames it
                     into place, write_table does not: the "fsync off" row times toparquet with
                     blzarr.defaults_ctx(fsync=False), like for like
    fromparquet      ctable.fromparquet(path) in memory, and into a BLZ directory, vs
                     pyarrow.parquet.read_table(path)
    polars           polars.DataFrame(t) (the Arrow stream)  vs  polars.from_pandas(t.todataframe())

With --floor, the CPU time (every thread of the process) of fromparquet's stages, each alone: pyarrow's
read of the row groups as fromparquet reads them (string columns with a dictionary kept coded), their
conversion to NumPy, and the Blosc compression of the table's chunks on one thread, against the
peer's read_table; their sum over the threads (get_nthreads()) is the least wall time fromparquet in
memory can take however it overlaps its stages, the "best ratio" the most it can reach.

The table: an int64 row id, a float64 random walk, int32 small integers, a boolean, a 5-character
key of 100 values and a timestamp; on disk in the BLZ layout (page cache warm).  Results are checked
before timing.
"""

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import blzarr  # noqa: E402


def make_table(n, root):
    rng = np.random.default_rng(7)
    cols = {
        "id": np.arange(n, dtype="i8"),
        "x": np.cumsum(rng.normal(size=n)),
        "k": rng.integers(0, 100, n).astype("i4"),
        "flag": rng.random(n) < 0.3,
        "key": np.char.add("id", (rng.integers(0, 100, n)).astype("U3")).astype("U5"),
        "when": np.datetime64("2024-01-01", "s") + np.arange(n).astype("m8[s]"),
    }
    return blzarr.ctable(list(cols.values()), list(cols), rootdir=root, mode="w", format="blz"), cols


def interleaved(pairs, repeats, clock=time.perf_counter):
    """{name: median seconds} of the callables of `pairs` [(name, fn)], each run once per repeat, in
    turn; `clock` is the wall clock, or time.process_time for the CPU time of the process (every
    thread: the measure that holds on a machine whose cores are busy with other work)."""
    times = {name: [] for name, _ in pairs}
    for _ in range(repeats):
        for name, fn in pairs:
            gc.collect()
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def stage_floor(path, repeats, nthreads):
    """[(label, CPU seconds)] of fromparquet's stages on Parquet file `path`, each run alone, and of
    pyarrow's read_table (medians of `repeats`), and the floor they give on `nthreads` threads."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from blzarr.io import arrow as ba
    from blzarr.io import parquet as bp
    from blzarr.storage.chunk import compress_array

    pf0 = pq.ParquetFile(path)
    plan = ba._import_plan(pa, pf0.schema_arrow)
    coded = bp._dictionary_columns(pf0.metadata, [n for n, kind, dt, tz in plan if kind in "US"])

    def read():
        pf = pq.ParquetFile(path, read_dictionary=coded)
        return [pf.read_row_group(i) for i in range(pf.num_row_groups)]
    groups = read()
    t = blzarr.ctable.fromparquet(path)

    def convert():
        out = []
        for g in groups:
            cols = {}
            for j, (name, kind, dt, tz) in enumerate(plan):
                arr = g.column(j)
                arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
                width = t.cols[name].dtype.itemsize // (4 if kind == "U" else 1)
                if kind in "US" and ba._is_dict(pa, arr):
                    d, idx, valid, w = ba._dict_parts(pa, arr, kind, width)
                    cols[name] = ba._dict_to_fixed(pa, d, idx, valid, kind, width, name)
                elif kind in "US":
                    cols[name] = ba._arrow_to_fixed(pa, ba._plain(pa, arr), kind, width, name)
                else:
                    cols[name] = ba._convert(pa, ba._plain(pa, arr), kind, dt)[0]
            out.append(cols)
        return out

    values = {name: t.cols[name][:] for name in t.names}

    def compress():
        # the table's full chunks, as its columns cut them (without their statistics)
        for name in t.names:
            c, v = t.cols[name], values[name]
            for s in range(0, len(v) - c.chunklen + 1, c.chunklen):
                compress_array(v[s:s + c.chunklen], c._typesize, c._cparams)
    m = interleaved([("peer", lambda: pq.read_table(path)), ("read", read), ("convert", convert),
                     ("compress", compress), ("mem", lambda: blzarr.ctable.fromparquet(path))],
                    repeats, time.process_time)
    m["wall"] = interleaved([("peer", lambda: pq.read_table(path))], repeats)["peer"]
    return m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="500,000 rows, 3 repeats")
    ap.add_argument("--compression", default="snappy")
    ap.add_argument("--tmpdir", default=None)
    ap.add_argument("--cpu", action="store_true",
                    help="time by the CPU time of the process (all threads) instead of the wall clock")
    ap.add_argument("--floor", action="store_true",
                    help="also the CPU time of fromparquet's stages, each alone, and the floor they set")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 500_000, 3
    clock = time.process_time if args.cpu else time.perf_counter
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("note: pyarrow is not installed: nothing to compare (pip install pyarrow)")
        return 0
    tmp = tempfile.mkdtemp(prefix="bench_arrow_", dir=args.tmpdir)
    try:
        t, cols = make_table(args.n, os.path.join(tmp, "t.blz"))
        at = pa.table(t)
        rg = 1 << 20
        ours, theirs = os.path.join(tmp, "ours.parquet"), os.path.join(tmp, "theirs.parquet")
        # checks first: the same rows both ways
        t.toparquet(ours, compression=args.compression, row_group_size=rg)
        pq.write_table(at, theirs, compression=args.compression, row_group_size=rg)
        assert pq.read_table(ours).equals(pq.read_table(theirs))
        with open(ours, "rb") as f1, open(theirs, "rb") as f2:
            same_bytes = f1.read() == f2.read()
        back = blzarr.ctable.fromparquet(theirs)
        for name, v in cols.items():
            np.testing.assert_array_equal(back[name][:], v)
        print(f"bench_arrow: {args.n:,} rows x {len(cols)} columns, {t.nbytes / 2**20:.0f} MB, "
              f"compression {args.compression}, row groups of {rg:,}, {args.repeats} repeats "
              f"(interleaved, medians, {'CPU time' if args.cpu else 'wall clock'}); toparquet's file "
              f"{'is' if same_bytes else 'is NOT'} pyarrow's byte for byte")
        print(f"{'operation':<34}{'blzarr':>10}{'peer':>10}{'peer/blzarr':>13}  peer")
        rows = []

        def row(label, ours_t, peer_t, peer):
            rows.append((label, ours_t, peer_t))
            print(f"{label:<34}{ours_t * 1e3:>8.0f}ms{peer_t * 1e3:>8.0f}ms{peer_t / ours_t:>13.2f}  {peer}",
                  flush=True)

        def unsynced():
            with blzarr.defaults_ctx(fsync=False):
                t.toparquet(ours, compression=args.compression, row_group_size=rg)

        m = interleaved([("ours", lambda: t.toparquet(ours, compression=args.compression, row_group_size=rg)),
                         ("nosync", unsynced),
                         ("pyarrow", lambda: pq.write_table(at, theirs, compression=args.compression,
                                                            row_group_size=rg))], args.repeats, clock)
        row("toparquet", m["ours"], m["pyarrow"], "pyarrow write_table (Arrow table in memory)")
        row("toparquet (fsync off)", m["nosync"], m["pyarrow"], "pyarrow write_table (which does not sync)")
        dest = os.path.join(tmp, "from.blz")
        m = interleaved([("mem", lambda: blzarr.ctable.fromparquet(theirs)),
                         ("disk", lambda: blzarr.ctable.fromparquet(theirs, rootdir=dest, mode="w")),
                         ("pyarrow", lambda: pq.read_table(theirs))], args.repeats, clock)
        row("fromparquet (in memory)", m["mem"], m["pyarrow"], "pyarrow read_table")
        row("fromparquet (BLZ directory)", m["disk"], m["pyarrow"], "pyarrow read_table")
        if args.floor:
            from blzarr.runtime.params import get_nthreads
            nth = get_nthreads()
            f = stage_floor(theirs, args.repeats, nth)
            print("fromparquet's stages alone, CPU time of the process (every thread), medians:")
            for label, key in (("pyarrow read_table (the peer)", "peer"),
                               ("pyarrow read of the row groups, coded", "read"),
                               ("conversion to NumPy (one thread)", "convert"),
                               ("Blosc compression (one thread)", "compress"),
                               ("fromparquet in memory, whole", "mem")):
                print(f"  {label:<40}{f[key] * 1e3:>8.0f}ms")
            least = (f["read"] + f["convert"] + f["compress"]) / nth
            print(f"  floor: (read + conversion + compression) / {nth} threads = {least * 1e3:.0f}ms of wall; "
                  f"the peer's read_table took {f['wall'] * 1e3:.0f}ms of wall: best ratio "
                  f"{f['wall'] / least:.2f}", flush=True)
        try:
            import polars as pl
            import pandas  # noqa: F401
        except ImportError:
            print("note: polars or pandas is not installed: the stream row is skipped")
        else:
            assert pl.DataFrame(t).equals(pl.from_pandas(t.todataframe()))
            m = interleaved([("stream", lambda: pl.DataFrame(t)),
                             ("pandas", lambda: pl.from_pandas(t.todataframe()))], args.repeats, clock)
            row("Arrow stream into Polars", m["stream"], m["pandas"], "polars.from_pandas(t.todataframe())")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
