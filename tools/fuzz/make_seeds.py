"""Write valid Blosc 1.x chunks, one per file, as seeds for lz4dec_fuzz.c: LZ4 (the chunks blzarr's own
decoder takes: whole blocks, byte shuffle of typesize 4 or 8 or none, stored raw) and a few of
every other kind (which the decoder must leave to C-Blosc).  Usage: make_seeds.py OUTDIR"""

import os
import sys

import numpy as np

from blzarr import _chunk


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2)
    k = 0
    for ts in (1, 2, 4, 8, 16):
        for n in (1, 3, 64, 1000, 5000, 40000):
            nbytes = n * ts
            for pi, data in enumerate([
                    (np.arange(n, dtype="<i8") % 5).astype(f"<u{min(ts, 8)}").view("u1")[:nbytes] if ts <= 8
                    else np.zeros(nbytes, "u1"),
                    rng.integers(0, 256, nbytes, dtype="u1"),
                    np.repeat(rng.integers(0, 256, nbytes // 17 + 1, dtype="u1"), 17)[:nbytes],
                    (np.arange(nbytes) // 23 % 251).astype("u1")]):
                data = np.ascontiguousarray(data)
                if data.nbytes != nbytes:
                    data = np.resize(data, nbytes)
                for shuffle in (0, 1, 2):
                    for clevel in (0, 1, 5, 9):
                        for cname in ("lz4", "lz4hc") + (("blosclz", "zstd") if clevel == 5 else ()):
                            bs = int(rng.choice([0, 64, 256, 4096, 16384, 65536]))
                            c = _chunk.compress(data, ts, clevel, shuffle, cname, bs)
                            with open(os.path.join(out, f"s{k:05d}"), "wb") as f:
                                f.write(c)
                            k += 1
    print(k, "seeds")


if __name__ == "__main__":
    main(sys.argv[1])
