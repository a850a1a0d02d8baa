"""``python -m blzarr.bench``: the benchmark harness, as ``python -m bench`` in a checkout."""

import sys

from blzarr.bench import command

if __name__ == "__main__":
    sys.exit(command.main(prog="python -m blzarr.bench"))
