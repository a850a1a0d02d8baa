"""The Examples in blzarr's docstrings run as doctests, so the documentation cannot drift from the code."""

import doctest
import importlib

import pytest

MODULES = ["blzarr", "blzarr.containers.carray.array", "blzarr.containers.carray.stats", "blzarr.ctable", "blzarr.containers.ctable.read",
           "blzarr.containers.ctable.write", "blzarr.containers.ctable.query", "blzarr.toplevel", "blzarr.chunked_eval",
           "blzarr.runtime.params", "blzarr.attrs", "blzarr.storage.chunk", "blzarr.io.dask", "blzarr.cli", "blzarr.io.pandas_hdf5",
           "blzarr.errors", "blzarr.arrayprint", "blzarr.containers.ctable.groupby"]

# the optional packages some modules' examples need (the test extra installs them all)
NEEDS = {"blzarr.ctable": ("pandas", "pyarrow", "dask"), "blzarr.io.pandas_hdf5": ("pandas",),
         "blzarr.io.dask": ("dask", "pandas")}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    for module in NEEDS.get(name, ()):
        pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)          # examples that write directories write them here
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (see output above)"
    assert result.attempted > 0, f"{name} has no docstring example"
    assert not list(tmp_path.iterdir()), f"the examples of {name} leave files behind: {list(tmp_path.iterdir())}"


def test_public_api_is_documented():
    import blzarr
    missing = [n for n in blzarr.__all__ if not (getattr(blzarr, n).__doc__ or "").strip()
               and callable(getattr(blzarr, n))]
    assert not missing, f"public names without a docstring: {missing}"


def test_hdf5_examples(tmp_path, monkeypatch):
    """The HDF5 examples are marked +SKIP (PyTables may be missing where the docs are read): run them
    anyway when it is installed."""
    pytest.importorskip("tables")
    monkeypatch.chdir(tmp_path)
    mod = importlib.import_module("blzarr.ctable")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in doctest.DocTestFinder().find(mod) if "hdf5" in t.name]
    assert tests
    for t in tests:
        for example in t.examples:
            example.options = {}
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted > 0
    assert not list(tmp_path.iterdir())
