"""Every filesystem failure reaches the user as a blzarr StorageError that names the path and keeps the
operating system's reason ("[Errno 28] No space left on device"), on every path: create, replace with
mode 'w', append, flush, compact, convert, purge, ctable create/append/addcol.

The failures are injected by patching the os functions each path calls (through the I/O layer,
`blzarr.fileio`, whose makedirs and rmtree are patched themselves) (a counter checks the patched
function was reached, so no test passes for want of a failure), and, where the tests do not run as
root, made real with a directory the user may not write."""

import errno
import os
import shutil
import stat

import numpy as np
import pytest

import blzarr
from blzarr import _superchunk, cli
from blzarr.storage import fileio

FORMATS = ["bcolz", "blz"]
ENOSPC_TEXT = f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}"
EACCES_TEXT = f"[Errno {errno.EACCES}] {os.strerror(errno.EACCES)}"


class _Fail:
    """A stand-in for an os function that raises OSError(ENOSPC) (with a file name), counting calls."""

    def __init__(self, real=None, after=0):
        self.calls = 0
        self.real, self.after = real, after

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls <= self.after:
            return self.real(*args, **kwargs)
        name = args[0] if args and isinstance(args[0], (str, bytes, os.PathLike)) else None
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)


def _check(excinfo, fail, path, doing):
    assert fail.calls > fail.after, "the injected failure was never reached"
    e = excinfo.value
    assert type(e) is blzarr.StorageError or isinstance(e, blzarr.StorageError), type(e)
    text = str(e)
    assert text.startswith(f"{doing} '{path}'"), text
    assert ENOSPC_TEXT in text, text
    assert e.errno == errno.ENOSPC and e.strerror == os.strerror(errno.ENOSPC)


@pytest.mark.parametrize("fmt", FORMATS)
def test_create(tmp_path, monkeypatch, fmt):
    root = str(tmp_path / "c")
    fail = _Fail()
    monkeypatch.setattr(fileio, "makedirs", fail)
    with pytest.raises(OSError) as ei:
        blzarr.carray(np.arange(10), rootdir=root, mode="w", format=fmt)
    _check(ei, fail, root, "cannot create")


@pytest.mark.parametrize("fmt", FORMATS)
def test_replace_with_mode_w(tmp_path, monkeypatch, fmt):
    # mode 'w' writes the new array beside the old one and swaps it in: a failure of that last step
    # names the directory, keeps the OS's reason and leaves the old array as it was, nothing beside it
    root = str(tmp_path / "c")
    blzarr.carray(np.arange(10), rootdir=root, mode="w", format=fmt).close()
    fail = _Fail()
    monkeypatch.setattr(fileio, "exchange", fail)
    monkeypatch.setattr(fileio, "rename", fail)
    with pytest.raises(OSError) as ei:
        blzarr.carray(np.arange(5), rootdir=root, mode="w", format=fmt)
    _check(ei, fail, root, "cannot create")
    monkeypatch.undo()
    assert blzarr.open(root, mode="r")[:].tolist() == list(range(10))
    assert os.listdir(tmp_path) == ["c"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_append_and_flush(tmp_path, monkeypatch, fmt):
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(10), rootdir=root, mode="w", format=fmt, chunklen=4)
    fail = _Fail()
    if fmt == "bcolz":
        monkeypatch.setattr(os, "replace", fail)       # every atomic file replacement (the chunks)
    else:
        # superchunk files and meta/sizes are written in place (meta/sizes keeps room to grow)
        monkeypatch.setattr(fileio.OsIO, "pwrite", fail)
    with pytest.raises(OSError) as ei:
        c.append(np.arange(9))
        c.flush()
    assert fail.calls and isinstance(ei.value, blzarr.StorageError)
    assert ENOSPC_TEXT in str(ei.value) and root in str(ei.value)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_blz_chunk_writes_keep_the_os_reason(tmp_path, monkeypatch):
    # the superchunk files are written by the codec's pwrite loop: here it writes to /dev/full, a
    # device that is always full, so the ENOSPC and its text are the kernel's own
    real = _superchunk.pwrite_all
    calls = []

    def into_a_full_device(fd, data, pos, where=None):
        calls.append(pos)
        full = os.open("/dev/full", os.O_WRONLY)
        try:
            return real(full, data, 0, where)
        finally:
            os.close(full)
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(10), rootdir=root, mode="w", format="blz", chunklen=4)
    monkeypatch.setattr(_superchunk, "pwrite_all", into_a_full_device)
    with pytest.raises(blzarr.StorageError) as ei:
        c.append(np.arange(100))
        c.flush()
    assert calls and ENOSPC_TEXT in str(ei.value) and root in str(ei.value)
    assert ei.value.errno == errno.ENOSPC


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_pwrite_all_message_has_the_reason_text():
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(blzarr.StorageError) as ei:
            _superchunk.pwrite_all(fd, b"x" * 100, 0, "'/some/data/__1__.bin'")
    finally:
        os.close(fd)
    assert str(ei.value) == f"{ENOSPC_TEXT} (writing 100 bytes at 0 of '/some/data/__1__.bin')"


def test_compact(tmp_path, monkeypatch):
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(1000), rootdir=root, mode="w", format="blz", chunklen=16,
                      superchunklen=4)
    c[0:40] = 7                                    # rewrites leave space for compact to reclaim
    c.flush()
    fail = _Fail()
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError) as ei:
        c.compact()
    assert fail.calls and isinstance(ei.value, blzarr.StorageError)
    assert ENOSPC_TEXT in str(ei.value) and root in str(ei.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_purge(tmp_path, monkeypatch, fmt):
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(10), rootdir=root, mode="w", format=fmt)
    fail = _Fail()
    monkeypatch.setattr(fileio, "rmtree", fail)
    with pytest.raises(OSError) as ei:
        c.purge()
    _check(ei, fail, root, "cannot purge")


