"""The BLZ flush that makes the short last chunk durable in one sync before meta/sizes.

meta/sizes names the committed short last chunk (``"last": [chunk, offset, nbytes]``, docs/FORMAT.rst),
so a flush may write the new bytes and their offsets switch in any order and sync them once; these
tests check the order of the syncs (a meta/sizes is never written while a superchunk file it relies
on has writes no sync covered), what a reader and a writer make of the crash states the unordered
writes allow, and that a meta/sizes naming bytes that never reached the disk is reported, not read.
"""

import json
import os

import numpy as np
import pytest

import blzarr
from blzarr.storage import files, fileio
from blzarr.storage.blz import sizes as sizes_record
from blzarr.storage.blz.directory import BlzDir

import crashsim
from helpers import leave_as_killed, write_after

CHUNKLEN = 100
CP = blzarr.cparams(clevel=0)       # uncompressed: chunk sizes are known, bytes span sectors


def _make(root, n=250, **kw):
    c = blzarr.carray(np.arange(n, dtype=np.int64), rootdir=root, mode="w", format="blz",
                      chunklen=CHUNKLEN, cparams=CP, **kw)
    c.flush()
    return c


def _sizes(root):
    with open(os.path.join(root, "meta", "sizes")) as f:
        return json.load(f)


def _names(rec):
    """inode (of the recorder) -> path, for every file the log names: its last name, also when it
    was replaced or removed later."""
    out = {ino: p for p, (kind, ino) in rec._names.items() if kind == "f"}
    for e in rec.log:
        if e[0] == "link":
            out.setdefault(e[2], e[1])
    for e in rec.log:
        if e[0] == "rename":
            for ino, p in list(out.items()):
                if p == e[1] and ino not in [i for q, (k, i) in rec._names.items() if q == p]:
                    out[ino] = e[2]
    return out


def _record(tmp_path, work):
    rec = crashsim.Recorder(str(tmp_path))
    with fileio.use(rec):
        work(rec)
    return rec


def _flush_syncs(rec, names):
    """For each marked call: the files it synced, in order (file names)."""
    out = []
    for label, i, end in rec.calls():
        out.append((label, [os.path.basename(names.get(e[1], "?")) for e in rec.log[i:end]
                            if e[0] == "fsync"]))
    return out


def test_sizes_names_the_short_last_chunk(tmp_path):
    root = str(tmp_path / "c")
    c = _make(root)
    last = _sizes(root)["last"]
    assert last[0] == 2 and last[2] == 50 * 8
    c.append(np.arange(1000, 1080))
    c.flush()
    last = _sizes(root)["last"]
    assert last[0] == 3 and last[2] == 30 * 8        # 330 atoms: chunk 3 holds 30
    with open(os.path.join(root, "data", "__1__.bin"), "rb") as f:
        f.seek(last[1])
        head = f.read(16)
    assert int.from_bytes(head[4:8], "little") == last[2]     # a Blosc header of that chunk there
    c.append(np.arange(70))                                     # a multiple of chunklen: no short chunk
    c.flush()
    assert "last" not in _sizes(root)
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:],
                                  np.r_[np.arange(250), np.arange(1000, 1080), np.arange(70)])


def _rounds_of(rec, names, i, end):
    """The syncs of rec.log[i:end] in rounds (runs of syncs with no write between), as file names."""
    rounds, cur = [], None
    for e in rec.log[i:end]:
        if e[0] == "fsync":
            if cur is None:
                cur = []
                rounds.append(cur)
            cur.append(os.path.basename(names.get(e[1], "?")))
        elif e[0] in ("write", "trunc", "rename", "link", "unlink"):
            cur = None
    return rounds


def test_a_flush_syncs_the_superchunk_file_and_sizes_in_one_barrier(tmp_path):
    """A flush that grows the short last chunk syncs the superchunk file (bytes and switch) and
    meta/sizes in one barrier, no write between them.  The first flush of a handle whose meta/sizes
    names no short chunk keeps three syncs in a row; the first one-barrier record, longer than the
    file the text had, replaces it through a temporary file (synced before its rename, so before the
    chunk: the reading rule of the record covers that order too)."""
    root = str(tmp_path / "c")
    _make(root).close()
    os.remove(os.path.join(root, "meta", "sizes"))
    with open(os.path.join(root, "meta", "sizes"), "w") as f:     # as an older blzarr wrote it
        json.dump({"shape": [250], "nbytes": 2000, "cbytes": 0}, f)

    def work(rec):
        c = blzarr.open(root, mode="a")
        for k in range(5):
            rec.mark(f"append+flush {k}")
            c.append(np.arange(8 * k, 8 * k + 8))
            c.flush()
        c.close()
    rec = _record(tmp_path, work)
    names = _names(rec)
    syncs = _flush_syncs(rec, names)
    # (first the writer's open makes the plain meta/sizes it found durable: that file, replaced since
    # by the first record's, has no name left)
    assert syncs[0][1] == ["?", "__1__.bin", "__1__.bin", "sizes"], syncs[0]
    assert sorted(syncs[1][1]) == ["__1__.bin", "sizes"], syncs[1]
    for (label, files), (_, i, end) in zip(syncs[2:], rec.calls()[2:]):
        assert files == ["__1__.bin", "sizes"], (label, files)
        assert _rounds_of(rec, names, i, end) == [["__1__.bin", "sizes"]], label
    assert blzarr.open(root, mode="r")[:].tolist() == list(range(250)) + list(range(40))


