"""Reductions of a carray (`CarrayReductions`, a part of `carray`): sum, mean, min and max over all
elements or along axes, every chunk reduced on its thread by the fused block engine (`blzarr.query.fused`)."""

import math

import numpy as np

from blzarr.query import fused
from blzarr.containers.carray.read import CarrayBase


def _normalize_axes(axis, ndim):
    """`axis` (None, an int or a tuple of ints) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) else (axis,)
    axes = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"axis must be None, an int or a tuple of ints, got {axis!r}")
        if not -ndim <= a < ndim:
            raise getattr(np, "exceptions", np).AxisError(int(a), ndim)
        axes.append(int(a) % ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axis in {axis!r}")
    return tuple(sorted(axes))


class CarrayReductions(CarrayBase):
    """Reductions of a `carray`."""

    def sum(self, dtype=None, axis=None, out=None, keepdims=False, **kwargs):
        """The sum of all elements (or along `axis`), chunk by chunk, with NumPy's result type.

        The extra NumPy arguments (`out`, `keepdims`) make ``np.sum(carray)`` work.
        """
        return self._reduce("sum", axis, dtype, out, keepdims, kwargs)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        """The mean of all elements (or along `axis`), chunk by chunk, as ``np.mean`` computes it."""
        return self._reduce("mean", axis, dtype, out, keepdims, kwargs)

    def min(self, axis=None, out=None, keepdims=False, **kwargs):
        """The smallest element (or along `axis`), chunk by chunk."""
        return self._reduce("min", axis, None, out, keepdims, kwargs)

    def max(self, axis=None, out=None, keepdims=False, **kwargs):
        """The largest element (or along `axis`), chunk by chunk."""
        return self._reduce("max", axis, None, out, keepdims, kwargs)

    def _sum_resident(self):
        """The sum of a 1-d carray (in memory, or in BLZ files), or None where this path does not apply: every
        full chunk decoded and summed on its thread in one call per thread (NumPy's pairwise sum per chunk, bit
        for bit), the chunks' sums then added in order as the block engine below adds them, so the
        result is the same to the bit."""
        nfull = len(self._chunks)
        if self.ndim != 1 or not nfull:
            return None
        # chunks in memory, or of files read, verified, decoded and summed on every thread
        parts = self._chunks.sum_resident(range(nfull), self._atom.base)
        if parts is None or (parts.dtype.kind == "f" and not np.isfinite(parts).all()):
            return None     # an inf or a NaN: the block engine's sums also give NumPy's warnings
        if self._nleft:
            parts = np.concatenate([parts, [np.sum(self._last[:self._nleft])]]).astype(parts.dtype)
        return np.add.accumulate(parts)[-1]

    def _reduce(self, op, axis, dtype, out, keepdims, kwargs):
        # reductions over axis 0 combine the per-block results; over other axes they concatenate them
        if self._isobj:
            raise TypeError(f"{op}() is not supported on object carrays")
        if kwargs:
            raise TypeError(f"{op}() got unexpected keyword arguments {sorted(kwargs)}")
        probe = np.zeros((0,) + self._atom.shape, dtype=self._atom.base)
        if probe.dtype.kind in "SUV" or probe.dtype.names:
            raise TypeError(f"cannot {op} a carray of dtype {probe.dtype}")
        axes = _normalize_axes(axis, self.ndim)
        if (op == "sum" or op == "mean" and self._atom.base.kind == "f") and dtype is None and out is None \
                and not keepdims and self.ndim == 1:
            res = self._sum_resident()
            if res is not None:
                # the mean divides NumPy's sum by the count in the sum's type, as below
                return res if op == "sum" else np.true_divide(res, self._len, dtype=res.dtype)
        red = "sum" if op == "mean" else op
        kw = {"dtype": np.dtype(dtype)} if dtype is not None else {}
        if op == "mean" and dtype is None and probe.dtype.kind in "biu":
            kw = {"dtype": np.dtype("f8")}
        f = getattr(np, red)
        # every chunk reduced on its thread, from a buffer of that thread (blzarr.query.fused)
        blen = max(self._chunklen, 1)
        bounds = fused.block_bounds(self._len, blen)
        if (op == "sum" and not kw and probe.dtype == bool and len(axes) == self.ndim and not keepdims
                and out is None):
            # a count: NumPy's sum of booleans would first cast every block to int
            parts = fused.run_blocks(bounds, fused.Decoder({"x": self}, blen),
                                     lambda s, e, b: np.count_nonzero(b["x"]))
            return np.sum(np.array([0] + parts, dtype=np.int_))
        if 0 not in axes:
            parts = fused.run_blocks(bounds, fused.Decoder({"x": self}, blen),
                                     lambda s, e, b: f(b["x"], axis=axes, keepdims=keepdims, **kw))
            res = np.concatenate(parts) if parts else f(probe, axis=axes, keepdims=keepdims, **kw)
            if op == "mean":
                res = np.true_divide(res, math.prod(self.shape[a] for a in axes), **(
                    {"dtype": res.dtype} if res.dtype.kind in "fc" else {}))
        else:
            combine = {"sum": np.add, "min": np.minimum, "max": np.maximum}[red]
            res = None
            for part in fused.run_blocks(bounds, fused.Decoder({"x": self}, blen),
                                         lambda s, e, b: f(b["x"], axis=axes, keepdims=True, **kw)):
                res = part if res is None else combine(res, part)
            if res is None:
                res = f(probe, axis=axes, keepdims=True, **kw)  # min/max raise NumPy's ValueError
            if op == "mean":
                count = math.prod(self.shape[a] for a in axes)
                with np.errstate(invalid="ignore" if count else "warn", divide="ignore"):
                    res = np.true_divide(res, count, **({"dtype": res.dtype} if res.dtype.kind in "fc" else {}))
            if not keepdims:
                res = res.reshape([d for i, d in enumerate(res.shape) if i not in axes])
        if out is not None:
            out[...] = res
            return out
        return res[()] if isinstance(res, np.ndarray) and res.ndim == 0 else res
