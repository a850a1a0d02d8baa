# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Group-by kernels: keys to dense group ids, and per-group aggregates updated block by block.

A key is a row of 64-bit words (the key columns' bytes packed side by side, zero padded; floats
canonical: one NaN, no negative zero), so any fixed-width key, one column or several, goes through
the same table.  `KeyTable` is an open-addressing table (linear probing, power-of-two capacity)
giving each distinct key a dense id in order of first insertion.  Small integer key ranges skip the
table: `direct_codes` makes the id from the values themselves.

Every function here works on one block and releases the GIL, so that each thread of a query updates
its own partial aggregates; the Python side (`blzarr.query.groupby`) merges the partials.  A group id
of -1 marks a row the filter drops.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memcmp, memset
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.math cimport isnan, NAN

import numpy as np

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define BLZ_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
    #define BLZ_PREFETCH_R(p) __builtin_prefetch((p), 0, 3)
    #else
    #define BLZ_PREFETCH_W(p) ((void)(p))
    #define BLZ_PREFETCH_R(p) ((void)(p))
    #endif
    """
    void BLZ_PREFETCH_W(const void *p) noexcept nogil
    void BLZ_PREFETCH_R(const void *p) noexcept nogil

cdef extern from *:
    """
    #include <string.h>
    /* 8 bytes from any address, without the caller's variable having its address taken (which
       kept it in memory in the lookup loop) */
    static inline uint64_t blz_load_u64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
    """
    uint64_t blz_load_u64(const void *p) noexcept nogil

# how many rows ahead the kernels that update one group's state per row ask for that state: with
# more groups than the L2 cache holds, each update is a cache miss, and a load issued this far
# ahead is back by the time the row comes
cdef enum:
    AHEAD = 48
# ... when the state array holds at least this many groups (below, it stays in the caches and the
# prefetches are only extra work)
cdef enum:
    AHEAD_MIN_GROUPS = 1 << 14

ctypedef fused intkey_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t


cdef int64_t I64_MAX = 0x7fffffffffffffff
cdef int64_t I64_MIN = -0x7fffffffffffffff - 1


cdef inline bint _little_endian() noexcept nogil:
    cdef uint32_t one = 1
    return (<uint8_t*> &one)[0] == 1


cdef inline int _log2(Py_ssize_t x) noexcept nogil:
    cdef int r = 0
    while (<Py_ssize_t> 1 << r) < x:
        r += 1
    return r


cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    # the splitmix64 finalizer: every input bit reaches every output bit, so the low bits that pick
    # the slot are good even for keys that differ only in their high bytes (short strings)
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef inline uint64_t _one_word_key(const uint8_t* row, Py_ssize_t isz, int fkind) noexcept nogil:
    """The key word of one row of at most 8 bytes, copied byte-wise; `fkind` 4 or 8 marks a
    float32/float64 value, made canonical as `pack_column` does (one NaN, -0.0 as 0.0)."""
    cdef uint64_t k = 0
    cdef double d
    cdef float f
    if fkind == 8:
        memcpy(&d, row, 8)
        if isnan(d):
            d = NAN
        elif d == 0.0:
            d = 0.0
        memcpy(&k, &d, 8)
    elif fkind == 4:
        memcpy(&f, row, 4)
        if isnan(f):
            f = <float> NAN
        elif f == 0.0:
            f = 0.0
        memcpy(&k, &f, 4)
    else:
        memcpy(&k, row, isz)
    return k


cdef inline uint64_t _hash(const uint64_t* k, Py_ssize_t nw) noexcept nogil:
    cdef uint64_t h = _mix(k[0] + <uint64_t>0x9e3779b97f4a7c15)
    cdef Py_ssize_t j
    for j in range(1, nw):
        h = _mix(h ^ (k[j] + <uint64_t>0x9e3779b97f4a7c15 * <uint64_t>(j + 1)))
    return h


# a one-word table keeps at most one key in SPARSE_FILL of its slots while it has at most SPARSE_SLOTS
# slots (beyond, one in two): at one in two, a third of the lookups of a few hundred keys probed past
# their first slot, a mispredicted branch each; the extra slots cost nothing while the lookups only
# ever touch the slots of the keys there are (one cache line a key)
cdef enum:
    SPARSE_FILL = 16
    SPARSE_SLOTS = 1 << 13
# ... and keeps each slot's key beside its id while it has at most SKEY_SLOTS slots (beyond, the key
# is read from the keys in id order, as many bytes a key as the table held before)
cdef enum:
    SKEY_SLOTS = 1 << 16


cdef class KeyTable:
    """Distinct keys of `nwords` 64-bit words each, numbered 0, 1, ... in order of insertion."""

    cdef readonly Py_ssize_t nwords
    cdef readonly Py_ssize_t n
    cdef uint64_t* keys         # n * nwords words, the keys in id order (room for kcap keys)
    cdef int64_t* slots         # cap entries: the id stored in each slot, -1 for an empty one
    cdef uint64_t* skeys        # one-word tables up to SKEY_SLOTS slots: the key in each slot (a
                                # slot is checked without first reading its id), else NULL
    cdef Py_ssize_t cap, kcap, limit    # limit: the number of keys that makes the table grow
    cdef int shift              # 64 - log2(cap): the product's top bits pick a slot (one-word keys)

    def __cinit__(self, Py_ssize_t nwords, Py_ssize_t expected=0):
        if nwords < 1:
            raise ValueError("a key has at least one word")
        self.nwords = nwords
        self.n = 0
        self.cap = 16
        while self.cap < 2 * expected:
            self.cap *= 2
        if nwords == 1:
            while self.cap <= SPARSE_SLOTS and self.cap < SPARSE_FILL * expected:
                self.cap *= 2
        self.limit = self._limit(self.cap)
        self.kcap = max(self.limit, 8)
        self.shift = 64 - _log2(self.cap)
        self.slots = <int64_t*> malloc(self.cap * sizeof(int64_t))
        self.keys = <uint64_t*> malloc(self.kcap * nwords * sizeof(uint64_t))
        self.skeys = NULL
        if nwords == 1 and self.cap <= SKEY_SLOTS:
            self.skeys = <uint64_t*> malloc(self.cap * sizeof(uint64_t))
            if self.skeys == NULL:
                raise MemoryError()
        if self.slots == NULL or self.keys == NULL:
            raise MemoryError()
        memset(self.slots, 0xff, self.cap * sizeof(int64_t))

    def __dealloc__(self):
        free(self.slots)
        free(self.keys)
        free(self.skeys)

    cdef inline Py_ssize_t _limit(self, Py_ssize_t cap) noexcept nogil:
        if self.nwords == 1 and cap <= SPARSE_SLOTS:
            return max(cap // SPARSE_FILL, 1)
        return cap // 2

    cdef int _grow(self) noexcept nogil:
        cdef Py_ssize_t newcap = self.cap * 2, i, j, mask = newcap - 1
        cdef Py_ssize_t limit = self._limit(newcap), kcap = self.kcap
        cdef int shift = 64 - _log2(newcap)
        cdef int64_t* slots = <int64_t*> malloc(newcap * sizeof(int64_t))
        cdef uint64_t* skeys = NULL
        cdef uint64_t* keys
        if slots == NULL:
            return -1
        if self.nwords == 1 and newcap <= SKEY_SLOTS:
            skeys = <uint64_t*> malloc(newcap * sizeof(uint64_t))
            if skeys == NULL:
                free(slots)
                return -1
        if limit > kcap:
            kcap = max(limit, 2 * kcap)
            keys = <uint64_t*> realloc(self.keys, kcap * self.nwords * sizeof(uint64_t))
            if keys == NULL:
                free(slots)
                free(skeys)
                return -1
            self.keys = keys
            self.kcap = kcap
        keys = self.keys
        memset(slots, 0xff, newcap * sizeof(int64_t))
        for i in range(self.n):
            if self.nwords == 1:
                j = <Py_ssize_t> ((keys[i] * <uint64_t>0x9e3779b97f4a7c15) >> shift)
            else:
                j = _hash(keys + i * self.nwords, self.nwords) & mask
            while slots[j] != -1:
                j = (j + 1) & mask
            slots[j] = i
            if skeys != NULL:
                skeys[j] = keys[i]
        free(self.slots)
        free(self.skeys)
        self.slots = slots
        self.skeys = skeys
        self.cap = newcap
        self.limit = limit
        self.shift = shift
        return 0

    cdef inline int64_t _find1(self, uint64_t k, bint insert) noexcept nogil:
        # one-word keys: Fibonacci hashing (one multiply; the top bits of the product depend on
        # every bit of the key) and a loop without memcmp; -3 when the table cannot grow
        cdef Py_ssize_t mask = self.cap - 1
        cdef Py_ssize_t j = <Py_ssize_t> ((k * <uint64_t>0x9e3779b97f4a7c15) >> self.shift)
        cdef int64_t s
        cdef int64_t* slots = self.slots
        cdef uint64_t* skeys = self.skeys
        cdef uint64_t* keys = self.keys
        if skeys != NULL:
            while True:
                s = slots[j]
                if s == -1:
                    break
                if skeys[j] == k:
                    return s
                j = (j + 1) & mask
        else:
            while True:
                s = slots[j]
                if s == -1:
                    break
                if keys[s] == k:
                    return s
                j = (j + 1) & mask
        if not insert:
            return -1
        if self.n >= self.limit:
            if self._grow() < 0:
                return -3
            return self._find1(k, insert)
        s = self.n
        self.keys[s] = k
        slots[j] = s
        if skeys != NULL:
            skeys[j] = k
        self.n += 1
        return s

    cdef inline int64_t _find(self, const uint64_t* k, bint insert) except -2 nogil:
        cdef Py_ssize_t nw = self.nwords, mask = self.cap - 1
        cdef Py_ssize_t j = _hash(k, nw) & mask
        cdef int64_t s
        if nw == 1:
            s = self._find1(k[0], insert)
            if s == -3:
                with gil:
                    raise MemoryError()
            return s
        while True:
            s = self.slots[j]
            if s == -1:
                break
            if memcmp(self.keys + s * nw, k, nw * sizeof(uint64_t)) == 0:
                return s
            j = (j + 1) & mask
        if not insert:
            return -1
        if self.n >= self.limit:
            if self._grow() < 0:
                with gil:
                    raise MemoryError()
            return self._find(k, insert)
        s = self.n
        memcpy(self.keys + s * nw, k, nw * sizeof(uint64_t))
        self.slots[j] = s
        self.n += 1
        return s

    def ids(self, const uint64_t[:, ::1] keys, int64_t[::1] out, const uint8_t[::1] mask=None,
            bint insert=True):
        """The id of every key row into `out` (-1 where `mask` is 0, or, without `insert`, where the
        key is not in the table); with `insert`, new keys get the next ids."""
        cdef Py_ssize_t i, n = keys.shape[0]
        if keys.shape[1] != self.nwords:
            raise ValueError(f"keys of {keys.shape[1]} words for a table of {self.nwords}")
        if out.shape[0] < n or (mask is not None and mask.shape[0] < n):
            raise ValueError("output or mask shorter than the keys")
        cdef bint masked = mask is not None
        cdef int64_t last_id = -1
        cdef uint64_t last_key = 0
        with nogil:
            if self.nwords == 1:
                for i in range(n):
                    if masked and not mask[i]:
                        out[i] = -1
                    elif last_id >= 0 and keys[i, 0] == last_key:
                        # runs of one key (sorted or clustered columns) skip the probe
                        out[i] = last_id
                    else:
                        last_id = self._find1(keys[i, 0], insert)
                        if last_id == -3:
                            break
                        last_key = keys[i, 0]
                        out[i] = last_id
            else:
                for i in range(n):
                    if masked and not mask[i]:
                        out[i] = -1
                    else:
                        out[i] = self._find(&keys[i, 0], insert)

        if last_id == -3:
            raise MemoryError()

    def ids_column(self, const uint8_t[:, ::1] src, int fkind, int64_t[::1] out,
                   const uint8_t[::1] mask=None, bint insert=True):
        """`ids` for one key column of at most 8 bytes per value, read straight from its rows
        (`fkind` 4 or 8: float32/float64 values, made canonical as `pack_column` does)."""
        cdef Py_ssize_t i, n = src.shape[0], isz = src.shape[1]
        cdef bint masked = mask is not None
        cdef int64_t gid = -1
        cdef uint64_t k = 0, last_key = 0
        cdef const uint8_t* p
        if self.nwords != 1 or isz > 8:
            raise ValueError("ids_column takes one-word keys")
        if out.shape[0] < n or (masked and mask.shape[0] < n):
            raise ValueError("output or mask shorter than the keys")
        if n == 0:
            return
        p = &src[0, 0]
        # rows whose 8 bytes from their start lie inside the buffer are loaded whole and masked
        # (little-endian: the low bytes are the first ones); the last few are copied byte-wise
        cdef Py_ssize_t nfast = 0
        cdef uint64_t keep = 0xffffffffffffffff if isz == 8 else ((<uint64_t> 1 << (8 * isz)) - 1)
        if fkind == 0 and _little_endian():
            nfast = n if isz == 8 else max(0, n - (8 // isz) - 1)
        with nogil:
            for i in range(nfast):
                if masked and not mask[i]:
                    out[i] = -1
                    continue
                memcpy(&k, p + i * isz, 8)
                k &= keep
                if gid < 0 or k != last_key:
                    gid = self._find1(k, insert)
                    if gid == -3:
                        break
                    last_key = k
                out[i] = gid
            for i in range(nfast, n):
                if gid == -3:
                    break
                if masked and not mask[i]:
                    out[i] = -1
                    continue
                k = _one_word_key(p + i * isz, isz, fkind)
                if gid < 0 or k != last_key:
                    gid = self._find1(k, insert)
                    if gid == -3:
                        break
                    last_key = k
                out[i] = gid
        if gid == -3:
            raise MemoryError()

    cdef inline Py_ssize_t _nfast(self, Py_ssize_t n, Py_ssize_t isz, int fkind, Py_ssize_t start) noexcept nogil:
        # rows whose 8 bytes from their start lie inside the buffer are loaded whole and masked
        # (little-endian: the low bytes are the first ones); the last few are copied byte-wise
        if fkind == 0 and _little_endian():
            return n if isz == 8 else max(start, n - (8 // isz) - 1)
        return start

    def ids_rows(self, const uint8_t[:, ::1] src, int fkind, int64_t[::1] out, int64_t[::1] nrows,
                 int64_t[::1] order, Py_ssize_t norder, const uint8_t[::1] mask=None, Py_ssize_t start=0):
        """`ids_column` (new keys inserted) and `rows_seen` in one pass over the rows from `start`:
        each kept row's id into `out` and counted in `nrows`, a group met for the first time
        appended to `order` after its first `norder` entries.  Returns (the row it stopped at, the
        new length of `order`): the end, or the first row whose group's id has no entry in `nrows`
        or `order` (its key is in the table: the caller makes them longer and goes on from that
        row)."""
        cdef Py_ssize_t i, j, n = src.shape[0], isz = src.shape[1]
        cdef Py_ssize_t ncap = min(nrows.shape[0], order.shape[0])
        cdef bint masked = mask is not None
        cdef int64_t g = 0
        cdef uint64_t k = 0
        cdef uint64_t mul = <uint64_t>0x9e3779b97f4a7c15
        cdef const uint8_t* p
        cdef int64_t* slots
        cdef uint64_t* skeys
        cdef int shift
        if self.nwords != 1 or isz > 8:
            raise ValueError("ids_rows takes one-word keys")
        if out.shape[0] < n or (masked and mask.shape[0] < n):
            raise ValueError("output or mask shorter than the keys")
        if not 0 <= start <= n:
            raise ValueError("start outside the rows")
        if start == n:
            return n, norder
        p = &src[0, 0]
        # as in ids_column: rows whose 8 bytes from their start lie inside the buffer are loaded
        # whole and masked, the last few copied byte-wise
        cdef Py_ssize_t nfast = start
        cdef uint64_t keep = 0xffffffffffffffff if isz == 8 else ((<uint64_t> 1 << (8 * isz)) - 1)
        if fkind == 0 and _little_endian():
            nfast = n if isz == 8 else max(start, n - (8 // isz) - 1)
        i = start
        # raw pointers: the memoryviews' data and strides are otherwise reloaded from the stack on
        # every row of the loop
        cdef int64_t* po = &out[0]
        cdef int64_t* pn = &nrows[0] if nrows.shape[0] else NULL
        cdef int64_t* pord = &order[0] if order.shape[0] else NULL
        cdef const uint8_t* pm = &mask[0] if masked and n else NULL
        with nogil:
            slots, skeys, shift = self.slots, self.skeys, self.shift
            while i < nfast:
                if masked and not pm[i]:
                    po[i] = -1
                    i += 1
                    continue
                k = blz_load_u64(p + i * isz) & keep
                # the key's first slot: with the table kept sparse, where nearly every key is
                j = <Py_ssize_t> ((k * mul) >> shift)
                g = slots[j]
                if g < 0 or skeys == NULL or skeys[j] != k:
                    g = self._find1(k, True)
                    if g == -3:
                        break
                    slots, skeys, shift = self.slots, self.skeys, self.shift
                if g >= ncap:
                    break
                po[i] = g
                if pn[g] == 0:
                    pord[norder] = g
                    norder += 1
                pn[g] += 1
                i += 1
            if i == nfast:
                while i < n:
                    if masked and not mask[i]:
                        out[i] = -1
                        i += 1
                        continue
                    k = _one_word_key(p + i * isz, isz, fkind)
                    g = self._find1(k, True)
                    if g == -3 or g >= ncap:
                        break
                    out[i] = g
                    if nrows[g] == 0:
                        order[norder] = g
                        norder += 1
                    nrows[g] += 1
                    i += 1
        if g == -3:
            raise MemoryError()
        return i, norder

    def ids_sums(self, const uint8_t[:, ::1] src, int fkind, int64_t[::1] nrows, int64_t[::1] order,
                 Py_ssize_t norder, const int64_t[::1] ivals=None, int64_t[::1] iacc=None,
                 const double[::1] fvals=None, double[::1] facc=None, const uint8_t[::1] mask=None,
                 Py_ssize_t start=0):
        """`ids_rows` without the ids: each kept row counted in its group and, in the same pass, its
        `ivals` value added to its group's `iacc` entry and its `fvals` value to its `facc` entry
        (the additions `sum_int` / `sum_float` make, in row order), so the ids are neither stored
        nor read again.  Returns (the row it stopped at, the new length of `order`): the end, or
        the first row whose group has no entry in `nrows`, `order`, `iacc` or `facc` (the caller
        makes them longer and goes on from that row)."""
        cdef Py_ssize_t i, n = src.shape[0], isz = src.shape[1]
        cdef Py_ssize_t ncap = min(nrows.shape[0], order.shape[0])
        cdef bint masked = mask is not None
        cdef bint has_i = ivals is not None, has_f = fvals is not None
        cdef int64_t g = 0
        if self.nwords != 1 or isz > 8:
            raise ValueError("ids_sums takes one-word keys")
        if (masked and mask.shape[0] < n) or (has_i and (iacc is None or ivals.shape[0] < n)) or \
                (has_f and (facc is None or fvals.shape[0] < n)):
            raise ValueError("ids_sums: mask or values shorter than the keys, or a sum without its state")
        if not 0 <= start <= n:
            raise ValueError("start outside the rows")
        if start == n:
            return n, norder
        if has_i:
            ncap = min(ncap, iacc.shape[0])
        if has_f:
            ncap = min(ncap, facc.shape[0])
        cdef uint64_t keep = 0xffffffffffffffff if isz == 8 else ((<uint64_t> 1 << (8 * isz)) - 1)
        cdef Py_ssize_t nfast = self._nfast(n, isz, fkind, start)
        cdef const uint8_t* p = &src[0, 0]
        cdef int64_t* pn = &nrows[0] if nrows.shape[0] else NULL
        cdef int64_t* pord = &order[0] if order.shape[0] else NULL
        cdef const uint8_t* pm = &mask[0] if masked else NULL
        cdef const int64_t* piv = &ivals[0] if has_i else NULL
        cdef int64_t* pia = &iacc[0] if has_i and iacc.shape[0] else NULL
        cdef const double* pfv = &fvals[0] if has_f else NULL
        cdef double* pfa = &facc[0] if has_f and facc.shape[0] else NULL
        with nogil:
            if has_i and has_f:
                i = _rows(self, p, isz, fkind, start, nfast, n, keep, pm, pn, pord, &norder,
                          ncap, piv, pia, pfv, pfa, &g)
            elif has_i:
                i = _rows(self, p, isz, fkind, start, nfast, n, keep, pm, pn, pord, &norder,
                          ncap, piv, pia, <const float*> NULL, <float*> NULL, &g)
            elif has_f:
                i = _rows(self, p, isz, fkind, start, nfast, n, keep, pm, pn, pord, &norder,
                          ncap, <const uint8_t*> NULL, <uint8_t*> NULL, pfv, pfa, &g)
            else:
                i = _rows(self, p, isz, fkind, start, nfast, n, keep, pm, pn, pord, &norder,
                          ncap, <const uint8_t*> NULL, <uint8_t*> NULL, <const float*> NULL, <float*> NULL, &g)
        if g == -3:
            raise MemoryError()
        return i, norder

    def keys_array(self):
        """The keys in id order, a new (n, nwords) uint64 array."""
        out = np.empty((self.n, self.nwords), dtype=np.uint64)
        cdef uint64_t[:, ::1] o = out
        if self.n:
            memcpy(&o[0, 0], self.keys, self.n * self.nwords * sizeof(uint64_t))
        return out


# `_rows`' specialisations: an integer sum (int64) or none (uint8, the pointers NULL, never read), a
# float sum (double) or none (float): each caller gets a loop compiled for what it adds, with no test
# per row of what it does not
ctypedef fused rows_isum_t:
    int64_t
    uint8_t
ctypedef fused rows_fsum_t:
    double
    float


cdef Py_ssize_t _rows(KeyTable t, const uint8_t* p, Py_ssize_t isz, int fkind, Py_ssize_t i,
                      Py_ssize_t nfast, Py_ssize_t n, uint64_t keep, const uint8_t* pm,
                      int64_t* pn, int64_t* pord, Py_ssize_t* norder, Py_ssize_t ncap,
                      const rows_isum_t* piv, rows_isum_t* pia, const rows_fsum_t* pfv, rows_fsum_t* pfa,
                      int64_t* gout) noexcept nogil:
    """The loop of `KeyTable.ids_sums` (`ids_rows`' without the ids): rows i..n-1 looked up in `t` (new
    keys inserted), each kept row counted in `pn` (a group met first appended to `pord`) and its value
    added to its group's integer sum (int64 `piv` / `pia`) and float sum (double `pfv` / `pfa`).
    Returns the row it stopped at, the first whose group has no entry below `ncap`, or the end; *gout
    is -3 when the table could not grow."""
    cdef int64_t g = 0
    cdef uint64_t k
    cdef Py_ssize_t j, no = norder[0]
    cdef uint64_t mul = <uint64_t>0x9e3779b97f4a7c15
    cdef int64_t* slots = t.slots
    cdef uint64_t* skeys = t.skeys
    cdef int shift = t.shift
    while i < nfast:
        if pm != NULL and not pm[i]:
            i += 1
            continue
        k = blz_load_u64(p + i * isz) & keep
        # the key's first slot: with the table kept sparse, where nearly every key is
        j = <Py_ssize_t> ((k * mul) >> shift)
        g = slots[j]
        if g < 0 or skeys == NULL or skeys[j] != k:
            g = t._find1(k, True)
            if g == -3:
                break
            slots, skeys, shift = t.slots, t.skeys, t.shift
        if g >= ncap:
            break
        if pn[g] == 0:
            pord[no] = g
            no += 1
        pn[g] += 1
        if rows_isum_t is int64_t:
            pia[g] += piv[i]
        if rows_fsum_t is double:
            pfa[g] += pfv[i]
        i += 1
    if i == nfast:
        while i < n:
            if pm != NULL and not pm[i]:
                i += 1
                continue
            k = _one_word_key(p + i * isz, isz, fkind)
            g = t._find1(k, True)
            if g == -3 or g >= ncap:
                break
            if pn[g] == 0:
                pord[no] = g
                no += 1
            pn[g] += 1
            if rows_isum_t is int64_t:
                pia[g] += piv[i]
            if rows_fsum_t is double:
                pfa[g] += pfv[i]
            i += 1
    norder[0] = no
    gout[0] = g
    return i



def pack_column(const uint8_t[:, ::1] src, uint64_t[:, ::1] out, Py_ssize_t offset, int fkind):
    """Copy the rows of `src` (n, itemsize bytes) into the key rows `out` at byte `offset`; `fkind`
    4 or 8 marks a float32/float64 column, whose NaNs become one NaN and -0.0 becomes 0.0."""
    cdef Py_ssize_t i, n = src.shape[0], isz = src.shape[1]
    cdef Py_ssize_t stride = out.shape[1] * 8
    cdef uint8_t* dst
    cdef double d
    cdef float f
    if out.shape[0] < n or offset + isz > stride:
        raise ValueError("key rows too small for the column")
    if n == 0:
        return
    dst = (<uint8_t*> &out[0, 0]) + offset
    with nogil:
        if fkind == 8:
            for i in range(n):
                memcpy(&d, &src[i, 0], 8)
                if isnan(d):
                    d = NAN
                elif d == 0.0:
                    d = 0.0
                memcpy(dst + i * stride, &d, 8)
        elif fkind == 4:
            for i in range(n):
                memcpy(&f, &src[i, 0], 4)
                if isnan(f):
                    f = <float> NAN
                elif f == 0.0:
                    f = 0.0
                memcpy(dst + i * stride, &f, 4)
        else:
            for i in range(n):
                memcpy(dst + i * stride, &src[i, 0], isz)


def direct_codes(const intkey_t[::1] vals, int64_t lo, int64_t stride, int64_t[::1] out, bint first,
                 const uint8_t[::1] mask=None, int64_t span=-1):
    """Dense ids from integer keys: out = (vals - lo) * stride, added to `out` unless `first`; rows
    whose `mask` is 0 get -1 (on the first key column; later ones leave them -1).  With `span` >= 0,
    returns False (the ids unfinished) when a kept row's value lies outside lo..lo + span - 1."""
    cdef Py_ssize_t i, n = vals.shape[0]
    cdef bint masked = mask is not None
    cdef int64_t d
    cdef bint ok = True
    cdef uint64_t lim = <uint64_t> span
    with nogil:
        if first:
            for i in range(n):
                if masked and not mask[i]:
                    out[i] = -1
                else:
                    d = <int64_t> vals[i] - lo
                    if span >= 0 and <uint64_t> d >= lim:
                        ok = False
                        break
                    out[i] = d * stride
        else:
            for i in range(n):
                if out[i] >= 0:
                    d = <int64_t> vals[i] - lo
                    if span >= 0 and <uint64_t> d >= lim:
                        ok = False
                        break
                    out[i] += d * stride
    return ok


