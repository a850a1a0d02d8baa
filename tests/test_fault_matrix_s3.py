"""The operation-fault matrix on object storage (moto's S3 server, conftest's `moto_server`).

The operations of tests/test_fault_matrix.py that exist on object storage, in both layouts, each
interrupted before each call of the byte store that changes objects (`FsspecStore`: a put, a delete,
the removal of a prefix) by each of three faults (tests/faults.py: `StoreInjector`): a
KeyboardInterrupt in the process, a store that refuses every put from that call on (the OSError of a
store over its quota, retried by the store and reported as its `StorageError`), SIGKILL of a forked
child at that call.

For each crash state, as on local disks: what the operation touches opens with mode 'r' and with
mode 'a' and holds the contents before the operation or after it, `blzarr verify` finds it clean,
and the same operation run again succeeds (from the state before, giving the state after).

`test_every_local_operation_is_in_the_s3_matrix` keeps the two matrices together: each operation of
the local matrix is here too, or in `NOT_ON_OBJECT_STORAGE` with the reason (and a check that it is
refused with a clear error there rather than half done).

The default run interrupts two operations at one point each (and checks the lists), and kills a table
creation, a row assignment, a replacement after its switch and a carray's assignment across chunk
objects, where the creation marker, the table journal, the redirect (blzarr.storage.replace) and the
carray journal must do their work; the sweep, a carray's creation at a new URL interrupted and killed
before its commit (where its creation marker must do its work), and the check that the reading calls
write nothing on S3, are marked slow.  The slow sweep interrupts a fixed sample of each operation's store calls (the
first, the last, every `SAMPLE_STRIDE`-th) by two of the three faults per layout (`_sweep_params`);
`BLZARR_S3_SWEEP_POINTS=all` interrupts every one by every fault.  A
crash state is told by its objects' keys and ETags, and one met before is not checked again.
"""

import gc
import io
import json
import os
import uuid
import warnings

import numpy as np
import pytest

import blzarr
from blzarr import cli
from faults import FAULTS, Injected, StoreInjector, count_store_calls, run_store_killed, store_faults
import test_fault_matrix as local

FORMATS = ["bcolz", "blz"]
N = 600
CL = 100


@pytest.fixture(scope="module")
def s3env(moto_server):
    """(s3fs filesystem, storage options, bucket URL): one bucket for the module, a prefix per case.
    The environment names the server too, for the calls that take no storage options."""
    import s3fs
    opts = moto_server.storage_options
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
        mp.setenv("AWS_ACCESS_KEY_ID", opts["key"])
        mp.setenv("AWS_SECRET_ACCESS_KEY", opts["secret"])
        mp.setenv("AWS_DEFAULT_REGION", opts["client_kwargs"]["region_name"])
        fs = s3fs.S3FileSystem(**opts)
        bucket = "m" + uuid.uuid4().hex[:12]
        fs.mkdir(bucket)
        yield fs, opts, f"s3://{bucket}"


# ------------------------------------------------------------------ the objects and their contents
def _carray(url, fmt, opts, n=N):
    kw = {"superchunklen": 2} if fmt == "blz" else {}
    a = blzarr.carray(np.arange(n, dtype=np.int64), rootdir=url, mode="w", chunklen=CL, format=fmt,
                      storage_options=opts, **kw)
    a.attrs["who"] = "x"
    a.close()


def _ctable(url, fmt, opts, n=N):
    t = blzarr.ctable([np.arange(n, dtype=np.int64), np.arange(n) * 0.5, np.arange(n, dtype=np.int32) % 7],
                      names=["a", "b", "c"], rootdir=url, mode="w", format=fmt, chunklen=CL,
                      storage_options=opts)
    t.attrs["who"] = "t"
    t.close()


def _exists(fs, url):
    fs.invalidate_cache()
    return bool(fs.find(url))


def snapshot(fs, url, opts, mode="r"):
    """What the object at `url` holds (None when nothing is there), opened with `mode`."""
    if not _exists(fs, url):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            o = blzarr.open(url, mode=mode, storage_options=opts)
        except blzarr.StorageError as e:
            # objects of a new dataset whose commit object was never written: nothing is stored there
            if "no carray or ctable is stored there" in str(e):
                return None
            raise
    try:
        return local.contents(o)
    finally:
        if mode != "r":
            o.close()
        del o
        gc.collect()


def _remove(fs, url):
    try:
        fs.rm(url, recursive=True)
    except FileNotFoundError:
        pass


def verify_clean(fs, url, opts):
    if not _exists(fs, url):
        return
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rc = cli.main(["verify", url, "--storage-options", json.dumps(opts)], out=out)
    assert rc == 0, out.getvalue()


# ------------------------------------------------------------------ the operations
class Op:
    """One operation on object storage: `setup(root, fmt, opts)` makes what it starts from under the
    prefix `root`, `run(root, fmt, opts)` does it; `touches` are the names under `root` checked."""

    def __init__(self, name, kind, run, touches=("x",), setup=None, formats=FORMATS, covers=()):
        self.name, self.kind, self._run, self.touches = name, kind, run, touches
        self._setup = setup
        self.formats = formats
        self.covers = tuple(covers) or (name,)

    def setup(self, root, fmt, opts):
        if self._setup is not None:
            self._setup(root, fmt, opts)
        elif self.kind == "carray":
            _carray(f"{root}/x", fmt, opts)
        else:
            _ctable(f"{root}/x", fmt, opts)

    def run(self, root, fmt, opts):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self._run(root, fmt, opts)
        gc.collect()

    def __repr__(self):
        return self.name


