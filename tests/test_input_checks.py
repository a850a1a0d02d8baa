"""Input that used to pass silently, or be lost silently.

* mode 'r' never writes: a constructor given data and an existing or missing rootdir with mode 'r'
  raises (as bcolz does) and leaves the disk as it was.
"""

import os

import numpy as np
import pytest

import blzarr
from helpers import tree

FORMATS = ["bcolz", "blz"]


# ================================================================================== mode 'r' never writes
@pytest.mark.parametrize("fmt", FORMATS)
def test_carray_data_with_mode_r_on_existing_dir_raises(tmp_path, fmt, bcolz):
    p = str(tmp_path / "a")
    blzarr.carray(np.arange(10), rootdir=p, mode="w", format=fmt).flush()
    before = tree(p)
    with pytest.raises(OSError, match="mode (is )?'r'") as e:
        blzarr.carray(np.arange(3), rootdir=p, mode="r")
    assert p in str(e.value)
    assert tree(p) == before
    np.testing.assert_array_equal(blzarr.open(p)[:], np.arange(10))
    # the real bcolz refuses the same call with an OSError too
    q = str(tmp_path / "b")
    bcolz.carray(np.arange(10), rootdir=q, mode="w").flush()
    with pytest.raises(OSError):
        bcolz.carray(np.arange(3), rootdir=q, mode="r")


@pytest.mark.parametrize("fmt", FORMATS)
def test_carray_data_with_mode_r_on_missing_dir_writes_nothing(tmp_path, fmt, bcolz):
    p = str(tmp_path / "missing")
    with pytest.raises(OSError, match="mode (is )?'r'") as e:
        blzarr.carray([1, 2], rootdir=p, mode="r", format=fmt)
    assert p in str(e.value)
    assert not os.path.exists(p)
    with pytest.raises(OSError):
        bcolz.carray([1, 2], rootdir=str(tmp_path / "b"), mode="r")
    # in memory, mode 'r' makes a read-only array, as in bcolz
    m, b = blzarr.carray([1, 2], mode="r"), bcolz.carray([1, 2], mode="r")
    assert m.mode == b.mode == "r" and m[:].tolist() == b[:].tolist() == [1, 2]
    with pytest.raises(OSError):
        m.append([3])


@pytest.mark.parametrize("fmt", FORMATS)
def test_ctable_columns_with_mode_r_writes_nothing(tmp_path, fmt):
    p = str(tmp_path / "t")
    with pytest.raises(OSError, match="mode (is )?'r'") as e:
        blzarr.ctable([[1, 2]], names=["a"], rootdir=p, mode="r", format=fmt)
    assert p in str(e.value)
    assert not os.path.exists(p)
    blzarr.ctable([[1, 2]], names=["a"], rootdir=p, mode="w", format=fmt)
    before = tree(p)
    with pytest.raises(OSError, match="mode (is )?'r'"):
        blzarr.ctable([[5]], names=["a"], rootdir=p, mode="r")
    assert tree(p) == before
    assert blzarr.open(p)["a"][:].tolist() == [1, 2]
