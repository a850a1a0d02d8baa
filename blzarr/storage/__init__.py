"""Storage: how chunks reach the disk or object storage and come back.

From the bottom up: `fileio` (every file operation, swappable for fault injection), `files` and
`locking` (atomic writes, names, the writer lock), `bytestore` (byte stores: a local directory,
fsspec URLs) with `spool`, `chunk` (one compressed chunk), the two layouts (`bcolz_layout`, and the
BLZ superchunk files in `storage.blz`), `chunkstore` (the interface the containers see),
`arraymeta`, `attrs`, `blockcache`, and `layouts`, the one place that picks a layout.

Modules here may import the Cython kernels (`blzarr._chunk`, `blzarr._superchunk`), `blzarr.errors`,
`blzarr.runtime` and each other; never the query, container or integration layers.
"""
