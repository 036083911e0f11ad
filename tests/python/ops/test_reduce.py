"""Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceLogSumExp,
ReduceLogSum, ReduceL1, ReduceL2, ReduceSumSquare) against onnxruntime, or against
onnx.reference / numpy where onnxruntime has no kernel for the type.

Tolerances: float32 rtol 1e-5/atol 1e-6 (onnxtrain sums float32 in double, so it is at
least as accurate as the reference); float64 1e-12; float16 rtol 2e-3 and bfloat16 rtol
2e-2 against a float32 reference on the same (rounded) inputs: onnxtrain accumulates
the 16-bit floats in float32 and rounds once, so the error is half an ulp of the result
(4.9e-4 and 3.9e-3) plus the float32 noise. Integers and bools exactly."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import check_op, make_model, run_onnxtrain, run_reference

rng = np.random.default_rng(0)

OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceLogSumExp",
    "ReduceLogSum",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
]
# The opset from which axes is an input rather than an attribute.
AXES_INPUT_SINCE = {op: 13 if op == "ReduceSum" else 18 for op in OPS}

TOLERANCE = {np.float32: (1e-5, 1e-6), np.float64: (1e-12, 1e-12)}

# Numpy statements of each op (for the types onnxruntime lacks).
NUMPY = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceLogSumExp": lambda x, a, k: np.log(np.sum(np.exp(x), axis=a, keepdims=k)),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k),
}


def data(shape, dtype=np.float32, op="ReduceSum"):
    """Values that keep every op finite: positive for the logs, near 1 for products."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        low = 1 if op in ("ReduceLogSum", "ReduceProd") or dtype.kind == "u" else -5
        return rng.integers(low, 4 if op == "ReduceProd" else 10, shape).astype(dtype)
    if op == "ReduceLogSum":
        return rng.uniform(0.5, 2, shape).astype(dtype)
    if op == "ReduceProd":
        return rng.uniform(0.8, 1.25, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def reduce_inputs(op, x, axes, opset):
    """The node's inputs and attributes for `axes` (None: not given) at `opset`."""
    if opset >= AXES_INPUT_SINCE[op]:
        return {"x": x, "axes": None if axes is None else np.array(axes, dtype=np.int64)}, {}
    return {"x": x}, ({} if axes is None else {"axes": list(axes)})


def check_reduce(op, x, axes=None, keepdims=1, *, opset=18, constants=(), rtol=None, atol=None, **attributes):
    inputs, attrs = reduce_inputs(op, x, axes, opset)
    attrs.update(keepdims=keepdims, **attributes)
    default_rtol, default_atol = TOLERANCE.get(x.dtype.type, (0, 0))
    return check_op(
        op,
        inputs,
        attrs,
        opset=opset,
        constants=constants,
        rtol=default_rtol if rtol is None else rtol,
        atol=default_atol if atol is None else atol,
    )


def check_against_float32(op, x, axes, keepdims=1, *, rtol, atol, opset=18):
    """A 16-bit float input against the float32 reference on the same values."""
    inputs, attrs = reduce_inputs(op, x, axes, opset)
    attrs["keepdims"] = keepdims
    ours = run_onnxtrain(make_model(op, inputs, attrs, opset=opset), {k: v for k, v in inputs.items() if v is not None})
    assert ours[0].dtype == x.dtype
    wide = dict(inputs, x=x.astype(np.float32))
    expected = run_reference(make_model(op, wide, attrs, opset=opset), {k: v for k, v in wide.items() if v is not None},
                             "onnxruntime")[0]
    np.testing.assert_allclose(ours[0].astype(np.float32), expected, rtol=rtol, atol=atol)


AXES = [None, [0], [1], [2], [-1], [0, 1], [1, 2], [0, 2], [-3, -1], [2, 0, 1]]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_axes_and_keepdims_float32(op, axes, keepdims):
    check_reduce(op, data((3, 4, 5), op=op), axes, keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", [1, 11, 13, 17, 18, 20])
def test_every_opset_interface(op, opset):
    """Axes as attribute (before 13 for ReduceSum, 18 for the others), input after."""
    if opset == 20 and op not in ("ReduceMax", "ReduceMin"):
        opset = 18
    if opset == 1:  # negative axes arrived in opset 11
        check_reduce(op, data((2, 3, 4), op=op), [0, 2], 0, opset=opset)
    else:
        check_reduce(op, data((2, 3, 4), op=op), [-1, 0], 0, opset=opset)
        check_reduce(op, data((2, 3, 4), op=op), None, 1, opset=opset)


@pytest.mark.parametrize("op", OPS)
def test_axes_as_a_constant_input(op):
    x = data((4, 6), op=op)
    check_op(op, {"x": x, "axes": np.array([1], dtype=np.int64)}, {"keepdims": 0}, opset=18, constants=["axes"])


# (Integer LogSum, LogSumExp and L2 are checked against numpy below.)
REAL_VALUED = ("ReduceLogSum", "ReduceLogSumExp", "ReduceL2")


@pytest.mark.parametrize(
    "op,dtype",
    [(op, np.float64) for op in OPS] + [(op, t) for op in OPS if op not in REAL_VALUED for t in (np.int32, np.int64)],
)
def test_dtypes_against_onnxruntime(op, dtype):
    check_reduce(op, data((3, 4, 5), dtype, op), [1], 1)
    check_reduce(op, data((3, 4, 5), dtype, op), [0, 2], 0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_integer_types_against_numpy(op, dtype):
    """Integers: sums/products exactly; Mean, L2, LogSum and LogSumExp truncate a real
    result toward zero."""
    x = data((3, 4, 5), dtype, op)
    expected = NUMPY[op](x.astype(np.float64) if op in ("ReduceMean", "ReduceL2", "ReduceLogSum",
                                                        "ReduceLogSumExp") else x, (1,), True)
    ours = run_onnxtrain(make_model(op, {"x": x, "axes": np.array([1])}, {}, opset=18), {"x": x, "axes": np.array([1])})
    assert ours[0].dtype == x.dtype
    np.testing.assert_array_equal(ours[0], np.trunc(expected).astype(dtype))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64])
def test_max_min_small_and_unsigned_integers(op, dtype):
    x = data((5, 7), dtype, op)
    ours = run_onnxtrain(make_model(op, {"x": x, "axes": np.array([0])}, {}, opset=18), {"x": x, "axes": np.array([0])})
    np.testing.assert_array_equal(ours[0], NUMPY[op](x, (0,), True))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes", [None, [0], [1]], ids=str)
def test_max_min_bool(op, axes):
    x = data((4, 5), np.bool_)
    x[0] = True  # one all-true row
    x[1] = False  # one all-false row
    inputs, attrs = reduce_inputs(op, x, axes, 20)
    ours = run_onnxtrain(make_model(op, inputs, attrs, opset=20), {k: v for k, v in inputs.items() if v is not None})
    expected = (np.any if op == "ReduceMax" else np.all)(x, axis=None if axes is None else tuple(axes), keepdims=True)
    assert ours[0].dtype == np.bool_
    np.testing.assert_array_equal(ours[0], expected)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, [0], [2], [0, 2]], ids=str)
