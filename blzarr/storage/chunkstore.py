"""`ChunkStore`: the one interface beneath a carray, whatever holds its chunks.

A carray is a sequence of full chunks (each `chunklen` atoms, compressed) plus a short last chunk
(the leftover) that only on-disk stores keep, at index `nchunks`.  A chunk store holds them:

- `MemoryChunks` here (a list of `chunk` objects),
- `bcolz_layout.BcolzChunks` (one file per chunk, the bcolz 1.x layout),
- `blz.BlzChunks` (checksummed superchunk files, the BLZ layout).

The carray, and everything above it, uses only the methods below: no layout branches, no file paths,
no asking whether the bytes are local or fetched by requests (`read_pieces`, `read_block` and
`read_rows` choose how to read).
`layouts.create_store` and `layouts.open_store` make the on-disk ones; beneath them, the files are in a
byte store (`bytestore`: a local directory or object storage).
"""

import warnings
import itertools
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from blzarr.errors import FormatError
from blzarr.runtime.parallel import run_all
from blzarr.storage import objstats
from blzarr.storage.chunk import decode_ranges, rows_chunks, sum_chunks
from blzarr.storage.files import overwrite

# uncompressed bytes of the chunks a read of many chunks from object storage has in flight at once,
# in parts of about PREFETCH_PART_BYTES (whole superchunk files where they fit), each part decoded as
# soon as its bytes are in while the next ones are still being fetched
PREFETCH_BATCH_BYTES = 64 * 1024 * 1024
PREFETCH_PART_BYTES = 8 * 1024 * 1024
# atoms per block read by `read_block` when a chunk's Blosc blocks do not split into whole atoms
BLOCK_CACHE_BYTES = 32 * 1024

SUPERCHUNK_TARGET_BYTES = 64 * 1024 * 1024
MAX_SUPERCHUNKLEN = 1024


MIN_AUTO_SUPERCHUNKLEN = 64


