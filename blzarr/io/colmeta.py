"""What a column's attributes say about its values beyond its NumPy dtype: missing values, time zones,
and how pandas held the column (docs/FORMAT.rst, "Column attributes").

They are ordinary JSON attributes of the column's carray (``root/<name>/__attrs__`` in the bcolz
layout, ``meta/attributes`` in BLZ), so bcolz reads them as attributes and every layout keeps them.

* ``blzarr:validity``: the name of a boolean column of the same table, as long as this one, True
  where this column's value is present and False where it is missing (Arrow's null, pandas' NA).
  A missing row holds a fill value (zero, an empty string, False) that means nothing.  The validity
  column is a normal column: bcolz and queries see it as one (``(x > 0) & x_valid``).
* ``blzarr:timezone``: on a datetime64 column, the time zone of its values (an IANA name or a fixed
  offset such as ``+05:30``, as Arrow's timestamp type spells it); the stored values are UTC.
* ``blzarr:pandas_dtype``: the pandas dtype the column had (``Int64``, ``boolean``, ``string``...)
  when NumPy's cannot say it, so ``todataframe`` gives it back.
* ``blzarr:index``: the column was level ``k`` of a DataFrame's index (``fromdataframe(df,
  index=True)``); ``blzarr:index_name`` keeps that level's name (null for none).

Nothing here imports pandas or pyarrow.
"""

import warnings

import numpy as np

from blzarr.containers.ctable.table import VALIDITY_ATTR

VALIDITY = VALIDITY_ATTR
TIMEZONE = "blzarr:timezone"
PANDAS_DTYPE = "blzarr:pandas_dtype"
INDEX = "blzarr:index"
INDEX_NAME = "blzarr:index_name"


def get(col, key, default=None):
    """The attribute `key` of carray `col` (`default` when absent)."""
    try:
        return col.attrs[key]
    except KeyError:
        return default


def validity_of(t, name):
    """The name of the validity column of column `name` of ctable `t`, or None.

    A link to a column that no longer exists, or is not a boolean column of the table's length
    (the validity column was removed, or replaced), is not followed: a RuntimeWarning says so and
    the values are taken as they are stored."""
    v = get(t.cols[name], VALIDITY)
    if v is None:
        return None
    ok = isinstance(v, str) and v in t.cols and v != name and t.cols[v].dtype == np.bool_ \
        and t.cols[v].ndim == 1
    if not ok:
        warnings.warn(f"column {name!r} names {v!r} as its validity column, which is not a boolean "
                      "column of the table: its values are taken as they are stored", RuntimeWarning,
                      stacklevel=3)
        return None
    return v


def validity_columns(t):
    """{value column: its validity column} for every column of `t` that has one."""
    out = {}
    for n in t.names:
        if VALIDITY in t.cols[n].attrs.attrs:
            v = validity_of(t, n)
            if v is not None:
                out[n] = v
    return out


def data_names(t):
    """The columns of `t` that hold data: every column but the validity columns linked to another."""
    hidden = set(validity_columns(t).values())
    return [n for n in t.names if n not in hidden]


def validity_name(name, taken):
    """A free column name for the validity column of column `name` (``<name>_valid``, then
    ``<name>_valid1``... when taken)."""
    base = f"{name}_valid"
    cand, k = base, 0
    while cand in taken:
        k += 1
        cand = f"{base}{k}"
    return cand


def fill_value(dtype):
    """The value a missing row of a column of `dtype` holds."""
    dtype = np.dtype(dtype)
    if dtype.kind in "mM":
        return np.array("NaT", dtype=dtype)[()]
    return np.zeros((), dtype=dtype)[()]
