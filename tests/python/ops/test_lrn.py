"""LRN against onnxruntime 1.23 (float32, 4-D, odd sizes: it refuses even ones); even
sizes, other ranks, float64 and float16 against the spec's formula in float64.
onnx.reference 1.19 is no oracle here: its LRN loops over the batch axis instead of the
channels (`for c in range(x.shape[0])`), so it leaves most window sums zero. Tolerances:
float32 rtol 1e-5 / atol 1e-6, float64 1e-12, float16 2e-3."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-6)


def lrn_expected(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """The spec's formula in float64, with the attributes as the model stores them (float32)."""
    alpha, beta, bias = (float(np.float32(a)) for a in (alpha, beta, bias))
    x = x.astype(np.float64)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    c = x.shape[1]
    squares = np.zeros_like(x)
    for i in range(c):
        squares[:, i] = np.sum(x[:, max(0, i - before):min(c, i + after + 1)] ** 2, axis=1)
    return x / (bias + alpha / size * squares) ** beta


@pytest.mark.parametrize("size", [1, 3, 5, 9])
def test_lrn(size):
    x = rng.standard_normal((2, 7, 4, 5)).astype(np.float32) * 3
    check_op("LRN", {"x": x}, {"size": size, "alpha": 0.3, "beta": 0.6, "bias": 1.5}, opset=13, **F32)


@pytest.mark.parametrize("size", [2, 4, 8])
def test_lrn_even_sizes(size):
    # The window reaches floor((size-1)/2) channels back and ceil((size-1)/2) forward.
    x = rng.standard_normal((2, 7, 3, 2))
    attrs = {"size": size, "alpha": 0.3, "beta": 0.6, "bias": 1.5}
    check_op("LRN", {"x": x}, attrs, expected=[lrn_expected(x, size, 0.3, 0.6, 1.5)], rtol=1e-12, atol=1e-12)


def test_lrn_defaults_alexnet_shape():
    check_op("LRN", {"x": rng.standard_normal((1, 16, 13, 13)).astype(np.float32) * 10}, {"size": 5}, **F32)


def test_lrn_float64():
    x = rng.standard_normal((2, 6, 3, 3))
    check_op("LRN", {"x": x}, {"size": 3, "alpha": 0.5}, expected=[lrn_expected(x, 3, alpha=0.5)], rtol=1e-12,
             atol=1e-12)


@pytest.mark.parametrize("shape", [(2, 5, 7), (1, 6, 2, 3, 4)])
def test_lrn_other_ranks(shape):
    x = rng.standard_normal(shape)
    check_op("LRN", {"x": x}, {"size": 3, "alpha": 0.4}, expected=[lrn_expected(x, 3, alpha=0.4)], rtol=1e-12,
             atol=1e-12)


def test_lrn_float16():
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float16)
    (y,) = run_onnxtrain(make_model("LRN", {"x": x}, {"size": 3, "alpha": 0.5}), {"x": x})
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), lrn_expected(x, 3, alpha=0.5), rtol=2e-3, atol=2e-3)


def test_lrn_rejects_bad_size_and_rank():
    with pytest.raises((ValueError, RuntimeError), match=r"size is 0, expected 1 or more"):
        check_op("LRN", {"x": rng.standard_normal((1, 2, 3, 3)).astype(np.float32)}, {"size": 0},
                 expected=[])
    with pytest.raises((ValueError, RuntimeError), match=r"X must be \[N, C, D1, ...\] \(rank 3 or more\), got \[2, 3\]"):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        run_onnxtrain(make_model("LRN", {"x": x}, {"size": 3}), {"x": x})
