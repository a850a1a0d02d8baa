"""Instruction counts (valgrind callgrind) of opening an on-disk carray and reading from it, per
layout: `python bench/seams_callgrind.py make DIR` writes the fixtures; `... run DIR LAYOUT OP`
is the process callgrind measures (OP: none = import and nothing else, open, scalar = open + a[i]
for 200 spread i, slice = open + a[:]).  The cost of an operation is its count minus that of
`none`.  PYTHONHASHSEED=0 keeps the counts repeatable; SEAMS_NOGC=1 turns the cyclic garbage
collector off, whose runs fall wherever the heap's history puts them."""

import gc
import os
import sys

import numpy as np


def main():
    cmd, root = sys.argv[1], sys.argv[2]
    if os.environ.get("SEAMS_NOGC"):
        gc.disable()        # a collection falls where the heap's history puts it, not the operation
    import blzarr
    if cmd == "make":
        for fmt in ("bcolz", "blz"):
            blzarr.carray(np.arange(1_000_000, dtype="i8"), chunklen=16384,
                          rootdir=os.path.join(root, fmt), mode="w", format=fmt).flush()
        return
    layout, op = sys.argv[3], sys.argv[4]
    if op == "none":
        return
    a = blzarr.open(os.path.join(root, layout), mode="r")
    if op == "scalar":
        s = 0
        for i in range(0, 1_000_000, 5000):
            s += a[i]
        assert s == sum(range(0, 1_000_000, 5000))
    elif op == "slice":
        assert int(a[:][-1]) == 999_999


if __name__ == "__main__":
    main()