def rows_seen(const int64_t[::1] codes, int64_t[::1] nrows, int64_t[::1] order, Py_ssize_t norder):
    """Per group: rows counted; a group met for the first time (its count was 0) is appended to
    `order` after its first `norder` entries.  Returns the new length of `order`: the groups in the
    order of their first rows, as long as the blocks come in ascending order."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    cdef bint ahead = nrows.shape[0] >= AHEAD_MIN_GROUPS
    with nogil:
        for i in range(n):
            if ahead and i + AHEAD < n and codes[i + AHEAD] >= 0:
                BLZ_PREFETCH_W(&nrows[codes[i + AHEAD]])
            g = codes[i]
            if g >= 0:
                if nrows[g] == 0:
                    order[norder] = g
                    norder += 1
                nrows[g] += 1
    return norder


def direct_rows(const intkey_t[::1] vals, int64_t lo, int64_t[::1] out, int64_t[::1] nrows,
                int64_t[::1] order, Py_ssize_t norder, const uint8_t[::1] mask=None):
    """One integer key: `direct_codes` and `rows_seen` in one pass; returns the new length of
    `order`, or -1 when a kept row's key lies outside the `nrows.shape[0]` slots from `lo`."""
    cdef Py_ssize_t i, n = vals.shape[0]
    cdef int64_t g, ga
    cdef bint masked = mask is not None
    cdef uint64_t nslots = <uint64_t> nrows.shape[0]
    cdef bint ahead = nrows.shape[0] >= AHEAD_MIN_GROUPS
    if out.shape[0] < n or order.shape[0] < nrows.shape[0] or (masked and mask.shape[0] < n):
        raise ValueError("direct_rows: arrays shorter than the keys or the slots")
    with nogil:
        for i in range(n):
            if ahead and i + AHEAD < n:
                ga = <int64_t> vals[i + AHEAD] - lo
                if <uint64_t> ga < nslots:
                    BLZ_PREFETCH_W(&nrows[ga])
            if masked and not mask[i]:
                out[i] = -1
                continue
            g = <int64_t> vals[i] - lo
            if <uint64_t> g >= nslots:
                norder = -1
                break
            out[i] = g
            if nrows[g] == 0:
                order[norder] = g
                norder += 1
            nrows[g] += 1
    return norder


