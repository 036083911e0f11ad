"""CenterCropPad, DepthToSpace, SpaceToDepth, ReverseSequence and TensorScatter against
onnxruntime 1.23 and onnx.reference 1.19 (TensorScatter, opset 24: the reference only); exact
(elements are moved, never computed)."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)


@pytest.mark.parametrize("shape, target, axes", [
    ((20, 10, 3), [10, 7, 3], None),         # crop, odd difference
    ((10, 7, 3), [20, 10, 3], None),         # pad
    ((20, 8, 3), [10, 10, 3], None),         # crop one axis, pad another
    ((3, 20, 8), [10, 9], [1, 2]),
    ((20, 8, 3), [10, 9], [-3, -2]),
    ((4, 5), [4, 5], None),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_center_crop_pad(shape, target, axes, dtype):
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    attrs = {"axes": axes} if axes else {}
    check_op("CenterCropPad", {"x": x, "shape": np.array(target, np.int64)}, attrs, opset=18,
             reference="onnx.reference", constants=["shape"])


def test_center_crop_pad_fed_shape_matches_onnxruntime():
    x = rng.standard_normal((9, 6, 2)).astype(np.float32)
    check_op("CenterCropPad", {"x": x, "shape": np.array([4, 11], np.int64)}, {"axes": [0, 1]}, opset=18)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("block", [1, 2, 3])
def test_depth_to_space(mode, block):
    x = rng.standard_normal((2, 2 * block * block, 3, 4)).astype(np.float32)
    check_op("DepthToSpace", {"x": x}, {"blocksize": block, "mode": mode}, opset=13)


@pytest.mark.parametrize("block", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_space_to_depth(block, dtype):
    x = (rng.standard_normal((2, 3, 2 * block, 3 * block)) * 5).astype(dtype)
    reference = "onnxruntime" if dtype != np.int32 else "onnx.reference"
    check_op("SpaceToDepth", {"x": x}, {"blocksize": block}, opset=13, reference=reference)


def test_depth_space_round_trip_and_errors():
    x = rng.standard_normal((1, 8, 2, 3)).astype(np.float32)
    (y,) = check_op("DepthToSpace", {"x": x}, {"blocksize": 2}, opset=11)
    (z,) = check_op("SpaceToDepth", {"x": y}, {"blocksize": 2}, opset=11)
    np.testing.assert_array_equal(z, x)
    with pytest.raises((ValueError, RuntimeError), match=r"channels 8 are not a multiple of blocksize\^2 = 9"):
        run_onnxtrain(make_model("DepthToSpace", {"x": x}, {"blocksize": 3}, opset=13), {"x": x})


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_reverse_sequence(batch_axis, time_axis, dtype):
    shape = (4, 3, 2) if time_axis == 0 else (3, 4, 2)
    x = (rng.standard_normal(shape) * 5).astype(dtype)
    attrs = {"batch_axis": batch_axis, "time_axis": time_axis}
    check_op("ReverseSequence", {"x": x, "sequence_lens": np.array([4, 1, 2], np.int64)}, attrs, opset=10)
    # A length of 0 leaves the entry as it is (onnxruntime leaves it unwritten, and
    # onnx.reference reverses all of it).
    expected = np.swapaxes(x, 0, 1).copy() if time_axis == 0 else x.copy()
    expected[0, :3] = expected[0, 2::-1]
    expected[2, :2] = expected[2, 1::-1]
    expected = np.swapaxes(expected, 0, 1) if time_axis == 0 else expected
    check_op("ReverseSequence", {"x": x, "sequence_lens": np.array([3, 0, 2], np.int64)}, attrs, opset=10,
             expected=[expected])


def test_reverse_sequence_rejects_long_sequence():
    x = rng.standard_normal((4, 2)).astype(np.float32)
    lengths = np.array([5, 1], np.int64)
    with pytest.raises((ValueError, RuntimeError), match=r"sequence length 5 is outside \[0, 4\]"):
        run_onnxtrain(make_model("ReverseSequence", {"x": x, "sequence_lens": lengths}, opset=10),
                      {"x": x, "sequence_lens": lengths})


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis, cache_shape, length", [(-2, (2, 3, 8, 4), 3), (1, (3, 6, 2), 2), (2, (2, 2, 5), 5)])
def test_tensor_scatter(mode, axis, cache_shape, length):
    cache = rng.standard_normal(cache_shape).astype(np.float32)
    update_shape = list(cache_shape)
    update_shape[axis] = length
    update = rng.standard_normal(update_shape).astype(np.float32)
    capacity = cache_shape[axis]
    high = capacity + 3 if mode == "circular" else capacity - length + 1
    indices = rng.integers(0, high, cache_shape[0]).astype(np.int64)
    inputs = {"past_cache": cache, "update": update, "write_indices": indices}
    check_op("TensorScatter", inputs, {"mode": mode, "axis": axis}, opset=24, reference="onnx.reference")


def test_tensor_scatter_without_indices_and_int8():
    cache = rng.integers(-9, 9, (2, 5, 3)).astype(np.int8)
    update = rng.integers(-9, 9, (2, 2, 3)).astype(np.int8)
    check_op("TensorScatter", {"past_cache": cache, "update": update}, {"axis": 1}, opset=24,
             reference="onnx.reference")


def test_tensor_scatter_rejects_overflow():
    cache = np.zeros((1, 4, 2), np.float32)
    inputs = {"past_cache": cache, "update": np.ones((1, 3, 2), np.float32), "write_indices": np.array([2], np.int64)}
    with pytest.raises((ValueError, RuntimeError), match=r"write index 2 with 3 updates leaves the cache of 4"):
        run_onnxtrain(make_model("TensorScatter", inputs, {"axis": 1}, opset=24), inputs)


def test_center_crop_pad_rejects_an_axis_listed_twice():
    x, shape = np.ones((2, 3, 4), np.float32), np.array([2, 2], np.int64)
    model = make_model("CenterCropPad", {"x": x, "shape": shape}, {"axes": [1, -2]}, opset=18, constants=["shape"])
    with pytest.raises((ValueError, RuntimeError), match=r"axis -2 is listed twice in axes"):
        run_onnxtrain(model, {"x": x})
