"""Smoke tests of the benchmark harness (`python -m bench`) in a tiny mode: it runs, its JSON has the
documented shape, its ratios are what they claim, and missing, failing or wrong peers are reported."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import blzarr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import harness, peers as P  # noqa: E402


@pytest.fixture
def no_full_collection(monkeypatch):
    """Timer.once's gc.collect() made a no-op: in a test worker that has run many tests, one full
    collection of its heap takes up to seconds, and these tests check what is timed, not the collector."""
    monkeypatch.setattr(harness.gc, "collect", lambda *a: 0)


@pytest.mark.slow
def test_cli_tiny_run_writes_json(tmp_path):
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--n", "20000", "--datasets", "walk", "--repeats", "1", "--scalars", "20",
         "--slices", "5", "--peers", "numpy", "--memory-ops", "sum", "eval", "--json", str(out),
         "--tmpdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "numpy/blzarr" in proc.stdout
    rep = json.loads(out.read_text())
    assert set(rep) >= {"command", "machine", "versions", "settings", "peers", "results", "notes",
                        "memory", "targets", "compressed_bytes", "ratio_definition"}
    assert rep["peers"] == ["blzarr", "numpy"]
    assert rep["settings"]["n"] == 20000 and rep["settings"]["cname"] == "lz4"
    assert rep["settings"]["clevel"] == 5 and rep["settings"]["nthreads"] == 2
    assert rep["settings"]["datasets"] == ["walk"]
    assert rep["machine"]["nproc"] >= 1 and rep["machine"]["numpy"] == np.__version__
    seen = {(r["dataset"], r["op"]) for r in rep["results"]}
    for op in harness.MEMORY_OPS + harness.DISK_OPS:
        assert ("walk", op) in seen and ("smooth", op) not in seen
    for op in harness.CTABLE_OPS:
        assert ("table", op) in seen
    for r in rep["results"]:
        if r["dataset"] == "table" and "blzarr" not in r["times"]:
            continue  # ctable may still be missing; then a note says so
        assert r["times"]["blzarr"] > 0, r
        for peer, t in r["times"].items():
            assert t == sorted(r["runs"][peer])[len(r["runs"][peer]) // 2]
        for peer, q in r["ratios"].items():
            assert q == pytest.approx(r["times"][peer] / r["times"]["blzarr"])
    assert not [n for n in rep["notes"] if "WRONG RESULT" in n]
    mem = {(m["lib"], m["op"]): m for m in rep["memory"]}
    assert ("blzarr", "sum") in mem and ("blzarr", "eval") in mem
    for m in rep["memory"]:
        if "error" not in m:
            assert m["peak_rss"] >= m["rss_before"] > 0
    assert all(set(t) == {"target", "ok", "ratio"} for t in rep["targets"])


class _Broken(P.Peer):
    name = "broken"

    def setup(self):
        raise P.Unavailable("broken is not installed")


class _Wrong(P.Numpy):
    """A peer that answers wrongly: the harness must flag it, not time it silently."""
    name = "wrong"

    def read_all(self, a):
        return a[::-1].copy()


class _Failing(P.Numpy):
    name = "failing"

    def sum(self, a):
        raise RuntimeError("boom")


def test_runner_skips_missing_flags_wrong_and_records_failures(tmp_path, no_full_collection):
    msgs = []
    r = harness.Runner(5000, 1, 1.0, str(tmp_path), {"read_all", "sum", "scalars"},
                       [P.Blzarr, _Broken, _Wrong, _Failing], log=msgs.append, n_scalars=10,
                       n_slices=2)
    assert [p.name for p in r.peers] == ["blzarr", "wrong", "failing"]
    assert any("broken: skipped" in n for n in r.notes)
    x = harness.datasets(5000, ("walk",))["walk"]
    r.run_array("walk", x)
    ops = {row["op"]: row for row in r.results}
    assert set(ops) == {"read_all", "sum", "scalars"}
    assert "failing" not in ops["sum"]["times"] and "boom" in ops["sum"]["skipped"]["failing"]
    assert "failing" in ops["read_all"]["times"]
    assert any("wrong: WRONG RESULT" in n for n in r.notes)
    assert not any("blzarr: WRONG RESULT" in n for n in r.notes)


def test_format_table_and_targets():
    results = [{"dataset": "smooth", "op": "scalars", "label": "2000 random a[i]",
                "times": {"blzarr": 0.001, "bcolz": 0.1}, "ratios": {"bcolz": 100.0}},
               {"dataset": "smooth", "op": "sum", "label": "sum()",
                "times": {"blzarr": 0.02, "bcolz": 0.01}, "ratios": {"bcolz": 0.5}}]
    text = harness.format_table(results, ["blzarr", "bcolz"])
    lines = text.splitlines()
    assert lines[0] == lines[2] == lines[-1] and set(lines[0]) == {"=", " "}
    assert "100.00" in text and "0.50" in text and "bcolz/blzarr" in text
    t = {name: ok for name, ok, _ in harness.check_targets(results)}
    assert t["smooth: scalars >= 50x faster than bcolz"] is True
    assert t["smooth: sum >= 2x faster than bcolz"] is False
    assert t["smooth: slices >= 5x faster than bcolz"] is None


def test_timer_median_and_budget(no_full_collection):
    calls = []
    med, runs = harness.Timer(5, 1e9)(lambda: calls.append(1))
    assert len(runs) == 5 == len(calls) and med == sorted(runs)[2]
    med, runs = harness.Timer(5, 0.0)(lambda: None)
    assert len(runs) == 1


def test_bad_arguments_are_rejected():
    from bench.__main__ import parse
    with pytest.raises(SystemExit):
        parse(["--n", "-1"])
    with pytest.raises(SystemExit):
        parse(["--n", "10"])
    with pytest.raises(SystemExit):
        parse(["--peers", "pytables"])
    with pytest.raises(SystemExit):
        parse(["--ops", "nonsense"])
    with pytest.raises(SystemExit):
        parse(["--tmpdir", "/nonexistent/dir/for/bench"])
    a = parse(["--quick"])
    assert a.n == 1_000_000 and a.repeats == 3 and a.scalars == 500
    a = parse([])
    assert a.n == 10_000_000 and a.scalars == 2000 and a.slices == 300 and not a.big


class _Tagged(P.Numpy):
    """Records which array each call received, to catch a peer timed on another peer's object."""

    def create(self, x):
        a = x.copy()
        self.mine = id(a) if not hasattr(self, "mine") else self.mine
        return a

    def sum(self, a):
        self.seen.add(id(a))
        return a.sum()


