"""Shape and data-movement kernels: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat,
Split, Slice, Expand, Tile, Pad, Trilu, Shape, Size, Range, ConstantOfShape, Constant, EyeLike.

References: onnxruntime where it runs the op and dtype, otherwise onnx.reference or numpy.
These ops move values without arithmetic, so results must match exactly; the few that
compute (Range with floats) use float32 rtol 1e-6.

Scalar inputs (Range's start/limit/delta, Trilu's k, Pad's constant_value) and bfloat16
inputs are given as initializers (`constants=`): feeding 0-d and bfloat16 arrays through
the Python session is a binding matter tested elsewhere.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from onnx import helper, numpy_helper

from op_harness import check_op, feeds_of, make_model, run_onnxtrain

BF16 = np.dtype(ml_dtypes.bfloat16)
# Every element type onnxtrain holds; data movement must be exact for all of them.
ALL_DTYPES = [
    np.float32, np.float64, np.float16, BF16, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
]  # fmt: skip

rng = np.random.default_rng(0)


def data(shape, dtype=np.float32):
    """Distinct-looking values of `dtype` (booleans alternate)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    values = rng.permutation(n) % 120 if dtype.kind in "iu" else rng.standard_normal(n)
    return values.astype(np.float32 if dtype == BF16 else np.float64).astype(dtype).reshape(shape)


def run(op, inputs, attributes=None, *, opset=17, constants=(), n_outputs=1):
    model = make_model(op, inputs, attributes, opset=opset, constants=constants, n_outputs=n_outputs)
    return run_onnxtrain(model, feeds_of(inputs, constants))


def assert_same(ours, expected):
    """Exact equality, comparing bfloat16 by its bits (it comes back from onnxtrain as uint16)."""
    expected = np.asarray(expected)
    assert ours.shape == expected.shape, f"shape {ours.shape}, expected {expected.shape}"
    if expected.dtype == BF16:
        np.testing.assert_array_equal(ours.view(np.uint16), expected.view(np.uint16))
        return
    assert ours.dtype == expected.dtype, f"dtype {ours.dtype}, expected {expected.dtype}"
    np.testing.assert_array_equal(ours, expected)


def check_exact(op, inputs, attributes, expected, *, opset=17, constants=(), n_outputs=1):
    """Runs onnxtrain and compares with numpy-computed outputs; bfloat16 inputs become initializers."""
    constants = list(constants) + [k for k, v in inputs.items() if v is not None and v.dtype == BF16 and k not in constants]
    ours = run(op, inputs, attributes, opset=opset, constants=constants, n_outputs=n_outputs)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected):
        assert_same(a, b)
    return ours


def i64(*values):
    return np.array(values, dtype=np.int64)


# ---------------------------------------------------------------------------------------
# Reshape, Flatten, Squeeze, Unsqueeze


@pytest.mark.parametrize("opset", [5, 13, 14, 21])
@pytest.mark.parametrize(
    "in_shape,shape",
    [((2, 3, 4), (4, 6)), ((2, 3, 4), (-1,)), ((2, 3, 4), (0, -1)), ((2, 3, 4), (0, 0, 4)), ((2, 3, 4), (3, -1, 2)), ((6,), (1, 2, 1, 3))],
)
def test_reshape(opset, in_shape, shape):
    check_op("Reshape", {"x": data(in_shape), "shape": i64(*shape)}, opset=opset)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_reshape_every_dtype(dtype):
    x = data((2, 3, 4), dtype)
    check_exact("Reshape", {"x": x, "shape": i64(4, -1)}, None, x.reshape(4, 6))


def test_reshape_shape_as_constant_and_empty_tensor():
    check_op("Reshape", {"x": data((0, 3)), "shape": i64(3, 0, -1)}, opset=13, constants=["shape"], expected=[np.zeros((3, 3, 0), np.float32)])
    check_op("Reshape", {"x": data((2, 0)), "shape": i64(0, 5)}, {"allowzero": 1}, opset=14, expected=[np.zeros((0, 5), np.float32)])


def test_reshape_allowzero_keeps_zero():
    check_op("Reshape", {"x": data((0, 3, 4)), "shape": i64(3, 4, 0)}, {"allowzero": 1}, opset=14)


@pytest.mark.parametrize(
    "shape,message",
    [((-1, -1), "more than one -1"), ((5, 5), "cannot reshape"), ((-2, 12), "negative dimension"), ((7, -1), "cannot be inferred"),
     ((0, 0, 0, 0), "has rank 3")],
)  # fmt: skip
def test_reshape_errors(shape, message):
    with pytest.raises((ValueError, RuntimeError), match=message):
        run("Reshape", {"x": data((2, 3, 4)), "shape": i64(*shape)}, opset=13)


