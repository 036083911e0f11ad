"""Gradient rules of LRN and CumSum: central differences in float64 (gradcheck.py, rtol /
atol 1e-6) and torch.autograd (float64, rtol 1e-7 / atol 1e-9).

LRN's float64 forward for the finite differences runs on onnxtrain: onnxruntime has no
float64 LRN and onnx.reference's LRN is wrong (it loops over the batch axis instead of
the channels). The rule is also checked in float32 on onnxruntime, forward and gradient
graph alike, and against torch.nn.functional.local_response_norm (same window for odd
sizes)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import C, F, GradCase, V, check_case_float32, check_or_skip, gradient_params, make_session

I64 = np.int64


def case(id: str, op: str, inputs: dict, attrs: dict | None = None, **kw) -> GradCase:
    return GradCase(id=id, op=op, inputs=inputs, attrs=attrs or {}, **kw)


LRN = [
    case(f"LRN-size{size}", "LRN", {"x": F(2, 6, 3, 2)}, {"size": size, "alpha": 0.5, "beta": 0.6, "bias": 1.2},
         runtimes=("onnxtrain",), forward_runtime="onnxtrain")
    for size in (1, 2, 3, 5)
] + [
    case("LRN-3d-defaults", "LRN", {"x": F(2, 4, 5)}, {"size": 3}, runtimes=("onnxtrain",),
         forward_runtime="onnxtrain"),
]

CUMSUM = [
    case(f"CumSum-{label}", "CumSum", {"x": F(2, 3, 4), "axis": C(np.array(axis, I64))}, attrs, opset=14)
    for label, axis, attrs in [
        ("axis0", 0, {}),
        ("axis1", 1, {}),
        ("negative-axis", -1, {}),
        ("exclusive", 1, {"exclusive": 1}),
        ("reverse", 2, {"reverse": 1}),
        ("exclusive-reverse", 0, {"exclusive": 1, "reverse": 1}),
    ]
] + [
    case("CumSum-axis-fed", "CumSum", {"x": F(3, 4), "axis": V(np.array(1, np.int32))}, {"reverse": 1}, opset=14),
]

ALL = LRN + CUMSUM


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(ALL))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


# onnxruntime's LRN takes odd sizes and 4-D input only.
@pytest.mark.parametrize("case", [c for c in LRN if c.attrs["size"] % 2 == 1 and "3d" not in c.id], ids=lambda c: c.id)
def test_lrn_float32_onnxruntime(case: GradCase) -> None:
    check_case_float32(case, "static")  # eps 1e-2, rtol 2e-2, atol 2e-3


@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("runtime", ["onnxruntime", "onnxtrain"])
def test_lrn_matches_torch(runtime: str, size: int) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 7, 3, 3)) * 2, rng.standard_normal((2, 7, 3, 3))
    attrs = {"size": size, "alpha": 0.25, "beta": 0.75, "bias": 2.0}  # exact in float32
    node = helper.make_node("LRN", ["x"], ["y"], **attrs)
    dtype = TensorProto.DOUBLE if runtime == "onnxtrain" else TensorProto.FLOAT
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, list(x.shape))],
                              [helper.make_tensor_value_info("y", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["x"], outputs=["y"])
    np_type = np.float64 if runtime == "onnxtrain" else np.float32
    outputs = make_session(grad_model, runtime)({"x": x.astype(np_type), "y_grad": dy.astype(np_type)})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.local_response_norm(xt, size, alpha=0.25, beta=0.75, k=2.0)
    y.backward(torch.tensor(dy))
    tol = dict(rtol=1e-7, atol=1e-9) if runtime == "onnxtrain" else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours["y"], y.detach().numpy(), **tol)
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), **tol)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_matches_torch(exclusive: int, reverse: int) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w, dy = rng.standard_normal((3, 5)), rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    # A weight reaching the output through a cumulative sum: y = CumSum(x * w).
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]),
             helper.make_node("CumSum", ["xw", "axis"], ["y"], exclusive=exclusive, reverse=reverse)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, [3, 5]) for n in ("x", "w")],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [helper.make_tensor("axis", TensorProto.INT64, [], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["w"], outputs=["y"])
    outputs = make_session(grad_model, "onnxtrain")({"x": x, "w": w, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    wt = torch.tensor(w, requires_grad=True)
    xw = torch.tensor(x) * wt
    if reverse:
        xw = xw.flip(1)
    y = xw.cumsum(1)
    if exclusive:
        y = torch.nn.functional.pad(y[:, :-1], (1, 0))
    if reverse:
        y = y.flip(1)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["y"], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["w_grad"], wt.grad.numpy(), rtol=1e-12, atol=1e-12)
