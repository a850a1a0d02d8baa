"""Random sequences of operations on a carray, compared step by step with the same ones on a NumPy array."""

import os
import shutil
import tempfile

import numpy as np
from hypothesis import given, note, strategies as st

import blzarr
from blzarr import carray

DTYPES = ["i8", "f4", "u1", "?", "S3", "U2", "c8", "M8[s]", "i2,f8"]


def values_for(dtype, n, draw):
    dtype = np.dtype(dtype)
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    raw = rng.integers(-100, 100, n)
    if dtype.names:
        out = np.zeros(n, dtype)
        for name in dtype.names:
            out[name] = rng.integers(-100, 100, n)
        return out
    if dtype.kind == "S":
        return np.array([str(v).encode() for v in raw], dtype=dtype)
    if dtype.kind == "U":
        return np.array([chr(0x3b1 + v % 20) + str(v % 7) for v in raw], dtype=dtype)
    if dtype.kind == "b":
        return raw > 0
    if dtype.kind == "u":
        return (raw + 100).astype(dtype)
    return raw.astype(dtype)


def int_key(n):
    return st.integers(-n, n - 1)


def slice_key(n):
    bound = n + 5
    return st.builds(slice, st.none() | st.integers(-bound, bound), st.none() | st.integers(-bound, bound),
                     st.none() | st.integers(-60, 60).filter(lambda s: s != 0))


def fancy_key(n):
    return st.lists(st.integers(-n, n - 1), max_size=40).map(lambda l: np.array(l, dtype=np.intp))


def mask_key(n, draw):
    seed = draw(st.integers(0, 2 ** 32 - 1))
    p = draw(st.sampled_from([0.0, 0.05, 0.5, 1.0]))
    return np.random.default_rng(seed).random(n) < p


