"""The byte-store suite (tests/bytestore_suite.py) run over every byte store: a local directory (also
through the crash simulator's recording I/O layer and a disk that fails), the in-memory store, fsspec's
memory:// and fsspec on moto's S3 server; and the abstract base refusing an incomplete store."""

import contextlib
import errno
import os
import uuid

import pytest

from blzarr.errors import StorageError
from blzarr.storage import fileio
from blzarr.storage.bytestore import ByteStore, LocalStore, MemoryStore, open_bytestore

from bytestore_suite import ByteStoreTests


class _FullDisk(fileio.OsIO):
    """Every write writes half its bytes, then fails as a full disk does."""

    def write(self, fd, data):
        super().write(fd, bytes(data)[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def pwrite(self, fd, data, pos, where=None):
        super().pwrite(fd, bytes(data)[:len(data) // 2], pos, where)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class TestLocalStore(ByteStoreTests):

    @pytest.fixture
    def store(self, tmp_path):
        return open_bytestore(str(tmp_path / "root"))

    @pytest.fixture
    def failing_writes(self):
        return lambda: fileio.use(_FullDisk())

    def test_is_local(self, store):
        assert type(store) is LocalStore and store.has_dirs and store.in_place_writes

    def test_a_failed_write_leaves_no_temporary_file(self, store):
        store.put_atomic("meta/sizes", b"old")
        with fileio.use(_FullDisk()), pytest.raises(OSError, match="No space left"):
            store.put_atomic("meta/sizes", b"new bytes")
        assert os.listdir(os.path.join(store.root, "meta")) == ["sizes"]


class TestRecordedLocalStore(TestLocalStore):
    """The local store through the crash simulator's I/O layer, which the crash tests run it under."""

    @pytest.fixture
    def store(self, tmp_path):
        import crashsim
        root = tmp_path / "root"
        root.mkdir()
        with fileio.use(crashsim.Recorder(str(tmp_path))):
            yield open_bytestore(str(root))

    def test_writes_are_recorded(self, store):
        store.put_atomic("meta/sizes", b"1")
        assert fileio.current().log          # the operations went through the recorder


class TestMemoryStore(ByteStoreTests):

    @pytest.fixture
    def store(self):
        return MemoryStore(f"mem{uuid.uuid4().hex[:8]}")

    def test_children_share_objects_but_not_names(self):
        s = MemoryStore("m")
        s.child("a").put("x", b"1")
        s.child("ab").put("x", b"2")
        assert s.child("a").list("") == {"x": 1} and s.get("ab/x") == b"2"


class TestFsspecMemoryStore(ByteStoreTests):

    @pytest.fixture
    def store(self):
        pytest.importorskip("fsspec")
        return open_bytestore(f"memory://bs{uuid.uuid4().hex[:8]}/root")


class TestS3Store(ByteStoreTests):
    """fsspec (s3fs) on moto's S3 server: conditional puts, ETags, retries."""

    @pytest.fixture
    def store(self, s3):
        url, opts = s3
        return open_bytestore(f"{url}/root", opts)

    @pytest.fixture
    def failing_writes(self, store, monkeypatch):
        @contextlib.contextmanager
        def failing():
            def refuse(*args, **kwargs):
                raise ConnectionError("connection reset by peer")
            with monkeypatch.context() as m:
                m.setattr(store.fs, "pipe_file", refuse)
                m.setattr("blzarr.storage.bytestore.RETRY_WAIT", 0.0)
                yield
        return failing

    def test_a_failed_write_names_the_url_and_the_attempts(self, store, failing_writes):
        with failing_writes(), pytest.raises(StorageError, match=r"cannot write 's3://.*/root/k' \(after 3"):
            store.put("k", b"x")


def test_an_incomplete_store_cannot_be_made():
    methods = {n: getattr(MemoryStore, n) for n in ByteStore.__abstractmethods__ if n != "version"}
    partial = type("Partial", (ByteStore,), methods)
    with pytest.raises(TypeError, match="version"):
        partial("x")
    assert type("Whole", (partial,), {"version": lambda self, key: None})("x").version("k") is None