@pytest.mark.parametrize("fmt", FORMATS)
def test_ctable_create_replace_append_addcol(tmp_path, monkeypatch, fmt):
    root = str(tmp_path / "t")
    with monkeypatch.context() as m:
        fail = _Fail()
        m.setattr(fileio, "makedirs", fail)
        with pytest.raises(OSError) as ei:
            blzarr.ctable({"x": np.arange(3)}, rootdir=root, mode="w", format=fmt)
        _check(ei, fail, root, "cannot create")
    t = blzarr.ctable({"x": np.arange(3)}, rootdir=root, mode="w", format=fmt)
    with monkeypatch.context() as m:
        fail = _Fail()
        m.setattr(os, "replace", fail)                  # a full disk: renames and writes fail
        m.setattr(_superchunk, "pwrite_all", fail)      # (BLZ's short chunk and meta/sizes change in place)
        with pytest.raises(OSError) as ei:
            t.append((3,))
            t.flush()
        assert fail.calls and isinstance(ei.value, blzarr.StorageError)
        assert ENOSPC_TEXT in str(ei.value) and root in str(ei.value)
    # the undo of the append met the full disk too: this object writes nothing more, reopening works
    with pytest.raises(blzarr.StorageError, match="undoing it failed too.*reopen it"):
        t.flush()
    t = blzarr.open(root, mode="a")
    assert t[:].tolist() == [(0,), (1,), (2,)]
    with monkeypatch.context() as m:
        fail = _Fail()
        m.setattr(fileio, "makedirs", fail)
        with pytest.raises(OSError) as ei:
            t.addcol(np.arange(len(t)), name="y")
        assert fail.calls and isinstance(ei.value, blzarr.StorageError)
        assert ENOSPC_TEXT in str(ei.value) and os.path.join(root, "y") in str(ei.value)
    t.close()
    with monkeypatch.context() as m:
        fail = _Fail()
        m.setattr(fileio, "exchange", fail)
        m.setattr(fileio, "rename", fail)
        with pytest.raises(OSError) as ei:
            blzarr.ctable({"x": np.arange(3)}, rootdir=root, mode="w", format=fmt)
        _check(ei, fail, root, "cannot create")
    assert blzarr.open(root, mode="r")[:].tolist() == [(0,), (1,), (2,)]
    assert os.listdir(tmp_path) == ["t"]


def test_convert(tmp_path, monkeypatch, capsys):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    blzarr.carray(np.arange(100), rootdir=src, mode="w").close()
    fail = _Fail()
    monkeypatch.setattr(fileio, "makedirs", fail)
    assert cli.main(["convert", src, dst, "--format", "bcolz"]) == 1
    err = capsys.readouterr().err.strip()
    assert fail.calls and "\n" not in err
    assert err.startswith(f"blzarr convert: error: cannot create '{tmp_path}") and ENOSPC_TEXT in err
    # the last step, putting the converted copy in place of DST, fails on the same terms
    monkeypatch.undo()
    blzarr.carray(np.arange(3), rootdir=dst, mode="w").close()
    moved = []

    def fail_on_dst(a, b, *args, **kwargs):
        if dst in (os.fspath(a), os.fspath(b)):
            moved.append(b)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), a)
        return os.rename(a, b)
    monkeypatch.setattr(fileio, "exchange", fail_on_dst)
    monkeypatch.setattr(fileio, "rename", fail_on_dst)
    assert cli.main(["convert", src, dst, "--format", "bcolz", "--overwrite"]) == 1
    err = capsys.readouterr().err.strip()
    assert moved and f"cannot put the converted copy at '{dst}'" in err and ENOSPC_TEXT in err
    monkeypatch.undo()
    assert blzarr.open(dst, mode="r")[:].tolist() == [0, 1, 2]     # DST as it was, nothing beside it
    assert sorted(os.listdir(tmp_path)) == ["dst", "src"]


def _may_write_anyway(d):
    """True when this process writes into a directory without write permission (root, or a process
    with CAP_DAC_OVERRIDE): then chmod cannot make a failure, and the monkeypatched tests cover it."""
    try:
        with open(os.path.join(d, "probe"), "w"):
            pass
    except PermissionError:
        return False
    os.remove(os.path.join(d, "probe"))
    return True


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_mode_w_in_a_directory_the_user_may_not_write(tmp_path):
    parent = tmp_path / "locked"
    parent.mkdir()
    root = str(parent / "storage")
    blzarr.carray(np.arange(10), rootdir=root, mode="w").close()
    os.chmod(parent, stat.S_IRUSR | stat.S_IXUSR)
    os.chmod(os.path.join(root, "data"), stat.S_IRUSR | stat.S_IXUSR)
    try:
        if _may_write_anyway(parent):
            pytest.skip(f"this process (euid {os.geteuid()}) writes where permissions say no")
        with pytest.raises(blzarr.StorageError) as ei:
            blzarr.carray(np.arange(5), rootdir=root, mode="w")
        assert str(ei.value).startswith(f"cannot replace '{root}'") and EACCES_TEXT in str(ei.value)
        with pytest.raises(blzarr.StorageError) as ei:
            blzarr.carray(np.arange(5), rootdir=str(parent / "new"), mode="w")
        assert str(parent / "new") in str(ei.value) and EACCES_TEXT in str(ei.value)
    finally:
        os.chmod(os.path.join(root, "data"), stat.S_IRWXU)
        os.chmod(parent, stat.S_IRWXU)
