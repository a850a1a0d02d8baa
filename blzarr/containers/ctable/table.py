"""`ctable`: a columnar table, one carray per column, with bcolz's ctable API.

On disk a ctable is a directory holding

    root/__rootdirs__   JSON ``{"names": [...]}``: the column names, in order
    root/__attrs__      JSON: user attributes
    root/<name>/        one carray directory per column, in either layout (where bcolz 1.x puts
                        them, so ``carray(rootdir=os.path.join(root, name))`` opens one column)
    root/data/<name>/   the columns of BLZ ctables written before blzarr 0.1 (still opened)
  Queries (`where`, `whereblocks`, `fetchwhere`, a string key)
evaluate the expression block by block (`blzarr.chunked_eval.evaluate_blocks`) and read only the rows
of each block they need, so no column is ever decompressed whole to answer one.
"""

import contextlib
import os
import secrets
import stat
import sys
import warnings
import weakref

import numpy as np

from blzarr.storage import fileio
from blzarr.containers import indexing as ix
from blzarr.runtime import integrations
from blzarr.runtime import forksafe
from blzarr.storage.attrs import attrs as _attrs
from blzarr.containers.carray.array import carray, creation_left_to_caller
from blzarr.containers.common import Container
from blzarr.containers.carray.read import pin_version, read_one_version, unpin_version
from blzarr.containers.carray.version import fresh_call
from blzarr.errors import ConcurrentWriterError, ExistsError, FormatError, MissingError, StorageError, storage_op
from blzarr.storage import intent, readpins, replace, rewrite, tablejournal
from blzarr.storage.blz import sizes as sizes_record
from blzarr.storage.locking import FirstWrite, LockError, lock_dir
from blzarr.query.rules import DEFAULT_BLEN
from blzarr.runtime.params import cparams as _cparams, defaults
from blzarr.storage.files import (ATTRS_FILE, CREATING_FILE, META_DIR, ROOTDIRS_FILE, STORAGE_FILE, HeldTree,
                                   ObjectPath, creation_marker, held_tree, new_tree_of, parse_json, read_json,
                                   write_json)
from blzarr.storage.bytestore import is_url, join, local_path, occupied, open_bytestore, overlaps
# the parts of ctable, one module each (the moved names stay importable from here)
from blzarr.containers.ctable.read import NROW, CtableBase, CtableReads, _split_outcols  # noqa: F401
from blzarr.containers.ctable.write import _CARRAY_KW, CtableWrites, check_name
from blzarr.containers.ctable.query import CtableQueries
from blzarr.containers.ctable.groupby import CtableGroupby

from blzarr.containers.arrayprint import array2string  # noqa: E402,F401

ROOTDIRS = ROOTDIRS_FILE
attrs = _attrs

# the column attribute naming a column's validity column (docs/FORMAT.rst; blzarr.io.colmeta)
VALIDITY_ATTR = "blzarr:validity"

# rows per block when a query has no column to take a chunk length from

# ------------------------------------------------------------------------------------------- cols
class cols:
    """The columns of a ctable (``t.cols``): a mapping of names to carrays, in column order.

    ``t.cols['a']`` (or ``t.cols[0]``) is the carray of column 'a' itself, not a copy.  Assigning
    ``t.cols['a'] = data`` replaces that column's values (same length; converted to its dtype), or
    adds a new last column when 'a' is not one.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> t = blzarr.ctable([np.arange(3), np.zeros(3)], names=["a", "b"])
    >>> t.cols.keys(), type(t.cols["a"]).__name__, t.cols[1].dtype
    (['a', 'b'], 'carray', dtype('float64'))
    >>> t.cols["b"] = [0.5, 1.5, 2.5]
    >>> t.cols["c"] = np.arange(3) * 2
    >>> t[2].tolist()
    (2, 2.5, 4)
    """

    def __init__(self, table):
        self._table = table
        self.names = []
        self._cols = {}

    def __getitem__(self, name):
        if isinstance(name, (int, np.integer)):
            name = self.names[name]
        try:
            return self._cols[name]
        except KeyError:
            raise KeyError(f"no column named {name!r} (columns: {self.names})") from None

    def __setitem__(self, name, data):
        """Replace the data of column `name` (same dtype and cparams), or add a new column at the end."""
        if name in self._cols:
            self._table._replace_col(name, data)
        else:
            self._table.addcol(data, name=name)

    def __contains__(self, name):
        return name in self._cols

    def __iter__(self):
        return iter(list(self.names))

    def __len__(self):
        return len(self.names)

    def keys(self):
        return list(self.names)

    def values(self):
        return [self._cols[n] for n in self.names]

    def items(self):
        return [(n, self._cols[n]) for n in self.names]

    def __str__(self):
        return "".join(f"{n} : {self._cols[n]}\n" for n in self.names)

    def __repr__(self):
        return "".join(f"{n} : {self._cols[n]!r}\n" for n in self.names)


# ------------------------------------------------------------------------------------------- ctable
def _has_pending(root):
    """Whether an interrupted column operation left an intent record or a leftover in the table."""
    return bool(intent.pending(root))


def _committed_rows(lengths, last_prev=None):
    """(rows of the table, columns shorter than it) for `lengths`, {column: rows} in column order;
    `last_prev`: when the last column's meta/sizes is a one-barrier record of another boot whose
    chunks verify, the length of its "prev" (`_record_prev`), else None.

    The last column's length is the table's: appends and growing resizes flush the columns in order,
    so the last one commits them; trims and shrinking resizes change it first.  A column longer than
    the last holds rows not (or no longer) committed; one shorter is damage.  One exception: a flush
    that commits every column in one barrier (each meta/sizes a one-barrier record) may lose, to a
    power loss, another column's meta/sizes and keep the last one's; the last column is then one
    flush ahead of a column that holds its record's "prev" length.  When the shortest column holds
    exactly that, the table's length is that: the flush that wrote the record never committed
    (within one boot a kill cannot leave that state: the last column's record is written last)."""
    if not lengths:
        return 0, []
    n = list(lengths.values())[-1]
    if last_prev is not None and last_prev < n and min(lengths.values()) == last_prev:
        n = last_prev
    return n, [k for k, v in lengths.items() if v < n]


def _record_prev(col):
    """For `_committed_rows`: the "prev" length of column `col`'s meta/sizes when it is a one-barrier
    record of another boot whose chunks verify (BLZ), else None."""
    d = getattr(col.__dict__.get("_chunks"), "layoutdir", None)
    return getattr(d, "record_prev", None)


def _column_realpath(d, name, real_root):
    """What `os.path.realpath` gives for the column directory `d` (``root/name``, `real_root` the
    table root's realpath), or None when `d` is not a directory.  A column directory that is no
    symbolic link resolves to ``real_root/name`` (`name` is one plain path component, `check_name`):
    one lstat instead of one per component of the path."""
    try:
        st = os.lstat(d)
    except (OSError, ValueError):
        return None         # (as os.path.isdir: any failure is "not a directory")
    if stat.S_ISDIR(st.st_mode):
        return os.path.join(real_root, name)
    if not stat.S_ISLNK(st.st_mode) or not os.path.isdir(d):
        return None
    return os.path.realpath(d)


def _short_columns_message(root, lengths, short):
    return (f"the columns {short} of ctable '{root}' hold fewer rows than its last column "
            f"({lengths}), which no interrupted write leaves: no row is dropped to repair it; check it "
            f"with `blzarr verify` and copy what is readable with blzarr.salvage(src, dst)")



