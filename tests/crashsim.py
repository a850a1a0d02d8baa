"""A crash-state simulator at blzarr's I/O layer (`blzarr.fileio`), in the manner of SQLite's crash-test
VFS and the ALICE tool.

`Recorder` is an implementation of the I/O layer that does every operation for real (the workload
runs normally) and logs each one that changes the disk: writes and truncations of a file (by
inode, so a later rename does not lose them), creations, renames, unlinks, mkdir/rmdir, and the
syncs (fsync/fdatasync of a file, fsync of a directory).  The workload marks the boundaries of its
API calls in the same log.

`crash_states(rec, ...)` then builds the directory trees a power loss could leave at every crash
point (every prefix of the log): an operation is durable once a later sync in the prefix covers it
(a file's fsync covers its earlier writes and truncations, a directory's fsync the earlier names
made, renamed or removed in it, also while the directory had another name); the others may or may
not have reached the disk, in any order. The crash points between two syncs share their durable
operations, so the states are built per such segment: the durable operations plus every subset of
the un-synced ones when they are few, a bounded, seeded sample when they are many (in-order
prefixes, each one missing alone, random subsets), and un-synced writes torn at sector boundaries.
Each state carries the range of crash points that can leave it; the tests check it against the calls
running at each.

A power loss is followed by a reboot: before its first state, `crash_states` gives this process another
boot (`blzarr.storage.blz.sizes.boot_id`), so that what the workload wrote is read as a later boot
reads it (a BLZ meta/sizes synced with its chunk in one barrier is checked against that chunk).
"""

import errno
import hashlib
import os
import random
import shutil

from blzarr.storage import fileio
from blzarr.storage.blz import sizes as sizes_record

SECTOR = 512
# one line per simulated workload (conftest prints them in the terminal summary)
REPORT = []


class Recorder(fileio.OsIO):
    """Does every operation, logs those that change the disk (see the module docstring)."""

    def __init__(self, base):
        self.base = os.path.realpath(base)
        self.log = []                 # ('call', i, label) markers and operations
        self._ino = 0
        self._names = {}              # current path -> ('f', ino) or ('d', None)
        self._fds = {}                # fd -> ino
        for dirpath, dirnames, filenames in os.walk(self.base):
            self._names[dirpath] = ("d", None)
            for f in filenames:
                ino = self._new_ino()
                self._names[os.path.join(dirpath, f)] = ("f", ino)
                with open(os.path.join(dirpath, f), "rb") as fh:
                    self.log.append(("init", ino, fh.read()))

    def _new_ino(self):
        self._ino += 1
        return self._ino

    def _abs(self, path):
        p = os.path.abspath(os.fspath(path))
        d, name = os.path.split(p)
        return os.path.join(os.path.realpath(d), name)

    def _mine(self, path):
        return path == self.base or path.startswith(self.base + os.sep)

    def mark(self, label):
        """An API call starts here."""
        self.log.append(("call", label))

    # ---- descriptors
    def open(self, path, how="r", mode=0o666):
        p = self._abs(path)
        existed = os.path.exists(p)
        fd = super().open(path, how, mode)
        if self._mine(p):
            if not existed:
                ino = self._new_ino()
                self._names[p] = ("f", ino)
                self.log.append(("link", p, ino))
            else:
                ino = self._names[p][1]
                if how == "trunc":
                    self.log.append(("trunc", ino, 0))
            self._fds[fd] = ino
        return fd

    def close(self, fd):
        self._fds.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd, data, pos, where=None):
        super().pwrite(fd, data, pos, where)
        if fd in self._fds:
            self.log.append(("write", self._fds[fd], pos, bytes(data)))

    def write(self, fd, data):
        pos = os.lseek(fd, 0, os.SEEK_CUR)
        super().write(fd, data)
        if fd in self._fds:
            self.log.append(("write", self._fds[fd], pos, bytes(data)))

    def truncate(self, fd, size):
        super().truncate(fd, size)
        if fd in self._fds:
            self.log.append(("trunc", self._fds[fd], size))

    def fsync(self, fd):
        super().fsync(fd)
        if fd in self._fds:
            self.log.append(("fsync", self._fds[fd]))

    def fdatasync(self, fd):
        super().fdatasync(fd)
        if fd in self._fds:
            self.log.append(("fsync", self._fds[fd]))

    # ---- names
    def _move(self, src, dst):
        for p in [p for p in self._names if p == src or p.startswith(src + os.sep)]:
            self._names[dst + p[len(src):]] = self._names.pop(p)

    def replace(self, src, dst):
        s, d = self._abs(src), self._abs(dst)
        super().replace(src, dst)
        if self._mine(d):
            for p in [p for p in self._names if p == d or p.startswith(d + os.sep)]:
                del self._names[p]
            self._move(s, d)
            self.log.append(("rename", s, d))

    rename = replace

    def exchange(self, a, b):
        # not simulated: the writers fall back to two renames, which are
        raise OSError(errno.EINVAL, "exchange is not simulated", a)

    def unlink(self, path):
        p = self._abs(path)
        super().unlink(path)
        if self._mine(p):
            self._names.pop(p, None)
            self.log.append(("unlink", p))

    def rmdir(self, path):
        p = self._abs(path)
        super().rmdir(path)
        if self._mine(p):
            self._names.pop(p, None)
            self.log.append(("unlink", p))

    def mkdir(self, path):
        p = self._abs(path)
        super().mkdir(path)
        if self._mine(p):
            self._names[p] = ("d", None)
            self.log.append(("mkdir", p))

    def fsync_dir(self, path):
        p = os.path.realpath(path)
        super().fsync_dir(path)
        if self._mine(p):
            self.log.append(("fsyncdir", p))

    # ---- what the log says
    def calls(self):
        """[(label, first op index, end op index)] of the marked calls."""
        marks = [(i, e[1]) for i, e in enumerate(self.log) if e[0] == "call"]
        out = []
        for k, (i, label) in enumerate(marks):
            end = marks[k + 1][0] if k + 1 < len(marks) else len(self.log)
            out.append((label, i, end))
        return out


