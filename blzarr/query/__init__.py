"""Queries: per-chunk statistics (`stats`), the rules every query shares (`rules`: one parse, the
block length, the compaction rule, skip and limit), the planner that uses the statistics to skip or
take whole blocks (`planner`), the fused C kernels' compiler (`exprkernel`) and block engine
(`fused`), expressions block by block (`chunked_eval`), lazy expressions (`lazyexpr`), one query's
`Selection` that every where, whereblocks, fetchwhere and ``x[expression]`` of the containers
builds and reads (`selection`), and group-by with bquery's helpers (`groupby`) and the
factorization cache beside a column (`factor_cache`).

Modules here may import `blzarr.runtime`, `blzarr.storage`, the Cython kernels and each other, never
the containers: they take anything with a length, slicing and chunks.
"""
