"""Helpers shared by the test modules (pytest puts this folder on sys.path).

- `assert_same`: exact equality of an array with the expected one, dtype and shape included;
- `assert_item`: an element is the one NumPy's ``.item()`` (and bcolz) gives;
- `make_ra`, `make_typed_ra`: structured arrays of every column kind for the ctable tests;
- `leave_as_killed`, `write_after`: a writer killed in its last call and the writer after it (the
  crash-simulation tests of a second writer);
- `tree`, `flip_byte`: the bytes of a directory, and damaging one byte of a file;
- `fork_child`, `read_line`, `read_all`, `wait_for`: the fork/pipe loop of the kill and
  concurrency tests (a child reports on a pipe; the parent reads lines until a marker);
- `examples`: a property test's own count of hypothesis examples, scaled to the run (conftest.py);
- `FileOpLog`: a `fileio` implementation that does every operation and logs the writes, cuts, syncs
  and renames with the files they touch (the tests of what a write path syncs, and in which order).
"""

import os
import signal
import time

import numpy as np
from hypothesis import settings

import blzarr
from blzarr.storage import fileio

# the count of examples of a full sweep that the counts tests ask for through `examples` are relative to
# (conftest: the default run takes a quarter of it, the slow run half)
SWEEP_BASE = 60


def examples(n):
    """The hypothesis examples of a test that wants `n` in a full sweep: scaled as conftest's profile for
    this run scales the default count (a quarter of `n` in the default run, half in the slow run)."""
    return max(1, round(n * settings.default.max_examples / SWEEP_BASE))


def assert_same(got, expected):
    """Exact equality, NaN and NaT included, with matching dtype and shape."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if expected.dtype.kind == "O":
        assert got.tolist() == expected.tolist()
    elif expected.dtype.names:
        for name in expected.dtype.names:  # field by field: padding bytes hold no data
            assert_same(got[name], expected[name])
    else:
        assert got.tobytes() == expected.tobytes()


def assert_item(value, expected):
    """`value` is the element NumPy's ``.item()`` gives for the scalar `expected` (what bcolz gives:
    Python numbers, bytes, str, datetime objects or ints, tuples for records), and holds its bytes."""
    expected = np.asarray(expected)
    assert type(value) is type(expected.item()), (type(value), type(expected.item()))
    assert np.asarray(value, dtype=expected.dtype).tobytes() == expected.tobytes()


def make_ra(n=10_000):
    """A table of int, float, unicode, bytes and datetime columns whose rows all differ."""
    ra = np.empty(n, dtype=[("a", "i8"), ("b", "f8"), ("c", "U6"), ("d", "S4"), ("e", "M8[s]")])
    ra["a"] = np.arange(n)
    ra["b"] = np.arange(n) * 0.5 - 7
    ra["c"] = [f"u{i % 997}" for i in range(n)]
    ra["d"] = [f"{i % 13}".encode() for i in range(n)]
    ra["e"] = np.datetime64("2020-01-01T00:00:00") + np.arange(n).astype("m8[s]") * 3600
    return ra


def make_typed_ra(n, start=0):
    """Rows start..start+n of a table with subarray, bool, u1 and ns-datetime columns too."""
    ra = np.empty(n, dtype=[("i", "i4"), ("f", "f8"), ("s", "S5"), ("u", "U4"), ("t", "M8[ns]"),
                            ("v", "f4", (2,)), ("ok", "?"), ("small", "u1")])
    k = np.arange(start, start + n)
    ra["i"] = k
    ra["f"] = k * 0.25
    ra["s"] = [b"s%d" % (x % 100) for x in k]
    ra["u"] = [f"ü{x % 50}" for x in k]
    ra["t"] = np.datetime64("2019-05-01T00:00:00", "ns") + k.astype("m8[s]")
    ra["v"] = np.stack([k, -k], axis=1)
    ra["ok"] = k % 5 == 0
    ra["small"] = k % 256
    return ra


def leave_as_killed(a):
    """Leave the writable carray `a` as a writer killed in its last call leaves it: nothing more
    written (no flush on close or collection), its directory lock released as the process's death
    releases it.  The caller drops its reference."""
    a._dirty = False
    a._mode = "r"
    a.__dict__.pop("_dirlock").release()


def write_after(rec, root, sizes, states):
    """A second writer of `root`: one flush of `sizes[k]` new atoms each (marked on the recorder
    `rec`), each flush's array appended to `states`."""
    b = blzarr.open(root, mode="a")
    for k, n in enumerate(sizes):
        rec.mark(f"second writer flush {k}")
        b.append(np.arange(7000 + 100 * k, 7000 + 100 * k + n))
        b.flush()
        states.append(b[:])
    b.close()


