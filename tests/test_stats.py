"""Per-chunk statistics (blzarr.query.stats) and the query planner (blzarr.query.planner).

Every query result must equal NumPy's on the same data whatever the statistics say: present, missing
(no meta/stats), stale (chunks rewritten behind the file's back, by blzarr killed before it wrote the
file or by the real bcolz), in memory and in both on-disk layouts.  The planner's classes are also
checked directly against the true mask: a block it skips holds no match, a block it takes whole
holds nothing but matches."""

import os
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from helpers import assert_same, examples

import blzarr
from blzarr.query import rules
from blzarr.query.selection import Selection
from blzarr.query import planner
from blzarr.query import stats

ctable_module = sys.modules["blzarr.ctable"]
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "blz")

COLS = {"ts": "i8", "px": "f8", "q": "u2", "f": "f4", "d": "M8[s]", "g": "?"}
NUMERIC = ["ts", "px", "q", "f"]
CHUNKLEN = 16


def make_data(n, seed):
    """Columns with order in them (what statistics are for), NaN/NaT in runs and scattered."""
    rng = np.random.default_rng(seed)
    ra = np.empty(n, dtype=list(COLS.items()))
    ra["ts"] = np.cumsum(rng.integers(0, 3, n)) - 20                      # sorted, with repeats
    runs = np.repeat(rng.uniform(-50, 150, n // 8 + 1).round(), 8)[:n]   # constant runs of 8
    ra["px"] = runs
    ra["px"][rng.random(n) < 0.03] = np.nan
    if n > 40:
        ra["px"][16:32] = np.nan                                          # a chunk of NaN only
    ra["q"] = rng.integers(0, 100, n) if rng.random() < 0.5 else np.sort(rng.integers(0, 100, n))
    ra["f"] = (runs / 3).astype("f4")
    ra["f"][rng.random(n) < 0.05] = np.nan
    ra["d"] = np.datetime64("2020-01-01", "s") + np.sort(rng.integers(0, 10 ** 6, n))
    ra["d"][rng.random(n) < 0.03] = np.datetime64("NaT")
    ra["g"] = (np.arange(n) // 24) % 3 == 0                               # runs of True and False
    return ra


@st.composite
def comparisons(draw):
    name = draw(st.sampled_from(NUMERIC + ["d"]))
    op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    if name == "d":
        value = draw(st.sampled_from(["lo_d", "hi_d", "nat"]))
        return f"(d {op} {value})" if draw(st.booleans()) else f"({value} {op} d)"
    kind = draw(st.integers(0, 9))
    if kind == 0:
        other = draw(st.sampled_from(NUMERIC))
        return f"({name} {op} {other})"
    if kind == 1:
        return f"({name} {op} nan)"
    value = draw(st.sampled_from([-100, -20, 0, 1, 5, 17, 33, 50, 99, 100, 149, 500, 2.5, -0.5]))
    return f"({name} {op} {value})" if draw(st.booleans()) else f"({value} {op} {name})"


def leaves():
    return st.one_of(comparisons(), comparisons(), st.just("g"), st.just("isnan(px)"), st.just("isnan(f)"),
                     st.just("((ts - 3) > 10)"))


def predicates():
    return st.recursive(
        leaves(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["&", "|"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda e: f"(~{e})")),
        max_leaves=5)


SCALARS = {"nan": np.nan, "lo_d": np.datetime64("2020-01-03", "s"), "hi_d": np.datetime64("2020-01-09", "s"),
           "nat": np.datetime64("NaT", "s")}


def numpy_mask(expression, ra):
    env = dict(SCALARS, isnan=np.isnan, **{n: ra[n] for n in COLS})
    with np.errstate(all="ignore"):
        return np.asarray(eval(expression, {"__builtins__": {}}, env))


def check_plan(p, mask):
    """SKIP blocks hold no match, WHOLE blocks nothing else."""
    if p.classes is None:
        return
    for (s, e), c in zip(p.bounds, p.classes):
        if c == planner.SKIP:
            assert not mask[s:e].any(), (p, s, e)
        elif c == planner.WHOLE:
            assert mask[s:e].all(), (p, s, e)


# ------------------------------------------------------------------------------------------ statistics
@settings(max_examples=examples(80))
@given(n=st.integers(0, 40), seed=st.integers(0, 2 ** 32 - 1), name=st.sampled_from(list(COLS)))
def test_block_stats_equal_numpy(n, seed, name):
    a = make_data(n, seed)[name]
    mn, mx, fl = stats.block_stats(a)
    valid = a[~np.isnat(a)] if a.dtype.kind == "M" else a[~np.isnan(a)] if a.dtype.kind == "f" else a
    assert bool(fl & stats.KNOWN)
    assert bool(fl & stats.NO_VALUE) == (valid.size == 0)
    assert bool(fl & stats.HAS_NAN) == (0 < n != valid.size)
    if valid.size:
        if a.dtype.kind == "M":
            valid = valid.view("i8")
        assert mn == valid.min() and mx == valid.max()


def expected_stats(x, chunklen):
    """(mins, maxs, flags) of every chunk of x, the leftover as a last one, from NumPy."""
    out = [stats.block_stats(x[s:s + chunklen]) for s in range(0, len(x), chunklen)]
    c = stats.ChunkStats(x.dtype, chunklen)
    for i, v in enumerate(out):
        c.put(i, v)
    return c.view(len(out))


def assert_stats_equal(a, x):
    got = a.chunk_stats()
    want = expected_stats(x, a.chunklen)
    assert got[3] == a.chunklen
    for g, w in zip(got[:3], want):
        assert_same(g, w)


WRITES = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 70)),
    st.tuples(st.just("set"), st.integers(0, 200), st.integers(1, 40)),
    st.tuples(st.just("setpos"), st.integers(0, 200)),
    st.tuples(st.just("resize"), st.integers(0, 150)),
    st.tuples(st.just("trim"), st.integers(0, 60)),
    st.tuples(st.just("reopen"),)), max_size=8)


