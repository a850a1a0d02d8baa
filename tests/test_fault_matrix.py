"""The operation-fault matrix: every public operation that writes (carray and ctable methods, the
constructors and top-level functions, the CLI commands that write), in both layouts, interrupted
before each call of the I/O layer (`blzarr.fileio`) that changes the disk, by each of three faults:
a KeyboardInterrupt in the process, ENOSPC from that call on, SIGKILL of a child at that call
(tests/faults.py).

For each crash state: what the operation touches opens with mode 'r' and with mode 'a' and holds
the contents before the operation or after it (never between), `blzarr verify` finds it clean, and the
same operation run again succeeds (and, from the state before, gives the state after).

`test_every_writer_is_in_the_matrix` keeps the matrix complete: every public method of carray and
ctable, every top-level function and every CLI command is either an operation here or in
`NOT_WRITING`, where it is run on on-disk objects with an I/O layer that fails on any writing call.

The default run interrupts one point of each operation per fault; the whole sweep (every
point, every fault) is marked slow.
"""

import gc
import inspect
import io
import os
import shutil
import warnings

import numpy as np
import pytest

import blzarr
from blzarr import cli
from blzarr.storage import fileio
from faults import FAULTS, Injected, count_calls, run_faulted, run_killed

FORMATS = ["bcolz", "blz"]
N = 1000
CL = 100


# ------------------------------------------------------------------ the objects and their contents
def _carray(path, fmt, n=N):
    kw = {"superchunklen": 2} if fmt == "blz" else {}
    a = blzarr.carray(np.arange(n, dtype=np.int64), rootdir=path, mode="w", chunklen=CL, format=fmt, **kw)
    a.attrs["who"] = "x"
    a.close()


def _ctable(path, fmt, n=N):
    t = blzarr.ctable([np.arange(n, dtype=np.int64), np.arange(n) * 0.5, np.arange(n, dtype=np.int32) % 7],
                      names=["a", "b", "c"], rootdir=path, mode="w", format=fmt, chunklen=CL)
    t.attrs["who"] = "t"
    t.close()


def contents(o):
    """The kind, dtype/shape or columns, values (bytes) and attributes of the open carray or ctable `o`:
    equal for two objects that hold the same (a snapshot's form)."""
    attrs = tuple(sorted((k, repr(v)) for k, v in o.attrs))
    if isinstance(o, blzarr.ctable):
        cols = tuple((n, o.cols[n].dtype.str, o.cols[n].shape, o.cols[n][:].tobytes()) for n in o.names)
        return ("ctable", len(o), cols, attrs)
    return ("carray", o.dtype.str, o.shape, o[:].tobytes(), attrs)


def snapshot(path, mode="r"):
    """What the object at `path` holds (None when nothing is there), opened with `mode`."""
    if not os.path.lexists(path):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        o = blzarr.open(path, mode=mode)
    try:
        return contents(o)
    finally:
        del o
        gc.collect()


def verify_clean(path):
    if not os.path.lexists(path):
        return
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rc = cli.main(["verify", path], out=out)
    assert rc == 0, out.getvalue()


# ------------------------------------------------------------------ the operations
class Op:
    """One public operation: `setup(root, fmt)` makes what it starts from, `run(root, fmt)` does it;
    `touches` are the paths (relative to root) whose contents are checked."""

    def __init__(self, name, kind, run, touches=("x",), setup=None, formats=FORMATS, covers=()):
        self.name, self.kind, self._run, self.touches = name, kind, run, touches
        self._setup = setup
        self.formats = formats
        self.covers = tuple(covers) or (name,)

    def setup(self, root, fmt):
        if self._setup is not None:
            self._setup(root, fmt)
        elif self.kind == "carray":
            _carray(os.path.join(root, "x"), fmt)
        else:
            _ctable(os.path.join(root, "x"), fmt)

    def run(self, root, fmt):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self._run(root, fmt)
        gc.collect()

    def __repr__(self):
        return self.name


