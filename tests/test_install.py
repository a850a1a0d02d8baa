"""Installing and starting: importing from the source folder says what to do, the benchmark harness runs
from an installed wheel (and refuses to run without blzarr), the demo explains its timings."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import blzarr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _source_copy(dst):
    """The package and bench/ as a fresh clone has them: sources only, no compiled extension."""
    ignore = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "*.c", "build")
    shutil.copytree(os.path.join(ROOT, "blzarr"), os.path.join(dst, "blzarr"), ignore=ignore)
    shutil.copytree(os.path.join(ROOT, "bench"), os.path.join(dst, "bench"), ignore=ignore)


def _run_without_site(cwd, *args):
    """`python -S ARGS` in `cwd`, NumPy importable: what `pip install .` then running from the source
    folder gives (the folder comes first on sys.path; no editable-install hook can rescue it)."""
    numpy_dir = os.path.dirname(os.path.dirname(np.__file__))
    env = dict(os.environ, PYTHONPATH=numpy_dir)
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_import_from_the_source_folder_says_what_to_do(tmp_path):
    _source_copy(tmp_path)
    proc = _run_without_site(tmp_path, "-c", "import blzarr")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1
    assert last.startswith("ImportError: blzarr is imported from the source folder " + str(tmp_path))
    assert "pip install -e ." in last and "run Python from another directory" in last
    assert "circular import" not in proc.stderr
    # python -m blzarr: the same sentence on one line, no traceback
    proc = _run_without_site(tmp_path, "-m", "blzarr", "info", "x")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "pip install -e ." in proc.stderr


def test_python_m_bench_refuses_to_run_without_blzarr(tmp_path):
    _source_copy(tmp_path)
    proc = _run_without_site(tmp_path, "-m", "bench", "--quick", "--peers", "numpy")
    assert proc.returncode != 0 and proc.stdout == ""          # no NumPy-only table
    assert "Traceback" not in proc.stderr and "CalledProcessError" not in proc.stderr
    line, = proc.stderr.strip().splitlines()
    assert line.startswith("python -m bench: error: blzarr cannot be imported") and "pip install -e ." in line


def test_the_harness_refuses_a_run_where_blzarr_cannot_be_set_up(monkeypatch, tmp_path):
    from blzarr.bench import harness, peers

    def broken(self):
        raise RuntimeError("no codec")
    monkeypatch.setattr(peers.Blzarr, "setup", broken)
    with pytest.raises(RuntimeError, match="nothing to benchmark: no codec"):
        harness.Runner(1000, 1, 0.1, str(tmp_path), set(), [peers.Blzarr, peers.Numpy], log=lambda s: None)


@pytest.mark.slow
def test_blzarr_bench_quick_from_an_installed_wheel(tmp_path):
    # a regular (non-editable) install in a fresh virtual environment, run away from the checkout
    wheels, venv, work = tmp_path / "wheels", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    # CI's wheel smoke test has just built the wheel from this checkout's sdist (BLZARR_WHEEL names
    # it): compiling the extensions a second time would cost minutes of CI for the same bytes
    wheel = os.environ.get("BLZARR_WHEEL")
    if not wheel:
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run(pip + ["wheel", "--no-deps", "-w", str(wheels), ROOT], check=True, timeout=900,
                       capture_output=True)
        wheel, = wheels.glob("blzarr-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    # without PYTHONPATH: a checkout on it (with the blzarr.egg-info the wheel build leaves there) would
    # make pip find blzarr "already installed" and skip it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(bindir / "python"), "-m", "pip", "--disable-pip-version-check", "-q", "install",
                    str(wheel)], check=True, timeout=600, capture_output=True, env=env)
    blz = str(bindir / "blzarr")
    help_ = subprocess.run([blz, "bench", "--help"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=120)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: blzarr bench")
    for opt in ("--quick", "--n", "--peers", "--ops", "--json", "--memory-only", "--tmpdir"):
        assert opt in help_.stdout
    report = work / "report.json"
    proc = subprocess.run([blz, "bench", "--quick", "--n", "20000", "--datasets", "walk", "--peers", "numpy",
                           "--mem-n", "20000", "--memory-ops", "sum", "--json", str(report)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "numpy/blzarr" in proc.stdout and "Traceback" not in proc.stderr
    rep = json.loads(report.read_text())
    assert rep["command"].startswith("blzarr bench --quick") and rep["peers"] == ["blzarr", "numpy"]
    assert any(m["lib"] == "blzarr" and "peak_rss" in m for m in rep["memory"])   # the RSS subprocess ran
    assert os.listdir(work) == ["report.json"]


def test_the_demo_explains_its_timings_and_leaves_its_data(tmp_path, capsys):
    import importlib.util
    spec = importlib.util.spec_from_file_location("demo", os.path.join(ROOT, "examples", "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    monkey = pytest.MonkeyPatch()
    monkey.setattr(demo, "REPEAT", 1)
    try:
        demo.main(["--dir", str(tmp_path / "d"), "--n", "50000"])
    finally:
        monkey.undo()
    out = capsys.readouterr().out
    root = str(tmp_path / "d")
    assert f"writes its data to {root}" in out and f"The data are still in {root}" in out
    assert f"blzarr info {os.path.join(root, 'series.blz')}" in out
    timing = [ln for ln in out.splitlines() if " ms " in ln]
    assert len(timing) == 6 and all(len(ln.split(" ms ")) == 3 and ln.split(" ms ")[2].strip()
                                    for ln in timing)          # each: blzarr, NumPy, and what it shows
    assert "whole query on both sides" in out and "what it shows" in out
    # the data stay, in the layout their names say, and the command line reads them
    assert blzarr.open(os.path.join(root, "series.blz"), mode="r").format == "blz"
    assert len(blzarr.open(os.path.join(root, "trades.blz"), mode="r")) == 10_000
    from blzarr import cli
    assert cli.main(["verify", root]) == 0
    assert "2 objects verified: 2 OK" in capsys.readouterr().out
