#!/usr/bin/env bash
# Installs what building and testing onnxtrain needs, skipping whatever is present:
#   1. Debian packages (compilers' libraries: protobuf, ONNX schema, oneDNN, nlohmann-json, GoogleTest);
#   2. a shared "deps" virtualenv per requirements-dev.txt content, kept outside the clone
#      (torch alone is several GB: it is installed once per machine, not per clone or CI run);
#   3. .venv/ at the repo root, which sees the deps virtualenv through a .pth file.
# onnxtrain itself is built and installed into .venv by scripts/build.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

apt_packages=(cmake ninja-build g++ pkg-config ccache libprotobuf-dev protobuf-compiler libonnx-dev
              libdnnl-dev nlohmann-json3-dev libgtest-dev libomp-dev python3-venv clang-format
              # the sanitizer and fuzz builds (scripts/sanitized_build.sh): clang, its ASan/UBSan/libFuzzer runtimes
              clang libclang-rt-14-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

python=${PYTHON:-python3}
cache=${ONNXTRAIN_CACHE:-$HOME/.cache/onnxtrain}
key=$( (cat requirements-dev.txt; $python --version) | sha256sum | cut -c1-12)
deps="$cache/deps-$key"
if [ ! -f "$deps/.complete" ]; then
  echo "bootstrap: creating dependency environment $deps (first time on this machine)"
  rm -rf "$deps"
  $python -m venv "$deps"
  "$deps/bin/python" -m pip install -q --upgrade pip
  "$deps/bin/python" -m pip install -r requirements-dev.txt
  touch "$deps/.complete"
fi

if [ ! -x .venv/bin/python ]; then
  $python -m venv .venv
fi
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
deps_site=$("$deps/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$deps_site" > "$site/onnxtrain_deps.pth"
echo "bootstrap: .venv ready (dependencies from $deps)"
