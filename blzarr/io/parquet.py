"""ctables and Parquet files, through pyarrow: ``ctable.fromparquet(path)`` and ``t.toparquet(path)``.

Both stream by row group: one row group (and one record batch of the table) is in memory at a
time.  ``toparquet`` writes the file beside `path` and renames it there when complete (synced
first), so an interrupted write leaves what was at `path` before; ``fromparquet`` into a `rootdir`
builds the table beside it and moves it there when complete (`blzarr.io.arrow.build_beside`).
The type mapping is the Arrow one (`blzarr.io.arrow`).
"""

import os
import queue
import threading
import uuid

from blzarr.runtime import integrations
from blzarr.runtime.params import get_nthreads
from blzarr.storage import fileio
from blzarr.errors import StorageError
from blzarr.io import arrow as _arrow
from blzarr.io import parquet_parts as _parts

# rows per row group written by toparquet (pyarrow's default), rounded to whole stream batches
ROW_GROUP_ROWS = 1 << 20
# row groups at least this long are written in pieces (`blzarr.io.parquet_parts`): below it, making
# and parsing a one-column file per piece costs more than the threads give back
PIECES_MIN_ROWS = 1 << 16


class _FdFile:
    """A binary file pyarrow writes through (`blzarr.storage.fileio`, so writes can be counted and failed)."""

    def __init__(self, fd):
        self.fd, self.pos, self.closed = fd, 0, False

    def write(self, data):
        view = memoryview(data)
        fileio.write(self.fd, view)
        self.pos += view.nbytes
        return view.nbytes

    def tell(self):
        return self.pos

    def flush(self):
        pass

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def close(self):
        self.closed = True


class _Ahead:
    """The items of `gen`, produced by a thread up to `depth` items ahead of the consumer, which
    starts at once (the reading of the first row group overlaps whatever the caller does before it
    asks for it; the decoding of the next row group overlaps the encoding of this one: both release
    the GIL).  An exception in the thread is raised by the iteration; `close()` (also when the
    consumer leaves early) stops the thread."""

    _END = object()

    def __init__(self, gen, depth=2):
        self._q = queue.Queue(depth)
        self._stop = threading.Event()
        self._gen = gen
        self._th = threading.Thread(target=self._run, daemon=True, name="blzarr-parquet-ahead")
        self._th.start()

    def _run(self):
        q, stop = self._q, self._stop
        try:
            for item in self._gen:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((self._END, None))
        except BaseException as e:      # handed to the consumer
            q.put((None, e))

    def __iter__(self):
        while True:
            item, err = self._q.get()
            if err is not None:
                raise err
            if item is self._END:
                return
            yield item

    def close(self):
        self._stop.set()
        while self._th.is_alive():
            try:
                self._q.get_nowait()
            except queue.Empty:
                self._th.join(0.05)


def _ahead(gen, depth=2):
    """The items of `gen` through `_Ahead`, its thread started at the first item asked for."""
    a = _Ahead(gen, depth)
    try:
        yield from a
    finally:
        a.close()


def _remove_unlocked_file(path):
    # a file another process is still writing is locked by it
    try:
        fd = fileio.open(path, "rw")
    except OSError:
        return
    try:
        if fileio.flock(fd, "ex") is not False:
            fileio.unlink(path)
    finally:
        fileio.close(fd)


def toparquet(t, path, columns=None, row_group_size=None, compression="snappy", **kwargs):
    """Write ctable `t` to the Parquet file `path`; see `blzarr.ctable.toparquet`."""
    pa = _arrow.need_pyarrow("ctable.toparquet()")
    import pyarrow.parquet as pq
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise StorageError(f"toparquet(): the directory of '{path}', '{parent}', does not exist")
    if os.path.isdir(path):
        raise StorageError(f"toparquet(): '{path}' is a directory")
    ex = _arrow._Export(pa, t, columns)
    rg = ROW_GROUP_ROWS if row_group_size is None else int(row_group_size)
    if rg < 1:
        raise ValueError(f"row_group_size must be >= 1, got {row_group_size!r}")
    per = max(1, -(-rg // ex.blen)) if rg >= ex.blen else 1
    if rg < ex.blen:
        ex.blen = rg
    group_rows = ex.blen * per

    def groups():
        # a row group's columns decoded in one call each (fewer hand-offs to the decoding threads
        # than batch by batch; memory is bounded by the row group either way)
        for s in range(0, len(t), group_rows):
            yield pa.Table.from_batches([ex.batch(s, min(s + group_rows, len(t)))], schema=ex.schema)

    options = {"compression": compression, **kwargs}
    # the file is written in pieces, its column chunks made and encoded on several threads, unless
    # one thread is asked for, the row groups are short or an option or the pyarrow version needs
    # one writer
    template = None
    nthreads = get_nthreads()
    if nthreads > 1 and min(group_rows, len(t)) >= PIECES_MIN_ROWS:
        template = _parts.stitchable(pa, pq, pa.Table.from_batches([ex.batch(0, 1)]), options)
    bounds = [(s, min(s + group_rows, len(t))) for s in range(0, len(t), group_rows)]

    def column(j, s, e):
        return pa.Table.from_arrays([ex.array(j, s, e)], schema=pa.schema([ex.schema.field(j)]))

    prefix = f".{os.path.basename(path)}.writing-"
    _arrow.remove_abandoned(parent, prefix, _remove_unlocked_file)
    tmp = os.path.join(parent, f"{prefix}{uuid.uuid4().hex[:8]}")
    fd = fileio.open(tmp, "new")
    try:
        fileio.flock(fd, "ex")          # tells a later call that this file is not abandoned
        sink = _FdFile(fd)
        if template is not None:
            _parts.write(pa, pq, sink, bounds, len(ex.schema), column, options, template, nthreads)
        else:
            with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), ex.schema, **options) as w:
                for table in _ahead(groups()):
                    w.write_table(table, row_group_size=group_rows)
        if fileio.sync_enabled():
            fileio.fsync(fd)
        fileio.close(fd)
        fd = None
        fileio.replace(tmp, path)
        if fileio.sync_enabled():
            fileio.fsync_dir(parent)
    except BaseException:
        if fd is not None:
            fileio.close(fd)
        if os.path.lexists(tmp):
            fileio.unlink(tmp)
        raise


