"""Drop-in: bcolz's import paths and public names resolve the same way in blzarr.

The name sets are read from the installed bcolz (bcolz-zipline), so a name bcolz has and blzarr
lacks fails here unless it is listed in OMITTED with the reason.
"""

import importlib
import inspect
import os
import types

import numpy as np
import pytest

import blzarr

bcolz = pytest.importorskip("bcolz")

# bcolz's modules that applications import by path
MODULES = ["attrs", "carray_ext", "ctable", "toplevel", "defaults", "chunked_eval", "utils", "arrayprint"]

# names bcolz exposes that blzarr deliberately does not, with the reason
OMITTED = {
    "": {
        "py2help": "Python 2 compatibility shims (izip, xrange, ...): blzarr runs on Python 3 only "
                   "(test_bcolz_suite loads bcolz's own for bcolz's tests, which import it)",
        "tests": "bcolz's own test package; blzarr.test() runs blzarr's tests",
        "atexit": "a standard-library module bcolz's __init__ imports for its own use, not an API",
        "Version": "packaging.version.Version, imported by bcolz's __init__ for its version checks",
        "dask": "the dask package itself, imported eagerly by bcolz; blzarr imports it when used",
        "numexpr": "the numexpr package itself, imported eagerly by bcolz; blzarr imports it when used",
        "pandas": "the pandas package itself, imported eagerly by bcolz; blzarr imports it when used",
        "tables": "the PyTables package itself, imported eagerly by bcolz; blzarr imports it when used",
    },
    "carray_ext": {
        "chunks": "bcolz's internal list of on-disk chunks; blzarr's chunk stores differ by layout "
                  "(carray.chunks gives the chunks either way)",
        "use_threads": "an internal flag of bcolz's Blosc calls (always None)",
        "decode_byte": "a Python 2/3 bytes helper of bcolz's extension",
        "decode_uint32": "a Python 2/3 bytes helper of bcolz's extension",
        "list_bytes_to_str": "a Python 2/3 bytes helper of bcolz's extension",
    },
    "ctable": {n: "a private helper of bcolz's ctable (name checks); blzarr.ctable.check_name "
                  "does that job" for n in ("is_identifier", "re_ident", "re_str_split",
                                            "split_string", "validate_names")},
    "chunked_eval": {"numexpr_functions": "a private table of bcolz's numexpr vm",
                     "is_sequence_like": "a private helper of bcolz's eval"},
    "arrayprint": {n: "bcolz's copy of NumPy 1.x's private formatter classes; blzarr formats "
                      "with NumPy's own" for n in ("ComplexFormat", "DatetimeFormat", "FloatFormat",
                                                  "IntegerFormat", "LongComplexFormat",
                                                  "LongFloatFormat", "TimedeltaFormat", "repr_format")}
    | {"product": "a NumPy function bcolz's arrayprint imports (gone from NumPy 2)"},
}


def _api(mod, top):
    """The public names of a bcolz module: its own definitions and constants, not the modules and
    third-party/standard-library objects it happens to import."""
    out = set()
    for n in dir(mod):
        if n.startswith("_"):
            continue
        v = getattr(mod, n)
        if isinstance(v, types.ModuleType):
            if v.__name__.startswith("bcolz.") or top:
                out.add(n)
            continue
        if n in ("absolute_import", "bcolz", "np", "numpy", "json", "os", "sys", "re", "math", "shutil",
                 "struct", "datetime", "tempfile", "threading", "subprocess", "glob", "it", "warnings",
                 "contextmanager", "OrderedDict", "namedtuple", "iskeyword", "islice", "imap", "izip",
                 "xrange", "dict_iteritems", "da", "time"):
            continue
        owner = getattr(v, "__module__", None) or ""
        if (callable(v) or isinstance(v, np.ufunc)) and not owner.startswith("bcolz") and not top:
            continue           # imported from NumPy or the standard library
        out.add(n)
    return out


