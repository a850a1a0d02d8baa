"""The chunk length of a ctable column made on disk from a carray, against the real bcolz.

bcolz copies a carray column into the new table as ``carray.copy`` does: the chunk length is chosen
for the table's ``expectedlen`` or, without one, for the column's length, not taken from the source.
zipline's daily bar writer relies on it: it grows one in-memory carray per column by appends (whose
chunks stay those of an empty array, 4096 rows of uint32) and writes them with ``ctable(columns=...,
rootdir=...)``, and the table's column must get the chunks of an array of its length.
"""

import numpy as np
import pytest

bcolz = pytest.importorskip("bcolz")

import blzarr  # noqa: E402


def grown(lib, n):
    """An in-memory uint32 carray made empty and grown by appends, as zipline's daily writer does."""
    c = lib.carray(np.array([], dtype=np.uint32))
    c.append(np.arange(n, dtype=np.uint32) * 3)
    return c


@pytest.mark.parametrize("n", [180, 100_000, pytest.param(2_000_000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("extra", [{}, {"expectedlen": 10_000_000}, {"chunklen": 50_000}],
                         ids=["default", "expectedlen", "chunklen"])
def test_chunklen_of_a_carray_column_written_to_disk(tmp_path, n, extra):
    want_src, got_src = grown(bcolz, n), grown(blzarr, n)
    assert got_src.chunklen == want_src.chunklen  # the in-memory source is the same in both
    want = bcolz.ctable(columns=[want_src, want_src], names=["a", "b"],
                        rootdir=str(tmp_path / "bcolz"), mode="w", **extra)
    got = blzarr.ctable(columns=[got_src, got_src], names=["a", "b"],
                        rootdir=str(tmp_path / "blzarr"), mode="w", **extra)
    for name in ("a", "b"):
        assert got[name].chunklen == want[name].chunklen, (name, got[name].chunklen, want[name].chunklen)
        np.testing.assert_array_equal(got[name][:], want[name][:])
    if not extra:  # the case the fix is about: not the source's chunks
            assert got["a"].chunklen != got_src.chunklen
    # and the directory blzarr wrote in bcolz's layout opens in bcolz with those chunks
    with blzarr.defaults_ctx(format="bcolz"):
        blzarr.ctable(columns=[got_src], names=["a"], rootdir=str(tmp_path / "for_bcolz"), mode="w", **extra)
    back = bcolz.ctable(rootdir=str(tmp_path / "for_bcolz"), mode="r")
    assert back["a"].chunklen == want["a"].chunklen
    np.testing.assert_array_equal(back["a"][:], np.arange(n, dtype=np.uint32) * 3)
