/* Differential mutation fuzzer of blzarr's own chunk decoder (blz_lz4dec.h, blz_blockdec.h) against
   C-Blosc, for a build with AddressSanitizer and UBSan:

     gcc -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Iblzarr/_include \
         -I$VENV/include tools/fuzz/lz4dec_fuzz.c $VENV/lib64/libblosc.a -lpthread -o /tmp/lz4dec_fuzz
     python tools/fuzz/make_seeds.py /tmp/fzseeds      # valid chunks, one per file
     /tmp/lz4dec_fuzz /tmp/fzseeds SECONDS RNGSEED

   Each case mutates a seed chunk (bits, bytes, header fields, block starts, stream sizes, LZ4
   tokens, truncation) into a buffer of exactly its length (ASan then catches a read one byte past
   it) and decodes it into an output of exactly the header's size, whole (blz_decode_chunk) and
   block by block (blz_decode_block).  Where blzarr's decoder accepts a chunk, C-Blosc must give the
   same bytes; each block's decode must equal its part of the whole decode.  A disagreement prints
   and keeps the case (crash-<n>.bin) and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include "blosc.h"
#include "blz_lz4dec.h"
#include "blz_blockdec.h"

static uint8_t *seeds[20000];
static size_t seedlen[20000];
static int nseeds;
static uint64_t rs;

static uint64_t rnd(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return rs;
}
static size_t rn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static const uint32_t EDGE[] = {0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 127, 128, 255, 256, 0x7FFF, 0x8000,
                                0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000};

static void keep(const uint8_t *b, size_t n, const char *why) {
    char name[64];
    FILE *f;
    snprintf(name, sizeof name, "crash-%llu.bin", (unsigned long long)time(NULL));
    f = fopen(name, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    fprintf(stderr, "FOUND: %s (kept %s)\n", why, name);
    exit(1);
}

/* mutate `b` (length *n, capacity cap) in place */
static void mutate(uint8_t *b, size_t *n, size_t cap) {
    int k, times = 1 + (int)rn(4);
    for (k = 0; k < times; k++) {
        size_t i;
        switch (rn(9)) {
        case 0: if (*n) { i = rn(*n); b[i] ^= (uint8_t)(1u << rn(8)); } break;
        case 1: if (*n) b[rn(*n)] = (uint8_t)rnd(); break;
        case 2: if (*n >= 16) b[rn(4)] = (uint8_t)rnd(); break;
        case 3: if (*n >= 16) put32(b + 4 + 4 * rn(3), rn(3) ? EDGE[rn(20)] : (uint32_t)rn(1 << 20)); break;
        case 4:                              /* a block start or stream size */
            if (*n >= 24) {
                i = 16 + 4 * rn((*n - 20) / 4 < 64 ? (*n - 20) / 4 : 64);
                if (rn(2)) i = 16 + rn(*n - 19);
                put32(b + i, rn(2) ? EDGE[rn(20)] : (uint32_t)rn(*n + 8));
            }
            break;
        case 5: if (*n) *n = rn(*n); break;
        case 6: { size_t m = 1 + rn(32); if (*n + m <= cap) { for (i = 0; i < m; i++) b[*n + i] = (uint8_t)rnd(); *n += m; } } break;
        case 7:                              /* a byte in the body: a token, an offset, a length */
            if (*n > 24) { i = 16 + rn(*n - 16); b[i] = rn(2) ? (uint8_t)rnd() : (uint8_t)(rn(2) ? 0xFF : 0xF0 | rn(16)); }
            break;
        case 8:                              /* copy a run elsewhere */
            if (*n > 24) { size_t a = rn(*n), c = rn(*n), m = 1 + rn(16); if (a + m <= *n && c + m <= *n) memmove(b + c, b + a, m); }
            break;
        }
    }
    if (*n >= 16 && rn(10) < 8) put32(b + 12, (uint32_t)*n);
}

/* the header checks blzarr makes before its decoder runs (_chunk.parse_header) */
static int hdr_ok(const uint8_t *p, size_t n) {
    int64_t nbytes = blz_dec_i32(p + 4), bs = blz_dec_i32(p + 8), ct = blz_dec_i32(p + 12);
    return p[0] == 2 && !(p[2] & 0x08) && (p[2] >> 5) <= 4 && p[3] != 0 && ct == (int64_t)n &&
           nbytes > 0 && bs > 0 && bs <= nbytes && ct <= nbytes + 16;
}

