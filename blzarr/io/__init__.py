"""Integrations: dask arrays and frames (`dask`), pandas and HDF5 (`pandas_hdf5`), Arrow streams
(`arrow`) and Parquet files (`parquet`); `colmeta` names the column attributes they share.

Modules here sit above the containers and register their methods with
`blzarr.runtime.integrations`, so the containers never import pandas, dask or PyTables.
"""
