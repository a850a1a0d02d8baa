"""`planner`: which blocks of a query can be skipped, or taken whole, from per-chunk statistics.

A query's boolean expression is read as a tree of comparisons (``>``, ``>=``, ``<``, ``<=``,
``==``, ``!=``) between operands and constants (or between two operands), boolean operands,
``isnan(x)``, combined by ``&``, ``|`` and ``~``.  For every block of rows the engine would evaluate,
each comparison is classed from the block's minimum, maximum and NaN flags (`blzarr.query.stats`):

- SKIP: false on every row of the block (``ts >= hi`` where the block's maximum is below hi);
- WHOLE: true on every row (``ts >= lo`` where its minimum is at least lo, and no NaN);
- SCAN: anything else, or no statistics.

``&``, ``|`` and ``~`` combine the classes (three-valued logic), so a block the whole expression
SKIPs is not read at all, and a block it takes WHOLE is not decoded for the predicate: all its rows
match.  NaN (and NaT) compare false, as in NumPy: a block holding NaN is never WHOLE for a
comparison other than ``!=``.  Anything the planner cannot read (arithmetic on operands, function
calls, operands without statistics) is SCAN, so a plan is never wrong, only less useful.

An operand has statistics when it has ``chunk_stats()`` (a carray); this module knows no array
class.  `plan` returns a `Plan`, which `explain` outputs show.
"""

import ast
import builtins
import functools
import itertools
import weakref

import numpy as np

from blzarr.query import rules
from blzarr.query.stats import HAS_NAN, KNOWN, NO_VALUE

SKIP, WHOLE, SCAN = 0, 1, 2
# False: every block is scanned, as without statistics (for measurements: the harness compares both)
ENABLED = True

_OPS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}
_CONST_NS = {"__builtins__": {}, "abs": abs, "int": int, "float": float, "bool": bool}


class _NoPlan(Exception):
    """The expression is not a boolean combination the planner can class (no plan at all)."""


class _Range:
    """Per block: low and high bounds of the values (NaN left out), has-NaN, all-NaN, known."""

    def __init__(self, lo, hi, nan, novalue, known):
        self.lo, self.hi, self.nan, self.novalue, self.known = lo, hi, nan, novalue, known


def _fills(dtype):
    """(fill of mins, fill of maxs) for chunks with no value: neutral for min and max."""
    k = dtype.kind
    if k == "b":
        return True, False
    if k in "iu":
        info = np.iinfo(dtype)
        return info.max, info.min
    if k == "f":
        return np.inf, -np.inf
    return np.iinfo(np.int64).max, np.iinfo(np.int64).min + 1   # datetime64/timedelta64 as int64, NaT aside


def block_ranges(stats, bounds):
    """The `_Range` over the blocks `bounds` of an operand whose chunk_stats() is `stats`."""
    mins, maxs, flags, cl = stats
    dt = mins.dtype
    timelike = dt.kind in "mM"
    if timelike:
        mins, maxs = mins.view(np.int64), maxs.view(np.int64)
    novalue = (flags & NO_VALUE) != 0
    fmin, fmax = _fills(dt)
    if novalue.any():
        mins = np.where(novalue, fmin, mins).astype(mins.dtype)
        maxs = np.where(novalue, fmax, maxs).astype(maxs.dtype)
    first, last, same = _chunk_spans(bounds, cl)
    if same:
        lo, hi, fl_and, fl_or = mins[first], maxs[first], flags[first], flags[first]
    else:
        idx = np.empty(2 * len(first), np.intp)
        idx[0::2] = first
        idx[1::2] = last + 1

        def red(ufunc, a):
            return ufunc.reduceat(np.concatenate([a, a[:1]]), idx)[0::2]
        lo, hi = red(np.minimum, mins), red(np.maximum, maxs)
        fl_and, fl_or = red(np.bitwise_and, flags), red(np.bitwise_or, flags)
    if timelike:
        lo, hi = lo.view(dt), hi.view(dt)
    return _Range(lo, hi, (fl_or & HAS_NAN) != 0, (fl_and & NO_VALUE) != 0, (fl_and & KNOWN) != 0)


_SPANS = {}


