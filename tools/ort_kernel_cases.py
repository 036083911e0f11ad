"""Records what onnxruntime-training 1.19.2 computes for single com.microsoft training nodes.

Run it in ORT-training's own virtualenv (scripts/setup_ort_training.sh makes it):

    ~/.cache/onnxtrain/ort-training-1.19.2/bin/python tools/ort_kernel_cases.py OUT.json

Each case is a one-node model (the ops onnxruntime-training's artifacts contain, see
tests/python/training/ort_artifacts/ops.md, plus their siblings) run on seeded inputs by
ORT's InferenceSession, whose training build has these kernels. OUT.json holds, per case,
the serialized model, the inputs and ORT's outputs (arrays as base64 little-endian bytes;
tensor sequences as {"sequence": [...]}): "cases", and "optimizer_cases" (ORT's optimizer
nodes over tensor sequences); tests/python/training/test_ort_kernels.py runs the same in
onnxtrain.
"""

from __future__ import annotations

import base64
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

rng = np.random.default_rng(116)


def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def encode(array: np.ndarray) -> dict:
    array = np.array(array, order="C")  # np.ascontiguousarray would make a 0-d array 1-d
    return {"dtype": str(array.dtype), "shape": list(array.shape), "base64": base64.b64encode(array.tobytes()).decode()}


