/* The operations of the fused expression kernel (_exprkernel.ExprChunks) over a window of values.

   Every operand pointer is `restrict` and every loop a plain loop over the window, so that the
   compiler vectorizes each (built for AVX-512, AVX2 and the baseline: blz_clones.h).  Float64 values
   are 8-byte doubles; booleans are bytes 0 or 1.  The selection of the rows where a boolean result
   holds is blz_select.h, shared with _where.WhereChunks. */
#ifndef BLZ_EXPRKERNEL_H
#define BLZ_EXPRKERNEL_H
#include <stdint.h>
#include <string.h>
#include "blz_clones.h"

#define XK_LOOP(EXPR) for (int64_t i = 0; i < m; i++) { EXPR; }
static BLZ_CLONES void xk_exec(const int32_t *prog, int64_t nins, char **rp, int64_t m) {
    for (int64_t t = 0; t < nins; t++) {
        const int32_t *ins = prog + 4 * t;
        double *restrict d = (double *)rp[ins[1]];
        const double *restrict a = (const double *)rp[ins[2]];
        const double *restrict b = ins[3] >= 0 ? (const double *)rp[ins[3]] : a;
        uint8_t *restrict bd = (uint8_t *)rp[ins[1]];
        const uint8_t *restrict ba = (const uint8_t *)rp[ins[2]];
        const uint8_t *restrict bb = (const uint8_t *)b;
        switch (ins[0]) {
        case 0: XK_LOOP(d[i] = a[i] + b[i]) break;
        case 1: XK_LOOP(d[i] = a[i] - b[i]) break;
        case 2: XK_LOOP(d[i] = a[i] * b[i]) break;
        case 3: XK_LOOP(d[i] = a[i] / b[i]) break;
        case 4: XK_LOOP(d[i] = -a[i]) break;
        case 5: XK_LOOP(bd[i] = a[i] > b[i]) break;
        case 6: XK_LOOP(bd[i] = a[i] >= b[i]) break;
        case 7: XK_LOOP(bd[i] = a[i] < b[i]) break;
        case 8: XK_LOOP(bd[i] = a[i] <= b[i]) break;
        case 9: XK_LOOP(bd[i] = a[i] == b[i]) break;
        case 10: XK_LOOP(bd[i] = a[i] != b[i]) break;
        case 11: XK_LOOP(bd[i] = ba[i] & bb[i]) break;
        case 12: XK_LOOP(bd[i] = ba[i] | bb[i]) break;
        case 13: XK_LOOP(bd[i] = ba[i] ^ bb[i]) break;
        case 14: XK_LOOP(bd[i] = ba[i] ^ 1) break;
        }
    }
}
/* An operand's window of other values converted to float64 values in `d`, as C's (and NumPy's) casts
   round them; `kind` is one of XK_FROM_*.  A bool is any non-zero byte. */
enum { XK_FROM_F8 = 0, XK_FROM_F4, XK_FROM_I1, XK_FROM_I2, XK_FROM_I4, XK_FROM_I8,
       XK_FROM_U1, XK_FROM_U2, XK_FROM_U4, XK_FROM_U8, XK_FROM_B1, XK_FROM_N };
#define XK_WIDEN(T) { const T *restrict a = (const T *)src; XK_LOOP(d[i] = (double)a[i]) } break;
static BLZ_CLONES void xk_widen(int kind, const char *src, double *restrict d, int64_t m) {
    switch (kind) {
    case XK_FROM_F8: XK_WIDEN(double)
    case XK_FROM_F4: XK_WIDEN(float)
    case XK_FROM_I1: XK_WIDEN(int8_t)
    case XK_FROM_I2: XK_WIDEN(int16_t)
    case XK_FROM_I4: XK_WIDEN(int32_t)
    case XK_FROM_I8: XK_WIDEN(int64_t)
    case XK_FROM_U1: XK_WIDEN(uint8_t)
    case XK_FROM_U2: XK_WIDEN(uint16_t)
    case XK_FROM_U4: XK_WIDEN(uint32_t)
    case XK_FROM_U8: XK_WIDEN(uint64_t)
    case XK_FROM_B1: { const uint8_t *restrict a = (const uint8_t *)src; XK_LOOP(d[i] = a[i] != 0) } break;
    }
}
static BLZ_CLONES int64_t xk_count(const uint8_t *restrict v, int64_t m) {
    uint32_t c = 0;
    for (int64_t i = 0; i < m; i++) c += v[i];
    return c;
}

#endif
