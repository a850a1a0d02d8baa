"""A crash-state simulator at blzarr's I/O layer (`blzarr.fileio`), in the manner of SQLite's crash-test
VFS and the ALICE tool.

`Recorder` is an implementation of the I/O layer that does every operation for real (the workload
runs normally) and logs each one that changes the disk: writes and truncations of a file (by
inode, so a later rename does not lose them), creations, renames, unlinks, mkdir/rmdir, and the
syncs (fsync/fdatasync of a file, fsync of a directory).  The workload marks the boundaries of its
API calls in the same log.

`crash_states(log, ...)` then builds the directory trees a power loss could leave after every prefix
of the log: an operation is durable once a later sync in the prefix covers it (a file's fsync covers
its earlier writes and truncations, a directory's fsync the earlier names made, renamed or removed
in it); the others may or may not have reached the disk.  For each prefix the states are: all of them
applied (what a process kill leaves), none, a few deterministic random subsets (in log order:
reordering), and the last write torn at a sector boundary.  Identical trees are checked once.
"""

import hashlib
import os
import random

from blzarr import fileio

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
    for i in range(k):
        e = log[i]
        kind = e[0]
        if kind in ("init", "call", "fsync", "fsyncdir"):
            durable[i] = True
        elif kind in ("write", "trunc"):
            durable[i] = file_synced_at.get(e[1], -1) > i
        elif kind in ("link", "mkdir", "unlink"):
            durable[i] = dir_synced_at.get(_parent(e[1]), -1) > i
        elif kind == "rename":
            durable[i] = (dir_synced_at.get(_parent(e[2]), -1) > i
                          and dir_synced_at.get(_parent(e[1]), -1) > i)
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


def crash_states(rec, seed=0, subsets=3, cuts=None):
    """Yield (cut, description, tree) for the crash states of `rec`'s log (see the module docstring).
    `cuts`: the prefix lengths to try (all by default)."""
    log = rec.log
    rng = random.Random(seed)
    n = len(log)
    for k in (range(n + 1) if cuts is None else cuts):
        durable = _durable_flags(log, k)
        volatile = [i for i in range(k) if not durable[i]]
        choices = [("all", set(volatile), None), ("none", set(), None)]
        if len(volatile) > 1:
            for s in range(subsets):
                choices.append((f"subset{s}", {i for i in volatile if rng.random() < 0.5}, None))
        writes = [i for i in volatile if log[i][0] == "write" and len(log[i][3]) > SECTOR]
        if writes:
            w = writes[-1]
            nsec = -(-len(log[w][3]) // SECTOR)
            cut_at = rng.randrange(1, nsec)
            choices.append(("torn-prefix", set(volatile) - {w}, (w, range(cut_at))))
            choices.append(("torn-sectors", set(volatile) - {w},
                            (w, [s for s in range(nsec) if rng.random() < 0.5])))
        for name, chosen, torn in choices:
            tree = _Tree(rec.base)
            for i in range(k):
                if durable[i] or i in chosen:
                    tree.apply(log[i])
                elif torn is not None and torn[0] == i:
                    tree.apply(log[i], torn=torn[1])
            yield k, name, tree


def call_at(rec, k):
    """The index (into rec.calls()) of the call running when the log is cut at k (-1 before any)."""
    idx = -1
    for j, (_, start, end) in enumerate(rec.calls()):
        if start < k:
            idx = j
    return idx
