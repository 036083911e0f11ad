"""The engine end to end on the two kernels of the skeleton."""

import numpy as np

from op_harness import check_op


def test_add_broadcasts_like_onnxruntime():
    rng = np.random.default_rng(0)
    check_op("Add", {"a": rng.standard_normal((2, 3, 4), dtype=np.float32), "b": rng.standard_normal((3, 1), dtype=np.float32)})


def test_relu_on_a_constant_input():
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    check_op("Relu", {"x": x}, constants=["x"])
