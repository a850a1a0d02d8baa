"""Mutation fuzzing of one Blosc 1.x chunk through `blzarr._chunk` (no coverage guidance).

Seeds: valid chunks of every codec the build has, shuffle none/byte/bit, typesizes 1-16, blocks
split (python-blosc's C-Blosc splits by default) and whole (blzarr's), stored raw (clevel 0), sizes
of one item to several blocks with a short last block.  Each case mutates a seed (bit flips, header
fields set to edge values, block starts and stream sizes rewritten, truncation, extension) and
checks:

- `validate` and `explain` agree (both accept or both raise ChunkError);
- every reader on an unvalidated chunk (decompress_into/getitem_into/take_into with their checks)
  raises ChunkError/IndexError/ValueError or returns;
- a chunk `validate` accepts decodes, by every path (blzarr's LZ4 decoder, C-Blosc, getitem, take,
  block_at), to the same bytes as C-Blosc's whole decode, or raises ChunkError.

A crash kills the worker: the runner keeps the case it was on (written to a file before each run)
under --out.  Usage: python tools/fuzz/chunk_fuzz.py --seconds 600 --workers 2 --out /tmp/fzout
(PYTHONPATH at the tree).  Replay one case: python tools/fuzz/chunk_fuzz.py --replay FILE.
"""

import argparse
import os
import random
import signal
import struct
import subprocess
import sys
import time

import numpy as np


