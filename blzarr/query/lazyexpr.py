"""`lazyexpr`: an expression over carrays and arrays that is evaluated only when it is used, in one pass.

``blzarr.eval`` returns what bcolz returns (a carray), so ``eval(e).sum()`` compresses the whole
result before summing it.  A `LazyExpr` keeps the expression and its operands; its reductions
(`sum`, `mean`, `min`, `max`, `count_nonzero`, `any`, `all`) and its slices run fused: every thread
decodes a block of each operand into its own buffers, evaluates the block into a buffer of its own
and reduces it, so no evaluated array is ever held whole (`blzarr.query.fused`).
"""

import sys

import functools

import numpy as np

from blzarr.query import chunked_eval as _ce
from blzarr.query import exprkernel
from blzarr.query import fused
from blzarr.query import planner
from blzarr.query import rules
from blzarr.runtime.optional import need
from blzarr.runtime.params import defaults


class LazyExpr:
    """An element-wise expression over equal-length arrays, evaluated on demand (see `lazyexpr`)."""

    def __init__(self, expression, operands, vm=None, blen=None):
        vm = vm or defaults.vm
        if vm not in ("numexpr", "python"):
            raise ValueError(f"vm must be 'numexpr' or 'python' for a lazy expression, got {vm!r}")
        if _ce._reduction_plan(expression) is not None:
            raise ValueError(f"a lazy expression must be element-wise; {expression!r} reduces: call "
                             "its .sum() instead")
        self.expression = expression
        self._code, _ = _ce._operand_names(expression)
        self._arrays = {k: v for k, v in operands.items() if _ce._is_array(v)}
        self._scalars = {k: v for k, v in operands.items() if k not in self._arrays}
        if not self._arrays:
            raise ValueError(f"the expression {expression!r} names no array")
        self._n = _ce.common_length(self._arrays)
        self._blen = blen or rules.block_length(self._arrays.values())
        self._vm = vm
        # (typed by NumPy's promotion, so that values, sums and the fused kernel's results agree)
        self._kernel, self._ne, probe = _ce.make_kernel(expression, self._code, self._arrays,
                                                        self._scalars, vm, numpy_types=True)
        if probe.ndim == 0 or probe.shape[0] != 1:
            raise ValueError(f"the expression {expression!r} does not give one value per row")
        self.dtype = probe.dtype
        self.shape = (self._n,) + probe.shape[1:]

    def __len__(self):
        return self._n

    _truth = None       # set by a carray compared with itself (==, !=): identity, for weak references

    def __bool__(self):
        if self._truth is not None:
            return self._truth
        # as NumPy's arrays: only a one-element result has a truth value
        if self._n != 1 or len(self.shape) != 1:
            raise ValueError(f"the truth value of an expression of {self._n} elements is ambiguous: use "
                             ".any() or .all() (or & and | between conditions, not `and` / `or`)")
        return bool(self[:][0])

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"LazyExpr({self.expression!r}, shape={self.shape}, dtype={self.dtype})"

    # ------------------------------------------------------------ the one pass
    def _blocks(self, start=0, stop=None):
        stop = self._n if stop is None else stop
        return [(s, min(s + self._blen, stop)) for s in range(start, stop, self._blen)]

    def _classes(self, bounds):
        """The planner's classes of the blocks (a boolean expression over carrays with statistics:
        blocks of known value are not decoded), or None."""
        if self.dtype != bool or len(self.shape) != 1:
            return None
        p = planner.plan(self.expression, dict(self._arrays, **self._scalars), bounds)
        return p.classes if p.useful else None

    def explain(self):
        """The `blzarr.query.planner.Plan` of this (boolean) expression: blocks skipped, taken whole, scanned."""
        return planner.plan(self.expression, dict(self._arrays, **self._scalars), self._blocks())

    def _run(self, reduce_block, start=0, stop=None, known=None, kernel=None):
        """[reduce_block(value of the block)] over the blocks in order, the value evaluated into a
        per-thread buffer (valid only during the call).  `known(value, n)`: the result for a block
        of n rows the planner knows all equal to `value` (True or False), which is then not
        visited at all.  `kernel(expression, arrays, scalars, blen)`: the results of the full chunks
        from the C kernel and the rows they cover (`blzarr.query.exprkernel`), or None; the blocks after
        those are evaluated here."""
        bounds = self._blocks(start, stop)
        classes = self._classes(bounds)
        if kernel is not None and classes is None and start == 0 and stop is None:
            fast = kernel(self.expression, self._arrays, self._scalars, self._blen)
            if fast is not None:
                parts, done = fast
                return list(parts) + (self._run(reduce_block, done) if done < self._n else [])
        decoder = fused.Decoder(self._arrays, self._blen)
        decoder.scratch("__value__", (self._blen,) + self.shape[1:], self.dtype)
        if classes is not None and known is not None:
            results = [known(c == planner.WHOLE, e - s) if c != planner.SCAN else None
                       for c, (s, e) in zip(classes, bounds)]
            scan = [k for k, c in enumerate(classes) if c == planner.SCAN]

            def one(s, e, local):
                return reduce_block(self._kernel(local, out=decoder.buffers()["__value__"][: e - s]))
            for k, r in zip(scan, fused.run_blocks([bounds[k] for k in scan], decoder, one, serial=self._ne,
                                                           dynamic=True)):
                results[k] = r
            return results
        if classes is not None:
            k_of = {b[0]: k for k, b in enumerate(bounds)}

        def block(s, e, local):
            out = decoder.buffers()["__value__"][: e - s]
            if local is None:
                out[...] = classes[k_of[s]] == planner.WHOLE
                return reduce_block(out)
            value = self._kernel(local, out=out)
            return reduce_block(value)
        return fused.run_blocks(bounds, decoder, block, serial=self._ne,
                                decode=None if classes is None else classes == planner.SCAN, dynamic=True)

    def _check_numeric(self, op):
        if self.dtype.kind not in "biufcmM" or self.dtype.names:
            raise TypeError(f"cannot {op} an expression of dtype {self.dtype}")

    # ------------------------------------------------------------ reductions (over every element)
    def sum(self, dtype=None):
        """The sum of every element, as ``numpy.sum`` types it (block sums added in order)."""
        self._check_numeric("sum")
        kw = {} if dtype is None else {"dtype": np.dtype(dtype)}
        kernel = None
        if dtype is None and self.dtype.kind in "fiu":
            # (the kernel types the expression as NumPy does, as `dtype` does but where NumPy
            # refused the expression and numexpr typed it: that case is left to the blocks below)
            kernel = functools.partial(exprkernel.chunk_sums, dtype=self.dtype)
        elif dtype is None and self.dtype == bool:
            kernel = exprkernel.chunk_counts       # NumPy's sum of booleans: their count, an int64
        parts = self._run(lambda v: np.sum(v, **kw), kernel=kernel)
        if not parts:
            return np.sum(np.zeros((0,) + self.shape[1:], self.dtype), **kw)
        res = parts[0]
        for p in parts[1:]:
            res = res + p
        return res

    def mean(self, dtype=None):
        """The mean of every element (``numpy.mean``'s result type: float64 for ints and bools)."""
        self._check_numeric("mean")
        if dtype is None and self.dtype.kind in "biu":
            dtype = np.float64
        total = self.sum(dtype=dtype)
        count = int(np.prod(self.shape))
        kw = {"dtype": total.dtype} if np.asarray(total).dtype.kind in "fc" else {}
        with np.errstate(invalid="ignore" if count else "warn", divide="ignore"):
            return np.true_divide(total, count, **kw)[()]

    def _extreme(self, op):
        self._check_numeric(op)
        if self._n == 0 or 0 in self.shape:
            raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
        f = getattr(np, op)
        combine = np.minimum if op == "min" else np.maximum
        parts = self._run(lambda v: f(v))
        res = parts[0]
        for p in parts[1:]:
            res = combine(res, p)
        return res

    def min(self):
        """The smallest element (NaN if any element is NaN, as in NumPy)."""
        return self._extreme("min")

    def max(self):
        """The largest element (NaN if any element is NaN, as in NumPy)."""
        return self._extreme("max")

    def count_nonzero(self):
        """How many elements are nonzero (true, for a condition): an int."""
        return int(sum(self._run(np.count_nonzero, known=lambda v, n: n if v else 0,
                                 kernel=exprkernel.chunk_counts if self.dtype == bool else None)))

    def _counts_as(self, f):
        """A `kernel` for `_run` (booleans only): f(count of true rows, rows) of each full chunk, from
        the C kernel's counts."""
        if self.dtype != bool:
            return None

        def kernel(expression, arrays, scalars, blen):
            r = exprkernel.chunk_counts(expression, arrays, scalars, blen)
            if r is None:
                return None
            return [f(int(c), min(blen, self._n - k * blen)) for k, c in enumerate(r[0])], r[1]
        return kernel

    def any(self):
        return any(self._run(lambda v: bool(np.any(v)), known=lambda v, n: v,
                             kernel=self._counts_as(lambda c, n: c > 0)))

    def all(self):
        return all(self._run(lambda v: bool(np.all(v)), known=lambda v, n: v,
                             kernel=self._counts_as(lambda c, n: c == n)))

    # ------------------------------------------------------------ values
    def __getitem__(self, key):
        """NumPy values: a slice with step 1 (``e[:]``, ``e[i:j]``) evaluates only those rows."""
        if isinstance(key, slice) and key.step in (None, 1):
            start, stop, _ = key.indices(self._n)
            stop = max(start, stop)
            if start == 0 and stop == self._n and self._classes(self._blocks()) is None:
                # (blocks the statistics know are not decoded below)
                out = exprkernel.values(self.expression, self._arrays, self._scalars, self._blen)
                if out is not None and out.dtype == self.dtype:
                    return out
            out = np.empty((stop - start,) + self.shape[1:], dtype=self.dtype)
            decoder = fused.Decoder(self._arrays, self._blen)

            def block(s, e, local):
                self._kernel(local, out=out[s - start:e - start])
            fused.run_blocks(self._blocks(start, stop), decoder, block, serial=self._ne)
            return out
        return self[:][key]

    def __array__(self, dtype=None, copy=None):
        a = self[:]
        return a if dtype is None else a.astype(dtype, copy=False)

    def compute(self, out_flavor=None, **kwargs):
        """The values as `blzarr.eval` gives them (a carray, or NumPy with ``out_flavor='numpy'``)."""
        return _ce.eval(self.expression, vm=self._vm, out_flavor=out_flavor,
                        user_dict=dict(self._arrays, **self._scalars), blen=self._blen, **kwargs)


