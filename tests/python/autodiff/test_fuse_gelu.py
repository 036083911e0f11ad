"""GELU spelled out by exporters becomes one fused node (src/passes/fuse_gelu.h).

The gradient builder (and so generate_artifacts) fuses x * 0.5 * (1 + erf(x / sqrt 2)) and
its tanh approximation into org.onnxtrain::Gelu / GeluTanh before opset 20, the standard
Gelu from 20 on; the gradient is then one GeluGrad / GeluTanhGrad. These tests check that
every usual spelling is found, that the fused model computes what the original did (in
onnxtrain and in stock onnxruntime, which inlines the function bodies), that the
gradients match torch.autograd, and that nothing is fused when a value inside the pattern
is needed elsewhere.
"""

from __future__ import annotations

import io
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

F = TensorProto.FLOAT
rng = np.random.default_rng(7)
X = rng.uniform(-4, 4, (5, 6)).astype(np.float32)
DY = rng.standard_normal((5, 6)).astype(np.float32)


def run(model: onnx.ModelProto, feeds: dict, runtime: str) -> dict[str, np.ndarray]:
    data = model.SerializeToString()
    if runtime == "onnxruntime":
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
    else:
        session = onnxtrain.InferenceSession(data)
        names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def ops(model: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(n.domain, n.op_type) for n in model.graph.node}


def scalar(name: str, value: float) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32)))


def erf_gelu(order: str, opset: int = 17, extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """y = gelu(x) written out, with the products in the given order."""
    nodes = [scalar("half", 0.5), scalar("one", 1.0)]
    if order == "mul_sqrt_half":
        nodes += [scalar("c", math.sqrt(0.5)), helper.make_node("Mul", ["c", "x"], ["scaled"])]
    else:
        nodes += [scalar("c", math.sqrt(2.0)), helper.make_node("Div", ["x", "c"], ["scaled"])]
    nodes += [helper.make_node("Erf", ["scaled"], ["erf"]), helper.make_node("Add", ["one", "erf"], ["one_plus"])]
    if order in ("x_first", "mul_sqrt_half"):  # (x * (1 + erf)) * 0.5
        nodes += [helper.make_node("Mul", ["x", "one_plus"], ["p"]), helper.make_node("Mul", ["p", "half"], ["y"])]
    elif order == "half_x_first":  # (x * 0.5) * (1 + erf)
        nodes += [helper.make_node("Mul", ["half", "x"], ["p"]), helper.make_node("Mul", ["p", "one_plus"], ["y"])]
    else:  # x * ((1 + erf) * 0.5)
        nodes += [helper.make_node("Mul", ["one_plus", "half"], ["p"]), helper.make_node("Mul", ["x", "p"], ["y"])]
    outputs = [helper.make_tensor_value_info(name, F, None) for name in ("y", *extra_outputs)]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", F, ["n", 6])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def reference(x: np.ndarray, tanh: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """gelu(x) and its derivative, from torch in float64."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.gelu(t, approximate="tanh" if tanh else "none")
    (dx,) = torch.autograd.grad(y, t, torch.ones_like(t))
    return y.detach().numpy(), dx.numpy()


@pytest.mark.parametrize("order", ["x_first", "half_x_first", "half_last", "mul_sqrt_half"])
@pytest.mark.parametrize("runtime", ["onnxtrain", "onnxruntime"])
def test_every_spelling_fuses(order: str, runtime: str) -> None:
    g = onnxtrain.build_gradient_graph(erf_gelu(order), ["x"], ["y"])
    assert ("org.onnxtrain", "Gelu") in ops(g) and ("org.onnxtrain", "GeluGrad") in ops(g)
    assert not {op for _, op in ops(g)} & {"Erf", "Div", "Mul", "Add"}
    out = run(g, {"x": X, "y_grad": DY}, runtime)
    y, slope = reference(X)
    np.testing.assert_allclose(out["y"], y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["x_grad"], DY * slope, rtol=1e-5, atol=1e-6)


def test_opset_20_fuses_into_the_standard_op() -> None:
    g = onnxtrain.build_gradient_graph(erf_gelu("x_first", opset=20), ["x"], ["y"])
    assert ("", "Gelu") in ops(g)
    assert not any(f.name == "Gelu" for f in g.functions)
    out = run(g, {"x": X, "y_grad": DY}, "onnxtrain")
    np.testing.assert_allclose(out["x_grad"], DY * reference(X)[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("needed", ["output", "wrt"])
def test_nothing_fuses_when_an_inner_value_is_needed(needed: str) -> None:
    model = erf_gelu("x_first", extra_outputs=("erf",) if needed == "output" else ())
    wrt = ["x", "one_plus"] if needed == "wrt" else ["x"]
    g = onnxtrain.build_gradient_graph(model, wrt, ["y"] + (["erf"] if needed == "output" else []))
    assert ("", "Erf") in ops(g) and ("org.onnxtrain", "Gelu") not in ops(g)
    feeds = {"x": X, "y_grad": DY}
    if needed == "output":
        feeds["erf_grad"] = np.zeros_like(X)
    out = run(g, feeds, "onnxtrain")
    np.testing.assert_allclose(out["x_grad"], DY * reference(X)[1], rtol=1e-5, atol=1e-6)


def torch_export(approximate: str, dtype: torch.dtype) -> tuple[onnx.ModelProto, torch.nn.Module]:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(approximate=approximate), torch.nn.Linear(16, 3))
    module = module.to(dtype)
    buffer = io.BytesIO()
    example = torch.zeros(2, 6, dtype=dtype)
    torch.onnx.export(module, (example,), buffer, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}})
    return onnx.load_from_string(buffer.getvalue()), module


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exported_gelu_gradients_match_torch(approximate: str, dtype: torch.dtype) -> None:
    model, module = torch_export(approximate, dtype)
    fused = "GeluTanh" if approximate == "tanh" else "Gelu"
    params = [name for name, _ in module.named_parameters()]
    g = onnxtrain.build_gradient_graph(model, params + ["x"], ["y"])
    assert ("org.onnxtrain", fused) in ops(g) and ("org.onnxtrain", fused + "Grad") in ops(g)
    x = torch.tensor(X, dtype=dtype, requires_grad=True)
    dy = torch.tensor(rng.standard_normal((5, 3)), dtype=dtype)
    module.zero_grad()
    y = module(x)
    y.backward(dy)
    expected = {name + "_grad": p.grad.numpy() for name, p in module.named_parameters()}
    expected["x_grad"] = x.grad.numpy()
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    out = run(g, {"x": x.detach().numpy(), "y_grad": dy.numpy()}, "onnxtrain")
    np.testing.assert_allclose(out["y"], y.detach().numpy(), **tolerance)
    for name, value in expected.items():
        np.testing.assert_allclose(out[name], value, err_msg=name, **tolerance)
