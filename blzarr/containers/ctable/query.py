"""Queries of a ctable (`CtableQueries`, a part of `ctable`): where, whereblocks, eval and explain,
and the rows under fetchwhere and ``t[expression]``: each builds one `blzarr.query.selection.Selection`
(its names resolved among the table's columns and the caller's variables) and reads from it."""

import sys
from collections import namedtuple

import numpy as np

from blzarr.query import chunked_eval as _ce
from blzarr.query import planner
from blzarr.query import rules
from blzarr.containers.carray.array import carray, operator_index
from blzarr.containers.ctable.read import NROW
from blzarr.query.selection import Query, Selection
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

        def missing(name):
            if name not in optional:
                raise NameError(f"name '{name}' in the expression {expression!r} is neither a column "
                                f"of the ctable ({self.cols.names}) nor a defined variable")
        return _ce.resolve_names(names, scopes, missing)

    def _selection(self, expression, user_dict, frame, vm=None):
        """The `Selection` of a query: `vm` and the query checked, its names resolved (errors now,
        not at the first row)."""
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
            return Selection(expression, ops, self._len, vm, self._chunklen_of)
        if not isinstance(expression, (carray, np.ndarray)) or expression.dtype != bool \
                or expression.ndim != 1:
            raise ValueError("a query needs a string expression or a one-dimensional boolean array or "
                             f"carray, got {type(expression).__name__}")
        if len(expression) != self._len:
            raise ValueError(f"the boolean mask has length {len(expression)}, the ctable has {self._len} rows")
        return Selection(expression, None, self._len, vm, self._chunklen_of)

    def _chunklen_of(self):
        """The table's chunk length (the block-length rule asks for it only when no operand is
        chunked)."""
        return self.chunklen

    def _outputs(self, names, sel):
        """The selection's outputs (`blzarr.query.selection`) for the columns `names`."""
        cols = self.cols._cols
        return [("positions", None) if n == NROW else
                ("operand", n) if sel.operands.get(n) is cols[n] else ("read", cols[n]) for n in names]

    def _positions_where(self, expression, user_dict, vm, frame):
        """The rows a string `expression` selects, for an assignment (an operand of another length is
        reported by the evaluator, as ``blzarr.eval`` reports it)."""
        expression = planner.rewrite_in(expression)
        ops = self._operands(expression, user_dict, frame)
        return Selection(expression, ops, self._len, vm, self._chunklen_of).positions()

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
        sel = self._selection(expression, user_dict, sys._getframe(1), vm)
        blocks = sel.rows(self._outputs(names, sel), skip, limit)
        return Query(self._emit_rows(blocks, names, out_flavor), lambda: sel.count(skip, limit), sel.explain)

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
        sel = self._selection(expression, user_dict, sys._getframe(1), vm)
        return self._rebatch(sel.rows(self._outputs(names, sel), skip, limit), names, blen)

    def fetchwhere(self, expression, outcols=None, limit=None, skip=0, out_flavor=None, user_dict={},
                   vm=None, **kwargs):
        """All the rows where `expression` is true, at once.

        Parameters
        ----------
        expression : str, or boolean array or carray
            As in `where`.
        outcols, limit, skip, user_dict, vm
            As in `where`.
        out_flavor : {'bcolz', 'numpy'}, optional
            A new ctable ('bcolz', also 'carray') or a NumPy structured array ('numpy').
            Default: ``blzarr.defaults.out_flavor``.
        **kwargs
            Passed to the `ctable` constructor of the result (``rootdir``, ``cparams``, ...).

        Returns
        -------
        ctable or numpy.ndarray

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(6), np.arange(6) * 10], names=["a", "c"])
        >>> t.fetchwhere("(a > 1) & (c < 50)", out_flavor="numpy").tolist()
        [(2, 20), (3, 30), (4, 40)]
        >>> r = t.fetchwhere("a > 3", outcols=["c"])
        >>> type(r).__name__, r[:].tolist()
        ('ctable', [(40,), (50,)])
        """
        with self._one_version():
            return self._fetchwhere(expression, outcols, limit, skip, out_flavor, user_dict, vm,
                                    sys._getframe(1), kwargs)

    def _fetchwhere(self, expression, outcols, limit, skip, out_flavor, user_dict, vm, frame, kwargs):
        out_flavor = out_flavor or defaults.out_flavor
        if out_flavor == "numpy":
            return self._fetch(expression, outcols, limit, skip, user_dict, vm, frame)
        if out_flavor not in ("bcolz", "carray"):
            raise ValueError(f"out_flavor must be 'bcolz' or 'numpy', got {out_flavor!r}")
        names = self._check_outcols(outcols)
        sel = self._selection(expression, user_dict, frame, vm)
        dt = self._dtype_of(names)
        # the chunk lengths of bcolz's result (its fromiter(count=-1) expects an unknown length)
        kwargs.setdefault("expectedlen", -1)
        out = None
        for arrays in sel.rows(self._outputs(names, sel), skip, limit):
            if out is None:
                out = self._new_table(list(arrays), names, **kwargs)
                out.auto_flush = False
            else:
                out.append(list(arrays))
        if out is None:
            out = self._new_table([np.empty(0, dtype=dt[n]) for n in names], names, **kwargs)
        out.auto_flush = out.rootdir is not None
        out.flush()
        return out

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
        sel = self._selection(expression, user_dict, frame, vm)
        return sel.fetch(self._outputs(names, sel), self._dtype_of(names), skip, limit)

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
                kwargs["blen"] = rules.block_length(ops.values(), self._chunklen_of)
            return _ce.eval(expression, user_dict=ops, **kwargs)

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
            return self._selection(expression, user_dict, sys._getframe(1), vm).explain()