def lazyexpr(expression, user_dict=None, vm=None, blen=None, depth=2):
    """lazyexpr(expression, user_dict=None, vm=None, blen=None)

    An element-wise expression over carrays, NumPy arrays and scalars, evaluated only when used.

    Its reductions (``sum``, ``mean``, ``min``, ``max``, ``count_nonzero``, ``any``, ``all``) and its
    slices (``e[:]``, ``e[i:j]``) run in one pass on every thread, block by block, without building
    the evaluated array; ``compute()`` gives what `blzarr.eval` gives.  Its type is the one NumPy's
    promotion gives (``int32 * float32`` is ``float64``), whichever `vm` evaluates the blocks.

    Parameters
    ----------
    expression : str
        As in `blzarr.eval`, element-wise (no top-level ``sum``).
    user_dict : dict, optional
        Variables, looked up before the caller's locals and globals.
    vm : {'numexpr', 'python'}, optional
        The evaluator of each block (default ``blzarr.defaults.vm``).
    blen : int, optional
        Rows per block (default: the smallest chunk length of the carray operands).

    Returns
    -------
    LazyExpr

    Raises
    ------
    NameError
        A variable of the expression is not defined.
    ValueError
        The expression is invalid, names no array, reduces, or the arrays have different lengths.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> a = blzarr.carray(np.arange(10))
    >>> e = blzarr.lazyexpr("a * 2 > 9")
    >>> e.count_nonzero(), int(blzarr.lazyexpr("a * 2").sum()), e[3:7].tolist()
    (5, 90, [False, False, True, True])
    """
    vm = vm or defaults.vm
    if vm == "numexpr":
        need("numexpr", "lazyexpr(..., vm='numexpr')")
    operands = _ce.caller_operands(expression, user_dict, sys._getframe(depth - 1))
    return LazyExpr(expression, operands, vm, blen)
