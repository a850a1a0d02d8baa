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
from setuptools.command.build_ext import build_ext


def _candidate_prefixes():
    if os.environ.get("BLOSC_DIR"):
        yield Path(os.environ["BLOSC_DIR"])
    spec = importlib.util.find_spec("blosc")
    if spec is not None and spec.origin:
        # the wheel's data files land in the prefix of the site-packages that holds the module:
        # <prefix>/lib/pythonX.Y/site-packages/blosc/ (POSIX), <prefix>/Lib/site-packages/blosc/ (Windows)
        here = Path(spec.origin).resolve()
        yield here.parents[4]
        yield here.parents[3]
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        yield Path(p)


# the static library's name per platform (MSVC's .lib on Windows, the archive elsewhere)
LIB_NAMES = ("libblosc.lib", "blosc.lib", "libblosc.a") if sys.platform == "win32" else ("libblosc.a",)


def find_blosc():
    tried = []
    for prefix in _candidate_prefixes():
        for sub in ("", "Library"):          # (conda's Windows prefixes put them under Library/)
            header = prefix / sub / "include" / "blosc.h"
            for libdir in ("lib64", "lib"):
                for name in LIB_NAMES:
                    lib = prefix / sub / libdir / name
                    tried.append(str(lib))
                    if header.is_file() and lib.is_file():
                        return str(header.parent), str(lib)
    raise SystemExit(
        "blzarr: cannot find blosc.h and the static C-Blosc library from the `blosc` package (tried: "
        + ", ".join(tried) + "); install it with `pip install 'blosc>=1.11,<1.12'` or set BLOSC_DIR")


def extensions_under(package):
    """One extension per ``.pyx`` anywhere under `package`, named by its path: a new Cython module
    needs no edit here (a ``.pxd`` beside it is found by Cython, a header in ``_include/`` by the
    compiler)."""
    root = Path(__file__).resolve().parent
    found = sorted((root / package).rglob("*.pyx"))
    if not found:
        raise SystemExit(f"blzarr: no .pyx file under {root / package}: is this a complete source tree?")
    for pyx in found:
        rel = pyx.relative_to(root)
        yield ".".join(rel.with_suffix("").parts), rel.as_posix()


include_dir, static_lib = find_blosc()
windows = sys.platform == "win32"
ext_kwargs = dict(
    include_dirs=[include_dir, numpy.get_include(), "blzarr/_include"],
    extra_objects=[static_lib],
    libraries=[] if windows else ["pthread"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    # a C function called without a declaration (a header's function renamed) is an error: as a
    # warning it built a module that failed to load with "undefined symbol"
    extra_compile_args=["/O2"] if windows else ["-O3", "-Werror=implicit-function-declaration"],
)
# the shared C headers: a change to one rebuilds every module (they hold inline C the modules share)
headers = [str(p) for p in sorted(Path("blzarr/_include").glob("*.h"))]
extensions = [Extension(name, [path], depends=headers, **ext_kwargs) for name, path in extensions_under("blzarr")]



class BuildExt(build_ext):
    """build_ext that compiles the modules on every core unless ``-j`` says otherwise: pip's builds
    (an install, ``python -m build``) pass no ``-j``, and the modules are independent."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


# Cython's own translation in worker processes too, where they are forked (a spawned worker would
# import this file again and run setup() inside itself)
fork = sys.platform.startswith("linux")
setup(
    ext_modules=cythonize(extensions, language_level=3, nthreads=(os.cpu_count() or 1) if fork else 0,
                          compiler_directives={"embedsignature": True}),
    cmdclass={"build_ext": BuildExt},
)
