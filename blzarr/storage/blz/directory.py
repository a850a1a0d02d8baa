"""The BLZ directory layout: checksummed superchunk files with lazy block reads (docs/FORMAT.rst).

    root/data/__1__.bin, __2__.bin ...   superchunk files, `superchunklen` chunks each
    root/meta/sizes                      JSON: shape, nbytes, cbytes
    root/meta/storage                    JSON: dtype, cparams, chunklen, dflt, expectedlen, plus
                                         "format": "blz", "checksum", "superchunklen", "reserve"
    root/meta/attributes                 JSON: user attributes
    root/meta/vlmeta                     variable-length metalayers (compressed; rewritten on update)

`BlzDir` is the store of one directory, made of one part per job, each in its own module:

    format.py       the file format: names, a file's header, metadata section and offsets table
    cache.py        the caches (descriptors, file states, chunk headers, chunks) and their bounds
    read.py         reads: whole chunks verified and cached, ranges of blocks read lazily
    write.py        write placement: append, rewrite in place or relocate; removing chunks
    repair.py       repair after a killed writer, holes, compaction, verification
    metalayers.py   fixed-length and variable-length metalayers

Every file operation goes through the directory's byte store (`self.bytestore`, `blzarr.storage.bytestore`: a
local directory by default, through `blzarr.storage.fileio`), superchunk files through handles of the store
`spool` names (`self._fio`: the byte store itself where files change in place; a local spool uploaded
whole on object storage).  How the superchunk files are read is chosen by what the byte store declares:
`self._reads` is `local.FileReads` where its handles are OS descriptors (`ByteStore.descriptors`: the
hot reads pass them to `_superchunk` directly), `remote.RangedReads` on any other store (ranged
requests; a file at hand in the spool through descriptors).  The directory's reads delegate to it.
A writer without a lock (object storage) is guarded by `bytestore.WriterGuard` (`self._guard`).

Here: creating and opening a directory, its names, the metadata files, the picklable config; `BlzChunks`,
the sequence of a carray's full chunks over a `BlzDir` (a `ChunkStore`); `LazyChunk`, one chunk read on
demand.
"""

import ast
import json
import os
import threading
from collections import OrderedDict

import numpy as np

from blzarr import _superchunk as sc
from blzarr.storage.bcolz_layout import BcolzDir, check_layout
from blzarr.storage.bytestore import LocalStore, open_bytestore
from blzarr.storage.chunk import blosc_typesize, chunk
from blzarr.storage.chunkstore import LayoutChunks, auto_superchunklen
from blzarr.errors import ENVIRONMENT_ERRNOS, BlzarrError, ChunkError, FormatError, ReadOnlyError, StorageError
from blzarr.storage.locking import first_write
from blzarr.storage import fileio, rewrite
from blzarr.storage.files import (ATTRIBUTES_FILE, DATA_DIR, META_DIR, SECTOR, SIZES_FILE, SIZES_ROOM, fsync_path,
                                  in_barrier, join_barrier, json_bytes, new_tree_of, one_barrier,
                                  overwrite_sector, read_json)
from blzarr.runtime.parallel import codec_threads
from blzarr.runtime import forksafe
from blzarr.storage.spool import writes_for
# the parts of BlzDir; the names other modules and tests import from blzarr.storage.blz.directory stay importable here
from blzarr.storage.blz.cache import CHUNK_CACHE_BYTES, HEAD_CACHE_BYTES, BlzCaches, _LRU
from blzarr.storage.blz.format import (FORMAT, SUPERCHUNK_EXT, BlzFileFormat, _coerce_reserve, _encode,  # noqa: F401
                               _File, _Where, superchunk_name)
from blzarr.storage.blz.metalayers import (VLMETA_FILE, VLMETA_MAGIC, BlzMetalayers, FixedMeta, MetalayerError,  # noqa: F401
                             VLMeta)
from blzarr.storage.blz.read import BlzReads
from blzarr.storage.blz import sizes as sizes_record
from blzarr.storage.blz.local import FileReads
from blzarr.storage.blz.remote import RangedReads
from blzarr.storage.blz.repair import BlzMaintenance
from blzarr.storage.blz.write import BlzWrites

DEFAULT_CHECKSUM = "crc32"


def apply_offsets(rootdir, plan):
    """Complete the offsets switch of a rewrite record's entry `plan` in the BLZ directory `rootdir`:
    write the entries and the header fields it names into each superchunk file, durably."""
    for fno, ent in sorted(plan.get("files", {}).items(), key=lambda kv: int(kv[0])):
        path = os.path.join(rootdir, DATA_DIR, superchunk_name(int(fno)))
        fd = fileio.open(path, "rw")
        try:
            h = sc.unpack_header(sc.pread(fd, 32, 0, path), path)
            table_pos = 32 + h["meta_size"]
            for slot, pos in ent["slots"].items():
                fileio.pwrite(fd, sc.pack_i64(int(pos)), table_pos + 8 * int(slot), path)
            fileio.pwrite(fd, sc.pack_header(h["checksum"], h["typesize"], h["chunk_size"], int(ent["last_chunk"]),
                                             int(ent["nchunks"]), h["meta_size"]), 0, path)
            if fileio.sync_enabled():
                fileio.fdatasync(fd)
        finally:
            fileio.close(fd)


rewrite.APPLY[FORMAT] = apply_offsets


def _read_storage(rootdir):
    """(layout, JSON object) of the directory's meta/storage (no "format" key means bcolz)."""
    path = fileio.join(os.fspath(rootdir), f"{META_DIR}/storage")
    storage = read_json(path, "meta/storage")
    if not isinstance(storage, dict):
        raise FormatError(f"meta file '{path}' must hold a JSON object")
    fmt = storage.get("format", "bcolz")
    if fmt not in ("bcolz", FORMAT):
        raise FormatError(f"'{path}': unknown format {fmt!r} (this blzarr reads 'bcolz' and 'blz')")
    return fmt, storage


def detect_format(rootdir):
    """'blz' or 'bcolz': what the directory's meta/storage says (no "format" key means bcolz)."""
    return _read_storage(rootdir)[0]


def open_store(rootdir, mode="a"):
    """The store of an existing carray directory, of whichever layout it holds.  A writer (`mode` not
    'r', under the directory's lock) first completes what a rewrite record names and removes what
    killed writes left (`blzarr.storage.rewrite`); a reader reads through a record.

    The meta files the open read are left on the store as `opened_meta` ({name: JSON object}) for
    the carray opening it, which pops them (and does not read them again)."""
    store = LocalStore(rootdir)
    plain = check_layout(store)
    plan = None
    if mode != "r":
        rewrite.recover_carray(rootdir)
    else:
        plan = rewrite.plan_for(rootdir)
    fmt, storage = _read_storage(rootdir)
    if fmt == FORMAT:
        # (the byte store the layout was just checked through)
        d = BlzDir.open(rootdir, mode, store, storage=storage, checked="plain" if plain else True,
                        overlay=plan)
    else:
        d = BcolzDir(rootdir, store)
        d.opened_meta = {"storage": storage}
        if plan is not None:
            d.read_through(plan)
    if mode != "r":
        d.remove_debris()
    return d


def _dtype_or_none(text):
    """The dtype a meta/storage or superchunk metadata string names (structured ones as their list
    form, read without eval), or None."""
    if not isinstance(text, str):
        return None
    try:
        return np.dtype(text)
    except Exception:  # noqa: BLE001 - NumPy's parser raises several kinds (SyntaxError too)
        pass
    try:
        return np.dtype(ast.literal_eval(text))
    except Exception:  # noqa: BLE001
        return None


