"""How a layout changes a file in place, by what its byte store can do (`ByteStore.in_place_writes`).

A layout changes a superchunk file with positioned writes on a handle (`ByteStore.open`).  A local
directory can do that to the file itself: `InPlace` (every call here is a no-op, and `files` is the
byte store).  Object storage cannot (an object is written whole): `Spool` copies a file that is to
change into a local scratch directory (downloaded whole the first time), the layout changes it there
with the same code, and uploads it whole when it publishes it (`upload`).

`writes_for(store)` picks one.  Keys are the byte store's; `files` is the store whose handles the
layout writes through.
"""

import os
import secrets
import tempfile

from blzarr.storage.bytestore import LocalStore
from blzarr.storage.files import DATA_DIR


class InPlace:
    """Files changed where they are (a local directory)."""

    def __init__(self, store):
        self.files = store

    def local(self, key):
        """Whether file `key` is at hand in `files` (here: always)."""
        return True

    def take(self, key):
        """Make `key` writable through `files`; True when it was copied there just now."""
        return False

    def new(self, key):
        """`key` is about to be created in `files`."""

    def changed(self, key):
        """`key` was written to."""

    def dirty(self):
        """Keys changed and not published yet, sorted."""
        return []

    def held(self):
        """Keys held in `files` that could be released once published, sorted."""
        return []

    def upload(self, key, put):
        """Publish `key` with `put(key, data)` (returns its size)."""

    def release(self, key):
        """Drop the local copy of `key` (published)."""

    def remove(self, key):
        """Remove file `key` (OSError when it cannot)."""
        self.files.delete(key, missing_ok=False)

    def close(self):
        """Release what the strategy holds."""


class Spool(InPlace):
    """Files changed in a local spool and uploaded whole (object storage).  The spool needs no syncs:
    the upload publishes."""

    def __init__(self, store):
        self.store = store
        # the directory is made (private, by mkdtemp) at the first write; until then the root names
        # nothing, so that a handle asked for too early is a missing file, as it should be
        self.files = LocalStore(os.path.join(tempfile.gettempdir(), f"blzarr-spool-unmade-{secrets.token_hex(8)}"),
                                durable=False)
        self._made = False
        self._held = set()              # keys with a local copy (being written)
        self._dirty = set()             # local copies not uploaded since they changed

    def _ready(self):
        if not self._made:
            self.files.root = tempfile.mkdtemp(prefix="blzarr-spool-")
            self.files.makedirs(DATA_DIR)
            self._made = True

    def local(self, key):
        return key in self._held

    def take(self, key):
        if key in self._held:
            return False
        data = self.store.get(key)
        self._ready()
        self.files.put_atomic(key, data, parents=False)
        self._held.add(key)
        return True

    def new(self, key):
        self._ready()
        self._held.add(key)

    def changed(self, key):
        self._dirty.add(key)

    def dirty(self):
        return sorted(self._dirty)

    def held(self):
        return sorted(self._held)

    def upload(self, key, put):
        data = self.files.get(key)
        put(key, data)
        self._dirty.discard(key)
        return len(data)

    def release(self, key):
        self._held.discard(key)
        self.files.delete(key)

    def remove(self, key):
        if key in self._held:
            self.release(key)
        self._dirty.discard(key)
        self.store.delete(key)

    def close(self):
        if self._made:
            self.files.remove_all()


def writes_for(store):
    """The write strategy of `store`: in place where it can write part of a file, else a spool."""
    return InPlace(store) if store.in_place_writes else Spool(store)