def _with(fn):
    def run(root, fmt, opts):
        o = blzarr.open(f"{root}/x", mode="a", storage_options=opts)
        try:
            fn(o, root, fmt, opts)
            o.flush()
        finally:
            o.close()
            del o
    return run


def _two(fn_src, fn_dst):
    def setup(root, fmt, opts):
        fn_src(f"{root}/x", fmt, opts)
        fn_dst(f"{root}/y", fmt, opts)
    return setup


def _cli(*argv):
    def run(root, fmt, opts):
        args = [a.replace("{root}", root).replace("{fmt}", fmt) for a in argv]
        rc = cli.main(args + ["--storage-options", json.dumps(opts)], out=io.StringIO())
        if rc != 0:
            raise RuntimeError(f"blzarr {' '.join(args)} exited with {rc}")
    return run


def _stored(url, opts):
    """Whether a dataset is stored at `url` (objects an interrupted writer left without their commit
    object are not one)."""
    try:
        blzarr.open(url, mode="r", storage_options=opts)
    except blzarr.StorageError:
        return False
    return True


def _rewritten(root, fmt, opts):
    _carray(f"{root}/x", fmt, opts)
    a = blzarr.open(f"{root}/x", mode="a", storage_options=opts)
    a[0:250] = np.arange(250) * 3
    a.close()


def _arrow_table():
    pa = pytest.importorskip("pyarrow")
    return pa.table({"p": np.arange(300), "q": np.arange(300) * 0.5})


OPS = [
    # carray methods
    Op("carray.append", "carray", _with(lambda o, r, f, s: o.append(np.arange(250) + 10_000))),
    Op("carray.__setitem__", "carray", _with(lambda o, r, f, s: o.__setitem__(slice(50, 350), -7))),
    Op("carray.trim", "carray", _with(lambda o, r, f, s: o.trim(150))),
    Op("carray.resize", "carray", _with(lambda o, r, f, s: o.resize(1234))),
    Op("carray.attrs", "carray", _with(lambda o, r, f, s: o.attrs.__setitem__("k", [1, 2]))),
    # (groupby writes through the environment's S3 settings: see s3env)
    Op("carray.compact", "carray", _with(lambda o, r, f, s: o.compact()), formats=["blz"], setup=_rewritten),
    Op("carray.copy", "carray", _with(lambda o, r, f, s: o.copy(rootdir=f"{r}/y", mode="w",
                                                               storage_options=s).close()),
       touches=("x", "y"), setup=_two(_carray, lambda p, f, s: _carray(p, f, s, 10))),
    Op("carray", "carray", lambda r, f, s: blzarr.carray(np.arange(77), rootdir=f"{r}/x", mode="w", format=f,
                                                         storage_options=s).close(),
       covers=("blzarr.carray", "blzarr.arange", "blzarr.zeros", "blzarr.ones", "blzarr.fill",
               "blzarr.fromiter")),
    # ctable methods
    Op("ctable.append", "ctable", _with(lambda o, r, f, s: o.append([np.arange(250), np.arange(250) * 2.0,
                                                                     np.ones(250, np.int32)]))),
    Op("ctable.__setitem__", "ctable", _with(lambda o, r, f, s: o.__setitem__(slice(10, 400), (1, 2.0, 3)))),
    Op("ctable.replace_column", "ctable", _with(lambda o, r, f, s: o.__setitem__("b", np.arange(N) * -1.0))),
    Op("ctable.cols.__setitem__", "ctable",
       _with(lambda o, r, f, s: o.cols.__setitem__("c", np.arange(N, dtype=np.int32)))),
    Op("ctable.addcol", "ctable", _with(lambda o, r, f, s: o.addcol(np.arange(N) * 3, name="d")
                                        if "d" not in o.names else None)),
    Op("ctable.addcol_move", "ctable", _with(lambda o, r, f, s: o.addcol(
        blzarr.carray(np.arange(N) % 5), name="m", move=True) if "m" not in o.names else None),
       covers=("ctable.addcol",)),
    Op("ctable.delcol", "ctable", _with(lambda o, r, f, s: o.delcol("b") if "b" in o.names else None)),
    Op("ctable.trim", "ctable", _with(lambda o, r, f, s: o.trim(150))),
    Op("ctable.resize", "ctable", _with(lambda o, r, f, s: o.resize(900))),
    Op("ctable.attrs", "ctable", _with(lambda o, r, f, s: o.attrs.__setitem__("k", 5))),
    # (ctable.copy and salvage take no storage_options: they reach the server through the environment)
    Op("ctable.copy", "ctable", _with(lambda o, r, f, s: o.copy(rootdir=f"{r}/y", mode="w").close()),
       touches=("x", "y"), setup=_two(_ctable, lambda p, f, s: _ctable(p, f, s, 10))),
    Op("ctable", "ctable", lambda r, f, s: blzarr.ctable([np.arange(5)], names=["z"], rootdir=f"{r}/x", mode="w",
                                                         format=f, storage_options=s).close(),
       covers=("blzarr.ctable",)),
    Op("ctable.groupby", "ctable", _with(lambda o, r, f, s: o.groupby(["c"], ["a"], rootdir=f"{r}/y")
                                         if not _stored(f"{r}/y", s) else None), touches=("x", "y")),
    Op("ctable.fromarrow", "ctable", lambda r, f, s: blzarr.ctable.fromarrow(
        _arrow_table(), rootdir=f"{r}/x", mode="w", format=f, storage_options=s).close(),
       covers=("ctable.fromarrow", "ctable.fromparquet")),
    # top level and command line
    Op("from_dask", "carray", lambda r, f, s: local._from_dask(False)(r, f, storage_options=s),
       covers=("blzarr.from_dask",)),
    Op("from_dask_frame", "ctable", lambda r, f, s: local._from_dask(True)(r, f, storage_options=s),
       covers=("blzarr.from_dask",),
       formats=["bcolz"]),
    Op("salvage", "carray", lambda r, f, s: blzarr.salvage(f"{r}/x", f"{r}/y", overwrite=True),
       touches=("x", "y"), setup=_two(_carray, lambda p, f, s: _carray(p, f, s, 10)), covers=("blzarr.salvage",)),
    Op("cli.convert", "carray", _cli("convert", "{root}/x", "{root}/y", "--overwrite"),
       touches=("x", "y"), setup=_two(_carray, lambda p, f, s: _carray(p, f, s, 10))),
    Op("cli.convert_ctable", "ctable", _cli("convert", "{root}/x", "{root}/y", "--overwrite", "--format", "blz"),
       touches=("x", "y"), setup=_two(_ctable, lambda p, f, s: _ctable(p, f, s, 10)), covers=("cli.convert",)),
]
OPS_BY_NAME = {op.name: op for op in OPS}


