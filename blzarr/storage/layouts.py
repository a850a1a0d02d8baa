"""Making and opening the on-disk chunk stores: the one place that picks a layout class.

`create_store` makes a new directory in the layout asked for; `open_store` opens an existing one
in two steps, because the number of chunks comes from meta/sizes, which the carray reads and checks
through the directory first (`open_dir`, then `open_chunks`); `partition_writer` rebuilds, in a dask
worker, a store that writes a range of chunks, from the `config()` of the store it writes to.
"""

from blzarr.storage.bcolz_layout import BcolzChunks, BcolzDir
from blzarr.storage.blz.directory import BlzChunks, BlzDir, FORMAT as BLZ_FORMAT, open_store as _open_local
from blzarr.storage import readpins, replace
from blzarr.storage.bytestore import open_bytestore
from blzarr.storage.chunkstore import auto_superchunklen
from blzarr.errors import FormatError
from blzarr.storage.files import META_DIR, STORAGE_FILE, parse_json

LAYOUTS = {"bcolz": (BcolzDir, BcolzChunks), "blz": (BlzDir, BlzChunks)}

__all__ = ["LAYOUTS", "create_store", "open_dir", "open_chunks", "partition_writer"]


def create_store(rootdir, fmt, *, atom, chunklen, objects, dtype, atom_shape, typesize, cparams, opts,
                 bytestore=None, expectedlen=0):
    """A new, empty chunk store at `rootdir` in the layout `fmt` ('bcolz' or 'blz').

    `opts` are the BLZ options (checksum, reserve, superchunklen, meta); the bcolz layout has none.
    `bytestore`: where the files go when not in the local directory `rootdir` (object storage).
    `expectedlen`: the rows expected (0: unknown), which bound the default superchunk length.
    """
    if fmt == "bcolz":
        if opts["checksum"] != "crc32" or opts["reserve"] or opts["superchunklen"] or opts["meta"]:
            raise ValueError("checksum=, reserve=, superchunklen= and meta= need format='blz'")
        d = BcolzDir.create(rootdir, bytestore)
        return BcolzChunks(d, atom, chunklen, 0, "a", objects=objects)
    if opts.get("superchunklen") is None and not objects and expectedlen > 0:
        opts = dict(opts, superchunklen=auto_superchunklen(chunklen * atom.itemsize,
                                                           -(-expectedlen // chunklen)))
    store = BlzDir.create(rootdir, dtype=dtype, atom_shape=atom_shape, chunklen=chunklen, typesize=typesize,
                       chunk_nbytes=-1 if objects else chunklen * atom.itemsize, cparams=cparams,
                       bytestore=bytestore, **opts)
    return BlzChunks(store, atom, chunklen, 0, "a", objects=objects)


def open_dir(rootdir, mode="a", bytestore=None):
    """The store of an existing carray directory (local, or on `bytestore`), of whichever layout."""
    if bytestore is None:
        return _open_local(rootdir, mode)
    key = f"{META_DIR}/{STORAGE_FILE}"
    where = bytestore.where(key)
    # (with its version where the store tells it, which the carray's open confirms at its end)
    raw, version = readpins.read_commit(bytestore, key)
    storage = parse_json(raw, where, "meta/storage")
    if not isinstance(storage, dict):
        raise FormatError(f"meta file '{where}' must hold a JSON object")
    rec = replace.record_of(storage, where)
    if rec is not None:
        # the carray is being replaced (blzarr.storage.replace): a reader reads the new one in its
        # stage (`replace.Moved`), a writer finishes the replacement and opens what it left
        replace.follow(bytestore, rec, "carray", mode)
        return open_dir(rootdir, mode, bytestore)
    pin = getattr(bytestore, "read_pinned", None)
    if pin is not None:
        pin(key, raw, version)  # the data objects are read as this open lists them (storage.readpins)
    fmt = storage.get("format", "bcolz")
    bytestore.prime(key, raw, 3 if fmt == BLZ_FORMAT else 1)   # the layout's open (twice) and the carray's
    if fmt == BLZ_FORMAT:
        d = BlzDir.open(rootdir, mode, bytestore)
        if mode != "r":
            d._after_open_for_write()
        return d
    if fmt != "bcolz":
        raise FormatError(f"'{where}': unknown format {fmt!r} (this blzarr reads 'bcolz' and 'blz')")
    d = BcolzDir(rootdir, bytestore)
    if mode != "r":
        d._after_open_for_write()
    return d


def open_chunks(directory, rootdir, mode, atom, chunklen, nchunks, nstored, objects):
    """The chunk store over `directory` (from `open_dir`) with `nchunks` full chunks, where meta/sizes
    counts `nstored` stored chunks (the full ones and a short last one)."""
    if directory.format == "blz" and directory.nchunks < nstored:
        # the files were read before meta/sizes, and a writer beside us has added chunks since
        # (it writes them before the sizes): read their state again, now newer than meta/sizes
        directory = open_dir(rootdir, mode, directory.bytestore if directory.remote else None)
    if directory.format == "blz" and directory.nchunks < nstored:
        directory.missing_tail(nstored)     # the last superchunk files are gone: their chunks raise
    chunks = LAYOUTS[directory.format][1](directory, atom, chunklen, nchunks, mode, objects)
    if mode == "a":
        chunks.remove_stray(nstored)   # what a writer killed mid-append or mid-trim left
    return chunks


def partition_writer(config, first_chunk, nchunks):
    """An object with write_chunk(n, data) and close() that writes chunks first_chunk.. of the store
    whose `config()` is given (bcolz layout: any chunks; BLZ: one superchunk file's worth)."""
    remote = "storage_options" in config
    if config["format"] == "blz":
        return BlzDir.partition_writer(config, first_chunk, nchunks)
    if remote:
        return BcolzDir(config["rootdir"], open_bytestore(config["rootdir"], config["storage_options"]))
    return BcolzDir(config["rootdir"])
