"""User attributes: a JSON-only mapping, persisted in ``root/__attrs__`` for on-disk objects.

As in bcolz, ``blzarr.attrs`` is this module and `attrs` its class: ``blzarr.attrs.attrs(rootdir,
mode)`` reads (and writes) the attributes of a carray or ctable directory without opening its data.
"""

import json
import os

from blzarr.errors import FormatError, ReadOnlyError
from blzarr.storage.locking import first_write
from blzarr.storage.files import ATTRIBUTES_FILE, ATTRS_FILE, META_DIR, STORAGE_FILE, ObjectPath, read_json, write_json

# the name of the attributes file in the bcolz layout (bcolz.attrs.ATTRSDIR)
ATTRSDIR = ATTRS_FILE


def attrs_path(rootdir):
    """Where the attributes of the carray or ctable directory `rootdir` are kept, in its layout."""
    rootdir = os.fspath(rootdir)
    storage = os.path.join(rootdir, META_DIR, STORAGE_FILE)
    if os.path.isfile(storage):
        meta = read_json(storage, "meta/storage")
        if isinstance(meta, dict) and meta.get("format") == "blz":
            return os.path.join(rootdir, META_DIR, ATTRIBUTES_FILE)
    return os.path.join(rootdir, ATTRS_FILE)


def _absent_is_empty(path):
    """Whether a new directory may leave its attributes file unwritten while it has none: the BLZ
    layout's local meta/attributes, which every reader takes as no attributes when it is missing
    (bcolz's own __attrs__ is always written: the real bcolz fails to open a directory without it)."""
    return not isinstance(path, ObjectPath) and os.path.basename(os.fspath(path)) == ATTRIBUTES_FILE


class attrs:
    """The user attributes of a carray or ctable (``obj.attrs``): a small dict-like store.

    Names are strings and values anything JSON can hold (numbers, strings, booleans, None, lists
    and dicts of them).  For an on-disk object every change is written at once, as a JSON file
    (``meta/attributes`` in the BLZ layout, ``__attrs__`` in the bcolz one), so attributes survive
    reopening; an object opened with mode 'r' refuses changes.

    Iterating gives ``(name, value)`` pairs, as in bcolz; `getall` gives a copy as a dict and
    ``.attrs`` the dict itself (``"unit" in table.attrs.attrs``).  ``attrs(rootdir, mode)`` opens
    the attributes of a directory on their own, in either layout.

    Raises
    ------
    TypeError
        A value is not JSON-serializable.
    blzarr.ReadOnlyError
        A change to the attributes of an object opened with mode 'r'.

    Examples
    --------
    >>> import numpy as np, blzarr, shutil
    >>> a = blzarr.carray(np.arange(3), rootdir="attrs_example", mode="w")
    >>> a.attrs["unit"] = "m"
    >>> a.attrs["scale"] = 0.5
    >>> a.attrs
    unit : 'm'
    scale : 0.5
    >>> b = blzarr.open("attrs_example", mode="r")
    >>> b.attrs.getall(), "unit" in b.attrs, list(b.attrs)
    ({'unit': 'm', 'scale': 0.5}, True, [('unit', 'm'), ('scale', 0.5)])
    >>> a.attrs["when"] = np.datetime64("2024-01-01")
    Traceback (most recent call last):
        ...
    TypeError: attribute 'when': only JSON-serializable values can be stored (...)
    >>> blzarr.attrs.attrs("attrs_example", "r").attrs
    {'unit': 'm', 'scale': 0.5}
    >>> shutil.rmtree("attrs_example")
    """

    def __init__(self, rootdir=None, mode="a", _new=False, path=None):
        self.rootdir = rootdir
        self.mode = mode
        if path is None and rootdir is not None and not _new:
            if not os.path.isdir(rootdir):
                raise FileNotFoundError(f"cannot read the attributes of '{rootdir}': no such directory")
            path = attrs_path(rootdir)
        self._path = path
        self._data = {}
        if path is not None and not _new:
            absent = {}
            # one read (one GET), no existence probe first: a missing file is no attributes
            data = read_json(path, "attributes", missing=absent)
            if data is not absent and not isinstance(data, dict):
                raise FormatError(f"attributes file '{path}' does not hold a JSON object")
            self._data = data
        elif path is not None and _new and mode != "r" and not _absent_is_empty(path):
            self._save()

    def _save(self):
        if self._path is not None:
            write_json(self._path, self._data)

    def moved_to(self, rootdir, path):
        """The directory was renamed to `rootdir` (a new one published): its file is `path` now (the
        attributes held are what was written there)."""
        self.rootdir = rootdir
        self._path = path

    def reload(self):
        """Read the attributes again from the file (another process may have changed them)."""
        if self._path is not None and not isinstance(self._path, ObjectPath) and os.path.exists(self._path):
            data = read_json(self._path, "attributes")
            if not isinstance(data, dict):
                raise FormatError(f"attributes file '{self._path}' does not hold a JSON object")
            self._data = data

    def _check_writable(self):
        if self.mode == "r":
            first_write(self)       # an object opened with mode 'a': its first write takes the lock
        if self.mode == "r":
            why = getattr(self, "_why_readonly", None)
            raise ReadOnlyError("cannot modify attributes: " + (why or "the object was opened with mode 'r'"))

    @property
    def attrs(self):
        """The attributes as a dict (bcolz's ``attrs.attrs``); change them through this object."""
        return self._data

    def getall(self):
        """A copy of all the attributes, as a dict."""
        return dict(self._data)

    def __getitem__(self, name):
        return self._data[name]

    def __setitem__(self, name, value):
        self._check_writable()
        try:
            json.dumps({name: value})
        except (TypeError, ValueError) as e:
            raise TypeError(f"attribute {name!r}: only JSON-serializable values can be stored ({e})") from None
        self._data[name] = value
        self._save()

    def __delitem__(self, name):
        self._check_writable()
        del self._data[name]
        self._save()

    def __contains__(self, name):
        return name in self._data

    def __iter__(self):
        return iter(list(self._data.items()))

    def __len__(self):
        return len(self._data)

    def __eq__(self, other):
        if isinstance(other, attrs):
            return self._data == other._data
        return self._data == other

    def __repr__(self):
        if not self._data:
            return "*no attrs*"
        return "\n".join(f"{k} : {v!r}" for k, v in self._data.items())

    __str__ = __repr__
