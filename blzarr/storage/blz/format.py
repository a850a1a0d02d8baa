"""The BLZ file format's small pieces (docs/FORMAT.rst): file names, the canonical JSON of the metadata
section, the reserve rule, what the store knows of one superchunk file (`_File`), and the part of
`BlzDir` that parses and writes a file's header, metadata section and offsets table (`BlzFileFormat`)."""

import itertools
import json

import numpy as np

from blzarr import _superchunk as sc
from blzarr.storage.blz.cache import FILE_STATE_CACHE
from blzarr.errors import FormatError

FORMAT = "blz"
SUPERCHUNK_EXT = "__.bin"


def superchunk_name(fno):
    return f"__{fno}{SUPERCHUNK_EXT}"


def _encode(value):
    """The canonical JSON bytes of a metadata value (their length is a metalayer's fixed size)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False).encode("ascii")
    except (TypeError, ValueError) as e:
        raise TypeError(f"metalayer values must be JSON-serializable: {e}") from None


def _coerce_reserve(reserve):
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or reserve < 0:
        raise ValueError(f"reserve must be a number of bytes >= 0 or a fraction in [0, 1), got {reserve!r}")
    if isinstance(reserve, float) and reserve >= 1:
        raise ValueError(f"a float reserve is a fraction of each chunk's size, in [0, 1); got {reserve!r}")
    return reserve


_epochs = itertools.count(1)


class _Where:
    __slots__ = ("layoutdir", "n")

    def __init__(self, store, n):
        self.layoutdir = store
        self.n = n

    def __str__(self):
        fno, slot = divmod(self.n, self.layoutdir.superchunklen)
        rows = ""
        chunklen = self.layoutdir._fixed.get("chunkshape", [0])[0] if hasattr(self.layoutdir, "_fixed") else 0
        if self.layoutdir.chunk_nbytes > 0 and isinstance(chunklen, int) and chunklen > 0:
            rows = f", rows {self.n * chunklen}-{(self.n + 1) * chunklen - 1}"
        return f"chunk {self.n} (slot {slot}{rows}) of superchunk file '{self.layoutdir._path(fno + 1)}'"

    __format__ = lambda self, spec: format(str(self), spec)

    def __bool__(self):
        return True


class _File:
    """What the store knows of one superchunk file: header fields, offsets, file identity."""

    __slots__ = ("fno", "path", "header", "meta_size", "table_pos", "data_start", "offsets", "full_table",
                 "fstate", "nchunks", "last_chunk", "verified", "meta_json", "epoch")

    def __init__(self, fno, path):
        self.fno = fno
        self.path = path
        self.verified = set()
        self.epoch = next(_epochs)


class BlzFileFormat:
    """Parsing and writing the header, metadata section and offsets table of a `BlzDir`'s superchunk files."""

    def _load_file(self, fno):
        return self._reads.load_file(self, fno)

    def _parse_head(self, f, h, size, read, max_k=None):
        """Fill the state `f` of a superchunk file of `size` bytes from its header `h` (unpacked) and its
        metadata section (`read(pos, n)` gives the file's bytes): its metadata, the position of its
        offsets table and of its chunk area, its chunk counts; returns its superchunklen (at most
        `max_k`, when given)."""
        f.header = h
        f.meta_size = h["meta_size"]
        if 32 + f.meta_size > size:
            raise FormatError(f"superchunk file '{f.path}' is truncated inside its metadata section")
        raw = bytes(read(32, f.meta_size))
        try:
            meta = json.loads(raw.decode("ascii")) if raw.strip() else {}
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise FormatError(f"superchunk file '{f.path}': metadata section is not valid JSON: {e}") from None
        if not isinstance(meta, dict):
            raise FormatError(f"superchunk file '{f.path}': metadata section is not a JSON object")
        f.meta_json = meta
        superchunklen = meta.get("superchunklen", getattr(self, "superchunklen", None))
        if not isinstance(superchunklen, int) or isinstance(superchunklen, bool) or superchunklen < 1 or (max_k is not None and superchunklen > max_k):
            raise FormatError(f"superchunk file '{f.path}': bad superchunklen {superchunklen!r}")
        if hasattr(self, "superchunklen") and superchunklen != self.superchunklen:
            raise FormatError(f"superchunk file '{f.path}': superchunklen {superchunklen}, the dataset uses {self.superchunklen}")
        f.table_pos = 32 + f.meta_size
        f.data_start = f.table_pos + 8 * superchunklen
        if f.data_start > size:
            raise FormatError(f"superchunk file '{f.path}' is truncated inside its offsets table")
        if h["nchunks"] > superchunklen:
            raise FormatError(f"superchunk file '{f.path}': nchunks {h['nchunks']} > its capacity {superchunklen}")
        f.nchunks = h["nchunks"]
        f.last_chunk = h["last_chunk"]
        return superchunklen

    def _keep_file(self, f):
        """Remember the state `f` (the least recently used states beyond `FILE_STATE_CACHE` forgotten)."""
        self._files[f.fno] = f
        while len(self._files) > FILE_STATE_CACHE:
            self._forget_file(next(iter(self._files)))
        return f

    def _offset(self, n):
        """(file state, fd, offset) of chunk n, reading only its offsets entry (fd None for a file read
        with requests)."""
        return self._reads.offset(self, n)

    def _check_offset(self, n, f, slot, off):
        """FormatError unless `off`, chunk n's entry in file `f`, names a chunk inside the chunk area."""
        if slot >= f.nchunks or off == -1:
            raise FormatError(f"{self._where(n)} has no offset (-1): the file holds {f.nchunks} chunks")
        if off < f.data_start or off + 16 > f.fstate[1]:
            raise FormatError(f"{self._where(n)}: offset {off} is outside the chunk area "
                              f"[{f.data_start}, {f.fstate[1]})")

    def _full_table(self, f):
        if not f.full_table:
            f.offsets = sc.read_offsets(self._fd(f.fno), f.table_pos, self.superchunklen, f.path)
            over = self._overlay.get(f.fno) if self._overlay else None
            if over is not None:
                for slot, pos in over[0].items():
                    if 0 <= slot < self.superchunklen:
                        f.offsets[slot] = pos
            f.full_table = True
        return f.offsets

    # ------------------------------------------------------------------ writing
    def _meta_bytes(self, fno):
        d = dict(self._fixed, superchunk=fno, first_chunk=(fno - 1) * self.superchunklen)
        raw = _encode(d)
        pad = (-(32 + len(raw))) % 8
        return raw + b" " * pad

    def _new_file(self, fno):
        """Create an empty superchunk file `fno` (header, metadata, offsets all -1); the files before
        it are complete: they are published (where files are uploaded whole)."""
        key = self._key(fno)
        self._writes.new(key)
        meta = self._meta_bytes(fno)
        head = sc.pack_header(self.checksum_id, self.typesize, self.chunk_nbytes, 0, 0, len(meta))
        table = sc.pack_offsets(np.full(self.superchunklen, -1, dtype=np.int64))
        self._fio.put_atomic(key, head + meta + table, parents=False)
        self.nfiles = max(self.nfiles, fno)
        self._forget_file(fno)
        self._close(fno)
        self._writes.changed(key)
        self.flush_files(below=fno)

    def _write_header(self, f, fd):
        head = sc.pack_header(self.checksum_id, self.typesize, self.chunk_nbytes, f.last_chunk, f.nchunks,
                              f.meta_size)
        self._fio.pwrite(fd, head, 0, f.path)

    def _after_write(self, f, fd):
        f.fstate = self._fio.state(fd)
        self._writes.changed(self._key(f.fno))

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