@settings(max_examples=examples(40))
@given(seed=st.integers(0, 2 ** 32 - 1), name=st.sampled_from(["ts", "px", "g", "d"]), writes=WRITES)
def test_writes_keep_statistics(layout, seed, name, writes):
    """append, __setitem__, resize, trim (and reopening) keep each chunk's statistics exact."""
    rng = np.random.default_rng(seed)
    pool = make_data(400, seed)[name]
    dflt = pool[3]
    x = pool[:30].copy()
    kw = dict(layout)
    if layout.on_disk:
        kw["mode"] = "w"
    a = blzarr.carray(x, chunklen=8, dflt=dflt, **kw)
    for w in writes:
        if w[0] == "append":
            new = pool[rng.integers(0, 400, w[1])]
            a.append(new)
            x = np.concatenate([x, new])
        elif w[0] == "set" and len(x):
            i = w[1] % len(x)
            new = pool[rng.integers(0, 400, min(w[2], len(x) - i))]
            a[i:i + len(new)] = new
            x[i:i + len(new)] = new
        elif w[0] == "setpos" and len(x):
            pos = rng.integers(0, len(x), 5)
            new = pool[rng.integers(0, 400, 5)]
            a[pos] = new
            x[pos] = new
        elif w[0] == "resize":
            a.resize(w[1])
            x = np.concatenate([x, np.full(max(0, w[1] - len(x)), dflt, x.dtype)])[:w[1]]
        elif w[0] == "trim":
            k = min(w[1], len(x))
            a.trim(k)
            x = x[:len(x) - k]
        elif w[0] == "reopen" and layout.on_disk:
            a.close()
            a = blzarr.open(layout["rootdir"], mode="a")
    assert_same(a[:], x)
    assert_stats_equal(a, x)
    if layout.on_disk:
        a.close()
        b = blzarr.open(layout["rootdir"], mode="r")
        state = b.stats_state()
        assert state["known"] == state["chunks"] == len(x) // 8     # the stored file is fresh
        assert_stats_equal(b, x)


def test_failed_write_leaves_statistics_exact(layout, monkeypatch):
    """A write that fails half-way is undone: the statistics follow (recomputed where needed)."""
    x = np.arange(100, dtype="f8")
    a = blzarr.carray(x, chunklen=10, **layout)
    calls = {"n": 0}
    real = blzarr.carray._new_chunk

    def failing(self, arr, *minmax):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full (simulated)")
        return real(self, arr, *minmax)
    monkeypatch.setattr(blzarr.carray, "_new_chunk", failing)
    with pytest.raises(OSError):
        a[5:25] = -1.0          # rewrites chunks 0 and 1: the second fails
    monkeypatch.undo()
    assert_same(a[:], x)
    assert_stats_equal(a, x)
    assert blzarr.lazyexpr("a < 0", user_dict={"a": a}).count_nonzero() == 0


def test_unsupported_dtypes_have_none():
    for arr in (np.array([b"ab"] * 40), np.arange(40.0).reshape(20, 2), np.array([1j] * 40),
                np.zeros(40, dtype=[("a", "i4")])):
        a = blzarr.carray(arr, chunklen=8)
        assert a.chunk_stats() is None and a.stats_state() is None
    o = blzarr.carray(np.array([1, "a", None] * 5, dtype=object))
    assert o.chunk_stats() is None


# ------------------------------------------------------------------------------------------ the file
def parse_stats_file(raw):
    """An independent reader of meta/stats, written from docs/FORMAT.rst."""
    assert raw[:4] == b"BLZS" and raw[4] == 1 and raw[5] == 0
    assert struct.unpack("<I", raw[-4:])[0] == zlib.crc32(raw[:-4])
    dlen, chunklen, n = struct.unpack_from("<HQQ", raw, 6)
    dtype = np.dtype(raw[24:24 + dlen].decode("ascii"))
    pos = 24 + dlen
    pos += -pos % 8
    mins = np.frombuffer(raw, dtype, n, pos)
    maxs = np.frombuffer(raw, dtype, n, pos + n * dtype.itemsize)
    pos += 2 * n * dtype.itemsize
    flags = np.frombuffer(raw, "u1", n, pos)
    pos += n + (-n % 8)
    fps = np.frombuffer(raw, "<i8", 3 * n, pos).reshape(n, 3)
    assert pos + 24 * n + 4 == len(raw)
    return chunklen, mins, maxs, flags, fps


def test_committed_fixture_stats_file():
    """tests/fixtures/blz/int32_crc32 (100 int32, chunks of 16): its meta/stats read by the spec."""
    root = os.path.join(FIXTURES, "int32_crc32")
    chunklen, mins, maxs, flags, fps = parse_stats_file(open(os.path.join(root, "meta", "stats"), "rb").read())
    x = np.arange(-50, 50, dtype=np.int32) * 3
    assert chunklen == 16 and len(mins) == 6 and mins.dtype == np.dtype("<i4")
    assert_same(mins, x[:96].reshape(6, 16).min(axis=1))
    assert_same(maxs, x[:96].reshape(6, 16).max(axis=1))
    assert (flags == stats.KNOWN).all()
    # the fingerprints: offset, compressed size and stored crc32 of each chunk (superchunks of 3)
    for i in range(6):
        data = open(os.path.join(root, "data", f"__{i // 3 + 1}__.bin"), "rb").read()
        off, ct, ck = (int(v) for v in fps[i])
        assert struct.unpack_from("<i", data, off + 12)[0] == ct
        assert ck == struct.unpack_from("<I", data, off + ct)[0] == zlib.crc32(data[off:off + ct])


