"""`eval`: evaluate an expression over carrays and arrays block by block, with bounded memory.

The operands are cut into blocks of rows; each block is evaluated by numexpr, NumPy or dask, and the
results are appended to the output (or, for a top-level ``sum``/``prod``, combined).
"""

import ast
import builtins
import functools
import sys
import threading

import numpy as np

from blzarr import _rows
from blzarr.query import exprkernel
from blzarr.query import fused
from blzarr.runtime import integrations
from blzarr.runtime import parallel
from blzarr.query import planner
from blzarr.query import rules
from blzarr.runtime.optional import have, need
from blzarr.runtime.params import defaults, get_nthreads

_PY_NAMESPACE = {name: getattr(np, name) for name in (
    "abs", "sqrt", "exp", "log", "log10", "log1p", "expm1", "sin", "cos", "tan", "arcsin", "arccos",
    "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "where", "real",
    "imag", "conj", "floor", "ceil", "power", "minimum", "maximum", "isnan", "isinf", "fmod")}
# the builtins an expression is evaluated with: none by name (its names are checked against its
# operands and the functions above first), but `__import__`, which C code run by NumPy inside the
# evaluation looks up there to import its exception classes (an int8 column + 300 raising NumPy's
# OverflowError failed with KeyError '__import__' instead)
_PY_BUILTINS = {"__import__": builtins.__import__}
_PY_NAMESPACE["arcsin"] = np.arcsin
_PY_NAMESPACE["contains"] = np.char.find


def _py_sum(x, axis=0):
    """`sum` of the python vm: like Python's sum() over an array (along the first axis), or `axis`."""
    return np.sum(x, axis=axis)


def _py_prod(x, axis=0):
    return np.prod(x, axis=axis)


def _py_isin(x, values):
    """`isin` of the python vm (what ``x in (...)`` of a query becomes): strings compared as the
    array's kind (str with bytes columns, bytes with str ones)."""
    x = np.asarray(x)
    if x.dtype.kind == "S":
        values = [v.encode() if isinstance(v, str) else v for v in values]
    elif x.dtype.kind == "U":
        values = [v.decode() if isinstance(v, bytes) else v for v in values]
    return np.isin(x, list(values))


_PY_NAMESPACE["isin"] = _py_isin
_PY_NAMESPACE["sum"] = _py_sum
_PY_NAMESPACE["prod"] = _py_prod
# how the results of a reduction over consecutive blocks combine
_REDUCTIONS = {"sum": np.add, "prod": np.multiply}
# a selection's rows are copied into the result on every thread from this size on
FILL_PARALLEL_BYTES = 1 << 20


def _reduction_plan(expression):
    """None (element-wise), a combining ufunc (one top-level reduction along the first axis or over
    everything: block results combine), or "whole" (a reduction the blocks cannot split)."""
    try:
        tree = rules.parse(expression).body
    except SyntaxError:
        return None  # reported by _operand_names

    def is_reduction(node):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _REDUCTIONS)

    if any(is_reduction(n) for n in ast.walk(tree) if n is not tree):
        return "whole"
    if not is_reduction(tree):
        return None
    axis = None
    if len(tree.args) > 1:
        axis = tree.args[1]
    for kw in tree.keywords:
        if kw.arg == "axis":
            axis = kw.value
    if axis is None or (isinstance(axis, ast.Constant) and axis.value in (None, 0)):
        return _REDUCTIONS[tree.func.id]
    if isinstance(axis, ast.Constant) and isinstance(axis.value, int) and axis.value > 0:
        return None  # along a later axis: the rows of each block stay independent
    return "whole"


def _operand_names(expression):
    """(code, names): `expression` compiled, and the variables it names in order (cached: every
    query asks again)."""
    if type(expression) is str:
        return _operand_names_cached(expression)
    return _operand_names_of(expression)


def _operand_names_of(expression):
    try:
        code = compile(expression, "<expression>", "eval")
    except SyntaxError as e:
        raise ValueError(f"invalid expression {expression!r}: {e.msg}") from None
    # the variables: bare names only (not the attributes of `da.nansum` or `x.real`), in order
    names = []
    for node in ast.walk(rules.parse(expression)):
        if isinstance(node, ast.Name) and node.id not in names:
            names.append(node.id)
    return code, tuple(names)


_operand_names_cached = functools.lru_cache(maxsize=256)(_operand_names_of)


def resolve_names(names, scopes, missing):
    """{name: value} for `names` (Python's own names left out), each from the first of the mappings
    `scopes` that holds it; a name none holds goes to `missing(name)`, which raises or, by returning,
    leaves the name out."""
    found = {}
    for name in names:
        if name in _PY_NAMESPACE:
            continue
        for scope in scopes:
            if name in scope:
                found[name] = scope[name]
                break
        else:
            missing(name)
    return found


