"""The group-by harness (`bench/bench_groupby.py`) in a tiny run: its options, and the CPU times it
reports beside the wall times."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "bench_groupby.py")


def _run(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, SCRIPT, "--n", "20000", "--tmpdir", str(tmp_path), *args],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)


def _check_rows(rep, section, peers):
    rows = [r for r in rep["rows"] if r["section"] == section]
    assert rows
    for r in rows:
        assert set(r["median_s"]) == set(r["median_cpu_s"]) and set(r["median_s"]) >= set(peers), r
        assert all(v > 0 for v in r["median_s"].values()), r
        # CPU time of one process: every thread counts, so it can exceed the wall time, but a run
        # cannot take CPU time it was not given, and a Python call takes some
        assert all(v > 0 for v in r["median_cpu_s"].values()), r
    return rows


def test_terms_run_reports_cpu_and_level(tmp_path):
    out = tmp_path / "gb.json"
    proc = _run(tmp_path, "--repeats", "2", "--sections", "terms", "--clevel", "9", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lz4 clevel 9" in proc.stdout
    assert "[cpu" in proc.stdout
    rep = json.loads(out.read_text())
    assert rep["clevel"] == 9 and rep["n"] == 20000 and rep["repeats"] == 2
    rows = _check_rows(rep, "terms", ["blzarr", "numpy isin"])
    assert [r["label"] for r in rows] == ["id3 in 20 values", "id1 in 3 values"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("blzarr-gb-")]   # its table removed


def test_default_level_is_the_harness_level(tmp_path):
    from bench import CLEVEL
    out = tmp_path / "gb.json"
    proc = _run(tmp_path, "--repeats", "1", "--sections", "terms", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["clevel"] == CLEVEL
    assert f"lz4 clevel {CLEVEL};" in proc.stdout


@pytest.mark.parametrize("bad", ["10", "-1", "five"])
def test_bad_level_is_refused(tmp_path, bad, monkeypatch, capsys):
    # the refusal is the command line's, before any work: the harness's main() in this process (the two
    # tests above run the script itself), not a Python start per bad value
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)    # the import's setdefault is undone after
    monkeypatch.syspath_prepend(ROOT)
    from bench import bench_groupby
    with pytest.raises(SystemExit) as exc:
        bench_groupby.main(["--n", "20000", "--tmpdir", str(tmp_path), "--sections", "terms", "--clevel", bad])
    assert exc.value.code == 2
    assert "--clevel" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_groupby_run_reports_cpu_of_every_peer(tmp_path):
    pytest.importorskip("pandas")
    out = tmp_path / "gb.json"
    proc = _run(tmp_path, "--repeats", "1", "--sections", "groupby", "--clevel", "8", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = json.loads(out.read_text())
    assert rep["clevel"] == 8
    rows = _check_rows(rep, "groupby", ["blzarr", "pandas", "blzarr cached"])
    assert len(rows) == 3
