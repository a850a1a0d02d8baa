"""Operations that change a whole directory in several steps, made atomic by an intent record.

A carray or ctable directory is replaced (convert --overwrite, salvage, reshape, a table column given
new values), added to a table (addcol) or removed from it (delcol) in three phases:

1. the new directory is written beside the target, under a hidden sibling name
   (``.<name>.blzarr-new-<hex>``), completely and durably, while the target stays as it was;
2. an *intent record* ``.<name>.blzarr-intent`` is written atomically (a synced temporary file
   renamed) beside the target: a small checksummed JSON that names the operation, the staged
   directory and its inode, and, for a table, the column list to write after it;
3. the staged directory is published by renames: on Linux ``renameat2(RENAME_EXCHANGE)`` swaps it with
   the target in one step (no moment without a target); elsewhere the target is renamed away and the
   staged directory renamed in, the record covering the moment between.  Then the old directory and
   the record are removed.

An interrupt before the record leaves the target untouched and a hidden leftover; one after it
leaves a record that `recover` completes (it always rolls forward: the record is written only when
the new state is complete).  Writers call `recover` before they change a directory (opening a table
for writing, starting one of these operations, verify and salvage), which also removes leftovers no
record names, so a retry of an interrupted operation starts from a clean state.  The record's
format is specified in docs/FORMAT.rst; bcolz ignores these hidden names.
"""

import errno
import os
import re
import secrets

from blzarr.storage import fileio
from blzarr.errors import FormatError, StorageError
from blzarr.storage.files import ROOTDIRS_FILE, atomic_write, checked_record, checksummed_json, held_tree, write_json
from blzarr.storage.locking import LockError, lock_dir

INTENT_SUFFIX = ".blzarr-intent"
_TAG = ".blzarr-"
VERSION = 1
# the errors renameat2(RENAME_EXCHANGE) gives where the platform or file system lacks it
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, getattr(errno, "EOPNOTSUPP", errno.EINVAL),
                getattr(errno, "ENOTSUP", errno.EINVAL)}


def _split(target):
    target = os.path.abspath(os.fspath(target)).rstrip(os.sep) or os.sep
    return os.path.dirname(target), os.path.basename(target)


def intent_path(target):
    """The intent record of directory `target`: ``<parent>/.<name>.blzarr-intent``."""
    parent, name = _split(target)
    return os.path.join(parent, f".{name}{INTENT_SUFFIX}")


def stage_path(target, kind="new"):
    """A fresh hidden sibling of `target` to build a new directory in (or move an old one to)."""
    parent, name = _split(target)
    return os.path.join(parent, f".{name}{_TAG}{kind}-{secrets.token_hex(6)}")


def _is_leftover_of(entry, name):
    return entry.startswith(f".{name}{_TAG}") and not entry.endswith(INTENT_SUFFIX)


_STAGE_RE = re.compile(r"^\..+\.blzarr-new-[0-9a-f]{12}$")


def inside_stage(path):
    """Whether `path` is inside a directory being built by `stage_path`'s naming (a table's column
    written with its table): it needs no stage of its own."""
    parent = os.path.abspath(os.fspath(path)).rstrip(os.sep)
    while True:
        head, base = os.path.split(parent)
        if _STAGE_RE.match(base):
            return True
        if head == parent or not base:
            return False
        parent = head


def identity(path):
    """(st_dev, st_ino) of `path` (not followed when a symbolic link), None when it is missing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino]


def encode(record):
    """The bytes of an intent record: ``{"intent": record, "crc32": n}`` with n the CRC-32 of the
    record's canonical JSON (sorted keys, no spaces)."""
    return checksummed_json("intent", record)


def read(target):
    """The intent record of `target` (a dict), None when there is none; FormatError naming the file
    when it is damaged."""
    path = intent_path(target)
    try:
        raw = fileio.read_file(path, 1 << 20)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"cannot read intent record '{path}': {e}") from None
    rec = checked_record(raw, path, "intent", "intent record")
    if rec is None:
        raise FormatError(f"intent record '{path}' is damaged (its checksum does not match): remove it "
                          f"after checking the directories beside it")
    if rec.get("version") != VERSION or rec.get("op") not in ("replace", "add", "remove"):
        raise FormatError(f"intent record '{path}' names an operation this blzarr does not know: {rec!r}")
    return rec


def _write(target, record):
    record = dict(record, version=VERSION)
    atomic_write(intent_path(target), encode(record), fsync=fileio.sync_enabled())
    return record


def _clear(target):
    try:
        fileio.unlink(intent_path(target))
    except FileNotFoundError:
        pass


def _sync(*dirs):
    if fileio.sync_enabled():
        for d in dict.fromkeys(dirs):
            fileio.fsync_dir(d)


def _swap_in(stage, target, trash):
    """Put directory `stage` at `target` (which exists): atomically where the platform can swap two
    names, else by two renames.  Returns where the old directory is now."""
    try:
        fileio.exchange(stage, target)
        return stage
    except OSError as e:
        if e.errno not in _NO_EXCHANGE:
            raise
    fileio.rename(target, trash)
    fileio.rename(stage, target)
    return trash


