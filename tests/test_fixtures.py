"""Directories written by the real bcolz (tests/fixtures/bcolz/, made by tests/make_fixtures.py),
the exact bytes blzarr writes in the bcolz 1.x layout, and corrupted directories.

The fixture tests need no bcolz: the expected values are rebuilt here, independently of the generator.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import blzarr
from helpers import assert_same
from blzarr import _chunk
from blzarr.errors import BlzarrError, PickleNotAllowedError, ReadOnlyError

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "bcolz")

# name -> (expected values, chunklen, (clevel, shuffle, cname), attrs)
OBJECTS = [1, "two", None, [3, {"four": 4.0}], (5, b"six"), 7.25]
EXPECTED = {
    "int64_leftover": (np.arange(-500, 2500, 3, dtype="i8"), 128, (5, 1, "lz4"), {}),
    "float64_2d": ((np.arange(600) / 7.0).reshape(200, 3), 64, (5, 1, "blosclz"), {}),
    "int16_3d": ((np.arange(120, dtype="i2") * 37 - 1000).reshape(30, 2, 2), 8, (4, 1, "lz4"), {}),
    "unicode": (np.array(["\u015dtr-%d" % i for i in range(150)], dtype="U8"), 40, (3, 1, "zlib"), {}),
    "bytes": (np.array([b"k%04d" % (i * 7) for i in range(90)], dtype="S6"), 32, (5, 0, "lz4"), {}),
    "lz4hc_bitshuffle": (np.arange(500, dtype="i4") % 37, 100, (6, 2, "lz4hc"), {}),
    "zstd_noshuffle": ((np.arange(700) * 13 % 65536).astype("u2"), 256, (9, 0, "zstd"), {}),
    "bool": (np.arange(300) % 3 == 0, 64, (5, 1, "lz4"), {}),
    "datetime64ns": (np.datetime64("2016-01-01T00:00:00", "ns") + np.arange(200) * np.timedelta64(1, "D"),
                     50, (5, 1, "zstd"), {}),
    "float32_attrs": (np.arange(50, dtype="f4") * 0.5, 16, (5, 1, "lz4"),
                      {"temp": 22.5, "pressure": 999.2, "timestamp": "2016030915", "tags": ["a", "b"],
                       "nested": {"k": None, "ok": True}}),
    "int8_chunklen1": (np.arange(-2, 3, dtype="i1"), 1, (1, 0, "blosclz"), {}),
    "empty_int32": (np.zeros(0, dtype="i4"), 16, (5, 1, "lz4"), {}),
    "objects": (np.array(OBJECTS + [0], dtype=object)[:-1], 4, (5, 1, "lz4"), {}),
}


def fixture(name):
    return os.path.join(FIXTURES, name)


def copy_fixture(name, tmp_path):
    dst = str(tmp_path / name)
    shutil.copytree(fixture(name), dst)
    return dst


def test_fixtures_are_small_and_complete():
    assert sorted(os.listdir(FIXTURES)) == sorted(EXPECTED)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(FIXTURES) for f in fs)
    assert total < 200 * 1024


# ---------------------------------------------------------------- opening what bcolz wrote

@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_open_fixture(name):
    expected, chunklen, (clevel, shuffle, cname), attrs = EXPECTED[name]
    kw = {"allow_pickle": True} if expected.dtype.kind == "O" else {}
    a = blzarr.open(fixture(name), mode="r", **kw)
    assert a.shape == expected.shape
    assert a.dtype == expected.dtype
    assert a.chunklen == chunklen
    assert (a.cparams.clevel, a.cparams.shuffle, a.cparams.cname) == (clevel, shuffle, cname)
    assert a.attrs.getall() == attrs
    assert_same(a[:], expected)
    n = len(expected)
    if expected.dtype.kind != "O":
        assert a.nchunks == n // chunklen
        assert a.nleftover == n % chunklen
    for i in sorted({0, n // 2, n - 1, chunklen - 1, chunklen}):
        if 0 <= i < n:
            got = a[i]
            if expected.dtype.kind == "O":
                assert got == expected[i]
            else:
                assert_same(np.asarray([got], dtype=expected.dtype), expected[i:i + 1])
    assert_same(a[n // 3:n - 1:7], expected[n // 3:n - 1:7])
    assert_same(a[::-5], expected[::-5])


def test_fixture_dflt_and_resize(tmp_path):
    a = blzarr.open(copy_fixture("float32_attrs", tmp_path))
    assert a.dflt == np.float32(-1.5)
    a.resize(53)
    a.flush()
    expected = np.concatenate([EXPECTED["float32_attrs"][0], np.full(3, -1.5, dtype="f4")])
    assert_same(blzarr.open(a.rootdir, mode="r")[:], expected)


def test_old_style_meta(tmp_path):
    """The storage file of the format document's example: shuffle as a JSON bool, no cname/quantize."""
    path = copy_fixture("int64_leftover", tmp_path)
    with open(os.path.join(path, "meta", "storage"), "w") as f:
        f.write('{"dtype": "int64", "cparams": {"shuffle": true, "clevel": 5}, "chunklen": 128, '
                '"dflt": 0, "expectedlen": 100000}\n')
    with open(os.path.join(path, "meta", "sizes"), "w") as f:
        f.write('{"shape": [1000], "nbytes": 8000, "cbytes": 1}\n')
    os.remove(os.path.join(path, "__attrs__"))
    a = blzarr.open(path)
    assert (a.cparams.clevel, a.cparams.shuffle) == (5, 1)
    assert a.attrs.getall() == {}
    assert_same(a[:], EXPECTED["int64_leftover"][0])
    a.append([1, 2])
    a.flush()
    assert_same(blzarr.open(path, mode="r")[-3:], np.array([2497, 1, 2], dtype="i8"))