def test_a_flush_that_fills_the_short_chunk_makes_one_barrier(tmp_path):
    """A flush that completes the short last chunk and writes the next one short (or a few full ones
    and then a short one), all in the last superchunk file, also syncs that file and meta/sizes in
    one barrier: the record names every chunk counted since its "prev" ("more": the completed one
    and the full ones, with their checksums; "last": the new short one)."""
    root = str(tmp_path / "c")
    _make(root).close()                 # 250 atoms: chunk 2 holds 50

    def work(rec):
        c = blzarr.open(root, mode="a")
        rec.mark("within the chunk")    # (the first record replaces the file: room for the next)
        c.append(np.arange(5))
        c.flush()
        rec.mark("fills the chunk")     # 55 + 60: chunk 2 full, chunk 3 holds 15
        c.append(np.arange(60))
        c.flush()
        rec.mark("fills it and two more")     # 15 + 290: chunks 3, 4, 5 full, chunk 6 holds 5
        c.append(np.arange(290))
        c.flush()
        c.close()
    rec = _record(tmp_path, work)
    names = _names(rec)
    records = [json.loads(e[3]) for e in rec.log
               if e[0] == "write" and os.path.basename(names.get(e[1], "")) == "sizes"]
    for label, i, end in rec.calls()[1:]:
        assert _rounds_of(rec, names, i, end) == [["__1__.bin", "sizes"]], label
    one, two = [r for r in records if "more" in r]
    assert one["prev"][:2] == [255, 2] and one["last"][0] == 3 and [m[0] for m in one["more"]] == [2]
    assert two["prev"][:2] == [315, 3] and two["last"][0] == 6 and [m[0] for m in two["more"]] == [3, 4, 5]
    want = np.r_[np.arange(250), np.arange(5), np.arange(60), np.arange(290)]
    r = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(r[:], want)
    r.verify()


@pytest.mark.parametrize("superchunklen", [2, 64])
def test_sizes_never_names_a_chunk_with_unsynced_bytes(tmp_path, superchunklen):
    """The invariant the protocol rests on: when a meta/sizes naming a short last chunk is written,
    no write or cut of that chunk's bytes is waiting for a sync (so the chunk it names reached the
    disk first), across appends, assignments, trims and flushes, in one file and across files; for
    a one-barrier record (synced with its chunk), of the chunk its "prev" names."""
    root = str(tmp_path / "c")
    _make(root, superchunklen=superchunklen).close()
    rng = np.random.default_rng(3)

    def work(rec):
        c = blzarr.open(root, mode="a")
        for k in range(12):
            rec.mark(f"step {k}")
            c.append(rng.integers(0, 1000, int(rng.integers(1, 170))))
            if k % 3 == 1:
                c[int(rng.integers(0, len(c)))] = -1
            if k % 4 == 2:
                c.trim(int(rng.integers(0, 60)))
            c.flush()
        c.close()
    rec = _record(tmp_path, work)
    names = _names(rec)
    pending = {}            # inode -> [(lo, hi)] written or cut since its last sync
    named = barrier = 0
    for e in rec.log:
        if e[0] == "write":
            pending.setdefault(e[1], []).append((e[2], e[2] + len(e[3])))
        elif e[0] == "trunc":
            pending.setdefault(e[1], []).append((e[2], 1 << 62))
        elif e[0] == "fsync":
            pending.pop(e[1], None)
        if e[0] == "write" and os.path.basename(names.get(e[1], "")) == "sizes":
            sizes = json.loads(e[3])
            last = sizes.get("last")
            if last is None:
                continue
            named += 1
            if "prev" in sizes:
                # a one-barrier record: its chunk is synced with it, the chunk "prev" names before it
                barrier += 1
                last = sizes["prev"][1:]
            n, off, nbytes = last
            path = os.path.join(root, "data", f"__{n // superchunklen + 1}__.bin")
            ino = [i for i, p in names.items() if os.path.realpath(p) == os.path.realpath(path)][0]
            lo, hi = off, off + 16 + nbytes + 4          # header, uncompressed data, CRC-32
            hits = [(a, b) for a, b in pending.get(ino, []) if a < hi and b > lo]
            assert not hits, f"meta/sizes names chunk {n} at {off} while writes {hits} wait for a sync"
    assert named >= 6 and barrier >= 2


def _states(tmp_path):
    """The files of a directory after a flush (state 0) and after the next one (state 1), which
    appended 30 atoms to the short last chunk: (root, sizes0, data1, last0, last1)."""
    root = str(tmp_path / "c")
    c = _make(root)
    c.close()
    with open(os.path.join(root, "meta", "sizes"), "rb") as f:
        sizes0 = f.read()
    c = blzarr.open(root, mode="a")
    c.append(np.arange(1000, 1030))
    c.flush()
    with open(os.path.join(root, "meta", "sizes"), "rb") as f:
        record = f.read()
    c.close()
    # as a writer killed after its flush left it: close() writes the record over as plain text
    assert b'"prev"' in record and b'"prev"' not in open(os.path.join(root, "meta", "sizes"), "rb").read()
    with open(os.path.join(root, "meta", "sizes"), "wb") as f:
        f.write(record)
    with open(os.path.join(root, "data", "__1__.bin"), "rb") as f:
        data1 = bytearray(f.read())
    return root, sizes0, data1, json.loads(sizes0)["last"], _sizes(root)["last"]


def _put(root, sizes, data):
    with open(os.path.join(root, "meta", "sizes"), "wb") as f:
        f.write(sizes)
    with open(os.path.join(root, "data", "__1__.bin"), "wb") as f:
        f.write(data)


