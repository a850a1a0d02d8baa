"""The file discipline of every on-disk layout: names, atomic replacement, fsync order, JSON files.

Metadata files (meta/storage, attributes, __rootdirs__, a new meta/sizes) are written to a temporary
file, fsync'ed, renamed over the old one, and their directory fsync'ed: after a crash or a power loss
a reader finds the old or the new content, never an empty or partial file.  meta/sizes, rewritten by
every flush, is at most one disk sector: once it exists it is written over in place, its size kept
(`overwrite_sector`), which a disk applies whole or not at all, and fdatasync'ed; no temporary file,
rename or directory sync.  BLZARR_FSYNC=0 in the environment (or blzarr.defaults.fsync = False)
skips the syncs, for scratch data.  Every file operation goes through `blzarr.storage.fileio`, the I/O layer.
"""

import json
import os
import secrets
import stat
import sys
import threading
import time
import zlib

from blzarr import _syncpool
from blzarr.storage import fileio
from blzarr.errors import FormatError, MissingError, StorageError

DATA_DIR = "data"
META_DIR = "meta"
SIZES_FILE = "sizes"
STORAGE_FILE = "storage"
ATTRS_FILE = "__attrs__"
# the attributes file of the BLZ layout, in meta/
ATTRIBUTES_FILE = "attributes"
ROOTDIRS_FILE = "__rootdirs__"
# on object storage, the object a creation (a table's, or a carray's at a URL of its own) puts first and
# deletes once the dataset is committed (its __rootdirs__ or meta/storage written, that last): a prefix
# holding it and no carray or ctable holds only what an unfinished creation wrote, which
# `creation_debris` tells (docs/FORMAT.rst, "Creation marker")
CREATING_FILE = ".blzarr-creating"

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


def _after_fork_in_child():
    global _new_trees_lock
    _new_trees_lock = threading.Lock()  # a parent thread may have held it when the process forked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class NewTree:
    """A directory this process is creating (a carray's, from its constructor to its first flush).

    Until that flush writes meta/sizes, which names the chunks, nothing in the directory is promised
    (a crash may leave it unopenable, never showing wrong values: meta/sizes comes last), and no
    reader can use it (it opens only with meta/sizes, and the tree is built under a hidden name
    that a rename publishes after this).  So its files are written in place, without temporary
    files and renames, and not synced one by one.  Writing meta/sizes (the first flush) writes it in
    place too and publishes the tree: every file written through `atomic_write` or handed over by
    the store (`sync_later`: its chunk files), meta/sizes, the new directories and the root's
    parent are synced, once each, in one barrier (`sync_together`).  A root that a rename puts in
    place afterwards (`renamed`: a stage of `blzarr.storage.intent`, which syncs the parent after
    the rename) leaves its parent out: that later sync covers the root's name too.  Syncs issued together after all
    the writes cost about one journal commit, where a sync per file, in turn, cost one each."""

    def __init__(self, root, renamed=False):
        self.root = os.path.abspath(os.fspath(root))
        self.files = {}             # paths written in place (ordered), synced by publish
        self.dirs = {}              # directories made inside the root, synced by publish
        self.renamed = renamed      # published by a rename followed by a sync of the parent

    def write(self, path, data, writeback=True):
        # its bytes start their way to the disk at once: the barrier then finds them written (not
        # `writeback`: the barrier comes next, and syncs the file with the others in parallel)
        fileio.write_new(path, data, writeback=writeback and fileio.sync_enabled())
        self.files[path] = None

    def made_dirs(self, *paths):
        for p in paths:
            self.dirs[os.path.abspath(p)] = None

    def sync_later(self, path):
        """`path`, a file of the tree written by its store, is synced with the others by `publish`."""
        self.files[os.path.abspath(path)] = None

    def publish(self, sync=None):
        """Make everything written in the tree durable, in one barrier (`sync_together`: the files,
        the directories, the root's parent) and stop writing in place."""
        self.close()
        if not (fileio.sync_enabled() if sync is None else sync):
            return
        if isinstance(new_tree_of(os.path.dirname(self.root)), HeldTree):
            return                  # inside a directory built whole: its own barrier covers this one
        dirs = set(self.dirs) | {os.path.dirname(p) for p in self.files}
        dirs.add(self.root)
        if not self.renamed:
            dirs.add(os.path.dirname(self.root))
        sync_together(list(self.files), sorted(dirs, key=lambda d: -d.count(os.sep)))

    def close(self):
        """Stop writing in place (without syncing: an abandoned creation)."""
        with _new_trees_lock:
            if _new_trees.get(self.root) is self:
                del _new_trees[self.root]


