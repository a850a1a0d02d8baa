"""Fancy indexing through _chunk.take_into / chunk.take: only the touched Blosc blocks decoded, each once,
straight into the output; checked against NumPy in every layout."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import blzarr
from blzarr import _chunk
from blzarr.storage.chunk import chunk
from blzarr.errors import ChunkError


def _chunk_of(values, clevel=5):
    return chunk(values, values.dtype if values.ndim == 1 else np.dtype((values.dtype, values.shape[1:])),
                 blzarr.cparams(clevel=clevel))


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 20000), k=st.integers(1, 300),
       clevel=st.sampled_from([0, 1, 5, 9]), tail=st.sampled_from([(), (3,), (5, 2)]),
       dtype=st.sampled_from(["f8", "i2", "u1", "i4"]))
def test_take_into_equals_numpy(seed, n, k, clevel, tail, dtype):
    rng = np.random.default_rng(seed)
    values = rng.integers(-1000, 1000, (n,) + tail).astype(dtype)
    c = _chunk_of(values, clevel)
    local = np.sort(rng.integers(0, n, k)).astype(np.intp)      # duplicates included
    out = np.full((k + 3,) + tail, 77, dtype=dtype)
    c.take(local, out, None, 2)
    assert np.array_equal(out[2:k + 2], values[local])
    assert (out[:2] == 77).all() and (out[k + 2:] == 77).all()
    rows = rng.permutation(k).astype(np.intp)
    out2 = np.empty((k,) + tail, dtype=dtype)
    c.take(local, out2, rows)
    assert np.array_equal(out2[rows], values[local])


def test_take_into_decodes_only_touched_blocks_once():
    values = np.arange(100_000, dtype="f8") * 0.5
    c = _chunk_of(values)
    per = c.blocksize // 8
    assert c.nbytes // c.blocksize >= 10
    local = np.array([3, 4, 5, 3 * per + 1, 3 * per + 7, 9 * per], dtype=np.intp)
    out = np.empty(len(local))
    assert _chunk.take_into(c.getdata(), local, 8, out) == 3
    assert np.array_equal(out, values[local])


def test_take_into_decodes_the_whole_chunk_when_most_blocks_are_touched():
    values = np.random.default_rng(3).standard_normal(100_000)
    c = _chunk_of(values)
    nblocks = -(-c.nbytes // c.blocksize)
    per = c.blocksize // 8
    local = np.arange(0, 100_000, per, dtype=np.intp)[:-(nblocks // 4)] + 5     # 3/4 of the blocks
    out = np.empty(len(local))
    assert _chunk.take_into(c.getdata(), local, 8, out, check=True) == nblocks
    assert np.array_equal(out, values[local])
    data = bytearray(c.getdata())
    data[-200:] = bytes(200)        # an untouched block is damaged: the whole decode checks it too
    with pytest.raises(ChunkError):
        _chunk.take_into(bytes(data), local, 8, out, check=True, where="t")


def test_take_into_items_across_blocks():
    # 24-byte atoms do not divide the 16 KB blocks: some atoms straddle two blocks
    values = np.arange(30_000 * 3, dtype="f8").reshape(-1, 3)
    c = _chunk_of(values)
    assert c.blocksize % 24
    local = np.arange(0, 30_000, 7, dtype=np.intp)
    out = np.empty((len(local), 3))
    c.take(local, out)
    assert np.array_equal(out, values[local])


def test_take_into_rejects_bad_arguments():
    values = np.arange(1000, dtype="i8")
    data = _chunk_of(values).getdata()
    out = np.empty(3, dtype="i8")
    with pytest.raises(IndexError, match="out of order"):
        _chunk.take_into(data, np.array([5, 2, 9], dtype=np.intp), 8, out)
    with pytest.raises(IndexError, match="outside the chunk"):
        _chunk.take_into(data, np.array([5, 1000], dtype=np.intp), 8, out)
    with pytest.raises(IndexError, match="row 3 outside"):
        _chunk.take_into(data, np.array([1, 2], dtype=np.intp), 8, out, None, 2)
    with pytest.raises(ValueError, match="rows and local"):
        _chunk.take_into(data, np.array([1, 2], dtype=np.intp), 8, out, np.array([0], dtype=np.intp))
    with pytest.raises(ValueError, match="C-contiguous"):
        _chunk.take_into(data, np.array([1], dtype=np.intp), 8, np.empty(6, dtype="i8")[::2])
    with pytest.raises(ValueError, match="typesize"):
        _chunk.take_into(data, np.array([1], dtype=np.intp), 4, out)


def test_take_into_reports_a_damaged_block():
    values = np.random.default_rng(0).standard_normal(50_000)
    data = bytearray(_chunk_of(values).getdata())
    data[-200:] = bytes(200)        # the last block's stream is garbage now
    out = np.empty(2)
    with pytest.raises(ChunkError):
        _chunk.take_into(bytes(data), np.array([0, 49_999], dtype=np.intp), 8, out, check=True, where="t")


@pytest.mark.parametrize("tail", [(), (3,)])
def test_fancy_index_equals_numpy_in_every_layout(layout, tail):
    rng = np.random.default_rng(5)
    n = 70_003
    a = rng.standard_normal((n,) + tail)
    c = blzarr.carray(a, chunklen=8000, **layout)
    keys = [np.sort(rng.choice(n, 3000, replace=False)),        # sorted, many chunks, leftover too
            rng.integers(-n, n, 2500),                          # unsorted, negative, duplicates
            np.array([n - 1, 0, n - 1, 5]), np.array([], dtype=int), [3, 3, 3],
            rng.random(n) < 0.01]                               # a boolean mask
    for key in keys:
        assert np.array_equal(c[key], a[key])
    if layout.on_disk:
        c.flush()
        r = blzarr.open(layout["rootdir"], mode="r")
        for key in keys:
            assert np.array_equal(r[key], a[key])


def test_fancy_index_of_a_structured_carray():
    a = np.zeros(20_000, dtype=[("x", "i4"), ("y", "f8")])
    a["x"] = np.arange(len(a))
    a["y"] = a["x"] * 0.25
    c = blzarr.carray(a, chunklen=3000)
    idx = np.random.default_rng(1).integers(0, len(a), 500)
    assert np.array_equal(c[idx], a[idx])