def test_a_switch_whose_bytes_were_lost_reads_the_committed_chunk(tmp_path):
    """The crash state the one-sync flush allows and the ordered one did not: the offsets switch and
    header reached the disk, the new chunk's bytes did not, meta/sizes is the old one.  Readers read
    the short chunk meta/sizes names; a writer writes that entry back and goes on."""
    root, sizes0, data1, last0, last1 = _states(tmp_path)
    assert last0[1] != last1[1]          # the new short chunk went beside the committed one
    data1[last1[1]:last1[1] + 16 + 80 * 8] = bytes(16 + 80 * 8)     # its bytes never reached the disk
    _put(root, sizes0, data1)
    r = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(r[:], np.arange(250))
    assert r[249] == 249 and r[-1] == 249
    r.verify()
    w = blzarr.open(root, mode="a")
    np.testing.assert_array_equal(w[:], np.arange(250))
    w.verify()
    w.append([-7, -7, -7])
    w.flush()
    w.close()
    again = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(again[:], np.r_[np.arange(250), [-7, -7, -7]])
    again.verify()


def test_a_switch_that_reached_the_disk_with_its_bytes_reads_the_committed_length(tmp_path):
    """Switch and bytes durable, meta/sizes old: the array is the committed one (250 atoms)."""
    root, sizes0, data1, _, _ = _states(tmp_path)
    _put(root, sizes0, data1)
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(250))
    w = blzarr.open(root, mode="a")
    w.append(np.arange(5))
    w.close()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.r_[np.arange(250), np.arange(5)])


def test_an_entry_naming_a_stale_whole_chunk_is_not_read(tmp_path):
    """A one-sync flush may put the new short chunk where an older, whole chunk still lies (the hole
    before the committed one); if the switch reached the disk and the bytes did not, the entry names
    that stale chunk, checksum and all.  meta/sizes' chunk is read, never the stale one."""
    root = str(tmp_path / "c")
    c = _make(root)
    c.close()
    stale = _sizes(root)["last"]                    # chunk 2: 50 atoms
    c = blzarr.open(root, mode="a")
    c[249] = -9                                     # the committed chunk differs from the stale one
    c.append(np.arange(1000, 1030))
    c.flush()
    c.close()
    last = _sizes(root)["last"]                     # chunk 2: 80 atoms, elsewhere
    assert last[1] != stale[1]
    path = os.path.join(root, "data", "__1__.bin")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    entry = data.find(last[1].to_bytes(8, "little"))
    assert 0 < entry < stale[1]                     # the offsets table comes before the chunks
    data[entry:entry + 8] = stale[1].to_bytes(8, "little")
    with open(path, "wb") as f:
        f.write(data)
    want = np.r_[np.arange(249), [-9], np.arange(1000, 1030)]
    r = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(r[:], want)
    r.verify()
    w = blzarr.open(root, mode="a")
    w.append([7])
    w.close()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.r_[want, [7]])


def test_an_assignment_to_the_named_chunk_drops_last_before_its_switch(tmp_path):
    """An assignment's switch is a commit of its own: before it is made (in order, as it also
    rewrites an earlier chunk), meta/sizes loses "last" (durably), so that a crash after the switch
    reads the assigned values; the flush's own meta/sizes names the chunk again."""
    root = str(tmp_path / "c")
    _make(root).close()
    chunks_from = _sizes(root)["last"][1]           # the offsets table lies before every chunk

    def work(rec):
        c = blzarr.open(root, mode="a")
        rec.mark("assign + flush")
        c[5] = -1
        c[249] = -2
        c.flush()
        rec.mark("close")       # (it writes the flush's commit over with the durable mark)
        c.close()
    rec = _record(tmp_path, work)
    names = _names(rec)
    label, i, end = rec.calls()[0]
    seq = []
    for e in rec.log[i:end]:
        name = os.path.basename(names.get(e[1], "")) if e[0] in ("write", "fsync") else ""
        if e[0] == "write" and name == "sizes":
            seq.append("sizes+last" if "last" in json.loads(e[3]) else "sizes")
        elif e[0] == "fsync":
            seq.append("sync " + name)
        elif e[0] == "write" and name.endswith(".bin") and 0 < e[2] < chunks_from:
            seq.append("entry")
    assert seq.index("sizes") < seq.index("entry"), seq
    assert seq[seq.index("sizes") + 1] == "sync sizes", seq
    assert seq[-2:] == ["sizes+last", "sync sizes"], seq
    got = blzarr.open(root, mode="r")[:]
    assert got[5] == -1 and got[249] == -2 and len(got) == 250


def test_compaction_moves_the_named_chunk(tmp_path):
    """Compaction rewrites the file that holds the short last chunk at new offsets: meta/sizes
    stops naming the old one first, and the next flush names the new one."""
    root = str(tmp_path / "c")
    c = _make(root)
    c[0:100] = np.random.default_rng(1).integers(1, 1 << 40, 100)
    c.append(np.arange(7))
    c.flush()
    before = _sizes(root)["last"]
    assert c.compact() > 0
    assert "last" not in _sizes(root)
    c.append([5])
    c.flush()
    assert _sizes(root)["last"][1] < before[1]      # moved down into the reclaimed space
    c.close()
    got = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(got[200:], np.r_[np.arange(200, 250), np.arange(7), [5]])
    got.verify()


def test_sizes_naming_a_chunk_that_never_reached_the_disk_is_reported(tmp_path):
    """A meta/sizes whose "last" names bytes that are not a chunk (what a flush that wrote meta/sizes
    before its sync could leave) raises naming the file, in reads and in verify: never other values."""
    root, _, data1, _, last1 = _states(tmp_path)
    with open(os.path.join(root, "meta", "sizes"), "rb") as f:
        sizes1 = f.read()
    data1[last1[1]:last1[1] + 16 + 80 * 8] = bytes(16 + 80 * 8)
    _put(root, sizes1, data1)
    r = blzarr.open(root, mode="r")
    with pytest.raises(blzarr.BlzarrError, match="__1__.bin"):
        r[:]
    with pytest.raises(blzarr.BlzarrError):
        blzarr.open(root, mode="r").verify()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:200], np.arange(200))   # the rest reads


