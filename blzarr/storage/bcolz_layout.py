"""The bcolz 1.x directory layout on disk: one file per chunk.

    root/data/__N.blp   a 16-byte 'blpk' header (version 1, nchunks 1), then one Blosc chunk
    root/meta/sizes     JSON: shape, nbytes, cbytes
    root/meta/storage   JSON: dtype, cparams, chunklen, expectedlen, dflt
    root/__attrs__      JSON: user attributes

`BcolzDir` reads and writes the files of one directory through a byte store (`blzarr.storage.bytestore`: a
local directory, or object storage where each file is an object, a chunk file uploaded as it is
appended and meta/sizes at flush, so that a reader never counts a chunk object that is not there);
`BcolzChunks` is the sequence of a carray's full chunks over it, a few kept cached.  Metadata files
are replaced atomically.
"""

import errno
import os
import re
import secrets
import struct
from collections import OrderedDict

from blzarr.storage import fileio, objstats, rewrite
from blzarr.storage.bytestore import LocalStore
from blzarr.storage.chunk import chunk
from blzarr.storage.chunkstore import LayoutChunks
from blzarr.errors import FormatError, MissingError, ReadOnlyError, StorageError
from blzarr.storage.locking import first_write
from blzarr.storage.files import (ATTRS_FILE, DATA_DIR, IN_FLIGHT, META_DIR, SIZES_FILE, _new_file_mode,
                                  new_tree_of, reraise_write_error, sync_together)
from blzarr.runtime import forksafe

CHUNK_EXT = ".blp"

BLP_MAGIC = b"blpk"
BLP_HEADER_SIZE = 16
BLP_HEADER = BLP_MAGIC + bytes([1, 0, 0, 0]) + struct.pack("<q", 1)

# a staged rewrite of chunk N: data/.__N.blp.blzarr-new-<12 hex digits> (bcolz reads only __N.blp)
STAGE_TAG = ".blzarr-new-"
_STAGE_RE = re.compile(r"^\.__[0-9]+\.blp\.blzarr-new-[0-9a-f]{12}$")


def _is_stage_name(name):
    return bool(_STAGE_RE.match(name))


def _is_debris(name):
    return bool(_STAGE_RE.match(name) or rewrite.TMP_RE.match(name))


def apply_renames(rootdir, plan):
    """Complete the renames of a rewrite record's entry `plan` in the bcolz-layout directory `rootdir`
    (a staged file already renamed is skipped), durably."""
    data = os.path.join(rootdir, DATA_DIR)
    for n, name in sorted(plan.get("renames", {}).items(), key=lambda kv: int(kv[0])):
        if not _is_stage_name(name) or not str(n).isdigit():
            raise FormatError(f"the rewrite record of '{rootdir}' names the file {name!r} for chunk {n!r}")
        try:
            fileio.replace(os.path.join(data, name), os.path.join(data, f"__{int(n)}{CHUNK_EXT}"))
        except FileNotFoundError:
            pass        # renamed already
    if fileio.sync_enabled():
        fileio.fsync_dir(data)


rewrite.APPLY["bcolz"] = apply_renames

# compressed bytes of recently read chunks a BcolzChunks keeps in memory (per carray)
DISK_CACHE_BYTES = 32 * 1024 * 1024


def check_layout(store):
    """`BcolzDir.check_layout` of the directory of byte store `store` (an open asks it before it
    knows the layout)."""
    # data/ is not required here: a carray without chunks has it empty, and copies that drop
    # empty directories (git, some archivers) lose it. A missing chunk file is reported when
    # the length needs it (check_chunk_files, read_chunk), and data/ is made again on write.
    if not store.has_dirs:
        return False    # object stores have no directories: reading meta/storage tells a missing dataset
    if store.plain_dirs([META_DIR], [DATA_DIR]):
        return True     # (real directories, no links: every check below passes)
    for key, what in (("", "root"), (META_DIR, "meta")):
        if not store.isdir(key):
            raise StorageError(f"{what} directory '{store.where(key)}' does not exist")
    if store.exists(DATA_DIR) and not store.isdir(DATA_DIR):
        raise StorageError(f"data directory '{store.where(DATA_DIR)}' is not a directory")
    store.check_inside([META_DIR, DATA_DIR])
    return False