def one_node(op_type: str, inputs: dict, attributes: dict, n_outputs: int, domain: str,
             output_types: list | None = None) -> onnx.ModelProto:
    """`output_types`: (numpy dtype, shape) per output, for ops whose kernel takes its output's
    shape from ORT's static shape inference (AveragePoolGrad)."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, domain=domain, **attributes)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                    for n, v in inputs.items() if v is not None]
    graph_outputs = [helper.make_empty_tensor_value_info(o) for o in outputs] if output_types is None else [
        helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(t)), shape)
        for o, (t, shape) in zip(outputs, output_types)]
    graph = helper.make_graph([node], op_type, graph_inputs, graph_outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def optimizer_node(op_type: str, scalars: dict, sequences: dict, attributes: dict, n_outputs: int) -> onnx.ModelProto:
    """One ORT optimizer node over tensor sequences, as optimizer_model.onnx holds it."""
    names = list(scalars) + list(sequences)
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, domain="com.microsoft", **attributes)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                    for n, v in scalars.items()]
    graph_inputs += [helper.make_tensor_sequence_value_info(n, TensorProto.FLOAT, None) for n in sequences]
    graph_outputs = [helper.make_tensor_value_info(outputs[0], TensorProto.BOOL, [1])]
    graph_outputs += [helper.make_tensor_sequence_value_info(o, TensorProto.FLOAT, None) for o in outputs[1:]]
    graph = helper.make_graph([node], op_type, graph_inputs, graph_outputs)
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
        *newer_cases(),
    ]


def newer_cases():
    """The ops of ORT's artifacts of LLaMA, pooling CNNs and custom losses (ops.md), and the
    Internal losses ORT's graph transformers write. (BiasDropout has no CPU kernel in ORT
    1.19.2: test_ort_kernels.py checks it against ORT running Add, Dropout, Add.)"""
    ms = "com.microsoft"
    sl_x = normal(2, 3, 8)
    sl_inv = (1 / np.sqrt((sl_x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5)).astype(np.float32)
    sl_x2 = normal(2, 3, 8)
    sl_inv2 = (1 / np.sqrt((sl_x2.astype(np.float64) ** 2).mean((1, 2), keepdims=True) + 1e-6)).astype(np.float32)
    logits = normal(6, 4)
    log_prob = (logits - np.log(np.exp(logits).sum(1, keepdims=True))).astype(np.float32)
    labels = rng.integers(0, 4, 6).astype(np.int64)
    labels_ignored = labels.copy()
    labels_ignored[[0, 3]] = 2
    logits3 = normal(3, 4, 2)
    log_prob3 = (logits3 - np.log(np.exp(logits3).sum(1, keepdims=True))).astype(np.float32)
    labels3 = rng.integers(0, 4, (3, 2)).astype(np.int64)
    weight = np.abs(normal(4)) + 0.1
    gather_indices = rng.integers(-5, 5, (3, 4)).astype(np.int64)
    gather_indices[0, :2] = 1  # two gradients into one place
    avg = {"kernel_shape": [2, 2], "strides": [2, 2]}
    return [
        ("SimplifiedLayerNormalization", "SimplifiedLayerNormalization", {"X": sl_x, "scale": normal(8)},
         {"axis": -1, "epsilon": 1e-5}, 2, ""),
        ("SimplifiedLayerNormalization_axis1", "SimplifiedLayerNormalization", {"X": sl_x2, "scale": normal(3, 8)},
         {"axis": 1, "epsilon": 1e-6}, 2, ""),
        ("SimplifiedLayerNormalizationGrad", "SimplifiedLayerNormalizationGrad",
         {"dY": normal(2, 3, 8), "X": sl_x, "scale": normal(8), "inv_std_var": sl_inv}, {"axis": -1, "epsilon": 1e-5},
         2, ms),
        ("SimplifiedLayerNormalizationGrad_axis1", "SimplifiedLayerNormalizationGrad",
         {"dY": normal(2, 3, 8), "X": sl_x2, "scale": normal(3, 8), "inv_std_var": sl_inv2},
         {"axis": 1, "epsilon": 1e-6}, 2, ms),
        ("GatherElementsGrad_axis1", "GatherElementsGrad",
         {"dY": normal(3, 4), "shape": np.array([3, 5], np.int64), "indices": gather_indices}, {"axis": 1}, 1, ms),
        ("GatherElementsGrad_axis0", "GatherElementsGrad",
         {"dY": normal(2, 3, 2), "shape": np.array([4, 3, 2], np.int64),
          "indices": rng.integers(0, 4, (2, 3, 2)).astype(np.int64)}, {"axis": 0}, 1, ms),
        ("QuickGelu", "QuickGelu", {"X": normal(3, 5) * 3}, {}, 1, ms),
        ("QuickGelu_alpha1", "QuickGelu", {"X": normal(3, 5) * 3}, {"alpha": 1.0}, 1, ms),
        ("QuickGeluGrad", "QuickGeluGrad", {"dY": normal(3, 5), "X": normal(3, 5) * 3}, {}, 1, ms),
        ("QuickGeluGrad_alpha1", "QuickGeluGrad", {"dY": normal(3, 5), "X": normal(3, 5) * 3}, {"alpha": 1.0}, 1, ms),
        ("ConcatTraining", "ConcatTraining", {"a": normal(2, 3, 4), "b": normal(2, 1, 4), "c": normal(2, 2, 4)},
         {"axis": 1}, 2, ms),
        ("ConcatTraining_negative_axis", "ConcatTraining", {"a": normal(2, 3), "b": normal(2, 5)}, {"axis": -1}, 2, ms),
        ("SplitTraining", "SplitTraining", {"input": normal(2, 7, 3), "split": np.array([2, 4, 1], np.int64)},
         {"axis": 1}, 3, ms),
        ("SplitTraining_negative_axis", "SplitTraining", {"input": normal(3, 4), "split": np.array([1, 3], np.int64)},
         {"axis": -1}, 2, ms),
        ("AveragePoolGrad_2x2", "AveragePoolGrad", {"dY": normal(2, 3, 2, 2)}, avg, 1, "",
         [(np.float32, [2, 3, 4, 5])]),
        ("AveragePoolGrad_pads_include", "AveragePoolGrad", {"dY": normal(1, 2, 5, 5)},
         {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1}, 1, "",
         [(np.float32, [1, 2, 5, 5])]),
        ("AveragePoolGrad_pads_exclude", "AveragePoolGrad", {"dY": normal(1, 2, 3, 3)},
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 1, "", [(np.float32, [1, 2, 5, 5])]),
        ("AveragePoolGrad_ceil", "AveragePoolGrad", {"dY": normal(1, 1, 3, 3)},
         {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, 1, "", [(np.float32, [1, 1, 5, 5])]),
        ("AveragePoolGrad_1d", "AveragePoolGrad", {"dY": normal(2, 2, 3)}, {"kernel_shape": [3], "strides": [2]}, 1,
         "", [(np.float32, [2, 2, 7])]),
        ("SoftmaxCrossEntropyLossInternal_mean", "SoftmaxCrossEntropyLossInternal",
         {"scores": logits, "labels": labels}, {}, 2, ms),
        ("SoftmaxCrossEntropyLossInternal_sum_weight", "SoftmaxCrossEntropyLossInternal",
         {"scores": logits, "labels": labels, "weights": weight}, {"reduction": "sum"}, 2, ms),
        ("SoftmaxCrossEntropyLossInternal_none_ignore", "SoftmaxCrossEntropyLossInternal",
         {"scores": logits, "labels": labels_ignored, "weights": None, "ignore_index": np.array(2, np.int64)},
         {"reduction": "none"}, 2, ms),
        ("SoftmaxCrossEntropyLossInternal_mean_weight_ignore_3d", "SoftmaxCrossEntropyLossInternal",
         {"scores": logits3, "labels": labels3, "weights": weight, "ignore_index": np.array(1, np.int64)}, {}, 2, ms),
        ("SoftmaxCrossEntropyLossInternalGrad_mean", "SoftmaxCrossEntropyLossInternalGrad",
         {"dY": np.array(1.3, np.float32), "log_prob": log_prob, "label": labels}, {}, 1, ms),
        ("SoftmaxCrossEntropyLossInternalGrad_sum_weight", "SoftmaxCrossEntropyLossInternalGrad",
         {"dY": np.array(0.7, np.float32), "log_prob": log_prob, "label": labels, "weight": weight},
         {"reduction": "sum"}, 1, ms),
        ("SoftmaxCrossEntropyLossInternalGrad_none_ignore", "SoftmaxCrossEntropyLossInternalGrad",
         {"dY": normal(6), "log_prob": log_prob, "label": labels_ignored, "weight": None,
          "ignore_index": np.array(2, np.int64)}, {"reduction": "none"}, 1, ms),
        ("SoftmaxCrossEntropyLossInternalGrad_3d_weight_ignore", "SoftmaxCrossEntropyLossInternalGrad",
         {"dY": np.array(1.0, np.float32), "log_prob": log_prob3, "label": labels3, "weight": weight,
          "ignore_index": np.array(1, np.int64)}, {}, 1, ms),
        ("SoftmaxCrossEntropyLossInternalGrad_bias", "SoftmaxCrossEntropyLossInternalGrad",
         {"dY": np.array(1.0, np.float32), "log_prob": log_prob, "label": labels, "weight": None,
          "ignore_index": None, "bias": normal(6, 4)}, {}, 1, ms),
    ]


def optimizer_cases():
    """ORT's optimizers over sequences of three tensors: (name, op, scalars, sequences, attributes, outputs)."""
    shapes = [(3, 4), (5,), (2, 2, 3)]

    def tensors(scale=1.0, positive=False):
        return [np.abs(normal(*s, scale=scale)) if positive else normal(*s, scale=scale) for s in shapes]

    def adamw(step, **attributes):
        return ({"learning_rate": np.array([0.01], np.float32), "step": np.array([step], np.int64)},
                {"params": tensors(), "gradients": tensors(0.1), "first_order_moments": tensors(0.01) if step > 1
                 else [np.zeros(s, np.float32) for s in shapes],
                 "second_order_moments": tensors(1e-4, positive=True) if step > 1
                 else [np.zeros(s, np.float32) for s in shapes]}, attributes, 4)

    return [
        ("AdamWOptimizer_mode1_step1", "AdamWOptimizer",
         *adamw(1, alpha=0.9, beta=0.999, epsilon=1e-6, weight_decay=0.0, correct_bias=1, adam_mode=1)),
        ("AdamWOptimizer_mode1_step7_decay", "AdamWOptimizer",
         *adamw(7, alpha=0.9, beta=0.999, epsilon=1e-6, weight_decay=0.01, correct_bias=1, adam_mode=1)),
        ("AdamWOptimizer_mode1_uncorrected", "AdamWOptimizer",
         *adamw(3, alpha=0.8, beta=0.99, epsilon=1e-8, weight_decay=0.05, correct_bias=0, adam_mode=1)),
        ("AdamWOptimizer_mode0_step4_decay", "AdamWOptimizer",
         *adamw(4, alpha=0.9, beta=0.999, epsilon=1e-8, weight_decay=0.01, correct_bias=1, adam_mode=0)),
        # (learning_rate, params, gradients), as ORT's onnxblock SGD block wires them.
        ("SGDOptimizerV2", "SGDOptimizerV2", {"learning_rate": np.array([0.05], np.float32)},
         {"params": tensors(), "gradients": tensors()}, {}, 2),
    ]


