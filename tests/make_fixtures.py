"""Regenerate the on-disk fixtures under tests/fixtures/bcolz/ with the real bcolz.

    python tests/make_fixtures.py            # rewrite tests/fixtures/bcolz/
    python tests/make_fixtures.py OUTDIR     # write them somewhere else

Needs bcolz (``pip install bcolz-zipline==1.13.0``, importable as ``bcolz``). Every fixture is a
small carray directory in the bcolz 1.x layout, written by bcolz itself, so blzarr's tests can check
that it opens what bcolz really writes without needing bcolz installed. bcolz's output is
deterministic: running this again yields the same bytes (tests/test_fixtures.py checks that too).

The values are rebuilt independently in tests/test_fixtures.py (EXPECTED there): change both together.
"""

import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES_DIR = os.path.join(HERE, "fixtures", "bcolz")


def _objects():
    objs = [1, "two", None, [3, {"four": 4.0}], (5, b"six"), 7.25]
    arr = np.empty(len(objs), dtype=object)
    arr[:] = objs
    return arr


# name -> (array builder, carray keyword arguments, attrs)
FIXTURES = {
    # 7 full chunks and a leftover of 104
    "int64_leftover": (lambda: np.arange(-500, 2500, 3, dtype="i8"),
                       dict(chunklen=128, cparams=dict(clevel=5, shuffle=1, cname="lz4")), None),
    # atoms of shape (3,): 3 full chunks and 8 leftover
    "float64_2d": (lambda: (np.arange(600) / 7.0).reshape(200, 3),
                   dict(chunklen=64, cparams=dict(clevel=5, shuffle=1, cname="blosclz")), None),
    "int16_3d": (lambda: (np.arange(120, dtype="i2") * 37 - 1000).reshape(30, 2, 2),
                 dict(chunklen=8, cparams=dict(clevel=4, shuffle=1, cname="lz4")), None),
    "unicode": (lambda: np.array(["\u015dtr-%d" % i for i in range(150)], dtype="U8"),
                dict(chunklen=40, cparams=dict(clevel=3, shuffle=1, cname="zlib")), None),
    "bytes": (lambda: np.array([b"k%04d" % (i * 7) for i in range(90)], dtype="S6"),
              dict(chunklen=32, cparams=dict(clevel=5, shuffle=0, cname="lz4")), None),
    # exact multiple of chunklen: no leftover chunk file
    "lz4hc_bitshuffle": (lambda: np.arange(500, dtype="i4") % 37,
                         dict(chunklen=100, cparams=dict(clevel=6, shuffle=2, cname="lz4hc")), None),
    "zstd_noshuffle": (lambda: (np.arange(700) * 13 % 65536).astype("u2"),
                       dict(chunklen=256, cparams=dict(clevel=9, shuffle=0, cname="zstd")), None),
    "bool": (lambda: np.arange(300) % 3 == 0,
             dict(chunklen=64, cparams=dict(clevel=5, shuffle=1, cname="lz4")), None),
    "datetime64ns": (lambda: (np.arange(200, dtype="i8") * 86_400_000_000_000
                              + 1_451_606_400_000_000_000).view("M8[ns]"),
                     dict(chunklen=50, cparams=dict(clevel=5, shuffle=1, cname="zstd")), None),
    "float32_attrs": (lambda: np.arange(50, dtype="f4") * 0.5,
                      dict(chunklen=16, cparams=dict(clevel=5, shuffle=1, cname="lz4"), dflt=-1.5),
                      {"temp": 22.5, "pressure": 999.2, "timestamp": "2016030915",
                       "tags": ["a", "b"], "nested": {"k": None, "ok": True}}),
    "int8_chunklen1": (lambda: np.arange(-2, 3, dtype="i1"),
                       dict(chunklen=1, cparams=dict(clevel=1, shuffle=0, cname="blosclz")), None),
    "empty_int32": (lambda: np.zeros(0, dtype="i4"),
                    dict(chunklen=16, cparams=dict(clevel=5, shuffle=1, cname="lz4")), None),
    "objects": (_objects, dict(chunklen=4, cparams=dict(clevel=5, shuffle=1, cname="lz4")), None),
}


def generate(outdir=FIXTURES_DIR, names=None):
    import bcolz

    os.makedirs(outdir, exist_ok=True)
    for name in names or sorted(FIXTURES):
        build, kwargs, attrs = FIXTURES[name]
        kwargs = dict(kwargs)
        kwargs["cparams"] = bcolz.cparams(**kwargs["cparams"])
        path = os.path.join(outdir, name)
        if os.path.exists(path):
            shutil.rmtree(path)
        c = bcolz.carray(build(), rootdir=path, mode="w", **kwargs)
        for k, v in (attrs or {}).items():
            c.attrs[k] = v
        c.flush()
        del c
    return outdir


if __name__ == "__main__":
    out = generate(sys.argv[1] if len(sys.argv) > 1 else FIXTURES_DIR)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    print(f"wrote {len(FIXTURES)} fixtures to {out} ({total} bytes)")
