"""The commit record of an on-disk carray (meta/commit, both layouts) and how readers watch it.

Every flush, trim or compaction that changes what a carray directory holds ends by bumping a
generation number in a 64-byte file beside meta/sizes.  A process that keeps the array open for
reading maps that file into memory (`Watch`; its first two looks read it instead, so that an open
followed by one read makes no map): before a read call it compares one integer of the map with the
generation it last loaded, which costs no system call, and reloads the array's state
(length, chunks, caches, statistics) when it differs.  The real bcolz writes the bcolz layout without
knowing the record; its flushes are caught by a fingerprint of meta/sizes (inode, size, modification
time), which a `Watch` checks, with one stat, at calls that are not scalar reads.

Layout (little-endian), docs/FORMAT.rst "Commit record"::

    0   8  magic b"blzcmt\\x01\\x00"
    8   8  u64 latest generation (what readers compare; written last)
    16 24  slot 0: u64 generation, u64 length (atoms meta/sizes counts), u32 flags (0), u32 CRC-32
    40 24  slot 1: the same; generation g is written in slot g % 2, the other slot keeps g - 1

The record is not a commit point of the data (meta/sizes is), so it is written in place and never
synced: a record lost or torn by a crash only makes readers reload once more.  It is never replaced
once it exists (a replaced file would leave the readers' maps on the old one).
"""

import mmap
import os
import struct
import weakref
import zlib

from blzarr._poll import PolledView
from blzarr.storage import fileio
from blzarr.storage.files import META_DIR, SIZES_FILE, atomic_write

COMMIT_FILE = "commit"
MAGIC = b"blzcmt\x01\x00"
SIZE = 64
_SLOT = struct.Struct("<QQI")
_SLOTS = (16, 40)


def record_path(rootdir):
    return fileio.join(rootdir, f"{META_DIR}/{COMMIT_FILE}")


def _slot(gen, length):
    body = _SLOT.pack(gen, length, 0)
    return body + struct.pack("<I", zlib.crc32(body))


def encode(gen, length, prev=None):
    """The 64 bytes of a record whose latest generation is `gen` (slot gen % 2), the other slot
    keeping `prev` (its 24 bytes, or a slot of generation 0)."""
    slots = [None, None]
    slots[gen % 2] = _slot(gen, length)
    slots[1 - gen % 2] = prev if prev is not None else _slot(0, 0)
    return MAGIC + struct.pack("<Q", gen) + slots[0] + slots[1]


def decode(raw):
    """(generation, length) of the newest valid slot of the record bytes `raw`, or None."""
    if len(raw) < SIZE or raw[:8] != MAGIC:
        return None
    best = None
    for off in _SLOTS:
        body = raw[off:off + 20]
        if zlib.crc32(body) != struct.unpack_from("<I", raw, off + 20)[0]:
            continue
        gen, length, _ = _SLOT.unpack(body)
        if best is None or gen > best[0]:
            best = (gen, length)
    return best


def create(rootdir, length=0):
    """Write a new record of generation 1 (a new directory, or one that had none)."""
    atomic_write(record_path(rootdir), encode(1, length))