def _chunk_spans(bounds, cl):
    """(first, last, same): the first and last chunk of `cl` rows each block of `bounds` covers, and
    whether every block lies in one chunk.  Queries plan over the same blocks again and again (the
    lists of `fused.block_bounds` hold the same tuples every time): the answer is kept for the last
    few block layouts, and a list is compared with the one kept item by item (identical tuples
    compare at once), so any other list of the same length and ends is computed afresh."""
    key = None
    if isinstance(bounds, (list, tuple)) and bounds:
        key = (len(bounds), tuple(bounds[0]), tuple(bounds[-1]), cl)
        kept = _SPANS.get(key)
        if kept is not None and kept[0] == list(bounds):
            return kept[1:]
    b = np.fromiter(itertools.chain.from_iterable(bounds), np.int64, 2 * len(bounds)).reshape(-1, 2)
    first = b[:, 0] // cl
    last = (b[:, 1] - 1) // cl
    found = (first, last, bool(np.array_equal(first, last)))
    if key is not None:
        if len(_SPANS) >= 16:
            _SPANS.clear()
        _SPANS[key] = ([tuple(b) for b in bounds],) + found
    return found


def _const_range(value, nb):
    isnan = False
    try:
        isnan = bool(np.isnan(value)) if not isinstance(value, (np.datetime64, np.timedelta64)) \
            else bool(np.isnat(value))
    except (TypeError, ValueError):
        pass
    # a NaN constant compares false with everything (true for !=): as a block of NaN only.  Its
    # flags are scalars (they broadcast against an operand's per-block arrays)
    isnan = np.bool_(isnan)
    return _Range(value, value, isnan, isnan, np.True_)


def _classes(true, false, known):
    cls = np.where(false, SKIP, np.where(true, WHOLE, SCAN)).astype(np.int8)
    cls[~known] = SCAN
    return cls


def _compare(op, x, y):
    with np.errstate(all="ignore"):
        lo_x, hi_x, lo_y, hi_y = x.lo, x.hi, y.lo, y.hi
        if op == ">":
            t, f = lo_x > hi_y, hi_x <= lo_y
        elif op == ">=":
            t, f = lo_x >= hi_y, hi_x < lo_y
        elif op == "<":
            t, f = hi_x < lo_y, lo_x >= hi_y
        elif op == "<=":
            t, f = hi_x <= lo_y, lo_x > hi_y
        else:
            single = (lo_x == hi_x) & (hi_x == lo_y) & (lo_y == hi_y)
            apart = (hi_x < lo_y) | (lo_x > hi_y)
            t, f = (single, apart) if op == "==" else (apart, single)
    nan, novalue = x.nan | y.nan, x.novalue | y.novalue
    t, f = np.asarray(t, bool), np.asarray(f, bool)
    if op == "!=":
        t, f = t | novalue, f & ~nan
    else:
        t, f = t & ~nan, f | novalue
    return _classes(t, f, x.known & y.known)


def _and(a, b):
    return np.where((a == SKIP) | (b == SKIP), SKIP,
                    np.where((a == WHOLE) & (b == WHOLE), WHOLE, SCAN)).astype(np.int8)


def _or(a, b):
    return np.where((a == WHOLE) | (b == WHOLE), WHOLE,
                    np.where((a == SKIP) & (b == SKIP), SKIP, SCAN)).astype(np.int8)


def _not(a):
    return np.where(a == SCAN, SCAN, 1 - a).astype(np.int8)


# `x in (v1, ...)` with at most this many values becomes ``(x == v1) | ...`` (numexpr evaluates it);
# longer lists become ``isin(x, (v1, ...))``, evaluated by NumPy
IN_AS_COMPARISONS = 8


