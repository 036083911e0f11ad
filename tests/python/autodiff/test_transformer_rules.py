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

from .gradcheck import C, F, GradCase, V, check_case_float32, check_or_skip, gradient_params, make_session

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

def rotary_caches(positions: int, half: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(positions)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))
    return np.cos(angles), np.sin(angles)


def rotary_case(id: str, x_shape: tuple, attrs: dict, position_ids: bool = True, half: int = 0) -> GradCase:
    b, seq = x_shape[0], (x_shape[2] if len(x_shape) == 4 else x_shape[1])
    head = x_shape[3] if len(x_shape) == 4 else x_shape[2] // attrs["num_heads"]
    half = half or (attrs.get("rotary_embedding_dim") or head) // 2
    if position_ids:
        cos, sin = rotary_caches(seq + 3, half)
        pos = np.random.default_rng(1).integers(0, seq + 3, size=(b, seq))
        inputs = {"x": F(*x_shape), "cos": C(cos), "sin": C(sin), "pos": V(pos, np.int64)}
    else:
        cos, sin = rotary_caches(b * seq, half)
        inputs = {"x": F(*x_shape), "cos": C(cos.reshape(b, seq, half)), "sin": C(sin.reshape(b, seq, half))}
    # RotaryEmbedding has no float64 in the spec: onnxruntime refuses the float64 model, so
    # it checks the float32 one (test_rotary_embedding_float32_onnxruntime).
    return case(id, "RotaryEmbedding", inputs, attrs, runtimes=("reference", "onnxtrain"), forward_runtime="reference")


ROTARY_EMBEDDING = [
    rotary_case("RotaryEmbedding", (2, 2, 3, 4), {}),
    rotary_case("RotaryEmbedding-interleaved", (2, 2, 3, 4), {"interleaved": 1}),
    rotary_case("RotaryEmbedding-partial", (1, 2, 3, 6), {"rotary_embedding_dim": 2, "num_heads": 2}),
    rotary_case("RotaryEmbedding-3d", (2, 3, 8), {"num_heads": 2}),
    rotary_case("RotaryEmbedding-3d-partial-interleaved", (2, 3, 12),
                {"num_heads": 2, "rotary_embedding_dim": 4, "interleaved": 1}),
    rotary_case("RotaryEmbedding-no-position-ids", (2, 2, 3, 4), {}, position_ids=False),
]

def attention_case(id: str, q: tuple, k: tuple, v: tuple, attrs: dict | None = None, mask: object = None) -> GradCase:
    inputs = {"q": F(*q), "k": F(*k), "v": F(*v)}
    if mask is not None:
        inputs["mask"] = mask
    # onnxruntime runs a float64 Attention through the spec's function body and gets the
    # output shape wrong ([1, 2, 3, 4] inputs give a 3-D Y); float32 runs on its kernel
    # (test_attention_float32_onnxruntime).
    return case(id, "Attention", inputs, attrs, runtimes=("reference", "onnxtrain"), forward_runtime="reference")


ATTENTION = [
    attention_case("Attention-4d", (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3)),
    attention_case("Attention-4d-gqa", (1, 4, 3, 4), (1, 2, 4, 4), (1, 2, 4, 4)),
    attention_case("Attention-3d", (2, 3, 8), (2, 4, 8), (2, 4, 6), {"q_num_heads": 2, "kv_num_heads": 2}),
    attention_case("Attention-3d-gqa", (1, 3, 16), (1, 4, 8), (1, 4, 8), {"q_num_heads": 4, "kv_num_heads": 2}),
    attention_case("Attention-causal", (1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4), {"is_causal": 1}),
    attention_case("Attention-causal-cross", (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), {"is_causal": 1}),
    attention_case("Attention-scale-softcap", (1, 2, 3, 4), (1, 2, 4, 4), (1, 2, 4, 4),
                   {"scale": 0.8, "softcap": 1.5}),
    attention_case("Attention-bool-mask", (1, 2, 3, 4), (1, 2, 4, 4), (1, 2, 4, 4),
                   mask=V(np.array([[1, 1, 0, 1], [1, 0, 1, 1], [0, 1, 1, 1]], bool))),
    attention_case("Attention-float-mask", (1, 2, 3, 4), (1, 2, 4, 4), (1, 2, 4, 4), mask=F(3, 4)),
    attention_case("Attention-float-mask-4d-causal", (2, 2, 3, 4), (2, 2, 3, 4), (2, 2, 3, 4), {"is_causal": 1},
                   mask=F(2, 1, 3, 3)),
    attention_case("Attention-short-mask", (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), mask=F(3, 3)),
    attention_case("Attention-mask-softcap", (1, 1, 3, 4), (1, 1, 4, 4), (1, 1, 4, 4), {"softcap": 2.0},
                   mask=V(np.array([[1, 1, 0, 1], [1, 0, 1, 1], [0, 1, 1, 1]], bool))),
]

ALL = RMS_NORMALIZATION + ROTARY_EMBEDDING + ATTENTION


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(ALL))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


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


@pytest.mark.parametrize("shapes", ["static", "dynamic"])
@pytest.mark.parametrize("case", ROTARY_EMBEDDING, ids=[c.id for c in ROTARY_EMBEDDING])
def test_rotary_embedding_float32_onnxruntime(case: GradCase, shapes: str) -> None:
    check_case_float32(case, shapes)  # eps 1e-2, rtol 2e-2, atol 2e-3


def torch_rotary(torch, x, cos, sin, pos, interleaved: bool, rotary_dim: int):
    """The spec's algorithm in torch, 4-D input [B, H, S, D]."""
    cos, sin = cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)  # [B, 1, S, half]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot.chunk(2, dim=-1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rotated = torch.stack((real, imag), -1).flatten(-2) if interleaved else torch.cat((real, imag), -1)
    return torch.cat((rotated, rest), -1)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("runtime", ["reference", "onnxtrain"])