class Writer:
    """The record as the one writer of a directory bumps it (its descriptor kept open).

    `new`: the directory is being created and has no record yet; the first bump creates it, in
    place and unsynced like every later bump (the creation's flush bumps before the directory is
    published, so readers always find one; a power loss may lose it, which leaves a valid directory
    without a record)."""

    __slots__ = ("path", "fd", "last", "new")

    def __init__(self, rootdir, new=False):
        self.path = record_path(rootdir)
        self.fd = None
        self.last = None        # the 64 bytes this writer wrote last (it holds the lock: nobody else writes)
        self.new = new

    def bump(self, length):
        """Publish a new generation: called after meta/sizes (and the chunks it counts) are in place."""
        raw = self.last
        if self.fd is None and self.new:
            self.new = False
            try:
                fd = fileio.open(self.path, "new")
            except FileExistsError:
                fd = None
            if fd is not None:
                # the bytes a record created at generation 1 (length 0) and bumped once holds, as
                # blzarr wrote them when it made the record before the creation's flush
                data = encode(2, length, _slot(1, 0))
                try:
                    fileio.pwrite(fd, data, 0, self.path)
                except BaseException:
                    fileio.close(fd)
                    raise
                self.fd, self.last = fd, data
                return 2
        if self.fd is None:
            try:
                self.fd = fileio.open(self.path, "rw")
            except FileNotFoundError:
                create(os.path.dirname(os.path.dirname(self.path)), length)
                self.fd = fileio.open(self.path, "rw")
            raw = None
        if raw is None:
            try:
                raw = bytes(fileio.pread(self.fd, SIZE, 0, self.path))
            except ValueError:      # cut short (a power loss kept the new file, not its bytes): none
                raw = b""
        # this writer's own last bytes name their generation in the header (no slot to check);
        # bytes read from the file are decoded, checksums and all
        got = (struct.unpack_from("<Q", raw, 8)[0],) if raw is not None and raw is self.last else decode(raw)
        if got is None:         # torn or damaged: start again above what the hint said
            hint = struct.unpack_from("<Q", raw, 8)[0] if len(raw) >= 16 and raw[:8] == MAGIC else 0
            hint = min(hint, 1 << 62)       # (garbage left by a power loss must not overflow the field)
            gen, prev = hint + 1, None
        else:
            gen = got[0] + 1
            prev = raw[_SLOTS[got[0] % 2]:_SLOTS[got[0] % 2] + 24]
        data = encode(gen, length, prev)
        self.last = None
        fileio.pwrite(self.fd, data, 0, self.path)
        self.last = data
        return gen

    def close(self):
        self.last = None
        fd, self.fd = self.fd, None
        if fd is not None:
            fileio.close(fd)

    def __del__(self):
        # a carray dropped without close() (an operation interrupted half-way, a test's throwaway
        # handle) must not keep the descriptor until the process ends, as a collected file object
        # would not
        try:
            self.close()
        except Exception:
            pass


def sizes_fingerprint(rootdir):
    """(inode, size, mtime in ns) of meta/sizes, None when it cannot be read."""
    try:
        st = os.stat(fileio.join(rootdir, f"{META_DIR}/{SIZES_FILE}"))
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# how often a scalar read of a directory in the bcolz layout looks at meta/sizes (`Watch.poll_sizes`)
POLL_NS = 2_000_000
CLOCK = None            # the monotonic clock in ns those reads go by (None: CLOCK_MONOTONIC; tests move one)


class _Peek:
    """The record read through a descriptor, for a watch's first looks: the first is the record the
    watch read when it found it (its open, a moment before), the second reads item i with one pread,
    the third maps the record instead (`Watch._mapped`) and hands the watch its map, so that a
    reader's later checks cost no system call."""

    __slots__ = ("watch", "fd", "looks", "head")

    def __init__(self, watch, fd, head):
        self.watch = weakref.ref(watch)     # (the watch holds this: no cycle, the descriptor goes with it)
        self.fd = fd
        self.looks = 0
        self.head = head                    # the record as the watch just read it: the first look's

    def __getitem__(self, i):
        fd = self.fd
        if fd is not None:
            self.looks += 1
            head, self.head = self.head, None
            if head is not None:
                return struct.unpack_from("<Q", head, 8 * i)[0]
            if self.looks <= 2:
                try:
                    return struct.unpack_from("<Q", os.pread(fd, 8, 8 * i))[0]
                except (OSError, struct.error):
                    pass            # (a record cut short meanwhile: the map says what it can)
            self.fd = None
            watch = self.watch()
            if watch is None:
                fileio.close(fd)
            else:
                mv = watch._mapped(fd)
                if mv is not None:
                    return mv[i]
        return -2                   # no generation: a change (the watch looks without a record now)

    def __del__(self):
        fd, self.fd = getattr(self, "fd", None), None
        if fd is not None:
            try:
                fileio.close(fd)
            except Exception:
                pass


