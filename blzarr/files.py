"""The file discipline of every on-disk layout: names, atomic replacement, fsync order, JSON files.

Metadata files (meta/sizes, meta/storage, attributes, __rootdirs__) are written to a temporary file,
fsync'ed, renamed over the old one, and their directory fsync'ed: after a crash or a power loss a
reader finds the old or the new content, never an empty or partial file.  BLZARR_FSYNC=0 in the
environment (or blzarr.defaults.fsync = False) skips the two fsyncs, for scratch data.  Every file
operation goes through `blzarr.fileio`, the I/O layer.
"""

import json
import os
import secrets

from blzarr import fileio
from blzarr.errors import FormatError, MissingError, StorageError

DATA_DIR = "data"
META_DIR = "meta"
SIZES_FILE = "sizes"
STORAGE_FILE = "storage"
ATTRS_FILE = "__attrs__"
# the attributes file of the BLZ layout, in meta/
ATTRIBUTES_FILE = "attributes"
ROOTDIRS_FILE = "__rootdirs__"

# The largest meta JSON file blzarr agrees to parse: real ones are a few hundred bytes.
MAX_JSON_BYTES = 16 * 1024 * 1024



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


def atomic_write(path, data, fsync=False, sync_dir=None):
    """Replace `path` with `data` so that readers see either the old or the new content; with
    `fsync`, the content is durable before the rename, and (unless `sync_dir` is False: the caller
    syncs the directory later, once for many files) the rename before this returns."""
    d = os.path.dirname(path) or "."
    mode = _new_file_mode(path)
    tmp = None
    try:
        for _ in range(100):
            tmp = os.path.join(d, f".tmp-{secrets.token_hex(6)}")
            try:
                fd = fileio.open(tmp, "new", 0o600)
                break
            except FileExistsError:
                tmp = None
        else:
            raise FileExistsError(f"no free temporary name in '{d}'")
        try:
            fileio.fchmod(fd, mode)
            fileio.write(fd, data)
            if fsync:
                fileio.fsync(fd)
        finally:
            fileio.close(fd)
        fileio.replace(tmp, path)
        if fsync if sync_dir is None else sync_dir:
            fileio.fsync_dir(d)
    except BaseException as e:
        if tmp is not None:
            try:
                fileio.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, OSError) and not isinstance(e, StorageError):
            raise StorageError(f"cannot write '{path}': {e}") from None
        raise


def _fsync_dir(d):
    """Make a rename in directory `d` durable (best effort: not every platform can open a directory)."""
    fileio.fsync_dir(d)


class ObjectPath:
    """A file of a byte store (`blzarr.bytestore`, e.g. object storage), accepted by `read_json`,
    `write_json` and `exists` beside local paths; shown as its URL."""

    __slots__ = ("store", "key")

    def __init__(self, store, key):
        self.store = store
        self.key = key

    def __str__(self):
        return self.store.where(self.key)

    __format__ = lambda self, spec: format(str(self), spec)


def exists(path):
    """Whether the file `path` (local, or an `ObjectPath`) exists."""
    if isinstance(path, ObjectPath):
        return path.store.exists(path.key)
    return os.path.exists(path)


def read_json(path, what="metadata"):
    """Parse a JSON file, raising FormatError / StorageError that name the file."""
    if isinstance(path, ObjectPath):
        try:
            raw = path.store.get(path.key)
        except MissingError:
            raise MissingError(f"{what} file '{path}' does not exist") from None
        return parse_json(raw, path, what)
    try:
        raw = fileio.read_file(path, MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise StorageError(f"{what} file '{path}' does not exist") from None
    except OSError as e:
        raise StorageError(f"cannot read {what} file '{path}': {e}") from None
    return parse_json(raw, path, what)


def parse_json(raw, path, what="metadata"):
    """The JSON value in `raw` (the bytes of file `path`), FormatError naming the file otherwise."""
    if len(raw) > MAX_JSON_BYTES:
        raise FormatError(f"{what} file '{path}' is larger than {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FormatError(f"{what} file '{path}' is not valid JSON: {e}") from None


def write_json(path, obj, fsync=None):
    if isinstance(path, ObjectPath):
        path.store.put_atomic(path.key, json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n")
        return
    atomic_write(path, json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n",
                 fsync=fileio.sync_enabled() if fsync is None else fsync)




def detect_store(store):
    """`detect` for a byte store (object storage): 'ctable', 'carray' or None."""
    if store.exists(f"{META_DIR}/{STORAGE_FILE}"):     # first: one request for a carray
        return "carray"
    if store.exists(ROOTDIRS_FILE):
        return "ctable"
    return None


def detect(path):
    """What the directory `path` holds: 'ctable' (a ``__rootdirs__`` file), 'carray' (a
    ``meta/storage`` file, in either layout) or None.  The one place this is decided.

    Only names are looked at: an unreadable or damaged metadata file is reported by its reader,
    naming it.
    """
    path = os.fspath(path)
    if not fileio.isdir(path):
        return None
    if fileio.exists(os.path.join(path, ROOTDIRS_FILE)):
        return "ctable"
    if fileio.exists(os.path.join(path, META_DIR, STORAGE_FILE)):
        return "carray"
    return None
