"""The exceptions blzarr raises.

Each one also subclasses the built-in exception that fits it (ValueError for bad data, OSError for
files, PermissionError for writes to read-only objects), so code written for bcolz that catches
those keeps working, and new code can catch `BlzarrError` for everything blzarr reports.

Examples
--------
>>> import blzarr
>>> issubclass(blzarr.ChunkError, ValueError), issubclass(blzarr.StorageError, OSError)
(True, True)
>>> try:
...     blzarr.open("no_such_directory")
... except OSError as e:
...     print(type(e).__name__)
StorageError
"""

import errno
import functools


class BlzarrError(Exception):
    """Base class of every blzarr error."""


class ChunkError(BlzarrError, ValueError):
    """A Blosc chunk is corrupted, truncated or malformed."""


class FormatError(BlzarrError, ValueError):
    """An on-disk file (meta JSON, chunk file, superchunk) does not follow the format."""


class ChecksumError(FormatError):
    """The checksum stored beside a chunk does not match its bytes."""


class ReadOnlyError(BlzarrError, PermissionError):
    """A write was attempted on an object opened with mode 'r'."""


class PickleNotAllowedError(BlzarrError, ValueError):
    """Opening data stored as pickles needs an explicit opt-in."""


class StorageError(BlzarrError, OSError):
    """A directory or file is missing or cannot be used as asked.

    Made from an OSError (`storage_error`), its text says what failed on which path, then the OS's
    reason (``cannot create '/data/x': [Errno 28] No space left on device``), and it keeps the
    OSError's ``errno``, ``strerror`` and ``filename``.
    """

    def __str__(self):
        if len(self.args) == 1 and isinstance(self.args[0], str):
            return self.args[0]      # the whole text, even with errno/strerror/filename set
        return super().__str__()


class ExistsError(StorageError, ValueError):
    """A table's destination already holds something, and the call did not ask to replace it
    (``mode='w'``).  A ValueError as well: bcolz's ctable raises one there."""


def os_reason(e):
    """The operating system's reason in an OSError, as Python prints it: ``[Errno 28] No space left on
    device`` (the text, not only the number), or the exception's own text when it has no errno."""
    if getattr(e, "errno", None) is not None and getattr(e, "strerror", None):
        return f"[Errno {e.errno}] {e.strerror}"
    return str(e) or type(e).__name__


# errors of the environment (a full disk, a permission, too many files), not of the data: a reader
# reports them as they are, never records them as damage
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EACCES, errno.EPERM,
                                errno.EROFS, errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def storage_error(e, doing):
    """`e`, an OSError, as a `StorageError` whose text is `doing` (what failed, naming the path) then
    the OS's reason and the file it names; errno, strerror and filename are kept.  A blzarr error is
    returned unchanged."""
    if isinstance(e, BlzarrError):
        return e
    text = f"{doing}: {os_reason(e)}"
    if getattr(e, "filename", None) is not None and f"'{e.filename}'" not in doing:
        text += f" ('{e.filename}')"
    err = StorageError(text)
    err.errno, err.strerror, err.filename = e.errno, e.strerror, e.filename
    return err


def storage_op(verb):
    """Decorator of the methods that touch the filesystem: an OSError that is not already a blzarr error
    leaves them as a `StorageError` "cannot <verb> '<rootdir>': [Errno N] reason"."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            try:
                return fn(self, *args, **kwargs)
            except BlzarrError:
                raise
            except OSError as e:
                root = self.__dict__.get("_rootdir") or kwargs.get("rootdir")
                v = verb(self, args, kwargs) if callable(verb) else verb
                raise storage_error(e, f"cannot {v} '{root}'" if root else f"cannot {v}") from e
        return wrapper
    return decorate


class MissingError(StorageError, FileNotFoundError):
    """An object of object storage (or a file of a byte store) that was asked for does not exist."""


class ConcurrentWriterError(StorageError):
    """Another writer changed a dataset on object storage that this writer is writing (object storage
    has no lock: one writer at a time, see docs/guide/object-storage.rst)."""