def _records(rows):
    """The rows a boolean mask or an expression selects, typed as bcolz gives them: a plain ndarray
    whose dtype is NumPy's record type, so that each row read from it is a ``numpy.record`` and its
    fields are attributes (``t["x > 1"][0].x``); the values and the dtype's fields are unchanged."""
    return rows.view(np.dtype((np.record, rows.dtype)))


def _create_or_open(self, args, kwargs):
    """The verb of the constructor's StorageError: columns or mode 'w' create, otherwise open."""
    data = args[0] if args else kwargs.get("columns")
    return "create" if data is not None or kwargs.get("mode") == "w" else "open"


class ctable(CtableGroupby, CtableQueries, CtableWrites, CtableReads, CtableBase, Container):
    """ctable(columns=None, names=None, rootdir=None, mode=None, cparams=None, expectedlen=None,
    chunklen=None, format=None, auto_flush=True, allow_pickle=False, **kwargs)

    A compressed table stored column by column, one `carray` per column.

    Parameters
    ----------
    columns : structured array, list/tuple of columns, dict, or ctable, optional
        The data.  A list may hold NumPy arrays, carrays, or anything `carray` accepts; a dict maps
        names to columns.  Without it, `rootdir` is opened.  In memory, carrays become the table's
        columns themselves when every column is one, and are copied otherwise (as bcolz does).
    names : list of str or str, optional
        Column names (default: the structured dtype's or dict's names, else 'f0', 'f1', ...).
        They must be Python identifiers and safe directory names.
    rootdir : str, optional
        Persist the table in this directory.  Without `columns`, the table stored there is opened.
    mode : {'r', 'a', 'w'}, optional
        'r' read-only, 'a' open for appending (default when `rootdir` exists), 'w' create or replace
        (default when it does not).
    cparams, expectedlen, chunklen, dflt :
        Passed to the carrays this creates.  Carrays given in `columns` are used as they are for an
        in-memory table (no copy) and copied into `rootdir` for an on-disk one.
    format : {'blz', 'bcolz'}, optional
        The on-disk layout of a new table: 'blz' (the default, checksummed superchunk files, columns
        under ``root/data/``) or 'bcolz' (the bcolz 1.x layout, which bcolz can open).  An existing
        table keeps its own.
    auto_flush : bool
        For an on-disk table, flush the columns after every append/addcol/resize (default True).
        With False, what is not flushed yet is still written when the table is closed, collected,
        or still open at interpreter exit, as Python's files are flushed.
    allow_pickle : bool
        Opening a table with a column of dtype ``object`` (stored as pickles) needs True.

    Notes
    -----
    ``t[i]`` gives a row (a NumPy record), ``t[i:j]``, ``t[[i, j]]`` and ``t[mask]`` structured
    arrays, ``t['name']`` a column (a carray, the same as ``t.cols['name']``) and ``t['expr']`` the
    rows where the expression is true.  Queries read the columns block by block.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> t = blzarr.ctable([np.arange(5), np.arange(5) * 0.5], names=["a", "b"])
    >>> len(t), t.names, t.dtype
    (5, ['a', 'b'], dtype([('a', '<i8'), ('b', '<f8')]))
    >>> t[1].tolist(), t["b"][:3].tolist()
    ((1, 0.5), [0.0, 0.5, 1.0])
    >>> t["a > 2"].tolist()
    [(3, 1.5), (4, 2.0)]
    >>> [float(r.b) for r in t.where("(a > 1) & (b < 2)")]
    [1.0, 1.5]

    On disk, and opened again:

    >>> d = blzarr.ctable({"x": np.arange(3), "y": np.array([1.0, 2.0, 3.0])}, rootdir="ctable_example",
    ...                   mode="w")
    >>> d.format
    'blz'
    >>> blzarr.open("ctable_example", mode="r")["x >= 1"].tolist()
    [(1, 2.0), (2, 3.0)]
    >>> import shutil; shutil.rmtree("ctable_example")
    """

    _kind = "ctable"

    @storage_op(_create_or_open)
    def __init__(self, columns=None, names=None, **kwargs):
        rootdir = kwargs.pop("rootdir", None)
        mode = kwargs.pop("mode", None)
        auto_flush = kwargs.pop("auto_flush", True)
        allow_pickle = kwargs.pop("allow_pickle", False)
        storage_options = kwargs.pop("storage_options", None)
        # bquery's ctable option: group-bys cache the factorizations of their keys on disk
        self.auto_cache = bool(kwargs.pop("auto_cache", False))
        cp = kwargs.get("cparams")
        unknown = set(kwargs) - set(_CARRAY_KW)
        if unknown:
            raise TypeError(f"ctable() got unexpected keyword arguments {sorted(unknown)}")
        self._rootdir = local_path(os.fspath(rootdir)) if rootdir is not None else None
        self._bytestore = open_bytestore(self._rootdir, storage_options) \
            if self._rootdir is not None and (is_url(self._rootdir) or storage_options) else None
        if self._bytestore is not None:
            self._rootdir = self._bytestore.root
            # an open (no columns) is told by its read of __rootdirs__ (`_open_once`), not asked first
            # a creation at a new URL: one LIST tells that nothing is there (no dataset to look for
            # or replace, nothing to remove)
            empty = columns is not None and self._bytestore.holds_nothing() is True
            exists = columns is None or (not empty and self._bytestore.exists(ROOTDIRS_FILE))
            no_carray = empty
            if columns is not None and mode != "w" and not exists and not empty:
                # a creation refuses whatever is stored there (a carray, other objects), as a
                # local path's refuses any file
                exists = occupied(self._rootdir, storage_options)
                no_carray = True    # (`occupied` looked for one; one there is refused below)
            if columns is not None:
                self._prefix_empty = empty
        else:
            exists = self._rootdir is not None and os.path.exists(self._rootdir)
        if mode is None:
            mode = "a" if exists else "w"
        if mode not in ("r", "a", "w"):
            raise ValueError(f"mode must be 'r', 'a' or 'w', got {mode!r}")
        if self._rootdir is None and columns is None:
            raise ValueError("ctable() needs `columns`, or a `rootdir` to open")
        self._mode = mode
        self.auto_flush = bool(auto_flush) and self._rootdir is not None
        self._cparams = _cparams.coerce(cp)
        self._cparams_given = cp is not None
        self._format = None
        self._columns_base = self._rootdir
        if self._rootdir is not None and columns is not None:
            self._format = kwargs.get("format") or defaults.format
            if self._format not in ("bcolz", "blz"):
                raise ValueError(f"format must be 'bcolz' or 'blz', got {self._format!r}")
        self._ckw = {k: v for k, v in kwargs.items() if v is not None}
        self._ckw.pop("cparams", None)
        if self._bytestore is not None:
            self._ckw["storage_options"] = storage_options
        self.cols = cols(self)
        self._len = 0
        if columns is None:
            if not exists:
                raise StorageError(f"cannot open ctable '{self._rootdir}': it does not exist")
            self._open(allow_pickle)
            return
        if not exists and mode == "r" and self._rootdir is not None:
            raise StorageError(f"cannot create '{self._rootdir}' with mode 'r' (it never writes): "
                               "pass mode='w'")
        if exists and mode != "w":
            raise ExistsError(
                f"'{self._rootdir}' already exists and mode is {mode!r}: pass mode='w' to replace it, "
                "or open it (without `columns`) and append")
        if self._bytestore is not None and not replace.is_fresh(self._rootdir):
            old = "ctable" if exists else None if no_carray \
                else "carray" if self._bytestore.exists(f"{META_DIR}/{STORAGE_FILE}") else None
            if old is not None:
                self._replace(old, columns, names, kwargs, storage_options, auto_flush, allow_pickle)
                return
        self._create(columns, names, kwargs)

    def _replace(self, old_kind, columns, names, kwargs, storage_options, auto_flush, allow_pickle):
        """Object storage, a dataset (an `old_kind`) stored at the URL: the new table is written whole
        in a stage under its prefix and switched in (blzarr.storage.replace), then opened here."""
        def make(url):
            return ctable(columns, names, rootdir=url, mode="w", auto_flush=auto_flush,
                          auto_cache=self.auto_cache, storage_options=storage_options, **kwargs)
        replace.build(self._rootdir, self._bytestore, make, lambda: None, kind=old_kind)
        mode, self._mode = self._mode, "a"
        self._open(allow_pickle)
        self._mode = mode

    # ------------------------------------------------------------------ creation and opening
    def _col_kwargs(self, **extra):
        kw = dict(self._ckw)
        kw["cparams"] = self._cparams
        if self._format is not None:
            kw.setdefault("format", self._format)
        kw.update(extra)
        return kw

    def _col_dir(self, name):
        if self._rootdir is None:
            return None
        return join(self._columns_base, name)

    def _make_rootdir(self):
        if self._bytestore is not None:
            if not self.__dict__.pop("_prefix_empty", False):
                self._bytestore.remove_all()     # object storage: no lock (one writer at a time)
            # put first, deleted once __rootdirs__ commits the table: what a killed creation leaves
            # is then known as its debris (verify and ls skip it), not as damaged columns
            self._bytestore.put(CREATING_FILE, creation_marker())
            return
        fileio.makedirs(self._rootdir)
        self._dirlock = lock_dir(self._rootdir)

    def _create(self, columns, names, kwargs):
        final = old_lock = held = None
        if isinstance(names, str):
            names = _split_outcols(names)
        elif isinstance(names, tuple):
            names = list(names)
        if names is not None and not isinstance(names, list):
            raise ValueError(f"`names` must be a list, a tuple or a string, got {type(names).__name__}")
        if isinstance(columns, ctable):
            names = names if names is not None else columns.names
            columns = [columns.cols[n] for n in columns.names]
        if isinstance(columns, dict):
            if names is None:
                names = list(columns)
            data = [columns[k] for k in columns]
        elif isinstance(columns, np.ndarray) and columns.dtype.names is not None:
            if columns.ndim != 1:
                raise ValueError(f"a structured array for a ctable must be one-dimensional, "
                                 f"got shape {columns.shape}")
            data = [columns[n] for n in columns.dtype.names]
            if names is None:
                names = list(columns.dtype.names)
        elif isinstance(columns, (list, tuple)):
            data = list(columns)
        elif isinstance(columns, np.ndarray):
            raise ValueError("`columns` must be a structured array (or a list of arrays): "
                             f"got an array of dtype {columns.dtype}")
        else:
            raise ValueError(f"`columns` of type {type(columns).__name__} is not supported "
                             "(use a structured array, a list of columns, a dict or a ctable)")
        if names is None:
            names = [f"f{i}" for i in range(len(data))]
        if len(names) != len(data):
            raise ValueError(f"`columns` has {len(data)} columns and `names` has {len(names)}")
        names = [check_name(n) for n in names]
        if len(set(names)) != len(names):
            raise ValueError(f"column names must be unique, got {names}")
        lengths = set()
        for name, col in zip(names, data):
            if isinstance(col, np.ndarray) and col.dtype.kind == "V" and col.dtype.names is None:
                raise ValueError(f"column {name!r}: void arrays cannot be columns")
            lengths.add(len(col) if hasattr(col, "__len__") else -1)
        if len(lengths) > 1:
            raise ValueError(f"all `columns` must have the same length, got lengths {sorted(lengths)}")
        if self._bytestore is not None:
            self._make_rootdir()
        elif self._rootdir is not None:
            target = os.path.realpath(self._rootdir)
            for name, col in zip(names, data):
                src = getattr(col, "rootdir", None) if isinstance(col, carray) else None
                if src is not None and os.path.commonpath([os.path.realpath(src), target]) == target:
                    raise ValueError(f"column {name!r} is stored in '{src}', inside the rootdir of the new "
                                     "ctable, which would be removed first: copy it elsewhere")
            final, old_lock = self._rootdir, None
            if os.path.isdir(final) and not os.path.islink(final):
                old_lock = lock_dir(final)      # never replace what another process writes
            # the table is written beside the target, under a hidden name, and renamed (or swapped,
            # blzarr.storage.intent) into place once complete: an interrupt leaves what was there
            self._rootdir = self._columns_base = intent.stage_path(final)
            try:
                self._make_rootdir()
            except BaseException:
                self._rootdir = self._columns_base = final
                if old_lock is not None:
                    old_lock.release()
                raise
            # nothing in the stage is promised before its rename: its columns and files are written
            # in place, unsynced, and synced once, together, before the rename (`files.HeldTree`;
            # unless it is inside a directory built whole already, whose own barrier covers it)
            if not isinstance(new_tree_of(self._rootdir), HeldTree):
                held = held_tree(self._rootdir)
        # in-memory carrays become the table's columns when every column is one (a table over
        # existing columns); among other kinds of columns they are copied, as bcolz does: writing
        # to the carray given then leaves the table as it was
        share = all(isinstance(col, carray) for col in data)
        try:
            for name, col in zip(names, data):
                self.cols.names.append(name)
                with replace.fresh(self._rootdir) if self._bytestore is not None else contextlib.nullcontext():
                    self.cols._cols[name] = self._new_column(col, name, _share=share)
            self._len = len(self.cols._cols[names[0]]) if names else 0
            # object storage: __rootdirs__ commits the table, unless its caller fills it first
            # (`creation_completed_by_caller`): until then its marker says it is not there yet
            deferred = self._bytestore is not None and creation_left_to_caller(self._rootdir)
            if not deferred:
                self._write_rootdirs()
            self._attrs = _attrs(self._rootdir, self._mode, _new=True, path=self._attrs_path)
            self.flush()
            if deferred:
                self._creation_pending = True
            elif self._bytestore is not None:
                self._bytestore.delete(CREATING_FILE)
            elif self._rootdir is not None:
                if held is not None:
                    for c in self.cols.values():
                        c.close()       # (their last flush and commit record, before the barrier)
                    held.finish(parent=False)
                self._publish_stage(final)
        except BaseException as e:
            if self._bytestore is not None:
                self._bytestore.remove_all()
            elif final is not None:
                if self._rootdir != final:
                    intent.abandon(self._rootdir, e)
                self._rootdir = self._columns_base = final
            raise
        finally:
            if held is not None:
                held.close()
            if self._bytestore is None and self._rootdir is not None and old_lock is not None:
                old_lock.release()

    def _publish_stage(self, final):
        """Put the complete table just written in its stage at `final` and go on from there."""
        stage = self._rootdir
        for c in self.cols.values():
            c.close()
        lock = self.__dict__.pop("_dirlock", None)
        if lock is not None:
            lock.release()
        intent.publish(stage, final)
        self._rootdir = self._columns_base = final
        self._dirlock = lock_dir(final)
        for n in self.cols.names:
            self.cols._cols[n] = carray(rootdir=self._col_dir(n), mode="a", allow_pickle=True)
        self._attrs = _attrs(final, self._mode, path=self._attrs_path)

    def _new_column(self, col, name, _rootdir=None, _share=True, **kw):
        """A carray for column `name` from `col` (a carray in memory is kept as it is, unless
        `_share` is False: then copied); written at `_rootdir` instead of the column's directory
        when given."""
        rd = _rootdir or self._col_dir(name)
        kwargs = self._col_kwargs(**kw)
        if isinstance(col, carray):
            if rd is None and _share:
                return col
            keep = {k: v for k, v in kwargs.items()
                    if k in ("chunklen", "expectedlen", "dflt", "format", "storage_options")}
            if "cparams" in kw or self._cparams_given:
                keep["cparams"] = kwargs["cparams"]
            return self._copy_carray(col, rd, keep)
        if rd is not None:
            kwargs.update(rootdir=rd, mode="w")
        if not isinstance(col, np.ndarray):
            col = np.asarray(col)
            if col.dtype.kind == "U" and col.dtype.itemsize == 0:
                col = col.astype("U1")
        if col.dtype.kind == "V" and col.dtype.names is None:
            raise ValueError(f"column {name!r}: void arrays cannot be columns")
        if col.dtype.names is not None:
            raise ValueError(f"column {name!r}: nested structured columns are not supported")
        if col.ndim == 0:
            raise ValueError(f"column {name!r} is a scalar, not a sequence")
        return carray(col, **kwargs)

    @staticmethod
    def _copy_carray(col, rd, kw):
        kw = dict(kw)
        kw.setdefault("cparams", col.cparams)
        if "chunklen" not in kw:
            # the chunk length a new array of this length gets (as bcolz's copy chooses it), not the
            # source's: an in-memory carray grown by appends has the short chunks of an empty one
            kw.setdefault("expectedlen", len(col))
        kw.setdefault("dflt", col.dflt[()] if col.dtype.kind != "O" else None)
        fmt = kw.pop("format", None)
        new = carray(np.empty((0,) + col.shape[1:], dtype=col.dtype), rootdir=rd, mode="w",
                     **({"format": fmt} if fmt else {}), **kw)
        for s in range(0, len(col), max(col.chunklen, 1)):
            new.append(col[s:s + col.chunklen])
        new.flush()
        return new

    @property
    def _attrs_path(self):
        if self._bytestore is not None:
            return ObjectPath(self._bytestore, ATTRS_FILE)
        return os.path.join(self._rootdir, ATTRS_FILE) if self._rootdir is not None else None

    def _rootdirs_meta(self, names=None):
        meta = {"names": list(self.cols.names if names is None else names)}
        if self._format == "blz":
            meta["format"] = "blz"  # bcolz writes (and expects) only "names"
        if self._bytestore is not None:
            # on object storage, a random id of the table's creation, kept by its rewrites: a table
            # written over another one never has the same __rootdirs__ (replace.publish's condition)
            if self.__dict__.get("_uid") is None:
                self._uid = secrets.token_hex(8)
            meta["uid"] = self._uid
        return meta

    def _commit_creation(self):
        """Object storage: put __rootdirs__, the commit of a creation left to its caller, and delete
        the creation marker (once: later calls do nothing)."""
        if not self.__dict__.pop("_creation_pending", False):
            return
        self._write_rootdirs()
        self._bytestore.delete(CREATING_FILE)

    def _write_rootdirs(self, names=None):
        if self._rootdir is not None:
            write_json(ObjectPath(self._bytestore, ROOTDIRS_FILE) if self._bytestore is not None
                       else os.path.join(self._rootdir, ROOTDIRS_FILE), self._rootdirs_meta(names))

    def _open(self, allow_pickle):
        store, root = self._bytestore, self._rootdir
        if store is None or self._mode == "w":
            return self._open_once(allow_pickle)
        # object storage: the table's open reads __rootdirs__, then each column; it is made again
        # when a writer changed __rootdirs__ meanwhile (every replacement or rewrite of columns does;
        # storage.readpins), which covers the columns' opens too
        for _ in range(readpins.OPEN_TRIES):
            self._bytestore, self._rootdir = store, root
            self.cols = cols(self)
            self._opened = None
            try:
                with readpins.deferred():
                    self._open_once(allow_pickle)
            except Exception:
                if self._confirmed():
                    raise
                continue                # (what failed was read across a change)
            if self._confirmed():
                return
        raise ConcurrentWriterError(f"'{root}' changed while it was being opened, {readpins.OPEN_TRIES} times "
                                    "(another writer replaced or rewrote it): open it again")

    def _confirmed(self):
        opened = self.__dict__.pop("_opened", None)
        return opened is None or readpins.confirm(opened[0], ROOTDIRS_FILE, opened[1])

    def _open_once(self, allow_pickle):
        root = self._rootdir
        remote = self._bytestore is not None
        if not remote and not os.path.isdir(root):
            raise StorageError(f"'{root}' is not a directory")
        if not remote and self._mode != "r" and _has_pending(root):
            self._recover_intents(root)
        path = ObjectPath(self._bytestore, ROOTDIRS_FILE) if remote else os.path.join(root, ROOTDIRS_FILE)
        if remote:
            try:
                raw, version = readpins.read_commit(self._bytestore, ROOTDIRS_FILE)
            except MissingError:
                raise StorageError(f"cannot open ctable '{root}': it does not exist") from None
            self._opened = (self._bytestore, version)      # (confirmed by `_open` once all is read)
            meta = parse_json(raw, path, "ctable column list")
        else:
            meta = read_json(path, "ctable column list")
        if remote and isinstance(meta, dict) and isinstance(meta.get("uid"), str):
            self._uid = meta["uid"]
        rec = replace.record_of(meta, str(path)) if remote else None
        if rec is not None:
            # the table is being replaced (blzarr.storage.replace): a reader reads the new one in its
            # stage, a writer finishes the replacement; either opens what that leaves
            try:
                replace.follow(self._bytestore, rec, "ctable", self._mode)
            except replace.Moved as m:
                self._bytestore, self._rootdir = m.store, m.store.root
            return self._open_once(allow_pickle)
        if not isinstance(meta, dict) or not isinstance(meta.get("names"), list):
            raise FormatError(f"'{path}' must hold a JSON object with a 'names' list")
        names = []
        for n in meta["names"]:
            try:
                names.append(check_name(n))
            except ValueError as e:
                raise FormatError(f"'{path}': {e}") from None
        if len(set(names)) != len(names):
            raise FormatError(f"'{path}': column names are repeated: {names}")
        fmt = meta.get("format", "bcolz")
        if fmt not in ("bcolz", "blz"):
            raise FormatError(f"'{path}': unknown format {fmt!r} (expected 'bcolz' or 'blz')")
        aside = {}
        if remote and "journal" in meta:
            # a rewrite of several columns in place was interrupted: a writer rolls it back, a reader
            # reads those columns from their copies as they were before it (blzarr.storage.tablejournal)
            if self._mode != "r":
                tablejournal.roll_back(self._bytestore, meta)
            else:
                aside = tablejournal.aside_columns(meta, str(path))
        self._format = fmt
        self._columns_base = root
        mode = self._mode
        self._allow_pickle = allow_pickle
        # mode 'a' reads as mode 'r' does (no lock, nothing repaired) until the first call that writes
        # (`_start_writing`): several processes may open a table with the default mode and read it
        lazy = mode == "a" and not remote
        if remote:
            for n in names:
                self.cols.names.append(n)
                rd = join(root, aside[n]) if n in aside else self._col_dir(n)
                self.cols._cols[n] = carray(rootdir=rd, mode=mode, allow_pickle=allow_pickle,
                                            storage_options=self._bytestore.storage_options)
            names = []
        elif mode != "r" and not lazy:
            self._dirlock = lock_dir(root)   # one writer process at a time; mode 'r' takes no lock
        real_root = None if remote else os.path.realpath(root)
        # mode 'r' and 'a' open each column as `blzarr.open` does (no existence probe: just made)
        open_col = carray._open_local if mode in ("r", "a") else \
            (lambda d, mode, allow_pickle: carray(rootdir=d, mode=mode, allow_pickle=allow_pickle))
        for n in names:
            d = self._col_dir(n)
            real = _column_realpath(d, n, real_root)
            if real is None:
                raise StorageError(f"column directory '{d}' listed in '{path}' does not exist")
            if os.path.commonpath([real, real_root]) != real_root or real == real_root:
                # a symlink (or a renamed directory) taking a column outside the table
                raise FormatError(f"column directory '{d}' listed in '{path}' resolves to '{real}', "
                                  f"outside the ctable's root directory")
            self.cols.names.append(n)
            self.cols._cols[n] = open_col(d, mode, allow_pickle)
        # the lengths just loaded (len() of a watched column would first ask whether a writer
        # committed since, a call per column: the table's first read call asks that of them all)
        lengths = {n: c._len for n, c in self.cols._cols.items()}
        last = self.cols.names[-1] if self.cols.names else None
        n, short = _committed_rows(lengths, _record_prev(self.cols._cols[last]) if last else None)
        if last is not None and not short and n < lengths[last]:
            # the last column's record is read as its "prev" (a writer writes that down first)
            self._stepped_back = n
        if short:
            n = min(lengths.values())       # what a reader can show of a damaged table
        if len(set(lengths.values())) > 1:
            # the columns are flushed one after the other: a writer killed between two of them (or
            # seen by a reader meanwhile) leaves some longer than the last one, whose length is the
            # table's.  A writer drops their extra rows (at its first write), a reader does not show
            # them.  A column shorter than the last is damage no interrupted write leaves: reported,
            # never repaired by dropping rows of the others.
            for c in self.cols._cols.values():
                if len(c) > n:
                    if mode == "r" or lazy or short:
                        c._truncate_view(n)
                    else:
                        c.trim(len(c) - n)
            if short:
                self._why_unwritable = _short_columns_message(root, lengths, short)
            warnings.warn(f"the columns of ctable '{root}' have different lengths {lengths} (an interrupted "
                          f"write?): only the {n} rows every column holds are used"
                          + (" (the table cannot be written: " + self._why_unwritable + ")" if short else ""),
                          RuntimeWarning, stacklevel=3)
            if short and mode != "r" and not lazy:
                raise StorageError(self._why_unwritable)
        self._len = n
        if names:
            self._cparams = self.cols[names[0]].cparams
        self._attrs = _attrs(root, "r" if lazy else mode, path=self._attrs_path)
        if (mode == "r" or lazy) and not remote:
            self._watch_columns()
        if lazy:
            self._first_write = self._attrs._first_write = FirstWrite(self._start_writing)
        if mode == "w":
            self._attrs.mode = "a"
            for k in [k for k, _ in self._attrs]:
                del self._attrs[k]
            self._attrs.mode = "w"

    def _recover_intents(self, root):
        """Complete the column operations (addcol, delcol, a column replaced) an interrupted writer
        left an intent record of (`blzarr.storage.intent`), under the table's lock; a lock another process
        holds leaves them to that writer."""
        try:
            lock = lock_dir(root)
        except LockError:
            return
        try:
            intent.recover_all(root)
        finally:
            lock.release()

    def _start_writing(self):
        """The first call that writes to a table opened with mode 'a' (or to its attributes) comes here
        first: the table's lock is taken (`LockError` naming the directory when another process
        writes it), each column starts writing (its own lock, its store's repair), the atoms some
        columns hold past the others are dropped (what opening for writing did), and the attributes
        are read again.  A table another process changed since it was opened (other columns, another
        length) raises `ConcurrentWriterError` (reopen it to write)."""
        if self._mode == "r" or self.__dict__.get("_first_write") is None:
            return
        self._become_writer(self._load_for_writing)

    def _load_for_writing(self):
        # under the table's lock (`_become_writer`): finish what a killed writer left, load what other
        # processes committed, start each column writing and check that the table is still the one
        # this object opened
        root = self._rootdir
        if _has_pending(root):
            self._recover_intents(root)
        rewrite.remove_tmp_debris(root)     # what killed replacements of its files left
        self._fresh()           # what other processes committed since (each column checks again)
        meta = read_json(os.path.join(root, ROOTDIRS_FILE), "ctable column list")
        names = meta.get("names") if isinstance(meta, dict) else None
        if names != list(self.cols.names):
            raise ConcurrentWriterError(
                f"'{root}' was changed by another writer (another process, or another object of this process) since this object opened it (columns "
                f"{list(self.cols.names)}, now {names}): reopen it (blzarr.open) to write")
        stepped = self.__dict__.pop("_stepped_back", None)
        cols = list(self.cols.values())
        for c in cols:
            if c is cols[-1] and stepped is not None:
                # the last column one flush ahead of another (`_committed_rows`): its record read as
                # its "prev" while it starts writing, which writes that commit down (durably) before
                # any column is trimmed; the length this table showed is the one it opened
                c._opened_len = stepped
                with sizes_record.read_as_prev(c.rootdir, stepped):
                    c._start_writing()
            else:
                c._start_writing()
        lengths = {k: len(c) for k, c in self.cols.items()}
        n, short = _committed_rows(lengths, _record_prev(cols[-1]) if cols else None)
        if short:
            raise StorageError(_short_columns_message(root, lengths, short))
        if n != self._len:
            raise ConcurrentWriterError(
                f"'{root}' was changed by another writer (another process, or another object of this process) since this object opened it (it held "
                f"{self._len} rows, it holds {n}): reopen it (blzarr.open) to write")
        for c in self.cols.values():
            if len(c) > n:
                c.trim(len(c) - n)

    # ------------------------------------------------------------------ the committed version
    _watch = None           # True: a reader of a directory other processes may write
    _pinned = 0             # public calls in flight, on any thread (containers.carray.read.pin_version)
    _vlock = None           # guards _pinned and reloads, the table's and its columns'

    @contextlib.contextmanager
    def _one_version(self):
        """Run a public read call on one committed version: loaded first, then not again by the
        calls it makes (see `_fresh`)."""
        if not self._watch:
            yield
            return
        lock = pin_version(self)
        try:
            yield
        finally:
            unpin_version(self, lock)

    def _watch_columns(self):
        """Read as a reader of a directory other processes may write: every column watches its own
        directory, and a column asks the table (`_fresh`) before each call."""
        if self._vlock is None:
            self._vlock = forksafe.RLock()
        forksafe.counts_calls(self)
        ref = weakref.ref(self)
        for c in self.cols._cols.values():
            c._owner = ref
            # one lock for the table and its columns: a column's call in flight holds off the
            # table's reload, which reloads that column too
            c._vlock = self._vlock
        self._watch = True

    def _fresh(self):
        """Load again the columns another process committed since they were loaded; the rows are
        those every column holds (a writer flushes the columns one after the other, so a reader may
        come between two of them): the longer columns are cut short in memory, and loaded whole
        again at the next change."""
        if not self._watch or self._pinned:
            return
        cols = list(self.cols._cols.values())
        if not any(c._watch is not None and c._watch.changed() for c in cols):
            return
        with self._vlock:
            # checked again under the lock: no reload while a call of another thread (on the table or
            # on one of its columns) is in flight
            if self._pinned or any(c._pinned for c in cols):
                return
            self._reload_columns(cols)

    def _reload_columns(self, cols):
        for c in cols:
            if c._watch is not None:
                if c.__dict__.get("_cut") or c._watch.changed():
                    c._reload()
                c._cut = False
        n = min(c._len for c in cols) if cols else 0
        for c in cols:
            if c._len > n:
                c._truncate_view(n)
                c._cut = True
        self._len = n

    # ------------------------------------------------------------------ properties
    @property
    def names(self):
        """The column names, in order (a copy)."""
        return list(self.cols.names)

    @property
    def dtype(self):
        """The structured dtype of a row."""
        fields = []
        for n in self.cols.names:
            c = self.cols._cols[n]
            fields.append((n, c.dtype) if c.ndim == 1 else (n, c.dtype, c.shape[1:]))
        return np.dtype(fields)

    @property
    def shape(self):
        return (self._len,)

    @property
    def ndim(self):
        return 1

    @property
    def size(self):
        # a NumPy integer, as bcolz's np.prod(shape)
        return np.int64(self._len)

    @property
    def nbytes(self):
        """The size of the data uncompressed, in bytes: the sum of the columns' `carray.nbytes`."""
        return sum(c.nbytes for c in self.cols.values())

    @property
    def cbytes(self):
        """The size of the compressed data, in bytes: the sum of the columns' `carray.cbytes` (each
        counts its compressed chunks plus the whole buffer of its last, partial chunk, as bcolz does).
        The ratio shown everywhere is ``nbytes / cbytes``."""
        return sum(c.cbytes for c in self.cols.values())

    @property
    def format(self):
        """The on-disk layout of the columns: 'bcolz' or 'blz' (both at root/<name>), None in memory."""
        return self._format

    @property
    def chunklen(self):
        """The smallest chunklen of the columns (the natural block length of the table)."""
        cls = [c.chunklen for c in self.cols.values()]
        return min(cls) if cls else DEFAULT_BLEN

    def free_cachemem(self):
        """Drop the columns' caches of decompressed data."""
        for c in self.cols.values():
            c.free_cachemem()

    def copy(self, **kwargs):
        """A copy of the table, in memory or (with `rootdir`) on disk.

        Parameters
        ----------
        **kwargs
            ``rootdir``, ``mode``, ``cparams``, ``expectedlen``, ``chunklen``, ``names`` and
            ``format`` of the copy (an on-disk copy keeps the original's layout unless `format`
            is given).  As in bcolz, a `rootdir` that already holds something is refused unless
            ``mode='w'`` asks to replace it.

        Returns
        -------
        ctable

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(3)], names=["a"])
        >>> c = t.copy(names=["b"], cparams={"clevel": 9})
        >>> c.names, c.cparams.clevel, c["b"][:].tolist()
        (['b'], 9, [0, 1, 2])
        """
        rootdir = kwargs.pop("rootdir", None)
        mode = kwargs.pop("mode", "a")
        names = kwargs.pop("names", None) or self.names
        unknown = set(kwargs) - set(_CARRAY_KW)
        if unknown:
            raise TypeError(f"copy() got unexpected keyword arguments {sorted(unknown)}")
        if rootdir is not None and self._rootdir is not None and overlaps(rootdir, self._rootdir):
            raise StorageError(f"copy(): the rootdir of the copy, '{os.fspath(rootdir)}', overlaps the "
                               f"original's, '{self._rootdir}'")
        if len(names) != len(self.cols.names):
            raise ValueError(f"copy(): `names` needs {len(self.cols.names)} names, got {len(names)}")
        if rootdir is not None:
            if self._format is not None:
                kwargs.setdefault("format", self._format)

            def make(url):
                return self._copy_col_attrs(ctable([self.cols._cols[n] for n in self.cols.names], names,
                                                   rootdir=url, mode=mode, **kwargs), names)
            if mode == "w" and is_url(os.fspath(rootdir)):
                # object storage: what is there is replaced by one switch once the copy is complete
                store = open_bytestore(os.fspath(rootdir), kwargs.get("storage_options"))
                return replace.build(store.root, store, make, lambda: ctable(
                    rootdir=store.root, mode="a", storage_options=kwargs.get("storage_options")))
            return make(rootdir)
        copies = []
        for n in self.cols.names:
            c = self.cols._cols[n]
            kw = {k: v for k, v in kwargs.items() if k != "format"}
            copies.append(c.copy(**kw))
        return self._copy_col_attrs(ctable(copies, names, **{k: v for k, v in kwargs.items() if k == "cparams"}),
                                    names)

    def _copy_col_attrs(self, out, names):
        # the columns' attributes go with them (a validity column's link follows a renamed column)
        renamed = dict(zip(self.cols.names, names))
        for old, new in renamed.items():
            for key, value in self.cols._cols[old].attrs:
                if key == VALIDITY_ATTR and value in renamed:
                    value = renamed[value]
                out.cols._cols[new].attrs[key] = value
        return out

    def __exit__(self, *exc):
        """Leaving a ``with`` block closes the table, as leaving ``with open(...)`` closes a file:
        on disk it is flushed, the directory's write lock is given back and later writes raise
        `blzarr.ReadOnlyError` (reads go on working); see `close`.  In memory it only flushes."""
        if self._rootdir is None:
            self.flush()
        else:
            self.close()
        return False

    def __getitem__(self, key):
        if not self._watch:
            return self._getitem(key, sys._getframe(1))
        # one committed version, read again when a writer committed while the columns were read
        # (carray.read.read_again)
        return read_one_version(self, self._getitem, key, sys._getframe(1))

    def _getitem(self, key, frame):
        if isinstance(key, str):
            if key in self.cols._cols:
                return self.cols._cols[key]
            return _records(self._fetch(key, None, None, 0, {}, None, frame))
        if not self.cols.names:
            raise KeyError("cannot read rows from a ctable with no columns")
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            i = ix.normalize_int(key, self._len)
            row = np.empty(1, dtype=self.dtype)
            for n in self.cols.names:
                row[n][0] = self.cols._cols[n][i]
            return row[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            out = np.empty(ix.slice_length(start, stop, step), dtype=self.dtype)
            # the rows bounded now: a thread appending meanwhile adds none to some columns only
            rows = slice(start, stop, step) if stop >= 0 else slice(start, None, step)
            for n in self.cols.names:
                out[n] = self.cols._cols[n][rows]
            return out
        if isinstance(key, tuple):
            if len(key) != 1:
                raise IndexError("multidimensional keys are not supported by ctable")
            return self[key[0]]
        if key is Ellipsis:
            return self[:]
        if isinstance(key, list) and key and all(isinstance(k, str) for k in key):
            return ctable([self.cols[n] for n in key], list(key))
        if isinstance(key, list) and not key:
            return np.empty(0, dtype=self.dtype)
        if isinstance(key, carray):
            if key.dtype == bool:
                return _records(self._rows_at(self._mask_positions(key)))
            key = key[:]
        arr = np.asarray(key)
        if arr.dtype == bool:
            if arr.ndim != 1 or len(arr) != self._len:
                raise IndexError(f"boolean index has shape {arr.shape}, the ctable has {self._len} rows")
            return _records(self._rows_at(np.flatnonzero(arr)))
        if arr.dtype.kind not in "iu" and arr.size:
            raise IndexError(f"ctable indices must be ints, slices, int or bool arrays, column names "
                             f"or expressions; got {key!r}")
        return self._rows_at(ix.positions_from_array(arr.astype(np.intp, copy=False), self._len))

    def _new_table(self, columns, names, **kwargs):
        """A new ctable of `columns` (what the parts of the class, which cannot import it, build)."""
        return ctable(columns, names, **kwargs)

    # ------------------------------------------------------------------ dask, arrow, pickling
    def to_dask(self, columns=None, partition_chunks=None):
        """A dask DataFrame over the table, without reading it (needs dask).

        The index is the row number.  There is one partition per superchunk file in the BLZ layout
        (of the column with the smallest superchunks), else per group of whole chunks; each task
        reads only its own rows.  An on-disk table pickles by its directory, so the frame works on
        a distributed cluster whose workers see the same files.

        Parameters
        ----------
        columns : list of str, optional
            The columns to include (default: all; they must be 1-d).
        partition_chunks : int, optional
            Chunks per partition, instead of the automatic choice.

        Returns
        -------
        dask.dataframe.DataFrame

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(5), np.arange(5) * 0.5], names=["a", "b"])
        >>> df = t.to_dask()
        >>> int(df["a"].sum().compute()), list(df.columns)
        (10, ['a', 'b'])
        """
        return integrations.get("ctable_to_dask")(self, columns, partition_chunks)

    def __arrow_c_stream__(self, requested_schema=None):
        """The table as an Arrow C stream (the Arrow PyCapsule protocol; needs pyarrow).

        One record batch of whole chunks is decoded at a time, so ``polars.DataFrame(t)``,
        ``pyarrow.table(t)`` and DuckDB (``duckdb.sql("SELECT ... FROM t")``) read the table
        directly.  A column with a validity column (``blzarr:validity``) has its missing rows as
        nulls and the validity column is left out; a time zone attribute gives a timestamp with
        that zone.  `requested_schema` (a schema capsule) is a request pyarrow tries to cast to.
        """
        return integrations.get("arrow_c_stream")(self, requested_schema)

    def __arrow_c_schema__(self):
        """The Arrow schema of the table's stream, as a PyCapsule (needs pyarrow)."""
        return integrations.get("arrow_c_schema")(self)

    @staticmethod
    def fromarrow(obj, rootdir=None, mode=None, columns=None, **kwargs):
        """A ctable from Arrow data, read one record batch at a time (needs pyarrow).

        Parameters
        ----------
        obj : object with ``__arrow_c_stream__``, pyarrow Table, RecordBatch or RecordBatchReader
            The data (a Polars or pandas DataFrame, a DuckDB relation... have the method).
        rootdir : str, optional
            Write the table there: it is built in a directory beside `rootdir` and moved there when
            complete, so an interrupted call leaves `rootdir` as it was.
        mode : {'w', None}
            'w' replaces an existing `rootdir`; otherwise an existing one is an error.
        columns : list of str, optional
            Only these columns.
        **kwargs
            Passed to the `ctable` constructor (``cparams``, ``format``, ``chunklen``...).

        Strings become ``U`` columns (binary ``S``) as wide as their longest value; nulls become a
        validity column beside the values (NaT in datetime columns); a timestamp's time zone
        becomes the column attribute ``blzarr:timezone``.  A column of a type a ctable cannot hold
        (lists, structs, decimals...) raises TypeError naming it.

        Examples
        --------
        >>> import pyarrow as pa, blzarr
        >>> t = blzarr.ctable.fromarrow(pa.table({"n": [1, None, 3], "s": ["a", "bc", None]}))
        >>> t.names, t.dtype["s"]
        (['n', 'n_valid', 's', 's_valid'], dtype('<U2'))
        >>> pa.table(t).to_pydict()
        {'n': [1, None, 3], 's': ['a', 'bc', None]}
        """
        return integrations.get("fromarrow")(obj, rootdir, mode, columns, **kwargs)

    @staticmethod
    def fromparquet(path, rootdir=None, mode=None, columns=None, **kwargs):
        """A ctable from a Parquet file, read one row group at a time (needs pyarrow).

        The parameters and the type mapping are those of `fromarrow`; with `rootdir` the table is
        built beside it and moved there when complete.
        """
        return integrations.get("fromparquet")(path, rootdir, mode, columns, **kwargs)

    def toparquet(self, path, columns=None, row_group_size=None, compression="snappy", **kwargs):
        """Write the table to the Parquet file `path`, one row group at a time (needs pyarrow).

        The file is written beside `path` and renamed there when complete (replacing a file
        there), so an interrupted call leaves `path` as it was.  `row_group_size` (default 1Mi
        rows), `compression` and `**kwargs` go to ``pyarrow.parquet.ParquetWriter``.  Missing values
        and time zones are written as Arrow nulls and zoned timestamps (see `__arrow_c_stream__`).
        The file is the one ``pyarrow.parquet.write_table`` writes for the same rows and options;
        long row groups have their columns encoded on several threads (`blzarr.set_nthreads`).

        Examples
        --------
        >>> import numpy as np, blzarr, pyarrow.parquet as pq
        >>> t = blzarr.ctable([np.arange(3), np.array(["x", "y", "z"])], names=["a", "s"])
        >>> t.toparquet("toparquet_example.parquet")
        >>> pq.read_table("toparquet_example.parquet").to_pydict()
        {'a': [0, 1, 2], 's': ['x', 'y', 'z']}
        >>> blzarr.ctable.fromparquet("toparquet_example.parquet")["s"][:].tolist()
        ['x', 'y', 'z']
        >>> import os; os.remove("toparquet_example.parquet")
        """
        return integrations.get("toparquet")(self, path, columns, row_group_size, compression, **kwargs)

    def to_arrow(self, columns=None):
        """A pyarrow Table with the table's columns, built one record batch per block (needs pyarrow).

        Parameters
        ----------
        columns : list of str, optional
            The columns to include (default: all; they must be 1-d).

        Returns
        -------
        pyarrow.Table

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(3), np.array(["x", "y", "z"])], names=["a", "s"])
        >>> at = t.to_arrow()
        >>> at.num_rows, at.column_names, at.column("s").to_pylist()
        (3, ['a', 's'], ['x', 'y', 'z'])
        """
        return integrations.get("ctable_to_arrow")(self, columns)

    def __reduce__(self):
        # on disk: pickled by its directory (flushed first, reopened read-only); in memory: by value
        pickled = any(c.dtype.kind == "O" for c in self.cols.values())
        if self._rootdir is not None:
            self.flush()
            so = self._bytestore.storage_options if self._bytestore is not None and self._bytestore.remote else None
            return (_rebuild_ctable, (self._rootdir, None, None, None, pickled, so))
        return (_rebuild_ctable, (None, [self.cols[n] for n in self.cols.names], list(self.cols.names),
                                  self._attrs.getall(), pickled))

    # ------------------------------------------------------------------ pandas and HDF5
    @staticmethod
    def fromdataframe(df, index=False, **kwargs):
        """A ctable from a pandas DataFrame (needs pandas).

        Columns of strings become fixed-width unicode (or bytes) columns as wide as their longest
        value, categoricals their values.  Time-zone-aware datetimes are UTC ``datetime64`` with
        the zone in the column attribute ``blzarr:timezone``.  Missing values of a column of
        strings or of a pandas nullable dtype (``Int64``, ``boolean``, ``string``...) are kept in
        a boolean validity column ``<name>_valid`` beside it (linked by the attribute
        ``blzarr:validity``; docs/FORMAT.rst), not as pickled objects; a column of other Python
        objects stays one.  `todataframe` gives back the dtypes, missing values and zones.

        Parameters
        ----------
        df : pandas.DataFrame
            The data.
        index : bool, optional
            Store the index too, as the first columns (named as ``df.reset_index()`` names them),
            which `todataframe` makes the index again.  Default False: the index is dropped.
        **kwargs
            Passed to the `ctable` constructor (``rootdir``, ``mode``, ``cparams``, ``names``, ...).

        Returns
        -------
        ctable

        Examples
        --------
        >>> import pandas as pd, blzarr
        >>> t = blzarr.ctable.fromdataframe(pd.DataFrame({"n": [1, 2], "s": ["ab", "c"]}))
        >>> t.dtype, t[:].tolist()
        (dtype([('n', '<i8'), ('s', '<U2')]), [(1, 'ab'), (2, 'c')])
        """
        return integrations.get("fromdataframe")(df, index=index, **kwargs)

    def todataframe(self, columns=None, orient="columns", index=None):
        """A pandas DataFrame with the table's columns, keeping their dtypes (needs pandas).

        Parameters
        ----------
        columns : list of str, optional
            The columns to include, in this order (default: all, in the table's order).
        orient : {'columns', 'index'}, optional
            'index' gives one DataFrame row per column, as ``DataFrame.from_dict`` does.
        index : bool, optional
            Columns stored as a DataFrame's index (``fromdataframe(df, index=True)``) become the
            index again unless this is False.

        Validity columns are not columns of the DataFrame: their column's missing rows are NA.

        Returns
        -------
        pandas.DataFrame

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(3), np.array([0.5, 1.5, 2.5])], names=["a", "b"])
        >>> df = t.todataframe()
        >>> df["b"].tolist(), str(df["a"].dtype)
        ([0.5, 1.5, 2.5], 'int64')
        >>> list(t.todataframe(columns=["b"]).columns)
        ['b']
        """
        return integrations.get("todataframe")(self, columns, orient, index)

    @staticmethod
    def fromhdf5(filepath, nodepath="/ctable", **kwargs):
        """A ctable from a PyTables Table in an HDF5 file, read block by block (needs PyTables).

        Unicode and datetime columns written by `tohdf5` come back with their NumPy dtypes; the
        Table's user attributes that JSON can hold become the ctable's attributes.

        Parameters
        ----------
        filepath : str
            The HDF5 file.
        nodepath : str, optional
            The path of the Table inside the file.
        **kwargs
            Passed to the `ctable` constructor (``rootdir``, ``names``, ...).

        Returns
        -------
        ctable

        Raises
        ------
        blzarr.StorageError
            The file does not exist.
        KeyError
            There is no node at `nodepath`.

        Examples
        --------
        >>> import numpy as np, blzarr, os
        >>> t = blzarr.ctable([np.arange(3), np.array(["a", "b", "c"])], names=["n", "s"])
        >>> t.tohdf5("fromhdf5_example.h5")                  # doctest: +SKIP
        >>> blzarr.ctable.fromhdf5("fromhdf5_example.h5")[:].tolist()  # doctest: +SKIP
        [(0, 'a'), (1, 'b'), (2, 'c')]
        >>> os.remove("fromhdf5_example.h5")                 # doctest: +SKIP
        """
        return integrations.get("fromhdf5")(filepath, nodepath, **kwargs)

    def tohdf5(self, filepath, nodepath="/ctable", mode="w", cparams=None, cname=None):
        """Write the table as a PyTables Table in an HDF5 file (needs PyTables).

        HDF5 has no unicode or datetime columns: they are stored as UTF-8 bytes and int64, and
        their NumPy dtypes are recorded in the Table's ``BLZARR_DTYPES`` attribute so that
        `fromhdf5` restores them.  The table's attributes become the Table's.

        Parameters
        ----------
        filepath : str
            The HDF5 file.
        nodepath : str, optional
            Where to create the Table ('/ctable' by default; missing groups are created).
        mode : {'w', 'a'}, optional
            'w' creates the file (it must not exist), 'a' adds a node to an existing one.
        cparams : cparams or dict, optional
            Compression of the HDF5 Table (default: the ctable's).
        cname : str, optional
            The PyTables compression library (default ``'blosc:' + cparams.cname``).

        Raises
        ------
        blzarr.StorageError
            With mode 'w', the file already exists.
        TypeError
            A column has a dtype PyTables cannot store.

        Examples
        --------
        >>> import numpy as np, blzarr, os
        >>> t = blzarr.ctable([np.arange(3)], names=["n"])
        >>> t.tohdf5("tohdf5_example.h5", nodepath="/group/table")                # doctest: +SKIP
        >>> blzarr.ctable.fromhdf5("tohdf5_example.h5", "/group/table")["n"][:]   # doctest: +SKIP
        array([0, 1, 2])
        >>> os.remove("tohdf5_example.h5")                                       # doctest: +SKIP
        """
        return integrations.get("tohdf5")(self, filepath, nodepath, mode, cparams, cname)

    # ------------------------------------------------------------------ display
    def __str__(self):
        if not self.cols.names:
            return "[]"
        if self._len <= 100:
            return np.array2string(self[:], separator=", ", threshold=1000)
        head = np.array2string(self[:3], separator=", ")[:-1]
        tail = np.array2string(self[-3:], separator=", ")[1:]
        return f"{head}, ..., {tail}"

    def __repr__(self):
        return self._repr_text(":")


def _rebuild_ctable(rootdir, columns, names, attrs, allow_pickle, storage_options=None):
    if rootdir is not None:
        return ctable(rootdir=rootdir, mode="r", allow_pickle=allow_pickle, storage_options=storage_options)
    t = ctable(columns, names)
    for k, v in attrs.items():
        t.attrs[k] = v
    return t


# the public read calls load the committed version first; those that read the caller's frame for
# expressions (__getitem__, fetchwhere, where, whereblocks, eval, explain) check themselves
for _name in ("__len__", "__iter__", "iter", "__array__", "copy", "to_dask", "to_arrow", "todataframe",
              "__repr__", "__str__"):
    setattr(ctable, _name, fresh_call(getattr(ctable, _name)))
for _name in ("shape", "len", "size", "nbytes", "cbytes"):
    setattr(ctable, _name, property(fresh_call(getattr(ctable, _name).fget)))
del _name
