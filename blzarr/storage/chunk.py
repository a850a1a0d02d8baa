"""`chunk`: one compressed piece of a carray, a thin object over the bytes of one Blosc chunk."""

import numpy as np

from blzarr import _chunk, _decode, _rows, _sums, _where
from blzarr.runtime.parallel import codec_threads, run_threads
from blzarr.runtime.params import DEFAULT_BLOCKSIZE, cparams as _cparams, get_nthreads


def blosc_typesize(base):
    """The typesize Blosc shuffles with for a base dtype (bcolz's rule, kept for byte compatibility)."""
    if base.kind == "S":
        return 1
    if base.kind == "U":
        return 4
    if base.itemsize > _chunk.MAX_TYPESIZE or base.itemsize == 0:
        return 1
    return base.itemsize


def quantize(data, digits):
    """Round floats to keep about `digits` significant decimal digits after the binary point."""
    bits = int(np.ceil(np.log2(10.0 ** digits)))
    scale = 2.0 ** bits
    return np.around(scale * data) / scale


def compress_array(arr, typesize, cparams, blocksize=DEFAULT_BLOCKSIZE, minmax=None):
    """Compress a C-contiguous array with `cparams` into the bytes of one chunk.

    `minmax` ``(mins, maxs, at, nat)``: the same GIL-free call also puts the smallest and largest of
    the values stored (after the quantize filter) into mins[at] and maxs[at] (`_chunk.compress`;
    `nat`: `arr` holds datetimes, whose int64 view is compressed, NaT left out), and the result is
    ``(bytes, count of NaN/NaT)``."""
    if cparams.quantize and arr.dtype.kind == "f":
        arr = quantize(arr, cparams.quantize)
    arr = np.ascontiguousarray(arr)
    bs = blosc_blocksize_request(blocksize, arr.nbytes)
    if minmax is None:
        return _chunk.compress(arr, typesize, cparams.clevel, cparams.shuffle, cparams.cname, bs,
                               codec_threads())
    mins, maxs, at, nat = minmax
    if nat:
        arr = arr.view(np.int64)
    return _chunk.compress(arr, typesize, cparams.clevel, cparams.shuffle, cparams.cname, bs,
                           codec_threads(), mins, maxs, at, nat)


def blosc_blocksize_request(target, nbytes):
    """What to ask C-Blosc for: `target` bytes a block, or 0 (one block) for a smaller buffer."""
    return 0 if nbytes <= target else target


def run_work(work):
    """Run a work object of the work pool (`_decode.DecodeChunks`, ...) on every thread, then raise what failed."""
    run_threads(work.run, work.nparts)
    work.check()
    return work


def decode_ranges(datas, out, offsets, starts, sizes):
    """Bytes [starts[k], starts[k] + sizes[k]) of the in-memory chunk bytes ``datas[k]`` into the
    contiguous array `out` at byte ``offsets[k]``, for every k, on every thread at once (one call into
    `_decode` per thread, the GIL released, the threads taking chunks as they become free)."""
    intp = np.intp
    run_work(_decode.DecodeChunks(datas, out, np.asarray(offsets, intp), np.asarray(starts, intp),
                                 np.asarray(sizes, intp), get_nthreads()))
    return out


def rows_chunks(datas, out, offsets, rowsize, cstart, csize, nparts=None, wheres=None):
    """Bytes [cstart, cstart + csize) of every row (`rowsize` bytes) of the chunk bytes ``datas[k]``,
    packed into the contiguous array `out` from byte ``offsets[k]`` (a column of a 2-D carray), on
    `nparts` threads (all of them by default), the GIL released: an LZ4 chunk of shuffled 8-byte values
    a block at a time, only the wanted bytes taken out of each block."""
    run_work(_rows.RowsChunks(datas, out, np.asarray(offsets, np.intp), rowsize, cstart, csize,
                               get_nthreads() if nparts is None else nparts, wheres))
    return out


def take_chunks(datas, positions, groups, chunklen, itemsize, out, rows=None):
    """Items at the ascending `positions` (intp) into rows of the contiguous array `out` (position i to
    row ``rows[i]``, or row i), where ``groups`` lists (chunk number, start, stop) runs of positions in
    one chunk and ``datas[k]`` holds group k's chunk bytes (in memory): one call per thread, each chunk's
    touched blocks decoded once."""
    intp = np.intp
    run_work(_decode.TakeChunks(datas, positions, np.array([g[1] for g in groups], intp),
                               np.array([g[2] for g in groups], intp),
                               np.array([g[0] * chunklen for g in groups], intp), itemsize, out, rows,
                               get_nthreads()))
    return out


def sum_chunks(datas, dtype):
    """NumPy's sum of each of the in-memory chunk bytes `datas` of values of `dtype` (an array), each
    chunk decoded into a buffer of its thread and summed there, on every thread at once; None when the
    dtype is not one `_sums.SumChunks` sums (floats of 4 or 8 bytes, integers, native order)."""
    dtype = np.dtype(dtype)
    if not dtype.isnative or not (dtype.kind in "iu" or dtype.char in "fd"):
        return None
    return run_work(_sums.SumChunks(datas, dtype, get_nthreads())).sums


