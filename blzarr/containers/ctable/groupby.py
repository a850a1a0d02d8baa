"""bquery's API on a ctable (`CtableGroupby`, a part of `ctable`): groupby, where_terms, cache_factor,
unique, factorize_groupby_cols, is_in_ordered_subgroups, where_terms_factorization_check, cache_valid
and clean_tmp_rootdir, thin methods over `blzarr.query.groupby`,
so that code written for bquery's ctable runs with blzarr's."""

import functools
import os

import numpy as np

from blzarr.containers.carray.array import carray
from blzarr.containers.carray.version import fresh_call
from blzarr.query import factor_cache
from blzarr.query import groupby as _gb
from blzarr.errors import ExistsError, StorageError
from blzarr.storage.bytestore import occupied, overlaps


class CtableGroupby:
    """Group-by and bquery's query helpers of a `ctable`."""

    def groupby(self, groupby_cols, agg_list, bool_arr=None, rootdir=None, out_flavor=None, mode="a"):
        """Aggregate the rows by the values of `groupby_cols` (bquery's ``groupby``).

        Parameters
        ----------
        groupby_cols : list of str
            The key columns (any fixed-width scalar dtype; several make one combined key; none
            makes one total row).
        agg_list : list
            Column names (each summed into a column of its name), ``[col, op]`` pairs or
            ``[col, op, out]`` triples; `op` is one of ``sum``, ``mean``, ``std`` (population),
            ``count``, ``count_na`` (both count the values that are not NaN), ``count_distinct``,
            ``sorted_count_distinct``, ``min``, ``max``, ``first``, ``last``.
        bool_arr : boolean carray or array, optional
            Only the rows where it is true are aggregated (`where_terms` makes one).
        rootdir : str, optional
            Where to write the result (in memory when None).  As bquery's, a `rootdir` that
            already holds something is refused, unless `mode` is ``'w'``; so is one that overlaps
            the table's own directory.
        out_flavor : {'bcolz', 'numpy', 'pandas'}, optional
            A ctable (the default), a structured NumPy array or a pandas DataFrame.
        mode : {'a', 'w'}, optional
            ``'w'`` replaces what is at `rootdir`.

        Returns
        -------
        ctable, numpy.ndarray or pandas.DataFrame
            The key columns first, then the aggregates; one row per group, the groups in the order
            of their first row.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.array([b"a", b"b", b"a"]), np.array([1, 2, 3])], names=["k", "v"])
        >>> r = t.groupby(["k"], ["v", ["v", "mean", "v_mean"]])
        >>> r["k"][:].tolist(), r["v"][:].tolist(), r["v_mean"][:].tolist()
        ([b'a', b'b'], [4, 2], [2.0, 2.0])
        """
        if rootdir is not None and out_flavor in (None, "bcolz", "ctable"):
            self._check_destination(rootdir, mode)
        self._auto_cache(groupby_cols)
        make = functools.partial(type(self), mode=mode) if rootdir is not None else type(self)
        return _gb.groupby(self, groupby_cols, agg_list, bool_arr=bool_arr, rootdir=rootdir,
                           make_table=make, out_flavor=out_flavor)

    def _check_destination(self, rootdir, mode):
        """Refuse, before any work, a result directory that would replace the table itself or
        something there without ``mode='w'``."""
        path = os.fspath(rootdir)
        if mode not in ("a", "w"):
            raise ValueError(f"groupby(): `mode` must be 'a' or 'w', not {mode!r}")
        if self.rootdir is not None and overlaps(path, self.rootdir):
            raise StorageError(f"groupby(): the result's rootdir, '{path}', overlaps the table's, "
                               f"'{self.rootdir}'")
        if mode != "w" and occupied(path):
            raise ExistsError(f"groupby(): '{path}' already exists: pass mode='w' to replace it")

    def _auto_cache(self, cols):
        """With bquery's ``auto_cache=True`` (a ctable option), cache the factorizations of `cols`
        of a writable on-disk table first."""
        if getattr(self, "auto_cache", False) and self.rootdir and self.mode != "r" \
                and getattr(self, "_bytestore", None) is None:
            self.cache_factor([cols] if isinstance(cols, str) else list(cols))

    def where_terms(self, term_list, cache=False):
        """A boolean carray, true where every term of `term_list` holds (bquery's ``where_terms``).

        A term is ``(column, operator, value)`` with the operators ``==`` (``eq``), ``!=``
        (``neq``), ``in``, ``not in`` (``nin``), ``>``, ``>=``, ``<``, ``<=``; ``in`` and ``not in``
        take a list, tuple or set of values.  With `cache`, a term on a column whose
        factorization is cached (`cache_factor`, or bquery's ``auto_cache`` option, which builds
        it here) is answered from the cache: the term is evaluated once per distinct value and the
        rows look it up by their code, without decoding the column.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.array([b"a", b"b", b"c"]), np.array([1, 2, 3])], names=["k", "v"])
        >>> t.where_terms([("k", "in", ["a", "c"]), ("v", ">", 1)])[:].tolist()
        [False, False, True]
        """
        if cache and isinstance(term_list, (list, tuple, set)):
            self._auto_cache([t[0] for t in term_list if isinstance(t, (list, tuple)) and len(t) == 3
                              and t[0] in self.names])
        return carray(_gb.where_terms_mask(self, term_list, cache=cache))

    def where_terms_factorization_check(self, term_list):
        """Whether the terms of `term_list` (as `where_terms` takes them) may select rows, judged
        from the cached factorizations alone (bquery's ``where_terms_factorization_check``): False
        when some term holds for none of its column's distinct values, True otherwise, and True for
        a term on a column whose factorization is not cached (or is stale) since nothing is read to
        find out.

        Examples
        --------
        >>> import numpy as np, blzarr
        >>> t = blzarr.ctable([np.array([b"NL", b"ES", b"NL"])], names=["cc"])
        >>> t.where_terms_factorization_check([("cc", "==", "BE")])    # no cache: may match
        True
        >>> t.cache_factor(["cc"])
        >>> t.where_terms_factorization_check([("cc", "==", "BE")])
        False
        >>> t.where_terms_factorization_check([("cc", "in", ["BE", "ES"])])
        True
        """
        return _gb.terms_may_match(self, term_list)

    def cache_valid(self, col):
        """Whether column `col` has a factorization cache that describes it as it is now
        (bquery's ``cache_valid``)."""
        if col not in self.names:
            raise KeyError(f"cache_valid: {col!r} is not a column of the table (columns: {self.names})")
        return factor_cache.load(self, col) is not None

    def clean_tmp_rootdir(self):
        """Nothing to do: bquery's group-bys and ``where_terms(cache=True)`` left temporary
        directories for this call to remove; blzarr's leave none.  Kept so that bquery's callers
        run unchanged."""

    def cache_factor(self, col_list, refresh=False):
        """Factorize the columns `col_list` and keep their codes and distinct values beside them
        (``<rootdir>/<col>.factor``; in memory for an in-memory table), for later group-bys,
        `unique` and `factorize_groupby_cols`.  A cache is rebuilt when `refresh` is true or when
        the column changed since (by any program)."""
        if isinstance(col_list, str):
            col_list = [col_list]
        for name in col_list:
            if name not in self.names:
                raise KeyError(f"cache_factor: {name!r} is not a column of the table (columns: {self.names})")
            if not refresh and factor_cache.load(self, name) is not None:
                continue
            snap = factor_cache.snapshot(self, name)
            codes, uniques = _gb.factorize(self[name])
            factor_cache.store(self, name, codes, uniques, snap)

    def unique(self, col_or_col_list):
        """The distinct values of a column, in order of first appearance (a list), or one such list
        per column of a list of columns (bquery's ``unique``)."""
        self._auto_cache(col_or_col_list)
        return _gb.unique(self, col_or_col_list)

    def factorize_groupby_cols(self, groupby_cols):
        """([codes carray per column], [distinct values carray per column]) (bquery's
        ``factorize_groupby_cols``): codes number the values in order of first appearance; a valid
        cache is used."""
        self._auto_cache(groupby_cols)
        factors, values = [], []
        for name in groupby_cols:
            got = factor_cache.load(self, name)
            if got is None:
                got = _gb.factorize(self[name])
            factors.append(carray(np.asarray(got[0], dtype=np.int64)))
            values.append(carray(np.asarray(got[1])))
        return factors, values

    def is_in_ordered_subgroups(self, basket_col=None, bool_arr=None, _max_len_subgroup=1000):
        """With the rows sorted into runs of `basket_col` (baskets), a boolean carray true on every
        row of each basket where `bool_arr` is true on some row; None without `bool_arr`."""
        r = _gb.is_in_ordered_subgroups(self, basket_col, bool_arr, _max_len_subgroup)
        return None if r is None else carray(r)


# read calls: the committed version is loaded once at the start, and the blocks read on every thread
# then check it no more (a check per column read was a stat of every column's meta/sizes per block)
for _name in ("groupby", "where_terms", "unique", "factorize_groupby_cols", "is_in_ordered_subgroups",
              "where_terms_factorization_check", "cache_valid"):
    setattr(CtableGroupby, _name, fresh_call(getattr(CtableGroupby, _name)))
del _name