class _TagA(_Tagged):
    name = "taga"
    seen = set()


class _TagB(_Tagged):
    name = "tagb"
    seen = set()


def test_each_peer_is_timed_on_its_own_array_with_interleaved_repeats(tmp_path, no_full_collection):
    order = []

    class Timer(harness.Timer):
        def once(self, fn, setup=None, teardown=None):
            order.append(fn)
            return harness.Timer.once(fn, setup, teardown)

    r = harness.Runner(3000, 3, 1e9, str(tmp_path), {"sum"}, [P.Blzarr, _TagA, _TagB],
                       log=lambda s: None, n_scalars=5, n_slices=2)
    r.timer = Timer(3, 1e9)
    r.run_array("walk", harness.datasets(3000, ("walk",))["walk"])
    pa, pb = r.peers[1], r.peers[2]
    assert pa.mine in pa.seen and pb.mine not in pa.seen
    assert pb.mine in pb.seen and pa.mine not in pb.seen
    assert len(order) == 9 and order[0] is order[3] is order[6] and order[1] is order[4]
    row = r.results[0]
    assert set(row["times"]) == {"blzarr", "taga", "tagb"} and all(len(v) == 3 for v in row["runs"].values())


def test_readme_lists_the_misses_as_the_harness_prints_them():
    # the list of missed targets (bench/FINDINGS.md, the notes on the documented run) uses the
    # harness's own target names and line format
    with open(os.path.join(ROOT, "bench", "FINDINGS.md"), encoding="utf-8") as f:
        listed = [line.strip() for line in f if line.lstrip().startswith("[MISS]")]
    assert listed
    names = {name for name, _, _ in harness.check_targets([])}
    for line in listed:
        name, _, ratio = line[len("[MISS] "):].rpartition(" (ratio ")
        assert name in names, line
        assert harness.format_targets([(name, False, float(ratio.rstrip(")")))]).strip() == line


