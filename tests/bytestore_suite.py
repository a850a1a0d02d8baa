"""`ByteStoreTests`: the behaviour every byte store (`blzarr.storage.bytestore.ByteStore`) must have,
written once against the interface and its declared capabilities.  A store's test class subclasses it
and gives the `store` fixture (a new, empty store) and, where it can, the `failing_writes` fixture (a
context manager inside which the store's writes fail); tests/test_bytestores.py has one class per
store.  Not collected by itself (the name does not start with Test)."""

import json
import os

import pytest

from blzarr.errors import ConcurrentWriterError, FormatError, MissingError, StorageError
from blzarr.storage.bytestore import ByteStore, LockedGuard, WriterGuard

CAPABILITIES = ("remote", "descriptors", "in_place_writes", "has_dirs", "conditional", "http")
BLOB = bytes(range(256)) * 40          # 10240 bytes, every byte value, no two windows alike


class ByteStoreTests:

    @pytest.fixture
    def store(self):
        raise NotImplementedError("a store's test class gives its own `store` fixture")

    @pytest.fixture
    def failing_writes(self):
        """A context manager inside which every write of the store fails (None: cannot inject)."""
        return None

    # ---------------------------------------------------------------------------- the interface
    def test_is_a_byte_store_with_declared_capabilities(self, store):
        assert isinstance(store, ByteStore)
        for cap in CAPABILITIES:
            assert isinstance(getattr(store, cap), bool), cap
        assert not (store.remote and store.has_dirs)
        assert not (store.remote and store.in_place_writes)

    def test_missing_object(self, store):
        assert not store.exists("meta/x") and store.version("meta/x") is None
        with pytest.raises(FileNotFoundError) as e:
            store.get("meta/x")
        assert isinstance(e.value, MissingError) and "meta/x" in str(e.value)
        with pytest.raises(FileNotFoundError):
            store.get_range("meta/x", 0, 10)
        assert store.get_many(["meta/x"]) == {"meta/x": None}
        store.delete("meta/x")                                   # nothing to do
        if not store.remote:                    # (object storage deletes without asking first)
            with pytest.raises(FileNotFoundError):
                store.delete("meta/x", missing_ok=False)

    def test_put_then_get(self, store):
        tag = store.put("data/__1__.bin", BLOB)
        assert tag is None or tag == store.version("data/__1__.bin")
        store.put("meta/empty", b"")
        store.put("meta/view", memoryview(BLOB)[:7])
        assert store.get("data/__1__.bin") == BLOB and store.get("meta/empty") == b""
        assert store.get("meta/view") == BLOB[:7]
        assert store.size("data/__1__.bin") == len(BLOB) and store.size("meta/empty") == 0
        assert store.exists("data/__1__.bin") and store.exists("meta/empty")
        assert store.get_many(["meta/view", "meta/nope", "meta/empty"]) == \
            {"meta/view": BLOB[:7], "meta/nope": None, "meta/empty": b""}
        assert store.stats["put"] == 3 and store.stats["put_bytes"] == len(BLOB) + 7
        assert store.stats["get"] >= 3

    def test_ranges(self, store):
        store.put("a", BLOB)
        store.put("b", b"0123456789")
        for start, end in ((0, 1), (3, 4000), (10000, 10240), (256, 512), (5, 5), (7, 3)):
            assert store.get_range("a", start, end) == BLOB[start:max(start, end)]
        try:                        # past the end: the bytes there are, or an error naming the object
            assert store.get_range("b", 8, 100) == b"89"
        except FormatError as e:
            assert "truncated" in str(e) and store.where("b") in str(e)
        reqs = [("b", 2, 5), ("a", 1000, 1010), ("b", 0, 1), ("a", 0, 10240)]
        assert store.get_ranges(reqs) == [b"234", BLOB[1000:1010], b"0", BLOB]
        before = store.stats["get_bytes"]
        store.get_range("a", 100, 110)
        assert store.stats["get_bytes"] - before == 10      # only the bytes asked for

    def test_put_atomic_replaces_whole(self, store):
        store.put_atomic("meta/sizes", BLOB)
        store.put_atomic("meta/sizes", b"short")
        assert store.get("meta/sizes") == b"short" and store.size("meta/sizes") == 5

    def test_list(self, store):
        store.put("meta/sizes", b"{}")
        store.put("meta/storage", b"{ }")
        store.put("data/__0__.bin", BLOB)
        store.put("data/deeper/x", b"x")
        assert store.list("") == {"meta": None, "data": None}
        etags = {}
        assert store.list("meta", etags=etags) == {"sizes": 2, "storage": 3}
        for name, tag in etags.items():                    # where the listing tells versions
            assert tag == store.version(f"meta/{name}")
        assert store.list("data") == {"__0__.bin": len(BLOB), "deeper": None}
        assert store.isdir("data") and store.isdir("data/deeper") and not store.isdir("meta/sizes")
        assert store.list("nothing") == {}
        if store.has_dirs:
            with pytest.raises(FileNotFoundError):
                store.list("nothing", missing_ok=False)
        else:
            assert store.list("nothing", missing_ok=False) == {}
        store.delete("meta/sizes")
        assert store.list("meta") == {"storage": 3}

    def test_version_changes_when_replaced(self, store):
        store.put_atomic("meta/sizes", b"one")
        v1 = store.version("meta/sizes")
        assert v1 is not None and store.version("meta/sizes") == v1
        store.put_atomic("meta/sizes", b"three")
        v2 = store.version("meta/sizes")
        assert v2 is not None and v2 != v1 and store.version("meta/sizes") == v2
        store.delete("meta/sizes")
        assert store.version("meta/sizes") is None

    def test_child(self, store):
        col = store.child("col")
        col.put("meta/sizes", b"7")
        assert store.get("col/meta/sizes") == b"7" and store.list("col") == {"meta": None}
        assert col.where("meta/sizes") == store.where("col/meta/sizes")
        assert col.child("meta").get("sizes") == b"7"
        col.remove_all()
        assert not store.exists("col/meta/sizes") and store.list("col") == {}

    def test_remove_all(self, store):
        for k in ("meta/sizes", "data/__0__.bin", "data/__1__.bin"):
            store.put(k, b"x")
        store.remove_all()
        assert store.list("") == {} and not store.exists("data/__0__.bin")
        store.put("meta/sizes", b"again")                  # the store is usable after
        assert store.get("meta/sizes") == b"again"

    def test_read_handles(self, store):
        store.put("data/__1__.bin", BLOB)
        h = store.open("data/__1__.bin", "r")
        try:
            assert bytes(store.pread(h, 10, 250)) == BLOB[250:260]
            assert bytes(store.pread(h, 4, len(BLOB) - 4)) == BLOB[-4:]
            assert store.state(h)[1] == len(BLOB)
            if store.descriptors:
                # the handle is an OS descriptor: the Cython readers pread it directly
                assert isinstance(h, int) and os.pread(h, 10, 250) == BLOB[250:260]
        finally:
            store.close(h)
        with pytest.raises(FileNotFoundError):
            store.open("data/__2__.bin", "r")

    def test_in_place_writes_or_a_clear_refusal(self, store):
        if not store.in_place_writes:
            store.put("f", b"abc")
            with pytest.raises(StorageError, match="written whole"):
                store.open("f", "rw")
            return
        store.create_dirs(["data"])
        h = store.open("data/f", "new")
        try:
            store.pwrite(h, b"hello", 0)
            store.pwritev(h, [b" ", b"world"], 5)
            s1 = store.state(h)
            store.truncate(h, 8)
            store.datasync(h)
            store.start_writeback(h, 0, 8)
            assert bytes(store.pread(h, 8, 0)) == b"hello wo" and store.state(h) != s1
        finally:
            store.close(h)
        assert store.get("data/f") == b"hello wo"
        with pytest.raises(FileExistsError):
            store.open("data/f", "new")

    def test_conditional_puts(self, store):
        if not store.conditional:
            pytest.skip("the store has no conditional puts")
        v1 = store.put("meta/sizes", b"1", if_none_match=True)
        with pytest.raises(ConcurrentWriterError, match="meta/sizes"):
            store.put("meta/sizes", b"2", if_none_match=True)
        v2 = store.put("meta/sizes", b"2", if_match=v1)
        assert v2 != v1 and store.get("meta/sizes") == b"2"
        with pytest.raises(ConcurrentWriterError):
            store.put("meta/sizes", b"3", if_match=v1)             # another writer's version is there
        assert store.get("meta/sizes") == b"2"

    def test_writer_guard(self, store):
        store.create_dirs(["meta"])
        guard = store.writer_guard("meta/sizes")
        assert isinstance(guard, WriterGuard if store.remote else LockedGuard)
        guard.created()
        guard.commit({"shape": [0]})
        assert json.loads(store.get("meta/sizes")) == {"shape": [0]}
        if store.remote:
            store.put("meta/sizes", b"{}")                   # another writer commits
            with pytest.raises(ConcurrentWriterError, match="another writer"):
                guard.check()

    def test_json(self, store):
        store.create_dirs(["meta"])
        store.write_json("meta/storage", {"a": [1, 2]})
        store.commit_json("meta/sizes", {"shape": [3]})
        store.commit_json("meta/sizes", {"shape": [30]})
        assert store.read_json("meta/storage", "storage") == {"a": [1, 2]}
        assert store.read_json("meta/sizes", "sizes") == {"shape": [30]}
        store.put("meta/bad", b"{not json")
        with pytest.raises(FormatError, match="meta.bad"):
            store.read_json("meta/bad", "storage")
        with pytest.raises(StorageError, match="does not exist"):
            store.read_json("meta/none", "storage")

    # ---------------------------------------------------------------------------- failures
    def test_a_failed_write_keeps_the_old_object_and_a_retry_works(self, store, failing_writes):
        if failing_writes is None:
            pytest.skip("no fault injection for this store")
        store.put_atomic("meta/sizes", b"old")
        with failing_writes():
            with pytest.raises(OSError):
                store.put_atomic("meta/sizes", BLOB)
        assert store.get("meta/sizes") == b"old"
        store.put_atomic("meta/sizes", BLOB)
        assert store.get("meta/sizes") == BLOB