def _undefined(name):
    raise NameError(f"variable '{name}' in the expression is not defined")


def _lookup(names, user_dict, depth):
    frame = sys._getframe(depth)
    return resolve_names(names, [user_dict or {}, frame.f_locals, frame.f_globals], _undefined)


# This engine knows no array class: an operand is an array when it is a NumPy array of one or more
# dimensions, or has a length, slicing and a chunk length (carray, ctable).  The layers above give it
# what it cannot build itself (blzarr.runtime.integrations): the class of a 'carray' result ("new_array",
# from containers/carray) and the dask vm ("eval_dask", from io/dask.py).
def _is_array(v):
    if isinstance(v, np.ndarray):
        return v.ndim > 0
    return hasattr(v, "chunklen") and hasattr(v, "__len__") and hasattr(v, "__getitem__")


def evaluate_blocks(expression, operands, vm=None, blen=None, plan=None, numpy_types=False):
    """Yield the expression evaluated over consecutive blocks of the array operands.

    The blocks are evaluated on every thread (`blzarr.query.fused`), a few at a time, and come out in order.
    `plan` is the planner's `Plan` over those blocks when the caller has it already; `numpy_types`
    as `make_kernel`'s.
    """
    code, _ = _operand_names(expression)
    vm = vm or defaults.vm
    if vm not in ("numexpr", "python", "dask"):
        raise ValueError(f"vm must be 'numexpr', 'python' or 'dask', got {vm!r}")
    arrays = {k: v for k, v in operands.items() if _is_array(v)}
    scalars = {k: v for k, v in operands.items() if k not in arrays}
    if not arrays:
        yield np.asarray(_run(expression, code, dict(scalars), vm))
        return
    n = common_length(arrays)
    if n == 0:
        local = dict(scalars)
        for k, v in arrays.items():
            local[k] = v[0:0]
        yield np.asarray(_run(expression, code, local, vm))
        return
    if blen is None:
        blen = rules.block_length(arrays.values())
    kernel, ne, _ = make_kernel(expression, code, arrays, scalars, vm, numpy_types)
    decoder = fused.Decoder(arrays, blen)
    bounds = fused.block_bounds(n, blen)
    classes = _classes(expression, operands, bounds, plan)
    if classes is not None:
        k_of = {b[0]: k for k, b in enumerate(bounds)}

    def block(s, e, local):
        if local is None:       # the planner knows every row's value: no operand is decoded
            return np.full(e - s, classes[k_of[s]] == planner.WHOLE)
        r = np.asarray(kernel(local))
        return r.copy() if decoder.owns(r) else r
    yield from fused.map_blocks(bounds, decoder, block, serial=ne,
                                decode=None if classes is None else classes == planner.SCAN)


def _classes(expression, operands, bounds, plan=None):
    """The planner's class of every block (SKIP, WHOLE, SCAN), or None when it knows nothing; from
    `plan` (made over the same blocks) when given."""
    p = planner.plan(expression, operands, bounds) if plan is None else plan
    return p.classes if p.useful else None


def explain(expression, user_dict=None, blen=None, depth=2):
    """explain(expression, user_dict=None, blen=None)

    What evaluating the boolean `expression` (as in `blzarr.eval`, or a query) reads, from the
    per-chunk statistics of its carray operands: a `blzarr.query.planner.Plan` whose ``str()`` says how
    many blocks are skipped, taken whole (all rows match, the predicate is not decoded) and scanned.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> ts = blzarr.carray(np.arange(100_000), chunklen=10_000)
    >>> print(blzarr.explain("(ts >= 15_000) & (ts < 30_000)"))
    10 blocks: 8 skipped, 1 taken whole, 1 scanned (10000 of 100000 rows evaluated); statistics of ts
    """
    code, names = _operand_names(expression)
    operands = _lookup(names, user_dict, depth)
    arrays = {k: v for k, v in operands.items() if _is_array(v)}
    n = common_length(arrays) if arrays else 0
    if blen is None:
        blen = rules.block_length(arrays.values()) if arrays else 1
    return planner.plan(expression, operands, fused.block_bounds(n, blen))


def common_length(arrays):
    lengths = {len(v) for v in arrays.values()}
    if len(lengths) != 1:
        raise ValueError(f"the arrays in the expression have different lengths: {sorted(lengths)}")
    return lengths.pop()


