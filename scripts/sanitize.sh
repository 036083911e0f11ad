#!/usr/bin/env bash
# Builds the library, the C++ tests and the Python extension with AddressSanitizer and UBSan
# (CMake option ONNXTRAIN_SANITIZE=address,undefined, in build/sanitize), runs ctest with leak
# checking, then a chosen part of pytest with libasan preloaded into Python.
#
#   scripts/sanitize.sh                      # ctest + the default pytest part
#   scripts/sanitize.sh --pytest "tests/python/ops/test_pool.py -k 2x2"
#   scripts/sanitize.sh --ctest-only
#
# Python's own allocations are not leak-checked (CPython keeps objects until exit); ctest is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

pytest_part="tests/python/test_fuzz_regressions.py tests/python/test_fuzz_corpus.py tests/python/test_inference_session.py
tests/python/test_runtime_fusions.py tests/python/ops/test_pool.py tests/python/ops/test_shape.py
tests/python/ops/test_matmul.py tests/python/training/test_checkpoint.py"
ctest_only=0
while (($#)); do
  case "$1" in
    --pytest) pytest_part=$2; shift 2 ;;
    --ctest-only) ctest_only=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

scripts/bootstrap.sh > /dev/null
build=build/sanitize
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONNXTRAIN_SANITIZE=address,undefined \
    -DONNXTRAIN_NATIVE=OFF -DPython_EXECUTABLE="$root/.venv/bin/python" > /dev/null
fi
cmake --build "$build"

echo "== ctest under ASan (leaks checked) and UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" --output-on-failure -j2 | tail -n 5
((ctest_only)) && exit 0

echo "== pytest under ASan and UBSan: $pytest_part"
preload="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)"
# shellcheck disable=SC2086
LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONPATH="$root/$build/python" \
  .venv/bin/python -m pytest -q -p no:cacheprovider $pytest_part