def tree(root):
    """{relative path: bytes} of every file under `root`."""
    out = {}
    for d, _, fs in os.walk(root):
        for name in fs:
            with open(os.path.join(d, name), "rb") as fh:
                out[os.path.relpath(os.path.join(d, name), root)] = fh.read()
    return out


def flip_byte(path, pos, mask=0xFF):
    """XOR the byte at `pos` of the file `path` with `mask`."""
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ mask]))


def fork_child(fn, *args, nthreads=1):
    """Run fn(*args, wfd) in a forked child; return (pid, read end of its pipe).

    An exception in the child is written to the pipe as a line "E <type>: <message>"; the child
    always leaves with os._exit(0).
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if nthreads:
                blzarr.set_nthreads(nthreads)
            fn(*args, w)
        except BaseException as e:
            try:
                os.write(w, f"E {type(e).__name__}: {e}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


def run_forked(fn, seconds):
    """Run fn() in a forked child under an alarm of `seconds`; return its exit code after it ends:
    0 when fn returned, 1 when it raised (the error is written to stderr), 2 when it hung."""
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGALRM, lambda *a: os._exit(2))
        signal.alarm(seconds)
        try:
            fn()
        except BaseException as e:      # noqa: B902 - any failure is the child's answer
            os.write(2, f"child: {type(e).__name__}: {e}\n".encode())
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child died: {status}"
    return os.WEXITSTATUS(status)


def read_line(r, timeout=30):
    """One line from the pipe `r` (without its newline), or what came before `timeout` seconds."""
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n") and time.monotonic() < deadline:
        c = os.read(r, 1)
        if not c:
            break
        buf += c
    return buf.decode().strip()


def read_all(r):
    """Everything left in the pipe `r` until its writer closes it; closes `r`."""
    out = b""
    while True:
        c = os.read(r, 65536)
        if not c:
            break
        out += c
    os.close(r)
    return out.decode()


def wait_for(r, marker, timeout=None):
    """Read the pipe `r` until `marker` was seen, the writer closed it or `timeout` passed; return the bytes."""
    buf = b""
    deadline = None if timeout is None else time.monotonic() + timeout
    while marker not in buf and (deadline is None or time.monotonic() < deadline):
        c = os.read(r, 65536)
        if not c:
            break
        buf += c
    return buf


def kill_child(pid, r):
    """SIGKILL the child `pid`, reap it, and return what was left in its pipe `r` (closed)."""
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return read_all(r)


class FileOpLog(fileio.OsIO):
    """Does every file operation (as `fileio.OsIO`) and logs, in order, those that change or make
    durable what is on disk, each with the absolute paths it touches:

        ("write", path, pos, nbytes)    pos None for a write at the descriptor's position
        ("trunc", path, size)
        ("sync", path)                  fsync or fdatasync
        ("syncdir", path)
        ("rename", src, dst)            replace, rename or exchange

    A pwritev is logged as the pwrite of each of its buffers (`OsIO.pwritev` then calls `pwrite`)."""

    def __init__(self):
        self.log = []
        self.paths = {}

    @staticmethod
    def paths_of(entry):
        """The paths an entry of the log touches."""
        return entry[1:] if entry[0] == "rename" else entry[1:2]

    def _path(self, fd):
        return self.paths.get(fd, "?")

    def open(self, path, how="r", mode=0o666):
        fd = super().open(path, how, mode)
        self.paths[fd] = os.path.abspath(os.fspath(path))
        return fd

    def close(self, fd):
        self.paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd, data, pos, where=None):
        super().pwrite(fd, data, pos, where)
        self.log.append(("write", self._path(fd), pos, len(data)))

    def write(self, fd, data):
        super().write(fd, data)
        self.log.append(("write", self._path(fd), None, len(data)))

    def truncate(self, fd, size):
        super().truncate(fd, size)
        self.log.append(("trunc", self._path(fd), size))

    def fsync(self, fd):
        super().fsync(fd)
        self.log.append(("sync", self._path(fd)))

    def fdatasync(self, fd):
        super().fdatasync(fd)
        self.log.append(("sync", self._path(fd)))

    def fsync_dir(self, path):
        super().fsync_dir(path)
        self.log.append(("syncdir", os.path.abspath(path)))

    def replace(self, src, dst):
        super().replace(src, dst)
        self.log.append(("rename", os.path.abspath(src), os.path.abspath(dst)))

    def rename(self, src, dst):
        super().rename(src, dst)
        self.log.append(("rename", os.path.abspath(src), os.path.abspath(dst)))

    def exchange(self, a, b):
        super().exchange(a, b)
        self.log.append(("rename", os.path.abspath(a), os.path.abspath(b)))
