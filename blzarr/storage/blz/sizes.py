"""BLZ ``meta/sizes`` as the commit record of a flush that syncs its chunk and itself in one barrier.

A flush that only rewrites the short last chunk, or fills it and appends a few chunks after it (in
the same superchunk file), writes the new chunk bytes, the offsets switch and ``meta/sizes``, then
syncs the superchunk file and ``meta/sizes`` together.  A power loss may then keep ``meta/sizes``
without the chunks it counts, so that record carries what a reader needs to notice it and to step
back (docs/FORMAT.rst, "meta/sizes"):

    "prev": [length, n, offset, nbytes]   the commit before it (its length and its "last")
    "sum":  hex                           the first (up to 8) bytes of the file's checksum of the
                                          chunk "last" names, as written
    "more": [[n, offset, hex], ...]       (when the flush filled chunk "prev" names) every other
                                          chunk counted since "prev": the full chunks from that
                                          one on, where the file's offsets table puts them, and
                                          their checksums' first bytes
    "boot": hex                           the writer's boot (16 hex digits of the kernel's boot id)

Within one boot the page cache shows every process the writer's writes in program order (the chunk
bytes were written before ``meta/sizes``), so only a reboot can leave ``meta/sizes`` ahead of its
chunk: a record written in this boot is taken as it is, one of another boot (or where the boot cannot
be told) has its chunk checked against "sum", and falls back to "prev" when it does not match.  The
bytes "prev" names are never written while the record naming them as "last" is the committed one,
and the flush that writes the new record does not reuse them, so they hold that chunk.

Here: the boot, the keys, and the resolution of a record into the commit a reader uses.
"""

import contextlib
import os
import threading

from blzarr.errors import FormatError

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
KEYS = ("prev", "sum", "more", "boot")
MAX_MORE = 4        # full chunks a record names in "more" (the text stays well inside one sector)
# in a plain meta/sizes: the text was written when its commit was durable already (by the close() of
# a writer whose last commit was synced, or inside a new directory that a barrier syncs before any
# writer can open it), so a writer opening it needs no sync of it (docs/FORMAT.rst)
DURABLE = "durable"

_boot = None        # this process's boot ("" when it cannot be told), read once


def boot_id():
    """This machine's current boot (16 hex digits), None where it cannot be told (other systems)."""
    global _boot
    if _boot is None:
        text = ""
        try:
            fd = os.open(BOOT_ID_FILE, os.O_RDONLY)
            try:
                text = os.read(fd, 64).decode("ascii").strip().replace("-", "").lower()
            finally:
                os.close(fd)
        except (OSError, UnicodeDecodeError):
            pass
        _boot = text[:16] if len(text) >= 16 and all(c in "0123456789abcdef" for c in text[:16]) else ""
    return _boot or None


def record(obj, prev_len, prev_last, digest, more=()):
    """`obj` (meta/sizes with "last") as a one-barrier commit record: with the commit before it
    (`prev_len` atoms, its "last" `prev_last`), the checksum `digest` (bytes) of the chunk "last"
    names, `more`: (chunk, offset, checksum bytes) of every other chunk counted since that commit
    (the full ones a flush that filled the short chunk wrote), and this boot.  None where the boot
    cannot be told (the flush keeps its ordered syncs: every reader would have to read the chunks
    to trust the record)."""
    boot = boot_id()
    if boot is None:
        return None
    out = dict(obj, prev=[int(prev_len)] + [int(v) for v in prev_last[:3]], sum=bytes(digest[:8]).hex())
    if more:
        out["more"] = [[int(n), int(off), bytes(d[:8]).hex()] for n, off, d in more]
    out["boot"] = boot
    return out


# lengths, chunk numbers, offsets and sizes are file offsets at most: a larger number in a damaged
# or hostile record is refused here, not passed on to a read that cannot take it (OverflowError)
_MAX = (1 << 63) - 1


def _ints(v, k):
    return (isinstance(v, list) and len(v) == k
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _MAX for x in v))


def _more(more):
    """The entries of "more" as (chunk, offset, hex), None when it is malformed."""
    if not isinstance(more, list) or len(more) > 64:
        return None
    out = []
    for m in more:
        if not (isinstance(m, list) and len(m) == 3 and _ints(m[:2], 2) and isinstance(m[2], str)):
            return None
        out.append(tuple(m))
    return out


