"""Input that used to pass silently, or be lost silently.

* mode 'r' never writes: a constructor given data (carray, ctable, zeros, fromiter, copy...) and an
  existing or missing rootdir with mode 'r' raises (as bcolz does) and leaves the disk as it was.
* A writer flushes when it is closed, garbage-collected or at interpreter exit, as Python's files do
  (checked in subprocesses that append and exit without flush), in both layouts.
* Every kind of read works in a child made by fork (after a read on two threads), forkserver or spawn.
* Python integers out of a dtype's range raise OverflowError on append and assignment, as in NumPy 2.
* A BLZ meta/storage whose dtype disagrees with the superchunk files is refused, naming both files.
* meta/ or data/ symlinked out of the root, or a bcolz chunk file that is a symlink, is refused.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, strategies as st

import blzarr
from helpers import tree

FORMATS = ["bcolz", "blz"]


# ================================================================================== mode 'r' never writes
@pytest.mark.parametrize("fmt", FORMATS)
def test_carray_data_with_mode_r_on_existing_dir_raises(tmp_path, fmt, bcolz):
    p = str(tmp_path / "a")
    blzarr.carray(np.arange(10), rootdir=p, mode="w", format=fmt).flush()
    before = tree(p)
    with pytest.raises(OSError, match="mode (is )?'r'") as e:
        blzarr.carray(np.arange(3), rootdir=p, mode="r")
    assert p in str(e.value)
    assert tree(p) == before
    np.testing.assert_array_equal(blzarr.open(p)[:], np.arange(10))
    # the real bcolz refuses the same call with an OSError too
    q = str(tmp_path / "b")
    bcolz.carray(np.arange(10), rootdir=q, mode="w").flush()
    with pytest.raises(OSError):
        bcolz.carray(np.arange(3), rootdir=q, mode="r")


@pytest.mark.parametrize("fmt", FORMATS)
def test_carray_data_with_mode_r_on_missing_dir_writes_nothing(tmp_path, fmt, bcolz):
    p = str(tmp_path / "missing")
    with pytest.raises(OSError, match="mode (is )?'r'") as e:
        blzarr.carray([1, 2], rootdir=p, mode="r", format=fmt)
    assert p in str(e.value)
    assert not os.path.exists(p)
    with pytest.raises(OSError):
        bcolz.carray([1, 2], rootdir=str(tmp_path / "b"), mode="r")
    # in memory, mode 'r' makes a read-only array, as in bcolz
    m, b = blzarr.carray([1, 2], mode="r"), bcolz.carray([1, 2], mode="r")
    assert m.mode == b.mode == "r" and m[:].tolist() == b[:].tolist() == [1, 2]
    with pytest.raises(OSError):
        m.append([3])


@pytest.mark.parametrize("fmt", FORMATS)
def test_ctable_columns_with_mode_r_writes_nothing(tmp_path, fmt):
    p = str(tmp_path / "t")
    with pytest.raises(OSError, match="mode (is )?'r'") as e:
        blzarr.ctable([[1, 2]], names=["a"], rootdir=p, mode="r", format=fmt)
    assert p in str(e.value)
    assert not os.path.exists(p)
    blzarr.ctable([[1, 2]], names=["a"], rootdir=p, mode="w", format=fmt)
    before = tree(p)
    with pytest.raises(OSError, match="mode (is )?'r'"):
        blzarr.ctable([[5]], names=["a"], rootdir=p, mode="r")
    assert tree(p) == before
    assert blzarr.open(p)["a"][:].tolist() == [1, 2]


# the constructors and carray.copy, each called as fn(lib, rootdir, **kw): bcolz refuses mode 'r' for every
# one of them (an OSError for a carray, a KeyError for a ctable), after creating the directory
_MAKERS = {
    "zeros": lambda lib, r, **kw: lib.zeros(10, dtype="i4", rootdir=r, **kw),
    "ones": lambda lib, r, **kw: lib.ones(10, dtype="f8", rootdir=r, **kw),
    "fill": lambda lib, r, **kw: lib.fill(10, 3, dtype="i2", rootdir=r, **kw),
    "arange": lambda lib, r, **kw: lib.arange(10, rootdir=r, **kw),
    "fromiter": lambda lib, r, **kw: lib.fromiter(iter(range(10)), dtype="i4", count=10, rootdir=r, **kw),
    "copy": lambda lib, r, **kw: lib.carray(np.arange(10)).copy(rootdir=r, **kw),
    "zeros of a record dtype": lambda lib, r, **kw: lib.zeros(10, dtype="i4,f8", rootdir=r, **kw),
    "fromiter of records": lambda lib, r, **kw: lib.fromiter(((i, i / 2) for i in range(10)), dtype="i4,f8",
                                                              count=10, rootdir=r, **kw),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", sorted(_MAKERS))
def test_constructors_with_mode_r_write_nothing(tmp_path, fmt, how, bcolz):
    make = _MAKERS[how]
    p = str(tmp_path / "new")
    with pytest.raises(OSError, match="mode 'r'") as e:
        make(blzarr, p, mode="r", format=fmt)
    assert p in str(e.value)
    assert not os.path.exists(p)
    # an existing directory is left as it was
    make(blzarr, p, mode="w", format=fmt).flush()
    before = tree(p)
    with pytest.raises(OSError, match="mode (is )?'r'"):
        make(blzarr, p, mode="r", format=fmt)
    assert tree(p) == before
    # bcolz refuses the same call (and leaves a directory behind)
    with pytest.raises((OSError, KeyError)):
        make(bcolz, str(tmp_path / "b"), mode="r")


def test_constructor_with_mode_r_at_a_url_writes_nothing():
    url = f"memory://moder-{os.getpid()}/x"
    with pytest.raises(OSError, match="mode 'r'") as e:
        blzarr.zeros(10, rootdir=url, mode="r")
    assert url in str(e.value)
    with pytest.raises(OSError):
        blzarr.open(url)


# ===================================================== a writer flushes when closed, collected or at exit
def _run(code, **env):
    """Run `code` in a fresh interpreter with this tree on its path; its stderr must be empty."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    e = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout


