"""``python -m bench``: time blzarr against bcolz, python-blosc2, zarr and NumPy (run from the repo root).

The same command line as ``blzarr bench``; the code is blzarr.bench.command (its names stay
importable from here: ``from bench.__main__ import parse``).
"""

import sys

from bench.command import EXTRA_SCRIPTS, harness, main, parse, run_extra  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
