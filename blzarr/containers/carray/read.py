"""Reading a carray (`CarrayReads`, a part of `carray`): ranges of atoms decoded several chunks at once,
the scalar path that decodes one Blosc block, NumPy's indexing (slices, steps, tuples, integer and
boolean arrays, expressions), take, iteration, where and wheretrue."""

import itertools
import sys
import time
import warnings

import numpy as np

from blzarr._chunk import block_at
from blzarr.query import chunked_eval as _ce
from blzarr.query import fused
from blzarr.containers import indexing as ix
from blzarr.query import planner
from blzarr.query import rules
from blzarr.query.selection import Query, Selection
from blzarr.storage.blockcache import disk_blocks, new_generation
from blzarr.storage.chunk import take_chunks
from blzarr.runtime.params import get_nthreads
from blzarr.runtime.parallel import run_all

# kinds whose elements come out as Python scalars (as in bcolz)
_PY_KINDS = "biufcSUMmV"
# dtypes whose memoryview yields the same Python scalars as tolist(), without building the list
_MV_CHARS = frozenset("?bBhHiIlLqQfd")



class CarrayBase:
    """The base of `carray` and of its parts: ``isinstance(x, CarrayBase)`` is how the parts, which the
    carray module imports, ask whether `x` is a carray."""

    @property
    def _last(self):
        """The uncompressed short last chunk (its first `_nleft` atoms count).  An on-disk carray
        decodes its stored one here, at the first use (`_load_leftover` marks it due): a read of
        other rows needs none of it."""
        d = self.__dict__
        if "_last_due" in d:
            with self._lock:
                due = d.get("_last_due")
                if due is not None:
                    self._decode_leftover(*due)
                    d.pop("_last_due", None)
        return d["_last_v"]

    @_last.setter
    def _last(self, buf):
        d = self.__dict__
        d.pop("_last_due", None)
        d["_last_v"] = buf


def pin_version(obj):
    """Start a public read call of `obj`, a watched carray or ctable, on one committed version: the
    latest is loaded first unless a call of another thread is in flight on the object (that call
    reads one version, this one reads the same).  The count of calls in flight (`_pinned`) changes
    under the object's version lock, which a reload of the object holds too, so no reload starts
    while a call is in flight.  Returns the lock to give `unpin_version`."""
    lock = obj._vlock
    with lock:
        if not obj._pinned:
            obj._fresh()
        obj._pinned += 1
    return lock


def unpin_version(obj, lock):
    with lock:
        obj._pinned -= 1


# times a read call is run again when another process committed while it read, before it gives up
READ_AGAIN = 16


def _moved(obj):
    """Whether a writer committed since `obj` (a watched carray or ctable) loaded its state: the
    generation of each mapped commit record (no system call), the whole check where none is mapped."""
    w = obj._watch
    if not w:
        return False        # it became the writer meanwhile (its first write): what it holds is current
    watches = [c._watch for c in obj.cols._cols.values() if c._watch is not None] if w is True else [w]
    for w in watches:
        v = w.view
        # (a polled view looks now and then: the end of a call looks now)
        if (v[1] != w.seen) if v is not None and not w.polled else w.changed():
            return True
    return False


def read_again(obj, attempt):
    """At the end of attempt `attempt` (0, 1...) of a public read call of the watched `obj` (still
    pinned): whether to run it again on the next version, because a writer committed while it read
    (its chunks may then come from both versions).  A call beside another thread's call in flight
    reads what that one reads: it cannot load another version, so it is not run again; nor is a
    column's call inside a call of its table (the table's call is).  From the third attempt on, a
    writer still at work (columns flushed one after the other) is given a moment, doubled each time
    (up to 50 ms): a writer flushing without pause may otherwise span every attempt."""
    w = obj._watch
    if w and w is not True:      # a carray's Watch (a table: True; the writer: None or False)
        v = w.view
        if v is not None and not w.polled and v[1] == w.seen:
            return False        # the common case: nothing committed meanwhile (one compare)
    if obj._pinned != 1:
        return False
    owner = getattr(obj, "_owner", None)
    table = owner() if owner is not None else None
    if table is not None and table._pinned:
        return False
    if not _moved(obj):
        return False
    if attempt >= 2:
        time.sleep(min(0.05, 0.001 * 2 ** (attempt - 2)))
    return True