def _x(root):
    return os.path.join(root, "x")


def _open_x(root):
    return blzarr.open(_x(root), mode="a")


def _with(fn):
    def run(root, fmt):
        o = _open_x(root)
        try:
            fn(o, root, fmt)
            if o.mode != "r":
                o.flush()
        finally:
            del o
    return run


def _cli(*argv):
    def run(root, fmt):
        args = [a.replace("{root}", root).replace("{fmt}", fmt) for a in argv]
        rc = cli.main(args, out=io.StringIO())
        if rc not in (0,):
            raise RuntimeError(f"blzarr {' '.join(args)} exited with {rc}")
    return run


def _two(fn_src, fn_dst):
    def setup(root, fmt):
        fn_src(os.path.join(root, "x"), fmt)
        fn_dst(os.path.join(root, "y"), fmt)
    return setup


def _arrow_table():
    pa = pytest.importorskip("pyarrow")
    return pa.table({"p": np.arange(300), "q": np.arange(300) * 0.5})


def _rewritten(root, fmt):
    _carray(_x(root), fmt)
    a = blzarr.open(_x(root), mode="a")
    a[0:400] = np.arange(400) * 3          # rewritten chunks leave space that compact reclaims
    a.close()


def _from_dask(frame):
    """blzarr.from_dask over the dataset at x (dask's synchronous scheduler: the same file operations
    in the same order in every run)."""
    def run(root, fmt, **kw):
        dask = pytest.importorskip("dask")
        if fmt == "blz" and not frame:
            kw["superchunklen"] = 2
        if frame:
            pd = pytest.importorskip("pandas")
            x = pd.DataFrame({"p": np.arange(300), "q": np.arange(300) * 0.5})
        else:
            x = pytest.importorskip("dask.array").arange(300, chunks=150)
        with dask.config.set(scheduler="synchronous"):
            blzarr.from_dask(x, f"{root}/x", chunklen=CL, format=fmt, **kw).close()
    return run


def _moved_setup(root, fmt):
    _ctable(_x(root), fmt)
    _carray(os.path.join(root, "m"), fmt)


def _addcol_move(root, fmt):
    t = _open_x(root)
    m = os.path.join(root, "m")
    if os.path.exists(m):
        t.addcol(blzarr.open(m, mode="a"), name="m", move=True)
    else:   # moved already (a retry after the move committed)
        assert "m" in t.names


