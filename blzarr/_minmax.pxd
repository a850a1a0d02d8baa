# The min/max/NaN loops of one chunk at the C level, for `_minmax.minmax` and `_chunk.compress` (which
# runs them before compressing, in the same GIL-free call).  `minmax_run` is inline here, so each
# module that calls it has the loops compiled in and calls them directly.

from libc.stdint cimport int64_t
cimport numpy as cnp

cdef extern from "blz_minmax.h" nogil:
    void blz_minmax_i8(const void *v, int64_t n, void *mn, void *mx)
    void blz_minmax_u8(const void *v, int64_t n, void *mn, void *mx)
    void blz_minmax_i16(const void *v, int64_t n, void *mn, void *mx)
    void blz_minmax_u16(const void *v, int64_t n, void *mn, void *mx)
    void blz_minmax_i32(const void *v, int64_t n, void *mn, void *mx)
    void blz_minmax_u32(const void *v, int64_t n, void *mn, void *mx)
    void blz_minmax_i64(const void *v, int64_t n, void *mn, void *mx)
    void blz_minmax_u64(const void *v, int64_t n, void *mn, void *mx)
    int64_t blz_minmax_nat(const void *v, int64_t n, void *mn, void *mx)
    int64_t blz_minmax_f64(const void *v, int64_t n, void *mn, void *mx)
    int64_t blz_minmax_f32(const void *v, int64_t n, void *mn, void *mx)

# which loop takes an array's items (minmax_kind); MM_NONE: none does
cdef enum:
    MM_NONE = 0
    MM_F64, MM_F32, MM_NAT, MM_I64, MM_I32, MM_I16, MM_I8, MM_U64, MM_U32, MM_U16, MM_U8


cdef int minmax_kind(cnp.ndarray a, bint nat) except -1


cdef inline int64_t minmax_run(int which, const void *p, int64_t n, void *mn, void *mx) noexcept nogil:
    """The smallest item of p[:n] into *mn, the largest into *mx (NaN/NaT left out); the count of
    NaN/NaT.  n > 0."""
    if which == MM_F64:
        return blz_minmax_f64(p, n, mn, mx)
    if which == MM_F32:
        return blz_minmax_f32(p, n, mn, mx)
    if which == MM_NAT:
        return blz_minmax_nat(p, n, mn, mx)
    if which == MM_I64:
        blz_minmax_i64(p, n, mn, mx)
    elif which == MM_I32:
        blz_minmax_i32(p, n, mn, mx)
    elif which == MM_I16:
        blz_minmax_i16(p, n, mn, mx)
    elif which == MM_I8:
        blz_minmax_i8(p, n, mn, mx)
    elif which == MM_U64:
        blz_minmax_u64(p, n, mn, mx)
    elif which == MM_U32:
        blz_minmax_u32(p, n, mn, mx)
    elif which == MM_U16:
        blz_minmax_u16(p, n, mn, mx)
    else:
        blz_minmax_u8(p, n, mn, mx)
    return 0
