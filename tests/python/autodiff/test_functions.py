"""Every org.onnxtrain function: its standard-ONNX body against onnxtrain's fused kernel.

Each case calls one function on random inputs and runs the call three ways:

- onnxtrain as is: the fused kernel (domain org.onnxtrain has a kernel);
- onnxtrain with the function moved to another domain (org.onnxtrain.body), for which no
  kernel is registered, so the executor inlines the body;
- onnxruntime, which knows nothing of onnxtrain and inlines the body.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import helper

import onnxtrain
from onnxtrain import _C

from .gradcheck import Unsupported, make_session

BODY_DOMAIN = "org.onnxtrain.body"
rng = np.random.default_rng(0)


# The gradient accumulator and the optimizer steps share the one function library; their
# bodies are checked against the fused kernels in tests/python/training/test_artifacts.py.
TRAINING_FUNCTIONS = {"AccumulateGradient", "AdamWStep", "SGDStep", "SGDMomentumStep"}


def functions(opset: int) -> dict[str, onnx.FunctionProto]:
    return {f.name: f for f in onnx.load_from_string(_C.functions(opset)).functions}


@dataclasses.dataclass
class Call:
    id: str
    function: str
    make: Callable[[np.random.Generator], dict[str, np.ndarray]]  # inputs in order
    attrs: dict = dataclasses.field(default_factory=dict)
    n_outputs: int = 1
    opset: int = 17
    rtol: float = 1e-5
    atol: float = 1e-5


def model_for(call: Call, inputs: dict[str, np.ndarray], domain: str) -> onnx.ModelProto:
    function = onnx.FunctionProto()
    function.CopyFrom(functions(call.opset)[call.function])
    function.domain = domain
    outputs = [f"out{i}" for i in range(call.n_outputs)]
    node = helper.make_node(call.function, list(inputs), outputs, domain=domain, **call.attrs)
    graph = helper.make_graph(
        [node],
        call.id,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", call.opset), helper.make_opsetid(domain, 1)],
        functions=[function], ir_version=8,
    )


def f32(*shape, low=-1.0, high=1.0):
    return lambda r: r.uniform(low, high, shape).astype(np.float32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


def conv_inputs(x_shape, w_shape, pads, strides, dilations):
    def make(r):
        x = r.standard_normal(x_shape).astype(np.float32)
        w = r.standard_normal(w_shape).astype(np.float32)
        spatial = len(x_shape) - 2
        out = [
            (x_shape[2 + i] + pads[i] + pads[spatial + i] - ((w_shape[2 + i] - 1) * dilations[i] + 1)) // strides[i] + 1
            for i in range(spatial)
        ]
        dy = r.standard_normal((x_shape[0], w_shape[0], *out)).astype(np.float32)
        return {"dY": dy, "X": x, "W": w}

    return make


def run_onnxruntime_op(op: str, inputs: dict[str, np.ndarray], n_outputs: int, opset: int = 17, **attrs):
    import onnxruntime as ort

    outputs = [f"o{i}" for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), outputs, **attrs)], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)


def max_pool_inputs(x_shape, **attrs):
    def make(r):
        x = r.standard_normal(x_shape).astype(np.float32)
        y, indices = run_onnxruntime_op("MaxPool", {"x": x}, 2, **attrs)
        return {"dY": r.standard_normal(y.shape).astype(np.float32), "indices": indices, "shape": i64(x_shape)}

    return make


def average_pool_inputs(x_shape, **attrs):
    def make(r):
        x = r.standard_normal(x_shape).astype(np.float32)
        (y,) = run_onnxruntime_op("AveragePool", {"x": x}, 1, **attrs)
        return {"dY": r.standard_normal(y.shape).astype(np.float32), "shape": i64(x_shape)}

    return make


def layer_norm_inputs(x_shape, axis):
    def make(r):
        x = r.standard_normal(x_shape).astype(np.float32)
        axes = tuple(range(axis % len(x_shape), len(x_shape)))
        mean = x.mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-5)
        return {"dY": r.standard_normal(x_shape).astype(np.float32), "X": x,
                "scale": r.standard_normal(x_shape[axis % len(x_shape):]).astype(np.float32),
                "mean": mean.astype(np.float32), "inv_std_dev": inv.astype(np.float32)}

    return make


def sce_inputs(shape, labels, scalar_dy=False, label_dtype=np.int64):
    def make(r):
        scores = r.standard_normal(shape).astype(np.float32)
        log_prob = scores - np.log(np.exp(scores).sum(axis=1, keepdims=True))
        label = np.asarray(labels, label_dtype)
        dy = r.standard_normal(() if scalar_dy else label.shape).astype(np.float32)
        return {"dY": dy, "log_prob": log_prob.astype(np.float32), "label": label}

    return make


CALLS = [
    Call("ReduceToShape-rows", "ReduceToShape", lambda r: {"g": f32(2, 3, 4)(r), "s": i64([4])}),
    # a bias gradient wider than the kernel's block of 256 column sums, not a multiple of it
    Call("ReduceToShape-wide-rows", "ReduceToShape", lambda r: {"g": f32(3, 5, 300)(r), "s": i64([1, 300])}),
    Call("ReduceToShape-middle", "ReduceToShape", lambda r: {"g": f32(2, 3, 4)(r), "s": i64([3, 1])}),
    Call("ReduceToShape-mixed", "ReduceToShape", lambda r: {"g": f32(2, 3, 4, 5)(r), "s": i64([2, 1, 4, 1])}),
    Call("ReduceToShape-scalar", "ReduceToShape", lambda r: {"g": f32(2, 3)(r), "s": i64([]).reshape(0)}),
    Call("ReduceToShape-same", "ReduceToShape", lambda r: {"g": f32(2, 3)(r), "s": i64([2, 3])}),
    Call("ReluGrad", "ReluGrad", lambda r: {"dY": f32(3, 5)(r), "Y": np.maximum(f32(3, 5)(r), 0)}),
    Call("SigmoidGrad", "SigmoidGrad", lambda r: {"dY": f32(3, 5)(r), "Y": f32(3, 5, low=0, high=1)(r)}),
    Call("TanhGrad", "TanhGrad", lambda r: {"dY": f32(3, 5)(r), "Y": f32(3, 5)(r)}),
    Call("GeluGrad", "GeluGrad", lambda r: {"dY": f32(3, 5)(r), "X": f32(3, 5, low=-3, high=3)(r)}),
    Call("GeluTanhGrad", "GeluTanhGrad", lambda r: {"dY": f32(3, 5)(r), "X": f32(3, 5, low=-3, high=3)(r)}),
    Call("SoftmaxGrad-last", "SoftmaxGrad", lambda r: {"dY": f32(2, 3, 4)(r), "Y": f32(2, 3, 4, low=0)(r)}, {"axis": -1}),
    Call("SoftmaxGrad-axis1", "SoftmaxGrad", lambda r: {"dY": f32(2, 3, 4)(r), "Y": f32(2, 3, 4, low=0)(r)}, {"axis": 1}),
    Call("LogSoftmaxGrad", "LogSoftmaxGrad", lambda r: {"dY": f32(2, 3, 4)(r), "Y": f32(2, 3, 4, low=-3, high=0)(r)},
         {"axis": 0}),
    Call("GatherGrad-axis0", "GatherGrad",
         lambda r: {"dY": f32(2, 2, 3)(r), "shape": i64([5, 3]), "indices": i64([[0, 4], [4, -1]])}, {"axis": 0}),
    Call("GatherGrad-axis1", "GatherGrad",
         lambda r: {"dY": f32(2, 3, 4)(r), "shape": i64([2, 5, 4]), "indices": i64([1, 1, 3])}, {"axis": 1}),
    Call("GatherGrad-scalar-index", "GatherGrad",
         lambda r: {"dY": f32(2, 4)(r), "shape": i64([2, 3, 4]), "indices": i64(2)}, {"axis": -2}),
    *[
        Call(f"ConvGrad-{label}", "ConvGrad", conv_inputs(xs, ws, pads, strides, dil),
             {"pads": pads, "strides": strides, "dilations": dil, "group": group}, n_outputs=3, rtol=1e-4, atol=1e-4)
        for label, xs, ws, pads, strides, dil, group in [
            ("3x3", (2, 3, 6, 6), (4, 3, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
            ("strided", (2, 3, 7, 6), (4, 3, 3, 2), [1, 0, 0, 1], [2, 2], [1, 1], 1),
            ("dilated", (1, 2, 7, 7), (3, 2, 2, 3), [0, 1, 0, 1], [1, 2], [2, 2], 1),
            ("group", (2, 4, 5, 5), (6, 2, 3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 2),
            ("1d", (2, 3, 9), (2, 3, 3), [1, 1], [2], [1], 1),
            ("3d", (1, 2, 4, 4, 3), (2, 2, 2, 2, 2), [1, 0, 0, 0, 1, 1], [1, 2, 1], [1, 1, 1], 1),
            ("resnet-stem", (2, 3, 16, 16), (8, 3, 7, 7), [3, 3, 3, 3], [2, 2], [1, 1], 1),
            ("channels", (2, 32, 8, 8), (32, 32, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
            ("1x1-stride2", (2, 16, 8, 8), (32, 16, 1, 1), [0, 0, 0, 0], [2, 2], [1, 1], 1),
        ]
    ],
    Call("MaxPoolGrad-2x2", "MaxPoolGrad", max_pool_inputs((2, 3, 4, 4), kernel_shape=[2, 2], strides=[2, 2])),
    Call("MaxPoolGrad-overlap", "MaxPoolGrad",
         max_pool_inputs((2, 2, 7, 7), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    *[
        Call(f"AveragePoolGrad-{label}", "AveragePoolGrad", average_pool_inputs(xs, **attrs),
             {"kernel_shape": attrs["kernel_shape"], "pads": attrs.get("pads", [0] * 2 * len(attrs["kernel_shape"])),
              "strides": attrs.get("strides", [1] * len(attrs["kernel_shape"])),
              "dilations": [1] * len(attrs["kernel_shape"]), "count_include_pad": attrs.get("count_include_pad", 0)})
        for label, xs, attrs in [
            ("2x2", (2, 3, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}),
            ("pads", (1, 2, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
            ("pads-include", (1, 2, 5, 6),
             {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "count_include_pad": 1}),
            ("ceil", (1, 1, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ]
    ],
    Call("LayerNormalizationGrad-last", "LayerNormalizationGrad", layer_norm_inputs((2, 3, 8), -1), {"axis": -1},
         n_outputs=3),
    Call("LayerNormalizationGrad-axis1", "LayerNormalizationGrad", layer_norm_inputs((2, 3, 4), 1), {"axis": 1},
         n_outputs=3),
    Call("RMSNormalizationGrad-last", "RMSNormalizationGrad",
         lambda r: {"dY": f32(2, 3, 8)(r), "X": f32(2, 3, 8)(r), "scale": f32(8)(r)}, {"axis": -1, "epsilon": 1e-5},
         n_outputs=2),
    Call("RMSNormalizationGrad-axis1-broadcast", "RMSNormalizationGrad",
         lambda r: {"dY": f32(2, 3, 4)(r), "X": f32(2, 3, 4)(r), "scale": f32(3, 1)(r)}, {"axis": 1, "epsilon": 1e-3},
         n_outputs=2),
    Call("RMSNormalizationGrad-scale-over-leading", "RMSNormalizationGrad",
         lambda r: {"dY": f32(2, 3, 4)(r), "X": f32(2, 3, 4)(r), "scale": f32(3, 4)(r)}, {"axis": -1, "epsilon": 1e-5},
         n_outputs=2),
    Call("BatchNormalizationGrad", "BatchNormalizationGrad",
         lambda r: {"dY": f32(4, 3, 2, 2)(r), "X": f32(4, 3, 2, 2)(r), "scale": f32(3)(r)}, {"epsilon": 1e-5},
         n_outputs=3),
    Call("BatchNormalizationGrad-2d", "BatchNormalizationGrad",
         lambda r: {"dY": f32(6, 3)(r), "X": f32(6, 3)(r), "scale": f32(3)(r)}, {"epsilon": 1e-3}, n_outputs=3),
    Call("SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossGrad", sce_inputs((3, 5), [0, 4, -100]), {"mean": 0}),
    Call("SoftmaxCrossEntropyLossGrad-3d", "SoftmaxCrossEntropyLossGrad", sce_inputs((2, 4, 3), [[0, 1, 3], [2, 2, -1]]),
         {"mean": 0}),
    Call("SoftmaxCrossEntropyLossGrad-scalar-sum", "SoftmaxCrossEntropyLossGrad",
         sce_inputs((4, 6), [0, 5, 2, 2], scalar_dy=True), {"mean": 0}),
    Call("SoftmaxCrossEntropyLossGrad-scalar-mean", "SoftmaxCrossEntropyLossGrad",
         sce_inputs((4, 6), [0, 5, 2, 2], scalar_dy=True), {"mean": 1}),
    Call("SoftmaxCrossEntropyLossGrad-3d-mean-int32", "SoftmaxCrossEntropyLossGrad",
         sce_inputs((2, 4, 3), [[0, 1, 3], [2, 2, 1]], scalar_dy=True, label_dtype=np.int32), {"mean": 1}),
    # The fused GELU of models before opset 20 (passes/fuse_gelu.h).
    Call("Gelu", "Gelu", lambda r: {"X": f32(3, 17, low=-6.0, high=6.0)(r)}),
    Call("Gelu-float64", "Gelu", lambda r: {"X": r.uniform(-6, 6, (4, 9))}, rtol=1e-10, atol=1e-12),
    Call("GeluTanh-float64", "GeluTanh", lambda r: {"X": r.uniform(-6, 6, (4, 9))}, rtol=1e-10, atol=1e-12),
    Call("GeluTanh", "GeluTanh", lambda r: {"X": f32(3, 17, low=-6.0, high=6.0)(r)}),
]


def test_every_function_has_a_case() -> None:
    assert {c.function for c in CALLS} | TRAINING_FUNCTIONS == set(functions(17))


@pytest.mark.parametrize("call", CALLS, ids=[c.id for c in CALLS])
def test_body_matches_fused_kernel(call: Call) -> None:
    inputs = call.make(np.random.default_rng(abs(hash(call.id)) % 2**32))
    fused = make_session(model_for(call, inputs, "org.onnxtrain"), "onnxtrain")
    body = make_session(model_for(call, inputs, BODY_DOMAIN), "onnxtrain")
    ours = fused(inputs)
    for i, (a, b) in enumerate(zip(ours, body(inputs))):
        np.testing.assert_allclose(a, b, rtol=call.rtol, atol=call.atol, err_msg=f"output {i}: kernel vs inlined body")
    try:
        theirs = make_session(model_for(call, inputs, "org.onnxtrain"), "onnxruntime")(inputs)
    except Unsupported as e:  # e.g. onnxruntime has no float64 Erf; the body ran in onnxtrain above
        pytest.skip(f"onnxruntime cannot run the body: {e}")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a, b, rtol=call.rtol, atol=call.atol, err_msg=f"output {i}: kernel vs onnxruntime")


def test_kernels_are_registered() -> None:
    registered = {op for domain, op, *_ in onnxtrain.supported_ops() if domain == "org.onnxtrain"}
    assert set(functions(17)) <= registered