class HeldTree(NewTree):
    """A directory built whole before anything in it is promised (a table made from a stream, moved
    into place only when complete; an interrupted build is removed): everything written inside,
    tables and columns included, is written in place and unsynced, and `finish` syncs every file and
    directory then in one barrier.  The meta/sizes files written inside publish nothing."""

    def publish(self, sync=None):
        pass

    def finish(self, sync=None, parent=True):
        """Make all the tree holds durable (one `sync_together` over what is there now; the root's
        parent too unless `parent` is False: a root that a rename followed by a sync of the parent
        publishes) and stop writing in place."""
        self.close()
        if not (fileio.sync_enabled() if sync is None else sync):
            return
        paths, dirs, todo = [], [], [self.root]
        while todo:
            d = todo.pop()
            dirs.append(d)
            # (the listing's entry types: no stat per file)
            with os.scandir(d) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        todo.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        paths.append(e.path)
        if parent:
            dirs.append(os.path.dirname(self.root))
        sync_together(paths, sorted(dirs, key=lambda d: -d.count(os.sep)))


def held_tree(root):
    """Register the existing directory `root` as a `HeldTree` and return it (`finish` it, or `close`
    it when the build is abandoned)."""
    tree = HeldTree(root)
    with _new_trees_lock:
        _new_trees[tree.root] = tree
    return tree


def fsync_path(path):
    """fsync the file `path` (opened for it)."""
    fd = fileio.open(path, "rw")
    try:
        fileio.fsync(fd)
    finally:
        fileio.close(fd)


def _os_io():
    """Whether file operations go to the operating system's own calls (not a recording or
    fault-injecting `fileio` implementation)."""
    return type(fileio.current()) is fileio.OsIO


def sync_together(paths, dirs=()):
    """fsync the files `paths` and the directories `dirs`: one barrier, after which all of them are
    durable (nothing is ordered between them: the caller publishes what they hold afterwards)."""
    _sync_all([(p, None, False) for p in paths], dirs)


def _sync_all(items, dirs=()):
    """One barrier over the files `items`, each ``(path, fd, data_only)``, and the directories `dirs`
    (synced best effort, as `fileio.fsync_dir` does).  `fd` is a descriptor of the file that this call
    owns and closes (None: the file is opened by path); `data_only`: an fdatasync is enough (the sync
    its writer would make itself), else fsync.

    With the operating system's own calls (`fileio.OsIO`) the syncs are issued at once, from the
    caller's thread and up to seven C threads kept between calls (`blzarr._syncpool`): a journaling
    file system then commits them together (ext4 makes one journal commit serve every fsync waiting
    for it), where one after the other each waited for its own.  While the interpreter finalizes,
    the caller's thread issues every sync itself.  A recording or fault-injecting `fileio`
    implementation gets them one after the other, in the order given (files, then directories), each
    file opened by path: the set of syncs, and what precedes and follows them, is the same.  The
    first failed sync of a file is raised (an OSError naming it) once every sync has returned."""
    opened = [fd for _, fd, _ in items if fd is not None]
    try:
        if not _os_io():
            for path, _, _ in items:
                fsync_path(path)
            for d in dirs:
                fileio.fsync_dir(d)
            return
        fds, flags, names = [], [], []
        for path, fd, data_only in items:
            if fd is None:
                fd = fileio.open(path, "rw")
                opened.append(fd)
            fds.append(fd)
            flags.append(data_only)
            names.append(path)
        for d in dirs:
            try:
                fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            except OSError:
                continue            # (not every platform can open a directory)
            opened.append(fd)
            fds.append(fd)
            flags.append(False)
            names.append(None)
        errs = _syncpool.sync_fds(fds, flags, serial=sys.is_finalizing())
        for err, name in zip(errs, names):
            if err and name is not None:
                raise OSError(err, os.strerror(err), name)
    finally:
        for fd in opened:
            try:
                os.close(fd)
            except OSError:
                pass


