"""What fuzzing the readers found (tools/fuzz/): each damaged input here once gave an unclear
exception, a crash, a hang or wrong values; it must give blzarr's error naming the file, or the
true values."""

import json
import os

import numpy as np
import pytest

import blzarr


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("shape", [{}, {"0": 5000}, [], None, "x", [None]])
def test_a_meta_sizes_shape_of_the_wrong_type_names_the_file(tmp_path, fmt, shape):
    # BLZ's count of chunks from meta/sizes took shape[0] of a dict: KeyError: 0, not FormatError
    root = str(tmp_path / "c")
    blzarr.carray(np.arange(5000.0), rootdir=root, mode="w", chunklen=1000, format=fmt).flush()
    path = os.path.join(root, "meta", "sizes")
    with open(path) as f:
        meta = json.load(f)
    meta["shape"] = shape
    with open(path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(blzarr.FormatError, match="meta/sizes"):
        blzarr.open(root, mode="r")[:]