def _remove_tree(path):
    if os.path.isdir(path) and not os.path.islink(path):
        fileio.rmtree(path)
    elif os.path.lexists(path):
        fileio.unlink(path)


def _discard(path):
    """Remove what an operation left once it is complete: a failure leaves a hidden leftover, which
    the next `recover` removes, and is not the operation's failure."""
    try:
        _remove_tree(path)
    except OSError:
        pass


def _rootdirs_path(parent, rec):
    # the table's column list: beside its columns, or one level up for tables whose columns are in
    # root/data/ (BLZ tables of blzarr before 0.1)
    rel = rec.get("rootdirs_file", ROOTDIRS_FILE)
    if rel not in (ROOTDIRS_FILE, os.path.join(os.pardir, ROOTDIRS_FILE)):
        raise FormatError(f"intent record '{intent_path(os.path.join(parent, rec['target']))}' names "
                          f"the column list '{rel}'")
    return os.path.normpath(os.path.join(parent, rel))


def _finish(target, rec, keep=()):
    """Complete the operation `rec` names (every step may already be done)."""
    parent, name = _split(target)
    trash = os.path.join(parent, rec["trash"])
    ident = rec.get("ident")
    if rec["op"] in ("replace", "add"):
        stage = rec["stage"] if os.path.isabs(rec["stage"]) else os.path.join(parent, rec["stage"])
        if identity(target) != ident:
            if identity(stage) != ident:
                # the directory the record names is in neither place (removed by hand): nothing to
                # complete, and the table must not list a column that is not there
                _remove_leftovers(parent, name, keep)
                _clear(target)
                return
            if os.path.lexists(target):
                _swap_in(stage, target, trash)
            else:
                fileio.rename(stage, target)
            _sync(parent, os.path.dirname(stage))
        if rec.get("rootdirs") is not None:
            write_json(_rootdirs_path(parent, rec), rec["rootdirs"])
    else:   # remove: the table stops listing the column first, then the directory goes
        if rec.get("rootdirs") is not None:
            write_json(_rootdirs_path(parent, rec), rec["rootdirs"])
        if ident is not None and identity(target) == ident:
            fileio.rename(target, trash)
            _sync(parent)
    _remove_leftovers(parent, name, keep)
    _clear(target)


def _remove_leftovers(parent, name, keep):
    try:
        entries = fileio.listdir(parent)
    except OSError:
        return
    for entry in entries:
        if not _is_leftover_of(entry, name) or entry in keep:
            continue
        path = os.path.join(parent, entry)
        lock = None
        if os.path.isdir(path) and not os.path.islink(path):
            try:
                lock = lock_dir(path)       # a stage another process is still building stays
            except LockError:
                continue
            except OSError:
                pass
        try:
            _discard(path)
        finally:
            if lock is not None:
                lock.release()


def recover(target, keep=()):
    """Finish the operation an intent record of `target` names, then remove the hidden leftovers of
    interrupted operations on it (except the entries named in `keep`).  True when there was
    something to do.  The caller holds the writer lock of what `target` belongs to."""
    parent, name = _split(target)
    rec = read(target)
    if rec is not None:
        _finish(target, rec, keep)
        return True
    try:
        entries = fileio.listdir(parent)
    except OSError:
        return False
    if any(_is_leftover_of(e, name) and e not in keep for e in entries):
        _remove_leftovers(parent, name, keep)
        return True
    return False


def pending(parent):
    """The targets in directory `parent` that have an intent record or a hidden leftover (names)."""
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    out = []
    for e in entries:
        if not e.startswith(".") or _TAG not in e:
            continue
        name = e[1:-len(INTENT_SUFFIX)] if e.endswith(INTENT_SUFFIX) else e[1:].rsplit(_TAG, 1)[0]
        if name and name not in out:
            out.append(name)
    return out


def recover_all(parent):
    """`recover` every target of `parent` that has an intent record or leftovers; True when one had."""
    done = False
    for name in pending(parent):
        recover(os.path.join(parent, name))
        done = True
    return done


def committed(e):
    """Whether the exception `e`, raised by `publish` or `remove`, came after the operation took
    effect (its record was written, or its directory renamed into place): the caller then keeps its
    stage (the next writer completes the operation) and takes the new state as the current one."""
    return getattr(e, "blzarr_committed", False)


def _mark_committed(e):
    try:
        e.blzarr_committed = True
    except AttributeError:
        pass


def _rel_rootdirs(parent, rootdirs_file):
    if rootdirs_file is None:
        return ROOTDIRS_FILE
    return os.path.relpath(os.path.abspath(rootdirs_file), parent)


