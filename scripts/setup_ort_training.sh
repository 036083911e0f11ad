#!/usr/bin/env bash
# Creates onnxruntime-training 1.19.2's own virtualenv, the anchor that bench/training_step.py
# compares with, skipping whatever is present:
#   1. the virtualenv $ONNXTRAIN_CACHE/ort-training-1.19.2 (default ~/.cache/onnxtrain);
#   2. onnxruntime-training-cpu 1.19.2 with the numpy, onnx and psutil it was built for;
#   3. a .pth file that lends it torch from the deps virtualenv of scripts/bootstrap.sh
#      (onnxruntime.training imports torch; a second copy would cost GBs).
# Never install onnxruntime-training into .venv: it and the stock onnxruntime there both
# provide the module `onnxruntime`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

python=${PYTHON:-python3}
cache=${ONNXTRAIN_CACHE:-$HOME/.cache/onnxtrain}
venv="$cache/ort-training-1.19.2"
packages=(onnxruntime-training-cpu==1.19.2 "numpy<2" onnx==1.16.2 psutil)

# The deps virtualenv is named as scripts/bootstrap.sh names it.
key=$( (cat requirements-dev.txt; $python --version) | sha256sum | cut -c1-12)
deps="$cache/deps-$key"
if [ ! -f "$deps/.complete" ]; then
  echo "setup_ort_training: $deps is missing; run scripts/bootstrap.sh first (it provides torch)" >&2
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_ort_training: creating $venv"
  $python -m venv "$venv"
fi

installed() {
  "$venv/bin/python" - <<'EOF' 2>/dev/null
from importlib.metadata import version
assert version("onnxruntime-training-cpu") == "1.19.2"
assert version("onnx") == "1.16.2"
assert int(version("numpy").split(".")[0]) < 2
import psutil  # noqa: F401
EOF
}
if ! installed; then
  echo "setup_ort_training: installing ${packages[*]}"
  "$venv/bin/python" -m pip install -q "${packages[@]}"
fi

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
deps_site=$("$deps/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# A .pth entry goes on sys.path after the virtualenv's own site-packages, so its numpy<2 and
# onnx 1.16 shadow the deps' newer ones; only what it lacks (torch) comes from there.
pth="$site/zz_torch_from_deps.pth"
if [ "$(cat "$pth" 2>/dev/null)" != "$deps_site" ]; then
  echo "$deps_site" > "$pth"
fi

"$venv/bin/python" -c "import onnxruntime.training.api" ||
  { echo "setup_ort_training: $venv cannot import onnxruntime.training.api" >&2; exit 1; }
echo "setup_ort_training: $venv ready (torch from $deps)"
