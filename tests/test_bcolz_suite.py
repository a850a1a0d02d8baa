"""bcolz's own test suite, from the installed bcolz-zipline, run against blzarr.

The test modules of ``bcolz.tests`` are copied to a temporary folder as a package of another name
(``bcolz_tests``: bcolz's name is blzarr's there) and run by pytest in a subprocess, with a conftest
that puts blzarr in ``sys.modules['bcolz']`` and loads bcolz's two Python 2 helper modules
(``bcolz.py2help``, ``bcolz.py2help_tests``) from the installed files: blzarr does not ship them
(tests/test_dropin.py: they are no API).  Every bcolz test must pass except the ones in
EXPECTED_FAILURES, each a deliberate difference that docs/guide/migrating.rst lists; a test outside
the list that fails, or one inside it that passes, fails this test.

The suite runs in one process, so in a fixed order: some bcolz tests leave changed defaults behind
(bloscFiltersTest's tearDown does not restore them) and a later test sees them.  Data is not synced
(``BLZARR_FSYNC=0``): durability is tested elsewhere, and a run of the disk tests that syncs is slow.
"""

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import blzarr

pytestmark = pytest.mark.slow

# bcolz test id (module::class::test) -> why blzarr fails it on purpose
_NEGATIVE_STEP = ("negative-step slices work as in NumPy; bcolz raises NotImplementedError "
                  "(migrating.rst: indexing follows NumPy)")
_FLOAT_FANCY = ("a list of floats as an index raises IndexError as in NumPy; bcolz truncated the floats "
                "to integers (migrating.rst: indexing follows NumPy)")
_WHERE_ND = ("where() with a multidimensional boolean carray gives the values NumPy's b[a] gives; bcolz "
             "raises NotImplementedError (migrating.rst: indexing follows NumPy)")
_DISK_VIEW = ("view() of an on-disk carray is read-only, so its append raises ReadOnlyError: the view "
              "shares the directory with the original (migrating.rst)")
EXPECTED_FAILURES = {
    "test_carray.py::getitemMemoryTest::test05": _NEGATIVE_STEP,
    "test_carray.py::getitemDiskTest::test05": _NEGATIVE_STEP,
    "test_carray.py::setitemMemoryTest::test05": _NEGATIVE_STEP,
    "test_carray.py::setitemDiskTest::test05": _NEGATIVE_STEP,
    "test_carray.py::fancy_indexing_getitemTest::test03": _FLOAT_FANCY,
    "test_ctable.py::fancy_indexing_getitemTest::test03": _FLOAT_FANCY,
    "test_queries.py::small_listTest::test01b": _WHERE_ND,
    "test_queries.py::big_listTest::test01b": _WHERE_ND,
    "test_queries.py::small_listDiskTest::test01b": _WHERE_ND,
    "test_queries.py::big_listDiskTest::test01b": _WHERE_ND,
    "test_carray.py::small_viewDiskTest::test01": _DISK_VIEW,
    "test_carray.py::large_viewDiskTest::test01": _DISK_VIEW,
    "test_carray.py::reprDiskTest::test_repr_disk_array_read":
        "carray([], rootdir=d, mode='r') raises OSError without creating d: mode 'r' never writes "
        "(bcolz creates d; migrating.rst)",
    "test_ctable.py::persistentTest::test00b":
        "open(d, mode='w') of an existing ctable empties it, as it empties a carray in both libraries; "
        "bcolz raises ValueError for a ctable (migrating.rst)",
    "test_ctable.py::persistentTest::test01d":
        "ctable(rootdir=missing, mode='r') raises StorageError, an OSError; bcolz raises KeyError "
        "(migrating.rst: errors)",
    "test_ctable.py::copyMemoryTest::test01":
        "run after bloscFiltersTest, which leaves blosclz the default codec, it expects a copy at clevel 9 "
        "to be smaller than the clevel-5 original; blzarr's Blosc blocks do not grow with clevel as "
        "C-Blosc's do, and this copy comes out a few bytes larger (migrating.rst: compressed sizes)",
}

# skips of bcolz's own making (the same in a run against bcolz): a new reason, e.g. blzarr reporting
# numexpr, dask or pandas missing, would leave bcolz tests unrun
ALLOWED_SKIPS = ("--heavy", "not working in Python 3")

