"""Gradient rules of QuantizeLinear and DequantizeLinear: the straight-through estimator of
quantization-aware training, against torch.autograd.

- A QuantizeLinear -> DequantizeLinear pair (fake quantization) with respect to x: against
  torch.fake_quantize_per_tensor_affine / fake_quantize_per_channel_affine (dy inside the
  range, 0 where clipped).
- With respect to a learnable scale: against torch._fake_quantize_learnable_per_tensor_affine
  / _per_channel_affine (LSQ, grad_factor 1).
- Every granularity (per tensor, per axis, blocked), output type (8/16/4-bit integers,
  float8) and a scale for each of the two nodes: against the same STE written in torch
  (round's gradient taken as 1, clamp's as torch gives it).
- DequantizeLinear alone (a constant quantized weight, a trainable scale): it is linear, so
  central differences in float64 of its formula match exactly.

QuantizeLinear takes no float64 input (ONNX: float, float16, bfloat16, int32), so the
checks run in float32: rtol 1e-5, atol 1e-6 (LSQ's scale gradient sums terms of both
signs: atol 1e-4 relative to the sum's scale). Every gradient graph also runs in stock
onnxruntime with the same results."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

rng = np.random.default_rng(3)

RANGES = {np.int8: (-128, 127), np.uint8: (0, 255), np.int16: (-32768, 32767), np.uint16: (0, 65535),
          ml_dtypes.int4: (-8, 7), ml_dtypes.uint4: (0, 15), ml_dtypes.float8_e4m3fn: (-448, 448)}


def onnx_type(t):
    return helper.np_dtype_to_tensor_dtype(np.dtype(t))


def fake_quant_model(x_shape, scale, zero_point, attrs, *, dq_scale=None, opset=21, learn_scale=False):
    """y = DequantizeLinear(QuantizeLinear(x, s, z), s2, z): x (and with learn_scale the
    scales) graph inputs, the zero point an initializer."""
    dq_scale = scale if dq_scale is None else dq_scale
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    inits = [numpy_helper.from_array(zero_point, "z")]
    scale_names = ["s", "s2" if dq_scale is not scale else "s"]
    for name, value in {"s": scale, "s2": dq_scale}.items():
        if name == "s2" and dq_scale is scale:
            continue
        if learn_scale:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, value.shape))
        else:
            inits.append(numpy_helper.from_array(value, name))
    dq_attrs = {k: v for k, v in attrs.items() if k in ("axis", "block_size")}
    nodes = [helper.make_node("QuantizeLinear", ["x", scale_names[0], "z"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", scale_names[1], "z"], ["y"], **dq_attrs)]
    graph = helper.make_graph(nodes, "fq", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def gradients(model, feeds, wrt, dy):
    """onnxtrain's gradient graph run in onnxtrain and in onnxruntime: (y, {name: grad})."""
    grad_model = onnxtrain.build_gradient_graph(model, wrt, outputs=["y"])
    feeds = dict(feeds, y_grad=dy)
    names = [o.name for o in grad_model.graph.output]
    ours = dict(zip(names, onnxtrain.InferenceSession(grad_model.SerializeToString()).run(None, feeds)))
    import onnxruntime as ort

    session = ort.InferenceSession(grad_model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = dict(zip(names, session.run(None, feeds)))
    for name in names:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=f"onnxruntime: {name}")
    return ours["y"], {w: ours[f"{w}_grad"] for w in wrt}


