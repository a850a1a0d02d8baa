"""Byte stores: where the files of a carray or ctable live, local directory or object storage.

A byte store holds named objects ("keys": relative paths with '/' such as ``meta/sizes`` or
``data/__1__.bin``) under one root.  `ByteStore` is the abstract base: one method per operation,
each store implements them all (tests/bytestore_suite.py is the suite every store runs):

=====================  =======================================================================
``get(key)``           the whole object (`MissingError` when it does not exist)
``get_range(k, a, b)`` bytes [a, b) of it (one ranged GET on object storage)
``get_ranges(reqs)``   several ranges, fetched concurrently where the store can
``get_many(keys)``     several whole objects, None for the missing ones
``put(key, data)``     write an object whole
``put_atomic(k, d)``   replace it so readers see the old or the new bytes, never a mix
``put(k, d, if_match=etag | if_none_match=True)``
                       a conditional put, where the store can (``conditional``): it replaces the
                       object only if its version is still ``etag`` (creates it only if absent),
                       else `ConcurrentWriterError`; returns the new version (None if the store
                       gives none)
``delete(key)``        remove it (absent already: nothing to do, unless ``missing_ok=False``)
``list(prefix)``       the names directly under ``prefix/`` -> their sizes (None for a prefix
                       that has more names under it)
``exists(key)``        whether it exists; ``isdir(key)`` whether it is a directory (a prefix)
``size(key)``          its size in bytes
``version(key)``       a value that changes when the object is replaced (None: absent): the ETag
                       on object storage, (inode, size, modification time) for a local file
``child(name)``        the store rooted at ``name`` under this one
``remove_all()``       remove the root and everything under it
``holds_nothing()``    True when nothing at all is stored at the root (one LIST on S3), None
                       where the store cannot tell it in one request: a creation then skips its
                       existence probes and its ``remove_all``
=====================  =======================================================================

and, for the layouts' positioned reads and writes, handle operations: ``open(key, how)`` gives a
handle ('r', 'rw', 'new', 'trunc' as `blzarr.storage.fileio`), used with ``pread``, ``state`` and
``close``, and where the store changes files in place (``in_place_writes``) ``pwrite``,
``pwritev``, ``truncate``, ``datasync`` and ``start_writeback``.  `LocalStore`'s handle is the OS
descriptor itself (the Cython readers of `_superchunk` take it directly: the hot paths pay nothing
for the interface); the read handle of the others holds the object fetched whole (one GET).

What a medium can or cannot do is declared by the store's capabilities (class attributes), which
the layouts read instead of the store's type:

====================  ========================================================================
``remote``            objects over a network: requests are costly, nothing is locked
``descriptors``       a read handle is an OS descriptor the Cython readers pread (else the layouts
                      read with ``get_range`` / ``get_ranges``: `blzarr.storage.blz.remote`)
``in_place_writes``   a file can be changed in place through a handle (else: written whole)
``has_dirs``          real directories, made, checked and synced (object stores have none)
``conditional``       ``put`` honours ``if_match`` / ``if_none_match``
``http``              a plain HTTP server: listings may be empty
====================  ========================================================================

`LocalStore` keeps the discipline of local directories, through `blzarr.storage.fileio` like every
local file operation (`files.atomic_write`: temporary file, fsync, rename, fsync of the directory).
The layouts (`bcolz_layout`, `blz`) do every read and write through a byte store, whichever the
medium.  `MemoryStore` keeps its objects in a dict (tests, scratch data).

`FsspecStore` reaches anything fsspec can (``s3://``, ``gs://``, ``az://``, ``http(s)://``,
``memory://``...): fsspec and the package of the protocol (s3fs, gcsfs, adlfs, aiohttp) are optional
dependencies.  Object stores have no rename and no partial write: ``put_atomic`` is a plain put,
which object stores make atomic (a reader sees the old or the new object).  Transient failures
(a dropped connection, a server error) are retried a few times; what still fails is a
`StorageError` naming the URL.  Every store counts its requests and bytes in ``stats``.

Conditional puts (``conditional`` is True): S3 through s3fs (PutObject ``If-Match`` /
``If-None-Match: *``, which AWS S3 and moto's server honour).  A store that answers them with "not
implemented" (some S3 compatibles) is used without them from then on (``conditional`` turns False);
the writers then rely on their check of the version before they write (see
`blzarr.storage.blz.remote`).
"""

import abc
import inspect
import json
import os
import stat
import re
import time

from blzarr.storage import fileio
from blzarr.storage import files
from blzarr.storage import intent
from blzarr.errors import ConcurrentWriterError, FormatError, MissingError, StorageError
from blzarr.storage.files import creation_debris, detect_store
from blzarr.storage import readpins
from blzarr.runtime.optional import need
from blzarr.runtime import forksafe

__all__ = ["ByteStore", "LocalStore", "MemoryStore", "FsspecStore", "WriterGuard", "is_url", "open_bytestore", "join",
           "ConcurrentWriterError", "find_objects"]

# attempts of one request on object storage before a StorageError (transient failures only)
RETRIES = 3
RETRY_WAIT = 0.05           # seconds before the first retry, doubled each time
MAX_CONCURRENT = 16         # ranged GETs in flight for one get_ranges call
CONDITIONAL_MAX = 5 << 30   # a conditional put is one PutObject: at most 5 GiB (S3's limit)


_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")


def is_url(path):
    """True for 'proto://...' paths other than file:// (which are local directories)."""
    if not isinstance(path, str):
        return False
    m = _URL.match(path)
    return m is not None and m.group(1).lower() != "file"


def join(root, *names):
    """Path join that keeps '/' for URLs and os.path.join for local paths."""
    if is_url(root):
        out = root.rstrip("/")
        for n in names:
            out = out + "/" + n.strip("/")
        return out
    return os.path.join(root, *names)