@pytest.mark.parametrize("last", [["2", 0, 400], [2, 0], [2, 1108, 0], [2, -5, 400], "x", [True, 1108, 400]])
def test_a_malformed_last_is_an_error_naming_meta_sizes(tmp_path, last):
    root = str(tmp_path / "c")
    _make(root).close()
    s = _sizes(root)
    s["last"] = last
    with open(os.path.join(root, "meta", "sizes"), "w") as f:
        json.dump(s, f)
    with pytest.raises(blzarr.FormatError, match="meta.sizes"):
        blzarr.open(root, mode="r")[:]


@pytest.mark.parametrize("last", [[7, 1108, 400], [2, 1108, 8]])
def test_a_last_of_another_length_is_ignored(tmp_path, last):
    """A "last" that names another chunk, or one too short for the length (what a write of
    meta/sizes cut midway leaves: two texts mixed), is read as absent: the offsets table decides."""
    root = str(tmp_path / "c")
    _make(root).close()
    s = _sizes(root)
    s["last"] = last
    with open(os.path.join(root, "meta", "sizes"), "w") as f:
        json.dump(s, f)
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(250))


def test_old_sizes_without_last_still_read_and_gain_it(tmp_path):
    root = str(tmp_path / "c")
    _make(root).close()
    s = _sizes(root)
    del s["last"]
    with open(os.path.join(root, "meta", "sizes"), "w") as f:
        json.dump(s, f)
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.arange(250))
    w = blzarr.open(root, mode="a")
    w.append([1, 2])
    w.close()
    assert _sizes(root)["last"][0] == 2
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.r_[np.arange(250), [1, 2]])


@pytest.mark.slow
def test_crash_states_of_one_sync_flushes(tmp_path):
    """Every tree a power loss could leave during a few one-sync flushes (one superchunk file) opens
    with the values of a completed flush or of the one running, and a writer goes on from it."""
    base = tmp_path / "base"
    base.mkdir()
    root = str(base / "c")
    rec = crashsim.Recorder(str(base))
    states = [np.arange(250)]
    with fileio.use(rec):
        rec.mark("create")
        _make(root, n=250, superchunklen=64).close()
        c = blzarr.open(root, mode="a")
        for k, n in enumerate([30, 5, -40, 170, 0, 40, -20, 0, None, 3]):
            # a trim shrinks the short chunk: its new bytes go into the hole before the committed
            # ones, and the file is cut after them (once meta/sizes no longer names the old bytes);
            # 0: an assignment to an earlier chunk and to the short one, switched in order
            # None: a compaction, which moves the chunk meta/sizes names
            rec.mark("compact" if n is None else f"flush {k}" if n > 0 else f"trim {-n}" if n else "assign + flush")
            if n is None:
                assert c.compact() > 0
            elif n > 0:
                c.append(np.arange(1000 * (k + 1), 1000 * (k + 1) + n))
                c.flush()
            elif n < 0:
                c.trim(-n)
            else:
                c[3] = -k
                c[len(c) - 1] = -k
                c.flush()
            states.append(c[:])
        c.close()
    calls = rec.calls()
    scratch = str(tmp_path / "state")
    distinct = 0
    for st in crashsim.distinct_states(rec, scratch, seed=7):
        distinct += 1
        js = [j for j in crashsim.calls_at(rec, st.kmin, st.kmax) if j >= 0]
        if js == [0] and not os.path.exists(os.path.join(scratch, "c", "meta", "sizes")):
            continue            # the creating call was cut: nothing was promised yet
        got = blzarr.open(os.path.join(scratch, "c"), mode="r")[:]
        # during call j (0: create, k + 1: flush k): the state before it or after it
        allowed = [states[max(j - 1, 0)] for j in js] + [states[j] for j in js]
        assert any(len(got) == len(s) and (got == s).all() for s in allowed), \
            f"state {st.kind} in {[calls[j][0] for j in js]}: {len(got)} atoms"
        with blzarr.defaults_ctx(fsync=False):
            w = blzarr.open(os.path.join(scratch, "c"), mode="a")
            w.append([-1])
            w.close()
        again = blzarr.open(os.path.join(scratch, "c"), mode="r")
        np.testing.assert_array_equal(again[:], np.r_[got, [-1]])
        again.verify()
    assert distinct > 20


