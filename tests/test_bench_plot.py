"""`blzarr bench --plot`: the figure holds one bar per operation and peer at its ratio, on a log scale
with 1.0 marked, one panel per group; bad file names and a missing matplotlib are clear errors given
before a run; `--quick` prints a one-line summary of the targets instead of a line per target."""

import io
import json
import os
import subprocess
import sys

import pytest

from blzarr.bench import command, harness, plot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _report(quick=False):
    rows = [("smooth", "sum", {"bcolz": 2.5, "numpy": 0.05}), ("smooth", "disk_create", {"bcolz": 1.7}),
            ("walk", "where", {"bcolz": 3.0, "zarr": 0.8}), ("table", "ct_fetchwhere", {"bcolz": 12.0}),
            ("walk", "s3_scalars", {"zarr": 40.0}), ("walk", "scalars", {})]
    results = []
    for d, op, ratios in rows:
        times = {"blzarr": 0.01, **{p: 0.01 * q for p, q in ratios.items()}}
        results.append({"dataset": d, "op": op, "label": harness.LABELS[op].format(scalars=10, slices=5),
                        "times": times, "ratios": ratios, "runs": {}, "skipped": {}})
    return {"results": results, "peers": ["blzarr", "bcolz", "zarr", "numpy"],
            "settings": {"n": 1000, "repeats": 3, "quick": quick},
            "machine": {"nproc": 2, "cpu": "x", "python": "3", "numpy": "2", "commit": "abc1234"},
            "targets": [], "versions": {}, "notes": [],
            "ratio_definition": "peer / blzarr", "command": "x", "elapsed_s": 1.0}


def test_panels_group_the_operations():
    groups = dict(plot.panels(_report()))
    assert [label for label, _ in groups["in memory"]] == ["smooth: sum()"]
    assert [label for label, _ in groups["on disk"]] == ["smooth: disk: create + flush"]
    assert [label for label, _ in groups["queries"]] == ["walk: where(mask), 10% true",
                                                        "ctable: fetchwhere (1%)"]
    assert groups["object storage (local S3 server)"] == [("walk: S3: open + 10 a[i]", {"zarr": 40.0})]
    assert list(dict(plot.panels(_report()))) == ["in memory", "on disk", "object storage (local S3 server)",
                                                  "queries"]        # a row without ratios draws nothing


@pytest.mark.parametrize("ext", [".png", ".svg"])
def test_draw_one_bar_per_operation_and_peer(tmp_path, ext):
    pytest.importorskip("matplotlib")
    path = str(tmp_path / ("run" + ext))
    fig = plot.draw(_report(), path)
    with open(path, "rb") as f:
        head = f.read(400)
    assert head.startswith(b"\x89PNG") if ext == ".png" else b"<svg" in head
    axes = fig.axes
    assert [ax.get_title(loc="left") for ax in axes] == [t for t, _ in plot.panels(_report())]
    want = sorted(q for r in _report()["results"] for q in r["ratios"].values())
    got = sorted(round(p.get_width(), 9) for ax in axes for p in ax.patches)
    assert got == pytest.approx(want)
    for ax in axes:
        assert ax.get_xscale() == "log"
        assert any(list(line.get_xdata()) == [1.0, 1.0] for line in ax.get_lines())   # the 1.0 mark
        lo, hi = ax.get_xlim()
        assert lo < min(want) and hi > max(want)
    # the peers' colours are the same in every panel
    colours = {}
    for ax in axes:
        for p in ax.patches:
            colours.setdefault(p.get_label(), set()).add(p.get_facecolor())
    assert all(len(c) == 1 for label, c in colours.items() if not label.startswith("_"))


def test_bad_plot_names_fail_before_the_run(tmp_path, capsys):
    for bad in (str(tmp_path / "run.jpg"), str(tmp_path / "no" / "such" / "dir" / "run.png")):
        with pytest.raises(SystemExit) as e:
            command.parse(["--plot", bad])
        assert e.value.code == 2
        assert bad in capsys.readouterr().err


def test_missing_matplotlib_names_the_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import matplotlib raises
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(plot.PlotError, match=r"pip install matplotlib"):
        plot.draw(_report(), str(tmp_path / "x.png"))
    with pytest.raises(SystemExit):
        command.parse(["--plot", str(tmp_path / "x.png")])
    assert "pip install matplotlib" in capsys.readouterr().err


def test_report_without_ratios_is_an_error(tmp_path):
    pytest.importorskip("matplotlib")
    rep = _report()
    for r in rep["results"]:
        r["ratios"] = {}
    with pytest.raises(plot.PlotError, match="no peer/blzarr ratio"):
        plot.draw(rep, str(tmp_path / "x.svg"))


def _targets():
    return [{"target": "smooth: sum >= 2x faster than bcolz", "ok": True, "ratio": 2.5},
            {"target": "smooth: sum within 3x of NumPy", "ok": False, "ratio": 0.05},
            {"target": "walk: slices >= 5x faster than bcolz", "ok": None, "ratio": None}]


def test_quick_prints_one_summary_line_for_the_targets():
    rep = _report(quick=True)
    rep["targets"] = _targets()
    out = io.StringIO()
    harness.print_report(rep, out=out)
    text = out.getvalue()
    assert "[ok]" not in text and "[MISS]" not in text and "issue" not in text
    summary = [line for line in text.splitlines() if line.startswith("targets:")]
    assert len(summary) == 1 and summary[0].startswith("targets: 1 of 2 met")


def test_full_run_lists_only_the_missed_targets():
    rep = _report(quick=False)
    rep["targets"] = _targets()
    out = io.StringIO()
    harness.print_report(rep, out=out)
    text = out.getvalue()
    assert "targets: 1 of 2 met, missed:" in text
    assert "  [MISS] smooth: sum within 3x of NumPy (ratio 0.05)" in text.splitlines()
    assert "[ok]" not in text


def test_cli_run_draws_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run.svg"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "blzarr", "bench", "--n", "20000", "--datasets", "walk", "--repeats", "1",
         "--scalars", "20", "--slices", "5", "--peers", "numpy", "--no-memory", "--ops", "sum", "disk_sum",
         "where", "--plot", str(out), "--json", str(tmp_path / "r.json"), "--tmpdir", str(tmp_path)],
        cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"plot: {out}" in proc.stdout
    svg = out.read_text()
    assert "walk: sum()" in svg and "disk: open + sum()" in svg
    # the saved report draws the same figure through python -m blzarr.bench.plot
    again = tmp_path / "again.png"
    proc = subprocess.run([sys.executable, "-m", "blzarr.bench.plot", str(tmp_path / "r.json"), str(again)],
                          cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes().startswith(b"\x89PNG")
    assert json.loads((tmp_path / "r.json").read_text())["results"]


def test_plot_of_a_missing_report_names_it(tmp_path, capsys):
    # the same main() as `python -m blzarr.bench.plot` (run as a module above), without a Python start
    with pytest.raises(SystemExit) as e:
        plot.main([str(tmp_path / "missing.json"), str(tmp_path / "again.png")])
    assert e.value.code == 1 and "missing.json" in capsys.readouterr().err
    assert not (tmp_path / "again.png").exists()
