"""Chunk statistics of a carray on object storage: its meta/stats object and the fingerprints that
tell whether an entry still describes its chunk.

Object stores replace an object whole, and each version of an object has a version tag (the
ETag the listing, a HEAD or the put's answer gives; content based on S3).  A chunk's fingerprint
is therefore made from the tag of the object that holds it: the chunk object's in the bcolz
layout, the superchunk file's in BLZ (a file holds many chunks, so its tag changes when any of
them does: an entry is then dropped, never trusted wrongly).  The tags come from what a reader or
writer already has (the listing of data/ made when it opens, the answers to its own puts): taking
a fingerprint costs no request.

A writer that uploads a superchunk file again (an append to its last chunks) changes the tag of
chunks it did not touch: `TagMoves` records, per file, which earlier fingerprints now stand for
the new one, so that the entries of those chunks stay valid (the file was derived from the
version of that tag by this writer, and a rewritten chunk's entry is renewed anyway).

A store that gives no tag (plain HTTP, fsspec's memory filesystem, an S3 compatible without
ETags) gives no fingerprint: its statistics are written but never trusted, and computed again
when a query needs them.
"""

import hashlib

from blzarr.errors import MissingError, StorageError
from blzarr.storage.files import META_DIR

STATS_KEY = f"{META_DIR}/stats"


def tag_number(tag):
    """A signed 64-bit number for the version tag `tag` (None when `tag` tells nothing: absent, or
    the "size:N" stand-in of a store without tags)."""
    if not isinstance(tag, str) or not tag or tag.startswith("size:"):
        return None
    tag = tag.strip()
    if tag.startswith("W/"):
        tag = tag[2:]
    tag = tag.strip('"')
    if not tag:
        return None
    return int.from_bytes(hashlib.blake2b(tag.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little", signed=True)


def object_fingerprint(number, size, tag):
    """The fingerprint (3 ints) of a chunk in object `number` of `size` bytes with version `tag`,
    None when the tag tells nothing."""
    t = tag_number(tag)
    if t is None or size is None:
        return None
    return (int(number), int(size), t)


class TagMoves:
    """Old fingerprint -> current one, for the objects this writer uploaded again (see the module
    docstring)."""

    def __init__(self):
        self.moves = {}

    def moved(self, old, new):
        """Object of fingerprint `old` (None: it was not there, or had no tag) is now `new`."""
        if old is None or new is None or old == new:
            return
        self.moves[old] = new
        # earlier versions of the object now stand for `new` too (a version back to `new`'s own
        # bytes, with the same content-based tag, stands for itself)
        self.moves = {k: (new if v == old else v) for k, v in self.moves.items() if k != new}

    def forget(self, number):
        """Object `number` was removed: nothing of it carries over."""
        self.moves = {k: v for k, v in self.moves.items() if k[0] != number}


def read(bytestore):
    """The bytes of meta/stats in `bytestore`, None when there is none or it cannot be read (no
    statistics then: they are computed again when needed).  A plain HTTP server lists nothing, so
    gives no tags to check the entries against: not asked."""
    if getattr(bytestore, "http", False):
        return None
    try:
        return bytes(bytestore.get(STATS_KEY))
    except (MissingError, StorageError, OSError):
        return None


def write(bytestore, raw):
    """Replace meta/stats (a plain put: a reader drops a file whose fingerprints do not match)."""
    bytestore.put(STATS_KEY, raw)
