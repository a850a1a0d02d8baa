"""`Selection`: one query over the rows of a table, everything its steps share in one object.

A selection holds the query (a boolean expression, its ``in`` already rewritten, or a boolean mask),
the operands its names were resolved to, the number of rows, the block length (`rules.block_length`)
and, made once when first asked, the planner's `Plan` of its blocks.  Its methods are the query's
steps: the mask block by block, the matching rows of the outputs block by block (`rows`, with `skip`
and `limit`), all of them at once (`fetch`), their number (`count`) and the plan (`explain`).  The
containers resolve the names and check the arguments, build one selection and call these.

An output (of `rows` and `fetch`) is what `chunked_eval.select_blocks` takes: ``("positions",
None)`` for the row numbers, ``("operand", name)`` for an operand the expression reads (compacted from
its decoded block), ``("read", column)`` for another column (its matching rows read).
"""

import numpy as np

from blzarr.query import chunked_eval as _ce
from blzarr.query import fused
from blzarr.query import planner
from blzarr.query import rules
from blzarr.query.lazyexpr import LazyExpr
from blzarr.runtime.params import defaults


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
        return (self.expression is not None and self.vm != "dask"
                and any(_ce._is_array(v) for v in self.operands.values()))

    def plan(self):
        """The planner's `Plan` of the expression over the blocks of `blen` rows (made once)."""
        if self._plan is None:
            self._plan = planner.plan(self.expression, self.operands, fused.block_bounds(self.n, self.blen))
        return self._plan

    def explain(self):
        """The `Plan` (a mask's: one block per chunk, nothing known)."""
        if self.expression is None:
            cl = self._chunklen() if callable(self._chunklen) else self._chunklen
            return planner.Plan("<mask>", rules.mask_bounds(self.n, cl), None,
                                reason="the query is a mask, not an expression")
        return self.plan()

    # ------------------------------------------------------------------ the mask
    def mask_blocks(self):
        """(start, boolean block) over the rows, the expression evaluated block by block (a ValueError
        naming it when it does not give one boolean per row)."""
        n, blen, expression = self.n, self.blen, self.expression
        if expression is None:
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
        """The row numbers of all the matching rows (`numpy.intp`)."""
        parts = [(idx + s) for s, m in self.mask_blocks() for idx in (np.flatnonzero(m),) if idx.size]
        return np.concatenate(parts).astype(np.intp) if parts else np.empty(0, np.intp)

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
        if expression is not None and self.vm != "dask":
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
