"""The examples of README.rst and of the documentation's pages run as tests: every ``.. code-block::
python`` block and the ``blzarr`` commands of the ``.. code-block:: console`` blocks, file after file in
the order a reader meets them (README, then the pages in the site's order), all in one scratch
directory; a Python block followed by "It prints::" must print exactly the literal block after it."""

import ast
import importlib.util
import shlex
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.rst"
DOCS = ROOT / "docs"
# imported by README examples but not by blzarr itself: a block that needs a missing one is skipped
OPTIONAL = {"dask", "pandas", "pyarrow", "tables", "numexpr", "distributed", "moto", "s3fs"}


def documents():
    """README.rst, then the documentation's pages in the order of its tables of contents."""
    order = [README]
    seen = set()

    def visit(page):
        if page in seen or not page.exists():
            return
        seen.add(page)
        if page != DOCS / "index.rst":
            order.append(page)
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.startswith(".. toctree::"):
                for entry in lines[i + 1:]:
                    if entry.strip() and not entry.startswith("   "):
                        break
                    entry = entry.strip()
                    if entry and not entry.startswith(":"):
                        visit((page.parent / (entry + ".rst")).resolve())

    visit(DOCS / "index.rst")
    rest = sorted(p for p in DOCS.rglob("*.rst") if p not in seen and "_build" not in p.parts
                  and "generated" not in p.parts and "_templates" not in p.parts)
    return order + rest


def printed_after(text, line):
    """The literal block of an "It prints::" paragraph right after the code block at `line`, or None."""
    lines = text.splitlines()
    i = line
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
        i += 1
    if i >= len(lines) or lines[i].strip() != "It prints::":
        return None
    body = []
    i += 1
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
        body.append(lines[i])
        i += 1
    return textwrap.dedent("\n".join(body)).strip("\n") + "\n"


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
    assert [b for b in code_blocks(README.read_text(encoding="utf-8")) if b[0] == "python"], \
        "README.rst lost its quickstart"
    docs = documents()
    assert DOCS / "guide" / "carray.rst" in docs and DOCS / "guide" / "cli.rst" in docs
    python = [(p, b) for p in docs for b in code_blocks(p.read_text(encoding="utf-8")) if b[0] == "python"]
    assert len(python) >= 10, "the documentation lost its Python examples"
    for path, (_, line, code) in python:
        compile(code, f"{path.relative_to(ROOT)}:{line}", "exec")  # a syntax error names its line


def test_readme_examples_run(tmp_path, monkeypatch, capsys):
    import blzarr
    from blzarr.cli import main
    monkeypatch.chdir(tmp_path)
    skipped = []
    with blzarr.defaults_ctx():          # an example that changes the defaults cannot leak them
        for doc in documents():
            text = doc.read_text(encoding="utf-8")
            name = doc.relative_to(ROOT)
            for lang, line, code in code_blocks(text):
                where = f"{name}:{line}"
                if lang == "python":
                    missing = sorted(m for m in imported_modules(code) & OPTIONAL
                                     if importlib.util.find_spec(m) is None)
                    if missing:
                        skipped.append(f"{where} needs {', '.join(missing)}")
                        continue
                    namespace = {"__name__": "__readme__"}
                    capsys.readouterr()
                    try:
                        exec(compile(code, where, "exec"), namespace)
                    except Exception as e:
                        pytest.fail(f"the example at {where} fails: {type(e).__name__}: {e}")
                    want = printed_after(text, line + len(code.splitlines()))
                    if want is not None:
                        assert capsys.readouterr().out == want, f"{where} does not print what follows it"
                elif lang == "console":
                    for argv in cli_commands(code):
                        if argv[:1] == ["bench"]:
                            continue  # the benchmark harness takes a minute: tests/test_cli.py covers it
                        status = main(argv)
                        err = capsys.readouterr().err
                        assert status == 0, f"{where}: `blzarr {' '.join(argv)}` exits {status}: {err}"
        # a directory named *.blz or *.bcolz holds that layout: a name never says the other one
        for path in sorted(tmp_path.rglob("*")):
            if path.is_dir() and path.suffix in (".blz", ".bcolz"):
                layout = blzarr.open(str(path), mode="r", allow_pickle=True).format
                assert layout == path.suffix[1:], f"the examples write {path.name} in the {layout} layout"
    if skipped:
        pytest.skip("; ".join(skipped))
