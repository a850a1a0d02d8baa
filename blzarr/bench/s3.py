"""The object-storage rows of the harness (``s3_*``): blzarr and zarr v3 on a local S3 server.

`MotoS3` starts moto's S3 server (``python -m moto.server``) on a free port of 127.0.0.1 in a
subprocess, and stops it at the end of the run.  Both libraries write the same data with the same
chunking (chunks of `S3_CHUNK` values, `S3_SHARD` chunks per BLZ superchunk file / per zarr shard) and
codec (Blosc lz4, clevel 5, byte shuffle) into one bucket, and read it through s3fs.  The S3 calls
are counted where both libraries make them (s3fs's ``_call_s3``): GETs and their bytes, HEADs,
LISTs, for each run of each operation.

The server runs on this machine: the times are mostly client work (and the server's), the request
and byte counts what a real store would bill and wait for.
"""

import contextlib
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

import numpy as np

import blzarr
from blzarr.bench import CLEVEL, CNAME
from blzarr.bench import peers as P

S3_OPS = ("s3_read_all", "s3_scalars", "s3_slices")
S3_CHUNK = 65536          # values per chunk (512 kB of float64), both libraries
S3_SHARD = 16             # chunks per BLZ superchunk file and per zarr shard
COUNTED = ("get", "get_bytes", "head", "list", "put")


def missing_modules():
    """The packages the S3 rows need that are not installed (moto's server, s3fs)."""
    return [name for name, mod in (("moto[server]", "moto.server"), ("s3fs", "s3fs"), ("fsspec", "fsspec"))
            if _find(mod) is None]


