"""The documentation's API reference covers the public API: every name of ``blzarr.__all__`` is listed
in docs/api/index.rst, and a build of the site (Sphinx, warnings as errors, every reference checked)
gives a page to each of them and to every public method and property of carray and ctable."""

import os
import re
import subprocess
import sys

import pytest

import blzarr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
API = os.path.join(DOCS, "api", "index.rst")


def listed_names():
    """The names docs/api/index.rst documents: autosummary entries and ``.. data::`` directives."""
    names, in_summary = set(), False
    for line in open(API, encoding="utf-8"):
        if line.startswith(".. autosummary::"):
            in_summary = True
            continue
        m = re.match(r"\.\. (data|function|class|exception):: (\S+)", line)
        if m:
            names.add(m.group(2))
            in_summary = False
            continue
        if in_summary:
            if line.strip() and not line.startswith("   "):
                in_summary = False
            elif line.strip() and not line.strip().startswith(":"):
                names.add(line.strip().lstrip("~"))
    return names


def public_members(cls):
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def test_every_public_name_is_listed_in_the_reference():
    missing = sorted(set(blzarr.__all__) - listed_names())
    assert not missing, f"public names missing from docs/api/index.rst: {missing}"


def test_the_listed_names_exist():
    # a name removed from the package must leave the reference too
    gone = sorted(n for n in listed_names() if not hasattr(blzarr, n.split(".")[0]))
    assert not gone, gone


@pytest.mark.slow
def test_every_public_name_and_method_has_a_page(tmp_path):
    for mod in ("sphinx", "numpydoc", "pydata_sphinx_theme", "matplotlib"):
        pytest.importorskip(mod)
    out = os.environ.get("BLZARR_DOCS_HTML")
    if not out:                     # build it here, as .ci/run does: warnings are errors, -n checks refs
        out = str(tmp_path / "html")
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html", "-d",
                               str(tmp_path / "doctrees"), DOCS, out],
                              capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
    gen = os.path.join(out, "api", "generated")
    index = open(os.path.join(out, "api", "index.html"), encoding="utf-8").read()
    missing = [n for n in blzarr.__all__ if not os.path.exists(os.path.join(gen, f"blzarr.{n}.html"))
               and f'id="blzarr.{n}"' not in index]
    for cls in ("carray", "ctable"):
        missing += [f"{cls}.{m}" for m in public_members(getattr(blzarr, cls))
                    if not os.path.exists(os.path.join(gen, f"blzarr.{cls}.{m}.html"))]
    assert not missing, f"no reference page for: {missing}"
    for page in ("index.html", "api/generated/blzarr.carray.html", "api/generated/blzarr.ctable.where.html"):
        assert os.path.exists(os.path.join(out, page)), page


def test_the_benchmark_figure_shows_the_page_s_table():
    # the figure is drawn from docs/bench/report.json: its ratios are the ones the page's table prints
    import json
    report = json.load(open(os.path.join(DOCS, "bench", "report.json"), encoding="utf-8"))
    lines = open(os.path.join(DOCS, "benchmarks.rst"), encoding="utf-8").read().splitlines()
    head = next(i for i, ln in enumerate(lines) if "bcolz/blzarr" in ln)     # the main table
    end = next(i for i in range(head + 2, len(lines)) if set(lines[i].strip()) <= {"=", " "})
    lines = lines[head + 2:end]
    assert len(report["results"]) >= 40
    for r in report["results"]:
        row = [ln for ln in lines if ln.split()[:1] == [r["dataset"]] and f"  {r['label']}  " in ln]
        assert len(row) == 1, (r["dataset"], r["label"])
        cells = row[0].split()
        for peer, q in r["ratios"].items():
            assert f"{q:.2f}" in cells, (r["label"], peer, q)
