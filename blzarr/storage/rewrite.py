"""Rewrites of several chunks made visible in one step: the rewrite record.

A rewrite of a chunk already on disk first writes the new bytes beside the old ones, where no reader
looks (the bcolz layout: a new hidden file in data/, to be renamed over the chunk's file; BLZ: free
space of the superchunk file, its offsets entry still naming the old bytes).  A flush then *switches*
them: renames in the bcolz layout, offsets entries written in BLZ.  One rename, or the entry of one
chunk, is one step; a switch of more than one chunk is guarded by a record (also where one write
switches several entries of a superchunk file: a reader's call may read one chunk before that write
and another after it, and only the record's announcement makes it read again):

1. the new bytes are made durable (the layouts' syncs);
2. the record, naming every switch of the operation (of every column of a table), is written
   atomically (a synced temporary file renamed into place): from then on the operation is committed;
3. the switches are applied, synced, and the record removed.

Where the record is: ``meta/rewrite`` in a carray's directory for the carray's own switches (key
``"."``), ``.blzarr-rewrite`` in the directory holding a table's column directories for a table's
(key: the column directory's name).  A writer opening a carray or a table for writing first applies
what a record names (every step is idempotent) and removes it; a reader (which never writes) reads
through it: a chunk the record switches is read where the record says.  A record is written only when
everything it names is durable, so there is nothing to roll back: without a record, the old bytes are
the current ones and the new bytes are leftovers (hidden files removed by the next writer, free space
in BLZ that `compact` reclaims).  The format is specified in docs/FORMAT.rst ("Rewrite record").
"""

import os
import re

from blzarr.errors import FormatError, StorageError
from blzarr.storage import fileio
from blzarr.storage.files import IN_FLIGHT, META_DIR, atomic_write, checked_record, checksummed_json

CARRAY_RECORD = "rewrite"               # in meta/
TABLE_RECORD = ".blzarr-rewrite"        # beside a table's column directories
VERSION = 1
SELF = "."


# what files.atomic_write names its temporary files
TMP_RE = re.compile(r"^\.tmp-[0-9a-f]{12}$")


def remove_tmp_debris(directory):
    """Remove the temporary files killed atomic replacements left in `directory` (the caller holds the
    lock of what `directory` belongs to: no replacement of its files is under way)."""
    try:
        names = fileio.listdir(directory)
    except OSError:
        return
    for name in names:
        if TMP_RE.match(name) and os.path.abspath(os.path.join(directory, name)) not in IN_FLIGHT:
            try:
                fileio.unlink(os.path.join(directory, name))
            except OSError:
                pass


def carray_record_path(rootdir):
    return fileio.join(rootdir, f"{META_DIR}/{CARRAY_RECORD}")


def table_record_path(columns_base):
    return fileio.join(columns_base, TABLE_RECORD)


def encode(switches):
    """The bytes of a record naming `switches` ({key: plan of one carray directory})."""
    rec = {"version": VERSION, "switches": switches}
    return checksummed_json("rewrite", rec)


def read(path):
    """{key: plan} of the record at `path`, None when there is none; FormatError naming the file when
    it is damaged (a record is written whole by a rename: damage is not a torn write)."""
    try:
        raw = fileio.read_file(path, 1 << 26)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise StorageError(f"cannot read rewrite record '{path}': {e}") from None
    rec = checked_record(raw, path, "rewrite", "rewrite record")
    if rec is None:
        raise FormatError(f"rewrite record '{path}' is damaged (its checksum does not match)")
    sw = rec.get("switches")
    if rec.get("version") != VERSION or not isinstance(sw, dict) \
            or not all(isinstance(p, dict) and p.get("layout") in ("bcolz", "blz") for p in sw.values()):
        raise FormatError(f"rewrite record '{path}' is of a version or shape this blzarr does not know")
    return sw


def write(path, switches):
    atomic_write(path, encode(switches), fsync=fileio.sync_enabled())


