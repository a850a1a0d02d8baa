"""Requests a ctable's queries make on object storage (moto's S3 server on 127.0.0.1), per layout: a
table of 300,000 rows (int64 ``a``, uniform float64 ``b``) in chunks of 8,192, then each query on a
new read-only open: its rows (count and a digest) and the GETs and bytes its columns fetched.
`python bench/query_s3_requests.py` prints one line per query; compare two checkouts line by line."""

import hashlib
import numpy as np

import blzarr
from blzarr.bench.s3 import moto_buckets

QUERIES = (("b < 0.01", {}), ("b < 0.001", {}), ("b < 0.1", {"limit": 500, "skip": 50}))


def gets(t):
    stats = [t.cols[name]._bytestore.stats for name in t.names]
    return sum(s["get"] for s in stats), sum(s["get_bytes"] for s in stats)


def main():
    with moto_buckets() as new_bucket:
        for fmt in ("bcolz", "blz"):
            bucket, opts = new_bucket()
            url = f"{bucket}/t"
            rng = np.random.default_rng(3)
            n = 300_000
            blzarr.ctable([np.arange(n), rng.random(n)], names=["a", "b"], rootdir=url, mode="w",
                          chunklen=8192, format=fmt, storage_options=opts).flush()
            for q, kw in QUERIES:
                r = blzarr.open(url, mode="r", storage_options=opts)
                g0, b0 = gets(r)
                rows = [tuple(x) for x in r.where(q, outcols=["a", "b"], **kw)]
                g1, b1 = gets(r)
                digest = hashlib.sha256(repr(rows).encode()).hexdigest()[:12]
                print(fmt, q, kw, len(rows), digest, "GETs", g1 - g0, "bytes", b1 - b0)


if __name__ == "__main__":
    main()
