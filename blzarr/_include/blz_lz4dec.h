/* A decoder of the Blosc 1.x chunks blzarr writes by default (LZ4 streams, one per block, byte
   shuffle of 4- or 8-byte items or none), used in place of blosc_decompress_ctx where it applies,
   giving the same bytes.

   Why not C-Blosc's own LZ4: a block of small integers, once byte-shuffled, ends in a long run of
   zero planes that LZ4 encodes as one long match, and at Blosc's default level 5 that match's offset
   is often 3, 5-7 or 9-15.  LZ4's decoder copies such a match 8 bytes at a time, each load reading
   bytes its previous store has only just written (a store-to-load forwarding stall per 8 bytes): a
   column of integers 1-5 decodes at about a third of the speed of the same data written at level 9.
   Here a long match with an offset under 16 writes a 16-byte pattern of its period again and again,
   without reading back what it wrote (the pattern is built from the period's bytes before the
   match).  A long match of a period of 16 to 63 bytes (an int32 column of small values, shuffled:
   two planes of random bytes, then a run of zeros that LZ4 matches 17 bytes back) stalls a 16-byte
   copy the same way, and is stored from a pattern too.

   What it does not handle (blz_decode_chunk returns BLZ_DEC_OTHER, and the caller uses C-Blosc):
   other codecs, an LZ4 format version other than 1, bitshuffle, split blocks (several streams per block), and byte shuffle of item
   sizes other than 4 and 8.  Every length and offset is checked against the input and output bounds, so
   a malformed stream is an error (BLZ_DEC_BAD), never a read or write outside the buffers. */
#ifndef BLZ_LZ4DEC_H
#define BLZ_LZ4DEC_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>
#if defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
#include <emmintrin.h>
#define BLZ_DEC_SSE2 1
#endif

#define BLZ_DEC_BAD (-1)
#define BLZ_DEC_OTHER (-2)

/* How far ahead of the input the decoder asks for the compressed bytes.  A column larger than the
   caches is read from memory, and the hardware's prefetch does not keep up with the decoder: with
   the compressed bytes in cache a float64 walk's chunks decode in about half the time.  Asked for
   8 KiB ahead, once per sequence and once per 32 literal bytes, they mostly arrive in time.  A
   prefetch never faults, so the address may lie past the input's end (it is formed as an integer,
   not as a pointer outside the buffer).  Only where the caller decodes into a buffer it reuses
   (blz_decode_chunk_ahead: the expression kernel, the sums): a decode into a new array of every
   row took 4-10% more CPU with it, as the output goes to memory too. */
#define BLZ_DEC_AHEAD 8192
#if defined(__GNUC__) || defined(__clang__)
#define BLZ_DEC_PREFETCH(p) \
    do { if (ahead) __builtin_prefetch((const void *)((uintptr_t)(p) + BLZ_DEC_AHEAD), 0, 3); } while (0)
#define BLZ_DEC_INLINE static inline __attribute__((always_inline))
#else
#define BLZ_DEC_PREFETCH(p) ((void)0)
#define BLZ_DEC_INLINE static inline
#endif

static inline int64_t blz_dec_i32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}

/* A long match whose period `off` is 16 to 63 bytes: a pattern of `off`-periodic bytes, as wide as
   the first power of two past `off` (32 or 64), stored every `off` bytes.  A plain copy here
   loads 16 bytes that straddle stores still in flight (the load reads `off` bytes back, not a
   multiple of 16), and each such load waits for those stores: 8 KiB of a period of 17 took about
   ten times as long as the same bytes with a period of 8.  The pattern is built once from the
   period's bytes before the match, and nothing of the match is read back.  Out of line and marked
   cold: inlined into blz_lz4_block_as's loop it moved that loop's code and slowed float columns by a
   few percent; it runs at most a few times per block. */