def clear(path):
    try:
        fileio.unlink(path)
    except FileNotFoundError:
        pass
    if fileio.sync_enabled():
        fileio.fsync_dir(os.path.dirname(path))


def _key_dir(base, key):
    if key == SELF:
        return base
    if not key or "/" in key or os.sep in key or key in (".", "..") or key.startswith("."):
        raise FormatError(f"rewrite record in '{base}' names the column directory {key!r}")
    return os.path.join(base, key)


# layout -> apply(rootdir, plan): each layout's module registers how its switches are completed
APPLY = {}


def apply_plan(rootdir, plan):
    """Make the switches `plan` names in the carray directory `rootdir` (each idempotent), durable."""
    APPLY[plan["layout"]](rootdir, plan)


def recover_record(path, base):
    """Apply every switch the record at `path` names (carray directories under `base`, or `base`
    itself for the key "."), then remove the record.  True when there was one.  The caller holds the
    writer lock of what the record belongs to."""
    sw = read(path)
    if sw is None:
        return False
    for key, plan in sorted(sw.items()):
        d = _key_dir(base, key)
        if os.path.isdir(d):        # a column removed since (by delcol) has nothing to switch
            apply_plan(d, plan)
    clear(path)
    return True


def recover_carray(rootdir):
    """A writer's open of the carray directory `rootdir`: complete its own record, and that of the
    table it is a column of, if that names it (the table's writer would otherwise apply it later, over
    what this writer writes)."""
    rootdir = os.path.abspath(rootdir)
    recover_record(carray_record_path(rootdir), rootdir)
    parent = os.path.dirname(rootdir)
    tpath = table_record_path(parent)
    if os.path.exists(tpath):
        sw = read(tpath)
        if sw is not None and os.path.basename(rootdir) in sw:
            recover_record(tpath, parent)


def plan_for(rootdir):
    """The switches a committed record names for the carray directory `rootdir` (a reader reads
    through them), None when no record names it.  A damaged record is ignored here (a writer reports
    it)."""
    rootdir = os.path.abspath(rootdir)
    for path, key in ((carray_record_path(rootdir), SELF),
                      (table_record_path(os.path.dirname(rootdir)), os.path.basename(rootdir))):
        try:
            sw = read(path)
        except (FormatError, StorageError):
            continue
        if sw is not None and key in sw:
            return sw[key]
    return None


def commit(path, switches, apply, announce=None):
    """Publish `switches` ({key: plan}, every new byte durable) in one step: write the record at
    `path`, call `announce()` (which bumps the commit records: readers load the state again, through
    the record, before a file changes), call `apply()` (which makes each switch, in memory too),
    remove the record.  An exception after the record is written is marked committed
    (`blzarr.storage.intent.committed`): the files hold the operation's result (the record completes
    it at the next writer's open)."""
    try:
        write(path, switches)
    except BaseException as e:
        if os.path.lexists(path):
            # interrupted after its rename (syncing the directory): take the record back, so that the
            # caller's undo may reuse what it names; if that fails too, it stands
            try:
                clear(path)
            except BaseException:
                _mark_committed(e)
        raise
    try:
        if announce is not None:
            announce()
        apply()
    except BaseException as e:
        _mark_committed(e)
        raise
    try:
        clear(path)
    except BaseException as e:
        # every switch is made but the record stands: the caller removes it before its next switch
        # (which the record, applied again at a writer's open, would otherwise undo)
        _mark_committed(e)
        e.blzarr_stale_record = path
        raise


def clear_stale(store):
    """Before a store switches anything: remove the record a failed removal left (`commit`)."""
    path = store._stale_record
    if path is not None:
        clear(path)
        store._stale_record = None


def commit_store(store, path, switches, apply, announce=None):
    """`commit` for a store's own record, remembering a record whose removal failed."""
    try:
        commit(path, switches, apply, announce)
    except BaseException as e:
        stale = getattr(e, "blzarr_stale_record", None)
        if stale is not None:
            store._stale_record = stale
        raise


def _mark_committed(e):
    try:
        e.blzarr_committed = True
    except AttributeError:
        pass