@pytest.mark.parametrize("fmt", ["blz", "bcolz"])
def test_a_table_flush_syncs_its_columns_together(tmp_path, fmt):
    """`t.append(row)` (auto_flush) on a table of three columns.  In the bcolz layout the last
    column's meta/sizes, which commits the row, is written after the others' are durable.  In the BLZ
    layout, once every column's meta/sizes is a one-barrier record (which readers check after a power
    loss), the syncs come in one round (a run of syncs with no write between): every column's chunks
    and sizes, the last column's too (tests/test_table_commit.py: the crash states that allows)."""
    root = str(tmp_path / "t")

    def work(rec):
        t = blzarr.ctable([np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)],
                          names=["a", "b", "c"], rootdir=root, mode="w", format=fmt, chunklen=CHUNKLEN)
        for i in range(5):
            rec.mark(f"row {i}")
            t.append((i * 0.5, -i, i))
        rec.mark("close")
        t.close()
    rec = _record(tmp_path, work)
    names = _names(rec)
    for label, i, end in rec.calls()[:-1]:
        rounds, cur = [], None
        for e in rec.log[i:end]:
            if e[0] in ("fsync", "fsyncdir"):
                if cur is None:
                    cur = []
                    rounds.append(cur)
                path = names.get(e[1], f"{root}/(gone {e[1]})") if e[0] == "fsync" else e[1] + "/"
                cur.append(os.path.relpath(path, root))
            elif e[0] in ("write", "trunc", "rename", "link", "unlink"):
                cur = None
        if fmt == "blz":
            if label not in ("row 0", "row 1"):
                # (row 1: the first one-barrier records outgrow their files, replaced through a rename)
                assert len(rounds) == 1, (label, rounds)
                assert sorted(rounds[0]) == sorted([f"{c}/data/__1__.bin" for c in "abc"]
                                                   + [f"{c}/meta/sizes" for c in "abc"]), (label, rounds)
            continue
        # the last column's meta/sizes is written after the other columns' are durable
        commit = max(k for k, e in enumerate(rec.log[i:end])
                     if (e[0] == "write" and names.get(e[1], "").endswith(os.path.join("c", "meta", "sizes")))
                     or (e[0] == "rename" and e[2].endswith(os.path.join("c", "meta", "sizes"))))
        for col in "ab":
            mine = [k for k, e in enumerate(rec.log[i:end]) if e[0] in ("write", "fsync")
                    and names.get(e[1], "").endswith(os.path.join(col, "meta", "sizes"))]
            assert mine and rec.log[i + mine[-1]][0] == "fsync" and mine[-1] < commit, (label, col)
    t = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(t["a"][:], np.arange(5) * 0.5)
    np.testing.assert_array_equal(t["b"][:], -np.arange(5))
    np.testing.assert_array_equal(t["c"][:], np.arange(5))


def _rows_in_child(root):
    t = blzarr.ctable([np.zeros(0), np.zeros(0, dtype=np.int64)], names=["a", "b"], rootdir=root, mode="w")
    for i in range(3):
        t.append((i * 1.0, i))
    t.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_table_flush_in_a_forked_child(tmp_path):
    """The threads a table's flush syncs from are the parent's: a child made by fork makes its own."""
    import multiprocessing
    with blzarr.defaults_ctx(fsync=True):
        _rows_in_child(str(tmp_path / "parent"))        # the parent's sync threads exist now
        p = multiprocessing.get_context("fork").Process(target=_rows_in_child, args=(str(tmp_path / "child"),))
        p.start()
        p.join(120)
        if p.is_alive():
            p.kill()
            pytest.fail("a table's flush hung in a child made by fork")
    assert p.exitcode == 0
    t = blzarr.open(str(tmp_path / "child"), mode="r")
    assert t["b"][:].tolist() == [0, 1, 2] and t["a"][:].tolist() == [0.0, 1.0, 2.0]


# ------------------------------------------------------------------ a reader beside the writer
def _writer_flushes_after_the_readers_sizes(monkeypatch, w, rounds):
    """Make each of the next meta/sizes reads of a reader (mode 'r') be followed at once by the
    writer `w`'s appends and flushes of one of `rounds` (each a list of arrays, one flush each): what
    a writer in another process may do between a reader's meta/sizes read and its read of the chunk
    that file names.  Returns the rounds not run yet."""
    orig = BlzDir.read_meta
    todo = list(rounds)

    def read_meta(self, name):
        out = orig(self, name)
        if name == "sizes" and self.mode == "r" and todo:
            for values in todo.pop(0):
                w.append(values)
                w.flush()
        return out
    monkeypatch.setattr(BlzDir, "read_meta", read_meta)
    return todo


def _bytes_at(path, pos, n):
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(n)


def _rounds(start, rounds):
    """`rounds` of appends (lists of sizes) as consecutive ranges from `start`; and the end."""
    out = []
    for sizes in rounds:
        out.append([])
        for k in sizes:
            out[-1].append(np.arange(start, start + k))
            start += k
    return out, start


@pytest.mark.parametrize("rounds", [
    # the short chunk's third version goes into the hole before the second, over the place named
    [[10, 10]],
    # the same beside the reader's open, then again beside the load of the version that open
    # found stale (its first read call)
    [[10, 10], [10, 10]],
    # the chunk fills, and the next one's short versions take the hole
    [[10, 10], [10, 10], [20, 10, 10]],
    [[10, 10, 10, 10], [10, 10, 10, 10]],
])
def test_a_reader_whose_sizes_named_a_place_the_writer_reused(tmp_path, monkeypatch, rounds):
    """A reader in mode 'r' reads meta/sizes, which names the short last chunk's place; before it
    reads that chunk, the writer (another handle) flushes twice or more, and its second flush writes
    new bytes over that place (free once the first flush's meta/sizes named another).  The reader
    shows one committed version, a prefix of what was written: never an error about the last
    chunk's size, never other values."""
    root = str(tmp_path / "c")
    w = _make(root)
    w.append(np.arange(250, 260))
    w.flush()                               # meta/sizes names the chunk beside a hole before it
    named = _sizes(root)["last"]
    place = os.path.join(root, "data", "__1__.bin")
    before = _bytes_at(place, named[1], 16 + named[2])
    rounds, end = _rounds(260, rounds)
    todo = _writer_flushes_after_the_readers_sizes(monkeypatch, w, rounds)
    r = blzarr.open(root, mode="r")
    assert len(todo) < len(rounds)          # the writer ran in between
    assert _bytes_at(place, named[1], 16 + named[2]) != before     # the place was written over
    got = r[:]
    assert 260 <= len(got) <= end
    np.testing.assert_array_equal(got, np.arange(len(got)))
    assert r[len(got) - 1] == len(got) - 1
    np.testing.assert_array_equal(r[200:len(got)], np.arange(200, len(got)))
    assert not todo
    w.close()
    np.testing.assert_array_equal(r[:], np.arange(end))