def _datetime_literals(expression, arrays):
    """(expression, scalars) with every string constant compared with a datetime64 operand
    (``ts < '2024-01-02'``) replaced by a name holding ``np.datetime64`` of it, as NumPy's datetime64
    reads an ISO string; None when the expression has no such comparison."""
    kinds = {}
    for k, v in arrays.items():
        dt = getattr(v, "dtype", None)
        if dt is not None and dt.kind == "M":
            kinds[k] = dt
    if not kinds or ("'" not in expression and '"' not in expression):
        return None
    tree = rules.parse(expression, fresh=True)      # its comparisons are rewritten below
    extra = {}

    def convert(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                value = np.datetime64(node.value)
            except ValueError as e:
                raise ValueError(f"in {expression!r}: {node.value!r} is compared with a datetime64 "
                                 f"column but is no date NumPy reads: {e}") from None
            name = f"_blzarr_datetime_{len(extra)}"
            extra[name] = value
            return ast.copy_location(ast.Name(name, ast.Load()), node)
        return node

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                isinstance(x, ast.Name) and x.id in kinds for x in [node.left] + node.comparators):
            node.left = convert(node.left)
            node.comparators = [convert(c) for c in node.comparators]
    return (ast.unparse(tree), extra) if extra else None


def make_kernel(expression, code, arrays, scalars, vm, numpy_types=False):
    """(kernel, numexpr module or None, probe): kernel(local, out=None) evaluates `expression` over
    one block of the arrays (`local` maps their names to the block's rows; the scalars are added),
    into `out` when given (of the probe's dtype).  The probe is the value over the first row: numexpr
    is tried on it, and NumPy evaluates what numexpr does not support.  With `numpy_types`, NumPy
    also evaluates what numexpr would compute in another dtype than NumPy's promotion gives (numexpr
    widens int8 to int32 and uint32 to int64, and computes int32 * float32 in float32); what NumPy
    refuses (uint64 & int64) stays numexpr's."""
    ns = {"__builtins__": _PY_BUILTINS, **_PY_NAMESPACE}
    fixed = _datetime_literals(expression, arrays)
    if fixed is not None:
        expression, extra = fixed
        code, _ = _operand_names(expression)
        scalars = dict(scalars, **extra)
    probe = dict(scalars)
    for k, v in arrays.items():
        first = np.asarray(v[0:1])
        # an empty array is probed with one zero of its dtype: the types come out the same, and the
        # expression still gives one value for the one row
        probe[k] = first if len(first) else np.zeros((1,) + first.shape[1:], first.dtype)
    if vm == "numexpr":
        numexpr = need("numexpr", "eval(..., vm='numexpr')")
        try:
            value = np.asarray(numexpr.evaluate(expression, local_dict=dict(probe), global_dict={}))
        except (TypeError, ValueError, NotImplementedError, KeyError, SyntaxError, RuntimeError):
            value = None
        if value is not None and numpy_types:
            try:
                with np.errstate(all="ignore"):
                    theirs = np.asarray(builtins.eval(code, ns, dict(probe)))
            except (TypeError, ValueError, OverflowError, ArithmeticError):
                theirs = value
            if (theirs.dtype, theirs.shape) != (value.dtype, value.shape):
                value = None
        if value is not None:
            def ne_kernel(local, out=None):
                local.update(scalars)
                return numexpr.evaluate(expression, local_dict=local, global_dict={}, out=out,
                                        casting="unsafe")
            return ne_kernel, numexpr, value

    def py_kernel(local, out=None):
        local.update(scalars)
        try:
            r = builtins.eval(code, ns, local)
        except ValueError as e:
            _python_logic_hint(e, expression)
            raise
        if out is None:
            return r
        out[...] = r
        return out
    try:
        value = builtins.eval(code, ns, dict(probe))
    except ValueError as e:
        _python_logic_hint(e, expression)
        raise
    return py_kernel, None, np.asarray(value)


def _python_logic_hint(e, expression):
    """NumPy's "truth value ... is ambiguous", raised by `and`, `or`, `not` or a chained comparison
    over arrays, as an error that says which operators work element-wise."""
    if "truth value" in str(e) and "ambiguous" in str(e):
        raise ValueError(f"{expression!r}: the truth value of an array is ambiguous: `and`, `or`, `not` "
                         "and chained comparisons (1 < x < 3) do not work element-wise; write "
                         "(x > 1) & (x < 3), | and ~ instead, each comparison in parentheses") from None


def _sum_argument(expression):
    """`x` of an expression ``sum(x)`` (one argument, no axis), or None."""
    try:
        tree = rules.parse(expression).body
    except SyntaxError:
        return None
    if not (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "sum"
            and len(tree.args) == 1 and not tree.keywords):
        return None
    return ast.unparse(tree.args[0])


