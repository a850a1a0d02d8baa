"""Packaging rules that the wheel build relies on, checked without building: one version string, every
Cython module under blzarr/ compiled and shipped without a list to keep up to date.  (The build
itself, the manylinux repair and the binary-only install are tools/wheel_smoke.sh, run by CI.)"""

import ast
import os
import re
import sys

import pytest

import blzarr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")


def _pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _setup_function(name):
    """A function of setup.py, without running setup() (which builds)."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"Path": __import__("pathlib").Path, "__file__": os.path.join(ROOT, "setup.py")}
    exec(compile(ast.Module(body=[node], type_ignores=[]), "setup.py", "exec"), namespace)
    return namespace[name]


def test_one_version_string():
    proj = _pyproject()
    assert "version" not in proj["project"] and "version" in proj["project"]["dynamic"]
    assert proj["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "blzarr.__version__"}
    source = open(os.path.join(ROOT, "blzarr", "__init__.py"), encoding="utf-8").read()
    # a literal that setuptools reads without importing the package, and the one blzarr reports
    assert re.findall(r'^__version__ = "([^"]+)"$', source, re.M) == [blzarr.__version__]


def test_every_pyx_is_an_extension(tmp_path, monkeypatch):
    find = _setup_function("extensions_under")
    found = dict(find("blzarr"))
    on_disk = sorted(os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")
                     for d, _, files in os.walk(os.path.join(ROOT, "blzarr")) for f in files if f.endswith(".pyx"))
    assert sorted(found.values()) == on_disk and on_disk
    for name, path in found.items():
        assert name == path[:-len(".pyx")].replace("/", ".")
    # a module added in a subfolder is picked up with no edit to setup.py
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "_a.pyx").write_text("")
    (tmp_path / "pkg" / "sub" / "_b.pyx").write_text("")
    find.__globals__["__file__"] = str(tmp_path / "setup.py")
    assert dict(find("pkg")) == {"pkg._a": "pkg/_a.pyx", "pkg.sub._b": "pkg/sub/_b.pyx"}


def test_cython_sources_and_headers_ship_everywhere_under_the_package():
    data = _pyproject()["tool"]["setuptools"]["package-data"]["*"]
    assert {"*.pyx", "*.pxd", "*.h"} <= set(data)
    assert _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"] == ["blzarr", "blzarr.*"]
    manifest = open(os.path.join(ROOT, "MANIFEST.in"), encoding="utf-8").read()
    assert re.search(r"^recursive-include blzarr .*\*\.pyx .*\*\.pxd .*\*\.h", manifest, re.M)


def test_cibuildwheel_covers_the_platforms():
    cfg = _pyproject()["tool"]["cibuildwheel"]
    assert set(cfg["linux"]["archs"]) == {"x86_64", "aarch64"}
    assert cfg["macos"]["archs"] and cfg["windows"]["archs"] == ["AMD64"]
    assert "tools/smoke.py" in cfg["test-command"] and os.path.exists(os.path.join(ROOT, "tools", "smoke.py"))
