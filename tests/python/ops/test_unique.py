"""Unique against onnxruntime 1.23 (flattened and along an axis, sorted or in order of
first occurrence, every output) and numpy.unique; integer outputs compare exactly."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain, run_reference

rng = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float64])
@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_flattened(dtype, sorted_):
    x = rng.integers(-3, 4, (4, 5)).astype(dtype)
    expected = None
    if dtype == np.int32:  # onnxruntime has no int32 Unique: its int64 answer, cast back
        x64 = x.astype(np.int64)
        model = make_model("Unique", {"X": x64}, {"sorted": sorted_}, n_outputs=4, opset=11)
        expected = run_reference(model, {"X": x64}, "onnxruntime")
        expected[0] = expected[0].astype(np.int32)
    check_op("Unique", {"X": x}, {"sorted": sorted_}, n_outputs=4, opset=11, expected=expected)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_axis(axis, sorted_):
    x = rng.integers(0, 2, (4, 3, 4)).astype(np.float32)
    x[2] = x[0]
    x[:, :, 3] = x[:, :, 1]
    check_op("Unique", {"X": x}, {"axis": axis, "sorted": sorted_}, n_outputs=4, opset=11)


def test_unique_matches_numpy_and_first_output_alone():
    x = rng.integers(0, 6, (3, 7)).astype(np.int64)
    (y,) = check_op("Unique", {"X": x}, opset=11)
    values, first, inverse, counts = np.unique(x.ravel(), return_index=True, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(y, values)
    (y, i, inv, c) = run_onnxtrain(make_model("Unique", {"X": x}, n_outputs=4, opset=11), {"X": x})
    np.testing.assert_array_equal(i, first)
    np.testing.assert_array_equal(inv, inverse.ravel())
    np.testing.assert_array_equal(c, counts)


def test_unique_empty_and_bool():
    check_op("Unique", {"X": np.zeros((0,), np.float32)}, n_outputs=4, opset=11, reference="onnx.reference")
    x = np.array([True, False, True, True])
    (y, _, inv, c) = run_onnxtrain(make_model("Unique", {"X": x}, n_outputs=4, opset=11), {"X": x})
    np.testing.assert_array_equal(y, [False, True])
    np.testing.assert_array_equal(inv, [1, 0, 1, 1])
    np.testing.assert_array_equal(c, [1, 3])


def test_unique_rejects_bad_axis():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises((ValueError, RuntimeError), match=r"axis 2 is out of range for rank 2 \(expected -2..1\)"):
        run_onnxtrain(make_model("Unique", {"X": x}, {"axis": 2}, opset=11), {"X": x})
