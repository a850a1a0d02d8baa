"""The BLZ layout (docs/FORMAT.rst) on a byte store: object storage read lazily, written whole.

`RemoteBlzDir` is a `blz.BlzDir` over a `bytestore.FsspecStore` that reads the superchunk files with
ranged GETs instead of handles (the names, meta files, writes and the writer's guard are `BlzDir`'s,
over the store; a file being written is at hand in the local spool and read like a local file):

Reading (any mode).  Opening reads meta/storage and lists data/ once (names and sizes).  A superchunk
file's header, metadata and offsets table are read on its first use with one ranged GET (cached).
A chunk's first read fetches its slot (the chunk, its checksum and reserve: from its offset to the
next higher offset or the end of the object) with one ranged GET, verifies the checksum and keeps
it in the chunk cache; later, once it is verified, a read of a few atoms fetches only the Blosc
blocks holding them with one ranged GET (its header and block starts are cached).  `prefetch`
fetches the slots of many chunks at once: adjacent slots coalesced into one range, the ranges of
several files fetched concurrently.

Writing (mode 'a'/'w', by `BlzDir` itself).  Objects have no partial writes: a superchunk file that
is to change is copied whole into a local spool directory (`spool.Spool`, the write strategy of a
store without partial writes), changed there by the `BlzDir` code (appends, rewrites, truncation),
and uploaded whole when it is complete (the next file is started) or when meta/sizes
is written (`flush`): the files first, meta/sizes last, so a reader never sees a chunk that is not
there, and a writer that dies leaves the previously flushed state readable.  There is no lock on
object storage: one writer at a time.  A writer remembers the ETag of meta/sizes (taken before it
reads it) and of each superchunk file as it last saw them; before uploading it checks meta/sizes,
and where the store has conditional puts (S3) every upload is one: a file only if still the version
seen (or still absent), meta/sizes, the commit point, only if no other writer committed since.  A
refusal is a `ConcurrentWriterError` naming the object (`bytestore.WriterGuard`).
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.storage.blz.directory import SUPERCHUNK_EXT, BlzDir, _File, _Where
from blzarr.storage import objstats
from blzarr.storage.bytestore import open_bytestore
from blzarr.errors import BlzarrError, ChunkError, FormatError, StorageError
from blzarr.storage.files import ATTRIBUTES_FILE, DATA_DIR, META_DIR, SIZES_FILE

# bytes of the first GET of a superchunk file beyond its offsets table (covers its metadata section)
META_GUESS = 4096
# bytes of a first GET for a chunk's Blosc header and block starts (when the chunk is not read whole)
HEAD_GUESS = 16 + 4 * 1024
# compressed bytes one prefetch call keeps for the reads that follow it
PREFETCH_BYTES = 256 * 1024 * 1024


def head_of(data, where):
    """The Blosc header and block starts at the start of `data` (a chunk or its first bytes), or None
    when `data` is too short to hold them."""
    if len(data) < 16:
        return None
    nbytes = int.from_bytes(data[4:8], "little", signed=True)
    blocksize = int.from_bytes(data[8:12], "little", signed=True)
    ctbytes = int.from_bytes(data[12:16], "little", signed=True)
    if nbytes < 0 or ctbytes < 16:
        raise ChunkError(f"bad Blosc chunk ({where}): nbytes {nbytes}, ctbytes {ctbytes}")
    if data[2] & 0x02 or nbytes == 0:
        return bytes(data[:16])
    if blocksize <= 0:
        raise ChunkError(f"bad Blosc chunk ({where}): blocksize {blocksize}")
    hl = 16 + 4 * (-(-nbytes // blocksize))
    if hl > ctbytes:
        raise ChunkError(f"bad Blosc chunk ({where}): its block offsets do not fit in {ctbytes} bytes")
    return bytes(data[:hl]) if len(data) >= hl else None


class RemoteBlzDir(BlzDir):
    """The files of one BLZ carray directory on a byte store (see the module docstring)."""

    def __init__(self, rootdir, mode="a", bytestore=None):
        super().__init__(rootdir, mode, bytestore if bytestore is not None else open_bytestore(rootdir))
        self._sizes = {}                # file number -> object size
        self._ends = {}                 # file number -> sorted chunk offsets and the object size
        self._prefetched = {}           # chunk -> its slot's bytes, fetched ahead for the next reads
        self._recent = (None, None, None)   # (chunk, epoch, bytes): the last chunk read whole, even uncached
        self._superchunklen_hint = None             # superchunklen as meta/storage says, before file 1 is read
        self._tags = {}                 # file number -> its version tag (ETag) as listed or uploaded
        self.tag_moves = objstats.TagMoves()

    # ------------------------------------------------------------------ the files being written
    def _at_hand(self, fno):
        """Whether file `fno` is at hand in the local spool (being written): read through its handle."""
        return self._writes.local(self._key(fno))

    def _stored(self, fno):
        return fno in self._sizes

    def _uploaded(self, fno, size):
        old = self._tag_fingerprint(fno)
        self._sizes[fno] = size
        self._tags[fno] = self._guard.seen.get(self._key(fno))
        self.tag_moves.moved(old, self._tag_fingerprint(fno))

    def _remove_file(self, fno):
        super()._remove_file(fno)
        self._sizes.pop(fno, None)
        self._tags.pop(fno, None)
        self.tag_moves.forget(fno)

    # ------------------------------------------------------------------ fingerprints (objstats)
    def _tag_fingerprint(self, fno):
        return objstats.object_fingerprint(fno, self._sizes.get(fno), self._tags.get(fno))

    def chunk_fingerprint(self, n):
        """(file number, file size, its version tag as a number) of chunk n's superchunk file, from
        the listing or this writer's upload (no request); None for a file changed here and not
        uploaded yet, or a store without tags."""
        return self.chunk_fingerprints([n])[0]

    def chunk_fingerprints(self, ids):
        with self._lock:
            dirty = set(self._writes.dirty())
            out = []
            for n in ids:
                fno = n // self.superchunklen + 1
                if not 0 <= n < self._nphys or self._key(fno) in dirty:
                    out.append(None)
                else:
                    out.append(self._tag_fingerprint(fno))
            return out

    # ------------------------------------------------------------------ opening
    def _list_files(self):
        # the listing, and meta/sizes, meta/attributes and meta/stats that the carray reads next:
        # concurrently
        metas = [f"{META_DIR}/{SIZES_FILE}", f"{META_DIR}/{ATTRIBUTES_FILE}"]
        if not getattr(self.bytestore, "http", False):
            metas.append(objstats.STATS_KEY)
        if self.mode != "r":
            # a writer: the version of meta/sizes before its bytes are read (a commit in between
            # then fails this writer's conditional put instead of going unnoticed)
            self._guard.opened()
        etags = {}
        with ThreadPoolExecutor(1) as ex:
            got = ex.submit(self.bytestore.get_many, metas)
            listing = self.bytestore.list(DATA_DIR, etags=etags)
            self._guard.listed(DATA_DIR, etags)
            for key, data in got.result().items():
                if data is None and key == objstats.STATS_KEY:
                    self.bytestore.prime(key, b"", 1)       # none: no statistics (not asked again)
                elif data is not None:
                    # meta/sizes is read twice by an open (the chunks it counts, then the carray)
                    self.bytestore.prime(key, data, 2 if key.endswith(SIZES_FILE) else 1)
        nums = []
        for name, size in listing.items():
            if name.startswith("__") and name.endswith(SUPERCHUNK_EXT):
                digits = name[2:-len(SUPERCHUNK_EXT)]
                if digits.isdigit() and digits.isascii():
                    nums.append(int(digits))
                    if size is not None:
                        self._sizes[int(digits)] = int(size)
                    self._tags[int(digits)] = etags.get(name)
        nums.sort()
        if not nums and getattr(self.bytestore, "http", False):
            return self._files_from_sizes()
        if not nums and not self.bytestore.exists(f"{META_DIR}/storage"):
            raise StorageError(f"'{self.rootdir}' does not exist")
        if nums == list(range(1, len(nums) + 1)):
            # the states of the first and the last file, which opening reads: concurrently
            self.nfiles = len(nums)
            try:
                superchunklen = self.read_meta("storage").get("superchunklen")
            except (BlzarrError, AttributeError):
                superchunklen = None
            if isinstance(superchunklen, int) and not isinstance(superchunklen, bool) and 1 <= superchunklen <= 1 << 24:
                self._superchunklen_hint = superchunklen
            try:
                self._load_many([1, len(nums)])
            except BlzarrError:
                pass    # each is read (and its error reported) again by the checks of opening
        return nums

    def _files_from_sizes(self):
        """The superchunk files that meta/sizes needs, for servers that list no directory (plain
        HTTP): their sizes are asked for (HEAD) when each is first used."""
        storage = self.read_meta("storage")
        sizes = self.read_meta("sizes")
        try:
            length = int(sizes["shape"][0])
            chunklen = int(storage["chunklen"])
            superchunklen = int(storage["superchunklen"])
            objects = storage.get("dtype") == "object"
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise FormatError(f"'{self.meta_path('sizes')}' / meta/storage: cannot tell the superchunk files "
                              f"of '{self.rootdir}' ({type(e).__name__}: {e})") from None
        nstored = length if objects else -(-length // max(chunklen, 1))
        return list(range(1, max(1, -(-nstored // max(superchunklen, 1))) + 1))

    def _check_full_files(self):
        pass   # lazily: each file is checked when its state is first read (`_load_remote`)

    def _repair(self):
        pass   # files are uploaded whole from a consistent state: nothing half-written to repair

    # ------------------------------------------------------------------ the state of one file
    def _size(self, fno):
        size = self._sizes.get(fno)
        if size is None:
            size = self.bytestore.size(self._key(fno))
            if size is None:
                raise StorageError(f"cannot tell the size of '{self._path(fno)}'")
            self._sizes[fno] = size = int(size)
        return size

    def _file(self, fno):
        if self._at_hand(fno):
            return super()._file(fno)
        f = self._files.get(fno)
        if f is None:
            return self._load_remote(fno)
        self._files.move_to_end(fno)
        return f

    def _load_file(self, fno):
        if self._at_hand(fno):
            return super()._load_file(fno)
        f = self._files.get(fno)
        return f if f is not None else self._load_remote(fno)

    def _forget_file(self, fno):
        super()._forget_file(fno)
        self._ends.pop(fno, None)

    def _head_request(self, fno):
        """The range that holds file `fno`'s header, metadata and (unless they are larger than
        guessed) offsets table."""
        superchunklen = getattr(self, "superchunklen", None) or self._superchunklen_hint
        return (self._key(fno), 0, min(self._size(fno), 32 + META_GUESS + 8 * (superchunklen or 1024)))

    def _load_many(self, fnos):
        """Read the states of the files `fnos` not known yet, their first bytes fetched concurrently."""
        todo = sorted(f for f in set(fnos) if f not in self._files and not self._at_hand(f)
                      and 1 <= f <= self.nfiles)
        if len(todo) < 2:
            return
        blobs = self.bytestore.get_ranges([self._head_request(f) for f in todo])
        with self._lock:
            for fno, raw in zip(todo, blobs):
                if fno not in self._files:
                    self._load_remote(fno, raw)

    def _load_remote(self, fno, raw=None):
        """Header, metadata and offsets table of file `fno`, in one ranged GET (two for a metadata
        section larger than guessed); `raw`: the first bytes, already fetched."""
        path = self._path(fno)
        key = self._key(fno)
        size = self._size(fno)
        if raw is None:
            _, a, b = self._head_request(fno)
            raw = self.bytestore.get_range(key, a, b) if b else b""
        if len(raw) < 32:
            raise FormatError(f"superchunk file '{path}' is truncated ({size} bytes)")
        h = sc.unpack_header(raw[:32], path)
        f = _File(fno, path)

        def read(pos, n):
            # the bytes past the first GET (a metadata section or table larger than guessed): one more
            nonlocal raw
            if pos + n > len(raw):
                raw += self.bytestore.get_range(key, len(raw), pos + n)
            return raw[pos:pos + n]
        superchunklen = self._parse_head(f, h, size, read, max_k=1 << 24)
        f.fstate = ("object", size, 0)
        f.offsets = np.frombuffer(bytes(read(f.table_pos, 8 * superchunklen)), dtype="<i8").astype(np.int64)
        f.full_table = True
        nfiles = getattr(self, "nfiles", None)
        if nfiles and fno < nfiles and f.nchunks != superchunklen:
            raise FormatError(f"superchunk file '{path}' holds {f.nchunks} chunks, but it is not the "
                              f"last file and must be full ({superchunklen})")
        live = f.offsets[:f.nchunks]
        self._ends[fno] = np.append(np.sort(live[live >= 0]), size)
        return self._keep_file(f)

    def _slot_end(self, f, off):
        """Where the slot at `off` ends: the next higher chunk offset, or the end of the object."""
        ends = self._ends.get(f.fno)
        if ends is None:
            return f.fstate[1]
        k = int(np.searchsorted(ends, off, side="right"))
        return int(ends[k]) if k < len(ends) else f.fstate[1]

    def _offset(self, n):
        fno, slot = divmod(n, self.superchunklen)
        fno += 1
        if self._at_hand(fno):
            return super()._offset(n)
        if not 0 <= n < self._nphys:
            raise FormatError(f"'{self.rootdir}': chunk {n} is needed but the superchunk files hold "
                              f"{self._nphys} chunks")
        f = self._file(fno)
        off = int(f.offsets[slot])
        self._check_offset(n, f, slot, off)
        return f, None, off

    def _full_table(self, f):
        if self._at_hand(f.fno):
            return super()._full_table(f)
        return f.offsets

    # ------------------------------------------------------------------ reading
    def _head_at(self, n, f, fd, off):
        if fd is not None:
            return super()._head_at(n, f, fd, off)
        with self._lock:
            h = self._heads.get(n, f.epoch)
            if h is not None:
                return h
            where = self._where(n)
            data = self._chunks.get(n, f.epoch)
            if data is None:
                data = self._prefetched.get(n)
            end = self._slot_end(f, off)
            if data is None and self._recent[0] == n and self._recent[1] == f.epoch:
                data = self._recent[2]
            if data is None and self.checksum_id != 0 and n not in f.verified:
                # its first read will fetch and verify it whole anyway: do it now, one GET
                data = self._fetch_chunk(n, f, None, off, -1)
                self._remember(n, data, f)
            if data is None:
                data = self.bytestore.get_range(self._key(f.fno), off, min(end, off + HEAD_GUESS))
            h = head_of(data, where)
            if h is None:
                if len(data) < 16:
                    raise ChunkError(f"bad Blosc chunk ({where}): truncated header ({len(data)} bytes)")
                hl = 16 + 4 * (-(-int.from_bytes(data[4:8], "little") // int.from_bytes(data[8:12], "little")))
                if off + hl > end:
                    raise ChunkError(f"bad Blosc chunk ({where}): truncated block starts")
                h = head_of(self.bytestore.get_range(self._key(f.fno), off, off + hl), where)
            ct = int.from_bytes(h[12:16], "little")
            if off + ct > end:
                raise ChunkError(f"bad Blosc chunk ({where}): it claims {ct} bytes, its slot in "
                                 f"'{f.path}' holds {end - off} (a truncated object?)")
            self._ctbytes[n] = ct
            self._heads.put(n, f.epoch, h)
            return h

    def _fetch_chunk(self, n, f, fd, off, expected_nbytes):
        if fd is not None:
            return super()._fetch_chunk(n, f, fd, off, expected_nbytes)
        where = self._where(n)
        if self._recent[0] == n and self._recent[1] == f.epoch:
            return self._recent[2]
        end = self._slot_end(f, off)
        data = self._prefetched.pop(n, None)
        if data is None:
            data = self.bytestore.get_range(self._key(f.fno), off, end)
        return self._check_chunk(n, data, end - off, expected_nbytes, where)

    def decode_chunk_into(self, n, out, expected_nbytes=-1, nthreads=1, part=None):
        # a chunk comes whole from the byte store and stays cached (a request costs more than memory),
        # not streamed through a reused buffer as from a local file
        self._decode(self.read_chunk(n, expected_nbytes), out, nthreads, part, self._where(n))
        return out

    def _fetch_into_scratch(self, n, f, fd, off, ct, expected_nbytes, where):
        if fd is not None:
            return super()._fetch_into_scratch(n, f, fd, off, ct, expected_nbytes, where)
        data = self._fetch_chunk(n, f, None, off, expected_nbytes)
        return data, len(data)

    def _check_chunk(self, n, data, slot_bytes, expected_nbytes, where):
        if len(data) < 16:
            raise ChunkError(f"bad Blosc chunk ({where}): {len(data)} bytes, a truncated object?")
        ctbytes = int.from_bytes(data[12:16], "little", signed=True)
        if ctbytes < 16 or ctbytes + self.cksize > len(data):
            raise ChunkError(f"bad Blosc chunk ({where}): it claims {ctbytes} bytes (+{self.cksize} of "
                             f"checksum), its slot holds {len(data)} (a truncated object?)")
        data = bytearray(memoryview(data)[:ctbytes + self.cksize])
        with memoryview(data) as mv:
            sc.verify_checksum(self.checksum_id, mv[:ctbytes], mv[ctbytes:], where)
        del data[ctbytes:]
        _chunk.validate(data, expected_nbytes, where)
        return data

    def _drop_chunk(self, n):
        super()._drop_chunk(n)
        if self._recent[0] == n:
            self._recent = (None, None, None)

    def _remember(self, n, data, f):
        super()._remember(n, data, f)
        if not self._at_hand(f.fno):
            self._recent = (n, f.epoch, data)
        if self._heads.get(n, f.epoch) is None:
            try:
                h = head_of(data, self._where(n))
            except ChunkError:
                h = None
            if h is not None:
                self._heads.put(n, f.epoch, h)

    def read_range(self, n, start, nbytes, out, out_offset=0):
        fno = n // self.superchunklen + 1
        if self._at_hand(fno):
            return super().read_range(n, start, nbytes, out, out_offset)
        where = _Where(self, n)
        with self._lock:
            f, _, off = self._offset(n)
            data = self._chunks.get(n, f.epoch)
            if data is None and self._recent[0] == n and self._recent[1] == f.epoch:
                data = self._recent[2]
            lazy = data is None and n not in self._prefetched and (self.checksum_id == 0 or n in f.verified)
            if lazy:
                head = self._head_at(n, f, None, off)
        if data is None and not lazy:
            data = self.read_chunk(n)
        if data is not None:
            _chunk.getitem_into(data, start, nbytes, out, out_offset, False, where)
            return 0
        # only the blocks holding the wanted bytes: one ranged GET from the first to the last
        ctbytes = int.from_bytes(head[12:16], "little")
        hl = len(head)
        ranges = [(max(b, hl), e) for b, e in _chunk.block_ranges(head, start, nbytes, where) if e > hl]
        buf = bytearray(ctbytes)
        buf[:hl] = head
        got = 0
        if ranges:
            b0 = min(b for b, _ in ranges)
            e1 = max(e for _, e in ranges)
            if e1 > ctbytes or b0 < 0:
                raise ChunkError(f"bad Blosc chunk ({where}): block bytes [{b0}, {e1}) outside its {ctbytes} bytes")
            raw = self.bytestore.get_range(self._key(fno), off + b0, off + e1)
            if len(raw) != e1 - b0:
                raise ChunkError(f"bad Blosc chunk ({where}): {len(raw)} of its bytes [{b0}, {e1}) could be "
                                 "read (a truncated object?)")
            buf[b0:e1] = raw
            got = len(raw)
        _chunk.getitem_into(buf, start, nbytes, out, out_offset, True, where)
        return got

    def chunk_cbytes(self, n):
        c = self._ctbytes.get(n)
        if c is not None:
            return c
        fno = n // self.superchunklen + 1
        if self._at_hand(fno) or self.reserve:
            return super().chunk_cbytes(n) if self._at_hand(fno) else self._cbytes_remote(n)
        # the slot minus the checksum: exact for files written in order without reserve
        with self._lock:
            f, _, off = self._offset(n)
            return self._slot_end(f, off) - off - self.cksize

    def _cbytes_remote(self, n):
        with self._lock:
            f, _, off = self._offset(n)
            return int.from_bytes(self._head_at(n, f, None, off)[12:16], "little")

    def prefetch(self, ns):
        """Fetch the slots of chunks `ns` that are not cached yet, adjacent slots of a file in one
        range and the ranges concurrently; the following `read_chunk` calls use them.  A file whose
        table is not known yet and all of whose chunks are asked for comes whole in one GET (its
        header and table with the chunks: no round trip for the table first)."""
        ns = sorted(set(ns))
        whole = self._whole_files(ns)
        self._load_many(n // self.superchunklen + 1 for n in ns if n // self.superchunklen + 1 not in whole)   # tables: concurrently
        with self._lock:
            if len(self._prefetched) > 4096:
                self._prefetched.clear()
            runs = [[self._key(fno), 0, self._size(fno), fno] for fno in sorted(whole)]
            budget = PREFETCH_BYTES - sum(b for _, _, b, _ in runs)
            for n in ns:
                fno = n // self.superchunklen + 1
                if fno in whole or self._at_hand(fno) or not 0 <= n < self._nphys:
                    continue
                f, _, off = self._offset(n)
                if self._chunks.get(n, f.epoch) is not None or n in self._prefetched:
                    continue
                end = self._slot_end(f, off)
                budget -= end - off
                if budget < 0:
                    break
                key = self._key(fno)
                if runs and runs[-1][0] == key and runs[-1][2] == off:
                    runs[-1][2] = end
                    runs[-1][3].append((n, off, end))
                else:
                    runs.append([key, off, end, [(n, off, end)]])
        if not runs:
            return 0
        blobs = self.bytestore.get_ranges([(k, a, b) for k, a, b, _ in runs])
        with self._lock:
            for (key, a, b, parts), blob in zip(runs, blobs):
                if isinstance(parts, int):          # a whole file: its table first, then its chunks
                    parts = self._parts_of_whole(parts, blob)
                mv = memoryview(blob)
                for n, off, end in parts:
                    self._prefetched[n] = mv[off - a:end - a]
        return sum(b - a for _, a, b, _ in runs)

    def _whole_files(self, ns):
        """The files, among those of chunks `ns`, to fetch whole: table not loaded yet, every chunk
        asked for, not being written here, and small enough for the prefetch budget."""
        if not ns or not getattr(self, "superchunklen", None):
            return set()
        per = {}
        for n in ns:
            if 0 <= n < self._nphys:
                per[n // self.superchunklen + 1] = per.get(n // self.superchunklen + 1, 0) + 1
        out = set()
        budget = PREFETCH_BYTES
        for fno, count in sorted(per.items()):
            if fno in self._files or self._at_hand(fno) or fno in self._damaged or fno not in self._sizes:
                continue
            if count < min(self.superchunklen, self._nphys - (fno - 1) * self.superchunklen):
                continue
            budget -= self._sizes[fno]
            if budget < 0:
                break
            out.add(fno)
        return out

    def _parts_of_whole(self, fno, blob):
        """The state of file `fno` read from its whole bytes `blob`, and the slots of its chunks that
        are not cached yet as (n, start, end) in it."""
        try:
            f = self._files.get(fno) or self._load_remote(fno, blob)
        except BlzarrError:
            return []       # a damaged file: its chunks are read (and their errors told) one by one
        parts = []
        for slot in range(min(f.nchunks, self._nphys - (fno - 1) * self.superchunklen)):
            n = (fno - 1) * self.superchunklen + slot
            off = int(f.offsets[slot])
            if off < 0 or self._chunks.get(n, f.epoch) is not None:
                continue
            end = self._slot_end(f, off)
            if end <= len(blob):
                parts.append((n, off, end))
        return parts