def test_top_level_names():
    theirs = _api(bcolz, top=True)
    missing = sorted(theirs - set(dir(blzarr)) - set(OMITTED[""]))
    assert not missing, f"bcolz names missing from blzarr: {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_module_names(name):
    theirs = importlib.import_module("bcolz." + name)
    ours = importlib.import_module("blzarr." + name)
    assert isinstance(ours, types.ModuleType)
    missing = sorted(_api(theirs, top=False) - set(dir(ours)) - set(OMITTED.get(name, {})))
    assert not missing, f"bcolz.{name} names missing from blzarr.{name}: {missing}"


def test_names_that_are_modules_and_objects_resolve_like_bcolz():
    import bcolz.defaults  # noqa: F401
    import blzarr.defaults  # noqa: F401
    for n in ("attrs", "ctable", "defaults", "eval", "carray", "carray_ext", "toplevel", "chunked_eval",
              "utils", "arrayprint"):
        theirs, ours = getattr(bcolz, n), getattr(blzarr, n)
        assert isinstance(ours, types.ModuleType) == isinstance(theirs, types.ModuleType), n
        assert isinstance(ours, type) == isinstance(theirs, type), n
    assert type(blzarr.defaults).__name__ == type(bcolz.defaults).__name__ == "Defaults"
    from blzarr.containers.ctable.table import ctable
    from blzarr.carray_ext import carray, chunk
    from blzarr.defaults import defaults_ctx
    assert ctable is blzarr.ctable and carray is blzarr.carray and chunk is blzarr.chunk
    assert defaults_ctx is blzarr.defaults_ctx
    assert blzarr.attrs.ATTRSDIR == bcolz.attrs.ATTRSDIR
    for n in ("DATA_DIR", "META_DIR", "SIZES_FILE", "STORAGE_FILE", "EXTENSION", "MAGIC",
              "BLOSC_HEADER_LENGTH", "BLOSCPACK_HEADER_LENGTH", "FORMAT_VERSION", "MAX_FORMAT_VERSION",
              "MAX_CHUNKS", "IntType", "SizeType"):
        assert getattr(blzarr.carray_ext, n) == getattr(bcolz.carray_ext, n), n
    assert blzarr.ncores == bcolz.ncores
    assert (blzarr.min_numexpr_version, blzarr.min_dask_version) == \
        (bcolz.min_numexpr_version, bcolz.min_dask_version)


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_attrs_standalone(tmp_path, fmt):
    root = str(tmp_path / "t")
    t = blzarr.ctable({"a": np.arange(5), "b": np.ones(5)}, rootdir=root, mode="w", format=fmt)
    t.attrs["unit"] = "m"
    t.cols["a"].attrs["scale"] = 2
    t.flush()
    a = blzarr.attrs.attrs(root, "r")
    assert a.attrs == {"unit": "m"} and "unit" in a.attrs and a["unit"] == "m"
    assert "unit" in t.attrs.attrs
    col = blzarr.attrs.attrs(os.path.join(root, "a") if fmt == "bcolz" else t.cols["a"].rootdir, "r")
    assert col.getall() == {"scale": 2}
    w = blzarr.attrs.attrs(root, "a")
    w["more"] = [1, 2]
    assert blzarr.open(root, mode="r").attrs.getall() == {"unit": "m", "more": [1, 2]}
    with pytest.raises(blzarr.ReadOnlyError):
        a["x"] = 1
    if fmt == "bcolz":
        assert bcolz.attrs.attrs(root, "r").attrs == {"unit": "m", "more": [1, 2]}
        assert bcolz.attrs.attrs(os.path.join(root, "a"), "r").attrs == {"scale": 2}
    with pytest.raises(FileNotFoundError, match="nope"):
        blzarr.attrs.attrs(str(tmp_path / "nope"), "r")