def local_path(path):
    """A local path for 'file://...' (and the path itself otherwise)."""
    if isinstance(path, str) and path.startswith("file://"):
        return path[len("file://"):]
    return path


class ByteStore(abc.ABC):
    """The interface (see the module docstring); `root` is the directory or URL of the store.

    The abstract methods are the operations every store implements; the others have a default here
    that a store overrides where it can do better (`get_ranges` concurrently) or where its medium has
    the capability (the in-place writes of handles, directories)."""

    # capabilities (see the module docstring)
    remote = False
    descriptors = False
    in_place_writes = False
    has_dirs = False
    conditional = False
    http = False

    def __init__(self, root):
        self.root = root
        self.stats = {"get": 0, "get_bytes": 0, "put": 0, "put_bytes": 0, "list": 0, "head": 0}
        self._stats_lock = forksafe.Lock()
        self._primed = {}

    # ---- objects
    @abc.abstractmethod
    def get(self, key):
        """The bytes of object `key` (`MissingError` when it does not exist)."""

    @abc.abstractmethod
    def get_range(self, key, start, end):
        """Bytes [start, end) of object `key` (b"" when end <= start); past its end, the bytes there
        are (object storage) or a `FormatError` naming the object (a local file)."""

    @abc.abstractmethod
    def put(self, key, data, if_match=None, if_none_match=False):
        """Write object `key` whole; the conditions where the store is ``conditional``.  Returns the
        new version, or None when the store does not tell it."""

    @abc.abstractmethod
    def put_atomic(self, key, data, parents=True, sync_dir=None):
        """Replace object `key` so that a reader sees the old or the new bytes (`parents`: make the
        missing directories first; `sync_dir`: whether to sync the directory after, where it has one)."""

    @abc.abstractmethod
    def delete(self, key, missing_ok=True):
        """Remove object `key`; one that does not exist is nothing to do (with ``missing_ok=False``,
        `FileNotFoundError` where the store can tell: S3 deletes without looking).  Other failures
        raise OSError."""

    @abc.abstractmethod
    def list(self, prefix="", etags=None, missing_ok=True):
        """{name: size} of the names directly under `prefix/` (size None for a directory or prefix);
        `etags`, a dict, receives {name: version} where the listing tells them.  A `prefix` that does
        not exist lists as {} (with ``missing_ok=False``, a store with directories raises
        FileNotFoundError); a directory that cannot be listed raises OSError."""

    def names(self, prefix="", missing_ok=True):
        """The names directly under `prefix/`, as `list` gives them, without their sizes."""
        return list(self.list(prefix, missing_ok=missing_ok))

    def plain_dirs(self, required, optional=()):
        """True when the root is a directory, each of `required` a directory that is no symbolic
        link, and each of `optional` that or missing: the common case, which the layouts' full
        checks (with their messages) then need not look at one by one.  False: ask them."""
        return False

    @abc.abstractmethod
    def exists(self, key):
        """Whether object (or directory) `key` exists."""

    @abc.abstractmethod
    def isdir(self, key=""):
        """Whether `key` is a directory (a prefix with names under it on object storage)."""

    @abc.abstractmethod
    def size(self, key):
        """The size of object `key` in bytes."""

    @abc.abstractmethod
    def version(self, key):
        """A value that changes when object `key` is replaced or changed, None when it does not exist
        (or cannot be told)."""

    @abc.abstractmethod
    def child(self, name):
        """The store rooted at `name` under this one (a ctable's column)."""

    @abc.abstractmethod
    def remove_all(self):
        """Remove the root and everything under it."""

    def holds_nothing(self):
        """True when nothing is stored at the root (no object under it, nor one named as it), told by
        one request; None when the store cannot tell it so (the caller asks its usual questions)."""
        return None

    # ---- handles: here an object read whole at open (one GET); a store with in-place writes has its own
    def open(self, key, how="r"):
        """A handle of file `key`: how='r' (every store), 'rw', 'new', 'trunc' (``in_place_writes``)."""
        if how not in ("r", "r_nofollow"):
            raise StorageError(f"cannot open '{self.where(key)}' for writing: objects are written whole")
        return _Fetched(self.get(key))

    def close(self, h):
        """Release handle `h`."""

    def pread(self, h, n, pos, where=None):
        """`n` bytes at `pos` of the file of handle `h` (fewer, or `FormatError` for a local file,
        past its end)."""
        return bytearray(h.data[pos:pos + n])

    def state(self, h):
        """A tuple of which item 1 is the file's size, that changes when the file does."""
        return ("object", len(h.data), 0)

    def _whole_objects(self, what):
        raise StorageError(f"cannot {what} in '{self.root}': its objects are written whole")

    def pwrite(self, h, data, pos, where=None):
        """Write `data` at `pos` (``in_place_writes`` only)."""
        self._whole_objects("write in place")

    def pwritev(self, h, bufs, pos, where=None):
        """Write the buffers `bufs` one after the other from `pos` (``in_place_writes`` only)."""
        self._whole_objects("write in place")

    def truncate(self, h, size):
        """Cut or extend the file of `h` to `size` bytes (``in_place_writes`` only)."""
        self._whole_objects("truncate a file")

    def datasync(self, h):
        """Make the bytes written through `h` durable (``in_place_writes`` only)."""
        self._whole_objects("sync a file")

    def start_writeback(self, h, pos, n):
        """Start writing bytes [pos, pos+n) to the medium (a hint: nothing where it cannot)."""

    # ---- what every store gets from the operations above
    def prime(self, key, data, uses):
        """Hand `data` (just read) to the next `uses` gets of `key` without asking the store again
        (the layers of an open each read meta/storage)."""
        self._primed[key] = [data, uses]

    def _take_primed(self, key):
        e = self._primed.get(key)
        if e is None:
            return None
        e[1] -= 1
        if e[1] <= 0:
            del self._primed[key]
        return e[0]

    def _count(self, kind, nbytes=None):
        with self._stats_lock:
            self.stats[kind] += 1
            if nbytes is not None:
                self.stats[kind + "_bytes"] += nbytes

    def where(self, key=""):
        """The path or URL of `key`, for messages."""
        return join(self.root, key) if key else self.root

    def get_ranges(self, requests):
        """[(key, start, end), ...] -> the bytes of each, in order (sequentially here)."""
        return [self.get_range(k, a, b) for k, a, b in requests]

    def get_many(self, keys):
        """{key: its bytes, or None when it does not exist} for whole objects (concurrently where
        the store can)."""
        out = {}
        for k in keys:
            try:
                out[k] = self.get(k)
            except MissingError:
                out[k] = None
        return out

    def escapes(self, key):
        """The real path of `key` when it is not a regular file inside the root (a symlink out of it,
        a directory...), else None (object stores have no links)."""
        return None

    def config(self):
        """Plain values from which `open_bytestore` rebuilds this store in another process."""
        return {"root": self.root}

    def syncs(self):
        """Whether writers make what they publish durable with syncs (`fileio.sync_enabled()` for local
        directories; object stores make each object durable when it is put)."""
        return False

    def create_dirs(self, names):
        """Make the root and the directories `names` under it, where the medium has directories."""

    def makedirs(self, key, exist_ok=False):
        """Make directory `key` and its parents, where the medium has directories."""

    def sync_dir(self, prefix=""):
        """Make the names under `prefix` durable, where the medium has directories."""

    def read_json(self, key, what):
        """The JSON value of object `key` (errors name it as `what`)."""
        return files.read_json(files.ObjectPath(self, key), what)

    def write_json(self, key, obj):
        """Replace object `key` with the JSON of `obj`, atomically."""
        files.write_json(files.ObjectPath(self, key), obj)

    def commit_json(self, key, obj, room=0):
        """Replace `key`, the commit point (meta/sizes), with the JSON of `obj`, atomically (`room`:
        see `files.commit_json`)."""
        self.write_json(key, obj)

    def ref(self, key):
        """What `files.read_json`/`write_json`/`exists` and `attrs` take for the file `key`."""
        return files.ObjectPath(self, key)

    def writer_guard(self, key):
        """How a writer detects another writer of this store (see `WriterGuard`); a no-op where a lock
        keeps writers apart (local directories: `blzarr.storage.locking`)."""
        return WriterGuard(self, key) if self.remote else LockedGuard(self, key)


