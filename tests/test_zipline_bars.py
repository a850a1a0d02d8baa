"""zipline's own bcolz bar code (zipline-reloaded's BcolzDailyBarWriter/Reader and
BcolzMinuteBarWriter/Reader) run with blzarr as bcolz, against the same code on the real bcolz.

zipline-reloaded pins pandas below 3, so it is not in blzarr's test extra: the test runs where
zipline is importable by this interpreter, or by the one BLZARR_ZIPLINE_PYTHON names (a venv of its
own with zipline-reloaded installed), and is skipped otherwise.  Each side runs tests/zipline_bars.py
in a process of its own; every array and value the readers give must equal, dtype included, what
zipline gives on bcolz alone, whichever library wrote, appended to (reopened minute writer,
``write_cols``, ``truncate``) and read the directories.
"""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import blzarr

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "zipline_bars.py")
BLZARR_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(blzarr.__file__)))


def _zipline_python():
    if importlib.util.find_spec("zipline") is not None and importlib.util.find_spec("bcolz") is not None:
        return sys.executable
    return os.environ.get("BLZARR_ZIPLINE_PYTHON")


PYTHON = _zipline_python()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not PYTHON, reason="zipline-reloaded is not installed here "
                                                    "(BLZARR_ZIPLINE_PYTHON names an interpreter that has it)")]


def run(which, *steps):
    env = dict(os.environ, PYTHONPATH=BLZARR_ROOT, PYTHONWARNINGS="ignore")
    proc = subprocess.run([PYTHON, SCRIPT, which, *steps], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{which} {steps}:\n{proc.stderr[-4000:]}"


def same(path, want, what):
    got = np.load(path)
    assert sorted(got.files) == sorted(want.files), what
    for key in want.files:
        assert got[key].dtype == want[key].dtype, (what, key, got[key].dtype, want[key].dtype)
        assert np.array_equal(got[key], want[key], equal_nan=True), (what, key)


def chunklens(root):
    """The chunk length of every column of the daily table and of sid 1's minute table."""
    out = {}
    for table in ("daily.bcolz", os.path.join("minute", "00", "00", "000001.bcolz")):
        t = blzarr.open(os.path.join(root, table), mode="r")
        out.update({(table, name): t[name].chunklen for name in t.names})
    return out


def layouts(root):
    """The layout of every table zipline wrote under root (the daily table and one per minute sid)."""
    tables = [os.path.join(root, "daily.bcolz")]
    for d, subdirs, files in os.walk(os.path.join(root, "minute")):
        tables += [os.path.join(d, s) for s in subdirs if s.endswith(".bcolz")]
    assert len(tables) == 4, tables
    return {blzarr.open(t, mode="r").format for t in tables}


def test_zipline_bars_on_blzarr_and_bcolz(tmp_path):
    d = {name: str(tmp_path / name) for name in
         ("bcolz", "blz", "blzarr_bcolz", "bcolz_then_blzarr", "blzarr_then_bcolz")}
    out = {name: str(tmp_path / (name + ".npz")) for name in
           ("want", "blz", "bcolz_read_by_blzarr", "blzarr_bcolz", "bcolz_then_blzarr", "blzarr_then_bcolz")}
    run("bcolz", f"write:{d['bcolz']}", f"append:{d['bcolz']}", f"read:{d['bcolz']}:{out['want']}",
        f"write:{d['bcolz_then_blzarr']}")
    run("blzarr",
        f"write:{d['blz']}", f"append:{d['blz']}", f"read:{d['blz']}:{out['blz']}",
        f"read:{d['bcolz']}:{out['bcolz_read_by_blzarr']}",
        f"append:{d['bcolz_then_blzarr']}",
        "format:bcolz", f"write:{d['blzarr_bcolz']}", f"append:{d['blzarr_bcolz']}",
        f"write:{d['blzarr_then_bcolz']}")
    run("bcolz", f"read:{d['blzarr_bcolz']}:{out['blzarr_bcolz']}",
        f"read:{d['bcolz_then_blzarr']}:{out['bcolz_then_blzarr']}",
        f"append:{d['blzarr_then_bcolz']}", f"read:{d['blzarr_then_bcolz']}:{out['blzarr_then_bcolz']}")

    want = np.load(out["want"])
    assert np.isnan(want["minute_close"]).any() and (want["minute_volume"] > 0).any()
    assert (want["daily_value"] == -1.0).any()  # a NoDataBeforeDate was met and compared
    same(out["blz"], want, "blzarr alone (BLZ layout)")
    same(out["bcolz_read_by_blzarr"], want, "bcolz wrote, blzarr read")
    same(out["blzarr_bcolz"], want, "blzarr wrote format='bcolz', bcolz read")
    same(out["bcolz_then_blzarr"], want, "bcolz wrote, blzarr appended, bcolz read")
    same(out["blzarr_then_bcolz"], want, "blzarr wrote format='bcolz', bcolz appended and read")
    # the tables get bcolz's chunks, whoever wrote them (the daily table is made from carrays in memory)
    want_chunklens = chunklens(d["bcolz"])
    for name in ("blz", "blzarr_bcolz", "blzarr_then_bcolz"):
        assert chunklens(d[name]) == want_chunklens, name
    assert layouts(d["blz"]) == {"blz"}
    for name in ("bcolz", "blzarr_bcolz", "bcolz_then_blzarr", "blzarr_then_bcolz"):
        assert layouts(d[name]) == {"bcolz"}, name