def auto_superchunklen(chunk_nbytes, expected_chunks=0):
    """Chunks per superchunk file (and per dask partition): files of about SUPERCHUNK_TARGET_BYTES
    uncompressed; 256 for chunks of any size (pickled objects).

    `expected_chunks` (from the carray's ``expectedlen``, 0 when unknown) caps it at the power of two
    that holds them, at least MIN_AUTO_SUPERCHUNKLEN: every file carries an offsets table of 8 bytes
    per slot, 8 KB at 1024 slots, which would make a table of a few rows tens of KB on disk."""
    if chunk_nbytes <= 0:
        return 256
    k = max(1, min(MAX_SUPERCHUNKLEN, SUPERCHUNK_TARGET_BYTES // chunk_nbytes))
    if expected_chunks > 0:
        k = min(k, max(MIN_AUTO_SUPERCHUNKLEN, 1 << (int(expected_chunks) - 1).bit_length()))
    return k


class ChunkStore:
    """The chunks of one carray.  Subclasses give `_get(i)` for 0 <= i < nchunks and override what
    their layout does differently; the defaults here are those of a store that keeps nothing on disk.

    Sequence of full chunks: ``len``, iteration, ``[i]`` (negative too), ``[i:j]``, ``append(c)``,
    ``[i] = c``, `truncate(n)`; `load(i, expected_nbytes)` reads a chunk whole and verified (also the
    stored short chunk at index nchunks); `cbytes`; `free_cachemem()`.

    Fields: `format` ('bcolz', 'blz' or None in memory), `rootdir`, `mode`, `atom`, `nchunks`,
    `chunk_nbytes` (-1: pickled objects, any size).
    """

    format = None
    rootdir = None
    layoutdir = None        # the layout's directory object (files, caches), None in memory
    superchunklen = None    # chunks per file where the layout groups them (BLZ), else None

    def _init_fields(self, store, atom, chunklen, nchunks, objects=False):
        self.layoutdir = store
        self.atom = atom
        self.chunk_nbytes = -1 if objects else chunklen * atom.itemsize   # -1: pickles, any size
        self.nchunks = nchunks

    # ------------------------------------------------------------------ the sequence of full chunks
    def __len__(self):
        return self.nchunks

    def __iter__(self):
        for i in range(self.nchunks):
            yield self._get(i)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._get(k) for k in range(*i.indices(self.nchunks))]
        if i < 0:
            i += self.nchunks
        if not 0 <= i < self.nchunks:
            raise IndexError(f"chunk {i} out of range ({self.nchunks} chunks)")
        return self._get(i)

    def append_many(self, cs):
        """Append the chunks `cs` in order (a layout may write them together)."""
        for c in cs:
            self.append(c)

    def set_nchunks(self, n):
        """Show only the first `n` chunks, without touching what is stored."""
        self.nchunks = n

    @property
    def remote(self):
        """Whether the chunks are fetched by requests (object storage), not read from memory or files."""
        return self.layoutdir is not None and self.layoutdir.remote

    def read_pieces(self, pieces, out, chunklen, itemsize):
        """Atoms of full chunks into `out`, several chunks at once: `pieces` lists (chunk number, first
        atom, end atom, the view of `out` they go to), in ascending chunk order from the start of
        `out`; `chunklen` atoms of `itemsize` bytes a chunk."""
        if len(pieces) > 1:
            if self.remote:
                self._read_fetched(pieces)
                return out
            if out.flags.c_contiguous:
                datas = self.resident(range(pieces[0][0], pieces[-1][0] + 1))
                if datas is not None:
                    # in-memory chunks: one call per thread decodes them all, straight into `out`
                    first = pieces[0][0] * chunklen + pieces[0][1]
                    decode_ranges(datas, out, [(p[0] * chunklen + p[1] - first) * itemsize for p in pieces],
                                  [p[1] * itemsize for p in pieces], [(p[2] - p[1]) * itemsize for p in pieces])
                    return out
                # whole chunks of files: read, verified and decoded on every thread in one call per thread
                whole = [p for p in pieces if p[2] - p[1] == chunklen]
                if len(whole) > 1:
                    base = out.__array_interface__["data"][0]
                    offs = [p[3].__array_interface__["data"][0] - base for p in whole]
                    if self.decode_whole([p[0] for p in whole], out, offs):
                        pieces = [p for p in pieces if p[2] - p[1] != chunklen]
        run_all(lambda p: self[p[0]].read_range(p[1], p[2], p[3]), pieces)
        return out

    def _read_fetched(self, pieces):
        """Object storage: the chunks fetched in parts (coalesced, concurrent), several parts in
        flight, each part decoded as soon as it is in while the later ones are still fetched."""
        nbytes = max(1, self.chunk_nbytes)
        part_bytes = min(PREFETCH_PART_BYTES, PREFETCH_BATCH_BYTES)
        k = self.superchunklen
        if isinstance(k, int) and 0 < k * nbytes <= part_bytes:
            per = k * (part_bytes // (k * nbytes))                  # whole files per part
        else:
            per = max(1, part_bytes // nbytes)
        parts = [list(g) for _, g in itertools.groupby(pieces, key=lambda p: p[0] // per)]
        inflight = max(1, PREFETCH_BATCH_BYTES // (per * nbytes))
        with ThreadPoolExecutor(inflight) as ahead:
            fetching = [ahead.submit(self.prefetch, [p[0] for p in part]) for part in parts[:inflight]]
            for k, part in enumerate(parts):
                fetching[k].result()
                if k + inflight < len(parts):
                    fetching.append(ahead.submit(self.prefetch, [p[0] for p in parts[k + inflight]]))
                run_all(lambda p: self[p[0]].read_range(p[1], p[2], p[3]), part)

    def read_block(self, i, local, chunklen, atom):
        """(lo, block, per): atoms [lo, hi) of full chunk i as a new array of dtype `atom`, the one Blosc
        block that holds atom `local` (so one block is decoded), or BLOCK_CACHE_BYTES worth of atoms
        when the chunk's blocks do not split into whole atoms; `per` atoms a block (the next starts
        at lo + per).  0 <= i < nchunks (the caller checked it)."""
        ch = self._get(i)
        isz = atom.itemsize
        bs = ch.blocksize
        per = bs // isz if bs >= isz and bs % isz == 0 else max(1, BLOCK_CACHE_BYTES // isz)
        lo = local // per * per
        hi = min(lo + per, chunklen)
        return lo, ch.read_block(lo, hi, np.empty(hi - lo, dtype=atom)), per

    def unpickle(self, i):
        """The Python object stored pickled in chunk i (a carray of dtype object)."""
        c = self[i]
        raw = c.decompress(np.empty(c.nbytes, dtype="u1"))
        try:
            return pickle.loads(raw.tobytes())
        except Exception as e:  # a damaged pickle can fail in many ways, none of them the caller's
            where = getattr(c, "_where", None) or f"object {i}"
            raise FormatError(f"cannot unpickle {where}: {type(e).__name__}: {e}") from None

    def read_rows(self, ids, out, offsets, rowsize, cstart, csize):
        """Bytes [cstart, cstart + csize) of every row (`rowsize` bytes) of the full chunks `ids`, packed
        into the contiguous array `out` from byte ``offsets[k]`` for chunk ``ids[k]``, on every thread
        (True); False, nothing done, where the layout reads such chunks block by block anyway."""
        if self.remote:
            return False
        datas = self.resident(ids)
        if datas is not None:
            rows_chunks(datas, out, offsets, rowsize, cstart, csize)
            return True
        if self.rows_whole(ids, out, offsets, cstart, csize):
            return True
        return self._rows_of_chunks(ids, out, offsets, rowsize, cstart, csize)

    def _rows_of_chunks(self, ids, out, offsets, rowsize, cstart, csize):
        """`read_rows` over chunk objects that hold their bytes whole (the bcolz layout's, a memory
        store's), one chunk per task on the pool's threads.  A layout whose chunks are read block by
        block from their files (BLZ) returns False instead."""
        def one(k):
            c = self[ids[k]]
            rows_chunks([c.getdata()], out, [offsets[k]], rowsize, cstart, csize, nparts=1,
                        wheres=[c._where or f"chunk {ids[k]}"])
        run_all(one, range(len(ids)))
        return True

    def resident(self, ids):
        """The compressed bytes of the full chunks numbered `ids` (a list, in that order) when this
        store holds them in memory, else None (the caller reads them through the chunk objects)."""
        return None

    def chunk_reader(self, start, stop):
        """A reader of the full chunks start..stop-1, for a caller that decodes them whole, one after
        the other in ascending order on one thread (``reader.read(n, out)`` into a contiguous array of
        `chunk_nbytes` bytes, then ``reader.close()``), when this layout reads a chunk in one call
        (read, verified and decoded without Python in between); else None (the caller reads the
        chunks its usual way)."""
        return None

    def decode_whole(self, ids, out, offsets):
        """Decode the full chunks `ids` (a list) whole into the contiguous array `out`, chunk ``ids[k]``
        at byte ``offsets[k]``, in one call per thread, when this layout can (True); else False and
        nothing done (the caller reads them through the chunk objects)."""
        return False

    def rows_whole(self, ids, out, offsets, cstart, csize):
        """Bytes [cstart, cstart + csize) of every atom of the full chunks `ids`, packed into the
        contiguous array `out` from byte ``offsets[k]`` for chunk ``ids[k]``, as `decode_whole` does
        (True), or False."""
        return False

    def sum_resident(self, ids, dtype):
        """NumPy's sum of each full chunk of `ids` (values of `dtype`) as an array, every chunk decoded
        and summed on its thread in one call per thread, or None where this store cannot (object
        storage, a dtype the kernel does not sum)."""
        if self.remote:
            return None
        datas = self.resident(ids)
        if datas is not None:
            return sum_chunks(datas, dtype)
        return self.sum_whole(ids, dtype) if len(ids) > 1 else None

    def sum_whole(self, ids, dtype):
        """NumPy's sum of each full chunk of `ids` (values of `dtype`) as an array, read and summed in
        one call per thread, when this layout can; else None."""
        return None

    def forget_from(self, n):
        """Drop cached copies of chunks n and later (about to change)."""

    # ------------------------------------------------------------------ the short last chunk
    def put_last(self, n, data):
        """Store the compressed short last chunk at index `n` (= nchunks)."""

    def remove_from(self, n):
        """Remove the stored chunks at index `n` and later (a stale short chunk, a killed writer's)."""

    def remove_stray(self, n):
        """On opening for writing: remove what a killed writer left past the `n` chunks meta/sizes counts."""

    def stored_last(self, n):
        """What stands stored at index `n` past the full chunks, to restore with `undo_appends`."""
        return None

    def undo_appends(self, n, last):
        """Forget the chunks appended from index `n` on, and put back `last` (from `stored_last`)."""
        self.forget_from(n)
        self.set_nchunks(n)

    def stray_files(self, expected):
        """Names of chunk files past the `expected` stored chunks, which readers ignore."""
        return []

    def sync(self, announce=None):
        """Make every chunk written since the last sync durable (a flush calls it before meta/sizes);
        rewrites become visible to other readers here (switched: `blzarr.storage.rewrite`; a switch
        under a record calls `announce()` once the record is written)."""

    def switch_units(self):
        """How many one-step switches the rewrites not yet visible take (0: none pending)."""
        return 0

    def settle(self):
        """At close, after a flush that succeeded: what the layout leaves in a simpler form now that
        every commit is durable (BLZ: a one-barrier record of meta/sizes as plain text)."""

    def sizes_with_chunks(self, length=None):
        """Inside the barrier that syncs the chunks the last `sync` wrote (`files.one_barrier`): whether
        meta/sizes may be written in it too (the layout's readers then check those chunks after a
        power loss); False: only once they are durable.  `length`: the length it will count, when it
        may go in only as a record that readers can read as the commit before it (BLZ's one-barrier
        record, whose "prev" a table's length rule uses)."""
        return False

    def sizes_synced(self):
        """The barrier meta/sizes was written in (a table's flush) returned: that commit is durable."""

    def prepare_switch(self):
        """Make the pending rewrites' new bytes durable; the plan of their switch (a rewrite record's
        entry), None when none is pending."""
        return None

    def switch_pending(self):
        """Make the pending rewrites visible (the record that guards them, if any, is the caller's)."""

    def abandon_pending(self):
        """Forget the pending rewrites, unpublished (their owner can no longer tell what they hold)."""

    def rewrite_pending(self, i):
        """Whether chunk i has a rewrite that `drop_rewrite` can take back."""
        return False

    def drop_rewrite(self, i):
        """Take back the pending rewrite of chunk i (True), where the layout can; else False."""
        return False

    # ------------------------------------------------------------------ metadata and maintenance
    def read_meta(self, name):
        raise NotImplementedError

    def write_meta(self, name, obj):
        pass

    def meta_path(self, name):
        return None

    @property
    def attrs_path(self):
        return None

    # ------------------------------------------------------------------ chunk statistics (blzarr.query.stats)
    def fingerprint(self, i):
        """A tuple of 3 ints that changes whenever stored chunk i is rewritten (None: not stored)."""
        return None

    def fingerprints(self, ids):
        """[fingerprint(i) for i in ids] (a store may find them faster together)."""
        return [self.fingerprint(i) for i in ids]

    def _local_stats(self):
        """Whether the statistics file is a local file (on object storage it is an object: `objstats`)."""
        return self.layoutdir is not None and not getattr(self.layoutdir, "remote", False)

    def read_stats(self):
        """The bytes of the statistics file (meta/stats, an object on object storage), or None when
        there is none."""
        if getattr(self.layoutdir, "remote", False):
            return objstats.read(self.layoutdir.bytestore)
        path = self.meta_path("stats")
        if path is None or not self._local_stats():
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            return None

    def write_stats(self, raw):
        """Rewrite the statistics file in place (no rename, no fsync: readers drop a torn, lost or
        stale file, which is only rebuilt)."""
        if getattr(self.layoutdir, "remote", False):
            if self.mode != "r":
                objstats.write(self.layoutdir.bytestore, raw)
            return
        path = self.meta_path("stats")
        if path is not None and self.mode != "r" and self._local_stats():
            overwrite(path, raw)

    def moved_fingerprints(self):
        """{old fingerprint: current one} of chunks whose fingerprint changed while their bytes did
        not (object storage: a superchunk file uploaded again), see `objstats.TagMoves`."""
        return {}

    def storage_options(self):
        """The layout's own options (checksum, superchunklen, reserve for BLZ), to make a copy alike."""
        return {}

    def describe(self):
        """What the layout adds to a description of the carray (`blzarr info`)."""
        return {}

    def partition_chunks(self):
        """Chunks per dask partition: the superchunk capacity in BLZ, the same rule elsewhere."""
        return auto_superchunklen(self.chunk_nbytes)

    def verify(self, expected_chunks):
        """Check every stored chunk; raise on damage, return a summary."""
        return {"chunks": self.nchunks}

    def _needs_blz(self, what):
        raise AttributeError(f"{what} needs an on-disk carray in the 'blz' format "
                             f"(this one is {self.format or 'in memory'})")

    def compact(self):
        """BLZ: reclaim the space relocated rewrites left; returns the bytes freed."""
        self._needs_blz("compact()")

    @property
    def meta(self):
        self._needs_blz("meta")

    @property
    def vlmeta(self):
        self._needs_blz("vlmeta")

    def config(self):
        """Plain values from which a worker process reopens this store to write chunks (dask)."""
        conf = {"format": self.format, "rootdir": self.rootdir}
        if getattr(self.layoutdir, "remote", False):
            conf["storage_options"] = self.layoutdir.bytestore.config().get("storage_options", {})
        return conf

    @property
    def bytestore(self):
        """The byte store beneath an object-storage carray (`blzarr.storage.bytestore`: URL, request
        counts in ``.stats``), None elsewhere."""
        return self.layoutdir.bytestore if getattr(self.layoutdir, "remote", False) else None

    @property
    def bytes(self):
        """Deprecated name of `bytestore`, kept for code written against blzarr 0.1's first docs."""
        warnings.warn("chunkstore.bytes is now chunkstore.bytestore", DeprecationWarning, stacklevel=2)
        return self.bytestore

    def prefetch(self, ns):
        """Fetch chunks `ns` ahead of reading them, where that pays (object storage: concurrently,
        adjacent ones in one request); a no-op elsewhere."""

    def close(self):
        """Release open files (the store stays usable: they reopen on demand)."""


class LayoutChunks(ChunkStore):
    """The chunks of an on-disk layout: `layoutdir` is its directory object (`bcolz_layout.BcolzDir`,
    `blz.BlzDir`), which keeps the meta files and makes the writes durable."""

    def sync(self, announce=None):
        self.layoutdir.sync(announce)

    def switch_units(self):
        return self.layoutdir.switch_units()

    def prepare_switch(self):
        return self.layoutdir.prepare_switch()

    def switch_pending(self):
        self.layoutdir.switch_pending()

    def abandon_pending(self):
        self.forget_from(0)
        self.layoutdir.abandon_pending()

    def read_meta(self, name):
        return self.layoutdir.read_meta(name)

    def write_meta(self, name, obj):
        self.layoutdir.write_meta(name, obj)

    def meta_path(self, name):
        return self.layoutdir.meta_path(name)

    @property
    def attrs_path(self):
        return self.layoutdir.attrs_path

    def close_dir(self):
        """Close the layout directory as its own `close` does (its descriptors, and what a layout
        finishes there), before the directory is renamed; it reopens at the next use."""
        self.layoutdir.close()

    def moved_to(self, rootdir):
        """The directory was renamed to `rootdir` (a new one published): go on there."""
        self.layoutdir.moved_to(rootdir)
        self.rootdir = self.layoutdir.rootdir

    def adopt(self, fresh):
        """The layout directory takes, in place, the state of `fresh`, a directory object of the same
        files opened since (a reader loading a newer version, a writer's first write), so that the
        objects holding it (metalayers handed out) see the new state; returns it, for the chunk store
        over that state (`layouts.open_chunks`)."""
        self.layoutdir.adopt(fresh)
        return self.layoutdir

    def sizes_with_chunks(self, length=None):
        ask = getattr(self.layoutdir, "sizes_with_chunks", None)
        return ask(length) if ask is not None else False

    def sizes_synced(self):
        done = getattr(self.layoutdir, "sizes_synced", None)
        if done is not None:
            done()

    def settle(self):
        settle = getattr(self.layoutdir, "settle_sizes", None)
        if settle is not None:
            settle()

    def gate_writes(self, gate):
        """Make the first write through the layout directory (its metalayers included) pass `gate`
        first (a `locking.FirstWrite`, which takes the directory's lock); None: writes pass."""
        self.layoutdir._first_write = gate


class MemoryChunks(list, ChunkStore):
    """The full chunks of an in-memory carray: a list of `chunk` objects."""

    mode = "a"

    def __init__(self, chunks=(), chunk_nbytes=-1):
        super().__init__(chunks)
        self.chunk_nbytes = chunk_nbytes     # -1: pickled objects, any size

    _get = list.__getitem__

    def copy(self):
        """A new list of the same chunks (chunks are immutable: a view shares them)."""
        return MemoryChunks(self, self.chunk_nbytes)

    @property
    def nchunks(self):
        return list.__len__(self)

    @property
    def cbytes(self):
        return sum(c.cbytes for c in self)

    def resident(self, ids):
        get = list.__getitem__
        out = [getattr(get(self, i), "_data", None) for i in ids]
        return out if all(type(b) is bytes for b in out) else None

    def truncate(self, n):
        del self[n:]

    set_nchunks = truncate

    def undo_appends(self, n, last):
        del self[n:]

    def free_cachemem(self):
        pass
