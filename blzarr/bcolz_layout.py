"""The bcolz 1.x directory layout on disk: one file per chunk.

    root/data/__N.blp   a 16-byte 'blpk' header (version 1, nchunks 1), then one Blosc chunk
    root/meta/sizes     JSON: shape, nbytes, cbytes
    root/meta/storage   JSON: dtype, cparams, chunklen, expectedlen, dflt
    root/__attrs__      JSON: user attributes

`BcolzDir` reads and writes the files of one directory; `BcolzChunks` is the sequence of a carray's
full chunks over it, a few kept cached.  Metadata files are replaced atomically (`files.atomic_write`).
"""

import os
import struct
import threading
from collections import OrderedDict

from blzarr import fileio
from blzarr.chunk import chunk
from blzarr.chunkstore import ChunkStore
from blzarr.errors import FormatError, ReadOnlyError, StorageError
from blzarr.files import ATTRS_FILE, DATA_DIR, META_DIR, SIZES_FILE, atomic_write, read_json, write_json

CHUNK_EXT = ".blp"

BLP_MAGIC = b"blpk"
BLP_HEADER_SIZE = 16
BLP_HEADER = BLP_MAGIC + bytes([1, 0, 0, 0]) + struct.pack("<q", 1)

# compressed bytes of recently read chunks a BcolzChunks keeps in memory (per carray)
DISK_CACHE_BYTES = 32 * 1024 * 1024