@pytest.mark.slow
@pytest.mark.parametrize("order", ["given", "reversed"])
def test_crash_states_of_table_flushes(tmp_path, monkeypatch, order):
    """Every tree a power loss could leave during a table's flushes (its columns' chunks synced
    together with the first column's meta/sizes, a one-barrier record, in either order of the
    barrier's syncs; the short chunks' new versions going into the hole before the committed ones,
    so that the files are cut) opens with the rows of a completed flush or of the one running."""
    base = tmp_path / "base"
    base.mkdir()
    root = str(base / "t")
    rec = crashsim.Recorder(str(base))
    states = [250]
    _barrier_order(monkeypatch, order)
    monkeypatch.setattr(sizes_record, "_boot", sizes_record.boot_id())    # crash_states reboots
    with fileio.use(rec):
        rec.mark("create")
        t = blzarr.ctable([np.arange(250), np.arange(250) * 2.0], names=["a", "b"], rootdir=root, mode="w",
                          chunklen=CHUNKLEN, cparams=CP, format="blz")
        t.close()
        t = blzarr.open(root, mode="a")
        n = 250
        for k in range(6):
            rec.mark(f"flush {k}")
            t.append([np.arange(n, n + 10), np.arange(n, n + 10) * 2.0])
            t.flush()
            n += 10
            states.append(n)
        t.close()
    calls = rec.calls()
    scratch = str(tmp_path / "state")
    distinct = 0
    for st in crashsim.distinct_states(rec, scratch, seed=7):
        distinct += 1
        js = [j for j in crashsim.calls_at(rec, st.kmin, st.kmax) if j >= 0]
        if 0 in js:
            continue            # the creating call was cut: nothing was promised yet
        got = blzarr.open(os.path.join(scratch, "t"), mode="r")[:]
        allowed = [states[j - 1] for j in js] + [states[j] for j in js]
        assert len(got) in allowed, f"state {st.kind} in {[calls[j][0] for j in js]}: {len(got)} rows"
        np.testing.assert_array_equal(got["a"], np.arange(len(got)))
        np.testing.assert_array_equal(got["b"], np.arange(len(got)) * 2.0)
    assert distinct > 20


# ------------------------------------------------------------------ one barrier: chunk and meta/sizes
def _barrier_order(monkeypatch, order):
    """The crash simulator makes a barrier's syncs one after the other in the order given: 'given'
    (superchunk file, then meta/sizes) keeps the states where the chunk is durable and meta/sizes is
    not; 'reversed' the states where meta/sizes is durable and its chunk is not."""
    if order == "reversed":
        orig = files._sync_all          # (every barrier goes through it: sync_together, one_barrier)
        monkeypatch.setattr(files, "_sync_all", lambda items, dirs=(): orig(list(items)[::-1], dirs))


def _growing_flushes(base, monkeypatch, order, steps, superchunklen=64):
    """`steps`: appends + flushes (> 0 atoms) and trims (< 0); of the appends, those that rewrite the
    short last chunk (and may fill it and add chunks after it, in its superchunk file) make one
    barrier each; (recorder, the values after each call)."""
    root = str(base / "c")
    rec = crashsim.Recorder(str(base))
    states = [np.arange(250)]
    _barrier_order(monkeypatch, order)
    with fileio.use(rec):
        rec.mark("create")
        _make(root, n=250, superchunklen=superchunklen).close()
        c = blzarr.open(root, mode="a")
        for k, n in enumerate(steps):
            rec.mark(f"flush {k} ({n})")
            if n > 0:
                c.append(np.arange(1000 * (k + 1), 1000 * (k + 1) + n))
                c.flush()
            else:
                c.trim(-n)
            states.append(c[:])
        rec.mark("close")       # (writes the last record over as plain text, not synced)
        c.close()
        states.append(states[-1])
    monkeypatch.undo()
    return rec, states


