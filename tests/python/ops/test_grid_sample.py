"""GridSample and AffineGrid against onnxruntime 1.23 (float32, 4-D) and onnx.reference
1.19 (5-D, float64, and cubic with border padding, where onnxruntime departs from the spec). Grids reach past [-1, 1] so that every
padding mode is exercised. onnx.reference computes the unnormalized coordinates in
float32 whatever the input type, so float64 cases compare at 1e-5. Tolerances otherwise:
float32 rtol 1e-5 / atol 1e-5."""

import itertools

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-5)
MODES = ["nearest", "linear", "cubic"]
PADDINGS = ["zeros", "border", "reflection"]


def grid(*shape, spread=1.3, dtype=np.float32):
    return rng.uniform(-spread, spread, shape).astype(dtype)


@pytest.mark.parametrize("mode, padding, align", itertools.product(MODES, PADDINGS, [0, 1]))
def test_grid_sample_4d(mode, padding, align):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    # onnxruntime's cubic border padding follows PyTorch, which clamps each tap but not the
    # coordinate; the spec (and onnx.reference) clamps a coordinate outside the border first.
    reference = "onnx.reference" if (mode, padding) == ("cubic", "border") else "onnxruntime"
    check_op("GridSample", {"X": x, "grid": grid(2, 4, 7, 2)}, attrs, opset=20, reference=reference, **F32)


@pytest.mark.parametrize("mode, padding, align", itertools.product(["nearest", "linear"], PADDINGS, [0, 1]))
def test_grid_sample_5d(mode, padding, align):
    x = rng.standard_normal((2, 2, 3, 4, 5)).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    check_op("GridSample", {"X": x, "grid": grid(2, 2, 3, 4, 3)}, attrs, opset=20, reference="onnx.reference", **F32)


@pytest.mark.parametrize("padding", PADDINGS)
def test_grid_sample_5d_cubic(padding):
    x = rng.standard_normal((1, 2, 4, 3, 5)).astype(np.float32)
    attrs = {"mode": "cubic", "padding_mode": padding}
    check_op("GridSample", {"X": x, "grid": grid(1, 2, 2, 3, 3)}, attrs, opset=20, reference="onnx.reference", **F32)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_opset16_names(mode):
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    check_op("GridSample", {"X": x, "grid": grid(1, 3, 5, 2)}, {"mode": mode}, opset=16, **F32)


def test_grid_sample_defaults():
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    check_op("GridSample", {"X": x, "grid": grid(1, 6, 6, 2)}, opset=16, **F32)
    check_op("GridSample", {"X": x, "grid": grid(1, 6, 6, 2)}, opset=22, **F32)


@pytest.mark.parametrize("mode, padding", [("linear", "reflection"), ("cubic", "border"), ("nearest", "zeros")])
def test_grid_sample_float64(mode, padding):
    x = rng.standard_normal((2, 2, 4, 5))
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": 1}
    check_op("GridSample", {"X": x, "grid": grid(2, 3, 3, 2, dtype=np.float64)}, attrs, opset=20,
             reference="onnx.reference", rtol=1e-5, atol=1e-5)


def test_grid_sample_far_outside_and_3d():
    # Reflection folds many times; a 1-D signal ([N, C, W], grid [N, Wout, 1]).
    x = rng.standard_normal((1, 2, 5)).astype(np.float32)
    g = np.array([[[-7.3], [5.9], [0.2], [13.1]]], np.float32)
    for padding in PADDINGS:
        check_op("GridSample", {"X": x, "grid": g}, {"padding_mode": padding}, opset=20, reference="onnx.reference",
                 **F32)


def test_grid_sample_float16():
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float16)
    g = grid(1, 3, 3, 2, dtype=np.float16)
    (y,) = run_onnxtrain(make_model("GridSample", {"X": x, "grid": g}, opset=20), {"X": x, "grid": g})
    assert y.dtype == np.float16
    (expected,) = run_onnxtrain(make_model("GridSample", {"X": x.astype(np.float32), "grid": g.astype(np.float32)},
                                           opset=20), {"X": x.astype(np.float32), "grid": g.astype(np.float32)})
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_grid_sample_rejects_bad_shapes():
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    with pytest.raises((ValueError, RuntimeError), match=r"grid must be \[N, O1, ..., O2, 2\]"):
        g = grid(1, 3, 3, 3)
        run_onnxtrain(make_model("GridSample", {"X": x, "grid": g}, opset=20), {"X": x, "grid": g})
    with pytest.raises((ValueError, RuntimeError), match=r"mode is \"area\""):
        g = grid(1, 3, 3, 2)
        run_onnxtrain(make_model("GridSample", {"X": x, "grid": g}, {"mode": "area"}, opset=20), {"X": x, "grid": g})


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 3, 1, 6]])
def test_affine_grid_2d(size, align):
    theta = rng.standard_normal((2, 2, 3)).astype(np.float32)
    # An axis of one pixel with align_corners has no defined step: onnx.reference puts its
    # centre at -1, onnxruntime at 1 and PyTorch at 0; onnxtrain follows the reference.
    reference = "onnx.reference" if align and 1 in size[2:] else "onnxruntime"
    check_op("AffineGrid", {"theta": theta, "size": np.array(size, np.int64)}, {"align_corners": align}, opset=20,
             constants=["size"], reference=reference, **F32)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_3d(align):
    theta = rng.standard_normal((2, 3, 4)).astype(np.float32)
    size = np.array([2, 1, 3, 4, 5], np.int64)
    check_op("AffineGrid", {"theta": theta, "size": size}, {"align_corners": align}, opset=20, **F32)


def test_affine_grid_float64_fed_size():
    theta = rng.standard_normal((1, 2, 3))
    size = np.array([1, 1, 3, 2], np.int64)
    model = make_model("AffineGrid", {"theta": theta, "size": size}, opset=20)
    (ours,) = run_onnxtrain(model, {"theta": theta, "size": size})
    assert ours.dtype == np.float64 and ours.shape == (1, 3, 2, 2)
    xs, ys = np.array([-0.5, 0.5]), np.array([-2 / 3, 0, 2 / 3])
    base = np.stack([np.broadcast_to(xs, (3, 2)), np.broadcast_to(ys[:, None], (3, 2)), np.ones((3, 2))], -1)
    np.testing.assert_allclose(ours[0], base @ theta[0].T, rtol=1e-12, atol=1e-12)


def test_affine_grid_rejects_bad_theta():
    theta = rng.standard_normal((1, 3, 4)).astype(np.float32)
    size = np.array([1, 1, 3, 2], np.int64)
    with pytest.raises((ValueError, RuntimeError), match=r"theta must be \[N, 2, 3\]"):
        run_onnxtrain(make_model("AffineGrid", {"theta": theta, "size": size}, opset=20), {"theta": theta, "size": size})
