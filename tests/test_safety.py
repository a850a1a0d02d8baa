"""Hostile and damaged input, and security.

* A corruption matrix over whole datasets in both layouts (truncated, missing and garbled chunk and
  superchunk files, hostile Blosc header fields, out-of-range offsets, broken or wrongly typed JSON),
  run in a child process with a timeout and a capped address space: nothing crashes, hangs or
  allocates what a corrupted field claims, and every failure is a blzarr error (also a ValueError or
  an OSError) naming the damaged file.
* Hypothesis fuzzing of the superchunk header parser and of chunk validation/decoding.
* No unpickling without allow_pickle=True, attributes and metadata are JSON only, mode 'r' refuses
  every write path, and names read from disk never lead outside the root directory.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

import blzarr
from helpers import tree
from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.errors import BlzarrError, ChunkError, FormatError, PickleNotAllowedError, ReadOnlyError

HERE = os.path.abspath(__file__)
RANDOM_CASES = int(os.environ.get("BLZARR_RANDOM_DAMAGE", "300"))


# =========================================================================================== the matrix
def _blosc_pos(path, layout):
    """File position of the Blosc header of the first chunk of `path`."""
    if layout == "bcolz":
        return 16
    with open(path, "rb") as f:
        raw = f.read()
    h = sc.unpack_header(raw[:32])
    table = 32 + h["meta_size"]
    return int.from_bytes(raw[table:table + 8], "little", signed=True)


def _patch(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _truncate(path, n):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(n if n >= 0 else size + n)


def _i32(v):
    return int(v).to_bytes(4, "little", signed=v < 0)


def _i64(v):
    return int(v).to_bytes(8, "little", signed=v < 0)


def _cases(layout):
    """(name, relative path of the damaged file, mutation(path))."""
    cases = []
    if layout == "bcolz":
        files = ["data/__1.blp", "data/__4.blp"]      # a full chunk, the short last chunk
    else:
        files = ["data/__1__.bin", "data/__3__.bin"]
    for rel in files:
        for n in (0, 8, 16, 31, 40, -3):
            cases.append((f"truncate {n}", rel, lambda p, n=n: _truncate(p, n)))
        cases.append(("missing", rel, os.remove))
        cases.append(("directory", rel, lambda p: (os.remove(p), os.mkdir(p))))
        cases.append(("garbage body", rel, lambda p: _patch(p, os.path.getsize(p) // 2,
                                                            os.urandom(min(64, os.path.getsize(p) // 3)))))
    # hostile Blosc header fields of the first chunk of each file
    for rel in files:
        for name, off, val in [("blosc version 255", 0, b"\xff"), ("flags 0xff", 2, b"\xff"),
                               ("typesize 0", 3, b"\x00"), ("typesize 255", 3, b"\xff"),
                               ("nbytes huge", 4, _i32(0x7fffffff)), ("nbytes 0", 4, _i32(0)),
                               ("nbytes 1", 4, _i32(1)), ("blocksize 0", 8, _i32(0)),
                               ("blocksize huge", 8, _i32(0x7fffffff)), ("ctbytes huge", 12, _i32(0x7fffffff)),
                               ("ctbytes 0", 12, _i32(0)), ("ctbytes 15", 12, _i32(15)),
                               ("ctbytes negative", 12, _i32(-100)), ("bstart huge", 16, _i32(-2))]:
            cases.append((name, rel, lambda p, off=off, val=val: _patch(p, _blosc_pos(p, layout) + off, val)))
    if layout == "bcolz":
        cases.append(("blpk magic", files[0], lambda p: _patch(p, 0, b"XXXX")))
    else:
        rel = files[0]
        for name, off, val in [("magic", 0, b"XXXX"), ("version 9", 4, b"\x09"), ("options 0xff", 5, b"\xff"),
                               ("checksum id 200", 6, b"\xc8"), ("typesize 0", 7, b"\x00"),
                               ("chunk-size -7", 8, _i32(-7)), ("nchunks huge", 16, _i64(1 << 62)),
                               ("nchunks -1", 16, _i64(-1)), ("meta-size huge", 24, _i32(0x7fffffff)),
                               ("meta-size -5", 24, _i32(-5)), ("metadata json", 40, b"\x00{[")]:
            cases.append((f"superchunk {name}", rel, lambda p, off=off, val=val: _patch(p, off, val)))
        for name, val in [("-5", -5), ("huge", 1 << 62), ("0", 0), ("8", 8), ("eof", None)]:
            def bad_offset(p, val=val):
                h = sc.unpack_header(open(p, "rb").read(32))
                v = os.path.getsize(p) - 4 if val is None else val
                _patch(p, 32 + h["meta_size"] + 8, _i64(v))      # the offset of slot 1
            cases.append((f"offset {name}", rel, bad_offset))
        cases.append(("extra superchunk file", "data/__99999999999__.bin",
                      lambda p: shutil.copy(os.path.join(os.path.dirname(p), "__1__.bin"), p)))
        cases.append(("gap in superchunk files", "data/__2__.bin", os.remove))
        cases.append(("superchunk symlink outside", "data/__2__.bin",
                      lambda p: (shutil.copy(p, p + ".out"), os.remove(p),
                                 shutil.move(p + ".out", os.path.join(os.path.dirname(os.path.dirname(
                                     os.path.dirname(p))), "outside.bin")),
                                 os.symlink(os.path.join(os.path.dirname(os.path.dirname(
                                     os.path.dirname(p))), "outside.bin"), p))))
        cases.append(("vlmeta garbage", "meta/vlmeta", lambda p: open(p, "wb").write(b"BLZV\x01\x02\0\0junk")))
    meta = ["meta/sizes", "meta/storage", "__attrs__" if layout == "bcolz" else "meta/attributes"]
    bad_json = [("empty", b""), ("broken", b"{"), ("list", b"[]"), ("nan", b"NaN"), ("deep", b"[" * 100000),
                ("utf8", b"\xff\xfe"), ("pickle", b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00N.")]
    for rel in meta:
        for name, raw in bad_json:
            cases.append((f"json {name}", rel, lambda p, raw=raw: open(p, "wb").write(raw)))
        cases.append(("missing", rel, os.remove))
        cases.append(("directory", rel, lambda p: (os.remove(p), os.mkdir(p))))
    typed = [("meta/sizes", {"shape": "4500"}), ("meta/sizes", {"shape": [-1]}),
             ("meta/sizes", {"shape": [1e300]}), ("meta/sizes", {"shape": [99999999999999999]}),
             ("meta/sizes", {"shape": [4500, 99999999999]}), ("meta/sizes", {"shape": []}),
             ("meta/sizes", {"shape": [True]}), ("meta/sizes", {"shape": [5000]}),
             ("meta/storage", {"dtype": 5}), ("meta/storage", {"dtype": "__import__('os').getcwd()"}),
             ("meta/storage", {"chunklen": 0}), ("meta/storage", {"chunklen": 10 ** 12}),
             ("meta/storage", {"chunklen": "1000"}), ("meta/storage", {"cparams": [1, 2]}),
             ("meta/storage", {"cparams": {"clevel": 99}}), ("meta/storage", {"dtype": "V0"}),
             ("meta/storage", {"dtype": "(<i8, (99999999999,))"}), ("meta/storage", {"dflt": {"x": 1}})]
    if layout == "blz":
        typed += [("meta/storage", {"superchunklen": 7}), ("meta/storage", {"format": "zarr"}),
                  ("meta/storage", {"checksum": "md5"})]
    for rel, change in typed:
        def retype(p, change=change):
            d = json.load(open(p))
            d.update(change)
            open(p, "w").write(json.dumps(d))
        cases.append((f"typed {change}", rel, retype))
    return cases


def _limit_memory(extra):
    try:
        import resource
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + extra, vm + extra))
    except (ImportError, OSError, StopIteration, ValueError):
        pass


def _matrix_child(workdir):
    """Run every case of the matrix; print one JSON line per case."""
    blzarr.set_nthreads(1)
    ref = (np.arange(4500, dtype=np.int64) * 7919) % 100003
    bases = {}
    for layout, kw in (("bcolz", dict(format="bcolz")), ("blz", dict(format="blz", superchunklen=2)),
                       ("blz-nocheck", dict(format="blz", superchunklen=2, checksum=None))):
        d = os.path.join(workdir, "base-" + layout)
        c = blzarr.carray(ref, rootdir=d, chunklen=1000, mode="w", **kw)
        c.attrs["a"] = 1
        if layout != "bcolz":
            c.vlmeta["v"] = [1, 2]
        c.close()
        bases[layout] = d
    _limit_memory(512 * 1024 * 1024)
    k = 0
    for layout in ("bcolz", "blz", "blz-nocheck"):
        for name, rel, mutate in _cases("bcolz" if layout == "bcolz" else "blz"):
            k += 1
            root = os.path.join(workdir, f"case{k}", "d")
            shutil.copytree(bases[layout], root)
            target = os.path.join(root, rel)
            res = {"layout": layout, "case": name, "file": rel}
            try:
                mutate(target)
                c = blzarr.open(root, mode="r")
                data = c[:]
                c.verify()
                attrs = c.attrs.getall()
                if layout != "bcolz":
                    c.vlmeta.getall()
                res["outcome"] = "same" if (np.array_equal(data, ref) and attrs == {"a": 1}) else "different"
            except BaseException as e:  # noqa: BLE001 - classified by the parent
                res.update(outcome="error", type=type(e).__name__, msg=str(e)[:500],
                           blzarr=isinstance(e, BlzarrError),
                           builtin=isinstance(e, (ValueError, OSError)),
                           names=(os.path.basename(rel) in str(e) or root in str(e)))
            print(json.dumps(res), flush=True)
            shutil.rmtree(os.path.join(workdir, f"case{k}"), ignore_errors=True)
    # then random damage: byte runs overwritten, files cut, in any file of the dataset
    rng = np.random.default_rng(2024)
    for _ in range(RANDOM_CASES):
        layout = ("bcolz", "blz", "blz-nocheck")[int(rng.integers(3))]
        k += 1
        root = os.path.join(workdir, f"case{k}", "d")
        shutil.copytree(bases[layout], root)
        files = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
        rel = files[int(rng.integers(len(files)))]
        target = os.path.join(root, rel)
        size = os.path.getsize(target)
        if rng.random() < 0.3:
            how = f"cut at {int(rng.integers(size + 1))}"
            _truncate(target, int(how.split()[-1]))
        else:
            pos = int(rng.integers(max(size, 1)))
            raw = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
            how = f"{raw.hex()} at {pos}"
            _patch(target, pos, raw)
        res = {"layout": layout, "case": "random " + how, "file": rel}
        try:
            c = blzarr.open(root, mode="r")
            data = c[:]
            c.verify()
            attrs = c.attrs.getall()
            res["attrs_json"] = isinstance(attrs, dict)
            if layout != "bcolz":
                c.vlmeta.getall()
            # a query the per-chunk statistics (meta/stats, damaged or not) plan
            count = blzarr.lazyexpr("(c >= 50000) & (c < 60000)", user_dict={"c": c}).count_nonzero()
            same = np.array_equal(data, ref) and count == np.count_nonzero((ref >= 50000) & (ref < 60000))
            res["outcome"] = "same" if (same and attrs == {"a": 1}) else "different"
        except BaseException as e:  # noqa: BLE001
            res.update(outcome="error", type=type(e).__name__, msg=str(e)[:500],
                       blzarr=isinstance(e, BlzarrError), builtin=isinstance(e, (ValueError, OSError)),
                       names=(os.path.basename(rel) in str(e) or root in str(e)))
        print(json.dumps(res), flush=True)
        shutil.rmtree(os.path.join(workdir, f"case{k}"), ignore_errors=True)
    print(json.dumps({"done": k}), flush=True)


@pytest.mark.slow
def test_corruption_matrix_never_crashes_hangs_or_misreports(tmp_path):
    proc = subprocess.run([sys.executable, HERE, "--matrix", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])   # a crash is a signal: < 0
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert lines and "done" in lines[-1], proc.stdout[-2000:] + proc.stderr[-2000:]
    results = lines[:-1]
    assert len(results) == lines[-1]["done"] > 250
    problems = []
    for r in results:
        if r["outcome"] == "error":
            if not (r["blzarr"] and r["builtin"] and r["names"]):
                problems.append(r)
        elif r["outcome"] == "different":
            # without checksums (the bcolz layout, as in bcolz, or BLZ with checksum=None) a garbled chunk
            # body, or a garbled shuffle typesize, decodes into other values and nothing in the files
            # can tell; a missing attributes file is the valid "no attributes".  Everything else is caught.
            unchecked = r["layout"] in ("bcolz", "blz-nocheck")
            # the attributes are plain JSON: a random change that keeps them valid JSON is other attributes
            unavoidable = (unchecked and r["case"] in ("garbage body", "typesize 255")
                           or unchecked and r["case"].startswith("random") and r["file"].startswith("data/")
                           or (r["case"] == "missing" and r["file"] in ("__attrs__", "meta/attributes"))
                           or (r["case"].startswith("random") and r["file"] in ("__attrs__", "meta/attributes")
                               and r.get("attrs_json")))
            if not unavoidable:
                problems.append(r)
    assert not problems, json.dumps(problems, indent=1)[:6000]
    errors = sum(r["outcome"] == "error" for r in results)
    assert errors > 0.5 * len(results)
    # with checksums (BLZ's default) no damage to a chunk ever gives other values
    assert not [r for r in results if r["layout"] == "blz" and r["outcome"] == "different"
                and r["file"].startswith("data/")]


# ========================================================================================== fuzzing
@given(st.binary(min_size=0, max_size=64))
def test_fuzz_superchunk_header_parser(raw):
    try:
        h = sc.unpack_header(raw)
    except FormatError as e:
        assert isinstance(e, ValueError)
        return
    assert len(raw) >= 32 and raw[:4] == b"blpk"
    assert 1 <= h["typesize"] <= 255 and h["meta_size"] >= 0 and h["nchunks"] >= 0


_VALID = [_chunk.compress(np.arange(n, dtype=np.int64) % m, 8, 5, 1, cname, 0, 1)
          for n, m, cname in ((2000, 7, "blosclz"), (3000, 100000, "lz4"), (1, 1, "zlib"), (5000, 3, "zstd"))
          if cname in _chunk.compressor_list()]


@given(st.integers(0, len(_VALID) - 1), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                                                  min_size=1, max_size=8),
       st.integers(-1, 1 << 20))
def test_fuzz_chunk_validation_and_decoding(which, flips, cut):
    data = bytearray(_VALID[which])
    for pos, val in flips:
        data[pos % len(data)] = val
    if cut >= 0:
        del data[cut % (len(data) + 1):]
    data = bytes(data)
    try:
        nbytes = _chunk.validate(data, -1, "fuzzed")
    except ChunkError as e:
        assert "fuzzed" in str(e)
        return
    assert 0 <= nbytes <= _chunk.MAX_BUFFERSIZE and nbytes <= 64 * len(data) + 1 << 20 or nbytes <= 40000
    out = np.empty(nbytes, dtype=np.uint8)
    try:
        _chunk.decompress_into(data, out, 1, False, "fuzzed")
    except ChunkError as e:
        assert "fuzzed" in str(e)


# ========================================================================================== security
class _Boom:
    """Unpickling this creates a marker file: evidence that code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_no_unpickling_without_opt_in(tmp_path, fmt):
    marker = str(tmp_path / "code-ran")
    root = str(tmp_path / "objs")
    import pickle
    payload = pickle.dumps(_Boom(marker))
    c = blzarr.carray(np.array([1, "x"], dtype=object), rootdir=root, format=fmt)
    c.close()
    # replace the stored object by the hostile pickle, in the layout's own way
    w = blzarr.open(root, mode="a", allow_pickle=True)
    w._chunks[0] = w._new_chunk(np.frombuffer(payload, dtype="u1"))
    w.close()
    t = blzarr.ctable([np.arange(2), np.array([None, None], dtype=object)], names=["a", "o"],
                      rootdir=str(tmp_path / "t"), format=fmt)
    t.close()
    shutil.rmtree(os.path.join(t.cols["o"].rootdir))
    shutil.copytree(root, t.cols["o"].rootdir)
    for opener in (lambda: blzarr.open(root), lambda: blzarr.open(root, mode="r"),
                   lambda: blzarr.carray(rootdir=root), lambda: blzarr.open(str(tmp_path / "t")),
                   lambda: blzarr.ctable(rootdir=str(tmp_path / "t"), mode="r")):
        with pytest.raises(PickleNotAllowedError, match="allow_pickle"):
            opener()
    # the CLI inspects without unpickling
    from blzarr import cli
    for cmd in (["info", root], ["ls", str(tmp_path)], ["verify", root]):
        cli.main(cmd)
    assert not os.path.exists(marker)
    # with the opt-in, the data is what it is
    blzarr.open(root, mode="r", allow_pickle=True)[0]
    assert os.path.exists(marker)


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_attrs_and_meta_are_json_only(tmp_path, fmt):
    root = str(tmp_path / "c")
    c = blzarr.carray(np.arange(10), rootdir=root, format=fmt)
    for bad in (object(), {1, 2}, b"bytes", np.arange(3), float("nan") if False else lambda: 0):
        with pytest.raises(TypeError):
            c.attrs["x"] = bad
    assert "x" not in c.attrs
    c.attrs["ok"] = {"a": [1, 2.5, "s", None, True]}
    path = c._layoutdir.attrs_path
    assert json.load(open(path)) == {"ok": {"a": [1, 2.5, "s", None, True]}}
    if fmt == "blz":
        with pytest.raises(TypeError):
            c.meta["m"] = object()
        with pytest.raises(TypeError):
            c.vlmeta["v"] = object()
        c.vlmeta["b"] = b"\x00\x01"        # bytes are stored as base64 in JSON
        assert blzarr.open(root, mode="r").vlmeta["b"] == b"\x00\x01"
    c.close()
    marker = str(tmp_path / "code-ran")
    # code-looking metadata is data, never evaluated
    for rel, text in ((path, json.dumps({"x": f"__import__('os').mkdir({marker!r})"})),):
        with open(rel, "w") as f:
            f.write(text)
    assert blzarr.open(root, mode="r").attrs["x"].startswith("__import__")
    storage = os.path.join(root, "meta", "storage")
    d = json.load(open(storage))
    d["dtype"] = f"__import__('os').mkdir({marker!r}) or 'i8'"
    open(storage, "w").write(json.dumps(d))
    with pytest.raises(FormatError, match="dtype"):
        blzarr.open(root, mode="r")
    import pickle
    open(path, "wb").write(pickle.dumps({"x": 1}))
    d["dtype"] = "int64"
    open(storage, "w").write(json.dumps(d))
    with pytest.raises(FormatError, match="attributes"):
        blzarr.open(root, mode="r")
    assert not os.path.exists(marker)



