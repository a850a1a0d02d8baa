"""Integrations: dask arrays and frames (`dask`), pandas and HDF5 (`pandas_hdf5`), Arrow streams
(`arrow`) and Parquet files (`parquet`); `colmeta` names the column attributes they share.

Modules here sit above the containers and register their methods with
`blzarr.runtime.integrations`, so the containers never import pandas, dask or PyTables.
"""


def need_package(module, what):
    """The package `module`, imported; an ImportError saying that `what` needs it and how to install
    it when it is not installed."""
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"{what} needs the '{module}' package, which is not installed "
                          f"(pip install {module})") from None
