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
    # scalars outside the damaged file, lazily
    for i in [0, N // 2, N - 1]:
        if i // CL not in bad:
            assert blzarr.open(root, mode="r")[i] == x[i]

    # mode 'a': the same, and appends go on
    c = blzarr.open(root, mode="a")
    assert _chunk_reads(c, x, fno) == bad
    more = np.arange(700)
    c.append(more)
    c.flush()
    c.close()
    r = blzarr.open(root, mode="r")
    assert len(r) == N + 700
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
    np.testing.assert_array_equal(c[:3 * CL], x[:3 * CL])
    np.testing.assert_array_equal(c[4 * CL:], x[4 * CL:])