def _literal_values(node, expression):
    """The constants of the container `node` on the right of `in`, or a ValueError."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        try:
            values = [ast.literal_eval(e) for e in node.elts]
        except ValueError:
            values = None
        if values is not None and all(isinstance(v, (int, float, str, bytes, bool)) for v in values):
            return values
    raise ValueError(f"in the expression {expression!r}: `in` and `not in` take a literal tuple, "
                     "list or set of numbers or strings on their right")


class _InRewriter(ast.NodeTransformer):
    def __init__(self, expression):
        self.expression = expression

    def visit_Compare(self, node):
        self.generic_visit(node)
        if not any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            return node
        if len(node.ops) != 1:
            raise ValueError(f"in the expression {self.expression!r}: `in`/`not in` cannot be chained "
                             "with other comparisons")
        negate = isinstance(node.ops[0], ast.NotIn)
        # `&` and `|` bind tighter than `in` in Python, so ``s in ('A', 'B') & (p > 1)`` parses as
        # ``s in (('A', 'B') & (p > 1))``: the list is the leftmost operand of the right side, and
        # what follows it combines with the membership test, as the query means
        right, rest = node.comparators[0], []
        while isinstance(right, ast.BinOp) and isinstance(right.op, (ast.BitAnd, ast.BitOr)):
            rest.append((right.op, right.right))
            right = right.left
        out = self._membership(node.left, _literal_values(right, self.expression), negate)
        for op, operand in reversed(rest):
            out = ast.BinOp(left=out, op=op, right=operand)
        return out

    def _membership(self, left, values, negate):
        if not values:
            return ast.Constant(negate)
        if len(values) <= IN_AS_COMPARISONS:
            op, join = (ast.NotEq(), ast.BitAnd()) if negate else (ast.Eq(), ast.BitOr())
            out = None
            for v in values:
                c = ast.Compare(left=left, ops=[op], comparators=[ast.Constant(v)])
                out = c if out is None else ast.BinOp(left=out, op=join, right=c)
            return out
        call = ast.Call(func=ast.Name("isin", ast.Load()),
                        args=[left, ast.Tuple([ast.Constant(v) for v in values], ast.Load())], keywords=[])
        return ast.UnaryOp(ast.Invert(), call) if negate else call


@functools.lru_cache(maxsize=256)
def rewrite_in(expression):
    """`expression` with its ``x in (...)`` and ``x not in (...)`` written as comparisons (or calls
    of ``isin``) that the evaluators and the planner read; the same string when it has none."""
    if not isinstance(expression, str) or " in" not in expression:
        return expression
    try:
        tree = rules.parse(expression)
    except SyntaxError:
        return expression       # reported by the evaluator
    if not any(isinstance(n, (ast.In, ast.NotIn)) for n in ast.walk(tree)):
        return expression
    tree = ast.fix_missing_locations(_InRewriter(expression).visit(rules.parse(expression, fresh=True)))
    return ast.unparse(tree)


def _isin_classes(r, values):
    """Classes of ``isin(x, values)`` from the block ranges `r` of x: SKIP where no value lies
    between the block's minimum and maximum, WHOLE where the block holds one value, in the list."""
    try:
        v = np.sort(np.asarray([x for x in values if not (isinstance(x, float) and np.isnan(x))]))
        if v.dtype.kind not in "biuf":
            raise TypeError
        lo, hi = np.asarray(r.lo), np.asarray(r.hi)
        with np.errstate(all="ignore"):
            none = np.searchsorted(v, lo, "left") >= np.searchsorted(v, hi, "right")
            single = (lo == hi) & np.isin(lo, v)
    except (TypeError, ValueError):
        return None
    return _classes(single & ~r.nan, none | r.novalue, r.known)


def _parse(expression):
    """The tree of `expression` (`rules.parse`'s shared one: never changed here)."""
    return rules.parse(expression).body


_SUBTREES = weakref.WeakKeyDictionary()


def _subtree(node):
    """(names, code) of a subtree of a cached tree: the names it uses and its code compiled."""
    found = _SUBTREES.get(node)
    if found is None:
        names = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
        found = _SUBTREES[node] = (names, compile(ast.Expression(node), "<planner>", "eval"))
    return found


