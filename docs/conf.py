"""Sphinx configuration of blzarr's documentation.

Build (warnings are errors; no network needed):

    python -m pip install -e ".[docs]"
    python -m sphinx -W -n -b html docs docs/_build/html
    python -m sphinx -W -b doctest docs docs/_build/doctest
"""

import inspect
import os
import pkgutil
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# the source tree's blzarr (built in place) when the docs are built from a checkout
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import blzarr  # noqa: E402

project = "blzarr"
author = "the blzarr developers"
copyright = "the blzarr developers"
release = blzarr.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "_ext.benchplot",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "**/generated/*.inc"]
root_doc = "index"
# single backticks in docstrings name parameters as often as objects (numpydoc style): a link
# where the name is a documented object, emphasis otherwise (as NumPy's docs do)
default_role = "autolink"

# ``blzarr.carray`` is both a module (bcolz's path) and the class the package exports; autosummary
# finds the class for ``blzarr.carray`` but looks for ``blzarr.carray.append`` in the module.  The
# reference is of the public names, so a name that does not resolve is looked up attribute by
# attribute from the package (blzarr.carray -> the class -> its method).
import sphinx.ext.autosummary as _autosummary  # noqa: E402

_import_by_name = _autosummary._import_by_name


def _import_public_name(name, *args, **kwargs):
    parts = name.split(".")
    public = getattr(blzarr, parts[1], None) if parts[0] == "blzarr" and len(parts) > 1 else None
    if public is None or parts[1] not in blzarr.__all__ or inspect.ismodule(public):
        return _import_by_name(name, *args, **kwargs)
    parent, obj = blzarr, public
    try:
        for part in parts[2:]:
            parent, obj = obj, getattr(obj, part)
    except AttributeError:
        raise ImportError(f"{name} is not a public name of blzarr") from None
    return obj, parent, "blzarr"


_autosummary._import_by_name = _import_public_name

# the reference: one page per public name and per public method or property of carray and ctable
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
# the class template lists the members itself (one page each), so numpydoc does not list them again
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
numpydoc_xref_param_type = False

# no network at build time: the inventories are not fetched, so references to NumPy and Python stay
# plain text (intersphinx is loaded only so that a mapping can be given where there is a network)
intersphinx_mapping = {}

# ``-n`` (nitpicky) checks every reference.  Docstrings name the package's internal modules to say
# where something lives; the reference documents the public names only (docs/development.rst maps
# the modules), so references into a module that is not a public name are not checked.
_internal = sorted(m.name for m in pkgutil.walk_packages(blzarr.__path__, "blzarr.")
                   if m.name.split(".")[1] not in blzarr.__all__)
nitpick_ignore_regex = [
    (r"py:.*", "(%s)(\\..*)?" % "|".join(re.escape(m) for m in _internal)),
    # other projects' objects: their inventories are not fetched (the build needs no network)
    (r"py:.*", r"(numpy|np|pandas|pd|dask|pyarrow|pa|fsspec|s3fs|zarr|bcolz|tables|numexpr)\..*"),
    # a bare lowercase name that is no documented object is a parameter or a local name, and a
    # bare dunder a protocol's method (``__arrow_c_stream__``), which has no page of its own
    (r"py:obj", r"_?[a-z][a-z0-9_]*"),
    (r"py:obj", r"__[a-z0-9_]+__"),
]

doctest_global_setup = """
import os, tempfile, shutil
import numpy as np
import blzarr
_docs_tmp = tempfile.mkdtemp(prefix="blzarr-doctest-")
_docs_cwd = os.getcwd()
os.chdir(_docs_tmp)
"""
doctest_global_cleanup = """
os.chdir(_docs_cwd)
shutil.rmtree(_docs_tmp, ignore_errors=True)
"""
doctest_default_flags = (__import__("doctest").ELLIPSIS | __import__("doctest").NORMALIZE_WHITESPACE)

html_theme = "pydata_sphinx_theme"
html_title = f"blzarr {release}"
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "navbar_align": "left",
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"index": [], "changelog": []}
html_show_sourcelink = False

# the benchmark page's figure, drawn at build time from the committed JSON report
benchplot_reports = {"bench/report.json": "generated/bench_report.svg"}
