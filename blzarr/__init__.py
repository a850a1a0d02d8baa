"""blzarr: Blosc-compressed, chunked arrays and tables for NumPy, the maintained successor of bcolz.

``import blzarr as bcolz`` runs code written for bcolz; directories in the bcolz 1.x layout open,
and the ones blzarr writes in that layout (``format='bcolz'``) open in bcolz.  New directories use
the BLZ layout by default: checksummed superchunk files, read lazily (docs/FORMAT.rst).

The main objects are `carray` (a compressed, enlargeable array), `ctable` (a table of carray
columns), the constructors `zeros`, `ones`, `fill`, `arange`, `fromiter`, and `open`, `walk`,
`iterblocks` and `eval` to use what is stored.

Examples
--------
>>> import numpy as np
>>> import blzarr as bcolz
>>> a = bcolz.carray(np.arange(100_000) * 0.5, rootdir="package_example", mode="w")
>>> b = bcolz.open("package_example", mode="r")
>>> b[10], b[-3:].tolist(), float(b.sum())
(5.0, [49998.5, 49999.0, 49999.5], 2499975000.0)
>>> import shutil; shutil.rmtree("package_example")
"""

# the one place the version is written (pyproject.toml reads this literal without importing blzarr)
__version__ = "0.1.0"

import importlib.machinery as _machinery  # noqa: E402
import os as _os  # noqa: E402

import importlib as _importlib  # noqa: E402

try:
    # every compiled module, so that a build missing one fails here with the message below
    for _ext in ("_chunk", "_minmax", "_workpool", "_decode", "_sums", "_rows", "_exprkernel", "_where",
                 "_superchunk", "_groupby"):
        _importlib.import_module("blzarr." + _ext)
except ImportError as _e:
    _here = _os.path.dirname(_os.path.abspath(__file__))
    _built = [f for f in _os.listdir(_here)
              if f.startswith("_chunk.") and f.endswith(tuple(_machinery.EXTENSION_SUFFIXES))]
    if _built:   # the extension is there but does not load (e.g. built for another Python or NumPy)
        raise ImportError(f"blzarr's compiled extension in {_here} cannot be loaded ({_e}); rebuild it "
                          f"with `pip install -e .` in the source tree, or reinstall blzarr",
                          name="blzarr") from None
    raise ImportError(
        f"blzarr is imported from the source folder {_here}, whose compiled extensions are not built "
        f"(and which hides any installed blzarr): build them there with `pip install -e .` in "
        f"{_os.path.dirname(_here)}, or run Python from another directory", name="blzarr") from None

del _machinery, _os, _importlib, _ext


from blzarr.runtime.optional import have as _have  # noqa: E402

#: True when numexpr is installed: expressions then run through it (else NumPy).
numexpr_here = _have("numexpr")
#: True when pandas is installed (``ctable.todataframe`` and ``fromdataframe``).
pandas_here = _have("pandas")
#: True when PyTables is installed (``ctable.tohdf5`` and ``fromhdf5``).
tables_here = _have("tables")
#: True when dask is installed (``to_dask``, ``from_dask``, ``eval(..., vm='dask')``).
dask_here = _have("dask")

# the oldest numexpr and dask that bcolz 1.x supported (bcolz's names)
min_numexpr_version = "2.5.2"
min_dask_version = "0.9.0"

from blzarr.runtime.params import (  # noqa: E402
    BITSHUFFLE, NOSHUFFLE, SHUFFLE, blosc_set_nthreads, cparams, detect_number_of_cores, set_nthreads,
)
# bcolz's module layout: `blzarr.defaults` is the Defaults instance (the module stays importable as
# `blzarr.defaults`), `blzarr.attrs` the module whose class is `blzarr.attrs.attrs`, `blzarr.ctable`
# and `blzarr.carray` the classes, `blzarr.eval` the function of `blzarr.chunked_eval`.
from blzarr.defaults import defaults, defaults_ctx  # noqa: E402
#: The names of the shuffle filters, by their number (bcolz's ``filters``).
filters = {NOSHUFFLE: "noshuffle", SHUFFLE: "shuffle", BITSHUFFLE: "bitshuffle"}

