"""blzarr.eval with both virtual machines, against NumPy."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import blzarr

VMS = ["python"] + (["numexpr"] if blzarr.numexpr_here else [])

N = 10007
a_np = np.arange(N, dtype="f8") * 0.5 - 100
b_np = np.sin(np.arange(N, dtype="f8"))
i_np = np.arange(N, dtype="i4") % 97


@pytest.fixture
def cas(layout):
    """The operands, in memory, in the bcolz layout or in the BLZ layout."""
    def kw(name):
        return {**layout, "rootdir": layout["rootdir"] + "-" + name} if layout.on_disk else {}
    return (blzarr.carray(a_np, chunklen=1000, **kw("a")), blzarr.carray(b_np, chunklen=333, **kw("b")),
            blzarr.carray(i_np, chunklen=5000, **kw("i")))


@pytest.mark.parametrize("vm", VMS)
@pytest.mark.parametrize("expr,fn", [
    ("a * 2 + 1", lambda a, b, i: a * 2 + 1),
    ("a + b * i", lambda a, b, i: a + b * i),
    ("(a > 0) & (b < 0.5)", lambda a, b, i: (a > 0) & (b < 0.5)),
    ("sqrt(abs(a)) + sin(b)", lambda a, b, i: np.sqrt(np.abs(a)) + np.sin(b)),
    ("where(a > 10, a, -b)", lambda a, b, i: np.where(a > 10, a, -b)),
    ("i % 5 == 0", lambda a, b, i: i % 5 == 0),
    ("a ** 2", lambda a, b, i: a ** 2),
])
def test_eval_matches_numpy(cas, vm, expr, fn):
    a, b, i = cas
    exp = fn(a_np, b_np, i_np)
    got = blzarr.eval(expr, vm=vm)
    assert isinstance(got, blzarr.carray)
    assert got.dtype == exp.dtype and len(got) == N
    assert_allclose(got[:], exp, rtol=1e-12)
    got = blzarr.eval(expr, vm=vm, out_flavor="numpy")
    assert isinstance(got, np.ndarray)
    assert_allclose(got, exp, rtol=1e-12)


@pytest.mark.parametrize("vm", VMS)
def test_eval_mixes_numpy_carray_scalars_and_user_dict(cas, vm):
    a, _, _ = cas
    k = 3.5
    got = blzarr.eval("a * k + x", vm=vm, user_dict={"x": b_np}, out_flavor="numpy")
    assert_allclose(got, a_np * 3.5 + b_np)
    # user_dict wins over local names
    got = blzarr.eval("a + 1", vm=vm, user_dict={"a": np.ones(3)}, out_flavor="numpy")
    assert_array_equal(got, np.full(3, 2.0))


@pytest.mark.parametrize("vm", VMS)
def test_eval_blen_and_carray_kwargs(cas, vm, tmp_path):
    a, b, _ = cas
    for blen in (1, 17, 1000, 10 ** 6):
        assert_allclose(blzarr.eval("a - b", vm=vm, blen=blen, out_flavor="numpy"), a_np - b_np)
    p = str(tmp_path / "out")
    out = blzarr.eval("a - b", vm=vm, rootdir=p, format="bcolz", chunklen=128,
                      cparams=blzarr.cparams(clevel=9))
    assert out.chunklen == 128 and out.cparams.clevel == 9 and out.rootdir == p
    assert_allclose(blzarr.open(p)[:], a_np - b_np)


@pytest.mark.parametrize("vm", VMS)
def test_eval_scalars_only_and_empty(vm):
    assert blzarr.eval("2 * 3 + 1", vm=vm) == 7
    e = blzarr.carray(np.empty(0))
    got = blzarr.eval("e * 2", vm=vm, out_flavor="numpy")
    assert got.shape == (0,)


def test_eval_default_vm_and_flavor(cas):
    a, _, _ = cas
    with blzarr.defaults_ctx(vm="python", out_flavor="numpy"):
        got = blzarr.eval("a + 1")
        assert isinstance(got, np.ndarray)
        assert_array_equal(got, a_np + 1)


def test_eval_errors(cas):
    a, _, _ = cas
    with pytest.raises(NameError, match="undefined_thing"):
        blzarr.eval("a + undefined_thing")
    with pytest.raises(ValueError, match="expression"):
        blzarr.eval("a +")
    with pytest.raises(ValueError, match="vm"):
        blzarr.eval("a + 1", vm="java")
    with pytest.raises(ValueError, match="out_flavor"):
        blzarr.eval("a + 1", out_flavor="pandas")
    short = np.arange(5)
    with pytest.raises(ValueError, match="length"):
        blzarr.eval("a + short")
    lst = [1, 2, 3]
    with pytest.raises(ValueError, match="lst"):
        blzarr.eval("lst * 2")
    if not blzarr.dask_here:
        with pytest.raises(ImportError, match="dask"):
            blzarr.eval("a + 1", vm="dask")


def test_eval_no_builtins_in_python_vm():
    x = np.arange(3)
    with pytest.raises(NameError):
        blzarr.eval("__import__('os').getcwd() + x", vm="python")


def test_eval_inside_function_sees_locals():
    def inner():
        local_arr = blzarr.carray(np.arange(10))
        return blzarr.eval("local_arr * 3", out_flavor="numpy")
    assert_array_equal(inner(), np.arange(10) * 3)


def test_string_keys_on_carray_use_eval(cas):
    a, b, _ = cas
    def f():
        zz = blzarr.carray(np.arange(50))
        got = zz["(zz > 5) & (zz < 9)"]
        vals = list(zz.where("zz > 45"))
        zz["zz < 3"] = -1
        return got, vals, zz[:5]
    got, vals, head = f()
    assert_array_equal(got, [6, 7, 8])
    assert vals == [46, 47, 48, 49]
    assert_array_equal(head, [-1, -1, -1, 3, 4])
    assert_array_equal(a["a > b * 1000"], a_np[a_np > b_np * 1000])


@pytest.mark.parametrize("blen", [None, 1, 3, 7])
def test_eval_reductions(blen):
    a = np.arange(60).reshape(15, 4)
    b = blzarr.carray(a, chunklen=4)
    c = blzarr.carray(np.arange(1, 16), chunklen=4)
    # the python vm's sum is Python's: along the first axis (bcolz's behaviour)
    assert_array_equal(blzarr.eval("sum(b)", vm="python", blen=blen), sum(a))
    assert_array_equal(blzarr.eval("sum(b, axis=0)", vm="python", blen=blen), a.sum(axis=0))
    assert_array_equal(blzarr.eval("sum(b, axis=1)", vm="python", blen=blen, out_flavor="numpy"), a.sum(axis=1))
    assert_array_equal(blzarr.eval("sum(b * 2) + 1", vm="python", blen=blen), (a * 2).sum(axis=0) + 1)
    assert blzarr.eval("prod(c)", vm="python", blen=blen) == np.prod(np.arange(1, 16))
    assert blzarr.eval("sum(c * 2)", vm="python", blen=blen) == np.arange(1, 16).sum() * 2
    if blzarr.numexpr_here:
        # numexpr's reductions: everything, or along `axis`
        assert blzarr.eval("sum(b)", vm="numexpr", blen=blen) == a.sum()
        assert_array_equal(blzarr.eval("sum(b, axis=1)", vm="numexpr", blen=blen, out_flavor="numpy"),
                           a.sum(axis=1))
        assert_array_equal(blzarr.eval("sum(b, axis=0)", vm="numexpr", blen=blen), a.sum(axis=0))
        assert blzarr.eval("prod(c)", vm="numexpr", blen=blen) == np.prod(np.arange(1, 16))
        assert blzarr.eval("sum(c * 2)", vm="numexpr", blen=blen) == np.arange(1, 16).sum() * 2


def test_eval_rejects_python_sequences():
    r = range(10)
    with pytest.raises(ValueError, match="range"):
        blzarr.eval("r * 3")
    assert r  # (the name is looked up in this frame)


def test_eval_attributes_are_not_variables():
    z = np.array([1 + 2j, 3 - 1j])
    assert_array_equal(blzarr.eval("z.real * 2", vm="python", out_flavor="numpy"), [2.0, 6.0])


def test_eval_dask_vm_with_da_prefix():
    pytest.importorskip("dask")
    c = blzarr.carray(np.arange(1, 1001.0), chunklen=100)
    d = np.arange(1000.0) + 2
    r = blzarr.eval("da.sin(c) + 2 * da.log(d) - 3", vm="dask")
    assert isinstance(r, blzarr.carray)
    assert_allclose(r[:], np.sin(np.arange(1, 1001.0)) + 2 * np.log(d) - 3)
    assert blzarr.eval("da.nansum(c)", vm="dask") == np.arange(1, 1001.0).sum()


@pytest.mark.parametrize("how", ["lazyexpr", "eval"])
def test_python_vm_raises_numpys_overflow_error_and_still_refuses_builtins(how):
    # NumPy raises OverflowError for an int8 column + 300; evaluated by the python vm it must be that
    # error (NumPy's C code imports its exception classes through the evaluation's builtins), while
    # a builtin named in the expression stays unknown
    x = blzarr.carray(np.arange(100, dtype="i1"))
    with pytest.raises(OverflowError):
        np.arange(100, dtype="i1") + 300

    def run(expr):
        if how == "lazyexpr":
            return blzarr.lazyexpr(expr, vm="python", user_dict={"x": x})[:]
        return blzarr.eval(expr, vm="python", user_dict={"x": x})

    with pytest.raises(OverflowError, match="300"):
        run("x + 300")
    with pytest.raises(NameError, match="__import__"):
        run("__import__('os').getpid() + x")
    np.testing.assert_array_equal(run("x + 3"), np.arange(100, dtype="i1") + 3)


@pytest.mark.parametrize("vm", VMS)
@pytest.mark.parametrize("dtype", ["f8", "f4", "i8", "i4", "u1", "?"])
def test_expressions_over_empty_arrays_are_empty_and_typed_as_numpy(vm, dtype, layout, tmp_path):
    """An empty operand gives an empty result typed as a non-empty one: comparisons, arithmetic and
    sums (the expression is typed on a first row, which an empty array lacks)."""
    x_np = np.array([], dtype)
    kw = {**layout, "rootdir": str(tmp_path / "x")} if layout.on_disk else {}
    x = blzarr.carray(x_np, **kw)
    one = x_np.dtype.type(1)
    got = (x > one)[:]
    assert got.dtype == np.dtype(bool) and got.shape == (0,)
    for expr, want in [("x * 2 + 1", x_np * 2 + 1), ("x > 1", x_np > one)]:
        r = blzarr.eval(expr, vm=vm, user_dict={"x": x})[:]
        # eval's values keep its evaluator's types (numexpr's for numexpr): those of one row
        typed = blzarr.eval(expr, vm=vm, user_dict={"x": blzarr.carray(np.zeros(1, dtype))})[:]
        assert r.shape == (0,) and r.dtype == typed.dtype
        lz = blzarr.lazyexpr(expr, user_dict={"x": x}, vm=vm)
        assert lz[:].shape == (0,) and lz[:].dtype == want.dtype
        assert lz.sum() == want.sum()
