# The sums of chunks at the C level: NumPy's pairwise float sum (inline, so that each module that sums
# -- this one, `_exprkernel` -- has it compiled in) and the sum of one decoded chunk's values, which
# `_superchunk.ReadChunks` calls for the chunks it reads.

cdef enum:
    SUM_F8 = 0
    SUM_F4 = 1
    SUM_SIGNED = 2       # accumulated in int64, wrapping as NumPy's does
    SUM_UNSIGNED = 3     # accumulated in uint64
    PAIRWISE_LEAF = 128  # the most values a leaf of the pairwise tree sums with its eight accumulators

# NumPy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src), step for step, so that the sum
# of a chunk is bit-identical to ``np.sum`` of the same values: blocks of at most 128 values summed with
# eight accumulators, longer runs split in two (at a multiple of 8) and the halves added.
ctypedef fused real_t:
    double
    float

cdef inline real_t pairwise(const real_t *a, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i, n2
    cdef real_t res, r0, r1, r2, r3, r4, r5, r6, r7
    if n < 8:
        res = 0
        for i in range(n):
            res += a[i]
        return res
    if n <= PAIRWISE_LEAF:
        r0 = a[0]; r1 = a[1]; r2 = a[2]; r3 = a[3]
        r4 = a[4]; r5 = a[5]; r6 = a[6]; r7 = a[7]
        i = 8
        while i < n - (n % 8):
            r0 += a[i]; r1 += a[i + 1]; r2 += a[i + 2]; r3 += a[i + 3]
            r4 += a[i + 4]; r5 += a[i + 5]; r6 += a[i + 6]; r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise(a, n2) + pairwise(a + n2, n - n2)


cdef void sum_values(int kind, Py_ssize_t isz, bint is_signed, const char *v, Py_ssize_t n, char *sums,
                     Py_ssize_t k) noexcept nogil
