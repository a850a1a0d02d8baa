"""The file I/O layer beneath both on-disk layouts: every operation that writes, syncs, creates,
renames or removes a file of a carray or ctable directory goes through the functions here.

The functions dispatch to the current implementation (`current()`, swapped with `use(impl)`), by
default `OsIO`: plain os calls.  The test suite's crash simulator records every operation through
a subclass and rebuilds the states a power loss could leave (tests/crashsim.py).

Descriptors are OS file descriptors: the Cython readers of superchunk files (`_superchunk.read_head`,
`read_offsets`, `read_blocks_into`) use the ones `open` returns directly.

Durability: ``blzarr.defaults.fsync`` (``BLZARR_FSYNC=0`` in the environment makes it False)
says whether writers sync what they publish; `sync_enabled()` reads it.
"""

import contextlib
import errno
import os
import stat
import sys

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

from blzarr import _superchunk as sc
from blzarr.runtime import params


_BINARY = getattr(os, "O_BINARY", 0)
_FLAGS = {"r": os.O_RDONLY | _BINARY, "r_nofollow": os.O_RDONLY | _BINARY | getattr(os, "O_NOFOLLOW", 0),
          "rw": os.O_RDWR | _BINARY,
          "new": os.O_RDWR | os.O_CREAT | os.O_EXCL | _BINARY,
          "trunc": os.O_RDWR | os.O_CREAT | os.O_TRUNC | _BINARY}


def sync_enabled():
    """Whether writers fsync what they publish (``blzarr.defaults.fsync``)."""
    return params.FSYNC