def test_float16(op, axes):
    x = data((6, 5, 7), np.float16, op)
    check_against_float32(op, x, axes, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, [0], [2], [0, 2]], ids=str)
def test_bfloat16(op, axes):
    x = data((6, 5, 7), np.float32, op).astype(ml_dtypes.bfloat16)
    check_against_float32(op, x, axes, rtol=2e-2, atol=1e-2)


# Shapes that exercise each path of the engine: long rows cut into chunks, few columns
# with many rows (rows cut into chunks), many columns, and axes that do not fold into
# one [outer, reduced, inner] view (a transpose first).
@pytest.mark.parametrize(
    "shape,axes",
    [
        ((3, 50000), [1]),  # long rows: chunked
        ((100000,), [0]),  # one long row
        ((70000, 3), [0]),  # few columns, many rows: rows chunked
        ((2, 5000, 300), [1]),  # column blocks (300 > 256) in the middle
        ((300, 700), [0]),  # leading axis, many columns
        ((4, 3, 5, 6), [0, 2]),  # kept, reduced, kept, reduced... : transposed
        ((4, 3, 5, 6), [1, 3]),
        ((2, 3, 4, 5, 6), [0, 2, 4]),
        ((1, 7, 1, 9), [0, 2]),  # size-1 axes merge away
    ],
    ids=str,
)
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceLogSumExp", "ReduceMean", "ReduceL2"])
def test_engine_paths(op, shape, axes):
    """Against numpy in float64: onnxruntime sums columns sequentially in float32 and is
    off by more than 1e-5 on long columns; onnxtrain accumulates float32 in double."""
    x = data(shape, op=op)
    expected = NUMPY[op](x.astype(np.float64), tuple(axes), False).astype(np.float32)
    check_op(op, {"x": x, "axes": np.array(axes, np.int64)}, {"keepdims": 0}, opset=18, expected=[expected],
             rtol=1e-6, atol=1e-6)