def sum_int(const int64_t[::1] codes, const int64_t[::1] vals, int64_t[::1] acc):
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    cdef bint ahead = acc.shape[0] >= AHEAD_MIN_GROUPS
    with nogil:
        for i in range(n):
            if ahead and i + AHEAD < n and codes[i + AHEAD] >= 0:
                BLZ_PREFETCH_W(&acc[codes[i + AHEAD]])
            g = codes[i]
            if g >= 0:
                acc[g] += vals[i]


def sum_float(const int64_t[::1] codes, const double[::1] vals, double[::1] acc):
    """NaN propagates into its group's sum (as in bquery)."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    cdef bint ahead = acc.shape[0] >= AHEAD_MIN_GROUPS
    with nogil:
        for i in range(n):
            if ahead and i + AHEAD < n and codes[i + AHEAD] >= 0:
                BLZ_PREFETCH_W(&acc[codes[i + AHEAD]])
            g = codes[i]
            if g >= 0:
                acc[g] += vals[i]


def count_float(const int64_t[::1] codes, const double[::1] vals, int64_t[::1] acc):
    """Values that are not NaN, per group."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    with nogil:
        for i in range(n):
            g = codes[i]
            if g >= 0 and not isnan(vals[i]):
                acc[g] += 1


def welford(const int64_t[::1] codes, const double[::1] vals, int64_t[::1] cnt, double[::1] mean,
            double[::1] m2):
    """Count, running mean and sum of squared deviations per group (Welford's update: stable where
    sum and sum of squares would cancel); a NaN value makes its group's mean and M2 NaN."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    cdef double d, x
    with nogil:
        for i in range(n):
            g = codes[i]
            if g >= 0:
                x = vals[i]
                cnt[g] += 1
                d = x - mean[g]
                mean[g] += d / cnt[g]
                m2[g] += d * (x - mean[g])


def minmax_int(const int64_t[::1] codes, const int64_t[::1] vals, int64_t[::1] acc, bint is_max,
               const uint8_t[::1] valid=None):
    """Rows whose `valid` is 0 (NaT) are skipped."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    cdef bint checked = valid is not None
    with nogil:
        if is_max:
            for i in range(n):
                g = codes[i]
                if g >= 0 and vals[i] > acc[g] and (not checked or valid[i]):
                    acc[g] = vals[i]
        else:
            for i in range(n):
                g = codes[i]
                if g >= 0 and vals[i] < acc[g] and (not checked or valid[i]):
                    acc[g] = vals[i]


