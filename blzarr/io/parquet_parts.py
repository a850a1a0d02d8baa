"""A Parquet file written as separately encoded column chunks, put together in order.

pyarrow's Parquet writer encodes the columns of a row group one after the other on one thread.  A
column chunk's bytes do not depend on where in the file it goes, nor on the other columns: only the
footer (the Thrift-encoded ``FileMetaData``) holds file offsets.  So each (row group, column) pair
is made and encoded on its own, as a one-column Parquet file in memory by pyarrow, on a pool of
threads (pyarrow releases the GIL while it encodes, Blosc while it decodes); its column chunk bytes
are copied to the output in order and its footer entry is moved by the offset where they landed.
The footer is then the one pyarrow writes for the same table, with these row groups: the file is
byte for byte the one ``pyarrow.parquet.write_table`` makes from the same rows and options.

Options that could put anything position-dependent outside the column chunks (page indexes,
encryption, bloom filters, per-column option lists...) are not taken here: `stitchable` says no and
the caller writes with one ``ParquetWriter``.  A footer holding a field this module does not know
(a newer Parquet) is found on a one-row probe before anything is written, with the same answer.
"""

import struct
from collections import deque
from concurrent.futures import ThreadPoolExecutor

# the threads here already share the work out: their decoding calls run one thread each
from blzarr.runtime.parallel import _busy as _one_thread_each

MAGIC = b"PAR1"

# writer options (all with scalar values) that act on each column chunk alone
_PER_CHUNK_OPTIONS = frozenset({
    "compression", "compression_level", "use_dictionary", "write_statistics", "version",
    "data_page_size", "data_page_version", "write_batch_size", "dictionary_pagesize_limit",
    "use_byte_stream_split", "store_schema", "coerce_timestamps", "allow_truncated_timestamps",
    "use_deprecated_int96_timestamps", "write_time_adjusted_to_utc",
})

# Thrift compact protocol type codes
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# the Parquet footer's fields that this module reads, moves or sums (parquet.thrift field ids)
_FILE_FIELDS = {1, 2, 3, 4, 5, 6, 7}        # version, schema, num_rows, row_groups, key_value_metadata,
#                                             created_by, column_orders
_ROW_GROUP_FIELDS = {1, 2, 3, 5, 6, 7}      # columns, total_byte_size, num_rows, file_offset,
#                                             total_compressed_size, ordinal
_CHUNK_FIELDS = {2, 3}                      # file_offset, meta_data
_META_OFFSETS = {9, 10, 11}                 # data_page_offset, index_page_offset, dictionary_page_offset
_META_FIELDS = set(range(1, 14)) | {16}     # up to encoding_stats, and size_statistics (no offsets)


class FormatError(ValueError):
    """A footer this module cannot take apart."""


# ------------------------------------------------------------------------------ Thrift compact protocol
def _varint(b, i):
    out = shift = 0
    while True:
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return out, i


def _read(b, i, t):
    """(value, next position) of a value of compact type `t` at `b[i]`.  A struct is a list of
    [field id, type, value]; a list or set is (element type, [values])."""
    if t in (_TRUE, _FALSE):                    # a struct field's boolean is in its type code
        return t == _TRUE, i
    if t == _BYTE:
        return b[i], i + 1
    if t in (_I16, _I32, _I64):
        v, i = _varint(b, i)
        return (v >> 1) ^ -(v & 1), i
    if t == _DOUBLE:
        return bytes(b[i:i + 8]), i + 8
    if t == _BINARY:
        n, i = _varint(b, i)
        return bytes(b[i:i + n]), i + n
    if t in (_LIST, _SET):
        head = b[i]
        i += 1
        n, et = head >> 4, head & 15
        if n == 15:
            n, i = _varint(b, i)
        items = []
        for _ in range(n):
            if et in (_TRUE, _FALSE):           # an element boolean is a byte of its own
                items.append(b[i])
                i += 1
            else:
                v, i = _read(b, i, et)
                items.append(v)
        return (et, items), i
    if t == _STRUCT:
        fields, last = [], 0
        while True:
            head = b[i]
            i += 1
            if head == 0:
                return fields, i
            delta, ft = head >> 4, head & 15
            if delta:
                fid = last + delta
            else:
                v, i = _varint(b, i)
                fid = (v >> 1) ^ -(v & 1)
            v, i = _read(b, i, ft)
            fields.append([fid, ft, v])
            last = fid
    raise FormatError(f"Thrift type {t} is not used by Parquet footers")


def _put_varint(out, v):
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _write(out, t, v):
    """Append value `v` of compact type `t` (as `_read` gives it) to bytearray `out`."""
    if t in (_TRUE, _FALSE):
        return
    if t == _BYTE:
        out.append(v)
    elif t in (_I16, _I32, _I64):
        _put_varint(out, (v << 1) ^ (v >> 63))
    elif t in (_DOUBLE, _BINARY):
        if t == _BINARY:
            _put_varint(out, len(v))
        out += v
    elif t in (_LIST, _SET):
        et, items = v
        if len(items) < 15:
            out.append((len(items) << 4) | et)
        else:
            out.append(0xF0 | et)
            _put_varint(out, len(items))
        for x in items:
            if et in (_TRUE, _FALSE):
                out.append(x)
            else:
                _write(out, et, x)
    elif t == _STRUCT:
        last = 0
        for fid, ft, fv in v:
            if ft in (_TRUE, _FALSE):
                ft = _TRUE if fv else _FALSE
            if 0 < fid - last <= 15:
                out.append(((fid - last) << 4) | ft)
            else:
                out.append(ft)
                _put_varint(out, (fid << 1) ^ (fid >> 63))
            _write(out, ft, fv)
            last = fid
        out.append(0)
    else:
        raise FormatError(f"Thrift type {t} is not used by Parquet footers")