#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static void blz_dec_match_wide(uint8_t *op, size_t off, size_t len) {
    const uint8_t *m = op - off;
    uint8_t *end = op + len, *p = op;
    uint8_t pat[96];
    /* pat[0, off) = the period, by two copies of half the width that overlap; then pat[off, w) = its
       start again (the copy is wider than needed: pat has room past w) */
    if (off < 32) {
        memcpy(pat, m, 16);
        memcpy(pat + off - 16, m + off - 16, 16);
        memcpy(pat + off, pat, 16);
        while (p + 32 <= end) { memcpy(p, pat, 32); p += off; }
    } else {
        memcpy(pat, m, 32);
        memcpy(pat + off - 32, m + off - 32, 32);
        memcpy(pat + off, pat, 32);
        while (p + 64 <= end) { memcpy(p, pat, 64); p += off; }
    }
    while (p < end) {                   /* the last (end - p) bytes: whole periods, then the rest */
        size_t k = (size_t)(end - p) < off ? (size_t)(end - p) : off;
        memcpy(p, pat, k);
        p += k;
    }
}

/* The match of `len` bytes at `op`, copied from `off` bytes back (off >= 1, the bytes from op - off
   are output already), with `room` bytes of output from op on (len <= room). */
static inline void blz_dec_match(uint8_t *op, size_t off, size_t len, size_t room) {
    const uint8_t *m = op - off;
    uint8_t *end = op + len;
    if (off >= 16) {
        /* every 16-byte load lies before the store it feeds: plain copies, a few bytes past the end
           where the output has room (the next sequence overwrites them) */
        if (room >= len + 16) {
            do { memcpy(op, m, 16); op += 16; m += 16; } while (op < end);
        } else {
            while (op + 16 <= end) { memcpy(op, m, 16); op += 16; m += 16; }
            if (op < end) memcpy(op, m, (size_t)(end - op));
        }
    } else if (len < 32) {
        if (off >= 8 && room >= len + 8) {
            do { memcpy(op, m, 8); op += 8; m += 8; } while (op < end);
        } else {
            while (op < end) *op++ = *m++;
        }
    } else {
        /* a long match of a short period: its first 16 bytes by the byte rule, then those 16 bytes
           (a pattern of the period) stored again every largest multiple of the period in 16 */
        uint8_t pat[16];
        size_t step = 16 - 16 % off, i, k = 0;
        uint8_t *p;
        for (i = 0; i < 16; i++) {
            pat[i] = m[k];
            if (++k == off) k = 0;
        }
        memcpy(op, pat, 16);
        p = op + step;
        while (p + 16 <= end) { memcpy(p, pat, 16); p += step; }
        if (p < end) memcpy(p, pat, (size_t)(end - p));
    }
}

/* One LZ4 block (the raw block format, no frame): the `csize` bytes at `src` into exactly `dsize`
   bytes at `dst`.  0, or BLZ_DEC_BAD when the stream is malformed or does not fill `dsize` exactly
   (as LZ4_decompress_safe with Blosc's check of the size). */