def test_reshape_allowzero_with_inferred_dim_fails():
    with pytest.raises((ValueError, RuntimeError), match="both 0"):
        run("Reshape", {"x": data((0, 3)), "shape": i64(0, -1)}, {"allowzero": 1}, opset=14)


@pytest.mark.parametrize("axis", [-4, -3, -2, -1, 0, 1, 2, 3, 4])
def test_flatten(axis):
    check_op("Flatten", {"x": data((2, 3, 4, 5))}, {"axis": axis}, opset=13)


def test_flatten_opset1_default_and_errors():
    check_op("Flatten", {"x": data((2, 3, 4))}, opset=1)
    with pytest.raises((ValueError, RuntimeError), match="axis 4 is out of range"):
        run("Flatten", {"x": data((2, 3, 4))}, {"axis": 4})


@pytest.mark.parametrize("axes", [None, [0], [-1], [0, 3], [3, 0]])
def test_squeeze(axes):
    x = data((1, 3, 4, 1))
    check_op("Squeeze", {"x": x}, None if axes is None else {"axes": axes}, opset=11)
    # onnxruntime rejects an empty optional-input name for axes; onnx.reference takes it.
    reference = "onnx.reference" if axes is None else "onnxruntime"
    check_op("Squeeze", {"x": x, "axes": None if axes is None else i64(*axes)}, opset=13, reference=reference)


def test_squeeze_errors():
    with pytest.raises((ValueError, RuntimeError), match="cannot squeeze axis 1 .* expected 1"):
        run("Squeeze", {"x": data((1, 3)), "axes": i64(1)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="axis 2 is out of range"):
        run("Squeeze", {"x": data((1, 3)), "axes": i64(2)}, opset=13)


@pytest.mark.parametrize("axes", [[0], [-1], [1, 0], [0, 4], [4, 0, 2], [-1, -4]])
def test_unsqueeze(axes):
    x = data((3, 4))
    expected = x.reshape(3, 4)
    rank = 2 + len(axes)
    for a in sorted(a % rank for a in axes):
        expected = np.expand_dims(expected, a)
    if all(-rank <= a < rank for a in axes):
        check_op("Unsqueeze", {"x": x}, {"axes": axes}, opset=11, expected=[expected])
        check_op("Unsqueeze", {"x": x, "axes": i64(*axes)}, opset=13, expected=[expected])


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.bool_, np.uint64])
def test_unsqueeze_and_squeeze_dtypes(dtype):
    x = data((3, 1), dtype)
    check_exact("Unsqueeze", {"x": x, "axes": i64(0)}, None, x[None], opset=13)
    check_exact("Squeeze", {"x": x}, None, x[:, 0], opset=13)


