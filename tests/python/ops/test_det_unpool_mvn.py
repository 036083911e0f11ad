"""Det, MaxUnpool and MeanVarianceNormalization against onnxruntime 1.23 and
onnx.reference 1.19 (float32 at rtol 1e-5 / atol 1e-5, Det in float64 against numpy)."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain, run_reference

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 5, 5), (1, 1), (0, 2, 2)])
def test_det(shape):
    x = rng.standard_normal(shape).astype(np.float32)
    check_op("Det", {"x": x}, opset=11, rtol=1e-4, atol=1e-5)


def test_det_float64_singular_and_pivoting():
    x = rng.standard_normal((4, 5, 5))
    x[1, 3] = x[1, 0] * 2  # singular
    x[2, :, 0] = 0
    x[2, 4, 0] = 1e-3  # a tiny pivot
    check_op("Det", {"x": x}, opset=11, expected=[np.linalg.det(x)], rtol=1e-12, atol=1e-12)


def test_det_rejects_non_square():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises((ValueError, RuntimeError), match=r"X must be \[..., M, M\], got \[2, 3\]"):
        run_onnxtrain(make_model("Det", {"x": x}, opset=11), {"x": x})


def pooled(x_shape, kernel, strides):
    """MaxPool's (Y, Indices) on onnxruntime, to unpool."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    model = make_model("MaxPool", {"x": x}, {"kernel_shape": kernel, "strides": strides}, n_outputs=2, opset=12)
    return run_reference(model, {"x": x}, "onnxruntime")


@pytest.mark.parametrize("x_shape, kernel, strides", [
    ((2, 3, 4, 6), [2, 2], [2, 2]),
    ((1, 2, 6, 6), [3, 3], [3, 3]),
    ((1, 2, 8), [2], [2]),
    ((1, 1, 4, 4, 4), [2, 2, 2], [2, 2, 2]),
])
def test_max_unpool(x_shape, kernel, strides):
    y, indices = pooled(x_shape, kernel, strides)
    check_op("MaxUnpool", {"x": y, "i": indices}, {"kernel_shape": kernel, "strides": strides}, opset=11)


def test_max_unpool_output_shape_and_pads():
    y, indices = pooled((1, 2, 4, 4), [2, 2], [2, 2])
    inputs = {"x": y, "i": indices, "output_shape": np.array([1, 2, 5, 5], np.int64)}
    # The unpooled 4 x 4 sits in the output's leading corner (the spec's tests, onnx.reference).
    check_op("MaxUnpool", inputs, {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11, reference="onnx.reference")
    y = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    i = np.array([[[[0, 3], [6, 8]]]], np.int64)
    check_op("MaxUnpool", {"x": y, "i": i}, {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 0, 0]},
             opset=11, reference="onnx.reference")


def test_max_unpool_rejects_bad_index():
    y = np.ones((1, 1, 2, 2), np.float32)
    i = np.array([[[[0, 3], [6, 16]]]], np.int64)
    with pytest.raises((ValueError, RuntimeError), match=r"index 16 is outside the unpooled tensor \[1, 1, 4, 4\]"):
        run_onnxtrain(make_model("MaxUnpool", {"x": y, "i": i}, {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11),
                      {"x": y, "i": i})


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3], [-1]])
def test_mean_variance_normalization(axes):
    x = (rng.standard_normal((2, 3, 4, 5)) * 3 + 2).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    check_op("MeanVarianceNormalization", {"x": x}, attrs, opset=13, rtol=1e-4, atol=1e-4)


def test_mean_variance_normalization_float64():
    x = rng.standard_normal((3, 2, 4)) * 5 + 10
    mean = x.mean(axis=(0, 2), keepdims=True)
    expected = (x - mean) / (np.sqrt(((x - mean) ** 2).mean(axis=(0, 2), keepdims=True)) + 1e-9)
    check_op("MeanVarianceNormalization", {"x": x}, {"axes": [0, 2]}, opset=13, expected=[expected], rtol=1e-12,
             atol=1e-12)


@pytest.mark.parametrize("axes", [[1, 1], [1, -2]])
def test_mean_variance_normalization_rejects_an_axis_listed_twice(axes):
    # onnxruntime returns NaN here and onnx.reference refuses (found by fuzz_graph).
    x = np.ones((1, 2, 3), np.float32)
    with pytest.raises((ValueError, RuntimeError), match=rf"axis {axes[1]} is listed twice in axes"):
        run_onnxtrain(make_model("MeanVarianceNormalization", {"x": x}, {"axes": axes}, opset=13), {"x": x})
