"""One meaning of nbytes, cbytes and ratio: the repr, ``info``, ``blzarr info`` (text and
JSON) and ``blzarr ls`` show the same numbers for one object, carray or ctable, in both layouts, and in
the bcolz layout they are the numbers the real bcolz gives for the same directory."""

import json
import re

import numpy as np
import pytest

import blzarr
from blzarr import cli

FORMATS = ["bcolz", "blz"]


def _make(kind, root, fmt, n, scale=0.5):
    if kind == "carray":
        obj = blzarr.carray(np.arange(n) * scale, rootdir=root, mode="w", format=fmt)
    else:
        obj = blzarr.ctable({"a": np.arange(n), "b": np.arange(n) % 7 * 1.5}, rootdir=root, mode="w",
                            format=fmt)
    obj.close()
    return blzarr.open(root, mode="r")


def _cli(capsys, *argv):
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def _field(text, name):
    m = re.search(rf"^{name}\s+(\S+)", text, re.M)
    return m.group(1)


@pytest.mark.parametrize("n", [1000, 300_003])       # shorter than one chunk (cbytes > nbytes), and many
@pytest.mark.parametrize("kind", ["carray", "ctable"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_repr_info_and_the_command_line_agree(tmp_path, capsys, fmt, kind, n):
    root = str(tmp_path / f"obj.{fmt}")
    obj = _make(kind, root, fmt, n)
    nb, cb = obj.nbytes, obj.cbytes
    assert nb == n * (8 if kind == "carray" else 16)
    expected = f"{nb / cb:.2f}"
    assert f"ratio: {expected}" in repr(obj)
    if kind == "carray":
        assert re.search(rf"^ratio\s+: {expected}$", repr(obj.info), re.M)
    # blzarr info: text and JSON
    text = _cli(capsys, "info", root)
    assert _field(text, "ratio") == expected
    d = json.loads(_cli(capsys, "info", root, "--json"))
    assert (d["nbytes"], d["cbytes"]) == (nb, cb) and d["ratio"] == round(nb / cb, 2)
    assert d["disk_bytes"] > 0
    # blzarr ls: text and JSON
    rec, = json.loads(_cli(capsys, "ls", str(tmp_path), "--json"))
    assert (rec["nbytes"], rec["cbytes"], rec["ratio"]) == (nb, cb, round(nb / cb, 2))
    line = [ln for ln in _cli(capsys, "ls", str(tmp_path)).splitlines() if ln.startswith("obj.")][0]
    assert line.split()[-1] == expected
    # the columns of a ctable: each the same way
    if kind == "ctable":
        for c in d["columns"]:
            col = obj.cols[c["name"]]
            assert (c["nbytes"], c["cbytes"], c["ratio"]) == (col.nbytes, col.cbytes,
                                                              round(col.nbytes / col.cbytes, 2))
        assert sum(c["cbytes"] for c in d["columns"]) == cb
    # the writer saw the same sizes as a reader
    again = blzarr.open(root, mode="a")
    assert (again.nbytes, again.cbytes) == (nb, cb)


@pytest.mark.parametrize("kind", ["carray", "ctable"])
@pytest.mark.parametrize("n", [1000, 300_003])
def test_bcolz_gives_the_same_numbers(tmp_path, bcolz, kind, n):
    root = str(tmp_path / "obj.bcolz")
    ours = _make(kind, root, "bcolz", n, scale=3)      # integers: bcolz's repr of floats fails on NumPy 2
    theirs = bcolz.open(root, mode="r")
    assert (ours.nbytes, ours.cbytes) == (theirs.nbytes, theirs.cbytes)
    ratio = re.search(r"ratio: (\S+)", repr(theirs)).group(1)
    assert f"ratio: {ratio}" in repr(ours)
    # and in memory, from the same data, both count the leftover buffer whole
    mem = blzarr.carray(np.arange(1000) * 0.5)
    assert mem.cbytes == bcolz.carray(np.arange(1000) * 0.5).cbytes == mem.chunklen * 8


def test_the_ratio_is_one_function():
    assert blzarr.carray.__module__ == "blzarr.containers.carray.array"
    from blzarr.containers.carray.array import compression_ratio
    assert compression_ratio(10, 4) == 2.5 and np.isnan(compression_ratio(10, 0))