def test_unsqueeze_errors():
    with pytest.raises((ValueError, RuntimeError), match="axis 0 is listed twice in axes"):
        run("Unsqueeze", {"x": data((3,)), "axes": i64(0, 0)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="axis 3 is out of range"):
        run("Unsqueeze", {"x": data((3,)), "axes": i64(3)}, opset=13)


# ---------------------------------------------------------------------------------------
# Transpose


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_transpose_3d_all_permutations(perm):
    check_op("Transpose", {"x": data((2, 3, 4))}, {"perm": list(perm)})


@pytest.mark.parametrize(
    "shape,perm",
    [((70, 130), [1, 0]), ((2, 67, 129), [0, 2, 1]), ((2, 12, 33, 16), [0, 2, 1, 3]), ((2, 5, 33, 40), [0, 2, 3, 1]),
     ((2, 40, 5, 33), [0, 3, 1, 2]), ((3, 1, 5, 1), [1, 3, 0, 2]), ((3, 4, 5, 6, 7), [4, 2, 0, 3, 1]), ((300, 200), [1, 0])],
)  # fmt: skip
def test_transpose_shapes(shape, perm):
    check_op("Transpose", {"x": data(shape)}, {"perm": perm})


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_transpose_every_dtype(dtype):
    x = data((5, 33, 7), dtype)
    check_exact("Transpose", {"x": x}, {"perm": [2, 0, 1]}, x.transpose(2, 0, 1))
    check_exact("Transpose", {"x": x}, None, x.transpose())


def test_transpose_empty_scalar_and_identity():
    check_op("Transpose", {"x": data((0, 3))}, {"perm": [1, 0]}, expected=[np.zeros((3, 0), np.float32)])
    check_op("Transpose", {"x": np.array(2.5, np.float32)}, constants=["x"])
    check_op("Transpose", {"x": data((2, 3))}, {"perm": [0, 1]})


@pytest.mark.parametrize("perm,message", [([0, 0], "axis 0 is listed twice in perm"), ([0], "expected the input rank 2"),
                                          ([0, 2], "out of range")])
def test_transpose_errors(perm, message):
    with pytest.raises((ValueError, RuntimeError), match=message):
        run("Transpose", {"x": data((2, 3))}, {"perm": perm})


# ---------------------------------------------------------------------------------------
# Concat, Split


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_concat(axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[axis] = i + 1
    inputs = {f"x{i}": data(s) for i, s in enumerate(shapes)}
    check_op("Concat", inputs, {"axis": axis}, opset=13)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_concat_every_dtype_and_empty_part(dtype):
    a, b, c = data((2, 3), dtype), data((2, 0), dtype), data((2, 5), dtype)
    check_exact("Concat", {"a": a, "b": b, "c": c}, {"axis": 1}, np.concatenate([a, b, c], axis=1))


def test_concat_single_input_and_opset1_default_axis():
    check_op("Concat", {"a": data((2, 3))}, {"axis": 0})
    a, b = data((2, 3)), data((2, 2))
    check_op("Concat", {"a": a, "b": b}, opset=1, reference="onnx.reference", expected=[np.concatenate([a, b], 1)])


def test_concat_errors():
    with pytest.raises((ValueError, RuntimeError), match=r"input 1 has shape \[3, 3\], incompatible"):
        run("Concat", {"a": data((2, 3)), "b": data((3, 3))}, {"axis": 1})
    with pytest.raises((ValueError, RuntimeError), match="axis 2 is out of range"):
        run("Concat", {"a": data((2, 3)), "b": data((2, 3))}, {"axis": 2})
    with pytest.raises((ValueError, RuntimeError), match="input 1 is int32, expected float"):
        run("Concat", {"a": data((2, 3)), "b": data((2, 3), np.int32)}, {"axis": 0})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_split_equal(axis):
    x = data((6, 6, 6))
    for opset in (11, 13, 18):
        attributes = {"axis": axis} | ({"num_outputs": 3} if opset == 18 else {})
        check_op("Split", {"x": x}, attributes, opset=opset, n_outputs=3)


def test_split_sizes_attribute_and_input():
    x = data((4, 7))
    check_op("Split", {"x": x}, {"axis": 1, "split": [2, 0, 5]}, opset=11, n_outputs=3)
    check_op("Split", {"x": x, "split": i64(2, 0, 5)}, {"axis": 1}, opset=13, n_outputs=3)
    check_op("Split", {"x": x, "split": i64(1, 3)}, {"axis": 0}, opset=18, n_outputs=2, constants=["split"])


def test_split_uneven_num_outputs_opset18():
    check_op("Split", {"x": data((7, 2))}, {"num_outputs": 3}, opset=18, n_outputs=3)
    check_op("Split", {"x": data((2, 5))}, {"axis": 1, "num_outputs": 2}, opset=18, n_outputs=2)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.bool_, np.int64])
def test_split_dtypes(dtype):
    x = data((3, 4), dtype)
    check_exact("Split", {"x": x}, {"axis": 1, "num_outputs": 2}, [x[:, :2], x[:, 2:]], opset=18, n_outputs=2)


def test_split_errors():
    with pytest.raises((ValueError, RuntimeError), match=r"sums to 5, expected the size 7"):
        run("Split", {"x": data((7,)), "split": i64(2, 3)}, opset=13, n_outputs=2)
    with pytest.raises((ValueError, RuntimeError), match="equal parts"):
        run("Split", {"x": data((7,))}, opset=13, n_outputs=2)
    with pytest.raises((ValueError, RuntimeError), match="has 2 sizes, but the node has 3 outputs"):
        run("Split", {"x": data((7,)), "split": i64(2, 5)}, opset=13, n_outputs=3)


# ---------------------------------------------------------------------------------------
# Slice