def test_float32_sum_is_accurate_over_a_million_elements():
    x = rng.uniform(0, 1, 1_000_000).astype(np.float32)
    ours = run_onnxtrain(make_model("ReduceSum", {"x": x}, {"keepdims": 0}, opset=18), {"x": x})[0]
    exact = np.sum(x.astype(np.float64))
    assert abs(float(ours) - exact) / exact < 1e-7  # float32 rounding of the exact sum


def test_log_sum_exp_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1001.0], [88.0, 89.0]], dtype=np.float32)
    expected = np.array([1000 + np.log(2), -1000 + np.log1p(np.exp(-1)), 89 + np.log1p(np.exp(-1))], np.float32)
    ours = check_op("ReduceLogSumExp", {"x": x, "axes": np.array([1])}, {"keepdims": 0}, opset=18,
                    expected=[expected])
    assert np.all(np.isfinite(ours[0]))


def test_log_sum_exp_of_infinities():
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 0.0]], dtype=np.float32)
    expected = np.array([-np.inf, np.inf, 0.0], np.float32)
    check_op("ReduceLogSumExp", {"x": x, "axes": np.array([1])}, {"keepdims": 0}, opset=18, expected=[expected])


def test_max_and_min_propagate_nan():
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    for op, expected in (("ReduceMax", [np.nan, 3.0]), ("ReduceMin", [np.nan, 1.0])):
        check_op(op, {"x": x, "axes": np.array([1])}, {"keepdims": 0}, opset=18,
                 expected=[np.array(expected, np.float32)])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_propagates_as_in_onnxruntime(op, dtype):
    """A NaN anywhere in a reduced row makes the result NaN (issue 15), every reduction and
    every engine path: the short row, a long row (vectorized), and the inner axis."""
    x = np.abs(data((3, 70), dtype)) + 0.5
    x[0, 1] = np.nan
    x[2, 69] = np.nan
    for axes in ([1], [0]):
        if op in ("ReduceMax", "ReduceMin"):  # onnxruntime 1.23 skips NaN here; numpy, torch and the spec do not
            inputs, attrs = reduce_inputs(op, x, axes, 18)
            expected = (np.max if op == "ReduceMax" else np.min)(x, axis=axes[0])
            check_op(op, inputs, dict(attrs, keepdims=0), opset=18, expected=[expected])
        else:
            check_reduce(op, x, axes, keepdims=0)


# Reducing an empty set (opset 18+/20 spec): 0 for sums, 1 for products, -inf for Max,
# LogSum and LogSumExp, +inf for Min, nan for Mean.
EMPTY = {
    "ReduceSum": 0.0,
    "ReduceSumSquare": 0.0,
    "ReduceL1": 0.0,
    "ReduceL2": 0.0,
    "ReduceProd": 1.0,
    "ReduceMax": -np.inf,
    "ReduceMin": np.inf,
    "ReduceLogSum": -np.inf,
    "ReduceLogSumExp": -np.inf,
    "ReduceMean": np.nan,
}


@pytest.mark.parametrize("op", OPS)
def test_empty_reduction(op):
    x = np.zeros((2, 0, 4), dtype=np.float32)
    opset = 20 if op in ("ReduceMax", "ReduceMin") else 18
    ours = check_op(op, {"x": x, "axes": np.array([1])}, {"keepdims": 1}, opset=opset,
                    expected=[np.full((2, 1, 4), EMPTY[op], np.float32)])
    assert ours[0].shape == (2, 1, 4)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_empty_reduction_of_integers_gives_the_extreme_value(op):
    x = np.zeros((0, 3), dtype=np.int32)
    ours = run_onnxtrain(make_model(op, {"x": x, "axes": np.array([0])}, {"keepdims": 0}, opset=20),
                         {"x": x, "axes": np.array([0])})[0]
    info = np.iinfo(np.int32)
    np.testing.assert_array_equal(ours, np.full(3, info.min if op == "ReduceMax" else info.max, np.int32))


@pytest.mark.parametrize("op", OPS)
def test_empty_kept_axis(op):
    """A zero-sized axis that is not reduced: an empty output."""
    x = np.zeros((0, 3), dtype=np.float32)
    ours = check_op(op, {"x": x, "axes": np.array([1])}, {"keepdims": 0}, opset=18,
                    expected=[np.zeros((0,), np.float32)])
    assert ours[0].shape == (0,)