def resolve(sizes, verify, where):
    """The commit a reader uses of the meta/sizes JSON `sizes`: (object without the record's keys,
    how): how None (not a record), "boot" (a record of this boot, taken as it is), "checked" (its
    chunks verified) or "prev" (read as its "prev").  `verify(n, offset, nbytes, sum)` tells whether
    chunk `n` is at `offset` with that checksum and `nbytes` uncompressed bytes (None: a full chunk,
    which the superchunk file's offsets table must also put there): asked of the chunk "last" names
    and of each in "more", only for a record of another boot.  A malformed "prev" of a record whose
    chunks do not verify is a FormatError naming the file `where()` names."""
    if not isinstance(sizes, dict) or "prev" not in sizes:
        return sizes, None
    out = dict(sizes)
    del out["prev"]
    out.pop("sum", None)
    more = _more(out.pop("more", []))
    boot = out.pop("boot", None)
    if boot is not None and boot == (_boot if _boot else boot_id()):
        return out, "boot"
    last, digest = sizes.get("last"), sizes.get("sum")
    if (_ints(last, 3) and isinstance(digest, str) and more is not None
            and all(verify(n, off, None, d) for n, off, d in more)
            and verify(last[0], last[1], last[2], digest)):
        return out, "checked"
    return as_prev(sizes, out, where), "prev"


def as_prev(sizes, out, where):
    """The record `sizes` read as its "prev": `out` (the record without its keys) with the length and
    "last" of the commit before it; a malformed "prev" is a FormatError naming the file `where()`
    names."""
    prev, shape = sizes.get("prev"), sizes.get("shape")
    if not _ints(prev, 4) or not isinstance(shape, list) or not shape:
        raise FormatError(f"{where()}: its short last chunk did not reach the disk, and \"prev\" "
                          f"{prev!r} is not [length, chunk, offset, nbytes]")
    if not _ints(shape[:1], 1):
        raise FormatError(f"{where()}: its length {shape[0]!r} is not a number of atoms")
    if prev[0] > shape[0]:
        # (a record is written by a flush that grows the array: the commit before it is shorter)
        raise FormatError(f"{where()}: its short last chunk did not reach the disk, and \"prev\" "
                          f"{prev!r} counts more than its length {shape[0]}")
    out["shape"] = [prev[0]] + list(shape[1:])
    out["last"] = prev[1:]
    length, nbytes = shape[0], sizes.get("nbytes")
    if isinstance(length, int) and length > 0 and isinstance(nbytes, int):
        out["nbytes"] = nbytes // length * prev[0]      # (informative)
    return out


# a table's writer that found its last column's record one flush ahead of another column (a power
# loss kept that record and lost the other column's): {column directory: "prev" length} whose
# record, of another boot, is read as its "prev" while the column starts writing (`read_as_prev`)
_as_prev = threading.local()


@contextlib.contextmanager
def read_as_prev(rootdir, length):
    """Within this context (this thread), the directory `rootdir`'s meta/sizes, when it is a record
    of another boot whose chunks verify and whose "prev" counts `length` atoms, is read as its
    "prev" (as when its chunk did not reach the disk: a writer's open writes that commit down before
    anything else); any other meta/sizes is read as always."""
    old = getattr(_as_prev, "dirs", None)
    _as_prev.dirs = dict(old or {}, **{os.path.abspath(rootdir): int(length)})
    try:
        yield
    finally:
        _as_prev.dirs = old


def steps_back(rootdir, sizes):
    """Whether the record `sizes` of the directory `rootdir`, of another boot and verified, is to be
    read as its "prev" (`read_as_prev`)."""
    dirs = getattr(_as_prev, "dirs", None)
    if not dirs:
        return False
    want = dirs.get(os.path.abspath(rootdir))
    prev = sizes.get("prev")
    return want is not None and _ints(prev, 4) and prev[0] == want


def prev_length(sizes):
    """The length of the commit before the record `sizes` (its "prev"), None when it is malformed."""
    prev = sizes.get("prev") if isinstance(sizes, dict) else None
    return prev[0] if _ints(prev, 4) else None


def mark_durable(obj):
    """`obj`, a plain meta/sizes, marked as written when its commit was durable (`DURABLE`)."""
    return dict(obj, **{DURABLE: True})


def take_durable(obj):
    """Whether the plain meta/sizes `obj` carries the durable mark; the mark is removed from `obj`
    (a text written from it later says it again only when that is true again)."""
    return obj.pop(DURABLE, None) is True
