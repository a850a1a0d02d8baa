# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The statistics of one chunk in one pass: its smallest and largest items and its count of NaN/NaT.

`minmax` is what `blzarr.query.stats` calls for a chunk whose statistics it (re)builds; `_chunk.compress`
runs the same loops (`minmax_run`, inline in `_minmax.pxd`) on a chunk it is about to compress,
because that pass brings the chunk into the core's cache, from where the compressor then reads it.
The loops are C (blz_minmax.h): vectorized integer min/max, floats compared by their bits.

What it does not do: keep statistics (that is `blzarr.query.stats`), or decode chunks (its input is
decoded values).
"""

from libc.stdint cimport int64_t

cimport numpy as cnp

cnp.import_array()


cdef int minmax_kind(cnp.ndarray a, bint nat) except -1:
    """Which loop of `minmax_run` takes the items of `a` (MM_NONE: none does)."""
    cdef char kind = ord(a.dtype.kind)
    cdef Py_ssize_t size = a.itemsize
    if not a.dtype.isnative:
        return MM_NONE
    if kind == b'f':
        return MM_F64 if size == 8 else MM_F32 if size == 4 else MM_NONE
    if kind == b'i':
        if size == 8:
            return MM_NAT if nat else MM_I64
        return MM_I32 if size == 4 else MM_I16 if size == 2 else MM_I8 if size == 1 else MM_NONE
    if kind == b'u':
        return MM_U64 if size == 8 else MM_U32 if size == 4 else MM_U16 if size == 2 else MM_U8 if size == 1 else MM_NONE
    if kind == b'b' and size == 1:
        return MM_U8
    return MM_NONE



def minmax(cnp.ndarray a not None, cnp.ndarray out not None, bint nat=False):
    """Put the smallest and largest value of the 1-d contiguous array `a` into out[0] and out[1] (an
    array of a's dtype) in one pass, NaN (floats) left out, and with `nat` the smallest int64 (NaT:
    pass the int64 view of a datetime64 or timedelta64); return the count of NaN/NaT.

    `a` must be native-endian, of a bool, integer or float dtype, and not empty.  When every value
    is NaN, out holds nothing meaningful (the count equals len(a))."""
    cdef Py_ssize_t n = a.shape[0] if a.ndim == 1 else 0
    cdef const void *p
    cdef char *o
    cdef int64_t nan = 0
    cdef int which
    cdef Py_ssize_t isz = cnp.PyArray_ITEMSIZE(a)
    if a.ndim != 1 or n == 0 or not cnp.PyArray_IS_C_CONTIGUOUS(a) or not a.dtype.isnative:
        raise ValueError("minmax needs a non-empty, contiguous, native-endian 1-d array")
    if out.dtype != a.dtype or out.ndim != 1 or out.shape[0] < 2 or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ValueError("minmax needs an output of two items of the array's dtype")
    which = minmax_kind(a, nat)
    if which == MM_NONE:
        raise ValueError(f"minmax does not support dtype {a.dtype}")
    p = cnp.PyArray_DATA(a)
    o = <char *>cnp.PyArray_DATA(out)
    with nogil:
        nan = minmax_run(which, p, n, o, o + isz)
    return nan

