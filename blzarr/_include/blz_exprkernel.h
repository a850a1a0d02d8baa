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
/* An operand's window of other values converted to float64 values in `d`, as C's (and NumPy's) casts
   round them; `kind` is one of XK_FROM_*.  A bool is any non-zero byte.  A register of the typed
   program holds values of one of these kinds too: float64, float32, int64 (every integer dtype but
   uint64, its values exact) or bool bytes. */
enum { XK_FROM_F8 = 0, XK_FROM_F4, XK_FROM_I1, XK_FROM_I2, XK_FROM_I4, XK_FROM_I8,
       XK_FROM_U1, XK_FROM_U2, XK_FROM_U4, XK_FROM_U8, XK_FROM_B1, XK_FROM_N };
#define XK_CONVERT(D, T) { const T *restrict a = (const T *)src; XK_LOOP(d[i] = (D)a[i]) } break;
#define XK_CONVERT_ALL(D)                                                                           \
    switch (kind) {                                                                                 \
    case XK_FROM_F8: XK_CONVERT(D, double)                                                          \
    case XK_FROM_F4: XK_CONVERT(D, float)                                                           \
    case XK_FROM_I1: XK_CONVERT(D, int8_t)                                                          \
    case XK_FROM_I2: XK_CONVERT(D, int16_t)                                                         \
    case XK_FROM_I4: XK_CONVERT(D, int32_t)                                                         \
    case XK_FROM_I8: XK_CONVERT(D, int64_t)                                                         \
    case XK_FROM_U1: XK_CONVERT(D, uint8_t)                                                         \
    case XK_FROM_U2: XK_CONVERT(D, uint16_t)                                                        \
    case XK_FROM_U4: XK_CONVERT(D, uint32_t)                                                        \
    case XK_FROM_U8: XK_CONVERT(D, uint64_t)                                                        \
    case XK_FROM_B1: { const uint8_t *restrict a = (const uint8_t *)src; XK_LOOP(d[i] = a[i] != 0) } \
        break;                                                                                      \
    }
static BLZ_CLONES void xk_widen(int kind, const char *src, double *restrict d, int64_t m) {
    XK_CONVERT_ALL(double)
}
static inline void xk_to_f4(int kind, const char *src, float *restrict d, int64_t m) {
    XK_CONVERT_ALL(float)
}
static inline void xk_to_i8(int kind, const char *src, int64_t *restrict d, int64_t m) {
    /* (only from the integer kinds, bools and the int64 registers: the compiler never converts a float
       to an integer) */
    XK_CONVERT_ALL(int64_t)
}
/* an int64 register's values wrapped to the integer dtype `kind` (an operation of int32 values is
   NumPy's int32 operation: modulo 2**32, as a signed value); the casts through the unsigned types
   are modulo 2**n in C, and GCC and Clang keep the low bits converting to a signed type */
#define XK_WRAP(T) XK_LOOP(d[i] = (int64_t)(T)(uint64_t)a[i]) break;
static inline void xk_wrap(int kind, const int64_t *restrict a, int64_t *restrict d, int64_t m) {
    switch (kind) {
    case XK_FROM_I1: XK_WRAP(int8_t)
    case XK_FROM_I2: XK_WRAP(int16_t)
    case XK_FROM_I4: XK_WRAP(int32_t)
    case XK_FROM_U1: XK_WRAP(uint8_t)
    case XK_FROM_U2: XK_WRAP(uint16_t)
    case XK_FROM_U4: XK_WRAP(uint32_t)
    default: XK_LOOP(d[i] = a[i]) break;
    }
}

/* The opcodes (_exprkernel.EXPR_OPCODES): float64 operations, boolean logic, then conversions (the
   fourth field is -2 - the source kind, XK_FROM_*), float32 operations, int64 operations (modulo
   2**64), the wrap to a narrower integer dtype (the fourth field: -2 - the dtype's kind) and
   comparisons of int32 values.  A fourth field below 0 is no register. */
