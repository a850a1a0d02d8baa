"""One peak-RSS measurement of the harness, in a fresh interpreter, run by path:

    python .../blzarr/bench/rss_child.py LIB ROOT OP NTHREADS

It imports NumPy and LIB only (not blzarr when LIB is bcolz: the package's import would count in
bcolz's memory), opens the carray in ROOT with LIB, runs OP and prints a JSON line with the peaks.
"""

import sys

if __name__ == "__main__":
    del sys.path[0]    # run by path: blzarr/bench is no place to import other modules from

import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402,F401  (the baseline every library shares)


def peak_rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru if sys.platform == "darwin" else ru * 1024


def rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return peak_rss_bytes()


def measure(lib, root, op, nthreads):
    """Run `op` with `lib` over the carray in `root`; print a JSON line with the peaks."""
    mod = __import__(lib)
    mod.set_nthreads(int(nthreads))
    a = mod.open(os.path.join(root, "a"), mode="r")
    mask = mod.open(os.path.join(root, "mask"), mode="r") if op == "where" else None
    base = rss_bytes()
    base_peak = peak_rss_bytes()
    if op == "sum":
        res = float(a.sum())
    elif op == "where":
        res = 0
        for _ in a.where(mask):
            res += 1
    elif op == "iter":
        res = 0
        for _ in a.iter():
            res += 1
    elif op == "eval":
        out = mod.eval("a > 0", user_dict={"a": a})
        res = int(out.sum())
    else:
        raise ValueError(f"unknown memory op {op!r}")
    print(json.dumps({"lib": lib, "op": op, "peak_rss": peak_rss_bytes(), "rss_before": base,
                      "peak_before": base_peak, "result": res,
                      "blzarr_imported": "blzarr" in sys.modules}))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: python rss_child.py LIB ROOT OP NTHREADS")
    measure(*sys.argv[1:])
