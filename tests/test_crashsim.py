"""Power-loss crash states of both layouts, from the crash-state simulator (tests/crashsim.py).

Each workload runs once under the recording I/O layer; then the trees a power loss could leave at
any crash point (the synced operations, plus every subset of the un-synced ones when they are few
(at most 8 between two syncs), a seeded sample of the orders when they are more; un-synced writes
torn at sectors; see crashsim.crash_states) are written to a scratch directory and checked, for
each call that may have been running when the state was left:

- the directory opens (once the call that created it has returned);
- its length and every value are those of the state after the last completed flush, or of a later
  state up to the end of the interrupted call (each position holds a value it held in one of those
  states: nothing else is visible, no value that was never written);
- on every state, a writer opening it (mode 'a') repairs what it must and can go on: it shows the
  same values, appends, flushes, and a new reader finds the values and the appended ones.

The number of states checked per workload is printed (pytest -s shows it; a summary line is
written to the terminal report too).
"""

import io
import os
import shutil

import numpy as np
import pytest

import blzarr
from blzarr.storage import fileio, intent
from blzarr.cli import main as cli_main

import crashsim

pytestmark = [pytest.mark.slow,
              # a ctable whose columns were not all flushed warns, then shows the rows all hold
              pytest.mark.filterwarnings("ignore:the columns of ctable:RuntimeWarning")]

CHUNKLEN = 100
# uncompressed chunks (800 bytes): writes span sectors, so tearing them means something
CP = blzarr.cparams(clevel=0)
REPORT = crashsim.REPORT


def _kw(fmt):
    return {"format": fmt, "chunklen": CHUNKLEN, "cparams": CP,
            **({"superchunklen": 2} if fmt == "blz" else {})}


def _tkw(fmt):
    return {"format": fmt, "chunklen": CHUNKLEN, "cparams": CP}


class Run:
    """The calls of one workload: each is marked in the log, and the object's state after it noted."""

    def __init__(self, rec, snapshot):
        self.rec = rec
        self.snapshot = snapshot
        self.states = []          # (label, state after the call, the call ends with a flush)

    def call(self, label, fn, flushes=False):
        self.rec.mark(label)
        out = fn()
        self.states.append((label, self.snapshot(), flushes))
        return out


def _allowed(run, j):
    """The states a crash during call j may show: from the last flush completed before it to j."""
    first = 0
    for i in range(j):
        if run.states[i][2]:
            first = i
    return [run.states[i][1] for i in range(first, j + 1)]


def _check_values(arr, states, where):
    lengths = {len(s) for s in states}
    assert len(arr) in lengths, f"{where}: length {len(arr)}, allowed {sorted(lengths)}"
    ok = np.zeros(len(arr), dtype=bool)
    for s in states:
        m = min(len(s), len(arr))
        ok[:m] |= np.asarray(s[:m]) == arr[:m]
    bad = np.flatnonzero(~ok)
    assert not bad.size, f"{where}: positions {bad[:10].tolist()} hold {arr[bad[:10]].tolist()}, never written there"


def _simulate(tmp_path, name, workload, check, repair=None):
    """Record `workload(base, rec) -> Run`, then check every crash state with `check(path, states, j,
    where)` for each call j that may have been running when it was left, and `repair(path, value,
    where)` (reopen for writing, append, flush, read again) on every state."""
    base = tmp_path / "base"
    base.mkdir()
    rec = crashsim.Recorder(str(base))
    with fileio.use(rec):
        run = workload(str(base), rec)
    calls = rec.calls()
    scratch = str(tmp_path / "state")
    seen = set()
    done = set()                  # (state, call) pairs checked: one tree may be left during several calls
    checked = repaired = 0
    stats = crashsim.Stats()
    for st in crashsim.crash_states(rec, seed=len(name), stats=stats):
        d = st.tree.digest()
        js = [j for j in crashsim.calls_at(rec, st.kmin, st.kmax) if j >= 0 and (d, j) not in done]
        if not js:
            continue
        first = d not in seen
        seen.add(d)
        done.update((d, j) for j in js)
        if os.path.exists(scratch):
            shutil.rmtree(scratch)
        st.tree.materialize(rec.base, scratch)
        value = None
        for j in js:
            where = (f"{name}: crash state {st.kind} (ops {st.kmin}..{st.kmax} of {len(rec.log)}) in call "
                     f"{calls[j][0]!r}")
            got = check(scratch, _allowed(run, j), j, where)
            value = got if value is None else value
            checked += 1
        if repair is not None and value is not None and first:
            # the repair's own syncs would only make the scratch copy slow: its durability is not
            # what is checked here (the workload's is)
            with blzarr.defaults_ctx(fsync=False):
                repair(scratch, value, where)
            repaired += 1
    line = (f"crash states: {name}: {len(rec.log)} operations, {stats}; {len(seen)} distinct states, "
            f"{checked} checks, {repaired} reopened-repaired-continued")
    print(line)
    REPORT.append(line)
    assert len(seen) > 20
    return len(seen)


