"""cparams, defaults, defaults_ctx, threads and the Blosc information functions."""

import numpy as np
import pytest

import blzarr
from blzarr import cparams, defaults


@pytest.fixture(autouse=True)
def restore_defaults():
    saved = dict(defaults.cparams), defaults.vm, defaults.out_flavor
    yield
    defaults.cparams, defaults.vm, defaults.out_flavor = saved


def test_shuffle_constants_match_bcolz(bcolz):
    assert (blzarr.NOSHUFFLE, blzarr.SHUFFLE, blzarr.BITSHUFFLE) == (0, 1, 2)
    assert (bcolz.NOSHUFFLE, bcolz.SHUFFLE, bcolz.BITSHUFFLE) == (0, 1, 2)


def test_cparams_defaults_and_fields():
    cp = cparams()
    assert (cp.clevel, cp.shuffle, cp.cname, cp.quantize) == (5, blzarr.SHUFFLE, "lz4", 0)
    cp = cparams(clevel=9, shuffle=blzarr.BITSHUFFLE, cname="zstd", quantize=3)
    assert (cp.clevel, cp.shuffle, cp.cname, cp.quantize) == (9, 2, "zstd", 3)
    assert repr(cp) == "cparams(clevel=9, shuffle=2, cname='zstd', quantize=3)"
    assert cp == cparams(9, 2, "zstd", 3) and cp != cparams(8, 2, "zstd", 3)
    assert hash(cp) == hash(cparams(9, 2, "zstd", 3))
    assert cp.to_dict() == {"clevel": 9, "shuffle": 2, "cname": "zstd", "quantize": 3}
    assert cparams(shuffle=True).shuffle == 1
    with pytest.raises(AttributeError):
        cp.clevel = 1


@pytest.mark.parametrize("kw", [dict(clevel=10), dict(clevel=-1), dict(clevel="5"), dict(clevel=1.5),
                                dict(shuffle=3), dict(shuffle="x"), dict(cname="nope"),
                                dict(quantize=-1), dict(quantize=1.5)])
def test_cparams_rejects_bad_values(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=name):
        cparams(**kw)
    with pytest.raises(ValueError, match=name):
        cparams.setdefaults(**kw)


def test_setdefaults_changes_new_carrays():
    cparams.setdefaults(clevel=1, cname="zlib")
    assert defaults.cparams == {"clevel": 1, "shuffle": 1, "cname": "zlib", "quantize": 0}
    c = blzarr.carray(np.arange(100))
    assert c.cparams.clevel == 1 and c.cparams.cname == "zlib"
    cparams.setdefaults(shuffle=blzarr.NOSHUFFLE)
    assert cparams().shuffle == 0 and cparams().cname == "zlib"


def test_defaults_cparams_setter_validates():
    defaults.cparams = cparams(clevel=3)
    assert defaults.cparams["clevel"] == 3
    defaults.cparams = {"clevel": 2, "shuffle": 0, "cname": "blosclz", "quantize": 0}
    assert cparams().cname == "blosclz"
    with pytest.raises(ValueError):
        defaults.cparams = {"clevel": 2}
    with pytest.raises(ValueError):
        defaults.cparams = {"clevel": 20, "shuffle": 0, "cname": "blosclz", "quantize": 0}


def test_defaults_vm_and_out_flavor():
    assert defaults.vm == ("numexpr" if blzarr.numexpr_here else "python")
    assert defaults.out_flavor == "bcolz"
    defaults.vm = "python"
    assert defaults.vm == defaults.eval_vm == "python"
    defaults.out_flavor = "numpy"
    assert defaults.eval_out_flavor == "numpy"
    with pytest.raises(ValueError):
        defaults.vm = "java"
    with pytest.raises(ValueError):
        defaults.out_flavor = "pandas"
    if not blzarr.dask_here:
        with pytest.raises(ValueError, match="dask"):
            defaults.vm = "dask"


def test_defaults_ctx_restores_even_on_error():
    before = dict(defaults.cparams), defaults.vm, defaults.out_flavor
    with blzarr.defaults_ctx(cparams=cparams(clevel=0), vm="python", out_flavor="numpy"):
        assert blzarr.carray(np.arange(10)).cparams.clevel == 0
        assert defaults.vm == "python" and defaults.out_flavor == "numpy"
        assert isinstance(blzarr.eval("a + 1", user_dict={"a": np.arange(3)}), np.ndarray)
    assert (dict(defaults.cparams), defaults.vm, defaults.out_flavor) == before
    with pytest.raises(RuntimeError):
        with blzarr.defaults_ctx(cparams={"clevel": 9, "shuffle": 0, "cname": "zlib", "quantize": 0}):
            assert cparams().clevel == 9
            raise RuntimeError("boom")
    assert (dict(defaults.cparams), defaults.vm, defaults.out_flavor) == before


def test_quantize_is_lossy_but_close():
    a = np.random.default_rng(0).standard_normal(10000)
    c = blzarr.carray(a, cparams=cparams(quantize=3), chunklen=1000)
    assert c.nleftover == 0  # (the uncompressed leftover is not quantized, as in bcolz)
    got = c[:]
    assert not np.array_equal(got, a)
    np.testing.assert_allclose(got, a, atol=1e-3)
    with pytest.raises(TypeError, match="quantize"):
        blzarr.carray(np.arange(10), cparams=cparams(quantize=3))  # floats only, as in bcolz


def test_threads():
    n = blzarr.detect_number_of_cores()
    assert isinstance(n, int) and n >= 1
    old = blzarr.set_nthreads(2)
    try:
        assert blzarr.set_nthreads(1) == 2
        a = np.arange(10 ** 6)
        assert np.array_equal(blzarr.carray(a)[:], a)
        if blzarr.numexpr_here:
            import numexpr
            assert numexpr.set_num_threads(1) == 1  # set_nthreads set numexpr's too
        assert blzarr.blosc_set_nthreads(3) == 1
        assert np.array_equal(blzarr.carray(a)[:], a)
        for bad in (0, -1, 1.5, "2", True):
            with pytest.raises(ValueError):
                blzarr.set_nthreads(bad)
    finally:
        blzarr.set_nthreads(old)


def test_blosc_information():
    version, date = blzarr.blosc_version()
    assert version.startswith("1.") and isinstance(date, str)
    names = blzarr.blosc_compressor_list()
    assert {"blosclz", "lz4", "lz4hc", "zlib", "zstd"} <= set(names)


def test_print_versions(capsys):
    blzarr.print_versions()
    out = capsys.readouterr().out
    assert "blzarr" in out and np.__version__ in out and blzarr.blosc_version()[0] in out


def test_here_flags():
    import importlib.util
    for name in ("numexpr", "pandas", "dask", "tables"):
        assert getattr(blzarr, f"{name}_here") == (importlib.util.find_spec(name) is not None)


def test_test_function_runs_pytest():
    # a selection that matches nothing: pytest's exit code 5, proving it ran on the test directory
    assert blzarr.test("-q", "-p", "no:cacheprovider", "-k", "no_test_has_this_name_xyz") == 5
