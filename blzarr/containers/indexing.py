"""Turning a user's key into positions along the first axis; pure Python and NumPy, no storage."""

import operator

import numpy as np


def normalize_int(key, length):
    """A non-negative position from an int key, or IndexError."""
    i = operator.index(key)
    if i < 0:
        i += length
    if not 0 <= i < length:
        raise IndexError(f"index {key} is out of bounds for axis 0 with size {length}")
    return i


def slice_length(start, stop, step):
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))


def positions_from_array(key, length):
    """Positions (intp, any order, duplicates kept) from an integer or boolean array-like key."""
    arr = np.asarray(key)
    if arr.dtype == bool:
        if arr.ndim != 1 or len(arr) != length:
            raise IndexError(
                f"boolean index has shape {arr.shape}, it must be one-dimensional of length {length}")
        return np.flatnonzero(arr)
    if arr.size == 0:
        return np.empty(0, dtype=np.intp)
    if arr.dtype.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer or boolean type, not {arr.dtype}")
    if arr.ndim != 1:
        raise IndexError("only one-dimensional integer arrays are supported as indices")
    pos = arr.astype(np.intp, copy=True)
    neg = pos < 0
    if neg.any():
        pos[neg] += length
    if pos.size and (pos.min() < 0 or pos.max() >= length):
        bad = arr[(pos < 0) | (pos >= length)][0]
        raise IndexError(f"index {bad} is out of bounds for axis 0 with size {length}")
    return pos


def chunk_pieces(start, stop, chunklen):
    """(chunk number, local start, local stop, output offset) covering [start, stop) in order."""
    pieces = []
    pos = start
    while pos < stop:
        n = pos // chunklen
        lo = pos - n * chunklen
        hi = min(chunklen, stop - n * chunklen)
        pieces.append((n, lo, hi, pos - start))
        pos = n * chunklen + hi
    return pieces


def group_by_chunk(pos, chunklen):
    """Yield (chunk number, indices into `pos`, local positions) for positions grouped by chunk."""
    if pos.size == 0:
        return
    cids = pos // chunklen
    if pos.size > 1 and (np.diff(cids) < 0).any():
        order = np.argsort(cids, kind="stable")
    else:
        order = np.arange(pos.size)
    scids = cids[order]
    bounds = np.flatnonzero(np.diff(scids)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [pos.size]))
    for s, e in zip(starts.tolist(), ends.tolist()):
        sel = order[s:e]
        cid = int(scids[s])
        yield cid, sel, pos[sel] - cid * chunklen


def sorted_groups(spos, chunklen):
    """(chunk number, start, stop): the runs of the ascending positions `spos` that share a chunk."""
    if spos.size == 0:
        return []
    first, last = int(spos[0]) // chunklen, int(spos[-1]) // chunklen
    if last - first < spos.size // 8:
        # many positions per chunk: find each chunk's first position by bisection, not a pass per array
        edges = np.searchsorted(spos, np.arange(first + 1, last + 1, dtype=np.int64) * chunklen).tolist()
        return [(first + k, s, e) for k, (s, e) in enumerate(zip([0] + edges, edges + [spos.size])) if e > s]
    cids = spos // chunklen
    bounds = (np.flatnonzero(np.diff(cids)) + 1).tolist()
    starts = [0] + bounds
    ends = bounds + [spos.size]
    return [(int(cids[s]), s, e) for s, e in zip(starts, ends)]