BLZ_DEC_INLINE int blz_lz4_block_as(const uint8_t *src, size_t csize, uint8_t *dst, size_t dsize,
                                    const int ahead) {
    const uint8_t *ip = src, *const iend = src + csize;
    uint8_t *op = dst, *const oend = dst + dsize;
    for (;;) {
        unsigned token;
        size_t lit, mlen, off;
        unsigned b;
        if (ip >= iend) return BLZ_DEC_BAD;
        token = *ip++;
        BLZ_DEC_PREFETCH(ip);
        lit = token >> 4;
        /* the common sequence, as LZ4's own decoder takes it: fewer than 15 literals and a match of
           at most 18 bytes, far from both ends: fixed-size copies, no loops (a sequence followed by
           at least 18 input bytes is not the last one) */
        if (lit < 15 && (token & 15) < 15 && iend - ip >= 18 && oend - op >= 64) {
            memcpy(op, ip, 16);
            op += lit;
            ip += lit;
            off = (size_t)ip[0] | ((size_t)ip[1] << 8);
            ip += 2;
            mlen = (token & 15) + 4;
            if (off == 0 || off > (size_t)(op - dst)) return BLZ_DEC_BAD;
            if (off >= 8) {
                const uint8_t *m = op - off;
                memcpy(op, m, 8);
                memcpy(op + 8, m + 8, 8);
                memcpy(op + 16, m + 16, 2);
            } else {
                blz_dec_match(op, off, mlen, (size_t)(oend - op));
            }
            op += mlen;
            continue;
        }
        if (lit == 15) {
            do {
                if (ip >= iend) return BLZ_DEC_BAD;
                b = *ip++;
                lit += b;
            } while (b == 255);
        }
        if ((size_t)(iend - ip) < lit || (size_t)(oend - op) < lit) return BLZ_DEC_BAD;
        if ((size_t)(iend - ip) >= lit + 32 && (size_t)(oend - op) >= lit + 32) {
            /* 32 bytes at a time; the bytes past `lit` are overwritten by what follows */
            const uint8_t *s = ip;
            uint8_t *d = op, *e = op + lit;
            do { BLZ_DEC_PREFETCH(s); memcpy(d, s, 32); d += 32; s += 32; } while (d < e);
        } else {
            memcpy(op, ip, lit);
        }
        op += lit;
        ip += lit;
        if (ip == iend) return op == oend ? 0 : BLZ_DEC_BAD;   /* the last sequence: literals only */
        /* LZ4's own rules for a sequence that is not the last: an offset follows, and the block's last
           12 bytes (5 of them literals) are not reached by a match */
        if (iend - ip < 2 || oend - op < 12) return BLZ_DEC_BAD;
        off = (size_t)ip[0] | ((size_t)ip[1] << 8);
        ip += 2;
        if (off == 0 || off > (size_t)(op - dst)) return BLZ_DEC_BAD;
        mlen = token & 15;
        if (mlen == 15) {
            do {
                if (ip >= iend) return BLZ_DEC_BAD;
                b = *ip++;
                mlen += b;
            } while (b == 255);
        }
        mlen += 4;
        if ((size_t)(oend - op) < mlen + 5) return BLZ_DEC_BAD;
        if (off >= 16 && off < 64 && mlen >= (off < 32 ? 64 : 128))
            blz_dec_match_wide(op, off, mlen);
        else
            blz_dec_match(op, off, mlen, (size_t)(oend - op));
        op += mlen;
    }
}

/* Blosc's byte unshuffle for 8-byte items: `src` holds the block's byte planes (plane j, byte j of
   every item, from j * (n / 8)), `dst` gets the items; the n % 8 bytes past the last whole item are
   stored as they are. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define BLZ_DEC_AVX2 1
/* 32 items a round: the SSE2 steps below on both 128-bit lanes at once (items 0-15 of the round in
   the low lanes, 16-31 in the high ones), each lane's 16-byte results stored where their items go */
__attribute__((target("avx2"))) static size_t blz_unshuffle8_avx2(const uint8_t *src, uint8_t *dst,
                                                                   size_t ne) {
    size_t i = 0;
    for (; i + 32 <= ne; i += 32) {
        __m256i a0 = _mm256_loadu_si256((const __m256i *)(src + 0 * ne + i));
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(src + 1 * ne + i));
        __m256i a2 = _mm256_loadu_si256((const __m256i *)(src + 2 * ne + i));
        __m256i a3 = _mm256_loadu_si256((const __m256i *)(src + 3 * ne + i));
        __m256i a4 = _mm256_loadu_si256((const __m256i *)(src + 4 * ne + i));
        __m256i a5 = _mm256_loadu_si256((const __m256i *)(src + 5 * ne + i));
        __m256i a6 = _mm256_loadu_si256((const __m256i *)(src + 6 * ne + i));
        __m256i a7 = _mm256_loadu_si256((const __m256i *)(src + 7 * ne + i));
        __m256i b0 = _mm256_unpacklo_epi8(a0, a1), b1 = _mm256_unpackhi_epi8(a0, a1);
        __m256i b2 = _mm256_unpacklo_epi8(a2, a3), b3 = _mm256_unpackhi_epi8(a2, a3);
        __m256i b4 = _mm256_unpacklo_epi8(a4, a5), b5 = _mm256_unpackhi_epi8(a4, a5);
        __m256i b6 = _mm256_unpacklo_epi8(a6, a7), b7 = _mm256_unpackhi_epi8(a6, a7);
        __m256i c0 = _mm256_unpacklo_epi16(b0, b2), c1 = _mm256_unpackhi_epi16(b0, b2);
        __m256i c2 = _mm256_unpacklo_epi16(b1, b3), c3 = _mm256_unpackhi_epi16(b1, b3);
        __m256i c4 = _mm256_unpacklo_epi16(b4, b6), c5 = _mm256_unpackhi_epi16(b4, b6);
        __m256i c6 = _mm256_unpacklo_epi16(b5, b7), c7 = _mm256_unpackhi_epi16(b5, b7);
        __m256i d0 = _mm256_unpacklo_epi32(c0, c4), d1 = _mm256_unpackhi_epi32(c0, c4);
        __m256i d2 = _mm256_unpacklo_epi32(c1, c5), d3 = _mm256_unpackhi_epi32(c1, c5);
        __m256i d4 = _mm256_unpacklo_epi32(c2, c6), d5 = _mm256_unpackhi_epi32(c2, c6);
        __m256i d6 = _mm256_unpacklo_epi32(c3, c7), d7 = _mm256_unpackhi_epi32(c3, c7);
        uint8_t *o = dst + 8 * i;
        /* low lanes: items 0-15 in d0..d7 order; high lanes: items 16-31 */
        _mm256_storeu_si256((__m256i *)(o + 0), _mm256_permute2x128_si256(d0, d1, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 32), _mm256_permute2x128_si256(d2, d3, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 64), _mm256_permute2x128_si256(d4, d5, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 96), _mm256_permute2x128_si256(d6, d7, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 128), _mm256_permute2x128_si256(d0, d1, 0x31));
        _mm256_storeu_si256((__m256i *)(o + 160), _mm256_permute2x128_si256(d2, d3, 0x31));
        _mm256_storeu_si256((__m256i *)(o + 192), _mm256_permute2x128_si256(d4, d5, 0x31));
        _mm256_storeu_si256((__m256i *)(o + 224), _mm256_permute2x128_si256(d6, d7, 0x31));
    }
    return i;
}
#endif

