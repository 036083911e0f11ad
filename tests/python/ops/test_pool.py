"""MaxPool (with Indices), AveragePool, LpPool and the global pools against onnxruntime.
Tolerances: float32 rtol 1e-5 (max is exact; averages sum a few values in another order),
float64 1e-12, float16 1e-3 (onnxtrain averages float16 in float32)."""

import numpy as np
import pytest

from op_harness import check_op

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def pool(op, x, *, n_outputs=1, opset=19, reference="onnxruntime", rtol=1e-5, atol=1e-6, **attrs):
    return check_op(op, {"x": x}, attrs, n_outputs=n_outputs, opset=opset, reference=reference, rtol=rtol, atol=atol)


# ---- MaxPool ----


@pytest.mark.parametrize("shape,kernel", [((2, 3, 10), [3]), ((2, 3, 9, 11), [3, 2]), ((1, 2, 6, 7, 8), [2, 3, 2])])
def test_maxpool_1d_2d_3d(shape, kernel):
    pool("MaxPool", randn(*shape), kernel_shape=kernel)


@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (1, 4, 7, 9), (3, 1, 2, 2), (2, 2, 33, 17)])
def test_maxpool_2x2_stride_2(shape):
    """The common CNN pool has its own loop (odd sizes drop the last row and column)."""
    pool("MaxPool", randn(*shape), kernel_shape=[2, 2], strides=[2, 2])
    pool("MaxPool", randn(*shape), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)


@pytest.mark.parametrize("pads", [[0, 0, 1, 1], [0, 0, 1, 0], [0, 0, 0, 1]])
@pytest.mark.parametrize("shape", [(1, 2, 5, 5), (2, 3, 4, 7)])
def test_maxpool_2x2_end_pads(shape, pads):
    """2x2 windows whose last row or column overhangs into the end padding."""
    pool("MaxPool", randn(*shape), kernel_shape=[2, 2], strides=[2, 2], pads=pads)


def test_maxpool_strides_pads_dilations():
    pool("MaxPool", randn(2, 3, 12, 11), kernel_shape=[3, 3], strides=[2, 1], pads=[1, 0, 2, 1], dilations=[2, 1])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_maxpool_auto_pad(auto_pad):
    pool("MaxPool", randn(1, 2, 9, 8), kernel_shape=[4, 3], strides=[2, 2], auto_pad=auto_pad)


