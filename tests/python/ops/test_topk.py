"""ArgMax, ArgMin, TopK and CumSum against onnxruntime, or against numpy where
onnxruntime has no kernel for the type.

Tolerances: ArgMax/ArgMin and TopK select values, so they match exactly (indices always
exactly). CumSum: float32 rtol 1e-5/atol 1e-6 (onnxtrain adds in order in float32, as
onnxruntime does), float64 1e-12, float16/bfloat16 against a float32 reference on the same
values with rtol 2e-3/2e-2 (one rounding per output element: onnxtrain accumulates in
float32). Integers exactly."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)

FLOATS = [np.float32, np.float64, np.float16]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def values(shape, dtype=np.float32, distinct=False):
    dtype = np.dtype(dtype)
    if distinct:  # no ties, so that every reference agrees on the order
        flat = rng.permutation(int(np.prod(shape))).astype(np.float64)
        return (flat.reshape(shape) - (0 if dtype.kind == "u" else flat.size // 2)).astype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    low = 0 if dtype.kind == "u" else -20
    return rng.integers(low, 20, shape).astype(dtype)


def run(op, inputs, attrs=None, *, opset=13, n_outputs=1, constants=()):
    model = make_model(op, inputs, attrs, opset=opset, n_outputs=n_outputs, constants=constants)
    return run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None and k not in constants})


def bfloat16_values(shape):
    return rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)


# ---------------------------------------------------------------------------------------
# ArgMax / ArgMin


def numpy_arg(op, x, axis, keepdims, last):
    f = np.argmax if op == "ArgMax" else np.argmin
    if last:
        flipped = np.flip(x, axis=axis)
        index = x.shape[axis] - 1 - f(flipped, axis=axis)
    else:
        index = f(x, axis=axis)
    return np.expand_dims(index, axis) if keepdims else index


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_axes_keepdims_select_last_index(op, axis, keepdims, last):
    x = rng.integers(0, 4, (3, 4, 5)).astype(np.float32)  # many ties
    check_op(op, {"x": x}, {"axis": axis, "keepdims": keepdims, "select_last_index": last}, opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [1, 11, 12, 13])
def test_arg_every_opset(op, opset):
    x = values((4, 6), distinct=True)
    attrs = {"axis": 1 if opset < 11 else -1, "keepdims": 0}
    check_op(op, {"x": x}, attrs, opset=opset)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("last", [0, 1])
def test_arg_dtypes(op, dtype, last):
    x = values((5, 6), dtype)
    x[1] = x[1, 0]  # a row of ties
    ours = run(op, {"x": x}, {"axis": 1, "select_last_index": last})
    assert ours[0].dtype == np.int64
    np.testing.assert_array_equal(ours[0], numpy_arg(op, x, 1, True, last))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_bfloat16(op):
    x = bfloat16_values((4, 7))
    ours = run(op, {"x": x}, {"axis": 1, "keepdims": 0})
    np.testing.assert_array_equal(ours[0], numpy_arg(op, x.astype(np.float32), 1, False, False))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("n", [5, 100])  # the scalar loop and the vector lanes
def test_arg_nan_wins_like_numpy(op, last, n):
    x = values((3, n))
    x[0, [1, n - 2]] = np.nan
    x[1, 0] = np.nan
    x[2, n // 2] = np.nan
    ours = run(op, {"x": x}, {"axis": 1, "keepdims": 0, "select_last_index": last})
    np.testing.assert_array_equal(ours[0], [n - 2 if last else 1, 0, n // 2])
    ours_columns = run(op, {"x": np.ascontiguousarray(x.T)}, {"axis": 0, "keepdims": 0, "select_last_index": last})
    np.testing.assert_array_equal(ours_columns[0], ours[0])


@pytest.mark.parametrize(
    "shape,axis",
    [((100000,), 0), ((3, 70000), 1), ((70000, 3), 0), ((4, 1000, 300), 1), ((2, 3, 3000), 1)],
    ids=str,
)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_large(op, shape, axis):
    check_op(op, {"x": values(shape)}, {"axis": axis, "keepdims": 0})


def test_arg_empty_outer():
    ours = run("ArgMax", {"x": np.zeros((0, 3), np.float32)}, {"axis": 1})
    assert ours[0].shape == (0, 1) and ours[0].dtype == np.int64


def test_arg_over_an_empty_axis_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"cannot take the argmax over axis 1 of size 0 "
                                                          r"\(input shape \[3, 0\]\)"):
        run("ArgMax", {"x": np.zeros((3, 0), np.float32)}, {"axis": 1})


def test_arg_axis_out_of_range_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"axis 2 is out of range for rank 2 "
                                                          r"\(expected -2..1\)"):
        run("ArgMin", {"x": values((2, 3))}, {"axis": 2})


# ---------------------------------------------------------------------------------------
# TopK


def topk_inputs(x, k):
    return {"x": x, "k": np.array([k], dtype=np.int64)}


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_axes_k_largest(axis, k, largest):
    x = values((3, 4, 5), distinct=True)
    check_op("TopK", topk_inputs(x, k), {"axis": axis, "largest": largest}, opset=11, n_outputs=2)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_ties_take_the_lower_index_first(largest):
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]], dtype=np.float32)
    values_, indices = run("TopK", topk_inputs(x, 4), {"largest": largest}, opset=11, n_outputs=2)
    if largest:
        np.testing.assert_array_equal(indices, [[0, 2, 5, 3], [0, 1, 2, 3]])
        np.testing.assert_array_equal(values_, [[3, 3, 3, 2], [0, 0, 0, 0]])
    else:
        np.testing.assert_array_equal(indices, [[1, 4, 3, 0], [0, 1, 2, 3]])
        np.testing.assert_array_equal(values_, [[1, 1, 2, 3], [0, 0, 0, 0]])
    check_op("TopK", topk_inputs(x, 4), {"largest": largest}, opset=11, n_outputs=2)


def test_topk_opset_1_takes_k_as_attribute():
    x = values((4, 6), distinct=True)
    check_op("TopK", {"x": x}, {"k": 3, "axis": 1}, opset=1, n_outputs=2)


def test_topk_opset_10_takes_k_as_input():
    x = values((4, 6), distinct=True)
    check_op("TopK", topk_inputs(x, 2), {"axis": 0}, opset=10, n_outputs=2)


def test_topk_k_as_a_constant_and_unsorted_request():
    # sorted=0 leaves the order open; onnxtrain still returns sorted results.
    x = values((5, 8), distinct=True)
    ours = run("TopK", topk_inputs(x, 3), {"sorted": 0}, opset=11, n_outputs=2, constants=["k"])
    expected = -np.sort(-x, axis=1)[:, :3]
    np.testing.assert_array_equal(ours[0], expected)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_dtypes(dtype, largest):
    x = values((4, 9), dtype, distinct=True)
    ours = run("TopK", topk_inputs(x, 4), {"largest": largest}, opset=24, n_outputs=2)
    order = np.argsort(-x.astype(np.float64) if largest else x, axis=1, kind="stable")[:, :4]
    assert ours[0].dtype == x.dtype and ours[1].dtype == np.int64
    np.testing.assert_array_equal(ours[1], order)
    np.testing.assert_array_equal(ours[0], np.take_along_axis(x, order, axis=1))


def test_topk_bfloat16():
    x = bfloat16_values((3, 10))
    ours = run("TopK", topk_inputs(x, 4), {"axis": 1}, opset=24, n_outputs=2)
    order = np.argsort(-x.astype(np.float32), axis=1, kind="stable")[:, :4]
    assert ours[0].dtype == x.dtype
    np.testing.assert_array_equal(ours[0].astype(np.float32), np.take_along_axis(x.astype(np.float32), order, axis=1))
    np.testing.assert_array_equal(ours[1], order)


def test_topk_nan_counts_as_largest():
    x = np.array([[1.0, np.nan, 3.0, 2.0]], dtype=np.float32)
    top, top_index = run("TopK", topk_inputs(x, 2), {}, opset=11, n_outputs=2)
    np.testing.assert_array_equal(top_index, [[1, 2]])
    bottom, bottom_index = run("TopK", topk_inputs(x, 4), {"largest": 0}, opset=11, n_outputs=2)
    np.testing.assert_array_equal(bottom_index, [[0, 3, 2, 1]])


@pytest.mark.parametrize("k", [0, 5])
def test_topk_k_zero_and_k_equal_to_the_axis(k):
    x = values((3, 5), distinct=True)
    ours = run("TopK", topk_inputs(x, k), {}, opset=11, n_outputs=2)
    assert ours[0].shape == (3, k) and ours[1].shape == (3, k)
    np.testing.assert_array_equal(ours[0], -np.sort(-x, axis=1)[:, :k])


def test_topk_large_axis_and_many_slices():
    check_op("TopK", topk_inputs(values((8, 20000), distinct=True), 10), {}, opset=11, n_outputs=2)
    check_op("TopK", topk_inputs(values((2000, 7, 30), distinct=True), 7), {"axis": 1}, opset=11, n_outputs=2)


def test_topk_empty_input():
    ours = run("TopK", topk_inputs(np.zeros((0, 4), np.float32), 2), {}, opset=11, n_outputs=2)
    assert ours[0].shape == (0, 2)


def test_topk_dynamic_k():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1)
    graph = helper.make_graph(
        [node], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m"]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_empty_tensor_value_info("v"), helper.make_empty_tensor_value_info("i")])
    session = onnxtrain.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8).SerializeToString())
    for shape, k in (((2, 5), 3), ((4, 9), 1), ((1, 3), 3)):
        x = values(shape, distinct=True)
        v, i = session.run(None, {"x": x, "k": np.array([k], np.int64)})
        np.testing.assert_array_equal(v, -np.sort(-x, axis=1)[:, :k])


@pytest.mark.parametrize("k", [-1, 6])
def test_topk_k_out_of_range_raises(k):
    with pytest.raises((ValueError, RuntimeError), match=rf"k = {k} is out of range: expected 0 <= k <= 5 "
                                                         r"\(the size of axis -1 of input shape \[3, 5\]\)"):
        run("TopK", topk_inputs(values((3, 5)), k), {}, opset=11, n_outputs=2)


def test_topk_k_with_several_values_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"input 'K' must hold exactly one value.*shape \[2\]"):
        run("TopK", {"x": values((3, 5)), "k": np.array([1, 2], np.int64)}, {}, opset=11, n_outputs=2)


def test_topk_axis_out_of_range_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"axis 2 is out of range for rank 2"):
        run("TopK", topk_inputs(values((3, 5)), 1), {"axis": 2}, opset=11, n_outputs=2)


# ---------------------------------------------------------------------------------------
# CumSum


def numpy_cumsum(x, axis, exclusive, reverse):
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=axis)),
                              np.take(out, range(out.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
def test_cumsum_attributes(axis, exclusive, reverse, axis_dtype):
    x = values((3, 4, 5))
    check_op("CumSum", {"x": x, "axis": np.array(axis, axis_dtype)},
             {"exclusive": exclusive, "reverse": reverse}, opset=14, constants=["axis"])


@pytest.mark.parametrize("opset", [11, 14])
def test_cumsum_every_opset(opset):
    check_op("CumSum", {"x": values((4, 6)), "axis": np.array([1], np.int64)}, opset=opset)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumsum_dtypes(dtype, exclusive, reverse):
    x = values((4, 7), dtype)
    ours = run("CumSum", {"x": x, "axis": np.array([1], np.int64)}, {"exclusive": exclusive, "reverse": reverse},
               opset=14)
    assert ours[0].dtype == x.dtype
    np.testing.assert_allclose(ours[0], numpy_cumsum(x, 1, exclusive, reverse), rtol=1e-12)


def test_cumsum_float16():
    x = values((6, 9), np.float16)
    ours = run("CumSum", {"x": x, "axis": np.array([0], np.int64)}, {}, opset=14)
    assert ours[0].dtype == np.float16
    np.testing.assert_allclose(ours[0].astype(np.float32), np.cumsum(x.astype(np.float32), axis=0), rtol=2e-3,
                               atol=2e-3)


def test_cumsum_bfloat16():
    x = bfloat16_values((5, 8))
    ours = run("CumSum", {"x": x, "axis": np.array(1, np.int64)}, {"reverse": 1}, opset=14)
    assert ours[0].dtype == x.dtype
    wide = x.astype(np.float32)
    np.testing.assert_allclose(ours[0].astype(np.float32), np.flip(np.cumsum(np.flip(wide, 1), axis=1), 1), rtol=2e-2,
                               atol=2e-2)


@pytest.mark.parametrize("shape,axis", [((100000,), 0), ((3, 5000, 300), 1), ((70000, 3), 0), ((2, 40000), 1)],
                         ids=str)
def test_cumsum_large(shape, axis):
    check_op("CumSum", {"x": values(shape), "axis": np.array([axis], np.int64)}, {"exclusive": 1}, opset=14,
             rtol=1e-4, atol=1e-3)  # long float32 running sums: both sides round at every step


def test_cumsum_empty():
    ours = run("CumSum", {"x": np.zeros((0, 3), np.float32), "axis": np.array([1], np.int64)}, {}, opset=14)
    assert ours[0].shape == (0, 3)


def test_cumsum_axis_out_of_range_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"axis -3 is out of range for rank 2"):
        run("CumSum", {"x": values((2, 3)), "axis": np.array([-3], np.int64)}, {}, opset=14)


def test_cumsum_axis_of_a_float_type_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"input 'axis' must be int32 or int64, got float"):
        run("CumSum", {"x": values((2, 3)), "axis": np.array([1.0], np.float32)}, {}, opset=14)


def test_cumsum_unsupported_dtype_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"CumSum: unsupported element type int8"):
        run("CumSum", {"x": np.ones((2, 3), np.int8), "axis": np.array([1], np.int64)}, {}, opset=14)