def read_one_version(obj, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` as one public read call of the watched `obj`: pinned to one committed
    version, and run again on the next one while a writer committed during it (`read_again`)."""
    for attempt in range(READ_AGAIN):
        lock = pin_version(obj)
        try:
            out = fn(*args, **kwargs)
            again = read_again(obj, attempt)
        finally:
            unpin_version(obj, lock)
        if not again:
            return out
    return spanned_too_often(obj, out)


def spanned_too_often(obj, out):
    """What a read call of `obj` returns when another process committed during each of its
    READ_AGAIN attempts: the last attempt's result, which may mix two versions, with a warning that
    says so.  Failing the call instead would make a reader unusable beside a writer that commits
    faster than one read takes (a live appender and a long read); a silent mix would hide it."""
    warnings.warn(f"'{obj.rootdir}' was changed by another process during each of {READ_AGAIN} readings "
                  "of one call: the result is the last reading, which may mix two versions",
                  RuntimeWarning, stacklevel=3)
    return out


def _expand_ellipsis(key, ndim):
    """`key` (a tuple) with its one Ellipsis replaced by full slices; NumPy's error for several."""
    where = [k for k, v in enumerate(key) if v is Ellipsis]
    if len(where) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(v.ndim if isinstance(v, np.ndarray) and v.dtype == bool else 1
               for v in key if v is not Ellipsis)
    k = where[0]
    return key[:k] + (slice(None),) * max(0, ndim - used) + key[k + 1:]


class _CarrayIter(itertools.chain):
    """What ``iter(c)`` and ``c.iter(...)`` return: an iterator over the elements (at C speed, it is an
    `itertools.chain`) that, like bcolz's, has ``.iter(start, stop, step, limit, skip)`` itself, to
    iterate the whole carray again over another range."""

    def iter(self, start=0, stop=None, step=1, limit=None, skip=0, dtype=None):
        return self._carray.iter(start, stop, step, limit, skip, dtype)

    def __getattr__(self, name):
        # bcolz's iterators are the carray itself, so code calls the carray's methods on them (bcolz's
        # own bench: ``count=c.wheretrue().sum()``, the whole carray's sum): those reach the carray
        if name == "_carray":
            raise AttributeError(name)
        return getattr(self._carray, name)


def _elements(block):
    """The elements of a block, as iteration yields them: Python scalars for plain kinds (bcolz)."""
    if block.ndim == 1 and block.dtype.kind in _PY_KINDS:
        if block.dtype.char in _MV_CHARS and block.dtype.isnative and block.flags.c_contiguous:
            return iter(memoryview(block))      # a quarter faster than iterating tolist()
        return block.tolist()
    return iter(block)


def _handed_out(parts, skip, limit):
    """The elements (`_elements`) of the arrays `parts` in turn, the first `skip` of them left out and
    at most `limit` (None: all) given (`rules.skip_limit`)."""
    for vals in rules.skip_limit(parts, skip, limit):
        yield _elements(vals)


def _check_limit_skip(limit, skip):
    if limit is not None:
        limit = operator_index(limit, "limit")
        if limit < 0:
            raise ValueError(f"limit must be None or >= 0, got {limit}")
    skip = operator_index(skip or 0, "skip")
    if skip < 0:
        raise ValueError(f"skip must be >= 0, got {skip}")
    return limit, skip


def _iter_blocks(obj, blen=None):
    """(start, block) over a carray or array-like in blocks of `blen` atoms."""
    n = len(obj)
    if blen is None:
        blen = obj.chunklen if isinstance(obj, CarrayBase) else rules.DEFAULT_BLEN
    for s in range(0, n, blen):
        yield s, obj[s:min(s + blen, n)]


def operator_index(value, name):
    if isinstance(value, float) and value.is_integer():
        return int(value)  # bcolz accepts integral floats for lengths
    try:
        return int(np.int64(value)) if isinstance(value, np.integer) else int(value.__index__())
    except (AttributeError, TypeError):
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


class CarrayReads(CarrayBase):
    """Reading a `carray`."""

    # ---------------------------------------------------------------- reading
    def _read_range(self, start, stop, out):
        """Atoms [start, stop) into the contiguous array `out`, several chunks at once."""
        nfull = len(self._chunks)
        pieces = []
        for n, lo, hi, off in ix.chunk_pieces(start, stop, self._chunklen):
            if n >= nfull:
                out[off:off + hi - lo] = self._last[lo:hi]
            else:
                pieces.append((n, lo, hi, out[off:off + hi - lo]))
        if pieces:
            self._chunks.read_pieces(pieces, out, self._chunklen, self._atom.itemsize)
        return out

    def read_into(self, start, stop, out):
        """Decode atoms [start, stop) into the contiguous array `out` (of that length) and return it.

        The primitive of the query engine (`blzarr.query.fused`): no new array is allocated."""
        if self._isobj:
            out[...] = self[start:stop]
            return out
        return self._read_range(start, stop, out)

    def chunk_reader(self, start, stop):
        """A reader of the full chunks start..stop-1 whole, in ascending order on one thread
        (``r.read(n, out)`` decodes chunk n into the contiguous array `out` of `chunklen` atoms and
        returns it; ``r.close()`` when done), each in one call from its file to `out`; None where the
        chunk store has no such reads (in memory, the bcolz layout, objects).  It reads the version
        loaded when it was made: call it inside a public read call (the group-by's)."""
        if self._isobj:
            return None
        return self._chunks.chunk_reader(start, stop)

    def resident_chunks(self):
        """(the compressed bytes of the full chunks, a list; the rows after them, an array) when all
        of them are in memory, else None: what the kernels of `_chunk` read themselves
        (`blzarr.query.exprkernel`)."""
        if self._isobj or not isinstance(self._last, np.ndarray):
            return None
        chunks = self._chunks.resident(range(len(self._chunks)))
        return None if chunks is None else (chunks, self._last[:self._nleft])

    # The last decoded block is kept for the next scalar read; on-disk carrays also keep recent blocks
    # in the process-wide blockcache.disk_blocks.  Setting _blockcache to None (every change does)
    # renews the generation in the keys of both, so no stale block is ever found again.
    @property
    def _blockcache(self):
        return self._bc

    @_blockcache.setter
    def _blockcache(self, value):
        if value is None:
            self._gen = new_generation()
            self._per = {}      # atoms per Blosc block of the on-disk chunks read so far
        self._bc = value

    def _getitem_scalar(self, i):
        """Atom `i` (0 <= i < len), decoding at most the one Blosc block that holds it."""
        bc = self._bc
        if bc is not None and bc[0] <= i < bc[1]:
            buf, k = bc[2], i - bc[0]
        else:
            if self._isobj:
                return self._object_at(i)
            cid, local = divmod(i, self._chunklen)
            # (on disk `nchunks` is a plain field: len() would call ChunkStore.__len__ in Python)
            if cid >= (self._chunks.nchunks if self._ondisk else len(self._chunks)):
                v = self._last[local]       # (a damaged short chunk raises here)
                if self._pyscalars:
                    return v.item()
                return v.copy() if isinstance(v, (np.ndarray, np.void)) else v
            else:
                base = cid * self._chunklen
                # the generation this read began in: a change (or a reload) on another thread while
                # it reads renews it, and the block read must not be kept under the new one
                gen, pers = self._gen, self._per
                per = pers.get(cid) if self._ondisk else None
                buf = None
                if per is not None:
                    lo = local // per * per
                    key = (gen, cid, lo)
                    buf = disk_blocks.get(key)
                elif not self._ondisk:
                    # in memory: the block decoded in one call, straight into its array
                    got = block_at(self._chunks, cid, local, self._chunklen, self._atom)
                    if got is not None:
                        lo, buf = got
                if buf is None:
                    lo, buf, per = self._chunks.read_block(cid, local, self._chunklen, self._atom)
                    if self._ondisk:
                        pers[cid] = per
                        disk_blocks.put((gen, cid, lo), buf)
                bc = (base + lo, base + lo + len(buf), buf)
                if self._gen is gen:
                    self._bc = bc
                k = local - lo
        if self._pyscalars:
            return buf.item(k)  # Python scalars, as bcolz gives them
        v = buf[k]
        # rows of multidimensional carrays and structured scalars are views: never hand out a buffer
        return v.copy() if isinstance(v, (np.ndarray, np.void)) else v

    def _object_at(self, i):
        return self._chunks.unpickle(i)

    def _selection(self, expression, frame):
        """The `Selection` of an expression key or mask, its names resolved among the variables of
        `frame` (the caller's), evaluated by ``defaults.vm``."""
        expression = planner.rewrite_in(expression)
        vm = _ce.check_vm(None)
        return Selection(expression, _ce.caller_operands(expression, None, frame, vm), self._len, vm)

    def __getitem__(self, key):
        w = self._watch
        if type(key) is int:
            if w is not None:
                # a reader of a directory another process may write: a scalar compares one integer
                # of the mapped commit record with the generation loaded (no system call)
                v = w.view
                if v is None or v[1] != w.seen:
                    self._fresh()
            i = key + self._len if key < 0 else key
            if 0 <= i < self._len:
                return self._getitem_scalar(i)
            raise IndexError(f"index {key} is out of bounds for axis 0 with size {self._len}")
        if w is not None:
            # other keys: the whole check, then one version for the whole call, read again when a
            # writer committed meanwhile (read_one_version's loop, inline: an expression key reads
            # the caller's frame at a fixed depth, which the unwatched path below shares)
            for attempt in range(READ_AGAIN):
                lock = pin_version(self)
                try:
                    out = self._getitem(key)
                    again = read_again(self, attempt)
                finally:
                    unpin_version(self, lock)
                if not again:
                    return out
            return spanned_too_often(self, out)
        return self._getitem(key)

    def _getitem(self, key):
        if isinstance(key, (bool, np.bool_)):
            # NumPy's: a new axis of length 1 (True) or 0 (False), not the element 1 or 0
            return self[:][key]
        if isinstance(key, (int, np.integer)):
            return self._getitem_scalar(ix.normalize_int(key, self._len))
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            n = ix.slice_length(start, stop, step)
            if self._isobj:
                return self._take(np.arange(start, stop, step)) if n else np.empty(0, dtype=object)
            out = np.empty((n,) + self._atom.shape, dtype=self._atom.base)
            if n == 0:
                return out
            if step == 1:
                return self._read_range(start, start + n, out)
            if step < 0:
                lo = start + (n - 1) * step
                return self[lo:start + 1:-step][::-1].copy()
            # strided: read chunk by chunk, keep every step-th atom
            stop = start + (n - 1) * step + 1
            off = 0
            for cn, lo, hi, _ in ix.chunk_pieces(start, stop, self._chunklen):
                first = lo + (-(cn * self._chunklen + lo - start)) % step
                if first >= hi:
                    continue
                tmp = np.empty((hi - first,) + self._atom.shape, dtype=self._atom.base)
                base = cn * self._chunklen
                self._read_range(base + first, base + hi, tmp)
                sel = tmp[::step]
                out[off:off + len(sel)] = sel
                off += len(sel)
            return out
        if isinstance(key, str):
            return self[self._selection(key, sys._getframe(2)).evaluate()]     # the caller of __getitem__
        if isinstance(key, tuple):
            if len(key) == 0:
                return self[:]
            if len(key) == 1:
                return self[key[0]]
            if any(k is None for k in key):
                return self[:][key]
            if any(k is Ellipsis for k in key):
                key = _expand_ellipsis(key, 1 + len(self._atom.shape))
                if len(key) == 1:
                    return self[key[0]]
            if len(key) > 1 + len(self._atom.shape):
                raise IndexError(f"too many indices for array: array is {1 + len(self._atom.shape)}-"
                                 f"dimensional, but {len(key)} were indexed")
            if isinstance(key[0], slice) and not self._isobj:
                out = self._rows_then(key[0], key[1:])
                if out is not None:
                    return out
            if not isinstance(key[0], (slice, int, np.integer)):
                return self._rows_by_array(key[0], key[1:])
            if not isinstance(key[0], slice) and any(
                    not isinstance(k, (slice, int, np.integer)) for k in key[1:]):
                # an integer beside index arrays is an advanced index too (it broadcasts with them and,
                # when a slice separates them, NumPy puts the broadcast axes first)
                return self._rows_by_array(np.asarray(key[0]), key[1:])
            first = self[key[0]]
            if isinstance(key[0], (int, np.integer)):
                return first[key[1:]]
            return first[(slice(None),) + key[1:]]
        if key is Ellipsis:
            return self[:]
        if isinstance(key, CarrayBase):
            if key.dtype == bool and key.ndim == 1:
                # the mask's statistics skip its all-false chunks and give its all-true ones without
                # decoding them; the positions come out ascending
                return self._take(Selection(key, None, len(key)).positions(), check_len=len(key),
                                  ascending=True)
            if key.dtype == bool:
                return self._take(np.concatenate([np.flatnonzero(b) + s for s, b in
                                                  _iter_blocks(key)]) if len(key) else np.empty(0, np.intp),
                                  check_len=len(key))
            key = key[:]
        if key is None:
            return self[:][None]
        arr = np.asarray(key)
        if arr.dtype == bool and arr.ndim > 1 and arr.shape == self.shape[:arr.ndim]:
            return self[:][arr]     # NumPy's: the elements where a mask of the array's shape is true
        if arr.dtype.kind in "iu" and arr.ndim != 1:
            if arr.ndim == 0:
                return self[int(arr)]
            # an n-d integer index: NumPy's result shape, key shape then atom shape
            flat = self._take(ix.positions_from_array(arr.reshape(-1), self._len))
            return flat.reshape(arr.shape + flat.shape[1:])
        return self._take(ix.positions_from_array(arr, self._len))

    def _rows_then(self, rows, rest):
        """self[rows][:, *rest] for a slice `rows`, read a few chunks of rows at a time (never the whole
        selection of full atoms), or None when `rest` would move the row axis (NumPy's rule for
        advanced indices separated by a slice)."""
        sub = (slice(None),) + tuple(rest)
        atom, base = self._atom.shape, self._atom.base
        p2 = np.empty((2,) + atom, dtype=base)[sub]
        p3 = np.empty((3,) + atom, dtype=base)[sub]
        if p2.ndim == 0 or p2.shape[0] != 2 or p3.shape[0] != 3 or p2.shape[1:] != p3.shape[1:]:
            return None
        start, stop, step = rows.indices(self._len)
        n = ix.slice_length(start, stop, step)
        out = np.empty((n,) + p2.shape[1:], dtype=p2.dtype)
        if step == 1 and n:
            # chunk by chunk on every thread, each decoded into a buffer of its thread (no temporary
            # array of full atoms), the key applied from there into the result
            cl = max(1, self._chunklen)
            edges = [start] + list(range((start // cl + 1) * cl, start + n, cl)) + [start + n]
            blocks = list(zip(edges[:-1], edges[1:]))
            run = self._atom_run(rest, out)
            if run is not None:
                # one run of bytes of every atom (a column of a 2-D carray): the run taken out of each
                # full chunk without the GIL (only the wanted bytes of each block of an LZ4 chunk),
                # chunks in memory or in BLZ files in one call per thread, others one by one
                end = len(self._chunks) * cl
                full = [b for b in blocks if b[1] - b[0] == cl and b[1] <= end]
                if self._rows_full(full, out, start, run):
                    full = set(full)
                    blocks = [b for b in blocks if b not in full]
            fused.run_blocks(blocks, fused.Decoder({"x": self}, cl),
                             lambda s, e, b: out.__setitem__(slice(s - start, e - start), b["x"][sub]))
            return out
        # rows per step: enough chunks to keep every thread decoding, at most ~32 MB of full atoms
        isz = max(1, self._atom.itemsize)
        blen = max(1, self._chunklen) * 2 * max(1, get_nthreads())
        blen = max(1, min(blen, max(self._chunklen, (32 << 20) // isz)))
        for o in range(0, n, blen):
            m = min(blen, n - o)
            lo = start + o * step
            hi = lo + m * step
            block = self[lo:hi if hi >= 0 else None:step]
            out[o:o + m] = block[sub]
        return out

    def _rows_full(self, full, out, start, run):
        """Bytes run = (first, count) of every atom of the full chunks of `full` (row ranges starting at
        `start`) into `out`; whether it was done (else nothing was)."""
        if len(full) < 2:
            return False
        cl = self._chunklen
        return self._chunks.read_rows([b[0] // cl for b in full], out, [(b[0] - start) * run[1] for b in full],
                                      self._atom.itemsize, *run)

    def _atom_run(self, rest, out):
        """(first byte, bytes) of the one run of each atom's bytes that ``atom[rest]`` selects, in order
        (a column or a range of columns), or None when `rest` picks anything else or `out` is not the
        C-contiguous result of that shape; `out` being empty gives None too."""
        atom = self._atom.shape
        if not atom or out.size == 0 or not out.flags.c_contiguous or out.dtype != self._atom.base:
            return None
        picked = np.arange(int(np.prod(atom)), dtype=np.intp).reshape(atom)[tuple(rest)]
        flat = np.ravel(picked)
        if flat.size == 0 or flat.size * len(out) != out.size or \
                (flat.size > 1 and not (np.diff(flat) == 1).all()):
            return None
        isz = self._atom.base.itemsize
        return int(flat[0]) * isz, int(flat.size) * isz

    def _rows_by_array(self, k0, rest):
        """self[(k0,) + rest] for an integer or boolean array k0 on the first axis, with NumPy's
        broadcasting of k0 against the arrays in `rest`: only the distinct rows k0 names are read."""
        if isinstance(k0, CarrayBase):
            k0 = k0[:]
        a0 = np.asarray(k0)
        if a0.dtype == bool and a0.ndim != 1:
            return self[:][(a0,) + tuple(rest)]
        shape = (-1,) if a0.dtype == bool else a0.shape
        pos = ix.positions_from_array(a0.reshape(-1), self._len).reshape(shape)
        need, inv = np.unique(pos, return_inverse=True)
        return self._take(need)[(inv.reshape(pos.shape),) + tuple(rest)]

    def _take(self, pos, check_len=None, ascending=False):
        if check_len is not None and check_len != self._len:
            raise IndexError(f"boolean index has length {check_len}, the carray has {self._len}")
        if self._isobj:
            out = np.empty(len(pos), dtype=object)
            for k, p in enumerate(pos.tolist()):
                out[k] = self._object_at(p)
            return out
        out = np.empty((len(pos),) + self._atom.shape, dtype=self._atom.base)
        if len(pos) == 0:
            return out
        chunks, cl, nfull, last = self._chunks, self._chunklen, len(self._chunks), self._last
        # ascending positions, each chunk's a contiguous run: every touched block is decoded once,
        # the chunks on the pool's threads
        order = None if ascending or not (np.diff(pos) < 0).any() else np.argsort(pos, kind="stable")
        spos = pos if order is None else pos[order]

        groups = ix.sorted_groups(spos, cl)
        inmem = [g for g in groups if g[0] < nfull]
        datas = chunks.resident([g[0] for g in inmem]) if len(inmem) > 1 else None
        if datas is not None:
            # in-memory chunks: one call per thread takes from all of them (each chunk's touched blocks
            # decoded once into the thread's buffer), the leftover's items from NumPy
            take_chunks(datas, np.ascontiguousarray(spos, np.intp), inmem, cl, self._atom.itemsize, out,
                        None if order is None else np.ascontiguousarray(order, np.intp))
            groups = groups[len(inmem):]

        def take(group):
            cid, s, e = group
            local = spos[s:e] - cid * cl
            rows = None if order is None else order[s:e]
            if cid >= nfull:
                out[slice(s, e) if rows is None else rows] = last[local]
            else:
                chunks[cid].take(local, out, rows, s)
        run_all(take, groups)
        return out

    def __iter__(self):
        return self.iter()

    def __next__(self):
        # bcolz carrays are their own iterators: next(c) walks one default iteration
        it = self.__dict__.get("_next_iter")
        if it is None:
            it = self._next_iter = self.iter()
        try:
            return next(it)
        except StopIteration:
            self._next_iter = None
            raise

    def iter(self, start=0, stop=None, step=1, limit=None, skip=0, dtype=None):
        """Iterate over the atoms of [start:stop:step], skipping `skip` and yielding at most `limit`."""
        if step is not None and step <= 0:
            raise NotImplementedError("iter() supports only positive steps")
        start, stop, step = slice(start, stop, step).indices(self._len)
        limit, skip = _check_limit_skip(limit, skip)
        # the generator works per block; chain hands out the elements at C speed
        it = _CarrayIter.from_iterable(self._iter(start, stop, step, limit, skip, dtype))
        it._carray = self
        return it

    def _iter(self, start, stop, step, limit, skip, dtype):
        yield from _handed_out(self._iter_blocks(start, stop, step, dtype), skip, limit)

    def _iter_blocks(self, start, stop, step, dtype):
        """The atoms of [start:stop:step] as arrays of a chunk's worth of steps each (as `dtype`)."""
        blen = max(self._chunklen, 1)
        if step > 1:
            blen = blen * step
        pos = start
        while pos < stop:
            end = min(pos + blen, stop)
            block = self[pos:end:step]
            pos = pos + ((end - pos + step - 1) // step) * step
            yield block if dtype is None else block.astype(dtype)

    def where(self, boolarr, limit=None, skip=0):
        """Iterate over the values where `boolarr` (a bool carray, array or expression) is true.

        The iterator also has ``count()`` (how many values it gives in all, `limit` and `skip`
        applied, without building them) and ``explain()`` (the `blzarr.query.planner.Plan` of an
        expression: blocks skipped, taken whole and scanned), as a ctable's `where` has.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> a = blzarr.carray(np.arange(100_000), chunklen=10_000)
        >>> q = a.where("a >= 95_000")
        >>> q.count(), next(q)
        (5000, 95000)
        >>> print(q.explain())
        10 blocks: 9 skipped, 0 taken whole, 1 scanned (10000 of 100000 rows evaluated); statistics of a
        """
        if self._watch is not None:
            self._fresh()
        sel = None
        if isinstance(boolarr, str):
            sel = self._selection(boolarr, sys._getframe(1))
            boolarr = sel.evaluate()
        if isinstance(boolarr, np.ndarray) and boolarr.dtype != bool or (
                isinstance(boolarr, CarrayBase) and boolarr.dtype != bool):
            raise ValueError("`boolarr` must be of boolean type")
        if not hasattr(boolarr, "dtype"):
            boolarr = np.asarray(boolarr)
            if boolarr.dtype != bool:
                raise ValueError("`boolarr` must be of boolean type")
        if len(boolarr) != self._len:
            raise ValueError(f"`boolarr` has length {len(boolarr)}, the carray has {self._len}")
        limit, skip = _check_limit_skip(limit, skip)
        if sel is None:
            sel = Selection(boolarr, None, self._len, chunklen=self._chunklen)
        if getattr(boolarr, "ndim", 1) > 1:
            # NumPy's a[mask] for a mask over more than the first axis: the elements, one by one
            boolarr = np.asarray(boolarr[:] if isinstance(boolarr, CarrayBase) else boolarr)
            if boolarr.shape != self.shape[:boolarr.ndim]:
                raise ValueError(f"where(): a mask of shape {boolarr.shape} does not fit the carray's shape "
                                 f"{self.shape} (it takes a mask of length {self._len}, or of the "
                                 f"carray's leading dimensions)")
            found = iter(_elements(self[:][boolarr][skip:None if limit is None else skip + limit]))
        else:
            found = sel.values(self, skip, limit, _elements)
        return Query(found, lambda: sel.count(skip, limit), sel.explain)

    def wheretrue(self, limit=None, skip=0):
        """Iterate over the positions where this boolean carray is true."""
        if self.dtype != bool:
            raise ValueError("wheretrue() needs a carray of boolean type")
        if self.ndim > 1:
            raise NotImplementedError("wheretrue() needs a one-dimensional carray")
        limit, skip = _check_limit_skip(limit, skip)
        it = _CarrayIter.from_iterable(self._wheretrue(limit, skip))
        it._carray = self
        return it

    def _wheretrue(self, limit, skip):
        for s, idx in Selection(self, None, self._len).true_positions(self._chunklen, skip, limit):
            yield (idx + s).tolist()

