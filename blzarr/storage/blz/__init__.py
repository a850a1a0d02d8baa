"""The BLZ layout: an array's chunks in checksummed superchunk files, read lazily.

`directory` holds `BlzDir` (a layout directory on a byte store) and `BlzChunks`; `format` the file
format (header, metadata section, offsets table); `read`, `write` and `repair` its reads, write
placement and recovery; `metalayers` the fixed- and variable-length metalayers; `cache` its bounded
caches; `local` and `remote` its two read strategies of one interface, chosen by what the byte store
declares: positioned reads of OS descriptors, or ranged requests (object storage).  docs/FORMAT.rst specifies the bytes.
"""
