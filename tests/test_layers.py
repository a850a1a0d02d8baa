"""The README's map of the layers stays true: it lists every module of the package, one a line, and a
module imports only modules listed below it."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "blzarr")


def _map():
    text = open(os.path.join(ROOT, "README.rst"), encoding="utf-8").read()
    block = text[text.index("**The layers, top to bottom.**"):]
    block = block[block.index("::\n\n") + 3:]
    lines = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            break
        lines.append(line.split()[0])
    return lines


def _imports(path):
    """The blzarr modules `path` imports (the package's own names included)."""
    out = set()
    for n in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 and n.module.split(".")[0] == "blzarr":
            parts = n.module.split(".")
            out.update([parts[1]] if len(parts) > 1 else [a.name for a in n.names])
        elif isinstance(n, ast.Import):
            out.update(a.name.split(".")[1] for a in n.names if a.name.startswith("blzarr."))
    return out


def test_the_map_lists_every_module_once():
    listed = _map()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    have = sorted(f for f in os.listdir(PKG) if re.fullmatch(r"[a-z_]+\.(py|pyx)", f)
                  and f not in ("__init__.py", "__main__.py"))
    assert sorted(listed) == have


def test_imports_point_down_the_map():
    order = {name.rsplit(".", 1)[0]: k for k, name in enumerate(_map())}
    upward = []
    for name, k in order.items():
        path = os.path.join(PKG, name + ".py")
        if not os.path.exists(path):
            continue            # the Cython modules import no blzarr module
        upward += [f"{name} imports {t}" for t in _imports(path) if t in order and order[t] <= k]
    assert not upward, upward