_barrier = threading.local()


class one_barrier:
    """A context in which the syncs that writers hand to `join_barrier` wait, and are made at its end
    together (one barrier, not one sync after the other).  A table's flush runs its columns' flushes
    in it, so that their files are synced at once.  Only syncs after which nothing is ordered inside
    the context may join (the caller orders what follows the context's end).  Nested contexts join
    the outer one.  The syncs are made also when the block raises (what was handed over is then
    durable, as it would have been without the context)."""

    def __enter__(self):
        self.outer = getattr(_barrier, "paths", None) is not None
        if not self.outer:
            _barrier.paths = {}
        return self

    def __exit__(self, kind, exc, tb):
        if self.outer:
            return False
        items, _barrier.paths = list(_barrier.paths.values()), None
        if kind is None:
            _sync_all(items)
        else:
            try:
                _sync_all(items)
            except BaseException:       # noqa: BLE001 - the block's own error is the one raised
                pass
        return False


def in_barrier():
    """Whether syncs handed to `join_barrier` now wait for the end of a `one_barrier` context."""
    return getattr(_barrier, "paths", None) is not None


def join_barrier(path, fd=None, owned=False):
    """Hand the sync of file `path` to the enclosing `one_barrier`: True, or False when there is none
    (the caller syncs it now; an `owned` descriptor stays the caller's).

    `fd`, an open descriptor of the file, lets the barrier sync it with fdatasync (the sync a writer
    makes itself) without opening the file again by path: the barrier syncs a duplicate of it, or,
    when `owned`, takes `fd` itself over (when True is returned the caller must not close an owned
    descriptor: the barrier closes it).  With a recording or fault-injecting `fileio` the file is
    synced by path at the barrier's end, as without `fd`."""
    paths = getattr(_barrier, "paths", None)
    if paths is None:
        return False
    key = _barrier_key(path)
    if type(fd) is int and _os_io():
        if key in paths and paths[key][1] is not None:
            if owned:
                os.close(fd)                        # the barrier syncs the file through the other one
            return True
        if paths.get(key) is not None:
            return _owned_left(fd, owned)           # joined by path already: synced by path
        paths[key] = (key, fd if owned else os.dup(fd), True)
        return True
    if key not in paths:
        paths[key] = (key, None, False)
    return _owned_left(fd, owned)


_absolute = {}      # absolute path -> its normalised form (a table's flush hands the same few paths per row)


def _barrier_key(path):
    """`path` as the key of a barrier's file: absolute and normalised.  An absolute path's form does not
    depend on the working directory, so it is remembered (a bounded dict; a relative one is not)."""
    path = os.fspath(path)
    key = _absolute.get(path)
    if key is None:
        key = os.path.abspath(path)
        if os.path.isabs(path) and isinstance(path, str):
            if len(_absolute) >= 4096:
                _absolute.clear()
            _absolute[path] = key
    return key


def _owned_left(fd, owned):
    if owned and fd is not None:
        fileio.close(fd)
    return True


def new_tree(root, renamed=False):
    """Register `root`, a directory about to be created, as a `NewTree` and return it (`renamed`:
    see `NewTree`)."""
    tree = NewTree(root, renamed)
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