class BcolzDir:
    """Files of one carray directory in the bcolz 1.x layout, on a byte store (`blzarr.storage.bytestore`: a
    local directory by default, or object storage, where each file is an object written whole)."""

    format = "bcolz"

    opened_meta = {}        # the meta files an open just read (see blz.directory.open_store)

    def __init__(self, rootdir, bytestore=None):
        self.bytestore = bytestore if bytestore is not None else LocalStore(rootdir)
        self.rootdir = self.bytestore.root
        self.datadir = self.bytestore.where(DATA_DIR)
        self.metadir = self.bytestore.where(META_DIR)
        self._dir_unsynced = False       # chunk files renamed or removed since the last sync()
        self._unsynced = {}              # path -> None: chunk files created in place, not yet synced
        self._staged_unsynced = set()    # names of staged files whose bytes are not synced yet
        self._listing = None             # {name: size} of data/, listed once
        self._guard = self.bytestore.writer_guard(f"{META_DIR}/{SIZES_FILE}")
        self._checked = False            # no other writer seen since the last flush
        self._created = False            # made by this writer: no object existed before
        self._staged = {}                # chunk n -> its new file in data/, not yet renamed over it
        self._redirect = {}              # chunk n -> where a committed rewrite record puts it (readers)
        self._stale_record = None        # a rewrite record whose removal failed (rewrite.commit)

    @property
    def remote(self):
        return self.bytestore.remote

    @classmethod
    def create(cls, rootdir, bytestore=None):
        self = cls(rootdir, bytestore)
        self.bytestore.create_dirs([DATA_DIR, META_DIR])
        self._guard.created()
        self._created = True
        return self

    def _after_open_for_write(self):
        self._guard.opened()

    def moved_to(self, rootdir):
        """The directory this store wrote under a hidden name was renamed to `rootdir` (published):
        go on there (chunk files are opened per read: nothing else names the old path)."""
        self.bytestore.moved_to(rootdir)
        self.rootdir = self.bytestore.root
        self.datadir = self.bytestore.where(DATA_DIR)
        self.metadir = self.bytestore.where(META_DIR)

    def _check_sole_writer(self):
        """Before the first upload after a flush (where there is no lock): meta/sizes must be as this
        writer left it."""
        if self._checked or not self._guard.active():
            return
        self._guard.check()
        self._checked = True

    def check_layout(self):
        """Refuse a root, meta/ or data/ that is not a directory inside the root; True when each is a
        plain directory (or data/ missing), which the BLZ open then need not look at again."""
        return check_layout(self.bytestore)

    @staticmethod
    def _key(n):
        return f"{DATA_DIR}/__{n}{CHUNK_EXT}"

    def chunk_path(self, n):
        return self.bytestore.where(self._key(n))

    def _list(self):
        """{name: size} of the files in data/ (listed once, kept up to date by this writer)."""
        if self._listing is None:
            etags = {}
            try:
                self._listing = {name: size for name, size in
                                 self.bytestore.list(DATA_DIR, etags=etags, missing_ok=False).items()
                                 if size is not None}
                self._guard.listed(DATA_DIR, etags)
            except StorageError:
                raise
            except OSError as e:
                raise StorageError(f"cannot list data directory '{self.datadir}': {e}") from None
        return self._listing

    def _seen(self, name):
        """The ETag of chunk object `name` as this writer last saw it (None: absent, False: cannot
        tell), for a conditional put where there is no lock (a writer that did not create the
        dataset lists data/ once first)."""
        key = f"{DATA_DIR}/{name}"
        seen = self._guard.seen
        if key not in seen and self._listing is None and not self._created and self._guard.active():
            self._list()
        if key in seen:
            return seen[key]
        return False if self._listing is not None and name in self._listing else None

    def chunk_file_size(self, n):
        """The size of data/__n.blp, None when it cannot be told."""
        return self._list().get(f"__{n}{CHUNK_EXT}")

    def read_chunk(self, n):
        """The Blosc chunk stored in data/__n.blp (the 'blpk' header checked, the chunk not decoded).

        Only the `ctbytes` its Blosc header announces are read: trailing bytes are not part of the
        chunk (bcolz ignores them too). A chunk that announces more bytes than the file holds is
        returned whole, for the codec's validation to report.
        """
        key = self._key(n)
        mine = self._staged.get(n)
        staged = mine[0] if mine is not None else self._redirect.get(n)
        if staged is not None:
            try:
                # a rewrite not switched yet (this writer's), or one a committed record names whose
                # rename is not done yet (its file is at the final name once it is)
                h = self.bytestore.open(f"{DATA_DIR}/{staged}", "r_nofollow")
                key = None
            except FileNotFoundError:
                if n in self._staged:
                    raise MissingError(f"chunk file '{self.bytestore.where(DATA_DIR + '/' + staged)}' "
                                       "is missing") from None
        path = self.chunk_path(n)
        try:
            # a chunk file that is a symlink (to another array's chunk, say) is not this array's chunk
            if key is not None:
                h = self.bytestore.open(key, "r_nofollow")
        except FileNotFoundError:
            raise MissingError(f"chunk file '{path}' is missing") from None
        except StorageError:
            raise
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise FormatError(f"chunk file '{path}' is a symbolic link (to "
                                  f"'{os.path.realpath(path)}'): refused, a chunk file must be a regular "
                                  "file of this directory") from None
            raise StorageError(f"cannot read chunk file '{path}': {e}") from None
        try:
            size = self.bytestore.state(h)[1]
            if size < BLP_HEADER_SIZE + 16:
                raise FormatError(f"chunk file '{path}' is truncated ({size} bytes)")
            head = self.bytestore.pread(h, BLP_HEADER_SIZE + 16, 0, path)
            if head[:4] != BLP_MAGIC:
                raise FormatError(f"chunk file '{path}' does not start with 'blpk'")
            ctbytes = int.from_bytes(head[BLP_HEADER_SIZE + 12:], "little", signed=True)
            avail = size - BLP_HEADER_SIZE
            want = ctbytes if 16 <= ctbytes <= avail else avail
            body = bytes(head[BLP_HEADER_SIZE:]) + bytes(self.bytestore.pread(h, want - 16, BLP_HEADER_SIZE + 16, path))
        except OSError as e:
            raise StorageError(f"cannot read chunk file '{path}': {e}") from None
        finally:
            self.bytestore.close(h)
        return body

    def check_chunk_files(self, n):
        """Raise StorageError naming the first of data/__0.blp ... __{n-1}.blp that is missing.

        One directory listing, so a corrupted meta/sizes that claims an absurd length fails at once
        instead of looking for billions of files.
        """
        if n <= 0:
            return
        if self._listing is None and not self.bytestore.remote:
            # names only (one listdir of the local directory): the sizes, a stat per file, are listed
            # when they are needed (cbytes)
            try:
                names = set(fileio.listdir(self.datadir))
            except FileNotFoundError:
                names = set()
            except OSError as e:
                raise StorageError(f"cannot list data directory '{self.datadir}': {e}") from None
        else:
            names = self._list()
        if not names and self.bytestore.http:
            return      # a server that lists no directory: a missing chunk is reported when read
        for k in range(min(n, len(names) + 1)):
            if f"__{k}{CHUNK_EXT}" not in names:
                raise StorageError(
                    f"chunk file '{self.chunk_path(k)}' is missing (meta/sizes file "
                    f"'{self.meta_path(SIZES_FILE)}' implies {n} full chunk files)")

    def write_chunk(self, n, data):
        # A chunk file that does not exist yet is named by no meta/sizes (a committed one exists), so
        # it is written in place, unsynced: the flush syncs it with data/ in one barrier before
        # meta/sizes counts it (`sync`).  One that exists may be the committed short last chunk: it
        # is replaced through a synced temporary file, so that a crash leaves its old or new bytes.
        self._check_sole_writer()
        payload = BLP_HEADER + bytes(data)
        name = f"__{n}{CHUNK_EXT}"
        staged = self._staged.pop(n, None)
        if staged is not None:
            self._unlink_staged(staged[0])      # written over before it was switched
        self._dir_unsynced = True
        if self._create_new(n, payload):
            if self._listing is not None:
                self._listing[name] = len(payload)
            return
        try:
            # where there is no lock, a conditional put: refused when another writer replaced or created it
            self._guard.put(self._key(n), payload, self._seen(name), parents=False, sync_dir=False)
        except StorageError:
            # the first chunk of a directory whose empty data/ was lost: make it again
            if n != 0 or not self.bytestore.has_dirs or self.bytestore.exists(DATA_DIR) or not self.bytestore.isdir(META_DIR):
                raise
            self.bytestore.makedirs(DATA_DIR, exist_ok=True)
            if self.bytestore.syncs():
                self.bytestore.sync_dir("")
            self._guard.put(self._key(n), payload, self._seen(name), parents=False, sync_dir=False)
        if self._listing is not None:
            self._listing[name] = len(payload)

    def _create_new(self, n, payload):
        """Write data/__n.blp in place when no file has that name (True); False, nothing written,
        where that cannot be done (the file exists, data/ is missing, object storage, a directory
        being created, whose store writes every file in place already)."""
        store = self.bytestore
        if store.remote or not (store.has_dirs and store.in_place_writes) or new_tree_of(self.rootdir) is not None:
            return False
        path = self.chunk_path(n)
        try:
            fd = fileio.open(path, "new")       # the permissions of open(): umask applied
        except (FileExistsError, FileNotFoundError):
            return False
        except OSError as e:
            raise StorageError(f"cannot write '{path}': {e}") from None
        sync = store.syncs()
        try:
            # its bytes start their way to the disk now: the flush's barrier then finds them written
            fileio.fill(fd, payload, writeback=sync)
        except BaseException:
            reraise_write_error(path, path)     # (named by nothing: removed)
        if sync:
            self._unsynced[path] = None
        return True

    def _sync_files(self, with_dir):
        """One barrier (`files.sync_together`): the chunk files created in place and the staged files
        not synced yet, and data/ itself when `with_dir` (the names made or removed there)."""
        files = list(self._unsynced)
        files += [self.bytestore.where(f"{DATA_DIR}/{name}") for name in sorted(self._staged_unsynced)]
        dirs = [self.datadir] if with_dir and self.bytestore.syncs() and self.bytestore.isdir(DATA_DIR) else []
        if files or dirs:
            sync_together(files, dirs)
        self._unsynced.clear()
        self._staged_unsynced.clear()
        if dirs:
            self._dir_unsynced = False

    # ---- rewrites: a new file beside the chunk's, renamed over it at the next sync (rewrite.py)
    def can_stage(self, n=None):
        """Whether a rewrite of chunk n is staged (local directories, not one being created, whose
        files reach the disk when it is published; with `n`, only over a chunk file that exists)."""
        if not self.bytestore.has_dirs or self.bytestore.remote or new_tree_of(self.rootdir) is not None:
            return False
        return n is None or fileio.exists(self.chunk_path(n))

    def stage_chunk(self, n, data):
        """Write the new bytes of chunk n to a hidden file of data/ (synced when flushes sync), to be
        renamed over data/__n.blp by the next `sync` (`switch_pending`): until then readers, and a
        crash, see the old file."""
        self._check_sole_writer()
        payload = BLP_HEADER + bytes(data)
        final = self.chunk_path(n)
        name = f".__{n}{CHUNK_EXT}{STAGE_TAG}{secrets.token_hex(6)}"
        path = self.bytestore.where(f"{DATA_DIR}/{name}")
        fd = None
        try:
            try:
                fd = fileio.open(path, "new", 0o600)
            except FileNotFoundError:
                if n != 0 or self.bytestore.exists(DATA_DIR) or not self.bytestore.isdir(META_DIR):
                    raise
                self.bytestore.makedirs(DATA_DIR, exist_ok=True)    # an empty data/ lost by a copy
                fd = fileio.open(path, "new", 0o600)
            # synced with the flush's other files (`_sync_files`), before its rename
            fileio.fill(fd, payload, False, _new_file_mode(final))
        except BaseException:
            reraise_write_error(path, None if fd is None else path)
        IN_FLIGHT.add(os.path.abspath(path))
        old = self._staged.get(n)
        self._staged[n] = (name, len(payload))
        if self.bytestore.syncs():
            self._staged_unsynced.add(name)
        if old is not None:
            self._unlink_staged(old[0])

    def _unlink_staged(self, name):
        path = self.bytestore.where(f"{DATA_DIR}/{name}")
        IN_FLIGHT.discard(os.path.abspath(path))
        self._staged_unsynced.discard(name)
        try:
            fileio.unlink(path)
        except FileNotFoundError:
            pass

    def drop_staged(self, n=0):
        """Forget (and remove) the staged rewrites of chunks n and later."""
        for k in [k for k in self._staged if k >= n]:
            name = self._staged.pop(k)[0]
            self._dir_unsynced = True
            self._unlink_staged(name)

    def abandon_pending(self):
        """Forget (and remove) the staged rewrites: nothing may publish them."""
        self.drop_staged(0)

    def switch_units(self):
        """How many one-step switches the pending rewrites take (renames)."""
        return len(self._staged)

    def prepare_switch(self):
        """Make the staged files' names durable and return the plan of their renames (the rewrite
        record's entry of this directory), None when nothing is staged."""
        if not self._staged:
            return None
        self._sync_files(with_dir=True)     # the staged files' bytes and names, the new chunk files
        return {"layout": "bcolz", "renames": {str(n): name for n, (name, _) in sorted(self._staged.items())}}

    def switch_pending(self):
        """Rename every staged file over its chunk's file (each rename one step for readers), its
        bytes synced first."""
        if self._staged_unsynced:
            self._sync_files(with_dir=False)
        for n in sorted(self._staged):
            name, size = self._staged[n]
            path = self.bytestore.where(f"{DATA_DIR}/{name}")
            fileio.replace(path, self.chunk_path(n))
            IN_FLIGHT.discard(os.path.abspath(path))
            del self._staged[n]
            self._dir_unsynced = True
            if self._listing is not None:
                self._listing[f"__{n}{CHUNK_EXT}"] = size
            self._guard.forget(self._key(n))

    def sync(self, announce=None):
        """Switch the staged rewrites (more than one under a rewrite record, `blzarr.storage.rewrite`),
        then make the chunk files written, renamed or removed since the last sync durable.  A flush
        calls it before replacing meta/sizes.

        Serial rounds of syncs: with no rewrite staged, one (the files created in place and data/
        together); with one (the short last chunk's file), three (its bytes and the new files; the
        rename; data/)."""
        rewrite.clear_stale(self)
        if len(self._staged) > 1:
            plan = self.prepare_switch()
            rewrite.commit_store(self, rewrite.carray_record_path(self.rootdir), {rewrite.SELF: plan},
                                 self.switch_pending, announce)
        elif self._staged:
            self.switch_pending()
        if (self._dir_unsynced or self._unsynced) and self.bytestore.syncs():
            self._sync_files(with_dir=True)
        self._dir_unsynced = False

    def read_through(self, plan):
        """A reader: read the chunks a committed rewrite record switches where the record says."""
        self._redirect = {int(n): name for n, name in plan.get("renames", {}).items()
                          if isinstance(name, str) and _is_stage_name(name)}

    def remove_debris(self):
        """A writer's open (under the lock): remove the hidden files killed writes left in data/ and
        meta/ (temporary files of replacements, staged rewrites no record names)."""
        for sub in (DATA_DIR, META_DIR):
            d = self.bytestore.where(sub)
            try:
                names = fileio.listdir(d)
            except OSError:
                continue
            for name in names:
                if _is_debris(name) and os.path.abspath(os.path.join(d, name)) not in IN_FLIGHT:
                    try:
                        fileio.unlink(os.path.join(d, name))
                    except OSError:
                        pass

    def close(self):
        """Make the chunk files written in place durable (a dask partition writer's, whose caller
        writes meta/sizes next); nothing else to release: chunk files are opened per read."""
        if self._unsynced:
            self._sync_files(with_dir=True)

    def adopt(self, fresh):
        """Take, in place, the state of `fresh`, a store of the same directory opened just now (reads
        in flight hold no descriptor of this store: chunk files are opened per read)."""
        self.__dict__.update({k: v for k, v in fresh.__dict__.items() if k != "_first_write"})

    def read_chunk_file(self, n):
        """The whole file data/__n.blp (header included), or None when there is none."""
        try:
            return self.bytestore.get(self._key(n))
        except OSError:
            return None

    def restore_chunk_file(self, n, raw):
        """Put back data/__n.blp as `read_chunk_file` gave it."""
        self._check_sole_writer()
        self.drop_staged(n)
        name = f"__{n}{CHUNK_EXT}"
        self._dir_unsynced = True
        self._guard.put(self._key(n), raw, self._seen(name), parents=False, sync_dir=False)
        self._unsynced.pop(self.chunk_path(n), None)      # (replaced by a synced file)
        if self._listing is not None:
            self._listing[name] = len(raw)

    def stray_files(self, expected):
        """Names of the chunk files data/__k.blp with k >= `expected`, sorted as text."""
        self._listing = None
        return sorted(f for f in self._list() if f.endswith(CHUNK_EXT) and f.startswith("__")
                      and f[2:-len(CHUNK_EXT)].isdigit() and int(f[2:-len(CHUNK_EXT)]) >= expected)

    def remove_chunks_from(self, n):
        """Remove data/__k.blp for every k >= n."""
        self.drop_staged(n)
        if self.bytestore.has_dirs and not self.bytestore.isdir(DATA_DIR):
            return
        names = []
        # names only: a flush whose length ends on a chunk boundary comes here, and sizes would
        # cost a stat or two of every chunk file
        for name in self.bytestore.names(DATA_DIR, missing_ok=False):
            if name.startswith("__") and name.endswith(CHUNK_EXT):
                try:
                    k = int(name[2:-len(CHUNK_EXT)])
                except ValueError:
                    continue
                if k >= n:
                    names.append(name)
        if names:
            self._check_sole_writer()
        for name in names:
            self.bytestore.delete(f"{DATA_DIR}/{name}", missing_ok=False)
            self._unsynced.pop(self.bytestore.where(f"{DATA_DIR}/{name}"), None)
            self._guard.forget(f"{DATA_DIR}/{name}")
            self._dir_unsynced = True
            if self._listing is not None:
                self._listing.pop(name, None)

    def meta_path(self, name):
        return self.bytestore.where(f"{META_DIR}/{name}")

    def read_meta(self, name):
        """The JSON object in meta/`name` (a FormatError naming the file if it holds anything else)."""
        path = self.meta_path(name)
        obj = self.bytestore.read_json(f"{META_DIR}/{name}", f"meta/{name}")
        if not isinstance(obj, dict):
            raise FormatError(f"meta/{name} file '{path}' must hold a JSON object, not {type(obj).__name__}")
        return obj

    def write_meta(self, name, obj):
        if name != SIZES_FILE:
            self.bytestore.write_json(f"{META_DIR}/{name}", obj)
            return
        self._checked = False           # checked again at every flush, whatever the chunks saw
        self._check_sole_writer()
        if self._unsynced:
            self._sync_files(with_dir=True)     # never count a chunk file that is not durable
        # the commit point: where there is no lock, a conditional put (two writers never both commit)
        self._guard.commit(obj)
        self._checked = False

    @property
    def attrs_path(self):
        return self.bytestore.ref(ATTRS_FILE)

    def chunk_fingerprint(self, n):
        """(inode, size, modification time) of data/__n.blp; on object storage (n, 0, its version
        tag as a number), from the listing of data/ (made once) or this writer's put; None where
        the store cannot tell."""
        if not self.bytestore.remote:
            return self.bytestore.version(self._key(n))
        key = self._key(n)
        if key not in self._guard.seen and self._listing is None:
            try:
                self._list()
            except (StorageError, OSError):
                return None             # then the entry is not trusted: the chunk is read
        return objstats.object_fingerprint(n, 0, self._guard.seen.get(key))


