"""Resize (10..latest) and Upsample (7..9).

References: onnxruntime for most variants; onnx.reference (which produced ONNX's backend
test data) where the two disagree: antialiasing, and align_corners/tf_crop_and_resize when
scale * input length is not a whole number (ONNX divides by that fractional length,
onnxruntime by the integer one). Tolerances: float32 rtol 1e-5 / atol 1e-5 (interpolation
weights accumulate in float; the references use float32 or float64); nearest is exact.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from op_harness import check_op, feeds_of, make_model, run_onnxtrain

BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = {"rtol": 1e-5, "atol": 1e-5}
rng = np.random.default_rng(2)


def image(shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def f32(*values):
    return np.array(values, np.float32)


def i64(*values):
    return np.array(values, np.int64)


def resize(x, *, scales=None, sizes=None, roi=None, opset=19, reference="onnxruntime", **attributes):
    """Checks Resize on x with the given scales or sizes against the reference."""
    inputs = {"x": x, "roi": roi, "scales": scales, "sizes": sizes}
    if opset < 13 and scales is None:
        inputs["scales"] = np.zeros((0,), np.float32)  # Resize-11 requires the input, empty when sizes are used
    if opset < 13 and roi is None:
        inputs["roi"] = np.zeros((0,), np.float32)
    return check_op("Resize", inputs, attributes, opset=opset, reference=reference, **TOL)


def run(op, inputs, attributes=None, *, opset=19):
    model = make_model(op, inputs, attributes, opset=opset)
    return run_onnxtrain(model, feeds_of(inputs))


# ---------------------------------------------------------------------------------------
# nearest

NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
COORDINATE_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 0.5, 0.6), (1, 1, 1.7, 0.8)])
def test_nearest_scales(nearest_mode, coordinates, scales):
    x = image((1, 2, 5, 6))
    reference = "onnx.reference" if coordinates == "align_corners" else "onnxruntime"
    resize(x, scales=f32(*scales), mode="nearest", nearest_mode=nearest_mode,
           coordinate_transformation_mode=coordinates, reference=reference)  # fmt: skip


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize("sizes", [(1, 2, 9, 4), (1, 2, 3, 13), (1, 2, 1, 1)])
def test_nearest_sizes(nearest_mode, coordinates, sizes):
    resize(image((1, 2, 5, 6)), sizes=i64(*sizes), mode="nearest", nearest_mode=nearest_mode,
           coordinate_transformation_mode=coordinates)  # fmt: skip


def test_nearest_tf_half_pixel_for_nn_opset11():
    resize(image((1, 1, 4, 5)), sizes=i64(1, 1, 7, 3), mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn", opset=11)


@pytest.mark.parametrize(
    "dtype", [np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
)
def test_nearest_every_dtype(dtype):
    x = (rng.integers(0, 100, size=(2, 3, 4)) % (2 if dtype == np.bool_ else 100)).astype(dtype)
    (ours,) = run("Resize", {"x": x, "roi": None, "scales": f32(1, 2, 3)}, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
    np.testing.assert_array_equal(ours, x.repeat(2, axis=1).repeat(3, axis=2))
    assert ours.dtype == x.dtype


def test_nearest_bfloat16_by_bits():
    x = image((2, 3)).astype(BF16)
    model = make_model("Resize", {"x": x, "roi": None, "scales": f32(2, 1)}, {"mode": "nearest"}, opset=19, constants=["x", "scales"])
    (ours,) = run_onnxtrain(model, {})
    np.testing.assert_array_equal(ours.view(np.uint16), x.repeat(2, axis=0).view(np.uint16))


# ---------------------------------------------------------------------------------------
# linear and cubic


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinates", COORDINATE_MODES + ["half_pixel_symmetric"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.5, 0.6), (1, 1, 3, 0.75), (1, 1, 1, 2.5)])
def test_interpolation_scales(mode, coordinates, scales):
    x = image((2, 3, 6, 8))
    fractional = any(abs(s * n - round(s * n)) > 1e-6 for s, n in zip(scales, x.shape))
    reference = "onnx.reference" if coordinates in ("align_corners", "half_pixel_symmetric") and fractional else "onnxruntime"
    resize(x, scales=f32(*scales), mode=mode, coordinate_transformation_mode=coordinates, reference=reference)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize("sizes", [(2, 3, 11, 5), (2, 3, 3, 17), (2, 3, 1, 1), (2, 3, 6, 8)])
def test_interpolation_sizes(mode, coordinates, sizes):
    resize(image((2, 3, 6, 8)), sizes=i64(*sizes), mode=mode, coordinate_transformation_mode=coordinates)


@pytest.mark.parametrize("a", [-0.5, -0.75])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("scales", [(1, 1, 0.8, 0.8), (1, 1, 1.5, 2.5)])
def test_cubic_coefficient_and_exclude_outside(a, exclude_outside, scales):
    resize(image((1, 2, 5, 7)), scales=f32(*scales), mode="cubic", cubic_coeff_a=a, exclude_outside=exclude_outside)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [(1, 1, 0.5, 0.3), (1, 1, 0.6, 2.0), (1, 1, 0.25, 0.25)])
def test_antialias(mode, scales):
    resize(image((1, 2, 12, 10)), scales=f32(*scales), mode=mode, antialias=1, reference="onnx.reference")


def test_linear_on_every_axis_and_other_ranks():
    # onnxruntime resizes 1-D and 3-D linearly only in some layouts: onnx.reference runs any.
    resize(image((3, 4, 5)), scales=f32(2, 0.5, 1.5), mode="linear", reference="onnx.reference")
    resize(image((3, 4, 5)), scales=f32(2, 0.5, 1.5), mode="cubic", reference="onnx.reference")
    resize(image((7,)), sizes=i64(12), mode="linear", reference="onnx.reference")
    resize(image((1, 2, 3, 4, 5)), scales=f32(1, 1, 2, 2, 2), mode="linear")  # trilinear


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.5, 0.5)])
def test_large_nchw(mode, scales):
    resize(image((2, 3, 37, 53)), scales=f32(*scales), mode=mode)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_linear_float_dtypes(dtype):
    x = image((1, 2, 4, 5), dtype)
    inputs = {"x": x, "roi": None, "scales": f32(1, 1, 1.5, 0.5)}
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == np.float16 else {"rtol": 1e-12, "atol": 1e-12}
    check_op("Resize", inputs, {"mode": "linear"}, opset=19, reference="onnx.reference", **tol)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64])
def test_linear_integer_dtypes_round_half_to_even(dtype):
    x = rng.integers(-100 if dtype != np.uint8 else 0, 100, size=(1, 1, 4, 5)).astype(dtype)
    inputs = {"x": x, "roi": None, "scales": f32(1, 1, 2, 0.6)}
    check_op("Resize", inputs, {"mode": "linear"}, opset=19, reference="onnx.reference")


# ---------------------------------------------------------------------------------------
# axes, keep_aspect_ratio_policy, tf_crop_and_resize


@pytest.mark.parametrize("axes", [[2, 3], [3, 2], [-1], [1, -2]])
def test_axes(axes):
    n = len(axes)
    x = image((1, 3, 4, 5))
    # Neither reference takes negative axes (the spec allows them): those must match the
    # same axes counted from the front, checked against onnxruntime.
    positive = [a % 4 for a in axes]
    for mode, key, values in (("linear", "scales", f32(*[2.0, 0.5][:n])), ("nearest", "sizes", i64(*[7, 3][:n]))):
        expected = resize(x, **{key: values}, axes=positive, mode=mode, opset=18)
        inputs = {"x": x, "roi": None, "scales": None, "sizes": None} | {key: values}
        check_op("Resize", inputs, {"axes": axes, "mode": mode}, opset=18, expected=expected, **TOL)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("sizes", [(7, 8), (3, 3), (2, 9)])
def test_keep_aspect_ratio_policy(policy, sizes):
    resize(image((1, 1, 4, 5)), sizes=i64(*sizes), axes=[2, 3], keep_aspect_ratio_policy=policy, mode="nearest", opset=18)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("extrapolation", [0.0, 10.0])
def test_tf_crop_and_resize(mode, extrapolation):
    x = image((1, 1, 5, 6))
    roi = f32(0, 0, 0.2, -0.3, 1, 1, 0.9, 1.4)  # the W range reaches outside: extrapolated
    resize(x, sizes=i64(1, 1, 4, 7), roi=roi, mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
           extrapolation_value=extrapolation)  # fmt: skip
    resize(x, scales=f32(1, 1, 0.8, 1.5), roi=roi, mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
           extrapolation_value=extrapolation, reference="onnx.reference")  # fmt: skip


def test_tf_crop_and_resize_with_axes():
    roi = f32(0.4, 0.6, 0.6, 0.8)
    resize(image((1, 1, 5, 6)), sizes=i64(3, 3), roi=roi, axes=[2, 3], mode="linear",
           coordinate_transformation_mode="tf_crop_and_resize", opset=18)  # fmt: skip


# ---------------------------------------------------------------------------------------
# older versions: Resize-10, Resize-11/13, Upsample


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 0.5, 0.5), (1, 1, 1.5, 2.5)])
def test_resize_opset10(mode, scales):
    check_op("Resize", {"x": image((1, 2, 4, 6)), "scales": f32(*scales)}, {"mode": mode}, opset=10, **TOL)


@pytest.mark.parametrize("opset", [11, 13])
def test_resize_opset11_and_13(opset):
    resize(image((1, 2, 4, 6)), scales=f32(1, 1, 2, 0.5), mode="linear", opset=opset)
    resize(image((1, 2, 4, 6)), sizes=i64(1, 2, 5, 5), mode="cubic", opset=opset)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    x = image((1, 2, 3, 4))
    check_op("Upsample", {"x": x}, {"mode": mode, "scales": [1.0, 1.0, 2.0, 3.0]}, opset=7, **TOL)
    check_op("Upsample", {"x": x, "scales": f32(1, 1, 2, 1.5)}, {"mode": mode}, opset=9, **TOL)


def test_identity_resize_returns_the_input():
    x = image((1, 2, 3, 4))
    resize(x, scales=f32(1, 1, 1, 1), mode="linear")
    resize(x, sizes=i64(1, 2, 3, 4), mode="cubic", coordinate_transformation_mode="align_corners")


def test_empty_output():
    resize(image((1, 1, 2, 4)), scales=f32(1, 1, 0.4, 1), mode="linear")


# ---------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "inputs,attributes,message",
    [({"scales": f32(1, 1, 2, 2), "sizes": i64(1, 1, 4, 4)}, {}, "either scales or sizes, not both"),
     ({}, {}, "one of scales and sizes is required"),
     ({"scales": f32(2, 2)}, {}, "scales has 2 values, expected 4"),
     ({"sizes": i64(1, 1, 4)}, {}, "sizes has 3 values, expected 4"),
     ({"scales": f32(1, 1, -2, 2)}, {}, "must be > 0"),
     ({"sizes": i64(1, 1, -4, 4)}, {}, "negative entry"),
     ({"scales": f32(1, 1, 2, 2)}, {"mode": "bicubic"}, "unknown mode 'bicubic'"),
     ({"scales": f32(1, 1, 2, 2)}, {"coordinate_transformation_mode": "corners"}, "unknown coordinate_transformation_mode"),
     ({"scales": f32(1, 1, 2, 2)}, {"nearest_mode": "nearest"}, "unknown nearest_mode"),
     ({"scales": f32(1, 1, 2, 2), "roi": f32(0, 1)}, {"coordinate_transformation_mode": "tf_crop_and_resize"}, "roi has 2 values, expected 8")],
)  # fmt: skip
def test_errors(inputs, attributes, message):
    full = {"x": image((1, 1, 2, 2)), "roi": inputs.get("roi"), "scales": inputs.get("scales"), "sizes": inputs.get("sizes")}
    with pytest.raises((ValueError, RuntimeError), match=message):
        run("Resize", full, attributes)


def test_upsample_rejects_downscaling():
    with pytest.raises((ValueError, RuntimeError), match=r"must be >= 1"):
        run("Upsample", {"x": image((1, 1, 2, 2)), "scales": f32(1, 1, 0.5, 1)}, opset=9)


def test_resize_rejects_an_axis_listed_twice():
    # The spec leaves a repeated axis undefined; onnxtrain refuses it, naming the axis.
    x, scales = np.ones((2, 3, 4), np.float32), np.array([2, 2], np.float32)
    model = make_model("Resize", {"x": x, "roi": None, "scales": scales}, {"axes": [1, 1]}, opset=19,
                       constants=["scales"])
    with pytest.raises((ValueError, RuntimeError), match=r"axis 1 is listed twice in axes"):
        run_onnxtrain(model, {"x": x})
