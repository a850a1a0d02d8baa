"""The BLZ layout's read strategy for a byte store without OS descriptors: ranged requests.

A `blz.BlzDir` reads its superchunk files in one of two ways, chosen by what its byte store declares
(`ByteStore.descriptors`): through OS descriptors that the Cython readers of `_superchunk` pread
(a local directory: `local.FileReads`), or, for any other store (object storage), with the
requests of `RangedReads` here: ranged GETs, whole objects, several ranges in one batch.  A file a
writer has at hand in its local spool is read through its descriptor whatever the store (by a
`FileReads` this object holds).  The
names, meta files, writes and the writer's guard are `BlzDir`'s, over the store:

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
from blzarr.storage.blz.format import SUPERCHUNK_EXT, _File, _Where
from blzarr.storage.blz.local import FileReads
from blzarr.storage import objstats
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


class RangedReads:
    """How a `BlzDir` whose byte store has no OS descriptors reads the superchunk files it does not
    have at hand (see the module docstring), and what it knows of them as objects: their sizes,
    version tags, slot ends and the chunks fetched ahead.  One per directory object; every method
    takes that directory `d` (the directory holds this object, not the other way round: no cycle
    keeps a directory and its descriptors alive)."""

    def __init__(self):
        self.sizes = {}                 # file number -> object size
        self.ends = {}                  # file number -> sorted chunk offsets and the object size
        self.prefetched = {}            # chunk -> its slot's bytes, fetched ahead for the next reads
        self.recent = (None, None, None)    # (chunk, epoch, bytes): the last chunk read whole, even uncached
        self.superchunklen_hint = None  # superchunklen as meta/storage says, before file 1 is read
        self.tags = {}                  # file number -> its version tag (ETag) as listed or uploaded
        self.tag_moves = objstats.TagMoves()
        self.files = FileReads()        # for the files a writer has at hand in its local spool

    def at_hand(self, d, fno):
        """Whether file `fno` is read through a descriptor (being written in the local spool)."""
        return d._writes.local(d._key(fno))

    # ------------------------------------------------------------------ the files being written
    def stored(self, d, fno):
        """Whether file `fno` is known to be in the byte store."""
        return fno in self.sizes

    def uploaded(self, d, fno, size):
        """File `fno` was published with `size` bytes."""
        old = self._tag_fingerprint(fno)
        self.sizes[fno] = size
        self.tags[fno] = d._guard.seen.get(d._key(fno))
        self.tag_moves.moved(old, self._tag_fingerprint(fno))

    def removed(self, d, fno):
        """File `fno` was removed."""
        self.sizes.pop(fno, None)
        self.tags.pop(fno, None)
        self.tag_moves.forget(fno)

    # ------------------------------------------------------------------ fingerprints (objstats)
    def _tag_fingerprint(self, fno):
        return objstats.object_fingerprint(fno, self.sizes.get(fno), self.tags.get(fno))

    def chunk_matches(self, d, n, off, nbytes, digest):
        """True: files are uploaded whole here, so the chunk a one-barrier meta/sizes names is there."""
        return True

    def chunk_fingerprint(self, d, n):
        return self.chunk_fingerprints(d, [n])[0]

    def moved_fingerprints(self, d):
        return self.tag_moves.moves

    def chunk_fingerprints(self, d, ids):
        """(file number, file size, its version tag as a number) of the superchunk file of each chunk
        of `ids`, from the listing or this writer's upload (no request); None for a file changed
        here and not uploaded yet, or a store without tags."""
        with d._lock:
            dirty = set(d._writes.dirty())
            out = []
            for n in ids:
                fno = n // d.superchunklen + 1
                if not 0 <= n < d._nphys or d._key(fno) in dirty:
                    out.append(None)
                else:
                    out.append(self._tag_fingerprint(fno))
            return out

    # ------------------------------------------------------------------ opening
    def list_files(self, d, plain=False):
        """The numbers of the superchunk files, sorted, from one listing of data/ (which also gives
        their sizes and tags); `plain`, a local directory's hint, does not apply."""
        # the listing, and meta/sizes, meta/attributes and meta/stats that the carray reads next:
        # concurrently
        store = d.bytestore
        metas = [f"{META_DIR}/{SIZES_FILE}", f"{META_DIR}/{ATTRIBUTES_FILE}"]
        if not getattr(store, "http", False):
            metas.append(objstats.STATS_KEY)
        if d.mode != "r":
            # a writer: the version of meta/sizes before its bytes are read (a commit in between
            # then fails this writer's conditional put instead of going unnoticed)
            d._guard.opened()
        etags = {}
        with ThreadPoolExecutor(1) as ex:
            got = ex.submit(store.get_many, metas)
            listing = store.list(DATA_DIR, etags=etags)
            d._guard.listed(DATA_DIR, etags)
            for key, data in got.result().items():
                if data is None and key == objstats.STATS_KEY:
                    store.prime(key, b"", 1)       # none: no statistics (not asked again)
                elif data is not None:
                    # meta/sizes is read twice by an open (the chunks it counts, then the carray)
                    store.prime(key, data, 2 if key.endswith(SIZES_FILE) else 1)
        nums = []
        for name, size in listing.items():
            if name.startswith("__") and name.endswith(SUPERCHUNK_EXT):
                digits = name[2:-len(SUPERCHUNK_EXT)]
                if digits.isdigit() and digits.isascii():
                    nums.append(int(digits))
                    if size is not None:
                        self.sizes[int(digits)] = int(size)
                    self.tags[int(digits)] = etags.get(name)
        nums.sort()
        if not nums and getattr(store, "http", False):
            return self._files_from_sizes(d)
        if not nums and not store.exists(f"{META_DIR}/storage"):
            raise StorageError(f"'{d.rootdir}' does not exist")
        if nums == list(range(1, len(nums) + 1)):
            # the states of the first and the last file, which opening reads: concurrently
            d.nfiles = len(nums)
            try:
                superchunklen = d.read_meta("storage").get("superchunklen")
            except (BlzarrError, AttributeError):
                superchunklen = None
            if isinstance(superchunklen, int) and not isinstance(superchunklen, bool) and 1 <= superchunklen <= 1 << 24:
                self.superchunklen_hint = superchunklen
            try:
                self.load_many(d, [1, len(nums)])
            except BlzarrError:
                pass    # each is read (and its error reported) again by the checks of opening
        return nums

    def check_full_files(self, d):
        """Nothing at opening: each file is checked when its state is first read (`load`)."""

    def _files_from_sizes(self, d):
        """The superchunk files that meta/sizes needs, for servers that list no directory (plain
        HTTP): their sizes are asked for (HEAD) when each is first used."""
        storage = d.read_meta("storage")
        sizes = d.read_meta("sizes")
        try:
            length = int(sizes["shape"][0])
            chunklen = int(storage["chunklen"])
            superchunklen = int(storage["superchunklen"])
            objects = storage.get("dtype") == "object"
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise FormatError(f"'{d.meta_path('sizes')}' / meta/storage: cannot tell the superchunk files "
                              f"of '{d.rootdir}' ({type(e).__name__}: {e})") from None
        nstored = length if objects else -(-length // max(chunklen, 1))
        return list(range(1, max(1, -(-nstored // max(superchunklen, 1))) + 1))

    # ------------------------------------------------------------------ the state of one file
    def _size(self, d, fno):
        size = self.sizes.get(fno)
        if size is None:
            size = d.bytestore.size(d._key(fno))
            if size is None:
                raise StorageError(f"cannot tell the size of '{d._path(fno)}'")
            self.sizes[fno] = size = int(size)
        return size

    def file(self, d, fno):
        """The state of file `fno` (read on its first use: an object does not change under a reader
        without a new version, which a reader sees by reopening)."""
        if self.at_hand(d, fno):
            return self.files.file(d, fno)
        f = d._files.get(fno)
        if f is None:
            return self.load(d, fno)
        d._files.move_to_end(fno)
        return f

    def load_file(self, d, fno):
        if self.at_hand(d, fno):
            return self.files.load_file(d, fno)
        f = d._files.get(fno)
        return f if f is not None else self.load(d, fno)

    def forget_file(self, d, fno):
        self.ends.pop(fno, None)

    def _head_request(self, d, fno):
        """The range that holds file `fno`'s header, metadata and (unless they are larger than
        guessed) offsets table."""
        superchunklen = getattr(d, "superchunklen", None) or self.superchunklen_hint
        return (d._key(fno), 0, min(self._size(d, fno), 32 + META_GUESS + 8 * (superchunklen or 1024)))

    def load_many(self, d, fnos):
        """Read the states of the files `fnos` not known yet, their first bytes fetched concurrently."""
        todo = sorted(f for f in set(fnos) if f not in d._files and not self.at_hand(d, f)
                      and 1 <= f <= d.nfiles)
        if len(todo) < 2:
            return
        blobs = d.bytestore.get_ranges([self._head_request(d, f) for f in todo])
        with d._lock:
            for fno, raw in zip(todo, blobs):
                if fno not in d._files:
                    self.load(d, fno, raw)

    def load(self, d, fno, raw=None):
        """Header, metadata and offsets table of file `fno`, in one ranged GET (two for a metadata
        section larger than guessed); `raw`: the first bytes, already fetched."""
        path = d._path(fno)
        key = d._key(fno)
        size = self._size(d, fno)
        if raw is None:
            _, a, b = self._head_request(d, fno)
            raw = d.bytestore.get_range(key, a, b) if b else b""
        if len(raw) < 32:
            raise FormatError(f"superchunk file '{path}' is truncated ({size} bytes)")
        h = sc.unpack_header(raw[:32], path)
        f = _File(fno, path)

        def read(pos, n):
            # the bytes past the first GET (a metadata section or table larger than guessed): one more
            nonlocal raw
            if pos + n > len(raw):
                raw += d.bytestore.get_range(key, len(raw), pos + n)
            return raw[pos:pos + n]
        superchunklen = d._parse_head(f, h, size, read, max_k=1 << 24)
        f.fstate = ("object", size, 0)
        f.offsets = np.frombuffer(bytes(read(f.table_pos, 8 * superchunklen)), dtype="<i8").astype(np.int64)
        f.full_table = True
        nfiles = getattr(d, "nfiles", None)
        if nfiles and fno < nfiles and f.nchunks != superchunklen:
            raise FormatError(f"superchunk file '{path}' holds {f.nchunks} chunks, but it is not the "
                              f"last file and must be full ({superchunklen})")
        live = f.offsets[:f.nchunks]
        self.ends[fno] = np.append(np.sort(live[live >= 0]), size)
        return d._keep_file(f)

    def _slot_end(self, f, off):
        """Where the slot at `off` ends: the next higher chunk offset, or the end of the object."""
        ends = self.ends.get(f.fno)
        if ends is None:
            return f.fstate[1]
        k = int(np.searchsorted(ends, off, side="right"))
        return int(ends[k]) if k < len(ends) else f.fstate[1]

    def offset(self, d, n):
        """(file state, None, offset) of chunk n."""
        fno, slot = divmod(n, d.superchunklen)
        fno += 1
        if self.at_hand(d, fno):
            return self.files.offset(d, n)
        if not 0 <= n < d._nphys:
            raise FormatError(f"'{d.rootdir}': chunk {n} is needed but the superchunk files hold "
                              f"{d._nphys} chunks")
        f = d._file(fno)
        off = int(f.offsets[slot])
        d._check_offset(n, f, slot, off)
        return f, None, off

    # ------------------------------------------------------------------ reading
    def read_whole_first(self, d, n):
        """False: a chunk's first read here fetches it whole with its header anyway (`head_at`)."""
        return False

    def head_at(self, d, n, f, fd, off):
        """The Blosc header and block starts of chunk n at `off` of file `f` (cached)."""
        if fd is not None:
            return self.files.head_at(d, n, f, fd, off)
        with d._lock:
            h = d._heads.get(n, f.epoch)
            if h is not None:
                return h
            where = d._where(n)
            data = d._chunks.get(n, f.epoch)
            if data is None:
                data = self.prefetched.get(n)
            end = self._slot_end(f, off)
            if data is None and self.recent[0] == n and self.recent[1] == f.epoch:
                data = self.recent[2]
            if data is None and d.checksum_id != 0 and n not in f.verified:
                # its first read will fetch and verify it whole anyway: do it now, one GET
                data = self.fetch_chunk(d, n, f, None, off, -1)
                d._remember(n, data, f)
            if data is None:
                data = d.bytestore.get_range(d._key(f.fno), off, min(end, off + HEAD_GUESS))
            h = head_of(data, where)
            if h is None:
                if len(data) < 16:
                    raise ChunkError(f"bad Blosc chunk ({where}): truncated header ({len(data)} bytes)")
                hl = 16 + 4 * (-(-int.from_bytes(data[4:8], "little") // int.from_bytes(data[8:12], "little")))
                if off + hl > end:
                    raise ChunkError(f"bad Blosc chunk ({where}): truncated block starts")
                h = head_of(d.bytestore.get_range(d._key(f.fno), off, off + hl), where)
            ct = int.from_bytes(h[12:16], "little")
            if off + ct > end:
                raise ChunkError(f"bad Blosc chunk ({where}): it claims {ct} bytes, its slot in "
                                 f"'{f.path}' holds {end - off} (a truncated object?)")
            d._ctbytes[n] = ct
            d._heads.put(n, f.epoch, h)
            return h

    def fetch_chunk(self, d, n, f, fd, off, expected_nbytes):
        """Chunk n's bytes from its slot at `off` (fetched ahead, or one ranged GET), checksum
        verified and structure validated."""
        if fd is not None:
            return self.files.fetch_chunk(d, n, f, fd, off, expected_nbytes)
        where = d._where(n)
        if self.recent[0] == n and self.recent[1] == f.epoch:
            return self.recent[2]
        end = self._slot_end(f, off)
        data = self.prefetched.pop(n, None)
        if data is None:
            data = d.bytestore.get_range(d._key(f.fno), off, end)
        return self._check_chunk(d, n, data, end - off, expected_nbytes, where)

    def decode_chunk_into(self, d, n, out, expected_nbytes=-1, nthreads=1, part=None):
        # a chunk comes whole from the byte store and stays cached (a request costs more than memory),
        # not streamed through a reused buffer as from a local file
        d._decode(d.read_chunk(n, expected_nbytes), out, nthreads, part, d._where(n))
        return out

    def whole_work(self, d, ns, expected_nbytes):
        """None: the many-chunk path pins descriptors; here `prefetch` fetches many chunks at once."""
        return None

    def _check_chunk(self, d, n, data, slot_bytes, expected_nbytes, where):
        if len(data) < 16:
            raise ChunkError(f"bad Blosc chunk ({where}): {len(data)} bytes, a truncated object?")
        ctbytes = int.from_bytes(data[12:16], "little", signed=True)
        if ctbytes < 16 or ctbytes + d.cksize > len(data):
            raise ChunkError(f"bad Blosc chunk ({where}): it claims {ctbytes} bytes (+{d.cksize} of "
                             f"checksum), its slot holds {len(data)} (a truncated object?)")
        data = bytearray(memoryview(data)[:ctbytes + d.cksize])
        with memoryview(data) as mv:
            sc.verify_checksum(d.checksum_id, mv[:ctbytes], mv[ctbytes:], where)
        del data[ctbytes:]
        _chunk.validate(data, expected_nbytes, where)
        return data

    def dropped(self, d, n):
        """Chunk n was dropped from the directory's caches."""
        if self.recent[0] == n:
            self.recent = (None, None, None)

    def remembered(self, d, n, data, f):
        """Chunk n's bytes `data` (of file state `f`) went into the directory's cache."""
        if not self.at_hand(d, f.fno):
            self.recent = (n, f.epoch, data)
        if d._heads.get(n, f.epoch) is None:
            try:
                h = head_of(data, d._where(n))
            except ChunkError:
                h = None
            if h is not None:
                d._heads.put(n, f.epoch, h)

    def read_range(self, d, n, start, nbytes, out, out_offset=0):
        """Decode bytes [start, start+nbytes) of chunk n into `out`: from the bytes at hand, else,
        once the chunk is verified, from only the Blosc blocks holding them (one ranged GET); returns
        the bytes fetched."""
        fno = n // d.superchunklen + 1
        if self.at_hand(d, fno):
            return self.files.read_range(d, n, start, nbytes, out, out_offset)
        where = _Where(d, n)
        with d._lock:
            f, _, off = d._offset(n)
            data = d._chunks.get(n, f.epoch)
            if data is None and self.recent[0] == n and self.recent[1] == f.epoch:
                data = self.recent[2]
            lazy = data is None and n not in self.prefetched and (d.checksum_id == 0 or n in f.verified)
            if lazy:
                head = self.head_at(d, n, f, None, off)
        if data is None and not lazy:
            data = d.read_chunk(n)
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
            raw = d.bytestore.get_range(d._key(fno), off + b0, off + e1)
            if len(raw) != e1 - b0:
                raise ChunkError(f"bad Blosc chunk ({where}): {len(raw)} of its bytes [{b0}, {e1}) could be "
                                 "read (a truncated object?)")
            buf[b0:e1] = raw
            got = len(raw)
        _chunk.getitem_into(buf, start, nbytes, out, out_offset, True, where)
        return got

    def chunk_cbytes(self, d, n):
        """The compressed size of chunk n."""
        c = d._ctbytes.get(n)
        if c is not None:
            return c
        if self.at_hand(d, n // d.superchunklen + 1):
            return self.files.chunk_cbytes(d, n)
        if d.reserve:
            with d._lock:
                f, _, off = d._offset(n)
                return int.from_bytes(self.head_at(d, n, f, None, off)[12:16], "little")
        # the slot minus the checksum: exact for files written in order without reserve
        with d._lock:
            f, _, off = d._offset(n)
            return self._slot_end(f, off) - off - d.cksize

    def prefetch(self, d, ns):
        """Fetch the slots of chunks `ns` that are not cached yet, adjacent slots of a file in one
        range and the ranges concurrently; the following `read_chunk` calls use them.  A file whose
        table is not known yet and all of whose chunks are asked for comes whole in one GET (its
        header and table with the chunks: no round trip for the table first)."""
        ns = sorted(set(ns))
        whole = self._whole_files(d, ns)
        # the tables of the other files: concurrently
        self.load_many(d, (n // d.superchunklen + 1 for n in ns if n // d.superchunklen + 1 not in whole))
        with d._lock:
            if len(self.prefetched) > 4096:
                self.prefetched.clear()
            runs = [[d._key(fno), 0, self._size(d, fno), fno] for fno in sorted(whole)]
            budget = PREFETCH_BYTES - sum(b for _, _, b, _ in runs)
            for n in ns:
                fno = n // d.superchunklen + 1
                if fno in whole or self.at_hand(d, fno) or not 0 <= n < d._nphys:
                    continue
                f, _, off = d._offset(n)
                if d._chunks.get(n, f.epoch) is not None or n in self.prefetched:
                    continue
                end = self._slot_end(f, off)
                budget -= end - off
                if budget < 0:
                    break
                key = d._key(fno)
                if runs and runs[-1][0] == key and runs[-1][2] == off:
                    runs[-1][2] = end
                    runs[-1][3].append((n, off, end))
                else:
                    runs.append([key, off, end, [(n, off, end)]])
        if not runs:
            return 0
        blobs = d.bytestore.get_ranges([(k, a, b) for k, a, b, _ in runs])
        with d._lock:
            for (key, a, b, parts), blob in zip(runs, blobs):
                if isinstance(parts, int):          # a whole file: its table first, then its chunks
                    parts = self._parts_of_whole(d, parts, blob)
                mv = memoryview(blob)
                for n, off, end in parts:
                    self.prefetched[n] = mv[off - a:end - a]
        return sum(b - a for _, a, b, _ in runs)

    def _whole_files(self, d, ns):
        """The files, among those of chunks `ns`, to fetch whole: table not loaded yet, every chunk
        asked for, not being written here, and small enough for the prefetch budget."""
        if not ns or not getattr(d, "superchunklen", None):
            return set()
        per = {}
        for n in ns:
            if 0 <= n < d._nphys:
                per[n // d.superchunklen + 1] = per.get(n // d.superchunklen + 1, 0) + 1
        out = set()
        budget = PREFETCH_BYTES
        for fno, count in sorted(per.items()):
            if fno in d._files or self.at_hand(d, fno) or fno in d._damaged or fno not in self.sizes:
                continue
            if count < min(d.superchunklen, d._nphys - (fno - 1) * d.superchunklen):
                continue
            budget -= self.sizes[fno]
            if budget < 0:
                break
            out.add(fno)
        return out

    def _parts_of_whole(self, d, fno, blob):
        """The state of file `fno` read from its whole bytes `blob`, and the slots of its chunks that
        are not cached yet as (n, start, end) in it."""
        try:
            f = d._files.get(fno) or self.load(d, fno, blob)
        except BlzarrError:
            return []       # a damaged file: its chunks are read (and their errors told) one by one
        parts = []
        for slot in range(min(f.nchunks, d._nphys - (fno - 1) * d.superchunklen)):
            n = (fno - 1) * d.superchunklen + slot
            off = int(f.offsets[slot])
            if off < 0 or d._chunks.get(n, f.epoch) is not None:
                continue
            end = self._slot_end(f, off)
            if end <= len(blob):
                parts.append((n, off, end))
        return parts
