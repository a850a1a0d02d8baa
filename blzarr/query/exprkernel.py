"""Element-wise expressions over numeric carrays compiled for the fused C kernel (`_exprkernel.ExprChunks`).

An expression of ``+ - * /``, unary minus, comparisons, ``& | ^ ~`` over carrays of float64, float32,
integers and bools whose full chunks are in memory (and int or float scalars) becomes a register
program; the kernel runs it on every thread, each chunk of every operand decoded whole into the
thread's buffer and the program run over windows of it whose temporaries stay in the thread's cache,
and sums, counts or compacts the result there (no Python per chunk, the GIL released).  Each
operation is computed in the dtype NumPy's promotion gives it (`Program`).
Operands of several chunk lengths (an int32 column's chunks hold twice the rows of a float64 one's)
are read in groups of chunks of the largest length, each chunk decoded once; their results are still
per block of the query's block length.
Whatever this module cannot compile (other dtypes, functions, operands on disk, a block length that
is not the chunk length, or chunk lengths that are not multiples of it dividing the largest) returns
None: the caller then evaluates it the general way (`blzarr.query.fused`).

The results are NumPy's, bit for bit: the float operations are the IEEE operations of NumPy's loops in
the same dtype, integer ones wrap as NumPy's do, a block's sum is NumPy's sum of that block's values
(pairwise for floats, in the float's own precision), and the callers add the blocks' sums in order as
the general path does.
"""

import ast
import functools

import numpy as np

from blzarr import _exprkernel
from blzarr.storage.chunk import run_work
from blzarr.query import rules
from blzarr.runtime.params import get_nthreads

ENABLED = True          # the benchmark and the tests switch the kernel off to compare with the general way

_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_COMPARE = {ast.Gt: "gt", ast.GtE: "ge", ast.Lt: "lt", ast.LtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}
_LOGICAL = {ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}
_F8 = np.dtype("f8")
_B1 = np.dtype("?")
_UFUNC = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}


class _Unsupported(Exception):
    pass


def _tree(expression):
    try:
        return rules.parse(expression).body
    except SyntaxError:
        return None


def _scalar(v):
    """`v` when it is an int or a float (Python's or NumPy's, of at most 8 bytes), else raise
    _Unsupported.  It is kept as it is until an operation gives it a dtype (``-q`` of an int 0 is 0,
    not -0.0, as in NumPy)."""
    if isinstance(v, (bool, np.bool_)):
        raise _Unsupported
    if isinstance(v, (int, np.integer)):
        return v
    if isinstance(v, (float, np.floating)) and np.dtype(type(v)).itemsize <= 8:
        return v
    raise _Unsupported


def _operand_kind(v):
    """The kernel's name for the dtype of array `v` (a key of `_exprkernel.OPERAND_KINDS`), or None."""
    dt = getattr(v, "dtype", None)
    if not isinstance(dt, np.dtype) or getattr(v, "ndim", 0) != 1 or not dt.isnative:
        return None
    kind = dt.str[1:]
    return kind if kind in _exprkernel.OPERAND_KINDS and dt == np.dtype(kind) else None


def _like(t):
    """What stands for a value of type `t` (a dtype, or a scalar) in NumPy's promotion: an empty
    array of the dtype, or the scalar itself (Python scalars are weak, NumPy's are not)."""
    return np.empty(0, t) if isinstance(t, np.dtype) else t


@functools.lru_cache(maxsize=1024, typed=True)
def _promoted(op, ta, tb):
    """The dtype NumPy computes the binary `op` in (for a comparison: the dtype both sides are
    converted to) for operands of types `ta`, `tb` (dtypes or scalars); None where NumPy refuses them."""
    try:
        with np.errstate(all="ignore"):
            if op in _UFUNC:
                return _UFUNC[op](_like(ta), _like(tb)).dtype
            return np.result_type(_like(ta), _like(tb))
    except (TypeError, ValueError, OverflowError):
        return None


def _type_of(v):
    """A scalar's stand-in for `_promoted`: one value of its type (the promotion depends on the type
    only; one value keeps the cache small)."""
    return type(v)(1)


# where a value of each NumPy dtype lives in the kernel's registers: float64 and float32 as they are,
# every integer dtype but uint64 as int64 (each operation wrapped back to its dtype), bools as bytes
_STORE = {"f8": "f8", "f4": "f4", "b1": "b1", "i1": "i8", "i2": "i8", "i4": "i8", "i8": "i8", "u1": "i8",
          "u2": "i8", "u4": "i8"}
