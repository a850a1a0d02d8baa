"""The metadata files of one carray directory, in either layout (`ArrayMeta`): meta/storage (dtype,
cparams, chunklen, expectedlen, dflt) and meta/sizes (shape, nbytes, cbytes), read with every field
checked and written through the directory's store; the JSON forms of dtypes and default values."""

import ast
import math

import numpy as np

from blzarr import _chunk
from blzarr.errors import FormatError, PickleNotAllowedError
from blzarr.runtime.params import cparams as _cparams


def parse_dtype(text, where):
    """A dtype from the string bcolz writes in meta/storage (structured ones included, no eval)."""
    if not isinstance(text, str):
        raise FormatError(f"{where}: 'dtype' must be a string, got {type(text).__name__}")
    try:
        return np.dtype(text)
    except (TypeError, ValueError, SyntaxError):   # NumPy's parser raises SyntaxError on some strings
        pass  # e.g. the str() of a structured dtype, "[('a', '<i4')]" or "{'names': ...}"
    try:
        return np.dtype(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise FormatError(f"{where}: cannot understand dtype {text!r}") from None


def dflt_to_json(dflt):
    """A JSON-friendly form of a 0-d default value."""
    if dflt.dtype.kind in "mM":
        return int(dflt.view("i8"))
    if dflt.dtype.kind == "c":
        # a string such as "(1+2j)": bcolz fills new items with `chunk[:] = dflt`, which NumPy
        # parses from it (a [re, im] list would not broadcast); blzarr reads both forms
        return str(complex(dflt[()]))
    if dflt.dtype.kind == "O":
        # a plain JSON scalar as bcolz writes it (its default 0 included), anything else as null
        v = dflt[()]
        ok = v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v))
        return v if ok else None

    def fix(v):
        if isinstance(v, np.ndarray):
            return fix(v.tolist())
        if isinstance(v, bytes):
            return v.decode("latin-1")
        if isinstance(v, (list, tuple)):
            return [fix(x) for x in v]
        if isinstance(v, complex):
            return [v.real, v.imag]
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        return v

    return fix(dflt.tolist())


def _struct_value(value, dt):
    """JSON lists back to the (nested) tuples NumPy wants for structured values."""
    if dt.names is not None and isinstance(value, list) and len(value) == len(dt.names):
        return tuple(_struct_value(v, dt.fields[n][0]) for v, n in zip(value, dt.names))
    return value


def dflt_from_json(value, base, where):
    out = np.zeros((), dtype=base)
    if value is None or base.kind == "O":
        return out
    try:
        if base.kind in "mM":
            out.view("i8")[()] = int(value)
        elif base.kind == "c" and isinstance(value, list):
            out[()] = complex(value[0], value[1])
        elif base.names is not None and isinstance(value, list):
            out[()] = _struct_value(value, base)
        elif base.kind in "SV" and isinstance(value, str):
            out[()] = value.encode("latin-1")
        else:
            out[()] = value
    except (TypeError, ValueError, OverflowError, IndexError):
        raise FormatError(f"{where}: default value {value!r} does not fit dtype {base}") from None
    return out


class ArrayMeta:
    """What meta/storage and meta/sizes say of a carray, typed: `atom` (the dtype of one atom; its shape
    is the array's shape past the first axis), `cparams` (a `blzarr.cparams`), `chunklen`,
    `expectedlen`, `dflt` (a 0-d array of the base dtype) and `length` (atoms).  `where_storage` and
    `where_sizes` name the two files in error messages."""

    __slots__ = ("atom", "cparams", "chunklen", "expectedlen", "dflt", "length", "where_storage",
                 "where_sizes")

    def __init__(self, atom, cparams, chunklen, expectedlen, dflt, length=0, where_storage="meta/storage",
                 where_sizes="meta/sizes"):
        self.atom = atom
        self.cparams = cparams
        self.chunklen = chunklen
        self.expectedlen = expectedlen
        self.dflt = dflt
        self.length = length
        self.where_storage = where_storage
        self.where_sizes = where_sizes

    @classmethod
    def read(cls, store, rootdir, allow_pickle, known=None):
        """The metadata of the carray directory `rootdir` whose store is `store` (anything with
        read_meta and meta_path).  FormatError naming the file for anything malformed;
        PickleNotAllowedError for an object dtype without `allow_pickle`.  `known`: {name: JSON
        object} of meta files just read (the store's open), not read again."""
        known = known or {}
        sizes = known.get("sizes")
        if sizes is None:
            sizes = store.read_meta("sizes")
        storage = known.get("storage")
        if storage is None:
            storage = store.read_meta("storage")
        where_sz = f"'{store.meta_path('sizes')}'"
        where_st = f"'{store.meta_path('storage')}'"
        if not isinstance(sizes, dict) or not isinstance(storage, dict):
            raise FormatError(f"meta files of '{rootdir}' must hold JSON objects")
        shape = sizes.get("shape")
        if (not isinstance(shape, list) or not shape
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
            raise FormatError(f"{where_sz}: 'shape' must be a non-empty list of non-negative ints, got {shape!r}")
        base = parse_dtype(storage.get("dtype"), where_st)
        chunklen = storage.get("chunklen")
        if not isinstance(chunklen, int) or isinstance(chunklen, bool) or chunklen < 1:
            raise FormatError(f"{where_st}: 'chunklen' must be a positive int, got {chunklen!r}")
        cpd = storage.get("cparams")
        if not isinstance(cpd, dict):
            raise FormatError(f"{where_st}: 'cparams' must be a JSON object")
        try:
            cp = _cparams(clevel=cpd.get("clevel", 5), shuffle=int(cpd.get("shuffle", 1)),
                          cname=cpd.get("cname", "blosclz"), quantize=cpd.get("quantize") or 0)
        except (ValueError, TypeError) as e:
            raise FormatError(f"{where_st}: bad cparams: {e}") from None
        expectedlen = storage.get("expectedlen", shape[0])
        if not isinstance(expectedlen, int) or isinstance(expectedlen, bool):
            expectedlen = shape[0]
        try:
            atom = np.dtype((base, tuple(shape[1:]))) if len(shape) > 1 else base
        except (TypeError, ValueError, OverflowError) as e:
            raise FormatError(f"{where_sz}: shape {shape} does not fit dtype {base}: {e}") from None
        if atom.base.kind == "O" and not allow_pickle:
            raise PickleNotAllowedError(
                f"'{rootdir}' holds pickled Python objects, and unpickling untrusted files can run "
                "arbitrary code; if you trust it, open it with allow_pickle=True")
        if chunklen * atom.itemsize > _chunk.MAX_BUFFERSIZE:
            raise FormatError(f"{where_st}: chunklen {chunklen} makes chunks larger than Blosc allows")
        dflt = dflt_from_json(storage.get("dflt"), atom.base, where_st)
        return cls(atom, cp, chunklen, expectedlen, dflt, shape[0], where_st, where_sz)

    def storage(self):
        """The JSON object of meta/storage (a store adds its layout's keys when writing it)."""
        return {
            "dtype": str(self.atom.base),
            "cparams": self.cparams.to_dict(),
            "chunklen": self.chunklen,
            "expectedlen": self.expectedlen,
            "dflt": dflt_to_json(self.dflt),
        }

    def write_storage(self, store):
        store.write_meta("storage", self.storage())

    @staticmethod
    def write_sizes(store, shape, nbytes, cbytes):
        """meta/sizes: the shape and the uncompressed and compressed sizes."""
        store.write_meta("sizes", {"shape": list(shape), "nbytes": nbytes, "cbytes": cbytes})
