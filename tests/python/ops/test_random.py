"""The random generators. ONNX does not specify the generator, so no reference can be
matched value for value: these tests check dtype, shape, the range of values, the
moments of large samples (bounds of 6 standard errors: a false alarm about once in
10^8 runs) and that a seed makes a session's outputs reproducible."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from op_harness import make_model, run_onnxtrain

import onnxtrain

rng = np.random.default_rng(0)
N = 200_000


def no_input_model(op, attrs):
    node = helper.make_node(op, [], ["y"], **attrs)
    graph = helper.make_graph([node], op, [], [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=8)


def run(model, feeds=None):
    return run_onnxtrain(model, feeds or {})[0]


def assert_mean_std(y, mean, std):
    y = y.astype(np.float64)
    assert abs(y.mean() - mean) < 6 * std / np.sqrt(y.size)
    assert abs(y.std() - std) < 6 * std / np.sqrt(y.size / 2) + 1e-9


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_random_uniform(dtype):
    y = run(no_input_model("RandomUniform", {"shape": [400, 500], "low": -2.0, "high": 3.0, "dtype": dtype}))
    assert y.dtype == helper.tensor_dtype_to_np_dtype(dtype) and y.shape == (400, 500)
    assert y.min() >= -2.0 and y.max() <= 3.0
    assert_mean_std(y, 0.5, 5 / np.sqrt(12))
    counts, _ = np.histogram(y.astype(np.float64), bins=10, range=(-2, 3))
    assert np.all(np.abs(counts - N / 10) < 6 * np.sqrt(N / 10))


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_random_normal(dtype):
    y = run(no_input_model("RandomNormal", {"shape": [N], "mean": 1.5, "scale": 2.0, "dtype": dtype}))
    assert y.dtype == helper.tensor_dtype_to_np_dtype(dtype) and y.shape == (N,)
    assert_mean_std(y, 1.5, 2.0)
    # The share within one standard deviation: 68.27 %.
    inside = np.mean(np.abs(y - 1.5) < 2.0)
    assert abs(inside - 0.682689) < 6 * np.sqrt(0.6827 * 0.3173 / N)


def test_like_forms_take_shape_and_dtype():
    x = np.zeros((300, 700), np.float64)
    u = run(make_model("RandomUniformLike", {"x": x}, {"low": 1.0, "high": 2.0}, opset=22), {"x": x})
    assert u.dtype == np.float64 and u.shape == x.shape and 1 <= u.min() and u.max() <= 2
    n = run(make_model("RandomNormalLike", {"x": x}, {"dtype": TensorProto.FLOAT}, opset=22), {"x": x})
    assert n.dtype == np.float32 and n.shape == x.shape
    assert_mean_std(n, 0.0, 1.0)


def test_seed_makes_sessions_reproducible_and_runs_differ():
    model = no_input_model("RandomNormal", {"shape": [1000], "seed": 3.0})
    a = onnxtrain.InferenceSession(model.SerializeToString())
    b = onnxtrain.InferenceSession(model.SerializeToString())
    first_a, first_b = a.run(None, {})[0], b.run(None, {})[0]
    np.testing.assert_array_equal(first_a, first_b)
    assert not np.array_equal(first_a, a.run(None, {})[0])
    other = no_input_model("RandomNormal", {"shape": [1000], "seed": 4.0})
    assert not np.array_equal(first_a, run(other))


@pytest.mark.parametrize("out_dtype", [None, TensorProto.BOOL, TensorProto.INT32, TensorProto.DOUBLE])
def test_bernoulli(out_dtype):
    p = np.repeat(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), N // 5)
    attrs = {} if out_dtype is None else {"dtype": out_dtype}
    y = run(make_model("Bernoulli", {"p": p}, attrs, opset=22), {"p": p})
    want = np.float32 if out_dtype is None else helper.tensor_dtype_to_np_dtype(out_dtype)
    assert y.dtype == want and y.shape == p.shape
    y = y.astype(np.float64)
    assert set(np.unique(y)) <= {0.0, 1.0}
    for q in np.unique(p):
        share = y[p == q].mean()
        assert abs(share - q) <= 6 * np.sqrt(q * (1 - q) / (N // 5)), (q, share)


def test_multinomial():
    logits = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 1e-30]], np.float32))
    model = make_model("Multinomial", {"x": logits}, {"sample_size": 50_000, "dtype": TensorProto.INT64}, opset=22)
    y = run(model, {"x": logits})
    assert y.dtype == np.int64 and y.shape == (2, 50_000)
    for row, probs in zip(y, np.exp(logits.astype(np.float64))):
        share = np.bincount(row, minlength=3) / row.size
        assert np.all(np.abs(share - probs) <= 6 * np.sqrt(probs * (1 - probs) / row.size) + 1e-12)
    default = run(make_model("Multinomial", {"x": logits}, {}, opset=22), {"x": logits})
    assert default.dtype == np.int32 and default.shape == (2, 1)


def test_rejects_integer_dtype_and_bad_rank():
    with pytest.raises((ValueError, RuntimeError), match=r"not a floating-point type"):
        run(no_input_model("RandomUniform", {"shape": [2], "dtype": TensorProto.INT32}))
    x = np.zeros((2, 2, 2), np.float32)
    with pytest.raises((ValueError, RuntimeError), match=r"must be \[batch_size, class_size\]"):
        run(make_model("Multinomial", {"x": x}, {}, opset=22), {"x": x})


def test_multinomial_rejects_a_row_without_finite_probabilities():
    logits = np.array([[0.0, 1.0], [-np.inf, -np.inf]], np.float32)
    with pytest.raises((ValueError, RuntimeError), match=r"row 1 of the input has no finite log-probabilities"):
        run(make_model("Multinomial", {"x": logits}, {}, opset=22), {"x": logits})
