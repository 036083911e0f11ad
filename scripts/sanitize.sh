#!/usr/bin/env bash
# Builds the library, the C++ tests and the Python extension with AddressSanitizer and UBSan
# (scripts/sanitized_build.sh: clang, ONNXTRAIN_SANITIZE=address,undefined, in build/sanitize),
# runs ctest with leak checking, then a chosen part of pytest with clang's ASan runtime
# preloaded into Python. What the sanitizers report in code that is not ours is suppressed in
# tests/sanitize/*.supp, each entry with its reason.
#
#   scripts/sanitize.sh                      # ctest + the default pytest part
#   scripts/sanitize.sh --pytest "tests/python/ops/test_pool.py -k 2x2"
#   scripts/sanitize.sh --ctest-only
#
# Python's own allocations are not leak-checked (CPython keeps objects until exit); ctest is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The part of pytest: ops (pooling, shape ops, matmul, reductions, elementwise), autodiff (the
# gradient builder, functions), the training API and checkpoints (the catalogues, the training
# API tests, checkpoint tests), the session, and the fuzz reproducers and corpora.
pytest_part="tests/python/test_catalogue.py tests/python/test_fuzz_regressions.py tests/python/test_fuzz_corpus.py
tests/python/test_inference_session.py tests/python/ops/test_pool.py tests/python/ops/test_shape.py
tests/python/ops/test_matmul.py tests/python/ops/test_reduce.py tests/python/ops/test_elementwise.py
tests/python/autodiff/test_builder.py tests/python/autodiff/test_functions.py tests/python/training/test_checkpoint.py
tests/python/training/test_training_api.py"
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
if ((ctest_only)); then scripts/sanitized_build.sh onnxtrain_tests; else scripts/sanitized_build.sh onnxtrain_tests _C onnxtrain_python_sources onnxtrain_cli; fi

echo "== ctest under ASan (leaks checked) and UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" --output-on-failure -j2 | tail -n 5
((ctest_only)) && exit 0

echo "== pytest under ASan and UBSan: $pytest_part"
# The extension's sanitizer calls resolve to clang's shared ASan runtime (UBSan's handlers are
# part of it), loaded first into the uninstrumented interpreter.
runtime=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
# The tests must import the instrumented package, not an installed one.
LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0 PYTHONPATH="$root/$build/python" .venv/bin/python -c \
  "import onnxtrain, sys; sys.exit(0 if '/$build/python/' in onnxtrain.__file__ else 'sanitize.sh: imported ' + onnxtrain.__file__)"
# shellcheck disable=SC2086
LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:suppressions="$root/tests/sanitize/asan.supp" \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions="$root/tests/sanitize/ubsan.supp" \
  PYTHONPATH="$root/$build/python" OMP_NUM_THREADS=2 .venv/bin/python -m pytest -q -p no:cacheprovider $pytest_part
