"""The factorization cache of a column: its codes and distinct values, kept beside the column.

On disk (both layouts) the cache of column ``root/<name>`` is the directory ``root/<name>.factor``
(see docs/FORMAT.rst): ``codes.bin`` (one little-endian unsigned code per row, the smallest of 1, 2,
4 or 8 bytes that numbers every value), ``uniques.npy`` (the distinct values in code order, in
NumPy's .npy format) and ``manifest.json``, written last, which names the column's files as they were
when the cache was built (size, modification time, inode), the CRC-32 of the two data files, and, for
column files modified too shortly before the build for their timestamps to tell a later write apart,
the CRC-32 of their content.  The cache is used only when all of that still holds: any change to the
column's files, by blzarr or by another program (bcolz writing behind blzarr's back), makes it stale,
and a torn or damaged cache is ignored; either way the caller factorizes the column again.

A new cache is built in a temporary directory beside it and renamed into place, so a crash at any
point leaves the old cache, the new one, or none (stray temporary directories are removed by the next
build).  In memory the cache lives with the column object and is dropped by any write to it.
"""

import io
import json
import os
import secrets
import time
import weakref
import zlib

import numpy as np

from blzarr.storage import fileio
from blzarr.storage import files
from blzarr.storage import intent

FORMAT = "blzarr-factor"
VERSION = 1
SUFFIX = ".factor"
# a column file modified within this many nanoseconds of the build may be written again with the
# same size and timestamp (coarse file-system clocks): its content is checked as well
RACY_NS = 3_000_000_000

# in-memory caches by id(column): (weak reference to the column, generation, codes, uniques).  Not a
# WeakKeyDictionary: its lookups compare columns with ``==``, which is elementwise for a carray.
_memory = {}


def _memory_get(col):
    hit = _memory.get(id(col))
    if hit is None or hit[0]() is not col:
        return None
    return hit[1:]


def _memory_put(col, gen, codes, uniques):
    key = id(col)

    def gone(_ref, key=key):
        cur = _memory.get(key)
        if cur is not None and cur[0] is _ref:
            del _memory[key]
    _memory[key] = (weakref.ref(col, gone), gen, codes, uniques)


def _memory_drop(col):
    if _memory_get(col) is not None:
        del _memory[id(col)]


def _gen(col):
    return (getattr(col, "_gen", None), len(col))


def cache_dir(table, name):
    return os.path.join(table.rootdir, name + SUFFIX)


def _col_dir(table, name):
    col = table[name]
    d = getattr(col, "rootdir", None)
    return d if d else os.path.join(table.rootdir, name)


def _crc_file(path):
    return zlib.crc32(fileio.read_file(path)) & 0xffffffff


def _source(coldir, built_ns):
    """[relpath, size, mtime_ns, ino, crc or None] of every file of the column directory."""
    out = []
    for dirpath, dirnames, filenames in os.walk(coldir):
        dirnames.sort()
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            crc = _crc_file(p) if st.st_mtime_ns >= built_ns - RACY_NS else None
            out.append([os.path.relpath(p, coldir), st.st_size, st.st_mtime_ns, st.st_ino, crc])
    return out


def _source_holds(coldir, recorded):
    now = []
    for dirpath, dirnames, filenames in os.walk(coldir):
        for f in filenames:
            now.append(os.path.relpath(os.path.join(dirpath, f), coldir))
    if sorted(now) != sorted(r[0] for r in recorded):
        return False
    for rel, size, mtime, ino, crc in recorded:
        p = os.path.join(coldir, rel)
        try:
            st = os.stat(p)
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns, st.st_ino) != (size, mtime, ino):
            return False
        if crc is not None and _crc_file(p) != crc:
            return False
    return True


def _codes_dtype(ngroups):
    for dt in (np.uint8, np.uint16, np.uint32):
        if ngroups <= np.iinfo(dt).max + 1:
            return np.dtype(dt).newbyteorder("<")
    return np.dtype("<u8")


def load(table, name):
    """(codes, uniques) of column `name` when a valid cache exists, else None.  `codes` is an array
    of one code per row (memory-mapped from disk)."""
    col = table[name]
    if not getattr(table, "rootdir", None):
        hit = _memory_get(col)
        if hit is not None and hit[0] == _gen(col):
            return hit[1], hit[2]
        return None
    d = cache_dir(table, name)
    try:
        man = json.loads(fileio.read_file(os.path.join(d, "manifest.json")))
        if man.get("format") != FORMAT or man.get("version") != VERSION or man.get("column") != name:
            return None
        n = int(man["nrows"])
        if n != len(col):
            return None
        if not _source_holds(_col_dir(table, name), man["source"]):
            return None
        cpath = os.path.join(d, "codes.bin")
        upath = os.path.join(d, "uniques.npy")
        cdt = np.dtype(man["codes_dtype"])
        if os.path.getsize(cpath) != n * cdt.itemsize:
            return None
        raw_u = fileio.read_file(upath)
        if zlib.crc32(raw_u) & 0xffffffff != man["uniques_crc32"]:
            return None
        codes = np.memmap(cpath, dtype=cdt, mode="r", shape=(n,)) if n else np.zeros(0, cdt)
        if zlib.crc32(codes) & 0xffffffff != man["codes_crc32"]:
            return None
        uniques = np.load(io.BytesIO(raw_u), allow_pickle=False)
        if len(uniques) != int(man["ngroups"]) or (n and int(codes.max()) >= len(uniques)):
            return None
        return codes, uniques
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None