# ---------------------------------------------------------------- carray workloads
def _carray_check(root_name):
    def check(path, states, j, where):
        root = os.path.join(path, root_name)
        if j == 0 and not _opens(root):
            return None                 # the creating call was cut: nothing was promised yet
        c = blzarr.open(root, mode="r")
        arr = c[:]
        _check_values(arr, states, where)
        return arr
    return check


def _opens(root):
    try:
        blzarr.open(root, mode="r")[:]
        return True
    except (blzarr.BlzarrError, OSError, ValueError):
        return False


def _carray_repair(root_name):
    def repair(path, arr, where):
        root = os.path.join(path, root_name)
        c = blzarr.open(root, mode="a")
        np.testing.assert_array_equal(c[:], arr, err_msg=where)
        c.append(np.full(3, -7, dtype=arr.dtype))
        c.flush()
        c.close()
        again = blzarr.open(root, mode="r")[:]
        np.testing.assert_array_equal(again[:len(arr)], arr, err_msg=where)
        assert again[len(arr):].tolist() == [-7] * 3, where
    return repair


def _carray_workload(initial, kw, steps):
    """A workload on a carray at "c": created from `initial` (with `kw`) and flushed, then each
    (label, call on the carray, ends with a flush) of what `steps()` lists, made afresh each run."""
    def workload(base, rec):
        root = os.path.join(base, "c")
        box = {}
        run = Run(rec, lambda: box["c"][:])

        def make():
            box["c"] = blzarr.carray(initial, rootdir=root, mode="w", **kw)
            box["c"].flush()
        run.call("create", make, flushes=True)
        for label, fn, flushes in steps():
            run.call(label, lambda fn=fn: fn(box["c"]), flushes=flushes)
        return run
    return workload


def _flush(c):
    c.flush()


def _w_appends(fmt):
    return _carray_workload(np.arange(250, dtype=np.int64), _kw(fmt), lambda: [
        ("append 30", lambda c: c.append(np.arange(1000, 1030)), False),
        ("flush", _flush, True),
        ("append 170", lambda c: c.append(np.arange(2000, 2170)), False),
        ("append 5", lambda c: c.append(np.arange(3000, 3005)), False),
        ("flush", _flush, True),
        ("append 300", lambda c: c.append(np.arange(4000, 4300)), False),
        ("close", lambda c: c.close(), True)])


def _w_setitem(fmt):
    return _carray_workload(np.arange(450, dtype=np.int64), _kw(fmt), lambda: [
        ("c[10:20] = -1", lambda c: c.__setitem__(slice(10, 20), -1), False),
        ("c[150] = -2", lambda c: c.__setitem__(150, -2), False),
        ("flush", _flush, True),
        ("c[::37] = -3", lambda c: c.__setitem__(slice(None, None, 37), -3), False),
        ("c[300:450] = -4", lambda c: c.__setitem__(slice(300, 450), -4), False),
        ("flush", _flush, True)])


def _w_resize(fmt):
    return _carray_workload(np.arange(450, dtype=np.int64), _kw(fmt), lambda: [
        ("trim(120)", lambda c: c.trim(120), True),
        ("resize(500)", lambda c: c.resize(500), True),
        ("append 10", lambda c: c.append(np.arange(9000, 9010)), False),
        ("resize(210)", lambda c: c.resize(210), True),
        ("append 60", lambda c: c.append(np.arange(8000, 8060)), False),
        ("flush", _flush, True)])