@pytest.mark.parametrize("op", OPS)
def test_scalar_input(op):
    x = np.array(2.5, dtype=np.float32)
    for keepdims, constants in ((0, []), (1, []), (1, ["x"])):
        check_op(op, {"x": x}, {"keepdims": keepdims}, opset=18, constants=constants,
                 expected=[np.asarray(NUMPY[op](x.astype(np.float64), None, False), np.float32)])


# noop_with_empty_axes: no reduction, "but other operations will be performed. For
# example, ReduceSumSquare acts as a vanilla Square" (spec). onnxruntime copies the input
# for every op instead, so the expectation is numpy's.
NOOP = {
    "ReduceSum": lambda x: x,
    "ReduceMean": lambda x: x,
    "ReduceMax": lambda x: x,
    "ReduceMin": lambda x: x,
    "ReduceProd": lambda x: x,
    "ReduceLogSumExp": lambda x: x,
    "ReduceLogSum": np.log,
    "ReduceL1": np.abs,
    "ReduceL2": np.abs,
    "ReduceSumSquare": np.square,
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes_given", [True, False])
def test_noop_with_empty_axes(op, axes_given):
    x = data((3, 4), op=op)
    axes = np.array([], dtype=np.int64) if axes_given else None
    check_op(op, {"x": x, "axes": axes}, {"noop_with_empty_axes": 1}, opset=18, expected=[NOOP[op](x)])


@pytest.mark.parametrize("op", OPS)
def test_empty_axes_without_noop_reduce_everything(op):
    x = data((3, 4), op=op)
    check_op(op, {"x": x, "axes": np.array([], dtype=np.int64)}, {"keepdims": 0}, opset=18,
             expected=[np.asarray(NUMPY[op](x.astype(np.float64), None, False), np.float32)], rtol=1e-5)


def test_dynamic_shapes_reuse_one_session():
    """A model with symbolic dimensions runs on inputs of several shapes."""
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m"]),
         helper.make_tensor_value_info("axes", TensorProto.INT64, ["k"])],
        [helper.make_empty_tensor_value_info("y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    session = onnxtrain.InferenceSession(model.SerializeToString())
    for shape, axes in (((2, 3), [1]), ((5, 7), [0]), ((1, 40000), [1]), ((6, 2), [0, 1])):
        x = data(shape)
        y = session.run(None, {"x": x, "axes": np.array(axes, dtype=np.int64)})[0]
        np.testing.assert_allclose(y, np.sum(x, axis=tuple(axes)), rtol=1e-5, atol=1e-5)


def run_bad(op, inputs, attrs=None, opset=18):
    model = make_model(op, inputs, attrs, opset=opset)
    return run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None})


@pytest.mark.parametrize("axes", [[2], [-3], [0, 5]], ids=str)
def test_axis_out_of_range_raises(axes):
    with pytest.raises((ValueError, RuntimeError), match=r"axis -?\d+ is out of range for rank 2 "
                                                          r"\(expected -2..1\)"):
        run_bad("ReduceSum", {"x": data((2, 3)), "axes": np.array(axes, dtype=np.int64)})


def test_axis_attribute_out_of_range_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"axis 3 is out of range .*rank 2"):
        run_bad("ReduceMax", {"x": data((2, 3))}, {"axes": [3]}, opset=13)


def test_duplicate_axes_raise():
    with pytest.raises((ValueError, RuntimeError), match=r"axis -1 is listed twice"):
        run_bad("ReduceMean", {"x": data((2, 3)), "axes": np.array([1, -1], dtype=np.int64)})


def test_axes_of_the_wrong_type_raise():
    # onnx's checker-free model: axes declared int32.
    with pytest.raises((ValueError, RuntimeError), match=r"axes.*int64"):
        run_bad("ReduceSum", {"x": data((2, 3)), "axes": np.array([1], dtype=np.int32)})


def test_unsupported_dtype_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"ReduceSum: unsupported element type int8 \(expected one of"):
        run_bad("ReduceSum", {"x": np.ones((2, 3), np.int8), "axes": np.array([1])})


def test_reduce_registrations_cover_every_opset():
    ops = {(op, since, until) for domain, op, since, until in onnxtrain.supported_ops() if domain == ""}
    for op in OPS:
        assert any(o == op and since <= 1 and until >= 24 for o, since, until in ops), op
