"""Where carray's and ctable's methods find the integrations above them (dask, pandas, HDF5, Arrow).

The integration modules (`dask_io`, `ctable_io`) import carray and ctable; methods such as
``ctable.todataframe`` call back into them.  So that imports point one way only, each integration
module registers its functions here when it is imported (``import blzarr`` imports them all), and the
methods look them up by name.
"""

_registry = {}


def register(name, fn):
    """Make `fn` what the methods calling `name` run."""
    _registry[name] = fn


def get(name):
    """The function registered as `name` (ImportError when its module was never imported)."""
    try:
        return _registry[name]
    except KeyError:
        raise ImportError(f"'{name}' comes from a blzarr integration module that is not imported; "
                          "import blzarr (which imports them all)") from None