static int load(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    if (!d) return 0;
    while ((e = readdir(d)) && nseeds < 20000) {
        FILE *f;
        long len;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fseek(f, 0, SEEK_SET);
        seeds[nseeds] = malloc((size_t)len);
        seedlen[nseeds] = fread(seeds[nseeds], 1, (size_t)len, f);
        fclose(f);
        nseeds++;
    }
    closedir(d);
    return nseeds;
}

int main(int argc, char **argv) {
    double seconds = argc > 2 ? atof(argv[2]) : 60;
    time_t t_end;
    long long execs = 0, taken = 0, bad = 0, other = 0, blosc_only = 0, blz_only = 0, blocks = 0;
    uint8_t *work;
    size_t cap = 1 << 21;
    rs = argc > 3 ? strtoull(argv[3], NULL, 10) * 2654435761u + 1 : 88172645463325252ull;
    if (argc < 2 || !load(argv[1])) { fprintf(stderr, "usage: %s SEEDDIR [SECONDS [SEED]]\n", argv[0]); return 2; }
    blosc_init();
    work = malloc(cap);
    t_end = time(NULL) + (time_t)seconds;
    while (time(NULL) < t_end) {
        int it;
        for (it = 0; it < 256; it++) {
            int s = (int)rn((size_t)nseeds);
            size_t n = seedlen[s] < cap ? seedlen[s] : cap;
            uint8_t *src, *dst, *ref;
            int64_t nbytes, r, bs, nb, j;
            memcpy(work, seeds[s], n);
            mutate(work, &n, cap);
            src = malloc(n ? n : 1);
            memcpy(src, work, n);
            execs++;
            nbytes = n >= 16 ? blz_dec_i32(src + 4) : 0;
            if (nbytes < 0 || nbytes > (1 << 24)) nbytes = 1 << 10;   /* a damaged size: a small output */
            dst = malloc(nbytes ? (size_t)nbytes : 1);
            r = blz_decode_chunk(src, (int64_t)n, dst, nbytes);
            if (r == BLZ_DEC_OTHER) other++;
            else if (r < 0) bad++;
            else taken++;
            /* C-Blosc only on chunks whose structure blzarr's decoder accepted (it trusts the header) */
            if (r >= 0 && n >= 16 && !(src[2] & 0x02) && r == nbytes && nbytes > 0) {
                int rc;
                ref = malloc((size_t)nbytes);
                rc = blosc_decompress_ctx(src, ref, (size_t)nbytes, 1);
                if (rc == nbytes) {
                    if (memcmp(ref, dst, (size_t)nbytes) != 0) keep(src, n, "blz_decode_chunk differs from C-Blosc");
                } else if (hdr_ok(src, n)) {
                    /* a chunk blzarr's header checks pass, that C-Blosc refuses: kept for a look */
                    if (blz_only < 5) {
                        char name[64];
                        FILE *f;
                        snprintf(name, sizeof name, "blzonly-%lld.bin", blz_only);
                        f = fopen(name, "wb");
                        fwrite(src, 1, n, f);
                        fclose(f);
                    }
                    blz_only++;
                }
                /* every block alone */
                bs = blz_dec_i32(src + 8);
                nb = (nbytes + bs - 1) / bs;
                for (j = 0; j < nb && j < 64; j++) {
                    int64_t bsize = nbytes - j * bs < bs ? nbytes - j * bs : bs;
                    uint8_t *o = malloc((size_t)bsize);
                    int64_t rb = blz_decode_block(src, (int64_t)n, j, o, bsize);
                    blocks++;
                    if (rb == BLZ_DEC_BAD) keep(src, n, "a block of a chunk that decodes whole is bad alone");
                    if (rb >= 0 && memcmp(o, dst + j * bs, (size_t)bsize) != 0) keep(src, n, "blz_decode_block differs");
                    free(o);
                }
                free(ref);
            } else if (r == BLZ_DEC_BAD && n >= 16 && nbytes > 0) {
                /* the block decoder on a chunk the whole decoder refuses: bad or other, never a crash */
                bs = blz_dec_i32(src + 8);
                if (bs > 0) {
                    int64_t jj = (int64_t)rn(4), bsize = nbytes - jj * bs < bs ? nbytes - jj * bs : bs;
                    if (bsize > 0 && bsize <= (1 << 24)) {
                        uint8_t *o = malloc((size_t)bsize);
                        int64_t rb = blz_decode_block(src, (int64_t)n, jj, o, bsize);
                        (void)rb;
                        free(o);
                    }
                }
            }
            free(dst);
            free(src);
        }
    }
    (void)blosc_only;
    free(work);
    fprintf(stderr, "execs %lld: taken %lld, bad %lld, other %lld, blz ok but C-Blosc not %lld, blocks %lld\n",
           execs, taken, bad, other, blz_only, blocks);
    return 0;
}