@pytest.mark.parametrize("damage", ["garbage", "truncated", "crc", "other_dtype", "other_chunklen"])
def test_bad_stats_file_is_no_statistics(tmp_path, damage):
    x = np.arange(1000, dtype="i8")
    p = str(tmp_path / "a")
    a = blzarr.carray(x, rootdir=p, chunklen=100)
    a.close()
    path = os.path.join(p, "meta", "stats")
    raw = open(path, "rb").read()
    if damage == "garbage":
        raw = b"not a stats file"
    elif damage == "truncated":
        raw = raw[:len(raw) // 2]
    elif damage == "crc":
        raw = raw[:40] + bytes([raw[40] ^ 1]) + raw[41:]
    elif damage == "other_dtype":
        raw = stats.encode(stats.decode(raw, "i8", 100), 10).replace(b"<i8", b"<u8")
        raw = raw[:-4] + struct.pack("<I", zlib.crc32(raw[:-4]))
    else:
        st = stats.decode(raw, "i8", 100)
        st.chunklen = 50
        raw = stats.encode(st, 10)
    open(path, "wb").write(raw)
    b = blzarr.open(p, mode="r")
    assert b.stats_state()["known"] == 0
    assert blzarr.lazyexpr("b >= 950", user_dict={"b": b}).count_nonzero() == 50
    assert b.stats_state()["known"] == 10   # computed from the chunks (not stored: mode 'r')
    c = blzarr.open(p, mode="a")
    assert c.searchsorted(950) == 950
    c.close()
    # mode 'a' changes no file before its first write (a reader with the default mode)
    assert open(path, "rb").read() == raw
    c = blzarr.open(p, mode="a")
    c.attrs["written"] = 1
    assert c.searchsorted(950) == 950
    c.close()
    assert blzarr.open(p, mode="r").stats_state()["known"] == 10   # stored by the writing one


def test_compaction_keeps_statistics(tmp_path):
    """compact() moves chunks (their fingerprints change, not their values): the statistics stay known."""
    p = str(tmp_path / "a")
    x = np.arange(10_000, dtype="f8")
    a = blzarr.carray(x, rootdir=p, chunklen=100, format="blz", superchunklen=10)
    for i in range(0, 10_000, 700):
        a[i:i + 50] = -x[i:i + 50]      # chunks rewritten: relocated, leaving holes
        x[i:i + 50] = -x[i:i + 50]
    a.flush()
    assert a.compact() > 0
    a.close()
    b = blzarr.open(p, mode="r")
    assert b.stats_state() == {"chunks": 100, "known": 100, "unchecked": 0}
    assert_stats_equal(b, x)
    assert blzarr.lazyexpr("b < 0", user_dict={"b": b}).count_nonzero() == np.count_nonzero(x < 0)


def test_fingerprints_taken_together_equal_one_by_one(tmp_path):
    """A writer stores its statistics with the fingerprints its store kept while writing (taken for all
    the new chunks at once): the same as reading each chunk's fingerprint, after appends, rewrites
    waiting for their switch, a flush, a compaction, a reopen and in the bcolz layout."""
    def check(a):
        ids = list(range(len(a.chunks)))
        assert a.chunks.fingerprints(ids) == [a.chunks.fingerprint(i) for i in ids]
        assert a.chunks.fingerprints(ids[::-3]) == [a.chunks.fingerprint(i) for i in ids[::-3]]
    x = np.arange(5_000, dtype="f8")
    a = blzarr.carray(x, rootdir=str(tmp_path / "a"), chunklen=100, format="blz", superchunklen=10)
    check(a)
    for i in range(0, 5_000, 700):
        a[i:i + 50] = -x[i:i + 50]
    check(a)                    # rewrites not yet switched
    a.flush()
    check(a)
    a.compact()
    check(a)
    a.append(x)
    check(a)
    a.close()
    b = blzarr.open(str(tmp_path / "a"), mode="r")
    check(b)
    assert b.stats_state() == {"chunks": 100, "known": 100, "unchecked": 0}
    c = blzarr.carray(x, rootdir=str(tmp_path / "c"), chunklen=100, format="bcolz")
    check(c)


# ------------------------------------------------------------------------------------------ queries
def make_table(ra, layout, state):
    kw = dict(layout, mode="w") if layout.on_disk else {}
    t = blzarr.ctable([blzarr.carray(ra[k], chunklen=CHUNKLEN) for k in COLS], names=list(COLS), **kw)
    if not layout.on_disk:
        return t
    root = layout["rootdir"]
    if state == "stale":
        # the statistics of an earlier state, stored again after the data changed (blzarr killed
        # between a chunk write and the statistics', or a program that does not know them)
        saved = {k: open(os.path.join(root, k, "meta", "stats"), "rb").read()
                 for k in COLS if os.path.exists(os.path.join(root, k, "meta", "stats"))}
        n = len(ra)
        if n:
            rng = np.random.default_rng(n)
            pos = rng.integers(0, n, 6)
            for k in COLS:
                vals = ra[k][rng.integers(0, n, 6)]
                t.cols[k][pos] = vals
                ra[k][pos] = vals
        t.flush()
        for k, raw in saved.items():
            open(os.path.join(root, k, "meta", "stats"), "wb").write(raw)
    t.close()
    if state == "missing":
        for k in COLS:
            p = os.path.join(root, k, "meta", "stats")
            if os.path.exists(p):
                os.remove(p)
    return blzarr.open(root, mode="r")


@settings(max_examples=examples(60))
@given(n=st.sampled_from([0, 1, 2, 15, 16, 17, 64, 200, 777]), seed=st.integers(0, 2 ** 32 - 1),
       expression=predicates(), vm=st.sampled_from(["numexpr", "python"]),
       state=st.sampled_from(["present", "missing", "stale"]), blen=st.sampled_from([1, 7, 16, 40]))
def test_queries_with_statistics_equal_numpy(layout, monkeypatch, n, seed, expression, vm, state, blen):
    monkeypatch.setattr(rules, "MIN_BLEN", blen)   # where queries read it
    ra = make_data(n, seed)
    t = make_table(ra, layout, state)
    mask = numpy_mask(expression, ra)
    assert mask.dtype == bool and mask.shape == (n,)
    pos = np.flatnonzero(mask)
    user = dict(SCALARS)
    got = t.fetchwhere(expression, out_flavor="numpy", vm=vm, user_dict=user)
    assert_same(got, ra[pos])
    q = t.where(expression, outcols=["nrow__", "ts"], vm=vm, user_dict=user, skip=1, limit=50)
    assert q.count() == min(50, max(0, len(pos) - 1))
    assert_same(np.array([r.nrow__ for r in q], dtype=int), pos[1:51])
    assert_same(t.eval(expression, vm=vm, out_flavor="numpy", user_dict=user), mask)
    p = t.explain(expression, user_dict=user)
    check_plan(p, mask)
    assert p.skipped + p.whole + p.scanned == len(p.bounds)
    if n:
        cols = {k: t.cols[k] for k in COLS}
        e = blzarr.lazyexpr(expression, user_dict=dict(user, **cols), vm=vm, blen=blen)
        assert e.count_nonzero() == len(pos)
        assert e.any() == bool(len(pos)) and e.all() == (len(pos) == n)
        assert_same(e[:], mask)
        check_plan(e.explain(), mask)
        ev = blzarr.eval(expression, user_dict=dict(user, **cols), vm=vm, blen=blen)
        assert_same(ev[:], mask)


@settings(max_examples=examples(60))
@given(n=st.integers(1, 300), seed=st.integers(0, 2 ** 32 - 1), expression=predicates(),
       blen=st.integers(1, 50), chunklen=st.sampled_from([1, 3, 16, 50]))
def test_plans_are_sound(n, seed, expression, blen, chunklen):
    """Blocks of any length over chunks of any length: skipped blocks hold no match, whole ones only."""
    ra = make_data(n, seed)
    ops = dict(SCALARS, **{k: blzarr.carray(ra[k], chunklen=chunklen) for k in COLS})
    mask = numpy_mask(expression, ra)
    p = planner.plan(expression, ops, [(s, min(s + blen, n)) for s in range(0, n, blen)])
    check_plan(p, mask)


def test_plan_takes_and_skips_what_it_should():
    n = 100_000
    ts = blzarr.carray(np.arange(n), chunklen=1000)
    g = blzarr.carray(np.arange(n) < 50_000, chunklen=1000)
    px = blzarr.carray(np.where(np.arange(n) % 2000 < 1000, np.nan, 1.0), chunklen=1000)
    p = blzarr.explain("(ts >= 10_000) & (ts < 12_500)", blen=1000)
    assert (p.skipped, p.whole, p.scanned) == (97, 2, 1)
    assert p.summary()["rows_scanned"] == 1000 and p.used == ["ts"]
    assert str(p) == ("100 blocks: 97 skipped, 2 taken whole, 1 scanned (1000 of 100000 rows "
                      "evaluated); statistics of ts")
    p = blzarr.explain("~g | (ts == 3)", blen=1000)
    assert (p.skipped, p.whole, p.scanned) == (49, 50, 1)
    p = blzarr.explain("isnan(px)", blen=1000)
    assert (p.skipped, p.whole) == (50, 50)
    p = blzarr.explain("px > 0", blen=1000)      # NaN compares false: the NaN chunks are skipped
    assert (p.skipped, p.whole) == (50, 50)
    p = blzarr.explain("px != 1", blen=1000)     # and NaN != 1 is true
    assert (p.skipped, p.whole) == (50, 50)
    p = blzarr.explain("(ts * 2 > 5) | (ts >= 99_000)", blen=1000)   # arithmetic: scanned, unless...
    assert (p.skipped, p.whole, p.scanned) == (0, 1, 99)
    p = blzarr.explain("ts + 1")
    assert p.classes is None and "not a comparison" in str(p)
    a = np.arange(n)
    p = blzarr.explain("a > 5")
    assert p.classes is None and "no operand compared has statistics" in str(p)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def nthreads(request):
    old = blzarr.set_nthreads(request.param)
    yield request.param
    blzarr.set_nthreads(old)


@settings(max_examples=examples(40))
@given(n=st.sampled_from([0, 1, 3, 64, 300, 1000]), seed=st.integers(0, 2 ** 32 - 1),
       lo=st.floats(-0.1, 1.1), width=st.floats(0, 0.7), extra=st.sampled_from(["", " & (v > 0.3)", " | (v > 0.95)"]),
       outcols=st.sampled_from([None, ["nrow__", "v"], ["s", "ts"], ["m"], ["v"], ["s"], ["v", "nrow__", "s"]]),
       blen=st.sampled_from([1, 16, 50]), vm=st.sampled_from(["numexpr", "python"]))
def test_fetch_of_ranges_equals_numpy(nthreads, layout, monkeypatch, n, seed, lo, width, extra, outcols, blen, vm):
    """fetchwhere of everything at once (the engine writes the result itself: blocks taken whole decoded
    column by column into it, the run of rows of a scanned block read as a range) on a sorted column,
    every column kind (bytes, 2-d, row numbers, columns the predicate does not name)."""
    monkeypatch.setattr(rules, "MIN_BLEN", blen)
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, max(n, 1) * 3, n))
    v = rng.random(n)
    s = rng.integers(0, 1000, n).astype("S3")
    m = rng.random((n, 2))
    kw = dict(layout, mode="w") if layout.on_disk else {}
    t = blzarr.ctable([blzarr.carray(ts, chunklen=16), blzarr.carray(v, chunklen=16), blzarr.carray(s, chunklen=16),
                       blzarr.carray(m, chunklen=16)], names=["ts", "v", "s", "m"], **kw)
    a, b = int(lo * 3 * n), int((lo + width) * 3 * n)
    expression = f"((ts >= {a}) & (ts < {b})){extra}"
    mask = eval(expression, {}, {"ts": ts, "v": v})
    pos = np.flatnonzero(mask)
    names = ["ts", "v", "s", "m"] if outcols is None else outcols
    got = t.fetchwhere(expression, outcols=outcols, vm=vm, out_flavor="numpy")
    assert got.dtype.names == tuple(names) and len(got) == len(pos)
    for k in names:
        want = pos if k == "nrow__" else {"ts": ts, "v": v, "s": s, "m": m}[k][pos]
        assert_same(got[k], want)


