"""Queries of a ctable (`CtableQueries`, a part of `ctable`): where, whereblocks and eval, and the block
machinery under fetchwhere: the expression evaluated block by block, only the rows each block needs
read."""

import sys
from collections import namedtuple

import numpy as np

from blzarr.query import chunked_eval as _ce
from blzarr.query import planner
from blzarr.query import rules
from blzarr.containers.carray.array import carray, operator_index
from blzarr.containers.carray.read import Query
from blzarr.containers.ctable.read import NROW
from blzarr.query.lazyexpr import LazyExpr
from blzarr.runtime.optional import have
from blzarr.runtime.params import defaults


class CtableQueries:
    """Queries of a `ctable`."""

    # ------------------------------------------------------------------ queries
    def _operands(self, expression, user_dict, frame, optional=()):
        """The arrays and scalars `expression` names: user_dict, then columns, then the caller's names
        (a name in `optional` found nowhere is left to the evaluator: ``da`` for vm='dask')."""
        _, names = _ce._operand_names(expression)
        scopes = [user_dict or {}, self.cols._cols]
        if frame is not None:
            scopes += [frame.f_locals, frame.f_globals]
        found = {}
        for name in names:
            if name in _ce._PY_NAMESPACE:
                continue
            for scope in scopes:
                if name in scope:
                    found[name] = scope[name]
                    break
            else:
                if name in optional:
                    continue
                raise NameError(f"name '{name}' in the expression {expression!r} is neither a column "
                                f"of the ctable ({self.cols.names}) nor a defined variable")
        return found

    def _check_expression(self, expression, user_dict, frame, vm=None):
        if vm not in (None, "numexpr", "python", "dask"):
            raise ValueError(f"vm must be 'numexpr', 'python' or 'dask', got {vm!r}")
        if vm in ("numexpr", "dask"):
            if not have(vm):
                raise ImportError(f"vm={vm!r} needs {vm}, which is not installed")
        if isinstance(expression, str):
            expression = planner.rewrite_in(expression)
            ops = self._operands(expression, user_dict, frame)
            for k, v in ops.items():
                if _ce._is_array(v) and len(v) != self._len:
                    raise ValueError(f"{k!r} in the expression {expression!r} has length {len(v)}, "
                                     f"the ctable has {self._len} rows")
            return expression
        if not isinstance(expression, (carray, np.ndarray)) or expression.dtype != bool \
                or expression.ndim != 1:
            raise ValueError("a query needs a string expression or a one-dimensional boolean array or "
                             f"carray, got {type(expression).__name__}")
        if len(expression) != self._len:
            raise ValueError(f"the boolean mask has length {len(expression)}, the ctable has {self._len} rows")
        return expression

    def _query_blen(self, operands):
        return rules.block_length(operands.values(), self.chunklen)

    def _mask_blocks(self, expression, user_dict, vm, frame):
        """(start, boolean block) over the table, evaluating `expression` block by block."""
        n = self._len
        if isinstance(expression, str):
            expression = planner.rewrite_in(expression)
            ops = self._operands(expression, user_dict, frame)
            blen = self._query_blen(ops)
            vm = vm or defaults.vm
            if vm == "dask":
                vm = "python"
            has_arrays = any(_ce._is_array(v) for v in ops.values())
            if not has_arrays:
                value = next(_ce.evaluate_blocks(expression, ops, vm, blen))
                if value.dtype != bool or value.ndim != 0:
                    raise ValueError(f"the expression {expression!r} does not give booleans "
                                     f"(it gives {value.dtype})")
                for s in range(0, n, blen):
                    yield s, np.full(min(blen, n - s), bool(value))
                return
            s = 0
            for block in _ce.evaluate_blocks(expression, ops, vm, blen):
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
            return
        if isinstance(expression, carray) or (isinstance(expression, np.ndarray)):
            if expression.dtype != bool or expression.ndim != 1:
                raise ValueError("a mask for a query must be a one-dimensional boolean array or carray")
            if len(expression) != n:
                raise ValueError(f"the boolean mask has length {len(expression)}, the ctable has {n} rows")
            blen = expression.chunklen if isinstance(expression, carray) else rules.block_length(
                (), self.chunklen)
            for s in range(0, n, blen):
                yield s, np.asarray(expression[s:s + blen])
            return
        raise ValueError(f"a query needs a string expression or a boolean array/carray, "
                         f"got {type(expression).__name__}")

    def _where_blocks(self, expression, names, limit, skip, user_dict, vm, frame):
        """Lists of column arrays (one per name) of the matching rows, block by block."""
        skip = max(int(skip or 0), 0)
        count = 0
        if limit is not None and limit <= 0:
            return
        for s, idx, arrays in self._selected_blocks(expression, names, user_dict, vm, frame):
            if skip:
                if skip >= idx.size:
                    skip -= idx.size
                    continue
                idx, arrays, skip = idx[skip:], [a[skip:] for a in arrays], 0
            if limit is not None and idx.size > limit - count:
                idx, arrays = idx[:limit - count], [a[:limit - count] for a in arrays]
            if idx.size == 0:
                continue
            yield arrays
            count += idx.size
            if limit is not None and count >= limit:
                return

    def _outputs(self, names, ops):
        """The engine's outputs (`blzarr.chunked_eval.select_blocks`) for the columns `names`."""
        cols = self.cols._cols
        return [("positions", None) if n == NROW else
                ("operand", n) if ops.get(n) is cols[n] else ("read", cols[n]) for n in names]

    def _selected_blocks(self, expression, names, user_dict, vm, frame):
        """(start, positions in the block, column arrays) of the blocks holding matching rows."""
        if isinstance(expression, str):
            expression = planner.rewrite_in(expression)
            ops = self._operands(expression, user_dict, frame)
            if (vm or defaults.vm) != "dask" and any(_ce._is_array(v) for v in ops.values()):
                yield from _ce.select_blocks(expression, ops, vm or defaults.vm, self._query_blen(ops),
                                             self._outputs(names, ops))
                return
        for s, mask in self._mask_blocks(expression, user_dict, vm, frame):
            idx = np.flatnonzero(mask)
            if idx.size == 0:
                continue
            a, b = s + int(idx[0]), s + int(idx[-1]) + 1
            local = idx - (a - s)
            dense = idx.size * 4 >= (b - a)
            arrays = []
            for n in names:
                if n == NROW:
                    arrays.append((idx + s).astype(np.int_))
                elif dense:
                    arrays.append(self.cols._cols[n][a:b][local])
                else:
                    arrays.append(self.cols._cols[n][idx + s])
            yield s, idx, arrays

    def _positions_where(self, expression, user_dict, vm, frame):
        parts = [(idx + s) for s, m in self._mask_blocks(expression, user_dict, vm, frame)
                 for idx in (np.flatnonzero(m),) if idx.size]
        return np.concatenate(parts).astype(np.intp) if parts else np.empty(0, np.intp)

    def where(self, expression, outcols=None, limit=None, skip=0, out_flavor=namedtuple, user_dict={},
              vm=None):
        """Iterate over the rows where `expression` is true.

        The expression is evaluated block by block, and only the matching rows of each block are
        read from the other columns.

        Parameters
        ----------
        expression : str, or boolean array or carray
            A boolean expression over the columns (and other variables), or a mask with one
            boolean per row.  Names are looked up in `user_dict`, then among the columns, then in
            the caller's variables.
        outcols : list of str or str, optional
            The columns to give; ``'nrow__'`` is the row number.  Default: all.
        limit : int, optional
            Give at most this many rows.
        skip : int, optional
            Skip this many matching rows first.
        out_flavor : namedtuple, tuple or numpy.ndarray, optional
            The type of each row (namedtuples by default).
        user_dict : dict, optional
            Variables for the expression.
        vm : {'numexpr', 'python'}, optional
            The evaluator (default ``blzarr.defaults.vm``).

        Yields
        ------
        namedtuple, tuple or numpy.ndarray

        Raises
        ------
        NameError
            A name of the expression is neither a column nor a variable.
        ValueError
            The expression does not give one boolean per row.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(6), np.arange(6) * 0.5], names=["a", "b"])
        >>> [int(r.a) for r in t.where("b > 1")]
        [3, 4, 5]
        >>> lo = 1
        >>> [tuple(map(int, r)) for r in t.where("(a > lo) & (a < 5)", outcols="nrow__", out_flavor=tuple)]
        [(2,), (3,), (4,)]
        >>> [int(r.a) for r in t.where(np.array([True, False] * 3), limit=2)]
        [0, 2]
        """
        if self._watch and not self._pinned:
            self._fresh()
        names = self._check_outcols(outcols)
        self._row_maker(names, out_flavor)
        frame = sys._getframe(1)
        expression = self._check_expression(expression, user_dict, frame, vm)  # errors now, not at the first next()
        blocks = self._where_blocks(expression, names, limit, skip, user_dict, vm, frame)
        return Query(self._emit_rows(blocks, names, out_flavor),
                     lambda: self._count(expression, limit, skip, user_dict, vm, frame),
                     lambda: self._explain(expression, user_dict, vm, frame))

    def whereblocks(self, expression, blen=None, outcols=None, limit=None, skip=0, user_dict={}, vm=None):
        """Iterate over the rows where `expression` is true, in structured arrays of `blen` rows.

        Parameters
        ----------
        expression : str, or boolean array or carray
            As in `where`.
        blen : int, optional
            Rows per block (the last block may be shorter).  Default: the table's chunk length.
        outcols, limit, skip, user_dict, vm
            As in `where`.

        Yields
        ------
        numpy.ndarray
            Structured arrays of the `outcols` fields.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(8), np.arange(8) * 0.5], names=["a", "b"])
        >>> [b["a"].tolist() for b in t.whereblocks("a >= 3", blen=2)]
        [[3, 4], [5, 6], [7]]
        """
        if self._watch and not self._pinned:
            self._fresh()
        names = self._check_outcols(outcols)
        if blen is None:
            blen = self.chunklen
        blen = operator_index(blen, "blen")
        if blen < 1:
            raise ValueError(f"blen must be positive, got {blen}")
        frame = sys._getframe(1)
        expression = self._check_expression(expression, user_dict, frame, vm)
        blocks = self._where_blocks(expression, names, limit, skip, user_dict, vm, frame)
        return self._rebatch(blocks, names, blen)

    def _rebatch(self, blocks, names, blen):
        dt = self._dtype_of(names)
        buf = np.empty(blen, dtype=dt)
        fill = 0
        for arrays in blocks:
            m = len(arrays[0])
            off = 0
            while off < m:
                take = min(blen - fill, m - off)
                for n, a in zip(names, arrays):
                    buf[n][fill:fill + take] = a[off:off + take]
                fill += take
                off += take
                if fill == blen:
                    yield buf
                    buf = np.empty(blen, dtype=dt)
                    fill = 0
        if fill:
            yield buf[:fill]

    def _fetch(self, expression, names, limit, skip, user_dict, vm, frame):
        names = self._check_outcols(names)
        expression = self._check_expression(expression, user_dict, frame, vm)
        if isinstance(expression, str) and limit is None and not skip and (vm or defaults.vm) != "dask":
            ops = self._operands(expression, user_dict, frame)
            if any(_ce._is_array(v) for v in ops.values()):
                # all the rows at once: the engine writes them into the result itself
                return _ce.select_into(expression, ops, vm or defaults.vm, self._query_blen(ops),
                                       self._outputs(names, ops), self._dtype_of(names))
        parts = list(self._where_blocks(expression, names, limit, skip, user_dict, vm, frame))
        total = sum(len(p[0]) for p in parts)
        out = np.empty(total, dtype=self._dtype_of(names))
        off = 0
        for arrays in parts:
            m = len(arrays[0])
            for n, a in zip(names, arrays):
                out[n][off:off + m] = a
            off += m
        return out

    def eval(self, expression, **kwargs):
        """Evaluate `expression` over the columns (and the caller's variables), block by block.

        Parameters
        ----------
        expression : str
            An expression whose names are columns, or variables of `user_dict` or of the caller
            (`user_dict` first, then the columns).
        **kwargs
            Those of `blzarr.eval`: ``vm``, ``out_flavor``, ``user_dict``, ``blen``, and the
            parameters of the resulting carray.

        Returns
        -------
        carray, numpy.ndarray or scalar

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(4), np.arange(4) * 10], names=["a", "c"])
        >>> t.eval("a * c")[:].tolist()
        [0, 10, 40, 90]
        >>> k = 2
        >>> t.eval("c + k", out_flavor="numpy").tolist()
        [2, 12, 22, 32]
        """
        with self._one_version():
            user_dict = kwargs.pop("user_dict", None) or {}
            if not isinstance(expression, str):
                raise ValueError(f"eval() needs a string expression, got {type(expression).__name__}")
            vm = kwargs.get("vm") or defaults.vm
            ops = self._operands(expression, user_dict, sys._getframe(1), ("da",) if vm == "dask" else ())
            if kwargs.get("blen") is None:
                kwargs["blen"] = self._query_blen(ops)
            return _ce.eval(expression, user_dict=ops, **kwargs)

    def _count(self, expression, limit, skip, user_dict, vm, frame):
        total = None
        if isinstance(expression, str) and (vm or defaults.vm) != "dask":
            ops = self._operands(expression, user_dict, frame)
            if self._len and any(_ce._is_array(v) for v in ops.values()):
                e = LazyExpr(expression, ops, vm or defaults.vm, self._query_blen(ops))
                if e.dtype != bool or e.ndim != 1:
                    raise ValueError(f"the expression {expression!r} does not give one boolean per row "
                                     f"(it gives {e.dtype}, shape {e.shape})")
                total = e.count_nonzero()
        if total is None:
            total = sum(int(np.count_nonzero(m)) for _, m in self._mask_blocks(expression, user_dict, vm, frame))
        total = max(0, total - max(int(skip or 0), 0))
        return total if limit is None else min(total, max(int(limit), 0))

    def _explain(self, expression, user_dict, vm, frame):
        if not isinstance(expression, str):
            bounds = [(s, min(s + self.chunklen, self._len)) for s in range(0, self._len, max(self.chunklen, 1))]
            return planner.Plan("<mask>", bounds, None, reason="the query is a mask, not an expression")
        ops = self._operands(expression, user_dict, frame)
        blen = self._query_blen(ops)
        return planner.plan(expression, ops, [(s, min(s + blen, self._len)) for s in range(0, self._len, blen)])

    def explain(self, expression, user_dict={}, vm=None):
        """What a query with `expression` reads, from the columns' per-chunk statistics.

        Returns a `blzarr.query.planner.Plan`: ``str(plan)`` gives the blocks the query skips (no row can
        match: not read), takes whole (every row matches: the predicate is not decoded) and scans;
        ``plan.summary()`` the same as a dict.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(100_000), np.ones(100_000)], names=["ts", "px"], chunklen=10_000)
        >>> print(t.explain("(ts >= 25_000) & (ts < 50_000) & (px > 0)"))
        10 blocks: 7 skipped, 2 taken whole, 1 scanned (10000 of 100000 rows evaluated); statistics of px, ts
        >>> t.where("ts < 25_000").count()
        25000
        """
        with self._one_version():
            frame = sys._getframe(1)
            expression = self._check_expression(expression, user_dict, frame, vm)
            return self._explain(expression, user_dict, vm, frame)