_SHIM = '''\
import importlib.util
import json
import os
import sys

import blzarr

# bcolz's name is blzarr's; its Python 2 helpers come from the installed bcolz files
sys.modules["bcolz"] = blzarr
for _name in ("py2help", "py2help_tests"):
    _spec = importlib.util.spec_from_file_location(f"bcolz.{_name}", os.path.join(BCOLZ_DIR, f"{_name}.py"))
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    sys.modules[f"bcolz.{_name}"] = _mod


def pytest_sessionfinish(session):
    # which library each test module really ran against
    used = {name: getattr(mod, "bcolz", None).__file__ for name, mod in list(sys.modules.items())
            if name.startswith("bcolz_tests.test_")}
    with open(USED_PATH, "w") as f:
        json.dump(used, f)
'''


def _bcolz_tests_dir():
    spec = importlib.util.find_spec("bcolz")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("bcolz (bcolz-zipline) is not installed")
    bcolz_dir = spec.submodule_search_locations[0]
    tests = os.path.join(bcolz_dir, "tests")
    if not os.path.isdir(tests):
        pytest.skip(f"the installed bcolz has no tests package ({tests})")
    return bcolz_dir, tests


def _outcomes(junit_xml):
    """{test id: (outcome, message)} from pytest's JUnit XML report."""
    out = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        if len(parts) == 3:
            tid = f"{parts[1]}.py::{parts[2]}::{case.get('name')}"
        else:       # a module that failed to import: classname is empty, name is the module
            tid = f"{case.get('name')} (collection)"
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                msg = el.get("message", "")
                break
        out[tid] = (outcome, msg)
    return out


def test_bcolz_own_suite_runs_against_blzarr(tmp_path):
    bcolz_dir, tests = _bcolz_tests_dir()
    modules = sorted(f for f in os.listdir(tests) if f.startswith("test_") and f.endswith(".py"))
    pkg = tmp_path / "bcolz_tests"
    pkg.mkdir()
    # bcolz.tests' __init__ imports its unittest runner (all.py), which pytest does not need
    (pkg / "__init__.py").write_text("")
    for name in modules + ["common.py"]:
        with open(os.path.join(tests, name)) as f:
            (pkg / name).write_text(f.read().replace("bcolz.tests", "bcolz_tests"))
    used_path = str(tmp_path / "used.json")
    (tmp_path / "conftest.py").write_text(f"BCOLZ_DIR = {bcolz_dir!r}\nUSED_PATH = {used_path!r}\n" + _SHIM)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    junit = str(tmp_path / "report.xml")
    root = os.path.dirname(os.path.dirname(os.path.abspath(blzarr.__file__)))
    env = dict(os.environ, BLZARR_FSYNC="0", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), f"--junitxml={junit}", "bcolz_tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode in (0, 1), f"pytest of bcolz's suite did not run through:\n{tail}"

    # it ran against this blzarr, every test module of bcolz collected
    with open(used_path) as f:
        used = json.load(f)
    assert sorted(n.split(".")[-1] + ".py" for n in used) == modules, tail
    assert set(used.values()) == {os.path.abspath(blzarr.__file__)}

    results = _outcomes(junit)
    failed = {t: m for t, (o, m) in results.items() if o == "failed"}
    unexpected = {t: m for t, m in failed.items() if t not in EXPECTED_FAILURES}
    passing = sorted(t for t in EXPECTED_FAILURES if results.get(t, ("",))[0] == "passed")
    missing = sorted(t for t in EXPECTED_FAILURES if t not in results)
    odd_skips = {t: m for t, (o, m) in results.items()
                 if o == "skipped" and not any(r in m for r in ALLOWED_SKIPS)}
    problems = [f"fails against blzarr: {t}: {m[:300]}" for t, m in sorted(unexpected.items())]
    problems += [f"passes now, take it out of EXPECTED_FAILURES (and migrating.rst's difference out if it "
                 f"is gone): {t}" for t in passing]
    problems += [f"listed in EXPECTED_FAILURES, did not run: {t}" for t in missing]
    problems += [f"skipped against blzarr: {t}: {m}" for t, m in sorted(odd_skips.items())]
    assert not problems, "bcolz's own suite against blzarr:\n" + "\n".join(problems)
    # every module ran tests that passed (a module whose classes all skipped would pass unnoticed)
    ran = {t.split("::")[0] for t, (o, _) in results.items() if o == "passed"}
    assert ran == set(modules)
