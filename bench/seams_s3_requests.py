"""Requests a carray on object storage makes (moto's S3 server on 127.0.0.1), per step, per layout:
create (1,000,000 int64 in chunks of 16384), then each read on a new read-only open: 200 scalar
reads a[i], a[:], a short slice, sum, where, a 2-D column slice.  `python bench/seams_s3_requests.py` prints one line per step with the
byte store's counters (gets, bytes got, puts, lists, heads)."""

import numpy as np

import blzarr
from blzarr.bench.s3 import moto_buckets


def counts(obj):
    bs = getattr(obj, "_bytestore", None) or getattr(obj, "_bytes", None)
    s = dict(bs.stats)
    return (s["get"], s["get_bytes"], s["put"], s["list"], s["head"])


def main():
    with moto_buckets() as new_bucket:
        for fmt in ("bcolz", "blz"):
            bucket, opts = new_bucket()
            url = f"{bucket}/x"
            x = np.arange(1_000_000, dtype="i8")
            w = blzarr.carray(x, rootdir=url, mode="w", chunklen=16384, format=fmt, storage_options=opts)
            w.flush()
            print(fmt, "create", counts(w))
            m = blzarr.carray(np.arange(200_000, dtype="i8").reshape(-1, 4), rootdir=url + "2d", mode="w",
                              chunklen=4096, format=fmt, storage_options=opts)
            m.flush()
            steps = [
                ("200 x a[i]", url, lambda r: sum(r[i] for i in range(0, 1_000_000, 5000)) == sum(range(0, 1_000_000, 5000))),
                ("a[:]", url, lambda r: int(r[:][-1]) == 999_999),
                ("a[1000:5000]", url, lambda r: int(r[1000:5000].sum()) == sum(range(1000, 5000))),
                ("sum()", url, lambda r: int(r.sum()) == int(x.sum())),
                ("where", url, lambda r: sum(1 for _ in r.where("r > 990000")) == 9999),
                ("2-D [:, 1]", url + "2d", lambda r: (r[:, 1] == np.arange(1, 200_000, 4)).all()),
            ]
            for name, where, step in steps:
                r = blzarr.open(where, mode="r", storage_options=opts)
                opened = counts(r)
                assert step(r)
                print(fmt, f"open {opened}", name, tuple(b - a for a, b in zip(opened, counts(r))))


if __name__ == "__main__":
    main()
