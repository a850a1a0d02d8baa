"""``python -m blzarr``: the blzarr command line (see `blzarr.cli`)."""

import sys

from blzarr.cli import main

if __name__ == "__main__":
    sys.exit(main())
