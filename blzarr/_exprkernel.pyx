# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The fused expression kernel: an element-wise numeric expression over the chunks of its operands,
reduced or compacted where it is computed.

`ExprChunks` runs a small register program (compiled by `blzarr.query.exprkernel` from an expression such
as ``(a > 0) & (b < c * 2)``) over the full chunks of its operands on the threads of the work pool.
Each thread decodes a chunk of every operand whole into a buffer of its own, then runs the program
window by window (XK_WINDOW values: the registers stay in the core's cache) and at once reduces the
window there (a sum, bit for bit NumPy's pairwise sum of the chunk; a count of true values),
compacts the rows where the result holds (a query's selected values, positions or other columns),
or writes the result out.  No evaluated array or mask of a whole chunk reaches memory.  The loops of
the operations are C (blz_exprkernel.h), vectorized.

What it does not do: parse or compile expressions (`blzarr.query.exprkernel` does), decide the dtype
of each operation or the conversions between them (the compiler does, after NumPy's type promotion),
or read files (the caller hands it chunk bytes and the uncompressed tail of a carray).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport malloc, free, realloc, calloc
from libc.string cimport memcpy

cimport numpy as cnp

from blzarr._blosc cimport blosc_getitem
from blzarr._chunk cimport (header_t, C_MEMCPYED, bytes_view, parse_header, decode_chunk, decode_chunk_ahead,
                            located)
from blzarr._sums cimport pairwise, PAIRWISE_LEAF
from blzarr._workpool cimport ChunkWork

cdef extern from "blz_exprkernel.h" nogil:
    void xk_exec(const int32_t *prog, int64_t nins, char **rp, int64_t m)
    int64_t xk_count(const uint8_t *v, int64_t m)
    int64_t xk_cmp_count(int op, const char *a, const char *b, int64_t m)
    void xk_widen(int kind, const char *src, double *d, int64_t m)
    int64_t xk_isum(const int64_t *v, int64_t m)
    void xk_narrow(const int64_t *a, char *dst, int64_t isz, int64_t m)
    enum: XK_FROM_F8
    enum: XK_FROM_F4
    enum: XK_FROM_I8
    enum: XK_FROM_B1
    enum: XK_FROM_N
    enum: XK_OP_CVT_F8
    enum: XK_OP_CVT_F4
    enum: XK_OP_CVT_I8
    enum: XK_OP_F4
    enum: XK_OP_I8
    enum: XK_OP_WRAP
    enum: XK_OP_I4CMP
    enum: XK_OP_B1
    enum: XK_OP_N

# the operand dtypes the kernel reads, each converted to float64 window by window (blz_exprkernel.h)
OPERAND_KINDS = {"f8": 0, "f4": 1, "i1": 2, "i2": 3, "i4": 4, "i8": 5, "u1": 6, "u2": 7, "u4": 8, "u8": 9,
                 "b1": 10}

cnp.import_array()

from numpy import dtype as np_dtype, zeros as np_zeros, empty as np_empty

from blzarr.errors import ChunkError

np_f8 = np_dtype("f8")
np_i8 = np_dtype("i8")
np_f4 = np_dtype("f4")

cdef enum:
    XK_ADD = 0
    XK_SUB = 1
    XK_MUL = 2
    XK_DIV = 3
    XK_NEG = 4
    XK_GT = 5
    XK_GE = 6
    XK_LT = 7
    XK_LE = 8
    XK_EQ = 9
    XK_NE = 10
    XK_AND = 11
    XK_OR = 12
    XK_XOR = 13
    XK_NOT = 14

cdef enum:
    XK_SUM = 0          # the result (float64) summed per chunk, as np.sum sums the chunk's values
    XK_COUNT = 1        # the result (booleans) counted per chunk
    XK_SELECT = 2       # the rows where the result (booleans) holds, of each output, per chunk
    XK_VALUES = 3       # the result itself, into an array of every row

EXPR_OPCODES = {"add": XK_ADD, "sub": XK_SUB, "mul": XK_MUL, "div": XK_DIV, "neg": XK_NEG,
                "gt": XK_GT, "ge": XK_GE, "lt": XK_LT, "le": XK_LE, "eq": XK_EQ, "ne": XK_NE,
                "and": XK_AND, "or": XK_OR, "xor": XK_XOR, "not": XK_NOT,
                # conversions into a float64, float32 or int64 register (the fourth field: -2 minus the
                # source's OPERAND_KINDS value), and the wrap of an int64 register to a narrower
                # integer dtype (the fourth field: -2 minus that dtype's OPERAND_KINDS value)
                "cvt_f8": XK_OP_CVT_F8, "cvt_f4": XK_OP_CVT_F4, "cvt_i8": XK_OP_CVT_I8, "wrap": XK_OP_WRAP,
                "b1_norm": XK_OP_B1}
for _i, _op in enumerate(["add", "sub", "mul", "div", "neg", "gt", "ge", "lt", "le", "eq", "ne"]):
    EXPR_OPCODES["f4_" + _op] = XK_OP_F4 + _i
for _i, _op in enumerate(["add", "sub", "mul", "neg", "gt", "ge", "lt", "le", "eq", "ne"]):
    EXPR_OPCODES["i8_" + _op] = XK_OP_I8 + _i
for _i, _op in enumerate(["gt", "ge", "lt", "le", "eq", "ne"]):
    EXPR_OPCODES["i4_" + _op] = XK_OP_I4CMP + _i
# the kinds of register a constant fills (`ckinds`) and the result's (`rkind`)
CONST_KINDS = {"f8": 0, "f4": 1, "i8": 2, "i4": 3}
RESULT_KINDS = {"f8": 0, "f4": 1, "i8": 2, "b1": 3}
_WRAP_KINDS = frozenset([2, 3, 4, 5, 6, 7, 8])      # i1 i2 i4 i8 u1 u2 u4
_KIND_SIZE = {0: 8, 1: 4, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 2, 8: 4, 9: 8, 10: 1}


cdef Py_ssize_t _read_size(int op, int b):
    """The bytes of each value an instruction reads from its source registers (-1: a malformed one)."""
    if op <= XK_NE:
        return 8
    if op <= XK_NOT or op == XK_OP_B1:
        return 1
    if op in (XK_OP_CVT_F8, XK_OP_CVT_F4, XK_OP_CVT_I8):
        return _KIND_SIZE.get(-2 - b, -1)
    if XK_OP_F4 <= op < XK_OP_F4 + 11:
        return 4
    if XK_OP_I8 <= op <= XK_OP_WRAP:
        return 8
    if XK_OP_I4CMP <= op < XK_OP_I4CMP + 6:
        return 4
    return -1


cdef bint _unary(int op):
    return op in (XK_NEG, XK_NOT, XK_OP_F4 + 4, XK_OP_I8 + 3, XK_OP_B1)
EXPR_MODES = {"sum": XK_SUM, "count": XK_COUNT, "select": XK_SELECT, "values": XK_VALUES}


# A chunk's result arrives window by window, so its sum cannot be one recursive `pairwise` call over
# the chunk.  The recursion's tree is the same for every chunk of a length: it is laid out once, in
# postfix, and each thread walks it with a small stack as the windows come -- the same additions in
# the same order, so the same bits as NumPy's sum of the chunk.
cdef int64_t *_pairwise_plan(Py_ssize_t n, Py_ssize_t *nplan) except NULL:
    """NumPy's pairwise tree over n values in postfix (malloc'ed): a leaf's length (> 0) or 0 (add the
    two partial sums on top of the stack)."""
    cdef list out = []
    cdef int64_t *plan
    cdef Py_ssize_t i
    _pairwise_postfix(n, out)
    nplan[0] = len(out)
    plan = <int64_t *>malloc(max(1, len(out)) * sizeof(int64_t))
    if plan == NULL:
        raise MemoryError()
    for i in range(len(out)):
        plan[i] = out[i]
    return plan


cdef void _pairwise_postfix(Py_ssize_t n, list out):
    """The tree of `pairwise` over n values in postfix (see _pairwise_plan)."""
    cdef Py_ssize_t n2
    if n <= PAIRWISE_LEAF:
        out.append(n)
        return
    n2 = n // 2
    n2 -= n2 % 8
    _pairwise_postfix(n2, out)
    _pairwise_postfix(n - n2, out)
    out.append(0)


cdef class ExprChunks(ChunkWork):
    """ExprChunks(operands, program, consts, nregs, result, mode, chunklen, outputs=(), nparts=1, wheres=None)

    Evaluate a register program over the full chunks of numeric operands (converted to float64), window by window, on every
    thread that calls `run()` (then call `check()`).

    `operands`: one list of chunk bytes per operand, all of `chunklen` values; register i is operand
    i's window, as float64.  `kinds`: each operand's dtype, an `OPERAND_KINDS` key ("i8", "f4", "b1",
    ...; None: all "f8"); one other than "f8" is converted to float64 window by window, unless `raw`:
    then every operand's register holds its own values, and the program converts them (the "cvt_*"
    opcodes).  `consts`: one 8-byte slot per constant, register ``len(operands) + j``: a float64
    value, or with `ckinds` (one `CONST_KINDS` key each) "f4" (that float64 as float32), "i8" or "i4"
    (an integer's bits).  `rkind` (a `RESULT_KINDS` key): what the result register holds; a "sum"
    then comes as float64, float32 or int64 (wrapping), "values" as the dtype of `dest` (an int64
    result stored in its low bytes).  `program`: int32
    rows ``(opcode, dst, a, b)`` (`EXPR_OPCODES`; b is -1 for a unary op); `nregs` registers in all;
    `result` the register that holds the expression.  `mode` (`EXPR_MODES`):

    - "sum": `values` holds each chunk's sum of the (float64) result, bit for bit NumPy's sum of it;
    - "count": `counts` holds each chunk's number of true (boolean) results (`compare_count` says
      whether the program's last instruction, a comparison, is counted without storing its booleans);
    - "values": the result of every row into `dest` (float64, or bool for a boolean result);
    - "select": for each of `outputs`, the rows of each chunk where the (boolean) result holds, and
      `counts` their number; `fill(j, dest)` copies output j's rows of every chunk into `dest`.  An
      output is ``("operand", i)`` (float64 operand i's values), ``("positions", None)`` (int64 row numbers)
      or ``("chunks", (list of chunk bytes, itemsize[, tail]))``, another column with the same chunk
      length.

    `tails`: the rows after the full chunks (a carray's last, uncompressed rows), one 1-d C-contiguous
    array per operand of its dtype, all of one length, and a tail array for every "chunks" output: one
    more item after the chunks, without decoding.

    `clens`: each operand's chunk length, when they differ (None: all `chunklen`): each a multiple of
    `chunklen` that divides the largest, G times `chunklen`.  An item is then G blocks of `chunklen`
    rows, each chunk decoded once; `values` and `counts` hold one result per block of `chunklen` rows
    (the tail's rows cut into blocks too), as a query's blocks of `chunklen` rows would.  Mode "select"
    needs one chunk length and a tail shorter than it.

    `wheres`: a function ``wheres(i, m)`` that says how errors name chunk m of operand i (by default
    "chunk m of operand i").  A chunk that does not decode is named so, whichever group it is in.
    """

    cdef Py_ssize_t nops, nconst, nregs_, nins, res, mode, clen, win, nouts, nchunks
    # a count whose last instruction is a comparison into the result: the instructions before it run,
    # and xk_cmp_count counts where it holds without storing its booleans
    cdef readonly bint compare_count
    # operands of several chunk lengths (multiples of `clen`): an item is a group of `grp` blocks of
    # `clen` rows, in which operand i has grp / rat_[i] chunks, at coff_[i] among the group's
    # `cstride` chunks, decoded whole at woff_[i] in the thread's scratch; the results are per block
    cdef Py_ssize_t grp, cstride, nblk
    cdef Py_ssize_t *rat_
    cdef Py_ssize_t *coff_
    cdef Py_ssize_t *woff_
    cdef int32_t *prog
    cdef double *consts
    cdef int64_t *plan
    cdef Py_ssize_t nplan
    cdef int64_t *tplan            # the pairwise tree of the tail
    cdef Py_ssize_t ntplan, ntail
    cdef char **tptr               # the tail of each operand, and of each output ("chunks" kind)
    cdef char **otail
    cdef object values_arr, counts_arr, dest_arr
    cdef char *dest
    cdef Py_ssize_t disz
    cdef double *vals
    cdef int64_t *cnts
    # outputs: kind (0 operand, 1 positions, 2 chunks), operand index or column, itemsize
    cdef int *okind
    cdef int *ckind_               # each constant's register kind (CONST_KINDS); its slot in `consts`
                                   # holds an int64's bits for "i8" and "i4"
    cdef int rkind                 # the result's register kind (RESULT_KINDS)
    cdef bint raw                  # every operand's register points into its chunk, values of its dtype
    cdef int *kind_                # each operand's dtype (OPERAND_KINDS); other than float64 it is
    cdef Py_ssize_t *isz_          # converted to float64 window by window, into its own register
    cdef Py_ssize_t *oarg
    cdef Py_ssize_t *osize
    cdef Py_ssize_t *ooff          # each output's decode buffer in the thread's scratch
    cdef const uint8_t **osrc      # [column chunk pointers], nchunks per column output
    cdef header_t *ohdr            # their headers
    cdef char **obuf               # [chunk * nouts + j]: the selected rows
    cdef Py_ssize_t *ocap
    cdef Py_ssize_t regs_bytes, idx_off, carry_off, ptr_off, whole_off

    # no __cinit__: Cython allocates the object with every C field 0 / NULL, which is all that
    # __dealloc__ needs after an __init__ that raised half-way (free(NULL) is a no-op)

    def __init__(self, list operands not None, const int32_t[:, ::1] program not None,
                 const double[::1] consts not None, Py_ssize_t nregs, Py_ssize_t result, mode,
                 Py_ssize_t chunklen, outputs=(), Py_ssize_t nparts=1, wheres=None, tails=None, dest=None,
                 kinds=None, clens=None, bint raw=False, ckinds=None, rkind="f8"):
        cdef Py_ssize_t nops = len(operands), n, k, i, j, t, off, nitems, isz, c, idx, ntb
        cdef cnp.ndarray ta
        cdef list flat = []
        cdef header_t *h
        if nops < 1:
            raise ValueError("ExprChunks: at least one operand is needed")
        if chunklen < 1:
            raise ValueError(f"ExprChunks: chunklen must be positive, got {chunklen}")
        # each operand's chunk length: a multiple of `chunklen` that divides the largest one
        self.rat_ = <Py_ssize_t *>calloc(nops, sizeof(Py_ssize_t))
        self.coff_ = <Py_ssize_t *>calloc(nops, sizeof(Py_ssize_t))
        self.woff_ = <Py_ssize_t *>calloc(nops, sizeof(Py_ssize_t))
        if self.rat_ == NULL or self.coff_ == NULL or self.woff_ == NULL:
            raise MemoryError()
        if clens is not None and len(clens) != nops:
            raise ValueError("ExprChunks: one chunk length per operand is needed")
        for i in range(nops):
            c = chunklen if clens is None else clens[i]
            if c < chunklen or c % chunklen:
                raise ValueError(f"ExprChunks: operand {i}'s chunk length {c} is not a multiple of {chunklen}")
            self.rat_[i] = c // chunklen
        self.grp = max([self.rat_[i] for i in range(nops)])
        self.cstride = 0
        for i in range(nops):
            if self.grp % self.rat_[i]:
                raise ValueError(f"ExprChunks: operand {i}'s chunk length does not divide the largest one")
            self.coff_[i] = self.cstride
            self.cstride += self.grp // self.rat_[i]
        # n: the groups of `grp` blocks (one block each when every chunk length is `chunklen`)
        n = len(operands[0]) * self.rat_[0] // self.grp
        for i in range(nops):
            if len(operands[i]) != n * (self.grp // self.rat_[i]):
                raise ValueError("ExprChunks: every operand needs chunks for the same rows")
        if mode not in EXPR_MODES:
            raise ValueError(f"ExprChunks: unknown mode {mode!r}")
        self.mode = EXPR_MODES[mode]
        self.nops = nops
        self.nconst = consts.shape[0]
        self.nregs_ = nregs
        self.nins = program.shape[0]
        self.res = result
        self.clen = chunklen
        self.nchunks = n
        if program.shape[1] != 4 or nregs < nops + self.nconst or not 0 <= result < nregs:
            raise ValueError("ExprChunks: a malformed program")
        # each operand's dtype: float64 unless `kinds` names another (an OPERAND_KINDS key)
        self.kind_ = <int *>calloc(nops, sizeof(int))
        self.isz_ = <Py_ssize_t *>calloc(nops, sizeof(Py_ssize_t))
        if self.kind_ == NULL or self.isz_ == NULL:
            raise MemoryError()
        if kinds is not None and len(kinds) != nops:
            raise ValueError("ExprChunks: one kind per operand is needed")
        for i in range(nops):
            kd = "f8" if kinds is None else kinds[i]
            if kd not in OPERAND_KINDS:
                raise ValueError(f"ExprChunks: operand {i} has an unknown kind {kd!r}")
            self.kind_[i] = OPERAND_KINDS[kd]
            self.isz_[i] = np_dtype(kd).itemsize
        self.raw = raw
        for t in range(self.nins):
            op, b = program[t, 0], program[t, 3]
            isz = _read_size(op, b)
            if isz < 0 or not nops + self.nconst <= program[t, 1] < nregs \
                    or not 0 <= program[t, 2] < nregs or not b < nregs:
                raise ValueError(f"ExprChunks: instruction {t} is malformed")
            if op in (XK_OP_CVT_F8, XK_OP_CVT_F4, XK_OP_CVT_I8, XK_OP_WRAP):
                ok = b <= -2 and (op != XK_OP_WRAP or -2 - b in _WRAP_KINDS) and (
                    op != XK_OP_CVT_I8 or -2 - b not in (XK_FROM_F8, XK_FROM_F4))
            else:
                ok = b == -1 if _unary(op) else b >= 0
            if not ok:
                raise ValueError(f"ExprChunks: instruction {t} lacks its second operand or has a wrong one")
            # an operand's register points into its chunk when `raw`: an instruction reads values of
            # its own size there (a conversion: of the operand's kind), never past the window
            for r in (program[t, 2], b):
                if raw and 0 <= r < nops and (isz != self.isz_[r] or (
                        op in (XK_OP_CVT_F8, XK_OP_CVT_F4, XK_OP_CVT_I8) and -2 - b != self.kind_[r])):
                    raise ValueError(f"ExprChunks: instruction {t} reads operand {r} as another kind")
        # (every register index is checked above: the C loop indexes with them unchecked, and never
        # writes an operand's or a constant's register)
        if rkind not in RESULT_KINDS:
            raise ValueError(f"ExprChunks: unknown result kind {rkind!r}")
        self.rkind = RESULT_KINDS[rkind]
        self.ckind_ = <int *>calloc(max(1, self.nconst), sizeof(int))
        if self.ckind_ == NULL:
            raise MemoryError()
        if ckinds is not None and len(ckinds) != self.nconst:
            raise ValueError("ExprChunks: one kind per constant is needed")
        for j in range(self.nconst):
            kd = "f8" if ckinds is None else ckinds[j]
            if kd not in CONST_KINDS:
                raise ValueError(f"ExprChunks: constant {j} has an unknown kind {kd!r}")
            self.ckind_[j] = CONST_KINDS[kd]
        # the chunks in item order: group k's chunks of operand i from k * cstride + coff_[i]
        for k in range(n):
            for i in range(nops):
                c = self.grp // self.rat_[i]
                flat.extend(operands[i][k * c:(k + 1) * c])
        self._set_chunks(flat, nparts, wheres)
        self.tptr = <char **>calloc(nops, sizeof(char *))
        if self.tptr == NULL:
            raise MemoryError()
        if tails is not None:
            if len(tails) != nops:
                raise ValueError("ExprChunks: one tail per operand is needed")
            for i in range(nops):
                ta = tails[i]
                if (not isinstance(ta, cnp.ndarray)
                        or ta.dtype.str[1:] != ("f8" if kinds is None else kinds[i])
                        or not ta.dtype.isnative or cnp.PyArray_NDIM(ta) != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(ta)
                        or cnp.PyArray_DIM(ta, 0) != cnp.PyArray_DIM(<cnp.ndarray>tails[0], 0)
                        or cnp.PyArray_DIM(ta, 0) < 1):
                    raise ValueError("ExprChunks: the tails must be C-contiguous arrays of one positive "
                                     "length, of their operands' dtypes")
                self.tptr[i] = <char *>cnp.PyArray_DATA(ta)
                self.keep.append(ta)
            self.ntail = cnp.PyArray_DIM(<cnp.ndarray>tails[0], 0)
        # one item per group (all its operands' chunks), then the tail: the threads' shares over them;
        # the results are per block of `chunklen` rows, the tail's cut the same way
        nitems = n + (self.ntail > 0)
        if nitems < 1:
            raise ValueError("ExprChunks: no chunk and no tail")
        ntb = (self.ntail + chunklen - 1) // chunklen
        self.nblk = n * self.grp + ntb
        self._share(nitems, nparts)
        for k in range(n):
            for i in range(nops):
                for c in range(self.grp // self.rat_[i]):
                    h = &self.hdr[k * self.cstride + self.coff_[i] + c]
                    isz = self.isz_[i]
                    if h.nbytes != chunklen * self.rat_[i] * isz:
                        raise ValueError(f"ExprChunks: a chunk holds {h.nbytes} bytes, not "
                                         f"{chunklen * self.rat_[i]} values of {isz} bytes")
                    if isz % h.typesize:
                        # (Blosc decodes whole typesize units; a chunk saved with another typesize
                        # would not split at value boundaries)
                        raise ValueError(f"ExprChunks: typesize {h.typesize} does not divide values of "
                                         f"{isz} bytes")
        # the window: the temporaries of 2048 values each stay in L1/L2; at least a pairwise leaf, so
        # that a leaf spans at most two windows (the carry below holds what a leaf has so far)
        self.win = max(PAIRWISE_LEAF, min(chunklen, XK_WINDOW))
        self.prog = <int32_t *>malloc(max(1, self.nins * 4) * sizeof(int32_t))
        self.consts = <double *>malloc(max(1, self.nconst) * sizeof(double))
        if self.prog == NULL or self.consts == NULL:
            raise MemoryError()
        for t in range(self.nins):
            for j in range(4):
                self.prog[4 * t + j] = program[t, j]
        if self.nconst:
            # (bytes, not doubles: a slot may hold an integer's bits, which need not be a number)
            memcpy(self.consts, &consts[0], self.nconst * sizeof(double))
        t = self.nins - 1
        self.compare_count = (self.mode == XK_COUNT and t >= 0 and self.prog[4 * t + 1] == result
                     and self.prog[4 * t + 3] >= 0
                     and xk_cmp_count(self.prog[4 * t], NULL, NULL, 0) == 0)
        if self.mode == XK_SELECT and self.nblk != nitems:
            raise ValueError("ExprChunks: mode 'select' needs operands of one chunk length and a tail "
                             "shorter than a chunk")
        if self.mode == XK_SUM:
            self.plan = _pairwise_plan(chunklen, &self.nplan)
            if self.ntail % chunklen:
                self.tplan = _pairwise_plan(self.ntail % chunklen, &self.ntplan)
            if self.rkind == 3:
                raise ValueError("ExprChunks: mode 'sum' needs a numeric result")
            self.values_arr = np_zeros(self.nblk, (np_f8, np_f4, np_i8)[self.rkind])
            self.vals = <double *>cnp.PyArray_DATA(<cnp.ndarray>self.values_arr)
        self.counts_arr = np_zeros(self.nblk, np_i8)
        if self.mode == XK_VALUES:
            if (not isinstance(dest, cnp.ndarray) or cnp.PyArray_NDIM(dest) != 1
                    or not cnp.PyArray_IS_C_CONTIGUOUS(dest) or not cnp.PyArray_ISWRITEABLE(dest)
                    or cnp.PyArray_ITEMSIZE(dest) not in ((1, 8), (4,), (1, 2, 4, 8), (1,))[self.rkind]
                    or cnp.PyArray_DIM(dest, 0) != n * self.grp * chunklen + self.ntail):
                raise ValueError(f"ExprChunks: mode 'values' needs a writeable C-contiguous array of "
                                 f"{n * self.grp * chunklen + self.ntail} items of the result's size")
            self.dest_arr = dest
            self.dest = <char *>cnp.PyArray_DATA(<cnp.ndarray>dest)
            self.disz = cnp.PyArray_ITEMSIZE(<cnp.ndarray>dest)
        self.cnts = <int64_t *>cnp.PyArray_DATA(<cnp.ndarray>self.counts_arr)
        self._set_outputs(list(outputs) if self.mode == XK_SELECT else [], n, chunklen)
        # the thread's scratch: registers, the outputs' windows, the selected positions, the carry
        # of a pairwise leaf across two windows, the register pointers and each operand's chunk and
        # block, then every operand's chunk decoded whole (64-byte aligned, for the vector loads)
        self.regs_bytes = nregs * self.win * 8
        off = self.regs_bytes
        for j in range(self.nouts):
            self.ooff[j] = off
            if self.okind[j] == 2:
                off += (self.win * self.osize[j] + 63) // 64 * 64
        self.idx_off = off
        off += self.win * sizeof(int32_t)
        self.carry_off = off
        off += 2 * PAIRWISE_LEAF * 8
        self.ptr_off = off
        off += (nregs + 2 * nops) * sizeof(char *)
        self.whole_off = (off + 63) // 64 * 64
        off = self.whole_off
        for i in range(nops):
            self.woff_[i] = off
            off += (chunklen * self.rat_[i] * self.isz_[i] + 63) // 64 * 64
        self.scratch_bytes = off

    cdef int _set_outputs(self, list outputs, Py_ssize_t n, Py_ssize_t chunklen) except -1:
        cdef Py_ssize_t j, k, ncol = 0, c = 0, isz
        cdef cnp.ndarray ta
        cdef const uint8_t[::1] v
        cdef header_t h
        self.nouts = len(outputs)
        m = max(1, self.nouts)
        self.okind = <int *>malloc(m * sizeof(int))
        self.oarg = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
        self.osize = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
        self.ooff = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
        # one growing buffer per (chunk, output): the threads append to their own chunks' buffers only,
        # and `fill` concatenates them in chunk order afterwards
        self.obuf = <char **>calloc(max(1, self.nitems * self.nouts), sizeof(char *))
        self.ocap = <Py_ssize_t *>calloc(max(1, self.nitems * self.nouts), sizeof(Py_ssize_t))
        self.otail = <char **>calloc(m, sizeof(char *))
        if (self.okind == NULL or self.oarg == NULL or self.osize == NULL or self.ooff == NULL
                or self.obuf == NULL or self.ocap == NULL or self.otail == NULL):
            raise MemoryError()
        for kind, arg in outputs:
            if kind == "chunks":
                ncol += 1
        self.osrc = <const uint8_t **>malloc(max(1, ncol * n) * sizeof(uint8_t *))
        self.ohdr = <header_t *>malloc(max(1, ncol * n) * sizeof(header_t))
        if self.osrc == NULL or self.ohdr == NULL:
            raise MemoryError()
        for j, (kind, arg) in enumerate(outputs):
            if kind == "operand" and 0 <= arg < self.nops and self.kind_[arg] != XK_FROM_F8:
                # (its register holds the values converted to float64, not the column's own)
                raise ValueError(f"ExprChunks: output {j}: operand {arg} is not float64")
            if kind == "operand":
                if not 0 <= arg < self.nops:
                    raise ValueError(f"ExprChunks: output {j} names operand {arg} of {self.nops}")
                self.okind[j], self.oarg[j], self.osize[j] = 0, arg, 8
            elif kind == "positions":
                self.okind[j], self.oarg[j], self.osize[j] = 1, 0, 8
            elif kind == "chunks":
                bufs, isz = arg[0], arg[1]
                if len(bufs) != n or isz < 1:
                    raise ValueError(f"ExprChunks: output {j} needs {n} chunks of items of a positive size")
                self.okind[j], self.oarg[j], self.osize[j] = 2, c * n, isz
                if self.ntail:
                    ta = arg[2] if len(arg) > 2 else None
                    if (not isinstance(ta, cnp.ndarray) or cnp.PyArray_NDIM(ta) != 1
                            or not cnp.PyArray_IS_C_CONTIGUOUS(ta) or cnp.PyArray_ITEMSIZE(ta) != isz
                            or cnp.PyArray_DIM(ta, 0) != self.ntail):
                        raise ValueError(f"ExprChunks: output {j} needs a C-contiguous tail of {self.ntail} "
                                         f"items of {isz} bytes")
                    self.otail[j] = <char *>cnp.PyArray_DATA(ta)
                    self.keep.append(ta)
                for k in range(n):
                    b = bufs[k]
                    v = bytes_view(b)
                    parse_header(&v[0] if v.shape[0] else NULL, v.shape[0], &h, f"chunk {k} of output {j}", False)
                    if h.nbytes != chunklen * isz:
                        raise ValueError(f"ExprChunks: output {j}'s chunk {k} holds {h.nbytes} bytes, "
                                         f"not {chunklen} items of {isz}")
                    # a window of such a column is read with blosc_getitem, in typesize units
                    if isz % h.typesize or (not (h.flags & C_MEMCPYED) and h.blocksize % h.typesize):
                        raise ValueError(f"ExprChunks: output {j}'s typesize does not divide its items")
                    self.osrc[c * n + k] = &v[0]
                    self.ohdr[c * n + k] = h
                    self.keep.append(v)
                c += 1
            else:
                raise ValueError(f"ExprChunks: unknown output kind {kind!r}")
        return 0

    def __dealloc__(self):
        cdef Py_ssize_t i
        free(self.prog)
        free(self.consts)
        free(self.plan)
        free(self.tplan)
        free(self.tptr)
        free(self.otail)
        free(self.okind)
        free(self.kind_)
        free(self.ckind_)
        free(self.isz_)
        free(self.rat_)
        free(self.coff_)
        free(self.woff_)
        free(self.oarg)
        free(self.osize)
        free(self.ooff)
        free(self.osrc)
        free(self.ohdr)
        if self.obuf != NULL:
            for i in range(self.nitems * self.nouts):
                free(self.obuf[i])
        free(self.obuf)
        free(self.ocap)

    @property
    def values(self):
        """Each block's sum (mode "sum"), valid after `check()`."""
        return self.values_arr

    @property
    def counts(self):
        """Each block's count of true results (modes "count" and "select"), valid after `check()`."""
        return self.counts_arr

    cdef object _name_of(self, Py_ssize_t j):
        # j counts the chunks in item order (each group's chunks of every operand in turn): named as
        # operand i's chunk m, not by the group's number
        cdef Py_ssize_t k = j // self.cstride, r = j % self.cstride, i = self.nops - 1
        while i > 0 and self.coff_[i] > r:
            i -= 1
        m = k * (self.grp // self.rat_[i]) + r - self.coff_[i]
        return f"chunk {m} of operand {i}" if self.wheres is None else self.wheres(i, m)

    def check(self):
        """Raise `ChunkError` for the first item that failed (after every `run()` has returned), naming
        the chunk of it that does not decode (the kernel reports only the item: a group of chunks)."""
        cdef Py_ssize_t k = self.failed, j, jo, ret
        if k < 0:
            return
        if k < self.nchunks:
            for j in range(k * self.cstride, (k + 1) * self.cstride):
                ret = self._decodes(self.src[j], &self.hdr[j])
                if ret != 0:
                    raise ChunkError(f"corrupted Blosc chunk{located(self._name_of(j))}: decoding failed "
                                     f"(return code {ret})")
            for jo in range(self.nouts):
                if self.okind[jo] == 2:
                    ret = self._decodes(self.osrc[self.oarg[jo] + k], &self.ohdr[self.oarg[jo] + k])
                    if ret != 0:
                        raise ChunkError(f"corrupted Blosc chunk (chunk {k} of output {jo}): decoding "
                                         f"failed (return code {ret})")
        a = min(k, self.nchunks) * self.grp * self.clen
        raise ChunkError(f"corrupted Blosc chunk (of rows from {a} on): decoding failed (return code "
                         f"{self.failed_ret})")

    cdef int _decodes(self, const uint8_t *src, header_t *h) except? -2:
        """0 when the chunk at `src` (header `h`) decodes whole, else the decoder's code."""
        cdef cnp.ndarray buf
        cdef int ret
        if h.flags & C_MEMCPYED:
            return 0
        buf = np_empty(max(1, h.nbytes), np_dtype("u1"))
        ret = decode_chunk(src, h.ctbytes, <char *>cnp.PyArray_DATA(buf), h.nbytes, 1)
        return 0 if ret == h.nbytes else (ret if ret != 0 else -1)

    def fill(self, Py_ssize_t j, cnp.ndarray dest not None, Py_ssize_t k0=0, Py_ssize_t k1=-1):
        """Copy output j's selected rows of chunks k0 to k1 (excluded; -1: to the last), in order, into
        the 1-d array `dest` (whose items are that output's size; it may be strided, e.g. a field of a
        structured array).  Calls for different outputs or chunks may run on several threads at once."""
        cdef Py_ssize_t total = 0, k, i, isz, stride, m
        cdef char *d
        cdef const char *s
        if self.mode != XK_SELECT or not 0 <= j < self.nouts:
            raise ValueError(f"ExprChunks.fill: no output {j}")
        if k1 < 0:
            k1 = self.nitems
        if not 0 <= k0 <= k1 <= self.nitems:
            raise ValueError(f"ExprChunks.fill: chunks [{k0}, {k1}) outside the {self.nitems}")
        isz = self.osize[j]
        for k in range(k0, k1):
            total += self.cnts[k]
        if cnp.PyArray_NDIM(dest) != 1 or cnp.PyArray_DIM(dest, 0) != total \
                or cnp.PyArray_ITEMSIZE(dest) != isz or not cnp.PyArray_ISWRITEABLE(dest):
            raise ValueError(f"ExprChunks.fill: dest must be a writeable 1-d array of {total} items of "
                             f"{isz} bytes")
        stride = cnp.PyArray_STRIDE(dest, 0)
        d = <char *>cnp.PyArray_DATA(dest)
        with nogil:
            for k in range(k0, k1):
                m = self.cnts[k]
                s = self.obuf[k * self.nouts + j]
                if m == 0:
                    continue
                if stride == isz:
                    memcpy(d, s, m * isz)
                    d += m * isz
                elif isz == 8:
                    for i in range(m):
                        (<int64_t *>d)[0] = (<const int64_t *>s)[i]
                        d += stride
                else:
                    for i in range(m):
                        memcpy(d, s + i * isz, isz)
                        d += stride
        return total

    cdef int _decode(self, const uint8_t *src, header_t *h, Py_ssize_t isz, Py_ssize_t w0, Py_ssize_t m,
                     char *dst, char **at) noexcept nogil:
        """Values [w0, w0 + m) of a chunk of `isz`-byte items: `*at` points at them (into the chunk
        when it is stored raw, else at `dst`, where they are decoded).  Only the window's blocks are
        decoded: an output column is read only where a window selects something."""
        cdef int ret
        cdef Py_ssize_t ts = h.typesize
        if h.flags & C_MEMCPYED:
            at[0] = <char *>src + 16 + w0 * isz
            return 0
        ret = blosc_getitem(src, <int>(w0 * isz // ts), <int>(m * isz // ts), dst)
        if ret != m * isz:
            return ret if ret != 0 else -1
        at[0] = dst
        return 0

    cdef int _do(self, Py_ssize_t k, char *scratch) noexcept nogil:
        cdef Py_ssize_t i, j, W = self.win, L = self.clen, nops = self.nops, b, nb, r, ret
        cdef char **rp = <char **>(scratch + self.ptr_off)
        cdef char **whole = rp + self.nregs_
        cdef char **at = whole + nops
        cdef double *v
        cdef double s
        cdef int64_t l
        cdef bint tail = k == self.nchunks
        # every register is a window of the thread's scratch; an operand's register is pointed into its
        # decoded chunk at each window instead (no copy), and a constant fills its register once, so
        # the C loops have no scalar cases
        for i in range(self.nregs_):
            rp[i] = scratch + i * W * 8
        for j in range(self.nconst):
            v = <double *>rp[nops + j]
            s = self.consts[j]
            memcpy(&l, &self.consts[j], 8)
            if self.ckind_[j] == 0:
                for i in range(W):
                    v[i] = s
            elif self.ckind_[j] == 1:
                for i in range(W):
                    (<float *>v)[i] = <float>s
            elif self.ckind_[j] == 2:
                for i in range(W):
                    (<int64_t *>v)[i] = l
            else:
                for i in range(W):
                    (<int32_t *>v)[i] = <int32_t>l
        if tail:
            for i in range(nops):
                whole[i] = self.tptr[i]
            nb = (self.ntail + L - 1) // L
        else:
            nb = self.grp
        for b in range(nb):
            for i in range(nops):
                r = self.rat_[i]
                if tail:
                    at[i] = whole[i] + b * L * self.isz_[i]
                    continue
                if b % r == 0:
                    # the operand's next chunk decoded whole into the thread's buffer (a whole decode
                    # writes each block straight to its place; blosc_getitem of a block copies it once
                    # more, ~1.4x the CPU), by the decoder of whole chunks that reads byte-shuffled
                    # small integers without LZ4's stalls
                    j = k * self.cstride + self.coff_[i] + b // r
                    if self.hdr[j].flags & C_MEMCPYED:
                        whole[i] = <char *>self.src[j] + 16
                    else:
                        whole[i] = scratch + self.woff_[i]
                        ret = decode_chunk_ahead(self.src[j], self.hdr[j].ctbytes, whole[i], self.hdr[j].nbytes)
                        if ret != self.hdr[j].nbytes:
                            return ret if ret != 0 else -1
                at[i] = whole[i] + (b % r) * L * self.isz_[i]
            ret = self._block(k * self.grp + b, min(L, self.ntail - b * L) if tail else L, tail, scratch)
            if ret != 0:
                return ret
        return 0

    cdef int _block(self, Py_ssize_t k, Py_ssize_t n, bint tail, char *scratch) noexcept nogil:
        """Block k's `n` rows: the program over them window by window, its result reduced, compacted
        or written out.  Each operand's rows are at the pointers after the registers'."""
        cdef Py_ssize_t i, j, w0, m, W = self.win, nops = self.nops, sel, cnt = 0
        cdef Py_ssize_t li = 0, lo = 0, pi = 0, sp = 0, fill = 0, need, isz, cap, t
        cdef char **rp = <char **>(scratch + self.ptr_off)
        cdef char **whole = rp + self.nregs_ + nops
        cdef int32_t *idx = <int32_t *>(scratch + self.idx_off)
        cdef double *carry = <double *>(scratch + self.carry_off)
        cdef double stack[72]      # the pairwise tree's partial sums: depth log2(chunklen / 128) + 1
        cdef float fstack[72]      # (float32 results: float32 arithmetic all the way, as NumPy's sum)
        cdef float *fv
        cdef float *fcarry = <float *>carry
        cdef float f
        cdef uint64_t isum = 0
        cdef double *v
        cdef double s
        cdef const uint8_t *mask
        cdef const uint8_t *col
        cdef char *src
        cdef char *dst
        cdef char *nb
        cdef int ret
        cdef int64_t count = 0, row0 = k * self.clen
        cdef const int64_t *plan = self.plan
        cdef Py_ssize_t nplan = self.nplan
        if n < self.clen:
            plan = self.tplan
            nplan = self.ntplan
        w0 = 0
        while w0 < n:
            m = min(W, n - w0)
            for i in range(nops):
                if self.raw or self.kind_[i] == XK_FROM_F8:
                    rp[i] = whole[i] + w0 * self.isz_[i]
                else:
                    # converted into the operand's own register window (only float64 operands are
                    # pointed into their chunk)
                    rp[i] = scratch + i * W * 8
                    xk_widen(self.kind_[i], whole[i] + w0 * self.isz_[i], <double *>rp[i], m)
            if self.compare_count:
                t = 4 * (self.nins - 1)
                xk_exec(self.prog, self.nins - 1, rp, m)
                count += xk_cmp_count(self.prog[t], rp[self.prog[t + 2]], rp[self.prog[t + 3]], m)
                w0 += m
                continue
            xk_exec(self.prog, self.nins, rp, m)
            if self.mode == XK_COUNT:
                count += xk_count(<const uint8_t *>rp[self.res], m)
            elif self.mode == XK_VALUES:
                if self.rkind == 2:
                    xk_narrow(<const int64_t *>rp[self.res], self.dest + (row0 + w0) * self.disz, self.disz, m)
                else:
                    memcpy(self.dest + (row0 + w0) * self.disz, rp[self.res], m * self.disz)
            elif self.mode == XK_SELECT:
                sel = xk_positions(<const uint8_t *>rp[self.res], m, idx)
                if sel:
                    for j in range(self.nouts):
                        isz = self.osize[j]
                        t = k * self.nouts + j
                        need = cnt + sel
                        # the chunk's selected rows so far, grown geometrically; no memory (-2)
                        # fails the item, and check() raises
                        if need > self.ocap[t]:
                            cap = max(need, 2 * self.ocap[t], min(n, 4096))
                            nb = <char *>realloc(self.obuf[t], cap * isz)
                            if nb == NULL:
                                return -2
                            self.obuf[t] = nb
                            self.ocap[t] = cap
                        dst = self.obuf[t] + cnt * isz
                        if self.okind[j] == 1:
                            for i in range(sel):
                                (<int64_t *>dst)[i] = row0 + w0 + idx[i]
                            continue
                        if self.okind[j] == 0:
                            src = rp[self.oarg[j]]
                        elif tail:
                            src = self.otail[j] + w0 * isz
                        else:
                            ret = self._decode(self.osrc[self.oarg[j] + k], &self.ohdr[self.oarg[j] + k], isz, w0, m,
                                               scratch + self.ooff[j], &src)
                            if ret != 0:
                                return ret
                        gather(dst, src, idx, sel, m, isz)
                    cnt += sel
            elif self.rkind == 2:
                isum += <uint64_t>xk_isum(<const int64_t *>rp[self.res], m)
            elif self.rkind == 1:
                # as below, in float32
                fv = <float *>rp[self.res]
                while pi < nplan:
                    if plan[pi] == 0:
                        sp -= 1
                        fstack[sp - 1] = fstack[sp - 1] + fstack[sp]
                        pi += 1
                        continue
                    t = plan[pi]
                    if lo + t > w0 + m:
                        i = max(lo, w0)
                        memcpy(fcarry + fill, fv + (i - w0), (w0 + m - i) * 4)
                        fill += w0 + m - i
                        break
                    if lo >= w0:
                        f = pairwise(<const float *>(fv + (lo - w0)), t)
                    else:
                        memcpy(fcarry + fill, fv, (lo + t - w0) * 4)
                        f = pairwise(<const float *>fcarry, t)
                        fill = 0
                    fstack[sp] = f
                    sp += 1
                    lo += t
                    pi += 1
            else:
                # NumPy's pairwise sum of the chunk, leaf by leaf as the windows come (a leaf across two
                # windows is gathered in `carry`)
                v = <double *>rp[self.res]
                while pi < nplan:
                    if plan[pi] == 0:
                        sp -= 1
                        stack[sp - 1] = stack[sp - 1] + stack[sp]
                        pi += 1
                        continue
                    t = plan[pi]
                    if lo + t > w0 + m:
                        # the leaf ends in a later window: keep its values here so far
                        i = max(lo, w0)
                        memcpy(carry + fill, v + (i - w0), (w0 + m - i) * 8)
                        fill += w0 + m - i
                        break
                    if lo >= w0:
                        s = pairwise(<const double *>(v + (lo - w0)), t)
                    else:
                        memcpy(carry + fill, v, (lo + t - w0) * 8)
                        s = pairwise(<const double *>carry, t)
                        fill = 0
                    stack[sp] = s
                    sp += 1
                    lo += t
                    pi += 1
            w0 += m
        if self.mode == XK_SUM and self.rkind == 2:
            (<int64_t *>self.vals)[k] = <int64_t>isum
        elif self.mode == XK_SUM and self.rkind == 1:
            f = 0.0
            f += fstack[0]
            (<float *>self.vals)[k] = f
        elif self.mode == XK_SUM:
            s = 0.0
            s += stack[0]
            self.vals[k] = s
        elif self.mode == XK_COUNT:
            self.cnts[k] = count
        else:
            self.cnts[k] = cnt
        return 0