def test_printoptions_like_bcolz():
    assert blzarr.get_printoptions() == bcolz.get_printoptions()
    ints = np.arange(5000) * 3    # bcolz's own printing of floats fails under NumPy 2
    # bcolz prints NumPy 1.13's '..., ' where NumPy (and blzarr) now print '...'
    assert str(blzarr.carray(ints)) == str(bcolz.carray(ints)).replace("..., ", "... ") == \
        blzarr.array2string(blzarr.carray(ints))
    assert str(blzarr.carray(ints[:900])) == np.array2string(ints[:900])
    data = np.arange(5000) * 0.25
    a = blzarr.carray(data)
    assert str(a) == np.array2string(data, threshold=1000)
    saved = blzarr.get_printoptions()
    try:
        blzarr.set_printoptions(edgeitems=1, precision=2)
        assert str(a) == np.array2string(data, edgeitems=1, precision=2, threshold=1000)
        assert str(blzarr.carray(data[:7] / 3)) == np.array2string(data[:7] / 3, precision=2)
    finally:
        blzarr.set_printoptions(**saved)
    with pytest.raises(ValueError, match="edgeitems"):
        blzarr.set_printoptions(edgeitems=-1)


def test_utils_like_bcolz():
    from blzarr import utils
    for mb in (1e-6, 0.01, 1, 37.5, 1e3, 1e6):
        assert utils.calc_chunksize(mb) == bcolz.utils.calc_chunksize(mb)
    for args in ((0, 10, 3), (5, 5, 1), (7, 3, 2), (0, 1, 5)):
        assert utils.get_len_of_range(*args) == bcolz.utils.get_len_of_range(*args) == len(range(*args))
    for n in (0, 1023, 10234, 10 ** 7, 10 ** 10, 10 ** 13):
        assert utils.human_readable_size(n) == bcolz.utils.human_readable_size(n)
    x = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(utils.quantize(x, 3), bcolz.utils.quantize(x, 3))
    with pytest.raises(TypeError):
        utils.quantize(np.arange(3), 2)
    np.testing.assert_array_equal(utils.to_ndarray(3, np.dtype("f8"), arrlen=4),
                                  bcolz.utils.to_ndarray(3, np.dtype("f8"), arrlen=4))
    assert list(utils.build_carray(np.arange(3), None)) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------
# ctable columns at root/<name> in both layouts

def _table(root, fmt):
    cols = {"a": np.arange(300, dtype="i8"), "b": np.arange(300) * 0.5}
    return blzarr.ctable(cols, rootdir=root, mode="w", format=fmt, chunklen=64), cols


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_column_directory_by_path(tmp_path, fmt):
    root = str(tmp_path / "t")
    t, cols = _table(root, fmt)
    assert sorted(os.listdir(root)) == ["__attrs__", "__rootdirs__", "a", "b"]
    for n, v in cols.items():
        c = blzarr.carray(rootdir=os.path.join(root, n), mode="r")
        assert c.format == fmt
        np.testing.assert_array_equal(c[:], v)
    t.addcol(np.arange(300) % 7, name="c")
    t.flush()
    np.testing.assert_array_equal(blzarr.carray(rootdir=os.path.join(root, "c"), mode="r")[:],
                                  np.arange(300) % 7)
    t.delcol("a")
    assert not os.path.exists(os.path.join(root, "a"))
    t.addcol(np.ones(300), name="data")           # a column may be called 'data' in both layouts
    t.flush()
    del t
    r = blzarr.ctable(rootdir=root, mode="r")
    assert r.names == ["b", "c", "data"]
    np.testing.assert_array_equal(r["data"][:], np.ones(300))
    np.testing.assert_array_equal(blzarr.open(os.path.join(root, "data"), mode="r")[:], np.ones(300))
    if fmt == "bcolz":
        b = bcolz.ctable(rootdir=root, mode="r")
        assert b.names == ["b", "c", "data"]
        np.testing.assert_array_equal(bcolz.carray(rootdir=os.path.join(root, "c"), mode="r")[:],
                                      np.arange(300) % 7)


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_colliding_column_names_refused(tmp_path, fmt):
    t, _ = _table(str(tmp_path / "t"), fmt)
    for bad in ("__attrs__", "__rootdirs__"):
        with pytest.raises(ValueError, match=bad):
            t.addcol(np.zeros(300), name=bad)
    assert t.names == ["a", "b"]