def seeds():
    import blosc
    from blzarr import _chunk
    rng = np.random.default_rng(1)
    out = []
    cnames = [c for c in _chunk.compressor_list() if c in _chunk.CNAMES]
    for ts in (1, 2, 3, 4, 7, 8, 12, 16):
        for n in (1, 5, 300, 5000, 20001):
            nbytes = n * ts
            pats = [np.zeros(nbytes, "u1"),
                    (np.arange(nbytes // ts + 1, dtype="<u8") % 7).astype("<u8").view("u1")[:nbytes],
                    rng.integers(0, 256, nbytes, dtype="u1"),
                    np.repeat(rng.integers(0, 256, nbytes // 37 + 1, dtype="u1"), 37)[:nbytes]]
            for pi, data in enumerate(pats):
                data = np.ascontiguousarray(data)
                for cname in cnames:
                    for shuffle in (0, 1, 2):
                        if (ts + n + pi + shuffle + len(cname)) % 3:   # a third of the grid
                            continue
                        for clevel in (0, 5, 9):
                            bs = int(rng.choice([0, 256, 4096, 16384]))
                            out.append(_chunk.compress(data, ts, clevel, shuffle, cname, bs))
                            # python-blosc's own C-Blosc: split blocks by default
                            blosc.set_blocksize(bs)
                            out.append(blosc.compress(data.tobytes(), typesize=ts, clevel=clevel,
                                                      shuffle=shuffle, cname=cname))
                        blosc.set_blocksize(0)
    return out


EDGE = [0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF,
        -1 & 0xFFFFFFFF, 0x80000000]


def mutate(buf, r):
    b = bytearray(buf)
    for _ in range(r.choice([1, 1, 1, 2, 3, 8])):
        op = r.randrange(9)
        if op == 0 and b:                               # bit flip
            i = r.randrange(len(b))
            b[i] ^= 1 << r.randrange(8)
        elif op == 1 and b:                             # random byte
            b[r.randrange(len(b))] = r.randrange(256)
        elif op == 2 and len(b) >= 16:                  # a header byte field
            i = r.choice([0, 1, 2, 3])
            b[i] = r.choice([0, 1, 2, 3, 4, 8, 16, 17, 0x10, 0x11, 0x12, 0x14, 0x20, 0x21, 0x24, 0x30,
                             0x31, 0x60, 0x80, 0x90, 0xA0, 0xE0, 255, r.randrange(256)])
        elif op == 3 and len(b) >= 16:                  # a header int32 field
            i = r.choice([4, 8, 12])
            v = r.choice(EDGE + [len(b), len(b) - 16, len(b) + 1, r.randrange(1 << 20)])
            b[i:i + 4] = struct.pack("<I", v & 0xFFFFFFFF)
        elif op == 4 and len(b) >= 20:                  # a block start or a stream size
            i = r.randrange(16, len(b) - 3)
            if r.random() < 0.6:
                i = 16 + 4 * r.randrange(max(1, min(64, (len(b) - 16) // 4)))
            v = r.choice(EDGE + [len(b), len(b) - 4, r.randrange(len(b) + 8)])
            b[i:i + 4] = struct.pack("<I", v & 0xFFFFFFFF)
        elif op == 5 and b:                             # truncate
            del b[r.randrange(len(b)):]
        elif op == 6:                                   # extend
            b += bytes(r.randrange(256) for _ in range(r.randrange(1, 64)))
        elif op == 7 and len(b) > 20:                   # copy a run of bytes elsewhere
            i, j = r.randrange(len(b)), r.randrange(len(b))
            k = r.randrange(1, 32)
            seg = b[i:i + k]
            b[j:j + len(seg)] = seg
        elif op == 8 and len(b) >= 16:                  # make ctbytes agree with the length again
            b[12:16] = struct.pack("<i", len(b))
    if r.random() < 0.7 and len(b) >= 16:
        b[12:16] = struct.pack("<i", len(b))            # most cases past the length check
    return bytes(b)


class _Ch:
    """What `_chunk.block_at` reads from a chunk object."""
    __slots__ = ("_data", "_where")

    def __init__(self, data):
        self._data = data
        self._where = "fuzz"


OK_ERR = (ValueError, IndexError)   # ChunkError is a ValueError; bad arguments are too


def check(buf, r):
    from blzarr import _chunk
    from blzarr.errors import ChunkError
    valid = True
    try:
        n = _chunk.validate(buf, -1, "fuzz")
    except ChunkError:
        valid = False
    try:
        _chunk.explain(buf, -1, "fuzz")
        explained_ok = True
    except ChunkError:
        explained_ok = False
    assert valid == explained_ok, "validate and explain disagree"
    try:
        h = _chunk.header(buf, "fuzz")
    except ChunkError:
        assert not valid
        return "header"
    nbytes = h["nbytes"]
    if nbytes > 1 << 24:
        return "big"
    if not valid:
        # the checked readers on an unvalidated chunk: an error or some bytes, never a crash
        out = np.empty(nbytes, "u1")
        for fn in (lambda: _chunk.decompress_into(buf, out, 1, True, "fuzz"),
                   lambda: _chunk.getitem_into(buf, 0, nbytes - nbytes % h["typesize"], out, 0, True, "fuzz")):
            try:
                fn()
            except OK_ERR:
                pass
        return "invalid"
    ref = np.zeros(nbytes, "u1")
    rc = _chunk.decompress_blosc(buf, ref)
    got = np.zeros(nbytes, "u1")
    try:
        _chunk.decompress_into(buf, got, 1, False, "fuzz")
        ours = True
    except ChunkError:
        ours = False
    if rc == nbytes and ours:
        assert np.array_equal(ref, got), "decompress_into differs from C-Blosc"
    elif ours and nbytes and rc != nbytes:
        # blzarr decoded what C-Blosc refuses: note it (a different answer, not a crash)
        pass
    if rc != nbytes:
        ref = None
    ts = h["typesize"]
    # getitem of random aligned ranges
    for _ in range(3):
        if nbytes < ts:
            break
        a = r.randrange(0, nbytes // ts) * ts
        k = r.randrange(0, (nbytes - a) // ts + 1) * ts
        o = np.zeros(max(k, 1), "u1")
        try:
            _chunk.getitem_into(buf, a, k, o, 0, False, "fuzz")
            if ref is not None and k:
                assert np.array_equal(o[:k], ref[a:a + k]), "getitem_into differs"
        except ChunkError:
            pass
    # take: items of an itemsize that the typesize divides
    isz = ts * r.choice([1, 1, 2])
    if nbytes >= isz and h["blocksize"] % ts == 0 and nbytes % ts == 0:
        nit = nbytes // isz
        loc = np.unique(np.array([r.randrange(nit) for _ in range(r.randrange(1, 20))], dtype=np.intp))
        o = np.zeros(len(loc) * isz, "u1")
        try:
            _chunk.take_into(buf, loc, isz, o, None, 0, False, "fuzz")
            if ref is not None:
                want = np.concatenate([ref[p * isz:(p + 1) * isz] for p in loc])
                assert np.array_equal(o, want), "take_into differs"
        except ChunkError:
            pass
    # block_at, by an atom of `isz` bytes
    if nbytes >= isz:
        nit = nbytes // isz
        atom = np.dtype(f"V{isz}")
        local = r.randrange(nit)
        try:
            res = _chunk.block_at([_Ch(buf)], 0, local, nit, atom)
            if res is not None and ref is not None:
                lo, blk = res
                assert np.array_equal(blk.view("u1"), ref[lo * isz:lo * isz + blk.nbytes]), "block_at differs"
        except (ChunkError, IndexError):
            pass
    return "valid"


def worker(seed, seconds, casefile):
    r = random.Random(seed)
    t_end = time.time() + seconds       # the seeds' build inside the round: the runner times it all
    pool = seeds()
    stats = {}
    n = 0
    fd = os.open(casefile, os.O_RDWR | os.O_CREAT, 0o644)
    while time.time() < t_end:
        buf = mutate(r.choice(pool), r)
        cseed = r.randrange(1 << 30)
        rec = struct.pack("<q", cseed) + buf
        os.ftruncate(fd, 0)
        os.pwrite(fd, rec, 0)
        try:
            k = check(buf, random.Random(cseed))
        except AssertionError as e:
            with open(casefile + f".wrong{n}", "wb") as f:
                f.write(rec)
            print(f"WRONG: {e} (kept {casefile}.wrong{n})", flush=True)
            k = "wrong"
        stats[k] = stats.get(k, 0) + 1
        n += 1
    print(f"seed {seed}: {n} cases {stats}", flush=True)


def replay(path):
    with open(path, "rb") as f:
        rec = f.read()
    cseed = struct.unpack("<q", rec[:8])[0]
    print(check(rec[8:], random.Random(cseed)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--round", type=float, default=120, help="seconds per worker process")
    ap.add_argument("--out", default="/tmp/fzout")
    ap.add_argument("--worker", type=int)
    ap.add_argument("--case")
    ap.add_argument("--replay")
    a = ap.parse_args()
    if a.replay:
        return replay(a.replay)
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
            if rc is None and time.time() - t0 > a.round + 120:    # a hang: kill and keep its case
                p.send_signal(signal.SIGABRT)
                p.wait()
                rc = "hang"
            if rc is None:
                continue
            del running[p]
            if rc != 0:
                os.rename(case, case + f".crash{rc}")
                print(f"CRASH seed {s} rc {rc}: {case}.crash{rc}", flush=True)
            elif os.path.exists(case):
                os.remove(case)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
