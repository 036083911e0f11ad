"""Gradient rule of DeformConv (w.r.t. X, W, offset, B and mask): central differences in
float64 (gradcheck.py, rtol / atol 1e-6; the forward on onnxtrain, as onnx.reference samples
through float32 coordinates) and torchvision.ops.deform_conv2d's autograd (float64, 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import F, GradCase, check_or_skip, gradient_params, make_session


def deform_case(id: str, c=2, m=2, k=(2, 2), group=1, offset_group=1, strides=(1, 1), dilations=(1, 1),
                pads=(0, 0, 0, 0), bias=False, mask=False, h=4, w=5) -> GradCase:
    oh = (h + pads[0] + pads[2] - (k[0] - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (k[1] - 1) * dilations[1] - 1) // strides[1] + 1
    taps = k[0] * k[1]
    offsets = F(1, offset_group * taps * 2, oh, ow, low=-1.3, high=1.3)
    inputs = {"x": F(1, c, h, w), "w": F(m, c // group, *k), "offset": offsets}
    if bias:
        inputs["b"] = F(m)
    elif mask:
        inputs["_b"] = F(m)  # omitted (gradcheck: a name starting with _ is an empty input)
    if mask:
        inputs["mask"] = F(1, offset_group * taps, oh, ow, low=0.1, high=1.0)
    attrs = {"group": group, "offset_group": offset_group, "strides": list(strides), "dilations": list(dilations),
             "pads": list(pads)}
    return GradCase(id=id, op="DeformConv", inputs=inputs, attrs=attrs, opset=19, runtimes=("onnxtrain",),
                    forward_runtime="onnxtrain", shapes=("static", "dynamic"))


DEFORM_CONV = [
    deform_case("DeformConv-plain"),
    deform_case("DeformConv-bias-mask", bias=True, mask=True),
    deform_case("DeformConv-groups", c=4, m=4, group=2, offset_group=2, mask=True),
    deform_case("DeformConv-strides-pads-dilations", k=(2, 3), strides=(2, 1), dilations=(1, 2), pads=(1, 1, 0, 2),
                bias=True, h=5, w=6),
]


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(DEFORM_CONV))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


def test_deform_conv_matches_torchvision() -> None:
    torch = pytest.importorskip("torch")
    ops = pytest.importorskip("torchvision.ops")
    rng = np.random.default_rng(7)
    n, c, m, h, w, k = 2, 4, 6, 6, 7, (3, 2)
    oh, ow = (h + 2 - 3) // 2 + 1, (w + 0 - 3) // 1 + 1
    values = {"x": rng.standard_normal((n, c, h, w)), "w": rng.standard_normal((m, c // 2, *k)),
              "offset": rng.standard_normal((n, 2 * 6 * 2, oh, ow)), "b": rng.standard_normal(m),
              "mask": rng.random((n, 2 * 6, oh, ow))}
    attrs = {"group": 2, "offset_group": 2, "strides": [2, 1], "pads": [1, 0, 1, 0], "dilations": [1, 2]}
    node = helper.make_node("DeformConv", list(values), ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k_, TensorProto.DOUBLE, list(v.shape)) for k_, v in values.items()],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=8)
    grad_model = onnxtrain.build_gradient_graph(model, list(values), outputs=["y"])
    dy = rng.standard_normal((n, m, oh, ow))
    outputs = make_session(grad_model, "onnxtrain")({**values, "y_grad": dy})
    ours = dict(zip([o.name for o in grad_model.graph.output], outputs))
    t = {k_: torch.tensor(v, requires_grad=True) for k_, v in values.items()}
    yt = ops.deform_conv2d(t["x"], t["offset"], t["w"], t["b"], stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                           mask=t["mask"])
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(ours["y"], yt.detach().numpy(), rtol=1e-9, atol=1e-9)
    for name, tensor in t.items():
        np.testing.assert_allclose(ours[f"{name}_grad"], tensor.grad.numpy(), rtol=1e-9, atol=1e-9, err_msg=name)
