"""`Selection`: one query over the rows of a table or an array, all its steps share in one object.

A selection holds the query (a boolean expression, its ``in`` already rewritten, or a boolean mask),
the operands its names were resolved to, the number of rows, the block length (`rules.block_length`)
and, made once when first asked, the planner's `Plan` of its blocks.  Its methods are the query's
steps: the mask block by block, the matching rows of the outputs block by block (`rows`, with `skip`
and `limit`), all of them at once (`fetch`), their number (`count`) and the plan (`explain`).  The
containers resolve the names and check the arguments, build one selection and call these.

A selection whose query is an expression can also be evaluated whole (`evaluate`, what ``a[expr]``
gives): a boolean result of one value per row then becomes its mask, and `values` hands out the
values of one array at its true rows, by the fastest strategy the arrays allow (a carray's `where`):
all in memory, one C iterator over the chunks; else a producer thread that compacts a window of
chunks ahead; else the fused engine, the mask and the values decoded a block at a time on every
thread; with a limit (or values of objects or of several dimensions), the true positions block by
block, cut by `skip` and `limit` before any value is read.

An output (of `rows` and `fetch`) is what `chunked_eval.select_blocks` takes: ``("positions",
None)`` for the row numbers, ``("operand", name)`` for an operand the expression reads (compacted from
its decoded block), ``("read", column)`` for another column (its matching rows read).
"""

import itertools

import numpy as np

from blzarr.query import chunked_eval as _ce
from blzarr.query import fused
from blzarr.query import planner
from blzarr.query import rules
from blzarr.query.lazyexpr import LazyExpr
from blzarr.runtime.params import defaults
from blzarr.storage.chunk import select_ahead, where_scalars


class Query:
    """The iterator a carray's or ctable's `where` returns: the matching values (rows) one by one, and

    - ``count()``: how many it gives in all (its `limit` and `skip` applied), counted in one pass
      without building them;
    - ``explain()``: its `blzarr.query.planner.Plan` (blocks skipped, taken whole, scanned)."""

    __slots__ = ("_rows", "_count_fn", "_explain_fn")

    def __init__(self, rows, count, explain):
        self._rows, self._count_fn, self._explain_fn = rows, count, explain

    def __iter__(self):
        return self._rows           # a for loop takes the values straight from the underlying iterator

    def __next__(self):
        return next(self._rows)

    def __getattr__(self, name):
        return getattr(self._rows, name)        # what the underlying iterator has (close, ...)

    def count(self):
        return self._count_fn()

    def explain(self):
        return self._explain_fn()


