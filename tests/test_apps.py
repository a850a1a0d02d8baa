"""bcolz applications, unmodified, on blzarr: the workloads of tests/app_workloads.py
(zipline's daily and minute bars, pandas round trips, iteration and queries) run three ways:

- blzarr writes and reads, in its default (BLZ) layout;
- blzarr writes with ``defaults.format = 'bcolz'`` (a mixed deployment) and the real bcolz reads;
- the real bcolz writes and blzarr reads (and appends, leaving directories bcolz still reads).

Every value read, arrays with their dtype and scalars with their Python type, must be what the same
workload gives on bcolz alone.  The writer runs in its own process, as in the applications; where a
workload has an append step, another process (this one) resumes the writer's directories, and the
writer's side reads them back afterwards in a fresh process too.
"""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import blzarr

pytest.importorskip("bcolz")
pd = pytest.importorskip("pandas")

import app_workloads  # noqa: E402  (tests/ is on sys.path)
from helpers import assert_same  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "app_workloads.py")

# (writer, reader): the module each side imports as bcolz
WAYS = [("blzarr", "blzarr"), ("blzarr-bcolz", "bcolz"), ("bcolz", "blzarr")]


def step_in_process(module, workload, step, root):
    """One step in a fresh Python process; the read step's result comes back pickled."""
    out = root + f".{step}.pkl"
    code = ("import sys, pickle; sys.path.insert(0, %r); import app_workloads as w; "
            "r = w.WORKLOADS[%r][%r](w.load(%r), %r); "
            "r is None or pickle.dump(r, open(%r, 'wb'))" % (HERE, workload, step, module, root, out))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{module} {workload}.{step} failed:\n{proc.stderr[-4000:]}"
    if step == "read":
        with open(out, "rb") as f:
            return pickle.load(f)
    return None


def step_here(module, workload, step, root):
    """One step in this process; blzarr's default layout is restored afterwards."""
    saved = blzarr.defaults.format
    try:
        return app_workloads.WORKLOADS[workload][step](app_workloads.load(module), root)
    finally:
        blzarr.defaults.format = saved


def run(workload, writer, reader, root):
    """writer (another process) writes; reader appends (if the workload does) and reads here; the
    writer's side then reads again in a fresh process.  Returns (reader's result, writer's)."""
    steps = app_workloads.WORKLOADS[workload]
    step_in_process(writer, workload, "write", root)
    if "append" in steps:
        step_here(reader, workload, "append", root)
    got = step_here(reader, workload, "read", root)
    again = step_in_process(writer, workload, "read", root) if "append" in steps else None
    return got, again


def same(got, want, where="result"):
    """`got` equals `want` exactly: arrays with dtype and shape, DataFrames column by column,
    scalars with their Python type, containers item by item."""
    if isinstance(want, pd.DataFrame):
        assert isinstance(got, pd.DataFrame), where
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=where)
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), (where, type(got))
        assert_same(got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (where, got, want)
        for k in want:
            same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) or (isinstance(got, tuple) and isinstance(want, tuple)), \
            (where, type(got), type(want))
        assert len(got) == len(want), (where, len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{i}]")
    else:
        assert type(got) is type(want), (where, type(got), type(want), got, want)
        if isinstance(want, float) and np.isnan(want):
            assert np.isnan(got), where
        else:
            assert got == want, (where, got, want)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Each workload on bcolz alone (written and read by bcolz, in processes of their own)."""
    cache = {}

    def get(workload):
        if workload not in cache:
            root = str(tmp_path_factory.mktemp("bcolz_alone") / workload)
            cache[workload] = run(workload, "bcolz", "bcolz", root)
        return cache[workload]
    return get


# the default run: the daily bars and the pandas round trips, every way; all four workloads in the slow set
QUICK_WORKLOADS = ("daily_bars", "pandas")


@pytest.mark.parametrize("writer,reader", WAYS, ids=[f"{w}-writes-{r}-reads" for w, r in WAYS])
@pytest.mark.parametrize("workload", [w if w in QUICK_WORKLOADS else pytest.param(w, marks=pytest.mark.slow)
                                      for w in app_workloads.WORKLOADS])
def test_application(tmp_path, reference, workload, writer, reader):
    root = str(tmp_path / workload)
    got, again = run(workload, writer, reader, root)
    want, want_again = reference(workload)
    same(got, want, f"{workload} read by {reader}")
    if want_again is not None:
        same(again, want_again, f"{workload} read back by the writer ({writer})")
    # what was written stays in the layout the writer chose, whoever appended
    fmts = {blzarr.open(os.path.join(d), mode="r").format
            for d, subdirs, files in os.walk(root) if "__rootdirs__" in files or
            ("meta" in subdirs and not os.path.exists(os.path.join(os.path.dirname(d), "__rootdirs__")))}
    assert fmts == {"blz" if writer == "blzarr" else "bcolz"}, fmts
