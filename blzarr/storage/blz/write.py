"""BLZ write placement: where a chunk's bytes go (appended, rewritten in place in its slot, or relocated
to the end of its file), the reserve after each chunk, removing chunks (`BlzWrites`, a part of
`BlzDir`)."""

import numpy as np

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.storage.blz.cache import FINGERPRINT_CACHE, WRITEBACK_BYTES, WRITEBACK_PAGE
from blzarr.errors import BlzarrError, StorageError
from blzarr.storage.files import DATA_DIR


class BlzWrites:
    """Writing and removing the chunks of a `BlzDir`."""

    def _reserve_for(self, ctbytes):
        """Reserved bytes after a chunk of `ctbytes` compressed bytes."""
        return int(ctbytes * self.reserve) if isinstance(self.reserve, float) else self.reserve

    def _slot_blob(self, data):
        return bytes(data) + self._slot_tail(data)

    def _slot_tail(self, data):
        """What follows a chunk in its slot: its checksum, then the reserve."""
        return sc.checksum(self.checksum_id, data) + bytes(self._reserve_for(len(data)))

    def _write_slot(self, fd, pos, data, tail, path):
        # one pwritev (the chunk, then its checksum and reserve): the bytes and order of two pwrites
        self._fio.pwritev(fd, [data, tail], pos, path)

    def write_chunk(self, n, data):
        """Write chunk n (see `_write_chunk`); if a write fails midway (a full disk), what the store knows
        of its files is read again from them, so that it never counts what is not on disk."""
        try:
            return self._write_chunk(n, data)
        except BaseException:
            self._resync()
            raise

    def _take(self, fno):
        """Make file `fno` writable through `_fio` (a spool copies it first, see `spool`)."""
        if fno <= self.nfiles and self._writes.take(self._key(fno)):
            self._forget_file(fno)

    def _file_exists(self, fno):
        """Whether superchunk file `fno` is there (a killed write may have left fewer files)."""
        key = self._key(fno)
        return (self._writes.local(key) and self._fio.exists(key)) or self._stored(fno)

    def _stored(self, fno):
        """Whether file `fno` is known to be in the byte store without being at hand locally."""
        return self._reads.stored(self, fno)

    def flush_files(self, below=None, check=True):
        """Publish the files changed since they were last published (only those numbered below
        `below`, when given), where files are uploaded whole; complete files leave the spool
        afterwards.  A no-op for files changed in place."""
        with self._lock:
            todo = [fno for fno in sorted(self._fno(k) for k in self._writes.dirty())
                    if below is None or fno < below]
            if check and todo:
                self._check_sole_writer()       # before any upload: never interleave with another writer
            for fno in todo:
                # where there is no lock, a conditional put: refused when another writer replaced (or
                # created) the file since this writer saw it
                key = self._key(fno)
                seen = self._guard.seen.get(key, False if self._stored(fno) else None)
                self._uploaded(fno, self._writes.upload(key, lambda k, d: self._guard.put(k, d, seen)))
            dirty = set(self._writes.dirty())
            for fno in sorted(self._fno(k) for k in self._writes.held()):
                key = self._key(fno)
                if fno < self.nfiles and key not in dirty:
                    self._close(fno)
                    self._forget_file(fno)
                    self._writes.release(key)

    @staticmethod
    def _fno(key):
        """The file number of superchunk file `key` (data/__N__.bin)."""
        return int(key.rsplit("/", 1)[-1][2:-len("__.bin")])

    def _uploaded(self, fno, size):
        """File `fno` was published with `size` bytes."""
        self._reads.uploaded(self, fno, size)

    def _resync(self):
        with self._lock:
            for fno in list(self._files):
                if fno not in self._pending:    # those states are the truth until sync() switches them
                    self._forget_file(fno)
            self._heads.clear()
            self._chunks.clear()
            self._ctbytes.clear()
            self._fps.clear()
            while self.nfiles > 1 and not self._file_exists(self.nfiles):
                self.nfiles -= 1
            try:
                last = self._load_file(self.nfiles)
            except BlzarrError:
                return
            self._nphys = (self.nfiles - 1) * self.superchunklen + last.nchunks

    def _write_chunk(self, n, data):
        """Write chunk n: append it (n == nchunks), or rewrite it in place when the new bytes fit its slot
        (the chunk, its checksum and reserve), else at the end of its file with the offset updated.
        Returns 'appended', 'inplace' or 'relocated'."""
        self._check_writable()
        with self._lock:
            self._take(n // self.superchunklen + 1)
        data = bytes(data)
        nbytes = _chunk.header(data)["nbytes"]
        tail = self._slot_tail(data)          # the checksum, outside the lock (zlib/hashlib release the GIL)
        size = len(data) + len(tail)
        with self._lock:
            if not 0 <= n <= self._nphys:
                raise StorageError(f"cannot write chunk {n} of '{self.rootdir}': it holds {self._nphys} chunks")
            fno, slot = divmod(n, self.superchunklen)
            fno += 1
            self._check_write_to(n, fno)
            if fno > self.nfiles:
                self._sync_full_file(fno - 1)
                self._new_file(fno)
            f = self._file(fno)
            fd = self._fd(fno)
            offsets = self._full_table(f)
            eof = f.fstate[1]
            fp = self._fps.get(n)       # (chunk n as this writer wrote it, when remembered)
            self._drop_chunk(n)
            synced = False
            if n < self._nphys:
                # never over the live bytes of the chunk (a crash or a reader would see it torn), nor
                # over the bytes the file's offsets table still names for a rewrite not yet switched:
                # the new bytes go to free space in its slot (after the old chunk, or in the hole
                # before it), else to the end of the file; only then does its offsets entry point to
                # them (locally at the next sync(), batched: see `sync`)
                defer = not getattr(self, "remote", False)
                pend = self._pending.get(fno) if defer else None
                named = list(pend[1].values()) if pend is not None else []
                if defer:
                    # nor over the short last chunk the committed meta/sizes names (it may differ
                    # from the table's entry until the next commit)
                    ext = self._named_extent()
                    if ext is not None and ext[0] == fno:
                        named.append(ext[1:])

                def free(a, b):
                    return all(b <= p0 or a >= p1 for p0, p1 in named)
                old = int(offsets[slot])
                # its compressed size: remembered when this writer wrote the bytes there (as
                # `_named_extent` takes it), else read from their Blosc header
                old_ct = fp[1] if fp is not None and fp[0] == old else self._ctbytes_at(fd, old, f)
                old_end = old + old_ct + self.cksize
                live = offsets[:f.nchunks]
                later = live[live > old]
                slot_end = int(later.min()) if later.size else eof
                earlier = live[(live >= 0) & (live < old)]
                if earlier.size:
                    p = int(earlier.max())
                    pct = self._ctbytes_at(fd, p, f)
                    prev_end = min(p + pct + self.cksize + self._reserve_for(pct), old)
                else:
                    prev_end = f.data_start
                used = len(data) + self.cksize
                cut = None
                if slot_end == eof and (free(prev_end, prev_end + size) and prev_end + size <= old
                                        or free(old_end, old_end + size)):
                    # the physically last chunk: before it if it fits, else right after its live bytes;
                    # the file is cut after the new bytes once they are in use
                    pos = prev_end if prev_end + size <= old and free(prev_end, prev_end + size) else old_end
                    self._write_slot(fd, pos, data, tail, f.path)
                    cut = pos + size
                    kind = "inplace"
                elif old_end + used <= slot_end and free(old_end, old_end + used):
                    pos = old_end
                    self._write_slot(fd, pos, data, tail[:self.cksize], f.path)
                    kind = "inplace"
                elif prev_end + used <= old and free(prev_end, prev_end + used):
                    pos = prev_end
                    self._write_slot(fd, pos, data, tail[:self.cksize], f.path)
                    kind = "inplace"
                else:
                    pos = eof
                    self._write_slot(fd, pos, data, tail, f.path)
                    kind = "relocated"
                pc = self._pending_cut.get(fno)
                if pc is not None and pos + size > pc:
                    del self._pending_cut[fno]      # bytes in use past it now
                if defer:
                    if pend is None:
                        pend = self._pending[fno] = (f, {})
                    # the first rewrite since the last sync: the table still names the old bytes
                    pend[1].setdefault(slot, (old, old_end))
                    offsets[slot] = pos
                    if slot == f.nchunks - 1:
                        f.last_chunk = nbytes
                    if cut is not None:
                        self._pending_cut[fno] = cut
                    self._unsynced.add(fno)
                    self._after_write(f, fd)
                    self._remember(n, data, f)
                    self._keep_fingerprint(n, pos, data, tail)     # what the files say after the switch
                    self.stats[kind] += 1
                    return kind
                # durable: the new bytes reach the disk before the offsets entry that points to them
                self._barrier(fd)
                self._fio.pwrite(fd, sc.pack_i64(pos), f.table_pos + 8 * slot, f.path)
                offsets[slot] = pos
                if slot == f.nchunks - 1:
                    f.last_chunk = nbytes
                self._write_header(f, fd)
                if cut is not None and cut < eof:
                    # the new entry is durable before the old bytes are cut away (and so before a
                    # later rewrite can reuse their space: no second sync below)
                    self._barrier(fd)
                    self._fio.truncate(fd, cut)
                    synced = True
            else:
                self._pending_cut.pop(fno, None)     # the chunk goes after where it would cut
                self._write_slot(fd, eof, data, tail, f.path)
                self._fio.pwrite(fd, sc.pack_i64(eof), f.table_pos + 8 * slot, f.path)
                offsets[slot] = eof
                f.nchunks = slot + 1
                self._nphys += 1
                kind = "appended"
                self._start_writeback(fno, fd, eof + size)
            if slot == f.nchunks - 1:
                f.last_chunk = nbytes
            self._write_header(f, fd)
            if kind == "appended":
                self._unsynced.add(fno)       # made durable by sync(), before meta/sizes counts it
            elif not synced:
                # the new offset is durable before this returns: the space the old bytes held may be
                # written by the next rewrite
                self._barrier(fd)
            self._after_write(f, fd)
            self._remember(n, data, f)
            self._keep_fingerprint(n, offsets[slot], data, tail)
            self.stats[kind] += 1
            return kind

    def _keep_fingerprint(self, n, pos, data, tail):
        """Remember chunk n's fingerprint (`chunk_fingerprint`) as written, so that storing the
        statistics after a long write reads nothing back."""
        if len(self._fps) >= FINGERPRINT_CACHE:
            self._fps.clear()
        ck = int.from_bytes(bytes(tail[:min(8, self.cksize)]).ljust(8, b"\0"), "little", signed=True) \
            if self.cksize else 0
        self._fps[n] = (int(pos), int.from_bytes(data[12:16], "little", signed=True), ck)

    def append_chunks(self, n, datas):
        """Append the compressed chunks `datas` as chunks n, n+1, ... (n == nchunks).  Each run of them
        that goes to one superchunk file is written with one pwritev (the chunks, their checksums and
        reserves), one write of their offsets entries and one of the header: the bytes and the order
        of a chunk-by-chunk append, in three system calls.  If a write fails midway, what the store
        knows of its files is read again from them (see `write_chunk`)."""
        try:
            self._append_chunks(n, datas)
        except BaseException:
            self._resync()
            raise

    def _append_chunks(self, n, datas):
        self._check_writable()
        datas = [bytes(d) for d in datas]
        tails = [self._slot_tail(d) for d in datas]     # the checksums, outside the lock
        with self._lock:
            if n != self._nphys:
                raise StorageError(f"cannot append chunk {n} to '{self.rootdir}': it holds {self._nphys} chunks")
            i = 0
            while i < len(datas):
                fno, slot = divmod(n + i, self.superchunklen)
                fno += 1
                self._take(fno)
                self._check_write_to(n + i, fno)
                if fno > self.nfiles:
                    self._sync_full_file(fno - 1)
                    self._new_file(fno)
                k = min(len(datas) - i, self.superchunklen - slot)
                f = self._file(fno)
                fd = self._fd(fno)
                offsets = self._full_table(f)
                eof = pos = f.fstate[1]
                entries = np.empty(k, dtype=np.int64)
                bufs = []
                for j in range(k):
                    self._drop_chunk(n + i + j)
                    entries[j] = pos
                    bufs.append(datas[i + j])
                    bufs.append(tails[i + j])
                    pos += len(datas[i + j]) + len(tails[i + j])
                self._fio.pwritev(fd, bufs, eof, f.path)
                self._fio.pwrite(fd, sc.pack_offsets(entries), f.table_pos + 8 * slot, f.path)
                offsets[slot:slot + k] = entries
                f.nchunks = slot + k
                self._nphys += k
                f.last_chunk = int.from_bytes(datas[i + k - 1][4:8], "little", signed=True)
                self._write_header(f, fd)
                self._unsynced.add(fno)       # made durable by sync(), before meta/sizes counts them
                self._after_write(f, fd)
                self._start_writeback(fno, fd, pos)
                for j in range(k):
                    self._remember(n + i + j, datas[i + j], f)
                    self._keep_fingerprint(n + i + j, entries[j], datas[i + j], tails[i + j])
                self.stats["appended"] += k
                i += k

    def _sync_full_file(self, fno):
        """Before file fno + 1 is made: file `fno` (full) is durable, so that a file that is not the
        last is always full, also after a power loss."""
        if fno in self._unsynced:
            if self._fio.syncs():
                self._fio.datasync(self._fd(fno))
            else:
                # a directory being created: the barrier that publishes it syncs this file; its
                # last bytes start their way to the disk now, while the next file is written
                fd = self._fd(fno)
                self._start_writeback(fno, fd, self._file(fno).fstate[1], whole=True)
            self._unsynced.discard(fno)

    def _start_writeback(self, fno, fd, end, whole=False):
        """Appends past WRITEBACK_BYTES since the last call start their way to the disk (where flushes
        sync): the fdatasync of the next flush then waits for less, and the disk works while the next
        chunks are compressed.  The range ends at a page boundary (the partial page after it would be
        written twice: now, and again once the next append fills it), unless `whole`: the file is
        complete up to `end`.  A hint: an error is the later sync's to report."""
        stop = end if whole else end - end % WRITEBACK_PAGE
        start = self._writeback.get(fno, 0)
        if start > stop:
            start = 0           # the file was cut since: what is left of the old range is written
        if stop > start and (whole or stop - start >= WRITEBACK_BYTES):
            try:
                self._fio.start_writeback(fd, start, stop - start)
            except OSError:
                pass
            self._writeback[fno] = stop

    def remove_chunks_from(self, n):
        """Drop every chunk >= n: whole superchunk files are deleted, the file holding n is cut."""
        try:
            self._remove_chunks_from(n)
        except BaseException:
            self._resync()
            raise

    def _remove_chunks_from(self, n):
        with self._lock:
            if n >= self._nphys:
                return
            self._check_writable()
            if self._pending:
                self.sync()         # the rewrites' offsets switched before chunks are dropped
            n = max(n, 0)
            keep_files = max(1, -(-n // self.superchunklen))
            self._take(keep_files)
            old_nfiles = self.nfiles
            for fno in range(self.nfiles, keep_files, -1):
                self._close(fno)
                self._forget_file(fno)
                self._remove_file(fno)
                self._unsynced.discard(fno)
            if keep_files < old_nfiles and self._fio.syncs():
                # the later files are gone for good before the file kept is cut: a file that is not
                # the last is always full, also after a power loss
                self._fio.sync_dir(DATA_DIR)
            self.nfiles = keep_files
            fno = keep_files
            first = (fno - 1) * self.superchunklen
            slot = n - first
            f = self._file(fno)
            fd = self._fd(fno)
            offsets = self._full_table(f)
            for k in range(slot, f.nchunks):
                self._drop_chunk(first + k)
            removed = offsets[slot:f.nchunks]
            kept = offsets[:slot]
            cut = int(removed.min()) if removed.size else f.fstate[1]
            offsets[slot:] = -1
            self._fio.pwrite(fd, sc.pack_offsets(offsets[slot:]), f.table_pos + 8 * slot, f.path)
            f.nchunks = slot
            if slot:
                f.last_chunk = self._nbytes_at(fd, offsets[slot - 1], f)
            else:
                f.last_chunk = 0
            self._write_header(f, fd)
            if slot == 0:
                self._fio.truncate(fd, f.data_start)
            elif not kept.size or int(kept.max()) < cut:
                self._fio.truncate(fd, cut)
            self._after_write(f, fd)
            self._unsynced.add(fno)
            self._nphys = first + slot