# ---------------------------------------------------------------------------------------------------------
# defaults.format

def test_defaults_format(tmp_path):
    assert blzarr.defaults.format == "blz"
    with pytest.raises(ValueError, match="format"):
        blzarr.defaults.format = "zarr"
    with blzarr.defaults_ctx(format="bcolz"):
        a = blzarr.carray(np.arange(10), rootdir=str(tmp_path / "a"), mode="w")
        z = blzarr.zeros(10, rootdir=str(tmp_path / "z"), mode="w")
        t = blzarr.ctable({"x": np.arange(10)}, rootdir=str(tmp_path / "t"), mode="w")
        k = blzarr.carray(np.arange(10), rootdir=str(tmp_path / "k"), mode="w", format="blz")
    assert blzarr.defaults.format == "blz"
    assert (a.format, z.format, t.format, k.format) == ("bcolz", "bcolz", "bcolz", "blz")
    assert blzarr.carray(np.arange(3), rootdir=str(tmp_path / "d"), mode="w").format == "blz"
    a.flush(); z.flush(); t.flush()
    np.testing.assert_array_equal(bcolz.open(str(tmp_path / "a"))[:], np.arange(10))
    np.testing.assert_array_equal(bcolz.open(str(tmp_path / "t"))["x"][:], np.arange(10))
    # an existing directory keeps its layout whatever the default
    blzarr.defaults.format = "bcolz"
    try:
        assert blzarr.open(str(tmp_path / "k")).format == "blz"
    finally:
        blzarr.defaults.format = "blz"


# ---------------------------------------------------------------------------------------------------------
# iteration objects

def test_iter_objects_have_iter_like_bcolz():
    data = np.arange(50)
    ours, theirs = blzarr.carray(data, chunklen=8), bcolz.carray(data, chunklen=8)
    for a in (ours, ours.view()):
        it = iter(a)
        assert hasattr(it, "iter") and next(it) == 0
        assert list(it.iter(3, 9)) == list(iter(theirs).iter(3, 9)) == list(range(3, 9))
        args = (2, 40, 3, 4, 1)                 # start, stop, step, limit, skip
        assert list(a.iter(5, 10).iter(*args)) == list(theirs.iter(5, 10).iter(*args))
        assert list(a.iter(*args)) == list(theirs.iter(*args))
        chained = a.iter(0, 10)
        assert next(chained) == 0 and list(chained) == list(range(1, 10))
    assert list(ours) == list(theirs) == data.tolist()
    assert type(next(iter(ours))) is int


# ---------------------------------------------------------------------------------------------------------
# eval with vm='dask' and da. names, ctable.copy(cparams=), purge,
# chunk.atomsize / itemsize

def test_eval_dask_with_da_names():
    pytest.importorskip("dask")
    f0, f1 = np.arange(1000) * 0.5, np.arange(1000) % 13 * 1.0
    want = f0 * np.sin(f1)
    c0, c1 = blzarr.carray(f0, chunklen=128), blzarr.carray(f1, chunklen=128)  # noqa: F841
    got = blzarr.eval("c0 * da.sin(c1)", vm="dask")
    np.testing.assert_allclose(got[:], want)
    t = blzarr.ctable([f0, f1], names=["f0", "f1"], chunklen=128)
    bt = bcolz.ctable([f0, f1], names=["f0", "f1"], chunklen=128)
    np.testing.assert_allclose(t.eval("f0 * da.sin(f1)", vm="dask")[:], want)
    np.testing.assert_allclose(t.eval("f0 * da.sin(f1)", vm="dask")[:],
                               bt.eval("f0 * da.sin(f1)", vm="dask")[:])
    with blzarr.defaults_ctx(vm="dask"):
        np.testing.assert_allclose(t.eval("f0 * da.sin(f1)")[:], want)
    with pytest.raises(NameError, match="nope"):
        t.eval("f0 * nope", vm="dask")


