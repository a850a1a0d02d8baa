"""Replacing a whole dataset on object storage, before-or-after: build aside, switch, roll forward.

Object storage has no rename, so a dataset written with mode 'w' over an existing one (a constructor,
``copy``, ``fromarrow``, ``salvage``, ``convert --overwrite``) cannot be moved into place.  Instead:

1. the new dataset is written whole under a fresh prefix inside the old one's,
   ``<prefix>/.blzarr-new-<12 hex digits>/`` (the *stage*), as a creation at a new URL; until step 2
   nothing names it, and readers see the old dataset;
2. the old dataset's *commit object* (``meta/storage`` for a carray, ``__rootdirs__`` for a ctable:
   the object every open reads first) is put again as a *redirect* naming the stage and the kind of
   the dataset in it (the switch: from then on readers open the stage, the state after), only over
   the version of the commit object seen before step 1 (a conditional put): another writer that
   switched or journaled meanwhile makes this one fail with `ConcurrentWriterError`;
3. the redirect is rolled forward: the old dataset's other objects the new one lacks are deleted, the
   stage's objects are copied on the server over the prefix, the new dataset's own commit object
   last (which ends the redirect when both are of one kind; otherwise the redirect is deleted after
   it), and the stage removed.

Each step of the roll-forward can be repeated, so a writer's open (mode 'a') that meets a redirect
finishes it, and so does the next replacement.  A stage no redirect names (a build interrupted
before step 2, or another writer's build in progress) is left alone until the roll-forward of the
next switch removes it with the old dataset's other objects.  Readers of datasets never replaced pay nothing:
the redirect sits in an object their open reads anyway.  The format is in docs/FORMAT.rst.
"""

import contextlib
import json
import re
import secrets
import threading

from blzarr.errors import ConcurrentWriterError, FormatError, MissingError, StorageError
from blzarr.storage.files import META_DIR, ROOTDIRS_FILE, STORAGE_FILE, detect_store, parse_json

STAGE_PREFIX = ".blzarr-new-"
VERSION = 1
COMMIT_KEYS = {"carray": f"{META_DIR}/{STORAGE_FILE}", "ctable": ROOTDIRS_FILE}
# the names `begin` and `journaled` give stages: a redirect naming anything else is not one of ours
_STAGE_NAME = re.compile(re.escape(STAGE_PREFIX) + "[0-9a-f]{12}")


class OtherKind(StorageError):
    """An opener of one kind met a dataset replaced by one of the other kind: `url` holds a `kind`."""

    def __init__(self, message, url, kind):
        super().__init__(message)
        self.url, self.kind = url, kind


class Moved(Exception):
    """A reader's open met a redirect: the dataset to read is the one of `store` (the stage)."""

    def __init__(self, store):
        super().__init__(store.root)
        self.store = store


def record_of(obj, where):
    """The redirect of a parsed commit object `obj` (None when it is none); FormatError naming `where`
    when it is malformed."""
    r = obj.get("replaced") if isinstance(obj, dict) else None
    if r is None:
        return None
    if not isinstance(r, dict) or r.get("version") != VERSION or not isinstance(r.get("by"), str) \
            or not _STAGE_NAME.fullmatch(r["by"]) or r.get("kind") not in COMMIT_KEYS:
        raise FormatError(f"'{where}': its replacement record is malformed: {r!r}")
    return r


def redirect_bytes(stage, kind):
    return json.dumps({"replaced": {"version": VERSION, "by": stage, "kind": kind}}).encode() + b"\n"


def follow(store, rec, kind, mode):
    """What an opener of `kind` (mode `mode`) does on meeting the redirect `rec` in the commit object
    of `store`: a reader raises `Moved` with the stage's store (OtherKind when the stage holds the
    other kind); a writer rolls the replacement forward and returns (OtherKind when the dataset is
    now of the other kind), after which it opens the prefix again.  When another writer completed
    the replacement meanwhile (the stage is gone, the redirect too) it returns as well."""
    if not _complete(store, rec, kind):
        if rec["kind"] != kind:
            raise OtherKind(f"'{store.root}' now holds a {rec['kind']} (it was replaced): open it with "
                            "blzarr.open", store.root, rec["kind"])
        return
    if mode == "r":
        stage = store.child(rec["by"])
        if rec["kind"] != kind:
            raise OtherKind(f"'{store.root}' is being replaced by a {rec['kind']}, at '{stage.root}' "
                            f"until the replacement completes (open it with blzarr.open)", stage.root, rec["kind"])
        raise Moved(stage)
    roll_forward(store, rec, kind)
    if rec["kind"] != kind:
        raise OtherKind(f"'{store.root}' now holds a {rec['kind']} (it was replaced): open it with "
                        "blzarr.open", store.root, rec["kind"])