def _find(mod):
    try:
        return importlib.util.find_spec(mod)
    except (ImportError, ValueError):
        return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoS3:
    """moto's S3 server on a free port of 127.0.0.1; `stop()` ends it."""

    def __init__(self, timeout=60):
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=2).read()
                break
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto's S3 server did not start on {self.endpoint}")
                time.sleep(0.2)

    @property
    def storage_options(self):
        return {"key": "testing", "secret": "testing",
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-west-2"}}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def moto_buckets():
    """moto's S3 server for the length of the block (a script's); yields `new_bucket()`, which makes
    an empty bucket there and returns (its s3:// URL, the storage options that reach it)."""
    server = MotoS3()
    try:
        import s3fs
        opts = server.storage_options
        fs = s3fs.S3FileSystem(**opts)

        def new_bucket():
            name = "b" + uuid.uuid4().hex[:12]
            fs.mkdir(name)
            return f"s3://{name}", opts
        yield new_bucket
    finally:
        server.stop()


class Counter:
    """Counts the S3 calls of every s3fs filesystem while installed (both libraries go through
    ``S3FileSystem._call_s3``)."""

    def __init__(self):
        self.n = dict.fromkeys(COUNTED, 0)
        self._orig = None

    def install(self):
        import s3fs
        orig = self._orig = s3fs.S3FileSystem._call_s3
        n = self.n

        async def counting(fs, method, *args, **kwargs):
            out = await orig(fs, method, *args, **kwargs)
            if method == "get_object":
                n["get"] += 1
                n["get_bytes"] += int(out.get("ContentLength", 0) or 0)
            elif method == "head_object":
                n["head"] += 1
            elif method.startswith("list_objects"):
                n["list"] += 1
            elif method == "put_object":
                n["put"] += 1
            return out
        s3fs.S3FileSystem._call_s3 = counting

    def uninstall(self):
        if self._orig is not None:
            import s3fs
            s3fs.S3FileSystem._call_s3 = self._orig
            self._orig = None

    def snapshot(self):
        return dict(self.n)

    def since(self, before):
        return {k: self.n[k] - before[k] for k in COUNTED}


class BlzarrS3:
    name = "blzarr"

    def __init__(self, opts):
        self.blzarr = blzarr
        self.opts = opts

    def write(self, url, x):
        self.blzarr.carray(x, rootdir=url, mode="w", chunklen=S3_CHUNK, superchunklen=S3_SHARD,
                           cparams=self.blzarr.cparams(clevel=CLEVEL, shuffle=1, cname=CNAME),
                           storage_options=self.opts)

    def open(self, url):
        return self.blzarr.open(url, mode="r", storage_options=self.opts)


class ZarrS3:
    name = "zarr"

    def __init__(self, opts):
        try:
            import zarr
            from zarr.codecs import BloscCodec
            from zarr.storage import FsspecStore
        except Exception as exc:
            raise P.Unavailable(f"zarr v3 (zarr.storage.FsspecStore) cannot be imported: {exc}") from None
        self.zarr, self.codec, self.store_cls = zarr, BloscCodec, FsspecStore
        self.opts = opts

    def _store(self, url, read_only):
        return self.store_cls.from_url(url, storage_options=self.opts, read_only=read_only)

    def write(self, url, x):
        z = self.zarr.create_array(store=self._store(url, False), shape=x.shape, dtype=x.dtype,
                                   chunks=(S3_CHUNK,), shards=(S3_CHUNK * S3_SHARD,),
                                   compressors=[self.codec(cname=CNAME, clevel=CLEVEL, shuffle="shuffle")],
                                   overwrite=True)
        z[:] = x

    def open(self, url):
        return self.zarr.open_array(store=self._store(url, True), mode="r")


class S3Rows:
    """The s3_* rows of one harness run; the server starts at the first dataset and `close()`
    stops it."""

    def __init__(self, runner, slice_len):
        self.runner = runner
        self.slice_len = slice_len
        self.server = None
        self.counter = None
        self.libs = None
        self.unavailable = None

    def _start(self):
        if self.libs is not None or self.unavailable:
            return
        miss = missing_modules()
        if miss:
            self.unavailable = f"the S3 rows need {', '.join(miss)} (pip install 'moto[server]' s3fs zarr)"
            self.runner.note(f"s3_* rows skipped: {self.unavailable}")
            return
        try:
            self.server = MotoS3()
        except Exception as exc:
            self.unavailable = f"{type(exc).__name__}: {exc}"
            self.runner.note(f"s3_* rows skipped: {self.unavailable}")
            return
        import s3fs
        opts = self.server.storage_options
        self.bucket = "bench" + uuid.uuid4().hex[:8]
        s3fs.S3FileSystem(**opts).mkdir(self.bucket)
        self.counter = Counter()
        self.counter.install()
        names = {p.name for p in self.runner.peers}
        self.libs = [BlzarrS3(opts)]
        if "zarr" in names:
            try:
                self.libs.append(ZarrS3(opts))
            except P.Unavailable as exc:
                self.runner.note(f"zarr: S3 rows skipped, {exc}")

    def close(self):
        if self.counter is not None:
            self.counter.uninstall()
        if self.server is not None:
            self.server.stop()
            self.server = None

    def run(self, dname, x):
        r = self.runner
        ops = [op for op in S3_OPS if op in r.ops]
        if not ops:
            return
        self._start()
        if self.libs is None:
            return
        urls = {}
        for lib in self.libs:
            url = f"s3://{self.bucket}/{dname}-{lib.name}"
            try:
                lib.write(url, x)
                a = lib.open(url)
                k = len(x) // 2
                if not (np.array_equal(np.asarray(a[:]), x) and (not len(x) or float(a[k]) == float(x[k]))):
                    r.note(f"{lib.name}: WRONG RESULT on {dname} read back from S3")
                    continue
                urls[lib.name] = url
            except Exception as exc:
                r.note(f"{lib.name}: cannot write {dname} to S3: {type(exc).__name__}: {exc}")
        sidx, sst, slen = r.scalar_idx, r.slice_starts, self.slice_len
        for op in ops:
            row = r.new_row(dname, op)
            row["requests"] = {}
            for lib in self.libs:
                url = urls.get(lib.name)
                if url is None:
                    row["skipped"][lib.name] = "no array on S3"
                    continue
                if op == "s3_read_all":
                    def fn(lib=lib, url=url):
                        lib.open(url)[:]
                elif op == "s3_scalars":
                    def fn(lib=lib, url=url):
                        a = lib.open(url)
                        for i in sidx:
                            a[i]
                else:
                    def fn(lib=lib, url=url):
                        a = lib.open(url)
                        for s in sst:
                            a[s:s + slen]
                runs = row["requests"].setdefault(lib.name, [])
                r.measure(row, lib, op, self._counted(fn, runs))
            r.finish_row(row)
            per = {"s3_read_all": 1, "s3_scalars": len(sidx), "s3_slices": len(sst)}[op]
            row["requests"] = {name: summary(runs, per) for name, runs in row["requests"].items() if runs}

    def _counted(self, fn, runs):
        c = self.counter

        def counted():
            before = c.snapshot()
            fn()
            runs.append(c.since(before))
        return counted


def summary(runs, per):
    """The median over the runs of each count, and the GETs and GET bytes per operation."""
    med = {k: statistics.median(run[k] for run in runs) for k in COUNTED}
    med["ops"] = per
    med["get_per_op"] = med["get"] / per
    med["bytes_per_op"] = med["get_bytes"] / per
    return med


def format_requests(results):
    """A table of the S3 requests per row and library (from the `requests` of the s3_* rows)."""
    rows = []
    for res in results:
        req = res.get("requests")
        if not req:
            continue
        for lib, q in req.items():
            t = res["times"].get(lib)
            rows.append([res["dataset"], res["label"], lib,
                         f"{t * 1e3:.1f}" if t is not None else "--",
                         f"{q['get_per_op']:.3g}", f"{q['bytes_per_op']:,.0f}",
                         f"{q['get']:.0f}", f"{q['get_bytes'] / 1e6:.2f}", f"{q['head']:.0f}", f"{q['list']:.0f}"])
    if not rows:
        return ""
    head = ["dataset", "operation", "library", "ms", "GETs/op", "GET bytes/op", "GETs", "GET MB", "HEADs",
            "LISTs"]
    widths = [max(len(h), *(len(c[i]) for c in rows)) for i, h in enumerate(head)]
    rule = "  ".join("=" * w for w in widths)
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([rule, fmt(head), rule] + [fmt(c) for c in rows] + [rule])