from blzarr.errors import (  # noqa: E402
    BlzarrError, ChecksumError, ChunkError, ConcurrentWriterError, ExistsError, FormatError, MissingError,
    PickleNotAllowedError, ReadOnlyError, StorageError,
)
import blzarr.attrs  # noqa: E402  (the module, as bcolz.attrs)
import blzarr.arrayprint  # noqa: E402,F401
import blzarr.chunked_eval  # noqa: E402,F401
from blzarr.storage.chunk import chunk  # noqa: E402
from blzarr.containers.carray.array import carray  # noqa: E402
# bcolz's module path first, so a later `import blzarr.ctable` finds it loaded and leaves the class
# below as the package's `ctable`
import blzarr.ctable  # noqa: E402,F401
from blzarr.containers.ctable.table import ctable  # noqa: E402
from blzarr.query.chunked_eval import eval, explain  # noqa: E402
from blzarr.query.lazyexpr import LazyExpr, lazyexpr  # noqa: E402
from blzarr.io.dask import from_dask  # noqa: E402
from blzarr.io import pandas_hdf5 as ctable_io  # noqa: E402,F401  (registers ctable's pandas and HDF5 methods)
from blzarr.io import arrow as _io_arrow, parquet as _io_parquet  # noqa: E402,F401  (Arrow, Parquet)
from blzarr.toplevel import (  # noqa: E402
    arange, blosc_compressor_list, blosc_version, fill, fromiter, iterblocks, ones, open, print_versions,
    salvage, walk, zeros,
)
from blzarr.containers.arrayprint import array2string, get_printoptions, set_printoptions  # noqa: E402
import blzarr.carray_ext  # noqa: E402,F401
import blzarr.utils  # noqa: E402,F401

# the number of cores this process may use (bcolz.ncores)
ncores = detect_number_of_cores()
# bcolz's `git describe` of a source checkout: blzarr is installed from a package, so None
git_description = None


from blzarr.storage.locking import LockError  # noqa: E402
from blzarr.storage.blz.directory import MetalayerError  # noqa: E402

__all__ = [
    "BITSHUFFLE", "NOSHUFFLE", "SHUFFLE", "BlzarrError", "ChecksumError", "ChunkError", "ConcurrentWriterError",
    "FormatError", "MissingError",
    "LockError", "MetalayerError", "PickleNotAllowedError", "ReadOnlyError", "StorageError", "ExistsError", "arange",
    "array2string", "attrs", "blosc_compressor_list",
    "blosc_set_nthreads", "blosc_version", "carray", "chunk", "cparams", "ctable", "dask_here", "defaults",
    "defaults_ctx", "detect_number_of_cores", "eval", "fill", "filters", "from_dask", "fromiter", "iterblocks", "LazyExpr", "lazyexpr", "numexpr_here",
    "ones", "open", "pandas_here", "print_versions", "salvage", "set_nthreads", "set_printoptions", "tables_here", "test", "walk", "zeros",
]


def test(*args, verbose=False, heavy=False):
    """Run blzarr's test suite (from a source checkout) with pytest; return pytest's exit code.

    As bcolz's ``test(verbose=False, heavy=False)``: `verbose` shows every test, and the slow
    tests (process kills, concurrency) run only with `heavy`.  Extra string arguments go to pytest,
    e.g. ``blzarr.test("-q", "-k", "carray")``.  Unlike bcolz's, it returns the exit code instead of
    leaving the interpreter.

    Raises
    ------
    RuntimeError
        The tests are not beside the package (an installed wheel), or pytest is missing.
    """
    import os
    flags = [a for a in args if isinstance(a, bool)]   # bcolz's positional test(verbose, heavy)
    if flags:
        verbose = flags[0]
        heavy = flags[1] if len(flags) > 1 else heavy
    args = [a for a in args if not isinstance(a, bool)]
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
    if not os.path.isdir(here):
        raise RuntimeError(f"blzarr's tests are not installed (no '{here}'): run them from a source "
                           "checkout with `python -m pytest tests`")
    try:
        import pytest
    except ImportError:
        raise RuntimeError("blzarr.test() needs pytest: pip install 'blzarr[test]'") from None
    if verbose:
        args.insert(0, "-v")
    if "-m" not in args:        # (the repository's pytest settings deselect the slow tests by default)
        args += ["-m", "" if heavy else "not slow"]
    return int(pytest.main([here, *args]))