def any_key(draw, n, allow_empty_only=False):
    kinds = ["slice", "mask"] + (["int", "fancy"] if n else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        return draw(int_key(n))
    if kind == "slice":
        return draw(slice_key(n))
    if kind == "fancy":
        return draw(fancy_key(n))
    m = mask_key(n, draw)
    return m if draw(st.booleans()) else carray(m, chunklen=draw(st.integers(1, 20)))


def numpy_key(key):
    return key[:] if isinstance(key, carray) else key


def check_equal(c, a):
    assert len(c) == len(a)
    assert c.shape == a.shape
    got = c[:]
    assert got.dtype == a.dtype
    assert got.tobytes() == a.tobytes()
    assert c.nchunks == len(a) // c.chunklen and c.nleftover == len(a) % c.chunklen


@st.composite
def scenario(draw):
    dtype = draw(st.sampled_from(DTYPES))
    chunklen = draw(st.integers(1, 50))
    n0 = draw(st.integers(0, 300))
    return dtype, chunklen, values_for(dtype, n0, draw)


def run_ops(draw, c, a):
    nops = draw(st.integers(1, 25))
    for _ in range(nops):
        n = len(a)
        op = draw(st.sampled_from(["get", "get", "get", "set", "set", "append", "resize", "trim",
                                   "getmulti", "where"]))
        if op == "get":
            key = any_key(draw, n)
            note(f"get {key!r}")
            got, exp = c[key], a[numpy_key(key)]
            if np.ndim(exp) == 0:  # an element: NumPy's .item() (a tuple for a record), as bcolz gives
                assert type(got) is type(exp.item())
            else:
                assert np.shape(got) == np.shape(exp)
            assert np.asarray(got, dtype=a.dtype).tobytes() == np.asarray(exp, dtype=a.dtype).tobytes()
        elif op == "getmulti":
            lo, hi = sorted(draw(st.tuples(st.integers(0, n), st.integers(0, n))))
            step = draw(st.integers(1, 60))
            skip = draw(st.integers(0, 10))
            limit = draw(st.none() | st.integers(0, 100))
            note(f"iter {lo}:{hi}:{step} skip={skip} limit={limit}")
            exp = a[lo:hi:step][skip:]
            exp = exp if limit is None else exp[:limit]
            assert [np.asarray(v, dtype=a.dtype).tobytes() for v in c.iter(lo, hi, step, limit, skip)] == \
                [np.asarray(v, dtype=a.dtype).tobytes() for v in exp]
        elif op == "where":
            m = mask_key(n, draw)
            skip = draw(st.integers(0, 10))
            limit = draw(st.none() | st.integers(0, 100))
            note(f"where skip={skip} limit={limit}")
            exp = a[m][skip:]
            exp = exp if limit is None else exp[:limit]
            assert [np.asarray(v, dtype=a.dtype).tobytes() for v in c.where(m, limit, skip)] == \
                [np.asarray(v, dtype=a.dtype).tobytes() for v in exp]
            if n:
                assert list(carray(m, chunklen=c.chunklen).wheretrue(limit, skip)) == \
                    list(np.flatnonzero(m)[skip:][:limit])
        elif op == "set":
            key = any_key(draw, n)
            k = numpy_key(key)
            m = len(a[k]) if not isinstance(k, (int, np.integer)) else 1
            if draw(st.booleans()) or m == 0:
                vals = values_for(a.dtype, 1, draw)[0]
            else:
                vals = values_for(a.dtype, m, draw)
                if isinstance(k, (int, np.integer)):
                    vals = vals[0]
            note(f"set {key!r} = {vals!r}")
            c[key] = vals
            a[k] = vals
        elif op == "append":
            vals = values_for(a.dtype, draw(st.integers(0, 120)), draw)
            note(f"append {len(vals)}")
            c.append(vals)
            a = np.concatenate([a, vals])
        elif op == "resize":
            newn = draw(st.integers(0, n + 130))
            note(f"resize {newn}")
            c.resize(newn)
            if newn <= n:
                a = a[:newn].copy()
            else:
                a = np.concatenate([a, np.repeat(np.asarray(c.dflt).reshape(1), newn - n)])
        else:
            k = draw(st.integers(0, n))
            note(f"trim {k}")
            c.trim(k)
            a = a[:n - k].copy()
        check_equal(c, a)
    return a


@given(st.data(), scenario())
def test_memory_carray_matches_numpy(data, sc):
    dtype, chunklen, a = sc
    c = carray(a, chunklen=chunklen)
    a = a.copy()
    check_equal(c, a)
    run_ops(data.draw, c, a)


@given(st.data(), scenario())
def test_disk_carray_matches_numpy_and_reopens(data, sc):
    dtype, chunklen, a = sc
    tmp = tempfile.mkdtemp(prefix="blzarr-hyp-")
    try:
        root = os.path.join(tmp, "c")
        c = carray(a, chunklen=chunklen, rootdir=root, format="bcolz")
        a = run_ops(data.draw, c, a.copy())
        c.flush()
        r = blzarr.open(root, mode="r")
        check_equal(r, a)
        assert r.chunklen == chunklen
        # a second session appends, and a third sees all
        w = blzarr.open(root)
        extra = values_for(a.dtype, data.draw(st.integers(0, 70)), data.draw)
        w.append(extra)
        w.flush()
        check_equal(blzarr.open(root, mode="r"), np.concatenate([a, extra]))
    finally:
        shutil.rmtree(tmp)


@given(st.data(), st.integers(1, 30), st.integers(0, 120), st.sampled_from([(3,), (2, 2)]))
def test_multidim_carray_matches_numpy(data, chunklen, n, tail):
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    a = rng.integers(-50, 50, (n,) + tail)
    c = carray(a, chunklen=chunklen)
    for _ in range(data.draw(st.integers(1, 10))):
        n = len(a)
        first = any_key(data.draw, n)
        if isinstance(first, carray):
            first = first[:]
        rest = data.draw(st.sampled_from([(), (0,), (-1,), (slice(None, None, -1),), (slice(1, None),)]))
        key = (first,) + rest
        note(f"key {key!r}")
        exp = a[key]
        got = c[key]
        assert np.shape(got) == np.shape(exp)
        assert np.array_equal(got, exp)
        v = data.draw(st.integers(-9, 9))
        c[key] = v
        a[key] = v
        assert np.array_equal(c[:], a)
        if data.draw(st.booleans()):
            block = rng.integers(-50, 50, (data.draw(st.integers(0, 40)),) + tail)
            c.append(block)
            a = np.concatenate([a, block])
            assert np.array_equal(c[:], a)