_INT_OPS = ("add", "sub", "mul")


def _dkind(t):
    """The `_STORE` key of dtype `t`, or None."""
    if not isinstance(t, np.dtype):
        return None
    k = t.str[1:] if t.kind != "b" else "b1"
    return k if k in _STORE and t == np.dtype(k) else None


class Program:
    """The register program of an expression: `names` are the array operands (registers 0..), then
    the constants, then the temporaries; `kinds` each operand's dtype (an `_exprkernel.OPERAND_KINDS`
    key), whose register points at its values as they are; `dtype` the result's NumPy dtype and
    `rkind` where it lives ("f8", "f4", "i8" or "b1"); `kind` is "b1" for a boolean result, else "num".

    Every operation is typed as NumPy types it (`_promoted`: NumPy itself is asked, Python scalars
    weak as NEP 50 has them) and computed in that dtype: float64 and float32 in their own IEEE
    arithmetic, integers in int64 wrapped back to the operation's dtype after each step (int32 + int32
    wraps as NumPy's int32 addition), comparisons in the dtype both sides are converted to.  Each
    operand or constant is converted to that dtype first, as NumPy's casts convert it; a constant
    the dtype cannot hold, and every operation NumPy computes otherwise (integer division, uint64,
    float16, bool arithmetic), stays on the general path."""

    def __init__(self, tree, arrays, scalars):
        self.names, self.kinds = [], []
        cvals, slots, code, temps = [], [], [], []
        memo = {}

        # a value: (register, where it lives, its NumPy type); a constant's register is ("v", j) into
        # `cvals` until an operation gives it a dtype, then a slot ("c", k) of that kind
        def leaf(node):
            if isinstance(node, ast.Name):
                if node.id in arrays:
                    if node.id not in self.names:
                        kind = _operand_kind(arrays[node.id])
                        if kind is None:
                            raise _Unsupported
                        self.names.append(node.id)
                        self.kinds.append(kind)
                    i = self.names.index(node.id)
                    return ("op", i), self.kinds[i], np.dtype(self.kinds[i])
                if node.id in scalars:
                    cvals.append(_scalar(scalars[node.id]))
                    return ("v", len(cvals) - 1), None, _type_of(cvals[-1])
                raise _Unsupported
            if isinstance(node, ast.Constant) and type(node.value) in (int, float):
                cvals.append(_scalar(node.value))
                return ("v", len(cvals) - 1), None, _type_of(cvals[-1])
            raise _Unsupported

        def emit(op, a, b):
            temps.append(None)
            code.append((op, ("t", len(temps) - 1), a, b))
            return ("t", len(temps) - 1)

        def const(j, p, where):
            """Constant j converted to dtype `p` as NumPy converts a scalar for an operation in `p`,
            in a register of kind `where` ("f8", "f4", "i8", "i4")."""
            v = cvals[j]
            try:
                with np.errstate(all="raise"):
                    c = p.type(v)
            except (OverflowError, FloatingPointError, ValueError, TypeError):
                raise _Unsupported from None
            if p.kind in "iu" and (not isinstance(v, (int, np.integer)) or int(c) != v):
                raise _Unsupported
            if p.kind == "f" and np.isinf(c) and not np.isinf(v):
                raise _Unsupported
            if p == _F8 and isinstance(v, (int, np.integer)) and abs(int(v)) > 2 ** 53:
                raise _Unsupported          # (float64 holds it only rounded)
            slots.append((where, c))
            return ("c", len(slots) - 1)

        def to(val, p, where=None):
            """The register holding `val` converted to dtype `p`, of kind `where` (default: p's store)."""
            r, store, _ = val
            where = where or _STORE[_dkind(p)]
            if r[0] == "v":
                return const(r[1], p, where)
            if store == where:
                return r
            if where not in ("f8", "f4", "i8") or (where == "i8" and store in ("f8", "f4", "u8")):
                raise _Unsupported
            key = (r, where)
            if key not in memo:
                memo[key] = emit("cvt_" + where, r, -2 - _exprkernel.OPERAND_KINDS[store])
            return memo[key]

        def truth(val):
            """The register of boolean `val` holding bytes 0 and 1 (a bool column may hold other
            non-zero bytes, which NumPy reads as true)."""
            r, store, _ = val
            if r[0] != "op":
                return r
            if (r, "b1") not in memo:
                memo[(r, "b1")] = emit("b1_norm", r, None)
            return memo[(r, "b1")]

        def arith(op, p, regs):
            """An operation computed in dtype `p`, on operand registers already of p's store."""
            k = _dkind(p)
            if k in ("f8", "f4"):
                return emit(op if k == "f8" else "f4_" + op, *regs), k, p
            if k is None or k == "b1" or op not in _INT_OPS + ("neg",):
                raise _Unsupported
            t = emit("i8_" + op, *regs)
            if k != "i8":
                t = emit("wrap", t, -2 - _exprkernel.OPERAND_KINDS[k])
            return t, "i8", p

        def walk(node):
            if isinstance(node, ast.BinOp):
                a, b = walk(node.left), walk(node.right)
                if type(node.op) in _BINARY and not a[0][0] == b[0][0] == "v":
                    op = _BINARY[type(node.op)]
                    p = _promoted(op, a[2], b[2])
                    if _dkind(p) in (None, "b1"):
                        raise _Unsupported
                    if _dkind(p) not in ("f8", "f4") and op not in _INT_OPS:
                        raise _Unsupported
                    return arith(op, p, (to(a, p), to(b, p)))
                if type(node.op) in _LOGICAL and a[1] == b[1] == "b1":
                    return emit(_LOGICAL[type(node.op)], truth(a), truth(b)), "b1", _B1
                raise _Unsupported
            if isinstance(node, ast.UnaryOp):
                a = walk(node.operand)
                if a[0][0] == "v":
                    v = cvals[a[0][1]]
                    if not isinstance(node.op, (ast.USub, ast.UAdd)) or type(v) not in (int, float):
                        raise _Unsupported
                    cvals.append(_scalar(-v if isinstance(node.op, ast.USub) else +v))
                    return ("v", len(cvals) - 1), None, _type_of(cvals[-1])
                if isinstance(node.op, ast.Invert) and a[1] == "b1":
                    return emit("not", truth(a), None), "b1", _B1
                k = _dkind(a[2])
                if k is None or k == "b1" or not isinstance(node.op, (ast.USub, ast.UAdd)):
                    raise _Unsupported
                if isinstance(node.op, ast.UAdd):
                    return a
                return arith("neg", a[2], (to(a, a[2]), None))
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
                a, b = walk(node.left), walk(node.comparators[0])
                if a[0][0] == b[0][0] == "v":
                    raise _Unsupported
                cmp = _COMPARE[type(node.ops[0])]
                p = _promoted("cmp", a[2], b[2])
                k = _dkind(p)
                if k == "f8" and not (_floating(a[2]) or _floating(b[2])):
                    # two integers NumPy compares exactly (int64 against uint64), not in float64
                    raise _Unsupported
                if k in ("f8", "f4"):
                    return emit(cmp if k == "f8" else "f4_" + cmp, to(a, p), to(b, p)), "b1", _B1
                if k in ("i1", "i2", "i4", "i8", "u1", "u2", "u4"):
                    if p == np.int32 and all(x[1] in ("i4", None) for x in (a, b)):
                        # int32 against int32: compared as they are, without widening
                        return emit("i4_" + cmp, to(a, p, "i4"), to(b, p, "i4")), "b1", _B1
                    return emit("i8_" + cmp, to(a, p), to(b, p)), "b1", _B1
                if isinstance(p, np.dtype) and p == np.uint64:
                    # a uint64 column against a constant under 2**53: float64 holds the constant, and
                    # the conversion is monotonic, so a value past 2**53 stays past it
                    col, c = (a, b) if b[0][0] == "v" else (b, a)
                    if c[0][0] == "v" and col[1] == "u8":
                        v = cvals[c[0][1]]
                        if isinstance(v, (int, np.integer)) and 0 <= int(v) < 2 ** 53:
                            return emit(cmp, to(a, _F8), to(b, _F8)), "b1", _B1
                raise _Unsupported
            return leaf(node)

        res, store, dt = walk(tree)
        if not self.names or res[0] == "v":
            raise _Unsupported
        k = _dkind(dt)
        if k is None:
            raise _Unsupported
        if res[0] == "op" and _STORE[k] != store:
            res = to((res, store, dt), dt)          # (an integer column itself, as int64 values)
        elif k == "b1":
            res = truth((res, store, dt))
        self.dtype, self.rkind = dt, _STORE[k]
        self.kind = "b1" if k == "b1" else "num"
        nops, nc = len(self.names), len(slots)

        def reg(r):
            if r is None:
                return -1
            if isinstance(r, int):
                return r            # a conversion's or a wrap's kind, as -2 - kind
            return {"op": 0, "c": nops, "t": nops + nc}[r[0]] + r[1]
        ops = _exprkernel.EXPR_OPCODES
        self.program = np.array([(ops[op], reg(d), reg(a), reg(b)) for op, d, a, b in code],
                                dtype=np.int32).reshape(-1, 4)
        # every constant in an 8-byte slot: a float64 value, or an integer's bits
        bits = np.zeros(nc, np.int64)
        for j, (where, c) in enumerate(slots):
            bits[j] = int(c) if where in ("i8", "i4") else np.float64(c).view(np.int64)
        self.consts = bits.view(np.float64)
        self.ckinds = [w for w, _ in slots]
        self.nregs = nops + nc + len(temps)
        self.result = reg(res)