@pytest.mark.parametrize("rootdir", [False, True])
def test_ctable_copy_applies_cparams(tmp_path, rootdir):
    d = np.random.default_rng(0).integers(0, 1000, 100_000)
    for i, cp in enumerate((blzarr.cparams(clevel=9, cname="zstd"), {"clevel": 9, "cname": "zstd"})):
        kw = {"rootdir": str(tmp_path / f"c{i}")} if rootdir else {}
        t = blzarr.ctable([d, d * 0.5], names=["a", "b"], cparams=blzarr.cparams(clevel=1))
        c = t.copy(cparams=cp, **kw)
        bt = bcolz.ctable([d, d * 0.5], names=["a", "b"], cparams=bcolz.cparams(clevel=1))
        bc = bt.copy(cparams=bcolz.cparams(clevel=9, cname="zstd"))
        assert c.cbytes < t.cbytes and bc.cbytes < bt.cbytes
        for n in ("a", "b"):
            assert (c[n].cparams.clevel, c[n].cparams.cname) == (bc[n].cparams.clevel, bc[n].cparams.cname) \
                == (9, "zstd")
            np.testing.assert_array_equal(c[n][:], bc[n][:])


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_purge_deletes_in_both_layouts(tmp_path, fmt):
    p, q = str(tmp_path / "ours"), str(tmp_path / "theirs")
    c = blzarr.carray(np.arange(100), rootdir=p, mode="w", format=fmt)
    b = bcolz.carray(np.arange(100), rootdir=q, mode="w")
    assert c.purge() is None and b.purge() is None
    assert not os.path.exists(p) and not os.path.exists(q)
    with pytest.raises(OSError):
        b.purge()
    with pytest.raises(OSError, match="ours"):
        c.purge()
    m = blzarr.carray(np.arange(3))
    m.purge()                                       # in memory: nothing, as in bcolz
    assert m[:].tolist() == [0, 1, 2]


def test_compact_is_the_blz_space_reclaimer(tmp_path):
    p = str(tmp_path / "c")
    c = blzarr.carray(np.zeros(4000, dtype="i8"), rootdir=p, chunklen=500, format="blz")
    c[500:1000] = 7
    c.flush()
    assert c.compact() >= 0 and os.path.isdir(p)
    assert c[:].sum() == 3500
    b = blzarr.carray(np.zeros(10), rootdir=str(tmp_path / "b"), format="bcolz")
    with pytest.raises(AttributeError, match="blz"):
        b.compact()


@pytest.mark.parametrize("data", [np.arange(40), np.arange(120.).reshape(40, 3), np.array(["abc"] * 40),
                                  np.array([b"xyz"] * 40), np.zeros(40, "i2,f8"),
                                  np.zeros((40, 2, 2), "f4"), np.zeros(40, bool)],
                         ids=["i8", "f8x3", "U3", "S3", "struct", "f4x2x2", "bool"])
def test_chunk_atomsize_itemsize(data):
    ours, theirs = blzarr.carray(data, chunklen=8).chunks[0], bcolz.carray(data, chunklen=8).chunks[0]
    assert (ours.atomsize, ours.itemsize) == (theirs.atomsize, theirs.itemsize)
    standalone = blzarr.chunk(data[:8], np.dtype((data.dtype, data.shape[1:])))
    assert (standalone.atomsize, standalone.itemsize) == (theirs.atomsize, theirs.itemsize)


# ---------------------------------------------------------------------------------------------------------
# what single elements, iteration and rows give: bcolz's NumPy .item() values, for every kind of dtype

def _described(v):
    """A value with the Python type of every part, to compare blzarr's and bcolz's exactly."""
    if hasattr(v, "_fields"):
        return ("row", v._fields, [_described(x) for x in v])
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_described(x) for x in v])
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.tolist())
    return (type(v).__name__, repr(v))


@pytest.mark.parametrize("dtype", ["i4", "u8", "f4", "?", "c16", "S3", "U3", "M8[s]", "M8[ns]", "M8[D]",
                                   "m8[s]", "m8[ns]", "i4,f8", "(2,)f8"])
