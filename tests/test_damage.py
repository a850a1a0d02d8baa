"""Damage stays where it is: a missing, truncated or garbled superchunk file (the first, one in the
middle, the last) affects only its own chunks, in reads (modes 'r' and 'a'), appends, `verify` (API
and CLI) and salvage (`blzarr.salvage`, `blzarr convert --salvage`)."""

import io
import os

import numpy as np
import pytest

import blzarr
from blzarr.cli import main as cli_main

K, CL, NFILES = 4, 500, 5
N = K * CL * NFILES
WHICH = {"first": 1, "middle": 3, "last": NFILES}


def _make(root):
    x = np.random.default_rng(3).integers(0, 1 << 40, N)
    c = blzarr.carray(x, rootdir=root, mode="w", chunklen=CL, superchunklen=K, format="blz")
    c.close()
    return x


def _damage(root, fno, how):
    path = os.path.join(root, "data", f"__{fno}__.bin")
    if how == "missing":
        os.remove(path)
        return
    size = os.path.getsize(path)
    if how == "truncated":
        os.truncate(path, size - size // 3)        # the last chunks of the file are cut
    else:
        with open(path, "r+b") as f:                # bytes in the middle of the chunk area
            f.seek(size * 2 // 3)
            raw = bytearray(f.read(64))
            f.seek(size * 2 // 3)
            f.write(bytes(b ^ 0x5A for b in raw))


def _snapshot(root):
    """{path: bytes} of every file under root."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.join(d, n)] = f.read()
    return out


def _chunk_reads(c, x, fno):
    """Read every chunk; return the chunks that raised (each error checked to name the file, the
    chunk and its rows); every other chunk must hold its values."""
    bad = []
    for k in range(N // CL):         # the chunks of the damaged directory (appended ones aside)
        a, b = k * CL, (k + 1) * CL
        try:
            got = c[a:b]
        except (blzarr.BlzarrError, OSError) as e:
            msg = str(e)
            assert f"__{fno}__.bin" in msg and f"chunk {k}" in msg and f"rows {a}-{b - 1}" in msg, msg
            bad.append(k)
            continue
        np.testing.assert_array_equal(got, x[a:b], err_msg=f"chunk {k}")
    assert bad, "the damage was not seen"
    assert all(k // K + 1 == fno for k in bad), bad        # only the damaged file's chunks
    return bad


@pytest.mark.parametrize("how", ["missing", "truncated", "garbled"])
@pytest.mark.parametrize("which", sorted(WHICH))
def test_damage_stays_in_its_file(tmp_path, which, how):
    root = str(tmp_path / "c")
    x = _make(root)
    fno = WHICH[which]
    _damage(root, fno, how)
    bad = _chunk_reads(blzarr.open(root, mode="r"), x, fno)
    if how == "missing":
        assert bad == list(range((fno - 1) * K, fno * K))
    # where() over the damage raises naming the file too
    with pytest.raises((blzarr.BlzarrError, OSError), match=rf"__{fno}__\.bin"):
        list(blzarr.open(root, mode="r").where(np.ones(N, bool)))
    # scalars outside the damaged file, lazily
    for i in [0, N // 2, N - 1]:
        if i // CL not in bad:
            assert blzarr.open(root, mode="r")[i] == x[i]

    # mode 'a': the same; appends go on, except where they would go to a damaged last file (a
    # missing one, or one whose counted chunks run past its end): then they are refused, naming
    # the file and saying to salvage, and nothing changes
    c = blzarr.open(root, mode="a")
    assert _chunk_reads(c, x, fno) == bad
    more = np.arange(700)
    if which == "last" and how != "garbled":
        before = _snapshot(root)
        with pytest.raises(blzarr.FormatError, match=rf"__{fno}__\.bin.*salvage") as ei:
            c.append(more)
            c.flush()
        assert "cannot write chunk" in str(ei.value)
        assert len(c) == N
        c.close()
        assert _snapshot(root) == before
        more = np.arange(0)
    else:
        c.append(more)
        c.flush()
        c.close()
    r = blzarr.open(root, mode="r")
    assert len(r) == N + len(more)
    np.testing.assert_array_equal(r[N:], more)
    assert _chunk_reads(r, x, fno) == bad

    # verify lists every damaged range, API and CLI
    with pytest.raises(blzarr.BlzarrError) as ei:
        blzarr.open(root, mode="r").verify()
    ranges = ei.value.damaged
    listed = sorted({k for a, b, _ in ranges for k in range(a, b + 1)})
    assert listed == bad, (ranges, bad)
    out = io.StringIO()
    assert cli_main(["verify", root], out=out) == 1
    assert f"__{fno}__.bin" in out.getvalue() and "DAMAGED" in out.getvalue()

    # salvage: everything readable copied, the rest reported
    dst = str(tmp_path / "saved")
    report = blzarr.salvage(root, dst)
    lost = sorted({r // CL for a, b, _, _ in report["lost"] for r in range(a, b)})
    assert lost == bad
    saved = blzarr.open(dst, mode="r")[:]
    keep = np.ones(len(saved), dtype=bool)
    for k in bad:
        keep[k * CL:(k + 1) * CL] = False
    np.testing.assert_array_equal(saved[keep], np.concatenate([x, more])[keep])
    out = io.StringIO()
    assert cli_main(["convert", "--salvage", root, str(tmp_path / "saved2")], out=out) == 1
    assert "LOST rows" in out.getvalue() and f"{len(bad) * CL} rows lost" in out.getvalue()


def test_bcolz_layout_truncated_chunk_file_stays_local(tmp_path):
    """The bcolz layout keeps its behaviour: a truncated chunk file fails only its own chunk."""
    root = str(tmp_path / "c")
    x = np.random.default_rng(4).integers(0, 1 << 40, 4000)
    blzarr.carray(x, rootdir=root, mode="w", chunklen=CL, format="bcolz").close()
    path = os.path.join(root, "data", "__3.blp")
    os.truncate(path, os.path.getsize(path) // 2)
    c = blzarr.open(root, mode="r")
    with pytest.raises(blzarr.BlzarrError, match="__3.blp"):
        c[3 * CL:4 * CL]
    with pytest.raises(blzarr.BlzarrError, match="__3.blp"):
        list(c.where(np.ones(len(x), bool)))
    np.testing.assert_array_equal(c[:3 * CL], x[:3 * CL])
    np.testing.assert_array_equal(c[4 * CL:], x[4 * CL:])


@pytest.mark.parametrize("how", ["missing", "truncated", "garbled"])
def test_damaged_short_last_chunk(tmp_path, how):
    """The file holding the flushed short last chunk is damaged: the array opens (modes 'r' and 'a'),
    the intact rows read, every read touching the short chunk raises naming the file, the chunk and
    its rows, writes are refused (naming it, saying to salvage), verify lists it, salvage copies the
    rest."""
    root = str(tmp_path / "c")
    n = K * CL * 2 + 2 * CL + 250                    # file 3: two full chunks and a short one (chunk 10)
    x = np.random.default_rng(5).integers(0, 1 << 40, n)
    blzarr.carray(x, rootdir=root, mode="w", chunklen=CL, superchunklen=K, format="blz").close()
    path = os.path.join(root, "data", "__3__.bin")
    if how == "missing":
        os.remove(path)
        bad_chunks = [8, 9, 10]
    elif how == "truncated":
        os.truncate(path, os.path.getsize(path) - 100)
        bad_chunks = [10]
    else:
        size = os.path.getsize(path)
        with open(path, "r+b") as f:                    # inside the short chunk's compressed body
            f.seek(size - 200)
            raw = f.read(64)
            f.seek(size - 200)
            f.write(bytes(b ^ 0x5A for b in raw))
        bad_chunks = [10]
    last = 10 * CL
    for mode in ("r", "a"):
        c = blzarr.open(root, mode=mode)
        assert len(c) == n
        good = bad_chunks[0] * CL
        np.testing.assert_array_equal(c[:good], x[:good])
        assert c[good - 1] == x[good - 1]
        for key in [slice(last, n), slice(last + 10, last + 11), n - 1, slice(good - 5, n), [0, n - 2]]:
            with pytest.raises(blzarr.BlzarrError) as ei:
                c[key]
            msg = str(ei.value)
            assert "__3__.bin" in msg and "chunk" in msg and "rows" in msg, msg
        with pytest.raises(blzarr.BlzarrError):
            c[:]
        if mode == "a":
            before = _snapshot(root)
            with pytest.raises(blzarr.FormatError, match=r"__3__\.bin.*salvage"):
                c.append(np.arange(10))
            with pytest.raises(blzarr.FormatError, match="salvage"):
                c[0] = 5
            assert len(c) == n
            c.close()
            assert _snapshot(root) == before
    with pytest.raises(blzarr.BlzarrError) as ei:
        blzarr.open(root, mode="r").verify()
    listed = sorted({k for a, b, _ in ei.value.damaged for k in range(a, b + 1)})
    assert listed == bad_chunks, ei.value.damaged
    report = blzarr.salvage(root, str(tmp_path / "saved"))
    assert sorted({r // CL for a, b, _, _ in report["lost"] for r in range(a, b)}) == bad_chunks
    saved = blzarr.open(str(tmp_path / "saved"), mode="r")
    assert len(saved) == n
    good = bad_chunks[0] * CL
    np.testing.assert_array_equal(saved[:good], x[:good])


def test_bcolz_layout_damaged_short_last_chunk_opens(tmp_path):
    """The bcolz layout: a truncated file of the short last chunk does not stop the array from
    opening; its rows raise (naming the file), the others read, writes are refused."""
    root = str(tmp_path / "c")
    x = np.random.default_rng(6).integers(0, 1 << 40, 3 * CL + 123)
    blzarr.carray(x, rootdir=root, mode="w", chunklen=CL, format="bcolz").close()
    path = os.path.join(root, "data", "__3.blp")
    os.truncate(path, os.path.getsize(path) // 2)
    for mode in ("r", "a"):
        c = blzarr.open(root, mode=mode)
        assert len(c) == len(x)
        np.testing.assert_array_equal(c[:3 * CL], x[:3 * CL])
        with pytest.raises(blzarr.BlzarrError, match="__3.blp"):
            c[3 * CL + 5]
        with pytest.raises(blzarr.BlzarrError, match="__3.blp"):
            c[-10:]
        if mode == "a":
            with pytest.raises(blzarr.FormatError, match="salvage"):
                c.append(np.arange(5))
            assert len(c) == len(x)