def _kernel_sum(expression, operands, blen, vm):
    """``sum(x)`` of an element-wise `x` over whole operands of one length: by the C kernel
    (`blzarr.query.exprkernel`) where it applies, the chunks' sums added in order, as the blocks' sums
    are added; else, with numexpr as the vm, numexpr's blocks summed by NumPy where numexpr computes
    `x` in the type NumPy's promotion gives it, NumPy's blocks where not (numexpr would sum int8 * int8
    in int32), and with the python vm NumPy's blocks summed by NumPy for one-dimensional operands
    (Python's ``sum`` would add uint8 values in uint8): so the sum's type never depends on the path a
    chunk length allows.  None for other expressions, and for Python's sum of multidimensional
    operands, along their first axis (bcolz's)."""
    inner = _sum_argument(expression)
    if inner is None:
        return None
    arrays = {k: v for k, v in operands.items() if _is_array(v)}
    if not arrays or not common_length(arrays):
        return None
    scalars = {k: v for k, v in operands.items() if k not in arrays}
    blen = blen or rules.block_length(arrays.values())
    r = exprkernel.chunk_sums(inner, arrays, scalars, blen)
    if r is not None:
        parts = r[0]
    elif vm == "numexpr" or all(getattr(v, "ndim", 1) == 1 for v in arrays.values()):
        parts = [np.sum(b) for b in evaluate_blocks(inner, operands, vm, blen, numpy_types=True)]
    else:
        return None     # Python's sum of rows of several values: along the first axis
    total = None
    for p in parts:
        total = p if total is None else total + p
    return total


def evaluate_into(expression, operands, vm, blen, n):
    """The element-wise `expression` over `n` rows as one NumPy array, every block evaluated on its
    thread straight into its place; None when its result is not one value per row."""
    code, _ = _operand_names(expression)
    arrays = {k: v for k, v in operands.items() if _is_array(v)}
    scalars = {k: v for k, v in operands.items() if k not in arrays}
    kernel, ne, probe = make_kernel(expression, code, arrays, scalars, vm)
    if probe.ndim == 0 or probe.shape[0] != 1 or probe.dtype == object:
        return None
    if probe.dtype == bool and _classes(expression, operands, fused.block_bounds(n, blen)) is not None:
        fast = None         # statistics know some blocks: the planner's path below
    else:
        fast = exprkernel.values(expression, arrays, scalars, blen)
    if fast is not None and fast.dtype == probe.dtype:
        return fast
    out = np.empty((n,) + probe.shape[1:], dtype=probe.dtype)
    decoder = fused.Decoder(arrays, blen)
    bounds = fused.block_bounds(n, blen)
    classes = _classes(expression, operands, bounds) if probe.dtype == bool else None
    if classes is not None:
        k_of = {b[0]: k for k, b in enumerate(bounds)}

    def block(s, e, local):
        if local is None:
            out[s:e] = classes[k_of[s]] == planner.WHOLE
            return
        r = kernel(local, out=out[s:e])
        if r is not out[s:e] and not np.may_share_memory(r, out):
            out[s:e] = r
    fused.run_blocks(bounds, decoder, block, serial=ne,
                     decode=None if classes is None else classes == planner.SCAN)
    return out


def _block_mask(expression, kernel, local, n):
    """The mask `kernel` evaluates over the decoded block `local` of `n` rows, checked to hold one
    boolean per row (a ValueError naming `expression` otherwise)."""
    mask = np.asarray(kernel(local))
    if mask.dtype != bool:
        raise ValueError(f"the expression {expression!r} does not give booleans (it gives {mask.dtype})")
    if mask.ndim != 1:
        raise ValueError(f"the expression {expression!r} gives shape {mask.shape}, not one boolean per row")
    if len(mask) != n:
        raise ValueError(f"the expression {expression!r} gives {len(mask)} values for {n} rows")
    return mask


def _compact(expression, kernel, outputs, arrays):
    """fn(s, e, local): the mask of `expression` over the decoded block `local` of rows [s, e) and
    (positions in the block, [each of `outputs` at those rows]), or None when no row matches."""
    def block(s, e, local):
        mask = _block_mask(expression, kernel, local, e - s)
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return None
        a, b = int(idx[0]), int(idx[-1]) + 1
        run = idx.size == b - a         # one run of rows (a range of a sorted column): slices, no gather
        out = []
        for kind, x in outputs:
            if kind == "positions":
                out.append(np.arange(s + a, s + b, dtype=np.int_) if run else (idx + s).astype(np.int_))
            elif kind == "operand":
                out.append(local[x][a:b].copy() if run else local[x][idx])
            else:
                out.append(rules.gather(x, s, idx))
        return idx, out
    return block


def _split_operands(expression, operands):
    code, _ = _operand_names(expression)
    arrays = {k: v for k, v in operands.items() if _is_array(v)}
    scalars = {k: v for k, v in operands.items() if k not in arrays}
    return code, arrays, scalars


