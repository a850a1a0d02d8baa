"""`stats`: per-chunk statistics of a carray (min, max, whether NaN/NaT is there), and their file.

A carray of a one-dimensional boolean, integer, float, datetime64 or timedelta64 dtype keeps, for
every full chunk, the smallest and largest value other than NaN/NaT and two flags: the chunk holds
NaN (or NaT), and the chunk holds nothing but NaN.  The carray's writes keep them (append, item
assignment, resize, trim); queries read them to skip the chunks that cannot match and to take whole
the chunks that must (`blzarr.query.planner`); `searchsorted` on a sorted carray finds its chunk with them.

On disk they live in ``meta/stats`` in both layouts (bcolz ignores the file), specified in
docs/FORMAT.rst: every entry carries a fingerprint of the stored chunk it describes (the chunk
file's inode, size and modification time in the bcolz layout; the chunk's offset, compressed size
and stored checksum in BLZ; on object storage the version tag of the object holding it, see
`blzarr.storage.objstats`), so an entry whose chunk was rewritten since, by blzarr killed before
it wrote the file or by another program (bcolz appending or assigning), is found stale, dropped,
and computed again from the chunk when a query needs it.  A missing, damaged or foreign file is
the same as no statistics.

This module knows no carray: it works on NumPy arrays and on a chunk store's `fingerprint(i)`.
"""

import struct
import zlib

import numpy as np

from blzarr import _minmax

STATS_FILE = "stats"
MAGIC = b"BLZS"
VERSION = 1

KNOWN = 1       # the entry holds the chunk's statistics (else: unknown, the chunk is read)
HAS_NAN = 2     # the chunk holds NaN (floats) or NaT (datetime64, timedelta64)
NO_VALUE = 4    # the chunk holds nothing but NaN/NaT: min and max mean nothing

# False: new and opened carrays keep no statistics (for measurements of what they cost)
ENABLED = True

_HEAD = struct.Struct("<4sBBHQQ")    # magic, version, reserved, dtype length, chunklen, entries
_NAT = np.iinfo(np.int64).min


def supported(atom):
    """Whether chunks of atoms of dtype `atom` get statistics (scalar bool, int, float, datetime)."""
    atom = np.dtype(atom)
    return ENABLED and atom.shape == () and atom.names is None and atom.kind in "biufmM"


def _store_dtype(dtype):
    """The little-endian dtype the statistics are kept in."""
    dtype = np.dtype(dtype)
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


def _c_pass(dtype):
    """Whether the C pass (`blzarr._minmax.minmax`) takes items of `dtype`: native-endian bool, integer,
    float32 and float64, datetime64 and timedelta64."""
    k = dtype.kind
    return dtype.isnative and (k in "biu" or (k == "f" and dtype.itemsize in (4, 8))
                               or (k in "mM" and dtype.itemsize == 8))


def _flags(nan, count):
    """The flags of a chunk of `count` values of which `nan` are NaN/NaT."""
    if not nan:
        return KNOWN
    return KNOWN | HAS_NAN | (NO_VALUE if nan == count else 0)


def block_stats(a):
    """(min, max, flags) of the 1-d array `a` (NaN/NaT left out of min and max).

    One pass in C (`blzarr._minmax.minmax`, the GIL released) for native-endian bool, integer, float32
    and float64, datetime64 and timedelta64; NumPy's passes for anything else (float16, a non-native
    byte order, a strided view)."""
    if a.size == 0:
        return 0, 0, KNOWN | NO_VALUE
    k = a.dtype.kind
    if a.ndim == 1 and a.flags.c_contiguous and _c_pass(a.dtype):
        if k in "mM":
            a = a.view(np.int64)
        mm = np.empty(2, a.dtype)
        nan = _minmax.minmax(a, mm, k in "mM")
        if nan == len(a):
            return 0, 0, KNOWN | HAS_NAN | NO_VALUE
        if k == "b":
            return bool(mm[0]), bool(mm[1]), KNOWN
        if k in "mM":
            return int(mm[0]), int(mm[1]), KNOWN | (HAS_NAN if nan else 0)
        return mm[0], mm[1], KNOWN | (HAS_NAN if nan else 0)
    if k == "b":
        return bool(a.all()), bool(a.any()), KNOWN
    if k in "mM":
        v = a.view(np.int64)
        mn = v.min()
        if mn != _NAT:
            return int(mn), int(v.max()), KNOWN
        v = v[v != _NAT]
        if not v.size:
            return 0, 0, KNOWN | HAS_NAN | NO_VALUE
        return int(v.min()), int(v.max()), KNOWN | HAS_NAN
    mn = a.min()
    mx = a.max()
    if k == "f" and (mn != mn or mx != mx):
        v = a[~np.isnan(a)]
        if not v.size:
            return 0, 0, KNOWN | HAS_NAN | NO_VALUE
        return v.min(), v.max(), KNOWN | HAS_NAN
    return mn, mx, KNOWN