OPS = [
    # carray methods
    Op("carray.append", "carray", _with(lambda o, r, f: o.append(np.arange(250) + 10_000))),
    Op("carray.__setitem__", "carray", _with(lambda o, r, f: o.__setitem__(slice(50, 350), -7))),
    Op("carray.trim", "carray", _with(lambda o, r, f: o.trim(350))),
    Op("carray.resize", "carray", _with(lambda o, r, f: o.resize(1234))),
    Op("carray.attrs", "carray", _with(lambda o, r, f: o.attrs.__setitem__("k", [1, 2]))),
    Op("carray.reshape", "carray", _with(lambda o, r, f: o.reshape((250, 4)) if o.ndim == 1 else None)),
    Op("carray.compact", "carray", _with(lambda o, r, f: o.compact()), formats=["blz"], setup=_rewritten),
    Op("carray.copy", "carray", _with(lambda o, r, f: o.copy(rootdir=os.path.join(r, "y"), mode="w").close()),
       touches=("x", "y"), setup=_two(_carray, lambda p, f: _carray(p, f, 10))),
    Op("carray", "carray", lambda r, f: blzarr.carray(np.arange(77), rootdir=_x(r), mode="w", format=f).close(),
       covers=("blzarr.carray", "blzarr.arange", "blzarr.zeros", "blzarr.ones", "blzarr.fill",
               "blzarr.fromiter")),
    # ctable methods
    Op("ctable.append", "ctable", _with(lambda o, r, f: o.append([np.arange(250), np.arange(250) * 2.0,
                                                                  np.ones(250, np.int32)]))),
    Op("ctable.__setitem__", "ctable", _with(lambda o, r, f: o.__setitem__(slice(10, 400), (1, 2.0, 3)))),
    Op("ctable.replace_column", "ctable", _with(lambda o, r, f: o.__setitem__("b", np.arange(N) * -1.0))),
    Op("ctable.cols.__setitem__", "ctable",
       _with(lambda o, r, f: o.cols.__setitem__("c", np.arange(N, dtype=np.int32)))),
    Op("ctable.addcol", "ctable", _with(lambda o, r, f: o.addcol(np.arange(N) * 3, name="d")
                                        if "d" not in o.names else None)),
    Op("ctable.addcol_move", "ctable", _addcol_move, touches=("x", "m"), setup=_moved_setup,
       covers=("ctable.addcol",)),
    Op("ctable.delcol", "ctable", _with(lambda o, r, f: o.delcol("b") if "b" in o.names else None)),
    Op("ctable.trim", "ctable", _with(lambda o, r, f: o.trim(300))),
    Op("ctable.resize", "ctable", _with(lambda o, r, f: o.resize(1500))),
    Op("ctable.attrs", "ctable", _with(lambda o, r, f: o.attrs.__setitem__("k", 5))),
    Op("ctable.copy", "ctable", _with(lambda o, r, f: o.copy(rootdir=os.path.join(r, "y"), mode="w").close()),
       touches=("x", "y"), setup=_two(_ctable, lambda p, f: _ctable(p, f, 10))),
    Op("ctable", "ctable", lambda r, f: blzarr.ctable([np.arange(5)], names=["z"], rootdir=_x(r), mode="w",
                                                     format=f).close(), covers=("blzarr.ctable",)),
    Op("ctable.cache_factor", "ctable", _with(lambda o, r, f: o.cache_factor(["c"]))),
    Op("ctable.groupby", "ctable", _with(lambda o, r, f: o.groupby(["c"], ["a"], rootdir=os.path.join(r, "y"))
                                         if not os.path.exists(os.path.join(r, "y")) else None),
       touches=("x", "y")),
    Op("ctable.fromarrow", "ctable", lambda r, f: blzarr.ctable.fromarrow(
        _arrow_table(), rootdir=_x(r), mode="w", format=f).close(), covers=("ctable.fromarrow", "ctable.fromparquet")),
    # top level and command line
    Op("from_dask", "carray", _from_dask(False), covers=("blzarr.from_dask",)),
    Op("from_dask_frame", "ctable", _from_dask(True), covers=("blzarr.from_dask",),
       formats=["bcolz"]),
    Op("salvage", "carray", lambda r, f: blzarr.salvage(_x(r), os.path.join(r, "y"), overwrite=True),
       touches=("x", "y"), setup=_two(_carray, lambda p, f: _carray(p, f, 10)), covers=("blzarr.salvage",)),
    Op("salvage_ctable", "ctable", lambda r, f: blzarr.salvage(_x(r), os.path.join(r, "y"), overwrite=True),
       touches=("x", "y"), setup=_two(_ctable, lambda p, f: _ctable(p, f, 10)), covers=("blzarr.salvage",)),
    Op("cli.convert", "carray", _cli("convert", "{root}/x", "{root}/y", "--overwrite"),
       touches=("x", "y"), setup=_two(_carray, lambda p, f: _carray(p, f, 10))),
    Op("cli.convert_ctable", "ctable", _cli("convert", "{root}/x", "{root}/y", "--overwrite", "--format", "blz"),
       touches=("x", "y"), setup=_two(_ctable, lambda p, f: _ctable(p, f, 10)), covers=("cli.convert",)),
    Op("cli.convert_salvage", "carray", _cli("convert", "{root}/x", "{root}/y", "--overwrite", "--salvage"),
       touches=("x", "y"), setup=_two(_carray, lambda p, f: _carray(p, f, 10)), covers=("cli.convert",)),
]
OPS_BY_NAME = {op.name: op for op in OPS}


