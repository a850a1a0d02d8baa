"""The bcolz 1.x directory layout on disk: bytes and JSON in, bytes and JSON out.

    root/data/__N.blp   a 16-byte 'blpk' header (version 1, nchunks 1), then one Blosc chunk
    root/meta/sizes     JSON: shape, nbytes, cbytes
    root/meta/storage   JSON: dtype, cparams, chunklen, expectedlen, dflt
    root/__attrs__      JSON: user attributes

Metadata files are replaced atomically (write to a temporary file, then rename).
"""

import json
import os
import struct
import tempfile

from blzarr.errors import FormatError, StorageError

DATA_DIR = "data"
META_DIR = "meta"
SIZES_FILE = "sizes"
STORAGE_FILE = "storage"
ATTRS_FILE = "__attrs__"
ROOTDIRS_FILE = "__rootdirs__"
CHUNK_EXT = ".blp"

BLP_MAGIC = b"blpk"
BLP_HEADER_SIZE = 16
BLP_HEADER = BLP_MAGIC + bytes([1, 0, 0, 0]) + struct.pack("<q", 1)

# The largest meta JSON file blzarr agrees to parse: real ones are a few hundred bytes.
MAX_JSON_BYTES = 16 * 1024 * 1024

# Metadata files (meta/sizes, meta/storage, attributes, __rootdirs__) are written to a temporary file,
# fsync'ed, renamed over the old one, and their directory fsync'ed: after a crash or a power loss a
# reader finds the old or the new content, never an empty or partial file.  BLZARR_FSYNC=0 in the
# environment (or FSYNC = False) skips the two fsyncs, for scratch data.
FSYNC = os.environ.get("BLZARR_FSYNC", "1") != "0"


def _process_umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Files are created with the permissions a plain open() would give them (bcolz's): mkstemp's
# 0600 would hide a dataset from the other users of a shared directory.
_UMASK = _process_umask()


def _new_file_mode(path):
    try:
        return os.stat(path).st_mode & 0o7777   # replacing a file keeps its permissions
    except OSError:
        return 0o666 & ~_UMASK


def atomic_write(path, data, fsync=False):
    """Replace `path` with `data` so that readers see either the old or the new content."""
    d = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    except OSError as e:
        raise StorageError(f"cannot write '{path}': {e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), _new_file_mode(path))
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if fsync:
            _fsync_dir(d)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, StorageError):
            raise StorageError(f"cannot write '{path}': {e}") from None
        raise


def _fsync_dir(d):
    """Make a rename in directory `d` durable (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json(path, what="metadata"):
    """Parse a JSON file, raising FormatError / StorageError that name the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise StorageError(f"{what} file '{path}' does not exist") from None
    except OSError as e:
        raise StorageError(f"cannot read {what} file '{path}': {e}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise FormatError(f"{what} file '{path}' is larger than {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FormatError(f"{what} file '{path}' is not valid JSON: {e}") from None


def write_json(path, obj, fsync=None):
    atomic_write(path, json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n",
                 fsync=FSYNC if fsync is None else fsync)


class BcolzDir:
    """Files of one carray directory in the bcolz 1.x layout."""

    format = "bcolz"

    def __init__(self, rootdir):
        self.rootdir = os.fspath(rootdir)
        self.datadir = os.path.join(self.rootdir, DATA_DIR)
        self.metadir = os.path.join(self.rootdir, META_DIR)

    @classmethod
    def create(cls, rootdir):
        self = cls(rootdir)
        os.makedirs(self.datadir)
        os.makedirs(self.metadir)
        return self

    @staticmethod
    def holds_carray(rootdir):
        # exists, not isfile: an unreadable meta/storage is reported by its reader, naming it
        return os.path.exists(os.path.join(rootdir, META_DIR, STORAGE_FILE))

    def check_layout(self):
        # data/ is not required here: a carray without chunks has it empty, and copies that drop
        # empty directories (git, some archivers) lose it. A missing chunk file is reported when
        # the length needs it (check_chunk_files, read_chunk), and data/ is made again on write.
        for d, what in ((self.rootdir, "root"), (self.metadir, "meta")):
            if not os.path.isdir(d):
                raise StorageError(f"{what} directory '{d}' does not exist")
        if os.path.exists(self.datadir) and not os.path.isdir(self.datadir):
            raise StorageError(f"data directory '{self.datadir}' is not a directory")

    def chunk_path(self, n):
        return os.path.join(self.datadir, f"__{n}{CHUNK_EXT}")

    def read_chunk(self, n):
        """The Blosc chunk stored in data/__n.blp (the 'blpk' header checked, the chunk not decoded).

        Only the `ctbytes` its Blosc header announces are read: trailing bytes are not part of the
        chunk (bcolz ignores them too). A chunk that announces more bytes than the file holds is
        returned whole, for the codec's validation to report.
        """
        path = self.chunk_path(n)
        try:
            with open(path, "rb") as f:
                head = f.read(BLP_HEADER_SIZE + 16)
                if len(head) < BLP_HEADER_SIZE + 16:
                    raise FormatError(f"chunk file '{path}' is truncated ({len(head)} bytes)")
                if head[:4] != BLP_MAGIC:
                    raise FormatError(f"chunk file '{path}' does not start with 'blpk'")
                ctbytes = int.from_bytes(head[BLP_HEADER_SIZE + 12:], "little", signed=True)
                avail = os.fstat(f.fileno()).st_size - BLP_HEADER_SIZE
                want = ctbytes if 16 <= ctbytes <= avail else avail
                body = head[BLP_HEADER_SIZE:] + f.read(want - 16)
        except FileNotFoundError:
            raise StorageError(f"chunk file '{path}' is missing") from None
        except OSError as e:
            raise StorageError(f"cannot read chunk file '{path}': {e}") from None
        return body

    def check_chunk_files(self, n):
        """Raise StorageError naming the first of data/__0.blp ... __{n-1}.blp that is missing.

        One directory listing, so a corrupted meta/sizes that claims an absurd length fails at once
        instead of looking for billions of files.
        """
        if n <= 0:
            return
        try:
            names = set(os.listdir(self.datadir))
        except OSError as e:
            raise StorageError(f"cannot list data directory '{self.datadir}': {e}") from None
        for k in range(min(n, len(names) + 1)):
            if f"__{k}{CHUNK_EXT}" not in names:
                raise StorageError(
                    f"chunk file '{self.chunk_path(k)}' is missing (meta/sizes file "
                    f"'{self.meta_path(SIZES_FILE)}' implies {n} full chunk files)")

    def write_chunk(self, n, data):
        payload = BLP_HEADER + bytes(data)
        try:
            atomic_write(self.chunk_path(n), payload)
        except StorageError:
            # the first chunk of a directory whose empty data/ was lost: make it again
            if n != 0 or os.path.exists(self.datadir) or not os.path.isdir(self.metadir):
                raise
            os.makedirs(self.datadir, exist_ok=True)
            atomic_write(self.chunk_path(n), payload)

    def remove_chunk(self, n):
        try:
            os.remove(self.chunk_path(n))
        except FileNotFoundError:
            pass

    def remove_chunks_from(self, n):
        """Remove data/__k.blp for every k >= n."""
        if not os.path.isdir(self.datadir):
            return
        for name in os.listdir(self.datadir):
            if name.startswith("__") and name.endswith(CHUNK_EXT):
                try:
                    k = int(name[2:-len(CHUNK_EXT)])
                except ValueError:
                    continue
                if k >= n:
                    os.remove(os.path.join(self.datadir, name))

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
