"""The scalar read of an in-memory carray (`_chunk.block_at`): one Blosc block decoded straight into
its array.  Each block's bytes are checked against C-Blosc's own reading of that block
(`chunk.read_block`, through blosc_getitem) and each a[i] against NumPy's element, type included."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blzarr
from blzarr import _chunk
from blzarr.errors import ChunkError
from blzarr.storage.chunk import chunk
from blzarr.storage.chunkstore import MemoryChunks

# (clevel, shuffle, cname): raw storage, no shuffle, byte shuffle, bitshuffle (left to C-Blosc),
# another codec (left to C-Blosc)
CPARAMS = [(0, 1, "lz4"), (5, 0, "lz4"), (5, 1, "lz4"), (9, 1, "lz4"), (5, 2, "lz4"), (5, 1, "blosclz")]
DTYPES = ["f8", "i4", "i2", "u1", "f4", ">f8", "c16", "M8[s]", "S3", "U2", "i4,f8", "(3,)f8"]


def _data(dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.names:
        x = np.zeros(n, dtype=dt)
        for k, name in enumerate(dt.names):
            x[name] = np.cumsum(rng.standard_normal(n)) * (k + 1)
        return x
    shape = (n,) + dt.shape
    walk = np.cumsum(rng.standard_normal(shape), axis=0) * 1000
    if dt.base.kind == "S":
        return np.array([b"%d" % (v % 997) for v in range(n)], dtype=dt)
    if dt.base.kind == "U":
        return np.array([str(v % 97) for v in range(n)], dtype=dt)
    return walk.astype(dt.base)


@pytest.mark.parametrize("cp", CPARAMS)
@pytest.mark.parametrize("dtype", ["f8", "i4", "i2", "M8[s]", "i4,f8", "S3"])
def test_every_block_as_blosc_reads_it(dtype, cp):
    """block_at gives, for every block of a chunk, the bytes C-Blosc's blosc_getitem gives."""
    clevel, shuffle, cname = cp
    x = _data(dtype, 20000)
    atom = x.dtype
    c = chunk(x, atom, blzarr.cparams(clevel=clevel, shuffle=shuffle, cname=cname))
    store = MemoryChunks([c])
    per = c.blocksize // atom.itemsize
    if c.blocksize % atom.itemsize:
        assert _chunk.block_at(store, 0, 5, len(x), atom) is None   # left to read_block
        return
    seen = 0
    for local in range(0, len(x), max(1, per // 3)):
        lo, block = _chunk.block_at(store, 0, local, len(x), atom)
        assert lo == local // per * per and block.dtype == atom
        ref = c.read_block(lo, lo + len(block), np.empty(len(block), dtype=atom))
        assert block.tobytes() == ref.tobytes() == x[lo:lo + len(block)].tobytes()
        seen += 1
    assert seen > 1


def test_a_damaged_block_is_an_error_naming_the_chunk():
    x = np.cumsum(np.random.default_rng(3).standard_normal(20000))
    c = chunk(x, x.dtype, blzarr.cparams(clevel=5, shuffle=1, cname="lz4"))
    assert c._data[2] & 0x10 and c.blocksize < c.nbytes          # unsplit LZ4 blocks: block_at's own decoder
    raw = bytearray(c._data)
    start = int.from_bytes(raw[16 + 4:16 + 8], "little")           # block 1's stream
    raw[start + 4:start + 40] = b"\xff" * 36
    bad = chunk(None, x.dtype, _data=bytes(raw), _where="chunk 7 of a test")
    per = c.blocksize // 8
    lo, block = _chunk.block_at(MemoryChunks([bad]), 0, 0, len(x), x.dtype)   # block 0 is intact
    assert np.array_equal(block, x[:per])
    with pytest.raises(ChunkError, match="chunk 7 of a test"):
        _chunk.block_at(MemoryChunks([bad]), 0, per + 1, len(x), x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalars_as_numpy_gives_them(dtype):
    """a[i] for positive and negative i: NumPy's element, as a Python scalar where bcolz gives one."""
    x = _data(dtype, 70000, seed=1)
    a = blzarr.carray(x, chunklen=16384)
    rng = np.random.default_rng(2)
    for i in [int(v) for v in rng.integers(-len(x), len(x), 200)] + [0, -1, len(x) - 1, 16383, 16384]:
        v, ref = a[i], x[i]
        if x.ndim == 1 and x.dtype.kind in "biufcSUMmV":
            ref = ref.item()
        assert type(v) is type(ref), (i, type(v), type(ref))
        if isinstance(ref, (np.ndarray, np.void)):
            assert v.tobytes() == ref.tobytes(), (i, v, ref)
        else:
            assert v == ref, (i, v, ref)
    with pytest.raises(IndexError, match=f"index {len(x)} is out of bounds for axis 0 with size {len(x)}"):
        a[len(x)]
    with pytest.raises(IndexError, match=f"index {-len(x) - 1} is out of bounds"):
        a[-len(x) - 1]


def test_the_scalar_path_reaches_block_at(monkeypatch):
    """The in-memory scalar read goes through block_at (and a carray's cached block after it)."""
    from blzarr.containers.carray import read
    calls = []
    real = read.block_at

    def spy(*args):
        calls.append(args[1:3])
        return real(*args)

    monkeypatch.setattr(read, "block_at", spy)
    x = np.arange(100000, dtype="f8") * 0.5
    a = blzarr.carray(x, chunklen=32768)
    assert a[40000] == 20000.0 and a[40001] == 20000.5 and a[-1] == x[-1]
    assert calls == [(1, 40000 - 32768)]      # the second read hits the cached block; -1 is in the tail


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_scalars_against_numpy(data):
    n = data.draw(st.integers(1, 5000))
    chunklen = data.draw(st.integers(1, 3000))
    dtype = data.draw(st.sampled_from(["f8", "i4", "u2", "f4", "i8"]))
    clevel = data.draw(st.integers(0, 9))
    shuffle = data.draw(st.integers(0, 2))
    x = _data(dtype, n, seed=data.draw(st.integers(0, 99)))
    a = blzarr.carray(x, chunklen=chunklen, cparams=blzarr.cparams(clevel=clevel, shuffle=shuffle))
    for i in data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=30)):
        assert a[i] == x[i].item() and type(a[i]) is type(x[i].item())


def test_a_read_during_a_write_on_another_thread():
    """While a write runs, the carray's chunk list is stood in for by the write's undo log (what a
    reader thread beside an appending thread meets): a scalar read there takes the other way, with
    the same value; a chunk number past the list's end is not read from it."""
    x = np.arange(1000, dtype=np.int64)
    c = blzarr.carray(x, chunklen=100)
    assert isinstance(c._chunks, MemoryChunks)
    with c._undoable():
        assert not isinstance(c._chunks, list)
        assert _chunk.block_at(c._chunks, 0, 5, 100, np.dtype(np.int64)) is None
        assert [c[i] for i in (0, 5, 99, 100, 999, -1)] == [0, 5, 99, 100, 999, 999]
    assert _chunk.block_at(c._chunks, len(c._chunks), 0, 100, np.dtype(np.int64)) is None
    assert _chunk.block_at(c._chunks, -1, 0, 100, np.dtype(np.int64)) is None
    lo, block = _chunk.block_at(c._chunks, 3, 5, 100, np.dtype(np.int64))
    assert (block == x[300 + lo:300 + lo + len(block)]).all()