@settings(max_examples=examples(60))
@given(n=st.sampled_from([1, 2, 17, 64, 300]), seed=st.integers(0, 2 ** 32 - 1),
       dt=st.sampled_from(["i8", "u8", "i2", "f8", "f4", "M8[s]"]),
       terms=st.lists(st.tuples(st.sampled_from([">", ">=", "<", "<=", "=="]), st.floats(-0.3, 1.3),
                                st.sampled_from(["int", "float", "neg", "flip"])), min_size=1, max_size=3),
       damage=st.sampled_from(["", "nan", "unsorted"]), blen=st.sampled_from([1, 16, 50]),
       nthreads=st.sampled_from([1, 2]))
def test_sorted_blocks_find_their_run_by_search(layout, monkeypatch, n, seed, dt, terms, damage, blen, nthreads):
    """A range on one column, `(x >= a) & (x < b)`-like (every comparison, constants of other types
    than the column's, on either side): the scanned blocks whose values are sorted find their run by
    binary searches (`planner.sorted_run`), the others (NaN/NaT in them, no order) are evaluated; the
    rows fetched equal NumPy's either way."""
    monkeypatch.setattr(rules, "MIN_BLEN", blen)
    rng = np.random.default_rng(seed)
    base = np.sort(rng.integers(0, 40, n))
    if dt == "M8[s]":
        x = np.datetime64("2020-01-01", "s") + base.astype("m8[s]")
    else:
        x = base.astype(dt) / 4 if dt[0] == "f" else base.astype(dt)
    if damage == "nan" and dt[0] in "fM":
        x[rng.integers(0, n)] = np.datetime64("NaT") if dt == "M8[s]" else np.nan
    elif damage == "unsorted" and n > 2:
        i = rng.integers(0, n - 1)
        x[i], x[i + 1] = x[i + 1], x[i]
    y = rng.random(n)
    env, parts = {}, []
    for k, (op, frac, kind) in enumerate(terms):
        c = frac * 40
        if dt == "M8[s]":
            v = np.datetime64("2020-01-01", "s") + np.timedelta64(int(c), "s")
        elif kind == "int":
            v = int(c)
        elif kind == "neg":
            v = -int(c) - 1
        else:
            # exact in float32 too (numexpr, which scans the other blocks, compares a float32 column
            # with a float64 constant, NumPy in float32: they differ on constants float32 rounds)
            v = round(c * 8) / (32 if dt[0] == "f" else 8)
        env[f"c{k}"] = v
        flip = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "=="}
        parts.append(f"(c{k} {flip[op]} x)" if kind == "flip" else f"(x {op} c{k})")
    expression = " & ".join(parts)
    with np.errstate(all="ignore"):
        mask = eval(expression, {}, dict(env, x=x))
    pos = np.flatnonzero(mask)
    kw = dict(layout, mode="w") if layout.on_disk else {}
    t = blzarr.ctable([blzarr.carray(x, chunklen=16), blzarr.carray(y, chunklen=16)], names=["x", "y"], **kw)
    old = blzarr.set_nthreads(nthreads)
    try:
        got = t.fetchwhere(expression, user_dict=env, out_flavor="numpy")
        with_rows = t.fetchwhere(expression, user_dict=env, outcols=["nrow__", "y", "x"], out_flavor="numpy")
    finally:
        blzarr.set_nthreads(old)
        if layout.on_disk:
            t.close()
    assert_same(got["x"], x[pos])
    assert_same(got["y"], y[pos])
    assert_same(with_rows["nrow__"], pos)
    assert_same(with_rows["x"], x[pos])