class BcolzDir:
    """Files of one carray directory in the bcolz 1.x layout."""

    format = "bcolz"

    def __init__(self, rootdir):
        self.rootdir = os.fspath(rootdir)
        self.datadir = os.path.join(self.rootdir, DATA_DIR)
        self.metadir = os.path.join(self.rootdir, META_DIR)
        self._dir_unsynced = False       # chunk files renamed or removed since the last sync()

    @classmethod
    def create(cls, rootdir):
        self = cls(rootdir)
        fileio.makedirs(self.datadir)
        fileio.makedirs(self.metadir)
        if fileio.sync_enabled():
            fileio.fsync_dir(self.rootdir)
            fileio.fsync_dir(os.path.dirname(os.path.abspath(self.rootdir)))
        return self

    def check_layout(self):
        # data/ is not required here: a carray without chunks has it empty, and copies that drop
        # empty directories (git, some archivers) lose it. A missing chunk file is reported when
        # the length needs it (check_chunk_files, read_chunk), and data/ is made again on write.
        for d, what in ((self.rootdir, "root"), (self.metadir, "meta")):
            if not os.path.isdir(d):
                raise StorageError(f"{what} directory '{d}' does not exist")
        if fileio.exists(self.datadir) and not os.path.isdir(self.datadir):
            raise StorageError(f"data directory '{self.datadir}' is not a directory")

    def chunk_path(self, n):
        return os.path.join(self.datadir, f"__{n}{CHUNK_EXT}")

    def chunk_file_size(self, n):
        """The size of data/__n.blp, None when it cannot be told."""
        try:
            return fileio.getsize(self.chunk_path(n))
        except OSError:
            return None

    def read_chunk(self, n):
        """The Blosc chunk stored in data/__n.blp (the 'blpk' header checked, the chunk not decoded).

        Only the `ctbytes` its Blosc header announces are read: trailing bytes are not part of the
        chunk (bcolz ignores them too). A chunk that announces more bytes than the file holds is
        returned whole, for the codec's validation to report.
        """
        path = self.chunk_path(n)
        try:
            fd = fileio.open(path, "r")
        except FileNotFoundError:
            raise StorageError(f"chunk file '{path}' is missing") from None
        except OSError as e:
            raise StorageError(f"cannot read chunk file '{path}': {e}") from None
        try:
            size = fileio.fstat(fd).st_size
            if size < BLP_HEADER_SIZE + 16:
                raise FormatError(f"chunk file '{path}' is truncated ({size} bytes)")
            head = fileio.pread(fd, BLP_HEADER_SIZE + 16, 0, path)
            if head[:4] != BLP_MAGIC:
                raise FormatError(f"chunk file '{path}' does not start with 'blpk'")
            ctbytes = int.from_bytes(head[BLP_HEADER_SIZE + 12:], "little", signed=True)
            avail = size - BLP_HEADER_SIZE
            want = ctbytes if 16 <= ctbytes <= avail else avail
            body = bytes(head[BLP_HEADER_SIZE:]) + bytes(fileio.pread(fd, want - 16, BLP_HEADER_SIZE + 16, path))
        except OSError as e:
            raise StorageError(f"cannot read chunk file '{path}': {e}") from None
        finally:
            fileio.close(fd)
        return body

    def check_chunk_files(self, n):
        """Raise StorageError naming the first of data/__0.blp ... __{n-1}.blp that is missing.

        One directory listing, so a corrupted meta/sizes that claims an absurd length fails at once
        instead of looking for billions of files.
        """
        if n <= 0:
            return
        try:
            names = set(fileio.listdir(self.datadir))
        except OSError as e:
            raise StorageError(f"cannot list data directory '{self.datadir}': {e}") from None
        for k in range(min(n, len(names) + 1)):
            if f"__{k}{CHUNK_EXT}" not in names:
                raise StorageError(
                    f"chunk file '{self.chunk_path(k)}' is missing (meta/sizes file "
                    f"'{self.meta_path(SIZES_FILE)}' implies {n} full chunk files)")

    def write_chunk(self, n, data):
        # durable: the file's bytes reach the disk before its name does (fsync before the rename);
        # the name itself is made durable by sync(), before meta/sizes counts the chunk
        payload = BLP_HEADER + bytes(data)
        sync = fileio.sync_enabled()
        self._dir_unsynced = True
        try:
            atomic_write(self.chunk_path(n), payload, fsync=sync, sync_dir=False)
        except StorageError:
            # the first chunk of a directory whose empty data/ was lost: make it again
            if n != 0 or fileio.exists(self.datadir) or not fileio.isdir(self.metadir):
                raise
            fileio.makedirs(self.datadir, exist_ok=True)
            if sync:
                fileio.fsync_dir(self.rootdir)
            atomic_write(self.chunk_path(n), payload, fsync=sync, sync_dir=False)

    def sync(self):
        """Make the chunk files written or removed since the last sync durable (their directory; their
        bytes were synced before their rename).  A flush calls it before replacing meta/sizes."""
        if self._dir_unsynced and fileio.sync_enabled() and fileio.isdir(self.datadir):
            fileio.fsync_dir(self.datadir)
        self._dir_unsynced = False

    def close(self):
        """Nothing to release: chunk files are opened per read."""

    def read_chunk_file(self, n):
        """The whole file data/__n.blp (header included), or None when there is none."""
        try:
            return fileio.read_file(self.chunk_path(n))
        except OSError:
            return None

    def restore_chunk_file(self, n, raw):
        """Put back data/__n.blp as `read_chunk_file` gave it."""
        self._dir_unsynced = True
        atomic_write(self.chunk_path(n), raw, fsync=fileio.sync_enabled(), sync_dir=False)

    def stray_files(self, expected):
        """Names of the chunk files data/__k.blp with k >= `expected`, sorted as text."""
        return sorted(f for f in fileio.listdir(self.datadir) if f.endswith(CHUNK_EXT) and f.startswith("__")
                      and f[2:-len(CHUNK_EXT)].isdigit() and int(f[2:-len(CHUNK_EXT)]) >= expected)

    def remove_chunks_from(self, n):
        """Remove data/__k.blp for every k >= n."""
        if not os.path.isdir(self.datadir):
            return
        for name in fileio.listdir(self.datadir):
            if name.startswith("__") and name.endswith(CHUNK_EXT):
                try:
                    k = int(name[2:-len(CHUNK_EXT)])
                except ValueError:
                    continue
                if k >= n:
                    fileio.unlink(os.path.join(self.datadir, name))
                    self._dir_unsynced = True

    def meta_path(self, name):
        return os.path.join(self.metadir, name)

    def read_meta(self, name):
        """The JSON object in meta/`name` (a FormatError naming the file if it holds anything else)."""
        path = self.meta_path(name)
        obj = read_json(path, f"meta/{name}")
        if not isinstance(obj, dict):
            raise FormatError(f"meta/{name} file '{path}' must hold a JSON object, not {type(obj).__name__}")
        return obj

    def write_meta(self, name, obj):
        write_json(self.meta_path(name), obj)

    @property
    def attrs_path(self):
        return os.path.join(self.rootdir, ATTRS_FILE)


