/* The loops that the compiler vectorizes are built three times on x86-64 Linux with GCC (AVX-512,
   AVX2 and the baseline), and the loader picks the one this CPU runs: a wheel built for the baseline
   still uses the wide registers where they exist. */
#ifndef BLZ_CLONES_H
#define BLZ_CLONES_H
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define BLZ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BLZ_CLONES
#endif
#endif