# ------------------------------------------------------------------ running one operation faulted
class Case:
    """One operation in one layout: its template directory, the states before and after, the number
    of writing calls."""

    def __init__(self, op, fmt, base):
        self.op, self.fmt = op, fmt
        self.template = os.path.join(base, "template")
        os.makedirs(self.template)
        op.setup(self.template, fmt)
        self.before = self.states(self.template)
        probe = os.path.join(base, "probe")
        shutil.copytree(self.template, probe, symlinks=True)
        self.ncalls, self.calls = count_calls(lambda: op.run(probe, fmt))
        self.after = self.states(probe)
        assert self.before != self.after or op.name in _SAME_AFTER, f"{op}: the operation changed nothing"
        self.base = base

    def states(self, root, mode="r"):
        return tuple(snapshot(os.path.join(root, t), mode) for t in self.op.touches)

    def fresh(self, tag):
        root = os.path.join(self.base, tag)
        if os.path.exists(root):
            shutil.rmtree(root)
        shutil.copytree(self.template, root, symlinks=True)
        return root

    # where a crash state is, how it is verified and how the operation is retried on it: the hooks
    # the object-storage matrix (test_fault_matrix_s3) overrides
    def describe(self, at, fault):
        return f"{self.op} ({self.fmt}), {fault} before call {at}/{self.ncalls} {self.calls[at - 1]}"

    def verify(self, root, t):
        verify_clean(os.path.join(root, t))

    def run_op(self, root):
        self.op.run(root, self.fmt)

    def check(self, root, at, fault):
        where = self.describe(at, fault)
        got = self.states(root, "r")
        for t, g, b, a in zip(self.op.touches, got, self.before, self.after):
            assert g in (b, a), f"{where}: mode 'r' shows '{t}' neither as before nor as after"
        # a writer's open completes what an intent record names: then it shows the state after
        writer = self.states(root, "a")
        assert writer == got or writer == self.after, f"{where}: mode 'a' shows another state than mode 'r'"
        got = self.states(root, "r")
        for t in self.op.touches:
            try:
                self.verify(root, t)
            except AssertionError as e:
                raise AssertionError(f"{where}: verify: {e}") from None
        try:
            self.run_op(root)
        except Exception as e:
            raise AssertionError(f"{where}: the retry failed: {type(e).__name__}: {e}") from None
        if got == self.before:
            assert self.states(root, "r") == self.after, f"{where}: the retry did not give the state after"
        return got == self.before

    def interrupt_at(self, at, fault):
        freeze_survivors()
        root = self.fresh(f"{fault}-{at}")
        if fault == "kill":
            run_killed(lambda: self.op.run(root, self.fmt), at)
        else:
            e = run_faulted(lambda: self.op.run(root, self.fmt), at, fault)
            del e
            gc.collect()
        try:
            return self.check(root, at, fault)
        finally:
            shutil.rmtree(root, ignore_errors=True)


