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
import threading

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


# ------------------------------------------------------------------ directories being created
_new_trees = {}                 # absolute root -> NewTree
_new_trees_lock = threading.Lock()


class NewTree:
    """A directory this process is creating (a carray's, from its constructor to its first flush).

    Until that flush writes meta/sizes, which names the chunks, nothing in the directory is promised
    (a crash may leave it unopenable, never showing wrong values: meta/sizes comes last), and no
    reader can use it (it opens only with meta/sizes).  So its files are written in place, without
    temporary files and renames, and not synced one by one.  Writing meta/sizes (the first flush,
    after the store synced its chunk files) publishes the tree first: every file written through
    `atomic_write` is synced, then the new directories and the root's parent, once; meta/sizes is
    then written the usual way (a synced temporary file renamed, its directory synced).  Syncs
    issued in a row after all the writes cost about one journal commit, where a sync per file cost
    one each."""

    def __init__(self, root):
        self.root = os.path.abspath(os.fspath(root))
        self.files = {}             # paths written in place (ordered), synced by publish
        self.dirs = {}              # directories made inside the root, synced by publish

    def write(self, path, data):
        fileio.write_new(path, data)
        self.files[path] = None

    def made_dirs(self, *paths):
        for p in paths:
            self.dirs[os.path.abspath(p)] = None

    def publish(self, sync=None, synced_after=None):
        """Make everything written in the tree durable (files first, then the names: the deepest
        directories first, the root's parent last) and stop writing in place.  `synced_after`: a
        directory the caller syncs next anyway (meta/, after meta/sizes), not synced here."""
        self.close()
        if not (fileio.sync_enabled() if sync is None else sync):
            return
        for path in self.files:
            fd = fileio.open(path, "rw")
            try:
                fileio.fsync(fd)
            finally:
                fileio.close(fd)
        dirs = set(self.dirs) | {os.path.dirname(p) for p in self.files}
        dirs.add(self.root)
        dirs.add(os.path.dirname(self.root))
        dirs.discard(synced_after)
        for d in sorted(dirs, key=lambda d: -d.count(os.sep)):
            fileio.fsync_dir(d)

    def close(self):
        """Stop writing in place (without syncing: an abandoned creation)."""
        with _new_trees_lock:
            if _new_trees.get(self.root) is self:
                del _new_trees[self.root]


def new_tree(root):
    """Register `root`, a directory about to be created, as a `NewTree` and return it."""
    tree = NewTree(root)
    with _new_trees_lock:
        _new_trees[tree.root] = tree
    return tree


def new_tree_of(path):
    """The `NewTree` that `path` is inside (or is the root of), None when there is none."""
    if not _new_trees:
        return None
    p = os.path.abspath(os.fspath(path))
    while True:
        tree = _new_trees.get(p)
        if tree is not None:
            return tree
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


def atomic_write(path, data, fsync=False, sync_dir=None):
    """Replace `path` with `data` so that readers see either the old or the new content; with
    `fsync`, the content is durable before the rename, and (unless `sync_dir` is False: the caller
    syncs the directory later, once for many files) the rename before this returns.

    Inside a directory being created (`NewTree`) the file is written in place instead, and synced
    when the tree is published."""
    d = os.path.dirname(path) or "."
    tree = new_tree_of(path) if _new_trees else None
    if tree is not None:
        if os.path.basename(path) == SIZES_FILE:
            # meta/sizes names the chunks: everything else is durable first (its directory is
            # synced after its rename below, which makes the other names there durable too)
            tree.publish(synced_after=os.path.abspath(d) if fsync and sync_dir is not False else None)
        else:
            try:
                tree.write(path, data)
            except OSError as e:
                raise StorageError(f"cannot write '{path}': {e}") from None
            return
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
