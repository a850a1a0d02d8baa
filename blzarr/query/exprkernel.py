"""Element-wise float64 expressions compiled for the fused C kernel (`_exprkernel.ExprChunks`).

An expression of ``+ - * /``, unary minus, comparisons, ``& | ^ ~`` over float64 carrays whose full
chunks are in memory (and int or float scalars) becomes a register program; the kernel runs it on
every thread, each chunk of every operand decoded whole into the thread's buffer and the program run
over windows of it whose temporaries stay in the thread's cache, and sums, counts or compacts the
result there (no Python per chunk, the GIL released).
Operands of several chunk lengths (an int32 column's chunks hold twice the rows of a float64 one's)
are read in groups of chunks of the largest length, each chunk decoded once; their results are still
per block of the query's block length.
Whatever this module cannot compile (other dtypes, functions, operands on disk, a block length that
is not the chunk length, or chunk lengths that are not multiples of it dividing the largest) returns
None: the caller then evaluates it the general way (`blzarr.query.fused`).

The results are the general way's, bit for bit: the operations are IEEE double operations as NumPy's
and numexpr's, a block's sum is NumPy's pairwise sum of that block's values, and the callers add the
blocks' sums in order as the general path does.
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
    """`v` when NumPy would promote it to a float64 of the same value against a float64 array, else
    raise _Unsupported.  It is kept as it is until the program is built (``-q`` of an int 0 is 0, not
    -0.0, as in NumPy)."""
    if isinstance(v, (bool, np.bool_)):
        raise _Unsupported
    if isinstance(v, (int, np.integer)):
        if abs(int(v)) > 2 ** 53:
            raise _Unsupported
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


class Program:
    """The register program of an expression: `names` are the array operands (registers 0..), then
    the constants, then the temporaries; `kind` is the result's dtype, "f8" or "b1"; `kinds` each
    operand's dtype (an `_exprkernel.OPERAND_KINDS` key: the kernel converts it to float64).

    Every value is typed twice: where it lives ("f8": a float64 register, which an operand of any
    dtype becomes; "b1": the bytes of a comparison) and the type NumPy gives it (the operand's dtype,
    a constant's scalar, an operation's result dtype).  An operation is compiled only where NumPy
    computes it in float64, on the float64 conversions of its operands, which the registers hold;
    and a comparison also where NumPy compares in an integer dtype or in float32 values that float64
    holds exactly (`_exact_compare`)."""

    def __init__(self, tree, arrays, scalars):
        self.names, self.kinds, consts, code = [], [], [], []
        temps = []

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
                    return ("op", i), "f8", np.dtype(self.kinds[i])
                if node.id in scalars:
                    consts.append(_scalar(scalars[node.id]))
                    return ("c", len(consts) - 1), "f8", _type_of(consts[-1])
                raise _Unsupported
            if isinstance(node, ast.Constant) and type(node.value) in (int, float):
                consts.append(_scalar(node.value))
                return ("c", len(consts) - 1), "f8", _type_of(consts[-1])
            raise _Unsupported

        def emit(op, a, b):
            temps.append(None)
            code.append((op, ("t", len(temps) - 1), a, b))
            return ("t", len(temps) - 1)

        def numeric(a, ta, na):
            # a float64 register whose values are NumPy's float64 conversion of the value: an operand,
            # a constant, or a float64 temporary (a comparison's bytes are not)
            return ta == "f8" and (a[0] != "t" or _is_f8(na))

        def walk(node):
            if isinstance(node, ast.BinOp):
                (a, ta, na), (b, tb, nb) = walk(node.left), walk(node.right)
                if type(node.op) in _BINARY and numeric(a, ta, na) and numeric(b, tb, nb) \
                        and not a[0] == b[0] == "c":
                    op = _BINARY[type(node.op)]
                    if not _is_f8(_promoted(op, na, nb)):
                        raise _Unsupported
                    return emit(op, a, b), "f8", _F8
                if type(node.op) in _LOGICAL and ta == tb == "b1":
                    return emit(_LOGICAL[type(node.op)], a, b), "b1", _B1
                raise _Unsupported
            if isinstance(node, ast.UnaryOp):
                a, ta, na = walk(node.operand)
                if a[0] == "c" and isinstance(node.op, (ast.USub, ast.UAdd)):
                    with np.errstate(all="ignore"):
                        v = -consts[a[1]] if isinstance(node.op, ast.USub) else +consts[a[1]]
                    consts.append(_scalar(v))
                    return ("c", len(consts) - 1), "f8", _type_of(consts[-1])
                if a[0] == "c":
                    raise _Unsupported
                if isinstance(node.op, ast.USub) and numeric(a, ta, na) and _is_f8(na):
                    return emit("neg", a, None), "f8", _F8
                if isinstance(node.op, ast.UAdd) and ta == "f8" and a[0] == "op":
                    return a, "f8", na
                if isinstance(node.op, ast.UAdd) and numeric(a, ta, na):
                    return a, "f8", _F8
                if isinstance(node.op, ast.Invert) and ta == "b1":
                    return emit("not", a, None), "b1", _B1
                raise _Unsupported
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
                (a, ta, na), (b, tb, nb) = walk(node.left), walk(node.comparators[0])
                if numeric(a, ta, na) and numeric(b, tb, nb) and not a[0] == b[0] == "c":
                    p = _promoted("cmp", na, nb)
                    if (_is_f8(p) and (_floating(na) or _floating(nb))) or \
                            _exact_compare(p, (a, na), (b, nb), consts):
                        return emit(_COMPARE[type(node.ops[0])], a, b), "b1", _B1
                raise _Unsupported
            return leaf(node)

        res, tres, nres = walk(tree)
        self.kind = tres
        nops, nc = len(self.names), len(consts)
        if not nops or res[0] == "c" or (tres == "f8" and not _is_f8(nres)):
            raise _Unsupported

        def reg(r):
            if r is None:
                return -1
            return {"op": 0, "c": nops, "t": nops + nc}[r[0]] + r[1]
        ops = _exprkernel.EXPR_OPCODES
        self.program = np.array([(ops[op], reg(d), reg(a), reg(b)) for op, d, a, b in code],
                                dtype=np.int32).reshape(-1, 4)
        self.consts = np.array([float(c) for c in consts], dtype=np.float64)
        self.nregs = nops + nc + len(temps)
        self.result = reg(res)


# the operand dtypes whose every value a float64 holds exactly, and those a float32 holds exactly
_F8_EXACT = frozenset(["i1", "i2", "i4", "u1", "u2", "u4", "b1", "f4"])
_F4_EXACT = frozenset(["i1", "i2", "u1", "u2", "b1", "f4"])


def _exact_compare(p, side_a, side_b, consts):
    """Whether a comparison NumPy makes in dtype `p` (an integer dtype, or float32) gives the same
    answer on the float64 conversions of its sides: where each side's values convert to `p` exactly
    and float64 holds them exactly, a comparison of the converted values is the comparison of the
    values themselves.  A constant side is replaced by its value converted to `p` (as NumPy converts
    a Python scalar: ``f4 > 0.1`` compares with float32(0.1)); one `p` cannot hold refuses.

    An int64 or uint64 column compares exactly with a constant under 2**53 in magnitude too:
    float64 holds its values up to 2**53, and the conversion is monotonic, so a value past 2**53
    stays past the constant (the constant 2**53 itself would not: 2**53 + 1 rounds to it)."""
    if not isinstance(p, np.dtype) or not (p.kind in "iu" or p == np.float32):
        return False
    exact = _F4_EXACT if p.kind == "f" else _F8_EXACT
    conv = {}
    wide = 0            # int64 / uint64 columns, exact only against a small constant
    for reg, t in (side_a, side_b):
        if isinstance(t, np.dtype):
            if reg[0] != "op":
                return False
            if t.str[1:] not in exact:
                if p.kind == "f" or t.str[1:] not in ("i8", "u8"):
                    return False
                wide += 1
            continue
        v = consts[reg[1]]
        try:
            with np.errstate(all="raise"):
                c = p.type(v)
        except (OverflowError, FloatingPointError, ValueError, TypeError):
            return False
        if (p.kind in "iu" and int(c) != v) or (p.kind == "f" and np.isinf(c) and not np.isinf(v)):
            return False
        conv[reg[1]] = c
    if wide and (len(conv) != 1 or not all(abs(int(c)) < 2 ** 53 for c in conv.values())):
        return False
    for i, c in conv.items():
        consts[i] = c
    return True


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
    return Prepared(prog, parts)


def _work(prepared, mode, blen, outputs=(), dest=None):
    prog = prepared.prog
    return run_work(_exprkernel.ExprChunks(prepared.chunks, prog.program, prog.consts, prog.nregs, prog.result,
                                           mode, blen, outputs, get_nthreads(), None, prepared.tails, dest,
                                           prog.kinds, prepared.clens))


def values(expression, arrays, scalars, blen):
    """The expression over every row, as a new NumPy array (float64 or bool), or None."""
    p = prepare(expression, arrays, scalars, blen)
    if p is None:
        return None
    out = np.empty(len(arrays[p.prog.names[0]]), np.float64 if p.prog.kind == "f8" else np.bool_)
    _work(p, "values", blen, (), out)
    return out


def chunk_sums(expression, arrays, scalars, blen):
    """(the sum of the float64 expression over each block of `blen` rows, the last one shorter, the
    rows covered: all), or None."""
    p = prepare(expression, arrays, scalars, blen)
    if p is None or p.prog.kind != "f8":
        return None
    return _work(p, "sum", blen).values, len(arrays[p.prog.names[0]])


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