class LocalStore(ByteStore):
    """A local directory, every operation through `blzarr.storage.fileio` (the layer the crash simulator
    records): replacement by `files.atomic_write` (temporary file, fsync, rename, fsync of the
    directory, as `fileio.sync_enabled()` says)."""

    has_dirs = True
    descriptors = True
    in_place_writes = True

    def __init__(self, root, durable=True):
        super().__init__(os.fspath(root))
        self.durable = durable      # False: a scratch directory (a spool), never synced
        self._paths = {}            # key -> its path: an open asks for the same few keys ~20 times
        self._paths_root = self.root

    def _p(self, key):
        if self._paths_root is not self.root:      # (a spool moves its root once)
            self._paths = {}
            self._paths_root = self.root
        p = self._paths.get(key)
        if p is None:
            if len(self._paths) > 4096:
                self._paths.clear()
            p = self._paths[key] = fileio.join(self.root, key) if key else self.root
        return p

    def where(self, key=""):
        """The local path of `key` (no URL to tell apart: the layouts ask it for every message path)."""
        return self._p(key)

    def moved_to(self, root):
        """The directory was renamed to `root` (a stage published by `blzarr.storage.intent`): name
        it there from now on.  Descriptors opened in it stay valid (they name inodes, not paths)."""
        self.root = os.fspath(root)

    def child(self, name):
        return LocalStore(self._p(name))

    def get(self, key):
        path = self._p(key)
        try:
            data = fileio.read_file(path)
        except FileNotFoundError:
            raise MissingError(f"'{path}' does not exist") from None
        except OSError as e:
            raise StorageError(f"cannot read '{path}': {e}") from None
        self._count("get", len(data))
        return data

    def get_range(self, key, start, end):
        path = self._p(key)
        try:
            fd = fileio.open(path, "r")
        except FileNotFoundError:
            raise MissingError(f"'{path}' does not exist") from None
        except OSError as e:
            raise StorageError(f"cannot read '{path}': {e}") from None
        try:
            data = bytes(fileio.pread(fd, max(0, end - start), start, path))
        finally:
            fileio.close(fd)
        self._count("get", len(data))
        return data

    def put(self, key, data, if_match=None, if_none_match=False):
        """(The conditions are not honoured here: local writers hold the directory's lock.)"""
        self.put_atomic(key, data)

    def put_atomic(self, key, data, parents=True, sync_dir=None):
        """Replace `key` (`files.atomic_write`: temporary file, fsync, rename, fsync of the directory
        unless `sync_dir` is False); `parents`: make missing directories first."""
        path = self._p(key)
        d = os.path.dirname(path)
        if parents and d and not fileio.isdir(d):
            try:
                fileio.makedirs(d, exist_ok=True)
            except OSError as e:
                raise StorageError(f"cannot create '{d}': {e}") from None
        files.atomic_write(path, bytes(data), fsync=self.syncs(), sync_dir=sync_dir)
        self._count("put", len(data))

    # ---- handles: OS descriptors, through fileio (the Cython readers take them directly)
    def open(self, key, how="r"):
        """A descriptor of `key` (FileNotFoundError/OSError as `fileio.open`)."""
        return fileio.open(self._p(key), how)

    def close(self, h):
        fileio.close(h)

    def pread(self, h, n, pos, where=None):
        return fileio.pread(h, n, pos, where)

    def pwrite(self, h, data, pos, where=None):
        fileio.pwrite(h, data, pos, where)

    def pwritev(self, h, bufs, pos, where=None):
        fileio.pwritev(h, bufs, pos, where)

    def start_writeback(self, h, pos, n):
        """Start writing bytes [pos, pos+n) to the disk (a hint; only where flushes sync)."""
        if self.durable and fileio.sync_enabled():
            fileio.start_writeback(h, pos, n)

    def truncate(self, h, size):
        fileio.truncate(h, size)

    def datasync(self, h):
        fileio.fdatasync(h)

    def state(self, h):
        """(inode, size, modification time) of the file behind handle `h`: it changes when the file does."""
        st = fileio.fstat(h)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def syncs(self):
        # inside a directory being created (files.NewTree) the syncs wait for its publication, which
        # syncs every file written there (meta/sizes publishes it)
        return self.durable and fileio.sync_enabled() and files.new_tree_of(self.root) is None

    def create_dirs(self, names):
        """Make the directories `names` under the root (the root too, if needed), each new; synced
        (the root and its parent) when writers sync."""
        for name in names:
            fileio.makedirs(self._p(name))
        tree = files.new_tree_of(self.root)
        if tree is not None:
            tree.made_dirs(*[self._p(name) for name in names])     # synced when it is published
        elif fileio.sync_enabled():
            fileio.fsync_dir(self.root)
            fileio.fsync_dir(os.path.dirname(os.path.abspath(self.root)))

    def makedirs(self, key, exist_ok=False):
        fileio.makedirs(self._p(key), exist_ok=exist_ok)

    def sync_dir(self, prefix=""):
        fileio.fsync_dir(self._p(prefix))

    def check_inside(self, keys):
        """Refuse (FormatError) a directory of `keys` that is a symlink leading out of the root: a
        writer would write outside it, a reader read another dataset.  One lstat each when none is
        a symlink."""
        for key in keys:
            path = self._p(key)
            if not os.path.islink(path):
                continue
            real = os.path.realpath(path)
            real_root = os.path.realpath(self.root)
            if os.path.commonpath([real, real_root]) != real_root:
                raise FormatError(f"'{path}' is a symbolic link to '{real}', outside '{self.root}': refused "
                                  "(every file of a dataset must be inside its root directory)")

    def escapes(self, key):
        """The real path of `key` when it is not a regular file inside the root (a symlink out of it,
        a directory...), else None."""
        # no symbolic link on the way from the root and a regular file at the end: inside, without
        # resolving every component of the root's own path (one lstat per component of `key`)
        try:
            parts = key.split("/")
            for i in range(1, len(parts)):
                if stat.S_ISLNK(os.lstat(self._p("/".join(parts[:i]))).st_mode):
                    break
            else:
                if stat.S_ISREG(os.lstat(self._p(key)).st_mode):
                    return None
        except OSError:
            pass
        real = os.path.realpath(self._p(key))
        real_root = os.path.realpath(self.root)
        if os.path.commonpath([real, real_root]) != real_root or not os.path.isfile(real):
            return real
        return None

    def read_json(self, key, what):
        return files.read_json(self._p(key), what)

    def write_json(self, key, obj):
        files.write_json(self._p(key), obj)

    def commit_json(self, key, obj, room=0):
        """meta/sizes: written over in place once it exists (`files.commit_json`: one sector, its size
        kept, one fdatasync), else replaced atomically."""
        files.commit_json(self._p(key), obj, room)

    def ref(self, key):
        return self._p(key)

    def delete(self, key, missing_ok=True):
        """(OSError as `os.remove`, FileNotFoundError only with ``missing_ok=False``.)"""
        try:
            fileio.unlink(self._p(key))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def plain_dirs(self, required, optional=()):
        # one stat of the root and one lstat of each key (an lstat tells a directory from a link)
        try:
            if not stat.S_ISDIR(os.stat(self.root).st_mode):
                return False
            for key in required:
                if not stat.S_ISDIR(os.lstat(self._p(key)).st_mode):
                    return False
        except (OSError, ValueError):
            return False
        for key in optional:
            try:
                if not stat.S_ISDIR(os.lstat(self._p(key)).st_mode):
                    return False
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                return False
        return True

    def names(self, prefix="", missing_ok=True):
        # the listing alone: `list` stats every name for its size
        try:
            names = fileio.listdir(self._p(prefix))
        except FileNotFoundError:
            if not missing_ok:
                raise
            return []
        self._count("list")
        return names

    def list(self, prefix="", etags=None, missing_ok=True):
        """(OSError as `os.listdir` when the directory cannot be listed.)"""
        d = self._p(prefix)
        try:
            names = fileio.listdir(d)
        except FileNotFoundError:
            if not missing_ok:
                raise
            return {}
        self._count("list")
        out = {}
        for n in names:
            p = os.path.join(d, n)
            try:
                out[n] = fileio.getsize(p) if fileio.isfile(p) else None
            except OSError:
                continue
        return out

    def exists(self, key):
        return fileio.exists(self._p(key))

    def isdir(self, key=""):
        return fileio.isdir(self._p(key))

    def size(self, key):
        try:
            return fileio.getsize(self._p(key))
        except OSError as e:
            raise StorageError(f"cannot stat '{self._p(key)}': {e}") from None

    def version(self, key):
        """(inode, size, modification time) of file `key`, None when it cannot be told."""
        try:
            st = os.stat(self._p(key))
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def remove_all(self):
        fileio.rmtree(self.root, ignore_errors=True)


