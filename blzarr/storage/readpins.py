"""A reader on object storage reads the version it opened, or fails: conditional GETs on S3.

Object storage has no descriptors to hold: a reader that opened a carray keeps what it read of its
metadata (dtype, chunking, length, offsets) and fetches the data objects by name when it needs
them.  A dataset replaced meanwhile (`blzarr.storage.replace`) puts its own objects under those
names, so a plain GET would hand the reader the new bytes to decode with the old metadata.

So a reader pins the data objects it opened: the listing its open makes anyway gives every data
object's ETag, and each GET of a pinned object carries ``If-Match`` with it (S3's GetObject takes the
condition; no request is added).  A GET the store refuses (412, or 404: the object is gone) means the
object changed since the open: an appending writer uploaded a longer version of a file (the bytes the
reader counted are the same), or the dataset was replaced.  To tell which, the reader reads the
dataset's ``meta/storage`` again and compares it with what its open read; each creation on object
storage writes a random ``uid`` there, so a replacement (a new creation, copied over by the
roll-forward) never leaves the same bytes.  A ``meta/storage`` without ``uid`` (written before it
existed, or by another program) is compared by its version as well (ETag and Last-Modified): any put
or copy over it is a change, and since Last-Modified counts whole seconds, one written in the same
second as the open read it is taken as changed.  Changed: `ConcurrentWriterError` naming the URL.  The
same: the object is read unconditionally and ``meta/storage`` compared once more (a replacement
switched in between is caught then), and the new ETag pinned from then on.

The open itself reads several objects one after the other (``meta/storage``, ``meta/sizes``, the
listing, statistics, a superchunk file's offsets), and a replacement's switch can fall between two
of them: the listing would then pin the new objects against the old metadata.  So `read_commit` reads
the commit object with its version, and once the open has read everything, `confirm` asks for that
version again (one HEAD): another one means the open straddled a change, and the open is made again
(`OPEN_TRIES` times at most, then `ConcurrentWriterError`).  A ctable confirms its ``__rootdirs__``
once, after its columns (every replacement or rewrite of a column's objects changes it); the column
opens inside (`deferred`) skip their own.

fsspec's in-memory filesystem (``memory://``) takes no condition but tells each object's creation
time (a new one at every put or copy): there the reader reads, then compares that time with the
listed one (`CheckedPins`, no request: the objects are in this process).  Other stores (plain HTTP,
and the fsspec backends other than s3fs and memory) read as before: what the open saw is not
checked there.
"""

import asyncio
import contextlib
import datetime
import email.utils
import json
import threading
import weakref

from blzarr.errors import ConcurrentWriterError, MissingError, StorageError


# GETs of one batch in flight at once (as `bytestore.MAX_CONCURRENT` for ranged GETs)
IN_FLIGHT = 16
# opens of one dataset made again when a writer's change fell inside each, before giving up
OPEN_TRIES = 4


class Changed(StorageError):
    """A conditional GET was refused: the object is not the version pinned."""


def _kind(store):
    """Which pins a byte store takes: ReadPins (S3), CheckedPins (fsspec's memory://) or None."""
    fs = getattr(store, "fs", None)
    proto = getattr(store, "protocol", None)
    if proto in ("s3", "s3a") and hasattr(fs, "_call_s3"):
        return ReadPins
    if proto == "memory" and fs is not None:
        return CheckedPins
    return None


_handed = threading.local()


@contextlib.contextmanager
def handed(store, key, read):
    """Inside, the first `read_commit` of the commit object `key` of `store` (the same URL) takes `read`,
    the (bytes, version) its caller just had from `read_commit` (`blzarr.open`, which reads the commit
    object to learn the kind): the open does not GET it again.  The open's `confirm` still compares
    that version with the store's once everything is read, so a change after this read is caught
    as one during the open; the open's next attempt reads afresh."""
    _handed.read = (store.where(key), read)
    try:
        yield
    finally:
        _handed.read = None


