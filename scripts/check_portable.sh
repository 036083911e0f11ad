#!/usr/bin/env bash
# Runs onnxtrain on an emulated pre-AVX-512 CPU: qemu-user (Debian's qemu-user package)
# with `-cpu Haswell` (AVX2 + FMA, no AVX-512; set QEMU_CPU=EPYC-Rome etc. for another) runs
# Python with onnxtrain for an inference and a training smoke test. A build that carries
# AVX-512 code outside its dispatched kernels (-march=native on an AVX-512 machine) dies
# with SIGILL here; the portable build picks its x86-64-v3 kernels and must give what it
# gives natively.
#
#   scripts/check_portable.sh [PYTHONPATH of the onnxtrain to check]   (default: build/dev/python)
#
# The model (Conv, Relu, MaxPool 2x2, Gemm, LayerNormalization, Tanh, Softmax) goes through
# the multiversioned kernels and oneDNN. Checked: the emulated run's inference output against
# onnxruntime's (run natively) within 1e-5, and its losses of three AdamW steps against the
# same build's native run (AVX-512 kernels on this machine) within 1e-6 relative.
# Takes about a minute or two (imports under emulation dominate); bounded by TIMEOUT (600 s).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=/work/main/.venv/bin/python
package=$(cd "${1:-build/dev/python}" && pwd)
cpu=${QEMU_CPU:-Haswell}
if ! command -v qemu-x86_64 >/dev/null; then
  echo "check_portable: qemu-x86_64 not found: apt-get install qemu-user" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

cat >"$work/smoke.py" <<'PY'
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

mode, work = sys.argv[1], Path(sys.argv[2])


def model(with_softmax: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * scale, name)
             for name, shape, scale in [("conv_w", (4, 3, 3, 3), 0.3), ("conv_b", (4,), 0.1),
                                        ("fc_w", (64, 10), 0.2), ("fc_b", (10,), 0.1),
                                        ("ln_s", (10,), 1.0), ("ln_b", (10,), 0.1)]]
    nodes = [helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["g"]),
             helper.make_node("LayerNormalization", ["g", "ln_s", "ln_b"], ["n"], axis=-1),
             helper.make_node("Tanh", ["n"], ["logits" if not with_softmax else "t"])]
    if with_softmax:
        nodes.append(helper.make_node("Softmax", ["t"], ["logits"], axis=-1))
    graph = helper.make_graph(nodes, "smoke", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


x = np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float32)
labels = np.array([3, 7], dtype=np.int64)

if mode == "reference":  # natively: onnxruntime's output
    import onnxruntime
    onnx.save(model(True), work / "inference.onnx")
    onnx.save(model(False), work / "train.onnx")
    session = onnxruntime.InferenceSession(str(work / "inference.onnx"), providers=["CPUExecutionProvider"])
    np.save(work / "expected.npy", session.run(None, {"x": x})[0])
    sys.exit(0)

import onnxtrain
from onnxtrain.training import artifacts
from onnxtrain.training.api import CheckpointState, Module, Optimizer

out = onnxtrain.InferenceSession(str(work / "inference.onnx")).run(None, {"x": x})[0]
folder = work / f"artifacts-{mode}"
artifacts.generate_artifacts(onnx.load(work / "train.onnx"), requires_grad=["conv_w", "conv_b", "fc_w", "fc_b"],
                             frozen_params=["ln_s", "ln_b"], loss=artifacts.LossType.CrossEntropyLoss,
                             optimizer=artifacts.OptimType.AdamW, artifact_directory=folder)
state = CheckpointState.load_checkpoint(folder / "checkpoint")
module = Module(folder / "training_model.onnx", state, folder / "eval_model.onnx")
optimizer = Optimizer(folder / "optimizer_model.onnx", module)
module.train()
losses = []
for _ in range(3):
    losses.append(float(module(x, labels)))
    optimizer.step()
    module.lazy_reset_grad()
(work / f"{mode}.json").write_text(json.dumps({"output": out.tolist(), "losses": losses}))
print(f"{mode}: losses {losses}")
PY

run_smoke() {  # mode, then the command prefix (empty for native)
  local mode=$1
  shift
  PYTHONPATH=$package LD_LIBRARY_PATH= timeout "${TIMEOUT:-600}" "$@" "$python" "$work/smoke.py" "$mode" "$work"
}

"$python" "$work/smoke.py" reference "$work"
run_smoke native
echo "== under qemu-x86_64 -cpu $cpu (onnxtrain from $package)"
status=0
run_smoke emulated qemu-x86_64 -cpu "$cpu" 2> >(grep -v "TCG doesn't support requested feature" >&2) || status=$?
if ((status != 0)); then
  ((status == 132)) && echo "check_portable: SIGILL: this build has instructions $cpu lacks" >&2
  echo "check_portable: FAILED (exit $status) after $((SECONDS - start)) s" >&2
  exit 1
fi

"$python" - "$work" <<'PY'
import json
import sys
from pathlib import Path

import numpy as np

work = Path(sys.argv[1])
expected = np.load(work / "expected.npy")
native = json.loads((work / "native.json").read_text())
emulated = json.loads((work / "emulated.json").read_text())
np.testing.assert_allclose(np.array(emulated["output"]), expected, rtol=1e-5, atol=1e-6,
                           err_msg="emulated inference against onnxruntime")
np.testing.assert_allclose(emulated["losses"], native["losses"], rtol=1e-6,
                           err_msg="emulated training losses against the native run")
assert emulated["losses"][-1] < emulated["losses"][0], emulated["losses"]
print("inference matches onnxruntime; training losses match the native run")
PY
echo "check_portable: passed on $cpu in $((SECONDS - start)) s"