class MemoryStore(ByteStore):
    """Objects in a dict of this process: {key: bytes}.  Nothing is durable; puts are atomic and
    conditional (a version counter stands for the ETag).  Its children share the dict."""

    conditional = True

    def __init__(self, root="memory", objects=None):
        super().__init__(root.rstrip("/"))
        self._objects = {} if objects is None else objects   # full key (root/key) -> (bytes, version)
        self._lock = forksafe.Lock() if objects is None else None
        self._counter = [0]

    def _k(self, key):
        return f"{self.root}/{key}" if key else self.root

    def child(self, name):
        c = MemoryStore(self._k(name.strip("/")), self._objects)
        c._lock, c._counter = self._lock, self._counter
        return c

    def _missing(self, key):
        return MissingError(f"'{self.where(key)}' does not exist")

    def get(self, key):
        entry = self._objects.get(self._k(key))
        if entry is None:
            raise self._missing(key)
        self._count("get", len(entry[0]))
        return entry[0]

    def get_range(self, key, start, end):
        entry = self._objects.get(self._k(key))
        if entry is None:
            raise self._missing(key)
        data = entry[0][start:max(start, end)]
        self._count("get", len(data))
        return data

    def put(self, key, data, if_match=None, if_none_match=False):
        k = self._k(key)
        with self._lock:
            entry = self._objects.get(k)
            if (if_match is not None and (entry is None or entry[1] != if_match)) or \
                    (if_none_match and entry is not None):
                raise ConcurrentWriterError(f"'{self.where(key)}' was changed by another writer (a "
                                            "conditional write was refused)")
            self._counter[0] += 1
            tag = f"v{self._counter[0]}"
            self._objects[k] = (bytes(data), tag)
        self._count("put", len(data))
        return tag

    def put_atomic(self, key, data, parents=True, sync_dir=None, **kwargs):
        return self.put(key, data, **kwargs)

    def delete(self, key, missing_ok=True):
        with self._lock:
            if self._objects.pop(self._k(key), None) is None and not missing_ok:
                raise self._missing(key)

    def list(self, prefix="", etags=None, missing_ok=True):
        self._count("list")
        base = self._k(prefix) + "/"
        out = {}
        for k, (data, tag) in list(self._objects.items()):
            if not k.startswith(base):
                continue
            name, sep, _ = k[len(base):].partition("/")
            if sep:
                out[name] = None
            else:
                out[name] = len(data)
                if etags is not None:
                    etags[name] = tag
        return out

    def exists(self, key):
        return self._k(key) in self._objects or self.isdir(key)

    def isdir(self, key=""):
        base = self._k(key) + "/"
        return any(k.startswith(base) for k in list(self._objects))

    def size(self, key):
        return len(self.get(key))

    def version(self, key):
        entry = self._objects.get(self._k(key))
        return None if entry is None else entry[1]

    def remove_all(self):
        base = self.root + "/"
        with self._lock:
            for k in [k for k in self._objects if k.startswith(base) or k == self.root]:
                del self._objects[k]