class ChunkStats:
    """The statistics of the first `n` chunks of a carray of `dtype` (arrays grown as it grows).

    `fresh` holds the chunks written by this process since the statistics were last stored: their
    fingerprints are read from the store when the file is next written.  `checked` is False while
    entries read from a file have not been compared with the chunks' fingerprints."""

    def __init__(self, dtype, chunklen):
        self.dtype = _store_dtype(dtype)
        self.chunklen = int(chunklen)
        self.n = 0
        self._alloc(16)
        self.fresh = set()
        self.persist = True         # False (in memory): no file, so no fingerprints to take
        self.checked = True
        self.dirty = False          # changed since stored

    def _alloc(self, cap):
        old = getattr(self, "mins", None)
        mins = np.zeros(cap, self.dtype)
        maxs = np.zeros(cap, self.dtype)
        flags = np.zeros(cap, np.uint8)
        fps = np.zeros((cap, 3), np.int64)
        if old is not None:
            k = self.n
            mins[:k], maxs[:k], flags[:k], fps[:k] = self.mins[:k], self.maxs[:k], self.flags[:k], self.fps[:k]
        self.mins, self.maxs, self.flags, self.fps = mins, maxs, flags, fps

    def _room(self, n):
        if n > len(self.mins):
            self._alloc(max(n, 2 * len(self.mins)))

    def _set_value(self, arr, i, v):
        if self.dtype.kind in "mM":
            arr.view(np.int64)[i] = v
        else:
            arr[i] = v

    def put(self, i, st):
        """Chunk i's statistics are `st` (from `block_stats`); chunks between n and i become unknown."""
        self._room(i + 1)
        self._extend(i)
        mn, mx, fl = st
        self._set_value(self.mins, i, mn)
        self._set_value(self.maxs, i, mx)
        self._mark(i, fl)

    def _extend(self, i):
        """Entries up to i exist (room made): those between n and i become unknown."""
        if i >= self.n:
            self.flags[self.n:i + 1] = 0
            self.n = i + 1

    def _mark(self, i, fl):
        """Entry i (its min and max in place) gets the flags `fl` and is to be stored."""
        self.flags[i] = fl
        if self.persist:
            self.fresh.add(i)
        self.dirty = True

    def slots(self, n, dtype):
        """Room for the entries of the first `n` chunks, and ``(mins, maxs, nat)`` for
        `blzarr.storage.chunk.compress_array` (its `minmax`) to write the min and max of a chunk of `dtype`
        into while compressing it, then `put_counted`; None when the C pass does not take `dtype`
        (then `block_stats` and `put`).  The arrays stay valid until an entry past `n` is put."""
        dtype = np.dtype(dtype)
        if dtype != self.dtype or not _c_pass(dtype):
            return None
        self._room(n)
        if dtype.kind in "mM":
            return self.mins.view(np.int64), self.maxs.view(np.int64), True
        return self.mins, self.maxs, False

    def put_counted(self, i, nan, count):
        """Chunk i's min and max are in mins[i] and maxs[i] (written through `slots`), and `nan` of its
        `count` values are NaN/NaT; chunks between n and i become unknown."""
        self._room(i + 1)
        self._extend(i)
        fl = _flags(nan, count)
        if fl & NO_VALUE:         # what the C pass left there means nothing: zeros, as block_stats
            self._set_value(self.mins, i, 0)
            self._set_value(self.maxs, i, 0)
        self._mark(i, fl)

    def invalidate(self, i):
        if i < self.n and self.flags[i]:
            self.flags[i] = 0
            self.dirty = True

    def truncate(self, n):
        if n < self.n:
            self.n = n
            self.fresh = {i for i in self.fresh if i < n}
            self.dirty = True

    def copy(self):
        new = ChunkStats(self.dtype, self.chunklen)
        new._room(self.n)
        new.n = self.n
        k = self.n
        new.mins[:k], new.maxs[:k], new.flags[:k], new.fps[:k] = self.mins[:k], self.maxs[:k], self.flags[:k], self.fps[:k]
        new.fresh, new.checked, new.dirty = set(self.fresh), self.checked, self.dirty
        new.persist = self.persist
        return new

    def unknown(self, nchunks):
        """The chunks among the first `nchunks` without statistics."""
        k = min(self.n, nchunks)
        idx = np.flatnonzero((self.flags[:k] & KNOWN) == 0)
        return idx.tolist() + list(range(k, nchunks))

    def check(self, store, nchunks):
        """Drop the entries read from a file whose chunk's fingerprint changed (rewritten since)."""
        if self.checked:
            return 0
        self.checked = True
        dropped = 0
        moved = store.moved_fingerprints()
        for i in range(min(self.n, nchunks)):
            if i in self.fresh or not self.flags[i] & KNOWN:
                continue
            fp = store.fingerprint(i)
            have = tuple(int(x) for x in self.fps[i])
            if fp is None or moved.get(have, have) != tuple(fp):
                self.flags[i] = 0
                dropped += 1
        return dropped

    def carries(self, moved):
        """Whether an entry not renewed since the file was stored has a fingerprint that `moved`
        (`ChunkStore.moved_fingerprints`) replaces: the file must then be stored again, though no
        value changed."""
        if not moved:
            return False
        for i in np.flatnonzero(self.flags[:self.n] & KNOWN).tolist():
            if i not in self.fresh and tuple(int(x) for x in self.fps[i]) in moved:
                return True
        return False

    def take_fingerprints(self, store):
        """Take the fingerprints of the chunks written since the file was last stored (the store gives
        them all at once: a writer's store kept those of the chunks it wrote), and carry those of
        the others that the store says moved (`moved_fingerprints`)."""
        ids = sorted(i for i in self.fresh if i < self.n)
        moved = store.moved_fingerprints()
        if moved:
            # chunks this writer did not rewrite, in objects it uploaded again: the same bytes
            for i in np.flatnonzero(self.flags[:self.n] & KNOWN).tolist():
                new = moved.get(tuple(int(x) for x in self.fps[i]))
                if new is not None and i not in self.fresh:
                    self.fps[i] = new
        if ids:
            # None: (0, 0, 0), which a reader will not trust
            self.fps[ids] = [(0, 0, 0) if fp is None else fp for fp in store.fingerprints(ids)]
        self.fresh = set()

    def view(self, nchunks):
        """(mins, maxs, flags) of the first `nchunks` chunks (unknown past `n`)."""
        k = min(self.n, nchunks)
        if k == nchunks:
            return self.mins[:k], self.maxs[:k], self.flags[:k]
        pad = nchunks - k
        return (np.concatenate([self.mins[:k], np.zeros(pad, self.dtype)]),
                np.concatenate([self.maxs[:k], np.zeros(pad, self.dtype)]),
                np.concatenate([self.flags[:k], np.zeros(pad, np.uint8)]))