# (records with subarray fields are left out: bcolz's tuples hold views of a buffer it reuses, so
# its c[0] changes under the caller)
def test_elements_and_rows_like_bcolz(dtype):
    dt = np.dtype(dtype)
    data = np.arange(6).astype(dt) if dt.kind in "MmSUiufcb" else np.ones(6, dtype=dt)
    if dt.kind == "V" and dt.names:
        data = np.array([tuple(np.full(dt[n].shape, i) if dt[n].shape else i for n in dt.names)
                         for i in range(6)], dtype=dt)
    mask = np.array([0, 1, 0, 1, 1, 0], bool)
    got = {}
    for m in (bcolz, blzarr):
        c = m.carray(data, chunklen=4)
        r = {"c[0]": c[0], "c[-1]": c[-1], "next": next(iter(c)), "iter": list(c.iter(1, 6, 2)),
             "limit": list(c.iter(0, 6, 1, 2, 1))}
        if data.ndim == 1:
            r["where"] = list(c.where(mask))
        if not dt.names and not dt.shape:
            t = m.ctable([data, np.arange(6)], names=["x", "n"], chunklen=4)
            r.update({"t[0]": t[0], "row": next(iter(t)), "t.where": list(t.where("n > 3")),
                      "nrow": list(t.where("n > 3", outcols=["nrow__", "x"])), "col": t["x"][1],
                      "t.iter": list(t.iter(0, 6, 2, outcols="n, x"))})
        got[m.__name__] = {k: _described(v) for k, v in r.items()}
    assert got["blzarr"] == got["bcolz"]
    c = blzarr.carray(data)
    assert (type(c.size), c.size) == (type(bcolz.carray(data).size), bcolz.carray(data).size)


@pytest.mark.parametrize("fmt", ["memory", "bcolz", "blz"])
def test_iter_objects_on_views_in_every_layout(tmp_path, fmt):
    data = np.arange(200) * 3
    kw = {} if fmt == "memory" else {"rootdir": str(tmp_path / "a"), "format": fmt}
    ours, theirs = blzarr.carray(data, chunklen=16, **kw).view(), bcolz.carray(data, chunklen=16).view()
    for args in ((0, 200, 1, None, 0), (3, 190, 7, 11, 2), (150, None, 2, 5, 20), (0, 50, 4, 100, 0)):
        assert list(ours.iter(*args)) == list(theirs.iter(*args))
        assert list(iter(ours).iter(*args)) == list(iter(theirs).iter(*args))
        assert list(ours.iter(10, 20).iter(*args)) == list(theirs.iter(10, 20).iter(*args))


def test_eval_dask_on_carrays_like_bcolz():
    pytest.importorskip("dask")
    f0, f1 = np.arange(1000) * 0.5, np.arange(1000) % 13 * 1.0
    c0, c1 = blzarr.carray(f0, chunklen=128), blzarr.carray(f1, chunklen=128)
    b0, b1 = bcolz.carray(f0, chunklen=128), bcolz.carray(f1, chunklen=128)
    ours = blzarr.eval("c0 * da.sin(c1) + da.exp(c0 / 1000)", vm="dask", user_dict={"c0": c0, "c1": c1})
    theirs = bcolz.eval("c0 * da.sin(c1) + da.exp(c0 / 1000)", vm="dask", user_dict={"c0": b0, "c1": b1})
    assert type(ours).__name__ == type(theirs).__name__ == "carray"
    np.testing.assert_array_equal(ours[:], theirs[:])


def test_ctable_copy_cparams_into_bcolz_layout(tmp_path):
    d = np.random.default_rng(1).integers(0, 1000, 50_000)
    t = blzarr.ctable([d, d * 0.5], names=["a", "b"], cparams=blzarr.cparams(clevel=1))
    c = t.copy(rootdir=str(tmp_path / "c"), format="bcolz", cparams=blzarr.cparams(clevel=9, cname="zstd"))
    c.flush()
    assert c.cbytes < t.cbytes
    b = bcolz.ctable(rootdir=str(tmp_path / "c"), mode="r")
    for n in ("a", "b"):
        assert (b[n].cparams.clevel, b[n].cparams.cname) == (9, "zstd")
        np.testing.assert_array_equal(b[n][:], t[n][:])


