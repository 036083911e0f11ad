"""Gradient rules of DepthToSpace, SpaceToDepth, CenterCropPad, ReverseSequence,
TensorScatter, MaxUnpool, Swish, Shrink and MeanVarianceNormalization: central
differences in float64 (gradcheck.py, rtol / atol 1e-6). Ops newer than onnxruntime 1.23
(Swish and TensorScatter, opset 24) run on onnxtrain and onnx.reference only, with the
reference's forward for the differences."""

from __future__ import annotations

import numpy as np
import pytest

from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import C, F, GradCase, check_or_skip, gradient_params, make_session

I64 = np.int64
NEW = ("onnxtrain", "reference")  # what onnxruntime 1.23 cannot run


def case(id: str, op: str, inputs: dict, attrs: dict | None = None, **kw) -> GradCase:
    if kw.get("opset") == 24:
        kw.update(runtimes=NEW, forward_runtime="reference")
    return GradCase(id=id, op=op, inputs=inputs, attrs=attrs or {}, **kw)


def max_pool_indices(shape, kernel):
    """Indices as MaxPool (kernel = stride) gives them: one distinct position per window."""
    n, c, *spatial = shape
    out = [s // k for s, k in zip(spatial, kernel)]
    rng = np.random.default_rng(3)
    indices = np.zeros((n, c, *out), I64)
    for index in np.ndindex(*indices.shape):
        within = [rng.integers(0, k) for k in kernel]
        position = [o * k + w for o, k, w in zip(index[2:], kernel, within)]
        flat = index[0] * c + index[1]
        for p, s in zip(position, spatial):
            flat = flat * s + p
        indices[index] = flat
    return indices


REARRANGE = [
    case("DepthToSpace-DCR", "DepthToSpace", {"x": F(2, 8, 2, 3)}, {"blocksize": 2}, opset=13),
    case("DepthToSpace-CRD", "DepthToSpace", {"x": F(1, 18, 2, 2)}, {"blocksize": 3, "mode": "CRD"}, opset=13),
    case("SpaceToDepth", "SpaceToDepth", {"x": F(2, 3, 4, 6)}, {"blocksize": 2}, opset=13),
    case("CenterCropPad-crop-and-pad", "CenterCropPad", {"x": F(5, 4, 3), "shape": C(np.array([3, 7, 3], I64))},
         opset=18),
    case("CenterCropPad-axes", "CenterCropPad", {"x": F(2, 7, 4), "shape": C(np.array([4, 6], I64))},
         {"axes": [-2, 2]}, opset=18),
    case("ReverseSequence-time-major", "ReverseSequence", {"x": F(4, 3, 2), "lens": C(np.array([4, 1, 3], I64))},
         {"batch_axis": 1, "time_axis": 0}, opset=13),
    case("ReverseSequence-batch-major", "ReverseSequence", {"x": F(3, 4, 2), "lens": C(np.array([2, 4, 1], I64))},
         {"batch_axis": 0, "time_axis": 1}, opset=13),
    case("TensorScatter-linear", "TensorScatter",
         {"cache": F(2, 3, 6, 2), "update": F(2, 3, 2, 2), "w": C(np.array([1, 4], I64))}, opset=24),
    case("TensorScatter-circular", "TensorScatter",
         {"cache": F(2, 5, 3), "update": F(2, 3, 3), "w": C(np.array([4, 1], I64))},
         {"mode": "circular", "axis": 1}, opset=24),
    case("TensorScatter-no-indices", "TensorScatter", {"cache": F(1, 4, 2), "update": F(1, 2, 2)}, {"axis": 1},
         opset=24),
    case("MaxUnpool-2d", "MaxUnpool", {"x": F(1, 2, 2, 3), "i": C(max_pool_indices((1, 2, 4, 6), (2, 2)))},
         {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=13),
    case("MaxUnpool-output-shape", "MaxUnpool",
         {"x": F(1, 1, 2, 2), "i": C(max_pool_indices((1, 1, 4, 4), (2, 2))), "shape": C(np.array([1, 1, 5, 5], I64))},
         {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=13, runtimes=("onnxtrain", "reference")),
]

ACTIVATION = [
    case("Swish", "Swish", {"x": F(3, 4)}, opset=24),
    case("Swish-alpha", "Swish", {"x": F(3, 4)}, {"alpha": -0.7}, opset=24),
    # onnxruntime's float64 Shrink rounds through float32: the reference runs the forward.
    case("Shrink", "Shrink", {"x": F(3, 5, away_from=(-0.5, 0.5))}, opset=13, forward_runtime="reference"),
    case("Shrink-bias", "Shrink", {"x": F(4, 4, away_from=(-1.5, 1.5))}, {"lambd": 1.5, "bias": 0.25}, opset=13,
         forward_runtime="reference"),
]

# MeanVarianceNormalization's function body (which onnxruntime and onnx.reference run) adds
# a float epsilon, which breaks it in float64: onnxtrain alone, checked against torch too.
NORMALIZATION = [
    case("MeanVarianceNormalization", "MeanVarianceNormalization", {"x": F(2, 3, 2, 3)}, opset=13,
         runtimes=("onnxtrain",), forward_runtime="onnxtrain"),
    case("MeanVarianceNormalization-axes", "MeanVarianceNormalization", {"x": F(3, 4, 5)}, {"axes": [1, 2]},
         opset=13, runtimes=("onnxtrain",), forward_runtime="onnxtrain"),
]

ALL = REARRANGE + ACTIVATION + NORMALIZATION


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(ALL))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


def test_mean_variance_normalization_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x, dy = rng.standard_normal((2, 3, 4, 2)) * 3 + 1, rng.standard_normal((2, 3, 4, 2))
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2, 3])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["x"], outputs=["y"])
    outputs = make_session(grad_model, "onnxtrain")({"x": x, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    xt = torch.tensor(x, requires_grad=True)
    d = xt - xt.mean(dim=(0, 2, 3), keepdim=True)
    yt = d / ((d * d).mean(dim=(0, 2, 3), keepdim=True).sqrt() + 1e-9)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["y"], yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), rtol=1e-9, atol=1e-9)
