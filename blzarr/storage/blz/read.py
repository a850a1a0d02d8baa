"""BLZ reads: a chunk's header, a chunk read whole (checksum verified, structure validated, cached), a
range of a chunk decoded from the cache or from only the blocks it needs (`BlzReads`, a part of
`BlzDir`)."""

import time

import numpy as np

from blzarr import _chunk, _sums
from blzarr import _superchunk as sc
from blzarr.runtime.parallel import run_threads
from blzarr.runtime.params import get_nthreads
from blzarr.storage.blz.cache import CHUNK_CACHE_BYTES, FD_CACHE, READ_RETRIES, TOUCHED_CACHE, VERIFIED_CACHE
from blzarr.storage import rewrite
from blzarr.storage.blz.format import _Where
from blzarr.errors import BlzarrError, ChunkError, FormatError


def _validated_head(data):
    """The Blosc header and block starts at the start of the chunk `data`, whose structure was
    validated (`_chunk.validate`: its block starts fit in it)."""
    nbytes = int.from_bytes(data[4:8], "little")
    if data[2] & 0x02 or not nbytes:
        return bytes(data[:16])
    return bytes(data[:16 + 4 * (-(-nbytes // int.from_bytes(data[8:12], "little")))])


class BlzReads:
    """Reading the chunks of a `BlzDir`."""

    # ------------------------------------------------------------------ reading
    def head(self, n, whole=False):
        """The Blosc header + bstarts of chunk n (cached; a reader retries as `read_chunk` does).
        `whole`: a read of part of the chunk follows, which reads a chunk not verified yet whole (to
        verify it, `read_range`): such a chunk is read whole now and its header taken from its bytes,
        rather than read from the file first."""
        if whole and self._read_whole_first(n):
            data = self.read_chunk(n)
            h = _validated_head(data)
            with self._lock:
                f = self._files.get(n // self.superchunklen + 1)
                if f is not None and self._chunks.get(n, f.epoch) is data:
                    self._heads.put(n, f.epoch, h)
            return h
        for attempt in range(READ_RETRIES):
            try:
                with self._lock:
                    f, fd, off = self._offset(n)
                    return self._head_at(n, f, fd, off)
            except (FormatError, ChunkError):
                if self.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                self._reload(n // self.superchunklen + 1, n)
                time.sleep(0.001 * attempt)

    def _read_whole_first(self, n):
        """Whether `read_range` would read chunk n whole (and cache it): a chunk not verified, whose
        size is not known yet (so the cache's room is not asked), of a file read through descriptors
        in a dataset with checksums."""
        if self._ranged is not None or not self.checksum_id:
            return False
        with self._lock:
            f = self._files.get(n // self.superchunklen + 1)
            return (f is not None and n not in f.verified and n not in self._ctbytes
                    and self._heads.get(n, f.epoch) is None and self._chunks.get(n, f.epoch) is None)

    def _head_at(self, n, f, fd, off):
        if fd is None:          # a file read with requests (no descriptor: `_offset` gave none)
            return self._ranged.head_at(self, n, f, off)
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
        its offset and the read (its old bytes reused by a later rewrite, its file replaced by a
        compaction): it then reopens the file, reads its state again and retries, a bounded number of
        times (`READ_RETRIES`, a short growing pause between them); only damage that persists raises."""
        for attempt in range(READ_RETRIES):
            try:
                return self._read_chunk(n, expected_nbytes)
            except (FormatError, ChunkError):
                if self.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                self._reload(n // self.superchunklen + 1, n)
                time.sleep(0.001 * attempt)

    def _reload(self, fno, n=None):
        """Forget what is known of file `fno` (and chunk n) and open it again at the next read (a
        compaction may have replaced the file: the old descriptor reads the old one; reads in flight
        through it keep it until they are done).  A reader reading through a rewrite record reads the
        record again too: the writer removes it once the files say what it says, and the offsets it
        names are then no longer the chunks' (a later rewrite moves them, a compaction replaces the file)."""
        with self._lock:
            if self._overlay is not None and not self._own_overlay:
                self._read_record_again()
            self._forget_file(fno)
            if n is not None:
                self._drop_chunk(n)
            self._close(fno)
            self.reread_last()      # (only where meta/sizes' "last" located the short chunk)

    def _read_record_again(self):
        """Take the committed rewrite record as it is now (None once the writer removed it), forgetting
        the states of the files whose offsets the old or the new one switched."""
        old = self._overlay
        plan = rewrite.plan_for(self.rootdir)
        if plan is None:
            self._overlay = None
        else:
            self.read_through(plan)
        if self._overlay != old:
            for fno in set(old or ()) | set(self._overlay or ()):
                self._forget_file(fno)

    def _record_still_names(self, fno, slot, off):
        """Whether the rewrite record, read again now, still puts chunk `slot` of file `fno` at `off`."""
        with self._lock:
            self._read_record_again()
            over = self._overlay.get(fno) if self._overlay else None
            return over is not None and over[0].get(slot) == off

    def _entry_pos(self, f, n):
        """Where chunk n's offsets entry is in file `f`, to check after a read that the chunk did not
        move meanwhile; -1 (no check) where a committed rewrite record gives the entry."""
        slot = n - (f.fno - 1) * self.superchunklen
        over = self._overlay.get(f.fno) if self._overlay else None
        return -1 if over is not None and slot in over[0] else f.table_pos + 8 * slot

    def _check_still_at(self, n, f, fd, off, where):
        """A reader (mode 'r'), after reading chunk n's bytes from `off`: its offsets entry in the file
        must still say `off`.  A writer in another process may have moved the chunk meanwhile and reused
        its old bytes for another chunk, whose checksum is valid: only the entry tells."""
        if self.mode != "r":
            return
        slot = n - (f.fno - 1) * self.superchunklen
        over = self._overlay.get(f.fno) if self._overlay else None
        if over is not None and len(over) > 3 and slot in over[0]:
            # read where meta/sizes' "last" says: that meta/sizes must still be the current one
            if not self.sizes_still_name(n, off):
                raise FormatError(f"{where}: meta/sizes no longer names the place the chunk was read "
                                  "from (a writer committed since)")
            return
        if sc.read_offset(fd, f.table_pos, slot, where) == off:
            return
        # read where a committed rewrite record says: the file does not say it while the writer has
        # not switched that entry yet, and that stays true only while the record stands
        if over is not None and over[0].get(slot) == off and self._record_still_names(f.fno, slot, off):
            return
        raise FormatError(f"{where}: the chunk moved while it was read (a writer rewrote it)")

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
            self._borrow(fd)
        # read-only (no writer in this process): the read, the checksum and the validation run outside
        # the lock, so the threads of a long read overlap them (live bytes are never overwritten, and a
        # chunk moved by another process's writer is retried by read_chunk)
        try:
            data = self._fetch_chunk(n, f, fd, off, expected_nbytes)
        finally:
            with self._lock:
                self._release_fd(fd)
        with self._lock:
            if self._current(f):
                self._remember(n, data, f)
        return data

    def _fetch_chunk(self, n, f, fd, off, expected_nbytes):
        """Chunk n's bytes from the file at `off`, checksum verified and structure validated."""
        if fd is None:
            return self._ranged.fetch_chunk(self, n, f, off, expected_nbytes)
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
        self._check_still_at(n, f, fd, off, where)
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
        if self._ranged is not None:
            return self._ranged.decode_chunk_into(self, n, out, expected_nbytes, nthreads, part)
        for attempt in range(READ_RETRIES):
            try:
                return self._decode_chunk_into(n, out, expected_nbytes, nthreads, part)
            except (FormatError, ChunkError):
                if self.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                self._reload(n // self.superchunklen + 1, n)
                time.sleep(0.001 * attempt)

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
                    self._borrow(fd)
                    # verified before at this offset in this state of the file: read again without its
                    # checksum (as the lazy reads of `read_range` do), its offsets entry still re-checked
                    cid = 0 if n in f.verified else self.checksum_id
        if data is not None:
            if expected_nbytes >= 0 and int.from_bytes(data[4:8], "little") != expected_nbytes:
                raise ChunkError(f"bad Blosc chunk ({where}): it holds {int.from_bytes(data[4:8], 'little')} "
                                 f"bytes, {expected_nbytes} expected")
            self._decode(data, out, nthreads, part, where)
            return out
        if buf is None and part is None:
            # a reader's whole chunk (the long reads): read, verified, validated, its offsets entry
            # checked and decoded in one call, into this thread's buffer
            local = self._local
            entry = self._entry_pos(f, n)
            try:
                local.cbuf, ct = sc.fetch_decode(fd, off, -1 if ct is None else ct, f.fstate[1],
                                                 cid, getattr(local, "cbuf", None), out,
                                                 expected_nbytes, nthreads, entry, where)
                if entry < 0:
                    # no entry checked: read where a rewrite record or meta/sizes' "last" says (the
                    # record must still stand, or the file say it; that meta/sizes still be current)
                    self._check_still_at(n, f, fd, off, where)
            finally:
                with self._lock:
                    self._release_fd(fd)
        else:
            if buf is None:
                try:
                    buf, ct = self._fetch_into_scratch(n, f, fd, off, ct, expected_nbytes, where)
                finally:
                    with self._lock:
                        self._release_fd(fd)
            with memoryview(buf) as mv, mv[:ct] as view:
                self._decode(view, out, nthreads, part, where)
        with self._lock:
            if not self._current(f):
                return out
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
        self._check_still_at(n, f, fd, off, where)
        return buf, ct

    def read_range(self, n, start, nbytes, out, out_offset=0):
        """Decode bytes [start, start+nbytes) of chunk n into `out`.

        A chunk in the cache is decoded from memory.  Otherwise, once the chunk has been verified (or
        when the dataset has no checksums), only the needed blocks are read from the file; a chunk not
        yet verified is read whole and verified, and cached while the chunk cache has room (else read
        through a reused buffer), and so is a chunk touched again soon after a lazy read while the cache
        has free room.  Returns the bytes read from the file."""
        if self._ranged is not None:
            fno = n // self.superchunklen + 1
            if not self._at_hand(fno):
                return self._ranged.read_range(self, n, fno, start, nbytes, out, out_offset)
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
                self._borrow(fd)
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
        retry = False
        try:
            got = sc.read_blocks_into(fd, off, head, start, nbytes, out, out_offset, where, self._scratch())
            self._check_still_at(n, f, fd, off, where)
            return got
        except (FormatError, ChunkError):
            if self.mode != "r":
                raise
            # a writer moved the chunk under this lazy read: read it whole (verified, with retries)
            retry = True
        finally:
            with self._lock:
                self._release_fd(fd)
        if retry:
            self._reload(fno, n)
            data = self.read_chunk(n)
            _chunk.getitem_into(data, start, nbytes, out, out_offset, False, where)
            return 0

    # ------------------------------------------------------------------ many whole chunks at once
    def _whole_work(self, ns, expected_nbytes):
        """(work, ns, pinned files) reading the chunks `ns` whole in one `sc.ReadChunks` (their offsets
        taken with one state check per file, their descriptors pinned), or None where that path does not
        apply: a writer in this process, a byte store without descriptors, a checksum not verified
        without the GIL, a file known damaged, or an offset outside its file (the chunk-by-chunk path
        then says what is wrong)."""
        if (self.mode != "r" or self._ranged is not None or expected_nbytes <= 0 or len(ns) < 2 or self._overlay
                or not sc.native_checksum(self.checksum_id)):
            return None
        ns = np.asarray(ns, dtype=np.int64)
        fds = np.empty(len(ns), np.int64)
        offs = np.empty(len(ns), np.int64)
        lims = np.empty(len(ns), np.int64)
        ents = np.empty(len(ns), np.int64)
        known = np.full(len(ns), -1, np.int64)
        ver = np.zeros(len(ns), np.int8)
        fnos = ns // self.superchunklen + 1
        slots = ns % self.superchunklen
        pinned = []
        with self._lock:
            if int(ns.min()) < 0 or int(ns.max()) >= self._nphys:
                return None
            try:
                for fno in np.unique(fnos).tolist():
                    if fno in self._damaged:
                        return None
                    f = self._file(fno)
                    sel = fnos == fno
                    sl = slots[sel]
                    off = self._full_table(f)[sl]
                    if (sl >= f.nchunks).any() or (off < f.data_start).any() or (off + 16 > f.fstate[1]).any():
                        return None
                    fd = self._fd(fno)
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
                                known[k] = self._ctbytes.get(n, -1)
                    self._borrow(fd)
                    pinned.append((f, fd))
            except BaseException:
                for f, fd in pinned:
                    self._release_fd(fd)
                raise
        work = sc.ReadChunks(fds, offs, lims, ents, self.checksum_id, expected_nbytes, get_nthreads(), known, ver)
        return work, ns, pinned

    def _whole_batches(self, ns):
        """`ns` (ascending chunk numbers) cut into runs (index ranges) of at most FD_CACHE files each
        (the descriptors one `_whole_work` job pins at once)."""
        fnos = np.asarray(ns, dtype=np.int64) // self.superchunklen
        cuts = [0]
        first = int(fnos[0]) if len(fnos) else 0
        for k in np.flatnonzero(np.diff(fnos)).tolist():
            if not first <= fnos[k + 1] < first + FD_CACHE:
                cuts.append(k + 1)
                first = int(fnos[k + 1])
        cuts.append(len(fnos))
        return list(zip(cuts[:-1], cuts[1:]))

    def _whole(self, ns, expected_nbytes, use):
        """Read the whole chunks `ns` by `sc.ReadChunks` jobs (one per run of at most FD_CACHE files),
        `use(work, lo, hi)` setting up what the job of ``ns[lo:hi]`` does with them; the positions in
        `ns` of the chunks that failed there, or None (nothing more done) where a job does not apply."""
        ns = np.asarray(ns, dtype=np.int64)
        failed = []
        for lo, hi in self._whole_batches(ns):
            job = self._whole_work(ns[lo:hi], expected_nbytes)
            if job is None:
                return None
            work, sub, pinned = job
            try:
                use(work, lo, hi)
                run_threads(work.run, work.nparts)
            finally:
                with self._lock:
                    for f, fd in pinned:
                        self._release_fd(fd)
                    files = {f.fno: f for f, _ in pinned if self._current(f)}
                    ok = work.status == 0
                    for n, ct in zip(sub[ok].tolist(), work.cts[ok].tolist()):
                        f = files.get(n // self.superchunklen + 1)
                        if f is None:
                            continue
                        f.verified.add(n)
                        if len(f.verified) > VERIFIED_CACHE:
                            f.verified.clear()
                            f.verified.add(n)
                        self._ctbytes[n] = ct
            failed += (lo + np.flatnonzero(work.status)).tolist()
        return failed

    def decode_whole(self, ns, out, offsets, expected_nbytes):
        """Decode the whole chunks `ns` into the contiguous array `out`, chunk ``ns[k]`` at byte
        ``offsets[k]``, read, verified and decoded on every thread without the GIL; False where that path
        does not apply (see `_whole_work`; `out` may then hold some of the chunks).  A chunk that fails
        there is read again by `decode_chunk_into` (which retries a moved chunk, raises for a damaged one)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        failed = self._whole(ns, expected_nbytes, lambda w, lo, hi: w.decode_into(out, offsets[lo:hi]))
        if failed is None:
            return False
        flat = out.reshape(-1).view(np.uint8)
        for k in failed:
            o = int(offsets[k])
            self.decode_chunk_into(int(ns[k]), flat[o:o + expected_nbytes], expected_nbytes)
        return True

    def rows_whole(self, ns, out, offsets, expected_nbytes, rowsize, cstart, csize):
        """Bytes [cstart, cstart + csize) of every row (`rowsize` bytes) of the whole chunks `ns`, packed
        into the contiguous array `out` from byte ``offsets[k]`` for chunk ``ns[k]`` (a column of a 2-D
        carray), as `decode_whole` does; False where that path does not apply."""
        offsets = np.asarray(offsets, dtype=np.int64)
        failed = self._whole(ns, expected_nbytes,
                             lambda w, lo, hi: w.rows_into(out, offsets[lo:hi], rowsize, cstart, csize))
        if failed is None:
            return False
        flat = out.reshape(-1).view(np.uint8)
        nrows = expected_nbytes // rowsize
        for k in failed:
            tmp = self.decode_chunk_into(int(ns[k]), np.empty(expected_nbytes, np.uint8), expected_nbytes)
            o = int(offsets[k])
            flat[o:o + nrows * csize].reshape(nrows, csize)[...] = tmp.reshape(nrows, rowsize)[:, cstart:cstart + csize]
        return True

    def sum_whole(self, ns, dtype, expected_nbytes):
        """NumPy's sum of each of the whole chunks `ns` (values of `dtype`), as `_sums.SumChunks` gives
        it, read, verified, decoded and summed on every thread without the GIL; None where that path
        does not apply (see `_whole_work`)."""
        dt = np.dtype(dtype)
        if not dt.isnative or not (dt.kind in "iu" or dt.char in "fd") or expected_nbytes % dt.itemsize:
            return None
        parts = []

        def use(work, lo, hi):
            parts.append(work.sum_as(dt))
        failed = self._whole(ns, expected_nbytes, use)
        if failed is None:
            return None
        sums = np.concatenate([w.sums_arr for w in parts])
        for k in failed:
            one = _sums.SumChunks([self.read_chunk(int(ns[k]), expected_nbytes)], dt, 1)
            one.run()
            one.check()
            sums[k] = one.sums[0]
        return sums

    def chunk_cbytes(self, n):
        """The compressed size of chunk n (its 16-byte header is read once)."""
        c = self._ctbytes.get(n)
        if c is None:
            if self._ranged is not None and not self._at_hand(n // self.superchunklen + 1):
                return self._ranged.chunk_cbytes(self, n)
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
        the live bytes of a chunk, so its offset changes (and its checksum, where there is one).
        On a store without descriptors: (file number, file size, version tag), see `RangedReads`."""
        if self._ranged is not None:
            return self._ranged.chunk_fingerprints(self, [n])[0]
        with self._lock:
            f, fd, off = self._offset(n)
            fp = self._fps.get(n)
            if fp is not None and fp[0] == off:
                return fp
            raw = sc.pread(fd, 16, off, self._where(n))
            ct = int.from_bytes(raw[12:16], "little", signed=True)
            ck = 0
            if self.cksize and ct >= 16 and off + ct + self.cksize <= f.fstate[1]:
                raw = bytes(sc.pread(fd, min(8, self.cksize), off + ct, self._where(n)))
                ck = int.from_bytes(raw.ljust(8, b"\0"), "little", signed=True)
            return (off, ct, ck)

    def chunk_fingerprints(self, ids):
        """`chunk_fingerprint` of each chunk of `ids`, for a writer storing its statistics: a chunk this
        store wrote lately is given the fingerprint it kept while writing when its offsets entry still
        names those bytes (each file's state looked up once for the batch, not once per chunk); any
        other is read as `chunk_fingerprint` reads it."""
        if self._ranged is not None:
            return self._ranged.chunk_fingerprints(self, ids)
        out = []
        with self._lock:
            files = {}
            for n in ids:
                fp = self._fps.get(n)
                if fp is not None and 0 <= n < self._nphys:
                    fno, slot = divmod(n, self.superchunklen)
                    f = files.get(fno + 1)
                    if f is None:
                        f = files[fno + 1] = self._file(fno + 1)
                    if slot < f.nchunks and int(f.offsets[slot]) == fp[0]:
                        out.append(fp)
                        continue
                out.append(self.chunk_fingerprint(n))
        return out