# every way to write a carray, and what it does
CARRAY_WRITES = {
    "append": lambda c: c.append([1, 2]),
    "setitem int": lambda c: c.__setitem__(3, 9),
    "setitem slice": lambda c: c.__setitem__(slice(0, 5), 9),
    "setitem step": lambda c: c.__setitem__(slice(0, 50, 3), 9),
    "setitem fancy": lambda c: c.__setitem__([1, 5, 7], 9),
    "setitem mask": lambda c: c.__setitem__(np.arange(len(c)) % 2 == 0, 9),
    "setitem expression": lambda c: c.__setitem__("c > 5", 0),
    "setitem tuple": lambda c: c.__setitem__((slice(0, 3),), 9),
    "resize grow": lambda c: c.resize(len(c) + 10),
    "resize shrink": lambda c: c.resize(3),
    "trim": lambda c: c.trim(2),
    "trim negative": lambda c: c.trim(-2),
    "purge": lambda c: c.purge(),
    "attrs set": lambda c: c.attrs.__setitem__("k", 1),
    "attrs del": lambda c: c.attrs.__delitem__("a"),
    "chunks setitem": lambda c: c.chunks.__setitem__(0, c.chunks[0]),
    "chunks append": lambda c: c.chunks.append(c.chunks[0]),
    "chunks truncate": lambda c: c.chunks.truncate(0),
}
BLZ_WRITES = {
    "compact": lambda c: c.compact(),
    "meta set": lambda c: c.meta.__setitem__("m", 2),
    "meta add": lambda c: c.meta.__setitem__("new", 2),
    "meta del": lambda c: c.meta.__delitem__("m"),
    "vlmeta set": lambda c: c.vlmeta.__setitem__("v", 2),
    "vlmeta del": lambda c: c.vlmeta.__delitem__("v"),
    "store write_chunk": lambda c: c._layoutdir.write_chunk(0, c.chunks[0].getdata()),
    "store remove_chunks_from": lambda c: c._layoutdir.remove_chunks_from(0),
    "store compact": lambda c: c._layoutdir.compact(),
}
CTABLE_WRITES = {
    "append": lambda t: t.append((1, 2.0)),
    "append columns": lambda t: t.append([[1], [2.0]]),
    "setitem": lambda t: t.__setitem__(0, (5, 5.0)),
    "setitem slice": lambda t: t.__setitem__(slice(0, 2), (5, 5.0)),
    "resize": lambda t: t.resize(3),
    "trim": lambda t: t.trim(1),
    "addcol": lambda t: t.addcol(np.arange(len(t)), name="z"),
    "delcol": lambda t: t.delcol("b"),
    "cols setitem": lambda t: t.cols.__setitem__("a", np.arange(len(t))),
    "attrs set": lambda t: t.attrs.__setitem__("k", 1),
    "column append": lambda t: t.cols["a"].append([1]),
    "column setitem": lambda t: t.cols["a"].__setitem__(0, 1),
}


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_mode_r_refuses_every_write_path(tmp_path, fmt):
    root = str(tmp_path / "c")
    kw = dict(meta={"m": 1}) if fmt == "blz" else {}
    c = blzarr.carray(np.arange(100), rootdir=root, chunklen=16, format=fmt, **kw)
    c.attrs["a"] = 1
    if fmt == "blz":
        c.vlmeta["v"] = 1
    c.close()
    before = tree(root)
    writes = dict(CARRAY_WRITES, **(BLZ_WRITES if fmt == "blz" else {}))
    for name, fn in writes.items():
        r = blzarr.open(root, mode="r")
        with pytest.raises(ReadOnlyError):
            fn(r)
        r.flush()                                    # a no-op for readers
        assert tree(root) == before, name
        assert r[:].tolist() == list(range(100)), name
    # a mode 'r' carray of a directory: views and pickles stay read-only too
    v = blzarr.open(root, mode="r").view()
    with pytest.raises(ReadOnlyError):
        v.append([1])
    troot = str(tmp_path / "t")
    t = blzarr.ctable([np.arange(10), np.arange(10) * 1.0], names=["a", "b"], rootdir=troot, format=fmt)
    t.attrs["a"] = 1
    t.close()
    before = tree(troot)
    for name, fn in CTABLE_WRITES.items():
        r = blzarr.open(troot, mode="r")
        with pytest.raises(ReadOnlyError):
            fn(r)
        r.flush()
        assert tree(troot) == before, name
    assert ReadOnlyError.__mro__[1:3] == (BlzarrError, PermissionError)


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_names_from_disk_never_leave_the_root(tmp_path, fmt):
    troot = str(tmp_path / "t")
    outside = str(tmp_path / "outside")
    t = blzarr.ctable([np.arange(10), np.arange(10) * 1.0], names=["a", "b"], rootdir=troot, format=fmt)
    t.close()
    shutil.copytree(t.cols["a"].rootdir, outside)
    rootdirs = os.path.join(troot, "__rootdirs__")
    meta = json.load(open(rootdirs))
    for names in (["..", "a"], ["../outside"], ["/etc"], ["a/../../outside"], ["a\x00"], [""], ["."],
                  [1], [["a"]], ["__attrs__"]):
        open(rootdirs, "w").write(json.dumps(dict(meta, names=names)))
        with pytest.raises(FormatError, match="__rootdirs__"):
            blzarr.open(troot, mode="r")
    # a column directory that is a symlink to a carray elsewhere
    open(rootdirs, "w").write(json.dumps(meta))
    coldir = t.cols["b"].rootdir
    shutil.rmtree(coldir)
    os.symlink(outside, coldir)
    for mode in ("r", "a"):
        with pytest.raises(FormatError, match="outside"):
            blzarr.open(troot, mode=mode)
    if fmt == "blz":
        # a superchunk file that is a symlink out of the root, or named to look like one
        root = str(tmp_path / "c")
        blzarr.carray(np.arange(100), rootdir=root, chunklen=10, superchunklen=2, format="blz").close()
        f2 = os.path.join(root, "data", "__2__.bin")
        shutil.move(f2, str(tmp_path / "stolen.bin"))
        os.symlink(str(tmp_path / "stolen.bin"), f2)
        for mode in ("r", "a"):
            with pytest.raises(FormatError, match="__2__.bin"):
                blzarr.open(root, mode=mode)
        os.remove(f2)
        shutil.move(str(tmp_path / "stolen.bin"), f2)
        open(os.path.join(root, "data", "__-1__.bin"), "wb").write(b"x")
        open(os.path.join(root, "data", "__ 3__.bin"), "wb").write(b"x")
        assert blzarr.open(root, mode="r")[:].tolist() == list(range(100))


if __name__ == "__main__" and sys.argv[1:2] == ["--matrix"]:
    _matrix_child(sys.argv[2])


def test_every_error_class_is_exported_and_subclasses_a_builtin():
    import blzarr as _b
    for name in ("BlzarrError", "ChunkError", "FormatError", "ChecksumError", "ReadOnlyError",
                 "PickleNotAllowedError", "StorageError", "LockError", "MetalayerError"):
        cls = getattr(_b, name)
        assert issubclass(cls, _b.BlzarrError)
        if name != "BlzarrError":
            assert issubclass(cls, (ValueError, OSError)), name
