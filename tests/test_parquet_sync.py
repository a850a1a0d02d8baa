"""``ctable.fromparquet(path, rootdir=...)`` (and ``fromarrow`` into a directory) build the table in a
hidden directory whose files are synced once, all together, after the last write and before the
table is moved into place; a power loss at any point leaves the table that was there, or the new
one whole."""

import os
import shutil

import numpy as np
import pytest

import blzarr
from blzarr import ctable
from blzarr.storage import fileio, intent
from blzarr.io import arrow as arrow_io

import crashsim
from helpers import FileOpLog

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _source(tmp_path, n=60_000, rg=10_000):
    rng = np.random.default_rng(n)
    cols = {"a": np.arange(n), "x": rng.normal(size=n),
            "s": np.array(["ab", "cde", "f"])[rng.integers(0, 3, n)]}
    src = str(tmp_path / "in.parquet")
    pq.write_table(pa.table(cols), src, row_group_size=rg)
    return src, cols


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
@pytest.mark.parametrize("replace", [False, True])
def test_fromparquet_syncs_every_file_once_after_the_last_write(tmp_path, fmt, replace):
    src, cols = _source(tmp_path)
    root = str(tmp_path / "t")
    if replace:
        ctable([np.arange(3)], names=["old"], rootdir=root, mode="w").close()
    rec = FileOpLog()
    with fileio.use(rec):
        ctable.fromparquet(src, rootdir=root, mode="w", chunklen=1000, format=fmt)
    t = blzarr.open(root, mode="r")
    for k, v in cols.items():
        np.testing.assert_array_equal(t[k][:], v)
    prefix = str(tmp_path / ".t.building-")
    work = {os.path.relpath(p, tmp_path).split(os.sep)[0] for e in rec.log for p in rec.paths_of(e)
            if p.startswith(prefix)}
    assert len(work) == 1
    work = str(tmp_path / work.pop()) + os.sep
    ops = [e for e in rec.log if any(p.startswith(work) for p in rec.paths_of(e))]
    kinds = [e[0] for e in ops]
    first_sync = kinds.index("sync")
    # nothing is synced while the table is written, nothing written once the syncs begin
    assert "write" not in kinds[first_sync:]
    assert "sync" not in kinds[:first_sync] and "syncdir" not in kinds[:first_sync]
    move = next(i for i, e in enumerate(ops) if e[0] == "rename" and e[1].startswith(work)
                and not e[2].startswith(work))
    assert all(k in ("sync", "syncdir") for k in kinds[first_sync:move])
    synced = [e[1] for e in ops[first_sync:move] if e[0] == "sync"]
    assert len(synced) == len(set(synced))              # each file once
    # every file of the published table was synced there (under its build path)
    built = os.path.join(work, "t")
    files_now = {os.path.relpath(os.path.join(d, f), root)
                 for d, _, fs in os.walk(root) for f in fs}
    assert files_now <= {os.path.relpath(p, built) for p in synced}
    dirs_now = {os.path.relpath(d, root) for d, _, _ in os.walk(root)}
    assert dirs_now <= {os.path.relpath(e[1], built) for e in ops[first_sync:move] if e[0] == "syncdir"}
    assert sorted(os.listdir(tmp_path)) == ["in.parquet", "t"]


def test_fromparquet_without_fsync_syncs_nothing(tmp_path):
    src, cols = _source(tmp_path, 20_000, 5_000)
    rec = FileOpLog()
    with blzarr.defaults_ctx(fsync=False), fileio.use(rec):
        ctable.fromparquet(src, rootdir=str(tmp_path / "t"), mode="w", chunklen=1000)
    assert not [e for e in rec.log if e[0] in ("sync", "syncdir")]
    np.testing.assert_array_equal(blzarr.open(str(tmp_path / "t"))["s"][:], cols["s"])


