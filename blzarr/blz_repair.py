"""BLZ maintenance: repair of what a killed writer left behind, holes and compaction, verification
(`BlzMaintenance`, a part of `BlzDir`)."""

import json

import numpy as np

from blzarr import fileio
from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr import files
from blzarr.errors import FormatError
from blzarr.files import atomic_write


class BlzMaintenance:
    """Repair, holes, compaction and verification of a `BlzDir`'s superchunk files."""

    def _repair(self):
        """Finish what a writer killed mid-update left behind (a writer opening the directory does this;
        readers ignore it): metadata sections that disagree with file 1 (a metalayer update writes file 1
        last, so file 1 holds the committed value), offsets entries set past a file's chunks by an append
        whose header was not written, and a header last-chunk that its last chunk no longer has."""
        with self._lock:
            for fno in range(1, self.nfiles + 1):
                f = self._file(fno)
                fd = None
                if fno > 1:
                    mine = {k: v for k, v in f.meta_json.items() if k not in ("superchunk", "first_chunk")}
                    if mine != {k: v for k, v in self._fixed.items() if k not in ("superchunk", "first_chunk")}:
                        raw = self._meta_bytes(fno)
                        if len(raw) != f.meta_size:
                            raise FormatError(f"superchunk file '{f.path}': its metadata section disagrees "
                                              f"with file 1 and cannot be rewritten in place")
                        fd = self._fd(fno)
                        fileio.pwrite(fd, raw, 32, f.path)
                        f.meta_json = json.loads(raw.decode("ascii"))
                offsets = self._full_table(f)
                if (offsets[f.nchunks:] != -1).any():
                    fd = self._fd(fno)
                    offsets[f.nchunks:] = -1
                    fileio.pwrite(fd, sc.pack_offsets(offsets[f.nchunks:]), f.table_pos + 8 * f.nchunks, f.path)
                if f.nchunks:
                    last = self._nbytes_at(self._fd(fno), offsets[f.nchunks - 1], f)
                    if last != f.last_chunk:
                        fd = self._fd(fno)
                        f.last_chunk = last
                        self._write_header(f, fd)
                if fd is not None:
                    self._after_write(f, fd)

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
            n = (fno - 1) * self.K + slot
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
            for fno in range(1, self.nfiles + 1):
                hole, f, fd, offsets = self._file_holes(fno)
                if not hole:
                    continue
                before = f.fstate[1]
                first = (fno - 1) * self.K
                parts = []
                pos = f.data_start
                new_offsets = np.full(self.K, -1, dtype=np.int64)
                for slot in range(f.nchunks):
                    data = self.read_chunk(first + slot)
                    blob = self._slot_blob(data)
                    new_offsets[slot] = pos
                    parts.append(blob)
                    pos += len(blob)
                meta = sc.pread(fd, f.meta_size, 32, f.path)
                head = sc.pack_header(self.checksum_id, self.typesize, self.chunk_nbytes, f.last_chunk,
                                      f.nchunks, f.meta_size)
                atomic_write(self._file_path(fno), head + bytes(meta) + sc.pack_offsets(new_offsets) + b"".join(parts),
                             fsync=fileio.sync_enabled())
                self._close(fno)
                self._forget_file(fno)
                reclaimed += before - pos
        return reclaimed

    def verify(self, expected_chunks=None):
        """Check every file and chunk: headers, metadata, offsets, checksums and chunk structure.
        Raises FormatError / ChecksumError / ChunkError naming the file and chunk; returns a summary."""
        nchunks = 0
        nbytes = 0
        with self._lock:
            self._chunks.clear()
            for fno in range(1, self.nfiles + 1):
                self._forget_file(fno)
                f = self._file(fno)
                meta = f.meta_json
                for key in ("dtype", "chunkshape", "cparams", "superchunklen", "checksum", "meta"):
                    if meta.get(key) != self._fixed.get(key):
                        raise FormatError(f"superchunk file '{f.path}': metadata {key!r} is {meta.get(key)!r}, "
                                          f"file 1 says {self._fixed.get(key)!r}")
                if f.header["checksum"] != self.checksum_id or f.header["typesize"] != self.typesize:
                    raise FormatError(f"superchunk file '{f.path}': header disagrees with file 1")
                offsets = self._full_table(f)
                if (offsets[f.nchunks:] != -1).any():
                    raise FormatError(f"superchunk file '{f.path}': offsets after its {f.nchunks} chunks "
                                      "are not -1")
                extents = []
                for slot in range(f.nchunks):
                    n = (fno - 1) * self.K + slot
                    data = self.read_chunk(n)
                    cn = _chunk.header(data)["nbytes"]
                    is_last = n == self._nphys - 1
                    if self.chunk_nbytes > 0 and (cn > self.chunk_nbytes or (cn != self.chunk_nbytes
                                                                             and not is_last)):
                        raise FormatError(f"{self._where(n)} holds {cn} bytes, chunks hold {self.chunk_nbytes}")
                    if slot == f.nchunks - 1 and cn != f.last_chunk:
                        raise FormatError(f"superchunk file '{f.path}': header last-chunk {f.last_chunk}, "
                                          f"the last chunk holds {cn}")
                    extents.append((int(offsets[slot]), int(offsets[slot]) + len(data) + self.cksize, n))
                    nbytes += cn
                    nchunks += 1
                extents.sort()
                for (a0, a1, an), (b0, b1, bn) in zip(extents, extents[1:]):
                    if b0 < a1:
                        raise FormatError(f"superchunk file '{f.path}': chunks {an} and {bn} overlap")
        if expected_chunks is not None and nchunks != expected_chunks:
            raise FormatError(f"'{self.rootdir}' holds {nchunks} chunks, {expected_chunks} expected "
                              "from meta/sizes")
        return {"files": self.nfiles, "chunks": nchunks, "nbytes": nbytes, "checksum": self._fixed["checksum"]}