@pytest.mark.slow
def test_peak_rss_of_bcolz_is_measured_without_blzarr(tmp_path):
    # the child of each peak-RSS measurement imports only the library it measures
    pytest.importorskip("bcolz")
    from blzarr.bench import memory, rss_child
    memory.create(str(tmp_path), 5000)
    for lib in ("bcolz", "blzarr"):
        proc = subprocess.run([sys.executable, rss_child.__file__, lib, str(tmp_path), "sum", "2"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
        assert rec["lib"] == lib and rec["blzarr_imported"] == (lib == "blzarr")
        assert rec["result"] == pytest.approx(float(blzarr.open(os.path.join(str(tmp_path), "a"))[:].sum()))


def _s3_args(tmp_path, *extra):
    from bench.__main__ import parse
    return parse(["--n", "20000", "--ops", "s3_read_all", "s3_scalars", "s3_slices", "--datasets", "walk",
                  "--repeats", "2", "--scalars", "40", "--slices", "6", "--no-memory", "--tmpdir", str(tmp_path),
                  *extra])


@pytest.mark.slow
def test_s3_rows_count_requests_beside_zarr_and_stop_their_server(tmp_path, monkeypatch):
    pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    from blzarr.bench import s3 as S3
    started = []

    class Recorded(S3.MotoS3):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.append(self)
    monkeypatch.setattr(S3, "MotoS3", Recorded)
    call_s3 = s3fs.S3FileSystem._call_s3
    have_zarr = S3._find("zarr.storage") is not None
    rep = harness.run(_s3_args(tmp_path, "--peers", "zarr"), log=lambda s: None)
    assert len(started) == 1 and started[0].proc.poll() is not None      # stopped at the end
    assert s3fs.S3FileSystem._call_s3 is call_s3                           # the counter is gone too
    rows = {r["op"]: r for r in rep["results"]}
    assert set(rows) == set(S3.S3_OPS)
    assert not [n for n in rep["notes"] if "WRONG RESULT" in n or "cannot write" in n]
    libs = ["blzarr", "zarr"] if have_zarr else ["blzarr"]
    for op, row in rows.items():
        assert sorted(row["times"]) == sorted(libs) and sorted(row["requests"]) == sorted(libs)
        for lib in libs:
            q = row["requests"][lib]
            assert q["get"] >= 1 and q["get_bytes"] > 0 and q["ops"] == {"s3_read_all": 1, "s3_scalars": 40,
                                                                          "s3_slices": 6}[op]
            assert q["get_per_op"] == q["get"] / q["ops"] and len(row["runs"][lib]) == 2
    blz = rows["s3_scalars"]["requests"]["blzarr"]
    assert blz["get_per_op"] <= 1              # one chunk, read once and kept
    x = harness.datasets(20000, ("walk",))["walk"]
    assert rows["s3_read_all"]["requests"]["blzarr"]["get_bytes"] < x.nbytes    # compressed bytes
    if have_zarr:
        z = rows["s3_scalars"]["requests"]["zarr"]
        assert z["get_per_op"] >= 1 and z["bytes_per_op"] > blz["bytes_per_op"]
        assert rows["s3_read_all"]["ratios"]["zarr"] == pytest.approx(
            rows["s3_read_all"]["times"]["zarr"] / rows["s3_read_all"]["times"]["blzarr"])
    targets = {t["target"]: t["ok"] for t in rep["targets"]}
    assert targets["walk: s3_scalars at most one GET per a[i] (GETs per a[i])"] is True
    text = S3.format_requests(rep["results"])
    assert "GETs/op" in text and text.count("S3: open + 40 a[i]") == len(libs)


def test_s3_rows_skipped_with_a_note_without_moto(tmp_path, monkeypatch):
    from blzarr.bench import s3 as S3
    monkeypatch.setattr(S3, "missing_modules", lambda: ["moto[server]"])
    monkeypatch.setattr(S3, "MotoS3", None)              # never started
    rep = harness.run(_s3_args(tmp_path, "--peers", "numpy"), log=lambda s: None)
    assert rep["results"] == []
    assert any("s3_* rows skipped: the S3 rows need moto[server]" in n for n in rep["notes"])
