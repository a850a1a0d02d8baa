"""blzarr's benchmark harness: ``blzarr bench`` once installed, ``python -m bench`` in a checkout.

Times blzarr against bcolz (bcolz-zipline), python-blosc2, zarr (Blosc codec) and plain NumPy, in one
process, on the same data and the same codec settings (lz4, clevel 5, byte shuffle, 2 threads).  See
``blzarr bench --help`` and docs/benchmarks.rst.  This package holds the
harness's library part (command, harness, peers, memory), so that it ships with blzarr; the
repository's ``bench/`` is the entry point, the extra scripts and the results (FINDINGS.md).
"""

CNAME = "lz4"
CLEVEL = 5
NTHREADS = 2
