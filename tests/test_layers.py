"""The map of the layers (docs/development.rst) stays true: it lists every module of the package, one a line, by
its path under blzarr/, a module imports only modules listed below it, and a folder's modules import
only from their own folder and the folders beneath it."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "blzarr")

# the layers' folders, bottom first; the package's root holds the Cython kernels and the errors
# (beneath everything) and bcolz's module paths, the top-level functions and the command line
# (above everything)
FOLDERS = ["runtime", "storage", "query", "containers", "io"]
BOTTOM_OF_ROOT = {"errors.py"}


def _map():
    text = open(os.path.join(ROOT, "docs", "development.rst"), encoding="utf-8").read()
    block = text[text.index("**The layers, top to bottom.**"):]
    block = block[block.index("::\n\n") + 3:]
    lines = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            break
        lines.append(line.split()[0])
    return lines


def _modules():
    found = []
    for here, dirs, files in os.walk(PKG):
        rel = os.path.relpath(here, PKG)
        if rel.split(os.sep)[0] in ("bench", "__pycache__") or "__pycache__" in rel:
            continue
        for f in files:
            if re.fullmatch(r"[a-z_0-9]+\.(py|pyx)", f) and f not in ("__init__.py", "__main__.py"):
                found.append(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/"))
    return sorted(found)


def _as_path(dotted):
    """blzarr.a.b -> 'a/b.py' (or .pyx) if that is a module of the package, else None."""
    parts = dotted.split(".")[1:]
    for ext in (".py", ".pyx"):
        rel = "/".join(parts) + ext
        if parts and os.path.exists(os.path.join(PKG, rel)):
            return rel
    return None


def _imports(path):
    """The blzarr modules `path` imports, as paths under blzarr/."""
    out = set()
    for n in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 and n.module.split(".")[0] == "blzarr":
            mod = _as_path(n.module)
            if mod:
                out.add(mod)
            else:
                out.update(filter(None, (_as_path(f"{n.module}.{a.name}") for a in n.names)))
        elif isinstance(n, ast.Import):
            out.update(filter(None, (_as_path(a.name) for a in n.names if a.name.startswith("blzarr."))))
    return out


def _rank(rel):
    top = rel.split("/")[0]
    if top in FOLDERS:
        return FOLDERS.index(top) + 1
    if rel.endswith(".pyx") or rel in BOTTOM_OF_ROOT:
        return 0
    return len(FOLDERS) + 1


def test_the_map_lists_every_module_once():
    listed = _map()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    assert sorted(listed) == _modules()


def test_imports_point_down_the_map():
    order = {name: k for k, name in enumerate(_map())}
    upward = []
    for name, k in order.items():
        path = os.path.join(PKG, name)
        if name.endswith(".pyx"):
            continue            # the Cython modules import only errors and each other
        upward += [f"{name} imports {t}" for t in _imports(path) if t in order and order[t] <= k]
    assert not upward, upward


def test_folders_import_only_their_own_layer_and_below():
    upward = []
    for name in _modules():
        if name.endswith(".pyx"):
            continue
        rank = _rank(name)
        upward += [f"{name} imports {t}" for t in _imports(os.path.join(PKG, name)) if _rank(t) > rank]
    assert not upward, upward


def test_each_folder_says_what_it_holds_and_may_import():
    for here, dirs, files in os.walk(PKG):
        if "__init__.py" in files and "__pycache__" not in here:
            doc = ast.get_docstring(ast.parse(open(os.path.join(here, "__init__.py"), encoding="utf-8").read()))
            assert doc and len(doc) > 60, f"{here}/__init__.py has no docstring saying what lives there"


def test_carray_reads_reach_chunks_only_through_the_chunk_store():
    """The read paths of a carray ask the chunk store (`storage.chunkstore.ChunkStore`'s methods), never
    a chunk's private fields, the layout's directory or whether the bytes are remote."""
    past = re.compile(r"\._data\b|\bis (not )?chunk\b|\._bytestore\b|\.layoutdir\b|\.superchunklen\b")
    found = []
    for name in ("read.py", "reduce.py"):
        path = os.path.join(PKG, "containers", "carray", name)
        for k, line in enumerate(open(path, encoding="utf-8"), 1):
            if past.search(line.split("#")[0]):
                found.append(f"containers/carray/{name}:{k}: {line.strip()}")
    assert not found, found


def test_containers_reach_the_layout_directory_only_through_the_chunk_store():
    """Opening, writing and loading a newer version ask the chunk store (`LayoutChunks.adopt`,
    `gate_writes`, `close_dir`...), never its layout directory; the one exception is the
    carray's `_layoutdir`, the tests' way to the files."""
    found = []
    for here, _, files in os.walk(os.path.join(PKG, "containers")):
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(here, name)
            tree = ast.parse(open(path, encoding="utf-8").read())
            allowed = {id(node) for fn in ast.walk(tree)
                       if isinstance(fn, ast.FunctionDef) and fn.name == "_layoutdir"
                       for node in ast.walk(fn)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == "layoutdir" and id(node) not in allowed:
                    found.append(f"{os.path.relpath(path, PKG)}:{node.lineno}")
    assert not found, found