@pytest.mark.parametrize("how", ["exit", "collected", "exit_from_a_new_array"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_carray_appends_are_flushed_without_flush(tmp_path, fmt, how):
    p = str(tmp_path / "c")
    blzarr.carray(np.arange(10), rootdir=p, mode="w", format=fmt, chunklen=4).flush()
    if how == "exit":            # a global still refers to it when the interpreter exits
        _run(f"""
            import blzarr
            c = blzarr.open({p!r})
            c.append(range(10, 15))
            c[0] = -1
            """)
    elif how == "collected":     # the last reference goes away in a running program
        out = _run(f"""
            import blzarr
            def work():
                c = blzarr.open({p!r})
                c.append(range(10, 15))
                c[0] = -1
            work()
            print(len(blzarr.open({p!r}, mode="r")))
            """)
        assert out.split() == ["15"]
    else:
        _run(f"""
            import blzarr, numpy as np
            c = blzarr.carray(np.arange(10), rootdir={p!r}, mode="w", format={fmt!r}, chunklen=4)
            c.append(range(10, 15))
            c[0] = -1
            """)
    want = np.arange(15)
    want[0] = -1
    np.testing.assert_array_equal(blzarr.open(p, mode="r")[:], want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ctable_appends_are_flushed_at_exit(tmp_path, fmt, bcolz):
    p = str(tmp_path / "t")
    _run(f"""
        import blzarr
        t = blzarr.ctable([[1, 2], [1.5, 2.5]], names=["a", "b"], rootdir={p!r}, mode="w",
                          format={fmt!r}, auto_flush=False)
        t.append((3, 3.5))
        t.append([[4, 5], [4.5, 5.5]])
        u = blzarr.open({p!r})
        """)
    t = blzarr.open(p, mode="r")
    assert t["a"][:].tolist() == [1, 2, 3, 4, 5] and t["b"][:].tolist() == [1.5, 2.5, 3.5, 4.5, 5.5]
    if fmt == "bcolz":
        assert bcolz.open(p, mode="r")["a"][:].tolist() == [1, 2, 3, 4, 5]


def test_a_forked_child_does_not_flush_its_parents_writer(tmp_path):
    # the child's copy of a writer is not the writer: only the process that wrote flushes
    p = str(tmp_path / "c")
    out = _run(f"""
        import os, blzarr
        c = blzarr.carray(range(10), rootdir={p!r}, mode="w", chunklen=4)
        c.append([10, 11])
        pid = os.fork()
        if pid == 0:
            c.append([99])
            del c
            os._exit(0)
        os.waitpid(pid, 0)
        print(len(blzarr.open({p!r}, mode="r")))
        c.flush()
        print(len(blzarr.open({p!r}, mode="r")))
        """)
    assert out.split() == ["10", "12"]


# ============================================================== fork, forkserver and spawn children
_FORK_SCRIPT = r'''
import sys, threading, multiprocessing as mp
import numpy as np, blzarr


def ops(objs):
    """Every kind of read, each as a small NumPy array or number."""
    out = {}
    for name, a in objs.items():
        if name == "table":
            t = a
            out["t[:]"] = t[:]
            out["t.eval"] = t.eval("x + y")[:]
            out["t[expr]"] = t["x > 150_000"]
            out["t.where"] = np.array([r.x for r in t.where("x > 150_000")])
            out["t.fetchwhere"] = t.fetchwhere("(x > 150_000) & (y < 50)")[:]
            out["t iter"] = np.array([r[0] for r in t.iter(0, 20_000, 7)])
            continue
        x = 150_000
        out[name + " a[:]"] = a[:]
        out[name + " a[::7]"] = a[::7]
        out[name + " fancy"] = a[[3, 70_000, 199_999]]
        out[name + " a[i]"] = a[123_457]
        out[name + " sum"] = a.sum()
        out[name + " where"] = np.fromiter(a.where(a[:] > x), dtype=a.dtype)
        out[name + " a[expr]"] = a["a > x"]
        out[name + " eval"] = blzarr.eval("a * 2").sum()
        out[name + " iter"] = np.fromiter(a.iter(0, 50_000), dtype=a.dtype)
        out[name + " iterblocks"] = np.array([b.sum() for b in blzarr.iterblocks(a, 30_000)])
    return out


def child(objs, q):
    q.put(ops(objs))


if __name__ == "__main__":
    root, method = sys.argv[1:]
    blzarr.set_nthreads(2)
    n = 200_000
    objs = {"memory": blzarr.carray(np.arange(n), chunklen=1000)}
    for fmt in ("bcolz", "blz"):
        blzarr.carray(np.arange(n), rootdir=f"{root}/{fmt}", mode="w", format=fmt, chunklen=1000).flush()
        objs[fmt] = blzarr.open(f"{root}/{fmt}")
    objs["table"] = blzarr.ctable([np.arange(n), np.arange(n) % 100 * 1.0], names=["x", "y"],
                                  rootdir=f"{root}/t", mode="w", chunklen=1000)
    want = ops(objs)
    # a read on two threads in this process first: the pool then has threads a forked child lacks
    ts = [threading.Thread(target=ops, args=(objs,)) for _ in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(objs, q))
    p.start()
    try:
        got = q.get(timeout=90)
    except Exception:
        p.kill()
        print("the child hung")
        sys.exit(0)
    p.join(30)
    bad = [k for k in want if not np.array_equal(np.asarray(want[k]), np.asarray(got[k]))]
    print(len(want), "bad:", bad)
'''


@pytest.mark.parametrize("method", ["fork", pytest.param("forkserver", marks=pytest.mark.slow),
                                    pytest.param("spawn", marks=pytest.mark.slow)])
def test_every_read_works_in_a_child_process(tmp_path, method):
    script = tmp_path / "forked.py"
    script.write_text(_FORK_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script), str(tmp_path), method], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["36", "bad:", "[]"], r.stdout + r.stderr


# ====================================================================== integers out of range raise
INT_DTYPES = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"]


def _numpy_outcome(values, dtype):
    try:
        return np.asarray(values, dtype=dtype)
    except OverflowError:
        return OverflowError


@given(dtype=st.sampled_from(INT_DTYPES),
       values=st.lists(st.integers(-2 ** 65, 2 ** 65) | st.integers(-300, 300), min_size=1, max_size=5),
       where=st.sampled_from(["append", "scalar", "slice", "fancy", "ctable"]))
def test_out_of_range_integers_raise_as_numpy(dtype, values, where):
    want = _numpy_outcome(values, dtype)
    c = blzarr.carray(np.arange(6, dtype=dtype), chunklen=4)
    t = blzarr.ctable([np.arange(3), np.arange(3, dtype=dtype)], names=["a", "b"])
    before = c[:]

    def do():
        if where == "append":
            c.append(values)
        elif where == "scalar":
            c[1] = values[0]
        elif where == "slice":
            c[0:len(values)] = values
        elif where == "fancy":
            c[list(range(len(values)))] = values
        else:
            t.append([list(range(len(values))), values])
    if where == "scalar":
        want = _numpy_outcome(values[:1], dtype)
    if want is OverflowError:
        with pytest.raises(OverflowError, match="out of bounds|too large"):
            do()
        np.testing.assert_array_equal(c[:], before)       # nothing was written
        assert len(t) == len(t["a"]) == len(t["b"]) == 3
        return
    do()
    if where == "append":
        np.testing.assert_array_equal(c[6:], want)
    elif where == "scalar":
        assert c[1] == want[0]
    elif where in ("slice", "fancy"):
        np.testing.assert_array_equal(c[:len(values)], want)
    else:
        np.testing.assert_array_equal(t["b"][3:], want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_out_of_range_on_disk_changes_nothing(tmp_path, fmt, bcolz):
    p = str(tmp_path / "c")
    c = blzarr.carray(np.arange(3, dtype="i1"), rootdir=p, mode="w", format=fmt)
    for bad in (lambda: c.append([1000]), lambda: c.__setitem__(0, 1000),
                lambda: c.__setitem__(slice(0, 2), [5, -129]), lambda: c.append(np.int64(200))):
        with pytest.raises(OverflowError, match="1000|-129|200"):
            bad()
    c.flush()
    assert blzarr.open(p)[:].tolist() == [0, 1, 2]
    b = bcolz.carray(np.arange(3, dtype="i1"))
    with pytest.raises(OverflowError):
        b.append([1000])
    # arrays are cast as NumPy casts them into a slice (wrapping), as bcolz does
    c.append(np.array([1000]))
    b.append(np.array([1000]))
    assert c[-1] == b[-1] == np.array([1000]).astype("i1")[0]


# ============================================================ meta/storage against the superchunk files
def _edit_json(path, **changes):
    with open(path) as f:
        d = json.load(f)
    d.update(changes)
    with open(path, "w") as f:
        json.dump(d, f)


@pytest.mark.parametrize("dtype,lie", [("i8", "float64"), ("f8", "uint64"), ("i4", "float32"),
                                       ("i2", "float16"), ("f8", "<M8[s]")])
def test_blz_storage_dtype_must_match_the_superchunk_files(tmp_path, dtype, lie):
    p = str(tmp_path / "c")
    blzarr.carray(np.arange(10_000).astype(dtype), rootdir=p, mode="w", format="blz", chunklen=1000).flush()
    _edit_json(os.path.join(p, "meta", "storage"), dtype=lie)
    for mode in ("r", "a"):
        with pytest.raises(blzarr.FormatError, match="dtype") as e:
            blzarr.open(p, mode=mode)[:]
        assert os.path.join(p, "meta", "storage") in str(e.value) and "__1__.bin" in str(e.value)


def test_blz_storage_dtype_written_another_way_is_accepted(tmp_path):
    # the same dtype spelled otherwise ('<i8' for 'int64') is the same dtype
    p = str(tmp_path / "c")
    blzarr.carray(np.arange(10), rootdir=p, mode="w", format="blz").flush()
    _edit_json(os.path.join(p, "meta", "storage"), dtype=np.dtype("i8").str)
    assert blzarr.open(p)[:].tolist() == list(range(10))


# =============================================================== symlinks that lead out of the root
def _outside_copy(p, sub, tmp_path):
    """Move `p`/`sub` outside the root and leave a symlink to it in its place; the new location."""
    out = str(tmp_path / f"elsewhere_{sub}")
    os.rename(os.path.join(p, sub), out)
    os.symlink(out, os.path.join(p, sub))
    return out


@pytest.mark.parametrize("sub", ["meta", "data"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_meta_or_data_symlinked_out_of_the_root_is_refused(tmp_path, fmt, sub):
    p = str(tmp_path / "c")
    blzarr.carray(np.arange(5000), rootdir=p, mode="w", format=fmt, chunklen=1000).flush()
    out = _outside_copy(p, sub, tmp_path)
    before = tree(out)
    for mode in ("r", "a"):
        with pytest.raises(blzarr.BlzarrError, match="outside|not a regular file inside") as e:
            c = blzarr.open(p, mode=mode)
            c[:]
            c.append([1])
            c.flush()
        assert os.path.join(p, sub) in str(e.value)
    assert tree(out) == before          # nothing written outside the root


@pytest.mark.parametrize("fmt", FORMATS)
def test_ctable_column_meta_symlinked_out_is_refused(tmp_path, fmt):
    p = str(tmp_path / "t")
    blzarr.ctable([np.arange(3000), np.arange(3000) * 0.5], names=["a", "b"], rootdir=p, mode="w",
                  format=fmt, chunklen=1000)
    col = blzarr.open(p)["b"].rootdir
    out = _outside_copy(col, "meta", tmp_path)
    before = tree(out)
    with pytest.raises(blzarr.BlzarrError, match="outside") as e:
        t = blzarr.open(p)
        t.append((1, 1.0))
        t.flush()
    assert os.path.join(col, "meta") in str(e.value)
    assert tree(out) == before


def test_bcolz_chunk_file_symlinked_elsewhere_is_refused(tmp_path, bcolz):
    p, q = str(tmp_path / "c"), str(tmp_path / "other")
    blzarr.carray(np.arange(5000), rootdir=p, mode="w", format="bcolz", chunklen=1000).flush()
    blzarr.carray(np.arange(5000) * 7, rootdir=q, mode="w", format="bcolz", chunklen=1000).flush()
    chunk = os.path.join(p, "data", "__2.blp")
    os.remove(chunk)
    os.symlink(os.path.join(q, "data", "__2.blp"), chunk)
    c = blzarr.open(p, mode="r")
    with pytest.raises(blzarr.BlzarrError, match="symbolic link") as e:
        c[:]
    assert chunk in str(e.value)
    with pytest.raises(blzarr.BlzarrError, match="symbolic link"):
        c[2500]