# ------------------------------------------------------------------ running one operation faulted
class Case(local.Case):
    """One operation in one layout on the server: its template prefix, the states before and after,
    the number of writing store calls; a crash state is checked as the local matrix checks one."""

    def __init__(self, op, fmt, env):
        self.op, self.fmt = op, fmt
        self.fs, self.opts, bucket = env
        self.base = f"{bucket}/{op.name}-{fmt}-{uuid.uuid4().hex[:6]}"
        self.template = f"{self.base}/template"
        op.setup(self.template, fmt, self.opts)
        self.before = self.states(self.template)
        probe = self.fresh("probe")
        self.ncalls, self.calls = count_store_calls(lambda: op.run(probe, fmt, self.opts))
        self.after = self.states(probe)
        assert self.before != self.after or op.name in _SAME_AFTER, f"{op}: the operation changed nothing"
        _remove(self.fs, probe)
        self.checked = {}       # fingerprint of a crash state -> what its check returned
        self.reused = 0

    def states(self, root, mode="r"):
        return tuple(snapshot(self.fs, f"{root}/{t}", self.opts, mode) for t in self.op.touches)

    def fresh(self, tag):
        """A copy of the template under a new prefix (copied on the server)."""
        root = f"{self.base}/{tag}-{uuid.uuid4().hex[:6]}"
        self.fs.invalidate_cache()
        self.fs.copy(self.template, root, recursive=True)
        self.fs.invalidate_cache()
        return root

    def describe(self, at, fault):
        return f"{self.op} ({self.fmt}, S3), {fault} before store call {at}/{self.ncalls} {self.calls[at - 1]}"

    def fingerprint(self, root):
        """Every object under `root` by its key below it and its ETag (an MD5 of its bytes, kept by a
        server-side copy): two crash states with one fingerprint hold the same bytes.  None when the
        server gives an object no ETag."""
        self.fs.invalidate_cache()
        found = self.fs.find(root, detail=True)
        self.fs.invalidate_cache()
        cut = len(root.split("://", 1)[1]) + 1
        tags = tuple(sorted((path[cut:], info.get("ETag")) for path, info in found.items()))
        return None if any(tag is None for _, tag in tags) else tags

    def verify(self, root, t):
        verify_clean(self.fs, f"{root}/{t}", self.opts)

    def run_op(self, root):
        self.op.run(root, self.fmt, self.opts)

    def interrupt_at(self, at, fault):
        local.freeze_survivors()
        root = self.fresh(f"{fault}-{at}")
        try:
            if fault == "kill":
                assert run_store_killed(lambda: self.run_op(root), at), \
                    f"{self.describe(at, fault)}: the operation finished before the kill"
            else:
                inj = StoreInjector(at, fault)
                try:
                    with store_faults(inj):
                        self.run_op(root)
                except (Exception, Injected):
                    pass
                assert inj.fired, f"{self.describe(at, fault)}: the operation finished before store call {at}"
                del inj
                gc.collect()
            # the check of a crash state is a function of its bytes (before and after are the case's):
            # a state met before (the template itself, a rolled-back operation) is not checked again
            key = self.fingerprint(root)
            if key is not None and key in self.checked:
                self.reused += 1
                return self.checked[key]
            got = self.check(root, at, fault)
            if key is not None:
                self.checked[key] = got
            return got
        finally:
            _remove(self.fs, root)


@pytest.fixture(scope="module", autouse=True)
def _unfreeze():
    yield
    gc.unfreeze()


