"""Fault injection at blzarr's I/O layer (`blzarr.fileio`) for the interrupted-operation tests.

`Injector` is an implementation of the I/O layer that counts the calls that change the disk (opening a
file to write, writes, truncations, syncs, chmod, renames and swaps, removals, mkdir) and, before the
k-th one, injects a fault:

- 'interrupt': a KeyboardInterrupt (Ctrl-C) from that call, once;
- 'enospc': OSError(ENOSPC) from that call on, for every call that needs space (a full disk stays full:
  the undo of what failed meets it too; removing files still works);
- 'kill': SIGKILL of the process at that call (run it in a forked child: `run_killed`).

`count_calls(fn)` runs `fn` once without a fault and returns how many such calls it made, so a test
can interrupt it before each of them.
"""

import contextlib
import errno
import os
import signal

from blzarr.errors import StorageError
from blzarr.storage import fileio
from helpers import fork_child, read_all

FAULTS = ("interrupt", "enospc", "kill")
# the calls that may run on a full disk: they free space or change no block
_FREEING = {"unlink", "rmdir"}


class Injected(KeyboardInterrupt):
    """The KeyboardInterrupt an Injector raises (a subclass, so a test can tell it from a real one)."""


class Injector(fileio.OsIO):
    def __init__(self, at=None, fault=None):
        self.at, self.fault = at, fault
        self.n = 0
        self.fired = False
        self.calls = []

    def _tick(self, what, path=None):
        if self.fault == "enospc" and self.fired and what not in _FREEING:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        self.n += 1
        self.calls.append((what, path))
        if self.at is None or self.n != self.at:
            return
        self.fired = True
        if self.fault == "interrupt":
            raise Injected(f"injected before call {self.n} ({what} {path})")
        if self.fault == "enospc":
            if what not in _FREEING:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        elif self.fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)

    def open(self, path, how="r", mode=0o666):
        if how not in ("r", "r_nofollow"):
            self._tick("open", path)
        return super().open(path, how, mode)

    def pwrite(self, fd, data, pos, where=None):
        self._tick("pwrite", where)
        super().pwrite(fd, data, pos, where)

    def write(self, fd, data):
        self._tick("write")
        super().write(fd, data)

    def truncate(self, fd, size):
        self._tick("truncate")
        super().truncate(fd, size)

    def fsync(self, fd):
        self._tick("fsync")
        super().fsync(fd)

    def fdatasync(self, fd):
        self._tick("fdatasync")
        super().fdatasync(fd)

    def fchmod(self, fd, mode):
        self._tick("fchmod")
        super().fchmod(fd, mode)

    def replace(self, src, dst):
        self._tick("replace", dst)
        super().replace(src, dst)

    def rename(self, src, dst):
        self._tick("rename", dst)
        super().rename(src, dst)

    def exchange(self, a, b):
        self._tick("exchange", b)
        super().exchange(a, b)

    def unlink(self, path):
        self._tick("unlink", path)
        super().unlink(path)

    def rmdir(self, path):
        self._tick("rmdir", path)
        super().rmdir(path)

    def mkdir(self, path):
        self._tick("mkdir", path)
        super().mkdir(path)

    def fsync_dir(self, path):
        self._tick("fsync_dir", path)
        super().fsync_dir(path)


# the OsIO methods an Injector counts: a new writing method of the I/O layer must be added above
WRITING = ("open", "pwrite", "write", "truncate", "fsync", "fdatasync", "fchmod", "replace", "rename",
           "exchange", "unlink", "rmdir", "mkdir", "fsync_dir")


def count_calls(fn):
    """Run `fn()` with a counting Injector; (the number of writing calls, their list)."""
    inj = Injector()
    with fileio.use(inj):
        fn()
    return inj.n, inj.calls


def run_faulted(fn, at, fault):
    """Run `fn()` in this process with `fault` ('interrupt' or 'enospc') before writing call `at`;
    the exception it raised (None when it finished: the fault was never reached)."""
    inj = Injector(at, fault)
    try:
        with fileio.use(inj):
            fn()
    except Exception as e:         # what the fault became (a StorageError, a CLI error...)
        return e
    except Injected as e:
        return e
    return None


def run_killed(fn, at, injector=Injector, context=None):
    """Run `fn()` in a forked child killed by SIGKILL before writing call `at`; True when it was
    killed there, False when it finished first (a failure in the child raises AssertionError).
    `context(at)`, when given, is the context that kills (instead of `injector` through `fileio.use`)."""
    def child(w):
        with (context(at) if context is not None else fileio.use(injector(at, "kill"))):
            fn()
    pid, r = fork_child(child)
    msg = read_all(r)           # the child's error, if it raised
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return True
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and not msg, msg
    return False


# ------------------------------------------------------------------ object storage
class StoreInjector:
    """The object-storage counterpart of `Injector`: it counts the calls of `FsspecStore` that change
    objects (a put, a delete, the removal of a whole prefix) and, before the k-th one, injects a fault:
    'interrupt' (KeyboardInterrupt, once), 'enospc' (every put from that call on fails with an OSError,
    as a store over its quota: the store's retries meet it too and it becomes the store's
    `StorageError`; removals still work), 'kill' (SIGKILL of the process, `run_store_killed`)."""

    def __init__(self, at=None, fault=None):
        self.at, self.fault = at, fault
        self.n = 0
        self.fired = False
        self.calls = []

    def tick(self, what, key):
        """Before writing call (`what`, `key`): True when the call must fail as a full store."""
        if self.fault == "enospc" and self.fired:
            return what not in _STORE_FREEING
        self.n += 1
        self.calls.append((what, key))
        if self.at is None or self.n != self.at:
            return False
        self.fired = True
        if self.fault == "interrupt":
            raise Injected(f"injected before store call {self.n} ({what} {key})")
        if self.fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return self.fault == "enospc" and what not in _STORE_FREEING


# the store calls that may run on a full store: they free space
_STORE_FREEING = {"delete", "remove_all"}


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "the store is full (injected)")


@contextlib.contextmanager
def store_faults(injector):
    """Run the block with `injector` before every call of `FsspecStore` that changes objects."""
    from blzarr.storage.bytestore import FsspecStore
    call, remove_all = FsspecStore._call, FsspecStore.remove_all

    def _call(self, what, key, fn, *args, **kwargs):
        if what in ("write", "delete") and injector.tick(what, self.where(key)):
            fn = _full
        return call(self, what, key, fn, *args, **kwargs)

    def _remove_all(self):
        if injector.tick("remove_all", self.root):
            raise StorageError(f"cannot remove '{self.root}': the store is full (injected)")
        return remove_all(self)

    FsspecStore._call, FsspecStore.remove_all = _call, _remove_all
    try:
        yield injector
    finally:
        FsspecStore._call, FsspecStore.remove_all = call, remove_all


def count_store_calls(fn):
    """Run `fn()` counting the object-store calls that change objects; (their number, their list)."""
    inj = StoreInjector()
    with store_faults(inj):
        fn()
    return inj.n, inj.calls


def run_store_faulted(fn, at, fault):
    """`run_faulted` for object storage: `fault` ('interrupt' or 'enospc') before store call `at`."""
    try:
        with store_faults(StoreInjector(at, fault)):
            fn()
    except Exception as e:
        return e
    except Injected as e:
        return e
    return None


def run_store_killed(fn, at):
    """`run_killed` for object storage: a forked child killed before store call `at`."""
    return run_killed(fn, at, context=lambda at: store_faults(StoreInjector(at, "kill")))

