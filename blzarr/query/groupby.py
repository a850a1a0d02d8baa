"""Group-by and bquery's query API over a ctable's columns, chunk by chunk on every thread.

The engine reads the key columns (and, for blocks where the filter keeps a row, the value columns)
block by block through the columns' own decoding (a column's `chunk_reader` for the whole chunks of
a thread's run where it has one, else `read_into`), on every thread at once.  The blocks
are cut into one contiguous part per thread, and each part keeps partial aggregates of its own: the
keys of a block become dense group ids (directly from the values when the keys are integers of a
small combined range, else through an open-addressing table of the packed key bytes,
`blzarr._groupby.KeyTable`), and the kernels update the part's per-group state, block after block.
Part p is folded into the total once parts 0..p-1 are, whichever thread finishes first, so a
floating-point sum adds the same numbers in the same order on every run (the same bits for the same
table and number of threads).  Memory holds the groups and one block per thread, never a column.

Groups come out in bquery's order, the order of their first row (among the rows the filter keeps).
NaN follows bquery: it propagates into ``sum``, ``mean`` and ``std``; ``count`` and ``count_na``
count the values that are not NaN (bquery's two names for one count); ``std`` is the population
standard deviation (ddof=0).  Beyond bquery: ``min``/``max`` skip NaN, ``first``/``last`` give the
first/last value that is not NaN (or NaT), as pandas does.  NaN keys form one group, and -0.0 is
the group of 0.0.

This module knows no container class: the thin methods of ctable pass the table (columns with
``len``, ``dtype``, ``chunklen``, ``read_into`` and ``chunk_stats``) and the constructors of the
result (`make_table`).
"""

import threading

import numpy as np

from blzarr import _groupby as _gb
from blzarr.runtime import forksafe
from blzarr.runtime import parallel
from blzarr.query import planner
from blzarr.query import stats as _stats
from blzarr.query import factor_cache

OPS = ("sum", "mean", "std", "count", "count_na", "count_distinct", "sorted_count_distinct",
       "min", "max", "first", "last")
# a direct-index table is used up to this many slots (per-thread state is a few int64 per slot)
DIRECT_MAX_SLOTS = 1 << 21
# blocks shorter than this make the per-block Python work dominate
MIN_BLEN = 1 << 14
# counts and integer sums up to this bound are kept in 32 bits (`_sums_plan`)
NARROW_MAX = (1 << 31) - 1
# one-word hashed keys are looked up and their rows counted in one pass (`KeyTable.ids_rows`, or
# `KeyTable.ids_sums` with the sums as well) while a partial has fewer groups than this; beyond, the
# counts are cache misses that the separate `rows_seen` pass prefetches
HASH_ROWS_MAX = 1 << 14
# runs of blocks a thread of an integer-sums query takes, on average (`_runs`): more even out cores
# that run at different speeds better, but each run sets up its columns' chunk readers again
# (~0.2 ms of CPU a column)
RUNS_PER_THREAD = 4
# integer `in` lists spanning fewer values than this are looked up in a byte table, not hashed
ISIN_SPAN = 1 << 22
# bquery's term operators, by their accepted spellings
TERM_OPS = {"==": "==", "eq": "==", "!=": "!=", "neq": "!=", "in": "in", "nin": "not in",
            "not in": "not in", ">": ">", ">=": ">=", "<": "<", "<=": "<="}

_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min


# ----------------------------------------------------------------------------- the agg list
def parse_agg_list(table, agg_list):
    """[(input column, op, output column)] from bquery's three forms of `agg_list`."""
    if isinstance(agg_list, (str, bytes)) or not hasattr(agg_list, "__iter__"):
        raise TypeError(f"agg_list must be a list of column names, [col, op] or [col, op, out], "
                        f"got {agg_list!r}")
    out = []
    for item in agg_list:
        if isinstance(item, str):
            col, op, name = item, "sum", item
        elif isinstance(item, (list, tuple)) and len(item) in (2, 3):
            col, op = item[0], item[1]
            name = item[2] if len(item) == 3 else col
        else:
            raise ValueError(f"agg_list: {item!r} is neither a column name, [col, op] nor [col, op, out]")
        if col not in table.names:
            raise KeyError(f"agg_list: {col!r} is not a column of the table (columns: {table.names})")
        if op not in OPS:
            raise NotImplementedError(f"agg_list: unknown aggregation {op!r} on {col!r} (known: {', '.join(OPS)})")
        _check_op(op, col, table[col].dtype)
        out.append((col, op, name))
    names = [n for _, _, n in out]
    if len(set(names)) != len(names):
        raise ValueError(f"agg_list: output column names repeat: {names}")
    return out


def _check_op(op, col, dtype):
    kind = dtype.kind
    if dtype.shape != () or dtype.names is not None or kind == "O":
        raise TypeError(f"column {col!r} of dtype {dtype} cannot be aggregated (only scalar fixed-width dtypes)")
    if op in ("sum", "mean", "std") and kind not in "biuf":
        raise TypeError(f"{op} of column {col!r} needs numbers, it holds {dtype}")
    if op in ("min", "max") and kind not in "biufmM":
        raise TypeError(f"{op} of column {col!r} needs numbers or datetimes, it holds {dtype}")


def _out_dtype(op, dtype):
    if op in ("count", "count_na", "count_distinct", "sorted_count_distinct"):
        return np.dtype(np.int64)
    if op in ("mean", "std"):
        return np.dtype(np.float64)
    if op == "sum":
        if dtype.kind == "f":
            return dtype
        return np.dtype(np.uint64) if dtype.kind == "u" else np.dtype(np.int64)
    return dtype


# ----------------------------------------------------------------------------- keys
class _Key:
    """One group-by column as the engine reads it: `src` (the column, or its cached codes), the
    integer range (lo, nslots) of `src` when known, and `decode` mapping src values back to the
    column's values."""

    def __init__(self, name, src, dtype, decode=None, rng=None):
        self.name, self.src, self.dtype = name, src, np.dtype(dtype)
        self.decode = decode
        self.rng = rng
        self.src_dtype = np.dtype(src.dtype)


def _int_range(col):
    """(lo, number of values) of an integer/bool column from its chunk statistics, or None."""
    dt = np.dtype(col.dtype)
    if dt.kind == "b":
        return 0, 2
    if dt.kind not in "iu":
        return None
    if len(col) == 0:
        return 0, 1
    try:
        st = col.chunk_stats() if hasattr(col, "chunk_stats") else None
    except Exception:  # statistics are an optimisation: the hash path works without them
        st = None
    if st is None:
        if isinstance(col, np.ndarray):
            lo, hi = int(col.min()), int(col.max())
        else:
            return None
    else:
        mins, maxs, flags = st[0], st[1], st[2]
        if not len(flags) or not np.all(flags & _stats.KNOWN):
            return None
        lo, hi = int(np.min(mins)), int(np.max(maxs))
    if hi > _I64_MAX or lo < _I64_MIN:
        return None
    return lo, hi - lo + 1


def _make_keys(table, groupby_cols, use_cache):
    keys = []
    for name in groupby_cols:
        col = table[name]
        dt = np.dtype(col.dtype)
        if dt.shape != () or dt.names is not None or dt.kind == "O":
            raise TypeError(f"group-by column {name!r} of dtype {dt} is not a fixed-width scalar dtype")
        cached = factor_cache.load(table, name) if use_cache else None
        if cached is not None:
            codes, uniques = cached
            keys.append(_Key(name, codes, dt, decode=uniques, rng=(0, max(len(uniques), 1))))
        else:
            keys.append(_Key(name, col, dt, rng=_int_range(col)))
    return keys


