"""Gradient rule of Col2Im (im2col by a constant table): central differences in float64
(gradcheck.py, rtol / atol 1e-6) and torch.nn.functional.fold's autograd."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import C, F, GradCase, check_or_skip, gradient_params, make_session

I64 = np.int64


def col2im_case(id: str, c: int, image, block, attrs=None) -> GradCase:
    attrs = attrs or {}
    r = len(image)
    strides, dilations = attrs.get("strides", [1] * r), attrs.get("dilations", [1] * r)
    pads = attrs.get("pads", [0] * (2 * r))
    count = 1
    for a in range(r):
        count *= (image[a] + pads[a] + pads[a + r] - dilations[a] * (block[a] - 1) - 1) // strides[a] + 1
    inputs = {"x": F(2, c * int(np.prod(block)), count), "image": C(np.array(image, I64)),
              "block": C(np.array(block, I64))}
    return GradCase(id=id, op="Col2Im", inputs=inputs, attrs=attrs, opset=18,
                    runtimes=("onnxtrain", "reference", "onnxruntime"))


COL2IM = [
    col2im_case("Col2Im-2d", 2, [4, 5], [2, 2]),
    col2im_case("Col2Im-strides-pads-dilations", 1, [5, 6], [2, 3],
                {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 1]}),
    col2im_case("Col2Im-3d", 1, [3, 3, 4], [2, 1, 2], {"pads": [0, 1, 0, 1, 0, 0]}),
]


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(COL2IM))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


def test_col2im_matches_torch_fold() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3 * 6, 4 * 4))
    attrs = {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 0]}
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [helper.make_tensor("image", TensorProto.INT64, [2], [7, 8]), helper.make_tensor("block", TensorProto.INT64, [2], [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["x"], outputs=["y"])
    dy = rng.standard_normal((2, 3, 7, 8))
    outputs = make_session(grad_model, "onnxtrain")({"x": x, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.fold(xt, (7, 8), (2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["y"], yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), rtol=1e-12, atol=1e-12)
