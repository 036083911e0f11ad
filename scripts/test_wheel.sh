#!/usr/bin/env bash
# Installs the wheel that scripts/build_wheel.sh made into a fresh venv (build/wheel-venv,
# dependencies from PyPI) and checks that it stands on its own:
#   - ldd: the extension, libonnxtrain and the CLI resolve libdnnl, libprotobuf, libgomp
#     and libonnx to the wheel's onnxtrain.libs/, never to the system's;
#   - with LD_LIBRARY_PATH empty and (where the sandbox allows a mount namespace) Debian's
#     libdnnl, libprotobuf and libonnx hidden behind empty files: an inference against
#     numpy (1e-5), five AdamW training steps whose loss falls, and the installed CLI.
#
#   scripts/test_wheel.sh [wheel]     (default: build/wheelhouse/onnxtrain-*manylinux*.whl)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-/usr/bin/python3}
wheel=${1:-$(ls build/wheelhouse/onnxtrain-*manylinux*.whl)}
venv=$root/build/wheel-venv
start=$SECONDS

rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q "$wheel"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
echo "== ldd of the installed package ($site/onnxtrain)"
bad=0
for f in "$site"/onnxtrain/*.so "$site"/onnxtrain/bin/onnxtrain; do
  deps=$(LD_LIBRARY_PATH= ldd "$f")
  echo "$(basename "$f"):"
  echo "$deps" | grep -E 'dnnl|protobuf|gomp|onnx' | sed 's/^\s*/    /'
  # libonnxtrain.so lies in the package itself; the others must come from onnxtrain.libs/.
  if echo "$deps" | grep -E 'libdnnl|libprotobuf|libgomp|libonnx[._]' | grep -v "=> $site/.*onnxtrain.libs/" | grep -q .; then
    echo "  ^ resolves a bundled library outside the wheel" >&2
    bad=1
  fi
  if echo "$deps" | grep -q "not found"; then
    echo "  ^ has a library not found" >&2
    bad=1
  fi
done
((bad == 0)) || { echo "test_wheel: FAILED (ldd)" >&2; exit 1; }

cat >"$venv/check.py" <<'PY'
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
from onnxtrain.training import artifacts
from onnxtrain.training.api import CheckpointState, Module, Optimizer

rng = np.random.default_rng(0)
w1, b1 = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
w2, b2 = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
     helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"])], "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
    [numpy_helper.from_array(v, n) for n, v in [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)]])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
x = rng.standard_normal((16, 4)).astype(np.float32)
labels = rng.integers(0, 3, 16).astype(np.int64)

with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    onnx.save(model, folder / "model.onnx")
    out = onnxtrain.InferenceSession(str(folder / "model.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(out, np.maximum(x @ w1 + b1, 0) @ w2 + b2, rtol=1e-5, atol=1e-5)
    print("inference matches numpy")
    artifacts.generate_artifacts(model, requires_grad=["w1", "b1", "w2", "b2"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=folder)
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    module = Module(folder / "training_model.onnx", state, folder / "eval_model.onnx")
    optimizer = Optimizer(folder / "optimizer_model.onnx", module)
    module.train()
    losses = []
    for _ in range(5):
        losses.append(float(module(x, labels)))
        optimizer.step()
        module.lazy_reset_grad()
    print("training losses", [round(v, 5) for v in losses])
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    cli = Path(sys.executable).parent / "onnxtrain"
    inspect = subprocess.run([str(cli), "inspect", str(folder / "model.onnx")], capture_output=True, text=True)
    assert inspect.returncode == 0, inspect.stderr
    print("onnxtrain inspect:", inspect.stdout.splitlines()[0])
print("wheel check passed")
PY

# Hide the system's copies where a private mount namespace is allowed (root, unshare).
hidden=()
for lib in /usr/lib/x86_64-linux-gnu/libdnnl.so* /usr/lib/x86_64-linux-gnu/libprotobuf.so* \
           /usr/lib/x86_64-linux-gnu/libonnx*.so*; do
  [ -f "$lib" ] && [ ! -L "$lib" ] && hidden+=("$lib")  # the files; the symlinks lead to them
done
if unshare --mount true 2>/dev/null; then
  echo "== running with LD_LIBRARY_PATH empty and ${#hidden[@]} system libraries hidden"
  unshare --mount bash -c '
    for lib in "${@:2}"; do mount --bind /dev/null "$lib"; done
    if "$1/bin/python" -c "import ctypes; ctypes.CDLL(\"libdnnl.so.2\")" 2>/dev/null; then
      echo "the system libdnnl still loads: hiding failed" >&2; exit 1
    fi
    cd /tmp && LD_LIBRARY_PATH= "$1/bin/python" "$1/check.py"' _ "$venv" "${hidden[@]}"
else
  echo "== running with LD_LIBRARY_PATH empty (no mount namespace here: system libraries not hidden; ldd above shows they are not used)"
  (cd /tmp && LD_LIBRARY_PATH= "$venv/bin/python" "$venv/check.py")
fi
echo "test_wheel: passed in $((SECONDS - start)) s"
