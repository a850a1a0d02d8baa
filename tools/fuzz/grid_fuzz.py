"""Exhaustive damage of the small directories of disk_fuzz.py (both layouts), case by case:

  json:  every field of every JSON meta file (meta/storage, meta/sizes, __rootdirs__, __attrs__...)
         set to each of ~27 values of other types and edge sizes, or deleted;
  bytes: every STEP-th byte of the BLZ superchunk files (header, metadata, offsets, chunks and
         checksums) set to 4 values.

Each damaged copy is opened and read as disk_fuzz.ops does; printed: UNCLEAR (an exception that is
not blzarr's or OSError), UNNAMED (blzarr's error naming no file), WRONG (bytes mode: values that
differ from the undamaged ones although the superchunk has checksums), DIFF (json mode: values
that differ; meta files carry no checksum, so this is for reading).
Usage: python tools/fuzz/grid_fuzz.py json|bytes [STEP]
"""

import json
import os
import random
import shutil
import signal
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import disk_fuzz as D  # noqa: E402

import blzarr  # noqa: E402

VALS = [0, -1, 1, 3, 999, 1001, 4999, 5001, 10**12, 2**31, 1.5, None, "x", "", [], {}, True, [5000, 1],
        [-1], "int32", "S1000000", "|O", "<U3", "zstd", "bcolz", "blz", "nope"]


def _paths(o, pre=()):
    if isinstance(o, dict):
        for k, v in o.items():
            yield pre + (k,)
            yield from _paths(v, pre + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield pre + (i,)
            yield from _paths(v, pre + (i,))


def _try(base, work, name, rel, content, ref, label, stats, checksummed):
    dst = os.path.join(work, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(base, name), dst)
    with open(os.path.join(dst, rel), "wb") as f:
        f.write(content)
    signal.alarm(60)
    try:
        got = D.ops(dst, random.Random(0))
        bad = [k for k in ref if not D._eq(got.get(k), ref[k])]
        k = "differs" if bad else "same"
        if bad:
            print("WRONG" if checksummed else "DIFF", name, rel, label, bad, flush=True)
    except (blzarr.BlzarrError, OSError) as e:
        k = "error"
        if work not in str(e) and name not in str(e):
            print("UNNAMED", name, rel, label, type(e).__name__, str(e)[:200], flush=True)
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        k = "unclear"
        print("UNCLEAR", name, rel, label, type(e).__name__, str(e)[:200], os.path.basename(tb.filename),
              tb.lineno, flush=True)
    finally:
        signal.alarm(0)
    stats[k] = stats.get(k, 0) + 1


def main(mode, step=1, top="/tmp/fzgrid"):
    base, work = os.path.join(top, "base"), os.path.join(top, "work")
    shutil.rmtree(base, ignore_errors=True)
    D.build(base)
    refs = {n: D.ops(os.path.join(base, n), random.Random(0)) for n in os.listdir(base)}
    signal.signal(signal.SIGALRM, D._alarm)
    stats = {}
    for name in sorted(refs):
        for d, _, fs in os.walk(os.path.join(base, name)):
            for fn in sorted(fs):
                p = os.path.join(d, fn)
                rel = os.path.relpath(p, os.path.join(base, name))
                with open(p, "rb") as f:
                    src = f.read()
                if mode == "bytes":
                    if not (name.endswith("blz") and fn.endswith(".bin")):
                        continue
                    for i in range(0, len(src), step):
                        for v in {src[i] ^ 1, src[i] ^ 0x80, 0, 0xFF} - {src[i]}:
                            b = bytearray(src)
                            b[i] = v
                            _try(base, work, name, rel, bytes(b), refs[name], f"byte {i}={v}", stats, True)
                    continue
                try:
                    obj = json.loads(src)
                except ValueError:
                    continue
                for kp in list(_paths(obj)):
                    for val in VALS + ["<DEL>"]:
                        o2 = json.loads(json.dumps(obj))
                        t = o2
                        for k in kp[:-1]:
                            t = t[k]
                        if val == "<DEL>":
                            if not isinstance(t, dict):
                                continue
                            del t[kp[-1]]
                        else:
                            t[kp[-1]] = val
                        _try(base, work, name, rel, json.dumps(o2).encode(), refs[name], f"{kp}={val!r}",
                             stats, False)
        print(name, stats, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
