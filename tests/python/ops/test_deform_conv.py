"""DeformConv against onnx.reference 1.19 and torchvision.ops.deform_conv2d (onnxruntime 1.23
has no DeformConv kernel):
offsets, masks, bias, groups, offset groups, strides, dilations and pads; float32 at
rtol / atol 1e-4 (the reference samples through GridSample's float32 coordinates),
float64 against a direct float64 evaluation of the spec's formula at 1e-10."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)


def deform_inputs(n=1, c=2, h=5, w=6, m=2, k=(2, 2), group=1, offset_group=1, strides=(1, 1), dilations=(1, 1),
                  pads=(0, 0, 0, 0), bias=False, mask=False, dtype=np.float32):
    oh = (h + pads[0] + pads[2] - (k[0] - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (k[1] - 1) * dilations[1] - 1) // strides[1] + 1
    taps = k[0] * k[1]
    inputs = {
        "X": rng.standard_normal((n, c, h, w)).astype(dtype),
        "W": rng.standard_normal((m, c // group, *k)).astype(dtype),
        "offset": (rng.standard_normal((n, offset_group * taps * 2, oh, ow)) * 1.5).astype(dtype),
        "B": rng.standard_normal(m).astype(dtype) if bias else None,
        "mask": rng.random((n, offset_group * taps, oh, ow)).astype(dtype) if mask else None,
    }
    attrs = {"group": group, "offset_group": offset_group, "strides": list(strides), "dilations": list(dilations),
             "pads": list(pads), "kernel_shape": list(k)}
    return inputs, attrs


@pytest.mark.parametrize("kw", [
    {},
    {"bias": True, "mask": True},
    {"c": 4, "m": 4, "group": 2},
    {"c": 4, "offset_group": 2, "mask": True},
    {"strides": (2, 1), "dilations": (1, 2), "pads": (1, 0, 1, 2)},
    {"n": 2, "k": (3, 1), "bias": True},
])
def test_deform_conv(kw):
    inputs, attrs = deform_inputs(**kw)
    check_op("DeformConv", inputs, attrs, opset=19, reference="onnx.reference", rtol=1e-4, atol=1e-4)


def bilinear(plane, y, x):
    h, w = plane.shape
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for dy in (0, 1):
        for dx in (0, 1):
            py, px = y0 + dy, x0 + dx
            if 0 <= py < h and 0 <= px < w:
                total += (y - y0 if dy else 1 - (y - y0)) * (x - x0 if dx else 1 - (x - x0)) * plane[py, px]
    return total


def test_deform_conv_float64_formula():
    inputs, attrs = deform_inputs(c=2, m=3, k=(2, 3), pads=(1, 1, 0, 0), bias=True, mask=True, dtype=np.float64)
    x, w, off, b, mask = (inputs[k] for k in ("X", "W", "offset", "B", "mask"))
    (n, c, h, wd), (m, _, kh, kw), (_, _, oh, ow) = x.shape, w.shape, off.shape
    expected = np.zeros((n, m, oh, ow))
    for o in range(m):
        for i in range(oh):
            for j in range(ow):
                total = b[o]
                for ci in range(c):
                    for ki in range(kh):
                        for kj in range(kw):
                            t = ki * kw + kj
                            y = i - 1 + ki + off[0, 2 * t, i, j]
                            xx = j - 1 + kj + off[0, 2 * t + 1, i, j]
                            total += w[o, ci, ki, kj] * mask[0, t, i, j] * bilinear(x[0, ci], y, xx)
                expected[0, o, i, j] = total
    check_op("DeformConv", inputs, attrs, opset=19, expected=[expected], rtol=1e-10, atol=1e-10)


def test_deform_conv_zero_offsets_is_conv():
    inputs, attrs = deform_inputs(c=3, m=2, k=(3, 3), pads=(1, 1, 1, 1), bias=True)
    inputs["offset"][:] = 0
    (ours,) = run_onnxtrain(make_model("DeformConv", inputs, attrs, opset=19),
                            {k: v for k, v in inputs.items() if v is not None})
    conv_inputs = {"X": inputs["X"], "W": inputs["W"], "B": inputs["B"]}
    check_op("Conv", conv_inputs, {"pads": [1, 1, 1, 1]}, expected=[ours], rtol=1e-5, atol=1e-5)


def test_deform_conv_rejects_bad_offset():
    inputs, attrs = deform_inputs()
    inputs["offset"] = inputs["offset"][:, :4]
    with pytest.raises((ValueError, RuntimeError), match=r"offset must be \[1, 8, 4, 5\]"):
        run_onnxtrain(make_model("DeformConv", inputs, attrs, opset=19),
                      {k: v for k, v in inputs.items() if v is not None})


def test_deform_conv_matches_torchvision():
    torch = pytest.importorskip("torch")
    ops = pytest.importorskip("torchvision.ops")
    inputs, attrs = deform_inputs(n=2, c=4, m=6, k=(3, 2), group=2, offset_group=2, strides=(2, 1), pads=(1, 0, 1, 0),
                                  dilations=(1, 2), bias=True, mask=True, dtype=np.float64)
    (ours,) = run_onnxtrain(make_model("DeformConv", inputs, attrs, opset=19), inputs)
    t = {k: torch.tensor(v) for k, v in inputs.items()}
    theirs = ops.deform_conv2d(t["X"], t["offset"], t["W"], t["B"], stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                               mask=t["mask"])
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-10)
