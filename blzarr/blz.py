"""The BLZ directory layout: checksummed superchunk files with lazy block reads (docs/FORMAT.rst).

    root/data/__1__.bin, __2__.bin ...   superchunk files, `superchunklen` chunks each
    root/meta/sizes                      JSON: shape, nbytes, cbytes
    root/meta/storage                    JSON: dtype, cparams, chunklen, dflt, expectedlen, plus
                                         "format": "blz", "checksum", "superchunklen", "reserve"
    root/meta/attributes                 JSON: user attributes
    root/meta/vlmeta                     variable-length metalayers (compressed; rewritten on update)

`BlzDir` is the store (files, caches, metalayers); `BlzChunks` is the sequence of a carray's full chunks
over it, with the interface of the bcolz-layout `BcolzChunks`; `LazyChunk` is one chunk read on demand.
"""

import json
import os
import threading
from collections import OrderedDict

import numpy as np

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.chunk import chunk
from blzarr.chunkstore import ChunkStore, auto_superchunklen
from blzarr.errors import BlzarrError, ChunkError, FormatError, ReadOnlyError, StorageError
from blzarr.parallel import codec_threads
from blzarr import files
from blzarr.bcolz_layout import BcolzDir
from blzarr.blz_format import (FORMAT, SUPERCHUNK_EXT, _coerce_reserve, _encode, _File, _Where,  # noqa: F401
                               superchunk_name)
from blzarr.blz_meta import (VLMETA_FILE, VLMETA_MAGIC, BlzMetalayers, FixedMeta, MetalayerError,  # noqa: F401
                             VLMeta)
from blzarr.blz_repair import BlzMaintenance
from blzarr.blz_write import BlzWrites
from blzarr.files import ATTRIBUTES_FILE, DATA_DIR, META_DIR, atomic_write, read_json, write_json

DEFAULT_CHECKSUM = "crc32"

_MB = 1024 * 1024
# bounds of the store's caches
FD_CACHE = 8                      # open file descriptors
FILE_STATE_CACHE = 256            # parsed headers + offsets tables
HEAD_CACHE_BYTES = 4 * _MB        # chunk headers + bstarts
CHUNK_CACHE_BYTES = 32 * _MB      # verified compressed chunks
VERIFIED_CACHE = 1 << 16          # chunks remembered as verified
TOUCHED_CACHE = 64                # chunks read lazily lately (a second touch reads and caches them whole)


def detect_format(rootdir):
    """'blz' or 'bcolz': what the directory's meta/storage says (no "format" key means bcolz)."""
    path = os.path.join(os.fspath(rootdir), META_DIR, "storage")
    storage = read_json(path, "meta/storage")
    if not isinstance(storage, dict):
        raise FormatError(f"meta file '{path}' must hold a JSON object")
    fmt = storage.get("format", "bcolz")
    if fmt not in ("bcolz", FORMAT):
        raise FormatError(f"'{path}': unknown format {fmt!r} (this blzarr reads 'bcolz' and 'blz')")
    return fmt


def open_store(rootdir, mode="a"):
    """The store of an existing carray directory, of whichever layout it holds."""
    base = BcolzDir(rootdir)
    base.check_layout()
    if detect_format(rootdir) == FORMAT:
        return BlzDir.open(rootdir, mode)
    return base


class _LRU:
    """A byte-bounded LRU of chunk index -> bytes, each entry tagged with the epoch of its file's state:
    an entry whose file was reloaded since (changed, or evicted and read again) is a miss."""

    def __init__(self, limit):
        self.limit = limit
        self.nbytes = 0
        self._d = OrderedDict()

    def get(self, n, epoch):
        e = self._d.get(n)
        if e is None:
            return None
        if e[0] != epoch:
            self.pop(n)
            return None
        self._d.move_to_end(n)
        return e[1]

    def put(self, n, epoch, data):
        self.pop(n)
        if len(data) > self.limit // 2:
            return
        self._d[n] = (epoch, data)
        self.nbytes += len(data)
        while self.nbytes > self.limit and len(self._d) > 1:
            self.nbytes -= len(self._d.popitem(last=False)[1][1])

    def pop(self, n):
        e = self._d.pop(n, None)
        if e is not None:
            self.nbytes -= len(e[1])

    def clear(self):
        self._d.clear()
        self.nbytes = 0

    def __len__(self):
        return len(self._d)


