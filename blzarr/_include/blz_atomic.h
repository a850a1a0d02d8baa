/* Atomic counters shared by the threads of blzarr's Cython kernels (the work pool, the `where`
   producer thread, the BLZ reader).  Relaxed operations are for claiming items from a counter, where
   only the counter's own value matters; the _SC ones are sequentially consistent, for flags and
   counters through which two threads hand data to each other.  Macros, so every use stays inline. */
#ifndef BLZ_ATOMIC_H
#define BLZ_ATOMIC_H

#include <Python.h>

#if defined(_MSC_VER)
#include <intrin.h>
#if defined(_WIN64)
#define BLZ_FETCH_ADD(p, v) ((Py_ssize_t)_InterlockedExchangeAdd64((volatile __int64 *)(p), (__int64)(v)))
#define BLZ_CAS(p, o, n) (_InterlockedCompareExchange64((volatile __int64 *)(p), (__int64)(n), (__int64)(o)) == (__int64)(o))
#define BLZ_XCHG_SC(p, v) ((Py_ssize_t)_InterlockedExchange64((volatile __int64 *)(p), (__int64)(v)))
#else
#define BLZ_FETCH_ADD(p, v) ((Py_ssize_t)_InterlockedExchangeAdd((volatile long *)(p), (long)(v)))
#define BLZ_CAS(p, o, n) (_InterlockedCompareExchange((volatile long *)(p), (long)(n), (long)(o)) == (long)(o))
#define BLZ_XCHG_SC(p, v) ((Py_ssize_t)_InterlockedExchange((volatile long *)(p), (long)(v)))
#endif
#define BLZ_LOAD(p) (*(volatile Py_ssize_t *)(p))
/* the Interlocked functions are full barriers: an add of 0 is a sequentially consistent load */
#define BLZ_LOAD_SC(p) BLZ_FETCH_ADD(p, 0)
#else
#define BLZ_FETCH_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
/* `o` must be an lvalue: on failure the builtin stores the value it found there */
#define BLZ_CAS(p, o, n) __atomic_compare_exchange_n((p), &(o), (n), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
#define BLZ_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define BLZ_XCHG_SC(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
#define BLZ_LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#endif

/* a spinning waiter's pause: lets the other hyperthread run and saves power while it polls */
#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <immintrin.h>
#define BLZ_PAUSE() _mm_pause()
#elif defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define BLZ_PAUSE() __builtin_ia32_pause()
#elif defined(__GNUC__) && defined(__aarch64__)
#define BLZ_PAUSE() __asm__ __volatile__("yield")
#else
#define BLZ_PAUSE() ((void)0)
#endif

#endif