class _Plan:
    """How rows become group ids: 'direct' (integer keys, strides over the combined range) or 'hash'
    (packed key words through a KeyTable)."""

    def __init__(self, keys, nrows):
        self.keys = keys
        rngs = [k.rng for k in keys]
        slots = 1
        for r in rngs:
            slots = slots * r[1] if r is not None and slots is not None else None
        limit = min(DIRECT_MAX_SLOTS, max(4 * nrows, 1 << 16))
        if not keys:
            self.kind, self.nslots, self.strides = "direct", 1, []
        elif slots is not None and slots <= limit:
            self.kind, self.nslots = "direct", slots
            self.strides = []
            s = 1
            for r in reversed(rngs):
                self.strides.insert(0, s)
                s *= r[1]
        else:
            self.kind = "hash"
            self.offsets = []
            off = 0
            for k in keys:
                self.offsets.append(off)
                off += k.src_dtype.itemsize
            self.nwords = max(1, -(-off // 8))

    def key_values(self, ids, table_keys):
        """The columns' values of the groups `ids` (slots, or rows of `table_keys`)."""
        out = []
        for j, k in enumerate(self.keys):
            if self.kind == "direct":
                lo, n = k.rng
                # a slot is sum((value - lo) * stride): the first key's part needs no modulo (slots
                # are below nslots) and a stride of 1 no division, the one-key case neither
                raw = ids if self.strides[j] == 1 else ids // self.strides[j]
                if j:
                    raw = raw % n
                vals = np.add(raw, lo, dtype=np.int64).astype(k.src_dtype, copy=False)
            else:
                b = table_keys[ids].view(np.uint8).reshape(len(ids), self.nwords * 8)
                isz = k.src_dtype.itemsize
                vals = np.ascontiguousarray(b[:, self.offsets[j]:self.offsets[j] + isz]).view(k.src_dtype).reshape(len(ids))
            if k.decode is not None:
                vals = np.asarray(k.decode)[vals.astype(np.int64)] if len(vals) else np.empty(0, k.dtype)
            out.append(vals.astype(k.dtype, copy=False))
        return out


# ----------------------------------------------------------------------------- blocks
def _block_len(arrays):
    cls = [int(a.chunklen) for a in arrays if getattr(a, "chunklen", None)]
    return max(min(cls) if cls else 65536, MIN_BLEN)


# per thread, the buffers of readers that `release`d them, for the next reader on that thread: a block's
# buffers freshly allocated on every query came back from the system zeroed page by page (a page fault
# every 4 KiB, a few hundred a query and thread at 65,536-row blocks)
_SCRATCH = threading.local()
# the bytes of buffers a thread keeps between queries (more is freed)
SCRATCH_KEEP = 8 << 20


class _Reader:
    """Per-thread buffers; `read(arr, s, e)` decodes rows [s, e) of a column into this thread's."""

    def __init__(self, blen):
        self.blen = blen
        self.tls = threading.local()
        self.slots, self.lock = {}, threading.Lock()

    def bufs(self):
        b = getattr(self.tls, "b", None)
        if b is None:
            free = getattr(_SCRATCH, "free", None)
            b = self.tls.b = free.pop() if free else {}
        return b

    def release(self):
        """This thread's buffers, none of which may be referenced any more, kept for the next reader
        that runs on this thread (up to SCRATCH_KEEP bytes)."""
        b = getattr(self.tls, "b", None)
        self.tls.b = None
        if b and sum(a.nbytes for a in b.values()) <= SCRATCH_KEEP:
            free = getattr(_SCRATCH, "free", None)
            if free is None:
                free = _SCRATCH.free = []
            if not free:
                free.append(b)

    def slot(self, arr):
        """A small number for the column `arr` in this reader (its buffers' name: a buffer kept for
        a later reader must not be named after an object of this query)."""
        k = self.slots.get(id(arr))
        if k is None:
            with self.lock:
                k = self.slots.setdefault(id(arr), len(self.slots))
        return k

    def buf(self, key, shape, dtype):
        b = self.bufs()
        a = b.get(key)
        if a is None or a.shape[0] < shape[0] or a.shape[1:] != tuple(shape[1:]) or a.dtype != dtype:
            a = b[key] = np.empty((max(shape[0], self.blen),) + tuple(shape[1:]), dtype)
        return a[:shape[0]]

    def read(self, arr, s, e, tag=""):
        if isinstance(arr, np.ndarray):
            return arr[s:e]
        if hasattr(arr, "read_into") and np.dtype(arr.dtype) != object:
            out = self.buf(("col", self.slot(arr), tag), (e - s,), np.dtype(arr.dtype))
            cr = getattr(self.tls, "chunks", None)
            if cr is not None:
                got = cr.get(id(arr))
                # a whole chunk of this thread's run: straight from the column's chunk reader
                if got is not None and e - s == got[1] and s % got[1] == 0 and got[2] <= s // got[1] < got[3]:
                    return got[0].read(s // got[1], out)
            return arr.read_into(s, e, out)
        return np.asarray(arr[s:e])

    def open_chunks(self, arrays, first, stop, spans=()):
        """Chunk readers (`chunk_reader`) on this thread for the columns among `arrays` whose chunks are
        this reader's blocks, over the chunks of blocks first..stop-1, and for the columns among
        `spans` whose chunks are not, over the chunks that hold those blocks' rows (`pieces` reads
        them; `close_chunks` ends them all)."""
        cr = {}
        for arr in arrays:
            if id(arr) in cr or isinstance(arr, np.ndarray) or getattr(arr, "chunklen", None) != self.blen:
                continue
            get = getattr(arr, "chunk_reader", None)
            hi = min(stop, len(arr) // self.blen)
            r = get(first, hi) if get is not None and first < hi else None
            if r is not None:
                cr[id(arr)] = (r, self.blen, first, hi)
        self.tls.chunks = cr
        sp = {}
        for arr in spans:
            cl = getattr(arr, "chunklen", None)
            if id(arr) in cr or id(arr) in sp or isinstance(arr, np.ndarray) or not cl or cl == self.blen \
                    or np.dtype(arr.dtype) == object:
                continue
            get = getattr(arr, "chunk_reader", None)
            lo, hi = first * self.blen // cl, min(-(-stop * self.blen // cl), len(arr) // cl)
            r = get(lo, hi) if get is not None and lo < hi else None
            if r is not None:
                sp[id(arr)] = (r, cl, lo, hi, {})
        self.tls.spans = sp

    def close_chunks(self):
        cr = getattr(self.tls, "chunks", None)
        sp = getattr(self.tls, "spans", None)
        self.tls.chunks = self.tls.spans = None
        for r in list((cr or {}).values()) + list((sp or {}).values()):
            r[0].close()

    def pieces(self, arr, s, e):
        """Rows [s, e) of a column of `open_chunks`' `spans` as [(lo, hi, rows lo..hi-1 from s)], views
        of its chunks decoded whole, each once, in one call (read, verified and decoded without the
        GIL): a range read decodes the Blosc blocks at both ends of every range, which the next range
        decodes again, and reads them through more Python.  None where the rows are not in those
        chunks (the rows after the last full chunk): the caller reads them with `read`."""
        sp = getattr(self.tls, "spans", None)
        got = sp.get(id(arr)) if sp else None
        if got is None:
            return None
        r, cl, lo, hi, dec = got
        c0, c1 = s // cl, (e - 1) // cl
        if c0 < lo or c1 >= hi:
            return None
        out = []
        for c in range(c0, c1 + 1):
            a = dec.get(c)
            if a is None:
                # chunks come in ascending order: the one before c may still be wanted (the range
                # that ended in it), none earlier; two buffers, taken in turn, hold them
                for k in [k for k in dec if k < c - 1]:
                    del dec[k]
                buf = self.buf(("span", self.slot(arr), c & 1), (cl,), np.dtype(arr.dtype))
                a = dec[c] = r.read(c, buf)
            a0, a1 = max(s, c * cl), min(e, (c + 1) * cl)
            out.append((a0 - s, a1 - s, a[a0 - c * cl:a1 - c * cl]))
        return out

    def as_key(self, a, tag):
        """Integer keys as a dtype the direct kernels take without a copy where possible."""
        a = np.ascontiguousarray(a)
        if a.dtype.kind == "b":
            return a.view(np.uint8)
        if a.dtype.kind in "iu" and a.dtype.itemsize <= 4 or a.dtype == np.int64:
            return a if a.dtype.isnative else self.as_int64(a, tag)
        return self.as_int64(a, tag)

    def as_int64(self, a, tag):
        if a.dtype == np.int64 and a.flags.c_contiguous:
            return a
        out = self.buf(("i64", tag), (len(a),), np.dtype(np.int64))
        if a.dtype.kind in "mM":
            np.copyto(out, a.view(np.int64))
        else:
            np.copyto(out, a, casting="unsafe")
        return out

    def as_float64(self, a, tag):
        if a.dtype == np.float64 and a.flags.c_contiguous:
            return a
        out = self.buf(("f64", tag), (len(a),), np.dtype(np.float64))
        np.copyto(out, a, casting="unsafe")
        return out

    def words(self, cols, offsets, nwords, tag):
        """The key rows of the columns `cols` packed at `offsets` into (n, nwords) uint64."""
        n = len(cols[0])
        out = self.buf(("w", tag), (n, nwords), np.dtype(np.uint64))
        if sum(c.dtype.itemsize for c in cols) < nwords * 8:
            out[:] = 0
        for c, off in zip(cols, offsets):
            c = np.ascontiguousarray(c)
            src = c.view(np.uint8).reshape(n, c.dtype.itemsize)
            fk = c.dtype.itemsize if c.dtype.kind in "fc" and c.dtype.itemsize in (4, 8) else 0
            _gb.pack_column(src, out, off, fk)
        return out


def _value_words(vals, reader, tag):
    nwords = max(1, -(-vals.dtype.itemsize // 8))
    return reader.words([vals], [0], nwords, tag)


# ----------------------------------------------------------------------------- partial state
class _Partial:
    """One thread's aggregates: per-group arrays (grown with the groups of the hash path)."""

    def __init__(self, plan, aggs, cap, sums=None):
        self.plan = plan
        self.aggs = aggs
        self.table = _gb.KeyTable(plan.nwords) if plan.kind == "hash" else None
        self.cap = 0
        self.nrows = np.zeros(0, np.int64)
        # the groups in the order of their first rows (`norder` of them): blocks come in order
        self.order = np.zeros(0, np.int64)
        self.norder = 0
        self.state = [dict() for _ in aggs]
        self.pairs = [None] * len(aggs)
        for j, a in enumerate(aggs):
            if a.op == "count_distinct":
                self.pairs[j] = _gb.KeyTable(1 + a.vwords)
        self.words = None
        if plan.kind == "hash":
            self.grow(cap)
        else:
            self.lay_out(cap, sums)

    def grow(self, need):
        if need <= self.cap:
            return
        cap = max(need, 2 * self.cap, 64) if self.plan.kind == "hash" else need

        def grown(a, fill):
            b = np.full(cap, fill, a.dtype)
            b[:len(a)] = a
            return b
        self.nrows = grown(self.nrows, 0)
        order = np.empty(cap, np.int64)       # only its first `norder` entries are ever read
        order[:self.norder] = self.order[:self.norder]
        self.order = order
        for st, a in zip(self.state, self.aggs):
            for name, (dt, fill) in a.fields().items():
                st[name] = grown(st.get(name, np.zeros(0, dt)), fill)
        self.cap = cap

    def lay_out(self, cap, sums):
        """A direct plan's state, `cap` slots, in one buffer of `_state_words` (not initialised:
        `reset` does it, on the thread that then updates the state).  With `sums` (`_sums_plan`'s,
        for `_gb.direct_sums`) the row counts and the two sums are the columns of one array of 2 or
        4 words a slot, each slot in one cache line (the start aligned to 64 bytes), `nrows` and the
        sums' `acc` views of it, so the fold and the results read them as they read separate
        arrays; without, one array per field.  The order of the groups (only its first `norder`
        entries are ever read) comes last."""
        self.cap, self.sums = cap, sums
        if sums is None:
            fields = [(j, name, dt, fill) for j, a in enumerate(self.aggs)
                      for name, (dt, fill) in a.fields().items()]
            self.words = words = _state_words(cap * (2 + len(fields)))
            self.nrows = words[:cap]
            self.fills = [(words[:cap], 0)]
            for k, (j, name, dt, fill) in enumerate(fields):
                a = words[(1 + k) * cap:(2 + k) * cap].view(dt)
                self.state[j][name] = a
                self.fills.append((a, fill))
        else:
            ji, jf, narrow = sums
            w = 1 + (ji is not None) + (jf is not None)
            # words a slot: 1, 2 or 4 (one cache line holds whole slots); `narrow`, 8 bytes, or 16
            # with a float sum
            w = (2 if jf is not None else 1) if narrow else 1 if w == 1 else 2 if w == 2 else 4
            self.words = words = _state_words(cap * (w + 1))
            self._bind(words[:cap * w].reshape(cap, w), sums)
            self.fills = [(words[:cap * w], 0)]
        self.order = words[len(words) - cap:]

    def reset(self):
        """The state of `lay_out` set to no groups (its fields to their starting values)."""
        for a, fill in self.fills:
            a.fill(fill)
        self.norder = 0
        return self

    def _bind(self, packed, sums):
        """`packed`, one row of int64 words a slot, as the state of `sums`: a `narrow` one holds 32-bit
        counts and integer sums (`_gb.direct_sums32`), in the first word of a slot, and the float
        sum in the second."""
        ji, jf, narrow = sums
        self.sums = sums
        if narrow:
            self.packed = packed.view(np.int32)
            self.nrows = self.packed[:, 0]
            if ji is not None:
                self.state[ji]["acc"] = self.packed[:, 1]
            if jf is not None:
                self.state[jf]["acc"] = packed[:, 1].view(np.float64)
            return
        self.packed = packed
        self.nrows = packed[:, 0]
        col = 1
        self.cols = [1, 2]
        if ji is not None:
            self.state[ji]["acc"] = packed[:, col]
            self.cols[0] = col
            col += 1
        if jf is not None:
            self.state[jf]["acc"] = packed[:, col].view(np.float64)
            self.cols[1] = col

    @property
    def n(self):
        return self.table.n if self.table is not None else self.plan.nslots


# the direct plans' partial states of the last query, kept for the next (`_state_words`)
_KEPT, _KEPT_LOCK = [], forksafe.Lock()      # (a child forked while another thread held it goes on)
# the bytes of partial states kept between queries (more is freed)
KEEP_STATE = 32 << 20


def _state_words(n):
    """n int64 words starting on a 64-byte boundary, not initialised: a buffer of that size kept from
    an earlier query when there is one.  Fresh memory costs a page fault every 4 KiB at its first
    write, on the thread that updates the state, as often as the allocator returns memory to the
    system (which depends on everything else the process allocates); a kept buffer costs one fill."""
    with _KEPT_LOCK:
        for i, b in enumerate(_KEPT):
            if len(b) == n:
                return _KEPT.pop(i)
    raw = np.empty(n + 8, np.int64)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip:skip + n]


def _keep_states(partials):
    """The buffers of the direct-plan `partials` of a finished query (the results hold copies, never
    views of them) kept for the next query in place of those kept before, up to KEEP_STATE bytes."""
    bufs = [P.words for P in partials if P is not None and P.words is not None]
    with _KEPT_LOCK:
        _KEPT[:] = bufs if sum(b.nbytes for b in bufs) <= KEEP_STATE else []


class _Agg:
    """One aggregation: its input column, op, output name and what state it keeps."""

    def __init__(self, col, op, out, dtype):
        self.col, self.op, self.out, self.dtype = col, op, out, np.dtype(dtype)
        k = self.dtype.kind
        self.isfloat = k in "fc"
        self.hasna = k in "fcmM"        # NaN or NaT can be among the values
        self.vwords = max(1, -(-self.dtype.itemsize // 8))

    def fields(self):
        op, f = self.op, self.isfloat
        if op == "sum":
            return {"acc": (np.float64, 0.0)} if f else {"acc": (np.int64, 0)}
        if op == "mean":
            return {"acc": (np.float64, 0.0)}
        if op == "std":
            return {"cnt": (np.int64, 0), "mean": (np.float64, 0.0), "m2": (np.float64, 0.0)}
        if op in ("count", "count_na"):
            return {"cnt": (np.int64, 0)} if self.hasna else {}
        if op in ("min", "max"):
            if f:
                return {"acc": (np.float64, np.nan)}
            return {"acc": (np.int64, _I64_MAX if op == "min" else _I64_MIN)}
        if op == "first":
            return {"pos": (np.int64, _I64_MAX)}
        if op == "last":
            return {"pos": (np.int64, -1)}
        return {}


def _valid_mask(vals, reader, tag):
    """uint8 per row: the value is not NaN/NaT; None when every value of the dtype is valid."""
    k = vals.dtype.kind
    if k in "fc":
        out = reader.buf(("valid", tag), (len(vals),), np.dtype(bool))
        np.logical_not(np.isnan(vals), out=out)
        return out.view(np.uint8)
    if k in "mM":
        out = reader.buf(("valid", tag), (len(vals),), np.dtype(bool))
        np.not_equal(vals.view(np.int64), _I64_MIN, out=out)
        return out.view(np.uint8)
    return None


def _update(P, codes, s, e, cols, aggs, reader):
    """Each aggregation's state of the partial `P` updated with rows [s, e) of its column (``cols[j]``
    for ``aggs[j]``: the table's columns are looked up once a query, not once a block)."""
    for j, a in enumerate(aggs):
        if a.op == "sorted_count_distinct":
            continue
        if a.op in ("count", "count_na") and not a.hasna:
            continue                                 # every row counts: nrows is the answer
        raw = reader.read(cols[j], s, e)
        st = P.state[j]
        op = a.op
        if op == "sum":
            if a.isfloat:
                _gb.sum_float(codes, reader.as_float64(raw, a.col), st["acc"])
            else:
                _gb.sum_int(codes, reader.as_int64(raw, a.col), st["acc"])
        elif op == "mean":
            _gb.sum_float(codes, reader.as_float64(raw, a.col), st["acc"])
        elif op == "std":
            _gb.welford(codes, reader.as_float64(raw, a.col), st["cnt"], st["mean"], st["m2"])
        elif op in ("count", "count_na"):
            if a.isfloat:
                _gb.count_float(codes, reader.as_float64(raw, a.col), st["cnt"])
            else:
                _gb.count_valid(codes, _valid_mask(raw, reader, a.col), st["cnt"])
        elif op in ("min", "max"):
            if a.isfloat:
                _gb.minmax_float(codes, reader.as_float64(raw, a.col), st["acc"], op == "max")
            else:
                _gb.minmax_int(codes, reader.as_int64(raw, a.col), st["acc"], op == "max",
                               _valid_mask(raw, reader, a.col))
        elif op in ("first", "last"):
            _gb.first_last(codes, s, st["pos"], op == "last", _valid_mask(raw, reader, a.col))
        elif op == "count_distinct":
            w = _value_words(raw, reader, a.col)
            pr = reader.buf(("pairs", j), (e - s, 1 + a.vwords), np.dtype(np.uint64))
            k = _gb.pair_keys(codes, w, pr)
            if k:
                ids = reader.buf(("pairids",), (k,), np.dtype(np.int64))
                P.pairs[j].ids(pr[:k], ids)


def _codes(plan, keys, s, e, mask, reader, table_or_none, insert=True, P=None):
    """Group ids of rows [s, e) (int64, -1 where `mask` drops the row); with the partial `P`, its
    rows are counted as well (`_gb.rows_seen`)."""
    n = e - s
    codes = reader.buf(("codes",), (n,), np.dtype(np.int64))
    if plan.kind == "direct":
        if not keys:
            if mask is None:
                codes[:] = 0
            else:
                np.subtract(mask.astype(np.int64), 1, out=codes)
        elif len(keys) == 1 and P is not None:
            v = reader.as_key(reader.read(keys[0].src, s, e, "key"), ("key", 0))
            got = _gb.direct_rows(v, keys[0].rng[0], codes, P.nrows, P.order, P.norder, mask)
            if got < 0:
                raise _out_of_range(keys[0], s, e)
            P.norder = got
            return codes
        else:
            for j, k in enumerate(keys):
                v = reader.as_key(reader.read(k.src, s, e, "key"), ("key", j))
                if not _gb.direct_codes(v, k.rng[0], plan.strides[j], codes, j == 0,
                                        mask if j == 0 else None, k.rng[1]):
                    raise _out_of_range(k, s, e)
    else:
        cols = [reader.read(k.src, s, e, "key") for k in keys]
        if plan.nwords == 1 and len(cols) == 1:
            c = np.ascontiguousarray(cols[0])
            fk = c.dtype.itemsize if c.dtype.kind in "fc" and c.dtype.itemsize in (4, 8) else 0
            src = c.view(np.uint8).reshape(n, c.dtype.itemsize)
            if P is not None and insert and table_or_none.n < HASH_ROWS_MAX:
                # ids and row counts in one pass; it stops where a new group outgrows P's arrays
                i = 0
                while True:
                    i, P.norder = table_or_none.ids_rows(src, fk, codes, P.nrows, P.order, P.norder, mask, i)
                    if i >= n:
                        return codes
                    P.grow(table_or_none.n)
            table_or_none.ids_column(src, fk, codes, mask, insert)
        else:
            words = reader.words(cols, plan.offsets, plan.nwords, "key")
            table_or_none.ids(words, codes, mask, insert)
        if P is not None:
            P.grow(table_or_none.n)
    if P is not None:
        P.norder = _gb.rows_seen(codes, P.nrows, P.order, P.norder)
    return codes


def _sums_plan(plan, aggs, cols, nrows):
    """(j of the integer sum or None, j of the float sum or mean or None, narrow) when the query is
    one integer key on the direct path and at most one integer sum and one float sum or mean (counts
    of columns without NaN come from the rows counted): `_gb.direct_sums` then does a block in one
    pass; None otherwise.  `narrow` (the bound's bits, 2**narrow above every magnitude) when there is
    an integer sum and every count and integer sum fits in 32 bits, by the `nrows` rows and the
    integer column's range from its statistics: then `_gb.direct_sums32` does it over a state of 8
    bytes a slot (16 with a float sum) instead of 16 (32)."""
    if plan.kind != "direct" or len(plan.keys) != 1:
        return None
    js = _sum_columns(aggs)
    if js is None:
        return None
    ji, jf = js
    narrow = False
    if ji is not None and nrows <= NARROW_MAX:
        rng = _int_range(cols[ji])
        if rng is not None:
            # every value in -2**bits..2**bits - 1, so no sum of the rows leaves 32 bits
            bits = max(abs(rng[0]), abs(rng[0] + rng[1] - 1), 1).bit_length()
            if (nrows << bits) <= NARROW_MAX + 1:
                narrow = bits        # the kernel refuses a value beyond (statistics out of step)
    return ji, jf, narrow


def _hash_sums_plan(plan, aggs):
    """(j of the integer sum or None, j of the float sum or mean or None) when the query is one hashed
    key of at most 8 bytes and at most one integer sum and one float sum or mean (counts of columns
    without NaN come from the rows counted): `KeyTable.ids_sums` then looks a block's keys up, counts
    its rows and adds its values in one pass, without group ids; None otherwise."""
    if plan.kind != "hash" or len(plan.keys) != 1 or plan.nwords != 1:
        return None
    return _sum_columns(aggs)


def _sum_columns(aggs):
    """(j of the integer sum or None, j of the float sum or mean or None) when the aggregations are at
    most one integer sum and one float sum or mean of columns of at most 8 bytes, besides counts of
    columns without NaN (those come from the rows counted); None otherwise."""
    ji = jf = None
    for j, a in enumerate(aggs):
        if a.op in ("count", "count_na") and not a.hasna:
            continue
        if a.dtype.kind not in "biuf" or a.dtype.itemsize > 8:
            return None
        if a.op == "sum" and not a.isfloat and ji is None:
            ji = j
        elif (a.op == "mean" or (a.op == "sum" and a.isfloat)) and jf is None:
            jf = j
        else:
            return None
    return ji, jf


def _hash_sums(P, key, hsums, s, e, mask, cols, aggs, reader):
    """Rows [s, e) looked up, counted and summed into the partial `P` by `KeyTable.ids_sums`
    (`_hash_sums_plan`'s): the states `_codes` + `_update` would leave, without the group ids."""
    ji, jf = hsums
    parts = reader.pieces(key.src, s, e)
    if parts is None:
        parts = [(0, e - s, reader.read(key.src, s, e, "key"))]
    iv = reader.as_int64(reader.read(cols[ji], s, e), aggs[ji].col) if ji is not None else None
    fv = reader.as_float64(reader.read(cols[jf], s, e), aggs[jf].col) if jf is not None else None
    for lo, hi, c in parts:
        c = np.ascontiguousarray(c)
        fk = c.dtype.itemsize if c.dtype.kind in "fc" and c.dtype.itemsize in (4, 8) else 0
        src = c.view(np.uint8).reshape(hi - lo, c.dtype.itemsize)
        piv = iv if iv is None or (lo == 0 and hi == len(iv)) else iv[lo:hi]
        pfv = fv if fv is None or (lo == 0 and hi == len(fv)) else fv[lo:hi]
        pm = mask if mask is None or (lo == 0 and hi == len(mask)) else mask[lo:hi]
        i = 0
        while True:
            ia = P.state[ji]["acc"] if ji is not None else None
            fa = P.state[jf]["acc"] if jf is not None else None
            i, P.norder = P.table.ids_sums(src, fk, P.nrows, P.order, P.norder, piv, ia, pfv, fa, pm, i)
            if i >= hi - lo:
                break
            P.grow(P.table.n)      # a new group past the partial's arrays: they grow, the pass goes on


def _direct_sums(P, key, sums, s, e, mask, cols, aggs, reader):
    """Rows [s, e) counted and summed into the partial `P` by `_gb.direct_sums` (`_sums_plan`'s)."""
    ji, jf, narrow = sums
    kv = reader.as_key(reader.read(key.src, s, e, "key"), ("key", 0))
    iv = fv = None
    if ji is not None:
        iv = reader.as_int64(reader.read(cols[ji], s, e), aggs[ji].col)
    if jf is not None:
        fv = reader.as_float64(reader.read(cols[jf], s, e), aggs[jf].col)
    if narrow:
        got = _gb.direct_sums32(kv, key.rng[0], P.packed, P.order, P.norder, iv, fv, mask, narrow)
        if got == -2:
            lo, hi = -(1 << narrow), (1 << narrow) - 1
            raise ValueError(f"group-by: a value of column {aggs[ji].col!r} in rows {s}..{e - 1} lies "
                             f"outside {lo}..{hi}, the range its chunk statistics give (damaged statistics?)")
    else:
        got = _gb.direct_sums(kv, key.rng[0], P.packed, P.order, P.norder, iv, P.cols[0], fv, P.cols[1], mask)
    if got < 0:
        raise _out_of_range(key, s, e)
    P.norder = got


def _gather_sums(plan, aggs, sums, partials, runs=None):
    """(key values, [(name, result)]) of a `_sums_plan` query from the parts' states (`partials`,
    in part order, each with a row): `_gb.gather_sums` takes every group's count and sums from the
    states in part order, the additions `_fold` would make, and writes them in the groups' order
    into the result columns, with no pass over the slots no group uses.  `runs`: see `aggregate`
    and `_gb.gather_sums`."""
    ji, jf, narrow = sums
    nslots = plan.nslots
    key = plan.keys[0]
    want_cnt = any(j != ji and j != jf or a.op == "mean" for j, a in enumerate(aggs))
    kv = np.empty(nslots, np.int64)
    cnt = np.empty(nslots, np.int64) if want_cnt else None
    isum = np.empty(nslots, np.int64) if ji is not None else None
    fsum = np.empty(nslots, np.float64) if jf is not None else None
    P0 = partials[0]
    icol, fcol = (1, 2) if narrow else (P0.cols[0], P0.cols[1])
    n = _gb.gather_sums([P.packed for P in partials], [P.order[:P.norder] for P in partials],
                        bool(narrow), icol, fcol, key.rng[0], kv, cnt, isum, fsum, runs)
    results = []
    for j, a in enumerate(aggs):
        odt = _out_dtype(a.op, a.dtype)
        if j == ji:
            r = isum[:n].astype(odt, copy=False)
        elif j == jf and a.op == "mean":
            r = fsum[:n]
            with np.errstate(invalid="ignore", divide="ignore"):
                np.divide(r, cnt[:n], out=r)
        elif j == jf:
            r = fsum[:n].astype(odt, copy=False)
        else:                       # a count of a column without NaN: the rows counted
            r = cnt[:n].copy()
        results.append((a.out, r))
    # the keys as `plan.key_values` gives them: the slot's value in the column's dtype
    kv = kv[:n].astype(key.src_dtype, copy=False)
    if key.decode is not None:
        kv = np.asarray(key.decode)[kv.astype(np.int64)] if n else np.empty(0, key.dtype)
    return [kv.astype(key.dtype, copy=False)], results


def _out_of_range(key, s, e):
    lo, n = key.rng
    return ValueError(f"group-by column {key.name!r}: a value in rows {s}..{e - 1} lies outside "
                      f"{lo}..{lo + n - 1}, the range its chunk statistics give (damaged statistics?)")


def _mask_classes(bool_arr, bounds):
    """Per block, from the filter's chunk statistics: SKIP (no row kept: nothing is read), WHOLE
    (every row kept: the filter is not read either) or SCAN; None without statistics."""
    get = getattr(bool_arr, "chunk_stats", None)
    if get is None or not bounds:
        return None
    try:
        st = get()
    except Exception:       # statistics only spare reads: without them every block is read
        return None
    if st is None or not len(st[0]):
        return None
    r = planner.block_ranges(st, bounds)
    known = np.asarray(r.known, bool)
    cls = np.full(len(bounds), planner.SCAN, np.int8)
    cls[known & ~np.asarray(r.hi, bool)] = planner.SKIP
    cls[known & np.asarray(r.lo, bool)] = planner.WHOLE
    return cls


def _mask_block(bool_arr, s, e, reader, cls=None):
    if bool_arr is None or cls == planner.WHOLE:
        return None
    m = reader.read(bool_arr, s, e, "mask")
    if m.dtype != bool:
        m = m.astype(bool)
    return np.ascontiguousarray(m).view(np.uint8)


# ----------------------------------------------------------------------------- the engine
def aggregate(table, groupby_cols, agg_list, bool_arr=None, use_cache=True):
    """{'keys': [arrays of the key columns], 'aggs': [(name, array)]} for the groups in bquery's
    order."""
    groupby_cols = _check_groupby_cols(table, groupby_cols)
    specs = parse_agg_list(table, agg_list)
    n = len(table)
    bool_arr = _check_bool_arr(bool_arr, n)
    keys = _make_keys(table, groupby_cols, use_cache)
    plan = _Plan(keys, n)
    aggs = [_Agg(c, op, out, table[c].dtype) for c, op, out in specs]
    cols = [table[a.col] for a in aggs]
    arrays = [k.src for k in keys] + cols
    blen = _block_len(arrays + ([bool_arr] if bool_arr is not None else []))
    bounds = [(s, min(s + blen, n)) for s in range(0, n, blen)]
    reader = _Reader(blen)
    classes = _mask_classes(bool_arr, bounds) if bool_arr is not None else None
    parts = _parts(len(bounds))
    sums = _sums_plan(plan, aggs, cols, n)
    hsums = _hash_sums_plan(plan, aggs)
    # the direct plans' states taken here, on the calling thread, from the buffers the last query
    # kept (`_state_words`), and filled by the part that uses them: memory a worker thread allocates
    # comes fresh from the system on every query (a page fault every 4 KiB, a few ms for 100,000
    # groups, which made the worker's part the slower one)
    made = [_Partial(plan, aggs, plan.nslots, sums) for _ in parts[1:]] \
        if plan.kind == "direct" else None
    # integer sums and counts only: any split of the blocks between the states gives the same
    # results, so the threads take short runs of blocks as they become free (a thread that gets less
    # CPU holds up only its last run) into one state each, and the groups' order is recovered from
    # where each run's new groups begin in its state's order (`_gather_sums`)
    runs = _runs(len(bounds), len(parts) - 1) if sums is not None and sums[1] is None and len(parts) > 2 else None
    # part p's partial is folded into the total once parts 0..p-1 are: the same additions in the
    # same order whichever thread did which part, so floating-point results repeat bit for bit
    done, lock = {}, threading.Lock()
    folded = {"next": 0, "G": None}

    def blocks(P, first, stop, new):
        """Blocks first..stop-1 into the partial `P` (`new()` makes it at the first block read)."""
        reader.open_chunks(arrays + [bool_arr], first, stop,
                           [keys[0].src] if hsums is not None else ())
        try:
            for k in range(first, stop):
                s, e = bounds[k]
                cls = None if classes is None else classes[k]
                if cls == planner.SKIP:
                    continue                    # the filter's statistics: no row kept, nothing read
                mask = _mask_block(bool_arr, s, e, reader, cls)
                if mask is not None and not mask.any():
                    continue                    # no row kept: no value column decoded
                if P is None:
                    P = new()
                if sums is not None:
                    _direct_sums(P, keys[0], sums, s, e, mask, cols, aggs, reader)
                    continue
                if hsums is not None and P.table.n < HASH_ROWS_MAX:
                    _hash_sums(P, keys[0], hsums, s, e, mask, cols, aggs, reader)
                    continue
                codes = _codes(plan, keys, s, e, mask, reader, P.table, P=P)
                _update(P, codes, s, e, cols, aggs, reader)
        finally:
            reader.close_chunks()
        return P

    mine, spare, ran = threading.local(), list(made or ()), []

    def state():
        with lock:
            Q = spare.pop(0) if spare else _Partial(plan, aggs, plan.nslots, sums)
        return Q.reset()

    def run(r):
        # this thread's state; its runs come in ascending order (run_each hands them out so)
        P = getattr(mine, "P", None)
        start = P.norder if P is not None else 0
        P = mine.P = blocks(P, runs[r], runs[r + 1], state)
        reader.release()
        if P is not None:
            with lock:
                ran.append((r, P, start, P.norder))

    def part(p):
        P = blocks(None, parts[p], parts[p + 1],
                   lambda: made[p].reset() if made is not None else _Partial(plan, aggs, 64))
        reader.release()
        with lock:
            done[p] = P
            # the sums plan's states are gathered straight into the results after the parts
            # (`_gather_sums`), not folded slot by slot on the thread that finishes last
            while sums is None and folded["next"] in done:
                Q = done.pop(folded["next"])
                folded["next"] += 1
                if Q is None:
                    continue
                if folded["G"] is None:
                    folded["G"] = Q
                else:
                    _fold(plan, aggs, folded["G"], Q)

    if runs is not None:
        parallel.run_each(run, range(len(runs) - 1))
        ran.sort(key=lambda x: x[0])
        got, at = [], {}
        for _, P, _, _ in ran:
            if id(P) not in at:
                at[id(P)] = len(got)
                got.append(P)
        by = np.array([(at[id(P)], a, b) for _, P, a, b in ran], np.int64).reshape(-1, 3)
    else:
        parallel.run_each(part, range(len(parts) - 1))
    if sums is not None:
        if runs is None:
            got, by = [done[p] for p in range(len(parts) - 1) if done.get(p) is not None], None
        if got:
            out = _gather_sums(plan, aggs, sums, got, by)
            _keep_states(made)
            return {"keys": list(zip(groupby_cols, out[0])), "aggs": out[1]}
    G = folded["G"]
    if G is None:
        G = _Partial(plan, aggs, plan.nslots if plan.kind == "direct" else 64)
        if plan.kind == "direct":
            G.reset()
    gid = G.order[:G.norder]
    if not keys and bool_arr is None:
        gid = np.zeros(1, np.int64)         # no key: one total row, as bquery gives
    key_values = plan.key_values(gid, G.table.keys_array() if G.table is not None else None)
    # sorted_count_distinct needs the rows in order: one more pass, on this thread
    scd = {j: _sorted_count_distinct(table, plan, keys, a, bool_arr, bounds, reader, G)
           for j, a in enumerate(aggs) if a.op == "sorted_count_distinct"}
    results = []
    for j, a in enumerate(aggs):
        results.append((a.out, _finish(table, a, G, j, gid, scd.get(j))))
    if made is not None:
        _keep_states(made)
    return {"keys": list(zip(groupby_cols, key_values)), "aggs": results}


def _check_groupby_cols(table, groupby_cols):
    if isinstance(groupby_cols, str):
        groupby_cols = [groupby_cols]
    groupby_cols = list(groupby_cols)
    for c in groupby_cols:
        if c not in table.names:
            raise KeyError(f"groupby_cols: {c!r} is not a column of the table (columns: {table.names})")
    if len(set(groupby_cols)) != len(groupby_cols):
        raise ValueError(f"groupby_cols repeat a column: {groupby_cols}")
    return groupby_cols


def _check_bool_arr(bool_arr, n):
    if bool_arr is None:
        return None
    if not hasattr(bool_arr, "dtype"):
        bool_arr = np.asarray(bool_arr)
    if np.dtype(bool_arr.dtype) != bool:
        raise ValueError(f"bool_arr must be boolean, got dtype {bool_arr.dtype}")
    if len(bool_arr) != n:
        raise ValueError(f"bool_arr has {len(bool_arr)} rows, the table {n}")
    return bool_arr


def _parts(nblocks):
    """Where the parts start (and the last ends), as block numbers: one contiguous run of blocks per
    thread, each with a partial of its own.  The cut depends on the number of blocks and threads
    only, never on which thread runs what.  (More, smaller parts would even out threads that get
    unequal CPU, but each costs a partial of fresh memory, touched group by group, and a fold.)"""
    nparts = max(1, min(parallel.get_nthreads(), nblocks))
    return [nblocks * p // nparts for p in range(nparts + 1)]


def _runs(nblocks, nparts):
    """Where the runs of blocks the threads take one at a time (`aggregate`, integer sums) start (and
    the last ends): RUNS_PER_THREAD a thread, so that one run is a small share of the work, each of
    at least 2 blocks (a column's chunk reader reads a run of one chunk the slow way); None when that
    makes no more runs than the `nparts` fixed parts."""
    nruns = min(nparts * RUNS_PER_THREAD, nblocks // 2)
    if nruns <= nparts:
        return None
    return [nblocks * r // nruns for r in range(nruns + 1)]


def _fold(plan, aggs, G, p):
    """Add the partial `p` into `G`, the partial of every block before p's (groups renumbered
    through G's table on the hash path); p's new groups go to the end of G's order."""
    if plan.kind == "hash":
        ka = p.table.keys_array()
        m = np.empty(len(ka), np.int64)
        if len(ka):
            G.table.ids(ka, m)
        G.grow(max(G.table.n, 1))
        new = m[p.order[:p.norder]]
    else:
        m = slice(0, plan.nslots)      # the same slots in every partial
        new = p.order[:p.norder]
    new = new[G.nrows[new] == 0]        # groups no earlier part has
    G.order[G.norder:G.norder + len(new)] = new
    G.norder += len(new)
    k = plan.nslots if isinstance(m, slice) else len(m)
    if getattr(G, "packed", None) is not None:
        # `direct_sums` states: every column in one pass over the slots (unused columns are 0)
        if G.sums[2]:
            _gb.fold_sums32(G.packed, p.packed)
        else:
            _gb.fold_sums(G.packed, p.packed, G.cols[1] if G.sums[1] is not None else G.packed.shape[1])
        return G
    G.nrows[m] += p.nrows[:k]
    for j, a in enumerate(aggs):
        gs, ps = G.state[j], p.state[j]
        op = a.op
        if op in ("sum", "mean") or (op in ("count", "count_na") and a.hasna):
            name = "cnt" if op in ("count", "count_na") else "acc"
            gs[name][m] += ps[name][:k]
        elif op == "std":
            na, nb = gs["cnt"][m], ps["cnt"][:k]
            ma, mb = gs["mean"][m], ps["mean"][:k]
            tot = na + nb
            with np.errstate(invalid="ignore", divide="ignore"):
                d = mb - ma
                frac = np.where(tot > 0, nb / np.maximum(tot, 1), 0.0)
                mean = np.where(nb > 0, ma + d * frac, ma)
                m2 = np.where(nb > 0, gs["m2"][m] + ps["m2"][:k] + d * d * na * frac, gs["m2"][m])
            gs["cnt"][m], gs["mean"][m], gs["m2"][m] = tot, mean, m2
        elif op in ("min", "max"):
            f = (np.fmin if op == "min" else np.fmax) if a.isfloat else (np.minimum if op == "min" else np.maximum)
            gs["acc"][m] = f(gs["acc"][m], ps["acc"][:k])
        elif op == "first":
            gs["pos"][m] = np.minimum(gs["pos"][m], ps["pos"][:k])
        elif op == "last":
            gs["pos"][m] = np.maximum(gs["pos"][m], ps["pos"][:k])
        elif op == "count_distinct":
            ka = p.pairs[j].keys_array()
            if len(ka):
                if not isinstance(m, slice):
                    ka[:, 0] = m[ka[:, 0].astype(np.int64)].astype(np.uint64)
                G.pairs[j].ids(ka, np.empty(len(ka), np.int64))
    return G


def _finish(table, a, G, j, gid, scd):
    st, op = G.state[j], a.op
    odt = _out_dtype(op, a.dtype)
    if op == "sum":
        return st["acc"].take(gid).astype(odt, copy=False)
    if op == "mean":
        acc = st["acc"].take(gid)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.divide(acc, G.nrows.take(gid), out=acc)
    if op == "std":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(st["m2"][gid] / st["cnt"][gid])
    if op in ("count", "count_na"):
        return (st["cnt"] if a.hasna else G.nrows)[gid].astype(np.int64)
    if op in ("min", "max"):
        acc = st["acc"][gid]
        if a.isfloat:
            return acc.astype(odt)
        if a.dtype.kind in "mM":
            acc = acc.astype(np.int64)
            acc[acc == (_I64_MAX if op == "min" else _I64_MIN)] = _I64_MIN    # no value: NaT
            return acc.view(odt)
        return acc.astype(odt)
    if op in ("first", "last"):
        pos = st["pos"][gid]
        ok = (pos >= 0) & (pos < _I64_MAX)
        out = np.zeros(len(gid), odt)
        if a.dtype.kind in "fc":
            out[:] = np.nan
        elif a.dtype.kind in "mM":
            out[:] = np.array("NaT", odt)
        if ok.any():
            col = table[a.col]
            idx = pos[ok]
            out[ok] = np.asarray(col[idx]) if not isinstance(col, np.ndarray) else col[idx]
        return out
    if op == "count_distinct":
        ka = G.pairs[j].keys_array()
        counts = np.bincount(ka[:, 0].astype(np.int64), minlength=G.n) if len(ka) else np.zeros(G.n, np.int64)
        return counts[gid].astype(np.int64)
    if op == "sorted_count_distinct":
        return scd[gid]
    raise AssertionError(op)


def _sorted_count_distinct(table, plan, keys, a, bool_arr, bounds, reader, G):
    runs = _gb.SortedRuns(a.vwords)
    col = table[a.col]
    stamp = np.full(G.n, -1, np.int64)
    out = np.zeros(G.n, np.int64)
    for s, e in bounds:
        mask = _mask_block(bool_arr, s, e, reader)
        if mask is not None and not mask.any():
            continue
        codes = _codes(plan, keys, s, e, mask, reader, G.table, insert=False)
        w = _value_words(reader.read(col, s, e), reader, a.col)
        runs.update(codes, w, stamp, out)
    return out


# ----------------------------------------------------------------------------- results
def groupby(table, groupby_cols, agg_list, bool_arr=None, rootdir=None, make_table=None,
            out_flavor=None, use_cache=True):
    """bquery's ``ctable.groupby``: a ctable (at `rootdir` when given) of the group columns first,
    then the aggregates, one row per group in the order of the groups' first rows.  `out_flavor`
    'pandas' gives a DataFrame, 'numpy' a structured array."""
    res = aggregate(table, groupby_cols, agg_list, bool_arr, use_cache)
    cols = res["keys"] + res["aggs"]
    names = [c for c, _ in cols]
    if len(set(names)) != len(names):
        raise ValueError(f"the result would have repeated column names: {names}")
    arrays = [v for _, v in cols]
    if out_flavor in (None, "bcolz", "ctable"):
        if not names:
            raise ValueError("a group-by with no group column and no aggregation has no columns")
        return make_table(arrays, names=names, rootdir=rootdir) if rootdir else \
            make_table(arrays, names=names)
    if out_flavor == "numpy":
        out = np.empty(len(arrays[0]) if arrays else 0, dtype=[(nm, a.dtype) for nm, a in zip(names, arrays)])
        for nm, a in zip(names, arrays):
            out[nm] = a
        return out
    if out_flavor == "pandas":
        import pandas as pd
        return pd.DataFrame({nm: a for nm, a in zip(names, arrays)}, columns=names)
    raise ValueError(f"out_flavor must be 'bcolz', 'numpy' or 'pandas', got {out_flavor!r}")


# ----------------------------------------------------------------------------- where_terms
def _normalise_term(table, term):
    if not isinstance(term, (list, tuple)) or len(term) != 3:
        raise ValueError(f"a term is (column, operator, value), got {term!r}")
    col, op, value = term
    if col not in table.names:
        raise KeyError(f"where_terms: {col!r} is not a column of the table (columns: {table.names})")
    if not isinstance(op, str) or op.lower().strip() not in TERM_OPS:
        raise KeyError(f"where_terms: {op!r} is not an operator (known: {', '.join(sorted(TERM_OPS))})")
    op = TERM_OPS[op.lower().strip()]
    if op in ("in", "not in"):
        if not isinstance(value, (list, tuple, set, frozenset, np.ndarray)):
            raise ValueError(f"where_terms: {op!r} on {col!r} needs a list, tuple or set of values, got {value!r}")
        if len(value) < 1:
            raise ValueError(f"where_terms: the value list of {op!r} on {col!r} is empty")
    return col, op, value


def _as_dtype(v, dtype):
    """`v` as a one-element array of `dtype`, or None when no element of that dtype equals it (a
    string longer than the column's, a number out of range or with a fraction for integers)."""
    k = dtype.kind
    if k in "SU":
        if k == "S" and isinstance(v, str):
            try:
                v = v.encode("ascii")
            except UnicodeEncodeError:
                return None
        elif k == "U" and isinstance(v, bytes):
            try:
                v = v.decode("ascii")
            except UnicodeDecodeError:
                return None
        if not isinstance(v, (bytes, str)) or len(v) > dtype.itemsize // (4 if k == "U" else 1):
            return None
        if len(v) and v[-1:] in (b"\0", "\0"):
            return None         # NumPy strips trailing NULs: no element ends with one
        return np.array([v], dtype=dtype)
    try:
        x = np.array([v]).astype(dtype)
        back = x.astype(np.array([v]).dtype)
    except (TypeError, ValueError, OverflowError):
        return None
    same = back[0] == np.array([v])[0]
    if not same and k in "fc" and np.isnan(np.asarray(v, dtype=float)):
        same = True
    if not same and k in "mM" and np.isnat(x[0]) and np.isnat(np.array([v]).astype(dtype)[0]):
        same = True
    return x if same else None


def isin_table(values, dtype):
    """What `isin_block` looks values up in: the `values` that are elements of `dtype` (others can
    match no row), as a KeyTable, or, for integers spanning at most ISIN_SPAN, a byte table."""
    dtype = np.dtype(dtype)
    vals = [x for x in (_as_dtype(v, dtype) for v in values) if x is not None]
    if dtype.kind in "iub" and dtype.itemsize <= 8 and not (dtype.kind == "u" and dtype.itemsize == 8):
        arr = np.concatenate(vals).astype(np.int64) if vals else np.zeros(0, np.int64)
        lo = int(arr.min()) if len(arr) else 0
        if not len(arr) or int(arr.max()) - lo < ISIN_SPAN:
            span = np.zeros(int(arr.max()) - lo + 1 if len(arr) else 0, np.uint8)
            span[arr - lo] = 1
            return ("span", lo, span), 1
    nwords = max(1, -(-dtype.itemsize // 8))
    table = _gb.KeyTable(nwords, len(vals))
    if vals:
        arr = np.concatenate(vals)
        r = _Reader(len(arr))
        w = r.words([arr], [0], nwords, "v")
        table.ids(np.ascontiguousarray(w), np.empty(len(arr), np.int64))
    return table, nwords


def isin_block(vals, table, nwords, negate, reader, tag="isin"):
    """uint8 mask of the rows of `vals` that are (not) in `table` (`isin_table`'s)."""
    out = reader.buf(("isin", tag), (len(vals),), np.dtype(np.uint8))
    if len(vals) == 0:
        return out
    if isinstance(table, tuple):
        _gb.isin_span(reader.as_key(vals, tag), table[1], table[2], out, negate)
    elif nwords == 1 and vals.dtype.itemsize == 8 and vals.dtype.kind in "iumM":
        _gb.isin_mask(table, np.ascontiguousarray(vals).view(np.uint64).reshape(len(vals), 1), out, negate)
    else:
        _gb.isin_mask(table, reader.words([vals], [0], nwords, tag), out, negate)
    return out


_CMP = {"==": np.equal, "!=": np.not_equal, ">": np.greater, ">=": np.greater_equal,
        "<": np.less, "<=": np.less_equal}


def _term_mask(vals, op, value, isin, reader, tag="isin"):
    """Boolean mask of the elements of `vals` where the term (op, value) holds; `isin` is
    `isin_table`'s answer for ``in`` / ``not in``."""
    if op in ("in", "not in"):
        t, nw = isin
        return isin_block(vals, t, nw, op == "not in", reader, tag).view(bool)
    return _CMP[op](vals, _scalar_for(value, vals.dtype))


def terms_may_match(table, term_list):
    """bquery's ``where_terms_factorization_check``: False when some term of `term_list` holds for
    no distinct value of its column's valid factorization cache (so `where_terms` would select no
    row), else True.  A term on a column with no valid cache is taken to match (nothing is read to
    find out), as bquery takes it."""
    if not isinstance(term_list, (list, tuple, set)):
        raise ValueError(f"where_terms_factorization_check: only term lists are supported, got "
                         f"{type(term_list).__name__}")
    terms = [_normalise_term(table, t) for t in term_list]
    loaded = {}
    for col, op, value in terms:
        if col not in loaded:
            loaded[col] = factor_cache.load(table, col)
        if loaded[col] is None:
            continue
        uniques = np.asarray(loaded[col][1])
        isin = isin_table(list(value), uniques.dtype) if op in ("in", "not in") else None
        if not _term_mask(uniques, op, value, isin, _Reader(max(len(uniques), 1))).any():
            return False
    return True


def where_terms_mask(table, term_list, cache=False):
    """A NumPy boolean array: the rows where every term holds.  With `cache`, a term on a column
    with a valid factorization cache is evaluated once per distinct value, and the rows look their
    answer up by code: the column itself is not decoded."""
    if not isinstance(term_list, (list, tuple, set)):
        raise ValueError(f"where_terms: only term lists are supported, got {type(term_list).__name__}")
    terms = [_normalise_term(table, t) for t in term_list]
    n = len(table)
    out = np.ones(n, bool)
    if not terms or n == 0:
        return out
    tables = {}
    for k, (col, op, value) in enumerate(terms):
        if op in ("in", "not in"):
            tables[k] = isin_table(list(value), table[col].dtype)
    # per term: the array read block by block, and for a cached column the byte table that maps
    # each code to whether its value satisfies the term
    srcs, luts = [], {}
    loaded = {}
    for k, (col, op, value) in enumerate(terms):
        got = None
        if cache:
            if col not in loaded:
                loaded[col] = factor_cache.load(table, col)
            got = loaded[col]
        if got is None:
            srcs.append(table[col])
            continue
        codes, uniques = got
        uniques = np.asarray(uniques)
        r = _Reader(max(len(uniques), 1))
        luts[k] = np.ascontiguousarray(_term_mask(uniques, op, value, tables.get(k), r), dtype=np.uint8)
        srcs.append(codes)
    blen = _block_len([s for s in srcs if not isinstance(s, np.ndarray)] or [table[terms[0][0]]])
    bounds = [(s, min(s + blen, n)) for s in range(0, n, blen)]
    reader = _Reader(blen)

    def block(b):
        s, e = bounds[b]
        o = out[s:e]
        for k, (col, op, value) in enumerate(terms):
            vals = reader.read(srcs[k], s, e)
            if k in luts:
                m = reader.buf(("lut", k), (len(vals),), np.dtype(np.uint8))
                _gb.isin_span(reader.as_key(vals, "lut"), 0, luts[k], m, False)
                m = m.view(bool)
            else:
                m = _term_mask(vals, op, value, tables.get(k), reader)
            if k == 0:
                np.copyto(o, m)
            else:
                np.logical_and(o, m, out=o)
            if not o.any():
                return
    parallel.run_all(block, range(len(bounds)))
    return out


def _scalar_for(value, dtype):
    if dtype.kind == "S" and isinstance(value, str):
        return value.encode()
    if dtype.kind == "U" and isinstance(value, bytes):
        return value.decode()
    return value


# ----------------------------------------------------------------------------- factorizations
def factorize(col):
    """(codes, uniques) of a column: int64 codes numbered in order of first appearance (NaNs one
    value), and the distinct values in that order."""
    n = len(col)
    dt = np.dtype(col.dtype)
    key = _Key("c", col, dt, rng=None)
    plan = _Plan.__new__(_Plan)
    plan.keys = [key]
    plan.kind = "hash"
    plan.offsets = [0]
    plan.nwords = max(1, -(-dt.itemsize // 8))
    blen = _block_len([col])
    reader = _Reader(blen)
    table = _gb.KeyTable(plan.nwords)
    codes = np.empty(n, np.int64)
    for s in range(0, n, blen):
        e = min(s + blen, n)
        c = _codes(plan, [key], s, e, None, reader, table)
        codes[s:e] = c
    uniques = plan.key_values(np.arange(table.n), table.keys_array())[0]
    return codes, uniques


def unique(table, col_or_col_list):
    """bquery's ``unique``: the distinct values of a column (a list) in order of first appearance,
    or a list of them for a list of columns."""
    single = not isinstance(col_or_col_list, (list, tuple))
    cols = [col_or_col_list] if single else list(col_or_col_list)
    out = []
    for c in cols:
        if c not in table.names:
            raise KeyError(f"unique: {c!r} is not a column of the table (columns: {table.names})")
        cached = factor_cache.load(table, c)
        if cached is not None:
            out.append(list(np.asarray(cached[1])))
        else:
            out.append(list(factorize(table[c])[1]))
    return out[0] if single else out


def is_in_ordered_subgroups(table, basket_col=None, bool_arr=None, _max_len_subgroup=1000):
    """bquery's ``is_in_ordered_subgroups``: with the table sorted into runs of `basket_col` (baskets),
    a boolean array true on every row of each basket that has a row where `bool_arr` is true;
    None without `bool_arr`."""
    if basket_col is None:
        raise ValueError("is_in_ordered_subgroups needs basket_col")
    if basket_col not in table.names:
        raise KeyError(f"is_in_ordered_subgroups: {basket_col!r} is not a column (columns: {table.names})")
    if bool_arr is None:
        return None
    n = len(table)
    bool_arr = _check_bool_arr(bool_arr, n)
    col = table[basket_col]
    out = np.zeros(n, bool)
    blen = _block_len([col])
    reader = _Reader(blen)
    pend_start, pend_hit, prev = 0, False, None     # the basket still open at the block's start
    for s in range(0, n, blen):
        e = min(s + blen, n)
        b = reader.read(col, s, e)
        m = np.asarray(bool_arr[s:e], dtype=bool)
        cut = np.flatnonzero(b[1:] != b[:-1]) + 1   # baskets starting inside the block
        if prev is not None and b[0] != prev:       # one starts at s: the open one ends
            out[pend_start:s] = pend_hit
            pend_start, pend_hit = s, False
        hits = np.logical_or.reduceat(m, np.concatenate([[0], cut]))
        pend_hit = pend_hit or bool(hits[0])
        if len(cut):
            out[pend_start:s + cut[0]] = pend_hit
            out[s + cut[0]:s + cut[-1]] = np.repeat(hits[1:-1], np.diff(cut))
            pend_start, pend_hit = s + cut[-1], bool(hits[-1])
        prev = b[-1]
    out[pend_start:n] = pend_hit
    return out
