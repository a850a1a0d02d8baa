/* The rows where a window of booleans (bytes 0 or 1) holds, for the fused expression kernel's
   queries and for the `where` producer. */
#ifndef BLZ_SELECT_H
#define BLZ_SELECT_H
#include <stdint.h>
#include <string.h>

/* the positions of the true bytes of v[0:m] into idx; returns their number.  Eight bytes at a
   time: all false (most of a selective query's) and all true (a range's) need no byte loop. */
static int64_t xk_positions(const uint8_t *restrict v, int64_t m, int32_t *restrict idx) {
    int64_t s = 0, i = 0;
    for (; i + 8 <= m; i += 8) {
        uint64_t w;
        memcpy(&w, v + i, 8);
        if (w == 0) continue;
        if (w == 0x0101010101010101ULL) {
            for (int k = 0; k < 8; k++) idx[s + k] = (int32_t)(i + k);
            s += 8;
            continue;
        }
        for (int k = 0; k < 8; k++) { idx[s] = (int32_t)(i + k); s += v[i + k]; }
    }
    for (; i < m; i++) { idx[s] = (int32_t)i; s += v[i]; }
    return s;
}

#endif
