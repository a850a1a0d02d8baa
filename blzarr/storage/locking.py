"""Advisory locks that keep a second writer process off a directory.

A carray or ctable created or opened with mode 'w', or opened with mode 'a' at its first write
(`FirstWrite`), takes an exclusive, non-blocking ``fcntl.flock`` on its root directory itself (an open descriptor of the directory: no lock file is
added, so the layout stays exactly bcolz's).  Another process asking for it gets a `LockError`.
Mode 'r' takes no lock: readers may sit beside one writer.

The lock belongs to the process: several objects of one process writing the same directory share it
(as bcolz allowed), counted, and it is released when the last of them is closed or garbage collected.
Platforms without ``fcntl`` (Windows) get no locking.
"""

import errno
import os
import threading
import weakref

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

from blzarr.errors import StorageError, storage_error


class LockError(StorageError):
    """Another process is writing the directory (it holds its advisory lock); a `StorageError`."""


_lock = threading.Lock()
_held = {}   # (st_dev, st_ino) of a locked directory -> [fd, count]


def _after_fork_in_child():
    # a forked child is another process: it holds none of its parent's locks (closing its copies of
    # the descriptors leaves the parent's locks alone, and keeps the child from holding them on)
    global _lock
    _lock = threading.Lock()
    for fd, _ in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class DirLock:
    """A share of this process's exclusive lock on one directory; `release()` (or GC) gives it back."""

    __slots__ = ("path", "_key", "__weakref__")

    def __init__(self, path):
        self.path = os.fspath(path)
        self._key = None
        if fcntl is None:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as e:
            raise storage_error(e, f"cannot open '{self.path}' to lock it") from None
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            with _lock:
                entry = _held.get(key)
                if entry is not None:
                    entry[1] += 1
                    os.close(fd)
                    fd = None
                else:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError as e:
                        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                            raise LockError(
                                errno.EWOULDBLOCK,
                                f"'{self.path}' is being written by another process (it holds the "
                                "directory's lock): this process may read it (with any mode) but not "
                                "write it until the other writer closes it") from None
                        if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                            raise storage_error(e, f"cannot lock '{self.path}'") from None
                        # a filesystem without flock support: no locking rather than no writing
                    _held[key] = [fd, 1]
                    fd = None
                self._key = key
        finally:
            if fd is not None:
                os.close(fd)

    @property
    def held(self):
        return self._key is not None

    def release(self):
        key, self._key = self._key, None
        if key is None:
            return
        with _lock:
            entry = _held.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del _held[key]
                os.close(entry[0])   # closing the descriptor releases the flock

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self):
        return f"DirLock({self.path!r}, held={self.held})"


class FirstWrite:
    """What a carray or ctable opened with mode 'a' gives its parts (its store, attributes, metalayers):
    the first write through any of them calls it, and it calls the owner's `_start_writing` (held
    weakly: the parts do not keep the owner alive), which takes the lock.  Mode 'a' takes no lock at
    open: a process that only reads, with the default mode, never stands in a writer's way."""

    __slots__ = ("_ref",)

    def __init__(self, method):
        self._ref = weakref.WeakMethod(method)

    def __call__(self):
        m = self._ref()
        if m is not None:
            m()


def first_write(obj):
    """Call the `FirstWrite` of `obj` (a store, attributes...), if it has one, before it writes."""
    gate = getattr(obj, "_first_write", None)
    if gate is not None:
        gate()


def lock_dir(path):
    """A `DirLock` on directory `path` for this process, or `LockError` if another process holds it."""
    return DirLock(path)