enum { XK_OP_CVT_F8 = 15, XK_OP_CVT_F4 = 16, XK_OP_CVT_I8 = 17,
       XK_OP_F4 = 18,       /* + add sub mul div neg gt ge lt le eq ne */
       XK_OP_I8 = 29,       /* + add sub mul neg gt ge lt le eq ne */
       XK_OP_WRAP = 39,
       XK_OP_I4CMP = 40,    /* + gt ge lt le eq ne */
       XK_OP_B1 = 46,       /* a bool operand's bytes as 0 or 1 (NumPy reads any non-zero byte as true) */
       XK_OP_N = 47 };
#define XK_CMP6(BASE, A, B)                                                                         \
    case BASE + 0: XK_LOOP(bd[i] = A[i] > B[i]) break;                                              \
    case BASE + 1: XK_LOOP(bd[i] = A[i] >= B[i]) break;                                             \
    case BASE + 2: XK_LOOP(bd[i] = A[i] < B[i]) break;                                              \
    case BASE + 3: XK_LOOP(bd[i] = A[i] <= B[i]) break;                                             \
    case BASE + 4: XK_LOOP(bd[i] = A[i] == B[i]) break;                                             \
    case BASE + 5: XK_LOOP(bd[i] = A[i] != B[i]) break;
#define XK_U(X) ((uint64_t)(X))
static BLZ_CLONES void xk_exec(const int32_t *prog, int64_t nins, char **rp, int64_t m) {
    for (int64_t t = 0; t < nins; t++) {
        const int32_t *ins = prog + 4 * t;
        double *restrict d = (double *)rp[ins[1]];
        const double *restrict a = (const double *)rp[ins[2]];
        const double *restrict b = ins[3] >= 0 ? (const double *)rp[ins[3]] : a;
        uint8_t *restrict bd = (uint8_t *)rp[ins[1]];
        const uint8_t *restrict ba = (const uint8_t *)rp[ins[2]];
        const uint8_t *restrict bb = (const uint8_t *)b;
        float *restrict fd = (float *)d;
        const float *restrict fa = (const float *)a;
        const float *restrict fb = (const float *)b;
        int64_t *restrict ld = (int64_t *)d;
        const int64_t *restrict la = (const int64_t *)a;
        const int64_t *restrict lb = (const int64_t *)b;
        const int32_t *restrict ia = (const int32_t *)a;
        const int32_t *restrict ib = (const int32_t *)b;
        switch (ins[0]) {
        case 0: XK_LOOP(d[i] = a[i] + b[i]) break;
        case 1: XK_LOOP(d[i] = a[i] - b[i]) break;
        case 2: XK_LOOP(d[i] = a[i] * b[i]) break;
        case 3: XK_LOOP(d[i] = a[i] / b[i]) break;
        case 4: XK_LOOP(d[i] = -a[i]) break;
        XK_CMP6(5, a, b)
        case 11: XK_LOOP(bd[i] = ba[i] & bb[i]) break;
        case 12: XK_LOOP(bd[i] = ba[i] | bb[i]) break;
        case 13: XK_LOOP(bd[i] = ba[i] ^ bb[i]) break;
        case 14: XK_LOOP(bd[i] = ba[i] ^ 1) break;
        case XK_OP_CVT_F8: xk_widen(-2 - ins[3], (const char *)a, d, m); break;
        case XK_OP_CVT_F4: xk_to_f4(-2 - ins[3], (const char *)a, fd, m); break;
        case XK_OP_CVT_I8: xk_to_i8(-2 - ins[3], (const char *)a, ld, m); break;
        case XK_OP_F4 + 0: XK_LOOP(fd[i] = fa[i] + fb[i]) break;
        case XK_OP_F4 + 1: XK_LOOP(fd[i] = fa[i] - fb[i]) break;
        case XK_OP_F4 + 2: XK_LOOP(fd[i] = fa[i] * fb[i]) break;
        case XK_OP_F4 + 3: XK_LOOP(fd[i] = fa[i] / fb[i]) break;
        case XK_OP_F4 + 4: XK_LOOP(fd[i] = -fa[i]) break;
        XK_CMP6(XK_OP_F4 + 5, fa, fb)
        case XK_OP_I8 + 0: XK_LOOP(ld[i] = (int64_t)(XK_U(la[i]) + XK_U(lb[i]))) break;
        case XK_OP_I8 + 1: XK_LOOP(ld[i] = (int64_t)(XK_U(la[i]) - XK_U(lb[i]))) break;
        case XK_OP_I8 + 2: XK_LOOP(ld[i] = (int64_t)(XK_U(la[i]) * XK_U(lb[i]))) break;
        case XK_OP_I8 + 3: XK_LOOP(ld[i] = (int64_t)(0 - XK_U(la[i]))) break;
        XK_CMP6(XK_OP_I8 + 4, la, lb)
        case XK_OP_WRAP: xk_wrap(-2 - ins[3], la, ld, m); break;
        XK_CMP6(XK_OP_I4CMP, ia, ib)
        case XK_OP_B1: XK_LOOP(bd[i] = ba[i] != 0) break;
        }
    }
}
/* one window's int64 values summed modulo 2**64 (NumPy's int64 / uint64 sums: any order is exact) */
static BLZ_CLONES int64_t xk_isum(const int64_t *restrict v, int64_t m) {
    uint64_t s = 0;
    for (int64_t i = 0; i < m; i++) s += (uint64_t)v[i];
    return (int64_t)s;
}
/* an int64 register's window stored as values of `isz` bytes (the result's dtype: the low bytes) */
static BLZ_CLONES void xk_narrow(const int64_t *restrict a, char *restrict dst, int64_t isz, int64_t m) {
    switch (isz) {
    case 1: { uint8_t *restrict d = (uint8_t *)dst; XK_LOOP(d[i] = (uint8_t)(uint64_t)a[i]) } break;
    case 2: { uint16_t *restrict d = (uint16_t *)dst; XK_LOOP(d[i] = (uint16_t)(uint64_t)a[i]) } break;
    case 4: { uint32_t *restrict d = (uint32_t *)dst; XK_LOOP(d[i] = (uint32_t)(uint64_t)a[i]) } break;
    default: memcpy(dst, a, m * 8); break;
    }
}
/* The number of values of a window where the comparison `op` (one of the kernel's comparison opcodes)
   holds, without storing its booleans: a count whose last instruction is a comparison takes this in
   place of that instruction and xk_count, a third of their time.  -1 for an opcode that is not a
   comparison.  (m < 2**32: the 32-bit counter does not wrap.) */