def test_string_columns_sized_by_the_first_batch(tmp_path, monkeypatch):
    src, cols = _source(tmp_path, 30_000, 30_000)          # one row group: no widening at all
    widened = []
    real = arrow_io._Builder._widen
    monkeypatch.setattr(arrow_io._Builder, "_widen", lambda self, name, dt: (widened.append(name),
                                                                                real(self, name, dt)))
    t = ctable.fromparquet(src, rootdir=str(tmp_path / "t"), mode="w")
    assert widened == []
    assert t.dtype["s"] == np.dtype("U3")
    np.testing.assert_array_equal(t["s"][:], cols["s"])
    # a longer value in a later row group still widens the column
    n = 30_000
    pq.write_table(pa.table({"s": np.where(np.arange(n) < 20_000, "a", "longer")}), src, row_group_size=10_000)
    t = ctable.fromparquet(src, rootdir=str(tmp_path / "t"), mode="w")
    assert widened == ["s"]
    np.testing.assert_array_equal(t["s"][:], np.where(np.arange(n) < 20_000, "a", "longer"))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_fromparquet_power_loss_leaves_old_or_new(tmp_path, fmt):
    """Every state a power loss can leave during a fromparquet over an existing table (crashsim):
    the table opens and is the old one or the new one whole (after a writer completes the swap an
    intent record names, where the platform cannot swap in one step); a retry then works."""
    src, cols = _source(tmp_path, 1_500, 500)
    base = tmp_path / "base"
    base.mkdir()
    root = str(base / "t")
    old = np.arange(5)
    rec = crashsim.Recorder(str(base))
    with fileio.use(rec):
        rec.mark("create the old table")
        ctable([old], names=["old"], rootdir=root, mode="w", format=fmt).close()
        rec.mark("fromparquet")
        ctable.fromparquet(src, rootdir=root, mode="w", chunklen=500, format=fmt)
    scratch = str(tmp_path / "state")
    seen, olds, news, between = set(), 0, 0, 0
    for st in crashsim.crash_states(rec, seed=3):
        if 1 not in crashsim.calls_at(rec, st.kmin, st.kmax):
            continue                    # left while the old table was being made
        d = st.tree.digest()
        if d in seen:
            continue
        seen.add(d)
        if os.path.exists(scratch):
            shutil.rmtree(scratch)
        st.tree.materialize(rec.base, scratch)
        where = f"crash state {st.kind} (ops {st.kmin}..{st.kmax} of {len(rec.log)})"
        target = os.path.join(scratch, "t")
        if not os.path.exists(target):
            # between the two renames of a swap the platform cannot do in one step (the simulator
            # has no renameat2): the intent record names the new table and where the old one went,
            # both whole (a writer completes the swap; not here: the record's inode check cannot
            # match a copied tree)
            record = intent.read(target)
            assert record is not None and record["op"] == "replace", where
            new = blzarr.open(os.path.join(scratch, record["stage"]), mode="r")
            for k, v in cols.items():
                np.testing.assert_array_equal(new[k][:], v, err_msg=where)
            np.testing.assert_array_equal(blzarr.open(os.path.join(scratch, record["trash"]), mode="r")["old"][:],
                                          old, err_msg=where)
            between += 1
            continue
        t = blzarr.open(target, mode="r")
        if list(t.names) == ["old"]:
            np.testing.assert_array_equal(t["old"][:], old, err_msg=where)
            olds += 1
        else:
            assert list(t.names) == list(cols), where
            for k, v in cols.items():
                np.testing.assert_array_equal(t[k][:], v, err_msg=where)
            news += 1
        if len(seen) % 7 == 1:
            with blzarr.defaults_ctx(fsync=False):
                again = ctable.fromparquet(src, rootdir=os.path.join(scratch, "t"), mode="w")
                np.testing.assert_array_equal(again["a"][:], cols["a"], err_msg=where)
                again.close()
            # (a temporary file an interrupted atomic write left in the parent is not the table's)
            assert [n for n in os.listdir(scratch) if n.startswith(".t.")] == [], where
    assert olds and news and len(seen) > 20
