"""Build the Cython extensions, linking C-Blosc 1.x statically from the `blosc` wheel.

The `blosc` package (a build requirement) installs blosc.h and libblosc.a beside its Python module,
under the prefix three levels above the site-packages that holds it.  BLOSC_DIR in the environment
may name another prefix holding include/blosc.h and lib*/libblosc.a.
"""

import importlib.util
import os
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup


def _candidate_prefixes():
    if os.environ.get("BLOSC_DIR"):
        yield Path(os.environ["BLOSC_DIR"])
    spec = importlib.util.find_spec("blosc")
    if spec is not None and spec.origin:
        # <prefix>/lib/pythonX.Y/site-packages/blosc/__init__.py
        yield Path(spec.origin).resolve().parents[4]
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        yield Path(p)


def find_blosc():
    tried = []
    for prefix in _candidate_prefixes():
        header = prefix / "include" / "blosc.h"
        for libdir in ("lib64", "lib"):
            lib = prefix / libdir / "libblosc.a"
            tried.append(str(lib))
            if header.is_file() and lib.is_file():
                return str(header.parent), str(lib)
    raise SystemExit(
        "blzarr: cannot find blosc.h and libblosc.a from the `blosc` package (tried: "
        + ", ".join(tried) + "); install it with `pip install 'blosc>=1.11,<1.12'` or set BLOSC_DIR")


include_dir, static_lib = find_blosc()
ext_kwargs = dict(
    include_dirs=[include_dir, numpy.get_include(), "blzarr/_include"],
    extra_objects=[static_lib],
    libraries=["pthread"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=["-O3"],
)
# The Cython layer, one extension per module; the .pxd files beside them say what one cimports of
# another, and the C headers of blzarr/_include hold the inline C they share.
CYTHON_MODULES = ["_chunk", "_minmax", "_workpool", "_decode", "_sums", "_rows", "_exprkernel", "_where",
                  "_superchunk", "_groupby"]
extensions = [Extension(f"blzarr.{name}", [f"blzarr/{name}.pyx"],
                        depends=[str(p) for p in Path("blzarr/_include").glob("*.h")], **ext_kwargs)
              for name in CYTHON_MODULES]

setup(
    ext_modules=cythonize(extensions, language_level=3,
                          compiler_directives={"embedsignature": True}),
)