def _complete(store, rec, old_kind):
    """Whether the stage the redirect `rec` (in the commit object of an `old_kind` at `store`) names
    holds its dataset's commit object.  False when it does not because the replacement was completed
    meanwhile (the commit object is no longer that redirect); FormatError naming both URLs when the
    redirect names a stage that is gone."""
    commit = COMMIT_KEYS[rec["kind"]]
    if store.child(rec["by"]).exists(commit):
        return True
    if _pending(store, old_kind) != rec:
        return False
    raise FormatError(f"'{store.where(COMMIT_KEYS[old_kind])}' names the replacement '{store.where(rec['by'])}', "
                      f"which holds no {rec['kind']} ('{commit}' is missing)")


def roll_forward(store, rec, old_kind, keep_stages=False):
    """Finish the replacement `rec` names, whose redirect is in the commit object of an `old_kind`
    (`keep_stages`: other stages are left alone, a journal's roll-back that did not switch)."""
    stage = rec["by"]
    redirect, commit = COMMIT_KEYS[old_kind], COMMIT_KEYS[rec["kind"]]
    new = {k[len(stage) + 1:] for k in store.find(stage)}
    if commit not in new:
        raise FormatError(f"'{store.where(redirect)}' names the replacement '{store.where(stage)}', which "
                          f"holds no {rec['kind']} ('{commit}' is missing)")
    for key in store.find(""):
        if key != redirect and not key.startswith(stage + "/") and key not in new \
                and not (keep_stages and key.startswith(STAGE_PREFIX)):
            store.delete(key)
    for rel in sorted(new - {commit}):
        store.copy(f"{stage}/{rel}", rel)
    store.copy(f"{stage}/{commit}", commit)
    if redirect != commit:
        store.delete(redirect)
    store.child(stage).remove_all()


def _pending(store, kind):
    """The redirect in the commit object of the `kind` at `store` (None when there is none)."""
    key = COMMIT_KEYS[kind]
    try:
        obj = parse_json(store.get(key), store.where(key), "commit object")
    except (FormatError, MissingError):
        return None         # damaged or gone: no redirect (the replacement removes it like any old object)
    return record_of(obj, store.where(key))


def resolve(store, kind):
    """(store, kind, redirect) of what readers read at `store`, which holds a `kind`: the stage and
    the redirect of a replacement in progress, else (store, kind, None).  One GET."""
    rec = _pending(store, kind)
    if rec is None:
        return store, kind, None
    return store.child(rec["by"]), rec["kind"], rec


def begin(store, kind=None):
    """Before a new dataset is written at the prefix of `store`: (None, None) when no dataset is stored
    there (it is written in place, as any creation), else (stage name, kind of the dataset there),
    a replacement in progress there finished first.  Stages no redirect names are left alone: one
    may be another writer's build in progress (the roll-forward of the next switch removes them)."""
    kind = kind or detect_store(store)
    if kind is None:
        return None, None
    try:
        rec = _pending(store, kind)
        complete = rec is not None and _complete(store, rec, kind)
    except FormatError:
        # a malformed redirect, or one naming a stage that is gone: damage, which the replacement
        # removes as it removes the old dataset's other objects
        rec = complete = None
    if complete:
        roll_forward(store, rec, kind)
        kind = rec["kind"]
    elif rec is not None:           # completed meanwhile by another writer
        kind = detect_store(store) or kind
    return STAGE_PREFIX + secrets.token_hex(6), kind


_UNSEEN = object()


def _refused(store, old_kind):
    return ConcurrentWriterError(
        f"'{store.root}' was replaced or changed by another writer while this one built its replacement "
        f"('{store.where(COMMIT_KEYS[old_kind])}' is not what it was): object storage has no lock, write a "
        "dataset from one writer at a time")


def publish(store, stage, old_kind, seen=_UNSEEN):
    """Switch the prefix of `store` (holding an `old_kind`) to the complete dataset in `stage`, and
    roll forward.  `seen`: the version (`ByteStore.version`) of the old commit object when the build
    began; the switch happens only over that version (a conditional put where the store has them),
    else `ConcurrentWriterError`: another writer switched meanwhile, and its roll-forward removed
    this stage, whole or in part."""
    key = COMMIT_KEYS[old_kind]
    if seen is not _UNSEEN and store.version(key) != seen:
        raise _refused(store, old_kind)
    new_kind = detect_store(store.child(stage))
    if new_kind is None or not _columns_complete(store.child(stage), new_kind):
        raise StorageError(f"'{store.where(stage)}' holds no complete carray or ctable to put in place")
    rec = {"version": VERSION, "by": stage, "kind": new_kind}
    cond = {}
    if seen is not _UNSEEN and isinstance(seen, str) and not seen.startswith("size:"):
        cond = {"if_match": seen}
    try:
        store.put(key, redirect_bytes(stage, new_kind), **cond)
    except ConcurrentWriterError:
        raise _refused(store, old_kind) from None
    roll_forward(store, rec, old_kind)


