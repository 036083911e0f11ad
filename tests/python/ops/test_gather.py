"""Indexing kernels: Gather, GatherElements, GatherND, ScatterND, ScatterElements, Scatter,
OneHot, NonZero, Compress.

References: onnxruntime, or onnx.reference / numpy where onnxruntime lacks the op version
or dtype. Indexing moves values, so results must match exactly (float reductions in
ScatterND/ScatterElements add or multiply at most a few values: float32 rtol 1e-6).
Out-of-range indices must raise an error that names the index and the bound.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from op_harness import check_op, feeds_of, make_model, run_onnxtrain

BF16 = np.dtype(ml_dtypes.bfloat16)
ALL_DTYPES = [
    np.float32, np.float64, np.float16, BF16, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
]  # fmt: skip
INDEX_DTYPES = [np.int32, np.int64]

rng = np.random.default_rng(1)


def data(shape, dtype=np.float32):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    values = rng.permutation(n) % 100 if dtype.kind in "iu" else rng.standard_normal(n)
    return values.astype(np.float32 if dtype == BF16 else np.float64).astype(dtype).reshape(shape)


def run(op, inputs, attributes=None, *, opset=17, constants=()):
    model = make_model(op, inputs, attributes, opset=opset, constants=constants)
    return run_onnxtrain(model, feeds_of(inputs, constants))


def check_exact(op, inputs, attributes, expected, *, opset=17):
    """Compares with a numpy-computed output; bfloat16 inputs become initializers and are
    compared by their bits (onnxtrain returns bfloat16 as uint16)."""
    constants = [k for k, v in inputs.items() if v is not None and v.dtype == BF16]
    (ours,) = run(op, inputs, attributes, opset=opset, constants=constants)
    expected = np.asarray(expected)
    assert ours.shape == expected.shape
    if expected.dtype == BF16:
        np.testing.assert_array_equal(ours.view(np.uint16), expected.view(np.uint16))
    else:
        assert ours.dtype == expected.dtype
        np.testing.assert_array_equal(ours, expected)


# ---------------------------------------------------------------------------------------
# Gather


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("indices", [[0], [[1, -1], [0, 2]], 2, []])
def test_gather(index_dtype, axis, indices):
    idx = np.array(indices, dtype=index_dtype)
    constants = ["i"] if idx.ndim == 0 else []
    check_op("Gather", {"x": data((3, 4, 5)), "i": idx}, {"axis": axis}, opset=13, constants=constants)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gather_every_dtype(dtype):
    x = data((4, 6), dtype)
    idx = np.array([[3, -4], [1, 1]], np.int64)
    check_exact("Gather", {"x": x, "i": idx}, {"axis": 1}, np.take(x, idx, axis=1))
    check_exact("Gather", {"x": x, "i": idx}, {"axis": 0}, np.take(x, idx, axis=0))


def test_gather_large_and_opset1():
    check_op("Gather", {"x": data((1000, 64)), "i": rng.integers(-1000, 1000, size=(500,))}, opset=13)
    check_op("Gather", {"x": data((5, 3)), "i": np.array([4, 0], np.int64)}, opset=1, reference="onnx.reference")


def test_gather_empty_data_axis_with_no_indices():
    check_op("Gather", {"x": data((0, 3)), "i": np.zeros((0,), np.int64)}, opset=13)


@pytest.mark.parametrize("bad", [3, -4, 100])
def test_gather_index_out_of_range(bad):
    with pytest.raises((ValueError, RuntimeError), match=rf"index {bad} is out of range for axis 0 of size 3 \(expected -3..2\)"):
        run("Gather", {"x": data((3, 2)), "i": np.array([0, bad], np.int64)}, opset=13)


def test_gather_errors():
    with pytest.raises((ValueError, RuntimeError), match="indices must be int32 or int64"):
        run("Gather", {"x": data((3,)), "i": np.array([0], np.int16)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="axis 2 is out of range"):
        run("Gather", {"x": data((3, 2)), "i": np.array([0], np.int64)}, {"axis": 2}, opset=13)


# ---------------------------------------------------------------------------------------
# GatherElements


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_elements(index_dtype, axis):
    x = data((3, 4, 5))
    shape = [2, 3, 4]
    shape[axis] = 6
    size = x.shape[axis]
    idx = rng.integers(-size, size, size=shape).astype(index_dtype)
    check_op("GatherElements", {"x": x, "i": idx}, {"axis": axis}, opset=13)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.bool_, np.int8, np.uint64])
def test_gather_elements_dtypes(dtype):
    x = data((3, 4), dtype)
    idx = np.array([[2, 0, 1, -1]], np.int64)
    check_exact("GatherElements", {"x": x, "i": idx}, {"axis": 0}, np.take_along_axis(x, idx % 3, axis=0))


def test_gather_elements_errors():
    with pytest.raises((ValueError, RuntimeError), match=r"index 4 is out of range for axis 1 of size 4"):
        run("GatherElements", {"x": data((2, 4)), "i": np.array([[0, 4]], np.int64)}, {"axis": 1}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="exceeds data shape"):
        run("GatherElements", {"x": data((2, 4)), "i": np.zeros((3, 1), np.int64)}, {"axis": 1}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="expected the rank 2"):
        run("GatherElements", {"x": data((2, 4)), "i": np.zeros((3,), np.int64)}, opset=13)


# ---------------------------------------------------------------------------------------
# GatherND


@pytest.mark.parametrize(
    "data_shape,indices,batch_dims",
    [((2, 2), [[0, 0], [1, 1]], 0), ((2, 2), [[1], [0]], 0), ((2, 2, 2), [[0, 1], [1, 0]], 0), ((2, 2, 2), [[[0, 1]], [[1, 0]]], 0),
     ((2, 2, 2), [[1], [0]], 1), ((2, 3, 4), [[[1, -1], [0, 0]], [[2, 3], [-3, 1]]], 1), ((2, 3, 4, 5), [[[1]], [[-2]]], 1),
     ((2, 3, 4), [[1], [2]], 1), ((2, 3, 4), [[[0], [1], [-1]], [[3], [0], [1]]], 2)],
)  # fmt: skip
def test_gather_nd(data_shape, indices, batch_dims):
    check_op("GatherND", {"x": data(data_shape), "i": np.array(indices, np.int64)}, {"batch_dims": batch_dims}, opset=13)


def test_gather_nd_dtypes_and_opset11():
    x = data((3, 4), np.int8)
    check_op("GatherND", {"x": x, "i": np.array([[2, 3], [0, -1]], np.int64)}, opset=11)
    xb = data((3, 4), BF16)
    check_exact("GatherND", {"x": xb, "i": np.array([[2], [0]], np.int64)}, None, xb[[2, 0]], opset=13)


def test_gather_nd_errors():
    with pytest.raises((ValueError, RuntimeError), match=r"index 2 is out of range for axis 1 of size 2"):
        run("GatherND", {"x": data((2, 2)), "i": np.array([[0, 2]], np.int64)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="address 3 axes, expected 1..2"):
        run("GatherND", {"x": data((2, 2)), "i": np.array([[0, 0, 0]], np.int64)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="batch dimension 0 differs"):
        run("GatherND", {"x": data((2, 2)), "i": np.array([[0]], np.int64)}, {"batch_dims": 1}, opset=13)


# ---------------------------------------------------------------------------------------
# ScatterND


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    x = data((4, 4, 4))
    idx = np.array([[0], [2]], np.int64)
    updates = data((2, 4, 4))
    check_op("ScatterND", {"x": x, "i": idx, "u": updates}, {"reduction": reduction}, opset=18, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_duplicates_accumulate(reduction):
    x = data((5,))
    idx = np.array([[1], [1], [-1], [1]], np.int64)
    updates = data((4,))
    expected = x.copy()
    op = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    for i, u in zip(idx[:, 0], updates):
        expected[i] = op(expected[i], u)
    check_op("ScatterND", {"x": x, "i": idx, "u": updates}, {"reduction": reduction}, opset=18, expected=[expected], rtol=1e-6)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_scatter_nd_every_dtype(dtype):
    x = data((3, 4), dtype)
    updates = data((2,), dtype)
    idx = np.array([[0, 1], [2, -1]], np.int64)
    expected = x.copy()
    expected[0, 1], expected[2, -1] = updates
    check_exact("ScatterND", {"x": x, "i": idx, "u": updates}, None, expected, opset=11)


def test_scatter_nd_errors():
    with pytest.raises((ValueError, RuntimeError), match=r"index -4 is out of range for axis 0 of size 3"):
        run("ScatterND", {"x": data((3,)), "i": np.array([[-4]], np.int64), "u": data((1,))}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match=r"updates has shape \[2\], expected \[1\]"):
        run("ScatterND", {"x": data((3,)), "i": np.array([[1]], np.int64), "u": data((2,))}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="unknown reduction 'max'"):
        run("ScatterND", {"x": data((3,)), "i": np.array([[1]], np.int64), "u": data((1,))}, {"reduction": "max"}, opset=16)


# ---------------------------------------------------------------------------------------
# ScatterElements, Scatter


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(index_dtype, axis, reduction):
    x = data((4, 5))
    size = x.shape[axis]
    shape = [3, 4]
    # distinct indices along the axis keep "none" deterministic
    idx = np.stack([rng.permutation(size)[: shape[axis]] for _ in range(shape[1 - axis % 2])], axis=1 - axis % 2)
    idx = np.where(rng.random(idx.shape) < 0.5, idx - size, idx).astype(index_dtype)
    updates = data(idx.shape)
    check_op("ScatterElements", {"x": x, "i": idx, "u": updates}, {"axis": axis, "reduction": reduction}, opset=18, rtol=1e-6)


def test_scatter_elements_duplicates_add_and_opsets():
    x = np.zeros((1, 5), np.float32)
    idx = np.array([[1, 1, 3]], np.int64)
    u = np.array([[1.0, 2.0, 3.0]], np.float32)
    check_op("ScatterElements", {"x": x, "i": idx, "u": u}, {"axis": 1, "reduction": "add"}, opset=16)
    check_op("ScatterElements", {"x": x, "i": idx[:, :1], "u": u[:, :1]}, {"axis": 1}, opset=11)
    check_op("Scatter", {"x": x, "i": idx[:, :1], "u": u[:, :1]}, {"axis": 1}, opset=10)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.bool_, np.int8, np.uint32])
def test_scatter_elements_dtypes(dtype):
    x = data((3, 3), dtype)
    u = data((1, 3), dtype)
    idx = np.array([[2, 0, -2]], np.int64)
    expected = x.copy()
    for j in range(3):
        expected[idx[0, j] % 3, j] = u[0, j]
    check_exact("ScatterElements", {"x": x, "i": idx, "u": u}, {"axis": 0}, expected, opset=13)


def test_scatter_elements_errors():
    with pytest.raises((ValueError, RuntimeError), match=r"index 5 is out of range for axis 1 of size 5"):
        run("ScatterElements", {"x": data((2, 5)), "i": np.array([[5]], np.int64), "u": data((1, 1))}, {"axis": 1}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="expected the indices shape"):
        run("ScatterElements", {"x": data((2, 5)), "i": np.array([[1]], np.int64), "u": data((1, 2))}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="unsupported element type bool"):
        run("ScatterElements", {"x": data((2,), np.bool_), "i": np.array([1], np.int64), "u": data((1,), np.bool_)}, {"reduction": "add"}, opset=16)


# ---------------------------------------------------------------------------------------
# OneHot


@pytest.mark.parametrize("axis", [None, 0, 1, -1, -2])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32, np.float32])
def test_one_hot(axis, index_dtype):
    indices = np.array([[0, 3, -1], [9, -10, 5]], dtype=index_dtype)  # 9 and -10 are out of range: all 'off'
    depth = np.array(5, np.int64)
    values = np.array([2, 7], np.float32)
    attributes = {} if axis is None else {"axis": axis}
    # onnxruntime runs OneHot with int64 indices only; the others are checked against numpy.
    expected = None if index_dtype == np.int64 else [one_hot(indices, 5, values, -1 if axis is None else axis)]
    check_op("OneHot", {"i": indices, "d": depth, "v": values}, attributes, opset=11, constants=["d"], expected=expected)


def one_hot(indices, depth, values, axis):
    """numpy OneHot: negative indices wrap once, anything else out of range is all 'off'."""
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = (np.arange(depth) == idx[..., None]) & (idx[..., None] >= 0)
    hot = np.moveaxis(hot, -1, axis if axis >= 0 else axis + hot.ndim)
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def test_one_hot_value_types_and_float_depth():
    indices = np.array([1, 0, 2], np.int64)
    for values in (np.array([0, 1], np.int32), np.array([False, True]), np.array([-1.0, 1.0], np.float64)):
        expected = [one_hot(indices, 3, values, -1)]
        check_op("OneHot", {"i": indices, "d": np.array([3.0], np.float32), "v": values}, opset=11, expected=expected)


def test_one_hot_errors():
    with pytest.raises((ValueError, RuntimeError), match="depth is 0"):
        run("OneHot", {"i": np.array([0], np.int64), "d": np.array([0], np.int64), "v": np.array([0, 1], np.float32)}, opset=11)
    with pytest.raises((ValueError, RuntimeError), match=r"expected \[off, on\]"):
        run("OneHot", {"i": np.array([0], np.int64), "d": np.array([2], np.int64), "v": np.array([0, 1, 2], np.float32)}, opset=11)


# ---------------------------------------------------------------------------------------
# NonZero, Compress


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0, 3)])
def test_non_zero(dtype, shape):
    x = (data(shape, np.int64) % 3 == 0).astype(dtype) * (data(shape, np.int64) % 5).astype(dtype) if dtype != np.bool_ else data(shape, np.bool_)
    check_op("NonZero", {"x": x}, opset=13, reference="onnx.reference")


def test_non_zero_scalar_and_nan():
    check_op("NonZero", {"x": np.array(3.0, np.float32)}, opset=13, constants=["x"])
    check_op("NonZero", {"x": np.array([0.0, np.nan, -0.0, 1.0], np.float32)}, opset=13)


# A condition longer than the axis may only select inside it (test_compress_errors).
@pytest.mark.parametrize(
    "axis,condition",
    [(axis, c) for axis in (None, 0, 1, -1) for c in ([True, False, True], [False, False], [True])]
    + [(axis, [False, True, True, True]) for axis in (None, 1, -1)],
)
def test_compress(axis, condition):
    x = data((3, 4))
    attributes = {} if axis is None else {"axis": axis}
    check_op("Compress", {"x": x, "c": np.array(condition)}, attributes, opset=11)


@pytest.mark.parametrize("dtype", [BF16, np.bool_, np.int16])
def test_compress_dtypes(dtype):
    x = data((3, 2), dtype)
    check_exact("Compress", {"x": x, "c": np.array([True, False, True])}, {"axis": 0}, x[[0, 2]], opset=11)


def test_compress_errors():
    with pytest.raises((ValueError, RuntimeError), match="selects entry 3, but the axis has size 3"):
        run("Compress", {"x": data((3,)), "c": np.array([True, False, False, True])}, {"axis": 0}, opset=11)
    with pytest.raises((ValueError, RuntimeError), match="expected a 1-D bool tensor"):
        run("Compress", {"x": data((3,)), "c": np.array([1, 0, 1], np.int64)}, {"axis": 0}, opset=11)
