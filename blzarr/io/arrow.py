"""ctables and Apache Arrow: the Arrow PyCapsule stream out of a ctable, and ctables from Arrow data.

* ``ctable.__arrow_c_stream__(requested_schema=None)``: the table as an Arrow C stream, one record
  batch of whole chunks at a time (only one batch is decoded at once), so ``polars.DataFrame(t)``,
  ``pyarrow.table(t)`` and DuckDB (``duckdb.sql("SELECT ... FROM t")``) read it directly;
  ``__arrow_c_schema__`` gives its schema alone.
* ``ctable.fromarrow(obj, ...)``: a ctable from anything with ``__arrow_c_stream__`` (a pyarrow
  Table or RecordBatchReader, a Polars or pandas DataFrame, a DuckDB relation...), read one batch at a
  time; into a directory, the table is written beside it and moved there when complete.

The type mapping, both ways (docs/FORMAT.rst, "Column attributes"): booleans, integers and floats as
they are; NumPy ``U``/``S`` columns are Arrow ``string``/``binary`` and Arrow strings become ``U``
(binary ``S``) as wide as their longest value; ``datetime64`` is ``timestamp`` (``date32`` for days)
with the time zone kept in the column attribute ``blzarr:timezone``; ``timedelta64`` is
``duration``; dictionary-encoded columns are decoded.  Arrow nulls become a validity column beside
the values (``blzarr:validity``), except in datetime and duration columns, where they are NaT.
Arrow columns of other types (lists, structs, decimals, times of day...) are refused naming the
column.  pyarrow is needed (``pip install pyarrow``).
"""

import os
import uuid

import numpy as np

from blzarr.runtime import integrations
from blzarr.storage import fileio, files, intent, replace
from blzarr.storage.bytestore import is_url, occupied, open_bytestore
from blzarr.containers.carray.array import carray
from blzarr.containers.ctable.table import ctable
from blzarr.errors import StorageError
from blzarr.storage.locking import lock_dir
from blzarr.io import colmeta

# rows per record batch of the stream, at least (a whole number of the widest chunk)
MIN_BATCH_ROWS = 1 << 16
_TIME_UNITS = ("s", "ms", "us", "ns")


def need_pyarrow(what):
    """The pyarrow module, or an ImportError saying what needs it and how to install it."""
    try:
        import pyarrow
    except ImportError:
        raise ImportError(f"{what} needs pyarrow, which is not installed: pip install pyarrow "
                          "(or pip install 'blzarr[optional]')") from None
    return pyarrow


# ------------------------------------------------------------------------------ NumPy -> Arrow
def _utf8(codes, lengths):
    """UTF-8 bytes and per-row byte counts of rows of code points `codes` (rows x width, uint32),
    row i holding `lengths[i]` code points."""
    n, w = codes.shape
    keep = np.arange(w)[None, :] < lengths[:, None]
    cp = codes[keep]
    if not len(cp) or int(cp.max()) < 0x80:
        return cp.astype(np.uint8), lengths.astype(np.int64)
    if ((cp >= 0xD800) & (cp < 0xE000)).any() or (cp > 0x10FFFF).any():
        raise ValueError("holds code points that are not Unicode characters (surrogates or beyond "
                         "U+10FFFF), which UTF-8 cannot encode")
    nb = 1 + (cp >= 0x80).astype(np.int8) + (cp >= 0x800) + (cp >= 0x10000)
    out = np.zeros((len(cp), 4), np.uint8)
    one, two, three, four = nb == 1, nb == 2, nb == 3, nb == 4
    out[one, 0] = cp[one]
    c = cp[two]
    out[two, 0], out[two, 1] = 0xC0 | (c >> 6), 0x80 | (c & 0x3F)
    c = cp[three]
    out[three, 0], out[three, 1], out[three, 2] = 0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)
    c = cp[four]
    out[four, 0], out[four, 1] = 0xF0 | (c >> 18), 0x80 | ((c >> 12) & 0x3F)
    out[four, 2], out[four, 3] = 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)
    data = out[np.arange(4)[None, :] < nb[:, None]]
    rows = np.repeat(np.arange(n), lengths)
    return data, np.bincount(rows, weights=nb, minlength=n).astype(np.int64)