def _transient(e):
    """Whether an exception from fsspec is worth retrying (not a missing object, not a denial)."""
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(e, (ValueError, TypeError, KeyError)):
        return False
    return True


class FsspecStore(ByteStore):
    """Objects under a URL, through fsspec (s3fs for s3://, aiohttp for http(s)://, ...)."""

    remote = True

    def __init__(self, url, storage_options=None, fs=None):
        super().__init__(url.rstrip("/"))
        self.storage_options = dict(storage_options or {})
        if fs is None:
            fsspec = need("fsspec", f"opening '{url}'")
            try:
                fs, path = fsspec.core.url_to_fs(self.root, **self.storage_options)
            except ImportError as e:
                raise ImportError(f"opening '{url}' needs the fsspec backend of its protocol: {e}") from e
            except (ValueError, TypeError) as e:
                raise StorageError(f"cannot open '{url}': {e}") from None
        else:
            path = fs._strip_protocol(self.root)
        self.fs = fs
        self.path = path.rstrip("/")
        self.protocol = self.root.split("://", 1)[0]
        self.http = self.protocol in ("http", "https")
        # s3fs asks an object's size (one HEAD) before a whole GET unless told to read it in one go
        self._whole = {"max_concurrency": 1} if _takes(getattr(fs, "_cat_file", None), "max_concurrency") else {}
        # conditional PutObject: s3fs passes IfMatch/IfNoneMatch through to botocore (the s3fs that
        # knows mode='create' is new enough for a botocore that has them)
        self.conditional = self.protocol in ("s3", "s3a") and _takes(getattr(fs, "_pipe_file", None), "mode")
        # S3 through s3fs: an object's existence, version and size by one HeadObject (s3fs's `info`
        # lists the key as a prefix too when the HEAD finds nothing: two requests for a missing key)
        self.s3 = self.protocol in ("s3", "s3a") and hasattr(fs, "_call_s3")
        self.pins = None            # a reader's data objects, read with If-Match (readpins.ReadPins)

    def config(self):
        return {"root": self.root, "storage_options": self.storage_options}

    def __reduce__(self):
        return (FsspecStore, (self.root, self.storage_options))

    def _p(self, key):
        if not key:
            return self.root if self.http else self.path
        return (self.root if self.http else self.path) + "/" + key

    def child(self, name):
        return FsspecStore(join(self.root, name), self.storage_options, fs=self.fs)

    def read_pinned(self, commit_key, commit_raw, version=None):
        """From now on (a reader's open, which just read `commit_raw` from `commit_key`, at `version`
        of `readpins.read_commit`), GET the data objects listed only as listed (S3 and memory://:
        `readpins`; elsewhere nothing changes)."""
        kind = readpins._kind(self)
        if kind is not None:
            old = self.pins
            if old is not None and old.commit_key == commit_key and old.version is not None:
                version = old.version   # (opened again within one open: its first read is the one confirmed)
            self.pins = kind(self, commit_key, commit_raw, version)

    def _call(self, what, key, fn, *args, **kwargs):
        """fn(*args) with retries of transient failures; StorageError naming the URL otherwise."""
        wait = RETRY_WAIT
        conditional = bool(kwargs.keys() & {"IfMatch", "IfNoneMatch"})
        for attempt in range(RETRIES):
            try:
                return fn(*args, **kwargs)
            except Exception as e:        # fsspec backends raise many kinds (aiohttp, botocore...)
                if isinstance(e, StorageError):
                    raise
                if conditional:
                    # If-Match on an object another writer removed: refused as well (404)
                    if _precondition_failed(e) or (isinstance(e, FileNotFoundError) and "IfMatch" in kwargs):
                        raise ConcurrentWriterError(
                            f"'{self.where(key)}' was changed by another writer (the store refused a "
                            "conditional write): object storage has no lock, write a dataset from one "
                            "writer at a time") from None
                    if _not_implemented(e):
                        raise _NoConditions() from None
                if isinstance(e, FileNotFoundError):
                    raise MissingError(f"'{self.where(key)}' does not exist") from None
                if isinstance(e, PermissionError):
                    raise StorageError(f"access to '{self.where(key)}' denied: {e}") from None
                status = getattr(e, "status", None)       # aiohttp's answer of an HTTP server
                if "Credentials" in type(e).__name__:      # botocore's NoCredentialsError and kin
                    raise StorageError(f"access to '{self.where(key)}' denied: {type(e).__name__}: {e}") from None
                if status in (401, 403):
                    raise StorageError(f"access to '{self.where(key)}' denied (HTTP {status})") from None
                if status == 404:
                    raise MissingError(f"'{self.where(key)}' does not exist") from None
                if not _transient(e) or attempt == RETRIES - 1:
                    raise StorageError(f"cannot {what} '{self.where(key)}' "
                                       f"(after {attempt + 1} attempt(s)): {type(e).__name__}: {e}") from None
                time.sleep(wait)
                wait *= 2

    def get(self, key):
        data = self._take_primed(key)
        if data is not None:
            return data
        if self.pins is not None and self.pins.pinned(key):
            return self.pins.get(key)
        data = self._call("read", key, self.fs.cat_file, self._p(key), **self._whole)
        self._count("get", len(data))
        return data

    def get_range(self, key, start, end):
        if end <= start:
            return b""
        if self.pins is not None and self.pins.pinned(key):
            return self.pins.get(key, (start, end))

        def fetch():
            data = self.fs.cat_file(self._p(key), start=start, end=end)
            if len(data) != end - start:
                # a connection cut short: retried; a short object is the caller's to report
                size = self.fs.size(self._p(key))
                if size is not None and len(data) < min(end, size) - start:
                    raise ConnectionError(f"short read: {len(data)} of {end - start} bytes")
            return data
        data = self._call("read", key, fetch)
        self._count("get", len(data))
        return data

    def get_many(self, keys):
        if len(keys) <= 1 or self.http:
            return super().get_many(keys)
        if self.pins is not None and any(self.pins.pinned(k) for k in keys):
            mine = [k for k in keys if self.pins.pinned(k)]
            out = dict(zip(mine, self.pins.get_all([(k, None) for k in mine])))
            rest = [k for k in keys if k not in out]
            return {**out, **(self.get_many(rest) if rest else {})}
        paths = {self._p(k): k for k in keys}
        try:
            got = self.fs.cat(list(paths), on_error="return", **self._whole)
        except Exception:
            got = {}
        out = {}
        for p, k in paths.items():
            data = got.get(p)
            if isinstance(data, (bytes, bytearray)):
                self._count("get", len(data))
                out[k] = data
            else:
                try:                      # failed, missing or not answered: alone, with retries
                    out[k] = self.get(k)
                except MissingError:
                    out[k] = None
        return out

    def get_ranges(self, requests):
        if len(requests) <= 1:
            return [self.get_range(*r) for r in requests]
        if self.pins is not None and any(self.pins.pinned(k) for k, _, _ in requests):
            return self.pins.get_all([(k, (a, b)) for k, a, b in requests])
        paths = [self._p(k) for k, _, _ in requests]
        starts = [a for _, a, _ in requests]
        ends = [b for _, _, b in requests]
        try:
            out = self.fs.cat_ranges(paths, starts, ends, max_gap=None, on_error="return",
                                     batch_size=MAX_CONCURRENT) \
                if _takes_max_gap(self.fs) else self.fs.cat_ranges(paths, starts, ends, on_error="return")
        except Exception:
            out = [None] * len(requests)
        res = []
        for r, data in zip(requests, out):
            if isinstance(data, (bytes, bytearray)) and len(data) == r[2] - r[1]:
                self._count("get", len(data))
                res.append(data)
            else:
                res.append(self.get_range(*r))    # failed or short: alone, with retries and a clear error
        return res

    def put(self, key, data, if_match=None, if_none_match=False):
        """Write `key` whole; with `if_match` (an ETag) or `if_none_match`, only if the object is still
        that version (still absent), else `ConcurrentWriterError`, where the store can
        (``conditional``; elsewhere the conditions are left to the caller's checks).  Returns the
        new ETag, or None when the store does not tell it."""
        self._primed.pop(key, None)
        cond = {}
        if self.conditional and len(data) < CONDITIONAL_MAX:
            if if_match is not None:
                cond["IfMatch"] = if_match
            elif if_none_match:
                cond["IfNoneMatch"] = "*"
        if cond:   # one PutObject, not a multipart upload (which takes no If-Match in s3fs)
            cond["chunksize"] = CONDITIONAL_MAX
        try:
            out = self._call("write", key, self.fs.pipe_file, self._p(key), bytes(data), **cond)
        except _NoConditions:
            self.conditional = False      # an S3 compatible without conditional writes: checks only
            out = self._call("write", key, self.fs.pipe_file, self._p(key), bytes(data))
        self._count("put", len(data))
        tag = out.get("ETag") if isinstance(out, dict) else None
        tag = tag if isinstance(tag, str) else None
        if self.pins is not None:
            self.pins.wrote(key, tag, data)
        return tag

    def put_atomic(self, key, data, parents=True, sync_dir=None, **kwargs):
        """A put: object stores replace an object atomically (and have no directories to make or sync)."""
        return self.put(key, data, **kwargs)

    def delete(self, key, missing_ok=True):
        if self.pins is not None:
            self.pins.wrote(key, None, None)
        try:
            self._call("delete", key, self.fs.rm_file, self._p(key))
        except MissingError:
            if not missing_ok:
                raise

    def list(self, prefix="", etags=None, missing_ok=True):
        """{name: size} of the objects under `prefix`; `etags`, a dict, receives {name: ETag} of the
        objects whose listing tells it.  (Object storage cannot tell a missing prefix from an empty
        one: both list as {}.)"""
        self._count("list")
        try:
            entries = self._call("list", prefix, self.fs.ls, self._p(prefix), detail=True)
        except MissingError:
            return {}
        out = {}
        files = {}
        for e in entries:
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if e.get("type") == "directory":
                out[name] = None
            else:
                out[name] = e.get("size")
                files[name] = e
                tag = e.get("ETag") or e.get("etag")
                if etags is not None and isinstance(tag, str):
                    etags[name] = tag
        if etags is not None and self.pins is not None:
            self.pins.listed(prefix, files)
        if not self.http:
            self.fs.invalidate_cache(self._p(prefix))
        return out

    def find(self, prefix):
        """The keys (relative to the root) of every object at any depth under `prefix/`, sorted."""
        self._count("list")
        base = self._p(prefix).rstrip("/") + "/"
        try:
            paths = self._call("list", prefix, self.fs.find, base)
        except MissingError:
            return []
        self.fs.invalidate_cache(self._p(prefix))
        cut = len(self._p("")) + 1
        return sorted(p[cut:] for p in paths if p.startswith(base))

    def copy(self, src, dst):
        """Copy object `src` to `dst` on the server (no bytes through this process)."""
        self._primed.pop(dst, None)
        if self.pins is not None:
            self.pins.wrote(dst, None, None)
        self._call("write", dst, self.fs.copy, self._p(src), self._p(dst))
        self._count("put", 0)

    def info(self, key):
        """What the store tells of object `key` (size, ETag, LastModified); MissingError when there is
        none.  On S3 one HeadObject: a prefix is no object (`isdir` asks for prefixes)."""
        if self.s3 and key:
            return self._head(key)
        return self._fs_info(key)

    def _fs_info(self, key):
        self._count("head")
        if not self.http:
            self.fs.invalidate_cache(self._p(key))
        return self._call("stat", key, self.fs.info, self._p(key))

    def _s3_call(self, what, key, method, **kw):
        """One request of s3fs's client (`method`, botocore's arguments), on fsspec's loop, as `_call`."""
        from fsspec.asyn import sync
        return self._call(what, key, sync, self.fs.loop, self.fs._call_s3, method, **kw)

    def _head(self, key):
        self._count("head")
        bucket, k, _ = self.fs.split_path(self._p(key))
        out = self._s3_call("stat", key, "head_object", Bucket=bucket, Key=k)
        return {"ETag": out.get("ETag"), "LastModified": out.get("LastModified"),
                "size": out.get("ContentLength"), "name": f"{bucket}/{k}", "type": "file"}

    def exists(self, key):
        try:
            self.info(key)
            return True
        except MissingError:
            return False

    def isdir(self, key=""):
        try:
            return self._fs_info(key).get("type") == "directory"
        except MissingError:
            return False

    def size(self, key):
        return self.info(key).get("size")

    def version(self, key):
        """The object's ETag ("size:N" when the store gives none), None when it does not exist."""
        try:
            info = self.info(key)
        except MissingError:
            return None
        tag = info.get("ETag") or info.get("etag")
        return tag if tag is not None else f"size:{info.get('size')}"

    def holds_nothing(self):
        """On S3, one ListObjectsV2 of the names beginning with the root's key, '/' as delimiter: nothing
        is stored when neither the object named as the root nor the prefix root/ is among them (what
        `remove_all` would remove).  None elsewhere, or when the page ends before root/ would sort."""
        if not self.s3:
            return None
        bucket, key, _ = self.fs.split_path(self.path)
        key = key.rstrip("/")
        kw = {"Bucket": bucket, "Prefix": key, "Delimiter": "/"} if key else {"Bucket": bucket, "MaxKeys": 1}
        self._count("list")
        out = self._s3_call("list", "", "list_objects_v2", **kw)
        names = [c.get("Key") for c in out.get("Contents") or ()] + \
            [c.get("Prefix") for c in out.get("CommonPrefixes") or ()]
        if not key:
            return not names
        if key in names or key + "/" in names:
            return False
        # names come in order: a truncated page that ends before root/ would sort has not told it
        if out.get("IsTruncated") and not any(isinstance(n, str) and n > key + "/" for n in names):
            return None
        return True

    def remove_all(self):
        try:
            self.fs.rm(self._p(""), recursive=True)
        except FileNotFoundError:
            pass
        except Exception as e:
            raise StorageError(f"cannot remove '{self.root}': {e}") from None


