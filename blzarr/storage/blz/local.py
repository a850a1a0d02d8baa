"""The BLZ layout's read strategy for a byte store whose handles are OS descriptors: positioned reads.

A `blz.BlzDir` reads its superchunk files through one of two strategy objects of the same interface,
chosen once by what its byte store declares (`ByteStore.descriptors`): `FileReads` here, where the
handles are descriptors that the Cython readers of `_superchunk` pread directly (a local directory),
and `remote.RangedReads` for any other store (object storage: ranged requests), which reads the files
a writer has at hand in its local spool through a `FileReads` of its own.  Every method takes the
directory `d` (the directory holds its strategy, never the reverse: no cycle keeps a directory and its
descriptors alive, and `adopt`, which copies a fresh directory's state, carries the strategy with it).
What the two share (the retries of a reader beside a writer, the checks that a chunk did not move
while it was read, the caches and their bounds) stays the directory's.

The interface: opening (`list_files`, `check_full_files`), the state of one file (`file`,
`load_file`, `offset`, `at_hand`, `stored`), reading (`head_at`, `fetch_chunk`, `decode_chunk_into`,
`read_range`, `whole_work`, `prefetch`), sizes and fingerprints (`chunk_cbytes`, `chunk_fingerprint`,
`chunk_fingerprints`, `moved_fingerprints`), and what the directory tells its strategy (`remembered`,
`dropped`, `forget_file`, `uploaded`, `removed`).
"""

import os
import stat
import time

import numpy as np

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.errors import ENVIRONMENT_ERRNOS, BlzarrError, ChunkError, FormatError, StorageError
from blzarr.runtime.params import get_nthreads
from blzarr.storage.blz.cache import READ_RETRIES, VERIFIED_CACHE, CHUNK_CACHE_BYTES, TOUCHED_CACHE
from blzarr.storage.blz.format import SUPERCHUNK_EXT, _File, _Where
from blzarr.storage.files import DATA_DIR


