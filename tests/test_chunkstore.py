"""One suite that every chunk store runs (memory, bcolz layout, BLZ): the `ChunkStore` interface
beneath carray, asserted the same way for each, as zarr's StoreTests does for its stores."""

import pickle

import numpy as np
import pytest

import blzarr
from blzarr import cparams
from blzarr.storage.chunk import blosc_typesize, chunk
from blzarr.storage.chunkstore import ChunkStore, MemoryChunks, auto_superchunklen
from blzarr.errors import FormatError, ReadOnlyError
from blzarr.storage.layouts import create_store, open_chunks, open_dir
from helpers import assert_same

ATOM = np.dtype("i8")
CHUNKLEN = 100
OPTS = {"checksum": "crc32", "reserve": 0, "superchunklen": 3, "meta": {}}


def values(k):
    return np.arange(k * CHUNKLEN, (k + 1) * CHUNKLEN, dtype=ATOM) * 3 - 7


def new_chunk(k):
    return chunk(values(k), ATOM, cparams(clevel=5))


class StoreTests:
    """Every test runs over each store kind; `fresh()` makes an empty store, `reopen(s, n)` opens
    what `s` stored again with n full chunks (None for the memory store, which keeps nothing)."""

    kind = None

    @pytest.fixture
    def root(self, tmp_path):
        return str(tmp_path / "store")

    def fresh(self, root):
        if self.kind == "memory":
            return MemoryChunks(chunk_nbytes=CHUNKLEN * ATOM.itemsize)
        opts = OPTS if self.kind == "blz" else dict(OPTS, superchunklen=None)
        s = create_store(root, self.kind, atom=ATOM, chunklen=CHUNKLEN, objects=False, dtype=str(ATOM),
                         atom_shape=(), typesize=blosc_typesize(ATOM), cparams=cparams().to_dict(), opts=opts)
        s.write_meta("storage", {"dtype": str(ATOM), "cparams": cparams().to_dict(), "chunklen": CHUNKLEN})
        return s

    def reopen(self, root, nchunks, nstored=None, mode="a"):
        if self.kind == "memory":
            return None
        d = open_dir(root, mode)
        return open_chunks(d, root, mode, ATOM, CHUNKLEN, nchunks,
                           nchunks if nstored is None else nstored, False)

    def test_is_a_chunk_store_of_its_format(self, root):
        s = self.fresh(root)
        assert isinstance(s, ChunkStore)
        assert s.format == (None if self.kind == "memory" else self.kind)
        assert s.rootdir == (None if self.kind == "memory" else root)
        assert len(s) == s.nchunks == 0 and list(s) == []

    def test_append_read_and_rewrite(self, root):
        s = self.fresh(root)
        for k in range(7):
            s.append(new_chunk(k))
        assert len(s) == 7
        for k in range(7):
            assert_same(np.asarray(s[k]), values(k))
        assert_same(np.asarray(s[-1]), values(6))
        assert [len(c) for c in s[2:5]] == [CHUNKLEN] * 3
        with pytest.raises(IndexError):
            s[7]
        s[3] = new_chunk(10)
        assert_same(np.asarray(s[3]), values(10))
        assert s.cbytes == sum(c.cbytes for c in s) > 0
        assert_same(np.asarray(s.load(3, CHUNKLEN * ATOM.itemsize)) if self.kind != "memory"
                    else np.asarray(s[3]), values(10))
        s.sync()        # what a flush calls: BLZ switches the rewrites' offsets entries there
        again = self.reopen(root, 7)
        if again is not None:
            assert [np.asarray(c).tolist() for c in again] == [np.asarray(c).tolist() for c in s]

    def test_truncate_and_set_nchunks(self, root):
        s = self.fresh(root)
        for k in range(6):
            s.append(new_chunk(k))
        s.truncate(4)
        assert len(s) == 4
        s.append(new_chunk(9))
        assert_same(np.asarray(s[4]), values(9))
        s.set_nchunks(2)
        assert len(s) == 2 and [np.asarray(c)[0] for c in s] == [values(0)[0], values(1)[0]]
        again = self.reopen(root, 2)
        if again is not None:
            assert len(again) == 2

    def test_short_last_chunk_is_stored_past_the_full_ones(self, root):
        s = self.fresh(root)
        s.append(new_chunk(0))
        short = chunk(values(1)[:30], ATOM)
        s.put_last(1, short.getdata())
        assert len(s) == 1
        if self.kind == "memory":
            assert s.stored_last(1) is None
            return
        assert_same(np.asarray(s.load(1, -1)), values(1)[:30])
        again = self.reopen(root, 1, nstored=2)
        assert_same(np.asarray(again.load(1, -1)), values(1)[:30])
        s.remove_from(1)
        assert s.stored_last(1) is None

    def test_undo_appends_restores_what_was_stored(self, root):
        s = self.fresh(root)
        s.append(new_chunk(0))
        s.put_last(1, chunk(values(1)[:30], ATOM).getdata())
        before = s.stored_last(1)
        s.append(new_chunk(5))
        s.append(new_chunk(6))
        s.undo_appends(1, before)
        assert len(s) == 1
        assert_same(np.asarray(s[0]), values(0))
        if self.kind != "memory":
            assert_same(np.asarray(s.load(1, -1)), values(1)[:30])
            assert len(self.reopen(root, 1, nstored=2)) == 1

    def test_metadata_and_attrs_path(self, root):
        s = self.fresh(root)
        if self.kind == "memory":
            assert s.attrs_path is None and s.meta_path("sizes") is None
            return
        s.write_meta("sizes", {"shape": [0], "nbytes": 0, "cbytes": 0})
        assert s.read_meta("sizes") == {"shape": [0], "nbytes": 0, "cbytes": 0}
        assert s.meta_path("sizes").startswith(root)
        assert s.attrs_path.startswith(root)

    def test_verify_counts_the_chunks(self, root):
        s = self.fresh(root)
        for k in range(4):
            s.append(new_chunk(k))
        assert s.verify(4)["chunks"] == 4

    def test_layout_options_description_and_partitions(self, root):
        s = self.fresh(root)
        if self.kind == "blz":
            assert s.storage_options() == {"checksum": "crc32", "reserve": 0, "superchunklen": 3}
            assert s.describe() == {"superchunklen": 3, "files": 1, "checksum": "crc32", "reserve": 0}
            assert s.partition_chunks() == 3
            assert s.compact() == 0
            assert dict(s.meta.items()) == {} and dict(s.vlmeta.items()) == {}
        else:
            assert s.storage_options() == {} and s.describe() == {}
            assert s.partition_chunks() == auto_superchunklen(CHUNKLEN * ATOM.itemsize) == 1024
            for what in ("compact", "meta", "vlmeta"):
                with pytest.raises(AttributeError, match="needs an on-disk carray in the 'blz' format"):
                    getattr(s, what)() if what == "compact" else getattr(s, what)

    def test_config_is_plain_and_pickles(self, root):
        s = self.fresh(root)
        cfg = s.config() if self.kind != "memory" else ChunkStore.config(s)
        assert pickle.loads(pickle.dumps(cfg)) == cfg
        assert cfg["format"] == s.format and cfg["rootdir"] == s.rootdir

    def test_read_only_refuses_writes(self, root):
        s = self.fresh(root)
        s.append(new_chunk(0))
        r = self.reopen(root, 1, mode="r")
        if r is None:
            return
        with pytest.raises(ReadOnlyError):
            r.append(new_chunk(1))
        with pytest.raises(ReadOnlyError):
            r[0] = new_chunk(1)
        assert_same(np.asarray(r[0]), values(0))
        r.close()
        s.close()

    def filled(self, root, n=5):
        """A store of `n` full chunks, and the same store opened again read-only (the memory store's
        own, which keeps nothing on disk)."""
        s = self.fresh(root)
        for k in range(n):
            s.append(new_chunk(k))
        s.sync()
        return s, (self.reopen(root, n, mode="r") or s)

    def test_read_pieces_equals_numpy(self, root):
        s, r = self.filled(root)
        want = np.concatenate([values(k) for k in range(5)])
        for start, stop in [(0, 500), (50, 450), (100, 300), (130, 170), (399, 401)]:
            out = np.empty(stop - start, ATOM)
            pieces = []
            for n in range(start // CHUNKLEN, (stop - 1) // CHUNKLEN + 1):
                lo, hi = max(start, n * CHUNKLEN) - n * CHUNKLEN, min(stop, (n + 1) * CHUNKLEN) - n * CHUNKLEN
                off = n * CHUNKLEN + lo - start
                pieces.append((n, lo, hi, out[off:off + hi - lo]))
            assert r.read_pieces(pieces, out, CHUNKLEN, ATOM.itemsize) is out
            assert_same(out, want[start:stop])

    def test_read_block_is_the_block_that_holds_the_atom(self, root):
        s, r = self.filled(root, 2)
        for n, local in [(0, 0), (0, 99), (1, 37)]:
            lo, block, per = r.read_block(n, local, CHUNKLEN, ATOM)
            assert lo <= local < lo + len(block) and lo % per == 0 and len(block) <= per
            assert_same(block, values(n)[lo:lo + len(block)])

    def test_read_rows_packs_the_bytes_asked_for(self, root):
        s, r = self.filled(root, 4)
        ids = [1, 3]
        out = np.empty(2 * CHUNKLEN, "<i4")
        # the upper 4 bytes of every 8-byte value: what a column of a 2-D carray's rows is to them
        assert r.read_rows(ids, out, [0, CHUNKLEN * 4], 8, 4, 4)
        want = np.concatenate([values(k) for k in ids]).astype("<i8").view("<i4")[1::2]
        assert_same(out, want)

    def test_sum_resident_equals_numpy_or_declines(self, root):
        s, r = self.filled(root, 3)
        sums = r.sum_resident(range(3), ATOM)
        if sums is not None:        # (the bcolz layout sums through the carray's blocks instead)
            assert sums.tolist() == [int(values(k).sum()) for k in range(3)]

    def test_unpickle_gives_the_object_or_names_the_damage(self, root):
        objs = MemoryChunks([chunk(np.frombuffer(pickle.dumps(o), "u1"), "u1") for o in ({"a": 1}, [2, "x"])])
        assert objs.unpickle(0) == {"a": 1} and objs.unpickle(1) == [2, "x"]
        bad = MemoryChunks([chunk(np.frombuffer(b"not a pickle", "u1"), "u1", _where="object 7 of a test")])
        with pytest.raises(FormatError, match="cannot unpickle object 7 of a test"):
            bad.unpickle(0)


class TestMemoryStore(StoreTests):
    kind = "memory"


class TestBcolzStore(StoreTests):
    kind = "bcolz"


class TestBlzStore(StoreTests):
    kind = "blz"


def test_the_old_names_of_the_chunk_store_and_byte_store_warn_and_give_the_same_objects(tmp_path):
    a = blzarr.carray(np.arange(10), rootdir=str(tmp_path / "a"), mode="w")
    with pytest.warns(DeprecationWarning, match="chunkstore"):
        s = a.store
    assert s is a.chunkstore
    with pytest.warns(DeprecationWarning, match="bytestore"):
        assert s.bytes is s.bytestore is None        # a local directory has no byte store beneath