static void blz_unshuffle8(const uint8_t *src, uint8_t *dst, size_t n) {
    size_t ne = n / 8, i = 0, j;
#ifdef BLZ_DEC_AVX2
    if (__builtin_cpu_supports("avx2")) i = blz_unshuffle8_avx2(src, dst, ne);
#endif
#ifdef BLZ_DEC_SSE2
    for (; i + 16 <= ne; i += 16) {
        __m128i a0 = _mm_loadu_si128((const __m128i *)(src + 0 * ne + i));
        __m128i a1 = _mm_loadu_si128((const __m128i *)(src + 1 * ne + i));
        __m128i a2 = _mm_loadu_si128((const __m128i *)(src + 2 * ne + i));
        __m128i a3 = _mm_loadu_si128((const __m128i *)(src + 3 * ne + i));
        __m128i a4 = _mm_loadu_si128((const __m128i *)(src + 4 * ne + i));
        __m128i a5 = _mm_loadu_si128((const __m128i *)(src + 5 * ne + i));
        __m128i a6 = _mm_loadu_si128((const __m128i *)(src + 6 * ne + i));
        __m128i a7 = _mm_loadu_si128((const __m128i *)(src + 7 * ne + i));
        /* bytes (0,1), (2,3), (4,5), (6,7) of items 0-7 (lo) and 8-15 (hi) */
        __m128i b0 = _mm_unpacklo_epi8(a0, a1), b1 = _mm_unpackhi_epi8(a0, a1);
        __m128i b2 = _mm_unpacklo_epi8(a2, a3), b3 = _mm_unpackhi_epi8(a2, a3);
        __m128i b4 = _mm_unpacklo_epi8(a4, a5), b5 = _mm_unpackhi_epi8(a4, a5);
        __m128i b6 = _mm_unpacklo_epi8(a6, a7), b7 = _mm_unpackhi_epi8(a6, a7);
        /* bytes 0-3 and 4-7 of items 0-3, 4-7, 8-11, 12-15 */
        __m128i c0 = _mm_unpacklo_epi16(b0, b2), c1 = _mm_unpackhi_epi16(b0, b2);
        __m128i c2 = _mm_unpacklo_epi16(b1, b3), c3 = _mm_unpackhi_epi16(b1, b3);
        __m128i c4 = _mm_unpacklo_epi16(b4, b6), c5 = _mm_unpackhi_epi16(b4, b6);
        __m128i c6 = _mm_unpacklo_epi16(b5, b7), c7 = _mm_unpackhi_epi16(b5, b7);
        uint8_t *o = dst + 8 * i;
        _mm_storeu_si128((__m128i *)(o + 0), _mm_unpacklo_epi32(c0, c4));
        _mm_storeu_si128((__m128i *)(o + 16), _mm_unpackhi_epi32(c0, c4));
        _mm_storeu_si128((__m128i *)(o + 32), _mm_unpacklo_epi32(c1, c5));
        _mm_storeu_si128((__m128i *)(o + 48), _mm_unpackhi_epi32(c1, c5));
        _mm_storeu_si128((__m128i *)(o + 64), _mm_unpacklo_epi32(c2, c6));
        _mm_storeu_si128((__m128i *)(o + 80), _mm_unpackhi_epi32(c2, c6));
        _mm_storeu_si128((__m128i *)(o + 96), _mm_unpacklo_epi32(c3, c7));
        _mm_storeu_si128((__m128i *)(o + 112), _mm_unpackhi_epi32(c3, c7));
    }
#endif
    for (; i < ne; i++)
        for (j = 0; j < 8; j++)
            dst[8 * i + j] = src[j * ne + i];
    memcpy(dst + 8 * ne, src + 8 * ne, n - 8 * ne);
}