def _columns_complete(store, kind):
    """Whether every column a table's ``__rootdirs__`` in `store` names holds its meta/storage (a
    carray's first object: a column another writer's removal reached lacks it)."""
    if kind != "ctable":
        return True
    try:
        names = parse_json(store.get(ROOTDIRS_FILE), store.where(ROOTDIRS_FILE), "ctable column list")["names"]
        return all(store.exists(f"{n}/{COMMIT_KEYS['carray']}") for n in names)
    except (FormatError, MissingError, KeyError, TypeError):
        return False


def abandon(store, stage):
    """Remove a stage whose build failed (a leftover is removed by the next replacement)."""
    with contextlib.suppress(Exception):
        store.child(stage).remove_all()


# prefixes whose dataset is being created where nothing was stored: the constructors inside need not
# look for a dataset to replace there (a table's columns, the dataset built in a stage)
_fresh = threading.local()


@contextlib.contextmanager
def fresh(url):
    urls = _fresh.__dict__.setdefault("urls", [])
    urls.append(url.rstrip("/") + "/")
    try:
        yield
    finally:
        urls.pop()


def is_fresh(url):
    url = url.rstrip("/") + "/"
    return any(url.startswith(u) for u in getattr(_fresh, "urls", ()))


def build(url, store, make, reopen, kind=None):
    """Make a dataset at `url` (whose byte store is `store`) with ``make(target_url)``, atomically
    where one is stored there already (of `kind`, when the caller knows it): in a stage, switched in
    once complete.  Returns what `make` returned when nothing was there, else ``reopen()`` after the
    switch."""
    stage, old_kind = begin(store, kind)
    if stage is None:
        with fresh(url):
            return make(url)
    seen = store.version(COMMIT_KEYS[old_kind])     # what this replacement replaces
    target = f"{store.root}/{stage}"
    try:
        with fresh(target):
            out = make(target)
            close = getattr(out, "close", None)
            if callable(close):
                close()
            del out
    except BaseException:
        abandon(store, stage)
        raise
    try:
        publish(store, stage, old_kind, seen)
    except ConcurrentWriterError:
        abandon(store, stage)       # refused before the switch: nothing names the stage
        raise
    return reopen()


@contextlib.contextmanager
def journaled(store, rolled_back):
    """Run the block, which rewrites objects of the carray at `store` in place (and flushes), under a
    rollback journal made of the same pieces: every object of the carray is copied on the server to
    a stage, ``meta/storage`` is put as a redirect to that copy (readers read the state before from
    it; a writer's open rolls it "forward", which puts the old objects back), the block runs, and
    ``meta/storage`` is put back as it was (the commit).  On an exception in the block the copy is
    put back at once, then `rolled_back(ok)` is called (ok False: that failed too; the next writer's
    open does it)."""
    # (stages no redirect names are left alone: one may be a replacement's build in progress)
    key = COMMIT_KEYS["carray"]
    seen = store.version(key)
    original = store.get(key)
    if record_of(parse_json(original, store.where(key), "meta/storage"), store.where(key)) is not None:
        raise ConcurrentWriterError(f"'{store.root}' is being replaced by another writer: object storage "
                                    "has no lock, write a dataset from one writer at a time")
    # the switch only over the meta/storage read: a replacement switched meanwhile refuses it
    cond = {"if_match": seen} if isinstance(seen, str) and not seen.startswith("size:") else {}
    stage = STAGE_PREFIX + secrets.token_hex(6)
    rec = {"version": VERSION, "by": stage, "kind": "carray"}
    try:
        for k in store.find(""):
            if not k.startswith(STAGE_PREFIX):      # (another writer's build, or a leftover)
                store.copy(k, f"{stage}/{k}")
    except BaseException:
        abandon(store, stage)
        raise
    try:
        store.put(key, redirect_bytes(stage, "carray"), **cond)
    except ConcurrentWriterError:
        abandon(store, stage)       # refused, so not switched: meta/storage is another writer's
        raise
    except BaseException:
        # (a put that failed may still have landed: meta/storage is put back before the copy goes)
        with contextlib.suppress(BaseException):
            store.put(key, original)
            abandon(store, stage)
        raise
    try:
        with fresh(store.root):
            yield
        store.put(key, original)
    except BaseException:
        try:
            roll_forward(store, rec, "carray", keep_stages=True)
        except BaseException:
            rolled_back(False)
            raise
        rolled_back(True)
        raise
    abandon(store, stage)       # (a leftover is removed by the next replacement's roll-forward)
