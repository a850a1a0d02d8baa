/* Minimum, maximum and NaN/NaT count of a chunk's items in one pass (the statistics that blzarr.stats
   keeps per chunk), called by _minmax.minmax and by _chunk.compress before it compresses the chunk.

   NumPy has no fused min/max, and its two passes cost 5-10% of writing data that compresses fast.
   Every loop here is an integer min/max the compiler vectorizes, with enough independent accumulators
   (256 bytes of each) that no vector waits for the previous one's result; floats are compared by their
   bits as integers (see BLZ_FLOAT_MINMAX), NaN and NaT found in the same pass and handled in a second
   one only for a chunk that holds them. */
#ifndef BLZ_MINMAX_H
#define BLZ_MINMAX_H
#include <stdint.h>
#include <string.h>
#include "blz_clones.h"
#define BLZ_LANES(T) (256 / (int)sizeof(T))
/* the items before the first 64-byte boundary (at most n): the vector loop starts there, as loads
   across two cache lines run at half speed (NumPy's data starts 16 bytes past one) */
#define BLZ_HEAD(p, T, n) ((int64_t)(((64 - ((uintptr_t)(p) & 63)) & 63) / sizeof(T)) < (n) ? \
                           (int64_t)(((64 - ((uintptr_t)(p) & 63)) & 63) / sizeof(T)) : (n))

/* min and max of n > 0 integers; BLZ_LANES independent accumulators (no dependency chain from one
   vector to the next), folded at the end. */
#define BLZ_INT_MINMAX(NAME, T) \
static BLZ_CLONES void NAME(const void *vv, int64_t n, void *mn, void *mx) { \
    typedef T __attribute__((may_alias)) T##_al; \
    const T##_al *v = (const T##_al *)vv; \
    T a[BLZ_LANES(T)], b[BLZ_LANES(T)], A = v[0], B = v[0]; \
    int64_t i = 0, head = BLZ_HEAD(vv, T, n); \
    for (int j = 0; j < BLZ_LANES(T); j++) { a[j] = A; b[j] = B; } \
    for (; i < head; i++) { T x = v[i]; A = x < A ? x : A; B = x > B ? x : B; } \
    for (; i + BLZ_LANES(T) <= n; i += BLZ_LANES(T)) \
        for (int j = 0; j < BLZ_LANES(T); j++) { T x = v[i + j]; a[j] = x < a[j] ? x : a[j]; b[j] = x > b[j] ? x : b[j]; } \
    for (; i < n; i++) { T x = v[i]; A = x < A ? x : A; B = x > B ? x : B; } \
    for (int j = 0; j < BLZ_LANES(T); j++) { A = a[j] < A ? a[j] : A; B = b[j] > B ? b[j] : B; } \
    *(T *)mn = A; *(T *)mx = B; \
}
BLZ_INT_MINMAX(blz_minmax_i8, int8_t)
BLZ_INT_MINMAX(blz_minmax_u8, uint8_t)
BLZ_INT_MINMAX(blz_minmax_i16, int16_t)
BLZ_INT_MINMAX(blz_minmax_u16, uint16_t)
BLZ_INT_MINMAX(blz_minmax_i32, int32_t)
BLZ_INT_MINMAX(blz_minmax_u32, uint32_t)
BLZ_INT_MINMAX(blz_minmax_i64, int64_t)
BLZ_INT_MINMAX(blz_minmax_u64, uint64_t)

