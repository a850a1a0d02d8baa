"""The exceptions blzarr raises; each also subclasses the fitting built-in so callers can catch either."""


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