_SAME_AFTER = {"carray.compact"}
_CASES = {}


def _case(op, fmt, env):
    key = (op.name, fmt)
    if key not in _CASES:
        _CASES[key] = Case(op, fmt, env)
    return _CASES[key]


# operations not yet atomic on object storage under a fault: (operation, layout or None, fault or
# None) -> why; each an expected failure of the sweep (strict where every point is swept).  None today.
KNOWN_GAPS = {}


def _gap(op, fmt, fault, request, strict=True):
    why = next((KNOWN_GAPS[k] for k in ((op.name, fmt, fault), (op.name, fmt, None), (op.name, None, fault),
                                        (op.name, None, None)) if k in KNOWN_GAPS), None)
    if why is not None:
        request.applymarker(pytest.mark.xfail(strict=strict, reason=why))


# writing calls interrupted per (operation, layout, fault) in the slow sweep: by default a fixed
# sample, the first call, the last, and every SAMPLE_STRIDE-th between (starting at an offset that
# differs per fault, so that the three faults of a pair meet different calls); the first call's crash
# state is the template, checked once per pair.  BLZARR_S3_SWEEP_POINTS=k interrupts k calls spread
# evenly instead, =all (or any k at least the number of calls) every call.
SAMPLE_STRIDE = 100
_env_points = os.environ.get("BLZARR_S3_SWEEP_POINTS", "").strip().lower()
S3_SWEEP_POINTS = None if not _env_points else 10 ** 9 if _env_points == "all" else max(1, int(_env_points))


