# What `_where` shares with the fused expression kernel: the window of values both work in (its
# selected positions fit a fixed buffer), the positions of the true bytes of a window, and the gather
# of the items at those positions.  Inline, so each module has them compiled in.

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

cdef extern from "blz_select.h" nogil:
    int64_t xk_positions(const uint8_t *v, int64_t m, int32_t *idx)

cdef enum:
    XK_WINDOW = 2048    # values per window: the registers of a program (2048 x 8 bytes each) stay in L1/L2


cdef inline void gather(char *dst, const char *src, const int32_t *idx, Py_ssize_t sel, Py_ssize_t m,
                         Py_ssize_t isz) noexcept nogil:
    """The `sel` items of `isz` bytes at positions `idx` of the `m` at `src`, packed into `dst`."""
    cdef Py_ssize_t i
    if sel == m:
        memcpy(dst, src, m * isz)
    elif isz == 8:
        for i in range(sel):
            (<int64_t *>dst)[i] = (<const int64_t *>src)[idx[i]]
    elif isz == 4:
        for i in range(sel):
            (<int32_t *>dst)[i] = (<const int32_t *>src)[idx[i]]
    else:
        for i in range(sel):
            memcpy(dst + i * isz, src + idx[i] * isz, isz)