def _w_compact(fmt):
    def steps():
        rng = np.random.default_rng(5)
        # zeros compress to a few bytes, random values do not: every rewrite is relocated
        return [("c[0:200] = random", lambda c: c.__setitem__(slice(0, 200), rng.integers(1, 1 << 40, 200)), False),
                ("c[250:260] = random", lambda c: c.__setitem__(slice(250, 260), rng.integers(1, 1 << 40, 10)),
                 False),
                ("flush", _flush, True),
                ("c[0:100] = 5", lambda c: c.__setitem__(slice(0, 100), 5), False),
                ("compact", lambda c: c.compact(), False),
                ("flush", _flush, True)]
    return _carray_workload(np.zeros(450, dtype=np.int64),
                            dict(format=fmt, chunklen=CHUNKLEN, superchunklen=2), steps)


CARRAY_WORKLOADS = {"appends": _w_appends, "setitem": _w_setitem, "resize-trim": _w_resize}


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
@pytest.mark.parametrize("name", sorted(CARRAY_WORKLOADS))
def test_carray_power_loss(tmp_path, fmt, name):
    _simulate(tmp_path, f"{name} ({fmt})", CARRAY_WORKLOADS[name](fmt), _carray_check("c"),
              _carray_repair("c"))


def test_compaction_power_loss(tmp_path):
    _simulate(tmp_path, "setitem + compact (blz)", _w_compact("blz"), _carray_check("c"), _carray_repair("c"))


# ---------------------------------------------------------------- metadata: attrs, vlmeta, meta
def test_attrs_and_metalayers_power_loss(tmp_path):
    def workload(base, rec):
        root = os.path.join(base, "c")
        c = None

        def snap():
            return (dict(c.attrs.getall()), dict(c.vlmeta.getall()), dict(c.meta.getall()), c[:].tolist())
        run = Run(rec, snap)

        def make():
            nonlocal c
            c = blzarr.carray(np.arange(150, dtype=np.int64), rootdir=root, mode="w", meta={"tag": "aaaa"},
                              **_kw("blz"))
            c.flush()
        run.call("create", make, flushes=True)
        run.call("attrs x", lambda: c.attrs.__setitem__("x", 1), flushes=True)
        run.call("vlmeta v", lambda: c.vlmeta.__setitem__("v", {"k": list(range(50))}), flushes=True)
        run.call("meta tag", lambda: c.meta.__setitem__("tag", "bbbb"), flushes=True)
        run.call("append 200", lambda: c.append(np.arange(500, 700)))
        run.call("attrs y", lambda: c.attrs.__setitem__("y", "z" * 600), flushes=False)
        run.call("flush", c.flush, flushes=True)
        run.call("meta tag again", lambda: c.meta.__setitem__("tag", "cccc"), flushes=True)
        return run

    def check(path, states, j, where):
        root = os.path.join(path, "c")
        if j == 0 and not _opens(root):
            return None
        c = blzarr.open(root, mode="r")
        got = (dict(c.attrs.getall()), dict(c.vlmeta.getall()), dict(c.meta.getall()))
        assert got[0] in [s[0] for s in states], where
        assert got[1] in [s[1] for s in states], where
        assert got[2] in [s[2] for s in states], where
        arr = c[:]
        _check_values(arr, [np.array(s[3]) for s in states], where)
        return arr

    _simulate(tmp_path, "attrs/vlmeta/meta (blz)", workload, check, _carray_repair("c"))


def test_attrs_power_loss_bcolz_layout(tmp_path):
    # the bcolz layout has attributes only (metalayers and vlmeta are BLZ's): meta/attributes is
    # replaced through a synced temporary file, beside appends and flushes of the chunk files
    def workload(base, rec):
        root = os.path.join(base, "c")
        c = None

        def snap():
            return (dict(c.attrs.getall()), c[:].tolist())
        run = Run(rec, snap)

        def make():
            nonlocal c
            c = blzarr.carray(np.arange(150, dtype=np.int64), rootdir=root, mode="w", **_kw("bcolz"))
            c.flush()
        run.call("create", make, flushes=True)
        run.call("attrs x", lambda: c.attrs.__setitem__("x", 1), flushes=True)
        run.call("append 200", lambda: c.append(np.arange(500, 700)))
        run.call("attrs y", lambda: c.attrs.__setitem__("y", "z" * 600), flushes=False)
        run.call("flush", c.flush, flushes=True)
        run.call("attrs x again", lambda: c.attrs.__setitem__("x", [2, 3]), flushes=True)
        run.call("del attrs y", lambda: c.attrs.__delitem__("y"), flushes=True)
        return run

    def check(path, states, j, where):
        root = os.path.join(path, "c")
        if j == 0 and not _opens(root):
            return None
        c = blzarr.open(root, mode="r")
        assert dict(c.attrs.getall()) in [s[0] for s in states], where
        arr = c[:]
        _check_values(arr, [np.array(s[1]) for s in states], where)
        return arr

    _simulate(tmp_path, "attrs (bcolz)", workload, check, _carray_repair("c"))