def read_commit(store, key):
    """(bytes, version) of the commit object `key` of `store`, read in one request where the store tells
    the version with the bytes (S3); version None where the store cannot tell it."""
    given = getattr(_handed, "read", None)
    if given is not None and given[0] == store.where(key):
        _handed.read = None
        return given[1]
    kind = _kind(store)
    if kind is None:
        return store.get(key), None
    return kind.read_commit(store, key)


def confirm(store, key, version):
    """Whether the commit object `key` of `store` is still at `version` (one HEAD on S3): the open that
    read it at that version and then everything else saw one version.  True where nothing can be
    told (version None)."""
    if version is None:
        return True
    kind = _kind(store)
    return kind is None or _same(kind.version_now(store, key), version.stamp)


def _same(a, b):
    """Whether two stamps tell the same version: equal, or for S3's (ETag, Last-Modified) the same
    ETag and the same Last-Modified in whole seconds where both answers gave one (a HEAD answered from
    a listing gives milliseconds, some S3 compatibles none at all)."""
    if a == b:
        return True
    if not (isinstance(a, tuple) and isinstance(b, tuple)) or a[0] != b[0]:
        return False
    ma, mb = (m.replace(microsecond=0) if isinstance(m, datetime.datetime) else m or None for m in (a[1], b[1]))
    return ma is None or mb is None or ma == mb


class Version:
    """What a store told of one read of a commit object: `stamp` (compared), `settled` (False when
    the stamp could hide a later change, e.g. Last-Modified in the same second as the read)."""

    __slots__ = ("stamp", "settled")

    def __init__(self, stamp, settled=True):
        self.stamp, self.settled = stamp, settled


_deferred = threading.local()


@contextlib.contextmanager
def deferred():
    """Opens inside (a ctable's columns) leave their `confirm` to the caller, which confirms the one
    commit object that covers them."""
    _deferred.depth = getattr(_deferred, "depth", 0) + 1
    try:
        yield
    finally:
        _deferred.depth -= 1


def is_deferred():
    return getattr(_deferred, "depth", 0) > 0


