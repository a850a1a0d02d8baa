"""BLZ reads, the part of `BlzDir` both read strategies share (`BlzReads`): a reader's retries when a
writer moved a chunk under it and the checks that tell it, a chunk read whole through the cache, and
many whole chunks read, verified and decoded at once where the strategy allows it.  How the bytes are
read is the strategy's (`self._reads`): `local.FileReads` through OS descriptors, `remote.RangedReads`
with ranged requests."""

import time

import numpy as np

from blzarr import _chunk, _sums
from blzarr import _superchunk as sc
from blzarr.runtime.parallel import run_threads
from blzarr.storage.blz.cache import FD_CACHE, READ_RETRIES, VERIFIED_CACHE
from blzarr.storage import rewrite
from blzarr.errors import ChunkError, FormatError


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
        if whole and self._reads.read_whole_first(self, n):
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
                    f, fd, off = self._reads.offset(self, n)
                    return self._reads.head_at(self, n, f, fd, off)
            except (FormatError, ChunkError):
                if self.mode != "r" or attempt == READ_RETRIES - 1:
                    raise
                self._reload(n // self.superchunklen + 1, n)
                time.sleep(0.001 * attempt)

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
            f, fd, off = self._reads.offset(self, n)
            data = self._chunks.get(n, f.epoch)
            if data is not None:
                return data
            if self.mode != "r":
                data = self._reads.fetch_chunk(self, n, f, fd, off, expected_nbytes)
                self._remember(n, data, f)
                return data
            self._borrow(fd)
        # read-only (no writer in this process): the read, the checksum and the validation run outside
        # the lock, so the threads of a long read overlap them (live bytes are never overwritten, and a
        # chunk moved by another process's writer is retried by read_chunk)
        try:
            data = self._reads.fetch_chunk(self, n, f, fd, off, expected_nbytes)
        finally:
            with self._lock:
                self._release_fd(fd)
        with self._lock:
            if self._current(f):
                self._remember(n, data, f)
        return data

    def decode_chunk_into(self, n, out, expected_nbytes=-1, nthreads=1, part=None):
        """Decode chunk n whole into the contiguous array `out`, its checksum verified and its structure
        validated first (as `read_chunk`), and return `out`; with `part` = (start, nbytes, out_offset),
        only those bytes (into `out` at out_offset), the whole chunk still read and verified."""
        return self._reads.decode_chunk_into(self, n, out, expected_nbytes, nthreads, part)

    @staticmethod
    def _decode(data, out, nthreads, part, where):
        if part is None:
            _chunk.decompress_into(data, out, nthreads, False, where)
        else:
            _chunk.getitem_into(data, part[0], part[1], out, part[2], False, where)

    def read_range(self, n, start, nbytes, out, out_offset=0):
        """Decode bytes [start, start+nbytes) of chunk n into `out`, reading no more of the chunk than
        the read strategy must; returns the bytes read from the byte store."""
        return self._reads.read_range(self, n, start, nbytes, out, out_offset)

    # ------------------------------------------------------------------ many whole chunks at once

    def _whole_batches(self, ns):
        """`ns` (ascending chunk numbers) cut into runs (index ranges) of at most FD_CACHE files each
        (the descriptors one `whole_work` job pins at once)."""
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
            job = self._reads.whole_work(self, ns[lo:hi], expected_nbytes)
            if job is None:
                return None
            work, sub, pinned = job
            try:
                use(work, lo, hi)
                run_threads(work.run, work.nparts)
            finally:
                self._whole_done(work, sub, pinned)
            failed += (lo + np.flatnonzero(work.status)).tolist()
        return failed

    def _whole_done(self, work, sub, pinned):
        """After a `whole_work` job: its descriptors released, the chunks it read remembered as verified
        (with their compressed sizes) where their file's state is still the current one."""
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

    def chunk_reader(self, start, stop, expected_nbytes):
        """A `ChunkReader` of the whole chunks start..stop-1 (of `expected_nbytes` bytes each)."""
        return ChunkReader(self, start, stop, expected_nbytes)

    def decode_whole(self, ns, out, offsets, expected_nbytes):
        """Decode the whole chunks `ns` into the contiguous array `out`, chunk ``ns[k]`` at byte
        ``offsets[k]``, read, verified and decoded on every thread without the GIL; False where that path
        does not apply (see the read strategy's `whole_work`; `out` may then hold some of the chunks).
        A chunk that fails there is read again by `decode_chunk_into` (which retries a moved chunk,
        raises for a damaged one)."""
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
        does not apply (see the read strategy's `whole_work`)."""
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
        """The compressed size of chunk n."""
        return self._reads.chunk_cbytes(self, n)

    def chunk_fingerprint(self, n):
        """What tells whether chunk n changed: (offset, ctbytes, first bytes of the stored checksum)
        where its file is read through descriptors, (file number, file size, version tag) where it is
        read with requests (see the read strategies)."""
        return self._reads.chunk_fingerprint(self, n)

    def chunk_fingerprints(self, ids):
        """`chunk_fingerprint` of each chunk of `ids`, for a writer storing its statistics."""
        return self._reads.chunk_fingerprints(self, ids)


class ChunkReader:
    """The whole chunks start..stop-1 of a `BlzDir`, each decoded on request into the caller's array:
    read, verified, validated and decoded in one call without the GIL (`sc.ReadChunks.decode_one`,
    the many-chunk path's reads one at a time), for a caller that asks for them in ascending order
    on one thread and uses each before asking for the next (a group-by's part).  Their offsets come
    from one `whole_work` job per run of at most FD_CACHE files, whose descriptors stay pinned until
    the run is left or `close()`.  A chunk that path does not read (a writer in this process, a
    checksum not verified without the GIL, a moved or damaged chunk) is read by `decode_chunk_into`,
    which retries a moved chunk and raises for a damaged one, naming it."""

    def __init__(self, d, start, stop, expected_nbytes):
        self.d, self.start, self.stop, self.expected = d, start, stop, expected_nbytes
        self.job = None         # (lo, hi, work or None, its chunks, its pinned files)
        self.buf = None

    def _job_for(self, n):
        self.close()
        d = self.d
        k = d.superchunklen
        lo, hi = n, min(self.stop, (n // k + FD_CACHE) * k)
        try:
            job = d._reads.whole_work(d, np.arange(lo, hi, dtype=np.int64), self.expected) \
                if hi - lo >= 2 else None
        except (FormatError, ChunkError):
            job = None      # the chunk-by-chunk reads retry (a reader beside a writer) or say what is wrong
        self.job = (lo, hi) + (tuple(job) if job is not None else (None, None, None))
        return self.job

    def read(self, n, out):
        """Decode chunk n (start <= n < stop) whole into `out` (contiguous, `expected_nbytes` bytes)."""
        job = self.job
        if job is None or not job[0] <= n < job[1]:
            job = self._job_for(n)
        work = job[2]
        if work is not None:
            if self.buf is None:
                self.buf = bytearray(work.read_bytes)
            if work.decode_one(n - job[0], out, self.buf) == 0:
                return out
        return self.d.decode_chunk_into(n, out, self.expected)

    def close(self):
        """Release the pinned descriptors (the chunks read so far remembered as verified)."""
        job, self.job = self.job, None
        if job is not None and job[2] is not None:
            self.d._whole_done(job[2], job[3], job[4])
