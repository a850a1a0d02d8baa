"""Peak resident memory of `sum`, `where`, `iter` and `eval` over an on-disk carray.

Each measurement runs in its own fresh interpreter (``python .../blzarr/bench/rss_child.py LIB ROOT OP``,
by path, so that measuring bcolz does not import blzarr), so the peak (VmHWM from /proc/self/status,
or ru_maxrss where /proc is missing) belongs to that library and operation alone.  The array is written once, chunk by chunk (never whole in memory), in the bcolz 1.x layout
that both blzarr and bcolz read, so both are measured over the very same directory.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import blzarr
from blzarr.bench import CLEVEL, CNAME, NTHREADS, rss_child
from blzarr.bench.rss_child import peak_rss_bytes, rss_bytes  # noqa: F401  (their home before)

BIG_BYTES = 2 * 1024 ** 3
OPS = ("sum", "where", "iter", "eval")
WRITE_BLOCK = 1 << 20


def create(root, n, seed=7):
    """Write a float64 random walk of `n` values and its `> 0` mask, block by block, with blzarr, in the
    bcolz layout so that bcolz reads the very same directory."""
    blzarr.set_nthreads(NTHREADS)
    cp = blzarr.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME)
    a = blzarr.carray(np.empty(0), cparams=cp, rootdir=os.path.join(root, "a"), mode="w",
                      expectedlen=n, format="bcolz")       # the layout both libraries read
    m = blzarr.carray(np.empty(0, dtype=bool), cparams=cp, rootdir=os.path.join(root, "mask"),
                      mode="w", expectedlen=n, format="bcolz")
    rng = np.random.default_rng(seed)
    last = 0.0
    for s in range(0, n, WRITE_BLOCK):
        block = np.cumsum(rng.standard_normal(min(WRITE_BLOCK, n - s))) + last
        last = float(block[-1]) if len(block) else last
        a.append(block)
        m.append(block > 0)
    a.flush()
    m.flush()


def run(args, log=print):
    """Measure every (lib, op) in a fresh subprocess; return a list of result dicts."""
    n = BIG_BYTES // 8 if args.big else args.mem_n
    root = tempfile.mkdtemp(prefix="blzarr-mem-", dir=args.tmpdir)
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds blzarr/
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    out = []
    try:
        log(f"[memory] writing a {n * 8 / 2**20:.0f} MiB float64 carray to {root}")
        subprocess.run([sys.executable, "-m", "blzarr.bench.memory", "create", root, str(n)], check=True,
                       env=env)
        for lib in ("blzarr", "bcolz"):
            if lib != "blzarr" and getattr(args, "peers", None) and lib not in args.peers:
                continue
            for op in OPS:
                if args.memory_ops and op not in args.memory_ops:
                    continue
                proc = subprocess.run([sys.executable, rss_child.__file__, lib, root, op, str(NTHREADS)],
                                      capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    err = (proc.stderr.strip().splitlines() or ["?"])[-1]
                    out.append({"lib": lib, "op": op, "n": n, "error": err})
                    log(f"  memory {lib} {op}: failed, {err}")
                    continue
                rec = json.loads(proc.stdout.strip().splitlines()[-1])
                rec["n"] = n
                rec["data_bytes"] = n * 8
                out.append(rec)
                log(f"  memory {lib:6s} {op:5s}: peak RSS {rec['peak_rss'] / 2**20:.0f} MiB "
                    f"(after open {rec['rss_before'] / 2**20:.0f} MiB)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def format_table(records):
    rule = "======  =====  ============  ===================  ==============="
    lines = [rule, "lib     op     data MiB      peak RSS MiB         after open MiB", rule]
    for r in records:
        if "error" in r:
            lines.append(f"{r['lib']:6s}  {r['op']:5s}  {r['n'] * 8 / 2**20:<12.0f}  failed: {r['error']}")
            continue
        lines.append(f"{r['lib']:6s}  {r['op']:5s}  {r['data_bytes'] / 2**20:<12.0f}  "
                     f"{r['peak_rss'] / 2**20:<19.0f}  {r['rss_before'] / 2**20:.0f}")
    lines.append(rule)
    return "\n".join(lines)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "create" and len(sys.argv) == 4:
        create(sys.argv[2], int(sys.argv[3]))
    elif cmd == "measure" and len(sys.argv) == 5:
        rss_child.measure(sys.argv[2], sys.argv[3], sys.argv[4], NTHREADS)
    else:
        sys.exit("usage: python -m blzarr.bench.memory create ROOT N | measure LIB ROOT OP")
