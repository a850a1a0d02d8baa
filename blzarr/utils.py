"""bcolz's ``bcolz.utils``: small helpers that applications written for bcolz import by this path.

`calc_chunksize` follows the same rule as blzarr's automatic chunk length (and bcolz's), so a
chunk size computed with it matches the one blzarr picks.
"""

import math
import os
import time

import numpy as np

from blzarr.containers.carray.array import carray, human_readable_size  # noqa: F401  (human_readable_size: bcolz's name)
from blzarr.storage.chunk import quantize as _quantize

__all__ = ["build_carray", "calc_chunksize", "csformula", "get_len_of_range", "human_readable_size",
           "limit_es", "quantize", "show_stats", "to_ndarray"]


def limit_es(expectedsizeinMB):
    """`expectedsizeinMB` clipped to [1e-4, 1e4] (between 100 bytes and 10 GB)."""
    return min(max(expectedsizeinMB, 1e-4), 1e4)


def csformula(expectedsizeinMB):
    """The chunk size in bytes for an expected size in MB: 4 KB times 2**(log10(MB) + 6)."""
    return 4096 * int(2 ** (math.log10(expectedsizeinMB) + 6))


def calc_chunksize(expectedsizeinMB):
    """The chunk size in bytes blzarr (and bcolz) picks for data of about `expectedsizeinMB` MB."""
    mb = limit_es(expectedsizeinMB)
    return csformula(10 ** int(math.log10(mb)))


def get_len_of_range(start, stop, step):
    """``len(range(start, stop, step))`` for a positive `step`."""
    return max(0, (stop - start + step - 1) // step)


def to_ndarray(array, dtype, arrlen=None, safe=True):
    """`array` as a contiguous, at least one-dimensional ndarray of `dtype`'s base type.

    With `arrlen`, a shorter array (a scalar) is broadcast to that length.  ``safe=False``
    returns `array` untouched, as bcolz does.
    """
    if not safe:
        return array
    if dtype is None:
        arr = np.asarray(array)
    else:
        dtype = np.dtype(dtype)
        try:
            arr = np.asarray(array, dtype=dtype.base)
        except (TypeError, ValueError) as e:
            raise ValueError(f"cannot convert to an ndarray of {dtype.base}: {e}") from None
    arr = np.ascontiguousarray(arr)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arrlen is not None and arrlen != len(arr):
        out = np.empty((arrlen,) + arr.shape[1:], dtype=arr.dtype)
        out[...] = arr
        arr = out
    return arr


def build_carray(array, rootdir):
    """The carray at `rootdir` when given, else a new in-memory carray of `array` (unpickling)."""
    if rootdir:
        return carray(rootdir=rootdir)
    return carray(array)


def quantize(data, significant_digits):
    """Floating-point `data` rounded to keep about `significant_digits` decimal digits (better compression).

    Raises
    ------
    TypeError
        `data` is not a floating-point array.
    """
    data = np.asarray(data)
    if data.dtype.kind != "f":
        raise TypeError(f"quantize needs floating-point data, got {data.dtype}")
    if not significant_digits:
        return data
    return _quantize(data, significant_digits)


def show_stats(explain, tref):
    """Print this process's memory use (Linux) and the seconds since `tref`; return the current time."""
    print(f"Memory usage: ******* {explain} *******")
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        for a, b in (("VmSize", "VmRSS"), ("VmData", "VmStk"), ("VmExe", "VmLib")):
            print(f"{a}: {fields.get(a, '?').strip():>10}\t{b}: {fields.get(b, '?').strip():>10}")
    except OSError:
        pass
    now = time.time()
    print("WallClock time:", round(now - tref, 3))
    return now
