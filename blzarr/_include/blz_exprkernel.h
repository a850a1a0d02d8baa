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
static BLZ_CLONES int64_t xk_count(const uint8_t *restrict v, int64_t m) {
    uint32_t c = 0;
    for (int64_t i = 0; i < m; i++) c += v[i];
    return c;
}

#endif