# ---------------------------------------------------------------------- the file (docs/FORMAT.rst)
def encode(st, nchunks):
    """The bytes of meta/stats for the first `nchunks` entries of `st`."""
    n = min(st.n, nchunks)
    name = st.dtype.str.encode("ascii")
    head = _HEAD.pack(MAGIC, VERSION, 0, len(name), st.chunklen, n) + name
    head += b"\0" * (-len(head) % 8)
    flags = st.flags[:n].tobytes()
    flags += b"\0" * (-len(flags) % 8)
    body = b"".join([head, st.mins[:n].tobytes(), st.maxs[:n].tobytes(), flags,
                     st.fps[:n].astype("<i8").tobytes()])
    return body + struct.pack("<I", zlib.crc32(body))


def decode(raw, dtype, chunklen):
    """The ChunkStats in the bytes of a meta/stats file, or None when they are not for a carray of
    this dtype and chunklen, or are damaged (a missing file is the same: no statistics)."""
    try:
        if len(raw) < _HEAD.size + 4 or struct.unpack("<I", raw[-4:])[0] != zlib.crc32(raw[:-4]):
            return None
        magic, version, _, dlen, cl, n = _HEAD.unpack_from(raw)
        dt = _store_dtype(dtype)
        if magic != MAGIC or version != VERSION or cl != chunklen:
            return None
        if raw[_HEAD.size:_HEAD.size + dlen] != dt.str.encode("ascii"):
            return None
        pos = _HEAD.size + dlen
        pos += -pos % 8
        isz = dt.itemsize
        need = pos + 2 * n * isz + n + (-n % 8) + 24 * n + 4
        if len(raw) != need:
            return None
        st = ChunkStats(dt, chunklen)
        st._room(n)
        st.n = n
        st.mins[:n] = np.frombuffer(raw, dt, n, pos)
        st.maxs[:n] = np.frombuffer(raw, dt, n, pos + n * isz)
        pos += 2 * n * isz
        st.flags[:n] = np.frombuffer(raw, np.uint8, n, pos)
        pos += n + (-n % 8)
        st.fps[:n] = np.frombuffer(raw, "<i8", 3 * n, pos).reshape(n, 3)
    except (ValueError, TypeError, struct.error):
        return None
    st.checked = False
    st.dirty = False
    return st
