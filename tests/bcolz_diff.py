"""A differential driver of bcolz's public API: the same call on a real-bcolz object and on a blzarr
object built from the same data, the two outcomes (value, or exception) compared.

`Pair` holds one bcolz object and one blzarr object (a carray or a ctable); `Pair.call(name, fn)`
runs `fn(module, obj)` on both and records a difference when the outcomes differ.  Outcomes are
normalised by `norm`: arrays by dtype, shape and bytes (so NaN, -0.0 and NaT compare exactly),
scalars by their Python or NumPy type and value, carrays and ctables by dtype, shape and contents,
iterators by their items, namedtuple rows by type name, fields and values.  An exception on the
bcolz side is matched when blzarr raises an instance of the same class (blzarr's errors subclass
the builtins bcolz raises).

Calls where bcolz is wrong, or where blzarr differs on purpose (docs/guide/migrating.rst), are not
drawn or are checked against NumPy instead; each place says why.
"""

import math

import numpy as np


class Difference(AssertionError):
    pass


def _is_ctable(v):
    return hasattr(v, "cols") and hasattr(v, "names") and hasattr(v, "addcol")


def _is_carray(v):
    return hasattr(v, "chunklen") and hasattr(v, "cparams") and hasattr(v, "wheretrue")


def norm(v):
    """A comparable, module-independent form of a result."""
    if _is_ctable(v):
        return ("ctable", list(v.names), str(v.dtype), v.shape, norm(v[:]))
    if _is_carray(v):
        return ("carray", str(v.dtype), v.shape, norm(v[:]))
    if isinstance(v, np.ndarray):
        return ("ndarray", _dtype_key(v.dtype), v.shape, _array_values(v))
    if isinstance(v, np.generic):
        return ("np", type(v).__name__, _dtype_key(v.dtype), np.asarray(v).tobytes())
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else repr(v))
    if isinstance(v, (bool, int, str, bytes, type(None))) or hasattr(v, "isoformat"):
        return (type(v).__name__, v)
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return ("namedtuple", type(v).__name__, tuple(v._fields), [norm(x) for x in v])
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, [norm(x) for x in v])
    if isinstance(v, dict):
        return ("dict", sorted((k, norm(x)) for k, x in v.items()))
    if hasattr(v, "to_numpy") and hasattr(v, "columns"):  # a pandas DataFrame
        return ("DataFrame", [str(c) for c in v.columns], [str(t) for t in v.dtypes],
                [norm(v[c].to_numpy()) for c in v.columns], list(v.index))
    if hasattr(v, "__next__"):
        return ("iterator", [norm(x) for x in v])
    raise TypeError(f"no normal form for {type(v)}")


def _dtype_key(dt):
    # numpy.record and numpy.void rows differ for attribute access, so the scalar type is compared too
    return (dt.str, dt.descr if dt.names else None, dt.type.__name__)


def _array_values(a):
    if a.dtype.kind == "O":
        return repr(a.tolist())
    if a.dtype.names:
        return [(name, _array_values(np.ascontiguousarray(a[name]))) for name in a.dtype.names]
    return np.ascontiguousarray(a).tobytes()


def outcome(fn, *args):
    try:
        return ("ok", norm(fn(*args)))
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raise", e)


def same_outcome(want, got):
    """Whether blzarr's outcome `got` matches bcolz's `want`."""
    if want[0] == "raise":
        return got[0] == "raise" and isinstance(got[1], type(want[1]))
    return want == got


# a list to collect differences in instead of raising them (a discovery run over many examples)
COLLECT = None


class Pair:
    """A bcolz object and a blzarr object that should behave the same; `log` lists the calls made."""

    def __init__(self, bcolz, blzarr, bc, bl):
        self.mods = (bcolz, blzarr)
        self.objs = [bc, bl]
        self.log = []

    def call(self, name, fn, compare=True):
        """fn(module, obj) on both; a Difference when the outcomes differ.  Returns bcolz's outcome."""
        self.log.append(name)
        want = outcome(fn, self.mods[0], self.objs[0])
        got = outcome(fn, self.mods[1], self.objs[1])
        if want[0] == "raise" and "64-bit unsigned integer" in str(want[1]):
            # numexpr has no uint64: bcolz raises NotImplementedError and tells to use vm='python';
            # blzarr evaluates (uint64 as int64 under numexpr).  Both are compared under 'python'.
            with self.mods[0].defaults_ctx(vm="python"), self.mods[1].defaults_ctx(vm="python"):
                want = outcome(fn, self.mods[0], self.objs[0])
                got = outcome(fn, self.mods[1], self.objs[1])
        if (want[0] == "raise" and isinstance(want[1], UnboundLocalError) and "'result'" in str(want[1])
                and len(self.objs[0]) == 0):
            # bcolz's chunked eval fails on an empty operand (its result is never assigned):
            # blzarr answers, with an empty result (checked by the caller's later calls)
            assert got[0] == "ok", f"{name}: blzarr {_show(got)} on an empty object"
            return got, got
        if compare:
            self.require(name, want, got)
        return want, got

    def require(self, name, want, got):
        """A Difference unless blzarr's outcome `got` of the call `name` matches bcolz's `want`."""
        if same_outcome(want, got):
            return
        if COLLECT is not None:
            COLLECT.append((name, _show(want), _show(got) + _where(want, got), list(self.log)))
            return
        raise Difference(f"{name}: bcolz {_show(want)} != blzarr {_show(got)}{_where(want, got)}\n"
                         f"calls: {self.log}\nobjects: {self.objs}")

    def check_contents(self, label="contents"):
        self.call(label, lambda m, o: o[:])
        self.call(label + " len/shape/dtype", lambda m, o: (len(o), o.shape, str(o.dtype), o.ndim,
                                                            o.nbytes, o.size))


def _where(want, got):
    """Where two array outcomes first differ."""
    try:
        if want[1][0] == got[1][0] == "tuple" and len(want[1][1]) == len(got[1][1]):
            k = next(k for k, (a, b) in enumerate(zip(want[1][1], got[1][1])) if a != b)
            return f" (item {k}: bcolz {want[1][1][k]!r}, blzarr {got[1][1][k]!r})"
        a, b = want[1][3], got[1][3]
        if want[1][0] == got[1][0] == "ndarray" and isinstance(a, bytes) and len(a) == len(b):
            i = next(k for k in range(len(a)) if a[k] != b[k])
            return f" (first differing byte {i}: element {i // np.dtype(want[1][1][0]).itemsize})"
    except (TypeError, IndexError, StopIteration):
        pass
    return ""


def _show(o):
    if o[0] == "raise":
        return f"raised {type(o[1]).__name__}: {o[1]}"
    s = repr(o[1])
    return s if len(s) < 600 else s[:600] + "..."