class BlzDir(BlzReads, BlzWrites, BlzMaintenance, BlzMetalayers, BlzFileFormat, BlzCaches):
    """The files of one carray directory in the BLZ layout."""

    format = FORMAT
    opened_meta = {}        # see `open_store`

    def __init__(self, rootdir, mode="a", bytestore=None):
        self.bytestore = bytestore if bytestore is not None else LocalStore(rootdir)
        # how superchunk files are changed (in place, or in a local spool uploaded whole: `spool`),
        # and the store whose handles they are read and written through
        self._writes = writes_for(self.bytestore)
        self._fio = self._writes.files
        # how the superchunk files are read: positioned reads of descriptors, or ranged requests
        self._reads = FileReads() if self.bytestore.descriptors else RangedReads()
        self._upload_on_close = False       # a partition writer publishes its file when closed
        self.rootdir = self.bytestore.root
        self.datadir = self.bytestore.where(DATA_DIR)
        self.metadir = self.bytestore.where(META_DIR)
        self._guard = self.bytestore.writer_guard(f"{META_DIR}/{SIZES_FILE}")
        self.mode = mode
        self._lock = forksafe.RLock()
        self._fds = OrderedDict()
        self._files = OrderedDict()
        self._heads = _LRU(HEAD_CACHE_BYTES)
        self._chunks = _LRU(CHUNK_CACHE_BYTES)
        self._ctbytes = {}
        self._fps = {}                      # chunk -> fingerprint, of the chunks written lately
        self._writeback = {}                # file number -> end of the bytes whose writeback started
        self._touched = OrderedDict()
        self._inuse = {}                    # descriptor -> reads using it outside the lock
        self._retired = {}                  # descriptor dropped while borrowed -> the store closing it
        self._local = threading.local()
        self.stats = {"appended": 0, "inplace": 0, "relocated": 0}
        self._unsynced = set()              # superchunk files appended to since the last sync()
        # rewrites whose offsets entry is switched at the next sync(): file number -> (its pinned
        # state, {slot: (offset, end) of the bytes the file's table still names: never written})
        self._pending = {}
        self._pending_cut = {}              # file number -> size to cut it to once they are switched
        self._dir_unsynced = False          # superchunk files removed since the last sync()
        self._damaged = {}                  # file number -> why its chunks cannot be read
        self._no_writes = {}                # file number -> why nothing may be written to it
        self._counted = 0                   # chunks meta/sizes counts (a repair never drops them)
        self._first_write = None            # opened with mode 'a': the owner's locking.FirstWrite
        self._stale_record = None           # a rewrite record whose removal failed (rewrite.commit)
        self._overlay = None                # a reader's: file number -> (slot -> offset, nchunks,
                                            # last_chunk) a committed rewrite record switches
        # the chunks meta/sizes does not hold its writer to: rewrites of chunk `_free_from` and later,
        # in the files that existed at that commit, need no sync between their bytes and their
        # offsets switch (see `sync`); None: every rewrite is ordered
        self._free_from = None
        self._free_files = 0
        self._sizes_last = None             # (chunk, offset, nbytes) meta/sizes names as its short last
        self._own_overlay = False           # `_overlay` holds that chunk (a crash left another entry)
        self._sizes_len = None              # the length the committed meta/sizes counts
        self._with_sizes = None             # file number synced with the next meta/sizes, in one barrier
        self._joined = False                # ... in the enclosing `files.one_barrier` (a table's flush)
        self._joined_alone = None           # file number `sizes_with_chunks` may make `_with_sizes`
        self._fallback_sizes = None         # meta/sizes as its "prev" (its chunk did not reach the disk)
        self._sizes_unsure = False          # meta/sizes not known durable: a record of this boot, or
                                            # "plain" (synced by a writer's open, `_commit_fallback`)
        self._plain_sizes = None            # the commit of the one-barrier record this writer wrote
                                            # last, without the record's keys, or of the plain
                                            # meta/sizes it wrote and synced last (`settle_sizes`)
        self._plain_durable = False         # ... synced when it was written (or by the table's
                                            # barrier it was written in, `sizes_synced`)
        self._sizes_in_barrier = False      # the last meta/sizes was written in a table's barrier
        self.record_prev = None             # meta/sizes is a record of another boot, verified: the
                                            # length of its "prev" (`_resolved_sizes`)

    # ------------------------------------------------------------------ creation / opening
    @classmethod
    def create(cls, rootdir, *, dtype, atom_shape, chunklen, typesize, chunk_nbytes, cparams,
               checksum=DEFAULT_CHECKSUM, reserve=0, superchunklen=None, meta=None, bytestore=None):
        """A new, empty BLZ directory (one superchunk file with no chunks)."""
        cid = sc.checksum_id(checksum)
        reserve = _coerce_reserve(reserve)
        if superchunklen is None:
            superchunklen = auto_superchunklen(chunk_nbytes)
        if isinstance(superchunklen, bool) or not isinstance(superchunklen, (int, np.integer)) \
                or not 1 <= superchunklen <= 1 << 24:
            raise ValueError(f"superchunklen must be an int between 1 and {1 << 24}, got {superchunklen!r}")
        if not 1 <= typesize <= 255:
            typesize = 1
        meta = dict(meta or {})
        for k, v in meta.items():
            if not isinstance(k, str):
                raise TypeError(f"metalayer names must be strings, got {k!r}")
            _encode(v)
        self = cls(rootdir, "a", bytestore)
        self._make_dirs()
        self.checksum_id = cid
        self.cksize = sc.checksum_size(cid)
        self.reserve = reserve
        self.superchunklen = int(superchunklen)
        self.typesize = int(typesize)
        self.chunk_nbytes = int(chunk_nbytes) if chunk_nbytes > 0 else -1
        self._fixed = {"format": FORMAT, "dtype": dtype, "chunkshape": [int(chunklen)] + list(atom_shape),
                       "cparams": cparams, "superchunklen": self.superchunklen, "checksum": sc.CHECKSUMS[cid][0],
                       "reserve": reserve, "meta": meta}
        self.nfiles = 0
        self._nphys = 0
        self._new_file(1)
        # meta/storage: the carray writes it, with everything it knows (dflt, expectedlen...)
        return self

    def _check_dtype(self, storage, where, f1):
        """meta/storage's dtype must be the one the superchunk files were written with (in their
        metadata, and its Blosc typesize in their header): another one of the same item size would
        read every value wrongly and silently."""
        fixed_dtype = f1.meta_json["dtype"]
        theirs = _dtype_or_none(fixed_dtype)
        if theirs is None:
            raise FormatError(f"superchunk file '{f1.path}': cannot understand dtype {fixed_dtype!r}")
        if "dtype" in storage:
            ours = _dtype_or_none(storage["dtype"])
            if ours != theirs:
                raise FormatError(f"{where}: dtype {storage['dtype']!r} disagrees with the dtype "
                                  f"{fixed_dtype!r} that '{f1.path}' was written with")
        want = 1 if theirs.kind == "O" else blosc_typesize(theirs)
        if not 1 <= want <= 255:
            want = 1
        if f1.header["typesize"] != want:
            raise FormatError(f"superchunk file '{f1.path}': header typesize {f1.header['typesize']} "
                              f"does not fit its dtype {fixed_dtype!r} (typesize {want})")

    @classmethod
    def open(cls, rootdir, mode="a", bytestore=None, storage=None, checked=False, overlay=None):
        """The store of the BLZ directory `rootdir`; `storage`: its meta/storage, when just read;
        `checked`: its layout was just checked (`BcolzDir.check_layout`, which checks the same
        directories and links but data/; "plain": it found data/ a directory that is no link, or
        missing, which the listing then tells); `overlay`: a committed rewrite record's entry to
        read through (a reader)."""
        self = cls(rootdir, mode, bytestore)
        if overlay is not None:
            self.read_through(overlay)
        plain = checked == "plain"
        if not checked:
            self.check_layout()
        elif not plain:
            self._check_data_dir()
        if storage is None:
            storage = self.read_meta("storage")
        where = f"'{self.meta_path('storage')}'"
        nums = self._reads.list_files(self, plain)
        if not nums:
            raise FormatError(f"BLZ directory '{self.rootdir}' has no superchunk file data/__1__.bin")
        if nums != list(range(1, len(nums) + 1)):
            have = set(nums)   # a hostile name such as __99999999999__.bin must not make a huge range
            missing = [k for k in range(1, len(nums) + 2) if k not in have]
            if nums[-1] > 2 * len(nums) + 16:
                raise FormatError(f"BLZ directory '{self.rootdir}': superchunk files {missing[:5]} are missing")
            # damage stays where it is: the chunks of a missing file are unreadable, the others not
            for k in range(1, nums[-1]):
                if k not in have:
                    self._damaged[k] = f"superchunk file '{self._path(k)}' is missing"
        self.nfiles = nums[-1]
        f1 = self._first_file(nums)
        fixed = f1.meta_json
        for key in ("dtype", "chunkshape", "cparams", "superchunklen", "checksum", "meta"):
            if key not in fixed:
                raise FormatError(f"superchunk file '{f1.path}': metadata lacks {key!r}")
        self._fixed = fixed
        superchunklen = fixed["superchunklen"]
        if not isinstance(superchunklen, int) or isinstance(superchunklen, bool) or not 1 <= superchunklen <= 1 << 24:
            raise FormatError(f"superchunk file '{f1.path}': bad superchunklen {superchunklen!r}")
        self.superchunklen = superchunklen
        self.checksum_id = f1.header["checksum"]
        self.cksize = f1.header["checksum_size"]
        self.typesize = f1.header["typesize"]
        self.chunk_nbytes = f1.header["chunk_size"]
        try:
            self.reserve = _coerce_reserve(fixed.get("reserve", 0))
        except ValueError as e:
            raise FormatError(f"superchunk file '{f1.path}': {e}") from None
        if sc.CHECKSUMS[self.checksum_id][0] != fixed["checksum"]:
            raise FormatError(f"superchunk file '{f1.path}': header checksum id {self.checksum_id} "
                              f"disagrees with metadata {fixed['checksum']!r}")
        self._check_dtype(storage, where, f1)
        for key, mine in (("superchunklen", superchunklen), ("checksum", fixed["checksum"])):
            if key in storage and storage[key] != mine:
                raise FormatError(f"{where}: {key} {storage[key]!r} disagrees with '{f1.path}' ({mine!r})")
        chunklen = storage.get("chunklen")
        if chunklen is not None and fixed["chunkshape"][:1] != [chunklen]:
            raise FormatError(f"{where}: chunklen {chunklen} disagrees with the chunk shape "
                              f"{fixed['chunkshape']} in '{f1.path}'")
        self._counted = self._sizes_chunks(storage)
        last = None
        if self.nfiles not in self._damaged:
            try:
                # the state `_first_file` just read, when that is the last file (no second fstat)
                last = f1 if self.nfiles == f1.fno else self._load_file(self.nfiles)
            except (FormatError, StorageError) as e:
                if getattr(e, "errno", None) in ENVIRONMENT_ERRNOS:
                    raise
                self._damaged[self.nfiles] = str(e)
        if last is not None and overlay is None:
            last = self._take_sizes_last(storage, last)
        if last is not None:
            self._nphys = (self.nfiles - 1) * superchunklen + last.nchunks
        else:
            # the last file cannot be read: it holds what meta/sizes counts there (those chunks raise)
            self._nphys = min(max(self._counted, (self.nfiles - 1) * superchunklen), self.nfiles * superchunklen)
        self._reads.check_full_files(self)
        if mode != "r":
            self._commit_fallback()
            self._repair()          # (which may rewrite meta/sizes: read it again)
            if self._own_overlay:   # the repair wrote it into the file
                self._overlay, self._own_overlay = None, False
            self.opened_meta = {}
        else:
            self.opened_meta = dict(self.opened_meta, storage=storage)
        return self

    def _take_sizes_last(self, storage, last, sizes=None):
        """Read meta/sizes' ``"last"`` (the short last chunk's committed position; `sizes`: that file,
        else the one the open read).  When the last file's offsets entry names other bytes (a crash
        kept a switch of a flush that did not commit, or a writer beside this reader switched since
        that meta/sizes), the chunk is read where meta/sizes says, and the file's chunks stop after
        it; returns the last file's state."""
        if sizes is None:
            sizes = self.opened_meta.get("sizes")
        got = sizes.get("last") if isinstance(sizes, dict) else None
        if got is None:
            try:
                length, chunklen = int(sizes["shape"][0]), int(storage["chunklen"])
            except (TypeError, ValueError, KeyError, IndexError):
                return last
            if self.chunk_nbytes > 0 and chunklen > 0 and length % chunklen == 0:
                # no short chunk: the chunks from the length's on are past what it counts
                self._free_from, self._free_files = length // chunklen, self.nfiles
            return last     # (else written by an older blzarr: every rewrite is ordered)
        try:
            vals = tuple(got)
            if len(vals) != 3 or type(vals[0]) is not int or type(vals[1]) is not int or type(vals[2]) is not int:
                raise TypeError         # (three JSON integers: no bool, no float)
            n, off, nbytes = vals
            length, chunklen = int(sizes["shape"][0]), int(storage["chunklen"])
        except (TypeError, ValueError, KeyError, IndexError):
            raise FormatError(f"'{self.meta_path('sizes')}': \"last\" must be [chunk, offset, nbytes], "
                              f"got {got!r}") from None
        if not 0 <= off < 1 << 63 or not 0 < nbytes <= self.chunk_nbytes:       # (a file offset)
            raise FormatError(f"'{self.meta_path('sizes')}': \"last\" {got!r} is not a chunk's position and size")
        itemsize = self.chunk_nbytes // chunklen if chunklen > 0 else 0
        if length % chunklen == 0 or n != length // chunklen or nbytes < (length - n * chunklen) * itemsize:
            # not the short last chunk of this length (a meta/sizes whose write was cut midway
            # mixes two texts): read as without "last", the offsets table being the truth
            return last
        self._sizes_last = (n, off, nbytes)
        self._free_from, self._free_files = n, self.nfiles
        fno, slot = divmod(n, self.superchunklen)
        fno += 1
        if fno != self.nfiles:
            return last
        cur = int(last.offsets[slot])
        if cur == -2:
            cur = sc.read_offset(self._fd(fno), last.table_pos, slot, last.path)
            last.offsets[slot] = cur
        if cur == off and slot < last.nchunks:
            return last
        # a switch meta/sizes does not count yet (a writer switches that chunk in order only after
        # a meta/sizes without "last": see `_drop_last`): the committed chunk is where it says
        # (tagged "last": a reader's check tells this overlay from a rewrite record's in one read)
        self._overlay, self._own_overlay = {fno: ({slot: off}, slot + 1, nbytes, "last")}, True
        self._forget_file(fno)
        return self._load_file(fno)

    def sizes_still_name(self, n, off):
        """A reader that read chunk n at `off`, where meta/sizes' "last" put it (not where the file's
        offsets entry says): whether meta/sizes still names that chunk there.  Once a writer's later
        meta/sizes names another place, that place is free to it, and a flush after that one may have
        put other bytes there (another chunk, with a valid checksum) before or while they were read:
        what was read is then not known to be that chunk.

        Read by path (a meta/sizes replaced through a rename would leave a kept descriptor on the
        old text), without the shared lock: a text torn by a write in progress differs or does not
        parse, and reads as "no longer" (the reload then reads it under the lock); a write in
        progress cannot have reached the old place yet, the writer writes there only after it."""
        last = self._sizes_last
        if last is None or last[0] != n or last[1] != off:
            return False
        try:
            raw = None
            if isinstance(self.bytestore, LocalStore):
                raw = fileio.read_file(self.meta_path(SIZES_FILE), SECTOR)
            if raw is not None and len(raw) < SECTOR:
                sizes = self._resolved_sizes(json.loads(raw.decode("ascii")))
            else:
                sizes = self.read_meta(SIZES_FILE)
        except (BlzarrError, OSError, ValueError, RecursionError):
            return False
        got = sizes.get("last") if isinstance(sizes, dict) else None
        return isinstance(got, list) and got == list(last[:3])

    def reread_last(self):
        """A reader whose short last chunk was located by meta/sizes' "last", and whose read there
        failed or was found stale (`sizes_still_name`): meta/sizes read again and the last file's
        state with it, so that the next read goes where the current meta/sizes or the file says."""
        if not self._own_overlay:
            return
        fno = self.nfiles
        self._overlay, self._own_overlay, self._sizes_last = None, False, None
        self._forget_file(fno)
        sizes = self.read_meta(SIZES_FILE)
        last = self._load_file(fno)
        last = self._take_sizes_last({"chunklen": self._fixed["chunkshape"][0]}, last, sizes)
        self._nphys = max(self._nphys, (fno - 1) * self.superchunklen + last.nchunks)

    def _sizes_chunks(self, storage):
        """How many chunks meta/sizes counts (the short last one included); 0 when it cannot tell."""
        try:
            sizes = self.read_meta("sizes")
            if isinstance(sizes, dict):
                self.opened_meta = {"sizes": sizes}
            shape = sizes.get("shape")
            chunklen = storage.get("chunklen")
            n = self._sizes_len = int(shape[0])
            return n if self.chunk_nbytes <= 0 else -(-n // int(chunklen))
        except (BlzarrError, OSError, AttributeError, TypeError, ValueError, LookupError):
            return 0

    def _first_file(self, nums):
        """The state of the first superchunk file whose header and metadata read (every file carries
        the dataset's metadata: a damaged or missing file 1 does not make the others unreadable)."""
        err = None
        for fno in [1] + [k for k in nums if k != 1]:
            if fno in self._damaged:
                continue
            try:
                return self._load_file(fno)
            except (FormatError, StorageError) as e:
                if getattr(e, "errno", None) in ENVIRONMENT_ERRNOS:
                    raise
                err = err or e
                self._damaged[fno] = str(e)
        raise err           # no file can tell what the dataset is

    def missing_tail(self, nchunks):
        """meta/sizes counts `nchunks` chunks but the last superchunk files are gone: count them
        as missing (their chunks raise when read, the others stay readable)."""
        with self._lock:
            want = -(-nchunks // self.superchunklen)
            if want <= self.nfiles or want > self.nfiles + 1024:
                return
            if self._file(self.nfiles).nchunks != self.superchunklen:
                return          # the last file present is not full: that is not a lost tail
            for k in range(self.nfiles + 1, want + 1):
                self._damaged[k] = f"superchunk file '{self._path(k)}' is missing"
            self.nfiles = want
            self._nphys = nchunks

    def _check_write_to(self, n, fno):
        """Refuse to write chunk `n` (to file `fno`) where damage is: to a missing or unreadable file,
        to a file whose counted chunks run past its end, and to a new file after a damaged last one
        (appending there would leave a hole of unreadable rows in the middle of the array)."""
        for k in (fno,) if fno <= self.nfiles else (self.nfiles, fno):
            why = self._damaged.get(k) or self._no_writes.get(k)
            if why:
                raise FormatError(
                    f"cannot write chunk {n} of '{self.rootdir}': {why}; nothing was written.  Copy what "
                    f"is readable to a new directory with blzarr.salvage(src, dst) (or `blzarr convert "
                    f"--salvage SRC DST`) and write there")

    # ------------------------------------------------------------------ the bcolz-like store interface
    # the fields that opening or creating sets: a worker rebuilds the store from them (config)
    _CONFIG = ("superchunklen", "_fixed", "checksum_id", "chunk_nbytes", "cksize", "reserve", "typesize")

    def config(self):
        """Plain values from which `partition_writer` rebuilds this store in another process (with
        the byte store's options: a URL's storage_options)."""
        extra = {k: v for k, v in self.bytestore.config().items() if k != "root"}
        return {"format": FORMAT, "rootdir": self.rootdir, **{k: getattr(self, k) for k in self._CONFIG}, **extra}

    @classmethod
    def partition_writer(cls, config, first_chunk, nchunks):
        """A store that writes the chunks first_chunk.. (`nchunks` of them, one superchunk file's
        worth, starting at a file boundary) into their own superchunk file, beside other writers."""
        self = cls(config["rootdir"], "a", open_bytestore(config["rootdir"], config.get("storage_options")))
        for k in cls._CONFIG:
            setattr(self, k, config[k])
        superchunklen = self.superchunklen
        if first_chunk % superchunklen or nchunks > superchunklen:
            raise ValueError(f"chunks {first_chunk}..{first_chunk + nchunks - 1} do not fill exactly "
                             "one superchunk file")
        fno = first_chunk // superchunklen + 1
        self.nfiles = max(fno - 1, 1)  # file 1 exists (empty): the first partition appends to it
        self._nphys = first_chunk
        self._upload_on_close = True
        return self

    def _check_data_dir(self):
        if self.bytestore.has_dirs and not self.bytestore.isdir(DATA_DIR):
            raise StorageError(f"data directory '{self.bytestore.where(DATA_DIR)}' does not exist")

    def check_layout(self):
        if not self.bytestore.has_dirs:
            return      # object stores have no directories: reading meta/storage tells a missing dataset
        for key, what in (("", "root"), (DATA_DIR, "data"), (META_DIR, "meta")):
            if not self.bytestore.isdir(key):
                raise StorageError(f"{what} directory '{self.bytestore.where(key)}' does not exist")
        self.bytestore.check_inside([META_DIR, DATA_DIR])

    def meta_path(self, name):
        return self.bytestore.where(f"{META_DIR}/{name}")

    def read_meta(self, name):
        obj = self.bytestore.read_json(f"{META_DIR}/{name}", f"meta/{name}")
        if name == SIZES_FILE and isinstance(obj, dict):
            if "prev" not in obj:
                self.record_prev = None
            if "prev" in obj:
                obj = self._resolved_sizes(obj)
            elif sizes_record.take_durable(obj):
                self._sizes_unsure = False      # written once its commit was durable
            else:
                # a plain meta/sizes may be a killed writer's, written and never synced: a writer
                # that took it as the commit and cut what it no longer names would leave the one
                # before it naming cut bytes (`_commit_fallback` makes it durable first)
                self._sizes_unsure = "plain"
        return obj

    def _resolved_sizes(self, sizes):
        """The commit a reader uses of meta/sizes `sizes` (`sizes_record.resolve`): a one-barrier
        record of another boot whose chunk did not reach the disk is read as its "prev" (a writer's
        open then writes that down, `_commit_fallback`)."""
        where = lambda: f"'{self.meta_path(SIZES_FILE)}'"     # noqa: E731
        out, how = sizes_record.resolve(sizes, self._chunk_matches, where)
        if how == "checked" and sizes_record.steps_back(self.rootdir, sizes):
            # a table's last column one flush ahead of another column (`sizes_record.read_as_prev`)
            out, how = sizes_record.as_prev(sizes, out, where), "prev"
        # a record of another boot that a table may read as its "prev" (`ctable._committed_rows`)
        self.record_prev = sizes_record.prev_length(sizes) if how == "checked" else None
        if how == "prev" or self._fallback_sizes is not None:
            self._fallback_sizes = out if how == "prev" and self.mode != "r" else None
        self._sizes_unsure = how == "boot"
        return out

    def _chunk_matches(self, n, off, nbytes, digest):
        """Whether chunk `n` (of its superchunk file) is at `off` with `nbytes` uncompressed bytes and
        a checksum beginning with `digest` (hex): the chunk a one-barrier meta/sizes names reached the
        disk (asked of the read strategy)."""
        return self._reads.chunk_matches(self, n, off, nbytes, digest)

    def _commit_fallback(self):
        """A writer's open that read meta/sizes as its "prev": that commit written down (durably,
        through `commit_json`), before anything else is written.  One that read a record of this
        boot, which another writer may have left before its barrier (killed): that record and its
        chunk made durable, in one barrier, before this writer's flushes reuse the bytes its "prev"
        names.  One that read a plain meta/sizes, which a writer killed between its write and its
        sync may have left (a trim's, say): that file made durable before this writer cuts or reuses
        the bytes the commit before it names."""
        obj, self._fallback_sizes = self._fallback_sizes, None
        self._plain_sizes = None
        if obj is not None:
            self._guard.commit(obj, room=SIZES_ROOM)
        elif self._sizes_unsure == "plain" and self._fio.syncs() and isinstance(self.bytestore, LocalStore):
            # its chunks were synced before it was written: it alone may not be durable, written in
            # place (its size kept: fdatasync) or renamed into place (its directory's sync); both
            # cost next to nothing when they are durable already, the common case
            path = self.meta_path(SIZES_FILE)
            fd = fileio.open(path, "rw")
            try:
                fileio.fdatasync(fd)
            finally:
                fileio.close(fd)
            fileio.fsync_dir(os.path.dirname(path))
        elif self._sizes_unsure and self._fio.syncs() and isinstance(self.bytestore, LocalStore):
            with one_barrier():
                join_barrier(self._path(self.nfiles))
                join_barrier(self.meta_path(SIZES_FILE))
        self._sizes_unsure = False

    def write_meta(self, name, obj):
        if name == "storage":
            obj = dict(obj, **self.storage_extra())
        if name != SIZES_FILE:
            self.bytestore.write_json(f"{META_DIR}/{name}", obj)
            return
        self._before_sizes()
        obj, free_from = self._sizes_with_last(obj)
        one = self._one_barrier_sizes(obj)
        only_record, self._joined = self._joined == "record", False
        if only_record and one is None:
            # (`sizes_with_chunks(length)` said it would be one: another length, or a changed state)
            raise StorageError(f"'{self.meta_path(SIZES_FILE)}' was to be written in a table's barrier as "
                               f"a one-barrier record, and would be plain text: not written")
        # synced before this returns (in a table's barrier: at its end, which this writer does not see)
        synced = not in_barrier() and self._fio.syncs() and isinstance(self.bytestore, LocalStore)
        # in a new directory: synced by the barrier that publishes it (`files.NewTree`)
        new = (fileio.sync_enabled() and isinstance(self.bytestore, LocalStore)
               and new_tree_of(self.rootdir) is not None)
        # in a table's barrier: synced at its end, which the table reports (`sizes_synced`)
        joined = (in_barrier() and not new and self._fio.syncs() and isinstance(self.bytestore, LocalStore))
        self._sizes_in_barrier = False
        if one is None:
            self._sync_with_sizes()     # the chunk before the meta/sizes that names it, in order
        # the commit point: where there is no lock, a conditional put (two writers never both commit)
        self._free_from = None
        old_last, self._sizes_last = self._sizes_last, None
        self._plain_sizes = None
        try:
            # room to grow: "last" comes and goes, its offset gains digits
            if one is None and new:
                # no writer can open a new directory before the barrier that syncs this text; its
                # file takes the sector whole, so that the records of later flushes (longer than this
                # text) are written over it in place
                self._guard.commit(sizes_record.mark_durable(obj), room=SECTOR)
            elif one is None:
                self._guard.commit(obj, room=SIZES_ROOM)
            else:
                # the chunk and meta/sizes synced together: a power loss may keep meta/sizes alone,
                # which readers then take as its "prev" (`sizes_record`), whose bytes stay as they are
                with one_barrier():
                    fno, self._with_sizes = self._with_sizes, None
                    join_barrier(self._path(fno), self._fd(fno))     # (fdatasync of a dup)
                    self._guard.commit(one, room=SIZES_ROOM)
        except BaseException:
            self._sizes_last = old_last     # either may be on disk (the new one names live bytes)
            raise
        if one is not None or (synced and not new) or joined:
            self._plain_sizes, self._plain_durable = obj, synced
            self._sizes_in_barrier = joined
        self._sizes_len = int(obj["shape"][0])
        self._sizes_last = tuple(obj["last"]) if "last" in obj else None
        self._named_extent()
        self._free_from, self._free_files = free_from, self.nfiles
        if not in_barrier():
            # (in a table's barrier this meta/sizes is not durable yet: the one before it, which
            # may name the bytes past the cut, stays the commit until the barrier's end; the cut
            # waits for the next sync)
            self._cut_pending()

    def _sizes_with_last(self, obj):
        """`obj` (meta/sizes) with the position of its short last chunk (``"last": [chunk, offset,
        nbytes]``) when the files hold that chunk durably, and the first chunk a later flush may
        rewrite without ordering syncs (None: none)."""
        if self.remote or self.chunk_nbytes <= 0:
            return obj, None
        try:
            length = int(obj["shape"][0])
            chunklen = int(self._fixed["chunkshape"][0])
        except (KeyError, IndexError, TypeError, ValueError):
            return obj, None
        n, rest = divmod(length, chunklen)
        if not rest:
            return obj, n           # no short chunk: later chunks are past what the sizes count
        fno, slot = divmod(n, self.superchunklen)
        fno += 1
        if (n >= self._nphys or fno != self.nfiles or fno in self._pending or fno in self._unsynced
                or fno in self._damaged or fno in self._no_writes):
            return obj, n + 1       # not known durable where the table says: it keeps its ordering
        f = self._file(fno)
        off = int(f.offsets[slot])
        if off == -2:
            off = sc.read_offset(self._fd(fno), f.table_pos, slot, f.path)
            f.offsets[slot] = off
        nbytes = f.last_chunk if slot == f.nchunks - 1 else self._nbytes_at(self._fd(fno), off, f)
        return dict(obj, last=[n, off, int(nbytes)]), n

    def _before_sizes(self):
        """Before meta/sizes counts them: the files published (where they are uploaded whole), and no
        other writer seen (where there is no lock)."""
        self._check_sole_writer()
        self.flush_files(check=False)

    def _check_sole_writer(self):
        if not self._upload_on_close:
            self._guard.check()

    def _after_open_for_write(self):
        self._guard.opened()

    def storage_extra(self):
        """What BLZ adds to meta/storage."""
        return {"format": FORMAT, "checksum": sc.CHECKSUMS[self.checksum_id][0],
                "superchunklen": self.superchunklen, "reserve": self.reserve,
                "superchunk_nbytes": self.superchunklen * self.chunk_nbytes if self.chunk_nbytes > 0 else -1}

    @property
    def checksum_name(self):
        """The checksum name, None when there is none."""
        name = sc.CHECKSUMS[self.checksum_id][0]
        return None if name == "none" else name

    @property
    def remote(self):
        return self.bytestore.remote

    @property
    def attrs_path(self):
        return self.bytestore.ref(f"{META_DIR}/{ATTRIBUTES_FILE}")

    def chunk_path(self, n):
        """The superchunk file holding chunk `n`."""
        return self._path(n // self.superchunklen + 1)

    @property
    def nchunks(self):
        """Chunks physically present in the files (the short last one included)."""
        return self._nphys

    @staticmethod
    def _key(fno):
        """The name of superchunk file `fno` in the byte store."""
        return f"{DATA_DIR}/{superchunk_name(fno)}"

    def _path(self, fno):
        return self.bytestore.where(self._key(fno))

    def _make_dirs(self):
        self.bytestore.create_dirs([DATA_DIR, META_DIR])
        self._guard.created()

    def moved_to(self, rootdir):
        """The directory this store wrote under a hidden name was renamed to `rootdir` (published):
        go on there with what the store holds (descriptors, file states, caches: the same files)."""
        with self._lock:
            self.bytestore.moved_to(rootdir)
            self.rootdir = self.bytestore.root
            self.datadir = self.bytestore.where(DATA_DIR)
            self.metadir = self.bytestore.where(META_DIR)
            for f in self._files.values():
                f.path = self._path(f.fno)

    def _barrier(self, fd):
        """Make what was written to `fd` durable (when writers sync)."""
        if self._fio.syncs():
            self._fio.datasync(fd)

    def sync(self, announce=None):
        """Make every chunk appended or rewritten (and every file cut or removed) since the last sync
        durable, with syncs batched per file, not per chunk: one fdatasync per superchunk file
        written makes the new bytes durable; then the offsets entries of the rewritten chunks are
        switched to their new bytes (with the headers; the entries of more than one file under a
        rewrite record, `blzarr.storage.rewrite`, so that readers and a crash see all of them
        switched or none), and one more fdatasync per file rewritten makes the switch durable before
        the bytes the entries named before can be written again; then the files a rewrite left free
        bytes at the end of are cut, and the data directory is synced when files were removed.  A
        flush calls it before meta/sizes, which makes appended chunks visible, is replaced."""
        with self._lock:
            rewrite.clear_stale(self)
            self._sync_with_sizes()     # one left by a sync whose meta/sizes never came
            self._joined_alone = None
            if self.switch_units() > 1:
                plan = self.prepare_switch()
                rewrite.commit_store(self, rewrite.carray_record_path(self.rootdir), {rewrite.SELF: plan},
                                     self.switch_pending, announce)
            elif self._unordered():
                # meta/sizes names the short last chunk's committed bytes, which stay as they are:
                # the new bytes and their switch need no order between them, one sync makes both
                # durable before meta/sizes names them
                files = sorted(self._unsynced | set(self._pending))
                alone = self._short_chunk_alone(files)
                self._write_switches()
                if alone is not None and in_barrier():
                    self._joined_alone = alone  # (its sync joins the barrier below, as the others')
                elif alone is not None:
                    files = []
                    self._with_sizes, self._joined = alone, False   # synced with the next meta/sizes
                for fno in files:
                    if self._writes.local(self._key(fno)) and join_barrier(self._path(fno), self._fd(fno)):
                        continue        # synced with other files (a table's columns) at once
                    self._fio.datasync(self._fd(fno))
                self._unsynced.clear()
            else:
                self._sync_written()
                self.switch_pending()
            sync = self._fio.syncs() and self._new_tree() is None
            self._cut_pending()
            if sync and self._dir_unsynced:
                self._fio.sync_dir(DATA_DIR)
            self._unsynced.clear()
            self._dir_unsynced = False

    def _short_chunk_alone(self, files):
        """The superchunk file, when the writes since the last sync are a rewrite of the short last
        chunk that the committed meta/sizes names (no other chunk rewritten), and maybe up to
        `sizes_record.MAX_MORE` chunks appended after it in the same file, and that file's sync may
        wait for meta/sizes, to be made with it in one barrier (`sizes_record`); else None."""
        last = self._sizes_last
        if (last is None or self._sizes_len is None or not self.cksize
                or not isinstance(self.bytestore, LocalStore) or self._upload_on_close):
            return None
        fno, slot = divmod(last[0], self.superchunklen)
        fno += 1
        pend = self._pending.get(fno)
        added = self._nphys - 1 - last[0]
        if (files != [fno] or fno != self.nfiles or pend is None or set(pend[1]) != {slot}
                or not 0 <= added <= sizes_record.MAX_MORE or slot + added >= self.superchunklen
                or not self._writes.local(self._key(fno))):
            return None
        return fno

    def sizes_with_chunks(self, length=None):
        """Inside the `files.one_barrier` whose end syncs the chunks the last `sync` wrote: whether the
        next meta/sizes may be written now, in that barrier, as a one-barrier record (`sizes_record`);
        False: only once the barrier has made the chunks durable.  `length`: the length that
        meta/sizes will count, when it may go into the barrier only as a record (a table's last
        column, whose record readers may read as its "prev", `ctable._committed_rows`): False when
        that length's would be plain text, and `write_meta` refuses to write it there as plain text."""
        with self._lock:
            fno, self._joined_alone = self._joined_alone, None
            if fno is None or not in_barrier() or sizes_record.boot_id() is None:
                return False
            self._with_sizes, self._joined = fno, True
            if length is not None:
                obj, _ = self._sizes_with_last({"shape": [int(length)]})
                if self._one_barrier_sizes(obj) is None:
                    # (its file still joins the barrier: meta/sizes after it, in order)
                    self._with_sizes, self._joined = None, False
                    return False
                self._joined = "record"
            return True

    def sizes_synced(self):
        """The `files.one_barrier` in which this writer wrote meta/sizes (a table's flush) returned:
        that commit is durable, so the text close() writes over it carries the durable mark
        (`settle_sizes`)."""
        with self._lock:
            if self._sizes_in_barrier and self._plain_sizes is not None:
                self._plain_durable = True
            self._sizes_in_barrier = False

    def settle_sizes(self):
        """At close, after a flush that succeeded: the commit this writer made last, written over in
        place as plain text (a one-barrier record without the record's keys, so that readers after
        a reboot do not check its chunks at every open), with the durable mark when that commit was
        synced as it was written (`sizes_record.DURABLE`: the next writer's open needs no sync of
        it).  Not synced: either text is a complete, durable commit of the same state.  Nothing is
        done where the text cannot be written over in place (the text there stays, as valid as
        before)."""
        with self._lock:
            obj, self._plain_sizes = self._plain_sizes, None
            durable, self._plain_durable = self._plain_durable, False
            if (obj is None or self.mode == "r" or in_barrier() or not isinstance(self.bytestore, LocalStore)
                    or self._with_sizes is not None or self._pending or self._unsynced):
                return
            try:
                overwrite_sector(self.meta_path(SIZES_FILE),
                                 json_bytes(sizes_record.mark_durable(obj) if durable else obj), fsync=False)
            except StorageError:
                pass

    def _sync_with_sizes(self):
        """The sync a rewrite of the short last chunk left for the next meta/sizes, made now (that
        meta/sizes did not come, or is not a one-barrier record)."""
        fno, self._with_sizes = self._with_sizes, None
        if fno is not None and fno <= self.nfiles and fno not in self._damaged and self._fio.syncs():
            self._fio.datasync(self._fd(fno))

    def _one_barrier_sizes(self, obj):
        """`obj` (meta/sizes, with "last") as a one-barrier record (`sizes_record.record`) when the file
        `sync` left unsynced holds only the rewrite of the chunk the committed meta/sizes names as
        its short last one and the chunks appended after it, the last of which `obj` names; else
        None."""
        fno = self._with_sizes
        got, last = obj.get("last"), self._sizes_last
        if (fno is None or got is None or last is None or not self.cksize or got[0] != self._nphys - 1
                or got[0] - last[0] > sizes_record.MAX_MORE or got[0] == last[0] and got[1] == last[1]):
            return None
        f = self._files.get(fno)       # (the writer's own state of it: no fstat)
        if f is None:
            return None
        first = (fno - 1) * self.superchunklen
        sums = []
        for n in range(last[0], got[0] + 1):
            fp = self._fps.get(n)
            if fp is None or fp[0] != int(f.offsets[n - first]):
                return None     # (not remembered as written: the ordered syncs)
            sums.append((n, fp[0], int(fp[2]).to_bytes(8, "little", signed=True)[:min(8, self.cksize)]))
        if sums[-1][1] != got[1]:
            return None
        return sizes_record.record(obj, self._sizes_len, last, sums[-1][2], more=sums[:-1])

    def _unordered(self):
        """Whether every write since the last sync is past what meta/sizes holds its writer to (the
        chunks from `_free_from` on, in the last file, which existed at that commit), so that the
        new bytes and the offsets switch may reach the disk in any order."""
        if (self._free_from is None or not self._fio.syncs() or self.remote or self._dir_unsynced
                or self.nfiles != self._free_files or self._new_tree() is not None):
            return False
        last = self.nfiles
        if any(fno != last or fno in self._damaged for fno in self._unsynced):
            return False
        first = (last - 1) * self.superchunklen
        for fno, (_, slots) in self._pending.items():
            if fno != last or min(slots) + first < self._free_from:
                return False
        return True

    def _cut_pending(self):
        """Cut the files a rewrite left free bytes at the end of, but never the bytes the committed
        meta/sizes names as the short last chunk (those cuts wait for the next commit)."""
        keep = {}
        named = self._named_extent()
        for fno, cut in sorted(self._pending_cut.items()):
            if fno > self.nfiles or fno in self._damaged:
                continue
            if named is not None and named[0] == fno and named[2] > cut:
                keep[fno] = cut
                continue
            f = self._file(fno)
            live = self._full_table(f)[:f.nchunks]
            if cut < f.fstate[1] and not (live >= cut).any():     # nothing written past it since
                fd = self._fd(fno)
                self._fio.truncate(fd, cut)
                self._after_write(f, fd)
        self._pending_cut = keep

    def _named_extent(self):
        """(file number, start, end) of the bytes the committed meta/sizes names as its short last
        chunk (chunk, checksum), None when it names none."""
        last = self._sizes_last
        if last is None:
            return None
        n, off = last[0], last[1]
        fno = n // self.superchunklen + 1
        if len(last) > 3:
            return (fno, off, last[3])
        if fno > self.nfiles or fno in self._damaged:
            return None
        fp = self._fps.get(n)
        if fp is not None and fp[0] == off:
            ct = fp[1]
        else:
            try:
                ct = self._ctbytes_at(self._fd(fno), off, self._file(fno))
            except (BlzarrError, OSError):
                ct = 16
        self._sizes_last = (n, off, last[2], off + ct + self.cksize)
        return (fno, off, off + ct + self.cksize)

    def _new_tree(self):
        """The new directory (`files.NewTree`) this store is being written in, None once published:
        nothing in it is promised before its publication, which syncs its files with all the others
        in one barrier, so no order is needed before it."""
        return new_tree_of(self.rootdir) if self._fio.syncs() and not self.remote else None

    def _sync_written(self):
        """The new bytes of every file written since the last sync reach the disk (in a new
        directory: at its publication)."""
        if self._fio.syncs():
            tree = self._new_tree()
            for fno in sorted(self._unsynced | set(self._pending)):
                if fno <= self.nfiles and fno not in self._damaged:
                    if tree is not None:
                        tree.sync_later(self._path(fno))
                    else:
                        self._fio.datasync(self._fd(fno))
        self._unsynced.clear()

    def switch_units(self):
        """How many chunks the pending rewrites switch.  The entries of one file are switched by one
        write, but a reader's call that reads one of them before that write and another after it would
        return a mix that no commit check sees (the commit record is bumped after meta/sizes): more
        than one chunk goes under a rewrite record, whose bump before the switch makes readers read
        again, through the record."""
        return sum(len(slots) for _, slots in self._pending.values())

    def _drop_last(self, rewriting=None):
        """Before an ordered switch of the chunk the committed meta/sizes names in "last" (which is a
        commit by itself: an assignment, a rewrite record), or before superchunk file `rewriting` is
        replaced when it holds that chunk (compaction moves it): meta/sizes without "last",
        durable, so that readers and a crash go by the file's entry (as without "last")."""
        last = self._sizes_last
        if last is None:
            return
        fno, slot = divmod(last[0], self.superchunklen)
        if rewriting is not None:
            if rewriting != fno + 1:
                return
        else:
            pend = self._pending.get(fno + 1)
            if pend is None or slot not in pend[1]:
                return
        obj = self.read_meta(SIZES_FILE)
        obj.pop("last", None)
        self._free_from = None
        self._plain_sizes = None
        self._guard.commit(obj, room=SIZES_ROOM)
        if self._fio.syncs() and not self.remote:
            # durable now, also inside a table's barrier (which would sync it only at its end)
            fsync_path(self.meta_path(SIZES_FILE))
        self._sizes_last = None
        self._free_from, self._free_files = last[0] + 1, self.nfiles

    def prepare_switch(self):
        """Make the rewritten chunks' new bytes durable and return the plan of the offsets entries to
        switch (the rewrite record's entry of this directory), None when nothing is pending."""
        with self._lock:
            self._sync_written()
            self._drop_last()
            if not self._pending:
                return None
            files = {}
            for fno, (f, slots) in sorted(self._pending.items()):
                files[str(fno)] = {"slots": {str(s): int(f.offsets[s]) for s in sorted(slots)},
                                   "nchunks": int(f.nchunks), "last_chunk": int(f.last_chunk)}
            return {"layout": "blz", "files": files}

    def _write_switches(self):
        """Write the offsets entries of the chunks rewritten since the last switch (with the headers);
        returns the files written."""
        pending = sorted(self._pending.items())
        for fno, (f, slots) in pending:
            fd = self._fd(fno)
            lo, hi = min(slots), max(slots) + 1     # the entries between are the file's already
            self._fio.pwrite(fd, sc.pack_offsets(f.offsets[lo:hi]), f.table_pos + 8 * lo, f.path)
            self._write_header(f, fd)
            self._after_write(f, fd)
        self._pending.clear()
        return pending

    def switch_pending(self):
        """Write the offsets entries of the chunks rewritten since the last switch (with the headers)
        and make them durable."""
        with self._lock:
            self._drop_last()
            pending = self._write_switches()
            tree = self._new_tree()
            if self._fio.syncs():
                for fno, _ in pending:
                    if tree is not None:
                        tree.sync_later(self._path(fno))
                    else:
                        self._fio.datasync(self._fd(fno))

    def abandon_pending(self):
        """Forget the rewrites not switched yet (their new bytes stay unused free space): the owner
        cannot tell what they hold (a write and its undo both failed), so nothing may publish them."""
        with self._lock:
            for fno in list(self._pending):
                self._forget_file(fno)
            self._pending.clear()
            self._pending_cut.clear()
            self._chunks.clear()
            self._heads.clear()

    def read_through(self, plan):
        """A reader: take the offsets entries a committed rewrite record switches as the files' own."""
        over = {}
        for fno, ent in plan.get("files", {}).items():
            try:
                over[int(fno)] = ({int(s): int(p) for s, p in ent["slots"].items()},
                                  int(ent["nchunks"]), int(ent["last_chunk"]))
            except (KeyError, TypeError, ValueError, AttributeError):
                raise FormatError(f"the rewrite record of '{self.rootdir}' is malformed") from None
        self._overlay = over

    def remove_debris(self):
        """A writer's open (under the lock): remove the temporary files killed replacements left in
        data/ and meta/."""
        for sub in (DATA_DIR, META_DIR):
            rewrite.remove_tmp_debris(os.path.join(self.rootdir, sub))

    def _remove_file(self, fno):
        self._close(fno)
        self._writes.remove(self._key(fno))
        self._guard.forget(self._key(fno))
        self._reads.removed(self, fno)

    def prefetch(self, ns):
        """Fetch chunks `ns` ahead of the reads that follow, where requests are costly (a no-op for
        files read through descriptors); returns the bytes fetched."""
        return self._reads.prefetch(self, ns)

    def moved_fingerprints(self):
        """{old fingerprint: new one} of the superchunk files this writer uploaded (`objstats`)."""
        return self._reads.moved_fingerprints(self)

    def close(self):
        """Close the files (a partition writer publishes its file first)."""
        if self._upload_on_close:
            self.flush_files()
        super().close()

    def __del__(self):
        try:
            self._close_all()       # descriptors only: nothing is published from a finalizer
        except Exception:
            pass
        w = self.__dict__.get("_writes")
        if w is not None:
            w.close()

    def _where(self, n):
        """Where chunk n is, for error messages (a cheap object, formatted only when shown)."""
        return _Where(self, n)

    def _check_writable(self):
        if self.mode == "r":
            first_write(self)       # opened with mode 'a': the first write takes the lock
        if self.mode == "r":
            raise ReadOnlyError(f"cannot modify '{self.rootdir}': it was opened with mode 'r'")


class LazyChunk(chunk):
    """One chunk of a BLZ file, read on demand.  A full chunk (its size known from the carray) reads
    nothing until used: a whole decode reads the chunk, a partial one its header, bstarts and blocks."""

    __slots__ = ("_layoutdir", "_n", "_head")

    def __init__(self, store, n, atom, expected_nbytes=-1):
        self._layoutdir = store
        self._n = n
        self.atom = np.dtype(atom)
        self._where = store._where(n)
        self._data = None
        self._head = None
        if expected_nbytes >= 0:
            self.nbytes = expected_nbytes
        else:
            self._load_head(-1)
        self._len = self.nbytes // self.atom.itemsize if self.atom.itemsize else 0

    def _load_head(self, expected_nbytes, whole=False):
        h = self._layoutdir.head(self._n, whole)
        nbytes = int.from_bytes(h[4:8], "little")
        if expected_nbytes >= 0 and nbytes != expected_nbytes:
            raise ChunkError(f"bad Blosc chunk ({self._where}): it holds {nbytes} bytes, "
                             f"{expected_nbytes} expected")
        self.nbytes = nbytes
        self._head = (h[3], int.from_bytes(h[8:12], "little"), int.from_bytes(h[12:16], "little"))
        return self._head

    def _fields(self):
        return self._head or self._load_head(self.nbytes)

    typesize = property(lambda self: self._fields()[0])
    blocksize = property(lambda self: self._fields()[1])
    cbytes = property(lambda self: self._fields()[2])

    def getdata(self):
        return self._layoutdir.read_chunk(self._n, self.nbytes)

    def decompress(self, out=None):
        if out is None:
            out = np.empty(self._len, dtype=self.atom)
        return self._layoutdir.decode_chunk_into(self._n, out, self.nbytes, codec_threads())

    def read_range(self, start, stop, out):
        if start == 0 and stop == self._len:
            return self.decompress(out)
        if stop > start:
            self._fields()                  # the header's size checked against the carray's
            isz = self.atom.itemsize
            self._layoutdir.read_range(self._n, start * isz, (stop - start) * isz, out)
        return out


    read_block = read_range


class BlzChunks(LayoutChunks):
    """The full chunks of an on-disk carray in the BLZ layout (a `ChunkStore`)."""

    format = FORMAT

    def __init__(self, store, atom, chunklen, nchunks, mode, objects=False):
        self._init_fields(store, atom, chunklen, nchunks, objects)
        self.rootdir = store.rootdir
        self._mode = mode
        self._objs = OrderedDict()          # recently handed-out LazyChunk objects
        self._cb = None                     # a writer's (k, compressed bytes of chunks 0..k-1)
        store.mode = mode
        if nchunks > store.nchunks:
            store.missing_tail(nchunks)
        if nchunks > store.nchunks:
            raise FormatError(f"'{store.rootdir}': meta/sizes needs {nchunks} full chunks, the superchunk "
                              f"files hold {store.nchunks}")

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, value):
        self._mode = value
        self._cb = None
        if value == "r" and self.layoutdir.mode != "r":
            if self.layoutdir._pending:
                self.layoutdir.sync()       # rewrites not flushed are switched before writing stops
            self.layoutdir.mode = "r"
        elif value != "r" and self.layoutdir.mode == "r":
            self.layoutdir.close()
            self.layoutdir.mode = value

    @property
    def cbytes(self):
        # a writer keeps the total (each flush writes it to meta/sizes: summing 10,000 chunks in
        # Python would be most of a small flush); appends add to it, any other change of the chunks
        # drops it; a reader sums what the files say now (another process may have rewritten them)
        cb = self._cb
        if cb is not None and cb[0] == self.nchunks and self._mode != "r":
            return cb[1]
        total = sum(self._cbytes_or_0(i) for i in range(self.nchunks))
        self._cb = (self.nchunks, total) if self._mode != "r" else None
        return total

    def _added(self, n, datas):
        """Chunks n, n+1, ... were written with `datas`: the running total follows when it was at n."""
        cb = self._cb
        self._cb = (n + len(datas), cb[1] + sum(len(d) for d in datas)) if cb is not None and cb[0] == n else None

    def _cbytes_or_0(self, i):
        try:
            return self.layoutdir.chunk_cbytes(i)
        except (FormatError, ChunkError, StorageError):
            return 0        # a damaged chunk (reads of it raise, naming it) counts no bytes

    def _get(self, i):
        c = self._objs.get(i)
        if c is None:
            c = self._objs[i] = LazyChunk(self.layoutdir, i, self.atom, self.chunk_nbytes)
            if len(self._objs) > 256:
                self._objs.popitem(last=False)
        return c

    def read_block(self, i, local, chunklen, atom):
        ch = self._get(i)
        if ch._head is None:
            # the block is read next: a chunk that read reads whole gives its header too
            ch._load_head(ch.nbytes, whole=True)
        return super().read_block(i, local, chunklen, atom)

    def load(self, i, expected_nbytes):
        """Chunk i read whole and verified (also the short last chunk, past the full ones)."""
        return chunk.from_bytes(self.layoutdir.read_chunk(i, expected_nbytes), self.atom, expected_nbytes,
                                where=self.layoutdir._where(i))

    def __setitem__(self, i, c):
        self._check_writable()
        self._objs.pop(i, None)
        self._cb = None
        self.layoutdir.write_chunk(i, c.getdata())

    def append(self, c):
        self._check_writable()
        n = self.nchunks
        self._objs.pop(n, None)
        data = c.getdata()
        self.layoutdir.write_chunk(n, data)
        self._added(n, [data])
        self.nchunks += 1

    def append_many(self, cs):
        self._check_writable()
        n = self.nchunks
        for k in range(len(cs)):
            self._objs.pop(n + k, None)
        datas = [c.getdata() for c in cs]
        self.layoutdir.append_chunks(n, datas)
        self._added(n, datas)
        self.nchunks += len(cs)

    def truncate(self, n):
        self._check_writable()
        self._objs.clear()
        self._cb = None
        self.nchunks = n
        self.layoutdir.remove_chunks_from(n)

    def free_cachemem(self):
        self._objs.clear()
        self.layoutdir.drop_caches()

    def decode_whole(self, ids, out, offsets):
        return self.layoutdir.decode_whole(ids, out, offsets, self.chunk_nbytes)

    def chunk_reader(self, start, stop):
        if self.chunk_nbytes <= 0 or not 0 <= start <= stop <= self.nchunks:
            return None
        return self.layoutdir.chunk_reader(start, stop, self.chunk_nbytes)

    def rows_whole(self, ids, out, offsets, cstart, csize):
        return self.layoutdir.rows_whole(ids, out, offsets, self.chunk_nbytes, self.atom.itemsize, cstart, csize)

    def sum_whole(self, ids, dtype):
        return self.layoutdir.sum_whole(ids, dtype, self.chunk_nbytes)

    def _rows_of_chunks(self, ids, out, offsets, rowsize, cstart, csize):
        return False        # its chunks are read block by block from their files

    @property
    def superchunklen(self):
        return self.layoutdir.superchunklen

    def prefetch(self, ns):
        self.layoutdir.prefetch(ns)

    def forget_from(self, n):
        self._objs.clear()
        self._cb = None

    def set_nchunks(self, n):
        self._objs.clear()
        self._cb = None
        self.nchunks = n

    # the short last chunk, metadata, maintenance: see ChunkStore
    def put_last(self, n, data):
        self.layoutdir.write_chunk(n, data)

    def remove_from(self, n):
        if n < self.nchunks:
            self._cb = None
        self.layoutdir.remove_chunks_from(n)

    def remove_stray(self, n):
        if self.layoutdir.nchunks > n:
            if n < self.nchunks:
                self._cb = None
            self.layoutdir.remove_chunks_from(n)

    def stored_last(self, n):
        return bytes(self.layoutdir.read_chunk(n)) if n < self.layoutdir.nchunks else None

    def undo_appends(self, n, last):
        self._objs.clear()
        self._cb = None
        self.nchunks = n
        self.layoutdir.remove_chunks_from(n + (1 if last is not None else 0))
        if last is not None and self.layoutdir.nchunks > n:
            self.layoutdir.write_chunk(n, last)

    def fingerprint(self, i):
        try:
            return self.layoutdir.chunk_fingerprint(i)
        except (BlzarrError, OSError):
            return None

    def fingerprints(self, ids):
        try:
            return self.layoutdir.chunk_fingerprints(ids)
        except (BlzarrError, OSError):
            return [self.fingerprint(i) for i in ids]

    def moved_fingerprints(self):
        return self.layoutdir.moved_fingerprints()

    def storage_options(self):
        return {"checksum": self.layoutdir.checksum_name, "reserve": self.layoutdir.reserve,
                "superchunklen": self.layoutdir.superchunklen}

    def describe(self):
        extra = self.layoutdir.storage_extra()
        return {"superchunklen": extra["superchunklen"], "files": self.layoutdir.nfiles,
                "checksum": extra["checksum"], "reserve": extra["reserve"]}

    def partition_chunks(self):
        return int(self.layoutdir.superchunklen)

    def verify(self, expected_chunks):
        return self.layoutdir.verify(expected_chunks)

    def compact(self):
        """Compact holes left by relocated rewrites (bytes reclaimed)."""
        self._check_writable()
        return self.layoutdir.compact()

    @property
    def meta(self):
        return self.layoutdir.meta

    @property
    def vlmeta(self):
        return self.layoutdir.vlmeta

    def config(self):
        return dict(self.layoutdir.config(), rootdir=self.rootdir)

    def close(self):
        self.layoutdir.close()

    def _check_writable(self):
        if self._mode == "r":
            first_write(self.layoutdir)     # opened with mode 'a': the first write takes the lock
        if self._mode == "r":
            raise ReadOnlyError(f"cannot modify '{self.layoutdir.rootdir}': it was opened with mode 'r'")
