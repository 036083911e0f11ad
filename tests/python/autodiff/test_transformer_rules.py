"""Gradient rules of the opset-23 transformer ops (RMSNormalization, RotaryEmbedding,
Attention): central differences in float64 (gradcheck.py: rtol/atol 1e-6, eps 1e-6) on
onnxruntime (which inlines the function bodies), onnx.reference and onnxtrain, and
torch.autograd in float64 (rtol 1e-7, atol 1e-9)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import RUNTIMES, C, F, GradCase, Unsupported, V, check_case, make_session

OPSET = 23


def case(id: str, op: str, inputs: dict, attrs: dict | None = None, **kw) -> GradCase:
    kw.setdefault("opset", OPSET)
    return GradCase(id=id, op=op, inputs=inputs, attrs=attrs or {}, **kw)


RMS_NORMALIZATION = [
    case("RMSNormalization", "RMSNormalization", {"x": F(2, 3, 4), "scale": F(4)}),
    case("RMSNormalization-axis1", "RMSNormalization", {"x": F(2, 3, 4), "scale": F(3, 4)}, {"axis": 1}),
    case("RMSNormalization-axis0-eps", "RMSNormalization", {"x": F(3, 5), "scale": F(3, 5)},
         {"axis": 0, "epsilon": 1e-2}),
    case("RMSNormalization-scale-broadcast", "RMSNormalization", {"x": F(2, 3, 4), "scale": F(1, 4)}, {"axis": -1}),
    # onnxruntime's kernel refuses a scale that spans axes before `axis`; the spec allows it.
    case("RMSNormalization-scale-over-leading", "RMSNormalization", {"x": F(2, 3, 4), "scale": F(3, 4)},
         {"axis": -1}, runtimes=("reference", "onnxtrain"), forward_runtime="reference"),
    case("RMSNormalization-stash-double", "RMSNormalization", {"x": F(3, 6), "scale": F(6)}, {"stash_type": 11},
         runtimes=("onnxruntime", "onnxtrain")),  # onnx.reference refuses stash_type 11
    case("RMSNormalization-constant-scale", "RMSNormalization",
         {"x": F(2, 5), "scale": C(np.linspace(0.5, 1.5, 5))}),
]

ALL = RMS_NORMALIZATION


def _params():
    for c in ALL:
        for shapes in c.shapes:
            for runtime in c.runtimes:
                if runtime == "reference" and shapes == "dynamic":
                    continue
                yield pytest.param(c, shapes, runtime, id=f"{c.id}-{shapes}-{runtime}")


@pytest.mark.parametrize("case, shapes, runtime", list(_params()))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    try:
        check_case(case, runtime, shapes)
    except Unsupported as e:
        pytest.skip(f"{runtime}: {str(e).splitlines()[0][:160]}")


def double_model(nodes, inputs: dict[str, tuple], outputs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64 if t == "int64" else TensorProto.DOUBLE, shape)
         for n, (t, shape) in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.DOUBLE, None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)


def gradients(model: onnx.ModelProto, wrt: list[str], feeds: dict, dy: np.ndarray, runtime: str) -> dict:
    grad_model = onnxtrain.build_gradient_graph(model, wrt, outputs=["y"])
    run = make_session(grad_model, runtime)
    results = run({**feeds, "y_grad": dy})
    return dict(zip([o.name for o in grad_model.graph.output], results))


@pytest.mark.parametrize("runtime", ["onnxruntime", "onnxtrain"])
def test_rms_normalization_matches_torch(runtime: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, scale, dy = rng.standard_normal((2, 5, 8)), rng.standard_normal(8), rng.standard_normal((2, 5, 8))
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], epsilon=1e-6)
    model = double_model([node], {"x": ("double", [2, 5, 8]), "s": ("double", [8])}, ["y"])
    ours = gradients(model, ["x", "s"], {"x": x, "s": scale}, dy, runtime)
    norm = torch.nn.RMSNorm(8, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor(scale))
    xt = torch.tensor(x, requires_grad=True)
    y = norm(xt)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["y"], y.detach().numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours["s_grad"], norm.weight.grad.numpy(), rtol=1e-7, atol=1e-9)
