"""Writing a ctable (`CtableWrites`, a part of `ctable`): append rows, resize and trim, add and delete
columns, assign rows, flush and close."""

import contextlib
import keyword
import errno
import os
import shutil
import sys

import numpy as np

from blzarr.storage import fileio, files, intent, rewrite, tablejournal
from blzarr.containers.carray.array import carray, operator_index
from blzarr.containers.carray.write import _NOT_ONE, _python_values, retire
from blzarr.containers.ctable.read import CtableBase
from blzarr.errors import ReadOnlyError, StorageError, os_reason, storage_op
from blzarr.query import factor_cache
from blzarr.storage.files import ATTRS_FILE, ROOTDIRS_FILE, ObjectPath, read_json



def _move(src, dst):
    """Move directory `src` to `dst`: a rename (through the I/O layer, made durable) on one file
    system, a copy otherwise."""
    try:
        fileio.rename(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.move(src, dst)
        return
    if fileio.sync_enabled():
        fileio.fsync_dir(os.path.dirname(os.path.abspath(dst)))
        fileio.fsync_dir(os.path.dirname(os.path.abspath(src)))

def _same_device(a, b):
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _staged_like(old, arr, stage):
    """A carray at `stage` holding `arr`, with the parameters, layout and attributes of `old`."""
    kw = dict(cparams=old.cparams, chunklen=old.chunklen, format=old.format, expectedlen=len(arr))
    if old.dtype.kind != "O":
        kw["dflt"] = old.dflt[()]
    if old.format == "blz":
        kw.update(old.chunkstore.storage_options())
    new = carray(np.empty((0,) + old.shape[1:], dtype=old.dtype), rootdir=stage, mode="w", **kw)
    step = max(old.chunklen, 1) * 16
    for s in range(0, len(arr), step):
        new.append(arr[s:s + step])
    for k, v in old.attrs:
        new.attrs[k] = v
    new.flush()
    return new


class CtableWrites(CtableBase):
    """Writing a `ctable`."""

    # ------------------------------------------------------------------ writing
    def _check_writable(self):
        if self._mode == "r":
            why = self.__dict__.get("_why_readonly")
            if why is not None:
                raise ReadOnlyError(f"cannot modify the ctable: {why}")
            raise ReadOnlyError("cannot modify the ctable: it was opened with mode 'r'"
                                + (f" ('{self._rootdir}')" if self._rootdir else ""))
        if self.__dict__.get("_first_write") is not None:
            self._start_writing()       # mode 'a': the lock is taken at the first write
        why = self.__dict__.get("_broken")
        if why is not None:
            raise StorageError(f"'{self._rootdir}' cannot be written through this object: {why}: "
                               f"reopen it with blzarr.open({self._rootdir!r}, mode='a')")

    def _coerce_column_values(self, name, value):
        """`value` as an array of rows for column `name` (a single value becomes one row)."""
        col = self.cols._cols[name]
        if isinstance(value, carray):
            return value
        arr = _python_values(value, np.asarray(value), col.dtype)   # integers out of range raise
        atom = col.shape[1:]
        if col.dtype.kind == "S" and arr.dtype.kind == "U":
            try:  # text for a bytes column, as bcolz accepts: ASCII only
                arr = arr.astype(col.dtype)
            except UnicodeEncodeError as e:
                raise ValueError(f"column {name!r} holds bytes and {value!r} is not ASCII text: {e}") from None
        if col.dtype.kind == "O":
            if arr.ndim == 0 or isinstance(value, (str, bytes)):
                out = np.empty(1, dtype=object)
                out[0] = value
                return out
            return arr
        if arr.shape == atom:
            return arr.reshape((1,) + atom)
        if arr.shape[1:] == atom:
            return arr
        raise ValueError(f"column {name!r}: values of shape {arr.shape} do not fit atoms of shape {atom}")

    def _columns_of(self, rows):
        """Split `rows` (structured array, void, ctable, dict, list of columns, or one row) by column."""
        names = self.cols.names
        if isinstance(rows, CtableBase):
            missing = set(names) - set(rows.names)
            if missing:
                raise ValueError(f"the ctable to append lacks columns {sorted(missing)}")
            return [rows.cols[n] for n in names]
        if isinstance(rows, (np.ndarray, np.void)) and rows.dtype.names is not None:
            missing = set(names) - set(rows.dtype.names)
            if missing:
                raise ValueError(f"the structured array to append lacks fields {sorted(missing)}")
            return [rows[n] for n in names]
        if isinstance(rows, dict):
            missing = set(names) - set(rows)
            if missing:
                raise ValueError(f"the dict to append lacks columns {sorted(missing)}")
            return [rows[n] for n in names]
        if isinstance(rows, list) and rows and all(
                isinstance(r, (tuple, np.void)) and len(r) == len(names) for r in rows):
            # a list of row tuples (NumPy's convention for structured data)
            try:
                arr = np.array([tuple(r) for r in rows], dtype=self.dtype)
            except (TypeError, ValueError) as e:
                raise ValueError(f"cannot convert the rows to append into dtype {self.dtype}: {e}") from None
            return [arr[n] for n in names]
        if isinstance(rows, (list, tuple)):
            if len(rows) != len(names):
                raise ValueError(f"append() needs one item per column ({len(names)}), got {len(rows)}")
            return list(rows)
        if isinstance(rows, np.ndarray) and rows.ndim >= 1 and len(rows) == len(names):
            return list(rows)
        raise ValueError(f"cannot append an object of type {type(rows).__name__} to a ctable "
                         "(use a tuple for one row, a list of columns, a structured array or a ctable)")

    @storage_op("append to")
    def append(self, cols):
        """Append rows at the end of the table.

        Parameters
        ----------
        cols : tuple, list, structured array, dict or ctable
            (bcolz's name for the argument, kept for ``append(cols=...)``.)
            A tuple is one row; a list holds one array (or sequence) per column, in column order;
            a structured array or record gives rows by field; a dict maps column names to arrays.
            Values are converted to each column's dtype.

        Raises
        ------
        ValueError
            The columns have different lengths, or a value does not convert.  No column keeps part
            of the rows that failed.
        blzarr.ReadOnlyError
            The table was opened with mode 'r'.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(2), np.array([0.5, 1.5])], names=["a", "b"])
        >>> t.append((2, 2.5))
        >>> t.append([[3, 4], [3.5, 4.5]])
        >>> t.append({"a": [5], "b": [5.5]})
        >>> len(t), t[-1].tolist()
        (6, (5, 5.5))
        """
        self._check_writable()
        if not self.cols.names:
            raise ValueError("cannot append rows to a ctable without columns")
        one = self._one_row(cols)
        if one is not None:
            self._append_one_row(one)
            return
        parts = [self._coerce_column_values(n, v) for n, v in zip(self.cols.names, self._columns_of(cols))]
        lengths = {len(p) for p in parts}
        if len(lengths) != 1:
            raise ValueError(f"all the columns to append must have the same length, got {sorted(lengths)}")
        n = lengths.pop()
        if n == 0:
            return
        # every conversion before the first column changes: a value that does not fit touches nothing
        parts = [p if isinstance(p, carray) else self.cols._cols[name]._coerce_input(p)
                 for name, p in zip(self.cols.names, parts)]
        old = self._len
        done = []
        try:
            for name, part in zip(self.cols.names, parts):
                col = self.cols._cols[name]
                if isinstance(part, carray):
                    for s in range(0, len(part), max(part.chunklen, 1)):
                        col.append(part[s:s + part.chunklen])
                else:
                    col.append(part)
                done.append(col)
            if self.auto_flush:
                self.flush()     # a flush that fails (a full disk) undoes the append too
        except BaseException:
            self._undo_append(old)
            raise
        self._len = old + n

    def _one_row(self, row):
        """[(column, value), ...] when `row` is one row (a tuple or list of one item per column) that
        every column takes into its leftover buffer as it is (`carray._one_atom`: no conversion
        that could round, wrap or be refused) without filling a chunk, after each column's checks
        for writing; else None, and `append` converts and checks it as any other input."""
        if type(row) is not tuple and type(row) is not list:
            return None
        cols = self.cols._cols
        names = self.cols.names
        if len(row) != len(names):
            return None
        out = []
        for name, value in zip(names, row):
            col = cols[name]
            value = col._one_atom(value)
            if value is _NOT_ONE:
                return None
            out.append((col, value))
        for col, _ in out:
            col._check_writable()
            if not col._room_for_one():
                return None
        return out

    def _append_one_row(self, one):
        """`append` of the row `_one_row` checked: each value goes into its column's leftover buffer,
        then the flush (a failure undoes the row in every column, as `append` does)."""
        old = self._len
        try:
            for col, value in one:
                col._put_atom(value)
            if self.auto_flush:
                self.flush()
        except BaseException:
            self._undo_append(old)
            raise
        self._len = old + 1

    def _undo_append(self, old):
        """Drop the rows past `old` that an append that failed left in the columns, the last column
        (whose length is the table's) first: no column keeps part of the rows, and an interrupt of
        this leaves columns that opening trims."""
        try:
            for col in reversed(list(self.cols.values())):
                if len(col) > old:
                    col.trim(len(col) - old)
        except BaseException as undo_error:
            self._broken = f"an append failed and undoing it failed too ({undo_error})"

    @storage_op("resize")
    def resize(self, nitems):
        """Grow the table to `nitems` rows (new rows take each column's `dflt`) or shrink it.

        Parameters
        ----------
        nitems : int
            The new number of rows (non-negative).

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(3), np.ones(3)], names=["a", "b"])
        >>> t.resize(5)
        >>> t[:].tolist()
        [(0, 1.0), (1, 1.0), (2, 1.0), (0, 0.0), (0, 0.0)]
        >>> t.resize(1); len(t)
        1
        """
        self._check_writable()
        nitems = operator_index(nitems, "nitems")
        if nitems < 0:
            raise ValueError(f"nitems must be >= 0, got {nitems}")
        # growing, the last column last; shrinking, first: its length is the table's
        cols = list(self.cols.values())
        for c in (cols if nitems >= self._len else reversed(cols)):
            c.resize(nitems)
        self._len = nitems
        if self.auto_flush:
            self.flush()

    @storage_op("trim")
    def trim(self, nitems):
        """Remove the last `nitems` rows.

        Parameters
        ----------
        nitems : int
            How many rows to remove (a negative number grows the table, as `resize` does).

        Raises
        ------
        ValueError
            `nitems` is larger than the number of rows.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(5)], names=["a"])
        >>> t.trim(2)
        >>> t["a"][:].tolist()
        [0, 1, 2]
        """
        self._check_writable()
        nitems = operator_index(nitems, "nitems")
        if nitems > self._len:
            raise ValueError(f"cannot trim {nitems} rows from a ctable of {self._len}")
        if nitems < 0:
            return self.resize(self._len - nitems)
        # the last column first: its length is the table's (see ctable._committed_rows)
        for c in reversed(list(self.cols.values())):
            c.trim(nitems)
        self._len -= nitems
        if self.auto_flush:
            self.flush()

    @storage_op("add a column to")
    def addcol(self, newcol, name=None, pos=None, move=False, **kwargs):
        """Add a column.

        Parameters
        ----------
        newcol : carray, array or list
            The data, as long as the table; copied (a carray in memory too, as bcolz does).
        name : str, optional
            The column name (default ``'f<pos>'``): a Python identifier, not already used.
        pos : int, optional
            The position among the columns (default: last).
        move : bool, optional
            An on-disk carray added to an on-disk table is copied into the table's directory, or,
            with True, moved there (the carray object passed must not be used afterwards).  A
            carray added to a table in memory is copied, or with True becomes the column itself.
        **kwargs
            Passed to `blzarr.carray` when a column is built (``cparams``, ``chunklen``, ...).

        Raises
        ------
        ValueError
            A bad or repeated name, a bad position, or a length that differs from the table's.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(3)], names=["a"])
        >>> t.addcol(np.arange(3) * 10, name="b")
        >>> t.addcol(["x", "y", "z"], name="s", pos=0)
        >>> t.names, t[2].tolist()
        (['s', 'a', 'b'], ('z', 2, 20))
        """
        self._check_writable()
        if pos is None:
            pos = len(self.cols.names)
        else:
            if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)):
                raise ValueError(f"`pos` must be an int, got {pos!r}")
            pos = int(pos)
            if not 0 <= pos <= len(self.cols.names):
                raise ValueError(f"`pos` must be between 0 and {len(self.cols.names)}, got {pos}")
        if name is None:
            name = f"f{pos}"
        name = check_name(name)
        if name in self.cols._cols:
            raise ValueError(f"column {name!r} already exists")
        if isinstance(newcol, (str, bytes)) or not hasattr(newcol, "__len__"):
            raise ValueError(f"`newcol` must be a carray, an array or a list, got {type(newcol).__name__}")
        if self.cols.names and len(newcol) != self._len:
            raise ValueError(f"`newcol` has length {len(newcol)}, the ctable has {self._len} rows")
        unknown = set(kwargs) - set(_CARRAY_KW)
        if unknown:
            raise TypeError(f"addcol() got unexpected keyword arguments {sorted(unknown)}")
        rd = self._col_dir(name)
        local = rd is not None and self._bytestore is None
        if local:
            intent.recover(rd)      # an interrupted addcol/delcol of this name is completed first
            # a factorization cache of an earlier column of this name (left by another program or
            # an older blzarr) must not describe the new one
            if factor_cache.hide(self, name, rd) is not None:
                intent.recover(rd)
        if rd is not None and self._bytestore is not None:
            self._clear_unlisted_column(name, rd)
        if rd is not None and (self._bytestore.child(name).list("") if self._bytestore is not None
                               else os.path.lexists(rd)):
            raise StorageError(f"cannot add column {name!r}: '{rd}' already exists")
        if self._bytestore is not None:
            move = False        # object storage has no rename: the column is copied
        names = list(self.cols.names)
        names.insert(pos, name)
        if local:
            moving = (move and isinstance(newcol, carray) and newcol.rootdir is not None
                      and newcol._bytestore is None and _same_device(newcol.rootdir, self._rootdir))
            if moving:
                src = os.path.realpath(newcol.rootdir)
                # a carray inside the table's directory (not one of its columns) may move into it;
                # the table itself, a directory holding it, or one of its columns may not
                if src in {os.path.realpath(c.rootdir) for c in self.cols.values() if c.rootdir} or \
                        intent.same_or_nested(src, self._rootdir) and \
                        os.path.commonpath([src, os.path.realpath(self._rootdir)]) == src:
                    raise ValueError(f"cannot move '{newcol.rootdir}' into the ctable '{self._rootdir}': "
                                     "it overlaps the table's directory")
                newcol.flush()
                stage = os.path.abspath(newcol.rootdir)
            else:
                stage = intent.stage_path(rd)
            try:
                if not moving:
                    src = newcol if isinstance(newcol, carray) else (
                        newcol if isinstance(newcol, np.ndarray) else np.asarray(newcol))
                    made = self._new_column(src, name, _rootdir=stage, **kwargs)
                    made.close()
                    del made
                intent.publish(stage, rd, rootdirs=self._rootdirs_meta(names), op="add",
                               rootdirs_file=os.path.join(self._rootdir, ROOTDIRS_FILE))
            except BaseException as e:
                if not moving:
                    intent.abandon(stage, e)
                if intent.committed(e):
                    self._added(name, pos, rd, newcol if moving else None)
                if isinstance(e, OSError) and e.errno is not None:
                    # named by the column's directory, not the hidden one it was written in
                    err = StorageError(f"cannot add column {name!r} at '{rd}': {os_reason(e)}")
                    err.errno, err.strerror, err.filename = e.errno, e.strerror, e.filename
                    raise err from e
                raise
            self._added(name, pos, rd, newcol if moving else None)
            if self.auto_flush:
                self.flush()
            return
        elif isinstance(newcol, carray):
            # copied, in memory too, as bcolz's addcol does: a later write to `newcol` (an append
            # above all, which would make the columns' lengths differ) leaves the table as it was;
            # `move` hands the carray over instead
            col = self._new_column(newcol, name, _share=move, **kwargs)
        else:
            col = self._new_column(newcol if isinstance(newcol, np.ndarray) else np.asarray(newcol),
                                   name, **kwargs)
        self.cols.names.insert(pos, name)
        self.cols._cols[name] = col
        if len(self.cols.names) == 1:
            self._len = len(col)
        self._write_rootdirs()
        if self.auto_flush:
            self.flush()

    def _clear_unlisted_column(self, name, rd):
        """Object storage: remove the objects under column `name` that the table's stored column list
        does not name.  The list is written after a new column's objects and before a removed
        column's objects are deleted, so such objects are what an interrupted addcol or delcol of
        that name left: without this, the same addcol could never be retried.  A name the stored
        list has (added by another writer since this table was opened) is left alone."""
        child = self._bytestore.child(name)
        if not child.list(""):
            return
        meta = read_json(ObjectPath(self._bytestore, ROOTDIRS_FILE), "ctable column list")
        if isinstance(meta, dict) and name in (meta.get("names") or ()):
            return
        child.remove_all()

    def _added(self, name, pos, rd, moved):
        """Column `name` (at `pos`) is the directory `rd` now; `moved`, the carray object moved there."""
        if moved is not None:
            retire(moved, f"the carray was moved into the ctable '{self._rootdir}' as column {name!r} "
                          "(addcol(move=True)): use the table's column from now on")
        col = self._reopen_col(rd)
        self.cols.names.insert(pos, name)
        self.cols._cols[name] = col
        if len(self.cols.names) == 1:
            self._len = len(col)

    @storage_op("remove a column from")
    def delcol(self, name=None, pos=None, keep=False):
        """Remove a column, given by `name` or by position `pos`.

        Parameters
        ----------
        name : str, optional
            The column to remove.
        pos : int, optional
            Its position instead (negative counts from the end).
        keep : bool, optional
            Keep the column's data: on disk its directory is left in place, and the column's
            carray is returned.

        Returns
        -------
        carray or None
            The removed column when `keep` is True.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(3), np.zeros(3), np.ones(3)], names=["a", "b", "c"])
        >>> t.delcol("b")
        >>> c = t.delcol(pos=-1, keep=True)
        >>> t.names, c[:].tolist()
        (['a'], [1.0, 1.0, 1.0])
        """
        self._check_writable()
        if name is None and pos is None:
            raise ValueError("delcol() needs a `name` or a `pos`")
        if name is not None and pos is not None:
            raise ValueError("delcol() takes a `name` or a `pos`, not both")
        if name is not None:
            if not isinstance(name, str):
                raise ValueError(f"`name` must be a string, got {name!r}")
            if name not in self.cols._cols:
                raise ValueError(f"no column named {name!r} (columns: {self.cols.names})")
        else:
            if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)):
                raise ValueError(f"`pos` must be an int, got {pos!r}")
            n = len(self.cols.names)
            if not -n <= pos < n:
                # an IndexError, as bcolz's (its list lookup raised one) and as a list's
                raise IndexError(f"`pos` {pos} is out of range for {n} columns")
            name = self.cols.names[pos]
        col = self.cols._cols[name]
        names = [n for n in self.cols.names if n != name]
        rd = self._col_dir(name)
        if rd is not None and self._bytestore is None and col.rootdir is not None:
            col.flush()
            # the column's factorization cache goes first (a column without its cache is valid;
            # a cache without its column is not): hidden in one rename, deleted with the column
            hidden = factor_cache.hide(self, name, rd)
            if keep:
                self._write_rootdirs(names)     # one atomic write: the directory stays where it is
                if hidden is not None:
                    intent.recover(rd)          # deletes the hidden cache, leaves the kept column
            else:
                try:
                    intent.remove(rd, rootdirs=self._rootdirs_meta(names),
                                  rootdirs_file=os.path.join(self._rootdir, ROOTDIRS_FILE))
                except BaseException as e:
                    if intent.committed(e):
                        self._removed(name, col)
                    raise
                retire(col, f"column {name!r} was removed from the ctable '{self._rootdir}'")
        else:
            if self._rootdir is None:
                factor_cache.drop(self, name)
            if not keep and col.rootdir is not None:
                col.flush()
            self._write_rootdirs(names)
            if not keep and col.rootdir is not None:
                if self._bytestore is not None:
                    self._bytestore.child(name).remove_all()    # its objects on object storage
                else:
                    fileio.rmtree(col.rootdir, ignore_errors=True)
        self._removed(name, None)
        if self.auto_flush:
            self.flush()
        return col if keep else None

    def _removed(self, name, col):
        if name in self.cols._cols:
            self.cols.names.remove(name)
            del self.cols._cols[name]
        if col is not None:
            retire(col, f"column {name!r} was removed from the ctable '{self._rootdir}'")
        if not self.cols.names:
            self._len = 0

    def _replace_col(self, name, data):
        self._check_writable()
        old = self.cols._cols[name]
        if len(data) != self._len:
            raise ValueError(f"new data for column {name!r} has length {len(data)}, the ctable has {self._len}")
        try:
            arr = data[:] if isinstance(data, carray) else np.asarray(data)
            if arr.dtype != old.dtype:
                arr = arr.astype(old.dtype)
        except (TypeError, ValueError) as e:
            raise ValueError(f"cannot convert the new data of column {name!r} to {old.dtype}: {e}") from None
        if arr.shape != old.shape:
            raise ValueError(f"new data for column {name!r} has shape {arr.shape}, the column {old.shape}")
        rd = self._col_dir(name)
        if rd is None or self._bytestore is not None:
            # in memory, or on object storage (no rename): the values are assigned over the old ones,
            # in place under a rollback journal on object storage (the chunk objects change one by one)
            with self._columns_journal([name], single=True):
                old[:] = arr
                old.flush()
            return
        # on disk: the new column is written whole beside the old one, then swapped in (blzarr.storage.intent);
        # the column is never empty, whatever interrupts it
        old.flush()
        intent.stage_then_publish(rd, lambda stage: _staged_like(old, arr, stage),
                                  lambda e: self._now_column(name, rd, old, "replaced by new values"))
        self._now_column(name, rd, old, "replaced by new values")

    def _now_column(self, name, rd, old, what):
        """Column `name` is the directory `rd` now (the object `old` stands for what was there)."""
        self.cols._cols[name] = self._reopen_col(rd)
        retire(old, f"column {name!r} of the ctable '{self._rootdir}' was {what}: use the table's "
                    f"column (t[{name!r}]) from now on")

    def _reopen_col(self, rd):
        return carray(rootdir=rd, mode="a" if self._mode == "w" else self._mode, allow_pickle=True)

    @storage_op("flush")
    def flush(self):
        """Write every column's buffered rows and sizes to disk (nothing to do in memory).

        Appends to an on-disk table flush by themselves unless ``auto_flush`` is False; leaving a
        ``with`` block flushes and closes the table (see `close`).
        """
        if self._mode == "r":
            return
        why = self.__dict__.get("_broken")
        if why is not None:
            raise StorageError(f"'{self._rootdir}' cannot be written through this object: {why}; nothing "
                               f"more was written: reopen it with blzarr.open({self._rootdir!r}, mode='a')")
        cols = list(self.cols.values())
        if len(cols) < 2:
            for c in cols:
                c.flush()
            return
        with contextlib.ExitStack() as held:
            for c in cols:
                held.enter_context(c._lock)
            # at most three sync rounds whatever the number of columns, not two or three per column:
            # every column's chunks together, with the sizes of the columns (but the last) whose
            # sizes may be synced with their chunks (`sizes_with_chunks`); then the sizes of the
            # other columns but the last together; then the last column's sizes, which commit the
            # rows (see `_committed_rows`).  When every column's sizes go with its chunks, the last
            # column's go into the first barrier too, as a record that readers can read as the
            # commit before it: one round.  A power loss may then keep it and lose another
            # column's, which `_committed_rows` reads as the table's previous commit.
            with files.one_barrier():
                todo = [(c, c._flush_data()) for c in cols]
                todo = [(c, nch) for c, nch in todo if nch is not None]
                if not todo:
                    return
                *first, (last, last_nch) = todo
                if last is not cols[-1]:
                    first.append((last, last_nch))
                    last = None
                early = [c for c, _ in first if c._chunks.sizes_with_chunks()]
                for c in early:
                    c._write_sizes()
                one_round = (last is not None and len(early) == len(first)
                             and last._chunks.sizes_with_chunks(len(last)))
                if one_round:
                    last._write_sizes()
            for c in early + ([last] if one_round else []):
                c._chunks.sizes_synced()
            rest = [c for c, _ in first if not any(c is e for e in early)]
            if rest:
                with files.one_barrier():
                    for c in rest:
                        c._write_sizes()
                for c in rest:
                    c._chunks.sizes_synced()
            for c, nch in first:
                c._flush_finish(nch)
            if one_round:
                last._flush_finish(last_nch)
            elif last is not None:
                last._flush_commit(last_nch)

    @storage_op("close")
    def close(self):
        """Flush, then give back the directory's write lock (``blzarr.storage.locking``): the table and its
        columns become read-only.  As with Python's files, a table that is garbage-collected, or
        still open at interpreter exit, is flushed too (an error then is printed, not raised).

        Leaving a ``with`` block calls it: afterwards another process may write the directory, this
        object still reads it, and a write raises `blzarr.ReadOnlyError` saying to reopen it with
        ``blzarr.open(rootdir, mode='a')``.
        """
        if self._mode != "r" and self._rootdir is not None:
            self._why_readonly = (
                f"the ctable '{self._rootdir}' was closed (by close() or at the end of its `with` block), "
                f"which gave back the directory's write lock; reopen it with "
                f"blzarr.open({self._rootdir!r}, mode='a') to write again")
        if self._mode != "r" and self.__dict__.get("_broken") is None:
            self.flush()
        for c in self.cols.values():
            c.close()
        lock = self.__dict__.pop("_dirlock", None)
        if lock is not None:
            lock.release()
            if self._rootdir is not None and self._bytestore is None:
                self._watch_columns()   # another process may write from now on
        self._mode = "r"
        if getattr(self, "_attrs", None) is not None:
            self._attrs.mode = "r"
            self._attrs._why_readonly = self.__dict__.get("_why_readonly")

    def _rows_value(self, value):
        """`value` as a (broadcastable) structured array of this table's dtype."""
        dt = self.dtype
        if isinstance(value, CtableBase):
            value = value[:]
        if isinstance(value, (np.ndarray, np.void)) and value.dtype.names is not None:
            missing = set(dt.names) - set(value.dtype.names)
            if missing:
                raise ValueError(f"the value lacks fields {sorted(missing)}")
            out = np.empty(np.shape(value), dtype=dt)
            for n in dt.names:
                out[n] = value[n]
            return out
        try:
            if isinstance(value, list) and value and not isinstance(value[0], (tuple, list, np.void)):
                value = tuple(value)
            if isinstance(value, list):
                value = [tuple(v) if isinstance(v, list) else v for v in value]
            return np.array(value, dtype=dt)
        except (TypeError, ValueError) as e:
            raise ValueError(f"cannot convert the value into rows of dtype {dt}: {e}") from None

    def __setitem__(self, key, value):
        self._check_writable()
        if not self.cols.names:
            raise KeyError("cannot assign to a ctable with no columns")
        if isinstance(key, str):
            if key in self.cols._cols:
                self._replace_col(key, value)
                return
            key = self._positions_where(key, {}, None, sys._getframe(1))
        elif isinstance(key, tuple):
            if len(key) != 1:
                raise IndexError("multidimensional keys are not supported by ctable")
            key = key[0]
        vals = self._rows_value(value)
        if isinstance(key, carray):
            key = self._mask_positions(key) if key.dtype == bool else key[:]
        if isinstance(key, (list, np.ndarray)):
            key = np.asarray(key)
            if key.dtype == bool and len(key) != self._len:
                raise IndexError(f"boolean index has length {len(key)}, the ctable has {self._len} rows")
        cols = [(n, self.cols._cols[n]) for n in self.cols.names]
        journal = self._columns_journal([n for n, _ in cols])
        with journal:
            with contextlib.ExitStack() as undo:
                # an exception anywhere before the commit below undoes every column's assignment; the
                # rewritten chunks reach no reader before it (staged, `blzarr.storage.rewrite`)
                for _, col in cols:
                    undo.enter_context(col._undoable())
                for n, col in cols:
                    col[key] = vals[n]
                self._commit_rewrites(cols)
            if self.auto_flush or journal is not _NO_JOURNAL:
                self.flush()      # (on object storage, inside the journal: the columns are rewritten in place)

    def _columns_journal(self, names, single=False):
        """What makes a rewrite of the columns `names` one step: on object storage, where they are
        rewritten in place one after the other, a rollback journal (`blzarr.storage.tablejournal`);
        elsewhere nothing (staged rewrites and the rewrite record do it).  One column (`single`) has one
        too: its objects are rewritten one by one."""
        if self._bytestore is None or (len(names) < 2 and not single):
            return _NO_JOURNAL

        def rolled_back(ok):
            if not ok:
                self._broken = ("a rewrite of several columns failed and rolling it back failed too (the "
                                "next writer's open rolls it back)")
                return
            for n in names:     # the columns as they are again on the store
                self.cols._cols[n] = carray(rootdir=self._col_dir(n), mode="a", allow_pickle=True,
                                               storage_options=self._bytestore.storage_options)
        return tablejournal.journaled(self._bytestore, self._rootdirs_meta(), names, rolled_back)

    def _commit_rewrites(self, cols):
        """Make the chunks every column rewrote (their short last chunks too) visible in one step: one
        rewrite record for the whole table when that takes more than one switch."""
        if self._rootdir is None or self._bytestore is not None:
            return      # in memory, or on object storage (each column commits its own)
        stores = []
        base = None
        for n, col in cols:
            rd = self._col_dir(n)
            if rd is None or not col._ondisk:
                continue
            col._stage_last()
            if col._chunks.switch_units():
                stores.append((os.path.basename(rd), col._chunks))
                base = os.path.dirname(rd)
        if sum(st.switch_units() for _, st in stores) <= 1:
            for _, st in stores:
                st.switch_pending()
            return
        plans = {name: st.prepare_switch() for name, st in stores}
        rewrite.commit(rewrite.table_record_path(base), plans,
                       lambda: [st.switch_pending() for _, st in stores],
                       lambda: [col._publish() for _, col in cols if col._ondisk])


_NO_JOURNAL = contextlib.nullcontext()


# keyword arguments a ctable forwards to the carrays it creates
_CARRAY_KW = ("cparams", "expectedlen", "chunklen", "dflt", "format", "safe")


# ------------------------------------------------------------------------------------------- names
def check_name(name, what="column name"):
    """`name` as a str if it is usable as a column name (and directory name), else a ValueError."""
    if isinstance(name, bytes):
        try:
            name = name.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"{what} {name!r} is not ASCII") from None
    if not isinstance(name, str):
        raise ValueError(f"{what} must be a string, got {type(name).__name__} {name!r}")
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name
            or os.sep in name or (os.altsep and os.altsep in name) or os.path.isabs(name)
            or name in _RESERVED):
        raise ValueError(f"{what} {name!r} is not a safe file name for a column directory "
                         "(empty, '.', '..', path separators, absolute paths and "
                         f"{sorted(_RESERVED)} are refused)")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{what} {name!r} must be a valid Python identifier (and not a keyword), "
                         "so that expressions can use it")
    return name


_RESERVED = {ROOTDIRS_FILE, ATTRS_FILE}
