"""Per-chunk statistics of a carray (`CarrayStatistics`, a part of `carray`): the min/max/NaN entries of
its chunks for the query planner, rebuilding missing ones, searchsorted on a sorted carray, and the
state of the statistics (see `blzarr.query.stats`)."""

import numpy as np

from blzarr.query import stats as _stats
from blzarr.containers.carray.read import CarrayBase
from blzarr.runtime.parallel import run_all

# a carray's statistics as an open leaves them: an empty `ChunkStats`, made at their first use
LAZY = object()


class CarrayStatistics(CarrayBase):
    """Per-chunk statistics of a `carray`."""

    @property
    def _stats(self):
        """The `blzarr.query.stats.ChunkStats` (None for dtypes without statistics); an on-disk
        carray reads its meta/stats here, at the first use (`_load_stats` marks it due)."""
        d = self.__dict__
        if "_stats_due" in d or d.get("_stats_v") is LAZY:
            with self._lock:
                if d.get("_stats_v") is LAZY:
                    # (the empty statistics an open left to this first use: `_setup`)
                    d["_stats_v"] = _stats.ChunkStats(self._atom, self._chunklen)
                n = d.pop("_stats_due", None)
                if n is not None:
                    self._read_stats_file(n)
        return d.get("_stats_v")

    @_stats.setter
    def _stats(self, st):
        d = self.__dict__
        d.pop("_stats_due", None)
        d["_stats_v"] = st

    def chunk_stats(self):
        """Per-chunk statistics for the query planner: ``(mins, maxs, flags, chunklen)``, one entry
        per full chunk and one more for the leftover atoms when there are any; None for dtypes
        without statistics (see `blzarr.query.stats`: flags KNOWN, HAS_NAN, NO_VALUE).

        Entries read from meta/stats are first checked against the chunks' fingerprints; those
        missing or stale are computed from their chunks (and stored, when the carray is writable)."""
        st = self._stats
        if st is None:
            return None
        with self._lock:
            nch = len(self._chunks)
            if not st.checked:
                st.check(self._chunks, nch)
            missing = st.unknown(nch)
            if missing:
                self._rebuild_stats(missing)
            mins, maxs, flags = st.view(nch)
            if self._nleft:
                # the leftover's, computed again only after a write (every write renews _gen)
                key = (self._gen, self._nleft)
                last = self.__dict__.get("_last_stats")
                if last is None or last[0] != key:
                    one = _stats.ChunkStats(self._atom, self._chunklen)
                    one.put(0, _stats.block_stats(self._last[:self._nleft]))
                    last = self._last_stats = (key, one)
                last = last[1]
                mins = np.concatenate([mins, last.mins[:1]])
                maxs = np.concatenate([maxs, last.maxs[:1]])
                flags = np.concatenate([flags, last.flags[:1]])
            return mins, maxs, flags, self._chunklen

    def _rebuild_stats(self, missing):
        found = {}

        def one(i):
            found[i] = _stats.block_stats(self._chunks[i].decompress())
        run_all(one, missing)
        for i in missing:
            self._stats.put(i, found[i])
        self._store_stats()

    def searchsorted(self, v, side="left"):
        """Where `v` would go in this sorted one-dimensional carray, as ``numpy.searchsorted`` says
        (NaN and NaT sort last): an int for a scalar `v`, an array of them for an array.

        Each chunk's largest value (its statistics) finds the one chunk to look in, which alone is
        decoded, so a value lookup in a sorted column reads one chunk.  As in NumPy, the result is
        meaningless when the carray is not sorted.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> ts = blzarr.carray(np.arange(0, 1_000_000, 10), chunklen=4096)
        >>> ts.searchsorted(12_345), ts.searchsorted([0, 20, 20], side="right").tolist()
        (1235, [1, 3, 3])
        """
        if side not in ("left", "right"):
            raise ValueError(f"side must be 'left' or 'right', got {side!r}")
        if self._isobj or self.ndim != 1:
            raise TypeError("searchsorted() needs a one-dimensional carray of a non-object dtype")
        vals = np.asarray(v)
        scalar = vals.ndim == 0
        vals = vals.reshape(-1)
        out = np.zeros(len(vals), dtype=np.intp)
        cl, n = self._chunklen, self._len
        if n and len(vals):
            st = self.chunk_stats()
            if st is not None:
                mins, maxs, flags, _ = st
                keys = maxs.copy()
                nan = (flags & _stats.HAS_NAN) != 0
                if nan.any():       # a chunk holding NaN/NaT ends with them (sorted): its last value
                    keys[nan] = np.datetime64("NaT") if keys.dtype.kind in "mM" else np.nan
            else:
                keys = np.array([self[min((i + 1) * cl, n) - 1] for i in range(-(-n // cl))],
                                dtype=self.dtype)
            try:
                where = np.searchsorted(keys, vals, side=side)
            except TypeError as e:
                raise TypeError(f"cannot search values of dtype {vals.dtype} in a carray of {self.dtype}: {e}") from None
            for c in np.unique(where):
                sel = where == c
                if c >= len(keys):
                    out[sel] = n
                    continue
                s = int(c) * cl
                out[sel] = s + np.searchsorted(self[s:min(s + cl, n)], vals[sel], side=side)
        return int(out[0]) if scalar else out

    def stats_state(self, check=True):
        """How the per-chunk statistics stand, without computing any: a dict with 'chunks' (full
        chunks), 'known' (entries present, and checked against the chunks' fingerprints when `check`),
        'unchecked' (read from meta/stats, not yet checked), or None for dtypes without statistics."""
        st = self._stats
        if st is None:
            return None
        nch = len(self._chunks)
        if check and not st.checked:
            with self._lock:
                st.check(self._chunks, nch)
        k = min(st.n, nch)
        known = int(np.count_nonzero(st.flags[:k] & _stats.KNOWN))
        return {"chunks": nch, "known": known if st.checked else 0,
                "unchecked": 0 if st.checked else known}