@pytest.mark.parametrize(
    "starts,ends,axes,steps",
    [
        ([0, 1], [2, 3], None, None),
        ([1], [1000], [1], None),
        ([-3], [-1], [-1], [1]),
        ([-1], [-1000], [0], [-1]),
        ([4, 10], [0, -100], [1, 2], [-2, -3]),
        ([0, 0, 0], [2, 5, 6], [0, 1, 2], [1, 2, 3]),
        ([2], [2], [1], [1]),
        ([10], [0], [2], [-1]),
        ([np.iinfo(np.int64).max], [np.iinfo(np.int64).min], [0], [-1]),
        ([0], [np.iinfo(np.int64).max], [2], [4]),
        ([1], [3], [0], None),  # a contiguous block: returned as a view
    ],
)
def test_slice(starts, ends, axes, steps):
    inputs = {"x": data((3, 5, 6)), "starts": i64(*starts), "ends": i64(*ends)}
    inputs["axes"] = None if axes is None else i64(*axes)
    inputs["steps"] = None if steps is None else i64(*steps)
    check_op("Slice", inputs, opset=13)


def test_slice_int32_indices_and_constants():
    inputs = {"x": data((4, 5)), "starts": np.array([1], np.int32), "ends": np.array([-1], np.int32), "axes": np.array([1], np.int32)}
    check_op("Slice", inputs, opset=13, constants=["starts", "ends", "axes"])


def test_slice_opset1_attributes():
    x = data((4, 5))
    check_op("Slice", {"x": x}, {"starts": [1, 0], "ends": [3, 100], "axes": [0, 1]}, opset=9)
    check_op("Slice", {"x": x}, {"starts": [1], "ends": [-1]}, opset=1, reference="onnx.reference", expected=[x[1:-1]])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_slice_every_dtype(dtype):
    x = data((4, 9), dtype)
    check_exact("Slice", {"x": x, "s": i64(-1, 1), "e": i64(-5, 8), "a": i64(0, 1), "t": i64(-1, 3)}, None, x[-1:-5:-1, 1:8:3])


def test_slice_errors():
    with pytest.raises((ValueError, RuntimeError), match="steps must not be 0"):
        run("Slice", {"x": data((4,)), "s": i64(0), "e": i64(2), "a": i64(0), "t": i64(0)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="same length"):
        run("Slice", {"x": data((4,)), "s": i64(0, 1), "e": i64(2)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="axis 3 is out of range"):
        run("Slice", {"x": data((4,)), "s": i64(0), "e": i64(2), "a": i64(3)}, opset=13)


# ---------------------------------------------------------------------------------------
# Expand, Tile


@pytest.mark.parametrize(
    "in_shape,shape",
    [((3, 1), (2, 3, 4)), ((1,), (5,)), ((4,), (3, 1)), ((2, 1, 3), (1, 4, 1)), ((1, 3), (0, 3)), ((), (2, 2)), ((2, 3), (2, 3))],
)  # fmt: skip
def test_expand(in_shape, shape):
    check_op("Expand", {"x": data(in_shape), "shape": i64(*shape)}, opset=13, constants=["x"] if in_shape == () else [])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_expand_every_dtype(dtype):
    x = data((3, 1), dtype)
    check_exact("Expand", {"x": x, "shape": i64(2, 3, 5)}, None, np.broadcast_to(x, (2, 3, 5)))


def test_expand_error():
    with pytest.raises((ValueError, RuntimeError), match=r"cannot expand \[3\] to \[4\]"):
        run("Expand", {"x": data((3,)), "shape": i64(4)}, opset=13)


@pytest.mark.parametrize("in_shape,repeats", [((2, 3), (1, 1)), ((2, 3), (3, 2)), ((4,), (5,)), ((2, 1, 3), (2, 3, 0)), ((3, 1), (1, 40))])
def test_tile(in_shape, repeats):
    check_op("Tile", {"x": data(in_shape), "repeats": i64(*repeats)}, opset=13)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.bool_, np.int8, np.uint32])
def test_tile_dtypes(dtype):
    x = data((2, 3), dtype)
    check_exact("Tile", {"x": x, "r": i64(2, 2)}, None, np.tile(x, (2, 2)))


def test_tile_error():
    with pytest.raises((ValueError, RuntimeError), match="expected the input rank 2"):
        run("Tile", {"x": data((2, 3)), "r": i64(2)}, opset=13)


# ---------------------------------------------------------------------------------------
# Pad


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 2, 2, 1], [0, 3, 0, 0], [2, 2, 2, 2]])
def test_pad_modes(mode, pads):
    check_op("Pad", {"x": data((3, 4)), "pads": i64(*pads)}, {"mode": mode}, opset=19, reference="onnx.reference")


