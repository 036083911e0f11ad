"""Softmax, LogSoftmax and Hardmax against onnxruntime, in both of their semantics: opset
1-12 flatten the input to 2-D at `axis` (default 1), opset 13+ normalize along one axis
(default -1). Tolerances: float32 rtol 1e-5 / atol 1e-6, float64 1e-12, float16 1e-3."""

import numpy as np
import pytest

from op_harness import check_op

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 3).astype(dtype)


OPS = ["Softmax", "LogSoftmax", "Hardmax"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2])
def test_opset13_single_axis(op, axis):
    attrs = {} if axis is None else {"axis": axis}
    check_op(op, {"x": randn(3, 4, 5)}, attrs, opset=13)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
@pytest.mark.parametrize("opset", [1, 11])
def test_opset_before_13_flattens(op, axis, opset):
    attrs = {} if axis is None else {"axis": axis}
    check_op(op, {"x": randn(2, 3, 4)}, attrs, opset=opset)


@pytest.mark.parametrize("op", OPS)
def test_wide_rows(op):
    check_op(op, {"x": randn(8, 1000)}, opset=13)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_large_numbers_stay_finite(op):
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, 3.0]], np.float32)
    check_op(op, {"x": x}, opset=13)


def test_hardmax_picks_the_first_maximum():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0]], np.float32)
    check_op("Hardmax", {"x": x}, opset=13, expected=[np.array([[0, 1, 0, 0], [1, 0, 0, 0]], np.float32)])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [-1, 1])
def test_float64(op, axis):
    reference = "onnx.reference" if op == "Hardmax" else "onnxruntime"  # onnxruntime has no float64 Hardmax
    check_op(op, {"x": randn(3, 4, 5, dtype=np.float64)}, {"axis": axis}, opset=13, reference=reference, rtol=1e-12,
             atol=1e-12)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_float16(op, axis):
    check_op(op, {"x": randn(3, 4, 5, dtype=np.float16)}, {"axis": axis}, opset=13, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("op", OPS)
def test_empty(op):
    check_op(op, {"x": randn(0, 4)}, opset=13)


def test_rank_one():
    check_op("Softmax", {"x": randn(7)}, opset=13)


@pytest.mark.parametrize("op", OPS)
def test_rejects_axis_out_of_range(op):
    with pytest.raises((ValueError, RuntimeError), match=r"axis 3 is out of range for rank 2 \(expected -2..1\)"):
        check_op(op, {"x": randn(2, 3)}, {"axis": 3}, opset=13, reference="onnx.reference")


def test_rejects_integer_input():
    with pytest.raises((ValueError, RuntimeError), match=r"unsupported element type int32"):
        check_op("Softmax", {"x": np.ones((2, 3), np.int32)}, opset=13, reference="onnx.reference")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_nan_spreads_over_its_slice(op, axis):
    x = randn(3, 4)
    x[1, 2] = np.nan
    check_op(op, {"x": x}, {"axis": axis}, opset=13)