def _fixed_to_arrow(pa, values, valid):
    """An Arrow string (``U``) or binary (``S``) array of the fixed-width NumPy `values`, as NumPy
    reads them (trailing NULs dropped, NULs inside kept); `valid` False marks nulls."""
    n = len(values)
    w = values.dtype.itemsize // (4 if values.dtype.kind == "U" else 1)
    if w == 0:
        units = np.zeros((n, 0), np.uint32 if values.dtype.kind == "U" else np.uint8)
    else:
        units = np.ascontiguousarray(values).view(np.uint32 if values.dtype.kind == "U" else np.uint8)
        units = units.reshape(n, w)
    if values.dtype.kind == "U" and w and n and int(units.max()) < 0x80:
        return _ascii_to_arrow(pa, units, valid)
    nz = units != 0
    if w:
        lengths = np.where(nz.any(axis=1), w - np.argmax(nz[:, ::-1], axis=1), 0)
    else:
        lengths = np.zeros(n, np.int64)
    if valid is not None:
        lengths = np.where(valid, lengths, 0)
    if values.dtype.kind == "U":
        data, nbytes = _utf8(units, lengths)
        typ = pa.string()
    else:
        data = units[np.arange(w)[None, :] < lengths[:, None]]
        nbytes = lengths.astype(np.int64)
        typ = pa.binary()
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(nbytes, out=offsets[1:])
    if offsets[-1] < 2 ** 31:
        offsets = offsets.astype(np.int32)
    else:
        typ = pa.large_string() if typ == pa.string() else pa.large_binary()
    bitmap, nulls = None, 0
    if valid is not None:
        nulls = int(n - np.count_nonzero(valid))
        if nulls:
            bitmap = pa.array(valid, type=pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _ascii_to_arrow(pa, units, valid):
    """The Arrow strings of ASCII code points `units` (rows x width): the bytes as fixed-size
    binary, cast to strings and the trailing NULs trimmed by Arrow's kernels (a few C passes
    instead of NumPy's temporaries)."""
    import pyarrow.compute as pc
    n, w = units.shape
    fixed = pa.Array.from_buffers(pa.binary(w), n, [None, pa.py_buffer(units.astype(np.uint8))])
    out = pc.utf8_rtrim(fixed.cast(pa.binary()).cast(pa.string()), characters="\x00")
    if valid is not None and not valid.all():
        bitmap = pa.array(valid, type=pa.bool_()).buffers()[1]
        out = pa.Array.from_buffers(out.type, n, [bitmap] + out.buffers()[1:], offset=out.offset)
    return out


def _export_type(pa, name, col, tz):
    """(Arrow type, NumPy dtype to convert the values to first or None) of carray column `col`."""
    dt = col.dtype
    if col.ndim != 1:
        raise ValueError(f"column {name!r} has shape {col.shape}: an Arrow column must be 1-d")
    if dt.kind in "biu" or (dt.kind == "f" and dt.itemsize in (2, 4, 8)):
        return pa.from_numpy_dtype(dt), None
    if dt.kind == "U":
        return pa.string(), None
    if dt.kind == "S":
        return pa.binary(), None
    if dt.kind in "mM":
        unit = np.datetime_data(dt)[0]
        if dt.kind == "M" and unit == "D" and tz is None:
            return pa.date32(), None
        conv = None
        if unit not in _TIME_UNITS:
            unit, conv = "s", np.dtype(f"{dt.kind}8[s]")   # minutes, hours, days... exactly in seconds
        if dt.kind == "M":
            return pa.timestamp(unit, tz=tz), conv
        return pa.duration(unit), conv
    raise TypeError(f"column {name!r} of dtype {dt} has no Arrow type (booleans, integers, floats, "
                    "fixed-width strings and bytes, datetime64 and timedelta64 have)")


class _Export:
    """What the stream of ctable `t` holds: per Arrow field, the value column, its validity column
    and types; `batch(s, e)` makes the record batch of rows [s, e)."""

    def __init__(self, pa, t, columns=None):
        self.pa, self.t = pa, t
        links = colmeta.validity_columns(t)
        names = colmeta.data_names(t) if columns is None else list(columns)
        fields, self.plan = [], []
        for n in names:
            if n not in t.cols:
                raise KeyError(f"no column named {n!r} (columns: {t.names})")
            col = t.cols[n]
            tz = colmeta.get(col, colmeta.TIMEZONE) if col.dtype.kind == "M" else None
            typ, conv = _export_type(pa, n, col, tz)
            valid = links.get(n)
            fields.append(pa.field(n, typ, nullable=valid is not None or col.dtype.kind in "mMSU"))
            self.plan.append((n, valid, typ, conv))
        self.schema = pa.schema(fields)
        widest = max([t.cols[n].chunklen for n in names] or [1])
        self.blen = widest * max(1, -(-MIN_BATCH_ROWS // widest))

    def array(self, j, s, e):
        """The Arrow array of field j for rows [s, e)."""
        pa, t = self.pa, self.t
        n, vname, typ, conv = self.plan[j]
        values = t.cols[n][s:e]
        valid = t.cols[vname][s:e] if vname is not None else None
        if values.dtype.kind in "US":
            return _fixed_to_arrow(pa, values, valid)
        if conv is not None:
            values = values.astype(conv)
        mask = None if valid is None or valid.all() else ~valid
        return pa.array(values, type=typ, mask=mask)

    def batch(self, s, e):
        return self.pa.RecordBatch.from_arrays([self.array(j, s, e) for j in range(len(self.plan))],
                                               schema=self.schema)

    def batches(self, start=0, stop=None):
        stop = len(self.t) if stop is None else stop
        for s in range(start, stop, self.blen):
            yield self.batch(s, min(s + self.blen, stop))

    def reader(self):
        return self.pa.RecordBatchReader.from_batches(self.schema, self.batches())


def arrow_c_stream(t, requested_schema=None):
    """The Arrow C stream capsule of ctable `t` (`ctable.__arrow_c_stream__`)."""
    pa = need_pyarrow("Reading a ctable as an Arrow stream")
    return _Export(pa, t).reader().__arrow_c_stream__(requested_schema)


def arrow_c_schema(t):
    """The Arrow C schema capsule of ctable `t` (`ctable.__arrow_c_schema__`)."""
    pa = need_pyarrow("The Arrow schema of a ctable")
    return _Export(pa, t).schema.__arrow_c_schema__()


def ctable_to_arrow(t, columns=None):
    """A pyarrow Table of ctable `t` (`ctable.to_arrow`)."""
    pa = need_pyarrow("ctable.to_arrow()")
    ex = _Export(pa, t, columns)
    return pa.Table.from_batches(list(ex.batches()), schema=ex.schema)


# ------------------------------------------------------------------------------ Arrow -> NumPy
def _import_plan(pa, schema):
    """Per field of `schema`: (name, kind, NumPy dtype or None for strings/bytes, time zone)."""
    types = pa.types
    plan = []
    for field in schema:
        name, typ = field.name, field.type
        if types.is_dictionary(typ):
            typ = typ.value_type
        tz = None
        if types.is_boolean(typ):
            dt, kind = np.dtype(bool), "num"
        elif types.is_integer(typ) or types.is_floating(typ):
            code = "f" if types.is_floating(typ) else "i" if types.is_signed_integer(typ) else "u"
            dt, kind = np.dtype(f"{code}{typ.bit_width // 8}"), "num"
        elif types.is_string(typ) or types.is_large_string(typ) or \
                (hasattr(types, "is_string_view") and types.is_string_view(typ)):
            dt, kind = None, "U"
        elif types.is_binary(typ) or types.is_large_binary(typ) or types.is_fixed_size_binary(typ) or \
                (hasattr(types, "is_binary_view") and types.is_binary_view(typ)):
            dt, kind = None, "S"
        elif types.is_timestamp(typ):
            dt, kind, tz = np.dtype(f"M8[{typ.unit}]"), "time", typ.tz
        elif types.is_date32(typ):
            dt, kind = np.dtype("M8[D]"), "time"
        elif types.is_date64(typ):
            dt, kind = np.dtype("M8[ms]"), "time"
        elif types.is_duration(typ):
            dt, kind = np.dtype(f"m8[{typ.unit}]"), "time"
        else:
            raise TypeError(f"column {name!r} has the Arrow type {field.type}, which a ctable cannot "
                            "hold (booleans, integers, floats, strings, binary, timestamps, dates and "
                            "durations can): leave it out or cast it first")
        plan.append((name, kind, dt, tz))
    return plan


def _plain(pa, arr):
    """`arr` (an Array or ChunkedArray) as one Array, dictionary-decoded and without views."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t):
        arr = arr.cast(pa.large_string())
    elif hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
    elif pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.large_binary())
    return arr


def _arrow_to_fixed(pa, arr, kind, width, name):
    """NumPy ``U``/``S`` values of width `width` of the string or binary Array `arr` (nulls as
    empty); a value NumPy would not give back (ending with a NUL) is refused."""
    n = len(arr)
    w = max(width, 1)
    large = arr.type in (pa.large_string(), pa.large_binary())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32)[arr.offset:arr.offset + n + 1]
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_valid()), lengths, 0)
    filled = lengths > 0
    if filled.any() and not (data[offsets[1:][filled] - 1]).all():
        raise ValueError(f"column {name!r} has a value ending with a NUL character, which a "
                         "fixed-width NumPy column drops: strip or replace it first")
    lo, hi = int(offsets[0]), int(offsets[-1])
    if not len(data) or hi == lo:
        return np.zeros(n, f"{kind}{w}")
    if kind == "U" and int(data[lo:hi].max()) < 0x80:
        return _ascii_from_arrow(pa, arr, w)
    if kind == "S":
        # a (rows x width) gather of the bytes, zero past each value's end
        idx = offsets[:-1, None] + np.arange(w)
        np.minimum(idx, len(data) - 1, out=idx)
        out = data[idx]
        out[np.arange(w)[None, :] >= lengths[:, None]] = 0
        return out.view(f"S{w}").reshape(n)
    total = int(lengths.sum())
    rows = np.repeat(np.arange(n), lengths)
    raw = data[_positions(lengths, total) + np.repeat(offsets[:-1], lengths)] if total \
        else np.zeros(0, np.uint8)
    lead = (raw & 0xC0) != 0x80
    # UTF-8 decoded: one code point per lead byte, the continuation bytes folded in
    li = np.flatnonzero(lead)
    b0 = raw[li].astype(np.uint32)
    nb = np.where(b0 < 0x80, 1, np.where(b0 < 0xE0, 2, np.where(b0 < 0xF0, 3, 4)))
    pad = np.concatenate((raw, np.zeros(3, np.uint8))).astype(np.uint32)
    cp = np.where(nb == 1, b0, np.where(nb == 2, b0 & 0x1F, np.where(nb == 3, b0 & 0x0F, b0 & 0x07)))
    for k in (1, 2, 3):
        more = nb > k
        cp = np.where(more, (cp << 6) | (pad[li + k] & 0x3F), cp)
    chars = np.bincount(rows[li], minlength=n) if total else np.zeros(n, np.int64)
    out = np.zeros((n, max(width, 1)), np.uint32)
    out[rows[li], _positions(chars, len(li))] = cp
    return out.view(f"U{max(width, 1)}").reshape(n)


def _ascii_from_arrow(pa, arr, w):
    """``U{w}`` values of the ASCII Arrow strings `arr` (nulls as empty): Arrow's kernel pads every
    value with NULs to `w` bytes, so the data buffer is the (rows x w) characters as they are."""
    import pyarrow.compute as pc
    if arr.null_count:
        arr = arr.fill_null("")
    padded = pc.utf8_rpad(arr, width=w, padding="\x00")
    bufs = padded.buffers()
    large = padded.type == pa.large_string()
    offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32)
    lo, hi = int(offsets[padded.offset]), int(offsets[padded.offset + len(padded)])
    chars = np.frombuffer(bufs[2], np.uint8)[lo:hi]
    return chars.reshape(len(padded), w).astype(np.uint32).view(f"U{w}").reshape(len(padded))


def _positions(lengths, total):
    """For runs of `lengths` items laid end to end (`total` in all), each item's place in its run."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.arange(total) - np.repeat(starts, lengths)


def _width(pa, arr, kind):
    import pyarrow.compute as pc
    if not len(arr) or arr.null_count == len(arr):
        return 0
    m = pc.max(pc.utf8_length(arr) if kind == "U" else pc.binary_length(arr)).as_py()
    return int(m or 0)


def _is_dict(pa, arr):
    return not isinstance(arr, pa.ChunkedArray) and pa.types.is_dictionary(arr.type)


def _dict_parts(pa, arr, kind, fits=0):
    """(dictionary as one plain Array, the rows' indices into it as an Arrow integer Array without
    nulls (a null row points at value 0), the rows' validity or None, the widest value the rows
    use) of the dictionary-encoded string or binary Array `arr`.  When no value of the dictionary
    is wider than `fits`, the widest one is given instead (without looking at which values the rows
    use)."""
    import pyarrow.compute as pc
    dictionary = _plain(pa, arr.dictionary)
    ind = arr.indices
    n = len(ind)
    valid = None
    if ind.null_count:
        valid = np.asarray(ind.is_valid())
        ind = ind.fill_null(0)
    if not len(dictionary):                     # every row null
        return dictionary, ind, np.zeros(n, bool), 0
    if dictionary.null_count:
        dvalid = np.asarray(dictionary.is_valid())
        dv = dvalid[_index_values(ind)]
        valid = dv if valid is None else valid & dv
    lengths = pc.utf8_length(dictionary) if kind == "U" else pc.binary_length(dictionary)
    lengths = np.asarray(lengths.fill_null(0), dtype=np.int64)
    if int(lengths.max()) <= fits:
        return dictionary, ind, valid, int(lengths.max())
    used = lengths[_index_values(ind)] if n else lengths[:0]
    if valid is not None:
        used = used[valid]
    return dictionary, ind, valid, int(used.max()) if len(used) else 0


def _index_values(ind):
    """The values of the Arrow integer Array `ind` (no nulls) as a NumPy view."""
    import pyarrow as pa
    code = "i" if pa.types.is_signed_integer(ind.type) else "u"
    return np.frombuffer(ind.buffers()[1], f"{code}{ind.type.bit_width // 8}")[ind.offset:ind.offset + len(ind)]


def _dict_to_fixed(pa, dictionary, ind, valid, kind, width, name):
    """The rows' NumPy ``U``/``S`` values (nulls as empty) of the parts `_dict_parts` gives: the
    dictionary converted once, then gathered by the rows' indices."""
    import pyarrow.compute as pc
    n = len(ind)
    if not len(dictionary) or not n:
        return np.zeros(n, f"{kind}{max(width, 1)}")
    # a value no row uses may be wider than the column: the gathered rows fit `width`
    dwidth = max(width, _width(pa, dictionary, kind))
    fixed = np.ascontiguousarray(_arrow_to_fixed(pa, dictionary, kind, dwidth, name))
    size = fixed.dtype.itemsize
    # gathered by Arrow's take, the values seen as fixed-size binary: it reads the indices as they
    # are (np.take needs them as int64 first) and costs about 40% of np.take's time (5M rows of U4:
    # 18 against 43 ms, bench/FINDINGS.md "parquet5")
    taken = pc.take(pa.Array.from_buffers(pa.binary(size), len(fixed), [None, pa.py_buffer(fixed)]), ind)
    values = np.frombuffer(taken.buffers()[1], fixed.dtype, count=n, offset=taken.offset * size)
    if dwidth > width:
        values = values.astype(f"{kind}{max(width, 1)}")
    if valid is not None:
        if not values.flags.writeable:
            values = values.copy()
        values[~valid] = ""
    return values


def _column_width(pa, arr, kind, parts=None, name=None):
    """The widest value of a string or binary column (dictionary-encoded or not), in characters or
    bytes.  A dictionary-encoded column's `_dict_parts` are kept in ``parts[name]`` when `parts` is
    given (the builder then does not make them again for the same batch)."""
    if _is_dict(pa, arr):
        got = _dict_parts(pa, arr, kind)
        if parts is not None:
            parts[name] = got
        return got[3]
    return _width(pa, _plain(pa, arr), kind)


def _convert(pa, arr, kind, dt):
    """(NumPy values, validity or None) of Arrow Array `arr` of a numeric or temporal field."""
    valid = None
    if arr.null_count and kind == "num":
        valid = np.asarray(arr.is_valid())
        arr = arr.fill_null(pa.scalar(colmeta.fill_value(dt).item(), type=arr.type))
    if kind == "time":
        # the stored integers as they are (pyarrow's own conversion of times imports pandas)
        ints = arr.view(pa.int32() if pa.types.is_date32(arr.type) else pa.int64())
        if arr.null_count:
            ints = ints.fill_null(pa.scalar(np.iinfo(np.int64).min, type=ints.type)
                                  if ints.type == pa.int64() else pa.scalar(0, type=ints.type))
        values = np.frombuffer(ints.buffers()[1], np.int32 if ints.type == pa.int32() else np.int64)
        values = values[ints.offset:ints.offset + len(ints)].astype(np.int64, copy=False)
        if arr.null_count and pa.types.is_date32(arr.type):
            values = np.where(np.asarray(arr.is_valid()), values, np.iinfo(np.int64).min)
        values = values.view(dt)                 # nulls as NaT (the smallest int64)
    elif dt == np.bool_:
        # the bits unpacked (pyarrow's own conversion of booleans imports pandas)
        bits = np.frombuffer(arr.buffers()[1], np.uint8)
        values = np.unpackbits(bits, bitorder="little")[arr.offset:arr.offset + len(arr)].view(np.bool_)
    else:
        # the values buffer as it is, without a copy (pyarrow's to_numpy imports pandas)
        values = np.frombuffer(arr.buffers()[1], dt)[arr.offset:arr.offset + len(arr)]
    return values, valid


# pandas dtypes a column's pandas metadata may give back (NumPy floats: missing values as NaN)
_PANDAS_DTYPES = {"float16", "float32", "float64", "Float32", "Float64", "boolean", "string", "str", "object",
                  *(f"{u}Int{b}" for u in ("", "U") for b in (8, 16, 32, 64))}


def _pandas_meta(schema):
    """({column: (level, index name)}, {column: pandas dtype}) from the pandas metadata of the schema
    (``DataFrame.to_parquet`` and ``pyarrow.Table.from_pandas`` write it), so that `todataframe`
    gives back the index and the dtypes; empty without such metadata or when it does not parse."""
    import json
    raw = (schema.metadata or {}).get(b"pandas")
    if not raw:
        return {}, {}
    try:
        meta = json.loads(raw)
        cols = [c for c in meta.get("columns", []) if isinstance(c, dict)]
        labels = {c.get("field_name"): c.get("name") for c in cols}
        index = {}
        for level, col in enumerate(meta.get("index_columns", [])):
            if isinstance(col, str):
                label = labels.get(col)
                index[col] = (level, None if col.startswith("__index_level_") and label == col
                              else label if isinstance(label, (str, int)) else None)
        dtypes = {c.get("field_name"): c.get("numpy_type") for c in cols
                  if c.get("numpy_type") in _PANDAS_DTYPES}
        return index, dtypes
    except (ValueError, TypeError, AttributeError):
        return {}, {}


class _Builder:
    """Appends Arrow record batches to a ctable, adding validity columns at the first null of a
    column and widening a string column when a longer value comes."""

    def __init__(self, pa, schema, ctor_kwargs, widths=None):
        self.pa = pa
        self.plan = _import_plan(pa, schema)
        names = [p[0] for p in self.plan]
        seen = set()
        for n in names:
            if n in seen:
                raise ValueError(f"the Arrow data has the column name {n!r} twice")
            seen.add(n)
        self.kw = dict(ctor_kwargs)
        widths = widths or {}
        cols = []
        for name, kind, dt, tz in self.plan:
            if dt is None:
                dt = np.dtype(f"{kind}{max(widths.get(name, 1), 1)}")
            cols.append(np.empty(0, dt))
        self.t = ctable(cols, names, **self.kw)
        for name, kind, dt, tz in self.plan:
            if tz is not None:
                self.t.cols[name].attrs[colmeta.TIMEZONE] = tz
        index, dtypes = _pandas_meta(schema)
        for name, (level, label) in index.items():
            if name in self.t.cols:
                self.t.cols[name].attrs[colmeta.INDEX] = level
                self.t.cols[name].attrs[colmeta.INDEX_NAME] = label
        for name, pdt in dtypes.items():
            if name in self.t.cols:
                self.t.cols[name].attrs[colmeta.PANDAS_DTYPE] = pdt
        self.valid = {}                         # value column -> validity column

    def _add_validity(self, name):
        t = self.t
        vname = colmeta.validity_name(name, set(t.names))
        ones = carray(np.ones(0, bool), expectedlen=max(len(t), self.kw.get("expectedlen") or 1, 1))
        for s in range(0, len(t), 1 << 20):
            ones.append(np.ones(min(1 << 20, len(t) - s), bool))
        t.addcol(ones, name=vname, pos=t.names.index(name) + 1, move=True)    # in memory: no copy
        t.cols[name].attrs[colmeta.VALIDITY] = vname
        self.valid[name] = vname

    def _widen(self, name, dt):
        t = self.t
        old = t.cols[name]
        pos = t.names.index(name)
        attrs = old.attrs.getall()
        rd = None if t.rootdir is None else os.path.join(t.rootdir, f".widen-{uuid.uuid4().hex[:8]}")
        kw = {"format": t.format} if rd is not None else {}
        new = carray(np.empty(0, dt), rootdir=rd, mode="w", cparams=old.cparams,
                     expectedlen=max(len(old), 1), **kw)
        step = max(old.chunklen, 1) * 16
        for s in range(0, len(old), step):
            new.append(old[s:s + step].astype(dt))
        new.flush()
        t.delcol(name)
        t.addcol(new, name=name, pos=pos, move=True)
        for k, v in attrs.items():
            t.cols[name].attrs[k] = v

    def append(self, batch, parts=None):
        """Append the record batch `batch`; `parts`: {column: `_dict_parts` of its column in this
        batch} already made (`_column_width`)."""
        # a long batch (a Parquet row group) in slices, which bounds the conversion's temporaries
        if batch.num_rows > self.SLICE:
            for s in range(0, batch.num_rows, self.SLICE):
                self._append(batch.slice(s, self.SLICE))
        else:
            self._append(batch, parts)

    SLICE = 1 << 20

    def _append(self, batch, parts=None):
        pa, t = self.pa, self.t
        n = batch.num_rows
        if n == 0:
            return
        out = {}
        for j, (name, kind, dt, tz) in enumerate(self.plan):
            arr = batch.column(j)
            if kind in "US" and _is_dict(pa, arr):
                # (a Parquet column read with its dictionary) converted once per dictionary value
                cur = t.cols[name].dtype.itemsize // (4 if kind == "U" else 1)
                got = parts.get(name) if parts else None
                dictionary, idx, valid, w = got if got is not None else _dict_parts(pa, arr, kind, cur)
                if w > cur:
                    self._widen(name, np.dtype(f"{kind}{w}"))
                    cur = w
                values = _dict_to_fixed(pa, dictionary, idx, valid, kind, cur, name)
            elif kind in "US":
                arr = _plain(pa, arr)
                w = _width(pa, arr, kind)
                cur = t.cols[name].dtype.itemsize // (4 if kind == "U" else 1)
                if w > cur:
                    self._widen(name, np.dtype(f"{kind}{w}"))
                    cur = w
                values = _arrow_to_fixed(pa, arr, kind, cur, name)
                valid = np.asarray(arr.is_valid()) if arr.null_count else None
            else:
                arr = _plain(pa, arr)
                values, valid = _convert(pa, arr, kind, dt)
            out[name] = values
            if valid is not None and name not in self.valid:
                self._add_validity(name)
            if name in self.valid:
                out[self.valid[name]] = valid if valid is not None else np.ones(n, bool)
        t.append([out[c] for c in t.names])


def _reader(pa, obj):
    """(schema, iterable of RecordBatches) of an Arrow object."""
    if isinstance(obj, pa.Table):
        return obj.schema, obj.to_batches()
    if isinstance(obj, pa.RecordBatch):
        return obj.schema, [obj]
    if isinstance(obj, pa.RecordBatchReader):
        return obj.schema, obj
    if hasattr(obj, "__arrow_c_stream__"):
        r = pa.RecordBatchReader.from_stream(obj)
        return r.schema, r
    if hasattr(obj, "__arrow_c_array__"):
        b = pa.record_batch(obj)
        return b.schema, [b]
    raise TypeError(f"fromarrow() needs Arrow data (an object with __arrow_c_stream__, such as a "
                    f"pyarrow Table or RecordBatchReader), got {type(obj).__name__}")


def _table_widths(pa, obj, plan):
    """The widest value of each string/binary column of an in-memory pyarrow Table (so its columns
    are made as wide as they must be at once)."""
    if not isinstance(obj, (pa.Table, pa.RecordBatch)):
        return {}
    out = {}
    for name, kind, dt, tz in plan:
        if kind in "US":
            col = obj.column(name)
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            out[name] = max([_width(pa, _plain(pa, c), kind) for c in chunks] or [0])
    return out


# ------------------------------------------------------------------------------ building beside
def remove_abandoned(parent, prefix, remove):
    """``remove(path)`` for each entry of `parent` named `prefix`...: what an earlier, killed write
    left beside its target.  `remove` leaves alone one that another process still holds locked."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return
    for n in names:
        remove(os.path.join(parent, n))


def _remove_unlocked_dir(path):
    # a build directory another process is still filling is locked by it
    if not os.path.isdir(path) or os.path.islink(path):
        return
    try:
        lock = lock_dir(path)
    except (StorageError, OSError):
        return
    try:
        fileio.rmtree(path, ignore_errors=True)
    finally:
        lock.release()


def build_beside(rootdir, mode, make, what, storage_options=None):
    """Run ``make(kwargs)``, which creates and fills a ctable with ``ctable(..., **kwargs)``; with a
    `rootdir`, the table is made in a directory beside it and moved to `rootdir` only when complete,
    so an interruption (an exception, Ctrl-C, a kill) leaves `rootdir` as it was, and a retry works.
    An existing `rootdir` is replaced only with ``mode='w'``.

    Nothing in the build directory is promised before the move, so nothing written there is synced
    while the table is made (`files.HeldTree`): all its files are synced at the end, together, in
    one barrier, then the table is moved."""
    if rootdir is None:
        return make({})
    rootdir = os.fspath(rootdir)
    if mode not in (None, "w", "a"):
        raise ValueError(f"{what}: mode must be 'w' (or 'a' for a new directory), got {mode!r}")
    if is_url(rootdir):
        if mode != "w" and occupied(rootdir, storage_options):
            raise StorageError(f"{what}: '{rootdir}' already exists: pass mode='w' to replace it")
        # object storage: no rename; what is there is replaced by one switch once the table is complete
        store = open_bytestore(rootdir, storage_options)
        return replace.build(store.root, store, lambda url: make({"rootdir": url, "mode": "w"}),
                             lambda: ctable(rootdir=store.root, mode="a", storage_options=storage_options))
    exists = os.path.lexists(rootdir)
    if exists and mode != "w":
        raise StorageError(f"{what}: '{rootdir}' already exists: pass mode='w' to replace it")
    parent = os.path.dirname(os.path.abspath(rootdir))
    if not os.path.isdir(parent):
        fileio.makedirs(parent, exist_ok=True)
    base = os.path.basename(os.path.abspath(rootdir))
    remove_abandoned(parent, f".{base}.building-", _remove_unlocked_dir)
    # the table is built at `work`/`base`, `work` a hidden directory beside `rootdir` that this build
    # holds locked (a later build removes it when this one was killed)
    work = os.path.join(parent, f".{base}.building-{uuid.uuid4().hex[:8]}")
    tmp = os.path.join(work, base)
    # the table being replaced is locked first: never replace what another process writes
    lock = lock_dir(rootdir) if exists and os.path.isdir(rootdir) and not os.path.islink(rootdir) else None
    work_lock = None
    try:
        try:
            fileio.makedirs(work)
            work_lock = lock_dir(work)
            tree = files.held_tree(work)
            try:
                t = make({"rootdir": tmp, "mode": "w"})
                t.flush()
                t.close()
                del t
                tree.finish()
            finally:
                tree.close()
        except BaseException:
            if os.path.lexists(work):
                fileio.rmtree(work, ignore_errors=True)
            raise
        # moved beside `rootdir` under a stage name, then put in its place by one rename or swap
        # (`intent.publish`: guarded by an intent record where the platform cannot swap)
        stage = intent.stage_path(rootdir)
        try:
            fileio.rename(tmp, stage)
            if fileio.sync_enabled():
                # a move between two directories is durable once both are synced
                files.sync_together([], [work, parent])
            intent.publish(stage, rootdir)
        except BaseException as e:
            if os.path.lexists(stage) and not intent.committed(e):
                try:
                    fileio.rename(stage, tmp)
                except OSError:
                    pass
            if isinstance(e, OSError) and not isinstance(e, StorageError) and not intent.committed(e):
                raise StorageError(f"{what}: cannot move the new table to '{rootdir}' (it is left at "
                                   f"'{tmp}'): {e}") from e
            raise
        fileio.rmtree(work, ignore_errors=True)
    finally:
        if work_lock is not None:
            work_lock.release()
        if lock is not None:
            lock.release()
    return ctable(rootdir=rootdir, mode="a")


def fill_from_batches(pa, schema, batches, kwargs, widths=None):
    """A ctable (``ctable(**kwargs)``) holding the record batches `batches` of `schema`.  When
    `widths` names every string and binary column, the table is made before the first batch is
    awaited (its making overlaps the reading of that batch); else the first batch's widest values
    are added to `widths` first."""
    batches = iter(batches)
    plan = _import_plan(pa, schema)
    widths = dict(widths or {})
    parts = {}
    first = None
    if any(kind in "US" and name not in widths for name, kind, dt, tz in plan):
        first = next(batches, None)
        if first is not None:
            # string columns as wide as the first batch needs at once (no copy to widen them after it)
            for j, (name, kind, dt, tz) in enumerate(plan):
                if kind in "US":
                    widths[name] = max(widths.get(name, 0),
                                       _column_width(pa, first.column(j), kind, parts, name))
    b = _Builder(pa, schema, kwargs, widths)
    flush = b.t.auto_flush
    b.t.auto_flush = False
    if first is not None:
        b.append(first, parts)
    del first, parts
    for batch in batches:
        b.append(batch)
    b.t.auto_flush = flush
    b.t.flush()
    return b.t


def fromarrow(obj, rootdir=None, mode=None, columns=None, **kwargs):
    """A ctable from Arrow data; see `blzarr.ctable.fromarrow`."""
    pa = need_pyarrow("ctable.fromarrow()")
    schema, batches = _reader(pa, obj)
    if columns is not None:
        columns = list(columns)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise KeyError(f"fromarrow(): no column named {missing[0]!r} (columns: {schema.names})")
        idx = [schema.get_field_index(c) for c in columns]
        batches = (b.select(idx) for b in batches)
        schema = pa.schema([schema.field(i) for i in idx])
    plan = _import_plan(pa, schema)
    widths = _table_widths(pa, obj, plan) if columns is None else {}
    # in-memory data: the columns' chunks sized for all its rows
    ctor = {"expectedlen": max(obj.num_rows, 1), **kwargs} if isinstance(obj, (pa.Table, pa.RecordBatch)) \
        else kwargs
    return build_beside(rootdir, mode, lambda kw: fill_from_batches(pa, schema, batches, {**ctor, **kw}, widths),
                        "fromarrow()", kwargs.get("storage_options"))


integrations.register("arrow_c_stream", arrow_c_stream)
integrations.register("arrow_c_schema", arrow_c_schema)
integrations.register("ctable_to_arrow", ctable_to_arrow)
integrations.register("fromarrow", fromarrow)