@pytest.mark.parametrize("order, steps, superchunklen", [
    # a flush that fills the short chunk and writes the next one short, then one within the chunk
    ("given", [60, 5], 64),
    ("reversed", [60, 5], 64),
    # flushes within the chunk, one that fills it, one within the next, a trim, one more
    pytest.param("given", [10, 20, 5, 60, 15, -10, 7], 64, marks=pytest.mark.slow),
    pytest.param("reversed", [10, 20, 5, 60, 15, -10, 7], 64, marks=pytest.mark.slow),
    # one that fills the short chunk and starts a new superchunk file (ordered syncs), one after it
    pytest.param("reversed", [60, 5], 3, marks=pytest.mark.slow),
])
def test_crash_states_of_one_barrier_flushes(tmp_path, monkeypatch, order, steps, superchunklen):
    """Every tree a power loss could leave during flushes that sync the short chunk (and the chunks
    after it, when the flush fills it) and meta/sizes in one barrier, in either order of the
    barrier's syncs, read after a reboot (`crashsim.reboot`): the values of the completed flush or of
    the one running; a writer's open goes on from there, and the reader after it agrees."""
    base = tmp_path / "base"
    base.mkdir()
    rec, states = _growing_flushes(base, monkeypatch, order, steps, superchunklen)
    calls = rec.calls()
    monkeypatch.setattr(sizes_record, "_boot", sizes_record.boot_id())    # crash_states reboots
    scratch = str(tmp_path / "state")
    root = os.path.join(scratch, "c")
    names = _names(rec)
    filling = [e for e in rec.log if e[0] == "write" and os.path.basename(names.get(e[1], "")) == "sizes"
               and "more" in json.loads(e[3])]
    # the flush that fills the chunk wrote a record naming it, unless it started a new file
    assert bool(filling) == (superchunklen == 64)
    distinct = fell_back = fell_back_filled = 0
    for st in crashsim.distinct_states(rec, scratch, seed=3):
        js = [j for j in crashsim.calls_at(rec, st.kmin, st.kmax) if j >= 0]
        if 0 in js:
            continue            # the creating call was cut: nothing was promised yet
        distinct += 1
        raw = _sizes(root)
        got = blzarr.open(root, mode="r")[:]
        allowed = [states[j - 1] for j in js] + [states[j] for j in js]
        assert any(len(got) == len(s) and (got == s).all() for s in allowed), \
            f"state {st.kind} in {[calls[j][0] for j in js]}: {len(got)} atoms"
        if "prev" in raw and len(got) == raw["prev"][0] != raw["shape"][0]:
            fell_back += 1
            fell_back_filled += "more" in raw
        with blzarr.defaults_ctx(fsync=False):
            w = blzarr.open(root, mode="a")
            np.testing.assert_array_equal(w[:], got)
            w.append([-1])
            w.close()
        again = blzarr.open(root, mode="r")
        np.testing.assert_array_equal(again[:], np.r_[got, [-1]])
        again.verify()
    assert distinct > 20
    if order == "reversed" or len(steps) > 2:
        assert fell_back > 0        # meta/sizes durable without its chunk: read as its "prev"
    if order == "reversed" and filling:
        assert fell_back_filled > 0     # ... also a record naming the chunks of a filling flush


def _lose_named_chunk(root, rec):
    """The chunk the record names never reached the disk (zeros where it was written)."""
    path = os.path.join(root, "data", "__1__.bin")
    with open(path, "r+b") as f:
        f.seek(rec["last"][1])
        f.write(bytes(16 + rec["last"][2]))


def test_a_record_of_another_boot_whose_chunk_is_lost_reads_as_prev(tmp_path, monkeypatch):
    """After a reboot, a one-barrier meta/sizes whose chunk did not reach the disk is read as its
    "prev" (the flush before it): by a reader, which writes nothing, and by a writer, whose first
    write writes that commit down (durably) before its own writes."""
    root, _, _, _, _ = _states(tmp_path)
    with open(os.path.join(root, "meta", "sizes"), "rb") as f:
        raw = f.read()
    rec = json.loads(raw)
    assert rec["shape"] == [280] and rec["prev"][0] == 250 and rec["boot"] == sizes_record.boot_id()
    _lose_named_chunk(root, rec)
    # in the boot that wrote it the record is taken as it is: the lost chunk is reported, not read
    with pytest.raises(blzarr.BlzarrError, match="__1__.bin"):
        blzarr.open(root, mode="r")[:]
    monkeypatch.setattr(sizes_record, "_boot", "%016x" % (int(rec["boot"], 16) ^ 1))
    r = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(r[:], np.arange(250))
    assert r[-1] == 249
    r.verify()
    with open(os.path.join(root, "meta", "sizes"), "rb") as f:
        assert f.read() == raw                      # mode 'r' never writes

    def work(log):
        w = blzarr.open(root, mode="a")
        np.testing.assert_array_equal(w[:], np.arange(250))
        with open(os.path.join(root, "meta", "sizes"), "rb") as f:
            assert f.read() == raw                  # mode 'a' writes nothing before its first write
        log.mark("append")
        w.append([-5, -6])
        now = _sizes(root)
        assert now["shape"] == [250] and now["last"] == rec["prev"][1:] and "prev" not in now
        w.close()
    log = _record(tmp_path, work)
    names = _names(log)
    seq = [(e[0], os.path.basename(names.get(e[1], "?"))) for e in log.log[log.calls()[0][1]:]
           if e[0] in ("write", "fsync")]
    first_data = min(k for k, (_, name) in enumerate(seq) if name == "__1__.bin")
    assert ("fsync", "sizes") in seq[:first_data], seq        # written down durably, first
    again = blzarr.open(root, mode="r")
    np.testing.assert_array_equal(again[:], np.r_[np.arange(250), [-5, -6]])
    again.verify()


def test_a_record_of_another_boot_whose_chunk_is_there_reads_as_written(tmp_path, monkeypatch):
    root, _, _, _, _ = _states(tmp_path)
    with open(os.path.join(root, "meta", "sizes"), "rb") as f:
        raw = f.read()
    monkeypatch.setattr(sizes_record, "_boot", "%016x" % (int(json.loads(raw)["boot"], 16) ^ 1))
    want = np.r_[np.arange(250), np.arange(1000, 1030)]
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], want)
    w = blzarr.open(root, mode="a")
    np.testing.assert_array_equal(w[:], want)
    w.close()
    with open(os.path.join(root, "meta", "sizes"), "rb") as f:
        assert f.read() == raw                      # nothing to write down


@pytest.mark.parametrize("prev", [None, [250, 2], ["250", 2, 2392, 400], [250, 2, -1, 400]])
def test_a_malformed_prev_of_a_lost_chunk_is_an_error_naming_meta_sizes(tmp_path, monkeypatch, prev):
    root, _, _, _, _ = _states(tmp_path)
    rec = _sizes(root)
    _lose_named_chunk(root, rec)
    rec["prev"] = prev
    with open(os.path.join(root, "meta", "sizes"), "w") as f:
        json.dump(rec, f)
    monkeypatch.setattr(sizes_record, "_boot", "%016x" % (int(rec["boot"], 16) ^ 1))
    with pytest.raises(blzarr.FormatError, match="meta.sizes"):
        blzarr.open(root, mode="r")[:]


