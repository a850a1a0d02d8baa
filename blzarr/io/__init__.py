"""Integrations: dask arrays and frames (`dask`), pandas and HDF5 (`pandas_hdf5`).

Modules here sit above the containers and register their methods with
`blzarr.runtime.integrations`, so the containers never import pandas, dask or PyTables.
"""
