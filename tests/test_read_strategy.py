"""A BLZ directory reads its superchunk files the way its byte store's declared capabilities allow,
not by the store's type: through OS descriptors where the store's handles are descriptors, with
ranged requests elsewhere: two strategy objects of one interface (`storage.blz.local.FileReads`,
`storage.blz.remote.RangedReads`).  Both read the same bytes and raise the same errors for damage; no
subclass of the directory overrides its reads."""

import numpy as np
import pytest

import blzarr
from blzarr.errors import ChunkError, FormatError
from blzarr.storage.blz.directory import BlzDir
from blzarr.storage.blz.local import FileReads
from blzarr.storage.blz.remote import RangedReads
from blzarr.storage.bytestore import LocalStore
from blzarr.storage.layouts import open_dir

from helpers import flip_byte


class RequestsOnly(LocalStore):
    """A local directory declaring what object storage declares: no descriptors, no in-place writes."""

    descriptors = False
    in_place_writes = False


def _make(root, n=100_000):
    x = (np.arange(n, dtype="i8") * 7919) % 1_000_003
    blzarr.carray(x, rootdir=root, mode="w", chunklen=1000, superchunklen=8, format="blz").flush()
    return x


def test_the_read_strategy_follows_the_declared_capability(tmp_path):
    root = str(tmp_path / "a")
    x = _make(root)
    local = open_dir(root, "r")
    assert type(local._reads) is FileReads
    store = RequestsOnly(root)
    ranged = open_dir(root, "r", store)
    assert type(ranged._reads) is RangedReads
    assert ranged.nchunks == local.nchunks == 100
    for i in (0, 7, 8, 51, 99):
        assert bytes(ranged.read_chunk(i, 8000)) == bytes(local.read_chunk(i, 8000))
        assert ranged.chunk_cbytes(i) == local.chunk_cbytes(i)
        out = np.zeros(10, "i8")
        ranged.read_range(i, 8 * 300, 80, out)
        np.testing.assert_array_equal(out, x[i * 1000 + 300:i * 1000 + 310])
        whole = ranged.decode_chunk_into(i, np.empty(1000, "i8"), 8000)
        np.testing.assert_array_equal(whole, x[i * 1000:(i + 1) * 1000])
    # the many-chunk path pins descriptors: only the local directory takes it
    out = np.empty(3000, "i8")
    assert ranged.decode_whole([4, 5, 6], out, [0, 8000, 16000], 8000) is False
    assert local.decode_whole([4, 5, 6], out, [0, 8000, 16000], 8000) is True
    np.testing.assert_array_equal(out, x[4000:7000])


def test_ranged_reads_fetch_ahead_in_few_requests(tmp_path):
    root = str(tmp_path / "a")
    x = _make(root)
    store = RequestsOnly(root)
    d = open_dir(root, "r", store)
    before = store.stats["get"]
    assert d.prefetch(range(100)) > 0
    fetched = store.stats["get"] - before
    assert 0 < fetched <= 13                    # 13 files, each whole or in one run of slots
    got = np.concatenate([d.decode_chunk_into(i, np.empty(1000, "i8"), 8000) for i in range(100)])
    np.testing.assert_array_equal(got, x)
    assert store.stats["get"] - before == fetched   # every chunk came from what was fetched ahead
    assert open_dir(root, "r").prefetch(range(100)) == 0    # descriptors: nothing to fetch ahead


def test_both_strategies_name_a_damaged_chunk(tmp_path):
    root = str(tmp_path / "a")
    _make(root)
    local = open_dir(root, "r")
    f = local._file(2)
    off = int(local._full_table(f)[3])          # chunk 11: file 2, slot 3
    flip_byte(f"{root}/data/__2__.bin", off + 40)
    for d in (open_dir(root, "r"), open_dir(root, "r", RequestsOnly(root))):
        with pytest.raises((ChunkError, FormatError), match=r"chunk 11|__2__\.bin"):
            d.read_chunk(11, 8000)
        assert bytes(d.read_chunk(12, 8000))    # the others stay readable


def test_no_subclass_of_the_directory_overrides_its_reads():
    assert BlzDir.__subclasses__() == []


def test_both_strategies_have_one_interface():
    """Every method the directory calls on its strategy exists on both, with the same parameters, so
    the directory never asks which one it holds."""
    import inspect

    def interface(cls):
        return {name: list(inspect.signature(fn).parameters)
                for name, fn in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}
    files, ranged = interface(FileReads), interface(RangedReads)
    assert set(files) <= set(ranged)
    for name, params in files.items():
        assert ranged[name] == params, name
        assert params[:2] == ["self", "d"], name       # each takes the directory it reads for
    # RangedReads' own extras are its object-storage helpers, which the directory does not call
    assert set(ranged) - set(files) == {"load", "load_many"}