def test_count_does_not_build_rows(monkeypatch):
    t = blzarr.ctable([np.arange(200_000), np.arange(200_000) % 7], names=["ts", "k"])
    def no_rows(*args):
        raise AssertionError("rows built")
        yield
    monkeypatch.setattr(Selection, "blocks", no_rows)
    q = t.where("(ts >= 1000) & (k == 3)")
    assert q.count() == np.count_nonzero((np.arange(1000, 200_000) % 7) == 3)
    assert q.explain().used == ["k", "ts"]


# ------------------------------------------------------------------------------------------ bcolz behind
@pytest.mark.parametrize("chunklen", [16, 1000])
def test_bcolz_writes_behind_blzarr(tmp_path, bcolz, chunklen):
    """The real bcolz appends to and assigns into a carray blzarr wrote (with its meta/stats):
    blzarr finds the statistics of the rewritten and the new chunks stale or missing, and every
    query still equals NumPy."""
    p = str(tmp_path / "a")
    x = np.arange(5000, dtype="f8")
    a = blzarr.carray(x, rootdir=p, chunklen=chunklen, format="bcolz")
    a.close()
    before = open(os.path.join(p, "meta", "stats"), "rb").read()
    b = bcolz.open(p, mode="a")
    b[chunklen + 3] = -1e9              # a full chunk rewritten in place by bcolz
    b.append(np.full(3 * chunklen + 5, 1e9))
    b.flush()
    del b
    x = np.concatenate([x, np.full(3 * chunklen + 5, 1e9)])
    x[chunklen + 3] = -1e9
    assert open(os.path.join(p, "meta", "stats"), "rb").read() == before     # bcolz left it
    c = blzarr.open(p, mode="r")
    state = c.stats_state()
    assert state["chunks"] == len(x) // chunklen and state["known"] == 5000 // chunklen - 1
    for expr in ("c < 0", "c > 4990", "(c >= 1000) & (c < 2000)", "c == 1e9", "~(c < 1e9)"):
        want = eval(expr, {"__builtins__": {}}, {"c": x})
        assert blzarr.lazyexpr(expr, user_dict={"c": c}).count_nonzero() == want.sum(), expr
        check_plan(blzarr.explain(expr, user_dict={"c": c}, blen=chunklen), want)
    assert c.searchsorted(1e9) == 5000
    # a writing blzarr stores the statistics again, fresh, and bcolz still reads the directory (mode
    # 'a' stores nothing before its first write)
    d = blzarr.open(p, mode="a")
    d.chunk_stats()
    assert blzarr.open(p, mode="r").stats_state()["known"] < len(x) // chunklen
    d.attrs["note"] = 1
    d.chunk_stats()
    d.close()
    e = blzarr.open(p, mode="r")
    assert e.stats_state()["known"] == len(x) // chunklen
    assert_same(bcolz.open(p, mode="r")[:], x)