def count_valid(const int64_t[::1] codes, const uint8_t[::1] valid, int64_t[::1] acc):
    """Rows whose `valid` is not 0, per group."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    with nogil:
        for i in range(n):
            g = codes[i]
            if g >= 0 and valid[i]:
                acc[g] += 1


def minmax_float(const int64_t[::1] codes, const double[::1] vals, double[::1] acc, bint is_max):
    """NaN values are skipped; a group with no other value keeps its NaN start."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    cdef double x
    with nogil:
        for i in range(n):
            g = codes[i]
            if g < 0:
                continue
            x = vals[i]
            if isnan(x):
                continue
            if isnan(acc[g]) or (is_max and x > acc[g]) or (not is_max and x < acc[g]):
                acc[g] = x


def first_last(const int64_t[::1] codes, int64_t base, int64_t[::1] pos, bint last,
               const uint8_t[::1] valid=None):
    """Per group, the first (or last) row numbered from `base` whose `valid` is not 0 (every row when
    `valid` is None)."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef int64_t g
    cdef bint checked = valid is not None
    with nogil:
        for i in range(n):
            g = codes[i]
            if g < 0 or (checked and not valid[i]):
                continue
            if last:
                if base + i > pos[g]:
                    pos[g] = base + i
            elif base + i < pos[g]:
                pos[g] = base + i


def pair_keys(const int64_t[::1] codes, const uint64_t[:, ::1] vals, uint64_t[:, ::1] out):
    """Rows (group id, value words) for counting distinct values per group; returns how many rows
    were kept (those with a group), packed at the front of `out`."""
    cdef Py_ssize_t i, j, k = 0, n = codes.shape[0], nw = vals.shape[1]
    with nogil:
        for i in range(n):
            if codes[i] >= 0:
                out[k, 0] = <uint64_t> codes[i]
                for j in range(nw):
                    out[k, j + 1] = vals[i, j]
                k += 1
    return k


cdef class SortedRuns:
    """bquery's sorted_count_distinct over blocks taken in row order: every run of equal values
    counts once for each group that has a row in the run."""

    cdef Py_ssize_t nwords
    cdef uint64_t* prev
    cdef bint started
    cdef readonly int64_t run

    def __cinit__(self, Py_ssize_t nwords):
        self.nwords = nwords
        self.prev = <uint64_t*> malloc(max(nwords, 1) * sizeof(uint64_t))
        if self.prev == NULL:
            raise MemoryError()
        self.started = False
        self.run = 0

    def __dealloc__(self):
        free(self.prev)

    def update(self, const int64_t[::1] codes, const uint64_t[:, ::1] vals, int64_t[::1] stamp,
               int64_t[::1] out):
        """`stamp` (one per group, starting at -1) holds the last run each group was counted in."""
        cdef Py_ssize_t i, n = codes.shape[0], nw = self.nwords
        cdef int64_t g
        with nogil:
            for i in range(n):
                g = codes[i]
                if g < 0:
                    continue
                if not self.started or memcmp(self.prev, &vals[i, 0], nw * sizeof(uint64_t)) != 0:
                    if self.started:
                        self.run += 1
                    self.started = True
                    memcpy(self.prev, &vals[i, 0], nw * sizeof(uint64_t))
                if stamp[g] != self.run:
                    stamp[g] = self.run
                    out[g] += 1


def isin_mask(KeyTable table, const uint64_t[:, ::1] keys, uint8_t[::1] out, bint negate):
    """out[i] = whether key row i is in `table` (or is not, with `negate`)."""
    cdef Py_ssize_t i, n = keys.shape[0]
    cdef int64_t last_id = -2
    cdef uint64_t last_key = 0
    cdef bint one = table.nwords == 1
    with nogil:
        for i in range(n):
            if one and last_id != -2 and keys[i, 0] == last_key:
                pass
            elif one:
                last_id = table._find1(keys[i, 0], False)
                last_key = keys[i, 0]
            else:
                last_id = table._find(&keys[i, 0], False)
            out[i] = (last_id >= 0) != negate


def isin_span(const intkey_t[::1] vals, int64_t lo, const uint8_t[::1] table, uint8_t[::1] out,
              bint negate):
    """out[i] = whether vals[i] - lo indexes a nonzero entry of `table` (or not, with `negate`):
    membership in a list of integers spanning a small range, one load per row and no hashing."""
    cdef Py_ssize_t i, n = vals.shape[0]
    cdef uint64_t span = table.shape[0], k
    if out.shape[0] < n:
        raise ValueError("output shorter than the values")
    with nogil:
        for i in range(n):
            k = <uint64_t> (<int64_t> vals[i] - lo)
            out[i] = (k < span and table[k] != 0) != negate


def direct_sums(const intkey_t[::1] keys, int64_t lo, int64_t[:, ::1] state, int64_t[::1] order,
                Py_ssize_t norder, const int64_t[::1] ivals=None, Py_ssize_t icol=1,
                const double[::1] fvals=None, Py_ssize_t fcol=2, const uint8_t[::1] mask=None):
    """One integer key and at most one integer and one float sum, in one pass and without group ids.
    `state` holds one row per slot: the row count in column 0, the integer sum in column `icol`, the
    float sum (its bits) in column `fcol`, so a row's updates touch one cache line rather than one
    per array (rows of 2 or 4 words, aligned by the caller).  Each row counts in its group (a new
    group appended to `order`, as `direct_rows` does) and adds its `ivals` / `fvals` value (float
    sums in row order, as `sum_float`).  Returns the new length of `order`, or -1 (nothing after that
    row counted) when a key lies outside the slots from `lo`: the range the column's statistics
    gave was wrong."""
    cdef Py_ssize_t i, n = keys.shape[0], nslots = state.shape[0], w = state.shape[1]
    cdef int64_t g, ga
    cdef int64_t* st
    cdef int64_t* row
    cdef bint masked = mask is not None
    cdef bint has_i = ivals is not None, has_f = fvals is not None
    cdef bint ahead = nslots >= AHEAD_MIN_GROUPS
    if (has_i and (ivals.shape[0] < n or not 0 < icol < w)) or \
            (has_f and (fvals.shape[0] < n or not 0 < fcol < w)) or (has_i and has_f and icol == fcol) or \
            (masked and mask.shape[0] < n) or order.shape[0] < nslots:
        raise ValueError("direct_sums: arrays shorter than the keys or the slots, or columns not in the state")
    if nslots == 0:
        return norder if n == 0 else -1
    st = &state[0, 0]
    with nogil:
        for i in range(n):
            if ahead and i + AHEAD < n:
                ga = <int64_t> keys[i + AHEAD] - lo
                if <uint64_t> ga < <uint64_t> nslots:
                    BLZ_PREFETCH_W(st + ga * w)
            if masked and not mask[i]:
                continue
            g = <int64_t> keys[i] - lo
            if <uint64_t> g >= <uint64_t> nslots:
                norder = -1
                break
            row = st + g * w
            if row[0] == 0:
                order[norder] = g
                norder += 1
            row[0] += 1
            if has_i:
                row[icol] += ivals[i]
            if has_f:
                (<double*> (row + fcol))[0] += fvals[i]
    return norder


def fold_sums(int64_t[:, ::1] dst, const int64_t[:, ::1] src, Py_ssize_t fcol):
    """`direct_sums` states added slot by slot, dst += src: every column as integers except column
    `fcol` (none when it is not below the width), added as the doubles it holds."""
    cdef Py_ssize_t i, j, n = dst.shape[0], w = dst.shape[1]
    cdef int64_t* d
    cdef const int64_t* s
    if src.shape[0] != n or src.shape[1] != w:
        raise ValueError("fold_sums: states of different shapes")
    if n == 0:
        return
    d = &dst[0, 0]
    s = &src[0, 0]
    with nogil:
        for i in range(n):
            for j in range(w):
                if j == fcol:
                    (<double*> (d + j))[0] += (<const double*> (s + j))[0]
                else:
                    d[j] += s[j]
            d += w
            s += w


cdef inline Py_ssize_t _sums32_rows(const intkey_t* keys, Py_ssize_t n, int64_t lo, uint64_t* st,
                                    Py_ssize_t ww, Py_ssize_t nslots, int64_t* order, Py_ssize_t norder,
                                    const int64_t* ivals, const double* fvals, const uint8_t* mask,
                                    int vbits, bint has_i, bint has_f, bint masked) noexcept nogil:
    """`direct_sums32`'s loop on a little-endian machine, each slot's count and integer sum updated by
    one 64-bit addition (see there).  The flags are constants at each call, so the compiler makes
    one loop per combination, without a test of them per row."""
    cdef Py_ssize_t i, pf_end = n - AHEAD if nslots >= AHEAD_MIN_GROUPS else 0
    cdef int64_t g, ga, x
    cdef uint64_t word, bad = 0, bias = (<uint64_t> 1) << vbits
    cdef uint64_t* row
    for i in range(n):
        if i < pf_end:
            ga = <int64_t> keys[i + AHEAD] - lo
            if <uint64_t> ga < <uint64_t> nslots:
                BLZ_PREFETCH_W(st + ga * ww)
        if masked and not mask[i]:
            continue
        g = <int64_t> keys[i] - lo
        if <uint64_t> g >= <uint64_t> nslots:
            return -1
        row = st + g * ww
        word = row[0]
        if word == 0:
            order[norder] = g
            norder += 1
        if has_i:
            # the count in the low half, the sum (modulo 2**32) in the high half: exact while every
            # value lies in -2**vbits..2**vbits - 1, which `bad` collects without a branch (a value
            # outside makes x + bias reach 2**(vbits + 1) as an unsigned word)
            x = ivals[i]
            bad |= <uint64_t> x + bias
            row[0] = word + 1 + (<uint64_t> x << 32)
        else:
            row[0] = word + 1
        if has_f:
            (<double*> (row + 1))[0] += fvals[i]
    if bad >> (vbits + 1):
        return -2
    return norder


def direct_sums32(const intkey_t[::1] keys, int64_t lo, int32_t[:, ::1] state, int64_t[::1] order,
                  Py_ssize_t norder, const int64_t[::1] ivals=None, const double[::1] fvals=None,
                  const uint8_t[::1] mask=None, int vbits=31):
    """`direct_sums` over a narrower state, for a caller that knows every count and integer sum fits
    in 32 bits (rows times 2**vbits at most 2**31, every value in -2**vbits..2**vbits - 1): one row of
    `state` a slot, the row count in its int32 column 0, the integer sum in column 1, the float sum
    (a double) in columns 2-3 when `fvals` is given (rows of 2 or 4 int32: 8 or 16 bytes, a quarter
    or half of `direct_sums`' rows, so more groups share the caches).  The same additions in the same
    order as `direct_sums`; returns the new length of `order`, or -1 for a key outside the slots
    (nothing after that row counted), -2 when a kept row's integer value lies outside the bound
    the caller's 32 bits rest on (the block's rows are then counted with wrong sums: the state is
    not to be used)."""
    cdef Py_ssize_t i, n = keys.shape[0], nslots = state.shape[0], w = state.shape[1]
    cdef int64_t g, ga, x
    cdef uint64_t bad = 0, bias
    cdef int32_t* st
    cdef int32_t* row
    cdef const int64_t* iv = NULL
    cdef const double* fv = NULL
    cdef const uint8_t* mk = NULL
    cdef bint masked = mask is not None
    cdef bint has_i = ivals is not None, has_f = fvals is not None
    cdef bint ahead = nslots >= AHEAD_MIN_GROUPS
    if (has_i and ivals.shape[0] < n) or (has_f and (fvals.shape[0] < n or w < 4)) or w < 2 or w % 2 or \
            (masked and mask.shape[0] < n) or order.shape[0] < nslots or not 0 <= vbits <= 31:
        raise ValueError("direct_sums32: arrays shorter than the keys or the slots, or rows too narrow")
    if nslots == 0:
        return norder if n == 0 else -1
    st = &state[0, 0]
    if (<size_t> st) % 8:
        raise ValueError("direct_sums32: the state does not start on an 8-byte boundary")
    if n == 0:
        return norder
    if has_i:
        iv = &ivals[0]
    if has_f:
        fv = &fvals[0]
    if masked:
        mk = &mask[0]
    bias = (<uint64_t> 1) << vbits
    with nogil:
        if _little_endian():
            # one loop per combination of the flags (constants here)
            if has_i and has_f:
                if masked:
                    norder = _sums32_rows(&keys[0], n, lo, <uint64_t*> st, w // 2, nslots, &order[0], norder,
                                          iv, fv, mk, vbits, True, True, True)
                else:
                    norder = _sums32_rows(&keys[0], n, lo, <uint64_t*> st, w // 2, nslots, &order[0], norder,
                                          iv, fv, mk, vbits, True, True, False)
            elif has_i:
                if masked:
                    norder = _sums32_rows(&keys[0], n, lo, <uint64_t*> st, w // 2, nslots, &order[0], norder,
                                          iv, fv, mk, vbits, True, False, True)
                else:
                    norder = _sums32_rows(&keys[0], n, lo, <uint64_t*> st, w // 2, nslots, &order[0], norder,
                                          iv, fv, mk, vbits, True, False, False)
            else:
                norder = _sums32_rows(&keys[0], n, lo, <uint64_t*> st, w // 2, nslots, &order[0], norder,
                                      iv, fv, mk, vbits, False, has_f, masked)
        else:
            # elsewhere the two 32-bit fields do not make one word in this order: added apart
            for i in range(n):
                if ahead and i + AHEAD < n:
                    ga = <int64_t> keys[i + AHEAD] - lo
                    if <uint64_t> ga < <uint64_t> nslots:
                        BLZ_PREFETCH_W(st + ga * w)
                if masked and not mk[i]:
                    continue
                g = <int64_t> keys[i] - lo
                if <uint64_t> g >= <uint64_t> nslots:
                    norder = -1
                    break
                row = st + g * w
                if row[0] == 0:
                    order[norder] = g
                    norder += 1
                row[0] += 1
                if has_i:
                    x = iv[i]
                    bad |= <uint64_t> x + bias
                    row[1] = <int32_t> (<uint32_t> row[1] + <uint32_t> x)
                if has_f:
                    (<double*> (row + 2))[0] += fv[i]
            if norder >= 0 and bad >> (vbits + 1):
                norder = -2
    return norder


def fold_sums32(int32_t[:, ::1] dst, const int32_t[:, ::1] src):
    """`direct_sums32` states added slot by slot, dst += src: columns 0-1 as int32, columns 2-3 (when
    the rows have 4) as the double they hold."""
    cdef Py_ssize_t i, n = dst.shape[0], w = dst.shape[1]
    cdef int32_t* d
    cdef const int32_t* s
    if src.shape[0] != n or src.shape[1] != w or w < 2:
        raise ValueError("fold_sums32: states of different shapes")
    if n == 0:
        return
    d = &dst[0, 0]
    s = &src[0, 0]
    with nogil:
        for i in range(n):
            d[0] += s[0]
            d[1] += s[1]
            if w >= 4:
                (<double*> (d + 2))[0] += (<const double*> (s + 2))[0]
            d += w
            s += w


def gather_sums(list states, list orders, bint narrow, Py_ssize_t icol, Py_ssize_t fcol,
                int64_t lo, int64_t[::1] keys, int64_t[::1] cnt=None, int64_t[::1] isum=None,
                double[::1] fsum=None, const int64_t[:, ::1] runs=None):
    """The parts' `direct_sums` (or, `narrow`, `direct_sums32`) states, in part order, gathered
    straight into the result columns, without first folding every slot into one state: the groups
    in the order of their first rows (the first state's order, then each later state's groups that
    no earlier state has), each as its key (slot + `lo`) into `keys`, and per group its row count
    into `cnt`, its integer sum
    (column `icol` of a wide state) into `isum`, its float sum (column `fcol`) into `fsum`.  Each
    group's values are added state after state from the first state's, the additions `fold_sums` /
    `fold_sums32` make in that order, so the bits are the same.  `orders[p]` holds the first
    rows' order of state p (its length is the state's group count).  Returns the number of groups.

    With `runs` (rows of (p, start, end), in the order of the rows they cover), the states are those of
    threads that each took runs of blocks in ascending order: the groups' order is that of
    ``orders[p][start:end]`` run after run, a group taken where it first comes (no sum of floats:
    which state holds which rows depends on the threads' timing, and only integer additions
    repeat whatever their order)."""
    cdef Py_ssize_t nparts = len(states), p, q, i, k = 0, n, nslots, w, stride, ng
    cdef Py_ssize_t ioff, foff
    cdef bint has_i = isum is not None, has_f = fsum is not None, has_c = cnt is not None
    cdef const int64_t[:, ::1] s64
    cdef const int32_t[:, ::1] s32
    cdef const int64_t[::1] o
    cdef int64_t g, ga, c, si
    cdef double sf
    cdef const char* row
    cdef bint fresh
    cdef bint by_runs = runs is not None
    cdef Py_ssize_t r, nruns = runs.shape[0] if by_runs else 0, rs, rend
    cdef uint8_t* taken = NULL
    if len(orders) != nparts:
        raise ValueError("gather_sums: one order per state")
    if by_runs and (has_f or runs.shape[1] != 3):
        raise ValueError("gather_sums: runs are (state, start, end) rows, and not for float sums")
    if nparts == 0:
        return 0
    cdef const char** base = <const char**> malloc(nparts * sizeof(char*))
    cdef const int64_t** ords = <const int64_t**> malloc(nparts * sizeof(int64_t*))
    cdef Py_ssize_t* nord = <Py_ssize_t*> malloc(nparts * sizeof(Py_ssize_t))
    if base == NULL or ords == NULL or nord == NULL:
        free(base); free(ords); free(nord)
        raise MemoryError()
    try:
        nslots = -1
        for p in range(nparts):
            if narrow:
                s32 = states[p]
                n, w, stride = s32.shape[0], s32.shape[1], s32.shape[1] * 4
                base[p] = <const char*> &s32[0, 0] if n else NULL
                if w < 2 or (has_f and w < 4):
                    raise ValueError("gather_sums: narrow rows too short")
            else:
                s64 = states[p]
                n, w, stride = s64.shape[0], s64.shape[1], s64.shape[1] * 8
                base[p] = <const char*> &s64[0, 0] if n else NULL
                if (has_i and not 0 < icol < w) or (has_f and not 0 < fcol < w):
                    raise ValueError("gather_sums: columns not in the state")
            if nslots == -1:
                nslots, ng = n, stride
            elif n != nslots or stride != ng:
                raise ValueError("gather_sums: states of different shapes")
            o = orders[p]
            ords[p] = &o[0] if o.shape[0] else NULL
            nord[p] = o.shape[0]
            if o.shape[0] > nslots:
                raise ValueError("gather_sums: an order longer than the slots")
        if keys.shape[0] < nslots or (has_c and cnt.shape[0] < nslots) or (has_i and isum.shape[0] < nslots) or \
                (has_f and fsum.shape[0] < nslots):
            raise ValueError("gather_sums: result columns shorter than the slots")
        stride = ng
        ioff = 4 if narrow else icol * 8
        foff = 8 if narrow else fcol * 8
        if by_runs:
            for r in range(nruns):
                p, rs, rend = runs[r, 0], runs[r, 1], runs[r, 2]
                if not (0 <= p < nparts and 0 <= rs <= rend <= nord[p]):
                    raise ValueError("gather_sums: a run outside its state's order")
            taken = <uint8_t*> calloc(nslots if nslots > 0 else 1, 1)
            if taken == NULL:
                raise MemoryError()
            with nogil:
                for r in range(nruns):
                    p, rs, rend = runs[r, 0], runs[r, 1], runs[r, 2]
                    for i in range(rs, rend):
                        if i + AHEAD < rend:
                            ga = ords[p][i + AHEAD]
                            if <uint64_t> ga < <uint64_t> nslots:
                                for q in range(nparts):
                                    BLZ_PREFETCH_R(base[q] + ga * stride)
                        g = ords[p][i]
                        if <uint64_t> g >= <uint64_t> nslots:
                            k = -1
                            break
                        if taken[g]:
                            continue
                        taken[g] = 1
                        c = si = 0
                        for q in range(nparts):
                            row = base[q] + g * stride
                            if narrow:
                                c += (<const int32_t*> row)[0]
                                if has_i:
                                    si += (<const int32_t*> (row + ioff))[0]
                            else:
                                c += (<const int64_t*> row)[0]
                                if has_i:
                                    si += (<const int64_t*> (row + ioff))[0]
                        keys[k] = g + lo
                        if has_c:
                            cnt[k] = c
                        if has_i:
                            isum[k] = si
                        k += 1
                    if k < 0:
                        break
        with nogil:
            for p in range(nparts if not by_runs else 0):
                if k == nslots:
                    break       # every slot has its group: no later state can have a new one
                for i in range(nord[p]):
                    if i + AHEAD < nord[p]:
                        ga = ords[p][i + AHEAD]
                        if <uint64_t> ga < <uint64_t> nslots:
                            for q in range(nparts):
                                BLZ_PREFETCH_R(base[q] + ga * stride)
                    g = ords[p][i]
                    if <uint64_t> g >= <uint64_t> nslots:
                        k = -1
                        break
                    # a group of a later state is new when no earlier state counted a row of it
                    fresh = True
                    for q in range(p):
                        row = base[q] + g * stride
                        if (((<const int32_t*> row)[0] if narrow else (<const int64_t*> row)[0]) != 0):
                            fresh = False
                            break
                    if not fresh:
                        continue
                    c = si = 0
                    sf = 0.0
                    for q in range(nparts):
                        row = base[q] + g * stride
                        if narrow:
                            c += (<const int32_t*> row)[0]
                            if has_i:
                                si += (<const int32_t*> (row + ioff))[0]
                        else:
                            c += (<const int64_t*> row)[0]
                            if has_i:
                                si += (<const int64_t*> (row + ioff))[0]
                        if not has_f:
                            pass
                        elif q == 0:
                            sf = (<const double*> (row + foff))[0]
                        else:
                            sf += (<const double*> (row + foff))[0]
                    keys[k] = g + lo
                    if has_c:
                        cnt[k] = c
                    if has_i:
                        isum[k] = si
                    if has_f:
                        fsum[k] = sf
                    k += 1
                if k < 0:
                    break
    finally:
        free(base); free(ords); free(nord); free(taken)
    if k < 0:
        raise ValueError("gather_sums: a group in an order lies outside the slots")
    return k