class BlzDir(BlzWrites, BlzMaintenance, BlzMetalayers):
    """The files of one carray directory in the BLZ layout."""

    format = FORMAT

    def __init__(self, rootdir, mode="a"):
        self.rootdir = os.fspath(rootdir)
        self.datadir = os.path.join(self.rootdir, DATA_DIR)
        self.metadir = os.path.join(self.rootdir, META_DIR)
        self.mode = mode
        self._lock = threading.RLock()
        self._fds = OrderedDict()
        self._files = OrderedDict()
        self._heads = _LRU(HEAD_CACHE_BYTES)
        self._chunks = _LRU(CHUNK_CACHE_BYTES)
        self._ctbytes = {}
        self._touched = OrderedDict()
        self._inuse = {}                    # file number -> lazy reads using its descriptor unlocked
        self._local = threading.local()
        self.stats = {"appended": 0, "inplace": 0, "relocated": 0}

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
        self = cls(rootdir, "a") if bytestore is None else cls(rootdir, "a", bytestore)
        self._make_dirs()
        self.checksum_id = cid
        self.cksize = sc.checksum_size(cid)
        self.reserve = reserve
        self.K = int(superchunklen)
        self.typesize = int(typesize)
        self.chunk_nbytes = int(chunk_nbytes) if chunk_nbytes > 0 else -1
        self._fixed = {"format": FORMAT, "dtype": dtype, "chunkshape": [int(chunklen)] + list(atom_shape),
                       "cparams": cparams, "superchunklen": self.K, "checksum": sc.CHECKSUMS[cid][0],
                       "reserve": reserve, "meta": meta}
        self.nfiles = 0
        self._nphys = 0
        self._new_file(1)
        # the carray rewrites it with everything it knows (dflt, expectedlen...)
        self.write_meta("storage", {"dtype": dtype, "cparams": cparams, "chunklen": int(chunklen)})
        return self

    @classmethod
    def open(cls, rootdir, mode="a", bytestore=None):
        self = cls(rootdir, mode) if bytestore is None else cls(rootdir, mode, bytestore)
        self.check_layout()
        storage = self.read_meta("storage")
        where = f"'{self.meta_path('storage')}'"
        nums = self._list_files()
        if not nums:
            raise FormatError(f"BLZ directory '{self.rootdir}' has no superchunk file data/__1__.bin")
        if nums != list(range(1, len(nums) + 1)):
            have = set(nums)   # a hostile name such as __99999999999__.bin must not make a huge range
            missing = [k for k in range(1, len(nums) + 2) if k not in have]
            raise FormatError(f"BLZ directory '{self.rootdir}': superchunk files {missing[:5]} are missing")
        self.nfiles = len(nums)
        f1 = self._load_file(1)
        fixed = f1.meta_json
        for key in ("dtype", "chunkshape", "cparams", "superchunklen", "checksum", "meta"):
            if key not in fixed:
                raise FormatError(f"superchunk file '{f1.path}': metadata lacks {key!r}")
        self._fixed = fixed
        K = fixed["superchunklen"]
        if not isinstance(K, int) or isinstance(K, bool) or not 1 <= K <= 1 << 24:
            raise FormatError(f"superchunk file '{f1.path}': bad superchunklen {K!r}")
        self.K = K
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
        for key, mine in (("superchunklen", K), ("checksum", fixed["checksum"])):
            if key in storage and storage[key] != mine:
                raise FormatError(f"{where}: {key} {storage[key]!r} disagrees with '{f1.path}' ({mine!r})")
        chunklen = storage.get("chunklen")
        if chunklen is not None and fixed["chunkshape"][:1] != [chunklen]:
            raise FormatError(f"{where}: chunklen {chunklen} disagrees with the chunk shape "
                              f"{fixed['chunkshape']} in '{f1.path}'")
        last = self._load_file(self.nfiles)
        self._nphys = (self.nfiles - 1) * K + last.nchunks
        self._check_full_files()
        if mode != "r":
            self._repair()
        return self

    def _list_files(self):
        """The numbers of the superchunk files in data/, sorted (each a regular file inside the root)."""
        nums = []
        for name in os.listdir(self.datadir):
            if name.startswith("__") and name.endswith(SUPERCHUNK_EXT):
                digits = name[2:-len(SUPERCHUNK_EXT)]
                if digits.isdigit() and digits.isascii():
                    nums.append(int(digits))
        nums.sort()
        real_root = os.path.realpath(self.rootdir)
        for num in nums:
            path = self._path(num)
            real = os.path.realpath(path)
            if os.path.commonpath([real, real_root]) != real_root or not os.path.isfile(real):
                raise FormatError(f"superchunk file '{path}' resolves to '{real}', which is not a regular "
                                  f"file inside '{self.rootdir}'")
        return nums

    def _check_full_files(self):
        """Every file but the last holds `K` chunks."""
        for fno in range(1, self.nfiles):
            if self._load_file(fno).nchunks != self.K:
                raise FormatError(f"superchunk file '{self._path(fno)}' holds "
                                  f"{self._file(fno).nchunks} chunks, but it is not the last file "
                                  f"and must be full ({self.K})")

    # ------------------------------------------------------------------ the bcolz-like store interface
    # the fields that opening or creating sets: a worker rebuilds the store from them (config)
    _CONFIG = ("K", "_fixed", "checksum_id", "chunk_nbytes", "cksize", "reserve", "typesize")

    def config(self):
        """Plain values from which `partition_writer` rebuilds this store in another process."""
        return {"format": FORMAT, "rootdir": self.rootdir, **{k: getattr(self, k) for k in self._CONFIG}}

    @classmethod
    def partition_writer(cls, config, first_chunk, nchunks):
        """A store that writes the chunks first_chunk.. (`nchunks` of them, one superchunk file's
        worth, starting at a file boundary) into their own superchunk file, beside other writers."""
        self = cls(config["rootdir"], "a")
        for k in cls._CONFIG:
            setattr(self, k, config[k])
        K = self.K
        if first_chunk % K or nchunks > K:
            raise ValueError(f"chunks {first_chunk}..{first_chunk + nchunks - 1} do not fill exactly "
                             "one superchunk file")
        fno = first_chunk // K + 1
        self.nfiles = max(fno - 1, 1)  # file 1 exists (empty): the first partition appends to it
        self._nphys = first_chunk
        return self

    def check_layout(self):
        for d, what in ((self.rootdir, "root"), (self.datadir, "data"), (self.metadir, "meta")):
            if not os.path.isdir(d):
                raise StorageError(f"{what} directory '{d}' does not exist")

    def meta_path(self, name):
        return os.path.join(self.metadir, name)

    def read_meta(self, name):
        return read_json(self.meta_path(name), f"meta/{name}")

    def write_meta(self, name, obj):
        if name == "storage":
            obj = dict(obj, **self.storage_extra())
        write_json(self.meta_path(name), obj)

    def storage_extra(self):
        """What BLZ adds to meta/storage."""
        return {"format": FORMAT, "checksum": sc.CHECKSUMS[self.checksum_id][0],
                "superchunklen": self.K, "reserve": self.reserve,
                "superchunk_nbytes": self.K * self.chunk_nbytes if self.chunk_nbytes > 0 else -1}

    @property
    def checksum_name(self):
        """The checksum name, None when there is none."""
        name = sc.CHECKSUMS[self.checksum_id][0]
        return None if name == "none" else name

    @property
    def attrs_path(self):
        return os.path.join(self.metadir, ATTRIBUTES_FILE)

    def chunk_path(self, n):
        """The superchunk file holding chunk `n`."""
        return self._path(n // self.K + 1)

    @property
    def nchunks(self):
        """Chunks physically present in the files (the short last one included)."""
        return self._nphys

    def _path(self, fno):
        return os.path.join(self.datadir, superchunk_name(fno))

    def _make_dirs(self):
        os.makedirs(self.datadir)
        os.makedirs(self.metadir)

    def _file_path(self, fno):
        """The local file holding superchunk `fno` (the same as `_path` here; a spool copy for object
        storage, whose `_path` is the object's URL)."""
        return self._path(fno)

    def _remove_file(self, fno):
        os.remove(self._file_path(fno))

    def _where(self, n):
        """Where chunk n is, for error messages (a cheap object, formatted only when shown)."""
        return _Where(self, n)

    def _check_writable(self):
        if self.mode == "r":
            raise ReadOnlyError(f"cannot modify '{self.rootdir}': it was opened with mode 'r'")

    # ------------------------------------------------------------------ files and their state
    def _fd(self, fno):
        fd = self._fds.get(fno)
        if fd is not None:
            self._fds.move_to_end(fno)
            return fd
        flags = (os.O_RDONLY if self.mode == "r" else os.O_RDWR) | getattr(os, "O_BINARY", 0)
        path = self._file_path(fno)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            raise StorageError(f"superchunk file '{path}' is missing") from None
        except OSError as e:
            raise StorageError(f"cannot open superchunk file '{path}': {e}") from None
        self._fds[fno] = fd
        if len(self._fds) > FD_CACHE:
            # close the least recently used descriptors no lazy read is using outside the lock
            for k in [k for k in self._fds if not self._inuse.get(k)][:len(self._fds) - FD_CACHE]:
                os.close(self._fds.pop(k))
        return fd

    def _close(self, fno):
        fd = self._fds.pop(fno, None)
        if fd is not None:
            os.close(fd)

    def close(self):
        with self._lock:
            while self._fds:
                os.close(self._fds.popitem()[1])

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @staticmethod
    def _state(fd):
        st = os.fstat(fd)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _file(self, fno):
        """The state of file `fno`, reloaded when the file changed behind our back."""
        f = self._files.get(fno)
        if f is None:
            return self._load_file(fno)
        self._files.move_to_end(fno)
        if self._state(self._fd(fno)) != f.fstate:
            self._forget_file(fno)
            return self._load_file(fno)
        return f

    def _forget_file(self, fno):
        """Drop what is known of file `fno` (its cached chunks become misses: their epoch is gone)."""
        self._files.pop(fno, None)
        lo, hi = (fno - 1) * self.K, fno * self.K
        for n in [n for n in self._ctbytes if lo <= n < hi]:
            del self._ctbytes[n]

    def _load_file(self, fno):
        fd = self._fd(fno)
        f = _File(fno, self._path(fno))
        f.fstate = self._state(fd)
        h = sc.unpack_header(sc.pread(fd, 32, 0, f.path), f.path)
        f.header = h
        f.meta_size = h["meta_size"]
        if 32 + f.meta_size > f.fstate[1]:
            raise FormatError(f"superchunk file '{f.path}' is truncated inside its metadata section")
        raw = bytes(sc.pread(fd, f.meta_size, 32, f.path))
        try:
            meta = json.loads(raw.decode("ascii")) if raw.strip() else {}
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise FormatError(f"superchunk file '{f.path}': metadata section is not valid JSON: {e}") from None
        if not isinstance(meta, dict):
            raise FormatError(f"superchunk file '{f.path}': metadata section is not a JSON object")
        f.meta_json = meta
        K = meta.get("superchunklen", getattr(self, "K", None))
        if not isinstance(K, int) or isinstance(K, bool) or K < 1:
            raise FormatError(f"superchunk file '{f.path}': bad superchunklen {K!r}")
        if hasattr(self, "K") and K != self.K:
            raise FormatError(f"superchunk file '{f.path}': superchunklen {K}, the dataset uses {self.K}")
        f.table_pos = 32 + f.meta_size
        f.data_start = f.table_pos + 8 * K
        if f.data_start > f.fstate[1]:
            raise FormatError(f"superchunk file '{f.path}' is truncated inside its offsets table")
        if h["nchunks"] > K:
            raise FormatError(f"superchunk file '{f.path}': nchunks {h['nchunks']} > its capacity {K}")
        f.nchunks = h["nchunks"]
        f.last_chunk = h["last_chunk"]
        f.offsets = np.full(K, -2, dtype=np.int64)     # -2: not read yet
        f.full_table = False
        self._files[fno] = f
        while len(self._files) > FILE_STATE_CACHE:
            self._forget_file(next(iter(self._files)))
        return f

    def _offset(self, n):
        """(file state, fd, offset) of chunk n, reading only its offsets entry."""
        fno, slot = divmod(n, self.K)
        fno += 1
        if not 0 <= n < self._nphys:
            raise FormatError(f"'{self.rootdir}': chunk {n} is needed but the superchunk files hold "
                              f"{self._nphys} chunks")
        f = self._file(fno)
        fd = self._fd(fno)
        off = int(f.offsets[slot])
        if off == -2:
            off = sc.read_offset(fd, f.table_pos, slot, f.path)
            f.offsets[slot] = off
        if (slot >= f.nchunks or off == -1 or off + 16 > f.fstate[1]) and self._state(fd) != f.fstate:
            # a writer changed the file since its state was read (a reader beside a writer): reload
            self._forget_file(fno)
            f = self._load_file(fno)
            off = sc.read_offset(fd, f.table_pos, slot, f.path)
            f.offsets[slot] = off
        if slot >= f.nchunks or off == -1:
            raise FormatError(f"{self._where(n)} has no offset (-1): the file holds {f.nchunks} chunks")
        if off < f.data_start or off + 16 > f.fstate[1]:
            raise FormatError(f"{self._where(n)}: offset {off} is outside the chunk area "
                              f"[{f.data_start}, {f.fstate[1]})")
        return f, fd, off

    def _full_table(self, f):
        if not f.full_table:
            f.offsets = sc.read_offsets(self._fd(f.fno), f.table_pos, self.K, f.path)
            f.full_table = True
        return f.offsets

    # ------------------------------------------------------------------ reading
    def head(self, n):
        """The Blosc header + bstarts of chunk n (cached)."""
        with self._lock:
            f, fd, off = self._offset(n)
            return self._head_at(n, f, fd, off)

    def _head_at(self, n, f, fd, off):
        with self._lock:
            h = self._heads.get(n, f.epoch)
            if h is not None:
                return h
            try:
                h = sc.read_head(fd, off, f.fstate[1], self._where(n))
            except ValueError as e:
                if isinstance(e, BlzarrError):
                    raise
                # e.g. an nbytes near 2**31 overflowing the block count (a hostile header)
                raise ChunkError(f"bad Blosc chunk ({self._where(n)}): {e}") from None
            self._ctbytes[n] = int.from_bytes(h[12:16], "little")
            self._heads.put(n, f.epoch, h)
            return h

    def read_chunk(self, n, expected_nbytes=-1):
        """The compressed bytes of chunk n, checksum verified and structure validated (cached).

        A reader (mode 'r') beside a writer may catch a rewritten chunk between the moment it took
        its offset and the read: it then reads the file's state again and retries once."""
        try:
            return self._read_chunk(n, expected_nbytes)
        except (FormatError, ChunkError):
            if self.mode != "r":
                raise
            with self._lock:
                fno = n // self.K + 1
                self._forget_file(fno)
                self._drop_chunk(n)
            return self._read_chunk(n, expected_nbytes)

    def _read_chunk(self, n, expected_nbytes=-1):
        with self._lock:
            f, fd, off = self._offset(n)
            data = self._chunks.get(n, f.epoch)
            if data is not None:
                return data
            if self.mode != "r":
                data = self._fetch_chunk(n, f, fd, off, expected_nbytes)
                self._remember(n, data, f)
                return data
            fno = f.fno
            self._inuse[fno] = self._inuse.get(fno, 0) + 1
        # read-only (no writer in this process): the read, the checksum and the validation run outside
        # the lock, so the threads of a long read overlap them (live bytes are never overwritten, and a
        # chunk moved by another process's writer is retried by read_chunk)
        try:
            data = self._fetch_chunk(n, f, fd, off, expected_nbytes)
        finally:
            with self._lock:
                self._release_fd(fno)
        with self._lock:
            self._remember(n, data, f)
        return data

    def _fetch_chunk(self, n, f, fd, off, expected_nbytes):
        """Chunk n's bytes from the file at `off`, checksum verified and structure validated."""
        where = self._where(n)
        h16 = sc.pread(fd, 16, off, where)
        ctbytes = int.from_bytes(h16[12:16], "little", signed=True)
        if ctbytes < 16 or off + ctbytes + self.cksize > f.fstate[1]:
            raise FormatError(f"{where}: the chunk claims {ctbytes} bytes (+{self.cksize} of checksum), "
                              f"past the end of the file ({f.fstate[1]} bytes)")
        data = sc.pread(fd, ctbytes + self.cksize, off, where)
        with memoryview(data) as mv:
            sc.verify_checksum(self.checksum_id, mv[:ctbytes], mv[ctbytes:], where)
        del data[ctbytes:]                  # the checksum: in place, no copy of the chunk
        _chunk.validate(data, expected_nbytes, where)
        return data

    def decode_chunk_into(self, n, out, expected_nbytes=-1, nthreads=1, part=None):
        """Decode chunk n whole into the contiguous array `out`, its checksum verified and its structure
        validated first (as `read_chunk`), and return `out`.

        A chunk found in the cache is decoded from there.  Any other is read into a buffer of the
        calling thread, reused from chunk to chunk, and is not cached: a long read streams through one
        warm buffer instead of allocating, faulting in and freeing a chunk-sized buffer per chunk (that
        cost as much as the decoding), and leaves the cache to the random reads it serves.  The chunk is
        remembered as verified, so later reads of a few of its blocks read only those blocks.
        With `part` = (start, nbytes, out_offset), only those bytes are decoded (into `out` at
        out_offset), the whole chunk still read and verified."""
        try:
            return self._decode_chunk_into(n, out, expected_nbytes, nthreads, part)
        except (FormatError, ChunkError):
            if self.mode != "r":
                raise
            with self._lock:
                self._forget_file(n // self.K + 1)
                self._drop_chunk(n)
            return self._decode_chunk_into(n, out, expected_nbytes, nthreads, part)

    @staticmethod
    def _decode(data, out, nthreads, part, where):
        if part is None:
            _chunk.decompress_into(data, out, nthreads, False, where)
        else:
            _chunk.getitem_into(data, part[0], part[1], out, part[2], False, where)

    def _decode_chunk_into(self, n, out, expected_nbytes, nthreads, part):
        where = _Where(self, n)
        with self._lock:
            f, fd, off = self._offset(n)
            data = self._chunks.get(n, f.epoch)
            buf = None
            if data is None:
                ct = self._ctbytes.get(n)
                if self.mode != "r":
                    # beside a writer of this process: read under the lock, decode outside it
                    buf, ct = self._fetch_into_scratch(n, f, fd, off, ct, expected_nbytes, where)
                else:
                    fno = f.fno
                    self._inuse[fno] = self._inuse.get(fno, 0) + 1
        if data is not None:
            if expected_nbytes >= 0 and int.from_bytes(data[4:8], "little") != expected_nbytes:
                raise ChunkError(f"bad Blosc chunk ({where}): it holds {int.from_bytes(data[4:8], 'little')} "
                                 f"bytes, {expected_nbytes} expected")
            self._decode(data, out, nthreads, part, where)
            return out
        if buf is None:
            try:
                buf, ct = self._fetch_into_scratch(n, f, fd, off, ct, expected_nbytes, where)
            finally:
                with self._lock:
                    self._release_fd(fno)
        with memoryview(buf) as mv, mv[:ct] as view:
            self._decode(view, out, nthreads, part, where)
        with self._lock:
            f.verified.add(n)
            if len(f.verified) > VERIFIED_CACHE:
                f.verified.clear()
                f.verified.add(n)
            self._ctbytes[n] = ct
        return out

    def _fetch_into_scratch(self, n, f, fd, off, ct, expected_nbytes, where):
        """(this thread's chunk buffer, ctbytes) holding chunk n read from `off`, checksum verified
        and structure validated."""
        if ct is None:
            ct = int.from_bytes(sc.pread(fd, 16, off, where)[12:16], "little", signed=True)
        if ct < 16 or off + ct + self.cksize > f.fstate[1]:
            raise FormatError(f"{where}: the chunk claims {ct} bytes (+{self.cksize} of checksum), "
                              f"past the end of the file ({f.fstate[1]} bytes)")
        total = ct + self.cksize
        local = self._local
        buf = getattr(local, "cbuf", None)
        if buf is None or len(buf) < total:
            buf = local.cbuf = sc.empty_buffer(total + total // 8)
        with memoryview(buf) as mv, mv[:ct] as view, mv[ct:total] as stored:
            sc.pread_into(fd, mv[:total], off, where)
            sc.verify_checksum(self.checksum_id, view, stored, where)
            _chunk.validate(view, expected_nbytes, where)
        return buf, ct

    def _release_fd(self, fno):
        """One unlocked user of file fno's descriptor less (call with the lock held)."""
        left = self._inuse[fno] - 1
        if left:
            self._inuse[fno] = left
        else:
            del self._inuse[fno]

    def _remember(self, n, data, f):
        f.verified.add(n)
        if len(f.verified) > VERIFIED_CACHE:
            f.verified.clear()
            f.verified.add(n)
        self._ctbytes[n] = len(data)
        self._chunks.put(n, f.epoch, data)

    def read_range(self, n, start, nbytes, out, out_offset=0):
        """Decode bytes [start, start+nbytes) of chunk n into `out`.

        A chunk in the cache is decoded from memory.  Otherwise, once the chunk has been verified (or
        when the dataset has no checksums), only the needed blocks are read from the file; a chunk not
        yet verified is read whole and verified, and cached while the chunk cache has room (else read
        through a reused buffer), and so is a chunk touched again soon after a lazy read while the cache
        has free room.  Returns the bytes read from the file."""
        where = _Where(self, n)
        with self._lock:
            f, fd, off = self._offset(n)
            data = self._chunks.get(n, f.epoch)
            if data is not None:
                lazy = False
            else:
                lazy = self.checksum_id == 0 or n in f.verified
                if lazy and n in self._touched:
                    # a second touch: cache the whole chunk, but only while the cache has free room
                    # (evicting chunks for a random workload larger than the cache would read whole
                    # chunks where a few blocks do)
                    ct = self._ctbytes.get(n)
                    lazy = ct is None or self._chunks.nbytes + ct > CHUNK_CACHE_BYTES
                elif lazy:
                    self._touched[n] = None
                    if len(self._touched) > TOUCHED_CACHE:
                        self._touched.popitem(last=False)
            if lazy:
                head = self._head_at(n, f, fd, off)
                fno = f.fno
                self._inuse[fno] = self._inuse.get(fno, 0) + 1
        if data is None and not lazy:
            ct = self._ctbytes.get(n)
            if ct is not None and self._chunks.nbytes + ct > CHUNK_CACHE_BYTES:
                # the first touch of a chunk when caching it would evict another: read and verify it
                # through this thread's buffer, decode the part wanted, keep nothing but "verified"
                self.decode_chunk_into(n, out, -1, 1, (start, nbytes, out_offset))
                return ct + self.cksize
            data = self.read_chunk(n)
        if data is not None:
            _chunk.getitem_into(data, start, nbytes, out, out_offset, False, where)
            return 0
        try:
            return sc.read_blocks_into(fd, off, head, start, nbytes, out, out_offset, where, self._scratch())
        finally:
            with self._lock:
                self._release_fd(fno)

    def _scratch(self):
        """A per-thread reusable buffer for lazy chunks."""
        local = self._local
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = bytearray(0)
        return buf

    def chunk_cbytes(self, n):
        """The compressed size of chunk n (its 16-byte header is read once)."""
        c = self._ctbytes.get(n)
        if c is None:
            with self._lock:
                f, fd, off = self._offset(n)
                h = self._heads.get(n, f.epoch)
                raw = h[:16] if h is not None else sc.pread(fd, 16, off, self._where(n))
                c = int.from_bytes(raw[12:16], "little", signed=True)
                if c < 16:
                    raise ChunkError(f"bad Blosc chunk ({self._where(n)}): ctbytes {c}")
                self._ctbytes[n] = c
        return c

    def chunk_fingerprint(self, n):
        """(offset, ctbytes, first bytes of the stored checksum) of chunk n: a rewrite never reuses
        the live bytes of a chunk, so its offset changes (and its checksum, where there is one)."""
        with self._lock:
            f, fd, off = self._offset(n)
            raw = sc.pread(fd, 16, off, self._where(n))
            ct = int.from_bytes(raw[12:16], "little", signed=True)
            ck = 0
            if self.cksize and ct >= 16 and off + ct + self.cksize <= f.fstate[1]:
                raw = bytes(sc.pread(fd, min(8, self.cksize), off + ct, self._where(n)))
                ck = int.from_bytes(raw.ljust(8, b"\0"), "little", signed=True)
            return (off, ct, ck)

    def drop_caches(self):
        with self._lock:
            self._heads.clear()
            self._chunks.clear()
            self._touched.clear()
            self._local = threading.local()

    # ------------------------------------------------------------------ writing
    def _meta_bytes(self, fno):
        d = dict(self._fixed, superchunk=fno, first_chunk=(fno - 1) * self.K)
        raw = _encode(d)
        pad = (-(32 + len(raw))) % 8
        return raw + b" " * pad

    def _new_file(self, fno):
        """Create an empty superchunk file `fno` (header, metadata, offsets all -1)."""
        meta = self._meta_bytes(fno)
        head = sc.pack_header(self.checksum_id, self.typesize, self.chunk_nbytes, 0, 0, len(meta))
        table = sc.pack_offsets(np.full(self.K, -1, dtype=np.int64))
        atomic_write(self._file_path(fno), head + meta + table, fsync=files.FSYNC)
        self.nfiles = max(self.nfiles, fno)
        self._forget_file(fno)
        self._close(fno)

    def _write_header(self, f, fd):
        head = sc.pack_header(self.checksum_id, self.typesize, self.chunk_nbytes, f.last_chunk, f.nchunks,
                              f.meta_size)
        sc.pwrite_all(fd, head, 0, f.path)

    def _after_write(self, f, fd):
        f.fstate = self._state(fd)

    def _drop_chunk(self, n):
        self._heads.pop(n)
        self._chunks.pop(n)
        self._ctbytes.pop(n, None)
        f = self._files.get(n // self.K + 1)
        if f is not None:
            f.verified.discard(n)

    def _ctbytes_at(self, fd, off, f):
        """The compressed size of the chunk stored at `off` (its Blosc header's ctbytes)."""
        h = sc.pread(fd, 16, int(off), f.path)
        ct = int.from_bytes(h[12:16], "little", signed=True)
        if ct < 16 or off + ct > f.fstate[1]:
            raise FormatError(f"superchunk file '{f.path}': the chunk at offset {off} claims {ct} bytes")
        return ct

    @staticmethod
    def _nbytes_at(fd, off, f):
        h = sc.pread(fd, 16, int(off), f.path)
        return int.from_bytes(h[4:8], "little", signed=True)


class LazyChunk(chunk):
    """One chunk of a BLZ file, read on demand.  A full chunk (its size known from the carray) reads
    nothing until used: a whole decode reads the chunk, a partial one its header, bstarts and blocks."""

    __slots__ = ("_store", "_n", "_head")

    def __init__(self, store, n, atom, expected_nbytes=-1):
        self._store = store
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

    def _load_head(self, expected_nbytes):
        h = self._store.head(self._n)
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
        return self._store.read_chunk(self._n, self.nbytes)

    def decompress(self, out=None):
        if out is None:
            out = np.empty(self._len, dtype=self.atom)
        return self._store.decode_chunk_into(self._n, out, self.nbytes, codec_threads())

    def read_range(self, start, stop, out):
        if start == 0 and stop == self._len:
            return self.decompress(out)
        if stop > start:
            self._fields()                  # the header's size checked against the carray's
            isz = self.atom.itemsize
            self._store.read_range(self._n, start * isz, (stop - start) * isz, out)
        return out


class BlzChunks(ChunkStore):
    """The full chunks of an on-disk carray in the BLZ layout (a `ChunkStore`)."""

    format = FORMAT

    def __init__(self, store, atom, chunklen, nchunks, mode, objects=False):
        self._init_fields(store, atom, chunklen, nchunks, objects)
        self.rootdir = store.rootdir
        self._mode = mode
        self._objs = OrderedDict()          # recently handed-out LazyChunk objects
        store.mode = mode
        if nchunks > store.nchunks:
            raise FormatError(f"'{store.rootdir}': meta/sizes needs {nchunks} full chunks, the superchunk "
                              f"files hold {store.nchunks}")

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, value):
        self._mode = value
        if value == "r" and self.store.mode != "r":
            self.store.mode = "r"
        elif value != "r" and self.store.mode == "r":
            self.store.close()
            self.store.mode = value

    @property
    def cbytes(self):
        return sum(self.store.chunk_cbytes(i) for i in range(self.nchunks))

    def _get(self, i):
        c = self._objs.get(i)
        if c is None:
            c = self._objs[i] = LazyChunk(self.store, i, self.atom, self.chunk_nbytes)
            if len(self._objs) > 256:
                self._objs.popitem(last=False)
        return c

    def load(self, i, expected_nbytes):
        """Chunk i read whole and verified (also the short last chunk, past the full ones)."""
        return chunk.from_bytes(self.store.read_chunk(i, expected_nbytes), self.atom, expected_nbytes,
                                where=self.store._where(i))

    def __setitem__(self, i, c):
        self._check_writable()
        self._objs.pop(i, None)
        self.store.write_chunk(i, c.getdata())

    def append(self, c):
        self._check_writable()
        self._objs.pop(self.nchunks, None)
        self.store.write_chunk(self.nchunks, c.getdata())
        self.nchunks += 1

    def truncate(self, n):
        self._check_writable()
        self._objs.clear()
        self.nchunks = n
        self.store.remove_chunks_from(n)

    def free_cachemem(self):
        self._objs.clear()
        self.store.drop_caches()

    def prefetch(self, ns):
        fetch = getattr(self.store, "prefetch", None)
        if fetch is not None:
            fetch(ns)

    def forget_from(self, n):
        self._objs.clear()

    def set_nchunks(self, n):
        self._objs.clear()
        self.nchunks = n

    # the short last chunk, metadata, maintenance: see ChunkStore
    def put_last(self, n, data):
        self.store.write_chunk(n, data)

    def remove_from(self, n):
        self.store.remove_chunks_from(n)

    def remove_stray(self, n):
        if self.store.nchunks > n:
            self.store.remove_chunks_from(n)

    def stored_last(self, n):
        return bytes(self.store.read_chunk(n)) if n < self.store.nchunks else None

    def undo_appends(self, n, last):
        self._objs.clear()
        self.nchunks = n
        self.store.remove_chunks_from(n + (1 if last is not None else 0))
        if last is not None and self.store.nchunks > n:
            self.store.write_chunk(n, last)

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
        if getattr(self.store, "remote", False):
            return None
        try:
            return self.store.chunk_fingerprint(i)
        except (BlzarrError, OSError):
            return None

    def storage_options(self):
        return {"checksum": self.store.checksum_name, "reserve": self.store.reserve,
                "superchunklen": self.store.K}

    def describe(self):
        extra = self.store.storage_extra()
        return {"superchunklen": extra["superchunklen"], "files": self.store.nfiles,
                "checksum": extra["checksum"], "reserve": extra["reserve"]}

    def partition_chunks(self):
        return int(self.store.K)

    def verify(self, expected_chunks):
        return self.store.verify(expected_chunks)

    def compact(self):
        """Compact holes left by relocated rewrites (bytes reclaimed)."""
        self._check_writable()
        return self.store.compact()

    @property
    def meta(self):
        return self.store.meta

    @property
    def vlmeta(self):
        return self.store.vlmeta

    def config(self):
        return dict(self.store.config(), rootdir=self.rootdir)

    def close(self):
        self.store.close()

    def _check_writable(self):
        if self._mode == "r":
            raise ReadOnlyError(f"cannot modify '{self.store.rootdir}': it was opened with mode 'r'")