class Watch:
    """What a reader of one carray directory last loaded, and whether that is still current.

    `view` is what a scalar read compares: ``view[1] != seen`` means "load again".  It is the record
    mapped as eight u64 (None when the directory has none yet), or, where a writer that does not bump
    the record may commit (`poll_sizes`: the bcolz layout, which the real bcolz writes), a polled
    view.  `changed()` is the check of every other call: the record (mapped now if it appeared
    since), and the fingerprint of meta/sizes."""

    __slots__ = ("rootdir", "view", "seen", "fp", "check_fp", "polled", "_mv", "_map", "__weakref__")

    def __init__(self, rootdir, check_fp):
        self.rootdir = rootdir
        self.check_fp = check_fp
        self.view = self._mv = self._map = None
        self.polled = False
        self.seen = None
        self.fp = None
        self._open_map()

    def poll_sizes(self):
        """Scalar reads look at meta/sizes too, now and then.  Nothing tells a reader of a commit by a
        writer that never bumps the record (the real bcolz rewrites chunk files in place and
        meta/sizes at its flush) without a system call, and a warm scalar read must not make one:
        `view` becomes a `_poll.PolledView`, whose item 1 is the record's generation while the whole
        check (`changed`, one stat of meta/sizes) found nothing, made at most once per `POLL_NS` of
        the monotonic clock (read without a system call), and -2 (no generation) once it found a
        change."""
        self.polled = True
        self.view = PolledView(self, POLL_NS, CLOCK)
        peek = self._mv
        if isinstance(peek, _Peek) and peek.fd is not None:
            fd, peek.fd = peek.fd, None         # (its every check reads the record: mapped now)
            self._mapped(fd)

    def _open_map(self):
        """Look at the record: its first looks are positioned reads through a descriptor kept open
        (`_Peek`), which maps it at the third (an open and its first read cost no mmap and munmap)."""
        try:
            fd = fileio.open(record_path(self.rootdir), "r")
        except OSError:
            return
        try:
            head = os.pread(fd, SIZE, 0)     # (outside fileio's reads, as the map's are)
        except OSError:
            head = b""
        if len(head) < SIZE or head[:8] != MAGIC:   # shorter than a record: treated as none
            fileio.close(fd)
            return
        self._mv = _Peek(self, fd, head)
        if not self.polled:
            self.view = self._mv

    def _mapped(self, fd):
        """Map the record through `fd` (then closed: the map keeps its own); None when it cannot be."""
        try:
            m = mmap.mmap(fd, SIZE, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            self._mv = None             # as if there were none: every check is the whole check
            if not self.polled:
                self.view = None
            return None
        finally:
            fileio.close(fd)
        self._map = m
        mv = self._mv = memoryview(m).cast("Q")
        if not self.polled:
            self.view = mv
        return mv

    def current(self):
        """The state to remember once the array is loaded: read it before loading (a commit in
        between is then seen as a change, never missed)."""
        if self._mv is None:
            self._open_map()
        return (self._mv[1] if self._mv is not None else None,
                sizes_fingerprint(self.rootdir) if self.check_fp or self._mv is None else None)

    def accept(self, state):
        self.seen, self.fp = state

    def changed(self):
        if self._mv is None:
            self._open_map()
            if self._mv is not None:
                return True
        elif self._mv[1] != self.seen:
            return True
        if self.check_fp or self._mv is None:
            return sizes_fingerprint(self.rootdir) != self.fp
        return False

    def forget(self):
        """Make the next check find a change (the state loaded was cut short, e.g. to the rows every
        column of a table holds)."""
        self.seen = self.fp = -1
