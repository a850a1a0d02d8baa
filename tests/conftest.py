import os

import pytest
from hypothesis import HealthCheck, settings

from helpers import SWEEP_BASE

# Hypothesis examples per test: few in the default run (pyproject's addopts deselect the slow tests), more
# in a run that includes the slow tests (CI's `pytest -m slow`), where the property tests run again as
# sweeps.  A test that asks for its own count asks it through helpers.examples(n), n being its count in
# a full sweep (SWEEP_BASE examples by default).  The default run takes a quarter of a full sweep; the
# slow run half of one, which keeps CI within its time (BLZARR_HYPOTHESIS_EXAMPLES=60 sweeps in full,
# larger counts further).
SWEEP_EXAMPLES = int(os.environ.get("BLZARR_HYPOTHESIS_EXAMPLES", str(SWEEP_BASE // 2)))
QUICK_FRACTION = 4          # the default run's counts are a quarter of a full sweep's
_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("sweep", max_examples=SWEEP_EXAMPLES, **_COMMON)
settings.register_profile("quick", max_examples=max(1, SWEEP_BASE // QUICK_FRACTION), **_COMMON)


def _runs_slow_tests(config):
    """Whether the slow tests are selected (`-m slow`, `-m ""`...), not deselected (`-m "not slow"`)."""
    return "not slow" not in (config.option.markexpr or "")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: sweeps, kill and concurrency tests that run for seconds (run by CI's second step, "
                   "`python -m pytest -q -m slow tests`; the default run deselects them)")
    settings.load_profile("sweep" if _runs_slow_tests(config) else "quick")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """In a run of the slow tests, the property (hypothesis) tests are sweeps too: marked slow there so
    that `-m slow` runs them again with the sweep's counts."""
    if _runs_slow_tests(config):
        for item in items:
            if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
                item.add_marker(pytest.mark.slow)


class Layout(dict):
    """Keyword arguments that put a new carray/ctable in one layout; `.name` says which."""

    def __init__(self, name, kwargs):
        super().__init__(kwargs)
        self.name = name

    @property
    def on_disk(self):
        return self.name != "memory"


# the bcolz layout runs in the slow set only: the default run covers it through the interoperability
# tests (tests/test_bcolz_interop.py, test_fixtures.py, test_apps.py), which compare it with the real bcolz
LAYOUTS = ["memory", pytest.param("bcolz", marks=pytest.mark.slow), "blz"]


@pytest.fixture(params=LAYOUTS)
def layout(request, tmp_path):
    """A new object in memory, in the bcolz 1.x layout (slow set) or in the BLZ layout (the default)."""
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
    """The crash simulator's count of states checked (tests/test_crashsim.py): one line, or one per
    workload with -v."""
    import crashsim
    if not crashsim.REPORT:
        return
    if terminalreporter.verbosity > 0:
        for line in crashsim.REPORT:
            terminalreporter.write_line(line)
        return
    states = sum(int(line.split("; ")[1].split()[0]) for line in crashsim.REPORT)
    terminalreporter.write_line(f"crash states: {len(crashsim.REPORT)} workloads, {states} distinct "
                                "states checked (-v lists each workload)")