def _is_f8(t):
    """Whether `t` is the float64 dtype (None is not: NumPy's dtype(None) is float64, so `None == _F8`)."""
    return isinstance(t, np.dtype) and t == _F8


def _floating(t):
    """Whether a value of type `t` is a float in NumPy's eyes: a comparison of two integers is exact
    in NumPy (mixed signs included) and is left to it."""
    return t.kind == "f" if isinstance(t, np.dtype) else isinstance(t, (float, np.floating))


def _resident(v, blen):
    """(the bytes of `v`'s full chunks, the rows after them) when they are in memory and the chunks
    hold `blen` rows each, else None."""
    get = getattr(v, "resident_chunks", None)
    if get is None or getattr(v, "chunklen", None) != blen:
        return None
    return get()


def _chunked(v):
    """(the bytes of `v`'s full chunks, the rows after them, its chunk length) when they are in
    memory, else None."""
    get, clen = getattr(v, "resident_chunks", None), getattr(v, "chunklen", None)
    if get is None or type(clen) is not int or clen < 1:
        return None
    parts = get()
    return None if parts is None else (parts[0], parts[1], clen)


class Prepared:
    """A compiled expression and the chunks it reads: `nfull` full chunks of each operand (`chunks`),
    and the rows after them (`tails`, None when there are none).  `clens`: each operand's chunk
    length where they differ (the kernel then reads groups of chunks of the largest length, and the
    rows after the last whole group are the tails, read here), else None."""

    def __init__(self, prog, parts, clens=None, arrays=None):
        self.prog = prog
        self.clens = clens
        self.arrays = arrays
        if clens is None:
            self.chunks = [p[0] for p in parts]
            self.nfull = len(self.chunks[0])
            ntail = len(parts[0][1])
            self.tails = [p[1] for p in parts] if ntail else None
            return
        group = max(clens)
        n = len(arrays[prog.names[0]])
        ngroups = n // group
        self.chunks = [p[0][:ngroups * group // c] for p, c in zip(parts, clens)]
        self.nfull = ngroups
        self.tails = None
        if n > ngroups * group:
            self.tails = [np.ascontiguousarray(arrays[name][ngroups * group:n], np.dtype(kind))
                          for name, kind in zip(prog.names, prog.kinds)]


def prepare(expression, arrays, scalars, blen):
    """A `Prepared` expression for the kernel, or None where the kernel does not apply."""
    if not ENABLED or type(expression) is not str:
        return None
    tree = _tree(expression)
    if tree is None:
        return None
    try:
        prog = Program(tree, arrays, scalars)
    except _Unsupported:
        return None
    parts = [_chunked(arrays[name]) for name in prog.names]
    if any(p is None for p in parts):
        return None
    clens = [p[2] for p in parts]
    if len(set(clens)) > 1:
        # operands of several chunk lengths (an int32 column's chunks hold twice the rows of a
        # float64 one's): each a multiple of the block length that divides the largest, else the
        # kernel could not decode every chunk once
        if len({len(arrays[name]) for name in prog.names}) != 1 or not len(arrays[prog.names[0]]) or \
                any(c % blen or max(clens) % c for c in clens):
            return None
        return Prepared(prog, parts, clens, arrays)
    if clens[0] != blen or len({(len(p[0]), len(p[1])) for p in parts}) != 1:
        return None
    if not len(parts[0][0]) and not len(parts[0][1]):
        return None
    return Prepared(prog, parts, arrays=arrays)


def _chunk_name(prepared, i, m):
    """How an error names chunk m of operand i: its name in the expression, and its file when the
    operand is on disk."""
    name = prepared.prog.names[i]
    store = getattr((prepared.arrays or {}).get(name), "chunkstore", None)
    path = getattr(store, "chunk_path", None)
    try:
        where = f", file '{path(m)}'" if callable(path) else ""
    except Exception:       # (a name for a message: never an error of its own)
        where = ""
    return f"chunk {m} of '{name}'{where}"


def _work(prepared, mode, blen, outputs=(), dest=None):
    prog = prepared.prog
    return run_work(_exprkernel.ExprChunks(prepared.chunks, prog.program, prog.consts, prog.nregs, prog.result,
                                           mode, blen, outputs, get_nthreads(),
                                           functools.partial(_chunk_name, prepared), prepared.tails, dest,
                                           prog.kinds, prepared.clens, True, prog.ckinds, prog.rkind))


def values(expression, arrays, scalars, blen):
    """The expression over every row, as a new NumPy array of its dtype, or None."""
    p = prepare(expression, arrays, scalars, blen)
    if p is None:
        return None
    out = np.empty(len(arrays[p.prog.names[0]]), p.prog.dtype)
    _work(p, "values", blen, (), out)
    return out


def chunk_sums(expression, arrays, scalars, blen, dtype=None):
    """(NumPy's sum of the numeric expression over each block of `blen` rows, the last one shorter,
    as an array of the sum's dtype: float64, float32, int64 or uint64; the rows covered: all), or None
    (also where `dtype` is given and the expression's is another)."""
    p = prepare(expression, arrays, scalars, blen)
    if p is None or p.prog.kind != "num" or (dtype is not None and p.prog.dtype != dtype):
        return None
    sums = _work(p, "sum", blen).values
    if p.prog.dtype.kind == "u":
        sums = sums.view(np.uint64)     # (NumPy sums unsigned integers in uint64: the same bits)
    return sums, len(arrays[p.prog.names[0]])


def chunk_counts(expression, arrays, scalars, blen):
    """(the number of rows of each block of `blen` rows, the last one shorter, where the boolean
    expression holds; the rows covered: all), or None."""
    p = prepare(expression, arrays, scalars, blen)
    if p is None or p.prog.kind != "b1":
        return None
    return _work(p, "count", blen).counts, len(arrays[p.prog.names[0]])


def select(expression, arrays, scalars, blen, outputs):
    """The rows where the boolean expression holds, for each of `outputs` (``("positions", None)``,
    ``("operand", name)`` or ``("read", column)``, as `blzarr.chunked_eval.select_blocks` takes them):
    the kernel's work, where ``work.counts`` are the rows found per chunk (the rows after the full
    chunks last) and ``work.fill(j, dest, k0, k1)`` writes output j's; or None."""
    p = prepare(expression, arrays, scalars, blen)
    if p is None or p.prog.kind != "b1" or p.clens is not None:
        return None
    names = p.prog.names
    specs = []
    for kind, x in outputs:
        if kind == "positions":
            specs.append(("positions", None))
        elif kind == "operand" and x in names and p.prog.kinds[names.index(x)] == "f8":
            specs.append(("operand", names.index(x)))
        else:
            col = arrays[x] if kind == "operand" else x
            # (the kernel's register of an operand of another dtype holds it converted to float64: such
            # a column is read from its own chunks)
            same = [i for i, name in enumerate(names) if arrays[name] is col and p.prog.kinds[i] == "f8"]
            if same:
                specs.append(("operand", same[0]))
                continue
            dt = getattr(col, "dtype", None)
            if dt is None or dt == object or getattr(col, "ndim", 0) != 1 or dt.itemsize == 0:
                return None
            res = _resident(col, blen)
            if res is None or len(res[0]) != p.nfull or len(res[1]) != (len(p.tails[0]) if p.tails else 0):
                return None
            specs.append(("chunks", (res[0], dt.itemsize, res[1])))
    return _work(p, "select", blen, specs)
