"""The optional packages blzarr uses when they are installed, checked in one place.

`have(name)` says whether a package can be imported (found without importing it); `need(name, what)`
imports it or raises an ImportError that says what needs it and how to install it.

Examples
--------
>>> from blzarr.runtime.optional import have, need
>>> have("numpy"), have("no_such_package_xyz")
(True, False)
>>> need("no_such_package_xyz", "this example")
Traceback (most recent call last):
    ...
ImportError: this example needs the optional package 'no_such_package_xyz' (pip install no_such_package_xyz)
"""

import importlib
import importlib.util

# what `pip install` calls the packages whose import name differs
_PIP_NAMES = {"tables": "tables (PyTables)", "dask.array": "'dask[array]'", "dask.dataframe": "'dask[dataframe]'"}

_found = {}


def have(name):
    """True when the package `name` can be imported (decided once per process)."""
    found = _found.get(name)
    if found is None:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):    # a parent package that is missing or broken
            found = False
        _found[name] = found
    return found


def need(name, what):
    """The module `name`, imported; an ImportError naming `what` needs it when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"{what} needs the optional package '{name}' "
                          f"(pip install {_PIP_NAMES.get(name, name)})") from e