def select_blocks(expression, operands, vm, blen, outputs, plan=None):
    """Yield (start, positions, arrays) for the blocks where the boolean `expression` holds rows:
    the positions (from the block's start) of its true rows and, for each of `outputs`, those rows:

    - ``("positions", None)``: their row numbers (``numpy.int_``);
    - ``("operand", name)``: compacted from the block of operand `name` decoded for the expression;
    - ``("read", column)``: read from `column` by the compaction rule (`rules.gather`).

    Mask and compaction run together on every thread (`blzarr.query.fused`), a window of blocks at a time.
    `plan` is the planner's `Plan` over the blocks of `blen` rows when the caller has it already.
    """
    code, arrays, scalars = _split_operands(expression, operands)
    n = common_length(arrays)
    if n == 0:
        return
    kernel, ne, _ = make_kernel(expression, code, arrays, scalars, vm)
    decoder = fused.Decoder(arrays, blen)
    bounds = fused.block_bounds(n, blen)
    classes = _classes(expression, operands, bounds, plan)
    decode = None
    if classes is not None:
        # blocks that cannot match are not read; those that match whole are read for the outputs only
        keep = classes != planner.SKIP
        bounds = [b for b, k in zip(bounds, keep) if k]
        decode = classes[keep] == planner.SCAN

    def whole(s, e):
        out = []
        for kind, x in outputs:
            if kind == "positions":
                out.append(np.arange(s, e, dtype=np.int_))
            else:
                out.append((arrays[x] if kind == "operand" else x)[s:e])
        return s, np.arange(e - s), out
    compact = _compact(expression, kernel, outputs, arrays)

    def block(s, e, local):
        if local is None:
            return whole(s, e)
        r = compact(s, e, local)
        return None if r is None else (s,) + r
    for r in fused.map_blocks(bounds, decoder, block, serial=ne, decode=decode):
        if r is not None:
            yield r


def _compact_runs(expression, kernel, outputs):
    """fn(s, e, local) for `select_into`: the mask of `expression` over the decoded block `local` of rows
    [s, e), as (first, count, parts), or None when no row matches.  When the matching rows are one run
    (the end of a range on a sorted column: found from the count, the first true row and one check of
    the run, with no array of positions), the ``"read"`` parts are None: the caller reads rows
    ``s + first`` to ``s + first + count`` itself; otherwise every part holds the matching rows."""
    def block(s, e, local):
        mask = _block_mask(expression, kernel, local, e - s)
        m = int(np.count_nonzero(mask))
        if m == 0:
            return None
        a = int(mask.argmax())
        if m == 1 or m == len(mask) or bool(mask[a:a + m].all()):
            return _run_parts(s, (a, m), outputs, local)
        idx = np.flatnonzero(mask)
        out = []
        for kind, x in outputs:
            if kind == "positions":
                out.append((idx + s).astype(np.int_))
            elif kind == "operand":
                out.append(local[x][idx])
            else:
                out.append(rules.gather(x, s, idx))
        return a, m, out
    return block


def _run_parts(s, run, outputs, local):
    """`_compact_runs`' result for the run (first, count) of matching rows of the block from row s."""
    a, m = run
    if m == 0:
        return None
    out = []
    for kind, x in outputs:
        if kind == "positions":
            out.append(np.arange(s + a, s + a + m, dtype=np.int_))
        elif kind == "operand":
            out.append(local[x][a:a + m].copy())
        else:
            out.append(None)
    return a, m, out


