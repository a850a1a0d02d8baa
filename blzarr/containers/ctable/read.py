"""Reading the rows of a ctable (`CtableReads`, a part of `ctable`): rows at positions, row dtypes,
iteration in blocks with outcols, limit and skip, and the row objects it yields."""

import re
from collections import namedtuple

import numpy as np

from blzarr.containers.carray.read import _elements
from blzarr.query.selection import Selection

# the name of the row-number pseudo-column in outcols
NROW = "nrow__"


class CtableBase:
    """The base of `ctable` and of its parts: ``isinstance(x, CtableBase)`` is how the parts, which the
    ctable module imports, ask whether `x` is a ctable."""


class CtableReads(CtableBase):
    """Reading the rows of a `ctable`."""

    # ------------------------------------------------------------------ reading rows
    def _empty_rows(self, n, names=None):
        if names is None:
            return np.empty(n, dtype=self.dtype)
        return np.empty(n, dtype=self._dtype_of(names))

    def _dtype_of(self, names):
        fields = []
        for n in names:
            if n == NROW:
                fields.append((n, np.int_))
                continue
            c = self.cols._cols[n]
            fields.append((n, c.dtype) if c.ndim == 1 else (n, c.dtype, c.shape[1:]))
        return np.dtype(fields)

    def _rows_at(self, pos, names=None):
        names = self.cols.names if names is None else names
        out = self._empty_rows(len(pos), names)
        for n in names:
            out[n] = self.cols._cols[n][pos] if len(pos) else out[n]
        return out

    def _mask_positions(self, mask):
        if len(mask) != self._len:
            raise IndexError(f"boolean index has length {len(mask)}, the ctable has {self._len} rows")
        return Selection(mask, None, self._len).positions()

    def __iter__(self):
        return self.iter()

    # ------------------------------------------------------------------ iteration
    def _check_outcols(self, outcols):
        if outcols is None:
            return list(self.cols.names)
        names = _split_outcols(outcols)
        bad = [n for n in names if n != NROW and n not in self.cols._cols]
        if bad:
            raise ValueError(f"outcols {bad} are not columns of the ctable (columns: {self.cols.names})")
        if not names:
            raise ValueError("outcols is empty")
        return names

    @staticmethod
    def _row_maker(names, out_flavor):
        if out_flavor is namedtuple or out_flavor == "namedtuple" or out_flavor is None:
            row = namedtuple("row", names)
            return lambda arrays: map(row._make, zip(*arrays))
        if out_flavor is tuple or out_flavor == "tuple":
            return lambda arrays: zip(*arrays)
        if out_flavor is np.ndarray or out_flavor in ("ndarray", "numpy"):
            return None
        raise ValueError(f"out_flavor must be namedtuple, tuple or ndarray, got {out_flavor!r}")

    def _emit_rows(self, blocks, names, out_flavor):
        make = self._row_maker(names, out_flavor)
        dt = self._dtype_of(names)
        for arrays in blocks:
            if make is None:
                for k in range(len(arrays[0])):
                    r = np.empty(1, dtype=dt)
                    for n, a in zip(names, arrays):
                        r[n][0] = a[k]
                    yield r
            else:
                # fields as a column's iteration gives them: NumPy's .item() values, as in bcolz
                yield from make([_elements(a) for a in arrays])

    def iter(self, start=0, stop=None, step=1, outcols=None, limit=None, skip=0, out_flavor=namedtuple):
        """Iterate over the rows ``[start:stop:step]``, reading the columns block by block.

        Parameters
        ----------
        start, stop, step : int, optional
            The rows to visit, as in a slice (`step` must be positive).
        outcols : list of str or str, optional
            The columns to give (a list, or names separated by commas or spaces); the pseudo-column
            ``'nrow__'`` is the row number.  Default: all the columns.
        limit : int, optional
            Give at most this many rows.
        skip : int, optional
            Skip this many rows first.
        out_flavor : namedtuple, tuple or numpy.ndarray, optional
            The type of each row: a namedtuple (default), a tuple, or a 1-row structured array.

        Yields
        ------
        namedtuple, tuple or numpy.ndarray

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.arange(6), np.arange(6) * 0.5], names=["a", "b"])
        >>> [(int(r.a), float(r.b)) for r in t.iter(1, 6, 2)]
        [(1, 0.5), (3, 1.5), (5, 2.5)]
        >>> [tuple(map(int, r)) for r in t.iter(outcols="nrow__, a", skip=2, limit=2, out_flavor=tuple)]
        [(2, 2), (3, 3)]
        """
        names = self._check_outcols(outcols)
        step = 1 if step is None else step
        if step <= 0:
            raise NotImplementedError("ctable.iter() supports only positive steps")
        start, stop, step = slice(start, stop, step).indices(self._len)
        self._row_maker(names, out_flavor)  # checks out_flavor now
        return self._emit_rows(self._iter_blocks(start, stop, step, names, limit, skip), names, out_flavor)

    def _iter_blocks(self, start, stop, step, names, limit, skip):
        positions = range(start, stop, step)
        skip = skip or 0
        lo = skip
        hi = len(positions) if limit is None else min(len(positions), skip + max(limit, 0))
        blen = max(self.chunklen // step, 1) if step < self.chunklen else 1
        blen = max(blen, 1024 if step == 1 else 1)
        for k in range(lo, hi, blen):
            e = min(k + blen, hi)
            a, b = positions[k], positions[e - 1] + 1
            arrays = []
            for n in names:
                if n == NROW:
                    arrays.append(np.arange(a, b, step, dtype=np.int_))
                else:
                    arrays.append(self.cols._cols[n][a:b:step])
            yield arrays


def _split_outcols(outcols):
    if isinstance(outcols, str):
        return [s for s in _SPLIT.split(outcols.strip()) if s]
    if isinstance(outcols, (list, tuple)):
        return list(outcols)
    raise ValueError(f"outcols must be a list, a tuple or a string of names, got {type(outcols).__name__}")


_SPLIT = re.compile(r"[\s,]+")