/* signed min, signed max and unsigned max of n > 0 integers of type I (U unsigned), in one pass */
#define BLZ_SSU(NAME, I, U) \
static BLZ_CLONES void NAME(const void *vv, int64_t n, I *smin, I *smax, U *umax) { \
    typedef I __attribute__((may_alias)) I##_al; \
    const I##_al *v = (const I##_al *)vv; \
    I a[BLZ_LANES(I)], b[BLZ_LANES(I)], A = v[0], B = v[0]; U c[BLZ_LANES(I)], C = (U)v[0]; \
    int64_t i = 0, head = BLZ_HEAD(vv, I, n); \
    for (int j = 0; j < BLZ_LANES(I); j++) { a[j] = A; b[j] = B; c[j] = C; } \
    for (; i < head; i++) { I x = v[i]; U y = (U)x; A = x < A ? x : A; B = x > B ? x : B; C = y > C ? y : C; } \
    for (; i + BLZ_LANES(I) <= n; i += BLZ_LANES(I)) \
        for (int j = 0; j < BLZ_LANES(I); j++) { \
            I x = v[i + j]; U y = (U)x; \
            a[j] = x < a[j] ? x : a[j]; b[j] = x > b[j] ? x : b[j]; c[j] = y > c[j] ? y : c[j]; } \
    for (; i < n; i++) { I x = v[i]; U y = (U)x; A = x < A ? x : A; B = x > B ? x : B; C = y > C ? y : C; } \
    for (int j = 0; j < BLZ_LANES(I); j++) { A = a[j] < A ? a[j] : A; B = b[j] > B ? b[j] : B; C = c[j] > C ? c[j] : C; } \
    *smin = A; *smax = B; *umax = C; \
}
BLZ_SSU(blz_ssu64, int64_t, uint64_t)
BLZ_SSU(blz_ssu32, int32_t, uint32_t)

/* int64 with NaT (INT64_MIN) left out; returns the count of NaT.  NaT is the smallest int64: one
   min/max pass, then only for a chunk whose minimum is NaT, a pass counting them and one for the
   minimum without them. */
static int64_t blz_minmax_nat(const void *vv, int64_t n, void *mn, void *mx) {
    const int64_t *v = (const int64_t *)vv;
    int64_t a, b, nat = 0;
    blz_minmax_i64(vv, n, &a, &b);
    if (a == INT64_MIN) {
        a = INT64_MAX;
        for (int64_t i = 0; i < n; i++) {
            int64_t x = v[i];
            nat += x == INT64_MIN;
            if (x != INT64_MIN && x < a) a = x;
        }
    }
    *(int64_t *)mn = a; *(int64_t *)mx = b;
    return nat;
}

/* Floats by their bits as integers: among values without NaN, the signed integer order is the
   float order for non-negative values and the reverse for negative ones, so the smallest float is
   the largest unsigned bits when a negative value is there (else the smallest signed), and the
   largest float the largest signed bits when a non-negative value is there (else the smallest
   signed).  NaN shows in the same pass (a positive NaN's bits above +inf's as signed, a negative
   NaN's above -inf's as unsigned); only then a second pass counts NaN and takes min and max
   without them (floats compared as integers ordered like them: the bits of a negative value with
   every bit but the sign flipped).  Returns the count of NaN. */
#define BLZ_FLIP(I, U, k) ((k) ^ (I)(((U)((k) >> (8 * sizeof(I) - 1))) >> 1))
#define BLZ_FLOAT_MINMAX(NAME, SSU, I, U, ABSMASK, INF) \
static int64_t NAME(const void *vv, int64_t n, void *kmin, void *kmax) { \
    typedef I __attribute__((may_alias)) I##_al; \
    const I##_al *v = (const I##_al *)vv; \
    I smin, smax; U umax; int64_t nan = 0; \
    SSU(vv, n, &smin, &smax, &umax); \
    if (smax <= (I)INF && umax <= ((U)INF | ((U)1 << (8 * sizeof(I) - 1)))) { \
        *(I *)kmin = smin < 0 ? (I)umax : smin; \
        *(I *)kmax = smax >= 0 ? smax : smin; \
        return 0; \
    } \
    I a = (I)ABSMASK, b = (I)(~(U)ABSMASK); \
    for (int64_t i = 0; i < n; i++) { \
        I u = v[i]; \
        if ((u & (I)ABSMASK) > (I)INF) { nan++; continue; } \
        I k = BLZ_FLIP(I, U, u); \
        a = k < a ? k : a; b = k > b ? k : b; \
    } \
    *(I *)kmin = BLZ_FLIP(I, U, a); \
    *(I *)kmax = BLZ_FLIP(I, U, b); \
    return nan; \
}
BLZ_FLOAT_MINMAX(blz_minmax_f64, blz_ssu64, int64_t, uint64_t, 0x7fffffffffffffffLL, 0x7ff0000000000000LL)
BLZ_FLOAT_MINMAX(blz_minmax_f32, blz_ssu32, int32_t, uint32_t, 0x7fffffff, 0x7f800000)

#endif
