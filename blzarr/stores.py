"""Making and opening the on-disk chunk stores: the one place that picks a layout class.

`create_store` makes a new directory in the layout asked for; `open_store` opens an existing one
in two steps, because the number of chunks comes from meta/sizes, which the carray reads and checks
through the directory first (`open_dir`, then `open_chunks`); `partition_writer` rebuilds, in a dask
worker, a store that writes a range of chunks, from the `config()` of the store it writes to.
"""

from blzarr.bcolz_layout import BcolzChunks, BcolzDir
from blzarr.blz import BlzChunks, BlzDir, open_store as open_dir

LAYOUTS = {"bcolz": (BcolzDir, BcolzChunks), "blz": (BlzDir, BlzChunks)}

__all__ = ["LAYOUTS", "create_store", "open_dir", "open_chunks", "partition_writer"]


def create_store(rootdir, fmt, *, atom, chunklen, objects, dtype, atom_shape, typesize, cparams, opts):
    """A new, empty chunk store at `rootdir` in the layout `fmt` ('bcolz' or 'blz').

    `opts` are the BLZ options (checksum, reserve, superchunklen, meta); the bcolz layout has none.
    """
    if fmt == "bcolz":
        if opts["checksum"] != "crc32" or opts["reserve"] or opts["superchunklen"] or opts["meta"]:
            raise ValueError("checksum=, reserve=, superchunklen= and meta= need format='blz'")
        return BcolzChunks(BcolzDir.create(rootdir), atom, chunklen, 0, "a", objects=objects)
    store = BlzDir.create(rootdir, dtype=dtype, atom_shape=atom_shape, chunklen=chunklen, typesize=typesize,
                          chunk_nbytes=-1 if objects else chunklen * atom.itemsize, cparams=cparams, **opts)
    return BlzChunks(store, atom, chunklen, 0, "a", objects=objects)


def open_chunks(directory, rootdir, mode, atom, chunklen, nchunks, nstored, objects):
    """The chunk store over `directory` (from `open_dir`) with `nchunks` full chunks, where meta/sizes
    counts `nstored` stored chunks (the full ones and a short last one)."""
    if directory.format == "blz" and directory.nchunks < nstored:
        # the files were read before meta/sizes, and a writer beside us has added chunks since
        # (it writes them before the sizes): read their state again, now newer than meta/sizes
        directory = open_dir(rootdir, mode)
    chunks = LAYOUTS[directory.format][1](directory, atom, chunklen, nchunks, mode, objects)
    if mode == "a":
        chunks.remove_stray(nstored)   # what a writer killed mid-append or mid-trim left
    return chunks


def partition_writer(config, first_chunk, nchunks):
    """An object with write_chunk(n, data) and close() that writes chunks first_chunk.. of the store
    whose `config()` is given (bcolz layout: any chunks; BLZ: one superchunk file's worth)."""
    if config["format"] == "blz":
        return BlzDir.partition_writer(config, first_chunk, nchunks)
    return BcolzDir(config["rootdir"])
