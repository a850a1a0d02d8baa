"""Writing a carray (`CarrayWrites`, a part of `carray`): append (full chunks compressed a batch at a
time on the pool), flush, close, resize and trim, assignment, and the undo log that leaves a carray and
its files as they were when a write fails midway (`_UndoLog`); the first write of a carray opened with
mode 'a', which takes the lock (`_start_writing`)."""

import atexit
import contextlib
import os
import pickle
import sys
import threading
import weakref

import numpy as np

from blzarr.containers import indexing as ix
from blzarr.query import stats as _stats
from blzarr.storage.arraymeta import ArrayMeta
from blzarr.containers.carray.read import CarrayBase, operator_index
from blzarr.storage.chunk import chunk, compress_array, quantize
from blzarr.errors import ConcurrentWriterError, FormatError, ReadOnlyError, StorageError, storage_op
from blzarr.storage.locking import lock_dir
from blzarr.runtime.parallel import run_ordered
from blzarr.storage.layouts import open_dir
from blzarr.storage import replace

WRITE_BATCH = 8         # full chunks handed to the store together by an append

# On-disk carrays that may write, so that what they hold unflushed is written at interpreter exit as
# Python's own files do (held weakly: a writer that is collected flushes in its __del__ instead)
_WRITERS = weakref.WeakSet()
_writers_lock = threading.Lock()
_at_exit_registered = False


def _after_fork_in_child():
    global _writers_lock
    _writers_lock = threading.Lock()    # a parent thread may have held it when the process forked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _in_event_loop():
    try:
        import asyncio
        asyncio.get_running_loop()
        return True
    except (ImportError, RuntimeError):
        return False


def _flush_writers_at_exit():
    for c in list(_WRITERS):
        try:
            c._flush_unattended()
        except Exception as e:
            print(f"blzarr: the unflushed changes of '{c._rootdir}' could not be written at "
                  f"interpreter exit: {type(e).__name__}: {e}", file=sys.stderr)


_NO_JOURNAL = contextlib.nullcontext()
_NOT_ONE = object()         # `_one_atom`: the value needs `append`'s conversion
_EXACT_INT = 2 ** 53        # Python ints up to this size convert to float64 exactly


class _UndoLog:
    """Stands for a carray's chunk sequence during one write call and remembers how to undo it: the
    compressed bytes of every chunk it replaces, and what the first appended chunk replaced on disk."""

    def __init__(self, chunks):
        self.__dict__.update(_c=chunks, replaced=[], appended_from=None, leftover=None)

    def __len__(self):
        return len(self._c)

    def __iter__(self):
        return iter(self._c)

    def __getitem__(self, i):
        return self._c[i]

    def __getattr__(self, name):
        return getattr(self._c, name)

    def __setattr__(self, name, value):
        setattr(self._c, name, value)

    def __setitem__(self, i, c):
        # a rewrite staged by this call alone is undone by dropping it (the files then stay as they were)
        fresh = not self._c.rewrite_pending(i)
        self.replaced.append((i, bytes(self._c[i].getdata()), fresh))
        self._c[i] = c

    def _first_append(self):
        if self.appended_from is None:
            n = len(self._c)
            self.__dict__["appended_from"] = n
            self.__dict__["leftover"] = self._c.stored_last(n)

    def append(self, c):
        self._first_append()
        self._c.append(c)

    def append_many(self, cs):
        self._first_append()
        self._c.append_many(cs)


def _python_values(value, probe, base):
    """`probe` (``np.asarray(value)``) converted to `base` as NumPy 2 converts Python values (lists,
    Python and NumPy scalars, not arrays) into an integer dtype: an integer out of its range raises
    OverflowError ("Python integer 1000 out of bounds for int8") instead of wrapping.  For a datetime
    or timedelta dtype, what NumPy's datetime64/timedelta64 accept (datetime objects, ISO strings,
    NumPy scalars of another unit) is converted as NumPy converts it."""
    if base.kind in "mM" and probe.dtype != base and probe.dtype.kind in "OSUmM":
        try:
            return np.asarray(value, dtype=base)
        except (TypeError, ValueError) as e:
            raise ValueError(f"cannot convert {value!r} to {base}: {e}") from None
    if base.kind in "iu" and probe.dtype != base and probe.dtype.kind in "iuO" \
            and not isinstance(value, np.ndarray):
        # a NumPy integer scalar is checked as a Python one (NumPy's `a[0] = np.int64(200)` raises too)
        return np.asarray(value.item() if isinstance(value, np.generic) else value, dtype=base)
    if base.kind in "iu" and probe.dtype.kind == "f" and not isinstance(value, (np.ndarray, np.generic)) \
            and all(type(v) is int for v in np.asarray(value, dtype=object).flat):
        # Python integers beyond int64 make NumPy guess float64; converted to `base` they overflow,
        # as NumPy says (OverflowError), instead of reading as floats refused by the casting rule
        return np.asarray(value, dtype=base)
    return probe


