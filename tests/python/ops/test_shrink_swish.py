"""Shrink (against onnxruntime 1.23, float and integer) and Swish (opset 24, newer than
onnxruntime 1.23: against onnx.reference 1.19 and x * sigmoid(alpha x) in float64)."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)


@pytest.mark.parametrize("attrs", [{}, {"lambd": 1.5}, {"bias": 1.5, "lambd": 1.5}, {"bias": -0.25, "lambd": 0.0}])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8])
def test_shrink(attrs, dtype):
    x = (rng.standard_normal((3, 7)) * 3).astype(dtype)
    check_op("Shrink", {"x": x}, attrs, opset=9, reference="onnxruntime" if dtype != np.int32 else "onnx.reference")


@pytest.mark.parametrize("alpha", [None, 1.0, 0.5, -2.0])
def test_swish(alpha):
    x = (rng.standard_normal((4, 6)) * 4).astype(np.float32)
    attrs = {} if alpha is None else {"alpha": alpha}
    check_op("Swish", {"x": x}, attrs, opset=24, reference="onnx.reference", rtol=1e-6, atol=1e-6)


def test_swish_float64_and_float16():
    x = rng.standard_normal((5, 5)) * 4
    expected = x / (1 + np.exp(-0.75 * x))
    check_op("Swish", {"x": x}, {"alpha": 0.75}, opset=24, expected=[expected], rtol=1e-12, atol=1e-12)
    h = x.astype(np.float16)
    (y,) = run_onnxtrain(make_model("Swish", {"x": h}, opset=24), {"x": h})
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), x / (1 + np.exp(-x)), rtol=5e-3, atol=5e-3)