class _Classifier:
    def __init__(self, operands, bounds, scalars_ns):
        self.operands = operands
        self.bounds = bounds
        self.nb = len(bounds)
        self.ns = scalars_ns
        self._ranges = {}
        self._stats = {}
        self.used = set()       # operands whose statistics classed something

    def is_array(self, name):
        v = self.operands.get(name)
        return v is not None and (isinstance(v, np.ndarray) and v.ndim > 0 or hasattr(v, "chunklen"))

    def constant(self, node):
        """The value of a subtree that names no array, else None (not a constant)."""
        names, code = _subtree(node)
        if any(self.is_array(n) for n in names):
            return None
        try:
            v = builtins.eval(code, dict(_CONST_NS), dict(self.ns))
        except Exception:     # anything the engine would reject, it reports itself
            return None
        if np.ndim(v) != 0 or isinstance(v, (str, bytes)):
            return None
        return v

    def stats_of(self, name):
        """chunk_stats() of operand `name` (asked once per plan), or None."""
        if name not in self._stats:
            v = self.operands.get(name)
            get = getattr(v, "chunk_stats", None)
            self._stats[name] = get() if get is not None and getattr(v, "ndim", 1) == 1 else None
        return self._stats[name]

    def range_of(self, name):
        if name in self._ranges:
            return self._ranges[name]
        r = None
        st = self.stats_of(name)
        if st is not None and len(st[0]):
            r = block_ranges(st, self.bounds)
        self._ranges[name] = r
        return r

    def scan(self):
        return np.full(self.nb, SCAN, np.int8)

    def side(self, node):
        """A _Range for one side of a comparison, or None (not classable)."""
        c = self.constant(node)
        if c is not None:
            return _const_range(c, self.nb)
        if isinstance(node, ast.Name) and self.is_array(node.id):
            r = self.range_of(node.id)
            if r is not None:
                self.used.add(node.id)
            return r
        return None

    def boolean(self, node):
        """Classes of the boolean `node`; _NoPlan when it may not give booleans."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            a, b = self.boolean(node.left), self.boolean(node.right)
            return _and(a, b) if isinstance(node.op, ast.BitAnd) else _or(a, b)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return _not(self.boolean(node.operand))
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1 or type(node.ops[0]) not in _OPS:
                raise _NoPlan("a chained or unsupported comparison")
            op = _OPS[type(node.ops[0])]
            x, y = self.side(node.left), self.side(node.comparators[0])
            if x is None or y is None:
                return self.scan()
            if not isinstance(x.known, np.ndarray) or not np.shape(x.lo):
                if not np.shape(y.lo):
                    return self.scan()      # two constants: evaluated by the engine
                x, y, op = y, x, _FLIP[op]
            try:
                return _compare(op, x, y)
            except (TypeError, ValueError, OverflowError):
                return self.scan()      # values NumPy does not compare: the engine says why
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isin":
            if len(node.args) != 2 or node.keywords or not isinstance(node.args[0], ast.Name):
                return self.scan()
            try:
                values = ast.literal_eval(node.args[1])
            except ValueError:
                return self.scan()
            r = self.side(node.args[0])
            cls = None if r is None or not isinstance(r.known, np.ndarray) else _isin_classes(r, values)
            return self.scan() if cls is None else cls
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isnan", "isinf"):
            if len(node.args) != 1 or node.keywords:
                raise _NoPlan("isnan/isinf take one argument")
            arg = node.args[0]
            if node.func.id == "isnan" and isinstance(arg, ast.Name) and self.is_array(arg.id):
                v = self.operands[arg.id]
                if getattr(v, "dtype", None) is not None and v.dtype.kind == "f":
                    r = self.range_of(arg.id)
                    if r is not None:
                        self.used.add(arg.id)
                        return _classes(r.novalue, ~r.nan, r.known)
            return self.scan()
        if isinstance(node, ast.Name) and self.is_array(node.id):
            v = self.operands[node.id]
            if getattr(v, "dtype", None) != np.dtype(bool):
                raise _NoPlan(f"{node.id!r} is not boolean")
            r = self.range_of(node.id)
            if r is None:
                return self.scan()
            self.used.add(node.id)
            return _classes(np.asarray(r.lo, bool), ~np.asarray(r.hi, bool), r.known)
        c = self.constant(node)
        if isinstance(c, (bool, np.bool_)):
            return np.full(self.nb, WHOLE if c else SKIP, np.int8)
        raise _NoPlan("not a comparison, a boolean operand or a combination of them with &, |, ~")


class Plan:
    """What a query reads: per block of rows, SKIP (not read), WHOLE (every row matches, the predicate
    is not decoded) or SCAN (decoded and evaluated).  ``str(plan)`` tells it in a line."""

    def __init__(self, expression, bounds, classes, used=(), reason=None):
        self.expression = expression
        self.bounds = list(bounds)
        self.classes = classes
        self.used = sorted(used)
        self.reason = reason

    @property
    def useful(self):
        """Whether any block is skipped or taken whole."""
        return self.classes is not None and bool((self.classes != SCAN).any())

    def _rows(self, cls):
        if not self.bounds:
            return 0
        b = np.asarray(self.bounds, dtype=np.int64).reshape(-1, 2)
        sel = self.classes == cls if self.classes is not None else np.full(len(b), cls == SCAN)
        return int((b[sel, 1] - b[sel, 0]).sum())

    def _count(self, cls):
        if self.classes is None:
            return len(self.bounds) if cls == SCAN else 0
        return int(np.count_nonzero(self.classes == cls))

    @property
    def skipped(self):
        return self._count(SKIP)

    @property
    def whole(self):
        return self._count(WHOLE)

    @property
    def scanned(self):
        return self._count(SCAN)

    def summary(self):
        """A dict: blocks, skipped, whole, scanned (blocks) and rows_skipped/whole/scanned."""
        return {"blocks": len(self.bounds), "skipped": self.skipped, "whole": self.whole,
                "scanned": self.scanned, "rows_skipped": self._rows(SKIP), "rows_whole": self._rows(WHOLE),
                "rows_scanned": self._rows(SCAN), "statistics": self.used}

    def __str__(self):
        s = self.summary()
        rows = sum(s[k] for k in ("rows_skipped", "rows_whole", "rows_scanned"))
        text = (f"{s['blocks']} block{'' if s['blocks'] == 1 else 's'}: {s['skipped']} skipped, {s['whole']} taken whole, "
                f"{s['scanned']} scanned ({s['rows_scanned']} of {rows} rows evaluated)")
        if self.used:
            text += "; statistics of " + ", ".join(self.used)
        elif self.reason:
            text += f"; no statistics used: {self.reason}"
        return text

    def __repr__(self):
        return f"Plan({self.expression!r}: {self})"


def plan(expression, operands, bounds):
    """The `Plan` of the boolean `expression` over the blocks `bounds` ((start, stop) pairs), its
    names bound by `operands` (arrays and scalars)."""
    if not ENABLED:
        return Plan(expression, bounds, None, reason="the planner is off (blzarr.query.planner.ENABLED)")
    try:
        tree = _parse(expression)
    except (SyntaxError, ValueError, TypeError):
        return Plan(expression, bounds, None, reason="invalid expression")
    scalars = {k: v for k, v in operands.items()
               if not (isinstance(v, np.ndarray) and v.ndim > 0 or hasattr(v, "chunklen"))}
    c = _Classifier(operands, bounds, scalars)
    if not bounds:
        return Plan(expression, bounds, np.zeros(0, np.int8))
    key = _plan_key(expression, operands, scalars, bounds)
    kept = _PLANS.get(key) if key is not None else None
    if kept is not None and _same_plan_inputs(kept, c, bounds):
        return Plan(expression, bounds, None if kept[2] is None else kept[2].copy(), kept[3], reason=kept[4])
    try:
        classes = c.boolean(tree)
    except _NoPlan as e:
        p = Plan(expression, bounds, None, reason=str(e))
    else:
        if not c.used:
            reason = "no operand compared has statistics"
            p = Plan(expression, bounds, classes if (classes != SCAN).any() else None, reason=reason)
        else:
            p = Plan(expression, bounds, classes, c.used)
    if key is not None and all(st is None or len(st[0]) <= _PLAN_STATS_MAX for st in c._stats.values()):
        if len(_PLANS) >= 32:
            _PLANS.clear()
        # what the plan was made from: the blocks, and a copy of every operand's statistics asked
        stats = {k: None if st is None else tuple(x.copy() if isinstance(x, np.ndarray) else x for x in st)
                 for k, st in c._stats.items()}
        _PLANS[key] = (list(bounds), stats, None if p.classes is None else p.classes.copy(), p.used, p.reason)
    return p


# The plans of recent queries.  A query plans on every call, and the plan is a function of the
# expression, its constants, the operands' dtypes and shapes, the blocks, and the statistics of the
# operands it compared: a plan is reused only when all of these are equal to those it was made from
# (the statistics compared value by value, a few microseconds, against the ~0.2 ms of planning).
_PLANS = {}
_PLAN_STATS_MAX = 1 << 16        # statistics of more chunks than this: planned afresh every time


def _plan_key(expression, operands, scalars, bounds):
    """The part of a plan's inputs that can be hashed, or None (a constant that is not hashable)."""
    items = []
    for k in sorted(operands):
        v = operands[k]
        if k in scalars:
            if not isinstance(v, (int, float, complex, bool, str, bytes, np.generic, type(None))):
                return None
            items.append((k, type(v), v, getattr(v, "dtype", None)))
        else:
            shape = getattr(v, "shape", None)
            items.append((k, id(v), type(v), getattr(v, "dtype", None), None if shape is None else tuple(shape[1:])))
    try:
        key = (expression, tuple(items), len(bounds), tuple(bounds[0]), tuple(bounds[-1]))
        hash(key)
    except TypeError:
        return None
    return key


