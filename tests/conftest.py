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
