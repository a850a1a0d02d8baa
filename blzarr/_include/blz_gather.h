/* Columns of rows straight out of byte-shuffled LZ4 blocks (``a[:, j]`` of a 2-D carray), used by
   _rows.pyx only.  A block of typesize t that Blosc byte-shuffled holds byte b of its element e at
   ``b * (bsize // t) + e``; these loops take the bytes of the wanted elements out of such a block
   (decoded alone into a buffer that stays in the first-level cache) straight into the result, so the
   block is never unshuffled whole and no chunk-sized buffer is written. */
#ifndef BLZ_GATHER_H
#define BLZ_GATHER_H
#include <stdint.h>
#include <string.h>
int LZ4_decompress_safe(const char *src, char *dst, int compressedSize, int dstCapacity);

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BLZ_GATHER_LE 1
#else
#define BLZ_GATHER_LE 0
#endif

/* elements c0 .. c0+nc-1 of each of the `nrows` rows of `epr` 8-byte elements of a block shuffled
   with typesize 8 (`neq` elements), packed row after row into `out` */
static void blz_gather8_scalar(const uint8_t *s, int64_t neq, int64_t nrows, int64_t epr,
                               int64_t c0, int64_t nc, uint8_t *out) {
    int64_t r, c, e;
    const uint8_t *p0 = s, *p1 = s + neq, *p2 = s + 2 * neq, *p3 = s + 3 * neq;
    const uint8_t *p4 = s + 4 * neq, *p5 = s + 5 * neq, *p6 = s + 6 * neq, *p7 = s + 7 * neq;
    for (r = 0; r < nrows; r++) {
        for (c = 0; c < nc; c++) {
            e = r * epr + c0 + c;
            uint8_t *o = out + 8 * (r * nc + c);
            o[0] = p0[e]; o[1] = p1[e]; o[2] = p2[e]; o[3] = p3[e];
            o[4] = p4[e]; o[5] = p5[e]; o[6] = p6[e]; o[7] = p7[e];
        }
    }
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define BLZ_HAVE_AVX2_GATHER 1
/* one element of each row of 8 elements (epr == 8, nc == 1): from each of the 8 byte planes a
   32-byte load holds 4 rows; a byte shuffle puts byte c0 of each row at byte b of that row's
   output word, and the 8 planes are or-ed together */
__attribute__((target("avx2")))
static void blz_gather8_col_avx2(const uint8_t *s, int64_t neq, int64_t nrows, int64_t c0,
                                 uint8_t *out) {
    __m256i m[8];
    int b, k;
    int64_t r;
    for (b = 0; b < 8; b++) {
        int8_t idx[32];
        /* output byte k of a 16-byte lane is byte k % 8 of row k / 8 of the lane */
        for (k = 0; k < 32; k++)
            idx[k] = (int8_t)((k % 8) == b ? ((k % 16) / 8) * 8 + c0 : -1);
        m[b] = _mm256_loadu_si256((const __m256i *)idx);
    }
    for (r = 0; r + 4 <= nrows; r += 4) {
        const uint8_t *p = s + 8 * r;
        __m256i acc = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)p), m[0]);
        for (b = 1; b < 8; b++)
            acc = _mm256_or_si256(acc, _mm256_shuffle_epi8(
                _mm256_loadu_si256((const __m256i *)(p + b * neq)), m[b]));
        _mm256_storeu_si256((__m256i *)(out + 8 * r), acc);
    }
    if (r < nrows)
        blz_gather8_scalar(s + 8 * r, neq, nrows - r, 8, c0, 1, out + 8 * r);
}
static int blz_avx2_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return ok;
}
#else
#define BLZ_HAVE_AVX2_GATHER 0
static void blz_gather8_col_avx2(const uint8_t *s, int64_t neq, int64_t nrows, int64_t c0,
                                 uint8_t *out) { (void)s; (void)neq; (void)nrows; (void)c0; (void)out; }
static int blz_avx2_ok(void) { return 0; }
#endif

/* the AVX2 gather in use: set once at import (and by tests, to run the scalar loop) */
static int blz_gather_avx2 = 0;

static void blz_gather8(const uint8_t *s, int64_t neq, int64_t nrows, int64_t epr, int64_t c0,
                        int64_t nc, uint8_t *out) {
    if (epr == 8 && nc == 1 && blz_gather_avx2)
        blz_gather8_col_avx2(s, neq, nrows, c0, out);
    else
        blz_gather8_scalar(s, neq, nrows, epr, c0, nc, out);
}

#endif