class OsIO:
    """The default implementation: the operating system's calls, nothing recorded."""

    # ---- descriptors
    def open(self, path, how="r", mode=0o666):
        return os.open(path, _FLAGS[how], mode)

    def close(self, fd):
        os.close(fd)

    def fstat(self, fd):
        return os.fstat(fd)

    def pread(self, fd, n, pos, where=None):
        return sc.pread(fd, n, pos, where)

    def pwrite(self, fd, data, pos, where=None):
        sc.pwrite_all(fd, data, pos, where)

    def pwritev(self, fd, bufs, pos, where=None):
        """Write the buffers `bufs` one after the other from `pos`: one system call (pwritev) where
        the platform has it.  An implementation that overrides `pwrite` (a recorder, a fault
        injector) sees one pwrite per buffer instead."""
        if type(self).pwrite is not OsIO.pwrite or not sc.HAVE_PWRITEV:
            for b in bufs:
                self.pwrite(fd, b, pos, where)
                pos += len(b)
            return
        sc.pwritev_all(fd, bufs, pos, where)

    def start_writeback(self, fd, pos, n):
        """Start writing bytes [pos, pos+n) of `fd` to the disk without waiting (a hint that makes a
        later fdatasync shorter; nothing where the platform cannot)."""
        sc.start_writeback(fd, pos, n)

    def write(self, fd, data):
        """Write all of `data` at the descriptor's position."""
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def truncate(self, fd, size):
        os.ftruncate(fd, size)

    def fsync(self, fd):
        os.fsync(fd)

    def fdatasync(self, fd):
        getattr(os, "fdatasync", os.fsync)(fd)

    def fchmod(self, fd, mode):
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)

    def flock(self, fd, how):
        """An advisory lock on the file behind `fd`, without waiting: how='sh' shared, 'ex'
        exclusive, 'un' released.  True when done, False when another descriptor holds a lock in
        the way, None where there are no such locks (no flock on the platform, or the file system
        refuses them)."""
        if fcntl is None:
            return None
        op = {"sh": fcntl.LOCK_SH | fcntl.LOCK_NB, "ex": fcntl.LOCK_EX | fcntl.LOCK_NB,
              "un": fcntl.LOCK_UN}[how]
        try:
            fcntl.flock(fd, op)
        except BlockingIOError:
            return False
        except OSError:
            return None
        return True

    # ---- names
    def replace(self, src, dst):
        os.replace(src, dst)

    def rename(self, src, dst):
        os.rename(src, dst)

    def exchange(self, a, b):
        """Swap the names `a` and `b` (two existing paths) in one atomic step: Linux's
        renameat2(RENAME_EXCHANGE).  OSError(ENOSYS/EINVAL/EOPNOTSUPP) where the platform or the
        file system cannot (the caller then renames one after the other)."""
        _renameat2_exchange(a, b)

    def unlink(self, path):
        os.remove(path)

    def rmdir(self, path):
        os.rmdir(path)

    def mkdir(self, path):
        os.mkdir(path)

    def fsync_dir(self, path):
        """Make the names in directory `path` durable (best effort: not every platform can open a
        directory)."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    # ---- queries (nothing changes)
    def listdir(self, path):
        return os.listdir(path)

    def exists(self, path):
        return os.path.exists(path)

    def isdir(self, path):
        return os.path.isdir(path)

    def isfile(self, path):
        return os.path.isfile(path)

    def getsize(self, path):
        return os.path.getsize(path)

    def read_file(self, path, limit=None):
        # reads of the file's size (+1 to see its end), not of `limit`: a buffered read of a
        # 16 MB limit maps and unmaps 16 MB for a 200-byte JSON file
        fd = os.open(path, os.O_RDONLY | _BINARY)
        try:
            left = (1 << 62) if limit is None else limit
            st = os.fstat(fd)
            return read_upto(fd, left, min(left, st.st_size + 1), stat.S_ISREG(st.st_mode))
        finally:
            os.close(fd)


def read_upto(fd, limit, first=1 << 16, regular=False):
    """Up to `limit` bytes of `fd` from its position to its end: one read of `first` bytes, then reads
    of at least 64 KiB (a file that grew meanwhile is read on, never past `limit`).  `regular`: `fd` is
    a regular file, where a read that returns fewer bytes than asked has met the end (no read more to
    see it)."""
    parts = []
    size = first
    while limit > 0:
        want = min(limit, size)
        b = os.read(fd, want)
        if not b:
            break
        parts.append(b)
        limit -= len(b)
        if regular and len(b) < want:
            break
        size = max(first, 1 << 16)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def join(root, key):
    """`root` joined with the relative name `key` ('meta/sizes': parts separated by '/'), as
    ``os.path.join(root, *key.split('/'))`` gives it (without its cost, where '/' is the separator:
    a path is made this way several times per open)."""
    if os.sep != "/" or not key or key.startswith("/") or "//" in key or key.endswith("/"):
        return os.path.join(root, *key.split("/"))
    return root + key if not root or root.endswith("/") else f"{root}/{key}"


def _load_renameat2():
    try:
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2() if sys.platform.startswith("linux") else None
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2_exchange(a, b):
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available on this platform", os.fspath(a))
    import ctypes
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), os.fspath(a), None, os.fspath(b))


_impl = OsIO()


def current():
    """The implementation in use."""
    return _impl


@contextlib.contextmanager
def use(impl):
    """Route every operation through `impl` inside the block (process-wide)."""
    global _impl
    saved = _impl
    _impl = impl
    try:
        yield impl
    finally:
        _impl = saved


# ---- the functions the layouts call (looked up at call time: `use` takes effect at once)
def open(path, how="r", mode=0o666):
    """A descriptor of `path`: how='r' read only, 'rw' read/write, 'new' created (must not exist),
    'trunc' created or emptied."""
    return _impl.open(path, how, mode)


def close(fd):
    _impl.close(fd)


def fstat(fd):
    return _impl.fstat(fd)


def pread(fd, n, pos, where=None):
    return _impl.pread(fd, n, pos, where)


def pwrite(fd, data, pos, where=None):
    _impl.pwrite(fd, data, pos, where)


def pwritev(fd, bufs, pos, where=None):
    _impl.pwritev(fd, bufs, pos, where)


def start_writeback(fd, pos, n):
    _impl.start_writeback(fd, pos, n)


def write(fd, data):
    _impl.write(fd, data)


def truncate(fd, size):
    _impl.truncate(fd, size)


def fsync(fd):
    _impl.fsync(fd)


def fdatasync(fd):
    _impl.fdatasync(fd)


def fchmod(fd, mode):
    _impl.fchmod(fd, mode)


def flock(fd, how):
    return _impl.flock(fd, how)


def replace(src, dst):
    _impl.replace(src, dst)


def rename(src, dst):
    _impl.rename(src, dst)


def exchange(a, b):
    _impl.exchange(a, b)


def unlink(path):
    _impl.unlink(path)


def rmdir(path):
    _impl.rmdir(path)


def mkdir(path):
    _impl.mkdir(path)


def fsync_dir(path):
    _impl.fsync_dir(path)


def listdir(path):
    return _impl.listdir(path)


def exists(path):
    return _impl.exists(path)


def isdir(path):
    return _impl.isdir(path)


def isfile(path):
    return _impl.isfile(path)


def getsize(path):
    return _impl.getsize(path)


def read_file(path, limit=None):
    """The bytes of `path` (the first `limit` when given); FileNotFoundError/OSError propagate."""
    return _impl.read_file(path, limit)


def makedirs(path, exist_ok=False):
    """os.makedirs through `mkdir` (each directory made is one recorded operation)."""
    path = os.fspath(path)
    if _impl.isdir(path):
        if exist_ok:
            return
        raise FileExistsError(17, "File exists", path)
    parent = os.path.dirname(os.path.normpath(path))
    if parent and not _impl.exists(parent):
        makedirs(parent, exist_ok=True)
    _impl.mkdir(path)


def rmtree(path, ignore_errors=False):
    """shutil.rmtree through `unlink` and `rmdir` (symlinks are removed, not followed)."""
    try:
        if os.path.islink(path):
            _impl.unlink(path)
            return
        for name in _impl.listdir(path):
            p = os.path.join(path, name)
            if os.path.isdir(p) and not os.path.islink(p):
                rmtree(p, ignore_errors)
            else:
                try:
                    _impl.unlink(p)
                except FileNotFoundError:
                    pass
        _impl.rmdir(path)
    except OSError:
        if not ignore_errors:
            raise


def write_new(path, data, sync=False, mode=None, writeback=False):
    """Create (or empty) `path` and write `data`; fsync it when `sync`, else start its writeback when
    `writeback` (see `fill`).  Not atomic: see files.atomic_write."""
    fill(_impl.open(path, "trunc"), data, sync, mode, writeback)


def fill(fd, data, sync=False, mode=None, writeback=False):
    """Give the new file of descriptor `fd` its `mode` (unless None) and `data`, fsync it when `sync`,
    and close `fd` (also when one of these fails).  With `writeback` (and no `sync`), the file's
    bytes start their way to the disk at once (`start_writeback`, a hint): for a file that a later
    barrier syncs, which then finds them written."""
    try:
        if mode is not None:
            _impl.fchmod(fd, mode)
        _impl.write(fd, data)
        if sync:
            _impl.fsync(fd)
        elif writeback and len(data):
            try:
                _impl.start_writeback(fd, 0, len(data))
            except OSError:
                pass            # a hint: the sync that follows reports what is wrong
    finally:
        _impl.close(fd)


__all__ = ["OsIO", "current", "use", "sync_enabled", "open", "close", "fstat", "pread", "pwrite",
           "pwritev", "start_writeback", "write", "truncate", "fsync", "fdatasync", "fchmod", "flock", "replace", "rename", "exchange", "unlink", "rmdir",
           "mkdir", "fsync_dir", "listdir", "exists", "isdir", "isfile", "getsize", "read_file", "makedirs",
           "rmtree", "write_new"]