class _NoConditions(Exception):
    """The store answered a conditional put with 'not implemented'."""


def _errors_of(e):
    """`e` and the exceptions it was raised from (s3fs wraps botocore's ClientError)."""
    seen = []
    while e is not None and len(seen) < 8:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _s3_error(e):
    """(error code, HTTP status) of a botocore ClientError, else (None, None)."""
    resp = getattr(e, "response", None)
    if not isinstance(resp, dict):
        return None, None
    code = (resp.get("Error") or {}).get("Code")
    status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code, status


def _precondition_failed(e):
    """Whether the store refused a conditional write (412; 409 when conditional writes collide)."""
    for x in _errors_of(e):
        code, status = _s3_error(x)
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
            return True
        if getattr(x, "status", None) == 412:
            return True
    return False


def _not_implemented(e):
    for x in _errors_of(e):
        code, status = _s3_error(x)
        if code == "NotImplemented" or status == 501:
            return True
    return False


class _Fetched:
    """The handle of an object read whole (`FsspecStore.open`)."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


class LockedGuard:
    """The writer guard of a store whose writers hold a lock (a local directory, `blzarr.storage.locking`):
    nothing to check, puts plain."""

    def __init__(self, store, key):
        self.store = store
        self.key = key
        self.seen = {}

    def created(self):
        pass

    def opened(self):
        pass

    def check(self):
        pass

    def active(self):
        return False

    def listed(self, prefix, etags):
        pass

    def forget(self, key):
        pass

    def put(self, key, data, seen, **kwargs):
        """Write data object `key` (`put_atomic` with `kwargs`)."""
        self.store.put_atomic(key, data, **kwargs)

    def commit(self, obj, room=0):
        """Write meta/sizes, the commit point."""
        self.store.commit_json(self.key, obj, room)


class WriterGuard:
    """How a writer detects another writer where there is no lock (object storage).

    It remembers the version tag (ETag) of `key` (meta/sizes, the commit point) as it last wrote or
    read it (taken before reading it), and of each data object as it last saw it (`seen`).  `check`
    (before uploads) refuses when meta/sizes changed meanwhile; where the store has conditional puts
    (``conditional``), every put is one: a data object only over the version seen (or only while
    absent), meta/sizes only if no other writer committed since (`commit`).  A refusal is a
    `ConcurrentWriterError` naming the object: two writers never silently interleave.  A writer that
    does not track what it saw (a dask partition writer: never `opened`) puts without conditions."""

    def __init__(self, store, key):
        self.store = store
        self.key = key
        self.etag = False           # False: not looked at (a reader, or not yet); None: no object
        self.seen = {}              # data object key -> its ETag as last seen (False: cannot tell)

    def active(self):
        return self.etag is not False

    def created(self):
        """A new dataset: there is no `key` yet."""
        self.etag = None

    def opened(self):
        """Opened to write: remember `key` as it is now (before reading it)."""
        if self.etag is False:
            self.etag = self.store.version(self.key)

    def check(self):
        if self.etag is False:
            return
        if self.store.version(self.key) != self.etag:
            raise ConcurrentWriterError(
                f"'{self.store.where(self.key)}' was changed by another writer since this one last wrote or "
                "read it: object storage has no lock, write a dataset from one writer at a time")

    def listed(self, prefix, etags):
        """ETags of the objects under `prefix` from a listing (what this writer saw)."""
        for name, tag in etags.items():
            self.seen.setdefault(f"{prefix}/{name}", tag)

    def forget(self, key):
        self.seen.pop(key, None)

    def conditions(self, seen):
        """The conditions of a put over an object last seen with ETag `seen` (None: absent, False:
        cannot tell)."""
        if self.etag is False or seen is False or not self.store.conditional:
            return {}
        if isinstance(seen, str) and not seen.startswith("size:"):
            return {"if_match": seen}
        return {"if_none_match": seen is None}

    def put(self, key, data, seen, **kwargs):
        """Upload data object `key` over the version `seen` (conditional where the store can)."""
        tag = self.store.put(key, data, **self.conditions(seen))
        self.seen[key] = tag if tag is not None else False

    def commit(self, obj, room=0):
        """Write meta/sizes, the commit point (conditional where the store can)."""
        raw = json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n"
        tag = self.store.put(self.key, raw, **self.conditions(self.etag))
        self.etag = tag if tag is not None else self.store.version(self.key)


def _takes_max_gap(fs):
    return _takes(fs.cat_ranges, "max_gap")


def _takes(fn, name):
    """Whether callable `fn` has a parameter `name`."""
    if fn is None:
        return False
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def open_bytestore(root, storage_options=None):
    """The byte store of `root`: a URL (fsspec) or a local directory (file:// too)."""
    if isinstance(root, ByteStore):
        return root
    root = local_path(os.fspath(root))
    if is_url(root):
        return FsspecStore(root, storage_options)
    if storage_options:
        raise ValueError(f"storage_options are for URLs; '{root}' is a local path")
    return LocalStore(root)


def overlaps(a, b):
    """Whether paths or URLs `a` and `b` name the same dataset or one holds the other, what a check
    that refuses a destination overlapping its source asks: URLs (either one) the same prefix or one
    below the other; local paths `intent.same_or_nested` (links, '..', trailing slashes resolved)."""
    a, b = os.fspath(a), os.fspath(b)
    if is_url(a) or is_url(b):
        a, b = a.rstrip("/"), b.rstrip("/")
        return a == b or a.startswith(b + "/") or b.startswith(a + "/")
    return intent.same_or_nested(a, b)


def occupied(path, storage_options=None):
    """Whether something is at `path`: what a check that refuses an existing destination asks.  A
    local path (file:// too): any file, directory or symbolic link, even a dangling one.  A URL: a
    carray or ctable, or any other object under its prefix (the objects of a table's creation that
    never committed are nothing: the next writer removes them); `os.path` knows nothing of URLs."""
    path = local_path(os.fspath(path))
    if not is_url(path):
        return os.path.lexists(path)
    store = open_bytestore(path, storage_options)
    if detect_store(store) is not None:
        return True
    return bool(store.list("")) and not creation_debris(store)


def find_objects(store):
    """(root URL, kind) of every carray/ctable at or below the root of `store`, in name order,
    not descending into them: the objects of a level before the levels below it (as `walk`).  A
    prefix holding an interrupted creation's objects (`files.creation_debris`) holds none."""
    kind = detect_store(store)
    if kind is not None:
        yield store.root, kind
        return
    if creation_debris(store):
        return
    yield from _below(store)


def _below(store):
    subs = []
    for name, size in sorted(store.list("").items()):
        if size is not None and not (store.remote and store.http and name.endswith("/")):
            continue
        child = store.child(name.rstrip("/"))
        kind = detect_store(child)
        if kind is not None:
            yield child.root, kind
        elif not creation_debris(child):     # (an interrupted creation's objects are no dataset)
            subs.append(child)
    for child in subs:
        yield from _below(child)