def _same_plan_inputs(kept, c, bounds):
    """Whether the kept plan was made from these blocks and from the statistics the operands have now
    (each asked through `c`, which keeps them for a plan made afresh)."""
    if kept[0] != bounds:
        return False
    for name, old in kept[1].items():
        st = c.stats_of(name)
        if old is None or st is None:
            if old is not st:
                return False
            continue
        if len(old) != len(st) or old[3:] != tuple(st[3:]):
            return False
        for a, b in zip(old[:3], st[:3]):
            # bit for bit (NaN, NaT and signed zeros included)
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != np.ascontiguousarray(b).tobytes():
                return False
    return True


def column_range(expression, operands):
    """(name, terms) when the boolean `expression` is one comparison, or several joined by ``&``,
    between the same one-dimensional array operand `name` (integer, float or datetime64) and
    constants, each term ``(op, value)`` read as ``name op value`` (op one of ``>``, ``>=``, ``<``,
    ``<=``, ``==``); None for anything else (``|``, ``~``, ``!=``, arithmetic, two operands, NaN or
    NaT constants).  On a block of `name` whose values are sorted, the rows where such an expression
    holds are one run that two binary searches find (`sorted_run`)."""
    if not ENABLED:
        return None
    try:
        tree = _parse(expression)
    except (SyntaxError, ValueError, TypeError):
        return None
    scalars = {k: v for k, v in operands.items()
               if not (isinstance(v, np.ndarray) and v.ndim > 0 or hasattr(v, "chunklen"))}
    c = _Classifier(operands, [], scalars)
    leaves = []

    def walk(node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
            return walk(node.left) and walk(node.right)
        leaves.append(node)
        return True
    walk(tree)
    name, terms = None, []
    for node in leaves:
        if not isinstance(node, ast.Compare) or len(node.ops) != 1 or type(node.ops[0]) not in _OPS:
            return None
        op = _OPS[type(node.ops[0])]
        left, right = node.left, node.comparators[0]
        if isinstance(right, ast.Name) and c.is_array(right.id) and not (
                isinstance(left, ast.Name) and c.is_array(left.id)):
            left, right, op = right, left, _FLIP[op]
        if op == "!=" or not isinstance(left, ast.Name) or not c.is_array(left.id):
            return None
        if name is not None and left.id != name:
            return None
        name = left.id
        v = c.constant(right)
        if v is None or isinstance(v, (bool, np.bool_)):
            return None
        dt = getattr(operands[name], "dtype", None)
        if dt is None or dt.kind not in "iufmM" or getattr(operands[name], "ndim", 1) != 1:
            return None
        kind = getattr(np.asarray(v), "dtype", np.dtype(object)).kind
        if (dt.kind in "mM") != (kind in "mM") or kind not in "iufmM":
            return None
        if (kind in "mM" and np.isnat(v)) or (kind == "f" and np.isnan(v)):
            return None
        terms.append((op, v))
    return (name, terms) if name is not None else None


_SAMPLE = 4096


def sorted_run(values, terms):
    """(first, count) of the rows of the 1-d array `values` where every ``values op value`` of `terms`
    (from `column_range`) holds, found by binary searches when `values` is sorted (non-decreasing,
    NaN/NaT nowhere); None when it is not (or NumPy cannot search these values), for the caller to
    evaluate the expression itself.  A sample of the values is checked first, so a block with no
    order costs a few microseconds."""
    n = len(values)
    if n == 0:
        return None
    with np.errstate(all="ignore"):
        s = values[::_SAMPLE]
        if n > _SAMPLE and not (s[1:] >= s[:-1]).all():
            return None
        if not (values[1:] >= values[:-1]).all() or not values[0] == values[0]:
            return None         # not sorted, or NaN/NaT there (they compare false)
        lo, hi = 0, n
        try:
            for op, v in terms:
                # the constant as the comparison would see it (NumPy's promotion of the pair: a
                # Python float against float32 values is a float32, against integers a float64)
                v = np.asarray(v, dtype=np.result_type(values, v))
                if op in (">=", "=="):
                    lo = max(lo, int(np.searchsorted(values, v, "left")))
                elif op == ">":
                    lo = max(lo, int(np.searchsorted(values, v, "right")))
                if op in ("<", ):
                    hi = min(hi, int(np.searchsorted(values, v, "left")))
                elif op in ("<=", "=="):
                    hi = min(hi, int(np.searchsorted(values, v, "right")))
        except (TypeError, ValueError, OverflowError):
            return None
    return lo, max(0, hi - lo)
