"""A damaged or hostile BLZ meta/sizes, plain or a one-barrier record (blzarr.storage.blz.sizes): a
FormatError naming the file, never an OverflowError from a read at an impossible offset, nor a
length read silently from a record that contradicts itself."""

import json
import os

import numpy as np
import pytest

import blzarr
from blzarr.storage.blz import sizes as sizes_record

H = 1 << 70


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A BLZ carray of 260 atoms whose meta/sizes is a one-barrier record (250 + 10 appended), and
    that record."""
    root = str(tmp_path_factory.mktemp("sizes") / "tmpl")
    blzarr.carray(np.arange(250, dtype=np.int64), rootdir=root, mode="w", format="blz", chunklen=100,
                  superchunklen=2, cparams=blzarr.cparams(clevel=0)).close()
    if sizes_record.boot_id() is None:
        pytest.skip("no boot id here: no one-barrier records")
    a = blzarr.open(root, mode="a")
    a.append(np.arange(10))
    a.flush()
    with open(os.path.join(root, "meta", "sizes")) as f:
        rec = json.load(f)
    a.close()               # (which writes the same commit over it as plain text)
    assert "prev" in rec
    with open(os.path.join(root, "meta", "sizes"), "w") as f:
        json.dump(rec, f)   # the record, as a writer killed after its flush leaves it
    return root, rec


def _damaged(template, tmp_path, **change):
    import shutil
    root, rec = template
    d = str(tmp_path / "c")
    shutil.copytree(root, d)
    with open(os.path.join(d, "meta", "sizes"), "w") as f:
        json.dump(dict(rec, **change), f)
    return d


@pytest.mark.parametrize("change,message", [
    # a record of another boot whose chunk does not verify ("sum" changed), read as its "prev"
    ({"sum": "zz", "prev": [250, 2, H, 400]}, r"\"prev\" \[250, 2, 1180591620717411303424, 400\] is not"),
    ({"sum": "zz", "prev": [250, H, 256, 400]}, r"\"prev\" .* is not \[length, chunk, offset, nbytes\]"),
    ({"sum": "zz", "prev": [300, 2, 256, 400]}, r"\"prev\" \[300, 2, 256, 400\] counts more than its length 260"),
    ({"sum": "zz", "shape": [H]}, r"its length 1180591620717411303424 is not a number of atoms"),
    ({"sum": "zz", "shape": [-5]}, r"its length -5 is not a number of atoms"),
])
def test_a_malformed_record_of_another_boot(template, tmp_path, monkeypatch, change, message):
    d = _damaged(template, tmp_path, **change)
    monkeypatch.setattr(sizes_record, "_boot", "%016x" % 12345)      # read after a reboot
    for mode in ("r", "a"):
        with pytest.raises(blzarr.FormatError, match=message) as e:
            blzarr.open(d, mode=mode)[:]
        assert os.path.join(d, "meta", "sizes") in str(e.value)


def test_an_impossible_last_offset(template, tmp_path, monkeypatch):
    # a record of another boot whose "last" offset no file can have: not a chunk to verify, so its
    # "prev" is read (the values of the commit before it); a plain meta/sizes with it: refused
    d = _damaged(template, tmp_path, last=[2, H, 480])
    monkeypatch.setattr(sizes_record, "_boot", "%016x" % 12345)
    np.testing.assert_array_equal(blzarr.open(d, mode="r")[:], np.arange(250))
    root, rec = template
    plain = {k: v for k, v in rec.items() if k not in sizes_record.KEYS}
    with open(os.path.join(d, "meta", "sizes"), "w") as f:
        json.dump(dict(plain, last=[2, H, 480]), f)
    with pytest.raises(blzarr.FormatError, match=r"\"last\" \[2, 1180591620717411303424, 480\] is not a chunk"):
        blzarr.open(d, mode="r")[:]