def publish(stage, target, rootdirs=None, op=None, rootdirs_file=None):
    """Put the complete, durable directory `stage` (a hidden sibling from `stage_path`, or, to move a
    directory into a table, any directory on the same file system) at `target`, replacing what is
    there, in one step for readers; `rootdirs` (the JSON of the parent table's ``__rootdirs__``) is
    written after.  The caller holds the writer lock of the target (or of its table).

    A lone rename (nothing at the target) or a swap of the two names needs no record: either is one
    step, and an interrupt leaves a hidden leftover at most; the two renames of the fallback, a move
    from elsewhere and a change of the table's column list need the record.  An exception after the
    operation took effect is marked (`committed`)."""
    parent, name = _split(target)
    recover(target, keep=(os.path.basename(stage),))
    staged_beside = os.path.dirname(os.path.abspath(stage)) == parent
    done = False
    rec = None
    try:
        if rootdirs is None and staged_beside:
            if not os.path.lexists(target):
                fileio.rename(stage, target)
                done = True
                _sync(parent)
                return
            try:
                fileio.exchange(stage, target)
            except OSError as e:
                if e.errno not in _NO_EXCHANGE:
                    raise
            else:
                done = True
                _sync(parent)
                _discard(stage)             # the old directory, under the stage's name now
                return
        if op is None:
            op = "replace" if os.path.lexists(target) else "add"
        _sync(parent, os.path.dirname(os.path.abspath(stage)))     # the staged directory's name is durable
        rec = _write(target, {"op": op, "target": name,
                              "stage": os.path.basename(stage) if staged_beside else os.path.abspath(stage),
                              "ident": identity(stage), "trash": os.path.basename(stage_path(target, "old")),
                              "rootdirs": rootdirs, "rootdirs_file": _rel_rootdirs(parent, rootdirs_file)})
        done = True
        _finish(target, rec)
    except BaseException as e:
        if done:
            _complete_quietly(target, rec)
            _mark_committed(e)
        raise


def _complete_quietly(target, rec):
    """Try once more to complete `rec` after a failure (a full disk may still refuse: the next writer
    completes it then)."""
    if rec is None:
        return
    try:
        _finish(target, rec)
    except BaseException:
        pass


def build_then_publish(target, build, held=False):
    """`build(path)` writes a complete carray or ctable at `path` and returns it; it is called with a
    hidden sibling of `target`, and what it wrote is then published at `target` (replacing what is
    there, under the target's writer lock): an interrupt leaves the target as it was, or complete.
    `held`: see `stage_then_publish`.  Returns nothing: the caller reopens `target`."""
    final = os.path.abspath(os.fspath(target))
    if inside_stage(final):
        obj = build(os.fspath(target))      # a part of something being built: no stage of its own
        obj.close()
        return
    lock = lock_dir(final) if os.path.isdir(final) and not os.path.islink(final) else None
    try:
        stage_then_publish(final, build, held=held)
    finally:
        if lock is not None:
            lock.release()


def stage_then_publish(target, build, if_committed=None, held=False):
    """`build(stage)` writes a complete carray or ctable at `stage`, a hidden sibling of `target`,
    and returns it; it is closed and published at `target`.  On an error the stage is abandoned;
    when the error came after the commit point (`committed`), ``if_committed(e)`` runs first, as
    `target` holds the new object already.

    `held` (a carray built by `build`, whose flushes promise nothing before the stage is published):
    the stage is a `files.HeldTree` while it is built, so its files are written in place and synced
    once, together, before the rename (the parent is left to the sync that follows the rename)."""
    stage = stage_path(target)
    try:
        tree = held_tree(stage) if held else None
        try:
            obj = build(stage)
            obj.close()
            del obj
            if tree is not None:
                tree.finish(parent=False)
        finally:
            if tree is not None:
                tree.close()
        publish(stage, target)
    except BaseException as e:
        abandon(stage, e)
        if if_committed is not None and committed(e):
            if_committed(e)
        raise


def remove(target, rootdirs=None, rootdirs_file=None):
    """Remove directory `target` (a table's column: `rootdirs`, the table's new ``__rootdirs__``, is
    written first), as one step for readers and completed by `recover` when interrupted."""
    parent, name = _split(target)
    recover(target)
    rec = _write(target, {"op": "remove", "target": name, "stage": None, "ident": identity(target),
                          "trash": os.path.basename(stage_path(target, "old")), "rootdirs": rootdirs,
                          "rootdirs_file": _rel_rootdirs(parent, rootdirs_file)})
    try:
        _finish(target, rec)
    except BaseException as e:
        _complete_quietly(target, rec)
        _mark_committed(e)
        raise


def abandon(stage, e):
    """After the exception `e`: remove the stage of an operation that did not take effect."""
    if not committed(e) and os.path.lexists(stage):
        fileio.rmtree(stage, ignore_errors=True)


def same_or_nested(a, b):
    """Whether paths `a` and `b` are the same directory, or one holds the other (symbolic links,
    '..' and trailing slashes resolved)."""
    ra, rb = os.path.realpath(os.fspath(a)), os.path.realpath(os.fspath(b))
    if ra == rb:
        return True
    try:
        common = os.path.commonpath([ra, rb])
    except ValueError:
        return False
    return common in (ra, rb)