@pytest.mark.parametrize("shape", [(1, 1, 7, 7), (1, 2, 6, 9)])
def test_maxpool_ceil_mode(shape):
    pool("MaxPool", randn(*shape), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    pool("MaxPool", randn(*shape), kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)


@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(storage_order):
    pool("MaxPool", randn(2, 3, 7, 6), n_outputs=2, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
         storage_order=storage_order)


def test_maxpool_indices_3d():
    pool("MaxPool", randn(2, 2, 4, 5, 6), n_outputs=2, kernel_shape=[2, 2, 3], strides=[2, 1, 2])


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int8, np.uint8])
def test_maxpool_dtypes(dtype):
    x = randn(2, 3, 8, 8) * 20
    x = x.astype(dtype) if dtype in (np.float64, np.float16) else np.clip(x, -128, 127).astype(dtype)
    pool("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def test_maxpool_opsets():
    x = randn(1, 2, 6, 6)
    pool("MaxPool", x, kernel_shape=[2, 2], opset=1)
    pool("MaxPool", x, kernel_shape=[2, 2], opset=8, n_outputs=2)
    pool("MaxPool", x, kernel_shape=[2, 2], opset=10, ceil_mode=1, strides=[2, 2])


def test_maxpool_empty_batch():
    check_op("MaxPool", {"x": randn(0, 3, 4, 4)}, {"kernel_shape": [2, 2]}, expected=[np.empty((0, 3, 3, 3), np.float32)])


# ---- AveragePool ----


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_pads(count_include_pad):
    pool("AveragePool", randn(2, 3, 9, 10), kernel_shape=[3, 3], strides=[2, 1], pads=[1, 2, 2, 1],
         count_include_pad=count_include_pad)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_ceil_mode(count_include_pad):
    pool("AveragePool", randn(1, 2, 7, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
         count_include_pad=count_include_pad)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_dilations_opset19(count_include_pad):
    pool("AveragePool", randn(1, 2, 10, 9), kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 0, 2],
         count_include_pad=count_include_pad)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_averagepool_auto_pad(auto_pad):
    pool("AveragePool", randn(1, 2, 9, 8), kernel_shape=[4, 3], strides=[2, 3], auto_pad=auto_pad)


def test_averagepool_1d_and_3d():
    pool("AveragePool", randn(2, 3, 11), kernel_shape=[4], strides=[3], pads=[1, 2])
    # onnxruntime's AveragePool-19 miscounts pads in 3-D (its AveragePool-18 and
    # onnx.reference agree with onnxtrain).
    pool("AveragePool", randn(1, 2, 5, 6, 7), kernel_shape=[2, 3, 2], pads=[1, 1, 0, 0, 1, 1], count_include_pad=1,
         opset=18)
    pool("AveragePool", randn(1, 2, 5, 6, 7), kernel_shape=[2, 3, 2], pads=[1, 1, 0, 0, 1, 1], count_include_pad=1,
         reference="onnx.reference")


def test_averagepool_float64_and_float16():
    # onnxruntime has neither: onnx.reference computes in the input type.
    pool("AveragePool", randn(1, 3, 8, 8, dtype=np.float64), kernel_shape=[3, 3], pads=[1, 1, 1, 1], rtol=1e-12,
         atol=1e-12, reference="onnx.reference")
    pool("AveragePool", randn(1, 3, 8, 8, dtype=np.float16), kernel_shape=[3, 3], pads=[1, 1, 1, 1], rtol=2e-3,
         atol=2e-3, reference="onnx.reference")


def test_averagepool_opset7_and_opset1():
    pool("AveragePool", randn(1, 2, 6, 6), kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1, opset=7)
    # AveragePool-1 excludes pads (onnx.reference includes them, against the spec; onnxruntime
    # has no AveragePool-1): compare with AveragePool-7 without count_include_pad.
    x = randn(1, 2, 6, 6)
    expected = pool("AveragePool", x, kernel_shape=[3, 3], pads=[1, 1, 1, 1], opset=7)
    check_op("AveragePool", {"x": x}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, opset=1, expected=expected)


# ---- LpPool ----


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool(p):
    pool("LpPool", randn(2, 3, 8, 7), kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=p, opset=18,
         reference="onnx.reference", rtol=1e-5)


def test_lppool_auto_pad_and_dilations():
    pool("LpPool", randn(1, 2, 9, 9), kernel_shape=[2, 2], auto_pad="SAME_UPPER", strides=[2, 2], opset=18,
         reference="onnx.reference")
    pool("LpPool", randn(1, 2, 9, 9), kernel_shape=[2, 2], dilations=[2, 2], opset=18, reference="onnx.reference")


# ---- global pools ----


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 5, 6, 7), (1, 3, 2, 3, 4), (2, 3, 1000)])
def test_global_pools(op, shape):
    pool(op, randn(*shape))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_dtypes(op):
    pool(op, randn(2, 3, 9, 9, dtype=np.float64), rtol=1e-12, reference="onnx.reference")
    pool(op, randn(2, 3, 9, 9, dtype=np.float16), rtol=2e-3, atol=2e-3, reference="onnx.reference")


def test_global_lp_pool():
    pool("GlobalLpPool", randn(2, 3, 5, 6), p=3, opset=2)
    pool("GlobalLpPool", randn(2, 3, 5, 6))


# ---- bad input ----


def test_pool_rejects_kernel_of_wrong_rank():
    with pytest.raises((ValueError, RuntimeError), match=r"kernel_shape \[2\] has 1 values but X \[1, 1, 4, 4\] has 2"):
        pool("MaxPool", randn(1, 1, 4, 4), kernel_shape=[2], reference="onnx.reference")


def test_pool_rejects_window_larger_than_input():
    with pytest.raises((ValueError, RuntimeError), match=r"larger than the padded input"):
        pool("AveragePool", randn(1, 1, 2, 2), kernel_shape=[3, 3], reference="onnx.reference")


def test_pool_rejects_rank_two_input():
    with pytest.raises((ValueError, RuntimeError), match=r"X must be \[N, C, spatial...\]"):
        pool("MaxPool", randn(3, 4), kernel_shape=[2], reference="onnx.reference")


def test_pool_rejects_integer_average():
    with pytest.raises((ValueError, RuntimeError), match=r"unsupported element type int32"):
        pool("AveragePool", np.ones((1, 1, 4, 4), np.int32), kernel_shape=[2, 2], reference="onnx.reference")
