"""Gradient rule of RoiAlign (mode avg, w.r.t. X): central differences in float64
(gradcheck.py, rtol / atol 1e-6; the forward on onnxtrain, or onnx.reference at opset 16)
and torchvision.ops.roi_align's autograd (float64, 1e-10)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import C, F, GradCase, check_or_skip, gradient_params, make_session

I64 = np.int64
ROIS = np.array([[0.3, 0.6, 4.2, 3.1], [1.0, -1.5, 6.4, 5.6], [2.5, 2.0, 2.9, 2.2], [-2.0, 3.0, 1.0, 9.0]])
BATCH = np.array([0, 1, 1, 0], I64)


def roi_case(id: str, attrs: dict, opset: int = 16, rois=ROIS) -> GradCase:
    inputs = {"x": F(2, 2, 5, 6), "rois": C(rois), "batch": C(BATCH)}
    forward = "reference" if opset >= 16 else "onnxtrain"  # the reference gets opset 10's default wrong
    return GradCase(id=id, op="RoiAlign", inputs=inputs, attrs=attrs, opset=opset, forward_runtime=forward,
                    runtimes=("onnxtrain", "reference") if opset >= 16 else ("onnxtrain",))


ROI_ALIGN = [
    roi_case(f"RoiAlign-{transform}-ratio{ratio}",
             {"coordinate_transformation_mode": transform, "output_height": 3, "output_width": 2,
              "sampling_ratio": ratio, "spatial_scale": scale})
    for (transform, ratio), scale in zip(itertools.product(["half_pixel", "output_half_pixel"], [0, 2]),
                                         [1.0, 0.75, 1.0, 1.25])
] + [
    roi_case("RoiAlign-opset13-default", {"output_height": 2, "output_width": 2}, opset=13),
]


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(ROI_ALIGN))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


@pytest.mark.parametrize("aligned, ratio", [(True, 0), (False, 0), (True, 3), (False, 2)])
def test_roi_align_matches_torchvision(aligned: bool, ratio: int) -> None:
    torch = pytest.importorskip("torch")
    ops = pytest.importorskip("torchvision.ops")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 7, 8))
    attrs = {"output_height": 3, "output_width": 4, "sampling_ratio": ratio, "spatial_scale": 0.5,
             "coordinate_transformation_mode": "half_pixel" if aligned else "output_half_pixel"}
    rois = ROIS * 2
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [helper.make_tensor("rois", TensorProto.DOUBLE, list(rois.shape), rois.ravel()),
         helper.make_tensor("batch", TensorProto.INT64, [len(BATCH)], BATCH)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["x"], outputs=["y"])
    dy = rng.standard_normal((len(BATCH), 3, 3, 4))
    outputs = make_session(grad_model, "onnxtrain")({"x": x, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    xt = torch.tensor(x, requires_grad=True)
    boxes = torch.tensor(np.concatenate([BATCH[:, None].astype(np.float64), rois], 1))
    yt = ops.roi_align(xt, boxes, (3, 4), spatial_scale=0.5, sampling_ratio=ratio, aligned=aligned)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["y"], yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), rtol=1e-10, atol=1e-10)
