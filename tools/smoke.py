"""Smoke test of an installed blzarr (a wheel): create, persist, reopen, query.

Run from outside the source tree, so that the installed package is the one imported.  Exits non-zero
with a message naming what differs from NumPy.
"""

import os
import shutil
import sys
import tempfile

import numpy as np

import blzarr


def main():
    here = os.path.dirname(os.path.abspath(blzarr.__file__))
    if os.path.exists(os.path.join(os.path.dirname(here), "setup.py")):
        sys.exit(f"smoke test: blzarr imported from the source tree {here}, not from an installation")
    tmp = tempfile.mkdtemp(prefix="blzarr-smoke-")
    try:
        x = np.arange(1_000_000, dtype=np.float64) * 0.5
        for fmt in ("blz", "bcolz"):
            path = os.path.join(tmp, f"a.{fmt}")
            blzarr.carray(x, rootdir=path, mode="w", format=fmt).flush()
            a = blzarr.open(path, mode="r")
            assert a.format == fmt, (fmt, a.format)
            assert np.array_equal(a[:], x), f"{fmt}: a[:] differs from NumPy"
            assert a[123_456] == x[123_456], f"{fmt}: a[i] differs"
            assert float(a.sum()) == float(x.sum()), f"{fmt}: sum differs"
            mask = blzarr.eval("a > 499_990.0", user_dict={"a": a})
            assert np.array_equal(np.fromiter(a.where(mask), dtype=np.float64), x[x > 499_990.0]), \
                f"{fmt}: where over an eval'd mask differs"
        path = os.path.join(tmp, "t.blz")
        ids = np.arange(100_000)
        t = blzarr.ctable(columns=[ids, ids * 0.25], names=["id", "v"], rootdir=path, mode="w")
        t.flush()
        t = blzarr.open(path, mode="r")
        rows = t.fetchwhere("(v > 100) & (id < 1000)")
        want = ids[(ids * 0.25 > 100) & (ids < 1000)]
        assert np.array_equal(rows["id"], want), "ctable fetchwhere differs from NumPy"
        assert [r.id for r in t.where("id < 3")] == [0, 1, 2], "ctable where differs"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"blzarr {blzarr.__version__} from {here}: smoke test passed "
          f"(create, persist, reopen, query; both layouts)")


if __name__ == "__main__":
    main()