def select_into(expression, operands, vm, blen, outputs, dtype, plan=None):
    """All the rows where the boolean `expression` holds, as one structured array of `dtype`, whose
    fields are `outputs` (as in `select_blocks`) in order.

    Two passes: the blocks to scan are evaluated and their matching rows compacted (on every thread
    when there are several, numexpr then on one thread in each); then, the result's length known,
    every piece is copied to its place, the threads taking (piece, column) tasks as they become free,
    costliest first: the blocks the planner takes whole are decoded column by column into a buffer of
    the thread and copied straight into the result (no array per block), and the run of rows a
    scanned block matches (the ends of a range) is read as a range of the other columns.  `plan` is
    the planner's `Plan` over the blocks of `blen` rows when the caller has it already."""
    dtype = np.dtype(dtype)
    code, arrays, scalars = _split_operands(expression, operands)
    n = common_length(arrays)
    if n == 0:
        return np.empty(0, dtype)
    decoder = fused.Decoder(arrays, blen)
    bounds = fused.block_bounds(n, blen)
    classes = _classes(expression, operands, bounds, plan)
    if classes is None:
        fast = _select_kernel(expression, arrays, scalars, blen, outputs, dtype)
        if fast is not None:
            return fast
        scan = bounds
    else:
        scan = [bounds[k] for k in np.flatnonzero(classes == planner.SCAN)]
    # a range on one column (`planner.column_range`): a scanned block whose values of that column are
    # sorted (the ends of a time range) finds its run by two binary searches, nothing evaluated
    column = planner.column_range(expression, operands) if classes is not None else None
    found = {}
    # the evaluator is made (numexpr probed on a row) only when a block needs it: not for the
    # ends of a range whose values are sorted, nor when the planner leaves nothing to scan
    evaluator = []

    def make_evaluator():
        """Make the evaluator; the numexpr module it calls (or None)."""
        kernel, ne, _ = make_kernel(expression, code, arrays, scalars, vm)
        evaluator.append(_compact_runs(expression, kernel, outputs))
        return ne

    def compact(s, e, local):
        if not evaluator:
            make_evaluator()
        return evaluator[0](s, e, local)

    def scan_one(b):
        local = decoder.read(b[0], b[1])
        if column is not None:
            run = planner.sorted_run(local[column[0]], column[1])
            if run is not None:
                found[b[0]] = _run_parts(b[0], run, outputs, local)
                return
        found[b[0]] = compact(b[0], b[1], local)
    if len(scan) < fused.MIN_TASKS:
        # a few blocks (the ends of a range): in this thread, numexpr with its own threads (handing
        # them to the pool measured 0.4 ms more CPU per query and worse wall times on a loaded machine)
        for b in scan:
            scan_one(b)
    else:
        with fused.numexpr_serial(make_evaluator()):
            parallel.run_each(scan_one, scan)
    # the pieces of the result in order: (first row, rows, offset in the result, [each output's
    # compacted rows, or None: read rows [first, first + rows) of that output])
    pieces, total = [], 0
    kept = range(len(bounds)) if classes is None else np.flatnonzero(classes != planner.SKIP).tolist()
    for k in kept:
        s, e = bounds[k]
        if classes is None or classes[k] == planner.SCAN:
            r = found[s]
            if r is None:
                continue
            a, m, parts = r
            pieces.append((s + a, m, total, parts))
            total += m
        else:
            pieces.append((s, e - s, total, [None] * len(outputs)))
            total += e - s
    found.clear()       # the compacted blocks are in `pieces` now
    out = np.empty(total, dtype)
    if not total:
        return out
    fields = [out[name] for name in dtype.names]
    sources = [arrays[x] if kind == "operand" else x for kind, x in outputs]
    positions = [kind == "positions" for kind, _ in outputs]
    tls = threading.local()

    def buffer(src):
        bufs = getattr(tls, "bufs", None)
        if bufs is None:
            bufs = tls.bufs = {}
        key = (src.dtype, src.shape[1:])
        b = bufs.get(key)
        if b is None:
            b = bufs[key] = np.empty((blen,) + tuple(src.shape[1:]), src.dtype)
        return b

    def place(task):
        (s, m, o, parts), k = task
        dst = fields[k][o:o + m]
        if parts[k] is not None:
            dst[...] = parts[k]
        elif positions[k]:
            dst[...] = np.arange(s, s + m, dtype=np.int_)
        else:
            src = sources[k]
            if hasattr(src, "read_into") and src.dtype != object:
                if dst.flags.c_contiguous and dst.dtype == src.dtype:
                    src.read_into(s, s + m, dst)        # one field: decoded straight into the result
                else:
                    dst[...] = src.read_into(s, s + m, buffer(src)[:m])
            else:
                dst[...] = src[s:s + m]
    # a piece whose every field is a one-dimensional column read by `read_into` or compacted rows of
    # the field's dtype is one task: its columns decoded into buffers of the thread, then written
    # into the result's rows together, a tile of rows at a time (`_rows.zip_fields`: each row's
    # cache line written once, where a strided copy per field brings it in once per field)
    offsets = [dtype.fields[name][1] for name in dtype.names]
    readable = [not positions[k] and hasattr(src, "read_into") and getattr(src, "ndim", 0) == 1
                and src.dtype == fields[k].dtype and src.dtype != object for k, src in enumerate(sources)]

    def zipped(piece):
        return all(readable[k] if part is None else (
            isinstance(part, np.ndarray) and part.ndim == 1 and part.dtype == fields[k].dtype
            and part.flags.c_contiguous) for k, part in enumerate(piece[3]))

    def column_buffer(k, src):
        bufs = getattr(tls, "zbufs", None)
        if bufs is None:
            bufs = tls.zbufs = {}
        b = bufs.get(k)
        if b is None:
            b = bufs[k] = np.empty(blen, src.dtype)
        return b

    def place_rows(piece):
        s, m, o, parts = piece
        cols = [part if part is not None else sources[k].read_into(s, s + m, column_buffer(k, sources[k])[:m])
                for k, part in enumerate(parts)]
        _rows.zip_fields(out, o, cols, offsets)

    def run(task):
        if task[1] is None:
            place_rows(task[0])
        else:
            place(task)
    # the rest column by column (the threads then write different pieces' rows at a time, not the
    # same cache lines of one piece's rows); the reads largest first, before the copies of compacted rows
    tasks = []
    for p in pieces:
        if zipped(p):
            tasks.append((p, None))
        else:
            tasks.extend((p, k) for k in range(len(outputs)))
    tasks.sort(key=lambda t: -t[0][1] if t[1] is None or t[0][3][t[1]] is None else 0)
    parallel.run_each(run, tasks)
    return out


