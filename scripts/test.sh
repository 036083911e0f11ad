#!/usr/bin/env bash
# Builds everything and runs every test, from a fresh clone or an existing tree:
#   1. scripts/bootstrap.sh   — Debian packages and .venv (skips what is present);
#      tools/check_layers.py  — the include graph of src/ and the Python imports point one way
#      tools/check_odr.py     — no type defined at namespace scope in two source files
#      scripts/check_format.sh — every C++ file follows the repo's .clang-format
#   2. pip install .          — builds the C++ library, CLI, C++ tests and onnxtrain._C
#                               (incrementally, in build/<wheel tag>) into .venv
#   3. ctest                  — the C++ tests
#      tests/cpp_consumer      — the installed C++ package: a separate CMake project finds it,
#                               runs inference and three training steps (about a minute)
#   4. pytest tests/python    — the Python tests (ops, ONNX backend node tests, models,
#                               gradients, training)
#   5. onnxtrain train        — the main job: trains a CNN on scikit-learn's digits end to
#                               end (artifacts, training, checkpoint, inference model, held-out
#                               accuracy, loss curve) into build/onnxtrain-digits
#   6. with CI=true (or ONNXTRAIN_SANITIZER_SLICE=1): a bounded slice of the sanitizer and fuzz
#      runs — one clang build with ASan, UBSan and fuzzer coverage (scripts/sanitized_build.sh,
#      the C++ tests and the three libFuzzer targets only), ctest under it with leak checking,
#      every fuzz target's regression corpus replayed and 30 s of fuzzing each
# Extra arguments go to pytest, e.g. `scripts/test.sh -k gather` (and skip steps 5 and 6).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

scripts/bootstrap.sh

echo "== structure: includes point down the layers, no Python import cycles, no duplicated definitions, format"
.venv/bin/python tools/check_layers.py
.venv/bin/python tools/check_odr.py
scripts/check_format.sh

# A fresh clone in another folder compiles the same sources: with paths relative to the
# clone, ccache serves them from an earlier build on this machine.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

echo "== building onnxtrain into .venv"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps --upgrade . -C cmake.define.ONNXTRAIN_BUILD_TESTS=ON
build_dir=$(ls -d build/cp*/ 2>/dev/null | head -n 1)

echo "== C++ tests (${build_dir})"
ctest --test-dir "$build_dir" --output-on-failure -j2 | tail -n 5

echo "== C++ package: install, find_package(onnxtrain) from tests/cpp_consumer, run"
tests/cpp_consumer/run.sh --build-dir "$build_dir"

echo "== Python tests"
cd "$root"
.venv/bin/python -c "import onnxtrain; print('onnxtrain', onnxtrain.__version__, 'from', onnxtrain.__file__)"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"

if [[ $# -eq 0 ]]; then
  echo "== main job: onnxtrain train (digits CNN)"
  .venv/bin/onnxtrain train --out build/onnxtrain-digits
fi

if [[ $# -eq 0 && ("${CI:-}" == true || "${ONNXTRAIN_SANITIZER_SLICE:-}" == 1) ]]; then
  # -O0: the instrumented build costs a third of -O1's compile time (scripts/sanitized_build.sh).
  export ONNXTRAIN_SANITIZE_OPT=-O0
  echo "== sanitizer slice: ctest under ASan + UBSan (leaks checked)"
  timeout 900 scripts/sanitize.sh --ctest-only
  echo "== fuzz slice: regression corpora, then 30 s of each target"
  timeout 480 scripts/fuzz.sh --seconds 30 --seed 1
fi
