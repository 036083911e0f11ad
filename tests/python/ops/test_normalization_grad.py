"""BatchNormalizationGrad's kernel (org.onnxtrain and com.microsoft) against the formula in
float64 NumPy, on every case its loops reach: channels and spatial sizes that are not a
multiple of the 16 lanes, rows longer than one 512-element block, batch 1, 1x1, no spatial
axis, 3-D, a mean far from 0, an empty batch; float32 and float64; 1 and 2 threads. Also
against torch's native_batch_norm_backward on a ResNet shape."""

import numpy as np
import pytest
from onnx import helper

import onnxtrain

rng = np.random.default_rng(0)


def grad_model(shape, dtype, domain="org.onnxtrain", epsilon=1e-5):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    c = shape[1]
    inputs = ["dY", "X", "scale"] + (["mean", "inv_std"] if domain == "com.microsoft" else [])
    node = helper.make_node("BatchNormalizationGrad", inputs, ["dX", "dScale", "dB"], domain=domain, epsilon=epsilon)
    vi = helper.make_tensor_value_info
    graph_inputs = [vi("dY", elem, shape), vi("X", elem, shape), vi("scale", elem, [c])]
    graph_inputs += [vi(name, elem, [c]) for name in inputs[3:]]
    graph = helper.make_graph([node], "bn_grad", graph_inputs,
                              [vi("dX", elem, shape), vi("dScale", elem, [c]), vi("dB", elem, [c])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


def run(shape, feeds, threads, domain="org.onnxtrain", epsilon=1e-5):
    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = threads
    model = grad_model(shape, feeds["X"].dtype, domain, epsilon)
    session = onnxtrain.InferenceSession(model.SerializeToString(), options)
    return session.run(None, feeds)


def reference(dy, x, scale, epsilon):
    dy, x, scale = (v.astype(np.float64) for v in (dy, x, scale))
    axes = (0,) + tuple(range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    count = x.size // x.shape[1]
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + epsilon)
    xhat = (x - mean) * inv
    dbias = dy.sum(axis=axes)
    dscale = (dy * xhat).sum(axis=axes)
    dx = scale.reshape(channel) * inv * (dy - (dbias.reshape(channel) + xhat * dscale.reshape(channel)) / count)
    return dx, dscale, dbias


SHAPES = [
    (16, 3, 5, 5),  # 25 per row: one vector of 16 and a tail
    (4, 17, 7, 9),
    (1, 5, 1, 1),  # batch 1, 1x1: one value per channel
    (16, 64, 1, 1),
    (7, 4),  # no spatial axis
    (2, 3, 4, 5, 6),  # 3-D
    (2, 3, 70, 70),  # rows of 4900: nine blocks and a tail
    (16, 64, 8, 8),
]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_batch_norm_grad_matches_formula(shape, dtype, threads):
    x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    scale = rng.standard_normal(shape[1]).astype(dtype)
    got = run(shape, {"dY": dy, "X": x, "scale": scale}, threads)
    for g, want in zip(got, reference(dy, x, scale, 1e-5)):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_grad_far_mean(dtype):
    # A mean 1000 standard deviations from 0: the variance must not cancel.
    shape = (8, 5, 6, 6)
    x = (rng.standard_normal(shape) + 1000).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    scale = rng.standard_normal(shape[1]).astype(dtype)
    got = run(shape, {"dY": dy, "X": x, "scale": scale}, 2, epsilon=1e-3)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-10)
    for g, want in zip(got, reference(dy, x, scale, 1e-3)):
        np.testing.assert_allclose(g, want, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_grad_outlier(dtype):
    # One value per channel 40 standard deviations out, first in the channel, and a mean of 300.
    shape = (16, 6, 9, 9)
    x = (rng.standard_normal(shape) + 300).astype(dtype)
    x[0, :, 0, 0] += 40
    dy = rng.standard_normal(shape).astype(dtype)
    scale = rng.standard_normal(shape[1]).astype(dtype)
    got = run(shape, {"dY": dy, "X": x, "scale": scale}, 1)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-10)
    for g, want in zip(got, reference(dy, x, scale, 1e-5)):
        np.testing.assert_allclose(g, want, **tol)


def test_batch_norm_grad_empty_batch():
    shape = (0, 3, 4)
    feeds = {"dY": np.zeros(shape, np.float32), "X": np.zeros(shape, np.float32), "scale": np.ones(3, np.float32)}
    dx, dscale, dbias = run(shape, feeds, 2)
    assert dx.shape == shape
    np.testing.assert_array_equal(dscale, 0)
    np.testing.assert_array_equal(dbias, 0)


def test_microsoft_batch_norm_grad_same_kernel():
    shape = (3, 6, 5, 5)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    scale = rng.standard_normal(6).astype(np.float32)
    feeds = {"dY": dy, "X": x, "scale": scale, "mean": np.zeros(6, np.float32), "inv_std": np.ones(6, np.float32)}
    got = run(shape, feeds, 1, domain="com.microsoft")
    for g, want in zip(got, reference(dy, x, scale, 1e-5)):
        np.testing.assert_allclose(g, want, **TOL[np.float32])


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_norm_grad_matches_torch(threads):
    torch = pytest.importorskip("torch")
    shape = (16, 64, 14, 14)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    scale = rng.standard_normal(64).astype(np.float32)
    got = run(shape, {"dY": dy, "X": x, "scale": scale}, threads)
    tx = torch.from_numpy(x).double()
    mean = tx.mean((0, 2, 3))
    invstd = 1 / torch.sqrt(tx.var((0, 2, 3), unbiased=False) + 1e-5)
    want = torch.ops.aten.native_batch_norm_backward(torch.from_numpy(dy).double(), tx,
                                                     torch.from_numpy(scale).double(), None, None, mean, invstd, True,
                                                     1e-5, [True, True, True])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=2e-5, atol=2e-5)