def test_pad_constant_value_and_axes():
    x = data((2, 3, 4))
    value = np.array(1.5, np.float32)
    check_op("Pad", {"x": x, "pads": i64(1, 0, 2, 1, 0, 0), "v": value}, opset=11, constants=["v"])
    check_op("Pad", {"x": x, "pads": i64(1, 2, 3, 4), "v": value, "axes": i64(-1, 0)}, opset=18, constants=["v"])
    check_op("Pad", {"x": x}, {"pads": [0, 1, 0, 0, 1, 2], "value": 2.0}, opset=2)
    check_op("Pad", {"x": x}, {"pads": [0, 1, 1, 0, 1, 2], "mode": "reflect"}, opset=10)


def test_pad_negative_pads_crop():
    x = data((4, 5))
    check_op("Pad", {"x": x, "pads": i64(-1, 2, 1, -2)}, opset=13)
    check_op("Pad", {"x": x, "pads": i64(-1, 0, 0, -2)}, {"mode": "edge"}, opset=13)


def test_pad_reflect_wider_than_input():
    x = data((3,))
    check_op("Pad", {"x": x, "pads": i64(5, 4)}, {"mode": "reflect"}, opset=19, reference="onnx.reference")
    check_op("Pad", {"x": x, "pads": i64(7, 5)}, {"mode": "wrap"}, opset=19, reference="onnx.reference")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_pad_every_dtype(dtype):
    x = data((2, 3), dtype)
    v = np.array(1, dtype=dtype)
    expected = np.pad(x, ((1, 0), (2, 1)), constant_values=v)
    check_exact("Pad", {"x": x, "pads": i64(1, 2, 0, 1), "v": v}, None, expected, opset=18, constants=["v"])
    check_exact("Pad", {"x": x, "pads": i64(1, 2, 0, 1)}, {"mode": "edge"}, np.pad(x, ((1, 0), (2, 1)), mode="edge"), opset=18)


def test_pad_empty_input_constant():
    check_op("Pad", {"x": data((0, 2)), "pads": i64(1, 1, 1, 1)}, opset=13)


def test_pad_errors():
    with pytest.raises((ValueError, RuntimeError), match="expected 4"):
        run("Pad", {"x": data((2, 3)), "pads": i64(1, 1)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="unknown pad mode 'wrap'"):
        run("Pad", {"x": data((2, 3)), "pads": i64(1, 1, 1, 1)}, {"mode": "wrap"}, opset=18)
    with pytest.raises((ValueError, RuntimeError), match="crop more than"):
        run("Pad", {"x": data((2, 3)), "pads": i64(-2, 0, -1, 0)}, opset=13)
    with pytest.raises((ValueError, RuntimeError), match="empty axis"):
        run("Pad", {"x": data((0, 3)), "pads": i64(1, 0, 0, 0)}, {"mode": "edge"}, opset=13)


# ---------------------------------------------------------------------------------------
# Trilu, EyeLike


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 3, -4, 10])
@pytest.mark.parametrize("shape", [(4, 5), (2, 5, 3), (1, 1)])
def test_trilu(upper, k, shape):
    inputs = {"x": data(shape), "k": None if k is None else np.array(k, np.int64)}
    check_op("Trilu", inputs, {"upper": upper}, opset=14, constants=[] if k is None else ["k"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_trilu_every_dtype(dtype):
    x = data((3, 4), dtype)
    check_exact("Trilu", {"x": x}, {"upper": 0}, np.tril(x), opset=14)


def test_trilu_error():
    with pytest.raises((ValueError, RuntimeError), match="expected rank >= 2"):
        run("Trilu", {"x": data((3,))}, opset=14)


@pytest.mark.parametrize("k", [0, 1, -2, 7])
@pytest.mark.parametrize("dtype", [None, 1, 6, 7, 9, 11])
def test_eyelike(k, dtype):
    attributes = {"k": k} | ({} if dtype is None else {"dtype": dtype})
    check_op("EyeLike", {"x": data((3, 5), np.int32)}, attributes, opset=9, reference="onnx.reference")


def test_eyelike_error():
    with pytest.raises((ValueError, RuntimeError), match="expected rank 2"):
        run("EyeLike", {"x": data((3,))}, opset=9)


# ---------------------------------------------------------------------------------------
# Shape, Size, Range, ConstantOfShape, Constant


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (None, 2), (None, -1), (1, -1), (3, 1), (-10, 10)])
def test_shape(start, end):
    attributes = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check_op("Shape", {"x": data((2, 3, 4, 5))}, attributes, opset=15)


