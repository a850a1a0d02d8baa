"""What a creation on disk writes and syncs: every constructor that writes a directory
(``carray(data, rootdir=...)``, ``fromiter``, ``zeros``, ``arange``, ``copy(rootdir=...)``,
``ctable(columns, rootdir=...)``) makes it
durable in two serial rounds of syncs (everything the new directory holds, together; then its
parent, after the rename that publishes it), syncs every file it publishes before that rename (but
the commit record and the statistics, unsynced by design), and a power loss at any point leaves
the target absent or complete.

The BLZ layout writes no empty ``meta/attributes`` (a missing one is no attributes); the bcolz layout
keeps ``__attrs__``, which the real bcolz needs to open the directory."""

import json
import os
import shutil

import numpy as np
import pytest

import blzarr
from blzarr.storage import fileio

import crashsim

CP = blzarr.cparams(clevel=0)
N = 450


def _kw(fmt):
    return {"format": fmt, "chunklen": 100, "cparams": CP, **({"superchunklen": 2} if fmt == "blz" else {})}


def _values():
    return np.arange(N, dtype=np.int64) * 3 - 7


def _create(how, fmt, base, target):
    x = _values()
    if how == "carray":
        a = blzarr.carray(x, rootdir=target, mode="w", **_kw(fmt))
        a.flush()
    elif how == "fromiter":
        a = blzarr.fromiter(iter(x.tolist()), dtype="i8", count=N, rootdir=target, mode="w", **_kw(fmt))
    elif how == "zeros":
        a = blzarr.zeros(N, dtype="i8", rootdir=target, mode="w", **_kw(fmt))
    elif how == "arange":
        a = blzarr.arange(-7, 3 * N - 7, 3, dtype="i8", rootdir=target, mode="w", **_kw(fmt))
    elif how == "ctable":
        kw = {k: v for k, v in _kw(fmt).items() if k != "superchunklen"}
        a = blzarr.ctable(columns=[x, x * 0.5], names=["a", "b"], rootdir=target, mode="w", **kw)
    else:
        src = blzarr.carray(x, chunklen=100, cparams=CP)        # in memory: only the copy writes
        a = src.copy(rootdir=target, mode="w", **_kw(fmt))
    return a


def _expected(how):
    return np.zeros(N, dtype=np.int64) if how == "zeros" else _values()


def _read(obj):
    """The values of a carray, or of a ctable's column 'a' (after checking its column 'b')."""
    if isinstance(obj, blzarr.ctable):
        np.testing.assert_array_equal(obj["b"][:], _values() * 0.5)
        return obj["a"][:]
    return obj[:]


HOWS = ["carray", "fromiter", "zeros", "arange", "copy", "ctable"]


def _record(tmp_path, how, fmt):
    base = tmp_path / "base"
    base.mkdir()
    rec = crashsim.Recorder(str(base))
    target = str(base / "a")
    with fileio.use(rec):
        rec.mark("create")
        a = _create(how, fmt, str(base), target)
        rec.mark("end")
    return rec, a, target