/* The same for 4-byte items (int32, float32): plane j from j * (n / 4); the n % 4 bytes past the last
   whole item are stored as they are. */
static void blz_unshuffle4(const uint8_t *src, uint8_t *dst, size_t n) {
    size_t ne = n / 4, i = 0, j;
#ifdef BLZ_DEC_SSE2
    for (; i + 16 <= ne; i += 16) {
        __m128i a0 = _mm_loadu_si128((const __m128i *)(src + 0 * ne + i));
        __m128i a1 = _mm_loadu_si128((const __m128i *)(src + 1 * ne + i));
        __m128i a2 = _mm_loadu_si128((const __m128i *)(src + 2 * ne + i));
        __m128i a3 = _mm_loadu_si128((const __m128i *)(src + 3 * ne + i));
        /* bytes (0,1) and (2,3) of items 0-7 (lo) and 8-15 (hi), then whole items 0-3 ... 12-15 */
        __m128i b0 = _mm_unpacklo_epi8(a0, a1), b1 = _mm_unpackhi_epi8(a0, a1);
        __m128i b2 = _mm_unpacklo_epi8(a2, a3), b3 = _mm_unpackhi_epi8(a2, a3);
        uint8_t *o = dst + 4 * i;
        _mm_storeu_si128((__m128i *)(o + 0), _mm_unpacklo_epi16(b0, b2));
        _mm_storeu_si128((__m128i *)(o + 16), _mm_unpackhi_epi16(b0, b2));
        _mm_storeu_si128((__m128i *)(o + 32), _mm_unpacklo_epi16(b1, b3));
        _mm_storeu_si128((__m128i *)(o + 48), _mm_unpackhi_epi16(b1, b3));
    }
#endif
    for (; i < ne; i++)
        for (j = 0; j < 4; j++)
            dst[4 * i + j] = src[j * ne + i];
    memcpy(dst + 4 * ne, src + 4 * ne, n - 4 * ne);
}

/* Whether this decoder takes a chunk whose header gives `flags` and typesize `ts` (not counting
   chunks stored raw): LZ4 blocks, not split, byte-shuffled by 8 or 4 or not at all.  src[1] is the
   version of the codec's format (1 for LZ4): C-Blosc refuses any other, so such a chunk goes to
   C-Blosc for its answer rather than being read as today's LZ4. */
static inline int blz_dec_takes(const uint8_t *src, int flags, int ts, int shuf) {
    return !((flags >> 5) != 1 || src[1] != 1 || (flags & 0x04) || (flags & 0x08) || !(flags & 0x10) ||
             (shuf && ts != 8 && ts != 4));
}

/* Block `j` (`bsize` decoded bytes) of a chunk of `ct` bytes and `nblocks` blocks whose header the
   caller checked: its LZ4 stream (or its bytes, stored as they are when LZ4 could not shrink them)
   into `target`, then with `shuf` unshuffled from `target` into `dst` (`target` is `dst` without).
   0, or BLZ_DEC_BAD when its offset or size is out of the chunk or its stream is malformed. */