# ------------------------------------------------------------------------------------------ searchsorted
@settings(max_examples=examples(60))
@given(n=st.integers(0, 300), seed=st.integers(0, 2 ** 32 - 1), chunklen=st.sampled_from([1, 4, 32, 1000]),
       kind=st.sampled_from(["i8", "f8", "M8[s]", "S2", "?"]), side=st.sampled_from(["left", "right"]))
def test_searchsorted_equals_numpy(n, seed, chunklen, kind, side):
    rng = np.random.default_rng(seed)
    if kind == "f8":
        x = rng.integers(-20, 20, n).astype("f8")
        x[rng.random(n) < 0.1] = np.nan
        probes = np.array([-30, -20, -1.5, 0, 7, 19, 25, np.nan])
    elif kind == "M8[s]":
        x = np.datetime64("2021-01-01", "s") + rng.integers(0, 50, n)
        x[rng.random(n) < 0.1] = np.datetime64("NaT")
        probes = np.datetime64("2021-01-01", "s") + np.array([-1, 0, 3, 49, 60])
        probes = np.concatenate([probes, [np.datetime64("NaT")]])
    elif kind == "S2":
        x = np.array([b"%02d" % v for v in rng.integers(0, 30, n)], dtype="S2")
        probes = np.array([b"", b"00", b"15", b"29", b"99"])
    elif kind == "?":
        x = rng.random(n) < 0.5
        probes = np.array([False, True])
    else:
        x = rng.integers(-20, 20, n)
        probes = np.array([-30, -20, 0, 5, 19, 40])
    x = np.sort(x)
    a = blzarr.carray(x, chunklen=chunklen)
    assert_same(a.searchsorted(probes, side=side), np.searchsorted(x, probes, side=side))
    for v in probes[:3]:
        assert a.searchsorted(v, side) == np.searchsorted(x, v, side)


def test_searchsorted_errors():
    with pytest.raises(ValueError, match="side"):
        blzarr.carray(np.arange(3)).searchsorted(1, side="middle")
    with pytest.raises(TypeError, match="one-dimensional"):
        blzarr.carray(np.zeros((4, 2))).searchsorted(1)