def away_from_ties(x, scale):
    """x moved off the rounding ties of x / scale (where x / scale and x * (1 / scale), torch's
    form, may round apart)."""
    v = x / scale
    frac = v - np.floor(v)
    return np.where(np.abs(frac - 0.5) < 0.02, x + 0.05 * scale, x).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_fake_quant_per_tensor_matches_torch(dtype):
    lo, hi = RANGES[dtype]
    scale, zp = np.float32(0.05), dtype(3 if dtype == np.int8 else 120)
    x = away_from_ties((rng.standard_normal((6, 7)) * 4).astype(np.float32), scale)  # about a third clipped
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y, grads = gradients(fake_quant_model(x.shape, np.array(scale), np.array(zp), {}), {"x": x}, ["x"], dy)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.fake_quantize_per_tensor_affine(xt, float(scale), int(zp), lo, hi)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert 0 < np.count_nonzero(grads["x"] == 0) < x.size  # some clipped, some not


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_fake_quant_per_channel_matches_torch(axis):
    x = (rng.standard_normal((4, 5, 6)) * 3).astype(np.float32)
    channels = x.shape[axis]
    scale = np.linspace(0.01, 0.04, channels).astype(np.float32)
    zp = rng.integers(-10, 10, channels).astype(np.int8)
    shape = [1] * 3
    shape[axis] = channels
    x = away_from_ties(x, scale.reshape(shape))
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y, grads = gradients(fake_quant_model(x.shape, scale, zp, {"axis": axis}), {"x": x}, ["x"], dy)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.fake_quantize_per_channel_affine(xt, torch.tensor(scale), torch.tensor(zp, dtype=torch.int32),
                                                axis % 3, -128, 127)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-6, atol=1e-7)


# Zero points are not negative here: torch's learnable fake quant rounds a float zero point as
# int(zp + 0.5) in its backward (-2 becomes -1) but not in its forward.


def test_learnable_scale_per_tensor_matches_torch_lsq():
    scale, zp = np.array(0.07, np.float32), np.array(2, np.int8)
    x = away_from_ties((rng.standard_normal((8, 9)) * 5).astype(np.float32), scale)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    model = fake_quant_model(x.shape, scale, zp, {}, learn_scale=True)
    _, grads = gradients(model, {"x": x, "s": scale}, ["x", "s"], dy)
    xt, st = torch.tensor(x, requires_grad=True), torch.tensor([float(scale)], requires_grad=True)
    yt = torch._fake_quantize_learnable_per_tensor_affine(xt, st, torch.tensor([2.0]), -128, 127, 1.0)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grads["s"].reshape(-1), st.grad.numpy(), rtol=1e-5, atol=1e-4)


def test_learnable_scale_per_channel_matches_torch_lsq():
    x = (rng.standard_normal((5, 6)) * 3).astype(np.float32)
    scale = np.linspace(0.02, 0.06, 6).astype(np.float32)
    zp = np.array([0, 1, 4, 2, 7, 3], np.int8)
    x = away_from_ties(x, scale)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    model = fake_quant_model(x.shape, scale, zp, {"axis": 1}, learn_scale=True)
    _, grads = gradients(model, {"x": x, "s": scale}, ["x", "s"], dy)
    xt, st = torch.tensor(x, requires_grad=True), torch.tensor(scale, requires_grad=True)
    yt = torch._fake_quantize_learnable_per_channel_affine(xt, st, torch.tensor(zp, dtype=torch.float32), 1, -128,
                                                           127, 1.0)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grads["s"], st.grad.numpy(), rtol=1e-5, atol=1e-4)


def torch_ste(x, s1, s2, zp, lo, hi, float8=False):
    """DequantizeLinear(QuantizeLinear(x, s1, zp), s2, zp) with round's gradient taken as 1."""
    v = x / s1
    r = v + (torch.round(v) - v).detach() if not float8 else v  # float8: rounding to its grid, same STE
    q = torch.clamp(r + zp, lo, hi)
    return (q - zp) * s2


def expand_blocks(values, axis, block, size):
    return np.repeat(values, block, axis=axis).take(range(size), axis=axis)


