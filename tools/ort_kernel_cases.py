"""Records what onnxruntime-training 1.19.2 computes for single com.microsoft training nodes.

Run it in ORT-training's own virtualenv (scripts/setup_ort_training.sh makes it):

    ~/.cache/onnxtrain/ort-training-1.19.2/bin/python tools/ort_kernel_cases.py OUT.json

Each case is a one-node model (the ops onnxruntime-training's artifacts contain, see
tests/python/training/ort_artifacts/ops.md, plus their siblings) run on seeded inputs by
ORT's InferenceSession, whose training build has these kernels. OUT.json holds, per case,
the serialized model, the inputs and ORT's outputs (arrays as base64 little-endian bytes);
tests/python/training/test_ort_kernels.py runs the same models in onnxtrain.
"""

from __future__ import annotations

import base64
import json
import sys

import numpy as np
import onnx
from onnx import helper

rng = np.random.default_rng(116)


def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def encode(array: np.ndarray) -> dict:
    array = np.array(array, order="C")  # np.ascontiguousarray would make a 0-d array 1-d
    return {"dtype": str(array.dtype), "shape": list(array.shape), "base64": base64.b64encode(array.tobytes()).decode()}


def one_node(op_type: str, inputs: dict, attributes: dict, n_outputs: int, domain: str) -> onnx.ModelProto:
    names = [name if value is not None else "" for name, value in inputs.items()]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, domain=domain, **attributes)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                    for n, v in inputs.items() if v is not None]
    graph = helper.make_graph([node], op_type, graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outputs])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def cases():
    """(name, op_type, inputs, attributes, n_outputs, domain)."""
    ms = "com.microsoft"
    x = normal(3, 5)
    y_softmax = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    logits = normal(6, 4)
    log_prob = (logits - np.log(np.exp(logits).sum(1, keepdims=True))).astype(np.float32)
    labels = rng.integers(0, 4, 6).astype(np.int64)
    labels_ignored = labels.copy()
    labels_ignored[[1, 4]] = -1
    ln_x = normal(2, 3, 8)
    ln_mean = ln_x.mean(-1, keepdims=True)
    ln_inv = (1 / np.sqrt(ln_x.var(-1, keepdims=True) + 1e-5)).astype(np.float32)
    bn_x = normal(3, 4, 2, 2)
    bn_mean = bn_x.mean((0, 2, 3))
    bn_inv = (1 / np.sqrt(bn_x.var((0, 2, 3)) + 1e-5)).astype(np.float32)
    return [
        ("ReluGrad", "ReluGrad", {"dY": normal(3, 5), "X": x}, {}, 1, ms),
        ("SigmoidGrad", "SigmoidGrad", {"dY": normal(3, 5), "Y": 1 / (1 + np.exp(-x))}, {}, 1, ms),
        ("TanhGrad", "TanhGrad", {"dY": normal(3, 5), "Y": np.tanh(x)}, {}, 1, ms),
        ("GeluGrad", "GeluGrad", {"dY": normal(3, 5), "X": x}, {}, 1, ms),
        ("FastGeluGrad", "FastGeluGrad", {"dY": normal(3, 5), "X": x}, {}, 1, ms),
        ("Gelu", "Gelu", {"X": x}, {}, 1, ms),
        ("FastGelu", "FastGelu", {"X": x}, {}, 1, ms),
        ("SoftmaxGrad_13", "SoftmaxGrad_13", {"dY": normal(3, 5), "Y": y_softmax.astype(np.float32)}, {"axis": -1}, 1, ms),
        ("LogSoftmaxGrad_13", "LogSoftmaxGrad_13",
         {"dY": normal(3, 5), "Y": np.log(y_softmax).astype(np.float32)}, {"axis": 1}, 1, ms),
        ("SoftmaxCrossEntropyLossGrad_mean", "SoftmaxCrossEntropyLossGrad",
         {"dY": np.array(1.3, np.float32), "log_prob": log_prob, "label": labels}, {"reduction": "mean"}, 1, ms),
        ("SoftmaxCrossEntropyLossGrad_sum", "SoftmaxCrossEntropyLossGrad",
         {"dY": np.array(0.7, np.float32), "log_prob": log_prob, "label": labels}, {"reduction": "sum"}, 1, ms),
        ("SoftmaxCrossEntropyLossGrad_none", "SoftmaxCrossEntropyLossGrad",
         {"dY": normal(6), "log_prob": log_prob, "label": labels}, {"reduction": "none"}, 1, ms),
        ("SoftmaxCrossEntropyLossGrad_ignore_weight", "SoftmaxCrossEntropyLossGrad",
         {"dY": np.array(1.0, np.float32), "log_prob": log_prob, "label": labels_ignored,
          "weight": np.abs(normal(4)) + 0.1}, {"reduction": "mean", "ignore_index": -1}, 1, ms),
        ("Scale_down_int64", "Scale", {"X": normal(3, 5), "scale": np.array(7, np.int64)}, {"scale_down": 1}, 1, ms),
        ("Scale_float", "Scale", {"X": normal(3, 5), "scale": np.array(0.3, np.float32)}, {}, 1, ms),
        ("FusedMatMul_transB", "FusedMatMul", {"A": normal(2, 3, 4), "B": normal(5, 4)},
         {"transB": 1, "alpha": 0.5}, 1, ms),
        ("FusedMatMul_transA_batched", "FusedMatMul", {"A": normal(2, 1, 4, 3), "B": normal(3, 4, 5)},
         {"transA": 1}, 1, ms),
        ("LayerNormalizationGrad", "LayerNormalizationGrad",
         {"dY": normal(2, 3, 8), "X": ln_x, "scale": normal(8), "mean": ln_mean, "inv_std_dev": ln_inv},
         {"axis": -1, "epsilon": 1e-5}, 3, ms),
        ("BatchNormInternal", "BatchNormInternal",
         {"X": bn_x, "scale": normal(4), "B": normal(4), "mean": normal(4), "var": np.abs(normal(4)) + 0.5},
         {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1}, 5, ms),
        ("BatchNormalizationGrad", "BatchNormalizationGrad",
         {"dY": normal(3, 4, 2, 2), "X": bn_x, "scale": normal(4), "saved_mean": bn_mean, "saved_inv_std": bn_inv},
         {"epsilon": 1e-5}, 3, ms),
        ("TransposeMatMul", "TransposeMatMul", {"A": normal(4, 3), "B": normal(5, 4)},
         {"transA": 1, "transB": 1, "alpha": 2.0}, 1, ms),
        ("BiasGelu", "BiasGelu", {"A": normal(2, 3, 5), "B": normal(5)}, {}, 1, ms),
        ("BiasGeluGrad_dX", "BiasGeluGrad_dX", {"dY": normal(2, 3, 5), "X": normal(2, 3, 5), "B": normal(5)}, {}, 1, ms),
        ("ZeroGradient", "ZeroGradient", {"gradient": normal(3, 5), "reset": np.array(True)}, {}, 1, ms),
        ("DropoutGrad_training", "DropoutGrad",
         {"dY": normal(3, 5), "mask": rng.random((3, 5)) > 0.3, "ratio": np.array(0.3, np.float32),
          "training_mode": np.array(True)}, {}, 1, ms),
        ("DropoutGrad_eval", "DropoutGrad",
         {"dY": normal(3, 5), "mask": rng.random((3, 5)) > 0.3, "ratio": np.array(0.3, np.float32),
          "training_mode": np.array(False)}, {}, 1, ms),
        ("ConvGrad", "ConvGrad", {"dY": normal(2, 3, 4, 4), "X": normal(2, 2, 4, 4), "W": normal(3, 2, 3, 3)},
         {"pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1], "group": 1}, 3, ms),
    ]


def main(out: str) -> None:
    import onnxruntime

    records = []
    for name, op_type, inputs, attributes, n_outputs, domain in cases():
        inputs = {k: (np.asarray(v) if v is not None else None) for k, v in inputs.items()}
        model = one_node(op_type, inputs, attributes, n_outputs, domain)
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {k: v for k, v in inputs.items() if v is not None}
        outputs = session.run(None, feeds)
        records.append({"name": name, "model": base64.b64encode(model.SerializeToString()).decode(),
                        "inputs": {k: encode(v) for k, v in feeds.items()},
                        "outputs": [encode(np.asarray(o)) for o in outputs]})
        print(name, [np.asarray(o).shape for o in outputs])
    with open(out, "w") as f:
        json.dump({"onnxruntime": onnxruntime.__version__, "cases": records}, f)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
