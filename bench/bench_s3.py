"""Object storage: blzarr (BLZ layout) vs zarr v3 (sharded, Blosc lz4) on a local S3 server (moto).

    python bench/bench_s3.py                    # 4M float64, 2000 random a[i], 300 slices
    python bench/bench_s3.py --n 1000000 --json out.json

Both libraries write the same data (a random walk) with the same chunking (chunks of --chunk
elements, --shard chunks per superchunk file / per shard) and the same codec (Blosc lz4, clevel 5,
byte shuffle) to one bucket of a moto S3 server started here, and read it through s3fs.  The S3
requests are counted where both send them (s3fs's client calls): GETs and their bytes, HEADs and
LISTs, per operation:

* open + read all: a fresh open, then a[:] (the best of --repeats runs);
* 2000 random a[i] on a freshly opened array ("cold"), then 2000 more on the same object ("warm");
* 300 random slices a[i:i+1000] on a freshly opened array.

"blzarr (no chunk cache)" reads the same dataset with blzarr's cache of compressed chunks off, as when
the data are much larger than the cache: a chunk is still read whole and verified on its first
touch, then each a[i] fetches only the Blosc block that holds it.

The server runs on this machine, so the times measure the client's work and the request count more
than a network; the request and byte counts are what a real object store would bill and wait for.
"""

import argparse
import json
import os
import sys
import time
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import blzarr  # noqa: E402

COUNTS = {"get": 0, "get_bytes": 0, "head": 0, "list": 0, "put": 0}


def install_counter():
    import s3fs
    orig = s3fs.S3FileSystem._call_s3

    async def counting(self, method, *args, **kwargs):
        out = await orig(self, method, *args, **kwargs)
        if method == "get_object":
            COUNTS["get"] += 1
            COUNTS["get_bytes"] += int(out.get("ContentLength", 0) or 0)
        elif method == "head_object":
            COUNTS["head"] += 1
        elif method.startswith("list_objects"):
            COUNTS["list"] += 1
        elif method == "put_object":
            COUNTS["put"] += 1
        return out
    s3fs.S3FileSystem._call_s3 = counting


class Measure:
    def __enter__(self):
        self.c0 = dict(COUNTS)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.delta = {k: COUNTS[k] - self.c0[k] for k in COUNTS}
        return False


class Blz:
    name = "blzarr"

    def __init__(self, opts):
        self.opts = {k: v for k, v in opts.items() if k != "skip_instance_cache"}

    def write(self, url, x, chunk, shard):
        blzarr.carray(x, rootdir=url, mode="w", chunklen=chunk, superchunklen=shard,
                      cparams=blzarr.cparams(clevel=5, shuffle=1, cname="lz4"), storage_options=self.opts)

    def open(self, url):
        return blzarr.open(url, mode="r", storage_options=self.opts)


class BlzNoCache(Blz):
    """blzarr with its chunk cache off: chunks are verified once, then every a[i] reads its block."""
    name = "blzarr (no chunk cache)"

    def open(self, url):
        a = super().open(url)
        a.store.store._chunks.limit = 0
        return a


class Zarr:
    name = "zarr"

    def __init__(self, opts):
        import zarr
        from zarr.codecs import BloscCodec
        from zarr.storage import FsspecStore
        self.zarr, self.codec, self.store_cls = zarr, BloscCodec, FsspecStore
        self.opts = {k: v for k, v in opts.items() if k != "skip_instance_cache"}

    def _store(self, url, read_only):
        return self.store_cls.from_url(url, storage_options=self.opts, read_only=read_only)

    def write(self, url, x, chunk, shard):
        z = self.zarr.create_array(store=self._store(url, False), shape=x.shape, dtype=x.dtype,
                                   chunks=(chunk,), shards=(chunk * shard,),
                                   compressors=[self.codec(cname="lz4", clevel=5, shuffle="shuffle")],
                                   overwrite=True)
        z[:] = x

    def open(self, url):
        return self.zarr.open_array(store=self._store(url, True), mode="r")


