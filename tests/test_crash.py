"""Crash consistency: writers killed with SIGKILL at random moments, in both layouts.

Each round forks a writer (the test process has blzarr imported already, so a round costs little)
that opens the directory with mode 'a' and runs a deterministic sequence of operations (append,
__setitem__ on slices and positions, trim, resize both ways, attrs, and for the BLZ layout fixed and
variable-length metalayers), one operation then flush() per step, reporting through a pipe the step
whose flush returned.  The test kills it at a random moment, replays the same sequence on a NumPy
model and checks the directory: it opens without error, and its length and every element are those of
the last reported flush or of the step after it (the one the kill interrupted) — nothing flushed is
lost, nothing is torn, duplicated or reordered.  The next round appends to what is there.
"""

import gc
import os
import random
import sys
import time

import numpy as np
import pytest

import blzarr
from blzarr.storage import fileio
from helpers import fork_child, kill_child, read_all, wait_for

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"), pytest.mark.slow]

CHUNKLEN = 64
DFLT = -1
ROUNDS = int(os.environ.get("BLZARR_CRASH_ROUNDS", "24"))


def enc(step, idx):
    return step * 10_000_000 + idx


def make_ops(seed, fmt, nsteps=400):
    rng = np.random.default_rng(seed)
    kinds = ["append", "append", "append", "set", "fancy", "trim", "grow", "shrink", "attrs"]
    if fmt == "blz":
        kinds += ["meta", "vlmeta"]
    return [(kinds[int(rng.integers(len(kinds)))], int(rng.integers(1 << 30)), int(rng.integers(1 << 30)))
            for _ in range(nsteps)]


