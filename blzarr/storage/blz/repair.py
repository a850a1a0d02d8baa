"""BLZ maintenance: repair of what a killed writer left behind, holes and compaction, verification
(`BlzMaintenance`, a part of `BlzDir`)."""

import json

import numpy as np

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.errors import ChunkError, FormatError, StorageError


def _rows(store, a, b):
    chunklen = store._fixed.get("chunkshape", [0])[0]
    if store.chunk_nbytes > 0 and isinstance(chunklen, int) and chunklen > 0:
        return f" (rows {a * chunklen}-{(b + 1) * chunklen - 1})"
    return ""


class BlzMaintenance:
    """Repair, holes, compaction and verification of a `BlzDir`'s superchunk files."""

    def _repair(self):
        """Finish what a writer killed mid-update left behind (a writer opening the directory does this;
        readers ignore it): metadata sections that disagree with file 1 (a metalayer update writes file 1
        last, so file 1 holds the committed value), offsets entries set past a file's chunks by an append
        whose header was not written, a header that counts chunks whose offsets or bytes never reached
        the disk (a power loss: the header's sector was written, not theirs), and a header last-chunk
        that its last chunk no longer has."""
        if not self.bytestore.in_place_writes:
            return      # files are uploaded whole from a consistent state: nothing half-written
        with self._lock:
            for fno in range(1, self.nfiles + 1):
                if fno in self._damaged:
                    continue            # nothing is written to a damaged file
                try:
                    self._repair_file(fno)
                except (FormatError, ChunkError, StorageError) as e:
                    # a damaged file is left as it is: reads report its damaged chunks, writes to it
                    # are refused
                    self._no_writes[fno] = str(e)
            if self.nfiles not in self._damaged and self.nfiles not in self._no_writes:
                self._nphys = (self.nfiles - 1) * self.superchunklen + self._file(self.nfiles).nchunks

    def _repair_file(self, fno):
        """Repair superchunk file `fno` (see `_repair`)."""
        f = self._file(fno)
        fd = None
        # only the last file is appended to (a full file is synced before the next exists)
        whole = self._valid_prefix(f) if fno == self.nfiles else f.nchunks
        # never below what meta/sizes counts: those chunks are damage, reported when read
        valid = max(whole, min(f.nchunks, self._counted - (fno - 1) * self.superchunklen))
        if whole < valid:
            a, b = (fno - 1) * self.superchunklen + whole, (fno - 1) * self.superchunklen + valid - 1
            self._no_writes[fno] = (f"superchunk file '{f.path}' is damaged: chunk{'s' if b > a else ''} "
                                    f"{a}{'-%d' % b if b > a else ''}{_rows(self, a, b)}, which meta/sizes "
                                    f"counts, run{'' if b > a else 's'} past its end")
        if valid < f.nchunks:
            fd = self._fd(fno)
            f.nchunks = valid
        if fno > 1:
            mine = {k: v for k, v in f.meta_json.items() if k not in ("superchunk", "first_chunk")}
            if mine != {k: v for k, v in self._fixed.items() if k not in ("superchunk", "first_chunk")}:
                raw = self._meta_bytes(fno)
                if len(raw) != f.meta_size:
                    raise FormatError(f"superchunk file '{f.path}': its metadata section disagrees "
                                      f"with file 1 and cannot be rewritten in place")
                fd = self._fd(fno)
                self._fio.pwrite(fd, raw, 32, f.path)
                f.meta_json = json.loads(raw.decode("ascii"))
        offsets = self._full_table(f)
        own = self._overlay.get(fno) if self._own_overlay and self._overlay else None
        if own is not None:
            # meta/sizes names another short last chunk than the file (a switch that reached the disk
            # before the sizes that would count it): the file takes meta/sizes' entry and count
            fd = self._fd(fno)
            for slot, pos in own[0].items():
                self._fio.pwrite(fd, sc.pack_i64(pos), f.table_pos + 8 * slot, f.path)
            self._write_header(f, fd)
        if (offsets[f.nchunks:] != -1).any():
            fd = self._fd(fno)
            offsets[f.nchunks:] = -1
            self._fio.pwrite(fd, sc.pack_offsets(offsets[f.nchunks:]), f.table_pos + 8 * f.nchunks, f.path)
        if f.nchunks:
            try:
                last = self._nbytes_at(self._fd(fno), offsets[f.nchunks - 1], f)
            except FormatError:
                last = f.last_chunk     # a damaged last chunk: reads of it raise, naming it
            if last != f.last_chunk:
                fd = self._fd(fno)
                f.last_chunk = last
                self._write_header(f, fd)
        elif fd is not None:
            f.last_chunk = 0
            self._write_header(f, fd)
        if fd is not None:
            self._barrier(fd)
            self._after_write(f, fd)

    def _valid_prefix(self, f):
        """How many of the chunks file `f`'s header counts have an offset inside the chunk area and a
        Blosc header whose size fits the file (the others are past what any meta/sizes counted)."""
        offsets = self._full_table(f)
        fd = self._fd(f.fno)
        size = f.fstate[1]
        for slot in range(f.nchunks):
            off = int(offsets[slot])
            if off < f.data_start or off + 16 > size:
                return slot
            ct = int.from_bytes(self._fio.pread(fd, 16, off, f.path)[12:16], "little", signed=True)
            if ct < 16 or off + ct + self.cksize > size:
                return slot
        return f.nchunks

    # ------------------------------------------------------------------ maintenance
    def holes(self):
        """Bytes in the chunk areas that no chunk uses (left by relocated rewrites)."""
        total = 0
        with self._lock:
            for fno in range(1, self.nfiles + 1):
                total += self._file_holes(fno)[0]
        return total

    def _file_holes(self, fno):
        f = self._file(fno)
        fd = self._fd(fno)
        offsets = self._full_table(f)
        used = 0
        for slot in range(f.nchunks):
            n = (fno - 1) * self.superchunklen + slot
            ct = self.chunk_cbytes(n)
            used += ct + self.cksize + self._reserve_for(ct)
        return max(0, f.fstate[1] - f.data_start - used), f, fd, offsets

    def compact(self):
        """Compact the superchunk files that hold holes: every chunk is rewritten in order, checksums
        verified on the way, into a new file that replaces the old one atomically.
        Returns the number of bytes reclaimed."""
        self._check_writable()
        reclaimed = 0
        with self._lock:
            if self._pending:
                self.sync()
            for fno in range(1, self.nfiles + 1):
                self._take(fno)
            for fno in range(1, self.nfiles + 1):
                hole, f, fd, offsets = self._file_holes(fno)
                if not hole:
                    continue
                self._drop_last(rewriting=fno)      # the chunk meta/sizes names moves
                before = f.fstate[1]
                first = (fno - 1) * self.superchunklen
                parts = []
                pos = f.data_start
                new_offsets = np.full(self.superchunklen, -1, dtype=np.int64)
                for slot in range(f.nchunks):
                    data = self.read_chunk(first + slot)
                    blob = self._slot_blob(data)
                    new_offsets[slot] = pos
                    parts.append(blob)
                    pos += len(blob)
                meta = sc.pread(fd, f.meta_size, 32, f.path)
                head = sc.pack_header(self.checksum_id, self.typesize, self.chunk_nbytes, f.last_chunk,
                                      f.nchunks, f.meta_size)
                self._fio.put_atomic(self._key(fno), head + bytes(meta) + sc.pack_offsets(new_offsets)
                                     + b"".join(parts), parents=False)
                self._close(fno)
                self._forget_file(fno)
                reclaimed += before - pos
            for fno in range(1, self.nfiles + 1):
                self._writes.changed(self._key(fno))
        self.flush_files()
        return reclaimed

    def verify(self, expected_chunks=None):
        """Check every file and chunk: headers, metadata, offsets, checksums and chunk structure.
        Every damaged range is found (a damaged file or chunk does not stop the check): one raises its
        own error (FormatError / ChecksumError / ChunkError naming the file, chunk and rows), several a
        FormatError listing them all; either has `.damaged`, a list of (first chunk, last chunk,
        reason).  Returns a summary."""
        nchunks = 0
        nbytes = 0
        damage = []
        with self._lock:
            if self._pending:
                self.sync()
            self._chunks.clear()
            # chunks past what meta/sizes counts are not part of the array (a writer writes them
            # before the sizes: one beside us, or one killed; its next opening for writing drops them)
            counted = self._nphys if expected_chunks is None else min(expected_chunks, self._nphys)
            for fno in range(1, self.nfiles + 1):
                first = (fno - 1) * self.superchunklen
                if first >= counted and fno > 1:
                    break
                end = min(fno * self.superchunklen, max(self._nphys, first + 1)) if fno == self.nfiles else fno * self.superchunklen
                if fno in self._damaged:
                    damage.append((first, end - 1, FormatError(self._damaged[fno])))
                    continue
                try:
                    f = self._verify_file(fno)
                except (FormatError, ChunkError, StorageError) as e:
                    damage.append((first, end - 1, e))
                    continue
                offsets = self._full_table(f)
                extents = []
                for slot in range(min(f.nchunks, counted - first)):
                    n = first + slot
                    try:
                        data = self.read_chunk(n)
                        cn = _chunk.header(data)["nbytes"]
                        is_last = n == counted - 1
                        if self.chunk_nbytes > 0 and (cn > self.chunk_nbytes or (cn != self.chunk_nbytes
                                                                                 and not is_last)):
                            raise FormatError(f"{self._where(n)} holds {cn} bytes, chunks hold {self.chunk_nbytes}")
                        # a kill (or a writer beside a reader) between an offsets switch and the
                        # header's write leaves the header's last-chunk behind: a writer's repair
                        # corrects it, readers go by the chunk
                        if slot == f.nchunks - 1 and cn != f.last_chunk and self.mode != "r":
                            raise FormatError(f"superchunk file '{f.path}': header last-chunk {f.last_chunk}, "
                                              f"the last chunk holds {cn}")
                    except (FormatError, ChunkError, StorageError) as e:
                        damage.append((n, n, e))
                        continue
                    extents.append((int(offsets[slot]), int(offsets[slot]) + len(data) + self.cksize, n))
                    nbytes += cn
                    nchunks += 1
                extents.sort()
                for (a0, a1, an), (b0, b1, bn) in zip(extents, extents[1:]):
                    if b0 < a1:
                        damage.append((an, bn, FormatError(f"superchunk file '{f.path}': chunks {an} and {bn} "
                                                           "overlap")))
        if damage:
            raise self._damage_error(damage)
        if expected_chunks is not None and nchunks != expected_chunks:
            raise FormatError(f"'{self.rootdir}' holds {nchunks} chunks, {expected_chunks} expected "
                              "from meta/sizes")
        return {"files": self.nfiles, "chunks": nchunks, "nbytes": nbytes, "checksum": self._fixed["checksum"]}

    def _verify_file(self, fno):
        """The state of file `fno`, read again, with its header, metadata and offsets checked."""
        self._forget_file(fno)
        f = self._file(fno)
        meta = f.meta_json
        # a metalayer update killed midway leaves later files with the new value and file 1 (written
        # last, the commit) with the old: readers use file 1's; a writer's repair copies it over
        keys = ("dtype", "chunkshape", "cparams", "superchunklen", "checksum") + (("meta",) if self.mode != "r" else ())
        for key in keys:
            if meta.get(key) != self._fixed.get(key):
                raise FormatError(f"superchunk file '{f.path}': metadata {key!r} is {meta.get(key)!r}, "
                                  f"file 1 says {self._fixed.get(key)!r}")
        if f.header["checksum"] != self.checksum_id or f.header["typesize"] != self.typesize:
            raise FormatError(f"superchunk file '{f.path}': header disagrees with file 1")
        offsets = self._full_table(f)
        # an append killed (or, beside a reader, not yet done) between its offsets entries and its
        # header leaves entries past the header's count: readers ignore them, a writer's repair clears them
        if self.mode != "r" and (offsets[f.nchunks:] != -1).any():
            raise FormatError(f"superchunk file '{f.path}': offsets after its {f.nchunks} chunks are not -1")
        return f

    def _damage_error(self, damage):
        """One error for the damaged ranges `damage` [(first chunk, last chunk, exception)]."""
        ranges = [(a, b, str(e)) for a, b, e in damage]
        if len(damage) == 1:
            err = damage[0][2]
        else:
            lines = [f"chunks {a}-{b}{_rows(self, a, b)}: {why}" if a != b else f"chunk {a}{_rows(self, a, b)}: {why}"
                     for a, b, why in ranges]
            err = FormatError(f"'{self.rootdir}' has {len(damage)} damaged ranges:\n  " + "\n  ".join(lines))
        err.damaged = ranges
        return err