#define XK_CCOUNT6(BASE, T)                                                                         \
    case BASE + 0: { const T *restrict x = (const T *)a, *restrict y = (const T *)b; XK_LOOP(c += x[i] > y[i]) } break;  \
    case BASE + 1: { const T *restrict x = (const T *)a, *restrict y = (const T *)b; XK_LOOP(c += x[i] >= y[i]) } break; \
    case BASE + 2: { const T *restrict x = (const T *)a, *restrict y = (const T *)b; XK_LOOP(c += x[i] < y[i]) } break;  \
    case BASE + 3: { const T *restrict x = (const T *)a, *restrict y = (const T *)b; XK_LOOP(c += x[i] <= y[i]) } break; \
    case BASE + 4: { const T *restrict x = (const T *)a, *restrict y = (const T *)b; XK_LOOP(c += x[i] == y[i]) } break; \
    case BASE + 5: { const T *restrict x = (const T *)a, *restrict y = (const T *)b; XK_LOOP(c += x[i] != y[i]) } break;
static BLZ_CLONES int64_t xk_cmp_count(int op, const char *a, const char *b, int64_t m) {
    uint32_t c = 0;
    switch (op) {
    XK_CCOUNT6(5, double)
    XK_CCOUNT6(XK_OP_F4 + 5, float)
    XK_CCOUNT6(XK_OP_I8 + 4, int64_t)
    XK_CCOUNT6(XK_OP_I4CMP, int32_t)
    default: return -1;
    }
    return c;
}
static BLZ_CLONES int64_t xk_count(const uint8_t *restrict v, int64_t m) {
    uint32_t c = 0;
    for (int64_t i = 0; i < m; i++) c += v[i];
    return c;
}

#endif
