"""The containers: `carray` (a compressed, enlargeable array) and `ctable` (a table of carray
columns), each a thin class assembled from one part per job (`carray.read`, `carray.write`, ...),
with `indexing` (keys into chunk pieces) and `arrayprint` (how they print).

Modules here may import every layer below (runtime, storage, query, the Cython kernels), never the
integrations in `blzarr.io` or the command line: those attach through `blzarr.runtime.integrations`.
"""