def test_close_writes_the_last_record_as_plain_text(tmp_path, monkeypatch):
    """close() writes the one-barrier record its last flush committed over with the same commit
    without the record's keys (in place, no sync: both texts are durable commits of one state by
    then), so that a reader after a reboot no longer checks the record's chunks at every open."""
    root = str(tmp_path / "c")
    _make(root).close()
    path = os.path.join(root, "meta", "sizes")
    c = blzarr.open(root, mode="a")
    c.append(np.arange(60))             # fills chunk 2, chunk 3 short
    c.flush()
    rec = _sizes(root)
    assert "prev" in rec and [m[0] for m in rec["more"]] == [2] and rec["last"][0] == 3
    checked = []
    orig = BlzDir._chunk_matches

    def spy(self, n, *args):
        checked.append(n)
        return orig(self, n, *args)
    monkeypatch.setattr(BlzDir, "_chunk_matches", spy)
    monkeypatch.setattr(sizes_record, "_boot", "%016x" % (int(rec["boot"], 16) ^ 1))    # a reboot
    want = np.r_[np.arange(250), np.arange(60)]
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], want)
    assert sorted(set(checked)) == [2, 3]           # the record's chunks were checked
    ino = os.stat(path).st_ino

    def work(log):
        log.mark("close")
        c.close()
    log = _record(tmp_path, work)
    names = _names(log)
    ops = [(e[0], os.path.basename(names.get(e[1], "?"))) for e in log.log if e[0] in ("write", "fsync")]
    assert ops == [("write", "sizes")], ops
    assert os.stat(path).st_ino == ino
    # (with the durable mark: the record was synced with its chunks before close)
    assert _sizes(root) == dict({k: v for k, v in rec.items() if k not in sizes_record.KEYS},
                                **{sizes_record.DURABLE: True})
    checked.clear()
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], want)
    assert checked == []


def test_without_a_boot_id_a_flush_keeps_its_ordered_syncs(tmp_path, monkeypatch):
    """Where the boot cannot be told, every reader would have to check the chunk: the flush writes
    no record and syncs the chunk before meta/sizes; a record found there is checked."""
    root = str(tmp_path / "c")
    _make(root).close()
    monkeypatch.setattr(sizes_record, "_boot", "")

    def work(rec):
        c = blzarr.open(root, mode="a")
        rec.mark("append+flush")
        c.append(np.arange(10))
        c.flush()
        c.close()
    rec = _record(tmp_path, work)
    _, i, end = rec.calls()[0]
    # (no round of the writer's open: the creation's meta/sizes is marked durable)
    assert _rounds_of(rec, _names(rec), i, end) == [["__1__.bin"], ["sizes"]]
    assert "prev" not in _sizes(root)
    np.testing.assert_array_equal(blzarr.open(root, mode="r")[:], np.r_[np.arange(250), np.arange(10)])


@pytest.mark.slow
def test_a_writer_after_a_killed_one_barrier_flush(tmp_path, monkeypatch):
    """A writer killed inside a one-barrier flush (its chunk and its record written, not synced), and
    a second writer of the same boot that opens the directory and flushes: every tree a power loss
    could leave opens after a reboot with the values of a flush of either writer (the second's
    state starts from the first's record, which it must make durable before it reuses the space of
    that record's "prev")."""
    base = tmp_path / "base"
    base.mkdir()
    root = str(base / "c")
    rec = crashsim.Recorder(str(base))
    monkeypatch.setattr(sizes_record, "_boot", sizes_record.boot_id())    # crash_states reboots
    states = [np.arange(250)]
    with fileio.use(rec):
        rec.mark("create")
        _make(root, n=250, superchunklen=64).close()
        a = blzarr.open(root, mode="a")
        for k, n in enumerate([10, 10]):
            rec.mark(f"flush {k}")
            a.append(np.arange(1000 * (k + 1), 1000 * (k + 1) + n))
            a.flush()
            states.append(a[:])
        rec.mark("killed flush")
        a.append(np.arange(5000, 5010))
        orig = files._sync_all

        class Killed(BaseException):
            pass

        def killed(items, dirs=()):
            raise Killed()          # the process dies before its barrier's syncs
        monkeypatch.setattr(files, "_sync_all", killed)
        want = a[:]
        with pytest.raises(Killed):
            a.flush()
        monkeypatch.setattr(files, "_sync_all", orig)
        states.append(want)
        leave_as_killed(a)
        del a
        write_after(rec, root, [10, 10, 10], states)
    calls = rec.calls()
    scratch = str(tmp_path / "state")
    root = os.path.join(scratch, "c")
    distinct = 0
    for st in crashsim.distinct_states(rec, scratch, seed=5):
        js = [j for j in crashsim.calls_at(rec, st.kmin, st.kmax) if j >= 0]
        if 0 in js:
            continue
        distinct += 1
        got = blzarr.open(root, mode="r")[:]
        # a killed flush promised nothing: its state or the one before it, for any later point
        allowed = [states[j - 1] for j in js] + [states[j] for j in js] + [states[2], states[3]]
        assert any(len(got) == len(s) and (got == s).all() for s in allowed), \
            f"state {st.kind} in {[calls[j][0] for j in js]}: {len(got)} atoms"
    assert distinct > 20
