#!/usr/bin/env bash
# Checks the installed C++ package: installs onnxtrain into a prefix, moves the prefix
# elsewhere (it must be relocatable), builds this folder's consumer project against it with
# find_package(onnxtrain), and runs the consumer (inference against onnxruntime, three AdamW
# steps against torch) and the installed CLI, with LD_LIBRARY_PATH empty.
#
#   tests/cpp_consumer/run.sh --build-dir DIR   install the package of an existing build tree
#                                               (a wheel build's too: component onnxtrain_cpp);
#                                               takes a minute, the test command runs it
#   tests/cpp_consumer/run.sh                   first a C++-only build (ONNXTRAIN_BUILD_PYTHON=OFF,
#                                               CMake kept from finding any Python) in
#                                               build/cpp-only, then the same checks
# PYTHON (default .venv/bin/python, with onnx, onnxruntime and torch) makes the model and
# the reference numbers, and tells the C++-only build where onnx-ml.proto is; the build
# itself runs no Python.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
python=${PYTHON:-$root/.venv/bin/python}
build_dir=""
if [[ "${1:-}" == "--build-dir" ]]; then
  build_dir=$2
fi
work=$root/build/cpp-consumer
rm -rf "$work"
mkdir -p "$work"
start=$SECONDS

if [[ -z "$build_dir" ]]; then
  build_dir=$root/build/cpp-only
  proto=$("$python" -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'onnx-ml.proto'))")
  echo "== C++-only build in $build_dir (schema $proto)"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DONNXTRAIN_BUILD_PYTHON=OFF \
    -DONNXTRAIN_BUILD_TESTS=OFF -DONNXTRAIN_ONNX_PROTO="$proto" \
    -DCMAKE_DISABLE_FIND_PACKAGE_Python=ON -DCMAKE_DISABLE_FIND_PACKAGE_Python3=ON >"$work/configure.log"
  cmake --build "$build_dir" -j2
  cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
else
  echo "== installing the C++ package of $build_dir"
  cmake --install "$build_dir" --component onnxtrain_cpp --prefix "$work/prefix" >/dev/null
fi
# Relocatable: the prefix works after it moves.
mv "$work/prefix" "$work/moved-prefix"
prefix=$work/moved-prefix

echo "== reference numbers (onnxruntime, torch)"
"$python" tests/cpp_consumer/make_reference.py "$work/data"

echo "== building tests/cpp_consumer against $prefix"
cmake -S tests/cpp_consumer -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/consumer-configure.log"
cmake --build "$work/build" >/dev/null

echo "== running the consumer"
LD_LIBRARY_PATH= "$work/build/consumer" "$work/data/model.onnx" "$work/data/reference.txt" "$work/artifacts"

if [[ -x "$prefix/bin/onnxtrain" ]]; then
  echo "== the installed CLI (run path: $(readelf -d "$prefix/bin/onnxtrain" | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p'))"
  LD_LIBRARY_PATH= "$prefix/bin/onnxtrain" inspect "$work/data/model.onnx" | head -n 5
fi
echo "cpp consumer: passed in $((SECONDS - start)) s"