# ---------------------------------------------------------------- ctable: appends, addcol, delcol
@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_ctable_power_loss(tmp_path, fmt):
    def workload(base, rec):
        root = os.path.join(base, "t")
        t = None

        def snap():
            return {n: t[n][:] for n in t.names}
        run = Run(rec, snap)

        def make():
            nonlocal t
            t = blzarr.ctable([np.arange(150), np.arange(150) * 2.0], names=["a", "b"], rootdir=root,
                              mode="w", **_tkw(fmt))
            t.flush()
        run.call("create", make, flushes=True)
        run.call("append 120", lambda: t.append([np.arange(150, 270), np.arange(150, 270) * 2.0]))
        run.call("flush", t.flush, flushes=True)
        run.call("addcol c", lambda: t.addcol(np.arange(270) * -1, name="c"), flushes=True)
        run.call("delcol a", lambda: t.delcol("a"), flushes=True)
        run.call("append 40", lambda: t.append([np.arange(40) * 2.0, np.arange(40) * -1]))
        run.call("flush", t.flush, flushes=True)
        return run

    def check(path, states, j, where):
        root = os.path.join(path, "t")
        if j == 0 and not _opens(root):
            return None
        t = blzarr.open(root, mode="r")
        names = list(t.names)
        assert names in [list(s) for s in states], f"{where}: columns {names}"
        got = {}
        for n in names:
            got[n] = t[n][:]
            _check_values(got[n], [s[n] for s in states if n in s], f"{where}, column {n!r}")
        return got

    def repair(path, cols, where):
        root = os.path.join(path, "t")
        pending = bool(intent.pending(root))
        t = blzarr.open(root, mode="a")
        if pending and list(t.names) != list(cols):
            # a writer's open completed the addcol/delcol an intent record named: the state after it
            cols = {n: t[n][:] for n in t.names}
        assert list(t.names) == list(cols), where
        for n, v in cols.items():
            np.testing.assert_array_equal(t[n][:], v, err_msg=where)
        t.append([np.full(2, -7, dtype=v.dtype) for v in cols.values()])
        t.flush()
        t.close()
        again = blzarr.open(root, mode="r")
        for n, v in cols.items():
            np.testing.assert_array_equal(again[n][:len(v)], v, err_msg=where)
            assert again[n][len(v):].tolist() == [-7, -7], where

    _simulate(tmp_path, f"ctable appends/addcol/delcol ({fmt})", workload, check, repair)


# ---------------------------------------------------------------- convert
def test_convert_power_loss(tmp_path):
    src = str(tmp_path / "src")
    blzarr.carray(np.arange(700, dtype=np.int64), rootdir=src, mode="w", **_kw("bcolz")).flush()
    expected = np.arange(700)

    def workload(base, rec):
        run = Run(rec, lambda: None)
        run.call("convert", lambda: cli_main(["convert", src, os.path.join(base, "dst"), "--format", "blz"],
                                             out=io.StringIO()), flushes=True)
        return run

    def check(path, states, j, where):
        dst = os.path.join(path, "dst")
        if os.path.exists(dst):
            got = blzarr.open(dst, mode="r")[:]
            np.testing.assert_array_equal(got, expected, err_msg=where)
            return got
        return None

    _simulate(tmp_path, "convert bcolz -> blz", workload, check, _carray_repair("dst"))


# ---------------------------------------------------------------- the simulator can fail
@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_without_fsync_the_simulator_finds_lost_data(tmp_path, fmt):
    """With the syncs off (blzarr.defaults.fsync = False), power-loss states that lose flushed data
    exist, and the simulator finds them: the checks above can fail."""
    with blzarr.defaults_ctx(fsync=False):
        with pytest.raises((AssertionError, blzarr.BlzarrError, OSError)):
            _simulate(tmp_path, f"appends without fsync ({fmt})", _w_appends(fmt), _carray_check("c"))
