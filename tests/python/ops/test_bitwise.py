"""BitwiseAnd, BitwiseOr, BitwiseXor and BitwiseNot (opset 18) on every integer type,
with broadcasting, against onnxruntime 1.23 and onnx.reference (exact)."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)
TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def ints(shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("reference", ["onnxruntime", "onnx.reference"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3))],
                         ids=["same", "row", "both", "scalar"])
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary(op, shapes, reference):
    for dtype in TYPES:
        try:
            check_op(op, {"a": ints(shapes[0], dtype), "b": ints(shapes[1], dtype)}, opset=18, reference=reference)
        except Exception as e:  # onnxruntime lacks a few integer types
            if reference == "onnxruntime" and "NOT_IMPLEMENTED" in str(e):
                continue
            raise


@pytest.mark.parametrize("reference", ["onnxruntime", "onnx.reference"])
@pytest.mark.parametrize("dtype", TYPES)
def test_bitwise_not(dtype, reference):
    try:
        check_op("BitwiseNot", {"x": ints((2, 3, 5), dtype)}, opset=18, reference=reference)
    except Exception as e:
        if reference == "onnxruntime" and "NOT_IMPLEMENTED" in str(e):
            pytest.skip(f"onnxruntime has no BitwiseNot for {np.dtype(dtype).name}")
        raise


def test_bitwise_rejects_mixed_and_float_types():
    a, b = ints((3,), np.int32), ints((3,), np.int64)
    with pytest.raises((ValueError, RuntimeError), match=r"input 1 has element type int64, expected int32"):
        run_onnxtrain(make_model("BitwiseAnd", {"a": a, "b": b}, opset=18), {"a": a, "b": b})
    x = np.ones(3, np.float32)
    with pytest.raises((ValueError, RuntimeError), match=r"BitwiseNot: unsupported element type float "):
        run_onnxtrain(make_model("BitwiseNot", {"x": x}, opset=18), {"x": x})