def _parent(p):
    return os.path.dirname(p)


def _durable_flags(log, k):
    """For the prefix log[:k]: which operations a later sync in the prefix covers."""
    durable = [False] * k
    file_synced_at = {}       # ino -> last fsync index < k
    dir_synced_at = {}        # dir -> last fsync index < k
    for i in range(k):
        e = log[i]
        if e[0] == "fsync":
            file_synced_at[e[1]] = i
        elif e[0] == "fsyncdir":
            dir_synced_at[e[1]] = i
    renames = [i for i in range(k) if log[i][0] == "rename"]

    def synced(d, i):
        # a directory's fsync covers the names made in it before, also under the name it had then
        # (the sync is of the directory, not of a path): d is followed through later renames
        if dir_synced_at.get(d, -1) > i:
            return True
        cur, pos = d, i
        for j in renames:
            if j <= i:
                continue
            src, dst = log[j][1], log[j][2]
            if cur == src or cur.startswith(src + os.sep):
                if any(log[m][0] == "fsyncdir" and log[m][1] == cur for m in range(pos + 1, j)):
                    return True
                cur, pos = dst + cur[len(src):], j
        return cur != d and dir_synced_at.get(cur, -1) > pos

    for i in range(k):
        e = log[i]
        kind = e[0]
        if kind in ("init", "call", "fsync", "fsyncdir"):
            durable[i] = True
        elif kind in ("write", "trunc"):
            durable[i] = file_synced_at.get(e[1], -1) > i
        elif kind in ("link", "mkdir", "unlink"):
            durable[i] = synced(_parent(e[1]), i)
        elif kind == "rename":
            durable[i] = synced(_parent(e[2]), i) and synced(_parent(e[1]), i)
    return durable