def freeze_survivors():
    """Put every object alive now out of the collector's sight (`gc.freeze`) before a crash state:
    a state collects its garbage several times (an object left to a later collection could flush
    into the next state), and each full collection walked the whole session's objects (numpy,
    hypothesis, pytest's), not the state's own."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="module", autouse=True)
def _unfreeze():
    yield
    gc.unfreeze()


# operations that change the files, not the contents
_SAME_AFTER = {"carray.compact", "ctable.cache_factor"}


_CASES = {}


def _case(op, fmt, tmp_path_factory):
    key = (op.name, fmt)
    if key not in _CASES:
        _CASES[key] = Case(op, fmt, str(tmp_path_factory.mktemp(f"{op.name}-{fmt}")))
    return _CASES[key]


def _params():
    return [pytest.param(op, fmt, id=f"{op.name}-{fmt}") for op in OPS for fmt in op.formats]


# operations that are not yet atomic under a fault: (operation, fault or None for all) -> why.  Each
# is an expected failure (strict: a fix makes the test fail until the entry is removed)
KNOWN_GAPS = {}


def _gap(op, fault, request, strict=True):
    why = KNOWN_GAPS.get((op.name, fault)) or KNOWN_GAPS.get((op.name, None))
    if why is not None:
        request.applymarker(pytest.mark.xfail(strict=strict, reason=why))


_QUICK_FAULTS = ("interrupt", "enospc", "kill")


def _quick_params():
    """Each (operation, layout) with each fault at one point.  The default run takes one fault of
    the three per pair, in turn (every fault still meets both layouts and most operations); the
    other two run with the slow tests."""
    out = []
    for k, (op, fmt) in enumerate((op, fmt) for op in OPS for fmt in op.formats):
        for j, fault in enumerate(_QUICK_FAULTS):
            marks = []
            if fault == "kill":
                marks.append(pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"))
            if j != k % len(_QUICK_FAULTS):
                marks.append(pytest.mark.slow)
            out.append(pytest.param(op, fmt, fault, id=f"{op.name}-{fmt}-{fault}", marks=marks))
    return out


@pytest.mark.parametrize("op,fmt,fault", _quick_params())
def test_quick(op, fmt, fault, tmp_path_factory, request):
    # one point per fault: a gap may happen not to show at it (the full sweep is strict)
    _gap(op, fault, request, strict=False)
    case = _case(op, fmt, tmp_path_factory)
    assert case.ncalls > 0
    n = case.ncalls
    points = {"interrupt": [max(1, n // 2)], "enospc": [max(1, n // 3)], "kill": [max(1, (2 * n) // 3)]}[fault]
    for at in points:
        case.interrupt_at(at, fault)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("op,fmt", _params())
def test_full_sweep(op, fmt, fault, tmp_path_factory, request):
    case = _case(op, fmt, tmp_path_factory)
    points = _sweep_points(case.ncalls)
    # a known gap must show when every point is swept; a spread of points may miss it
    _gap(op, fault, request, strict=len(points) == case.ncalls)
    before = 0
    for at in points:
        before += case.interrupt_at(at, fault)
    # both outcomes occur when the process dies: the early points leave the state before, the last
    # ones the state after.  An in-process fault may end in the state after at every point: the
    # handle, collected, flushes what the operation had done in memory (a trim of the bcolz layout)
    assert before <= len(points)
    if fault == "kill":
        assert before > 0


# the writing calls a sweep interrupts: every one of an operation that makes at most this many, an
# even spread of this many (the first and last included) of a longer one, so that the whole sweep
# stays within CI's time.  By default the first and the last; test_quick adds one point inside each
# operation for each fault (a third, a half or two thirds of the way, by fault);
# BLZARR_SWEEP_POINTS=1000 sweeps every point (hours)
SWEEP_POINTS = max(2, int(os.environ.get("BLZARR_SWEEP_POINTS", "2")))


def _sweep_points(n):
    if n <= SWEEP_POINTS:
        return list(range(1, n + 1))
    return sorted({1 + round(k * (n - 1) / (SWEEP_POINTS - 1)) for k in range(SWEEP_POINTS)})


# ------------------------------------------------------------------ the matrix stays complete
def _public_methods(cls):
    return sorted(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None))
                  and not isinstance(inspect.getattr_static(cls, n), property))


def _cli_commands():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


def _disk_objects(root, fmt):
    _carray(os.path.join(root, "x"), fmt)
    _ctable(os.path.join(root, "t"), fmt)
    blzarr.carray(np.arange(N) % 3 == 0, rootdir=os.path.join(root, "w"), mode="w", format=fmt).close()
    return blzarr.open(os.path.join(root, "x"), mode="a"), blzarr.open(os.path.join(root, "t"), mode="a")


def _read_one_chunk(a):
    r = a.chunk_reader(0, 1)
    if r is not None:
        try:
            r.read(0, np.empty(a.chunklen, a.dtype))
        finally:
            r.close()


# every public name not in the matrix, with a call that exercises it on on-disk objects opened with
# mode 'a' (a, t); it must make no writing call of the I/O layer
NOT_WRITING = {
    "carray.chunk_stats": lambda a, t, r: a.chunk_stats(),
    "carray.close": None,       # flush + lock release: covered by every carray operation (they close)
    "carray.flush": None,       # covered by every carray operation (they flush)
    "carray.free_cachemem": lambda a, t, r: a.free_cachemem(),
    "carray.iter": lambda a, t, r: list(a.iter(0, 10)),
    "carray.max": lambda a, t, r: a.max(),
    "carray.mean": lambda a, t, r: a.mean(),
    "carray.min": lambda a, t, r: a.min(),
    "carray.purge": "removes the whole directory (no state between to check): test_atomic_ops",
    "carray.read_into": lambda a, t, r: a.read_into(0, 10, np.empty(10, a.dtype)),
    "carray.resident_chunks": lambda a, t, r: a.resident_chunks(),
    "carray.chunk_reader": lambda a, t, r: _read_one_chunk(a),
    "carray.searchsorted": lambda a, t, r: a.searchsorted(5),
    "carray.stats_state": lambda a, t, r: a.stats_state(),
    "carray.sum": lambda a, t, r: a.sum(),
    "carray.to_dask": "integration (needs dask); reads only",
    "carray.verify": lambda a, t, r: a.verify(),
    "carray.view": lambda a, t, r: a.view()[:5],
    "carray.where": lambda a, t, r: list(a.where(blzarr.open(os.path.join(r, "w"), mode="a"))),
    "carray.wheretrue": lambda a, t, r: list(blzarr.open(os.path.join(r, "w"), mode="a").wheretrue()),
    "ctable.close": None, "ctable.flush": None,
    "ctable.eval": lambda a, t, r: t.eval("a + b")[:],
    "ctable.factorize_groupby_cols": lambda a, t, r: t.factorize_groupby_cols(["c"]),
    "ctable.is_in_ordered_subgroups": lambda a, t, r: t.is_in_ordered_subgroups("c"),
    "ctable.unique": lambda a, t, r: t.unique("c"),
    "ctable.where_terms": lambda a, t, r: t.where_terms([("c", "==", 3)]),
    "ctable.where_terms_factorization_check": lambda a, t, r: t.where_terms_factorization_check([("c", "==", 3)]),
    "ctable.cache_valid": lambda a, t, r: t.cache_valid("c"),
    "ctable.clean_tmp_rootdir": lambda a, t, r: t.clean_tmp_rootdir(),
    "ctable.toparquet": "writes a Parquet file through pyarrow, not a blzarr directory",
    "ctable.explain": lambda a, t, r: t.explain("a > 3"),
    "ctable.fetchwhere": lambda a, t, r: t.fetchwhere("a > 3")[:],
    "ctable.free_cachemem": lambda a, t, r: t.free_cachemem(),
    "ctable.fromdataframe": "a constructor: the ctable constructor's operation covers what it writes",
    "ctable.fromhdf5": "a constructor: the ctable constructor's operation covers what it writes",
    "ctable.iter": lambda a, t, r: list(t.iter(0, 10)),
    "ctable.to_arrow": "integration (needs pyarrow); reads only",
    "ctable.to_dask": "integration (needs dask); reads only",
    "ctable.todataframe": lambda a, t, r: t.todataframe(),
    "ctable.tohdf5": "writes an HDF5 file through h5py/PyTables, not a blzarr directory",
    "ctable.where": lambda a, t, r: list(t.where("a > 990")),
    "ctable.whereblocks": lambda a, t, r: list(t.whereblocks("a > 990")),
    "blzarr.open": lambda a, t, r: blzarr.open(os.path.join(r, "t"), mode="a")[:5],
    "blzarr.eval": lambda a, t, r: blzarr.eval("a * 2", user_dict={"a": a})[:],
    "blzarr.iterblocks": lambda a, t, r: list(blzarr.iterblocks(a)),
    "blzarr.walk": lambda a, t, r: list(blzarr.walk(r)),
    "blzarr.lazyexpr": lambda a, t, r: blzarr.lazyexpr("a + 1", user_dict={"a": a}).sum(),
    "blzarr.LazyExpr": "the class of lazyexpr",
    "cli.info": lambda a, t, r: cli.main(["info", os.path.join(r, "t")], out=io.StringIO()),
    "cli.ls": lambda a, t, r: cli.main(["ls", r], out=io.StringIO()),
    "cli.verify": lambda a, t, r: cli.main(["verify", r], out=io.StringIO()),
    "cli.bench": "the benchmark harness: writes its own scratch data only",
}
# top-level names that are not operations on data (errors, settings, information, constructors' aliases)
_NOT_OPERATIONS = {"array2string", "blosc_compressor_list", "blosc_set_nthreads", "blosc_version", "chunk",
                   "cparams", "defaults_ctx", "detect_number_of_cores", "print_versions", "set_nthreads",
                   "set_printoptions", "test"}


def _all_public():
    names = [f"carray.{n}" for n in _public_methods(blzarr.carray)]
    names += [f"ctable.{n}" for n in _public_methods(blzarr.ctable)]
    names += [f"blzarr.{n}" for n in blzarr.__all__ if callable(getattr(blzarr, n))
              and not (isinstance(getattr(blzarr, n), type) and issubclass(getattr(blzarr, n), BaseException))
              and n not in _NOT_OPERATIONS]
    names += [f"cli.{c}" for c in _cli_commands()]
    return names


def _covered():
    return {c for op in OPS for c in op.covers}


class NoWrites(fileio.OsIO):
    """Fails on any call that changes the disk."""

    def __init__(self):
        self.seen = []

    def _no(self, what, *args):
        self.seen.append((what, args))
        raise AssertionError(f"a writing call of the I/O layer: {what} {args}")


for _name in ("pwrite", "write", "truncate", "fsync", "fdatasync", "fchmod", "replace", "rename", "exchange",
              "unlink", "rmdir", "mkdir", "fsync_dir"):
    setattr(NoWrites, _name, (lambda what: lambda self, *a, **k: self._no(what, *a))(_name))


def _no_write_open(self, path, how="r", mode=0o666):
    if how not in ("r", "r_nofollow"):
        self._no("open", path, how)
    return fileio.OsIO.open(self, path, how, mode)


NoWrites.open = _no_write_open


def test_every_writer_is_in_the_matrix():
    covered = _covered()
    missing = [n for n in _all_public() if n not in covered and n not in NOT_WRITING]
    assert not missing, (f"public operations neither in the fault matrix (OPS) nor in NOT_WRITING: {missing}: "
                         "add each to OPS if it can write, else to NOT_WRITING with a call that runs it")


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_not_writing_ones_do_not_write(tmp_path, fmt):
    root = str(tmp_path)
    a, t = _disk_objects(root, fmt)
    ran = 0
    try:
        for name, call in NOT_WRITING.items():
            if not callable(call):
                continue
            with fileio.use(NoWrites()):
                call(a, t, root)
            ran += 1
    finally:
        a.close()
        t.close()
    assert ran > 20


def test_the_injector_counts_every_writing_method_of_the_io_layer():
    from faults import WRITING, Injector
    writing = {n for n in vars(fileio.OsIO) if not n.startswith("_")} - {
        "close", "fstat", "pread", "pwritev", "start_writeback", "flock", "listdir", "exists", "isdir",
        "isfile", "getsize", "read_file"}
    assert writing == set(WRITING)
    assert all(n in vars(Injector) for n in WRITING)
    assert Injected.__mro__[1] is KeyboardInterrupt