def _first_line(e):
    return (str(e).splitlines() or [type(e).__name__])[0]


def retire(col, why):
    """Make the carray object `col`, whose directory was replaced, removed or moved, read-only for
    good: no later flush or write of it may touch the files now at its path."""
    lock = col.__dict__.pop("_dirlock", None)
    if lock is not None:
        lock.release()
    col.__dict__.pop("_first_write", None)
    col._dirty = False
    col._mode = "r"
    col._why_readonly = why
    if getattr(col, "_ondisk", False):
        col._chunks.mode = "r"
        col._attrs.mode = "r"
        col._attrs._why_readonly = why


class CarrayWrites(CarrayBase):
    """Writing a `carray`."""

    _fast_for = None        # the atom `_fast_kind` and `_fast_range` were worked out for (`_one_atom`)

    # ---------------------------------------------------------------- flushing without flush()
    def _track_writer(self):
        """Called when a constructor returns: an on-disk carray that may write is flushed when it is
        garbage-collected or at interpreter exit, by this process only (not by a forked child)."""
        global _at_exit_registered
        if not self._ondisk or self._mode == "r":
            return
        self._owner_pid = os.getpid()
        with _writers_lock:
            _WRITERS.add(self)
            if not _at_exit_registered:
                # registered after the object store's client (when there is one) was imported, so it
                # runs before that client's own exit handlers stop its event loop
                atexit.register(_flush_writers_at_exit)
                _at_exit_registered = True

    def _flush_unattended(self):
        """Flush what a writer nobody flushed still holds (at GC or exit); not one whose last write or
        flush raised (its caller was told, and a retry here would only repeat the error)."""
        d = self.__dict__
        if not d.get("_dirty") or d.get("_owner_pid") != os.getpid() or d.get("_mode", "r") == "r" \
                or d.get("_flush_failed"):
            return
        if self._bytestore is None and not os.path.isdir(self._rootdir):
            return      # its directory was removed under it: there is nowhere to flush to
        if self._bytestore is not None and _in_event_loop():
            # collected on an object store client's event-loop thread, where its blocking calls
            # cannot run: say what is lost rather than fail there
            print(f"blzarr: '{self._rootdir}' was collected on an event-loop thread with unflushed "
                  "changes, which were not written (call flush() or close())", file=sys.stderr)
            return
        lock = d.get("_dirlock")
        if self._bytestore is None and lock is not None and not lock.held:
            # its lock was collected first (both in one garbage cycle): take it again for the flush
            self._dirlock = lock_dir(self._rootdir)
            try:
                self.flush()
            finally:
                self.__dict__.pop("_dirlock").release()
            return
        self.flush()

    def __del__(self):
        self._flush_unattended()

    # ---------------------------------------------------------------- writing
    def _split(self, length):
        """(full chunks, atoms in the short last chunk) of `length` atoms."""
        return (length, 0) if self._isobj else divmod(length, self._chunklen)

    def _load_stats(self, nchunks):
        """meta/stats is read when the statistics are first used (`_stats`), not at open: a read
        that plans nothing needs none of it.  What it holds is checked against the chunks'
        fingerprints before a query trusts it, so reading it later than the open is safe.  On object
        storage it is read at once: there the open fetches it with the other meta files."""
        if self.__dict__.get("_stats_v") is not None:
            if self._bytestore is not None:
                self._read_stats_file(nchunks)
            else:
                self.__dict__["_stats_due"] = nchunks

    def _read_stats_file(self, nchunks):
        raw = self._chunks.read_stats()
        st = _stats.decode(raw, self._atom, self._chunklen) if raw is not None else None
        if st is not None:
            st.truncate(nchunks)
            self.__dict__["_stats_v"] = st

    def _start_writing(self):
        """The first call that writes to a carray opened with mode 'a' (through it, its attributes or
        its metalayers) comes here first: it takes the directory's lock (`LockError`, naming the
        directory, when another process writes it), then does what opening for writing does (the
        store repairs what a killed writer left, chunks past meta/sizes are dropped) and reads again
        what another process may have rewritten since the carray was opened (the short last chunk,
        the statistics, the attributes).  A carray another process made longer or shorter since
        raises `ConcurrentWriterError` (reopen it to write)."""
        with self._lock:
            if self._mode == "r" or self.__dict__.get("_first_write") is None:
                return
            self._become_writer(self._load_for_writing)
            self._chunks.gate_writes(None)

    def _load_for_writing(self):
        # under the directory's lock (`_become_writer`)
        w = self._watch
        if w is not None and w.changed():
            # another process committed since this object loaded its state: load it again (its
            # caches included) so that this write never puts back values read before; a new
            # length is refused (the caller decided what to write from the old one)
            seen = self._len
            self._reload()
            if self._len != seen:
                raise ConcurrentWriterError(
                    f"'{self._rootdir}' was changed by another writer (another process, or another "
                    f"object of this process) since this object read it (it held {seen} items, it holds {self._len}): nothing was written; write "
                    f"again (this object now shows the new length), or reopen it (blzarr.open)")
        fresh = open_dir(self._rootdir, "a", None)       # repairs (under the lock)
        meta = ArrayMeta.read(fresh, self._rootdir, self._allow_pickle)
        if meta.length != self._opened_len:
            raise ConcurrentWriterError(
                f"'{self._rootdir}' was changed by another writer (another process, or another "
                f"object of this process) since this object opened it (it held {self._opened_len} items, it holds {meta.length}): reopen it "
                f"(blzarr.open) to write")
        nchunks, nleft = self._split(meta.length)
        nstored = nchunks + (1 if nleft else 0)
        if getattr(fresh, "missing_tail", None) is not None and fresh.nchunks < nstored:
            fresh.missing_tail(nstored)             # as open_chunks does
        # the same directory object writes from now on (metalayer objects handed out hold it);
        # reads in flight on other threads finish on the descriptors they hold
        self._chunks.adopt(fresh)
        self._chunks.mode = "a"
        self._chunks.set_nchunks(nchunks)
        self._chunks.remove_stray(nstored)
        self._len, self._nleft = meta.length, nleft
        self._blockcache = None
        if nleft:
            self._last = self._new_last()
            self._load_leftover(nchunks, nleft)
        self._load_stats(nchunks)

    def _check_writable(self):
        if self._mode == "r":
            why = self.__dict__.get("_why_readonly")
            if why is not None:
                raise ReadOnlyError(f"cannot modify data: {why}")
            raise ReadOnlyError("cannot modify data: the carray was opened with mode 'r'"
                                + (f" ('{self._rootdir}')" if self._rootdir else ""))
        if self.__dict__.get("_first_write") is not None:
            self._start_writing()       # mode 'a': the lock is taken at the first write
        self._check_not_broken()
        err = getattr(self._last, "_error", None)
        if err is not None:
            raise FormatError(f"cannot modify '{self._rootdir}': its short last chunk cannot be read ({err}); "
                              f"nothing was written.  Copy what is readable to a new directory with "
                              f"blzarr.salvage(src, dst) (or `blzarr convert --salvage SRC DST`) and write there")

    def _append_full_chunks(self, arr, pos):
        """Append the full chunks of arr[pos:], in order; returns the position after the last one.

        Every thread compresses chunks (the codec releases the GIL), each straight from `arr` into its
        own bytes, while this thread hands the finished ones to the store in order (on disk: writes
        them), so the store sees the same sequence of appends as one thread would make and the writes
        overlap the compression of the next chunks."""
        cl = self._chunklen
        nfull = (len(arr) - pos) // cl
        ts, cp, atom, store, st = self._typesize, self._cparams, self._chunk_atom, self._chunks, self._stats
        first = len(store)
        pending = []
        # the entries of the new chunks, written by the compressing threads (past st.n: not yet known)
        slots = st.slots(first + nfull, arr.dtype) if st is not None and st.n <= first else None

        def compress(k):
            piece = arr[pos + k * cl:pos + (k + 1) * cl]
            if slots is not None:
                # the statistics in the compressing call, first: their pass brings the chunk into this
                # core's cache and the compressor reads it from there (bench/FINDINGS.md)
                return compress_array(piece, ts, cp, minmax=(slots[0], slots[1], first + k, slots[2]))
            return compress_array(piece, ts, cp), self._stats_of(piece) if st is not None else None

        def put(k, done):
            # handed to the store WRITE_BATCH at a time: on disk, BLZ writes such a run in a few calls
            pending.append(chunk(None, atom, _data=done[0]))
            if slots is not None:
                st.put_counted(first + k, done[1], cl)
            elif st is not None:
                st.put(first + k, done[1])
            if len(pending) >= WRITE_BATCH or k == nfull - 1:
                store.append_many(pending)
                del pending[:]
        run_ordered(compress, put, nfull)
        return pos + nfull * cl

    def _new_chunk(self, arr, minmax=None):
        """The chunk of `arr`; with `minmax` (`compress_array`'s), (chunk, count of NaN/NaT)."""
        if minmax is None:
            return chunk(None, self._chunk_atom, _data=compress_array(arr, self._typesize, self._cparams))
        data, nan = compress_array(arr, self._typesize, self._cparams, minmax=minmax)
        return chunk(None, self._chunk_atom, _data=data), nan

    def _coerce_input(self, array):
        """`array` as a contiguous array of atoms, or a clear error; never modifies self."""
        if self._isobj:
            arr = np.empty(len(array), dtype=object) if not isinstance(array, np.ndarray) else array
            if not isinstance(array, np.ndarray):
                arr[:] = list(array)
            return arr.reshape(-1)
        if isinstance(array, CarrayBase):
            array = array[:]
        arr = _python_values(array, np.asarray(array), self._atom.base)
        tail = self._atom.shape
        if arr.dtype != self._atom.base:
            self._check_cast(arr, "append")
            arr = arr.astype(self._atom.base)
        if arr.shape[1:] != tail or arr.ndim == 0:
            if arr.ndim == len(tail):
                arr = arr.reshape((1,) + arr.shape)
            if arr.shape[1:] != tail:
                try:
                    arr = np.broadcast_to(arr, (arr.shape[0] if arr.ndim else 1,) + tail)
                except ValueError:
                    raise ValueError(
                        f"array of shape {np.shape(array)} does not fit atoms of shape {tail}") from None
        return np.ascontiguousarray(arr)

    @storage_op("append to")
    def append(self, array):
        """Append the atoms of `array` (anything NumPy can convert) at the end."""
        self._check_writable()
        arr = self._coerce_input(array)
        with self._lock:
            if not self._isobj and len(arr) < self._chunklen - self._nleft:
                # only copied into the free end of the leftover buffer, nothing written: nothing to undo
                self._append(arr)
                return
            # the atoms in the leftover buffer change only when the append fills it into a chunk
            with self._undoable():
                self._append(arr)

    def _one_atom(self, value):
        """`value` (one row's item for this column) when it can go into the leftover buffer as it is
        (see `_put_atom`), else `_NOT_ONE` (the caller converts it as `append` does).  Only values
        whose conversion cannot round, wrap or be refused qualify: a Python int inside an integer
        dtype's range (or exactly representable in float64), a Python float for float64, a bool for
        bool, a NumPy scalar of this very dtype."""
        if self._fast_for is not self._atom:
            base, kind = self._atom.base, ""
            if not self._isobj and not self._atom.shape:
                kind = base.kind if base.kind in "iub" else "f" if base == np.float64 else ""
            if kind in ("i", "u"):
                info = np.iinfo(base)
                self._fast_range = (int(info.min), int(info.max))
            self._fast_kind, self._fast_for = kind, self._atom
        kind = self._fast_kind
        if not kind:
            return _NOT_ONE
        t = type(value)
        if t is int:
            if kind == "f":
                return value if -_EXACT_INT <= value <= _EXACT_INT else _NOT_ONE
            if kind == "b":
                return _NOT_ONE
            lo, hi = self._fast_range
            return value if lo <= value <= hi else _NOT_ONE     # (out of range: `append` raises)
        if t is float:
            return value if kind == "f" else _NOT_ONE
        if t is bool:
            return value if kind == "b" else _NOT_ONE
        if isinstance(value, np.generic) and value.dtype == self._atom.base:
            return value
        return _NOT_ONE

    def _room_for_one(self):
        """Whether one more atom goes into the leftover buffer without filling it into a chunk (then
        appending it writes nothing, and `_put_atom` is all `append` does)."""
        return not self._isobj and self._nleft + 1 < self._chunklen

    def _put_atom(self, value):
        """Append one atom that `_one_atom` let through, when `_room_for_one()`: what `append` does
        for it, without making an array of it."""
        with self._lock:
            if self._nleft + 1 < self._chunklen:
                self._dirty = True
                self._blockcache = None
                self._last[self._nleft] = value
                self._nleft += 1
                self._len += 1
                return
        # another thread's append filled the buffer since `_room_for_one`: the general way
        self.append(np.asarray(value, dtype=self._atom.base).reshape(1))

    def _append(self, arr):
        n = len(arr)
        if n == 0:
            return
        self._dirty = True
        self._blockcache = None
        if self._isobj:
            for obj in arr:
                data = np.frombuffer(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL), dtype="u1")
                self._chunks.append(self._new_chunk(data))
            self._len += n
            return
        cl = self._chunklen
        pos = 0
        if self._nleft:
            take = min(cl - self._nleft, n)
            self._last[self._nleft:self._nleft + take] = arr[:take]
            pos = take
            if self._nleft + take == cl:
                self._put_chunk(len(self._chunks), self._last)
                self._nleft = 0
            else:
                self._nleft += take
        if n - pos >= cl:
            pos = self._append_full_chunks(arr, pos)
        if pos < n:
            rest = n - pos
            self._last[:rest] = arr[pos:]
            self._nleft = rest
        self._len += n

    def _check_not_broken(self):
        why = self.__dict__.get("_broken")
        if why is not None:
            raise StorageError(f"'{self._rootdir}' cannot be written through this object: {why}; "
                               f"nothing more was written (its files hold the last flush): reopen it "
                               f"with blzarr.open({self._rootdir!r}, mode='a')")

    def _stage_last(self):
        """Write the short last chunk as a pending rewrite (switched with the others: a table's
        assignment commits every column's together)."""
        if self._ondisk and self._nleft and self._dirty and not self._isobj:
            with self._lock:
                c = self._new_chunk(self._last[:self._nleft])
                self._chunks.put_last(len(self._chunks), c.getdata())

    @storage_op("flush")
    def flush(self):
        """Write the leftover atoms and the sizes to disk (no-op in memory, or when nothing changed)."""
        with self._lock:
            nch = self._flush_data()
            if nch is not None:
                self._flush_commit(nch)

    def _flush_data(self):
        """The first half of `flush`: the leftover atoms written as the short last chunk and every
        chunk made durable (in a `files.one_barrier`, that last sync may wait for its end).  Returns
        what `_flush_commit` takes, None when there is nothing to flush."""
        if not self._ondisk or self._mode == "r" or not self._dirty:
            return None
        self._check_not_broken()
        self._flush_failed = True
        with self._lock:
            # the order keeps every flushed atom through a crash at any point: the data first (the
            # short last chunk may then hold more atoms than meta/sizes counts, which opening
            # tolerates), then meta/sizes (replaced atomically), then the chunks left past the end
            nch = len(self._chunks)
            if self._nleft:
                c = self._new_chunk(self._last[:self._nleft])
                self._chunks.put_last(nch, c.getdata())
            self._chunks.sync(self._publish)    # the chunks are durable before the sizes that count them
            return nch

    def _flush_commit(self, nch):
        """The second half of `flush`, once the chunks are durable: meta/sizes, then
        `_flush_finish`."""
        with self._lock:
            self._write_sizes()
            self._flush_finish(nch)

    def _flush_finish(self, nch):
        """The end of `flush`, once meta/sizes is durable (a table's columns write theirs in a
        `files.one_barrier`, then finish): the chunks left past the end removed, the statistics
        stored, the commit published."""
        with self._lock:
            if not self._nleft or self.__dict__.get("_stale_chunks", True):
                self._chunks.remove_from(nch + (1 if self._nleft else 0))
            self._stale_chunks = False
            self._dirty = False
            self._flush_failed = False
            self._store_stats()
            self._publish()

    @storage_op("close")
    def close(self):
        """Flush, then give back the directory's write lock (``blzarr.storage.locking``): the carray becomes
        read-only.  As with Python's files, a carray that is garbage-collected, or still open at
        interpreter exit, is flushed too (an error then is printed, not raised).

        Leaving a ``with`` block calls it: afterwards another process may write the directory, this
        object still reads it, and a write raises `blzarr.ReadOnlyError` saying to reopen it with
        ``blzarr.open(rootdir, mode='a')``.  In memory, closing changes nothing.
        """
        if self._ondisk and self._mode != "r":
            if self.__dict__.get("_broken") is None:
                self.flush()
                if self._chunks.switch_units():
                    # rewrites made through the chunk store without marking this object changed
                    self._chunks.sync(self._publish)
                self._chunks.settle()
            self._why_readonly = (
                f"the carray '{self._rootdir}' was closed (by close() or at the end of its `with` block), "
                f"which gave back the directory's write lock; reopen it with "
                f"blzarr.open({self._rootdir!r}, mode='a') to write again")
        lock = self.__dict__.pop("_dirlock", None)
        self._stop_publishing()
        if lock is not None:
            lock.release()
            if self.__dict__.get("_watch") is None:
                # another process may write from now on: this object, which still reads, watches
                seen = self._start_watching()
                if seen is not None:
                    self._watch_layout(self._chunks.format)
                    self._watch.accept(seen)
        if self._ondisk:
            self._mode = "r"
            self._chunks.mode = "r"
            self._attrs.mode = "r"
            self._attrs._why_readonly = self.__dict__.get("_why_readonly")

    @storage_op("resize")
    def resize(self, nitems):
        """Grow (filling with `dflt`) or shrink to `nitems` atoms."""
        self._check_writable()
        nitems = operator_index(nitems, "nitems")
        if nitems < 0:
            raise ValueError(f"nitems must be >= 0, got {nitems}")
        if nitems > self._len:
            if self._isobj:
                self.append([None] * (nitems - self._len))
                self.flush()
                return
            grow = nitems - self._len
            step = max(self._chunklen, 1)
            while grow > 0:
                k = min(grow, step * 16)
                block = np.empty((k,) + self._atom.shape, dtype=self._atom.base)
                block[...] = self._dflt
                with self._lock:
                    self._append(block)
                grow -= k
            self.flush()
        elif nitems < self._len:
            self.trim(self._len - nitems)

    @storage_op("trim")
    def trim(self, nitems):
        """Remove the last `nitems` atoms (a negative number grows, like resize)."""
        self._check_writable()
        nitems = operator_index(nitems, "nitems")
        if nitems < 0:
            return self.resize(self._len - nitems)
        if nitems > self._len:
            raise ValueError(f"cannot trim {nitems} atoms from a carray of {self._len}")
        if nitems == 0:
            return
        with self._lock:
            self._last      # the stored short chunk decoded (if due) before the chunks change under it
            self._blockcache = None
            newlen = self._len - nitems
            self._dirty = True
            if not self._ondisk:
                if self._isobj:
                    self._chunks.truncate(newlen)
                    self._len = newlen
                    return
                cl = self._chunklen
                keep_full, newleft = divmod(newlen, cl)
                if keep_full < len(self._chunks):
                    if newleft:
                        tail = self._chunks[keep_full].decompress()
                        self._last[:newleft] = tail[:newleft]
                    self._chunks.truncate(keep_full)
                    if self._stats is not None:
                        self._stats.truncate(keep_full)
                self._nleft = newleft
                self._last[newleft:] = np.zeros((), dtype=self._last.dtype)  # void dtypes take no 0
                self._len = newlen
                return
            # on disk, crash-safe: the new length goes to meta/sizes first (the chunks it no longer
            # counts stay readable meanwhile), then flush rewrites the short last chunk and removes
            # the chunks past the end
            first = newlen if self._isobj else newlen // self._chunklen
            self._chunks.forget_from(first)
            self._truncate_view(newlen)
            self._last[self._nleft:] = np.zeros((), dtype=self._last.dtype)  # void dtypes take no 0
            self._stale_chunks = True
            self._write_sizes()
        self.flush()

    def __setitem__(self, key, value):
        self._check_writable()
        if self._isobj:
            raise NotImplementedError("assignment to object carrays is not supported")
        if isinstance(key, str):
            key = self._selection(key, sys._getframe(1)).evaluate()
        if isinstance(key, tuple):
            if len(key) == 0:
                key = slice(None)
            elif len(key) == 1:
                key = key[0]
            else:
                # read the rows the first key selects, assign into them, write them back
                first, rest = key[0], key[1:]
                if isinstance(first, (int, np.integer)):
                    row = self[first]
                    row[rest] = value
                    self[first] = row
                    return
                rows = self[first]
                rows[(slice(None),) + rest] = value
                self[first] = rows
                return
        journal = self._rewrite_journal(key)
        nch = None
        with journal:
            self._assign(key, value)
            if journal is not _NO_JOURNAL:
                # flushed inside the journal, whose end is the commit; the rest of the flush (the
                # statistics) after it, so that its failure undoes nothing committed
                with self._lock:
                    nch = self._flush_data()
                    if nch is not None:
                        self._write_sizes()
        if nch is not None:
            self._flush_finish(nch)

    def _rewrite_journal(self, key):
        """What makes an assignment one step where it rewrites more than one object in place, one
        after the other (object storage: chunk objects of the bcolz layout, superchunk files of BLZ,
        each uploaded whole): a rollback journal (`replace.journaled`); elsewhere, or for one object,
        nothing (locally, staged rewrites and the rewrite record do it)."""
        if self._bytestore is None or not self._ondisk or not len(self._chunks) or replace.is_fresh(self._rootdir):
            return _NO_JOURNAL
        span = self._stored_span(key)
        if span is None:
            return _NO_JOURNAL
        per = 1 if self._chunks.format == "bcolz" else max(int(self._chunks.partition_chunks()), 1)
        if span[0] // per == span[1] // per:
            return _NO_JOURNAL      # one object: replaced whole by its upload

        def rolled_back(ok):
            # the objects hold the state before the assignment again (or will, once the next writer
            # opens): this object may hold the assignment's values, so it writes nothing more
            self._broken = ("an assignment to stored chunks failed and was rolled back on the store" if ok else
                            "an assignment to stored chunks failed and rolling it back failed too (the next "
                            "writer's open rolls it back)") + ": open the carray again"
        return replace.journaled(self._bytestore, rolled_back)

    def _stored_span(self, key):
        """(first, last) chunk an assignment to `key` may change, the short last chunk counted, when
        that reaches a stored full chunk; None when it surely does not (cheap keys only)."""
        first = len(self._chunks) * self._chunklen
        cl = self._chunklen
        if isinstance(key, (int, np.integer)):
            i = int(key) + self._len if key < 0 else int(key)
            return (i // cl, i // cl) if 0 <= i < first else None
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            n = ix.slice_length(start, stop, step)
            lo, hi = sorted((start, start + (n - 1) * step))
            return (lo // cl, hi // cl) if n > 0 and lo < first else None
        return 0, len(self._chunks)

    def _assign(self, key, value):
        with self._lock, self._undoable(leftover=self._may_touch_leftover(key)):
            self._blockcache = None
            if isinstance(key, (int, np.integer)):
                i = ix.normalize_int(key, self._len)
                self._assign_positions(np.array([i]), self._values(value, 1, scalar=True))
            elif isinstance(key, slice):
                start, stop, step = key.indices(self._len)
                n = ix.slice_length(start, stop, step)
                if n == 0:
                    return
                vals = self._values(value, n)
                if step < 0:
                    start, step, vals = start + (n - 1) * step, -step, vals[::-1]
                if step == 1:
                    self._assign_range(start, start + n, vals)
                else:
                    self._assign_positions(np.arange(start, start + n * step, step), vals)
            else:
                if isinstance(key, CarrayBase):
                    key = key[:]
                pos = ix.positions_from_array(key, self._len)
                if pos.size == 0:
                    return
                self._assign_positions(pos, self._values(value, pos.size))

    @contextlib.contextmanager
    def _undoable(self, leftover=True):
        """Run a write (append, __setitem__) so that an exception in its middle (a full disk, an
        interrupt) leaves this carray, and its files, as they were before it.  `leftover` False says
        the write cannot change the atoms already in the leftover buffer (which are then not copied)."""
        chunks = self._chunks
        if isinstance(chunks, _UndoLog):      # nested: the outer call undoes
            yield
            return
        keep = leftover and not self._isobj and self._nleft
        saved = (self._len, self._nleft, self._last[:self._nleft].copy() if keep else None,
                 self.__dict__.get("_dirty"))
        log = self._chunks = _UndoLog(chunks)
        try:
            yield
        except BaseException as e:
            self._chunks = chunks
            self._flush_failed = True      # nothing is flushed behind the back of a caller told of an error
            if getattr(e, "blzarr_committed", False):
                # the write was published (a rewrite record names it) before the error: the files
                # hold its result, which the next writer's open completes; this object may not go on
                self._broken = (f"a write was committed but not completed ({_first_line(e)}); the "
                                "next writer's open completes it")
                raise
            try:
                self._undo(log, saved)
            except BaseException as undo_error:
                # half undone: what this object holds no longer matches its files, so nothing it
                # would write may reach them (its rewrites not switched yet are dropped); the files
                # themselves still hold the last flush
                self._broken = (f"a write failed ({_first_line(e)}) and undoing it failed too "
                                f"({_first_line(undo_error)})")
                try:
                    chunks.abandon_pending()
                except BaseException:
                    pass
            raise
        finally:
            self._chunks = chunks

    def _may_touch_leftover(self, key):
        """False when assigning to `key` surely leaves the leftover buffer alone (cheap keys only)."""
        first = len(self._chunks) * self._chunklen
        if isinstance(key, (int, np.integer)):
            return not -self._len <= key < first - self._len and not 0 <= key < first
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            return max(start, stop) > first - (step < 0)
        return True

    def _undo(self, log, saved):
        self._blockcache = None
        chunks = log._c
        n0 = log.appended_from
        if n0 is not None:
            chunks.undo_appends(n0, log.leftover)
        for i, data, fresh in reversed(log.replaced):
            if i < len(chunks) and not (fresh and chunks.drop_rewrite(i)):
                chunks[i] = chunk(None, self._chunk_atom, _data=data)
            if self._stats is not None:
                self._stats.invalidate(i)   # computed again from the chunk when a query needs it
        if self._stats is not None:
            self._stats.truncate(len(chunks))
        length, nleft, last, dirty = saved
        self._len, self._nleft = length, nleft
        if last is not None:
            self._last[:nleft] = last
        if dirty is not None:
            self._dirty = dirty

    def _check_cast(self, arr, doing):
        """NumPy's 'same_kind' casting rule for the values written (integers and booleans also go into
        any number: their range is checked, `_python_values`); ``safe=False`` skips it."""
        base = self._atom.base
        if self.safe and arr.size and not np.can_cast(arr.dtype, base, "same_kind") \
                and not (arr.dtype.kind in "iub" and base.kind in "iufcb"):
            raise TypeError(f"cannot {doing} values of dtype {arr.dtype} to a carray of {base}: blzarr "
                            f"casts as NumPy's 'same_kind' rule allows (not floats to integers, nor text "
                            f"to numbers); convert them first, e.g. np.asarray(values).astype({str(base)!r})")

    def _values(self, value, n, scalar=False):
        value = value[:] if isinstance(value, CarrayBase) else value
        arr = _python_values(value, np.asarray(value), self._atom.base)
        shape = (n,) + self._atom.shape
        try:
            np.broadcast_to(arr, shape)     # a shape that does not fit is told before a dtype that does not
        except ValueError:
            raise ValueError(f"cannot assign values of shape {arr.shape} to a selection of shape "
                             f"{shape if not scalar else self._atom.shape}") from None
        if arr.dtype != self._atom.base:
            self._check_cast(arr, "assign")
            try:
                arr = arr.astype(self._atom.base)
            except (TypeError, ValueError) as e:
                raise TypeError(f"cannot assign values of dtype {arr.dtype} to a carray of {self._atom.base}: {e}") from None
        return np.broadcast_to(arr, shape)

    def _assign_range(self, start, stop, vals):
        self._dirty = True
        cl = self._chunklen
        nfull = len(self._chunks)
        for n, lo, hi, off in ix.chunk_pieces(start, stop, cl):
            piece = vals[off:off + hi - lo]
            if n == nfull:
                self._last[lo:hi] = piece
            elif lo == 0 and hi == cl:
                self._put_chunk(n, np.ascontiguousarray(piece))
            else:
                data = self._chunks[n].decompress()
                data[lo:hi] = piece
                self._put_chunk(n, data)

    def _assign_positions(self, pos, vals):
        self._dirty = True
        nfull = len(self._chunks)
        for cid, sel, local in ix.group_by_chunk(pos, self._chunklen):
            if cid == nfull:
                self._last[local] = vals[sel]
            else:
                data = self._chunks[cid].decompress()
                data[local] = vals[sel]
                self._put_chunk(cid, data)

    def _stats_of(self, arr):
        """`block_stats` of the values of `arr` as a chunk stores them (after the quantize filter)."""
        if self._cparams.quantize and arr.dtype.kind == "f":
            arr = quantize(arr, self._cparams.quantize)
        return _stats.block_stats(arr)

    def _put_chunk(self, n, arr):
        """Store `arr` (a full chunk of atoms) as chunk n (n == nchunks appends), with its statistics."""
        st = self._stats
        slots = None
        if st is not None:
            st.invalidate(n)        # a write that fails half way leaves the entry unknown, not stale
            slots = st.slots(n + 1, arr.dtype)
        if slots is not None:
            # the statistics in the compressing call (its first pass; the chunk is then in cache)
            c, nan = self._new_chunk(arr, (slots[0], slots[1], n, slots[2]))
        else:
            got = self._stats_of(arr) if st is not None else None
            c = self._new_chunk(arr)
        if n == len(self._chunks):
            self._chunks.append(c)
        else:
            self._chunks[n] = c
        if slots is not None:
            st.put_counted(n, nan, len(arr))
        elif st is not None:
            st.put(n, got)

    def _store_stats(self):
        """Write meta/stats when the statistics changed (after the chunks and meta/sizes: a file
        older than the chunks is found stale by the chunks' fingerprints, never trusted)."""
        st = self._stats
        if st is None or not self._ondisk or self._mode == "r":
            return
        if self.__dict__.get("_first_write") is not None:
            return      # mode 'a' before its first write reads only: it changes no file
        if not st.dirty and not st.carries(self._chunks.moved_fingerprints()):
            return      # (object storage: a file uploaded again changes its chunks' fingerprints)
        st.take_fingerprints(self._chunks)
        self._chunks.write_stats(_stats.encode(st, len(self._chunks)))
        st.dirty = False
