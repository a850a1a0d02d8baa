"""A writer killed after writing a plain (ordered) BLZ meta/sizes and before that file's sync, a
second writer of the same boot that opens the directory and flushes, then a power loss: the crash
simulator (tests/crashsim.py) builds every tree the loss could leave, and each must open with the
values of a flush of either writer.

The first writer's meta/sizes is in the page cache only: the second writer reads it and takes the
bytes of the commit before it (the short last chunk that meta/sizes replaced) as free space; a loss
that keeps the older meta/sizes would then name bytes the second writer overwrote."""

import os

import numpy as np
import pytest

import blzarr
from blzarr.storage import fileio
from blzarr.storage.blz import sizes as sizes_record

import crashsim
from helpers import leave_as_killed, write_after

CHUNKLEN = 100
CP = blzarr.cparams(clevel=0)       # uncompressed: chunk sizes are known, bytes span sectors


class Killed(BaseException):
    """The process dies here."""


class KillAtSizesSync(crashsim.Recorder):
    """Records (crashsim.Recorder); once `arm`ed, the next sync of `path` kills the writer before it
    is issued."""

    armed = None

    def arm(self, path):
        self.armed = self._names[self._abs(path)][1]
        self.reached = False

    def _check(self, fd):
        if self.armed is not None and self._fds.get(fd) == self.armed:
            self.armed = None
            self.reached = True
            raise Killed()

    def fsync(self, fd):
        self._check(fd)
        super().fsync(fd)

    def fdatasync(self, fd):
        self._check(fd)
        super().fdatasync(fd)


@pytest.mark.parametrize("boot", [pytest.param("none", marks=pytest.mark.slow), "linux"])
def test_a_writer_after_one_killed_before_its_sizes_sync(tmp_path, monkeypatch, boot):
    # the first writer's trim writes a plain meta/sizes and is killed before its sync; "none": no boot
    # id (other systems), every meta/sizes plain; "linux": the appends' are one-barrier records
    monkeypatch.setattr(sizes_record, "_boot", "" if boot == "none" else sizes_record.boot_id())
    base = tmp_path / "base"
    base.mkdir()
    root = str(base / "c")
    rec = KillAtSizesSync(str(base))
    states = [np.arange(250)]
    with fileio.use(rec):
        rec.mark("create")
        c = blzarr.carray(np.arange(250, dtype=np.int64), rootdir=root, mode="w", format="blz",
                          chunklen=CHUNKLEN, cparams=CP, superchunklen=64)
        c.close()
        a = blzarr.open(root, mode="a")
        rec.mark("flush 0")
        a.append(np.arange(1000, 1010))
        a.flush()
        states.append(a[:])
        rec.mark("killed flush")
        want = a[:110]
        rec.arm(os.path.join(root, "meta", "sizes"))
        with pytest.raises(Killed):
            a.trim(150)                 # 110 atoms: chunk 2 no longer counted
            a.flush()
        assert rec.reached
        states.append(want)
        leave_as_killed(a)
        del a
        write_after(rec, root, [10, 100], states)
    calls = rec.calls()
    scratch = str(tmp_path / "state")
    path = os.path.join(scratch, "c")
    distinct = bad = 0
    for st in crashsim.distinct_states(rec, scratch, seed=7):
        js = [j for j in crashsim.calls_at(rec, st.kmin, st.kmax) if j >= 0]
        if 0 in js:
            continue
        distinct += 1
        allowed = [states[j - 1] for j in js] + [states[j] for j in js] + [states[1], states[2]]
        try:
            got = blzarr.open(path, mode="r")[:]
            ok = any(len(got) == len(s) and (got == s).all() for s in allowed)
            why = f"{len(got)} atoms"
        except blzarr.BlzarrError as e:
            ok, why = False, f"{type(e).__name__}: {e}"
        if not ok:
            bad += 1
            print(f"state {st.kind} in {[calls[j][0] for j in js]}: {why}")
    assert distinct > 10
    assert bad == 0