def test_fixture_objects_need_opt_in():
    with pytest.raises(PickleNotAllowedError, match="allow_pickle=True") as info:
        blzarr.open(fixture("objects"))
    assert "objects" in str(info.value)


def test_fixture_read_only_mode_writes_nothing():
    before = {os.path.join(d, f): open(os.path.join(d, f), "rb").read()
              for d, _, fs in os.walk(FIXTURES) for f in fs}
    a = blzarr.open(fixture("int64_leftover"), mode="r")
    with pytest.raises(ReadOnlyError):
        a.append([1, 2, 3])
    with pytest.raises(ReadOnlyError):
        a[0] = 5
    with pytest.raises(ReadOnlyError):
        a.attrs["x"] = 1
    with pytest.raises(ReadOnlyError):
        a.resize(5)
    with pytest.raises(ReadOnlyError):
        a.trim(1)
    with pytest.raises(ReadOnlyError):
        a[[1, 2]] = 0
    b = blzarr.open(fixture("float32_attrs"), mode="r")
    with pytest.raises(ReadOnlyError):
        del b.attrs["temp"]
    assert b.attrs["temp"] == 22.5
    a.flush()
    b.flush()
    after = {os.path.join(d, f): open(os.path.join(d, f), "rb").read()
             for d, _, fs in os.walk(FIXTURES) for f in fs}
    assert after == before


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_flush_without_changes_keeps_every_byte(tmp_path, name):
    path = copy_fixture(name, tmp_path)
    kw = {"allow_pickle": True} if name == "objects" else {}
    with blzarr.open(path, **kw) as a:
        a[:]
    a.flush()
    assert _all_files(path) == _all_files(fixture(name))


@pytest.mark.parametrize("name", ["int64_leftover", "float64_2d", "unicode", "lz4hc_bitshuffle",
                                  "empty_int32", "int8_chunklen1"])