# the temporary files (and staged chunk files) this process is writing: a writer's open, which
# removes the ones killed writes left, leaves these alone (another object of this process, sharing
# the directory's lock, is using them)
IN_FLIGHT = set()


def reraise_write_error(path, partial):
    """Called in the handler of a failed write of `path`: remove `partial`, the new file the write
    was filling (None when it made none), and raise the error again, an OSError as a StorageError
    naming `path`."""
    e = sys.exc_info()[1]
    if partial is not None:
        try:
            fileio.unlink(partial)
        except OSError:
            pass
    if isinstance(e, OSError) and not isinstance(e, StorageError):
        raise StorageError(f"cannot write '{path}': {e}") from None
    raise


def atomic_write(path, data, fsync=False, sync_dir=None):
    """Replace `path` with `data` so that readers see either the old or the new content; with
    `fsync`, the content is durable before the rename, and (unless `sync_dir` is False: the caller
    syncs the directory later, once for many files) the rename before this returns.

    Inside a directory being created (`NewTree`) the file is written in place instead, and synced
    when the tree is published."""
    d = os.path.dirname(path) or "."
    tree = new_tree_of(path) if _new_trees else None
    if tree is not None:
        sizes = (not isinstance(path, str) or path.endswith(SIZES_FILE)) and os.path.basename(path) == SIZES_FILE
        try:
            tree.write(path, data, writeback=not sizes)
        except OSError as e:
            raise StorageError(f"cannot write '{path}': {e}") from None
        if sizes:
            # meta/sizes, which names the chunks, is the tree's last file: one barrier makes them
            # all durable (a new tree is built under a hidden name that a rename publishes later, so
            # nothing needs meta/sizes to be a commit point before that rename)
            tree.publish()
        return
    mode = _new_file_mode(path)
    tmp = None
    try:
        for _ in range(100):
            tmp = os.path.join(d, f".tmp-{secrets.token_hex(6)}")
            IN_FLIGHT.add(os.path.abspath(tmp))
            try:
                fd = fileio.open(tmp, "new", 0o600)
                break
            except FileExistsError:
                IN_FLIGHT.discard(os.path.abspath(tmp))
                tmp = None
        else:
            raise FileExistsError(f"no free temporary name in '{d}'")
        fileio.fill(fd, data, fsync, mode)
        fileio.replace(tmp, path)
        if fsync if sync_dir is None else sync_dir:
            fileio.fsync_dir(d)
    except BaseException:
        reraise_write_error(path, tmp)
    finally:
        if tmp is not None:
            IN_FLIGHT.discard(os.path.abspath(tmp))


# A file of at most one sector written over in place at offset 0, its size unchanged, reaches the disk
# whole or not at all (disks write a 512-byte sector atomically; PostgreSQL's pg_control relies on
# the same), and needs no new block, name or size: an fdatasync makes it durable.
SECTOR = 512
# spaces a BLZ meta/sizes keeps before its newline when it is replaced (at least its text's length:
# the text then sits in the first half of the file, which a write cut in half still replaces whole)
SIZES_ROOM = 48
_LOCK_TRIES = 100           # flock attempts (0.5 ms apart) before giving up on a shared/exclusive lock


def _lock_briefly(fd, how):
    """Take the advisory lock `how` ('sh'/'ex') on `fd`, retrying for up to ~50 ms (the holder keeps
    it for one small read or write): True when held, None where there are no such locks (platform,
    file system), False when it could not be had."""
    for i in range(_LOCK_TRIES):
        got = fileio.flock(fd, how)
        if got is not False:
            return got
        time.sleep(0.0005)
    return False


