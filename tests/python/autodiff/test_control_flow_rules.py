"""Gradient rule of If (rules/control.cc): the gradient of each branch, built by the gradient
builder over the branch, becomes a branch of an If on the same condition. Central
differences in float64 (gradcheck.py, rtol / atol 1e-6) for both values of the condition,
with branches that read outer-scope values, a value only one branch reads, and an If whose
output flows on into other ops; and against torch.autograd."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import F, GradCase, V, check_or_skip, gradient_params, make_session

D = TensorProto.DOUBLE


def vi(name: str):
    return helper.make_tensor_value_info(name, D, None)


def if_nodes(inputs: list[str], outputs: list[str]):
    """then: tanh(x * w); else: sin(x) + w * w. Both read x and w from the enclosing graph;
    the If's output is multiplied by x again, so x's gradient flows both through and around it."""
    c, x, w = inputs
    then_branch = helper.make_graph(
        [helper.make_node("Mul", [x, w], ["xw"]), helper.make_node("Tanh", ["xw"], ["t"])], "then", [], [vi("t")]
    )
    else_branch = helper.make_graph(
        [
            helper.make_node("Sin", [x], ["s"]),
            helper.make_node("Mul", [w, w], ["ww"]),
            helper.make_node("Add", ["s", "ww"], ["e"]),
        ],
        "else",
        [],
        [vi("e")],
    )
    return [
        helper.make_node("If", [c], ["h"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Mul", ["h", x], outputs),
    ]


def one_sided_nodes(inputs: list[str], outputs: list[str]):
    """then: x * w; else: relu(w), which does not read x (x's gradient is zeros there)."""
    c, x, w = inputs
    then_branch = helper.make_graph([helper.make_node("Mul", [x, w], ["t"])], "then", [], [vi("t")])
    else_branch = helper.make_graph([helper.make_node("Relu", [w], ["e"])], "else", [], [vi("e")])
    return [helper.make_node("If", [c], outputs, then_branch=then_branch, else_branch=else_branch)]


IF = [
    GradCase(id=f"If-{label}-{cond}", op="If", inputs={"c": V(np.array(cond)), "x": F(2, 3), "w": F(2, 3)},
             nodes=nodes, runtimes=("onnxruntime", "onnxtrain"))
    for label, nodes in (("both-branches-read", if_nodes), ("one-branch-reads", one_sided_nodes))
    for cond in (True, False)
]


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(IF))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


@pytest.mark.parametrize("cond", [True, False])
def test_if_matches_torch(cond: bool) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w, dy = rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    nodes = if_nodes(["c", "x", "w"], ["y"])
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, [])] + [
        helper.make_tensor_value_info(n, D, [2, 3]) for n in ("x", "w")
    ]
    graph = helper.make_graph(nodes, "g", inputs, [vi("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, ["x", "w"], outputs=["y"])
    outputs = make_session(grad_model, "onnxtrain")({"c": np.array(cond), "x": x, "w": w, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    h = torch.tanh(xt * wt) if cond else torch.sin(xt) + wt * wt
    (h * xt).backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["w_grad"], wt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cond", [True, False])
def test_if_in_staged_forward_and_backward_runs(cond: bool) -> None:
    # ModuleGraphBuilder + TrainingAgent: forward and backward as two partial runs of one plan;
    # the backward If reads x and w, which the run state keeps from the forward stage.
    torch = pytest.importorskip("torch")
    from onnxtrain.training import ModuleGraphBuilder, TrainingAgent

    rng = np.random.default_rng(1)
    x, w, dy = rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", D, [2, 3])]
    graph = helper.make_graph(if_nodes(["c", "x", "w"], ["y"]), "g", inputs, [vi("y")],
                              [onnx_tensor("w", w)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    builder = ModuleGraphBuilder(model, ["w"], ["x"])
    builder.build()
    agent = TrainingAgent(builder.get_model(), builder.get_graph_info())
    for _ in range(2):
        outputs, state = agent.run_forward({"c": np.array(cond), "x": x, "w": w})
        grads = agent.run_backward({"y_grad": dy}, state)
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        h = torch.tanh(xt * wt) if cond else torch.sin(xt) + wt * wt
        y = h * xt
        y.backward(torch.tensor(dy))
        np.testing.assert_allclose(outputs[0], y.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grads["w"], wt.grad.numpy(), rtol=1e-12, atol=1e-12)


def onnx_tensor(name: str, value: np.ndarray):
    from onnx import numpy_helper

    return numpy_helper.from_array(value, name)
