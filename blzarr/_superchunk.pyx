# cython: language_level=3
"""BLZ superchunk files: header packing, offsets tables, lazy block reads (filled in by the superchunk issue)."""

HEADER_SIZE = 32
MAGIC = b"blpk"