def apply_model(state, op, step):
    """The state after `op` at `step`: a dict arr / attrs / meta / vlmeta (a new dict)."""
    kind, r1, r2 = op
    st = dict(state)
    arr = st["arr"]
    n = len(arr)
    if kind == "append" or (kind in ("set", "fancy", "trim", "shrink") and n == 0):
        k = 1 + r1 % (3 * CHUNKLEN + 7)
        st["arr"] = np.concatenate([arr, enc(step, np.arange(n, n + k))])
    elif kind == "set":
        a = r1 % n
        b = min(n, a + 1 + r2 % (2 * CHUNKLEN))
        arr = arr.copy()
        arr[a:b] = enc(step, np.arange(a, b))
        st["arr"] = arr
    elif kind == "fancy":
        pos = np.unique(np.random.default_rng(r1).integers(0, n, 1 + r2 % 20))
        arr = arr.copy()
        arr[pos] = enc(step, pos)
        st["arr"] = arr
    elif kind == "trim":
        st["arr"] = arr[:n - r1 % (n // 3 + 1)]
    elif kind == "shrink":
        st["arr"] = arr[:r1 % (n + 1)]
    elif kind == "grow":
        st["arr"] = np.concatenate([arr, np.full(1 + r1 % (2 * CHUNKLEN), DFLT, dtype=np.int64)])
    elif kind == "attrs":
        st["attrs"] = step
    elif kind == "meta":
        st["meta"] = f"{step % 10 ** 8:08d}"
    elif kind == "vlmeta":
        st["vlmeta"] = list(range(r1 % 40))
    return st


def apply_carray(c, op, step, state_before, state_after):
    kind = op[0]
    n = len(state_before["arr"])
    new = state_after["arr"]
    if kind == "append" or (kind in ("set", "fancy", "trim", "shrink") and n == 0):
        c.append(new[n:])
    elif kind == "set":
        diff = np.flatnonzero(new != state_before["arr"])
        if diff.size:
            c[diff[0]:diff[-1] + 1] = new[diff[0]:diff[-1] + 1]
    elif kind == "fancy":
        diff = np.flatnonzero(new != state_before["arr"])
        c[diff] = new[diff]
    elif kind == "trim":
        c.trim(n - len(new))
    elif kind in ("shrink", "grow"):
        c.resize(len(new))
    elif kind == "attrs":
        c.attrs["gen"] = state_after["attrs"]
    elif kind == "meta":
        c.meta["m"] = state_after["meta"]
    elif kind == "vlmeta":
        c.vlmeta["v"] = state_after["vlmeta"]
    c.flush()


def read_state(c, fmt):
    st = {"arr": c[:], "attrs": c.attrs["gen"] if "gen" in c.attrs else None}
    if fmt == "blz":
        st["meta"] = c.meta["m"]
        st["vlmeta"] = c.vlmeta.get("v")
    return st


def writer(rootdir, fmt, seed, wfd):
    """The child: never returns."""
    try:
        blzarr.set_nthreads(1)
        c = blzarr.open(rootdir, mode="a")
        state = read_state(c, fmt)
        os.write(wfd, b"R\n")
        for step, op in enumerate(make_ops(seed, fmt), 1):
            after = apply_model(state, op, seed * 1000 + step)
            apply_carray(c, op, seed * 1000 + step, state, after)
            state = after
            os.write(wfd, b"%d\n" % step)
        os.write(wfd, b"D\n")
    except BaseException as e:  # the parent reports a writer that failed on its own
        os.write(wfd, f"E {type(e).__name__}: {e}\n".encode())
    finally:
        os._exit(0)


def run_round(rootdir, fmt, seed, delay):
    pid, r = fork_child(writer, rootdir, fmt, seed, nthreads=0)
    # wait until it has opened the directory, then let it run for `delay` seconds
    buf = wait_for(r, b"R\n", timeout=30).decode()
    time.sleep(delay)
    buf += kill_child(pid, r)
    lines = buf.split()
    errors = [ln for ln in buf.splitlines() if ln.startswith("E ")]
    assert not errors, errors
    assert "R" in lines, buf
    steps = [int(x) for x in lines if x.isdigit()]
    return steps[-1] if steps else 0


def check(rootdir, fmt, before, after, where):
    c = blzarr.open(rootdir, mode="r")
    got = read_state(c, fmt)
    arr = got["arr"]
    lens = {len(before["arr"]), len(after["arr"])}
    assert len(arr) in lens, (where, len(arr), lens)
    ok = np.zeros(len(arr), dtype=bool)
    for st in (before, after):
        m = min(len(arr), len(st["arr"]))
        ok[:m] |= arr[:m] == st["arr"][:m]
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, (where, bad[:10], arr[bad[:10]])
    for key in got:
        if key != "arr":
            assert got[key] in (before[key], after[key]), (where, key, got[key], before[key], after[key])
    del c
    # the default mode reads it as it is (chunks past meta/sizes are not part of it); the first write
    # (here its start alone) finishes what the kill left, and every check then passes
    c = blzarr.open(rootdir, mode="a")
    c.verify()
    c._start_writing()
    c.verify()
    del c
    gc.collect()
    return got


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_sigkill_at_random_moments_loses_nothing_flushed(tmp_path, fmt):
    rootdir = str(tmp_path / "c")
    extra = dict(format="blz", superchunklen=3, meta={"m": "00000000"}) if fmt == "blz" else dict(format="bcolz")
    c = blzarr.carray(np.zeros(0, dtype=np.int64), rootdir=rootdir, mode="w", chunklen=CHUNKLEN, dflt=DFLT,
                      **extra)
    c.flush()
    del c
    gc.collect()
    rnd = random.Random(1234 if fmt == "bcolz" else 4321)
    state = {"arr": np.zeros(0, dtype=np.int64), "attrs": None}
    if fmt == "blz":
        state.update(meta="00000000", vlmeta=None)
    kinds_hit = set()
    for rnd_no in range(ROUNDS):
        seed = rnd_no + 1
        ops = make_ops(seed, fmt)
        done = run_round(rootdir, fmt, seed, rnd.uniform(0.0, 0.12))
        # replay: the state at the last reported flush and after the step the kill interrupted
        st = state
        for step in range(1, done + 1):
            st = apply_model(st, ops[step - 1], seed * 1000 + step)
        nxt = apply_model(st, ops[done], seed * 1000 + done + 1) if done < len(ops) else st
        kinds_hit.add(ops[done][0] if done < len(ops) else None)
        state = check(rootdir, fmt, st, nxt, (rnd_no, done, ops[done] if done < len(ops) else None))
    # the kills landed inside many kinds of operation, and the data kept growing across rounds
    assert len(kinds_hit) >= 4, kinds_hit
    c = blzarr.open(rootdir, mode="a")
    n = len(c)
    c.append(np.arange(1000))
    c.flush()
    assert len(blzarr.open(rootdir, mode="r")) == n + 1000
    np.testing.assert_array_equal(blzarr.open(rootdir, mode="r")[:n], state["arr"])


def ctable_writer(rootdir, seed, wfd):
    try:
        blzarr.set_nthreads(1)
        import warnings
        warnings.simplefilter("ignore")
        t = blzarr.open(rootdir, mode="a")
        n = len(t)
        rng = np.random.default_rng(seed)
        os.write(wfd, b"R\n")
        while True:
            k = int(rng.integers(1, 3 * CHUNKLEN))
            t.append([np.arange(n, n + k), np.arange(n, n + k) * 2.0, (np.arange(n, n + k) % 7).astype("U2")])
            n += k
            os.write(wfd, b"%d\n" % n)                     # auto_flush: every column flushed
    except BaseException as e:
        os.write(wfd, f"E {type(e).__name__}: {e}\n".encode())
    finally:
        os._exit(0)


def ctable_writer_killed_at_commit(rootdir, seed, wfd):
    """A writer that SIGKILLs itself when its first flush reaches the last column's commit (its
    meta/sizes, written after the others' sync or, when the flush makes one round, just after the
    others' are written): the other columns' rows are written, the last column's are not (what a
    random kill meets only when it lands in that window)."""
    try:
        import signal
        import warnings
        warnings.simplefilter("ignore")
        t = blzarr.open(rootdir, mode="a")
        n = len(t)
        last = t.cols[t.names[-1]]

        def killed(*args):
            os.write(wfd, b"K\n")
            os.kill(os.getpid(), signal.SIGKILL)
        last._write_sizes = killed
        os.write(wfd, b"R\n")
        k = 2 * CHUNKLEN + 7
        t.append([np.arange(n, n + k), np.arange(n, n + k) * 2.0, (np.arange(n, n + k) % 7).astype("U2")])
    except BaseException as e:
        os.write(wfd, f"E {type(e).__name__}: {e}\n".encode())
    finally:
        os._exit(0)


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_sigkill_during_ctable_appends(tmp_path, fmt):
    """Columns are flushed one after the other: a kill between two leaves some longer, and the table
    opens as the rows every column holds (with a warning), which include every flushed row."""
    import warnings
    rootdir = str(tmp_path / "t")
    t = blzarr.ctable([np.arange(0), np.arange(0) * 2.0, np.arange(0).astype("U2")], names=["a", "b", "s"],
                      rootdir=rootdir, mode="w", chunklen=CHUNKLEN, format=fmt)
    t.close()
    del t
    gc.collect()
    rnd = random.Random(99)
    uneven = 0
    before = 0
    # ROUNDS // 2 kills at random moments, then one that lands between the other columns' commit
    # and the last column's for certain: as flushes got shorter, 40 random kills could miss that
    # window on a loaded machine
    for rnd_no in range(ROUNDS // 2 + 1):
        at_commit = rnd_no == ROUNDS // 2
        pid, r = fork_child(ctable_writer_killed_at_commit if at_commit else ctable_writer, rootdir, rnd_no,
                            nthreads=0)
        buf = wait_for(r, b"R\n").decode()
        if at_commit:
            os.waitpid(pid, 0)
            buf += read_all(r)
            assert "K" in buf.split("\n"), buf        # the kill came from the patched commit
        else:
            time.sleep(rnd.uniform(0.0, 0.1))
            buf += kill_child(pid, r)
        lines = buf.split("\n")
        assert not [x for x in lines if x.startswith("E ")], lines
        # a kill before the round's first append returned leaves what the rounds before flushed
        flushed = max([int(x) for x in lines if x.isdigit()] or [before])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = blzarr.open(rootdir, mode="r")
        uneven += bool(caught)
        a = t["a"][:]
        assert flushed <= len(a) <= flushed + 3 * CHUNKLEN, (flushed, len(a))
        np.testing.assert_array_equal(a, np.arange(len(a)))
        np.testing.assert_array_equal(t["b"][:], a * 2.0)
        assert t["s"][:].tolist() == (a % 7).astype("U2").tolist()
        before = len(a)
        del t
        gc.collect()
    # the last kill met the columns uneven, or the test did not test the recovery
    assert caught, "the kill at the last column's commit left the columns even"
    assert uneven >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # the last kill may have left them uneven
        t = blzarr.open(rootdir, mode="a")
    n = len(t)
    t.append([np.arange(n, n + 5), np.arange(n, n + 5) * 2.0, (np.arange(n, n + 5) % 7).astype("U2")])
    t.close()
    assert blzarr.open(rootdir, mode="r")["a"][:].tolist() == list(range(n + 5))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names descriptors through /proc")
@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_write_order_and_fsync_of_metadata(tmp_path, monkeypatch, fmt):
    """The order that makes the kills above harmless, observed on the system calls: chunk data before
    the meta/sizes that counts it; meta/sizes written to a temporary file, fsync'ed, renamed, and its
    directory fsync'ed, or (once it exists, when its text does not grow) written over in place and
    fdatasync'ed; a trim's new meta/sizes before the chunks it drops are removed."""
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(250, dtype=np.int64), rootdir=root, chunklen=100, format=fmt)
    c.flush()
    events = []

    class Recorder(fileio.OsIO):
        def fsync(self, fd):
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            super().fsync(fd)

        fdatasync = fsync

        def fsync_dir(self, path):
            events.append(("fsync", os.path.realpath(path)))
            super().fsync_dir(path)

        def replace(self, a, b):
            events.append(("replace", os.path.realpath(a), os.path.realpath(b)))
            super().replace(a, b)

        def unlink(self, p):
            events.append(("remove", os.path.realpath(p)))
            super().unlink(p)

        def pwrite(self, fd, data, pos, where=None):
            events.append(("pwrite", os.readlink(f"/proc/self/fd/{fd}")))
            super().pwrite(fd, data, pos, where)

    # every file operation of both layouts goes through the I/O layer: record there
    monkeypatch.setattr(fileio, "_impl", Recorder())
    sizes = os.path.realpath(os.path.join(root, "meta", "sizes"))
    meta_dir = os.path.dirname(sizes)

    def sizes_writes():
        return [i for i, e in enumerate(events) if (e[0] == "replace" and e[2] == sizes)
                or e == ("pwrite", sizes)]

    def check_sizes_write(at):
        if events[at][0] == "replace":
            kind, tmp, dst = events[at]
            assert events[at - 1] == ("fsync", tmp)          # the new content is durable first
            assert events[at + 1] == ("fsync", meta_dir)      # then the rename itself
        else:
            # in place: durable before going on, in the barrier that follows the write (a BLZ
            # one-barrier record syncs the superchunk file beside it, in either order: the record
            # names the commit before it, which a reader falls back to)
            barrier = []
            for e in events[at + 1:]:
                if e[0] != "fsync":
                    break
                barrier.append(e)
            assert ("fsync", sizes) in barrier, events[at:]

    c.append(np.arange(250, 420))      # fills the short chunk, writes another, leaves a short one
    c.flush()
    at = sizes_writes()
    assert len(at) == 1
    check_sizes_write(at[0])
    data_writes = [i for i, e in enumerate(events) if (e[0] == "replace" and "/data/" in e[2])
                   or (e[0] == "pwrite" and "/data/" in e[1])]
    assert data_writes and max(data_writes) < at[0]          # every chunk byte before meta/sizes
    del events[:]
    c.trim(170)                         # back to 250: drops a full chunk and the short one
    at = sizes_writes()
    assert events[at[0]] == ("pwrite", sizes)                # a shorter text: in place, padded
    check_sizes_write(at[0])
    chunk_pwrites = [i for i, e in enumerate(events) if e[0] == "pwrite" and "/data/" in e[1]]
    drops = [i for i, e in enumerate(events) if e[0] == "remove" or (i in chunk_pwrites and i > at[0])]
    assert drops and min(i for i, e in enumerate(events) if e[0] == "remove" or i in chunk_pwrites) > at[0]
    assert blzarr.open(root, mode="r")[:].tolist() == list(range(250))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def _kill_after_cut_of(rootdir, new_len):
    """In a forked child: resize a BLZ carray to new_len and die at the superchunk-file write that
    follows the first header write of the cut (the header and the offsets table are two writes)."""
    from blzarr import _superchunk as sc
    pid = os.fork()
    if pid == 0:
        orig, seen = sc.pwrite_all, []

        def pwrite_all(fd, data, pos, path):
            if seen:
                os._exit(7)
            if pos == 0:
                seen.append(pos)
            return orig(fd, data, pos, path)
        sc.pwrite_all = pwrite_all
        try:
            w = blzarr.open(rootdir, mode="a")
            w.resize(new_len)
            w.flush()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


def test_kill_between_the_two_writes_of_a_blz_cut(tmp_path):
    # a resize that shrinks a superchunk file rewrites its header and clears its offsets table; a
    # kill between the two left a state that made the next writer's open fail (seen in the random
    # kill test above)
    rootdir = str(tmp_path / "c")
    a = np.arange(500, dtype=np.int64)
    c = blzarr.carray(a[:50], rootdir=rootdir, mode="w", chunklen=10, format="blz")
    c.flush()
    c.close()
    assert _kill_after_cut_of(rootdir, 25) >> 8 == 7
    r = blzarr.open(rootdir, mode="r")
    np.testing.assert_array_equal(r[:], a[:len(r)])
    w = blzarr.open(rootdir, mode="a")
    n = len(w)
    assert n in (25, 50)
    w.append(a[n:n + 30])
    w.flush()
    w.close()
    np.testing.assert_array_equal(blzarr.open(rootdir, mode="r")[:], a[:n + 30])


def test_blz_table_cleared_under_the_header_count_is_repaired(tmp_path):
    # what an earlier cut order left after a kill: the offsets table cleared from chunk 2 on while the
    # file's header still counts 5 chunks (and meta/sizes already says 20 rows)
    from blzarr import _superchunk as sc
    rootdir = str(tmp_path / "c")
    a = np.arange(500, dtype=np.int64)
    c = blzarr.carray(a[:50], rootdir=rootdir, mode="w", chunklen=10, format="blz")
    c.flush()
    c.close()
    path = os.path.join(rootdir, "data", "__1__.bin")
    with open(path, "rb") as fh:
        head = sc.unpack_header(fh.read(32))
    assert head["nchunks"] == 5
    table = 32 + head["meta_size"]
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, sc.pack_offsets(np.full(3, -1, dtype=np.int64)), table + 8 * 2)
    finally:
        os.close(fd)
    sizes = os.path.join(rootdir, "meta", "sizes")
    with open(sizes) as fh:
        text = fh.read()
    with open(sizes, "w") as fh:
        fh.write(text.replace('"shape": [50]', '"shape": [20]').replace('"nbytes": 400', '"nbytes": 160'))
    w = blzarr.open(rootdir, mode="a")
    assert len(w) == 20
    np.testing.assert_array_equal(w[:], a[:20])
    w.append(a[20:35])
    w.flush()
    w.close()
    r = blzarr.open(rootdir, mode="r")
    np.testing.assert_array_equal(r[:], a[:35])
    r.verify()


def _kill_at_first_header_write(rootdir, first, second):
    """In a forked child: append `first` to a BLZ carray, then `second` and flush, dying at the first
    superchunk-header write after `first`, which follows the offsets entries it makes current."""
    from blzarr import _superchunk as sc
    pid = os.fork()
    if pid == 0:
        try:
            w = blzarr.open(rootdir, mode="a")
            w.append(first)
            orig = sc.pwrite_all

            def pwrite_all(fd, data, pos, path=None):
                if pos == 0:
                    os._exit(7)
                return orig(fd, data, pos, path)
            sc.pwrite_all = pwrite_all
            w.append(second)
            w.flush()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


@pytest.mark.parametrize("case", ["switch before header", "entry past the count"])
def test_readers_and_verify_accept_a_kill_between_offsets_and_header(tmp_path, case):
    # a kill between an offsets-entry write and the header write that follows it leaves the header's
    # last-chunk behind the switched short chunk, or an entry past the header's chunk count: readers
    # (verify in read mode included) go by what is counted, the writer's first write repairs it
    rootdir = str(tmp_path / "c")
    a = np.arange(1000, dtype=np.int64)
    c = blzarr.carray(a[:250], rootdir=rootdir, mode="w", chunklen=100, format="blz")
    c.close()
    if case == "switch before header":      # the flush switches the short chunk's entry first
        assert _kill_at_first_header_write(rootdir, a[250:255], a[255:260]) >> 8 == 7
    else:                                    # a new full chunk: its bytes, its entry, the header
        assert _kill_at_first_header_write(rootdir, a[250:300], a[300:400]) >> 8 == 7
    for mode in ("r", "a"):
        r = blzarr.open(rootdir, mode=mode)
        assert len(r) == 250
        r.verify()
        np.testing.assert_array_equal(r[:], a[:250])
    w = blzarr.open(rootdir, mode="a")
    w.append(a[250:420])
    w.verify()
    w.close()
    r = blzarr.open(rootdir, mode="r")
    r.verify()
    np.testing.assert_array_equal(r[:], a[:420])