def overwrite_sector(path, data, fsync):
    """Write `data` (ending with a newline) over the existing small file `path` in place, padded with
    spaces before the newline to the file's size, and fdatasync it when `fsync`; True when done.

    That is as safe as `atomic_write` only when the file is one regular file (no other hard link, not
    reached through a symbolic link)
    of at most `SECTOR` bytes, `data` fits its size (the size is never changed: the content is one
    sector written at offset 0) and the platform has flock; else nothing is written and False is
    returned (the caller replaces the file atomically).  `fsync="barrier"`: the fdatasync is handed
    to the enclosing `one_barrier` (`join_barrier`, through this call's descriptor), or made now
    when there is none.  The write is done under an exclusive flock
    of the file, which `read_json` takes shared, so that a reader in another process never sees it
    half done; where there are no flocks (platform, file system) the file is replaced atomically."""
    if not data.endswith(b"\n") or new_tree_of(path) is not None or os.path.islink(path):
        return False        # (a symbolic link: the rename replaces the link, as it always did)
    try:
        fd = fileio.open(path, "rw")
    except OSError:
        return False
    handed = False
    try:
        st = fileio.fstat(fd)
        size = st.st_size
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or not len(data) <= size <= SECTOR:
            return False
        if not _lock_briefly(fd, "ex"):
            return False
        try:
            fileio.pwrite(fd, data[:-1] + b" " * (size - len(data)) + b"\n", 0, path)
        finally:
            fileio.flock(fd, "un")
        if fsync == "barrier":
            handed = join_barrier(path, fd, owned=True)
            if not handed:
                fileio.fdatasync(fd)
        elif fsync:
            fileio.fdatasync(fd)
    except OSError as e:
        raise StorageError(f"cannot write '{path}': {e}") from None
    finally:
        if not handed:
            fileio.close(fd)
    return True


def overwrite(path, data):
    """Write `data` over the file `path` in place (created when missing) and cut it to that length:
    no temporary file, rename or sync.  For files whose readers detect a torn or stale content and
    then do without it (meta/stats: a checksum, fingerprints): a reader, a kill or a power loss may
    see it half written.  A file with other hard links, or a symbolic link, is replaced
    (`atomic_write`) instead."""
    tree = new_tree_of(path) if _new_trees else None
    if tree is not None or os.path.islink(path):
        atomic_write(path, data)
        return
    try:
        try:
            fd = fileio.open(path, "rw")
        except FileNotFoundError:
            fd = fileio.open(path, "trunc")
        try:
            st = fileio.fstat(fd)
            linked = st.st_nlink > 1 or not stat.S_ISREG(st.st_mode)
            if not linked:
                fileio.pwrite(fd, data, 0, path)
                if st.st_size > len(data):
                    fileio.truncate(fd, len(data))
        finally:
            fileio.close(fd)
    except OSError as e:
        if isinstance(e, StorageError):
            raise
        raise StorageError(f"cannot write '{path}': {e}") from None
    if linked:
        atomic_write(path, data)


def _read_shared(path, limit):
    """The first `limit` bytes of `path`, read under a shared flock (see `overwrite_sector`; when it
    cannot be had within ~50 ms the file is read anyway: a reader never waits long)."""
    fd = fileio.open(path, "r")
    try:
        locked = _lock_briefly(fd, "sh")
        try:
            # (a short read is the end: meta/sizes is a regular file written whole or over in place
            # under the exclusive lock)
            return fileio.read_upto(fd, limit, regular=True)
        finally:
            if locked:
                fileio.flock(fd, "un")
    finally:
        fileio.close(fd)