# ------------------------------------------------------------------------------------------ CLI
def test_cli_info_statistics_and_plan(tmp_path):
    root = str(tmp_path / "t")
    t = blzarr.ctable([np.arange(100_000), np.ones(100_000), np.array(["x"] * 100_000)],
                      names=["ts", "px", "s"], chunklen=10_000, rootdir=root)
    t.close()
    os.remove(os.path.join(root, "px", "meta", "stats"))
    run = [sys.executable, "-m", "blzarr", "info", root, "--where", "(ts >= 25_000) & (ts < 50_000)"]
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert ("query    10 blocks: 7 skipped, 2 taken whole, 1 scanned (10000 of 100000 rows evaluated); "
            "statistics of ts") in out
    lines = {ln.split()[0]: ln.split()[-1] for ln in out.splitlines()[-3:]}
    assert lines == {"ts": "10/10", "px": "0/10", "s": "-"}
    col = subprocess.run([sys.executable, "-m", "blzarr", "info", os.path.join(root, "ts"), "--where", "x < 5"],
                         capture_output=True, text=True, check=True).stdout
    assert "statistics     min/max/NaN of 10 of 10 chunks" in col and "1 scanned" in col
    bad = subprocess.run([sys.executable, "-m", "blzarr", "info", root, "--where", "nope > 1"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "nope" in bad.stderr
    shutil.rmtree(root)


# ------------------------------------------------------------------------------------------ one-pass min/max
MINMAX_DTYPES = ["f8", "f4", "i8", "i4", "i2", "i1", "u8", "u4", "u2", "u1", "?", "M8[s]", "m8[ns]"]


SPECIALS = ["none", "nan", "all-nan", "inf", "zeros", "extremes"]


def minmax_data(dt, n, seed, special):
    """n values of dtype dt: random, with NaN/NaT here and there or everywhere, infinities, signed
    zeros or the dtype's extreme values."""
    rng = np.random.default_rng(seed)
    x = np.dtype(dt)
    if x.kind == "f":
        a = (rng.standard_normal(n) * 1e3).astype(dt)
    elif x.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    elif x.kind == "b":
        a = rng.random(n) < rng.random()
    else:
        a = rng.integers(-10 ** 9, 10 ** 9, n).astype(dt)
    if special in ("nan", "all-nan") and x.kind in "fmM":
        hole = np.array("NaT", dt) if x.kind in "mM" else np.nan
        a[rng.random(n) < (1.0 if special == "all-nan" else 0.3)] = hole
    elif special == "inf" and x.kind == "f":
        a[rng.integers(0, n, 2)] = [np.inf, -np.inf]
    elif special == "zeros" and x.kind == "f":
        a[rng.random(n) < 0.5] = -0.0
        a[rng.random(n) < 0.5] = 0.0
    elif special == "extremes" and x.kind in "iu":
        a[rng.integers(0, n, 2)] = [np.iinfo(dt).min, np.iinfo(dt).max]
    return a


def numpy_stats(a):
    """(min, max, has NaN/NaT, nothing but NaN/NaT) of a from NumPy (datetimes as int64)."""
    valid = a[~np.isnan(a)] if a.dtype.kind in "fmM" else a
    if a.dtype.kind in "mM":
        valid = valid.view("i8")
    if not valid.size:
        return None, None, a.size > 0, True
    return valid.min(), valid.max(), valid.size != a.size, False


@settings(max_examples=examples(150))
@given(dt=st.sampled_from(MINMAX_DTYPES), n=st.integers(1, 300), seed=st.integers(0, 2 ** 32 - 1),
       special=st.sampled_from(SPECIALS))
def test_minmax_equals_numpy(dt, n, seed, special):
    """The C pass of the statistics (blzarr._minmax.minmax, vectorized, with a scalar tail) against
    NumPy: every dtype it takes, lengths around the vector widths, NaN/NaT anywhere or everywhere,
    infinities, signed zeros, the dtype's extreme values."""
    from blzarr import _minmax
    a = minmax_data(dt, n, seed, special)
    x = np.dtype(dt)
    nat = x.kind in "mM"
    v = a.view("i8") if nat else a
    out = np.empty(2, v.dtype)
    count = _minmax.minmax(v, out, nat)
    valid = a[~np.isnan(a)] if x.kind in "fmM" else a
    assert count == n - valid.size
    if valid.size:
        want = valid.view("i8") if nat else valid
        assert out[0] == want.min() and out[1] == want.max(), (out, want.min(), want.max())
        assert out.dtype == v.dtype
    mn, mx, fl = stats.block_stats(a)
    assert bool(fl & stats.NO_VALUE) == (valid.size == 0)
    assert bool(fl & stats.HAS_NAN) == (valid.size != n)
    if valid.size:
        assert mn == want.min() and mx == want.max()
        assert type(mn) is (int if nat else bool if x.kind == "b" else np.dtype(dt).type)


def test_minmax_refuses_what_it_cannot_do():
    from blzarr import _minmax
    out = np.empty(2, "f8")
    for bad in (np.empty(0), np.arange(10.0)[::2], np.arange(4.0).reshape(2, 2), np.arange(3.0).astype(">f8"),
                np.arange(3, dtype="f2"), np.array(["a"])):
        with pytest.raises(ValueError):
            _minmax.minmax(bad, np.empty(2, bad.dtype) if bad.dtype != ">f8" else out)
    with pytest.raises(ValueError):
        _minmax.minmax(np.arange(3.0), np.empty(1))
    with pytest.raises(ValueError):
        _minmax.minmax(np.arange(3.0), np.empty(2, "f4"))
    # what it does not take, block_stats gives from NumPy
    assert stats.block_stats(np.array([3, np.nan, 1], ">f8")) == (1.0, 3.0, stats.KNOWN | stats.HAS_NAN)
    assert stats.block_stats(np.arange(5, dtype="f2")[::2]) == (0.0, 4.0, stats.KNOWN)


# ------------------------------------------------------------------------------------------ min/max in the compression call
@settings(max_examples=examples(150))
@given(dt=st.sampled_from(MINMAX_DTYPES), n=st.integers(1, 300), seed=st.integers(0, 2 ** 32 - 1),
       special=st.sampled_from(SPECIALS), at=st.integers(0, 3))
def test_compress_with_minmax_equals_numpy(dt, n, seed, special, at):
    """`_chunk.compress` given mins/maxs takes the statistics in the same call: the bytes are those
    of a plain compression, mins[at]/maxs[at] and the NaN/NaT count are NumPy's, nothing else of
    mins/maxs is touched."""
    from blzarr import _chunk
    a = minmax_data(dt, n, seed, special)
    nat = a.dtype.kind in "mM"
    v = a.view("i8") if nat else a
    fill = np.array(7).astype(v.dtype)
    mins = np.full(4, fill, v.dtype)
    maxs = np.full(4, fill, v.dtype)
    data, count = _chunk.compress(v, v.itemsize, 5, 1, "lz4", 0, 1, mins, maxs, at, nat)
    assert data == _chunk.compress(v, v.itemsize, 5, 1, "lz4", 0, 1)
    out = np.empty_like(v)
    _chunk.decompress_into(data, out)
    assert_same(out, v)
    mn, mx, has_nan, only_nan = numpy_stats(a)
    assert count == (n if only_nan else int(np.isnan(a).sum()) if a.dtype.kind in "fmM" else 0)
    assert has_nan == (count > 0)
    if not only_nan:
        assert mins[at] == mn and maxs[at] == mx
    others = [i for i in range(4) if i != at]
    assert (mins[others] == fill).all() and (maxs[others] == fill).all()


def test_compress_with_minmax_refuses_what_it_cannot_do():
    from blzarr import _chunk
    a = np.arange(10.0)
    ok = np.empty(2, "f8")
    for mins, maxs, at, src in ((ok, None, 0, a), (None, ok, 0, a), (np.empty(2, "f4"), ok, 0, a),
                                (ok, ok, 2, a), (ok, ok, -1, a), (np.empty(6)[::2], ok, 0, a), (ok, ok, 0, a[:0]),
                                (np.empty(2, "f2"), np.empty(2, "f2"), 0, a.astype("f2")),
                                (np.empty(2, ">f8"), np.empty(2, ">f8"), 0, a.astype(">f8")),
                                (np.empty((2, 2)), np.empty((2, 2)), 0, a.reshape(5, 2))):
        with pytest.raises(ValueError):
            _chunk.compress(src, src.itemsize, 5, 1, "lz4", 0, 1, mins, maxs, at)


@settings(max_examples=examples(40), deadline=None)
@given(dt=st.sampled_from(MINMAX_DTYPES + ["f2", ">f8"]), n=st.sampled_from([1, 15, 16, 17, 64, 250]),
       seed=st.integers(0, 2 ** 32 - 1), special=st.sampled_from(SPECIALS), step=st.sampled_from([1, 5, 16, 40]),
       nthreads=st.sampled_from([1, 2]), rootdir=st.booleans())
def test_written_chunks_statistics_equal_numpy(tmp_path_factory, dt, n, seed, special, step, nthreads, rootdir):
    """Every way a chunk gets written (created in parallel, appended piece by piece, rewritten by
    __setitem__) leaves its entry equal to NumPy's min/max/NaN flags of the chunk's values, at chunk
    edges, for the dtypes the C pass takes in the compression call and those it does not."""
    a0 = minmax_data(dt.lstrip(">"), n, seed, special).astype(dt)
    kw = {"rootdir": str(tmp_path_factory.mktemp("w") / "a"), "mode": "w"} if rootdir else {}
    prev = blzarr.set_nthreads(nthreads)
    try:
        made = blzarr.carray(a0, chunklen=16, **kw)
        grown = blzarr.carray(a0[:0], chunklen=16)
        for s in range(0, n, step):
            grown.append(a0[s:s + step])
        x = a0.copy()
        k = seed % n
        x[k:k + 20] = x[::-1][:len(x[k:k + 20])]
        grown[k:k + 20] = x[k:k + 20]
        for a, want in ((made, a0), (grown, x)):
            got = a.chunk_stats()
            assert got is not None
            for i in range(-(-n // 16)):
                mn, mx, has_nan, only_nan = numpy_stats(want[i * 16:(i + 1) * 16])
                fl = int(got[2][i])
                assert fl & stats.KNOWN
                assert bool(fl & stats.HAS_NAN) == has_nan and bool(fl & stats.NO_VALUE) == only_nan
                if not only_nan:
                    gmn, gmx = got[0][i], got[1][i]
                    if want.dtype.kind in "mM":
                        gmn, gmx = gmn.view("i8"), gmx.view("i8")
                    assert gmn == mn and gmx == mx
        if rootdir:
            made.close()
    finally:
        blzarr.set_nthreads(prev)


def test_quantized_chunks_have_the_statistics_of_their_stored_values():
    """With the quantize filter a chunk stores rounded values: its statistics are those values', so
    a query answers as NumPy does over what the carray reads back."""
    x = np.random.default_rng(0).random(200_000) * 1000
    a = blzarr.carray(x, cparams=blzarr.cparams(quantize=1), chunklen=10_000)
    y = a[:]
    assert not np.array_equal(x, y)
    for lim in np.unique(np.concatenate([y.reshape(20, -1).max(1), y.reshape(20, -1).min(1)])):
        for op in (">", "<", ">=", "<="):
            expr = f"a {op} {lim!r}"
            got = blzarr.lazyexpr(expr, user_dict={"a": a}).count_nonzero()
            assert got == np.count_nonzero(eval(f"y {op} lim")), expr
    got = a.chunk_stats()
    assert_same(got[0][:20], y.reshape(20, -1).min(1))
    assert_same(got[1][:20], y.reshape(20, -1).max(1))


@pytest.mark.parametrize("dt", MINMAX_DTYPES)
@pytest.mark.parametrize("special", ["none", "nan", "inf", "zeros"])
def test_minmax_at_every_alignment_and_length(dt, special):
    """The C pass starts its vector loop at a 64-byte boundary and runs 256 bytes of accumulators: every
    start address within a cache line, lengths around those widths, and the extreme values placed in
    the head, in the vector part and in the tail, against NumPy."""
    from blzarr import _minmax
    base = minmax_data(dt, 1200, 7, special)
    nat = base.dtype.kind in "mM"
    rng = np.random.default_rng(1)
    for off in range(0, 70, 3):
        for n in (1, 7, 63, 64, 65, 255, 256, 257, 600, 1100):
            a = base[off:off + n]
            if len(a) < n:
                continue
            a = a.copy() if rng.random() < 0.2 else a
            for where in (0, n // 2, n - 1):
                b = a.copy() if where else a
                if where and b.dtype.kind in "iu":
                    b[where] = np.iinfo(b.dtype).min
                v = b.view("i8") if nat else b
                out = np.empty(2, v.dtype)
                count = _minmax.minmax(v, out, nat)
                mn, mx, has_nan, only_nan = numpy_stats(b)
                assert (count > 0) == has_nan
                if not only_nan:
                    assert out[0] == mn and out[1] == mx, (dt, off, n, where)