def test_append_to_fixture_copy(tmp_path, name):
    expected = EXPECTED[name][0]
    path = copy_fixture(name, tmp_path)
    a = blzarr.open(path)
    extra = expected[:37] if len(expected) else np.arange(37, dtype=expected.dtype)
    a.append(extra)
    a.flush()
    full = np.concatenate([expected, extra])
    assert_same(blzarr.open(path, mode="r")[:], full)
    # the layout stays bcolz's: the chunk files are exactly the ones the length calls for
    chunklen = EXPECTED[name][1]
    nfiles = -(-len(full) // chunklen)
    assert sorted(os.listdir(os.path.join(path, "data"))) == sorted(f"__{i}.blp" for i in range(nfiles))


# ---------------------------------------------------------------- blzarr writes what bcolz writes

def _all_files(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_blzarr_writes_the_files_bcolz_wrote(tmp_path, name):
    """Same data and parameters: the same files; meta files and 'blpk' headers equal byte for byte.

    The Blosc chunks differ on purpose (blzarr writes whole 16 KB blocks, bcolz split 64-512 KB
    ones): they must agree on every header field but the block layout, and decode to the same values.
    """
    expected, chunklen, (clevel, shuffle, cname), attrs = EXPECTED[name]
    kw = {"dflt": -1.5} if name == "float32_attrs" else {}
    a = blzarr.carray(expected, rootdir=str(tmp_path / name), mode="w", format="bcolz", chunklen=chunklen,
                      cparams=blzarr.cparams(clevel=clevel, shuffle=shuffle, cname=cname), **kw)
    for k, v in attrs.items():
        a.attrs[k] = v
    a.flush()
    mine, theirs = _all_files(str(tmp_path / name)), _all_files(fixture(name))
    # blzarr adds meta/stats (per-chunk statistics, a file bcolz ignores) where there are full chunks
    stats = os.path.join("meta", "stats")
    assert (stats in mine) == (expected.ndim == 1 and expected.dtype.kind in "biufmM"
                               and len(expected) >= chunklen), name
    mine.pop(stats, None)
    # and the commit record meta/commit, another file bcolz ignores (docs/FORMAT.rst)
    assert mine.pop(os.path.join("meta", "commit"))[:8] == b"blzcmt\x01\x00"
    assert sorted(mine) == sorted(theirs)
    for rel in theirs:
        if rel == os.path.join("meta", "sizes"):
            # cbytes counts the chunks' compressed bytes, which differ; shape and nbytes may not
            sm, st = json.loads(mine[rel]), json.loads(theirs[rel])
            assert sorted(sm) == sorted(st) and sm["shape"] == st["shape"] and sm["nbytes"] == st["nbytes"]
            continue
        if not rel.startswith("data"):
            assert mine[rel] == theirs[rel], rel
            continue
        assert mine[rel][:16] == theirs[rel][:16], rel                      # the 'blpk' header
        hm, ht = _chunk.header(mine[rel][16:]), _chunk.header(theirs[rel][16:])
        for field in ("version", "typesize", "nbytes", "codec", "shuffle"):
            assert hm[field] == ht[field], (rel, field)
        assert hm["memcpyed"] or hm["flags"] & 0x10, rel                     # whole blocks, never split
        got, want = np.empty(hm["nbytes"], "u1"), np.empty(ht["nbytes"], "u1")
        _chunk.decompress_into(mine[rel][16:], got)
        _chunk.decompress_into(theirs[rel][16:], want)
        assert got.tobytes() == want.tobytes(), rel
    assert_same(blzarr.open(str(tmp_path / name), mode="r", allow_pickle=True)[:], expected)


def test_make_fixtures_regenerates_the_same_bytes(tmp_path):
    pytest.importorskip("bcolz")
    sys.path.insert(0, HERE)
    try:
        import make_fixtures
    finally:
        sys.path.remove(HERE)
    assert sorted(make_fixtures.FIXTURES) == sorted(EXPECTED)
    out = make_fixtures.generate(str(tmp_path / "regen"))
    for name in EXPECTED:
        assert _all_files(os.path.join(out, name)) == _all_files(fixture(name)), name


# ---------------------------------------------------------------- the exact bytes of a tiny carray

BLPK_HEADER = b"blpk" + bytes([1, 0, 0, 0]) + struct.pack("<q", 1)


def test_pinned_bytes_memcpyed(tmp_path):
    """clevel=0: the Blosc chunk stores the values raw, so every byte is known in advance."""
    root = tmp_path / "tiny"
    a = blzarr.carray(np.arange(6, dtype="<i4") - 2, rootdir=str(root), mode="w", format="bcolz",
                      chunklen=4, cparams=blzarr.cparams(clevel=0, shuffle=1, cname="blosclz"))
    a.attrs["unit"] = "m"
    a.flush()
    assert sorted(os.listdir(root)) == ["__attrs__", "data", "meta"]
    assert sorted(os.listdir(root / "data")) == ["__0.blp", "__1.blp"]
    assert (root / "meta" / "storage").read_bytes() == (
        b'{"dtype": "int32", "cparams": {"clevel": 0, "shuffle": 1, "cname": "blosclz", "quantize": 0}, '
        b'"chunklen": 4, "expectedlen": 6, "dflt": 0}\n')
    # cbytes: the compressed full chunk plus the uncompressed leftover buffer, as bcolz counts it
    assert (root / "meta" / "sizes").read_bytes() == b'{"shape": [6], "nbytes": 24, "cbytes": 48}\n'
    assert (root / "__attrs__").read_bytes() == b'{"unit": "m"}\n'

    def blosc_header(flags, nbytes):
        # version 2, codec format 1, flags, typesize 4, nbytes, blocksize, ctbytes
        return bytes([2, 1, flags, 4]) + struct.pack("<iii", nbytes, nbytes, nbytes + 16)

    # flags 0x13: byte shuffle requested, memcpyed, don't split; codec bits 0 (blosclz)
    full = (root / "data" / "__0.blp").read_bytes()
    assert full == BLPK_HEADER + blosc_header(0x13, 16) + np.array([-2, -1, 0, 1], "<i4").tobytes()
    left = (root / "data" / "__1.blp").read_bytes()
    assert left == BLPK_HEADER + blosc_header(0x13, 8) + np.array([2, 3], "<i4").tobytes()


@pytest.mark.parametrize("cname,codec_bits", [("blosclz", 0), ("lz4", 1), ("lz4hc", 1), ("zlib", 3),
                                              ("zstd", 4)])
def test_pinned_header_compressed(tmp_path, cname, codec_bits):
    root = tmp_path / "c"
    values = np.arange(100, dtype="<i8")
    blzarr.carray(values, rootdir=str(root), mode="w", format="bcolz", chunklen=64,
                  cparams=blzarr.cparams(clevel=5, shuffle=1, cname=cname)).flush()
    meta = json.loads((root / "meta" / "storage").read_text())
    assert meta == {"dtype": "int64", "cparams": {"clevel": 5, "shuffle": 1, "cname": cname, "quantize": 0},
                    "chunklen": 64, "expectedlen": 100, "dflt": 0}
    assert json.loads((root / "meta" / "sizes").read_text())["shape"] == [100]
    for fname, part in [("__0.blp", values[:64]), ("__1.blp", values[64:])]:
        raw = (root / "data" / fname).read_bytes()
        assert raw[:16] == BLPK_HEADER
        version, vcodec, flags, typesize, nbytes, blocksize, ctbytes = struct.unpack("<BBBBiii", raw[16:32])
        assert version == 2
        assert typesize == 8
        assert nbytes == part.nbytes
        assert ctbytes == len(raw) - 16
        assert 0 < blocksize <= nbytes
        assert flags & 0x01 and not flags & 0x02 and not flags & 0x04   # shuffled, compressed
        assert flags >> 5 == codec_bits
        assert _decode(raw[16:], "<i8").tolist() == part.tolist()


def _decode(chunk, dtype):
    """Decode a Blosc 1.x chunk with an independent decoder when there is one (C-Blosc2 reads them)."""
    try:
        import blosc2
    except ImportError:
        from blzarr import _chunk
        out = np.empty(struct.unpack("<i", chunk[4:8])[0] // np.dtype(dtype).itemsize, dtype=dtype)
        _chunk.decompress_into(chunk, out)
        return out
    return np.frombuffer(blosc2.decompress(chunk), dtype=dtype)


# ---------------------------------------------------------------- corrupted directories

def _assert_names_file(exc, path):
    assert isinstance(exc, BlzarrError), type(exc)
    assert isinstance(exc, (ValueError, OSError)), type(exc)
    assert os.path.normpath(path) in str(exc), str(exc)


def _read_all(path, **kw):
    a = blzarr.open(path, **kw)
    a[:]
    for i in range(0, len(a), 37):
        a[i]
    return a


def _edit_json(path, change):
    with open(path) as f:
        data = json.load(f)
    change(data)
    with open(path, "w") as f:
        json.dump(data, f)


@pytest.mark.parametrize("fname,content", [
    ("storage", b""), ("storage", b"{not json"), ("storage", b'{"dtype": "int64", '), ("storage", b"[1, 2]"),
    ("storage", b"\xff\xfe\x00"), ("sizes", b""), ("sizes", b"nul"), ("sizes", b'"shape"'),
    ("storage", b"[" * 100000 + b"]" * 100000),
    ("storage", b'{"dtype": "int64", "cparams": {"clevel": 5, "shuffle": 1}, "chunklen": NaN}'),
    ("storage", b'{"dtype": "int64", "cparams": {"clevel": 5, "shuffle": 1}, "chunklen": Infinity}'),
    ("storage", b'{"dtype": "__import__(\'os\').getcwd()", "cparams": {}, "chunklen": 128}'),
    ("sizes", b'{"shape": [NaN], "nbytes": 0, "cbytes": 0}'),
])
def test_broken_meta_json(tmp_path, fname, content):
    path = copy_fixture("int64_leftover", tmp_path)
    target = os.path.join(path, "meta", fname)
    with open(target, "wb") as f:
        f.write(content)
    with pytest.raises(BlzarrError) as info:
        _read_all(path)
    _assert_names_file(info.value, target)


@pytest.mark.parametrize("fname,key,value", [
    ("storage", "chunklen", "abc"), ("storage", "chunklen", 0), ("storage", "chunklen", -3),
    ("storage", "chunklen", 1.5), ("storage", "chunklen", True), ("storage", "chunklen", None),
    ("storage", "chunklen", 2 ** 40),
    ("storage", "dtype", 42), ("storage", "dtype", "notadtype"), ("storage", "dtype", "[('a', 'i4')"),
    ("storage", "dtype", None), ("storage", "dtype", ["i8"]),
    ("storage", "cparams", "fast"), ("storage", "cparams", {"clevel": "x", "shuffle": 1}),
    ("storage", "cparams", {"clevel": 5, "shuffle": 7}),
    ("storage", "cparams", {"clevel": 5, "shuffle": 1, "cname": "nope"}),
    ("storage", "dflt", "abc"), ("storage", "dflt", [1, 2]),
    ("sizes", "shape", "abc"), ("sizes", "shape", [-1]), ("sizes", "shape", []), ("sizes", "shape", [1.5]),
    ("sizes", "shape", None), ("sizes", "shape", {"0": 3}),
    ("storage", "dtype", "S0"), ("storage", "dtype", "U0"), ("storage", "dtype", "M8[xyz]"),
    ("sizes", "shape", [1000, 0]), ("sizes", "shape", [1000, 10 ** 12]),
    ("storage", "dflt", 10 ** 30),
])
def test_wrong_types_in_meta(tmp_path, fname, key, value):
    path = copy_fixture("int64_leftover", tmp_path)
    target = os.path.join(path, "meta", fname)
    if value is None:
        _edit_json(target, lambda d: d.pop(key))
    else:
        _edit_json(target, lambda d: d.__setitem__(key, value))
    with pytest.raises(BlzarrError) as info:
        _read_all(path)
    _assert_names_file(info.value, target)


@pytest.mark.parametrize("length", [10 ** 18, 2 ** 70])
def test_absurd_length_fails_fast(tmp_path, length):
    """A length claiming billions of chunks must fail at once (a child process with a time limit,
    so a regression that walks every chunk fails instead of hanging the suite)."""
    path = copy_fixture("int64_leftover", tmp_path)
    sizes = os.path.join(path, "meta", "sizes")
    _edit_json(sizes, lambda d: d.__setitem__("shape", [length]))
    code = textwrap.dedent("""
        import sys, blzarr
        try:
            blzarr.open(sys.argv[1])[:]
        except blzarr.BlzarrError as e:
            print(type(e).__name__, isinstance(e, (ValueError, OSError)), str(e))
    """)
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split(" ", 2)[1] == "True", r.stdout
    assert sizes in r.stdout and os.path.join(path, "data", "__8.blp") in r.stdout, r.stdout


def test_chunklen_disagreeing_with_chunk_files(tmp_path):
    path = copy_fixture("int64_leftover", tmp_path)
    _edit_json(os.path.join(path, "meta", "storage"), lambda d: d.__setitem__("chunklen", 100))
    with pytest.raises(BlzarrError) as info:
        _read_all(path)
    assert isinstance(info.value, (ValueError, OSError))
    assert os.path.join(path, "data", "__") in str(info.value)


def test_shape_longer_than_the_data(tmp_path):
    path = copy_fixture("int64_leftover", tmp_path)
    _edit_json(os.path.join(path, "meta", "sizes"), lambda d: d.__setitem__("shape", [5000]))
    with pytest.raises(BlzarrError) as info:
        _read_all(path)
    # the first chunk file the length calls for that is not there, and the file that claims it
    _assert_names_file(info.value, os.path.join(path, "data", "__8.blp"))
    assert os.path.join(path, "meta", "sizes") in str(info.value)


def test_empty_carray_without_data_dir(tmp_path):
    """git (and some archivers) drop empty directories: an empty carray opens without data/,
    and gets it back on its first write."""
    path = copy_fixture("empty_int32", tmp_path)
    if os.path.isdir(os.path.join(path, "data")):
        os.rmdir(os.path.join(path, "data"))
    a = blzarr.open(path)
    assert len(a) == 0 and a.dtype == np.dtype("i4")
    a.flush()
    a.append(np.arange(3, dtype="i4"))
    a.flush()
    assert os.listdir(os.path.join(path, "data")) == ["__0.blp"]
    a.append(np.arange(20, dtype="i4"))
    a.flush()
    expected = np.concatenate([np.arange(3), np.arange(20)]).astype("i4")
    assert_same(blzarr.open(path, mode="r")[:], expected)


@pytest.mark.parametrize("what", ["meta/sizes", "meta/storage", "meta", "data", "data/__3.blp",
                                  "data/__7.blp"])
def test_missing_file(tmp_path, what):
    path = copy_fixture("int64_leftover", tmp_path)
    target = os.path.join(path, what)
    if os.path.isdir(target):
        shutil.rmtree(target)
    else:
        os.remove(target)
    with pytest.raises(BlzarrError) as info:
        _read_all(path)
    if what == "meta/storage" or what == "meta":
        # without meta/storage the directory is not recognized as a carray at all
        _assert_names_file(info.value, path)
    else:
        _assert_names_file(info.value, target)


def test_chunk_file_unreadable(tmp_path):
    path = copy_fixture("int64_leftover", tmp_path)
    target = os.path.join(path, "data", "__3.blp")
    os.remove(target)
    os.mkdir(target)
    with pytest.raises(BlzarrError) as info:
        _read_all(path)
    _assert_names_file(info.value, target)


@pytest.mark.parametrize("what", ["meta/sizes", "meta/storage", "__attrs__"])
def test_meta_file_is_a_directory(tmp_path, what):
    path = copy_fixture("int64_leftover", tmp_path)
    target = os.path.join(path, what)
    os.remove(target)
    os.mkdir(target)
    with pytest.raises(BlzarrError) as info:
        _read_all(path)
    _assert_names_file(info.value, target)


def test_broken_attrs(tmp_path):
    path = copy_fixture("float32_attrs", tmp_path)
    target = os.path.join(path, "__attrs__")
    for content in (b"{broken", b"[1, 2, 3]", b"\xff"):
        with open(target, "wb") as f:
            f.write(content)
        with pytest.raises(BlzarrError) as info:
            blzarr.open(path)
        _assert_names_file(info.value, target)


# Chunk-byte corruption goes through the C decoder: it is read in a child process, so that a crash fails
# the tests instead of killing pytest. One child reads every corrupted copy in turn (one line of output
# each), which keeps this fast; a crash shows as the missing lines from the case that crashed onwards.
CHILD = textwrap.dedent("""
    import sys, numpy as np, blzarr
    for path in sys.argv[1:]:
        print("START", path, flush=True)
        try:
            a = blzarr.open(path, mode="r")
            full = a[:]
            for i in range(len(a)):
                assert a[i] == full[i]
            for s in range(0, len(a), 50):
                a[s:s + 75]
            print("OK", full.shape == (1000,), flush=True)
        except Exception as e:
            print("ERR", type(e).__name__, isinstance(e, blzarr.BlzarrError),
                  isinstance(e, (ValueError, OSError)), repr(str(e)), flush=True)
""")


def _run_child(paths):
    """{path: result line} for every path the child got through; a crash leaves the rest out."""
    r = subprocess.run([sys.executable, "-c", CHILD, *paths], capture_output=True, text=True, timeout=300)
    results, current = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("START "):
            current = line[6:]
        elif current is not None:
            results[current] = line
            current = None
    crash = None if r.returncode == 0 else f"crashed (return code {r.returncode}): {r.stderr[-2000:]}"
    return results, crash


def _corrupt(path, fname, change):
    target = os.path.join(path, "data", fname)
    with open(target, "rb") as f:
        raw = bytearray(f.read())
    raw = change(raw)
    with open(target, "wb") as f:
        f.write(bytes(raw))
    return target


def _flip(offset, mask=0xFF):
    def change(raw):
        raw[offset] ^= mask
        return raw
    return change


def _set_i32(offset, value):
    def change(raw):
        raw[offset:offset + 4] = struct.pack("<i", value)
        return raw
    return change


def _payload(case):
    def change(raw):
        body = 16 + 16 + 4   # blpk header, Blosc header, one bstart (one block per chunk here)
        if case == "payload":
            raw[body + 9] ^= 0x5A
        elif case == "payload end":
            raw[-3] ^= 0xFF
        elif case == "stream size":
            raw[body:body + 4] = struct.pack("<i", 10 ** 6)
        else:
            for k in range(body, len(raw)):
                raw[k] = (raw[k] * 31 + 7) % 256
        return raw
    return change


DETECTED = {
    "empty": lambda raw: raw[:0],
    "header only": lambda raw: raw[:10],
    "blpk only": lambda raw: raw[:16],
    "short blosc header": lambda raw: raw[:24],
    "half": lambda raw: raw[:len(raw) // 2],
    "last byte cut": lambda raw: raw[:-1],
    "magic": _flip(0),
    "blosc version": _flip(16),
    "flags reserved bit": _flip(18, 0x08),
    "typesize 0": lambda raw: raw[:19] + b"\x00" + raw[20:],
    "nbytes": _set_i32(20, 4096),
    "nbytes negative": _set_i32(20, -8),
    "nbytes huge": _set_i32(20, 2 ** 31 - 1),
    "blocksize 0": _set_i32(24, 0),
    "blocksize negative": _set_i32(24, -1),
    "blocksize huge": _set_i32(24, 2 ** 31 - 1),
    "ctbytes small": _set_i32(28, 20),
    "ctbytes huge": _set_i32(28, 2 ** 31 - 1),
    "ctbytes negative": _set_i32(28, -100),
    "bstart out of range": _set_i32(32, 10 ** 6),
    "bstart negative": _set_i32(32, -5),
    "bstart inside header": _set_i32(32, 3),
}
PAYLOAD = ["payload", "payload end", "stream size", "all payload"]
CHUNK_FILES = ["__2.blp", "__7.blp"]  # a full chunk, the leftover chunk


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory):
    """(case, file) -> (path of the corrupted file, the child's line or None, crash message or None)."""
    base = tmp_path_factory.mktemp("corrupted")
    cases = {}
    for fname in CHUNK_FILES:
        for case in list(DETECTED) + PAYLOAD:
            d = base / f"{case.replace(' ', '_')}-{fname}"
            d.mkdir()
            path = copy_fixture("int64_leftover", d)
            change = DETECTED[case] if case in DETECTED else _payload(case)
            cases[case, fname] = (path, _corrupt(path, fname, change))
    d = base / "swapped"
    d.mkdir()
    path = copy_fixture("int64_leftover", d)
    shutil.copyfile(os.path.join(path, "data", "__7.blp"), os.path.join(path, "data", "__2.blp"))
    cases["swapped", "__2.blp"] = (path, os.path.join(path, "data", "__2.blp"))
    results, crash = _run_child([p for p, _ in cases.values()])
    return {k: (target, results.get(path), crash) for k, (path, target) in cases.items()}


def _check_error(line, target):
    assert line.startswith("ERR"), line
    _, name, is_blzarr, is_std, message = line.split(" ", 4)
    assert is_blzarr == "True" and is_std == "True", line
    assert target in message, line


@pytest.mark.parametrize("fname", CHUNK_FILES)
@pytest.mark.parametrize("case", sorted(DETECTED))
def test_corrupted_chunk_detected(corrupted, fname, case):
    target, line, crash = corrupted[case, fname]
    assert line is not None, f"the reader {crash}"
    _check_error(line, target)


@pytest.mark.parametrize("fname", CHUNK_FILES)
@pytest.mark.parametrize("case", PAYLOAD)
def test_corrupted_payload_never_crashes(corrupted, fname, case):
    """Without a checksum, a flipped payload byte may decode to other values; it must never crash,
    and when it is noticed the error names the file."""
    target, line, crash = corrupted[case, fname]
    assert line is not None, f"the reader {crash}"
    if line.startswith("ERR"):
        _check_error(line, target)
    else:
        assert line == "OK True", line


def test_chunk_files_swapped(corrupted):
    """A valid chunk of the wrong size in the wrong place (the leftover copied to a full slot)."""
    target, line, crash = corrupted["swapped", "__2.blp"]
    assert line is not None, f"the reader {crash}"
    _check_error(line, target)


def test_reader_child_did_not_crash(corrupted):
    crashes = {crash for _, _, crash in corrupted.values() if crash}
    assert not crashes, crashes


def test_trailing_bytes_after_the_chunk_are_ignored(tmp_path):
    path = copy_fixture("int64_leftover", tmp_path)
    _corrupt(path, "__1.blp", lambda raw: raw + b"garbage")
    assert_same(blzarr.open(path, mode="r")[:], EXPECTED["int64_leftover"][0])




@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX permissions")
def test_files_get_the_usual_permissions(tmp_path):
    """Like bcolz's files (plain open()), not the private 0600 of a temporary file."""
    mask = os.umask(0o022)
    os.umask(mask)
    root = tmp_path / "perm"
    a = blzarr.carray(np.arange(10), rootdir=str(root), mode="w", format="bcolz", chunklen=4)
    a.attrs["x"] = 1
    a.flush()
    for rel in ["__attrs__", "meta/sizes", "meta/storage", "data/__0.blp", "data/__2.blp"]:
        assert os.stat(root / rel).st_mode & 0o777 == 0o666 & ~mask, rel
    # a rewritten file keeps the permissions it was given
    os.chmod(root / "meta" / "sizes", 0o640)
    os.chmod(root / "data" / "__2.blp", 0o600)
    a.append([10])
    a.flush()
    assert os.stat(root / "meta" / "sizes").st_mode & 0o777 == 0o640
    assert os.stat(root / "data" / "__2.blp").st_mode & 0o777 == 0o600
    assert not [f for f in os.listdir(root / "data") if f.startswith(".tmp")]


def test_damaged_pickle_names_the_file(tmp_path):
    root = str(tmp_path / "obj")
    objs = np.empty(3, dtype=object)
    objs[:] = [{"a": 1}, "b", [2, 3]]
    # clevel 0 stores the pickles raw, so a flipped byte reaches the unpickler unchanged
    blzarr.carray(objs, rootdir=root, mode="w", format="bcolz", cparams=blzarr.cparams(clevel=0)).flush()
    target = _corrupt(root, "__1.blp", lambda raw: raw[:32] + b"\xb9" + raw[33:])
    a = blzarr.open(root, mode="r", allow_pickle=True)
    assert a[0] == {"a": 1} and a[2] == [2, 3]
    with pytest.raises(BlzarrError) as info:
        a[1]
    _assert_names_file(info.value, target)
    with pytest.raises(BlzarrError):
        a[:]


def test_header_typesize_not_dividing_the_atoms(tmp_path):
    """A chunk whose Blosc typesize does not divide the itemsize (here 3 for int64, stored raw so the
    values stay valid): partial reads fall back to decoding the whole chunk."""
    root = str(tmp_path / "ts")
    values = np.arange(40, dtype="<i8") * 11
    blzarr.carray(values, rootdir=root, mode="w", format="bcolz", chunklen=16,
                  cparams=blzarr.cparams(clevel=0)).flush()
    for fname in ("__0.blp", "__2.blp"):
        _corrupt(root, fname, lambda raw: raw[:19] + b"\x03" + raw[20:])
    a = blzarr.open(root, mode="r")
    assert_same(a[:], values)
    assert_same(a[3:37], values[3:37])
    assert [a[i] for i in (0, 5, 15, 33, 39)] == [values[i] for i in (0, 5, 15, 33, 39)]


def test_write_into_a_vanished_directory_names_the_file(tmp_path):
    root = tmp_path / "gone"
    a = blzarr.carray(np.arange(10), rootdir=str(root), mode="w", format="bcolz", chunklen=4)
    shutil.rmtree(root / "data")
    with pytest.raises(BlzarrError) as info:
        a.append(np.arange(10))
        a.flush()
    assert isinstance(info.value, OSError)
    assert str(root / "data") in str(info.value)        # the missing directory, or a chunk file in it
