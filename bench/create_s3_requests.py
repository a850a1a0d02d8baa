"""Requests a carray's creation at a new URL makes on object storage (moto's S3 server on 127.0.0.1),
per layout: `carray(np.arange(n, dtype=float64), rootdir=<new URL>, mode='w')` and its close, every
s3fs call counted by its method (``S3FileSystem._call_s3``: HEAD, GET, PUT, DELETE, LIST, COPY...);
then `blzarr.open(url, mode='r')` of it, a 2-column ctable's creation at a new URL (mode 'a', the
default of a creation) and `blzarr.open` of that table.
`python bench/create_s3_requests.py [n] [--calls]` prints one line per layout and operation (and, with
--calls, the method and key of each call but the data objects' puts); compare two checkouts line by
line."""

import collections
import sys
import uuid

import numpy as np

import blzarr
from blzarr.bench.s3 import moto_buckets


def counted(fn):
    """Run `fn()` with every s3fs call recorded; [(method, key)]."""
    import s3fs
    orig = s3fs.S3FileSystem._call_s3
    calls = []

    async def recording(fs, method, *args, **kwargs):
        calls.append((method, kwargs.get("Key") or kwargs.get("Prefix") or ""))
        return await orig(fs, method, *args, **kwargs)
    s3fs.S3FileSystem._call_s3 = recording
    try:
        fn()
    finally:
        s3fs.S3FileSystem._call_s3 = orig
    return calls


def main(argv):
    n = int(next((a for a in argv if not a.startswith("--")), 1_000_000))
    x = np.arange(n, dtype=np.float64)
    with moto_buckets() as new_bucket:
        bucket, opts = new_bucket()
        for fmt in ("bcolz", "blz"):
            url = f"{bucket}/{fmt}-{uuid.uuid4().hex[:6]}"
            turl = f"{bucket}/{fmt}-t-{uuid.uuid4().hex[:6]}"
            opened = {}
            steps = [
                ("create", lambda: blzarr.carray(x, rootdir=url, mode="w", format=fmt, storage_options=opts).close()),
                ("open", lambda: opened.update(a=blzarr.open(url, mode="r", storage_options=opts))),
                ("ctable create", lambda: blzarr.ctable([x, x], names=["a", "b"], rootdir=turl, format=fmt,
                                                        storage_options=opts).close()),
                ("ctable open", lambda: opened.update(t=blzarr.open(turl, mode="r", storage_options=opts))),
            ]
            for name, step in steps:
                calls = counted(step)
                by = collections.Counter(m for m, _ in calls)
                print(fmt, n, name, "requests", len(calls), dict(sorted(by.items())))
                if "--calls" in argv:
                    for m, key in calls:
                        if not (m == "put_object" and "/data/" in key):
                            print("   ", m, key.split("/", 1)[-1])
            assert np.array_equal(opened["a"][:], x)
            assert np.array_equal(opened["t"]["b"][:], x)


if __name__ == "__main__":
    main(sys.argv[1:])