def encode_struct(fields):
    out = bytearray()
    _write(out, _STRUCT, fields)
    return bytes(out)


def split_file(data):
    """(footer fields, end of the column chunk bytes) of the whole Parquet file `data` (bytes)."""
    if len(data) < 12 or bytes(data[:4]) != MAGIC or bytes(data[-4:]) != MAGIC:
        raise FormatError("not a Parquet file")
    n = struct.unpack("<I", bytes(data[-8:-4]))[0]
    start = len(data) - 8 - n
    fields, end = _read(data, start, _STRUCT)
    if end != len(data) - 8:
        raise FormatError("the footer's length does not match its contents")
    return fields, start


def _field(fields, fid):
    for f in fields:
        if f[0] == fid:
            return f
    return None


def check_known(fields):
    """Raise FormatError when footer `fields` hold a field whose meaning for offsets is not known
    here (so the pieces could not be moved)."""
    for f in fields:
        if f[0] not in _FILE_FIELDS:
            raise FormatError(f"file field {f[0]}")
    for rg in (_field(fields, 4) or [0, 0, (0, [])])[2][1]:
        for f in rg:
            if f[0] not in _ROW_GROUP_FIELDS:
                raise FormatError(f"row group field {f[0]}")
        for chunk in _field(rg, 1)[2][1]:
            for f in chunk:
                if f[0] not in _CHUNK_FIELDS:
                    raise FormatError(f"column chunk field {f[0]}")
            for f in _field(chunk, 3)[2]:
                if f[0] not in _META_FIELDS:
                    raise FormatError(f"column metadata field {f[0]}")


def _moved_chunk(chunk, by):
    """Column chunk `chunk` (footer fields) with its file offsets moved by `by` bytes."""
    out = []
    for fid, ft, v in chunk:
        if fid == 2 and v:                      # file_offset (0 when the writer leaves it unset)
            v += by
        elif fid == 3:
            v = [[g, gt, gv + by if g in _META_OFFSETS else gv] for g, gt, gv in v]
        out.append([fid, ft, v])
    return out


# ------------------------------------------------------------------------------ writing
def stitchable(pa, pq, probe, options):
    """The footer fields of `probe` (a pyarrow Table: the first row of the file to write) written
    with `options`, when the file can be written in pieces (else None): every option acts on one
    column chunk alone, and the footer holds only fields known here."""
    if not probe.num_columns or any(k not in _PER_CHUNK_OPTIONS for k in options):
        return None
    if any(not (v is None or isinstance(v, (str, int, float, bool))) for v in options.values()):
        return None
    try:
        fields, _ = split_file(memoryview(_encode(pa, pq, probe, options)).cast("B"))
        check_known(fields)
    except FormatError:
        return None
    return fields


def _encode(pa, pq, table, options):
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=max(table.num_rows, 1), **options)
    return sink.getvalue()


def write(pa, pq, sink, bounds, ncolumns, column, options, template, nthreads, depth=2):
    """Write the Parquet file whose row groups hold the rows [start, stop) of `bounds` to `sink`
    (``write(bytes)``), with the writer `options`, given `template` (`stitchable`'s answer).
    ``column(j, start, stop)`` makes the one-column pyarrow Table of column j of those rows.  Each
    (row group, column) pair is made and encoded on one of `nthreads` threads; the pieces are put in
    the file in order, by this thread, with at most `depth` row groups in the works at once."""
    pos = 0

    def put(data):
        nonlocal pos
        sink.write(data)
        pos += len(data)

    def piece(j, start, stop):
        with _one_thread_each():
            table = column(j, start, stop)
        data = memoryview(_encode(pa, pq, table, options)).cast("B")
        fields, end = split_file(data)
        check_known(fields)
        return data, fields, end

    row_groups = []

    def place(rows, futures):
        chunks, total_bytes, total_compressed, first, ordinal = [], 0, 0, None, None
        for fut in futures:
            data, fields, end = fut.result()
            (part,) = _field(fields, 4)[2][1]
            by = pos - len(MAGIC)
            if first is None and _field(part, 5) is not None:
                first = _field(part, 5)[2] + by
            put(data[len(MAGIC):end])
            chunks.extend(_moved_chunk(c, by) for c in _field(part, 1)[2][1])
            total_bytes += _field(part, 2)[2]
            total_compressed += (_field(part, 6) or [0, 0, 0])[2]
            ordinal = _field(part, 7)
        rg = [[1, _LIST, (_STRUCT, chunks)], [2, _I64, total_bytes], [3, _I64, rows]]
        if first is not None:
            rg.append([5, _I64, first])
        rg.append([6, _I64, total_compressed])
        if ordinal is not None:
            rg.append([7, ordinal[1], len(row_groups)])
        row_groups.append(rg)

    put(MAGIC)
    pending = deque()
    nrows = 0
    # the threads are named for blzarr's pool, so that their reads decode in the thread itself
    with ThreadPoolExecutor(max(1, nthreads), thread_name_prefix="blzarr-parquet") as pool:
        try:
            for start, stop in bounds:
                pending.append((stop - start, [pool.submit(piece, j, start, stop) for j in range(ncolumns)]))
                nrows += stop - start
                while len(pending) > depth:
                    place(*pending.popleft())
            while pending:
                place(*pending.popleft())
        except BaseException:
            for _, futures in pending:
                for f in futures:
                    f.cancel()
            raise
    footer = []
    for fid, ft, v in template:
        if fid == 3:
            v = nrows
        elif fid == 4:
            v = (_STRUCT, row_groups)
        footer.append([fid, ft, v])
    data = encode_struct(footer)
    put(data + struct.pack("<I", len(data)) + MAGIC)