class _Tree:
    """A file tree built by applying operations: names -> inode, inode -> bytes."""

    def __init__(self, base):
        self.names = {base: ("d", None)}
        self.data = {}

    def apply(self, e, torn=None):
        kind = e[0]
        if kind == "init":
            self.data[e[1]] = bytearray(e[2])
        elif kind == "write":
            _, ino, pos, data = e
            buf = self.data.setdefault(ino, bytearray())
            if torn is not None:         # only the sectors in `torn` (indices into the write)
                for s in torn:
                    a = s * SECTOR
                    piece = data[a:a + SECTOR]
                    if len(buf) < pos + a:
                        buf.extend(bytes(pos + a - len(buf)))
                    buf[pos + a:pos + a + len(piece)] = piece
                return
            if len(buf) < pos:
                buf.extend(bytes(pos - len(buf)))
            buf[pos:pos + len(data)] = data
        elif kind == "trunc":
            buf = self.data.setdefault(e[1], bytearray())
            if len(buf) > e[2]:
                del buf[e[2]:]
            else:
                buf.extend(bytes(e[2] - len(buf)))
        elif kind in ("link", "mkdir"):
            if _parent(e[1]) in self.names:
                self.names[e[1]] = ("f", e[2]) if kind == "link" else ("d", None)
        elif kind == "unlink":
            for p in [p for p in self.names if p == e[1] or p.startswith(e[1] + os.sep)]:
                del self.names[p]
        elif kind == "rename":
            src, dst = e[1], e[2]
            if src not in self.names or _parent(dst) not in self.names:
                return
            for p in [p for p in self.names if p == dst or p.startswith(dst + os.sep)]:
                del self.names[p]
            for p in [p for p in self.names if p == src or p.startswith(src + os.sep)]:
                self.names[dst + p[len(src):]] = self.names.pop(p)

    def digest(self):
        h = hashlib.sha1()
        for p in sorted(self.names):
            kind, ino = self.names[p]
            h.update(p.encode() + b"\0" + kind.encode())
            if kind == "f":
                h.update(hashlib.sha1(bytes(self.data.get(ino, b""))).digest())
        return h.hexdigest()

    def materialize(self, base, dest):
        """Write the tree under `dest` (which stands for `base`)."""
        for p in sorted(self.names):
            kind, ino = self.names[p]
            out = dest + p[len(base):]
            if kind == "d":
                os.makedirs(out, exist_ok=True)
        for p in sorted(self.names):
            kind, ino = self.names[p]
            if kind == "f":
                out = dest + p[len(base):]
                with open(out, "wb") as f:
                    f.write(self.data.get(ino, b""))


class State:
    """One crash state: `tree`, what was kept (`kind`), and the crash points that can leave it: every
    prefix length k with kmin <= k <= kmax."""

    __slots__ = ("tree", "kind", "kmin", "kmax")

    def __init__(self, tree, kind, kmin, kmax):
        self.tree, self.kind, self.kmin, self.kmax = tree, kind, kmin, kmax


class Stats:
    """What `crash_states` enumerated: segments (runs of operations between two syncs) whose un-synced
    operations were few enough for every subset, those sampled, and the states yielded."""

    def __init__(self):
        self.segments = self.exhaustive = self.sampled = self.states = 0
        self.max_volatile = 0

    def __str__(self):
        return (f"{self.segments} segments between syncs: {self.exhaustive} with every subset of their "
                f"un-synced operations, {self.sampled} sampled (up to {self.max_volatile} un-synced)")


def _subsets(volatile, rng, exhaustive, samples):
    """The subsets of `volatile` (log indices, in order) that may have reached the disk: every one when
    there are at most `exhaustive`; else the in-order prefixes (a process kill), each one missing alone,
    and `samples` seeded random subsets."""
    m = len(volatile)
    if m <= exhaustive:
        for mask in range(1 << m):
            yield f"subset{mask:b}", [volatile[b] for b in range(m) if mask >> b & 1]
        return
    for p in range(m + 1):
        yield f"prefix{p}", volatile[:p]
    for p in range(m):
        yield f"without{p}", volatile[:p] + volatile[p + 1:]
    for s in range(samples):
        yield f"random{s}", [i for i in volatile if rng.random() < 0.5]


