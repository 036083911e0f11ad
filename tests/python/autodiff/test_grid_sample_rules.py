"""Gradient rules of GridSample (w.r.t. X and grid) and AffineGrid (w.r.t. theta): central
differences in float64 (gradcheck.py, rtol / atol 1e-6) and torch.autograd
(torch.nn.functional.grid_sample and affine_grid, float64, rtol / atol 1e-9).

The finite differences run the forward model on onnxtrain: onnx.reference computes
GridSample's coordinates in float32 and returns AffineGrid in float32, too coarse for
differences of 1e-6. The gradient graphs (standard ONNX) run on onnxtrain and, where it
has float64 kernels, on onnxruntime (not for cubic with border padding, where
onnxruntime's forward departs from the spec: it clamps the taps but not the coordinate)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import C, F, GradCase, V, check_or_skip, gradient_params, make_session

I64 = np.int64
RUNTIMES = ("onnxtrain", "onnxruntime")


def case(id: str, op: str, inputs: dict, attrs: dict | None = None, **kw) -> GradCase:
    kw.setdefault("runtimes", RUNTIMES)
    return GradCase(id=id, op=op, inputs=inputs, attrs=attrs or {}, opset=20, forward_runtime="onnxtrain", **kw)


GRID_SAMPLE = [
    case(f"GridSample-{mode}-{padding}-align{align}", "GridSample",
         {"x": F(2, 2, 4, 5), "grid": F(2, 3, 2, 2, low=-1.3, high=1.3)},
         {"mode": mode, "padding_mode": padding, "align_corners": align},
         runtimes=("onnxtrain",) if (mode, padding) == ("cubic", "border") else RUNTIMES)
    for mode, padding, align in itertools.product(["nearest", "linear", "cubic"], ["zeros", "border", "reflection"],
                                                  [0, 1])
] + [
    case(f"GridSample-5d-{mode}-{padding}", "GridSample",
         {"x": F(1, 2, 3, 4, 3), "grid": F(1, 2, 2, 2, 3, low=-1.2, high=1.2)}, {"mode": mode, "padding_mode": padding},
         runtimes=("onnxtrain",) if mode == "cubic" else RUNTIMES)  # onnxruntime: cubic in 4-D only
    for mode, padding in [("linear", "zeros"), ("linear", "border"), ("linear", "reflection"), ("cubic", "zeros"),
                          ("nearest", "border")]
] + [
    case("GridSample-1d-far", "GridSample", {"x": F(1, 3, 6), "grid": F(1, 5, 1, low=-4, high=4)},
         {"padding_mode": "reflection", "align_corners": 1}),
    case("GridSample-opset16-bicubic", "GridSample", {"x": F(1, 1, 4, 4), "grid": F(1, 2, 3, 2, low=-1, high=1)},
         {"mode": "bicubic", "padding_mode": "border"}, runtimes=("onnxtrain",)),
    case("GridSample-grid-only", "GridSample", {"x": C(np.arange(20.0).reshape(1, 1, 4, 5) ** 1.5),
                                                "grid": F(1, 3, 3, 2, low=-1, high=1)}),
]
GRID_SAMPLE[-2].opset = 16

AFFINE_GRID = [
    case(f"AffineGrid-2d-align{align}", "AffineGrid", {"theta": F(2, 2, 3), "size": C(np.array([2, 3, 4, 5], I64))},
         {"align_corners": align})
    for align in (0, 1)
] + [
    case("AffineGrid-3d", "AffineGrid", {"theta": F(2, 3, 4), "size": C(np.array([2, 1, 3, 2, 4], I64))}),
    case("AffineGrid-size-fed", "AffineGrid", {"theta": F(1, 2, 3), "size": V(np.array([1, 2, 1, 3], I64))},
         {"align_corners": 1}),
]


def spatial_transformer(inputs: list[str], outputs: list[str]) -> list:
    theta, size, x = inputs
    return [helper.make_node("AffineGrid", [theta, size], ["sampling_grid"]),
            helper.make_node("GridSample", [x, "sampling_grid"], outputs, padding_mode="border")]


CHAINED = [
    GradCase(id="AffineGrid-GridSample", op="AffineGrid",
             inputs={"theta": F(2, 2, 3, low=-0.8, high=0.8), "size": C(np.array([2, 3, 3, 4], I64)),
                     "x": F(2, 3, 5, 5)},
             nodes=spatial_transformer, opset=20, forward_runtime="onnxtrain", runtimes=RUNTIMES),
]

ALL = GRID_SAMPLE + AFFINE_GRID + CHAINED


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(ALL))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


def grid_sample_model(attrs: dict, x_shape: tuple, grid_shape: tuple):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x_shape)),
         helper.make_tensor_value_info("grid", TensorProto.DOUBLE, list(grid_shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


# torch pads each bicubic tap without first folding the coordinate, as ONNX does: the two
# agree for grids inside [-1, 1], so bicubic is compared there only.
@pytest.mark.parametrize("mode, padding, align, spread", [
    (m, p, a, 1.0 if m == "bicubic" else 1.4)
    for m, p, a in itertools.product(["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [0, 1])
])
def test_grid_sample_matches_torch(mode: str, padding: str, align: int, spread: float) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 6))
    grid = rng.uniform(-spread, spread, (2, 4, 3, 2)) * (0.999 if mode == "bicubic" else 1)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    model = grid_sample_model(attrs, x.shape, grid.shape)
    grad_model = onnxtrain.build_gradient_graph(model, ["x", "grid"], outputs=["y"])
    (y,) = make_session(model, "onnxtrain")({"x": x, "grid": grid})
    dy = rng.standard_normal(y.shape)
    outputs = make_session(grad_model, "onnxtrain")({"x": x, "grid": grid, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(grid, requires_grad=True)
    yt = torch.nn.functional.grid_sample(xt, gt, mode=mode, padding_mode=padding, align_corners=bool(align))
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours["grid_grad"], gt.grad.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_torch(align: int) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    theta = rng.standard_normal((2, 2, 3))
    size = [2, 3, 4, 5]
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("theta", TensorProto.DOUBLE, [2, 2, 3]),
         helper.make_tensor_value_info("size", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("grid", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["theta"], outputs=["grid"])
    dgrid = rng.standard_normal((2, 4, 5, 2))
    outputs = make_session(grad_model, "onnxtrain")({"theta": theta, "size": np.array(size, I64), "grid_grad": dgrid})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    tt = torch.tensor(theta, requires_grad=True)
    gt = torch.nn.functional.affine_grid(tt, size, align_corners=bool(align))
    gt.backward(torch.tensor(dgrid))
    np.testing.assert_allclose(ours["grid"], gt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["theta_grad"], tt.grad.numpy(), rtol=1e-9, atol=1e-9)