def _dictionary_columns(md, names):
    """Those of the top-level columns `names` whose chunks all have a dictionary page (file
    metadata `md`)."""
    leaf = {}
    for k in range(md.num_columns):
        path = md.schema.column(k).path
        if path in names:
            leaf[path] = k
    out = []
    for name in names:
        k = leaf.get(name)
        if k is not None and md.num_row_groups and all(
                md.row_group(i).column(k).has_dictionary_page for i in range(md.num_row_groups)):
            out.append(name)
    return out


def fromparquet(path, rootdir=None, mode=None, columns=None, **kwargs):
    """A ctable from the Parquet file `path`; see `blzarr.ctable.fromparquet`."""
    pa = _arrow.need_pyarrow("ctable.fromparquet()")
    import pyarrow.parquet as pq
    path = os.fspath(path)
    if not os.path.exists(path):
        raise StorageError(f"fromparquet(): '{path}' does not exist")
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise StorageError(f"fromparquet(): '{path}' is not a readable Parquet file: {e}") from None
    schema = pf.schema_arrow
    if columns is not None:
        columns = list(columns)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise KeyError(f"fromparquet(): '{path}' has no column named {missing[0]!r} (columns: "
                           f"{schema.names})")
        schema = pa.schema([schema.field(c) for c in columns])
    plan = _arrow._import_plan(pa, schema)       # refuse what a ctable cannot hold before reading
    # string and binary columns stored with a dictionary in every row group are read as dictionary
    # arrays: Arrow then makes no string per row, and each distinct value is converted once
    coded = _dictionary_columns(pf.metadata, [name for name, kind, dt, tz in plan if kind in "US"])
    if coded:
        try:
            pf = pq.ParquetFile(path, read_dictionary=coded)
        except (pa.ArrowInvalid, OSError) as e:
            raise StorageError(f"fromparquet(): '{path}' is not a readable Parquet file: {e}") from None

    def batches():
        for i in range(pf.num_row_groups):
            try:
                table = pf.read_row_group(i, columns=columns)
            except (pa.ArrowInvalid, OSError) as e:
                raise StorageError(f"fromparquet(): row group {i} of '{path}' cannot be read: {e}") from None
            yield from table.to_batches()

    # the columns' chunks sized for the whole file, as a table made from arrays of that length would be
    ctor = {"expectedlen": max(pf.metadata.num_rows, 1), **kwargs}
    strings = [name for name, kind, dt, tz in plan if kind in "US"]

    def make(kw):
        ahead = _Ahead(batches())           # row group 0 is being read from now on
        try:
            widths = None
            if kw.get("rootdir") is not None and pf.num_row_groups and set(strings) <= set(coded):
                # the string columns' widths from row group 0's dictionary-encoded string columns
                # alone (a small read beside the thread's), so that the table's directories are made
                # while that thread reads the whole row group (in memory, making the table costs
                # less than that read)
                widths = _first_widths(pa, pq, path, pf, strings, coded)
            return _arrow.fill_from_batches(pa, schema, ahead, {**ctor, **kw}, widths)
        finally:
            ahead.close()
    return _arrow.build_beside(rootdir, mode, make, "fromparquet()", kwargs.get("storage_options"))


def _first_widths(pa, pq, path, pf, names, coded):
    """{column: widest value in row group 0} of the string/binary columns `names`, read on their
    own by a ParquetFile of their own (ParquetFile `pf` is read by another thread meanwhile)."""
    if not names:
        return {}
    try:
        own = pq.ParquetFile(path, read_dictionary=coded, metadata=pf.metadata)
        table = own.read_row_group(0, columns=names, use_threads=False)
    except (pa.ArrowInvalid, OSError) as e:
        raise StorageError(f"fromparquet(): row group 0 of '{path}' cannot be read: {e}") from None
    plan = {name: kind for name, kind, dt, tz in _arrow._import_plan(pa, table.schema)}
    return {name: max([_arrow._column_width(pa, c, plan[name]) for c in table.column(name).chunks] or [0])
            for name in names}


integrations.register("toparquet", toparquet)
integrations.register("fromparquet", fromparquet)