def reboot():
    """Give this process another boot than the one the workload wrote in (see the module docstring)."""
    now = sizes_record.boot_id() or ""
    sizes_record._boot = "%016x" % ((int(now, 16) + 1) % (1 << 64) if now else 1)


def crash_states(rec, seed=0, exhaustive=8, samples=16, stats=None):
    """Yield the `State`s a power loss can leave during `rec`'s log (see the module docstring).

    The log is cut into segments by its sync operations: every crash point inside a segment has the
    same durable operations (those a sync before it covers), and the same un-synced ones up to it; so
    the states of a segment are the durable operations plus any subset of its un-synced ones (a
    disk reorders what it was not told to order), each state tagged with the crash points that
    can leave it (after the last operation it keeps, up to the segment's end).  When a segment has
    at most `exhaustive` un-synced operations every subset is built; beyond, the in-order prefixes,
    each one missing alone, and `samples` seeded random subsets.  Each un-synced write longer than a
    sector is also torn: its first sectors only (after the operations before it), and a random set
    of its sectors (beside a random subset)."""
    reboot()
    log = rec.log
    n = len(log)
    stats = stats if stats is not None else Stats()
    rng = random.Random(seed)
    ends = [i for i, e in enumerate(log) if e[0] in ("fsync", "fsyncdir")] + [n]
    start = 0
    for end in ends:
        if end < start:
            continue
        durable = _durable_flags(log, end)
        kept = [i for i in range(end) if durable[i]]
        volatile = [i for i in range(end) if not durable[i]]
        stats.segments += 1
        stats.max_volatile = max(stats.max_volatile, len(volatile))
        if len(volatile) <= exhaustive:
            stats.exhaustive += 1
        else:
            stats.sampled += 1
        for kind, chosen in _subsets(volatile, rng, exhaustive, samples):
            tree = _Tree(rec.base)
            for i in sorted(kept + chosen):         # in log order: a name needs its directory
                tree.apply(log[i])
            stats.states += 1
            yield State(tree, kind, max([start] + [i + 1 for i in chosen]), end)
        for w in [i for i in volatile if log[i][0] == "write" and len(log[i][3]) > SECTOR]:
            nsec = -(-len(log[w][3]) // SECTOR)
            before = [i for i in volatile if i < w]
            for kind, chosen, torn in (
                    ("torn-prefix", before, range(rng.randrange(1, nsec))),
                    ("torn-sectors", [i for i in volatile if i != w and rng.random() < 0.5],
                     [s for s in range(nsec) if rng.random() < 0.5])):
                tree = _Tree(rec.base)
                for i in sorted(kept + chosen + [w]):
                    tree.apply(log[i], torn=torn if i == w else None)
                stats.states += 1
                yield State(tree, kind, max([start, w + 1] + [i + 1 for i in chosen]), end)
        start = end + 1


def distinct_states(rec, scratch, seed=0, **kw):
    """The crash states of `rec` whose files differ from every earlier one's, each materialized at
    `scratch` (replacing the previous state's files) before it is yielded."""
    seen = set()
    for st in crash_states(rec, seed=seed, **kw):
        d = st.tree.digest()
        if d in seen:
            continue
        seen.add(d)
        if os.path.exists(scratch):
            shutil.rmtree(scratch)
        st.tree.materialize(rec.base, scratch)
        yield st


def calls_at(rec, kmin, kmax):
    """The indices (into rec.calls()) of the calls running at the crash points kmin..kmax."""
    return sorted({call_at(rec, k) for k in _call_points(rec, kmin, kmax)})


def _call_points(rec, kmin, kmax):
    """kmin, kmax and every call boundary between them (the crash points where the call changes)."""
    pts = {kmin, kmax}
    for _, start, _ in rec.calls():
        if kmin < start + 1 <= kmax:
            pts.add(start + 1)
    return pts


def call_at(rec, k):
    """The index (into rec.calls()) of the call running when the log is cut at k (-1 before any)."""
    idx = -1
    for j, (_, start, end) in enumerate(rec.calls()):
        if start < k:
            idx = j
    return idx