@pytest.mark.parametrize("dtype", list(RANGES), ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
def test_ste_every_granularity_and_type(dtype, granularity):
    x = (rng.standard_normal((3, 7, 4)) * 2).astype(np.float32)
    lo, hi = RANGES[dtype]
    float8 = dtype == ml_dtypes.float8_e4m3fn
    if granularity == "tensor":
        s1, s2, attrs = np.array(0.3, np.float32), np.array(0.25, np.float32), {}
        s1_b, s2_b = s1, s2
    elif granularity == "axis":
        s1 = np.linspace(0.1, 0.5, 7).astype(np.float32)
        s2 = s1 * 1.5
        attrs = {"axis": 1}
        s1_b, s2_b = s1.reshape(1, 7, 1), s2.reshape(1, 7, 1)
    else:
        s1 = np.linspace(0.1, 0.5, 3 * 3 * 4).astype(np.float32).reshape(3, 3, 4)
        s2 = s1 * 0.5
        attrs = {"axis": 1, "block_size": 3}
        s1_b, s2_b = expand_blocks(s1, 1, 3, 7), expand_blocks(s2, 1, 3, 7)
    zp = np.zeros(np.shape(s1), dtype)
    if not float8:
        x = away_from_ties(x, s1_b)
    if float8:  # values well inside float8's range: its grid's rounding is the only STE step
        x = x * 10
    dy = rng.standard_normal(x.shape).astype(np.float32)
    model = fake_quant_model(x.shape, s1, zp, attrs, dq_scale=s2)
    y, grads = gradients(model, {"x": x}, ["x"], dy)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch_ste(xt, torch.tensor(s1_b), torch.tensor(s2_b), 0.0, lo, hi, float8)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_ste_scale_gradients_with_two_scales():
    x = away_from_ties((rng.standard_normal((4, 6)) * 2).astype(np.float32), np.float32(0.2))
    s1, s2 = np.array(0.2, np.float32), np.array(0.15, np.float32)
    zp = np.array(5, np.uint8)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in
              (("x", x), ("s1", s1), ("s2", s2))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s2", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                              [numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    _, grads = gradients(model, {"x": x, "s1": s1, "s2": s2}, ["x", "s1", "s2"], dy)
    xt, s1t, s2t = (torch.tensor(v, requires_grad=True) for v in (x, s1, s2))
    torch_ste(xt, s1t, s2t, 5.0, 0, 255).backward(torch.tensor(dy))
    for name, t in (("x", xt), ("s1", s1t), ("s2", s2t)):
        np.testing.assert_allclose(grads[name], t.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("axis", [None, 0])
def test_dequantize_scale_gradient_of_a_constant_weight(axis):
    # y = (q - z) * s with q a constant int8 weight: dy/ds = sum of dy * (q - z) (per channel).
    q = rng.integers(-128, 128, (4, 5)).astype(np.int8)
    scale = np.array(0.1, np.float32) if axis is None else np.linspace(0.05, 0.2, 4).astype(np.float32)
    zp = np.array(3, np.int8) if axis is None else np.arange(4).astype(np.int8)
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **({} if axis is None else {"axis": axis}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("s", TensorProto.FLOAT, scale.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, q.shape)],
                              [numpy_helper.from_array(q, "q"), numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    dy = rng.standard_normal(q.shape).astype(np.float32)
    _, grads = gradients(model, {"s": scale}, ["s"], dy)
    centered = q.astype(np.float64) - (zp if axis is None else zp[:, None])
    expected = np.sum(dy * centered) if axis is None else np.sum(dy * centered, axis=1)
    np.testing.assert_allclose(grads["s"], expected, rtol=1e-5, atol=1e-5)
    assert grads["s"].shape == scale.shape


def test_blocked_scale_gradient_is_refused_clearly():
    x_shape = (2, 6)
    scale = np.full((2, 2), 0.1, np.float32)
    model = fake_quant_model(x_shape, scale, np.zeros((2, 2), np.int8), {"axis": 1, "block_size": 3},
                             learn_scale=True)
    with pytest.raises((ValueError, RuntimeError), match=r"onnxtrain differentiates blocked quantization with "
                                                         r"respect to x only"):
        onnxtrain.build_gradient_graph(model, ["x", "s"], outputs=["y"])


def test_quantized_value_is_not_a_gradient_target_but_carries_one():
    # Only x gets a gradient output; the quantized int8 value in between has none of its own.
    model = fake_quant_model([3], np.array(0.5, np.float32), np.array(0, np.int8), {})
    grad_model = onnxtrain.build_gradient_graph(model, ["x"], outputs=["y"])
    assert [o.name for o in grad_model.graph.output] == ["y", "x_grad"]
    with pytest.raises((ValueError, RuntimeError), match=r"'q' \(in wrt\) has element type int8"):
        onnxtrain.build_gradient_graph(model, ["q"], outputs=["y"])