def _regular(path):
    """Whether `path` is a regular file (no symbolic link), by one lstat."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


class FileReads:
    """How a `BlzDir` whose byte store's handles are OS descriptors reads its superchunk files (see the
    module docstring).  It keeps no state of its own: what it reads goes into the directory's caches."""

    # ------------------------------------------------------------------ what the directory tells it
    def at_hand(self, d, fno):
        """Whether file `fno` is read through a descriptor: every file is."""
        return True

    def stored(self, d, fno):
        """Whether file `fno` is known to be in the byte store without being at hand: never."""
        return False

    def uploaded(self, d, fno, size):
        pass

    def removed(self, d, fno):
        pass

    def forget_file(self, d, fno):
        pass

    def remembered(self, d, n, data, f):
        pass

    def dropped(self, d, n):
        pass

    def prefetch(self, d, ns):
        """Nothing to fetch ahead: a positioned read costs no more later than now."""
        return 0

    def moved_fingerprints(self, d):
        return {}

    # ------------------------------------------------------------------ opening
    def list_files(self, d, plain=False):
        """The numbers of the superchunk files in data/, sorted (each a regular file inside the root);
        `plain`: data/ was found a directory that is no link, or missing (`BlzDir.open`)."""
        nums = []
        try:
            names = d.bytestore.names(DATA_DIR, missing_ok=False)
        except FileNotFoundError:
            if not plain:
                raise
            d._check_data_dir()      # (its message)
            raise
        for name in names:
            if name.startswith("__") and name.endswith(SUPERCHUNK_EXT):
                digits = name[2:-len(SUPERCHUNK_EXT)]
                if digits.isdigit() and digits.isascii():
                    nums.append(int(digits))
        nums.sort()
        for num in nums:
            if plain and _regular(d._path(num)):
                continue        # a regular file in data/, which is inside the root and no link
            real = d.bytestore.escapes(d._key(num))
            if real is not None:
                raise FormatError(f"superchunk file '{d._path(num)}' resolves to '{real}', which is not a "
                                  f"regular file inside '{d.rootdir}'")
        return nums

    def check_full_files(self, d):
        """Every file but the last holds `superchunklen` chunks; one that cannot be read or does not is damaged
        (its chunks raise when read, the other files' chunks stay readable)."""
        for fno in range(1, d.nfiles):
            if fno in d._damaged:
                continue
            # a state this open loaded already (`_first_file`'s file 1) is not read a second time:
            # a later read checks it against the file (`file`) as it checks any other
            f = d._files.get(fno)
            try:
                if f is None:
                    f = self.load_file(d, fno)
            except (FormatError, StorageError) as e:
                if getattr(e, "errno", None) in ENVIRONMENT_ERRNOS:
                    raise
                d._damaged[fno] = str(e)
                continue
            if f.nchunks != d.superchunklen:
                d._damaged[fno] = (f"superchunk file '{d._path(fno)}' holds {f.nchunks} chunks, but "
                                   f"it is not the last file and must be full ({d.superchunklen})")

    # ------------------------------------------------------------------ the state of one file
    def file(self, d, fno):
        """The state of file `fno`, reloaded when the file changed behind our back (never while it has
        rewrites waiting for their offsets switch: the state in memory is the truth then)."""
        pinned = d._pending.get(fno) if hasattr(d, "_pending") else None
        if pinned is not None:
            return pinned[0]
        f = d._files.get(fno)
        if f is None:
            return self.load_file(d, fno)
        d._files.move_to_end(fno)
        if d._fio.state(d._fd(fno)) != f.fstate:
            d._forget_file(fno)
            return self.load_file(d, fno)
        return f

    def load_file(self, d, fno):
        fd = d._fd(fno)
        f = _File(fno, d._path(fno))
        f.fstate = d._fio.state(fd)
        h = sc.unpack_header(sc.pread(fd, 32, 0, f.path), f.path)
        superchunklen = d._parse_head(f, h, f.fstate[1], lambda pos, n: sc.pread(fd, n, pos, f.path))
        f.offsets = np.full(superchunklen, -2, dtype=np.int64)     # -2: not read yet
        f.full_table = False
        over = d._overlay.get(fno) if d._overlay else None
        if over is not None:
            # a committed rewrite record switches entries of this file: they are read from the record
            for slot, pos in over[0].items():
                if 0 <= slot < superchunklen:
                    f.offsets[slot] = pos
            f.nchunks, f.last_chunk = over[1], over[2]
        return d._keep_file(f)

    def offset(self, d, n):
        """(file state, fd, offset) of chunk n, reading only its offsets entry."""
        fno, slot = divmod(n, d.superchunklen)
        fno += 1
        if not 0 <= n < d._nphys:
            raise FormatError(f"'{d.rootdir}': {d._where(n)} is needed but the superchunk files hold "
                              f"{d._nphys} chunks")
        if fno in d._damaged:
            raise FormatError(f"{d._where(n)} cannot be read: {d._damaged[fno]}")
        f = self.file(d, fno)
        fd = d._fd(fno)
        off = int(f.offsets[slot])
        if off == -2:
            off = sc.read_offset(fd, f.table_pos, slot, f.path)
            f.offsets[slot] = off
        if (slot >= f.nchunks or off == -1 or off + 16 > f.fstate[1]) and d._fio.state(fd) != f.fstate \
                and fno not in d._pending:
            # a writer changed the file since its state was read (a reader beside a writer): reload
            d._forget_file(fno)
            f = self.load_file(d, fno)
            off = int(f.offsets[slot])
            if off == -2:
                off = sc.read_offset(fd, f.table_pos, slot, f.path)
                f.offsets[slot] = off
        d._check_offset(n, f, slot, off)
        return f, fd, off

    # ------------------------------------------------------------------ reading
    def read_whole_first(self, d, n):
        """Whether `read_range` would read chunk n whole (and cache it): a chunk not verified, whose
        size is not known yet (so the cache's room is not asked), in a dataset with checksums."""
        if not d.checksum_id:
            return False
        with d._lock:
            f = d._files.get(n // d.superchunklen + 1)
            return (f is not None and n not in f.verified and n not in d._ctbytes
                    and d._heads.get(n, f.epoch) is None and d._chunks.get(n, f.epoch) is None)

    def head_at(self, d, n, f, fd, off):
        with d._lock:
            h = d._heads.get(n, f.epoch)
            if h is not None:
                return h
            try:
                h = sc.read_head(fd, off, f.fstate[1], d._where(n))
            except ValueError as e:
                if isinstance(e, BlzarrError):
                    raise
                # e.g. an nbytes near 2**31 overflowing the block count (a hostile header)
                raise ChunkError(f"bad Blosc chunk ({d._where(n)}): {e}") from None
            d._ctbytes[n] = int.from_bytes(h[12:16], "little")
            d._heads.put(n, f.epoch, h)
            return h

    def fetch_chunk(self, d, n, f, fd, off, expected_nbytes):
        """Chunk n's bytes from the file at `off`, checksum verified and structure validated."""
        where = d._where(n)
        h16 = sc.pread(fd, 16, off, where)
        ctbytes = int.from_bytes(h16[12:16], "little", signed=True)
        if ctbytes < 16 or off + ctbytes + d.cksize > f.fstate[1]:
            raise FormatError(f"{where}: the chunk claims {ctbytes} bytes (+{d.cksize} of checksum), "
                              f"past the end of the file ({f.fstate[1]} bytes)")
        data = sc.pread(fd, ctbytes + d.cksize, off, where)
        with memoryview(data) as mv:
            sc.verify_checksum(d.checksum_id, mv[:ctbytes], mv[ctbytes:], where)
        del data[ctbytes:]                  # the checksum: in place, no copy of the chunk
        _chunk.validate(data, expected_nbytes, where)
        d._check_still_at(n, f, fd, off, where)
        return data

    def decode_chunk_into(self, d, n, out, expected_nbytes=-1, nthreads=1, part=None):
        """Decode chunk n whole into the contiguous array `out`, its checksum verified and its structure
        validated first (as `read_chunk`), and return `out`.

        A chunk found in the cache is decoded from there.  Any other is read into a buffer of the
        calling thread, reused from chunk to chunk, and is not cached: a long read streams through one
        warm buffer instead of allocating, faulting in and freeing a chunk-sized buffer per chunk (that
        cost as much as the decoding), and leaves the cache to the random reads it serves.  The chunk is
        remembered as verified, so later reads of a few of its blocks read only those blocks.
        With `part` = (start, nbytes, out_offset), only those bytes are decoded (into `out` at
        out_offset), the whole chunk still read and verified."""
        for attempt in range(READ_RETRIES):
            try:
                return self._decode_chunk_into(d, n, out, expected_nbytes, nthreads, part)
            except (FormatError, ChunkError):
                if d.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                d._reload(n // d.superchunklen + 1, n)
                time.sleep(0.001 * attempt)

    def _decode_chunk_into(self, d, n, out, expected_nbytes, nthreads, part):
        where = _Where(d, n)
        with d._lock:
            f, fd, off = self.offset(d, n)
            data = d._chunks.get(n, f.epoch)
            buf = None
            if data is None:
                ct = d._ctbytes.get(n)
                if d.mode != "r":
                    # beside a writer of this process: read under the lock, decode outside it
                    buf, ct = self._fetch_into_scratch(d, n, f, fd, off, ct, expected_nbytes, where)
                else:
                    d._borrow(fd)
                    # verified before at this offset in this state of the file: read again without its
                    # checksum (as the lazy reads of `read_range` do), its offsets entry still re-checked
                    cid = 0 if n in f.verified else d.checksum_id
        if data is not None:
            if expected_nbytes >= 0 and int.from_bytes(data[4:8], "little") != expected_nbytes:
                raise ChunkError(f"bad Blosc chunk ({where}): it holds {int.from_bytes(data[4:8], 'little')} "
                                 f"bytes, {expected_nbytes} expected")
            d._decode(data, out, nthreads, part, where)
            return out
        if buf is None and part is None:
            # a reader's whole chunk (the long reads): read, verified, validated, its offsets entry
            # checked and decoded in one call, into this thread's buffer
            local = d._local
            entry = d._entry_pos(f, n)
            try:
                local.cbuf, ct = sc.fetch_decode(fd, off, -1 if ct is None else ct, f.fstate[1],
                                                 cid, getattr(local, "cbuf", None), out,
                                                 expected_nbytes, nthreads, entry, where)
                if entry < 0:
                    # no entry checked: read where a rewrite record or meta/sizes' "last" says (the
                    # record must still stand, or the file say it; that meta/sizes still be current)
                    d._check_still_at(n, f, fd, off, where)
            finally:
                with d._lock:
                    d._release_fd(fd)
        else:
            if buf is None:
                try:
                    buf, ct = self._fetch_into_scratch(d, n, f, fd, off, ct, expected_nbytes, where)
                finally:
                    with d._lock:
                        d._release_fd(fd)
            with memoryview(buf) as mv, mv[:ct] as view:
                d._decode(view, out, nthreads, part, where)
        with d._lock:
            if not d._current(f):
                return out
            f.verified.add(n)
            if len(f.verified) > VERIFIED_CACHE:
                f.verified.clear()
                f.verified.add(n)
            d._ctbytes[n] = ct
        return out

    def _fetch_into_scratch(self, d, n, f, fd, off, ct, expected_nbytes, where):
        """(this thread's chunk buffer, ctbytes) holding chunk n read from `off`, checksum verified
        and structure validated."""
        if ct is None:
            ct = int.from_bytes(sc.pread(fd, 16, off, where)[12:16], "little", signed=True)
        if ct < 16 or off + ct + d.cksize > f.fstate[1]:
            raise FormatError(f"{where}: the chunk claims {ct} bytes (+{d.cksize} of checksum), "
                              f"past the end of the file ({f.fstate[1]} bytes)")
        total = ct + d.cksize
        local = d._local
        buf = getattr(local, "cbuf", None)
        if buf is None or len(buf) < total:
            buf = local.cbuf = sc.empty_buffer(total + total // 8)
        with memoryview(buf) as mv, mv[:ct] as view, mv[ct:total] as stored:
            sc.pread_into(fd, mv[:total], off, where)
            sc.verify_checksum(d.checksum_id, view, stored, where)
            _chunk.validate(view, expected_nbytes, where)
        d._check_still_at(n, f, fd, off, where)
        return buf, ct

    def read_range(self, d, n, start, nbytes, out, out_offset=0):
        """Decode bytes [start, start+nbytes) of chunk n into `out`.

        A chunk in the cache is decoded from memory.  Otherwise, once the chunk has been verified (or
        when the dataset has no checksums), only the needed blocks are read from the file; a chunk not
        yet verified is read whole and verified, and cached while the chunk cache has room (else read
        through a reused buffer), and so is a chunk touched again soon after a lazy read while the cache
        has free room.  Returns the bytes read from the file."""
        where = _Where(d, n)
        with d._lock:
            f, fd, off = self.offset(d, n)
            data = d._chunks.get(n, f.epoch)
            if data is not None:
                lazy = False
            else:
                lazy = d.checksum_id == 0 or n in f.verified
                if lazy and n in d._touched:
                    # a second touch: cache the whole chunk, but only while the cache has free room
                    # (evicting chunks for a random workload larger than the cache would read whole
                    # chunks where a few blocks do)
                    ct = d._ctbytes.get(n)
                    lazy = ct is None or d._chunks.nbytes + ct > CHUNK_CACHE_BYTES
                elif lazy:
                    d._touched[n] = None
                    if len(d._touched) > TOUCHED_CACHE:
                        d._touched.popitem(last=False)
            if lazy:
                head = self.head_at(d, n, f, fd, off)
                fno = f.fno
                d._borrow(fd)
        if data is None and not lazy:
            ct = d._ctbytes.get(n)
            if ct is not None and d._chunks.nbytes + ct > CHUNK_CACHE_BYTES:
                # the first touch of a chunk when caching it would evict another: read and verify it
                # through this thread's buffer, decode the part wanted, keep nothing but "verified"
                d.decode_chunk_into(n, out, -1, 1, (start, nbytes, out_offset))
                return ct + d.cksize
            data = d.read_chunk(n)
        if data is not None:
            _chunk.getitem_into(data, start, nbytes, out, out_offset, False, where)
            return 0
        retry = False
        try:
            got = sc.read_blocks_into(fd, off, head, start, nbytes, out, out_offset, where, d._scratch())
            d._check_still_at(n, f, fd, off, where)
            return got
        except (FormatError, ChunkError):
            if d.mode != "r":
                raise
            # a writer moved the chunk under this lazy read: read it whole (verified, with retries)
            retry = True
        finally:
            with d._lock:
                d._release_fd(fd)
        if retry:
            d._reload(fno, n)
            data = d.read_chunk(n)
            _chunk.getitem_into(data, start, nbytes, out, out_offset, False, where)
            return 0

    # ------------------------------------------------------------------ many whole chunks at once
    def whole_work(self, d, ns, expected_nbytes):
        """(work, ns, pinned files) reading the chunks `ns` whole in one `sc.ReadChunks` (their offsets
        taken with one state check per file, their descriptors pinned), or None where that path does not
        apply: a writer in this process, a byte store without descriptors, a checksum not verified
        without the GIL, a file known damaged, or an offset outside its file (the chunk-by-chunk path
        then says what is wrong)."""
        if (d.mode != "r" or expected_nbytes <= 0 or len(ns) < 2 or d._overlay
                or not sc.native_checksum(d.checksum_id)):
            return None
        ns = np.asarray(ns, dtype=np.int64)
        fds = np.empty(len(ns), np.int64)
        offs = np.empty(len(ns), np.int64)
        lims = np.empty(len(ns), np.int64)
        ents = np.empty(len(ns), np.int64)
        known = np.full(len(ns), -1, np.int64)
        ver = np.zeros(len(ns), np.int8)
        fnos = ns // d.superchunklen + 1
        slots = ns % d.superchunklen
        pinned = []
        with d._lock:
            if int(ns.min()) < 0 or int(ns.max()) >= d._nphys:
                return None
            try:
                for fno in np.unique(fnos).tolist():
                    if fno in d._damaged:
                        return None
                    f = self.file(d, fno)
                    sel = fnos == fno
                    sl = slots[sel]
                    off = d._full_table(f)[sl]
                    if (sl >= f.nchunks).any() or (off < f.data_start).any() or (off + 16 > f.fstate[1]).any():
                        return None
                    fd = d._fd(fno)
                    fds[sel] = fd
                    offs[sel] = off
                    lims[sel] = f.fstate[1]
                    ents[sel] = f.table_pos + 8 * sl
                    if f.verified:
                        # verified before in this state of the file: no checksum again, size known
                        for k in np.flatnonzero(sel).tolist():
                            n = int(ns[k])
                            if n in f.verified:
                                ver[k] = 1
                                known[k] = d._ctbytes.get(n, -1)
                    d._borrow(fd)
                    pinned.append((f, fd))
            except BaseException:
                for f, fd in pinned:
                    d._release_fd(fd)
                raise
        work = sc.ReadChunks(fds, offs, lims, ents, d.checksum_id, expected_nbytes, get_nthreads(), known, ver)
        return work, ns, pinned

    # ------------------------------------------------------------------ sizes and fingerprints
    def chunk_matches(self, d, n, off, nbytes, digest):
        """Whether chunk `n` (of its superchunk file) is at `off` with `nbytes` uncompressed bytes and
        a checksum beginning with `digest` (hex): the chunk a one-barrier meta/sizes names reached the
        disk.  `nbytes` None: a full chunk, which the file's offsets entry must also name (readers
        find it there)."""
        fno, slot = divmod(n, d.superchunklen)
        fno += 1
        if not d.cksize or fno > d.nfiles or fno in d._damaged:
            return False        # (a later file may exist: a flush after this one began to append)
        path = d._path(fno)
        try:
            fd = d._fd(fno)
            if nbytes is None:
                nbytes = d.chunk_nbytes
                f = d._file(fno)
                if sc.read_offset(fd, f.table_pos, slot, path) != off:
                    return False
            head = d._fio.pread(fd, 16, off, path)
            ct = int.from_bytes(head[12:16], "little", signed=True) if len(head) == 16 else 0
            ok = (int.from_bytes(head[4:8], "little", signed=True) == nbytes
                  and 16 <= ct <= 2 * d.chunk_nbytes + 65536)
            if ok:
                # the chunk and the checksum after it, as a read of it verifies them
                data = bytes(d._fio.pread(fd, ct + d.cksize, off, path))
                want = sc.checksum(d.checksum_id, data[:ct])
                ok = len(data) == ct + d.cksize and data[ct:] == want and want[:8].hex() == digest
        except (BlzarrError, OSError, ValueError):
            ok = False
        return ok

    def chunk_cbytes(self, d, n):
        """The compressed size of chunk n (its 16-byte header is read once)."""
        c = d._ctbytes.get(n)
        if c is None:
            with d._lock:
                f, fd, off = self.offset(d, n)
                h = d._heads.get(n, f.epoch)
                raw = h[:16] if h is not None else sc.pread(fd, 16, off, d._where(n))
                c = int.from_bytes(raw[12:16], "little", signed=True)
                if c < 16:
                    raise ChunkError(f"bad Blosc chunk ({d._where(n)}): ctbytes {c}")
                d._ctbytes[n] = c
        return c

    def chunk_fingerprint(self, d, n):
        """(offset, ctbytes, first bytes of the stored checksum) of chunk n: a rewrite never reuses
        the live bytes of a chunk, so its offset changes (and its checksum, where there is one).
        On a store without descriptors: (file number, file size, version tag), see `RangedReads`."""
        with d._lock:
            f, fd, off = self.offset(d, n)
            fp = d._fps.get(n)
            if fp is not None and fp[0] == off:
                return fp
            raw = sc.pread(fd, 16, off, d._where(n))
            ct = int.from_bytes(raw[12:16], "little", signed=True)
            ck = 0
            if d.cksize and ct >= 16 and off + ct + d.cksize <= f.fstate[1]:
                raw = bytes(sc.pread(fd, min(8, d.cksize), off + ct, d._where(n)))
                ck = int.from_bytes(raw.ljust(8, b"\0"), "little", signed=True)
            return (off, ct, ck)

    def chunk_fingerprints(self, d, ids):
        """`chunk_fingerprint` of each chunk of `ids`, for a writer storing its statistics: a chunk this
        store wrote lately is given the fingerprint it kept while writing when its offsets entry still
        names those bytes (each file's state looked up once for the batch, not once per chunk); any
        other is read as `chunk_fingerprint` reads it."""
        out = []
        with d._lock:
            files = {}
            for n in ids:
                fp = d._fps.get(n)
                if fp is not None and 0 <= n < d._nphys:
                    fno, slot = divmod(n, d.superchunklen)
                    f = files.get(fno + 1)
                    if f is None:
                        f = files[fno + 1] = self.file(d, fno + 1)
                    if slot < f.nchunks and int(f.offsets[slot]) == fp[0]:
                        out.append(fp)
                        continue
                out.append(self.chunk_fingerprint(d, n))
        return out
