"""The examples of README.rst run as tests: every ``.. code-block:: python`` block, in order, then the
``blzarr`` commands of the ``.. code-block:: console`` blocks, all in one scratch directory."""

import ast
import importlib.util
import shlex
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.rst"
# imported by README examples but not by blzarr itself: a block that needs a missing one is skipped
OPTIONAL = {"dask", "pandas", "pyarrow", "tables", "numexpr", "distributed", "moto", "s3fs"}


def code_blocks(text):
    """(language, line number, dedented code) of every ``.. code-block::`` directive of `text`."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(".. code-block::"):
            lang = line.split("::", 1)[1].strip()
            start = i + 1
            body = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
                body.append(lines[i])
                i += 1
            blocks.append((lang, start, textwrap.dedent("\n".join(body)).strip("\n") + "\n"))
            continue
        i += 1
    return blocks


def imported_modules(code):
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def cli_commands(code):
    """The argument lists of the ``$ blzarr ...`` / ``$ python -m blzarr ...`` lines of a console block."""
    out = []
    for line in code.splitlines():
        if not line.startswith("$ "):
            continue
        words = shlex.split(line[2:], comments=True)
        if words[:3] == ["python", "-m", "blzarr"]:
            out.append(words[3:])
        elif words[:1] == ["blzarr"]:
            out.append(words[1:])
    return out


def test_readme_has_examples():
    blocks = code_blocks(README.read_text(encoding="utf-8"))
    python = [b for b in blocks if b[0] == "python"]
    assert len(python) >= 5, "README.rst lost its Python examples"
    for _, line, code in python:
        compile(code, f"README.rst:{line}", "exec")  # a syntax error names its line


def test_readme_examples_run(tmp_path, monkeypatch, capsys):
    import blzarr
    from blzarr.cli import main
    monkeypatch.chdir(tmp_path)
    skipped = []
    with blzarr.defaults_ctx():          # an example that changes the defaults cannot leak them
        for lang, line, code in code_blocks(README.read_text(encoding="utf-8")):
            if lang == "python":
                missing = sorted(m for m in imported_modules(code) & OPTIONAL
                                 if importlib.util.find_spec(m) is None)
                if missing:
                    skipped.append(f"README.rst:{line} needs {', '.join(missing)}")
                    continue
                namespace = {"__name__": "__readme__"}
                try:
                    exec(compile(code, f"README.rst:{line}", "exec"), namespace)
                except Exception as e:
                    pytest.fail(f"the example at README.rst:{line} fails: {type(e).__name__}: {e}")
            elif lang == "console":
                for argv in cli_commands(code):
                    if argv[:1] == ["bench"]:
                        continue  # the benchmark harness takes a minute: tests/test_cli.py covers it
                    status = main(argv)
                    err = capsys.readouterr().err
                    assert status == 0, f"README.rst:{line}: `blzarr {' '.join(argv)}` exits {status}: {err}"
        # a directory named *.blz or *.bcolz holds that layout: a name never says the other one
        for path in sorted(tmp_path.rglob("*")):
            if path.is_dir() and path.suffix in (".blz", ".bcolz"):
                layout = blzarr.open(str(path), mode="r", allow_pickle=True).format
                assert layout == path.suffix[1:], f"README.rst writes {path.name} in the {layout} layout"
    if skipped:
        pytest.skip("; ".join(skipped))
