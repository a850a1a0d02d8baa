"""blzarr's benchmark harness, from a checkout: ``python -m bench`` (``python -m bench --help``).

The harness's library part ships inside the package as ``blzarr.bench`` (so ``blzarr bench`` runs it
from any installation); this package is the repository's entry point, with the extra scripts
(bench_ctable.py, bench_blz.py, profile_ops.py) and the results (FINDINGS.md, BLZ_RESULTS.md).
``bench.harness``, ``bench.peers``, ``bench.memory`` and ``bench.command`` are the very modules of
``blzarr.bench``, so ``from bench import harness`` and ``from bench.harness import ...`` work as before.
"""

import sys

try:
    from blzarr.bench import CLEVEL, CNAME, NTHREADS, command, harness, memory, peers  # noqa: F401
except ImportError as _e:
    if sys.argv[:1] == ["-m"]:   # `python -m bench` is starting: one sentence, no traceback
        sys.exit(f"python -m bench: error: blzarr cannot be imported, so there is nothing to "
                 f"benchmark: {_e}")
    raise

for _name, _mod in (("command", command), ("harness", harness), ("memory", memory), ("peers", peers)):
    sys.modules[f"{__name__}.{_name}"] = _mod
del _name, _mod