def test_ctable_append_takes_bcolz_keyword():
    t, b = blzarr.ctable({"a": np.arange(3)}), bcolz.ctable([np.arange(3)], names=["a"])
    t.append(cols=[[7, 8]])
    b.append(cols=[[7, 8]])
    assert t["a"][:].tolist() == b["a"][:].tolist() == [0, 1, 2, 7, 8]


def test_test_function_takes_bcolz_arguments(monkeypatch):
    import pytest as pt
    seen = []
    monkeypatch.setattr(pt, "main", lambda args: seen.append(args) or 0)
    assert blzarr.test() == 0 and blzarr.test(True) == 0 and blzarr.test(verbose=False, heavy=True) == 0
    assert blzarr.test(False, True, "-k", "x") == 0
    plain, verbose, heavy, both = seen
    assert plain[-2:] == ["-m", "not slow"] and "-v" not in plain
    assert "-v" in verbose and verbose[-2:] == ["-m", "not slow"]
    assert heavy[-2:] == ["-m", ""] and "-v" not in heavy          # every test, the slow ones too
    assert both[1:] == ["-k", "x", "-m", ""]


# ---------------------------------------------------------------------------------------------------------
# each difference the migration guide (docs/guide/migrating.rst) lists, against the real bcolz (so the list stays true)

def test_listed_indexing_differences():
    b, z = bcolz.arange(10), blzarr.arange(10)
    with pytest.raises(NotImplementedError):
        b[::-1]
    assert z[::-1].tolist() == list(range(9, -1, -1))
    with pytest.raises(NotImplementedError):
        b[2.0]
    with pytest.raises(IndexError):
        z[2.0]
    assert b[[1.0, 2.0]].tolist() == [1, 2]
    with pytest.raises(IndexError):
        z[[1.0, 2.0]]
    assert b[[True] * 10].tolist() == [1] * 10                # positions 1, 1, ...
    assert z[[True] * 10].tolist() == list(range(10))         # a mask
    assert b[-11] == 0
    with pytest.raises(IndexError):
        z[-11]
    with pytest.raises(NotImplementedError):
        list(bcolz.carray(np.zeros((3, 2))).where([True, False, True]))
    assert len(list(blzarr.carray(np.zeros((3, 2))).where([True, False, True]))) == 2


def test_listed_error_differences(tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        bcolz.open(missing)
    with pytest.raises(KeyError):
        bcolz.ctable(rootdir=missing, mode="r")
    for f in (lambda: blzarr.open(missing), lambda: blzarr.ctable(rootdir=missing, mode="r")):
        with pytest.raises(blzarr.StorageError) as e:
            f()
        assert isinstance(e.value, OSError)
    assert bcolz.cparams(clevel=10).clevel == 10
    with pytest.raises(ValueError, match="clevel"):
        blzarr.cparams(clevel=10)


def test_listed_attrs_differences(tmp_path):
    b = bcolz.carray([1], rootdir=str(tmp_path / "b"), mode="w")
    z = blzarr.carray([1], rootdir=str(tmp_path / "z"), mode="w", format="bcolz")
    for c in (b, z):
        c.attrs["ok"] = 1
        with pytest.raises(TypeError):
            c.attrs["when"] = np.datetime64("2020-01-01")
    with pytest.raises(OSError, match="not readable"):
        bcolz.open(str(tmp_path / "b")).attrs
    assert blzarr.open(str(tmp_path / "z")).attrs.getall() == {"ok": 1} == z.attrs.getall()
    os.makedirs(str(tmp_path / "bare"))
    with pytest.raises(FileNotFoundError):
        bcolz.attrs.attrs(str(tmp_path / "bare"), "r")
    assert blzarr.attrs.attrs(str(tmp_path / "bare"), "r").attrs == {}


def test_listed_storage_differences(tmp_path):
    when = np.arange(5).astype("M8[s]")
    with pytest.raises(TypeError):
        bcolz.carray(when, rootdir=str(tmp_path / "b"), mode="w")
    z = blzarr.carray(when, rootdir=str(tmp_path / "z"), mode="w", format="bcolz")
    z.flush()
    assert blzarr.open(str(tmp_path / "z"))[:].tolist() == when.tolist()
    with pytest.raises(FileNotFoundError):
        bcolz.carray([1], rootdir=str(tmp_path / "p" / "q"), mode="w")
    assert blzarr.carray([1], rootdir=str(tmp_path / "p2" / "q"), mode="w")[0] == 1


def test_listed_pandas3_strings():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"s": pd.Series(["ab", "c"], dtype="str"), "o": pd.Series(["ab", "c"], dtype=object)})
    ours, theirs = blzarr.ctable.fromdataframe(df), bcolz.ctable.fromdataframe(df)
    assert ours["o"].dtype == theirs["o"].dtype == np.dtype("U2")
    assert ours["s"].dtype == np.dtype("U2")
    if pd.api.types.is_string_dtype(df["s"].dtype) and df["s"].dtype != object:
        assert theirs["s"].dtype == np.dtype(object)
    assert ours.todataframe()["s"].tolist() == ["ab", "c"]


