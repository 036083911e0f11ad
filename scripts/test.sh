#!/usr/bin/env bash
# Builds everything and runs every test, from a fresh clone or an existing tree:
#   1. scripts/bootstrap.sh   — Debian packages and .venv (skips what is present)
#   2. pip install .          — builds the C++ library, CLI, C++ tests and onnxtrain._C
#                               (incrementally, in build/<wheel tag>) into .venv
#   3. ctest                  — the C++ tests
#   4. pytest tests/python    — the Python tests (ops, ONNX backend node tests, models)
# Extra arguments go to pytest, e.g. `scripts/test.sh -k gather`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

scripts/bootstrap.sh

echo "== building onnxtrain into .venv"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps --upgrade .
build_dir=$(ls -d build/cp*/ 2>/dev/null | head -n 1)

echo "== C++ tests (${build_dir})"
ctest --test-dir "$build_dir" --output-on-failure -j2 | tail -n 5

echo "== Python tests"
cd "$root"
.venv/bin/python -c "import onnxtrain; print('onnxtrain', onnxtrain.__version__, 'from', onnxtrain.__file__)"
exec .venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"