class ReadPins:
    """The data objects (key -> ETag) a reader opened, and the bytes and version of its commit object.

    `store` is the `bytestore.FsspecStore` whose GETs this object makes conditional."""

    # the field of a listing's entry that pins an object
    FIELDS = ("ETag", "etag")

    def __init__(self, store, commit_key, commit_raw, version=None):
        self._store = weakref.ref(store)    # (the store holds this object: no cycle back to it)
        self.commit_key = commit_key
        self.commit_raw = bytes(commit_raw)
        self.version = version
        self.tags = {}

    def listed(self, prefix, entries):
        """`entries`: {name: ETag} or {name: listing entry} of the objects listed under `prefix`."""
        for name, e in entries.items():
            tag = next((e.get(f) for f in self.FIELDS if e.get(f) is not None), None) \
                if isinstance(e, dict) else e
            if isinstance(tag, (str, int, float)) and tag != "":
                self.tags[f"{prefix}/{name}" if prefix else name] = tag

    @property
    def store(self):
        return self._store()

    def pinned(self, key):
        return key in self.tags

    def wrote(self, key, tag, data):
        """This process's store put `data` at `key` (its new ETag `tag`), or copied over or deleted it
        (`data` None): its own writes are what it reads from then on."""
        if key == self.commit_key:
            if data is not None:
                self.commit_raw = bytes(data)
            self.version = None     # (its own write: a later change by another writer is told by the bytes)
        if isinstance(tag, str) and tag and key in self.tags:
            self.tags[key] = tag
        else:
            self.tags.pop(key, None)

    # ------------------------------------------------------------------ S3 requests
    @staticmethod
    def _run(store, fn, *args):
        from fsspec.asyn import sync
        return sync(store.fs.loop, fn, *args)

    @staticmethod
    async def _request(s, key, rng, tag):
        """GetObject of `key` (bytes [a, b) with `rng`; ``If-Match`` `tag` unless None): (bytes, response)."""
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
        return data, resp

    async def _get(self, key, rng, tag):
        data, resp = await self._request(self.store, key, rng, tag)
        return data, resp.get("ETag")

    def _fetch(self, key, rng, tag):
        """(bytes, the version read) of `key` as pinned at `tag` (None: any); Changed when refused."""
        s = self.store
        return s._call("read", key, self._run, s, self._get, key, rng, tag)

    @classmethod
    def read_commit(cls, s, key):
        data, resp = s._call("read", key, cls._run, s, cls._request, s, key, None, None)
        s._count("get", len(data))
        modified = resp.get("LastModified")
        # Last-Modified counts whole seconds: a later put in the second of this read could keep it
        date = ((resp.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}).get("date")
        try:
            settled = modified is not None and date is not None \
                and modified < email.utils.parsedate_to_datetime(date).replace(microsecond=0)
        except (TypeError, ValueError):
            settled = False
        return data, Version((resp.get("ETag"), modified), settled)

    @staticmethod
    def version_now(s, key):
        try:
            info = s.info(key)
        except MissingError:
            return None
        return (info.get("ETag") or info.get("etag"), info.get("LastModified"))

    # ------------------------------------------------------------------ reads
    def get(self, key, rng=None):
        """The object `key` (bytes [a, b) of it with `rng`), as pinned; see the module docstring."""
        s = self.store
        try:
            data, _ = self._fetch(key, rng, self.tags.get(key))
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
            got = self._run(self.store, many)
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
        data, tag = self._fetch(key, rng, None)
        self._check(key)
        if isinstance(tag, (str, int, float)) and tag != "":
            self.tags[key] = tag
        else:
            self.tags.pop(key, None)
        return data

    def _check(self, key):
        s = self.store
        try:
            now, version = self.read_commit(s, self.commit_key)
        except MissingError:
            now = version = None
        same = now == self.commit_raw
        if same and not _has_uid(now) and self.version is not None:
            # no uid: a replacement by a writer that writes none can leave the same bytes; its puts
            # and copies change the version (unless they fell in a second the open could not tell)
            same = self.version.settled and version is not None and _same(version.stamp, self.version.stamp)
        if not same:
            raise ConcurrentWriterError(
                f"'{s.root}' was replaced or removed by another writer since this reader opened it "
                f"('{s.where(key)}' changed, '{s.where(self.commit_key)}' is not what the open read): "
                "open it again to read what is there now")


class CheckedPins(ReadPins):
    """fsspec's in-memory filesystem: no conditional reads, but every put or copy makes a new file
    with its own creation time.  An object is read, then its creation time compared with the one
    listed (read first, compared after: a match means the bytes read are the listed ones)."""

    FIELDS = ("created",)

    @staticmethod
    def version_now(s, key):
        try:
            created = s.fs.info(s._p(key)).get("created")
        except FileNotFoundError:
            return None
        # (a datetime here, a POSIX timestamp in its listing)
        return created.timestamp() if hasattr(created, "timestamp") else created

    @classmethod
    def read_commit(cls, s, key):
        before = cls.version_now(s, key)      # (a put between the two shows at `confirm`)
        data = s._call("read", key, s.fs.cat_file, s._p(key))
        s._count("get", len(data))
        return data, Version(before)

    def _fetch(self, key, rng, tag):
        s = self.store
        kw = {} if rng is None else {"start": rng[0], "end": rng[1]}
        data = s._call("read", key, s.fs.cat_file, s._p(key), **kw)
        now = self.version_now(s, key)
        if tag is not None and now != tag:
            raise Changed(s.where(key))
        return data, now

    def get_all(self, requests):
        return [self.get(k, r) for k, r in requests]


def _has_uid(raw):
    try:
        obj = json.loads(raw)
    except (TypeError, ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and isinstance(obj.get("uid"), str)


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