class BcolzChunks(ChunkStore):
    """The full chunks of an on-disk carray in the bcolz layout (a `ChunkStore`), read from their
    files on demand, a few kept cached."""

    format = "bcolz"

    def __init__(self, store, atom, chunklen, nchunks, mode, objects=False):
        self._init_fields(store, atom, chunklen, nchunks, objects)
        self.rootdir = store.rootdir
        self.mode = mode
        self._cache = OrderedDict()
        self._cache_bytes = 0
        self._lock = threading.Lock()
        store.check_chunk_files(nchunks)
        self._sizes = [self._file_cbytes(i) for i in range(nchunks)]

    def _file_cbytes(self, i):
        size = self.store.chunk_file_size(i)
        return max(size - 16, 0) if size is not None else 0

    @property
    def cbytes(self):
        return sum(self._sizes)

    def _get(self, i):
        with self._lock:
            c = self._cache.get(i)
            if c is not None:
                self._cache.move_to_end(i)
                return c
        c = self.load(i, self.chunk_nbytes)
        with self._lock:
            self._cache[i] = c
            self._cache_bytes += c.cbytes
            while self._cache_bytes > DISK_CACHE_BYTES and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= old.cbytes
        return c

    def load(self, i, expected_nbytes):
        path = self.store.chunk_path(i)
        return chunk.from_bytes(self.store.read_chunk(i), self.atom, expected_nbytes,
                                where=f"chunk {i}, file '{path}'")

    def _forget(self, i):
        with self._lock:
            c = self._cache.pop(i, None)
            if c is not None:
                self._cache_bytes -= c.cbytes

    def forget_from(self, n):
        for i in range(n, self.nchunks):
            self._forget(i)

    def set_nchunks(self, n):
        self.nchunks = n
        del self._sizes[n:]

    def __setitem__(self, i, c):
        self._check_writable()
        self.store.write_chunk(i, c.getdata())
        self._forget(i)
        self._sizes[i] = c.cbytes

    def append(self, c):
        self._check_writable()
        self.store.write_chunk(self.nchunks, c.getdata())
        self._forget(self.nchunks)
        self._sizes.append(c.cbytes)
        self.nchunks += 1

    def truncate(self, n):
        self._check_writable()
        for i in range(n, self.nchunks):
            self._forget(i)
        self.nchunks = n
        del self._sizes[n:]
        self.store.remove_chunks_from(n)

    def free_cachemem(self):
        with self._lock:
            self._cache.clear()
            self._cache_bytes = 0

    def _check_writable(self):
        if self.mode == "r":
            raise ReadOnlyError(f"cannot modify '{self.store.rootdir}': it was opened with mode 'r'")

    # the short last chunk, metadata, maintenance: see ChunkStore
    def put_last(self, n, data):
        self.store.write_chunk(n, data)

    def remove_from(self, n):
        self.store.remove_chunks_from(n)

    def stored_last(self, n):
        return self.store.read_chunk_file(n)

    def undo_appends(self, n, last):
        self.forget_from(n)
        self.set_nchunks(n)
        if last is not None:
            self.store.restore_chunk_file(n, last)
        self.store.remove_chunks_from(n + (1 if last is not None else 0))

    def stray_files(self, expected):
        return self.store.stray_files(expected)

    def read_meta(self, name):
        return self.store.read_meta(name)

    def write_meta(self, name, obj):
        self.store.write_meta(name, obj)

    def meta_path(self, name):
        return self.store.meta_path(name)

    @property
    def attrs_path(self):
        return self.store.attrs_path

    def fingerprint(self, i):
        """(inode, size, modification time) of data/__i.blp: bcolz rewrites a chunk file in place,
        blzarr replaces it (a new inode)."""
        if getattr(self.store, "remote", False):
            return None
        try:
            st = os.stat(self.store.chunk_path(i))
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def sync(self):
        self.store.sync()

    def verify(self, expected_chunks):
        for i in range(self.nchunks):
            self.load(i, self.chunk_nbytes)
        return {"chunks": self.nchunks}
