"""Mutation fuzzing of on-disk carrays and ctables, both layouts (BLZ, bcolz's root/data/meta).

A worker builds one small ctable and one carray per layout, then for each case copies one of them,
damages one of its files (bytes flipped or set, int fields set to edge values, JSON numbers and
keys changed, truncation, extension, deletion) and opens + reads it: ``[:]``, scalars, a slice,
`where`, `groupby` (ctable), `sum`.  Each error is classified: a BlzarrError or OSError naming a
path under the directory is fine; any other exception type, or a message naming no file, is
printed as UNCLEAR; a BLZ read of a damaged checksummed file (a superchunk or meta/stats) that
returns values differing from the original is printed as WRONG.  Crashes and hangs kill the
worker: the runner keeps its case seed (replay: --replay SEEDFILE).

Usage: python tools/fuzz/disk_fuzz.py --seconds 600 --workers 2 --out /tmp/fzdisk
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import traceback

import numpy as np

N, CL = 5000, 1000


def build(base):
    import blzarr
    cols = [np.arange(N) % 7, np.arange(N) * 0.5, np.array([b"x%d" % (i % 5) for i in range(N)])]
    for fmt in ("blz", "bcolz"):
        blzarr.ctable(cols, names=["a", "f", "s"], rootdir=f"{base}/t_{fmt}", mode="w", chunklen=CL,
                      format=fmt).flush()
        blzarr.carray(np.arange(N, dtype="f8") * 1.5, rootdir=f"{base}/c_{fmt}", mode="w", chunklen=CL,
                      format=fmt).flush()


def ops(path, r):
    """The reads of a case: {name: value} (value compared to the undamaged result)."""
    import blzarr
    out = {}
    obj = blzarr.open(path, mode="r")
    out["len"] = len(obj)
    if isinstance(obj, blzarr.ctable):
        out["all"] = obj[:]
        out["row"] = obj[2345] if len(obj) > 2345 else None
        out["cola"] = obj.cols["a"][:]
        out["where"] = [tuple(x) for x in obj.where("a > 3", outcols=["a", "f"])]
        out["groupby"] = obj.groupby(["a"], ["f"])
        out["sum"] = obj.cols["f"].sum()
    else:
        out["all"] = obj[:]
        out["item"] = obj[2345] if len(obj) > 2345 else None
        out["slice"] = obj[1234:3456]
        out["where"] = list(obj.where(obj > 3000.0))
        out["sum"] = obj.sum()
    return out


def _eq(a, b):
    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            a, b = np.asarray(a), np.asarray(b)
            return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
        return a == b or repr(a) == repr(b)
    except Exception:
        return repr(a) == repr(b)


EDGE = [0, 1, 2, 3, 7, 8, 15, 16, 17, 255, 256, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000]


def damage(path, r):
    """Damage one file under `path`; returns (relative file, description)."""
    files = sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)
    rel = r.choice(files)
    p = os.path.join(path, rel)
    with open(p, "rb") as f:
        b = bytearray(f.read())
    what = []
    if r.random() < 0.05:
        os.remove(p)
        return rel, "removed"
    text = b.lstrip()[:1] in (b"{", b"[")
    for _ in range(r.choice([1, 1, 2, 3])):
        op = r.randrange(7 if not text else 9)
        if op == 0 and b:
            i = r.randrange(len(b)); b[i] ^= 1 << r.randrange(8); what.append(f"flip@{i}")
        elif op == 1 and b:
            i = r.randrange(len(b)); b[i] = r.randrange(256); what.append(f"set@{i}")
        elif op == 2 and len(b) >= 4:
            i = r.randrange(len(b) - 3)
            if r.random() < 0.5:
                i = i // 4 * 4
            b[i:i + 4] = struct.pack("<I", r.choice(EDGE + [len(b), r.randrange(1 << 16)]))
            what.append(f"i32@{i}")
        elif op == 3 and len(b) >= 8:
            i = r.randrange(len(b) - 7) // 8 * 8
            b[i:i + 8] = struct.pack("<q", r.choice([0, 1, -1, 32, len(b), len(b) - 8, 1 << 40, -(1 << 62)]))
            what.append(f"i64@{i}")
        elif op == 4 and b:
            k = r.randrange(len(b)); del b[k:]; what.append(f"trunc{k}")
        elif op == 5:
            b += bytes(r.randrange(256) for _ in range(r.randrange(1, 40))); what.append("extend")
        elif op == 6 and len(b) > 8:
            i, j, k = r.randrange(len(b)), r.randrange(len(b)), r.randrange(1, 16)
            seg = b[i:i + k]; b[j:j + len(seg)] = seg; what.append(f"copy{i}->{j}")
        elif op == 7:                                     # a JSON number changed
            nums = list(re.finditer(rb"-?\d+(\.\d+)?", bytes(b)))
            if nums:
                m = r.choice(nums)
                v = r.choice([b"0", b"-1", b"1", b"3", b"999", b"1000", b"1001", b"4999", b"5001",
                              b"2147483648", b"1e308", b"-5000", b"1.5", b"null", b'"x"', b"[]"])
                b[m.start():m.end()] = v; what.append(f"num {m.group().decode()}->{v.decode()}")
        elif op == 8:                                     # a JSON key or string changed
            strs = list(re.finditer(rb'"[^"]*"', bytes(b)))
            if strs:
                m = r.choice(strs)
                v = r.choice([b'"x"', b'""', b"1", b"null", b'"int64"', b'"f8"', b'"S1000000"', b'"blz"',
                              b'"bcolz"', b'"zstd"', b'"nope"', b"{}", b'"|O"', b'"<U3"'])
                b[m.start():m.end()] = v; what.append(f"str {m.group()[:20]!r}->{v.decode()}")
    with open(p, "wb") as f:
        f.write(b)
    return rel, " ".join(what)


def run_case(base, work, cseed, refs, quiet=False):
    import blzarr
    r = random.Random(cseed)
    name = r.choice(sorted(refs))
    path = os.path.join(work, name)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(os.path.join(base, name), path)
    rel, what = damage(path, r)
    checksummed = name.endswith("blz") and (rel.endswith(".bin") or rel.endswith("meta/stats"))
    signal.alarm(60)
    try:
        got = ops(path, random.Random(cseed))
        bad = [k for k in refs[name] if k in got and not _eq(got[k], refs[name][k])]
        if bad and checksummed:
            print(f"WRONG {cseed} {name}/{rel} [{what}]: {bad}", flush=True)
            return "wrong"
        return "same" if not bad else "differs"
    except (blzarr.BlzarrError, OSError) as e:
        if work not in str(e) and name not in str(e):
            print(f"UNNAMED {cseed} {name}/{rel} [{what}]: {type(e).__name__}: {str(e)[:200]}", flush=True)
            return "unnamed"
        return "error"
    except TimeoutError:
        raise
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print(f"UNCLEAR {cseed} {name}/{rel} [{what}]: {type(e).__name__}: {str(e)[:200]} "
              f"at {os.path.basename(tb.filename)}:{tb.lineno}", flush=True)
        return "unclear"
    finally:
        signal.alarm(0)


def _alarm(*_):
    raise TimeoutError("case took over 60 s")


def worker(seed, seconds, casefile, replay=None):
    signal.signal(signal.SIGALRM, _alarm)
    base = casefile + ".base"
    work = casefile + ".work"
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(work, exist_ok=True)
    build(base)
    refs = {n: ops(os.path.join(base, n), random.Random(0)) for n in os.listdir(base)}
    stats = {}
    r = random.Random(seed)
    t_end = time.time() + seconds
    n = 0
    try:
        while time.time() < t_end:
            cseed = replay if replay is not None else r.randrange(1 << 40)
            with open(casefile, "w") as f:
                f.write(str(cseed))
            k = run_case(base, work, cseed, refs)
            stats[k] = stats.get(k, 0) + 1
            n += 1
            if replay is not None:
                print(k)
                break
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    print(f"seed {seed}: {n} cases {stats}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--round", type=float, default=120)
    ap.add_argument("--out", default="/tmp/fzdisk")
    ap.add_argument("--worker", type=int)
    ap.add_argument("--case")
    ap.add_argument("--replay", type=int)
    a = ap.parse_args()
    if a.replay is not None:
        os.makedirs(a.out, exist_ok=True)
        return worker(0, 1, os.path.join(a.out, "replay"), a.replay)
    if a.worker is not None:
        return worker(a.worker, a.round, a.case)
    os.makedirs(a.out, exist_ok=True)
    t_end = time.time() + a.seconds
    seed = int(time.time())
    running = {}
    while time.time() < t_end or running:
        while len(running) < a.workers and time.time() < t_end:
            seed += 1
            case = os.path.join(a.out, f"case{seed}")
            p = subprocess.Popen([sys.executable, __file__, "--worker", str(seed), "--round",
                                  str(min(a.round, max(5, t_end - time.time()))), "--case", case])
            running[p] = (seed, case, time.time())
        for p, (s, case, t0) in list(running.items()):
            rc = p.poll()
            if rc is None and time.time() - t0 > a.round + 180:
                p.send_signal(signal.SIGABRT)
                p.wait()
                rc = "hang"
            if rc is None:
                continue
            del running[p]
            if rc != 0:
                os.rename(case, case + f".crash{rc}")
                print(f"CRASH seed {s} rc {rc}: {case}.crash{rc} (case seed inside)", flush=True)
            elif os.path.exists(case):
                os.remove(case)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