def test_rotary_embedding_matches_torch(runtime: str, interleaved: int) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((2, 3, 5, 8))
    cos, sin = rotary_caches(9, 3)
    pos = rng.integers(0, 9, size=(2, 5))
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=interleaved,
                            rotary_embedding_dim=6, num_heads=3)
    model = double_model([node], {"x": ("double", [2, 3, 5, 8]), "cos": ("double", [9, 3]),
                                  "sin": ("double", [9, 3]), "pos": ("int64", [2, 5])}, ["y"])
    ours = gradients(model, ["x"], {"x": x, "cos": cos, "sin": sin, "pos": pos}, dy, runtime)
    xt = torch.tensor(x, requires_grad=True)
    y = torch_rotary(torch, xt, torch.tensor(cos), torch.tensor(sin), torch.tensor(pos), bool(interleaved), 6)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["y"], y.detach().numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours["x_grad"], xt.grad.numpy(), rtol=1e-7, atol=1e-9)


def test_rotary_embedding_refuses_differentiated_caches() -> None:
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])
    model = double_model([node], {"x": ("double", [1, 1, 2, 4]), "cos": ("double", [1, 2, 2]),
                                  "sin": ("double", [1, 2, 2])}, ["y"])
    with pytest.raises(Exception, match=r"cos_cache depends on a differentiated value"):
        onnxtrain.build_gradient_graph(model, ["x", "cos"], outputs=["y"])


@pytest.mark.parametrize("case", ATTENTION[:9], ids=[c.id for c in ATTENTION[:9]])
def test_attention_float32_onnxruntime(case: GradCase) -> None:
    check_case_float32(case, "static")  # eps 1e-2, rtol 2e-2, atol 2e-3


@pytest.mark.parametrize("layout", ["4d", "3d"])
@pytest.mark.parametrize("variant", ["plain", "gqa-causal", "bool-mask", "float-mask-scale"])
@pytest.mark.parametrize("runtime", ["reference", "onnxtrain"])
def test_attention_matches_torch_sdpa(runtime: str, variant: str, layout: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    b, hq, hkv, sq, skv, d = 2, 4, (2 if variant == "gqa-causal" else 4), 5, 5, 8
    q, k, v = rng.standard_normal((b, hq, sq, d)), rng.standard_normal((b, hkv, skv, d)), rng.standard_normal((b, hkv, skv, d))
    dy = rng.standard_normal((b, hq, sq, d))
    attrs: dict = {}
    feeds: dict = {}
    mask = None
    if variant == "gqa-causal":
        attrs["is_causal"] = 1
    if variant == "bool-mask":
        mask = rng.random((sq, skv)) < 0.7
        mask[:, 0] = True
    if variant == "float-mask-scale":
        mask = rng.standard_normal((b, 1, sq, skv))
        # 0.25: onnx.reference takes sqrt(scale) in float32, exact only for such values.
        attrs["scale"] = 0.25
    to3 = lambda x: x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)
    if layout == "3d":
        attrs |= {"q_num_heads": hq, "kv_num_heads": hkv}
        feeds = {"q": to3(q), "k": to3(k), "v": to3(v)}
    else:
        feeds = {"q": q, "k": k, "v": v}
    names = ["q", "k", "v"] + (["m"] if mask is not None else [])
    if mask is not None:
        feeds["m"] = mask
    node = helper.make_node("Attention", names, ["y"], **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, list(feeds[n].shape)) for n in ("q", "k", "v")]
    if mask is not None:
        elem = TensorProto.BOOL if mask.dtype == bool else TensorProto.DOUBLE
        graph_inputs.append(helper.make_tensor_value_info("m", elem, list(mask.shape)))
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)
    wrt = ["q", "k", "v"] + (["m"] if mask is not None and mask.dtype != bool else [])
    ours = gradients(model, wrt, feeds, to3(dy) if layout == "3d" else dy, runtime)

    # ONNX attributes are float32: give torch the scale the model holds.
    scale = float(np.float32(attrs["scale"])) if "scale" in attrs else None
    qt, kt, vt = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    mt = None if mask is None else torch.tensor(mask, requires_grad=mask.dtype != bool)
    y = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mt, is_causal=bool(attrs.get("is_causal")),
                                                         scale=scale, enable_gqa=hq != hkv)
    y.backward(torch.tensor(dy))
    back = (lambda x: to3(x)) if layout == "3d" else (lambda x: x)
    np.testing.assert_allclose(ours["y"], back(y.detach().numpy()), rtol=1e-7, atol=1e-9)
    for name, t in (("q", qt), ("k", kt), ("v", vt)):
        np.testing.assert_allclose(ours[f"{name}_grad"], back(t.grad.numpy()), rtol=1e-7, atol=1e-9, err_msg=name)
    if "m" in wrt:
        np.testing.assert_allclose(ours["m_grad"], mt.grad.numpy(), rtol=1e-7, atol=1e-9)


def test_attention_refuses_kv_cache_gradients() -> None:
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "pres_k", "pres_v"])
    model = double_model([node], {"q": ("double", [1, 1, 2, 4]), "k": ("double", [1, 1, 2, 4]),
                                  "v": ("double", [1, 1, 2, 4]), "pk": ("double", [1, 1, 3, 4]),
                                  "pv": ("double", [1, 1, 3, 4])}, ["y"])
    with pytest.raises(Exception, match=r"past_key/past_value \(the KV cache\) are given"):
        onnxtrain.build_gradient_graph(model, ["q"], outputs=["y"])