def run(args):
    from object_store import MotoServer
    import s3fs
    install_counter()
    server = MotoServer()
    try:
        opts = server.storage_options
        bucket = "bench" + uuid.uuid4().hex[:8]
        s3fs.S3FileSystem(**opts).mkdir(bucket)
        rng = np.random.default_rng(0)
        x = np.cumsum(rng.standard_normal(args.n))
        idx = rng.integers(0, args.n, args.reads)
        idx2 = rng.integers(0, args.n, args.reads)
        starts = rng.integers(0, args.n - 1000, args.slices)
        results = {"n": args.n, "chunk": args.chunk, "shard": args.shard, "reads": args.reads,
                   "slices": args.slices, "rows": {}}
        for lib in (Blz(opts), BlzNoCache(opts), Zarr(opts)):
            url = f"s3://{bucket}/{lib.name.split()[0]}"
            row = {}
            if not isinstance(lib, BlzNoCache):
                with Measure() as m:
                    lib.write(url, x, args.chunk, args.shard)
                row = {"write_s": m.seconds, "write_puts": m.delta["put"]}
            best = None
            for _ in range(args.repeats):
                with Measure() as m:
                    a = lib.open(url)
                    got = a[:]
                assert np.array_equal(got, x)
                if best is None or m.seconds < best.seconds:
                    best = m
            row["read_all"] = {"s": best.seconds, "MB/s": x.nbytes / best.seconds / 1e6, **best.delta}
            a = lib.open(url)
            with Measure() as m:
                for i in idx.tolist():
                    v = a[i]
            assert v == x[idx[-1]]
            row["scalar_cold"] = {"us_per_read": m.seconds / args.reads * 1e6,
                                  "gets_per_read": m.delta["get"] / args.reads,
                                  "bytes_per_read": m.delta["get_bytes"] / args.reads, **m.delta}
            with Measure() as m:
                for i in idx2.tolist():
                    v = a[i]
            assert v == x[idx2[-1]]
            row["scalar_warm"] = {"us_per_read": m.seconds / args.reads * 1e6,
                                  "gets_per_read": m.delta["get"] / args.reads,
                                  "bytes_per_read": m.delta["get_bytes"] / args.reads, **m.delta}
            a = lib.open(url)
            with Measure() as m:
                for s in starts.tolist():
                    got = a[s:s + 1000]
            assert np.array_equal(got, x[starts[-1]:starts[-1] + 1000])
            row["slices"] = {"us_per_slice": m.seconds / args.slices * 1e6,
                             "gets_per_slice": m.delta["get"] / args.slices,
                             "bytes_per_slice": m.delta["get_bytes"] / args.slices, **m.delta}
            results["rows"][lib.name] = row
        return results
    finally:
        server.stop()


def render(res):
    lines = [f"{res['n']:,} float64 (random walk), chunks of {res['chunk']:,}, {res['shard']} chunks per "
             f"superchunk file / shard, Blosc lz4 clevel 5 shuffle; moto S3 server on this machine", "",
             "| operation | library | time | GET requests | GET bytes | per op |", "|---|---|---|---|---|---|"]
    for lib, row in res["rows"].items():
        ra = row["read_all"]
        lines.append(f"| open + read all | {lib} | {ra['s'] * 1e3:.0f} ms ({ra['MB/s']:.0f} MB/s) | {ra['get']} "
                     f"(+{ra['head']} HEAD, {ra['list']} LIST) | {ra['get_bytes']:,} | |")
    for key, what in (("scalar_cold", f"{res['reads']} random a[i], fresh open"),
                      ("scalar_warm", f"{res['reads']} more random a[i], same object")):
        for lib, row in res["rows"].items():
            r = row[key]
            lines.append(f"| {what} | {lib} | {r['us_per_read']:.0f} us/read | {r['get']} | {r['get_bytes']:,} | "
                         f"{r['gets_per_read']:.2f} GET, {r['bytes_per_read']:,.0f} B |")
    for lib, row in res["rows"].items():
        r = row["slices"]
        lines.append(f"| {res['slices']} slices a[i:i+1000], fresh open | {lib} | {r['us_per_slice']:.0f} us/slice | "
                     f"{r['get']} | {r['get_bytes']:,} | {r['gets_per_slice']:.2f} GET, "
                     f"{r['bytes_per_slice']:,.0f} B |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=4_000_000)
    p.add_argument("--chunk", type=int, default=65536)
    p.add_argument("--shard", type=int, default=16)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--slices", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    res = run(args)
    print(render(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == "__main__":
    main()