def test_shape_opset13_and_size():
    check_op("Shape", {"x": data((2, 0, 4))}, opset=13)
    check_op("Shape", {"x": np.array(1.0, np.float32)}, opset=13, constants=["x"])
    check_op("Size", {"x": data((2, 3, 4))}, opset=13)
    check_op("Size", {"x": data((2, 0))}, opset=13)


@pytest.mark.parametrize(
    "dtype,start,limit,delta",
    [(np.float32, 1, 5, 0.5), (np.float32, 10, 2, -3), (np.float64, -1.5, 2.25, 0.25), (np.int32, 10, 4, -3),
     (np.int64, 0, 10, 3), (np.int16, 5, 5, 1), (np.int64, 0, -5, 1)],
)  # fmt: skip
def test_range(dtype, start, limit, delta):
    inputs = {"start": np.array(start, dtype), "limit": np.array(limit, dtype), "delta": np.array(delta, dtype)}
    check_op("Range", inputs, opset=11, constants=list(inputs), rtol=1e-6, reference="onnx.reference")


def test_range_errors():
    inputs = {"start": np.array(0, np.int64), "limit": np.array(4, np.int64), "delta": np.array(0, np.int64)}
    with pytest.raises((ValueError, RuntimeError), match="delta must not be 0"):
        run("Range", inputs, opset=11, constants=list(inputs))
    inputs = {"start": np.array([0, 1], np.int64), "limit": np.array(4, np.int64), "delta": np.array(1, np.int64)}
    with pytest.raises((ValueError, RuntimeError), match="expected a scalar"):
        run("Range", inputs, opset=11, constants=["limit", "delta"])


@pytest.mark.parametrize(
    "shape,value",
    [((2, 3), None), ((4,), numpy_helper.from_array(np.array([7], np.int32))), ((0, 2), None),
     ((), numpy_helper.from_array(np.array([1.5], np.float64))), ((2, 2), numpy_helper.from_array(np.array([True])))],
)  # fmt: skip
def test_constant_of_shape(shape, value):
    attributes = {} if value is None else {"value": value}
    check_op("ConstantOfShape", {"shape": np.array(shape, np.int64).reshape(len(shape))}, attributes, opset=9, reference="onnx.reference")


def test_constant_of_shape_error():
    with pytest.raises((ValueError, RuntimeError), match="negative dimension"):
        run("ConstantOfShape", {"shape": i64(2, -1)}, opset=9)


@pytest.mark.parametrize(
    "attribute,value",
    [("value_float", 2.5), ("value_floats", [1.0, 2.0]), ("value_int", 3), ("value_ints", [1, 2, 3]),
     ("value", numpy_helper.from_array(np.arange(6, dtype=np.int16).reshape(2, 3)))],
)  # fmt: skip
def test_constant(attribute, value):
    node = helper.make_node("Constant", [], ["out0"], **{attribute: value})
    graph = helper.make_graph([node], "constant", [], [helper.make_empty_tensor_value_info("out0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    from onnx.reference import ReferenceEvaluator

    (ours,) = run_onnxtrain(model, {})
    (theirs,) = ReferenceEvaluator(model).run(None, {})
    assert_same(ours, theirs)


def test_constant_string_is_rejected():
    node = helper.make_node("Constant", [], ["out0"], value_string="text")
    graph = helper.make_graph([node], "constant", [], [helper.make_empty_tensor_value_info("out0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises((ValueError, RuntimeError), match="string tensors are not supported"):
        run_onnxtrain(model, {})


# ---------------------------------------------------------------------------------------
# Views stay correct when their source is reused


def test_views_chain_through_a_graph():
    """Reshape -> Transpose -> Slice -> Squeeze -> Add: views of intermediates must not be
    overwritten by later kernels reusing buffers."""
    x = data((2, 3, 4))
    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
        helper.make_node("Slice", ["t", "st", "en"], ["sl"]),
        helper.make_node("Unsqueeze", ["sl", "ax"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax"], ["q"]),
        helper.make_node("Add", ["q", "q"], ["y"]),
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in {"s": i64(6, 4), "st": i64(1), "en": i64(3), "ax": i64(0)}.items()]
    graph = helper.make_graph(
        nodes, "views", [helper.make_tensor_value_info("x", 1, x.shape)], [helper.make_empty_tensor_value_info("y")], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    expected = x.reshape(6, 4).T[1:3] * 2
    for _ in range(2):  # the second run is served from the memory plan
        (y,) = run_onnxtrain(model, {"x": x})
        np.testing.assert_array_equal(y, expected)