BLZ_DEC_INLINE int blz_dec_block(const uint8_t *src, int64_t ct, int64_t nblocks, int64_t j,
                                 int64_t bsize, uint8_t *target, uint8_t *dst, int ts, int shuf,
                                 const int ahead) {
    int64_t start = blz_dec_i32(src + 16 + 4 * j), csize;
    if (start < 16 + 4 * nblocks || start + 4 > ct) return BLZ_DEC_BAD;
    csize = blz_dec_i32(src + start);
    if (csize <= 0 || csize > bsize || start + 4 + csize > ct) return BLZ_DEC_BAD;
    if (csize == bsize) {               /* Blosc stores a block LZ4 cannot shrink as it is */
        memcpy(target, src + start + 4, (size_t)bsize);
    } else if (blz_lz4_block_as(src + start + 4, (size_t)csize, target, (size_t)bsize, ahead) != 0) {
        return BLZ_DEC_BAD;
    }
    if (shuf) {
        if (ts == 8) blz_unshuffle8(target, dst, (size_t)bsize);
        else blz_unshuffle4(target, dst, (size_t)bsize);
    }
    return 0;
}

/* Decode the Blosc 1.x chunk at `src` (`srclen` bytes, its header read by the caller's checks or
   not) into `dst` (`destsize` bytes).  Returns the decoded size, BLZ_DEC_BAD for a chunk that does
   not decode, or BLZ_DEC_OTHER, nothing written, for a chunk this decoder leaves to C-Blosc.
   blz_decode_chunk_ahead: the same, asking for the compressed bytes ahead of the decoder (for a
   `dst` the caller reuses, which stays in cache). */
BLZ_DEC_INLINE int64_t blz_decode_chunk_as(const uint8_t *src, int64_t srclen, uint8_t *dst,
                                           int64_t destsize, const int ahead) {
    int flags, ts, shuf;
    int64_t nbytes, bs, ct, nblocks, j;
    uint8_t stack[32768];
    uint8_t *scratch = stack;
    int64_t ret;
    if (srclen < 16) return BLZ_DEC_BAD;
    flags = src[2];
    ts = src[3];
    nbytes = blz_dec_i32(src + 4);
    bs = blz_dec_i32(src + 8);
    ct = blz_dec_i32(src + 12);
    if (ct != srclen || nbytes < 0 || nbytes > destsize) return BLZ_DEC_BAD;
    if (flags & 0x02) {                 /* stored raw */
        if (ct != nbytes + 16) return BLZ_DEC_BAD;
        memcpy(dst, src + 16, (size_t)nbytes);
        return nbytes;
    }
    shuf = (flags & 0x01) && ts > 1;
    if (!blz_dec_takes(src, flags, ts, shuf))
        return BLZ_DEC_OTHER;
    if (bs <= 0 || nbytes == 0) return BLZ_DEC_BAD;
    nblocks = (nbytes + bs - 1) / bs;
    if (16 + 4 * nblocks > ct) return BLZ_DEC_BAD;
    /* a block never holds more than the chunk: a damaged `bs` past `nbytes` (which the caller's
       buffer already bounds) must not size an allocation */
    if (shuf && (bs < nbytes ? bs : nbytes) > (int64_t)sizeof(stack)) {
        scratch = (uint8_t *)malloc((size_t)(bs < nbytes ? bs : nbytes));
        if (scratch == NULL) return BLZ_DEC_OTHER;
    }
    ret = nbytes;
    for (j = 0; j < nblocks; j++) {
        int64_t bsize = nbytes - j * bs < bs ? nbytes - j * bs : bs;
        uint8_t *out = dst + j * bs;
        if (blz_dec_block(src, ct, nblocks, j, bsize, shuf ? scratch : out, out, ts, shuf, ahead) != 0) {
            ret = BLZ_DEC_BAD;
            break;
        }
    }
    if (scratch != stack) free(scratch);
    return ret;
}
static int64_t blz_decode_chunk(const uint8_t *src, int64_t srclen, uint8_t *dst, int64_t destsize) {
    return blz_decode_chunk_as(src, srclen, dst, destsize, 0);
}
static int64_t blz_decode_chunk_ahead(const uint8_t *src, int64_t srclen, uint8_t *dst, int64_t destsize) {
    return blz_decode_chunk_as(src, srclen, dst, destsize, 1);
}

#endif