class Selection:
    """One query over `n` rows (see the module's docstring).

    `query` is a boolean expression (a str whose names `operands` binds: arrays of `n` rows and
    scalars) or a one-dimensional boolean mask of `n` values (a NumPy array, or an array that can be
    sliced, read in its own chunks when it has a `chunklen`).  `vm` is the evaluator asked for
    (None: ``defaults.vm`` when the query runs).  `chunklen` is the block length when no operand is
    chunked (a table's own), or a function giving it, asked only then."""

    __slots__ = ("expression", "mask", "operands", "n", "blen", "_vm", "_chunklen", "_plan")

    def __init__(self, query, operands, n, vm=None, chunklen=rules.DEFAULT_BLEN):
        self.n = n
        self._vm = vm
        self._chunklen = chunklen
        self._plan = None
        if isinstance(query, str):
            self.expression, self.mask, self.operands = query, None, operands
            self.blen = rules.block_length(operands.values(), chunklen)
        else:
            self.expression, self.mask, self.operands = None, query, {}
            own = None if isinstance(query, np.ndarray) else getattr(query, "chunklen", None)
            self.blen = own or rules.block_length((), chunklen)

    @property
    def vm(self):
        return self._vm or defaults.vm

    def _engine(self):
        """Whether the fused engine runs the query: an expression with an array operand, not for dask
        (whose masks NumPy evaluates block by block)."""
        return (self.mask is None and self.expression is not None and self.vm != "dask"
                and any(_ce._is_array(v) for v in self.operands.values()))

    def plan(self):
        """The planner's `Plan` of the expression over the blocks of `blen` rows (made once)."""
        if self._plan is None:
            self._plan = planner.plan(self.expression, self.operands, fused.block_bounds(self.n, self.blen))
        return self._plan

    def explain(self):
        """The `Plan` (a mask's: its own when it has one, else one block per chunk, nothing known)."""
        if self.expression is None:
            if hasattr(self.mask, "explain"):
                return self.mask.explain()
            cl = self._chunklen() if callable(self._chunklen) else self._chunklen
            return planner.Plan("<mask>", rules.mask_bounds(self.n, cl), None,
                                reason="the query is a mask, not an expression")
        return self.plan()

    # ------------------------------------------------------------------ the mask
    def mask_blocks(self):
        """(start, boolean block) over the rows, the expression evaluated block by block (a ValueError
        naming it when it does not give one boolean per row)."""
        n, blen, expression = self.n, self.blen, self.expression
        if self.mask is not None:
            for s in range(0, n, blen):
                yield s, np.asarray(self.mask[s:s + blen])
            return
        vm = self.vm
        if vm == "dask":
            vm = "python"
        ops = self.operands
        if not any(_ce._is_array(v) for v in ops.values()):
            value = next(_ce.evaluate_blocks(expression, ops, vm, blen))
            if value.dtype != bool or value.ndim != 0:
                raise ValueError(f"the expression {expression!r} does not give booleans "
                                 f"(it gives {value.dtype})")
            for s in range(0, n, blen):
                yield s, np.full(min(blen, n - s), bool(value))
            return
        s = 0
        for block in _ce.evaluate_blocks(expression, ops, vm, blen, self.plan()):
            if block.dtype != bool:
                raise ValueError(f"the expression {expression!r} does not give booleans "
                                 f"(it gives {block.dtype})")
            if block.ndim != 1:
                raise ValueError(f"the expression {expression!r} gives shape {block.shape}, "
                                 "not one boolean per row")
            if len(block) and s >= n or len(block) and s + len(block) > n:
                raise ValueError(f"the expression {expression!r} gives more values than rows")
            if len(block):
                yield s, block
            s += len(block)
        if s != n:
            raise ValueError(f"the expression {expression!r} gives {s} values for {n} rows")

    def positions(self):
        """The row numbers of all the matching rows (`numpy.intp`); a chunked mask's statistics skip
        its all-false blocks and give its all-true ones without decoding them."""
        if self.mask is not None and getattr(self.mask, "ndim", 1) == 1:
            parts = [idx + s for s, idx in true_positions(self.mask, self.blen) if idx.size]
        else:
            parts = [(idx + s) for s, m in self.mask_blocks() for idx in (np.flatnonzero(m),) if idx.size]
        return np.concatenate(parts).astype(np.intp, copy=False) if parts else np.empty(0, np.intp)

    # ------------------------------------------------------------------ the rows
    def blocks(self, outputs):
        """(start, positions in the block, [each output's matching rows]) of the blocks holding
        matching rows."""
        if self._engine():
            yield from _ce.select_blocks(self.expression, self.operands, self.vm, self.blen, outputs,
                                         self.plan())
            return
        for s, mask in self.mask_blocks():
            idx = np.flatnonzero(mask)
            if idx.size == 0:
                continue
            arrays = []
            for kind, x in outputs:
                if kind == "positions":
                    arrays.append((idx + s).astype(np.int_))
                else:
                    arrays.append(rules.gather(self.operands[x] if kind == "operand" else x, s, idx))
            yield s, idx, arrays

    def rows(self, outputs, skip=0, limit=None):
        """Lists of the outputs' matching rows, block by block, the first `skip` matching rows left
        out and at most `limit` (None: all) given."""
        blocks = (arrays for _, _, arrays in self.blocks(outputs))
        skip = max(int(skip or 0), 0)
        if not skip and limit is None:
            return blocks       # every block holds matching rows: nothing to cut
        return rules.skip_limit(blocks, skip, limit, size=lambda arrays: len(arrays[0]),
                                cut=lambda arrays, lo, hi: [a[lo:hi] for a in arrays])

    def fetch(self, outputs, dtype, skip=0, limit=None):
        """All the matching rows (`skip` and `limit` as in `rows`) as one structured array of `dtype`,
        whose fields are the outputs in order."""
        if limit is None and not skip and self._engine():
            # all the rows at once: the engine writes them into the result itself
            return _ce.select_into(self.expression, self.operands, self.vm, self.blen, outputs, dtype,
                                   self.plan())
        parts = list(self.rows(outputs, skip, limit))
        dtype = np.dtype(dtype)
        out = np.empty(sum(len(p[0]) for p in parts), dtype=dtype)
        off = 0
        for arrays in parts:
            m = len(arrays[0])
            for name, a in zip(dtype.names, arrays):
                out[name][off:off + m] = a
            off += m
        return out

    def count(self, skip=0, limit=None):
        """How many rows `rows` gives (`skip` and `limit` applied), counted without building them."""
        total = None
        expression = self.expression
        mask = self.mask
        if mask is not None:
            if hasattr(mask, "count_nonzero"):
                total = int(mask.count_nonzero())       # a lazy expression counts its own
            elif isinstance(mask, np.ndarray):
                total = int(np.count_nonzero(mask))
        elif self.vm != "dask":
            if self.n and any(_ce._is_array(v) for v in self.operands.values()):
                e = LazyExpr(expression, self.operands, self.vm, self.blen)
                if e.dtype != bool or e.ndim != 1:
                    raise ValueError(f"the expression {expression!r} does not give one boolean per row "
                                     f"(it gives {e.dtype}, shape {e.shape})")
                total = e.count_nonzero()
        if total is None:
            total = sum(int(np.count_nonzero(m)) for _, m in self.mask_blocks())
        total = max(0, total - max(int(skip or 0), 0))
        return total if limit is None else min(total, max(int(limit), 0))

    # ------------------------------------------------------------------ evaluated whole
    def evaluate(self):
        """The expression's value over all the rows at once, as ``blzarr.eval(..., out_flavor='numpy')``
        gives it.  A boolean value of `n` rows becomes the selection's mask: the steps after this read
        it instead of evaluating the expression again (`explain` still plans the expression)."""
        value = _ce.evaluate(self.expression, self.operands, self.vm, "numpy", self.blen)
        if isinstance(value, np.ndarray) and value.dtype == bool and value.ndim and len(value) == self.n:
            self.mask = value
        return value

    def true_positions(self, blen=None, skip=0, limit=None):
        """(start, positions of the true rows from start) over the mask in blocks of `blen` rows
        (None: the selection's), the first `skip` true rows left out and at most `limit` given; blocks
        without any are left out."""
        return rules.skip_limit(true_positions(self.mask, blen or self.blen), skip, limit,
                                _positions_size, _positions_cut)

    def values(self, target, skip=0, limit=None, elements=iter):
        """An iterator over the values of `target` at the true rows of the mask, one by one, the first
        `skip` left out and at most `limit` (None: all) given.  `target` is an array of `n` rows that
        can be sliced and has a `chunklen` (its blocks; its length is not asked again, which a reader
        of another process's writes would check its version for); `elements(block)` hands out the values of an
        array of them (the target's own iteration).  A one-dimensional target whose chunks and mask are
        all in memory starts now (its first chunk may be decoded here); the others at the first value."""
        found = _resident(target, self.n, self.mask, where_scalars, skip, limit)
        if found is None:
            found = itertools.chain.from_iterable(self._value_parts(target, skip, limit, elements))
        return found

    def _value_parts(self, target, skip, limit, elements):
        mask = self.mask
        parts = _resident(target, self.n, mask, select_ahead)
        if parts is not None:
            for vals in rules.skip_limit(parts, skip, limit):
                yield elements(vals)
            return
        n, cl = self.n, max(1, target.chunklen)
        if limit is None and target.dtype.kind != "O" and target.ndim == 1 and n:
            # the mask and the values decoded and compacted a window of chunks at a time on every
            # thread (blzarr.query.fused); this thread only hands out the selected values
            bounds = fused.block_bounds(n, cl)
            # the mask's statistics tell the blocks all false (nothing decoded) and all true (only the
            # values decoded); the others decode both and keep the selected values
            all_true, decode = mask_classes(mask, bounds)
            empty = np.empty(0, target.dtype)

            def pick(s, e, b):
                if b is None:
                    return target[s:e] if all_true[s // cl] else empty
                return b["x"][np.flatnonzero(b["m"])]
            sel = fused.map_blocks(bounds, fused.Decoder({"m": mask, "x": target}, cl), pick, decode=decode)
            for vals in rules.skip_limit(sel, skip, None):
                yield elements(vals)
            return
        for s, idx in self.true_positions(target.chunklen, skip, limit):
            yield elements(rules.gather(target, s, idx))


def _positions_cut(part, lo, hi):
    """`rules.skip_limit`'s cut of a (start, positions) pair."""
    return part[0], part[1][lo:hi]


def _positions_size(part):
    return part[1].size


def mask_classes(mask, bounds):
    """(all_true, decode) over the blocks `bounds` of the 1-d boolean `mask`: per block, whether its
    statistics say it is all true, and whether it must be decoded (neither all true nor all false);
    (None, None) when `mask` has no statistics."""
    if isinstance(mask, np.ndarray) and mask.dtype == bool and mask.ndim == 1 and bounds:
        # an evaluated mask (an expression's): its true rows counted per block, so that the values
        # of a block without any are not read (on object storage: not fetched)
        starts = np.fromiter((s for s, _ in bounds), np.intp, len(bounds))
        sizes = np.fromiter((e - s for s, e in bounds), np.int64, len(bounds))
        trues = np.add.reduceat(mask.view(np.uint8), starts, dtype=np.int64)
        all_true = trues == sizes
        return all_true.tolist(), ((trues > 0) & ~all_true).tolist()
    get = getattr(mask, "chunk_stats", None)
    if get is None or not bounds or getattr(mask, "ndim", 1) != 1:
        return None, None
    st = get()
    if st is None or not len(st[0]):
        return None, None
    r = planner.block_ranges(st, bounds)
    known = np.asarray(r.known, bool)
    all_true = known & np.asarray(r.lo, bool)
    all_false = known & ~np.asarray(r.hi, bool)
    return all_true.tolist(), (~(all_true | all_false)).tolist()


def true_positions(mask, blen):
    """(start, positions of the true rows from start) over the 1-d boolean `mask` in blocks of `blen`;
    a chunked mask's statistics tell the blocks all false (not read) and all true (not decoded)."""
    n = len(mask)
    bounds = [(s, min(s + blen, n)) for s in range(0, n, blen)]
    known = None
    get = getattr(mask, "chunk_stats", None)
    if get is not None and bounds and getattr(mask, "ndim", 1) == 1:
        st = get()
        if st is not None and len(st[0]):
            r = planner.block_ranges(st, bounds)
            known, all_true, any_true = r.known, np.asarray(r.lo, bool), np.asarray(r.hi, bool)
    for k, (s, e) in enumerate(bounds):
        if known is not None and known[k]:
            if not any_true[k]:
                continue
            if all_true[k]:
                yield s, np.arange(e - s)
                continue
        yield s, np.flatnonzero(mask[s:e])


def _resident(target, n, mask, how, *args):
    """``how(...)`` (`chunk.where_scalars` or `chunk.select_ahead`) over the chunks of `target` (`n`
    rows) and of `mask` (a chunked array, or a NumPy array) when they are all in memory, else None."""
    if target.dtype.kind == "O" or target.ndim != 1 or not n:
        return None
    get = getattr(target, "resident_chunks", None)
    mine = get() if get is not None else None
    if mine is None:
        return None
    if isinstance(mask, np.ndarray):
        if mask.ndim != 1:
            return None
        theirs, mcl = ([], np.ascontiguousarray(mask)), max(1, len(mask))
    else:
        get = getattr(mask, "resident_chunks", None)
        theirs = get() if get is not None and getattr(mask, "ndim", 1) == 1 else None
        if theirs is None:
            return None
        mcl = mask.chunklen
    cl = max(1, target.chunklen)
    bounds = fused.block_bounds(n, cl)
    all_true, decode = mask_classes(mask, bounds)
    if decode is None:
        modes = np.full(len(bounds), 2, np.uint8)
    else:
        modes = np.where(decode, 2, np.where(all_true, 1, 0)).astype(np.uint8)
    return how(mine[0], np.ascontiguousarray(mine[1]), theirs[0], theirs[1], cl, mcl, target.dtype,
               modes, *args)
