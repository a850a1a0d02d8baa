"""A reader on object storage reads the objects it opened, or fails: conditional GETs on S3.

Object storage has no descriptors to hold: a reader that opened a carray keeps what it read of its
metadata (dtype, chunking, length, offsets) and fetches the data objects by name when it needs
them.  A dataset replaced meanwhile (`blzarr.storage.replace`) puts its own objects under those
names, so a plain GET would hand the reader the new bytes to decode with the old metadata.

So a reader pins the data objects it opened: the listing its open makes anyway gives every data
object's ETag, and each GET of a pinned object carries ``If-Match`` with it (S3's GetObject takes the
condition; no request is added).  A GET the store refuses (412, or 404: the object is gone) means the
object changed since the open: an appending writer uploaded a longer version of a file (the bytes the
reader counted are the same), or the dataset was replaced.  To tell which, the reader reads the
dataset's ``meta/storage`` again and compares it with the bytes its open read; each creation on
object storage writes a random ``uid`` there, so a replacement (a new creation, copied over by the
roll-forward) never leaves the same bytes.  Changed: `ConcurrentWriterError` naming the URL.  The
same: the object is read unconditionally and ``meta/storage`` compared once more (a replacement
switched in between is caught then), and the new ETag pinned from then on.

Stores other than S3 (plain HTTP, and the fsspec backends without conditional GETs) read as before:
what the open saw is not checked there.
"""

import asyncio
import weakref

from blzarr.errors import ConcurrentWriterError, MissingError, StorageError


# GETs of one batch in flight at once (as `bytestore.MAX_CONCURRENT` for ranged GETs)
IN_FLIGHT = 16


class Changed(StorageError):
    """A conditional GET was refused: the object is not the version pinned."""


class ReadPins:
    """The data objects (key -> ETag) a reader opened, and the bytes of its commit object.

    `store` is the `bytestore.FsspecStore` whose GETs this object makes conditional."""

    def __init__(self, store, commit_key, commit_raw):
        self._store = weakref.ref(store)    # (the store holds this object: no cycle back to it)
        self.commit_key = commit_key
        self.commit_raw = bytes(commit_raw)
        self.tags = {}

    def listed(self, prefix, etags):
        for name, tag in etags.items():
            if isinstance(tag, str) and tag:
                self.tags[f"{prefix}/{name}" if prefix else name] = tag

    @property
    def store(self):
        return self._store()

    def pinned(self, key):
        return key in self.tags

    def wrote(self, key, tag, data):
        """This process's store put `data` at `key` (its new ETag `tag`), or copied over or deleted it
        (`data` None): its own writes are what it reads from then on."""
        if key == self.commit_key and data is not None:
            self.commit_raw = bytes(data)
        if isinstance(tag, str) and tag and key in self.tags:
            self.tags[key] = tag
        else:
            self.tags.pop(key, None)

    # ------------------------------------------------------------------ requests
    async def _get(self, key, rng, tag):
        s = self.store
        bucket, k, _ = s.fs.split_path(s._p(key))
        kw = {"Bucket": bucket, "Key": k}
        if rng is not None:
            kw["Range"] = f"bytes={rng[0]}-{rng[1] - 1}"
        if tag is not None:
            kw["IfMatch"] = tag
        try:
            resp = await s.fs._call_s3("get_object", **kw)
        except Exception as e:
            if tag is not None and (isinstance(e, FileNotFoundError) or _refused(e)):
                raise Changed(s.where(key)) from None
            raise
        try:
            data = await resp["Body"].read()
        finally:
            resp["Body"].close()
        return data, resp.get("ETag")

    def _run(self, fn, *args):
        from fsspec.asyn import sync
        return sync(self.store.fs.loop, fn, *args)

    def get(self, key, rng=None):
        """The object `key` (bytes [a, b) of it with `rng`), as pinned; see the module docstring."""
        s = self.store
        try:
            data, _ = s._call("read", key, self._run, self._get, key, rng, self.tags.get(key))
        except Changed:
            data = self._again(key, rng)
        s._count("get", len(data))
        return data

    def get_all(self, requests):
        """[(key, range or None)] -> the bytes of each, fetched concurrently (a refused or failed one
        alone afterwards, through `get`)."""
        async def many():
            bound = asyncio.Semaphore(IN_FLIGHT)

            async def one(k, r):
                async with bound:
                    return await self._get(k, r, self.tags.get(k))
            return await asyncio.gather(*(one(k, r) for k, r in requests), return_exceptions=True)
        try:
            got = self._run(many)
        except Exception:
            got = [None] * len(requests)
        out = []
        for (key, rng), res in zip(requests, got):
            if isinstance(res, tuple) and isinstance(res[0], (bytes, bytearray)) \
                    and (rng is None or len(res[0]) == rng[1] - rng[0]):
                self.store._count("get", len(res[0]))
                out.append(res[0])
            else:
                out.append(self.get(key, rng))      # refused, failed or short: alone, with retries
        return out

    def _again(self, key, rng):
        """`key` was refused: the dataset's version is checked, then the object read as it is now."""
        self._check(key)
        data, tag = self.store._call("read", key, self._run, self._get, key, rng, None)
        self._check(key)
        if isinstance(tag, str) and tag:
            self.tags[key] = tag
        else:
            self.tags.pop(key, None)
        return data

    def _check(self, key):
        s = self.store
        try:
            now = s._call("read", self.commit_key, self._run, self._get, self.commit_key, None, None)[0]
        except MissingError:
            now = None
        if now != self.commit_raw:
            raise ConcurrentWriterError(
                f"'{s.root}' was replaced or removed by another writer since this reader opened it "
                f"('{s.where(key)}' changed, '{s.where(self.commit_key)}' is not what the open read): "
                "open it again to read what is there now")


def _refused(e):
    """Whether S3 refused a conditional GET (412 Precondition Failed)."""
    seen = 0
    while e is not None and seen < 8:
        resp = getattr(e, "response", None)
        if isinstance(resp, dict):
            code = (resp.get("Error") or {}).get("Code")
            status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code == "PreconditionFailed" or status == 412:
                return True
        if getattr(e, "status", None) == 412:
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False