def _sweep_points(n, fault, k=S3_SWEEP_POINTS):
    if k is None:
        offset = FAULTS.index(fault) * SAMPLE_STRIDE // len(FAULTS)
        return sorted({1, n} | set(range(1 + offset, n + 1, SAMPLE_STRIDE)))
    if n <= k:
        return list(range(1, n + 1))
    if k == 1:
        return [1 + n // 2]
    return sorted({1 + round(j * (n - 1) / (k - 1)) for j in range(k)})


# the default run: these operations, one fault each at one point inside (the others, and the other
# faults, in the slow sweep)
QUICK = [("carray.append", "blz", "kill"), ("ctable.addcol", "bcolz", "enospc")]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("name,fmt,fault", QUICK, ids=["-".join(q) for q in QUICK])
def test_quick(name, fmt, fault, s3env, request):
    op = OPS_BY_NAME[name]
    _gap(op, fmt, fault, request, strict=False)
    case = _case(op, fmt, s3env)
    assert case.ncalls > 0
    case.interrupt_at(max(1, case.ncalls // 2), fault)


def _params():
    return [pytest.param(op, fmt, id=f"{op.name}-{fmt}") for op in OPS for fmt in op.formats]


def _sweep_params():
    """(operation, layout, fault) of the slow sweep: two of the three faults per (operation, layout),
    the one left out turning with each pair, so that an operation in both layouts meets every fault
    and each layout meets every fault over the operations, in two thirds of CI's time for the whole
    product; with BLZARR_S3_SWEEP_POINTS set, the whole product."""
    pairs = [(op, fmt) for op in OPS for fmt in op.formats]
    return [pytest.param(op, fmt, fault, id=f"{op.name}-{fmt}-{fault}")
            for k, (op, fmt) in enumerate(pairs) for j, fault in enumerate(FAULTS)
            if S3_SWEEP_POINTS is not None or j != k % len(FAULTS)]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("op,fmt,fault", _sweep_params())
def test_full_sweep(op, fmt, fault, s3env, request):
    case = _case(op, fmt, s3env)
    points = _sweep_points(case.ncalls, fault)
    _gap(op, fmt, fault, request, strict=len(points) == case.ncalls)
    before = 0
    reused = case.reused
    for at in points:
        before += case.interrupt_at(at, fault)
    print(f"{op} {fmt} {fault}: {len(points)} of {case.ncalls} store calls interrupted, "
          f"{case.reused - reused} states met before, {before} states before")
    if fault == "kill" and 1 in points:
        assert before > 0       # a kill before the first writing call leaves the state before


def _keys(fs, url):
    fs.invalidate_cache()
    return sorted(p[len(url.split("://", 1)[1]) + 1:] for p in fs.find(url))


def _bcolz_carray_at(env, tag):
    """(fs, options, root, url): a new prefix `root` of the module's bucket, with the test's bcolz-layout
    carray (0..N-1) at `url` = root/x."""
    fs, opts, bucket = env
    root = f"{bucket}/{tag}-{uuid.uuid4().hex[:6]}"
    _carray(f"{root}/x", "bcolz", opts)
    return fs, opts, root, f"{root}/x"


def _verified(url, opts):
    """What `blzarr verify url` reports (it must exit 0)."""
    out = io.StringIO()
    assert cli.main(["verify", url, "--storage-options", json.dumps(opts)], out=out) == 0, out.getvalue()
    return out.getvalue()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_killed_table_creation_leaves_no_dataset_and_no_damage(s3env):
    # a group-by into a new URL killed inside its first column (meta/storage put, the rest not): the
    # URL holds the creation marker and a half-written column; nothing is stored there for open, ls
    # and verify (which must not walk into the column), and the retry writes the table
    fs, opts, bucket = s3env
    root = f"{bucket}/creation-{uuid.uuid4().hex[:6]}"
    op = OPS_BY_NAME["ctable.groupby"]
    op.setup(root, "blz", opts)
    op.setup(f"{root}/probe", "blz", opts)
    _, calls = count_store_calls(lambda: op.run(f"{root}/probe", "blz", opts))
    _remove(fs, f"{root}/probe")
    # killed before the call after the first column's meta/storage put
    at = 2 + next(k for k, (what, key) in enumerate(calls) if key.endswith("/y/c/meta/storage"))
    assert run_store_killed(lambda: op.run(root, "blz", opts), at)
    fs.invalidate_cache()
    assert fs.exists(f"{root}/y/.blzarr-creating") and fs.exists(f"{root}/y/c/meta/storage")
    assert snapshot(fs, f"{root}/y", opts) is None
    report = _verified(f"{root}/y", opts)
    assert "EMPTY" in report and "/y/c" not in report
    assert "1 object verified: 1 OK" in _verified(root, opts)      # x only
    op.run(root, "blz", opts)
    t = blzarr.open(f"{root}/y", mode="r", storage_options=opts)
    c = np.arange(N, dtype=np.int32) % 7
    np.testing.assert_array_equal(t["c"][:], np.unique(c))
    np.testing.assert_array_equal(t["a"][:], [np.arange(N)[c == k].sum() for k in np.unique(c)])
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/y/.blzarr-creating")
    _remove(fs, root)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_killed_row_assignment_is_rolled_back(s3env):
    # a BLZ table's t[10:400] = row killed after its first column was rewritten in place: a reader
    # sees the table as before (the rewritten column read from its aside copy), verify is clean, a
    # writer's open rolls the column back, and the retry gives the state after
    fs, opts, bucket = s3env
    root = f"{bucket}/journal-{uuid.uuid4().hex[:6]}"
    op = OPS_BY_NAME["ctable.__setitem__"]
    for r in (root, f"{root}/probe"):
        op.setup(r, "blz", opts)
    before = snapshot(fs, f"{root}/x", opts)
    _, calls = count_store_calls(lambda: op.run(f"{root}/probe", "blz", opts))
    after = snapshot(fs, f"{root}/probe/x", opts)
    _remove(fs, f"{root}/probe")
    # killed before the call after column a's meta/sizes put (a rewritten, b and c not)
    at = 2 + next(k for k, (what, key) in enumerate(calls) if key.endswith("/x/a/meta/sizes"))
    assert run_store_killed(lambda: op.run(root, "blz", opts), at)
    fs.invalidate_cache()
    meta = json.loads(fs.cat(f"{root}/x/__rootdirs__"))
    assert meta["journal"]["columns"] == ["a", "b", "c"]
    a_in_place = blzarr.carray(rootdir=f"{root}/x/a", mode="r", storage_options=opts)[:]
    assert (a_in_place[10:400] == 1).all()          # the column itself was rewritten in place
    assert snapshot(fs, f"{root}/x", opts) == before
    assert "journal" in _verified(f"{root}/x", opts)
    assert snapshot(fs, f"{root}/x", opts, mode="a") == before       # rolled back
    fs.invalidate_cache()
    assert "journal" not in json.loads(fs.cat(f"{root}/x/__rootdirs__"))
    assert not [p for p in fs.ls(f"{root}/x") if ".blzarr-old-" in p]
    op.run(root, "blz", opts)
    assert snapshot(fs, f"{root}/x", opts) == after
    _remove(fs, root)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_killed_replacement_after_its_switch_is_the_new_dataset(s3env):
    # a carray replaced by a ctable (mode 'w' over it), killed after the switch (the carray's
    # meta/storage put as the redirect) and the first deletes of the roll-forward: a reader opens the
    # new table from its stage, verify is clean and says so, a writer's open puts it in place, and
    # replacing it again works
    fs, opts, root, url = _bcolz_carray_at(s3env, "switch")

    def replace_it():
        blzarr.ctable([np.arange(300), np.arange(300) * 0.5], names=["p", "q"], rootdir=url, mode="w",
                      format="blz", chunklen=CL, storage_options=opts).close()
    _carray(f"{root}/probe", "bcolz", opts)
    _, calls = count_store_calls(lambda: blzarr.ctable(
        [np.arange(300), np.arange(300) * 0.5], names=["p", "q"], rootdir=f"{root}/probe", mode="w",
        format="blz", chunklen=CL, storage_options=opts).close())
    _remove(fs, f"{root}/probe")
    switch = next(k for k, (what, key) in enumerate(calls) if key.endswith("/probe/meta/storage"))
    assert calls[switch][0] == "write" and calls[switch + 1][0] == "delete"
    assert run_store_killed(replace_it, switch + 3)         # the switch and one delete done
    keys = _keys(fs, url)
    stage = next(k.split("/")[0] for k in keys if k.startswith(".blzarr-new-"))
    assert json.loads(fs.cat(f"{url}/meta/storage"))["replaced"] == {"version": 1, "by": stage, "kind": "ctable"}
    after = ("ctable", 300, (("p", "<i8", (300,), np.arange(300).tobytes()),
                             ("q", "<f8", (300,), (np.arange(300) * 0.5).tobytes())), ())
    assert snapshot(fs, url, opts) == after
    with pytest.raises(blzarr.StorageError, match="being replaced by a ctable"):
        blzarr.carray(rootdir=url, mode="r", storage_options=opts)
    assert "interrupted replacement" in _verified(url, opts)
    assert snapshot(fs, url, opts, mode="a") == after       # the writer's open completed it
    keys = _keys(fs, url)
    assert "__rootdirs__" in keys and not [k for k in keys if k.startswith((".blzarr-", "meta/", "data/"))], keys
    replace_it()
    assert snapshot(fs, url, opts) == after
    _remove(fs, root)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_killed_assignment_to_a_bcolz_carray_is_rolled_back(s3env):
    # a bcolz-layout carray's a[50:350] = -7 killed after two of its chunk objects were rewritten in
    # place: a reader sees the values before (read from the journal's copy), verify is clean, a
    # writer's open puts the old objects back, and the retry gives the values after
    fs, opts, root, url = _bcolz_carray_at(s3env, "carray-journal")
    before = snapshot(fs, url, opts)
    op = OPS_BY_NAME["carray.__setitem__"]
    _, calls = count_store_calls(lambda: op.run(root, "bcolz", opts))
    chunk_puts = [k for k, (what, key) in enumerate(calls) if what == "write" and "/x/data/" in key
                  and ".blzarr-new-" not in key]
    assert len(chunk_puts) == 4       # chunks 0-3, rewritten in place
    _remove(fs, root)
    _carray(url, "bcolz", opts)
    assert run_store_killed(lambda: op.run(root, "bcolz", opts), chunk_puts[2] + 1)
    in_place = np.frombuffer(snapshot(fs, url, opts)[3], np.int64)
    assert (in_place == np.arange(N)).all()         # the reader's view: the state before
    keys = _keys(fs, url)
    assert json.loads(fs.cat(f"{url}/meta/storage"))["replaced"]["kind"] == "carray"
    assert [k for k in keys if k.startswith(".blzarr-new-")]
    _verified(url, opts)
    assert snapshot(fs, url, opts, mode="a") == before      # rolled back
    assert not [k for k in _keys(fs, url) if k.startswith(".blzarr-")]
    op.run(root, "bcolz", opts)
    a = blzarr.open(url, mode="r", storage_options=opts)
    expected = np.arange(N)
    expected[50:350] = -7
    np.testing.assert_array_equal(a[:], expected)
    _remove(fs, root)


def _before_the_commit(calls, name):
    """The store call at which a carray's creation at `<root>/<name>` puts meta/sizes for the first
    time after data objects (the flush that writes its rows)."""
    first_data = next(k for k, (what, key) in enumerate(calls) if f"/{name}/data/" in key)
    return 1 + next(k for k, (what, key) in enumerate(calls)
                    if k > first_data and key.endswith(f"/{name}/meta/sizes"))


def _interrupted(fn, at):
    """Run `fn` with an interrupt injected before store call `at`: the injected error comes out, and
    the injection struck."""
    inj = StoreInjector(at, "interrupt")
    with pytest.raises(Injected), store_faults(inj):
        fn()
    assert inj.fired


def _nothing_yet(fs, url, opts):
    """The state a carray creation at `url` that never committed must leave: nothing stored.  When
    objects are left there (True): the creation marker and no meta/storage, a clear error naming the
    URL, and verify finds no damage."""
    assert snapshot(fs, url, opts) is None
    if not _exists(fs, url):
        return False            # (the failed operation removed what it wrote)
    assert fs.exists(f"{url}/.blzarr-creating") and not fs.exists(f"{url}/meta/storage")
    with pytest.raises(blzarr.StorageError, match=f"'{url}' does not exist .*a creation that has not committed"):
        blzarr.open(url, mode="r", storage_options=opts)
    with pytest.raises(blzarr.StorageError, match=f"'{url}'.*a creation that has not committed"):
        blzarr.carray(rootdir=url, mode="r", storage_options=opts)
    assert "EMPTY" in _verified(url, opts)
    return True


_CREATIONS = {
    # the constructor (BLZ): one flush, meta/sizes once
    "carray": lambda url, opts: blzarr.carray(np.arange(N), rootdir=url, chunklen=CL, format="blz",
                                              superchunklen=2, storage_options=opts).close(),
    # an empty carray filled chunk by chunk (bcolz layout): meta/sizes at its creation and at the end
    "arange": lambda url, opts: blzarr.arange(N, rootdir=url, chunklen=CL, format="bcolz",
                                              storage_options=opts).close(),
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(_CREATIONS))
def test_an_interrupted_carray_creation_at_a_new_url_leaves_nothing(s3env, how):
    # a carray created where nothing is stored is written in place (no stage to switch): interrupted
    # after its data objects and before its last meta/sizes, nothing is stored at the URL, and the
    # same creation run again (mode 'a', the default: nothing is there to refuse) writes it
    fs, opts, bucket = s3env
    root = f"{bucket}/interrupted-{how}-{uuid.uuid4().hex[:6]}"
    create = _CREATIONS[how]
    _, calls = count_store_calls(lambda: create(f"{root}/probe", opts))
    _interrupted(lambda: create(f"{root}/x", opts), _before_the_commit(calls, "probe"))
    assert _nothing_yet(fs, f"{root}/x", opts)
    create(f"{root}/x", opts)
    assert snapshot(fs, f"{root}/x", opts) == snapshot(fs, f"{root}/probe", opts) == (
        "carray", "<i8", (N,), np.arange(N).tobytes(), ())
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/x/.blzarr-creating")
    _remove(fs, root)


_COPIES = {
    # an empty carray at the destination, filled from the source's blocks (each through a stage when
    # the destination holds a dataset; where it holds nothing, written in place)
    "copy": lambda src, dst, opts: blzarr.open(src, mode="r", storage_options=opts).copy(
        rootdir=dst, storage_options=opts).close(),
    "salvage": lambda src, dst, opts: blzarr.salvage(src, dst),
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(_COPIES))
def test_an_interrupted_copy_to_a_new_url_leaves_nothing(s3env, how):
    # interrupted after the copy's data objects and before its meta/sizes, the destination holds
    # nothing, and the same call (no overwrite asked: nothing is there) writes the whole copy
    fs, opts, bucket = s3env
    root = f"{bucket}/interrupted-{how}-{uuid.uuid4().hex[:6]}"
    _carray(f"{root}/src", "blz", opts)
    copy = _COPIES[how]
    _, calls = count_store_calls(lambda: copy(f"{root}/src", f"{root}/probe", opts))
    _interrupted(lambda: copy(f"{root}/src", f"{root}/x", opts), _before_the_commit(calls, "probe"))
    assert _nothing_yet(fs, f"{root}/x", opts)
    copy(f"{root}/src", f"{root}/x", opts)
    got = snapshot(fs, f"{root}/x", opts)
    assert got == snapshot(fs, f"{root}/probe", opts) and got[3] == np.arange(N).tobytes()
    _remove(fs, root)


_KILLED_CREATIONS = {
    "carray-bcolz": lambda url, opts: _carray(url, "bcolz", opts),
    "carray-blz": lambda url, opts: _carray(url, "blz", opts),
    # an empty carray whose chunks its tasks write, then meta/sizes
    "from_dask-blz": lambda url, opts: local._from_dask(False)(url.rsplit("/", 1)[0], "blz", storage_options=opts),
}


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("how", sorted(_KILLED_CREATIONS))
def test_a_killed_carray_creation_at_a_new_url(s3env, how):
    # the matrix's constructors replace a dataset; a creation where nothing is stored is written in
    # place: killed after its data objects and before meta/sizes, the URL holds nothing, and the
    # creation run again (mode 'w') writes it over what the kill left
    fs, opts, bucket = s3env
    root = f"{bucket}/create-{how}-{uuid.uuid4().hex[:6]}"
    create = _KILLED_CREATIONS[how]
    _, calls = count_store_calls(lambda: create(f"{root}/probe/x", opts))
    assert run_store_killed(lambda: create(f"{root}/x", opts), _before_the_commit(calls, "probe/x"))
    assert _nothing_yet(fs, f"{root}/x", opts)
    create(f"{root}/x", opts)
    assert snapshot(fs, f"{root}/x", opts) == snapshot(fs, f"{root}/probe/x", opts) is not None
    _remove(fs, root)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_aside_copy_no_journal_names_is_removed(s3env):
    # a row assignment killed while copying its columns aside leaves a copy no journal names: the
    # table is as before, and the next row assignment removes the copy
    fs, opts, bucket = s3env
    root = f"{bucket}/aside-{uuid.uuid4().hex[:6]}"
    _ctable(f"{root}/x", "bcolz", opts)
    assert run_store_killed(lambda: blzarr.open(f"{root}/x", mode="a", storage_options=opts)
                            .__setitem__(5, (1, 2.0, 3)), 3)
    fs.invalidate_cache()
    assert [p for p in fs.ls(f"{root}/x") if ".blzarr-old-" in p]
    t = blzarr.open(f"{root}/x", mode="a", storage_options=opts)
    assert t[5].tolist() == (5, 2.5, 5)
    t[6] = (1, 2.0, 3)
    t.close()
    fs.invalidate_cache()
    assert not [p for p in fs.ls(f"{root}/x") if ".blzarr-old-" in p]
    t = blzarr.open(f"{root}/x", mode="r", storage_options=opts)
    assert t[5].tolist() == (5, 2.5, 5) and t[6].tolist() == (1, 2.0, 3)
    _remove(fs, root)


# ------------------------------------------------------------------ the matrix stays complete
def _refuse_cache_factor(root, fmt, opts, no_writes):
    _ctable(f"{root}/t", fmt, opts)
    t = blzarr.open(f"{root}/t", mode="a", storage_options=opts)
    with no_writes, pytest.raises(ValueError, match="object storage"):
        t.cache_factor(["c"])
    t.close()


def _refuse_reshape(root, fmt, opts, no_writes):
    _carray(f"{root}/x", fmt, opts)
    a = blzarr.open(f"{root}/x", mode="a", storage_options=opts)
    with no_writes, pytest.raises(blzarr.StorageError, match="reshape.*object storage"):
        a.reshape((150, 4))
    a.close()
    np.testing.assert_array_equal(blzarr.open(f"{root}/x", mode="r", storage_options=opts)[:], np.arange(N))


# operations of the local matrix that object storage does not have: name -> (why, a check that it is
# refused there with a clear error, before it writes anything)
NOT_ON_OBJECT_STORAGE = {
    "ctable.cache_factor": ("no factorization cache is kept on object storage", _refuse_cache_factor),
    "carray.reshape": ("replacing the array needs an atomic rename, which object storage lacks", _refuse_reshape),
}


def test_every_local_operation_is_in_the_s3_matrix():
    here = {c for op in OPS for c in op.covers}
    missing = sorted(local._covered() - here - set(NOT_ON_OBJECT_STORAGE))
    assert not missing, (f"operations of the local fault matrix neither in the S3 matrix (OPS) nor in "
                         f"NOT_ON_OBJECT_STORAGE: {missing}")
    # and every layout an operation has locally, it has here
    for op in OPS:
        if op.name in local.OPS_BY_NAME:
            assert set(local.OPS_BY_NAME[op.name].formats) <= set(op.formats), op.name


@pytest.mark.parametrize("fmt", ["blz", pytest.param("bcolz", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(NOT_ON_OBJECT_STORAGE))
def test_operations_not_on_object_storage_are_refused(name, fmt, s3env, tmp_path, monkeypatch):
    fs, opts, bucket = s3env
    monkeypatch.chdir(tmp_path)         # nothing may land in a local directory named after the URL
    root = f"{bucket}/refused-{uuid.uuid4().hex[:6]}"
    NOT_ON_OBJECT_STORAGE[name][1](root, fmt, opts, store_faults(_NoStoreWrites()))
    assert os.listdir(tmp_path) == []
    _remove(fs, root)


class _NoStoreWrites(StoreInjector):
    """Fails on any store call that changes objects."""

    def tick(self, what, key):
        raise AssertionError(f"a writing call of the object store: {what} {key}")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_not_writing_ones_do_not_write_on_s3(s3env, fmt):
    # the local matrix's reading operations (test_fault_matrix.NOT_WRITING), on objects on the server
    # opened with mode 'a', change no object
    fs, opts, bucket = s3env
    root = f"{bucket}/reads-{fmt}-{uuid.uuid4().hex[:6]}"
    _carray(f"{root}/x", fmt, opts)
    _ctable(f"{root}/t", fmt, opts)
    blzarr.carray(np.arange(N) % 3 == 0, rootdir=f"{root}/w", mode="w", format=fmt, storage_options=opts).close()
    a = blzarr.open(f"{root}/x", mode="a", storage_options=opts)
    t = blzarr.open(f"{root}/t", mode="a", storage_options=opts)
    ran = 0
    for name, call in local.NOT_WRITING.items():
        if not callable(call):
            continue
        with store_faults(_NoStoreWrites()):
            call(a, t, root)
        ran += 1
    assert ran > 20
    a.close()
    t.close()
    _remove(fs, root)


_TABLE_BUILDS = {
    # a ctable made empty at the URL and filled block by block (a structured dtype gives a ctable)
    "fromiter": lambda url, opts: blzarr.fromiter(((i, i * 0.5) for i in range(N)), dtype="i8,f8", count=N,
                                                  rootdir=url, chunklen=CL, storage_options=opts).close(),
    "zeros": lambda url, opts: blzarr.zeros(N, dtype="i8,f8", rootdir=url, chunklen=CL,
                                            storage_options=opts).close(),
    # a dataframe: an empty table whose columns the partitions' tasks write
    "from_dask": lambda url, opts: _from_frame(url, opts),
}


def _from_frame(url, opts):
    import dask
    # one thread: the same store calls in the same order every run (and a forked child has no pool)
    with dask.config.set(scheduler="synchronous"):
        blzarr.from_dask(_frame(), url, storage_options=opts).close()


def _frame():
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    return dd.from_pandas(pd.DataFrame({"f0": np.arange(N), "f1": np.arange(N) * 0.5}), npartitions=3)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fault", ["interrupt", "kill"])
@pytest.mark.parametrize("how", sorted(_TABLE_BUILDS))
def test_an_interrupted_table_build_at_a_new_url_leaves_nothing(s3env, how, fault):
    # interrupted at the last put of its rows' data, or killed before the first, the URL holds
    # nothing (the table's creation marker, no __rootdirs__), and the same call again writes the
    # whole table
    fs, opts, bucket = s3env
    root = f"{bucket}/tbuild-{how}-{fault}-{uuid.uuid4().hex[:6]}"
    build = _TABLE_BUILDS[how]
    _, calls = count_store_calls(lambda: build(f"{root}/probe", opts))
    data = [k for k, (what, key) in enumerate(calls) if "/probe/" in key and "/data/" in key]
    if fault == "kill":
        assert run_store_killed(lambda: build(f"{root}/x", opts), data[0])
    else:
        _interrupted(lambda: build(f"{root}/x", opts), data[-1])
    if _nothing_yet(fs, f"{root}/x", opts):
        assert not fs.exists(f"{root}/x/__rootdirs__")
    build(f"{root}/x", opts)
    t = blzarr.open(f"{root}/x", mode="r", storage_options=opts)
    want = (np.zeros(N, "i8"), np.zeros(N)) if how == "zeros" else (np.arange(N), np.arange(N) * 0.5)
    np.testing.assert_array_equal(t["f0"][:], want[0])
    np.testing.assert_array_equal(t["f1"][:], want[1])
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/x/.blzarr-creating")
    _remove(fs, root)