def snapshot(table, name):
    """What `store` records of the column's files: take it before reading the column, so that a
    write between the read and the store makes the cache stale rather than wrong."""
    col = table[name]
    if not getattr(table, "rootdir", None):
        return _gen(col)
    if getattr(table, "_bytestore", None) is not None:
        raise ValueError(f"cache_factor: '{table.rootdir}' is on object storage, where no "
                         "factorization cache is kept (group-bys factorize as they go)")
    table.flush()
    built_ns = time.time_ns()
    return built_ns, _source(_col_dir(table, name), built_ns)


def store(table, name, codes, uniques, snap):
    """Keep (codes, uniques) as the cache of column `name` (atomically replacing an older one); `snap`
    is `snapshot`'s, taken before the column was read."""
    col = table[name]
    if not getattr(table, "rootdir", None):
        _memory_put(col, snap, codes, uniques)
        return
    root = table.rootdir
    final = cache_dir(table, name)
    _remove_strays(root, name)
    tmp = os.path.join(root, f".{name}{SUFFIX}.tmp-{secrets.token_hex(6)}")
    fsync = fileio.sync_enabled()
    cdt = _codes_dtype(len(uniques))
    cbytes = np.ascontiguousarray(codes, dtype=cdt).tobytes()
    ubuf = io.BytesIO()
    np.save(ubuf, np.asarray(uniques), allow_pickle=False)
    ubytes = ubuf.getvalue()
    man = {"format": FORMAT, "version": VERSION, "column": name, "nrows": len(codes),
           "ngroups": len(uniques), "codes_dtype": cdt.str,
           "codes_crc32": zlib.crc32(cbytes) & 0xffffffff, "uniques_crc32": zlib.crc32(ubytes) & 0xffffffff,
           "source": snap[1]}
    try:
        fileio.mkdir(tmp)
        fileio.write_new(os.path.join(tmp, "codes.bin"), cbytes, sync=fsync)
        fileio.write_new(os.path.join(tmp, "uniques.npy"), ubytes, sync=fsync)
        fileio.write_new(os.path.join(tmp, "manifest.json"), files.json_bytes(man), sync=fsync)
        if fsync:
            fileio.fsync_dir(tmp)
        _retire_bquery_values(table, name)
        old = None
        if fileio.exists(final):
            old = os.path.join(root, f".{name}{SUFFIX}.old-{secrets.token_hex(6)}")
            fileio.rename(final, old)
        fileio.rename(tmp, final)
        if fsync:
            fileio.fsync_dir(root)
        if old is not None:
            fileio.rmtree(old, ignore_errors=True)
    except BaseException:
        fileio.rmtree(tmp, ignore_errors=True)
        raise


def hide(table, name, coldir):
    """Take the on-disk cache of column `name` out of use in one rename, before the column's
    directory `coldir` is removed (delcol) or a new column of that name is added (addcol): it becomes
    a hidden leftover of `coldir` (``.<name>.blzarr-old-<hex>`` beside it), which the column's
    removal, or the next writer's recovery of that name, deletes.  So a column that is gone never
    leaves its cache behind for a later column of its name, and an interrupt leaves the column with
    or without its cache (both valid).  Returns the leftover's path, or None without a cache."""
    d = cache_dir(table, name)
    if not os.path.lexists(d):
        return None
    _retire_bquery_values(table, name)
    hidden = intent.stage_path(coldir, "old")
    fileio.rename(d, hidden)
    if fileio.sync_enabled():
        for p in dict.fromkeys([os.path.dirname(d), os.path.dirname(hidden)]):
            fileio.fsync_dir(p)
    return hidden


def _retire_bquery_values(table, name):
    """Remove bquery's ``<name>.values`` carray beside the table's columns, before this module puts
    its own directory at ``<name>.factor`` or takes one away from there.

    bquery keeps a column's factorization as two bcolz carrays, ``<name>.factor`` (the codes: the
    directory this cache takes over) and ``<name>.values`` (the distinct values), and trusts the
    pair whenever ``<name>.values/__attrs__`` exists.  Left beside a cache of ours (or beside no
    ``.factor`` at all), it would make bquery open this directory as its codes carray and fail;
    without it, bquery builds its own pair again.  Removed first, so an interruption at any point
    leaves bquery a pair it rebuilds, never a mismatched one."""
    vals = name + ".values"
    path = os.path.join(table.rootdir, vals)
    if vals in table.names or not os.path.exists(os.path.join(path, "__attrs__")):
        return
    fileio.rmtree(path)
    if fileio.sync_enabled():
        fileio.fsync_dir(table.rootdir)


def drop(table, name=None):
    """Remove the cache of column `name` (of every column when None)."""
    if not getattr(table, "rootdir", None):
        for c in ([name] if name else table.names):
            _memory_drop(table[c])
        return
    for c in ([name] if name else table.names):
        d = cache_dir(table, c)
        if fileio.exists(d):
            fileio.rmtree(d)
        _remove_strays(table.rootdir, c)


def _remove_strays(root, name):
    prefix = f".{name}{SUFFIX}."
    try:
        entries = fileio.listdir(root)
    except OSError:
        return
    for e in entries:
        if e.startswith(prefix):
            fileio.rmtree(os.path.join(root, e), ignore_errors=True)