def _select_kernel(expression, arrays, scalars, blen, outputs, dtype):
    """`select_into` by the C kernel (`blzarr.query.exprkernel`); None where it does not apply."""
    work = exprkernel.select(expression, arrays, scalars, blen, outputs)
    if work is None:
        return None
    counts = work.counts
    offs = np.concatenate([[0], np.cumsum(counts)])
    out = np.empty(int(offs[-1]), dtype)
    fields = [out[name] for name in dtype.names]
    # the rows of each output copied to their place, a share of the chunks per thread when many
    nth = get_nthreads() if offs[-1] * dtype.itemsize >= FILL_PARALLEL_BYTES else 1
    cuts = [len(counts) * t // nth for t in range(nth + 1)]
    tasks = [(j, cuts[t], cuts[t + 1]) for j in range(len(fields)) for t in range(nth) if cuts[t] < cuts[t + 1]]
    parallel.run_all(lambda t: work.fill(t[0], fields[t[0]][offs[t[1]]:offs[t[2]]], t[1], t[2]), tasks)
    return out


def _run(expression, code, local, vm):
    if vm == "numexpr":
        import numexpr
        try:
            return numexpr.evaluate(expression, local_dict=local, global_dict={})
        except (TypeError, ValueError, NotImplementedError, KeyError, SyntaxError, RuntimeError):
            pass  # an expression numexpr does not support: NumPy evaluates it below
    return builtins.eval(code, {"__builtins__": _PY_BUILTINS, **_PY_NAMESPACE}, local)


def eval(expression, vm=None, out_flavor=None, user_dict=None, blen=None, depth=2, **kwargs):
    """eval(expression, vm=None, out_flavor=None, user_dict=None, blen=None, **kwargs)

    Evaluate an expression over the carrays, NumPy arrays and scalars it names, block by block,
    so that memory use stays bounded by a few blocks whatever the length of the operands.

    Parameters
    ----------
    expression : str
        A Python expression of arithmetic, comparisons, ``&``, ``|``, ``~`` and functions such as
        ``sqrt``, ``exp``, ``where``, ``sum``.  Its bare names are the variables.
    vm : {'numexpr', 'python', 'dask'}, optional
        The evaluator: numexpr (the default when installed), NumPy ('python'), or dask.array
        ('dask', where ``da.`` names dask.array functions as in bcolz).  Default:
        ``blzarr.defaults.vm``.
    out_flavor : {'bcolz', 'carray', 'numpy'}, optional
        A carray ('bcolz' and 'carray') or a NumPy array.  Default: ``blzarr.defaults.out_flavor``.
    user_dict : dict, optional
        Variables, looked up before the caller's locals and globals.
    blen : int, optional
        Rows per block (default: the smallest chunk length of the carray operands, at least 4096).
    **kwargs
        Passed to `blzarr.carray` when the result is a carray (``rootdir``, ``cparams``, ...).

    Returns
    -------
    carray, numpy.ndarray or scalar
        A scalar for an expression that reduces everything (``sum(a)``).

    Raises
    ------
    NameError
        A variable of the expression is not defined.
    ValueError
        The expression is not valid Python, or the arrays have different lengths.
    ImportError
        The `vm` asked for is not installed.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> a = blzarr.carray(np.arange(5))
    >>> blzarr.eval("a * 2 + 1", out_flavor="numpy").tolist()
    [1, 3, 5, 7, 9]
    >>> b = np.arange(5) * 10.0
    >>> c = blzarr.eval("where(a > 2, b, -1)")
    >>> type(c).__name__, c[:].tolist()
    ('carray', [-1.0, -1.0, -1.0, 30.0, 40.0])
    >>> int(blzarr.eval("sum(a)"))
    10
    >>> blzarr.eval("x + y", user_dict={"x": np.arange(3), "y": 1}, out_flavor="numpy", vm="python")
    array([1, 2, 3])
    """
    expression = planner.rewrite_in(expression)
    out_flavor = out_flavor or defaults.out_flavor
    if out_flavor not in ("bcolz", "carray", "numpy"):
        raise ValueError(f"out_flavor must be 'bcolz', 'carray' or 'numpy', got {out_flavor!r}")
    vm = check_vm(vm)
    operands = caller_operands(expression, user_dict, sys._getframe(depth - 1), vm)
    return evaluate(expression, operands, vm, out_flavor, blen, **kwargs)


def check_vm(vm):
    """The evaluator `vm` names (None: ``defaults.vm``), checked: a ValueError for an unknown one, an
    ImportError for one not installed."""
    vm = vm or defaults.vm
    if vm not in ("numexpr", "python", "dask"):
        raise ValueError(f"vm must be 'numexpr', 'python' or 'dask', got {vm!r}")
    if vm == "numexpr" and not have("numexpr"):
        raise ImportError("eval(..., vm='numexpr') needs numexpr, which is not installed")
    if vm == "dask":
        if not have("dask"):
            raise ImportError("eval(..., vm='dask') needs dask, which is not installed")
    return vm


def caller_operands(expression, user_dict, frame, vm=None):
    """{name: value} of the variables `expression` names, each from `user_dict`, then the locals and
    the globals of `frame` (a NameError for one found nowhere; with vm='dask' an unbound ``da`` is
    dask.array, left to the evaluator); a list, tuple or range is refused (ValueError)."""
    _, names = _operand_names(expression)
    if vm == "dask" and "da" not in (user_dict or {}):
        names = tuple(n for n in names if n != "da")  # `da` is dask.array, as in bcolz
    operands = resolve_names(names, [user_dict or {}, frame.f_locals, frame.f_globals], _undefined)
    for name, v in operands.items():
        if isinstance(v, (list, tuple, range)):
            raise ValueError(f"variable '{name}' is a {type(v).__name__}: only NumPy arrays, carrays "
                             "and scalars can be operands")
    return operands


def evaluate(expression, operands, vm, out_flavor, blen=None, **kwargs):
    """What `eval` gives for `expression` (its ``in`` rewritten) over the resolved `operands`, with
    `vm` and `out_flavor` checked (`check_vm`)."""
    code, _ = _operand_names(expression)
    if vm == "dask":
        namespace = dict(_PY_NAMESPACE, da=need("dask.array", "eval(..., vm='dask')"))
        result = integrations.get("eval_dask")(expression, code, operands, namespace, out_flavor, kwargs)
        if result is not NotImplemented:
            return result
        vm = "python"  # what dask cannot build, NumPy evaluates block by block, with the same results
    if not any(_is_array(v) for v in operands.values()):
        # no array operand: the evaluator's own value, as bcolz gives it (numexpr's 0-d array, or
        # the Python object for vm='python')
        return _run(expression, code, dict(operands), vm)
    plan = _reduction_plan(expression)
    if plan == "whole":
        lengths = [len(v) for v in operands.values() if _is_array(v)]
        blen = max(max(lengths, default=1), 1)
    if plan is np.add:
        total = _kernel_sum(expression, operands, blen, vm)
        if total is not None:
            return total
    blocks = evaluate_blocks(expression, operands, vm, blen)
    if plan is not None and plan != "whole":
        result = None
        for block in blocks:
            result = block if result is None else plan(result, block)
        return result[()] if result.ndim == 0 else result
    if out_flavor == "numpy":
        arrays = {k: v for k, v in operands.items() if _is_array(v)}
        if plan is None and vm != "dask" and arrays and common_length(arrays):
            out = evaluate_into(expression, operands, vm, blen or rules.block_length(arrays.values()), common_length(arrays))
            if out is not None:
                return out
        parts = list(blocks)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    out = None
    pending, npending, batch = [], 0, 0
    for block in blocks:
        if block.ndim == 0:
            return block[()]
        if out is None:
            kw = dict(kwargs)
            kw.setdefault("expectedlen", max(len(v) for v in operands.values() if _is_array(v))
                          if any(_is_array(v) for v in operands.values()) else len(block))
            out = integrations.get("new_array")(block, **kw)
            # blocks are appended a few chunks at a time, so that the result's chunks are compressed
            # on every thread (an append of one block at a time compresses them one by one)
            batch = 4 * max(1, get_nthreads()) * max(1, int(getattr(out, "chunklen", 1)))
            continue
        pending.append(block)
        npending += len(block)
        if npending >= batch:
            out.append(pending[0] if len(pending) == 1 else np.concatenate(pending))
            pending, npending = [], 0
    if pending:
        out.append(pending[0] if len(pending) == 1 else np.concatenate(pending))
    out.flush()
    return out
