"""Object storage only: the harness's S3 rows (blzarr vs zarr v3 on a local moto S3 server).

    python bench/bench_s3.py                      # 4M float64 (random walk), 2000 a[i], 300 slices
    python bench/bench_s3.py --n 1000000 --repeats 3 --json out.json

is ``python -m bench --ops s3_read_all s3_scalars s3_slices --peers zarr --datasets walk --no-memory
--n 4000000`` followed by the options given here (which win).  The rows, the request counts and the
server are the harness's: see blzarr/bench/s3.py and docs/benchmarks.rst.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from blzarr.bench import command  # noqa: E402
from blzarr.bench.s3 import S3_OPS  # noqa: E402

DEFAULTS = ["--ops", *S3_OPS, "--peers", "zarr", "--datasets", "walk", "--no-memory", "--n", "4000000"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    return command.main(DEFAULTS + argv, prog="python bench/bench_s3.py")


if __name__ == "__main__":
    sys.exit(main())
