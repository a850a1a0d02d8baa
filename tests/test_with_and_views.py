"""Leaving a `with` block flushes an on-disk carray or ctable and releases its writer lock (another
process may write at once; the object then refuses writes and says how to write again); views of
on-disk carrays are read-only and say why."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import blzarr


def _append_in_another_process(root, values):
    """Open `root` for writing in a new process, append `values`, flush; (exit status, stderr)."""
    code = ("import sys, blzarr; c = blzarr.open(sys.argv[1], mode='a'); c.append(eval(sys.argv[2])); "
            "c.flush(); c.close()")
    proc = subprocess.run([sys.executable, "-c", code, root, repr(values)], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_leaving_with_flushes_and_releases_the_lock(tmp_path, fmt):
    root = str(tmp_path / f"c.{fmt}")
    with blzarr.carray(np.arange(10), rootdir=root, mode="w", format=fmt, chunklen=4) as c:
        c.append([10, 11, 12])
        rc, err = _append_in_another_process(root, [0])
        assert rc != 0 and "LockError" in err            # inside the block: the directory is ours
    # after the block: flushed, and another process may write at once
    assert blzarr.open(root, mode="r")[:].tolist() == list(range(13))
    rc, err = _append_in_another_process(root, [13, 14])
    assert rc == 0, err
    assert blzarr.open(root, mode="r")[:].tolist() == list(range(15))
    # this object still reads; it refuses writes and says how to write again
    assert c[12] == 12 and c.mode == "r"
    for write in (lambda: c.append([1]), lambda: c.__setitem__(0, 5), lambda: c.attrs.__setitem__("k", 1)):
        with pytest.raises(blzarr.ReadOnlyError, match=r"was closed \(by close\(\) or at the end of its "
                                                        r"`with` block\).*blzarr.open\(.*mode='a'\)"):
            write()


def test_leaving_with_releases_a_ctables_lock(tmp_path):
    root = str(tmp_path / "t.blz")
    with blzarr.ctable({"x": np.arange(5)}, rootdir=root, mode="w") as t:
        t.append((5,))
    code = "import sys, blzarr; t = blzarr.open(sys.argv[1], mode='a'); t.append((6,)); t.flush()"
    proc = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert blzarr.open(root, mode="r")["x"][:].tolist() == list(range(7))
    # a closed object reads as a reader does: the version committed last, the other process's row too
    assert t["x"][:].tolist() == list(range(7))
    with pytest.raises(blzarr.ReadOnlyError, match="ctable .* was closed .*mode='a'"):
        t.append((7,))
    # in memory a `with` block only flushes: the table stays writable
    with blzarr.ctable({"x": np.arange(2)}) as m:
        pass
    m.append((2,))
    assert m["x"][:].tolist() == [0, 1, 2]


def test_writing_through_a_view_of_an_on_disk_carray_says_why_it_is_read_only(tmp_path):
    root = str(tmp_path / "v.blz")
    blzarr.carray(np.arange(10), rootdir=root, mode="w").close()
    a = blzarr.open(root, mode="a")
    v = a.view()
    for write in (lambda: v.append([1]), lambda: v.__setitem__(0, 5), lambda: v.resize(3)):
        with pytest.raises(blzarr.ReadOnlyError) as e:
            write()
        msg = str(e.value)
        assert "opened with mode 'r'" not in msg
        assert "views of on-disk carrays are read-only" in msg and root in msg
        assert "shares the directory's files with the original" in msg
    a.append([10])                                      # the original stays writable
    w = v.copy()                                        # and a copy of the view is writable
    w.append([99])
    assert w[-1] == 99 and a[-1] == 10
    m = blzarr.carray(np.arange(3)).view()              # in memory a view is writable
    m[0] = 7
    assert m[0] == 7


def _commit_record_fds(root):
    # the descriptors of this process open on `root`'s commit record(s)
    out = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(root) and target.endswith(os.path.join("meta", "commit")):
            out += 1
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("kind", ["carray", "ctable"])
def test_a_writer_dropped_without_close_gives_back_its_commit_record(tmp_path, fmt, kind):
    """A writer keeps its commit record open between flushes; dropped without close() (an operation
    interrupted half-way, a throwaway handle), collecting it closes that descriptor too."""
    root = str(tmp_path / "d")
    if kind == "carray":
        blzarr.carray(np.arange(10), rootdir=root, mode="w", format=fmt).close()
    else:
        blzarr.ctable([np.arange(10), np.arange(10) * 0.5], names=["a", "b"], rootdir=root, mode="w",
                      format=fmt).close()
    w = blzarr.open(root, mode="a")
    w.append(np.arange(3) if kind == "carray" else [(1, 1.5), (2, 2.5), (3, 3.5)])
    w.flush()
    assert _commit_record_fds(root) >= (1 if kind == "carray" else 2)    # bumped: held open
    del w
    gc.collect()
    assert _commit_record_fds(root) == 0
    r = blzarr.open(root, mode="r")
    assert len(r) == 13


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("first", ["view", "base"])
def test_a_view_of_a_reader_and_its_base_each_load_the_new_version(tmp_path, fmt, first):
    """A reader and its view each show the latest committed version at every read, whichever of
    the two reads first after another handle commits (neither marks the version loaded for the
    other, nor swaps the files under it)."""
    root = str(tmp_path / "d")
    blzarr.carray(np.arange(10), rootdir=root, mode="w", format=fmt, chunklen=4).close()
    base = blzarr.open(root, mode="r")
    view = base.view()
    expected = np.arange(10)
    w = blzarr.open(root, mode="a")
    for step in range(3):
        w.append(np.arange(3) + 100 * step)
        w[step] = -step - 1
        w.flush()
        expected = np.concatenate([expected, np.arange(3) + 100 * step])
        expected[step] = -step - 1
        pair = (view, base) if first == "view" else (base, view)
        for obj in pair:
            assert len(obj) == len(expected)
            assert obj[:].tolist() == expected.tolist()
            assert obj[step] == expected[step]
    w.close()
    view.close()
    assert base[:].tolist() == expected.tolist()


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_view_of_a_readers_column_loads_the_new_version(tmp_path, fmt):
    root = str(tmp_path / "t")
    blzarr.ctable([np.arange(10), np.arange(10) * 0.5], names=["a", "b"], rootdir=root, mode="w",
                  format=fmt).close()
    t = blzarr.open(root, mode="r")
    view = t["a"].view()
    w = blzarr.open(root, mode="a")
    w.append([(10, 5.0), (11, 5.5)])
    w.flush()
    assert view[:].tolist() == list(range(12))
    assert t["a"][:].tolist() == list(range(12)) and len(t) == 12
    w.close()
