"""NumPy keys on multidimensional carrays (`a[:, 0]`, `a[..., 1:3]`, `a[idx, 2]`, `a[i:j, ::2]`): the
same values, shape and dtype as NumPy, read a few chunks of rows at a time rather than through a[:]."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blzarr
from blzarr import _chunk
from blzarr.errors import ChunkError
from helpers import examples


def sub_key(size):
    """One index for an axis of `size`: int, slice, int list or boolean mask."""
    ints = st.integers(-size, size - 1)
    sl = st.builds(slice, st.none() | st.integers(-size - 2, size + 2), st.none() | st.integers(-size - 2, size + 2),
                   st.none() | st.integers(-4, 4).filter(bool))
    lists = st.lists(ints, min_size=1, max_size=4)
    masks = st.lists(st.booleans(), min_size=size, max_size=size).map(np.array)
    return ints | sl | lists | masks


@st.composite
def nd_key(draw, shape):
    n = shape[0]
    first = draw(st.sampled_from(["slice", "int", "list", "ellipsis"]))
    if first == "slice":
        k0 = draw(st.builds(slice, st.none() | st.integers(-n - 3, n + 3), st.none() | st.integers(-n - 3, n + 3),
                            st.none() | st.integers(-9, 9).filter(bool)))
    elif first == "int":
        k0 = draw(st.integers(-n, n - 1))
    elif first == "list":
        k0 = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=6))
    else:
        k0 = Ellipsis
    rest = [draw(sub_key(s)) for s in shape[1:]]
    rest = rest[:draw(st.integers(1, len(rest)))]
    if first == "ellipsis":
        return (Ellipsis,) + tuple(rest[-1:])
    if draw(st.booleans()) and len(rest) < len(shape) - 1:
        rest.append(Ellipsis)
    return (k0,) + tuple(rest)


@settings(max_examples=examples(80), deadline=None)
@given(data=st.data(), atom=st.sampled_from([(3,), (4, 2), (5,), (2, 3, 2)]), n=st.integers(1, 3000),
       chunklen=st.sampled_from([7, 100, 1000]), dtype=st.sampled_from(["f8", "i2", "u1"]))
def test_nd_keys_equal_numpy(layout, data, atom, n, chunklen, dtype):
    ref = (np.arange(n * int(np.prod(atom))) % 251).astype(dtype).reshape((n,) + atom)
    c = blzarr.carray(ref, chunklen=chunklen, mode="w", **layout)
    if layout.on_disk:
        c.flush()
        c = blzarr.open(layout["rootdir"], mode="r")
    key = data.draw(nd_key(ref.shape))
    try:
        expect = ref[key]
    except IndexError:
        with pytest.raises(IndexError):
            c[key]
        return
    got = c[key]
    assert np.shape(got) == expect.shape and np.asarray(got).dtype == expect.dtype
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("key", [(slice(None), 0), (Ellipsis, 3), (slice(10, None, 3), slice(None, None, 5))])
def test_column_of_an_on_disk_carray_reads_chunk_by_chunk(tmp_path, key):
    # 16 MB of data; a column is 320 KB: the read must not hold anything near the whole
    ref = np.arange(40_000 * 50, dtype="f8").reshape(40_000, 50)
    blzarr.carray(ref, chunklen=500, rootdir=str(tmp_path / "c"), mode="w").flush()
    c = blzarr.open(str(tmp_path / "c"), mode="r")
    c.free_cachemem()
    tracemalloc.start()
    try:
        got = c[key]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, ref[key])
    assert peak < ref.nbytes // 4, peak


def test_two_ellipses_are_an_error():
    c = blzarr.carray(np.zeros((10, 3)))
    with pytest.raises(IndexError, match="single ellipsis"):
        c[..., ...]


@pytest.mark.parametrize("key", [
    (0, slice(None, None, 2), [0, 0]),            # hypothesis found: int and list separated by a slice
    (0, slice(None), np.array([False, False])),   # hypothesis found: int and an all-False mask
    (-1, slice(1, 3), [1]),
    (2, [0, 3], 1),                                # adjacent advanced indices keep their place
    (1, [1, 2], [0, 1]),
])
def test_integer_beside_index_arrays_broadcasts_as_numpy(key):
    ref = np.arange(5 * 4 * 2, dtype="f8").reshape(5, 4, 2)
    c = blzarr.carray(ref, chunklen=2)
    got, expect = c[key], ref[key]
    assert np.shape(got) == expect.shape
    np.testing.assert_array_equal(got, expect)


COLUMN_KEYS = [np.s_[:, 0], np.s_[:, 5], np.s_[:, -1], np.s_[:, 2:6], np.s_[:, 7:], np.s_[1234:9000, 3],
               np.s_[..., 4], np.s_[3:, 0:1], np.s_[:, ::1], np.s_[:5, 6]]


@pytest.mark.parametrize("cname", ["lz4", "blosclz", "zstd"])
@pytest.mark.parametrize("nthreads", [1, 2])
def test_columns_of_rows_of_8_values_equal_numpy(layout, cname, nthreads):
    # rows of 8 float64: LZ4 chunks are read block by block, only the wanted bytes taken out of each
    # (1000 rows of 64 bytes: 3 blocks of 16 KB and a short one; the last chunk short too)
    rng = np.random.default_rng(5)
    ref = np.cumsum(rng.standard_normal((10_321, 8)), axis=0)
    ref[:700, 3] = rng.integers(0, 2**63, 700).view("f8")           # a block that does not compress
    c = blzarr.carray(ref, chunklen=1000, cparams=blzarr.cparams(cname=cname), mode="w", **layout)
    if layout.on_disk:
        c.flush()
        c = blzarr.open(layout["rootdir"], mode="r")
    old = blzarr.set_nthreads(nthreads)
    try:
        for key in COLUMN_KEYS:
            got = c[key]
            assert got.shape == ref[key].shape and got.dtype == ref[key].dtype and got.flags.c_contiguous
            np.testing.assert_array_equal(got, ref[key])
    finally:
        blzarr.set_nthreads(old)


@pytest.mark.parametrize("atom,dtype", [((4,), "i8"), ((16,), "f8"), ((3,), "f8"), ((2, 4), "u8"), ((8,), "f4")])
def test_columns_of_other_rows_equal_numpy(layout, atom, dtype):
    ref = (np.arange(7_777 * int(np.prod(atom))) * 3 % 1009).astype(dtype).reshape((7_777,) + atom)
    c = blzarr.carray(ref, chunklen=900, mode="w", **layout)
    if layout.on_disk:
        c.flush()
        c = blzarr.open(layout["rootdir"], mode="r")
    for key in [np.s_[:, 0], np.s_[:, 1], np.s_[:, -1], np.s_[:, 0:2], np.s_[10:7000, 1], np.s_[..., 1]]:
        np.testing.assert_array_equal(c[key], ref[key])


def _damage_chunk(layout, c, n):
    """Flip bytes inside the LZ4 payload of chunk `n`'s second block (its structure still holds)."""
    if layout.name == "memory":
        good = c._chunks[n]._data
    elif layout.name == "bcolz":
        good = c._chunks[n]._data
        path = c._chunks.layoutdir.chunk_path(n)
    else:
        good = bytes(c._chunks.layoutdir.read_chunk(n))
        path = c._chunks.layoutdir.chunk_path(n)
    data = bytearray(good)
    start = int.from_bytes(data[20:24], "little")
    data[start + 4:start + 105] = b"\xff" * 101       # a literal run longer than the block
    _chunk.validate(bytes(data))
    if layout.name == "memory":
        c._chunks[n]._data = bytes(data)
        return
    with open(path, "r+b") as f:
        whole = f.read()
        assert whole.count(good) == 1
        f.seek(whole.index(good))
        f.write(bytes(data))


def test_a_damaged_lz4_block_in_a_column_read_is_a_chunk_error_naming_it(layout):
    ref = np.cumsum(np.random.default_rng(2).standard_normal((8_000, 8)), axis=0)
    kw = dict(layout)
    if layout.name == "blz":
        kw["checksum"] = None       # no checksum to catch it first: the decoder must
    c = blzarr.carray(ref, chunklen=1000, mode="w", **kw)
    if layout.on_disk:
        c.flush()
        c = blzarr.open(layout["rootdir"], mode="r")
    _damage_chunk(layout, c, 3)
    if layout.on_disk:
        c = blzarr.open(layout["rootdir"], mode="r")
    with pytest.raises(ChunkError, match="chunk 3|3.blp|__3"):
        c[:, 1]
    np.testing.assert_array_equal(c[:2000, 1], ref[:2000, 1])