class ObjectPath:
    """A file of a byte store (`blzarr.storage.bytestore`, e.g. object storage), accepted by `read_json`,
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


_RAISE = object()


def read_json(path, what="metadata", missing=_RAISE):
    """Parse a JSON file, raising FormatError / StorageError that name the file; `missing`, when
    given, is returned for a file that does not exist (one open, no existence probe first)."""
    if isinstance(path, ObjectPath):
        try:
            raw = path.store.get(path.key)
        except MissingError:
            if missing is not _RAISE:
                return missing
            raise MissingError(f"{what} file '{path}' does not exist") from None
        return parse_json(raw, path, what)
    try:
        if (not isinstance(path, str) or path.endswith(SIZES_FILE)) and os.path.basename(path) == SIZES_FILE:
            raw = _read_shared(path, MAX_JSON_BYTES + 1)     # it may be written over in place
        else:
            raw = fileio.read_file(path, MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        if missing is not _RAISE:
            return missing
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


def json_bytes(obj):
    """The bytes blzarr writes for a JSON metadata file: ASCII JSON and a newline."""
    return json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n"


def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def checksummed_json(key, record):
    """The bytes of a record file: ``{key: record, "crc32": n}``, n the CRC-32 of the record's canonical
    JSON (sorted keys, no spaces)."""
    return json_bytes({key: record, "crc32": zlib.crc32(_canonical(record))})


def checked_record(raw, path, key, what):
    """The record of `checksummed_json` bytes `raw` (of file `path`), None when it is not a dict or its
    checksum does not match; FormatError naming the file when it is not JSON."""
    obj = parse_json(raw, path, what)
    rec = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(rec, dict) or obj.get("crc32") != zlib.crc32(_canonical(rec)):
        return None
    return rec


def write_json(path, obj, fsync=None):
    if isinstance(path, ObjectPath):
        path.store.put_atomic(path.key, json_bytes(obj))
        return
    atomic_write(path, json_bytes(obj), fsync=fileio.sync_enabled() if fsync is None else fsync)


def commit_json(path, obj, room=0):
    """Replace meta/sizes (the commit point of a flush) with the JSON of `obj`: written over in place
    when `overwrite_sector` can, else atomically (`write_json`), then with up to `room` spaces
    before its newline (room for the text to grow: the next commits are written over in place
    instead of through a temporary file, a rename and a directory sync)."""
    data = json_bytes(obj)
    sync = fileio.sync_enabled()
    if sync and getattr(_barrier, "paths", None) is not None and overwrite_sector(path, data, fsync="barrier"):
        return
    if not overwrite_sector(path, data, fsync=sync):
        room = max(0, min(max(room, len(data)) if room else 0, SECTOR - len(data)))
        atomic_write(path, data[:-1] + b" " * room + b"\n", fsync=sync)




def detect_store(store):
    """`detect` for a byte store (object storage): 'ctable', 'carray' or None."""
    if store.exists(f"{META_DIR}/{STORAGE_FILE}"):     # first: one request for a carray
        return "carray"
    if store.exists(ROOTDIRS_FILE):
        return "ctable"
    return None


def creation_debris(store):
    """Whether the prefix of `store`, which holds no carray or ctable (`detect_store` None), holds the
    objects of a creation that has not committed (its creation marker): nothing is stored there (yet),
    and the next writer with mode 'w' removes them."""
    return store.exists(CREATING_FILE)


def nothing_stored(store):
    """Why nothing opens at the prefix of `store`, which holds no carray or ctable, for an error that
    names it (one request more, on that path only)."""
    if creation_debris(store):
        return ("no carray or ctable is stored there yet: it holds only the objects of a creation that has "
                "not committed, in progress or interrupted (mode 'w', or the same creation run again, "
                "replaces them)")
    return "no carray or ctable is stored there"


def creation_marker(kind="ctable"):
    """The bytes of the creation marker of a `kind` (a small JSON object; only its presence matters)."""
    return json_bytes({"creating": kind, "version": 1})


def detect(path):
    """What the directory `path` holds: 'ctable' (a ``__rootdirs__`` file), 'carray' (a
    ``meta/storage`` file, in either layout) or None.  The one place this is decided.

    Only names are looked at: an unreadable or damaged metadata file is reported by its reader,
    naming it.
    """
    path = os.fspath(path)
    if not path:
        return None
    # (no probe of `path` itself first: below a missing path or a file nothing exists either)
    if fileio.exists(fileio.join(path, ROOTDIRS_FILE)):
        return "ctable"
    if fileio.exists(fileio.join(path, f"{META_DIR}/{STORAGE_FILE}")):
        return "carray"
    return None