def main(out: str) -> None:
    import onnxruntime

    def run(model, feeds):
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)

    def encoded(value):
        return {"sequence": [encode(np.asarray(v)) for v in value]} if isinstance(value, list) else encode(
            np.asarray(value))

    records = []
    for name, op_type, inputs, attributes, n_outputs, domain, *output_types in cases():
        inputs = {k: (np.asarray(v) if v is not None else None) for k, v in inputs.items()}
        model = one_node(op_type, inputs, attributes, n_outputs, domain, *output_types)
        feeds = {k: v for k, v in inputs.items() if v is not None}
        outputs = run(model, feeds)
        records.append({"name": name, "model": base64.b64encode(model.SerializeToString()).decode(),
                        "inputs": {k: encode(v) for k, v in feeds.items()},
                        "outputs": [encode(np.asarray(o)) for o in outputs]})
        print(name, [np.asarray(o).shape for o in outputs])
    optimizers = []
    for name, op_type, scalars, sequences, attributes, n_outputs in optimizer_cases():
        model = optimizer_node(op_type, scalars, sequences, attributes, n_outputs)
        feeds = {**scalars, **{k: [t.copy() for t in v] for k, v in sequences.items()}}
        outputs = run(model, feeds)
        optimizers.append({"name": name, "model": base64.b64encode(model.SerializeToString()).decode(),
                           "inputs": {k: encoded(v) for k, v in {**scalars, **sequences}.items()},
                           "outputs": [encoded(o) for o in outputs]})
        print(name, [len(o) if isinstance(o, list) else np.asarray(o).shape for o in outputs])
    with open(out, "w") as f:
        json.dump({"onnxruntime": onnxruntime.__version__, "cases": records, "optimizer_cases": optimizers}, f)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
