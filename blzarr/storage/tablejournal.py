"""A table's rewrite of several columns on object storage, before-or-after: the rollback journal.

Object storage has no rename, so the columns a table operation rewrites (a row assignment changes
every column) are rewritten in place, one column after the other.  To make the operation one step:

1. every object of the columns it changes is copied, on the server, under the table's prefix
   ``.blzarr-old-<12 hex digits>/<column>/`` (the *aside copy*: complete carrays as they were);
2. the table's ``__rootdirs__`` is written again with a ``journal`` entry naming the aside copy and
   the columns: from then on a reader opens those columns from the aside copy (the state before),
   and a writer's open rolls back (`roll_back`);
3. the columns are rewritten in place and flushed;
4. ``__rootdirs__`` is written without the journal (the commit point: the state after), and the aside
   copy removed.

Rolling back copies every object of the aside copy over its column and deletes the column's
objects the copy lacks, then writes ``__rootdirs__`` without the journal and removes the aside copy:
each step can be repeated, so an interrupted roll-back is finished by the next writer.  Aside
prefixes no journal names (a copy interrupted before step 2, a removal in step 4 that failed) are
removed before the next journaled operation.  The format is in docs/FORMAT.rst.
"""

import contextlib
import secrets

from blzarr.errors import FormatError
from blzarr.storage import replace
from blzarr.storage.files import ROOTDIRS_FILE

ASIDE_PREFIX = ".blzarr-old-"
VERSION = 1


def journal_of(meta, where):
    """The journal entry of a table's column list `meta` (None when there is none); FormatError naming
    `where` when it is malformed."""
    j = meta.get("journal")
    if j is None:
        return None
    if not isinstance(j, dict) or j.get("version") != VERSION or not isinstance(j.get("old"), str) \
            or not j["old"].startswith(ASIDE_PREFIX) or "/" in j["old"] \
            or not isinstance(j.get("columns"), list) \
            or not all(isinstance(n, str) and n in meta["names"] for n in j["columns"]):
        raise FormatError(f"'{where}': its journal entry is malformed: {j!r}")
    return j


def aside_columns(meta, where):
    """{column: its key prefix to read from} for the columns a journal of `meta` names ({} without one)."""
    j = journal_of(meta, where)
    if j is None:
        return {}
    return {n: f"{j['old']}/{n}" for n in j["columns"]}


def _without(meta):
    return {k: v for k, v in meta.items() if k != "journal"}


def roll_back(store, meta):
    """Put the columns a journal of `meta` names back as its aside copy holds them, then write the
    column list without it and remove the copy; the column list as it now is."""
    j = journal_of(meta, store.where(ROOTDIRS_FILE))
    if j is None:
        return meta
    for n in j["columns"]:
        old = {k[len(j["old"]) + 1 + len(n) + 1:] for k in store.find(f"{j['old']}/{n}")}
        if not old:
            raise FormatError(f"'{store.where(ROOTDIRS_FILE)}' names the aside copy '{store.where(j['old'])}' "
                              f"of column {n!r}, which holds nothing")
        for key in store.find(n):
            rel = key[len(n) + 1:]
            if rel not in old:
                store.delete(key)
        for rel in sorted(old):
            store.copy(f"{j['old']}/{n}/{rel}", f"{n}/{rel}")
    meta = _without(meta)
    store.write_json(ROOTDIRS_FILE, meta)
    store.child(j["old"]).remove_all()
    return meta


def remove_stale(store, meta):
    """Remove the aside copies under the table's prefix that no journal of `meta` names."""
    j = journal_of(meta, store.where(ROOTDIRS_FILE))
    keep = j["old"] if j is not None else None
    for name in store.names(""):
        if name.startswith(ASIDE_PREFIX) and name != keep:
            store.child(name).remove_all()


@contextlib.contextmanager
def journaled(store, meta, columns, rolled_back):
    """Run the block (which rewrites `columns` of the table in place and flushes them) under a rollback
    journal.  On an exception in the block the columns are rolled back at once, and then
    `rolled_back(ok)` is called (ok False: the roll-back failed too, the next writer's open does it)."""
    remove_stale(store, meta)
    aside = ASIDE_PREFIX + secrets.token_hex(6)
    try:
        for n in columns:
            for key in store.find(n):
                store.copy(key, f"{aside}/{key}")
        store.write_json(ROOTDIRS_FILE, dict(meta, journal={"version": VERSION, "old": aside,
                                                            "columns": list(columns)}))
    except BaseException:
        with contextlib.suppress(BaseException):
            store.child(aside).remove_all()
        raise
    journal = dict(meta, journal={"version": VERSION, "old": aside, "columns": list(columns)})
    try:
        with replace.fresh(store.root):     # (the columns need no journal of their own)
            yield
        store.write_json(ROOTDIRS_FILE, meta)
    except BaseException:
        try:
            roll_back(store, journal)
        except BaseException:
            rolled_back(False)
            raise
        rolled_back(True)
        raise
    with contextlib.suppress(Exception):
        store.child(aside).remove_all()     # a leftover is removed before the next journaled operation