class BcolzChunks(LayoutChunks):
    """The full chunks of an on-disk carray in the bcolz layout (a `ChunkStore`), read from their
    files on demand, a few kept cached."""

    format = "bcolz"

    def __init__(self, store, atom, chunklen, nchunks, mode, objects=False):
        self._init_fields(store, atom, chunklen, nchunks, objects)
        self.rootdir = store.rootdir
        self.mode = mode
        self._cache = OrderedDict()
        self._cache_bytes = 0
        self._lock = forksafe.Lock()
        store.check_chunk_files(nchunks)
        self._sizes = None          # compressed bytes of each chunk, from its file's size when asked

    def _file_cbytes(self, i):
        size = self.layoutdir.chunk_file_size(i)
        return max(size - 16, 0) if size is not None else 0

    def _chunk_sizes(self):
        if self._sizes is None:
            self._sizes = [self._file_cbytes(i) for i in range(self.nchunks)]
        return self._sizes

    @property
    def cbytes(self):
        return sum(self._chunk_sizes())

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
        path = self.layoutdir.chunk_path(i)
        return chunk.from_bytes(self.layoutdir.read_chunk(i), self.atom, expected_nbytes,
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
        if self._sizes is not None:
            del self._sizes[n:]

    def __setitem__(self, i, c):
        self._check_writable()
        if self.layoutdir.can_stage():
            self.layoutdir.stage_chunk(i, c.getdata())      # switched at the next sync (flush)
        else:
            self.layoutdir.write_chunk(i, c.getdata())
        self._forget(i)
        self._chunk_sizes()[i] = c.cbytes

    def append(self, c):
        self._check_writable()
        sizes = self._chunk_sizes()
        self.layoutdir.write_chunk(self.nchunks, c.getdata())
        self._forget(self.nchunks)
        sizes.append(c.cbytes)
        self.nchunks += 1

    def truncate(self, n):
        self._check_writable()
        for i in range(n, self.nchunks):
            self._forget(i)
        self.nchunks = n
        if self._sizes is not None:
            del self._sizes[n:]
        self.layoutdir.remove_chunks_from(n)

    def free_cachemem(self):
        with self._lock:
            self._cache.clear()
            self._cache_bytes = 0

    def _check_writable(self):
        if self.mode == "r":
            first_write(self.layoutdir)     # opened with mode 'a': the first write takes the lock
        if self.mode == "r":
            raise ReadOnlyError(f"cannot modify '{self.layoutdir.rootdir}': it was opened with mode 'r'")

    def rewrite_pending(self, i):
        return i in self.layoutdir._staged

    def drop_rewrite(self, i):
        if i not in self.layoutdir._staged and not self.layoutdir.can_stage():
            return False        # written in place (object storage, a directory being created)
        self._forget(i)
        staged = self.layoutdir._staged.pop(i, None)
        if staged is not None:      # (none: the write failed before it was staged)
            if self._sizes is not None and i < len(self._sizes):
                self._sizes[i] = self._file_cbytes(i)
            self.layoutdir._unlink_staged(staged[0])
        return True

    # the short last chunk, metadata, maintenance: see ChunkStore
    def put_last(self, n, data):
        if self.layoutdir.can_stage(n):
            self.layoutdir.stage_chunk(n, data)
        else:
            self.layoutdir.write_chunk(n, data)

    def remove_from(self, n):
        self.layoutdir.remove_chunks_from(n)

    def stored_last(self, n):
        return self.layoutdir.read_chunk_file(n)

    def undo_appends(self, n, last):
        self.forget_from(n)
        self.set_nchunks(n)
        if last is not None:
            self.layoutdir.restore_chunk_file(n, last)
        self.layoutdir.remove_chunks_from(n + (1 if last is not None else 0))

    def stray_files(self, expected):
        return self.layoutdir.stray_files(expected)

    def fingerprint(self, i):
        """(inode, size, modification time) of data/__i.blp: bcolz rewrites a chunk file in place,
        blzarr replaces it (a new inode)."""
        return self.layoutdir.chunk_fingerprint(i)

    def verify(self, expected_chunks):
        for i in range(self.nchunks):
            self.load(i, self.chunk_nbytes)
        return {"chunks": self.nchunks}
