"""The harness's command line: ``python -m bench`` in a checkout, ``blzarr bench`` once installed.

Times blzarr against bcolz, python-blosc2, zarr and NumPy (the same options either way).
"""

import argparse
import os
import subprocess
import sys

from blzarr.bench import harness, plot

EXTRA_SCRIPTS = ("bench_ctable.py", "bench_blz.py", "bench_queries.py", "bench_groupby.py", "bench_arrow.py")


def parse(argv, prog="python -m bench"):
    ap = argparse.ArgumentParser(
        prog=prog,
        description="Median times of blzarr and its peers (lz4, clevel 5, byte shuffle, 2 threads) on "
                    "a smooth series (arange*0.25) and a random walk; ratios are peer time / blzarr "
                    "time, so > 1 means blzarr is faster.")
    ap.add_argument("--n", type=int, default=None,
                    help="number of float64 elements (default 10,000,000; 1,000,000 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="smaller data and fewer repeats: about a minute on 2 cores")
    ap.add_argument("--repeats", type=int, default=None, help="runs per measurement (default 5, 3 quick)")
    ap.add_argument("--budget", type=float, default=None,
                    help="stop repeating one measurement after this many seconds (default 3, 0.5 quick)")
    ap.add_argument("--scalars", type=int, default=None,
                    help="random scalar reads per run (default 2000; 500 with --quick)")
    ap.add_argument("--slices", type=int, default=None,
                    help="random slices of 1000 per run (default 300; 100 with --quick)")
    ap.add_argument("--json", metavar="PATH", help="also write the full report as JSON to PATH")
    ap.add_argument("--plot", metavar="FILE",
                    help="also draw the run to FILE (.png or .svg): one bar per operation and peer, "
                         "the ratio on a log scale; needs matplotlib")
    ap.add_argument("--peers", nargs="+", metavar="NAME",
                    choices=("blzarr", "bcolz", "blosc2", "zarr", "numpy"),
                    help="only these peers (blzarr always runs): bcolz blosc2 zarr numpy")
    ap.add_argument("--ops", nargs="+", metavar="OP", choices=harness.ALL_OPS,
                    help="only these operations: " + " ".join(harness.ALL_OPS))
    ap.add_argument("--datasets", nargs="+", choices=("smooth", "walk"), default=("smooth", "walk"))
    ap.add_argument("--no-memory", dest="memory", action="store_false",
                    help="skip the peak-RSS measurements (subprocesses)")
    ap.add_argument("--big", action="store_true",
                    help="peak RSS over a 2 GiB on-disk carray (slow; off by default)")
    ap.add_argument("--mem-n", type=int, default=None,
                    help="elements of the on-disk carray for the peak-RSS runs without --big "
                         "(default: --n)")
    ap.add_argument("--memory-only", action="store_true",
                    help="run only the peak-RSS measurements (with --big: the 2 GiB case)")
    ap.add_argument("--memory-ops", nargs="+", choices=("sum", "where", "iter", "eval"))
    ap.add_argument("--extra", action="store_true",
                    help="also run bench/bench_ctable.py, bench_blz.py, bench_queries.py, "
                         "bench_groupby.py and bench_arrow.py when present")
    ap.add_argument("--tmpdir", default=None, help="where the on-disk arrays are written")
    args = ap.parse_args(argv)
    if args.n is None:
        args.n = 1_000_000 if args.quick else 10_000_000
    if args.n < 2 * harness.SLICE_LEN:
        ap.error(f"--n must be >= {2 * harness.SLICE_LEN} (the slices are {harness.SLICE_LEN} long)")
    if args.repeats is None:
        args.repeats = 3 if args.quick else 5
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if args.budget is None:
        args.budget = 0.5 if args.quick else 3.0
    if args.scalars is None:
        args.scalars = 500 if args.quick else harness.N_SCALARS
    if args.slices is None:
        args.slices = 100 if args.quick else harness.N_SLICES
    if args.scalars < 1 or args.slices < 1:
        ap.error("--scalars and --slices must be >= 1")
    if args.mem_n is None:
        args.mem_n = args.n
    if args.mem_n < 1:
        ap.error("--mem-n must be >= 1")
    if args.tmpdir is not None and not os.path.isdir(args.tmpdir):
        ap.error(f"--tmpdir {args.tmpdir!r} is not a directory")
    if args.plot is not None:    # checked now, not after a run of minutes
        try:
            plot.check_path(args.plot)
            plot.require_matplotlib()
        except plot.PlotError as exc:
            ap.error(str(exc))
    args.argv = list(argv)
    return args


def run_extra(args):
    # the extra scripts live in the repository's bench/ (next to blzarr/), not in the package
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "bench")
    for name in EXTRA_SCRIPTS:
        path = os.path.join(here, name)
        if not os.path.exists(path):
            print(f"note: bench/{name} not present, skipped")
            continue
        cmd = [sys.executable, path]
        if args.quick:  # each script has its own options: use its quick mode, else a small --n
            with open(path, encoding="utf-8") as f:
                src = f.read()
            if '"--quick"' in src:
                cmd.append("--quick")
            elif '"--n"' in src:
                cmd += ["--n", "200000"]
        print(f"\n$ {' '.join(cmd)}", flush=True)
        rc = subprocess.run(cmd, cwd=os.path.dirname(here)).returncode
        if rc:
            print(f"note: bench/{name} exited with status {rc}")


def main(argv=None, prog="python -m bench"):
    args = parse(sys.argv[1:] if argv is None else argv, prog=prog)
    if args.memory_only:
        args.ops, args.datasets, args.memory = ["create"], (), True
    report = harness.run(args, log=lambda s: print(s, flush=True))
    report["command"] = f"{prog} " + " ".join(args.argv)
    harness.print_report(report)
    if args.json:
        harness.write_json(report, args.json)
        print(f"JSON report: {args.json}")
    if args.plot:
        plot.draw(report, args.plot)
        print(f"plot: {args.plot}")
    if args.extra:
        run_extra(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
