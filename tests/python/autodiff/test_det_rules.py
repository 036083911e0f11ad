"""Gradient rule of Det (cofactors through Det of the minors): central differences in
float64 (gradcheck.py, rtol / atol 1e-6) and torch.linalg.det's autograd, singular
matrices included (where det X^-T is undefined, and where torch 2.9 returns zeros for a
matrix with a zero column)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import F, GradCase, check_or_skip, gradient_params, make_session

DET = [
    GradCase(id=f"Det-{'x'.join(map(str, shape))}", op="Det", inputs={"x": F(*shape)}, opset=13)
    for shape in [(2, 2), (3, 3), (2, 4, 4), (2, 1, 3, 3)]
] + [
    # 1 x 1: the minors are 0 x 0 (determinant 1), which onnx.reference cannot gather.
    GradCase(id="Det-1x1", op="Det", inputs={"x": F(3, 1, 1)}, opset=13, runtimes=("onnxtrain",)),
]


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(DET))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


def test_det_gradient_matches_torch_singular() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 4, 4))
    x[1, 2] = x[1, 0] + x[1, 3]  # rank 3: det 0, gradient not 0
    x[2, :, 1] = 0  # a zero column
    dy = rng.standard_normal(3)
    node = helper.make_node("Det", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["x"], outputs=["y"])
    outputs = make_session(grad_model, "onnxtrain")({"x": x, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    xt = torch.tensor(x, requires_grad=True)
    torch.linalg.det(xt).backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["x_grad"][:2], xt.grad.numpy()[:2], rtol=1e-9, atol=1e-9)
    assert np.abs(ours["x_grad"][1]).max() > 1e-3
    # torch 2.9 returns zeros for the matrix with a zero column; its cofactors are not.
    eps, numeric = 1e-6, np.zeros((4, 4))
    for index in np.ndindex(4, 4):
        plus, minus = x[2].copy(), x[2].copy()
        plus[index] += eps
        minus[index] -= eps
        numeric[index] = (np.linalg.det(plus) - np.linalg.det(minus)) / (2 * eps) * dy[2]
    np.testing.assert_allclose(ours["x_grad"][2], numeric, rtol=1e-6, atol=1e-6)
    assert np.abs(numeric).max() > 1e-3
