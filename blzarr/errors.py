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
    """A directory or file is missing or cannot be used as asked."""