# chunks of values whose selection `select_ahead` keeps ready ahead of its caller
SELECT_WINDOW = 8
# ... and at most this many bytes of them (at least 2 chunks): large chunks get a shorter window
SELECT_WINDOW_BYTES = 16 * 1024 * 1024


class _Names:
    """The names of a `_where.WhereChunks`'s items in its errors: the value chunks, then the mask's."""

    def __init__(self, nvalues):
        self.nvalues = nvalues

    def __getitem__(self, i):
        if i < self.nvalues:
            return f"chunk {i} of the values"
        return f"chunk {i - self.nvalues} of the mask"


def _where_work(values, vtail, masks, mtail, chunklen, mchunklen, dtype, modes):
    """A `_where.WhereChunks` (see there for the arguments), produced ahead of its caller on a thread of
    its own when there are threads and more than one chunk to decode."""
    ahead = get_nthreads() > 1 and int(np.count_nonzero(modes)) > 1
    window = max(2, min(SELECT_WINDOW, SELECT_WINDOW_BYTES // max(1, chunklen * np.dtype(dtype).itemsize)))
    return _where.WhereChunks(values, vtail, masks, mtail, chunklen, mchunklen, dtype,
                              np.asarray(modes, np.uint8), window, ahead, _Names(len(values)))


def where_scalars(values, vtail, masks, mtail, chunklen, mchunklen, dtype, modes, skip=0, limit=None):
    """An iterator over the values where the mask is true, as Python scalars (`_where.WhereIter`), or
    None when the dtype has no such scalars there (see `select_ahead`)."""
    dtype = np.dtype(dtype)
    if not dtype.isnative or dtype.char not in _where.WHERE_ITER_CHARS:
        return None
    work = _where_work(values, vtail, masks, mtail, chunklen, mchunklen, dtype, modes)
    return _where.WhereIter(work, skip, -1 if limit is None else limit)


def select_ahead(values, vtail, masks, mtail, chunklen, mchunklen, dtype, modes):
    """Yield, chunk of values by chunk, the values where the mask is true, as arrays valid until the
    next one is asked for (see `_where.WhereChunks` for the arguments): produced without the GIL on a
    thread of this call, up to SELECT_WINDOW chunks ahead, while the caller uses the earlier ones (it
    may hold the GIL meanwhile).  A chunk that fails to decode raises `ChunkError` when its turn comes;
    stopping early (close, garbage collection) stops the thread and waits for it."""
    work = _where_work(values, vtail, masks, mtail, chunklen, mchunklen, dtype, modes)
    try:
        while True:
            part = work.next_part()
            if part is None:
                return
            yield part
    finally:
        work.close()


class chunk:
    """chunk(array, atom, cparams=None)

    One compressed piece of a carray: ``len(c)`` atoms of dtype `atom`, held as the bytes of one
    Blosc chunk.  Chunks are immutable; a carray's data is changed through the carray.

    ``c[i]`` and ``c[i:j]`` decompress only the Blosc blocks that hold the wanted atoms;
    ``np.asarray(c)`` and `decompress` give all of them; `getdata` gives the compressed bytes.

    Parameters
    ----------
    array : array_like
        The atoms to compress.
    atom : dtype
        Their dtype (a subarray dtype such as ``('f8', (3,))`` for rows of a multidimensional carray).
    cparams : cparams or dict, optional
        Compression parameters (the defaults when None).

    Attributes
    ----------
    nbytes, cbytes : int
        Uncompressed and compressed size in bytes.
    blocksize, typesize : int
        From the Blosc header: bytes per Blosc block, and the item size used for shuffling.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> c = blzarr.chunk(np.arange(10, dtype="i4"), "i4", blzarr.cparams(clevel=9))
    >>> len(c), c.nbytes, int(c[3]), c[2:5]
    (10, 40, 3, array([2, 3, 4], dtype=int32))
    >>> int(np.asarray(c).sum())
    45
    >>> isinstance(c.getdata(), bytes) and len(c.getdata()) == c.cbytes
    True
    """

    __slots__ = ("_data", "atom", "_len", "nbytes", "cbytes", "blocksize", "typesize", "_where")

    def __init__(self, array, atom, cparams=None, _data=None, _where=None):
        self.atom = np.dtype(atom)
        self._where = _where
        if _data is None:
            array = np.ascontiguousarray(array, dtype=self.atom.base)
            self._data = compress_array(array, blosc_typesize(self.atom.base),
                                        _cparams.coerce(cparams))
        else:
            self._data = _data
        h = _chunk.header(self._data, _where)
        self.nbytes = h["nbytes"]
        self.cbytes = h["ctbytes"]
        self.blocksize = h["blocksize"]
        self.typesize = h["typesize"]
        self._len = self.nbytes // self.atom.itemsize if self.atom.itemsize else 0

    @classmethod
    def from_bytes(cls, data, atom, expected_nbytes=-1, where=None):
        """A chunk over compressed bytes read from elsewhere, fully validated first.

        Raises `blzarr.ChunkError` when `data` is not a well-formed Blosc chunk (or, with
        `expected_nbytes` >= 0, does not decode to that many bytes); `where` names the source in
        the message.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> c = blzarr.chunk(np.arange(4.0), "f8")
        >>> blzarr.chunk.from_bytes(c.getdata(), "f8")[:]
        array([0., 1., 2., 3.])
        >>> blzarr.chunk.from_bytes(c.getdata()[:20], "f8", where="a test")
        Traceback (most recent call last):
            ...
        blzarr.errors.ChunkError: ...
        """
        _chunk.validate(data, expected_nbytes, where)
        return cls(None, atom, _data=data, _where=where)

    @property
    def dtype(self):
        return self.atom

    @property
    def atomsize(self):
        """The bytes of one atom (one row: the base itemsize times the atom's shape), as in bcolz."""
        return self.atom.itemsize

    @property
    def itemsize(self):
        """The element size Blosc shuffles with (1 for bytes, 4 for str, else the base itemsize), as in bcolz."""
        return blosc_typesize(self.atom.base)

    @property
    def typekind(self):
        return self.atom.base.kind

    @property
    def isconstant(self):
        a = self.decompress()
        return bool(len(a) == 0 or (a == a[0]).all())

    def getdata(self):
        """The compressed bytes of this chunk."""
        return self._data

    def getudata(self):
        """The uncompressed bytes of this chunk."""
        return self.decompress(np.empty(self.nbytes, dtype="u1")).tobytes()

    def __setitem__(self, key, value):
        raise NotImplementedError("chunks are immutable: assign through the carray")

    def decompress(self, out=None):
        """All the atoms of the chunk, as a new array or into `out` (which must hold them all)."""
        if out is None:
            out = np.empty(self._len, dtype=self.atom)
        _chunk.decompress_into(self._data, out, codec_threads(), False, self._where)
        return out

    def read_range(self, start, stop, out):
        """Atoms [start, stop) of the chunk into the contiguous array `out`."""
        isz = self.atom.itemsize
        if start == 0 and stop == self._len:
            _chunk.decompress_into(self._data, out, codec_threads(), False, self._where)
        elif self.typesize and isz % self.typesize == 0:
            _chunk.getitem_into(self._data, start * isz, (stop - start) * isz, out, 0, False, self._where)
        else:
            # Blosc reads parts only in whole typesize units: a chunk whose header typesize does not
            # divide the atoms (another writer's choice, or a damaged header) is decoded whole
            out[...] = self.decompress()[start:stop]
        return out

    def read_block(self, start, stop, out):
        """Atoms [start, stop), all within one Blosc block, into the contiguous array `out`: that block
        decoded alone, straight from the codec."""
        isz = self.atom.itemsize
        if self.typesize and isz % self.typesize == 0:
            _chunk.getitem_into(self._data, start * isz, (stop - start) * isz, out, 0, False, self._where)
            return out
        return self.read_range(start, stop, out)

    def take(self, local, out, rows=None, first_row=0):
        """Atoms at the ascending positions `local` (intp) into rows of the contiguous array `out`:
        atom k to row ``rows[k]``, or ``first_row + k`` when `rows` is None.

        Only the Blosc blocks that hold a wanted atom are decoded, each once, straight into `out`.
        """
        isz = self.atom.itemsize
        ts = self.typesize
        if (self._data is not None and ts and isz % ts == 0 and self.blocksize % ts == 0
                and self.nbytes % ts == 0):
            _chunk.take_into(self._data, local, isz, out, rows, first_row, False, self._where)
            return out
        lo, hi = int(local[0]), int(local[-1]) + 1
        tmp = self.read_range(lo, hi, np.empty(hi - lo, dtype=self.atom))
        if rows is None:
            out[first_row:first_row + len(local)] = tmp[local - lo]
        else:
            out[rows] = tmp[local - lo]
        return out

    def __len__(self):
        return self._len

    def __array__(self, dtype=None, copy=None):
        a = self.decompress()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if i < 0:
                i += self._len
            if not 0 <= i < self._len:
                raise IndexError(f"index {key} out of range for a chunk of {self._len}")
            out = np.empty(1, dtype=self.atom)
            return self.read_range(i, i + 1, out)[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            if step == 1:
                n = max(0, stop - start)
                out = np.empty(n, dtype=self.atom)
                return self.read_range(start, start + n, out) if n else out
        return self.decompress()[key]

    def __repr__(self):
        return f"chunk({self.atom}, len={self._len})  nbytes: {self.nbytes}; cbytes: {self.cbytes}; " \
               f"ratio: {self.nbytes / max(self.cbytes, 1):.2f}\n{self.decompress()!r}"

    def __str__(self):
        return str(self.decompress())
