"""Time ctable queries and conversions against bcolz, pandas and NumPy on the same table.

    python bench/bench_ctable.py [--n 2000000] [--repeats 5] [--vm numexpr|python] [--disk]

Operations (each the median of `--repeats` runs; ratios are peer time / blzarr time, so > 1 means
blzarr is faster):

    where        iterate over the matching rows as namedtuples (pandas: itertuples of the query result,
                 NumPy: iterate the boolean-indexed structured array)
    fetchwhere   the matching rows as a NumPy structured array (pandas: DataFrame.query,
                 NumPy: boolean indexing, mask computed inside the timing)
    todataframe  the whole table as a pandas DataFrame (NumPy: pandas.DataFrame(structured array))

A peer that is not installed is skipped with a note.  Results are checked against NumPy before timing.
"""

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import blzarr  # noqa: E402
from bench.timing import timeit  # noqa: E402

EXPR = "(b > lim) & (c < 50)"


def make_data(n, seed=1):
    rng = np.random.default_rng(seed)
    ra = np.empty(n, dtype=[("a", "i8"), ("b", "f8"), ("c", "i4"), ("s", "S8")])
    ra["a"] = np.arange(n)
    ra["b"] = np.cumsum(rng.normal(size=n))
    ra["c"] = rng.integers(0, 100, n)
    ra["s"] = np.char.add(b"k", (ra["c"] % 20).astype("S2"))
    lim = float(np.quantile(ra["b"], 0.98))  # about 1% of the rows match (2% of b, half of c)
    return ra, lim


def consume(it):
    n = 0
    for _ in it:
        n += 1
    return n


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2_000_000, help="rows (default 2,000,000)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--vm", default=None, help="blzarr/bcolz vm (default: numexpr when installed)")
    p.add_argument("--disk", action="store_true", help="store the blzarr and bcolz tables on disk")
    args = p.parse_args(argv)

    ra, lim = make_data(args.n)
    want = ra[(ra["b"] > lim) & (ra["c"] < 50)]
    tmp = tempfile.mkdtemp(prefix="bench_ctable-") if args.disk else None
    notes = []
    peers = {}

    try:
        kw = {"rootdir": os.path.join(tmp, "blzarr")} if tmp else {}
        ct = blzarr.ctable(ra, **kw)
        vm = args.vm or blzarr.defaults.vm
        peers["blzarr"] = {
            "where": lambda: consume(ct.where(EXPR, user_dict={"lim": lim}, vm=vm)),
            "fetchwhere": lambda: ct.fetchwhere(EXPR, user_dict={"lim": lim}, vm=vm, out_flavor="numpy"),
            "todataframe": (lambda: ct.todataframe()) if blzarr.pandas_here else None,
        }
        got = peers["blzarr"]["fetchwhere"]()
        assert np.array_equal(got, want), "blzarr fetchwhere differs from NumPy"
        assert peers["blzarr"]["where"]() == len(want), "blzarr where count differs from NumPy"

        try:
            import bcolz
            bkw = {"rootdir": os.path.join(tmp, "bcolz"), "mode": "w"} if tmp else {}
            bt = bcolz.ctable(ra, **bkw)
            bvm = vm if vm in ("numexpr", "python") else "python"
            peers["bcolz"] = {
                "where": lambda: consume(bt.where(EXPR, user_dict={"lim": lim}, vm=bvm)),
                "fetchwhere": lambda: bt.fetchwhere(EXPR, user_dict={"lim": lim}, vm=bvm, out_flavor="numpy"),
                "todataframe": (lambda: bt.todataframe()) if blzarr.pandas_here else None,
            }
            assert np.array_equal(peers["bcolz"]["fetchwhere"](), want), "bcolz fetchwhere differs"
        except ImportError:
            notes.append("bcolz is not installed: skipped")

        if blzarr.pandas_here:
            import pandas as pd
            df = pd.DataFrame({n: ra[n] for n in ra.dtype.names})
            q = "(b > @lim) & (c < 50)"
            peers["pandas"] = {
                "where": lambda: consume(df.query(q, local_dict={"lim": lim}).itertuples(index=False)),
                "fetchwhere": lambda: df.query(q, local_dict={"lim": lim}),
                "todataframe": None,
            }
            assert np.array_equal(df.query(q, local_dict={"lim": lim})["a"].to_numpy(), want["a"]), "pandas query differs"
        else:
            notes.append("pandas is not installed: pandas peer and todataframe skipped")

        def np_fetch():
            return ra[(ra["b"] > lim) & (ra["c"] < 50)]

        peers["numpy"] = {
            "where": lambda: consume(np_fetch()),
            "fetchwhere": np_fetch,
            "todataframe": (lambda: __import__("pandas").DataFrame(ra)) if blzarr.pandas_here else None,
        }

        ops = ("where", "fetchwhere", "todataframe")
        results = {}
        for name, fns in peers.items():
            for op in ops:
                fn = fns.get(op)
                if fn is not None:
                    results[(name, op)] = timeit(fn, args.repeats)

        names = list(peers)
        print(f"ctable benchmark: {args.n:,} rows, {len(want):,} matching, dtype {ra.dtype}, "
              f"{'disk' if tmp else 'memory'}, vm={vm}, median of {args.repeats}")
        print(f"blzarr {blzarr.__version__}, NumPy {np.__version__}, cbytes {ct.cbytes / 2**20:.1f} MB "
              f"(nbytes {ct.nbytes / 2**20:.1f} MB)")
        header = f"{'operation':<14}" + "".join(f"{n:>22}" for n in names)
        print(header)
        print("-" * len(header))
        for op in ops:
            base = results.get(("blzarr", op))
            cells = []
            for n in names:
                t = results.get((n, op))
                if t is None:
                    cells.append(f"{'-':>22}")
                elif n == "blzarr" or base is None:
                    cells.append(f"{t * 1e3:>14.1f} ms      ")
                else:
                    cells.append(f"{t * 1e3:>11.1f} ms ({t / base:5.2f}x)")
            print(f"{op:<14}" + "".join(cells))
        print("ratios: peer time / blzarr time (> 1: blzarr is faster)")
        for note in notes:
            print("note:", note)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
