"""The rules every query shares, in one place: how an expression is parsed, how long a block is, which
rows a block gives (the compaction rule) and how `skip` and `limit` cut a stream of blocks.

The planner, the C kernels' compiler, the evaluators and the containers' `where` all ask here, so a
change of one rule changes every path at once.
"""

import ast
import functools

import numpy as np

# a block has at least this many rows: with tiny chunks the Python work per block would dominate
MIN_BLEN = 4096
# the rows of a block when no operand is chunked (NumPy arrays only) and no other length is given
DEFAULT_BLEN = 65536


@functools.lru_cache(maxsize=256)
def _parse_shared(expression):
    return ast.parse(expression, mode="eval")


def parse(expression, fresh=False):
    """The `ast.Expression` of `expression` (SyntaxError as `ast.parse` raises it).

    The tree is shared between all who ask for the same string (a query is parsed once, however many
    of the planner, the kernels and the evaluators read it): it must not be changed.  `fresh` gives a
    tree of one's own, to rewrite."""
    if fresh or type(expression) is not str:
        return ast.parse(expression, mode="eval")
    return _parse_shared(expression)


def block_length(operands, fallback=DEFAULT_BLEN):
    """The block length of a query over `operands` (any iterable of values): the smallest chunk
    length of the chunked ones (those with a `chunklen` that are not NumPy arrays), else `fallback`
    (a number, or a function giving it, called only then); never below MIN_BLEN."""
    cls = [v.chunklen for v in operands if not isinstance(v, np.ndarray) and hasattr(v, "chunklen")]
    if cls:
        return max(min(cls), MIN_BLEN)
    return max(fallback() if callable(fallback) else fallback, MIN_BLEN)


# a range of at most this many rows is read whole and picked from, however few of its rows are wanted:
# one decode of it (256 KiB of 8-byte values) costs less than what a gather of single rows does per
# call.  In rows, not bytes: asking a carray for its row's bytes costs as much as the rest of the rule.
SMALL_RANGE = 1 << 15


def gather(column, start, idx):
    """The rows ``start + idx`` of `column` (`idx`: sorted positions from `start`, not empty), by the
    compaction rule: one slice for a run; the range between the first and the last row wanted, then
    a pick, when it is small (at most SMALL_RANGE rows) or dense (at least a quarter of its rows
    wanted: one decode of the range beats a gather); else the single rows."""
    a, b = int(idx[0]), int(idx[-1]) + 1
    if idx.size == b - a:
        return column[start + a:start + b]
    if b - a <= SMALL_RANGE or idx.size * 4 >= b - a:
        return column[start + a:start + b][idx - a]
    return column[idx + start]


def skip_limit(parts, skip, limit, size=len, cut=None):
    """The `parts` (an iterable) with the first `skip` items of all of them left out and at most
    `limit` (None: all) given, empty parts dropped; with a limit of 0 no part is asked for.

    `size(part)` is a part's number of items and `cut(part, lo, hi)` its items [lo, hi) (default:
    ``part[lo:hi]``)."""
    if limit is not None and limit <= 0:
        return
    if cut is None:
        def cut(part, lo, hi):
            return part[lo:hi]
    count = 0
    for part in parts:
        m = size(part)
        if skip:
            if skip >= m:
                skip -= m
                continue
            lo, skip = skip, 0
        else:
            lo = 0
        hi = m if limit is None else min(m, lo + limit - count)
        if hi <= lo:
            continue
        yield part if lo == 0 and hi == m else cut(part, lo, hi)
        count += hi - lo
        if limit is not None and count >= limit:
            return


def mask_bounds(n, chunklen):
    """The blocks a mask (not an expression) is read in, for its `explain`: one per chunk."""
    cl = max(chunklen, 1)
    return [(s, min(s + cl, n)) for s in range(0, n, cl)]