@pytest.mark.parametrize("value", [5, 2.5, np.float32(3), "ab", b"x", True])
def test_carray_of_a_scalar_like_bcolz(value):
    ours, theirs = blzarr.carray(value), bcolz.carray(value)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape == (1,)
    assert ours[:].tolist() == theirs[:].tolist()


@pytest.mark.parametrize("vm", ["numexpr", "python"])
@pytest.mark.parametrize("expr,ud", [("2 + 3", {}), ("x * 2", {"x": 2.5}), ("x > 1", {"x": np.float32(3)})])
def test_eval_without_arrays_like_bcolz(vm, expr, ud):
    pytest.importorskip("numexpr")
    ours, theirs = blzarr.eval(expr, vm=vm, user_dict=ud), bcolz.eval(expr, vm=vm, user_dict=ud)
    assert type(ours) is type(theirs) and np.asarray(ours).dtype == np.asarray(theirs).dtype
    assert np.asarray(ours).tolist() == np.asarray(theirs).tolist()


def test_listed_arange_and_compressed_size_differences():
    assert bcolz.arange(0, 1, 0.25)[:].tolist() == [0, 0, 0, 0]          # bcolz: an int arange
    assert blzarr.arange(0, 1, 0.25)[:].tolist() == [0.0, 0.25, 0.5, 0.75]
    data = np.arange(100_000)
    ours, theirs = blzarr.carray(data, chunklen=1000), bcolz.carray(data, chunklen=1000)
    assert ours.chunks[0].blocksize == theirs.chunks[0].blocksize
    assert ours.cbytes != theirs.cbytes                                  # blocks are never split
    np.testing.assert_array_equal(ours[:], theirs[:])


def test_listed_default_mode_reads_beside_a_writer_and_locks_at_the_first_write(tmp_path):
    """As with bcolz, a process may open a directory another process writes with the default mode
    and read it; its first write is refused (LockError naming the directory)."""
    import subprocess
    import sys
    p = str(tmp_path / "a")
    w = blzarr.carray(np.arange(10), rootdir=p, mode="w")     # this process writes
    w.flush()
    code = ("import sys, blzarr\n"
            "c = blzarr.open(sys.argv[1])\nprint(c[:].tolist())\n"
            "try:\n    c.append([1])\n    c.flush()\nexcept blzarr.LockError as e:\n    print('locked', sys.argv[1] in str(e))\n"
            "print(len(blzarr.open(sys.argv[1])))\n")
    out = subprocess.run([sys.executable, "-c", code, p], capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[:3] == [str(list(range(10))), "locked True", "10"], out.stderr
    w.close()
    out = subprocess.run([sys.executable, "-c", code, p],   # the writer is gone: the append goes through
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[:2] == [str(list(range(10))), "11"], (out.stdout, out.stderr)
