"""Assertions shared by the test modules (pytest puts this folder on sys.path)."""

import numpy as np


def assert_same(got, expected):
    """Exact equality, NaN and NaT included, with matching dtype and shape."""
    got = np.asarray(got)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if expected.dtype.kind == "O":
        assert got.tolist() == expected.tolist()
    elif expected.dtype.names:
        for name in expected.dtype.names:  # field by field: padding bytes hold no data
            assert_same(got[name], expected[name])
    else:
        assert got.tobytes() == expected.tobytes()
