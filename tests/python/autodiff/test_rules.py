"""Every gradient rule against central differences in float64.

Each case runs with static declared shapes and with symbolic ones ("dynamic": every
dimension a name, so the rules must compute sizes at run time), on onnxruntime (which
inlines the org.onnxtrain function bodies), onnx.reference (for ops onnxruntime has no
float64 kernel for) and onnxtrain (fused kernels; skipped while it lacks a kernel).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

from .gradcheck import RUNTIMES, C, F, GradCase, V, check_or_skip, gradient_params

I64 = np.int64
NO_REFERENCE = tuple(r for r in RUNTIMES if r != "reference")


def case(id: str, op: str, inputs: dict, attrs: dict | None = None, **kw) -> GradCase:
    return GradCase(id=id, op=op, inputs=inputs, attrs=attrs or {}, **kw)


def unary(op: str, **input_kw) -> list[GradCase]:
    return [
        case(f"{op}", op, {"x": F(2, 3, **input_kw)}),
        case(f"{op}-4d", op, {"x": F(2, 1, 2, 3, **input_kw)}),
    ]


def binary(op: str, **b_kw) -> list[GradCase]:
    return [
        case(f"{op}-same", op, {"a": F(2, 3), "b": F(2, 3, **b_kw)}),
        case(f"{op}-broadcast-row", op, {"a": F(2, 3), "b": F(3, **b_kw)}),
        case(f"{op}-broadcast-both", op, {"a": F(2, 1, 4), "b": F(3, 1, **b_kw)}),
        case(f"{op}-broadcast-first", op, {"a": F(1, 3), "b": F(4, 2, 3, **b_kw)}),
        case(f"{op}-scalar", op, {"a": F(2, 3), "b": F(**b_kw)}),
        case(f"{op}-constant", op, {"a": F(2, 3), "b": C(np.linspace(0.5, 1.5, 3))}),
    ]


ELEMENTWISE = [
    *binary("Add"),
    *binary("Sub"),
    *binary("Mul"),
    *binary("Div", low=0.5, high=2.0),
    case("Pow-float-exponent", "Pow", {"x": F(2, 3, low=0.5, high=2.0), "e": F(3, low=0.5, high=2.5)}),
    case("Pow-constant-2", "Pow", {"x": F(2, 3), "e": C(2.0)}),
    case("Pow-constant-3", "Pow", {"x": F(2, 3), "e": C(3.0)}),
    case("Pow-int-exponent", "Pow", {"x": F(2, 3), "e": V(np.array([1, 2, 3], I64))}),
    *unary("Neg"),
    *unary("Sqrt", low=0.5, high=2.0),
    *unary("Exp"),
    *unary("Log", low=0.5, high=2.0),
    *unary("Sin"),
    *unary("Cos"),
    *unary("Tanh"),
    *unary("Atan"),
    # onnx.reference computes Erf in float32, onnxruntime has no float64 Erf
    *[dataclasses.replace(c, runtimes=NO_REFERENCE, forward_runtime="onnxtrain") for c in unary("Erf")],
    *unary("Abs", away_from=[0.0]),
    *unary("Reciprocal", low=0.5, high=2.0),
    case("Clip-min-max", "Clip", {"x": F(3, 4, away_from=[-0.5, 0.5]), "min": F(low=-0.5, high=-0.5), "max": F(low=0.5, high=0.5)}),
    case("Clip-min-only", "Clip", {"x": F(3, 4, away_from=[-0.3]), "min": C(-0.3)}),
    case("Clip-max-only", "Clip", {"x": F(3, 4, away_from=[0.3]), "_min": F(), "max": C(0.3)}),
    case("Clip-none", "Clip", {"x": F(3, 4)}),
    case("Max-2", "Max", {"a": F(2, 3), "b": F(3)}),
    case("Max-3", "Max", {"a": F(2, 3), "b": F(2, 3), "c": F(1, 3)}),
    case("Max-1", "Max", {"a": F(2, 3)}),
    case("Min-2", "Min", {"a": F(2, 3), "b": F(2, 1)}),
    case("Sum-3", "Sum", {"a": F(2, 3), "b": F(3), "c": F(2, 1)}),
    case("Mean-3", "Mean", {"a": F(2, 3), "b": F(3), "c": F(2, 3)}),
    case("Where-broadcast", "Where", {"c": V(np.array([[True, False, True], [False, True, True]])), "x": F(2, 3), "y": F(3)}),
    case("Where-scalar", "Where", {"c": V(np.array([True, False, True])), "x": F(), "y": F(2, 3)}),
    case("Cast-double", "Cast", {"x": F(2, 3)}, {"to": 11}),
    case("CastLike-double", "CastLike", {"x": F(2, 3), "like": F(1, grad=False)}, opset=15),
    # Piecewise constant: the gradient is zero almost everywhere (inputs away from the steps).
    *[case(f"{op}-zero", op, {"x": F(2, 3, away_from=steps)})
      for op, steps in [("Floor", range(-4, 5)), ("Ceil", range(-4, 5)), ("Round", [k + 0.5 for k in range(-5, 5)]),
                        ("Sign", [0.0])]],
    case("Identity", "Identity", {"x": F(2, 3)}),
]

MATH = [
    case("MatMul-2d", "MatMul", {"a": F(3, 4), "b": F(4, 5)}),
    case("MatMul-3d-2d", "MatMul", {"a": F(2, 3, 4), "b": F(4, 5)}),
    case("MatMul-4d-2d", "MatMul", {"a": F(2, 2, 3, 4), "b": F(4, 5)}),
    case("MatMul-batched", "MatMul", {"a": F(2, 3, 4), "b": F(2, 4, 5)}),
    case("MatMul-broadcast-a", "MatMul", {"a": F(3, 4), "b": F(2, 4, 5)}),
    case("MatMul-broadcast-batch", "MatMul", {"a": F(2, 1, 3, 4), "b": F(3, 4, 2)}),
    case("MatMul-vector-matrix", "MatMul", {"a": F(4), "b": F(2, 4, 5)}),
    case("MatMul-matrix-vector", "MatMul", {"a": F(2, 3, 4), "b": F(4)}),
    case("MatMul-vector-vector", "MatMul", {"a": F(4), "b": F(4)}),
    case("MatMul-unknown-rank", "MatMul", {"a": F(2, 3, 4), "b": F(2, 4, 5)}, shapes=("unknown",)),
    *[
        case(f"Gemm-tA{ta}-tB{tb}", "Gemm", {"a": F(*((4, 3) if ta else (3, 4))), "b": F(*((5, 4) if tb else (4, 5))), "c": F(5)},
             {"transA": ta, "transB": tb})
        for ta in (0, 1)
        for tb in (0, 1)
    ],
    case("Gemm-alpha-beta", "Gemm", {"a": F(3, 4), "b": F(5, 4), "c": F(3, 5)}, {"alpha": 0.5, "beta": 2.0, "transB": 1}),
    case("Gemm-c-row", "Gemm", {"a": F(3, 4), "b": F(4, 5), "c": F(1, 5)}),
    case("Gemm-c-column", "Gemm", {"a": F(3, 4), "b": F(4, 5), "c": F(3, 1)}),
    case("Gemm-c-scalar", "Gemm", {"a": F(3, 4), "b": F(4, 5), "c": F()}),
    case("Gemm-no-c", "Gemm", {"a": F(3, 4), "b": F(4, 5)}),
    case("Einsum-matmul", "Einsum", {"a": F(3, 4), "b": F(4, 5)}, {"equation": "ij,jk->ik"}),
    case("Einsum-batched", "Einsum", {"a": F(2, 3, 4), "b": F(2, 4, 5)}, {"equation": "bij,bjk->bik"}),
    case("Einsum-ellipsis", "Einsum", {"a": F(2, 3, 4), "b": F(4, 5)}, {"equation": "...ij,jk->...ik"}),
    case("Einsum-sum", "Einsum", {"a": F(3, 4)}, {"equation": "ij->i"}),
    case("Einsum-outer", "Einsum", {"a": F(3), "b": F(4)}, {"equation": "i,j->ij"}),
    case("Einsum-implicit", "Einsum", {"a": F(3, 4), "b": F(4, 5)}, {"equation": "ij,jk"}),
    case("Einsum-transpose", "Einsum", {"a": F(3, 4, 2)}, {"equation": "ijk->kji"}),
    case("Einsum-summed-and-kept", "Einsum", {"a": F(3, 4, 2), "b": F(4)}, {"equation": "ijk,j->i"}),
]

ACTIVATION = [
    *unary("Relu", away_from=[0.0]),
    *unary("Sigmoid"),
    case("Gelu", "Gelu", {"x": F(2, 3)}, opset=20, runtimes=NO_REFERENCE, forward_runtime="onnxtrain"),
    case("Gelu-tanh", "Gelu", {"x": F(2, 3)}, {"approximate": "tanh"}, opset=20),
    case("LeakyRelu", "LeakyRelu", {"x": F(2, 3, away_from=[0.0])}, {"alpha": 0.2}),
    case("LeakyRelu-default", "LeakyRelu", {"x": F(2, 3, away_from=[0.0])}),
    case("Elu", "Elu", {"x": F(2, 3, away_from=[0.0])}, {"alpha": 0.7}),
    case("Selu", "Selu", {"x": F(2, 3, away_from=[0.0])}),
    case("Selu-attrs", "Selu", {"x": F(2, 3, away_from=[0.0])}, {"alpha": 1.5, "gamma": 2.0}),
    case("HardSigmoid", "HardSigmoid", {"x": F(3, 4, low=-4, high=4, away_from=[-2.5, 2.5])}),
    case("HardSigmoid-attrs", "HardSigmoid", {"x": F(3, 4, low=-4, high=4, away_from=[-1.0, 1.5])}, {"alpha": 0.4, "beta": 0.4}),
    case("HardSwish", "HardSwish", {"x": F(3, 4, low=-5, high=5, away_from=[-3.0, 3.0])}, opset=14),
    case("Softplus", "Softplus", {"x": F(2, 3)}),
    case("Softmax-last", "Softmax", {"x": F(2, 3, 4)}),
    case("Softmax-axis0", "Softmax", {"x": F(2, 3, 4)}, {"axis": 0}),
    case("Softmax-axis-2", "Softmax", {"x": F(2, 3, 4)}, {"axis": -2}),
    case("LogSoftmax-last", "LogSoftmax", {"x": F(2, 3, 4)}),
    case("LogSoftmax-axis1", "LogSoftmax", {"x": F(2, 3, 4)}, {"axis": 1}),
    case("Dropout-inference", "Dropout", {"x": F(2, 3)}),
    case("Dropout-ratio-no-training", "Dropout", {"x": F(2, 3), "ratio": C(0.5)}),
    case("Dropout-training-off", "Dropout", {"x": F(2, 3), "ratio": C(0.5), "training": C(False)}),
    case("Dropout-training-ratio-0", "Dropout", {"x": F(2, 3), "ratio": C(0.0), "training": C(True)}, n_outputs=2),
]

SHAPE = [
    case("Reshape", "Reshape", {"x": F(2, 3, 4), "shape": C([4, -1], I64)}),
    case("Reshape-zero", "Reshape", {"x": F(2, 3, 4), "shape": C([0, 12], I64)}),
    case("Reshape-allowzero", "Reshape", {"x": F(2, 3, 4), "shape": C([6, 4], I64)}, {"allowzero": 1}),
    case("Reshape-dynamic-shape", "Reshape", {"x": F(2, 3, 4), "shape": V([3, 8], I64)}),
    *[case(f"Flatten-axis{a}", "Flatten", {"x": F(2, 3, 4)}, {"axis": a}) for a in (0, 1, 2, -1)],
    case("Squeeze-axes", "Squeeze", {"x": F(2, 1, 3, 1), "axes": C([1, -1], I64)}),
    case("Squeeze-all", "Squeeze", {"x": F(2, 1, 3, 1)}),
    case("Unsqueeze", "Unsqueeze", {"x": F(2, 3), "axes": C([0, -1], I64)}),
    case("Transpose-perm", "Transpose", {"x": F(2, 3, 4)}, {"perm": [1, 2, 0]}),
    case("Transpose-default", "Transpose", {"x": F(2, 3, 4)}),
    case("Expand", "Expand", {"x": F(3, 1), "shape": C([2, 3, 4], I64)}),
    case("Expand-same-rank", "Expand", {"x": F(1, 4), "shape": C([3, 4], I64)}),
    case("Expand-smaller-shape", "Expand", {"x": F(2, 3), "shape": C([1], I64)}),
    case("Concat-axis0", "Concat", {"a": F(1, 3), "b": F(2, 3), "c": F(3, 3)}, {"axis": 0}),
    case("Concat-axis-1", "Concat", {"a": F(2, 1), "b": F(2, 3), "c": C(np.ones((2, 2)))}, {"axis": -1}),
    case("Split-input", "Split", {"x": F(2, 6), "split": C([1, 2, 3], I64)}, {"axis": 1}, n_outputs=3),
    case("Split-equal", "Split", {"x": F(6, 2)}, {"axis": 0}, n_outputs=2),
    case("Split-num-outputs", "Split", {"x": F(2, 7)}, {"axis": -1, "num_outputs": 3}, n_outputs=3, opset=18),
    case(
        "Split-one-output-used",
        "Split",
        {"x": F(2, 6)},
        n_outputs=1,
        nodes=lambda i, o: [helper.make_node("Split", i, ["a", o[0], "b"], axis=1)],
    ),
    case("Slice", "Slice", {"x": F(4, 5), "starts": C([1, 0], I64), "ends": C([3, 4], I64)}),
    case("Slice-axes-negative", "Slice", {"x": F(4, 5, 3), "starts": C([-3], I64), "ends": C([-1], I64), "axes": C([-2], I64)}),
    case("Slice-out-of-range", "Slice", {"x": F(4, 5), "starts": C([-100, 2], I64), "ends": C([100, 2**62], I64), "axes": C([0, 1], I64)}),
    case("Slice-steps-1", "Slice", {"x": F(4, 5), "starts": C([1], I64), "ends": C([4], I64), "axes": C([1], I64), "steps": C([1], I64)}),
    case("Slice-steps-2", "Slice", {"x": F(4, 5), "starts": C([0, 1], I64), "ends": C([4, 5], I64), "axes": C([0, 1], I64), "steps": C([2, 3], I64)}),
    case("Slice-steps-negative", "Slice", {"x": F(4, 5), "starts": C([-1], I64), "ends": C([-100], I64), "axes": C([1], I64), "steps": C([-2], I64)}),
    case("Slice-runtime-starts", "Slice", {"x": F(4, 5), "starts": V([1], I64), "ends": V([3], I64), "axes": V([1], I64)}),
    case("Slice-int32", "Slice", {"x": F(4, 5), "starts": C([1], np.int32), "ends": C([3], np.int32)}),
    case("Pad", "Pad", {"x": F(2, 3), "pads": C([1, 0, 2, 1], I64)}),
    # onnx.reference (numpy.pad) rejects negative pads
    case("Pad-negative", "Pad", {"x": F(3, 4), "pads": C([-1, 1, 0, -2], I64)}, runtimes=NO_REFERENCE),
    case("Pad-constant-value", "Pad", {"x": F(2, 3), "pads": C([1, 1, 1, 1], I64), "value": F()}),
    case("Pad-axes", "Pad", {"x": F(2, 3, 4), "pads": C([1, 2, 0, 1], I64), "_value": F(), "axes": C([0, -1], I64)}, opset=18),
    case("Tile", "Tile", {"x": F(2, 3), "repeats": C([2, 3], I64)}),
    case("Tile-3d", "Tile", {"x": F(2, 1, 3), "repeats": C([1, 4, 2], I64)}),
    case("Trilu-upper", "Trilu", {"x": F(4, 5)}),
    case("Trilu-lower-k", "Trilu", {"x": F(2, 4, 5), "k": C(1, I64)}, {"upper": 0}),
]

GATHER = [
    case("Gather-axis0", "Gather", {"x": F(5, 3), "i": V([[0, 2], [4, 2]], I64)}),
    case("Gather-axis1-negative-indices", "Gather", {"x": F(2, 5, 3), "i": V([-1, 0, 1, 0], I64)}, {"axis": 1}),
    case("Gather-axis-1", "Gather", {"x": F(2, 5, 3), "i": V([[2], [0]], I64)}, {"axis": -1}),
    case("Gather-scalar-index", "Gather", {"x": F(4, 3), "i": V(2, I64)}),
    case("Gather-int32", "Gather", {"x": F(4, 3), "i": V([1, 1, 3], np.int32)}),
    case("GatherElements", "GatherElements", {"x": F(3, 4), "i": V([[0, 1, 1, 2], [2, 2, 0, 1]], I64)}, opset=16),
    case("GatherElements-axis1", "GatherElements", {"x": F(3, 4), "i": V([[0, 3], [1, 1], [-1, 2]], I64)}, {"axis": 1}, opset=16),
    case("GatherND", "GatherND", {"x": F(3, 4, 2), "i": V([[0, 1], [2, 3], [0, 1]], I64)}, opset=16),
    # onnx.reference's GatherElements wants indices as large as the data on other axes
    case("ScatterElements", "ScatterElements", {"x": F(3, 4), "i": V([[0, 1], [2, 0]], I64), "u": F(2, 2)}, {"axis": 1},
         runtimes=NO_REFERENCE),
    case("ScatterElements-add", "ScatterElements", {"x": F(3, 4), "i": V([[0, 0], [2, 0]], I64), "u": F(2, 2)}, {"reduction": "add"}, opset=16,
         runtimes=NO_REFERENCE),
    case("ScatterND", "ScatterND", {"x": F(4, 3), "i": V([[1], [3]], I64), "u": F(2, 3)}),
    case("ScatterND-add", "ScatterND", {"x": F(4, 3), "i": V([[1], [1]], I64), "u": F(2, 3)}, {"reduction": "add"}, opset=16),
    case("TopK", "TopK", {"x": F(3, 5), "k": C([2], I64)}, n_outputs=2),
    case("TopK-smallest-axis0", "TopK", {"x": F(4, 3), "k": C([3], I64)}, {"axis": 0, "largest": 0}, n_outputs=2),
]

F32 = np.float32
RESIZE = [
    case("Resize-nearest-scales", "Resize", {"x": F(1, 2, 3, 4), "_roi": F(), "scales": C([1, 1, 2, 1.5], F32)},
         {"mode": "nearest"}),
    case("Resize-nearest-sizes-floor", "Resize", {"x": F(1, 1, 4, 5), "_roi": F(), "_scales": F(), "sizes": C([1, 1, 3, 7], I64)},
         {"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"}),
    case("Resize-linear-up", "Resize", {"x": F(1, 2, 3, 4), "_roi": F(), "scales": C([1, 1, 2, 2], F32)}, {"mode": "linear"}),
    case("Resize-linear-down-align", "Resize", {"x": F(2, 1, 5, 6), "_roi": F(), "_scales": F(), "sizes": C([2, 1, 3, 4], I64)},
         {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    case("Resize-linear-3d-input", "Resize", {"x": F(2, 3, 5), "_roi": F(), "scales": C([1, 1, 1.6], F32)},
         {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    case("Resize-cubic", "Resize", {"x": F(1, 1, 4, 4), "_roi": F(), "scales": C([1, 1, 1.5, 2], F32)}, {"mode": "cubic"}),
    # onnx.reference rejects Resize's axes attribute
    case("Resize-axes", "Resize", {"x": F(1, 2, 3, 4), "_roi": F(), "scales": C([2, 0.5], F32)},
         {"mode": "linear", "axes": [2, 3]}, opset=18, runtimes=NO_REFERENCE),
]

NN = [
    case("Conv-2d", "Conv", {"x": F(2, 3, 5, 5), "w": F(4, 3, 3, 3), "b": F(4)}, {"pads": [1, 1, 1, 1]}),
    case("Conv-no-bias-stride", "Conv", {"x": F(1, 2, 6, 7), "w": F(3, 2, 3, 2)}, {"strides": [2, 3]}),
    case("Conv-asymmetric-pads", "Conv", {"x": F(1, 2, 5, 6), "w": F(2, 2, 3, 3)}, {"pads": [0, 1, 2, 0], "strides": [2, 2]}),
    case("Conv-dilations", "Conv", {"x": F(1, 2, 7, 7), "w": F(2, 2, 2, 3), "b": F(2)}, {"dilations": [2, 3], "pads": [1, 1, 1, 1]}),
    # onnx.reference gets grouped ConvTranspose and some strided Conv shapes wrong
    case("Conv-group", "Conv", {"x": F(2, 4, 5, 5), "w": F(6, 2, 3, 3), "b": F(6)}, {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]},
         runtimes=NO_REFERENCE),
    case("Conv-depthwise", "Conv", {"x": F(1, 3, 4, 4), "w": F(3, 1, 3, 3)}, {"group": 3, "kernel_shape": [3, 3]}),
    case("Conv-1d", "Conv", {"x": F(2, 2, 7), "w": F(3, 2, 3), "b": F(3)}, {"strides": [2], "pads": [1, 0]}),
    case("Conv-3d", "Conv", {"x": F(1, 2, 4, 3, 4), "w": F(2, 2, 2, 2, 2)}, {"pads": [1, 0, 1, 0, 1, 0]}),
    # onnx.reference computes the wrong output size for auto_pad VALID with strides
    case("Conv-valid", "Conv", {"x": F(1, 2, 5, 5), "w": F(2, 2, 3, 3)}, {"auto_pad": "VALID", "strides": [2, 2]},
         runtimes=NO_REFERENCE, forward_runtime="onnxtrain"),
    case("ConvTranspose", "ConvTranspose", {"x": F(1, 2, 3, 3), "w": F(2, 3, 3, 3), "b": F(3)}, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    case("ConvTranspose-output-padding", "ConvTranspose", {"x": F(1, 2, 3, 4), "w": F(2, 2, 3, 2)},
         {"strides": [2, 3], "output_padding": [1, 2]}),
    case("ConvTranspose-dilations", "ConvTranspose", {"x": F(1, 4, 3, 3), "w": F(4, 1, 2, 2)}, {"dilations": [2, 1]}),
    case("MaxPool-2x2", "MaxPool", {"x": F(2, 2, 4, 4)}, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    case("MaxPool-overlap-pads", "MaxPool", {"x": F(1, 2, 5, 5)}, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    case("MaxPool-ceil", "MaxPool", {"x": F(1, 1, 5, 5)}, {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    case("MaxPool-dilations", "MaxPool", {"x": F(1, 1, 6, 6)}, {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    case("MaxPool-1d", "MaxPool", {"x": F(2, 2, 7)}, {"kernel_shape": [3], "strides": [2]}),
    case("MaxPool-with-indices", "MaxPool", {"x": F(1, 2, 4, 4)}, {"kernel_shape": [2, 2], "strides": [2, 2]}, n_outputs=2),
    case("AveragePool", "AveragePool", {"x": F(2, 2, 4, 4)}, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    case("AveragePool-pads-exclude", "AveragePool", {"x": F(1, 2, 5, 5)}, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    case("AveragePool-pads-include", "AveragePool", {"x": F(1, 2, 5, 5)},
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 2], "count_include_pad": 1}),
    case("AveragePool-ceil", "AveragePool", {"x": F(1, 1, 5, 6)}, {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
    case("AveragePool-1d", "AveragePool", {"x": F(2, 2, 7)}, {"kernel_shape": [3], "strides": [1]}),
    case("GlobalAveragePool", "GlobalAveragePool", {"x": F(2, 3, 4, 5)}),
    case("GlobalAveragePool-1d", "GlobalAveragePool", {"x": F(2, 3, 4)}),
    case("GlobalMaxPool", "GlobalMaxPool", {"x": F(2, 3, 4, 5)}),
]

NORMALIZATION = [
    case("LayerNormalization", "LayerNormalization", {"x": F(2, 3, 4), "scale": F(4), "b": F(4)}, n_outputs=1),
    case("LayerNormalization-axis1", "LayerNormalization", {"x": F(2, 3, 4), "scale": F(3, 4), "b": F(3, 4)}, {"axis": 1}),
    case("LayerNormalization-no-bias", "LayerNormalization", {"x": F(3, 5), "scale": F(5)}, {"epsilon": 1e-3}),
    case("LayerNormalization-stats", "LayerNormalization", {"x": F(3, 5), "scale": F(5), "b": F(5)}, n_outputs=3,
         seed_outputs=[0]),
    case("BatchNormalization-training", "BatchNormalization",
         {"x": F(3, 2, 2, 3), "scale": F(2), "b": F(2), "mean": V(np.zeros(2)), "var": V(np.ones(2))},
         {"training_mode": 1}, opset=15, n_outputs=3, seed_outputs=[0]),
    case("BatchNormalization-training-2d", "BatchNormalization",
         {"x": F(5, 3), "scale": F(3), "b": F(3), "mean": V(np.zeros(3)), "var": V(np.ones(3))},
         {"training_mode": 1, "epsilon": 1e-3}, opset=15, n_outputs=3, seed_outputs=[0]),
    case("BatchNormalization-inference", "BatchNormalization",
         {"x": F(2, 3, 2, 2), "scale": F(3), "b": F(3), "mean": F(3), "var": F(3, low=0.5, high=2.0)}),
    case("InstanceNormalization", "InstanceNormalization", {"x": F(2, 3, 2, 3), "scale": F(3), "b": F(3)}),
    case("InstanceNormalization-1d", "InstanceNormalization", {"x": F(2, 2, 5), "scale": F(2), "b": F(2)}, {"epsilon": 1e-2}),
    case("GroupNormalization-18", "GroupNormalization", {"x": F(2, 4, 2, 3), "scale": F(2), "b": F(2)}, {"num_groups": 2}, opset=18),
]


def reduce_cases(op: str, **x_kw) -> list[GradCase]:
    cases = []
    for opset in (13, 18):
        axes_input = opset >= 18 or op == "ReduceSum"

        def with_axes(axes, **attrs):
            if axes is None:
                return {"x": F(2, 3, 4, **x_kw)}, attrs
            if axes_input:
                return {"x": F(2, 3, 4, **x_kw), "axes": C(axes, I64)}, attrs
            return {"x": F(2, 3, 4, **x_kw)}, {**attrs, "axes": axes}

        for label, axes, attrs in [
            ("axis1-keep", [1], {}),
            ("axes-drop", [0, -1], {"keepdims": 0}),
            ("all-keep", None, {}),
            ("all-drop", None, {"keepdims": 0}),
        ]:
            inputs, attrs = with_axes(axes, **attrs)
            cases.append(case(f"{op}-{opset}-{label}", op, inputs, attrs, opset=opset))
        if axes_input and op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"):
            # onnxruntime 1.23 mishandles noop_with_empty_axes in float64
            cases.append(case(f"{op}-{opset}-noop", op, {"x": F(2, 3)}, {"noop_with_empty_axes": 1}, opset=opset,
                              runtimes=("reference", "onnxtrain"), forward_runtime="reference"))
            cases.append(case(f"{op}-{opset}-runtime-axes", op, {"x": F(2, 3, 4, **x_kw), "axes": V([2, 0], I64)},
                              {"keepdims": 0}, opset=opset))
    return cases


REDUCE = [
    *reduce_cases("ReduceSum"),
    *reduce_cases("ReduceMean"),
    *reduce_cases("ReduceMax"),
    *reduce_cases("ReduceMin"),
    *reduce_cases("ReduceLogSumExp"),
    *reduce_cases("ReduceLogSum", low=0.5, high=2.0),
    *reduce_cases("ReduceL2"),
    *reduce_cases("ReduceL1", away_from=[0.0]),
    *reduce_cases("ReduceSumSquare"),
    *reduce_cases("ReduceProd", low=0.5, high=2.0),
]


def loss_cases(op: str) -> list[GradCase]:
    labels_2d = V([1, 0, 3], I64)
    labels_3d = V([[1, 0], [3, 3]], I64)
    weights = np.array([0.5, 1.5, 1.0, 0.8])
    # onnx.reference averages NegativeLogLikelihoodLoss over ignored elements too
    runtimes = ("onnxruntime", "onnxtrain") if op == "NegativeLogLikelihoodLoss" else RUNTIMES
    cases = []
    for reduction in ("mean", "sum", "none"):
        cases += [
            case(f"{op}-{reduction}", op, {"x": F(3, 4), "t": labels_2d}, {"reduction": reduction}),
            case(f"{op}-{reduction}-weights", op, {"x": F(3, 4), "t": labels_2d, "w": V(weights)},
                 {"reduction": reduction}),
            case(f"{op}-{reduction}-ignore", op, {"x": F(3, 4), "t": V([1, -1, 3], I64)},
                 {"reduction": reduction, "ignore_index": -1}, runtimes=runtimes),
            case(f"{op}-{reduction}-3d-weights-ignore", op, {"x": F(2, 4, 2), "t": labels_3d, "w": V(weights)},
                 {"reduction": reduction, "ignore_index": 3}, runtimes=runtimes),
        ]
    return cases


LOSS = [
    *loss_cases("SoftmaxCrossEntropyLoss"),
    *loss_cases("NegativeLogLikelihoodLoss"),
    case("SoftmaxCrossEntropyLoss-log-prob", "SoftmaxCrossEntropyLoss", {"x": F(3, 4), "t": V([1, 0, 3], I64)}, n_outputs=2),
    # Class counts past one vector of the gradient's loop over the classes, with a tail, and
    # classes strided by the positions of a 3-D input.
    case("SoftmaxCrossEntropyLoss-37-classes", "SoftmaxCrossEntropyLoss", {"x": F(3, 37), "t": V([36, 0, 17], I64)}),
    case("SoftmaxCrossEntropyLoss-3d-19-classes", "SoftmaxCrossEntropyLoss",
         {"x": F(2, 19, 3), "t": V([[18, 0, 5], [1, 9, 18]], I64)}, {"reduction": "sum"}),
]

# A few graphs of several nodes: fan-out, shared inputs, chains.
GRAPHS = [
    case("fan-out", "Mul", {"x": F(2, 3)},
         nodes=lambda i, o: [helper.make_node("Mul", [i[0], i[0]], ["sq"]), helper.make_node("Add", ["sq", i[0]], o)]),
    case("fan-out-3", "Sum", {"x": F(2, 3), "y": F(3)},
         nodes=lambda i, o: [helper.make_node("Tanh", [i[0]], ["t"]), helper.make_node("Mul", ["t", i[1]], ["m"]),
                             helper.make_node("Sum", ["t", "m", i[0]], o)]),
    case("two-outputs", "Split", {"x": F(2, 4)}, n_outputs=2,
         nodes=lambda i, o: [helper.make_node("Sigmoid", [i[0]], [o[0]]), helper.make_node("Exp", [o[0]], [o[1]])]),
    case("integer-path", "Cast", {"x": F(2, 3), "y": F(2, 3)},
         nodes=lambda i, o: [helper.make_node("Cast", [i[0]], ["xi"], to=7), helper.make_node("Cast", ["xi"], ["xf"], to=11),
                             helper.make_node("Mul", ["xf", i[1]], o)]),
]

ALL = ELEMENTWISE + MATH + ACTIVATION + SHAPE + GATHER + RESIZE + NN + NORMALIZATION + REDUCE + LOSS + GRAPHS


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(ALL))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)



@pytest.mark.parametrize("runtime", ["reference", "onnxtrain"])
def test_group_normalization_21_matches_torch(runtime: str) -> None:
    """Opset-21 GroupNormalization (per-channel scale): onnxruntime and onnx.reference
    compute its forward in float32 (stash_type), too coarse for finite differences, so the
    gradient is checked against torch.autograd in float64 instead."""
    torch = pytest.importorskip("torch")
    import onnxtrain
    from onnx import TensorProto

    rng = np.random.default_rng(0)
    x, scale, bias, dy = rng.standard_normal((2, 4, 2, 3)), rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal((2, 4, 2, 3))
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-5)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in "xsb"],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    from .gradcheck import make_session

    grad_model = onnxtrain.build_gradient_graph(model, ["x", "s", "b"], outputs=["y"])
    ours = make_session(grad_model, runtime)({"x": x, "s": scale, "b": bias, "y_grad": dy})
    xt, st, bt = (torch.tensor(v, requires_grad=True) for v in (x, scale, bias))
    torch.nn.functional.group_norm(xt, 2, st, bt, 1e-5).backward(torch.tensor(dy))
    for got, t in zip(ours[1:], (xt, st, bt)):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-7, atol=1e-9)
