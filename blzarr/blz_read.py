"""BLZ reads: a chunk's header, a chunk read whole (checksum verified, structure validated, cached), a
range of a chunk decoded from the cache or from only the blocks it needs (`BlzReads`, a part of
`BlzDir`)."""

import time

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.blz_cache import CHUNK_CACHE_BYTES, READ_RETRIES, TOUCHED_CACHE, VERIFIED_CACHE
from blzarr.blz_format import _Where
from blzarr.errors import BlzarrError, ChunkError, FormatError


class BlzReads:
    """Reading the chunks of a `BlzDir`."""

    # ------------------------------------------------------------------ reading
    def head(self, n):
        """The Blosc header + bstarts of chunk n (cached; a reader retries as `read_chunk` does)."""
        for attempt in range(READ_RETRIES):
            try:
                with self._lock:
                    f, fd, off = self._offset(n)
                    return self._head_at(n, f, fd, off)
            except (FormatError, ChunkError):
                if self.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                self._reload(n // self.K + 1, n)
                time.sleep(0.001 * attempt)

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
        its offset and the read (its old bytes reused by a later rewrite, its file replaced by a
        compaction): it then reopens the file, reads its state again and retries, a bounded number of
        times (`READ_RETRIES`, a short growing pause between them); only damage that persists raises."""
        for attempt in range(READ_RETRIES):
            try:
                return self._read_chunk(n, expected_nbytes)
            except (FormatError, ChunkError):
                if self.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                self._reload(n // self.K + 1, n)
                time.sleep(0.001 * attempt)

    def _reload(self, fno, n=None):
        """Forget what is known of file `fno` (and chunk n) and reopen it when no unlocked read uses
        its descriptor (a compaction may have replaced the file: the old descriptor reads the old one)."""
        with self._lock:
            self._forget_file(fno)
            if n is not None:
                self._drop_chunk(n)
            if not self._inuse.get(fno):
                self._close(fno)

    def _check_still_at(self, n, f, fd, off, where):
        """A reader (mode 'r'), after reading chunk n's bytes from `off`: its offsets entry in the file
        must still say `off`.  A writer in another process may have moved the chunk meanwhile and reused
        its old bytes for another chunk, whose checksum is valid: only the entry tells."""
        if self.mode == "r" and sc.read_offset(fd, f.table_pos, n - (f.fno - 1) * self.K, where) != off:
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
        for attempt in range(READ_RETRIES):
            try:
                return self._decode_chunk_into(n, out, expected_nbytes, nthreads, part)
            except (FormatError, ChunkError):
                if self.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                self._reload(n // self.K + 1, n)
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
                    fno = f.fno
                    self._inuse[fno] = self._inuse.get(fno, 0) + 1
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
            try:
                local.cbuf, ct = sc.fetch_decode(fd, off, -1 if ct is None else ct, f.fstate[1],
                                                 self.checksum_id, getattr(local, "cbuf", None), out,
                                                 expected_nbytes, nthreads,
                                                 f.table_pos + 8 * (n - (fno - 1) * self.K), where)
            finally:
                with self._lock:
                    self._release_fd(fno)
        else:
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
        self._check_still_at(n, f, fd, off, where)
        return buf, ct

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
                self._release_fd(fno)
        if retry:
            self._reload(fno, n)
            data = self.read_chunk(n)
            _chunk.getitem_into(data, start, nbytes, out, out_offset, False, where)
            return 0

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
