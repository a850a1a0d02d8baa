"""blzarr's benchmark harness: ``python -m bench`` from the repository root.

Times blzarr against bcolz (bcolz-zipline), python-blosc2, zarr (Blosc codec) and plain NumPy, in one
process, on the same data and the same codec settings (lz4, clevel 5, byte shuffle, 2 threads).  See
``python -m bench --help`` and the "Benchmarks" section of README.rst.
"""

CNAME = "lz4"
CLEVEL = 5
NTHREADS = 2
