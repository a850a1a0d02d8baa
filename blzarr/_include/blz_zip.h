/* Writing 8-byte fields into rows with streaming stores (_rows.zip_fields, for results larger than a
   core's cache: the result's lines are written whole, never read first). */
#ifndef BLZ_ZIP_H
#define BLZ_ZIP_H
#include <Python.h>
#include <string.h>
#include <stdint.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
/* rows of `nsrc` 8-byte fields packed one after the other, row by row with streaming stores: the
   result's lines are written whole without being read first (the 8-byte aligned `dst`) */
static int blz_zip8_stream(char *dst, const char *const *src, Py_ssize_t nsrc, Py_ssize_t n) {
    Py_ssize_t i, k;
    long long *d = (long long *)dst;
    if (((uintptr_t)dst & 7) != 0)
        return 0;
    for (i = 0; i < n; i++) {
        for (k = 0; k < nsrc; k++) {
            long long v;
            memcpy(&v, src[k] + 8 * i, 8);
            _mm_stream_si64(d + i * nsrc + k, v);
        }
    }
    _mm_sfence();
    return 1;
}
#else
static int blz_zip8_stream(char *dst, const char *const *src, Py_ssize_t nsrc, Py_ssize_t n) {
    (void)dst; (void)src; (void)nsrc; (void)n;
    return 0;
}
#endif

#endif
