"""Instruction counts of opening a small table (small_open.py's cases), one operation per `operator.call`:

    PYTHONPATH=/path/to/checkout OPENBLAS_NUM_THREADS=1 PYTHONHASHSEED=0 valgrind --tool=callgrind \\
        --collect-atstart=no --toggle-collect=_operator_call --callgrind-out-file=OUT.%p \\
        python bench/small_open_callgrind.py DIR R LIB CASE [CASE ...]

LIB: blz, bcolzfmt (blzarr in either layout) or bcolz (the real one).  The fixture (small_open.build)
is written into DIR if it is not there.  Each case runs once untimed, then R times through
`operator.call`, which nothing else calls: the profile's total / (R * cases) is one operation when
one case is given.  Garbage collector off.
"""
import gc
import operator
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import small_open  # noqa: E402


def main():
    d, r, lib, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    if not os.path.exists(os.path.join(d, "t_real")):
        os.makedirs(d, exist_ok=True)
        small_open.build_into(d)
    paths = {"blz": os.path.join(d, "t_blz"), "bcolzfmt": os.path.join(d, "t_bcolz"),
             "bcolz": os.path.join(d, "t_real")}
    ops = small_open.ops(lib, paths[lib])
    gc.collect()
    gc.disable()
    for c in cases:
        ops[c]()
        for _ in range(r):
            operator.call(ops[c])


if __name__ == "__main__":
    main()
