import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=int(os.environ.get("BLZARR_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("ci")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: kill and concurrency tests that fork processes and run for seconds (kept in CI; "
                   "deselect with -m 'not slow' while developing)")


class Layout(dict):
    """Keyword arguments that put a new carray/ctable in one layout; `.name` says which."""

    def __init__(self, name, kwargs):
        super().__init__(kwargs)
        self.name = name

    @property
    def on_disk(self):
        return self.name != "memory"


LAYOUTS = ["memory", "bcolz", "blz"]


@pytest.fixture(params=LAYOUTS)
def layout(request, tmp_path):
    """A new object in memory, in the bcolz 1.x layout or in the BLZ layout (the default)."""
    if request.param == "memory":
        return Layout("memory", {})
    return Layout(request.param, {"rootdir": str(tmp_path / "obj"), "format": request.param})


@pytest.fixture
def bcolz():
    """The real bcolz, for the tests that compare with it (skipped where it is not installed)."""
    return pytest.importorskip("bcolz")


@pytest.fixture(scope="session")
def moto_server():
    """moto's S3 server in a subprocess, started once per test session (skipped without moto/s3fs)."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from object_store import MotoServer
    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture
def s3(moto_server):
    """A new, empty bucket on the local S3 server: (its s3:// URL, storage_options)."""
    import uuid
    import s3fs
    opts = moto_server.storage_options
    bucket = "b" + uuid.uuid4().hex[:12]
    s3fs.S3FileSystem(**opts).mkdir(bucket)
    return f"s3://{bucket}", opts


@pytest.fixture(scope="session")
def http_root(tmp_path_factory):
    """A plain HTTP server with Range support serving a directory: (its directory, its URL, server)."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from object_store import RangeServer
    root = tmp_path_factory.mktemp("http")
    server = RangeServer(str(root))
    yield root, server.url, server.httpd
    server.stop()


def pytest_terminal_summary(terminalreporter):
    """The crash simulator's count of states checked per workload (tests/test_crashsim.py)."""
    import crashsim
    for line in crashsim.REPORT:
        terminalreporter.write_line(line)