def _names(rec):
    """inode -> the path it was created at (in the recorder's log)."""
    return {e[2]: e[1] for e in rec.log if e[0] == "link"}


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("how", HOWS)
def test_a_creation_is_durable_in_two_rounds(tmp_path, how, fmt):
    rec, a, target = _record(tmp_path, how, fmt)
    np.testing.assert_array_equal(_read(a), _expected(how))
    names = _names(rec)
    log = rec.log
    at = next(i for i, e in enumerate(log) if e[0] == "rename" and e[2] == target)
    # serial rounds: runs of syncs with no other operation between
    rounds, run = [], None
    for i, e in enumerate(log):
        if e[0] in ("fsync", "fsyncdir"):
            if run is None:
                run = []
                rounds.append((i, run))
            run.append(names.get(e[1], e[1]) if e[0] == "fsync" else e[1])
        elif e[0] != "call":
            run = None
    assert len(rounds) == 2, [r for _, r in rounds]
    assert rounds[0][0] < at < rounds[1][0]
    assert rounds[1][1] == [os.path.dirname(target)]          # the parent, after the rename
    synced = {p for p in rounds[0][1]}
    written = {names[e[1]] for e in log[:at] if e[0] in ("write", "trunc")}
    unsynced = {p for p in written if p.endswith((os.sep + "meta" + os.sep + "commit",
                                                  os.sep + "meta" + os.sep + "stats"))}
    assert written - unsynced and written - unsynced <= synced
    # every directory of the new tree is synced in the first round, its parent only after the rename
    made = [e[1] for e in log[:at] if e[0] == "mkdir"]
    assert made and set(made) <= synced
    assert os.path.dirname(target) not in synced
    col = os.path.join(target, "a") if how == "ctable" else target
    meta = sorted(os.listdir(os.path.join(col, "meta")))
    if fmt == "blz":
        assert "attributes" not in meta and "commit" in meta
    else:
        assert os.path.isfile(os.path.join(col, "__attrs__")) and "commit" in meta
    r = blzarr.open(target, mode="r")
    assert r.attrs.getall() == {}
    np.testing.assert_array_equal(_read(r), _expected(how))


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_attributes_of_a_new_directory_come_and_go(tmp_path, fmt):
    p = str(tmp_path / "a")
    a = blzarr.carray(_values(), rootdir=p, mode="w", **_kw(fmt))
    path = os.path.join(p, "meta", "attributes") if fmt == "blz" else os.path.join(p, "__attrs__")
    assert os.path.exists(path) == (fmt == "bcolz")
    a.attrs["unit"] = "m"
    assert json.load(open(path)) == {"unit": "m"}
    assert blzarr.open(p, mode="r").attrs.getall() == {"unit": "m"}
    del a.attrs["unit"]
    a.close()
    assert blzarr.open(p, mode="r").attrs.getall() == {}
    # a new array at the same path has none again (what was there is replaced whole)
    blzarr.carray(_values(), rootdir=p, mode="w", **_kw(fmt)).close()
    assert blzarr.open(p, mode="r").attrs.getall() == {}


def test_a_lost_or_torn_commit_record_of_a_new_directory(tmp_path):
    """The record is the one file of a creation that may be missing or torn after a power loss (it is
    not synced): readers load the directory without it, and the next writer makes a valid one."""
    from blzarr.storage import commitrec
    for damage in ("missing", "empty", "garbage"):
        p = str(tmp_path / damage)
        blzarr.carray(_values(), rootdir=p, mode="w", **_kw("blz")).close()
        rec = commitrec.record_path(p)
        if damage == "missing":
            os.unlink(rec)
        else:
            with open(rec, "wb") as f:
                f.write(b"" if damage == "empty" else b"\xff" * commitrec.SIZE)
        r = blzarr.open(p, mode="r")
        np.testing.assert_array_equal(r[:], _values())
        w = blzarr.open(p, mode="a")
        w.append([5, 6])
        w.flush()
        got = commitrec.decode(open(rec, "rb").read())
        assert got is not None and got[1] == N + 2, damage
        assert len(r) == N + 2 and r[-1] == 6       # the reader saw the commit
        w.close()


@pytest.mark.slow
@pytest.mark.parametrize("how,fmt", [("carray", "blz"), ("carray", "bcolz"), ("fromiter", "blz"),
                                     ("arange", "bcolz"), ("ctable", "blz")])
def test_a_power_loss_during_a_creation_leaves_nothing_or_all(tmp_path, how, fmt):
    rec, a, target = _record(tmp_path, how, fmt)
    del a
    end = next(i for i, e in enumerate(rec.log) if e[0] == "call" and e[1] == "end")
    scratch = str(tmp_path / "state")
    rel = os.path.relpath(target, rec.base)
    n = absent = 0
    for st in crashsim.distinct_states(rec, scratch, seed=3):
        n += 1
        where = f"{how}/{fmt}: crash state {st.kind} (ops {st.kmin}..{st.kmax} of {len(rec.log)})"
        root = os.path.join(scratch, rel)
        if not os.path.exists(root):
            assert st.kmin < end, where + ": the creation had returned"
            absent += 1
            continue
        np.testing.assert_array_equal(_read(blzarr.open(root, mode="r")), _expected(how), err_msg=where)
        w = blzarr.open(root, mode="a")
        w.append([(1, 0.5), (2, 1.0)] if how == "ctable" else [1, 2])
        w.close()
        r = blzarr.open(root, mode="r")
        np.testing.assert_array_equal((r["a"] if how == "ctable" else r)[-2:], [1, 2], err_msg=where)
        # a new creation at the target works beside what the crash left (a stage, a record)
        with blzarr.defaults_ctx(fsync=False):
            blzarr.carray([1], rootdir=root, mode="w").close()
        shutil.rmtree(scratch)
    print(f"{how}/{fmt}: {n} distinct crash states, {absent} without the target")
    assert n > 20 and 0 < absent < n
