"""The BLZ file format's small pieces (docs/FORMAT.rst): file names, the canonical JSON of the metadata
section, the reserve rule, and what the store knows of one superchunk file (`_File`)."""

import itertools
import json

FORMAT = "blz"
SUPERCHUNK_EXT = "__.bin"


def superchunk_name(fno):
    return f"__{fno}{SUPERCHUNK_EXT}"


def _encode(value):
    """The canonical JSON bytes of a metadata value (their length is a metalayer's fixed size)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False).encode("ascii")
    except (TypeError, ValueError) as e:
        raise TypeError(f"metalayer values must be JSON-serializable: {e}") from None


def _coerce_reserve(reserve):
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or reserve < 0:
        raise ValueError(f"reserve must be a number of bytes >= 0 or a fraction in [0, 1), got {reserve!r}")
    if isinstance(reserve, float) and reserve >= 1:
        raise ValueError(f"a float reserve is a fraction of each chunk's size, in [0, 1); got {reserve!r}")
    return reserve


_epochs = itertools.count(1)


class _Where:
    __slots__ = ("store", "n")

    def __init__(self, store, n):
        self.store = store
        self.n = n

    def __str__(self):
        fno, slot = divmod(self.n, self.store.K)
        return f"chunk {self.n} (slot {slot}) of superchunk file '{self.store._path(fno + 1)}'"

    __format__ = lambda self, spec: format(str(self), spec)

    def __bool__(self):
        return True


class _File:
    """What the store knows of one superchunk file: header fields, offsets, file identity."""

    __slots__ = ("fno", "path", "header", "meta_size", "table_pos", "data_start", "offsets", "full_table",
                 "fstate", "nchunks", "last_chunk", "verified", "meta_json", "epoch")

    def __init__(self, fno, path):
        self.fno = fno
        self.path = path
        self.verified = set()
        self.epoch = next(_epochs)
