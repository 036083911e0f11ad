"""The ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) against
onnx.reference (onnxruntime has no kernels for them) and the spec's formulas written out
in numpy, float32 and float64, one and several optimized tensors. onnx.reference keeps
float attributes as numpy float32 scalars, so some of its coefficients (1 - alpha, ...)
round to float32: float64 results agree with it to ~1e-8 only (rtol 1e-6 there), and to
1e-12 with the formulas in numpy, attributes taken as float32 values in double."""

import numpy as np
import pytest

from op_harness import make_model, run_onnxtrain, run_reference

DOMAIN = "ai.onnx.preview.training"
rng = np.random.default_rng(0)


def f32(value):
    """An attribute's value as the model stores it (float32), in double."""
    return float(np.float32(value))


def run_both(op, r, t, groups, attrs, n_outputs):
    inputs = {"R": r, "T": np.array(t, np.int64)}
    for g, tensors in enumerate(groups):
        inputs.update({f"in{g}_{i}": v for i, v in enumerate(tensors)})
    model = make_model(op, inputs, attrs, n_outputs=n_outputs, domain=DOMAIN)
    ours = run_onnxtrain(model, inputs)
    theirs = run_reference(model, inputs, "onnx.reference")
    return ours, theirs


def tensors(n, dtype, shapes=((3, 4), (5,), (2, 2, 2))):
    return [rng.standard_normal(shapes[i]).astype(dtype) for i in range(n)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("t", [0, 5])
def test_adagrad(dtype, n, t):
    x, g, h = tensors(n, dtype), tensors(n, dtype), [np.abs(v) for v in tensors(n, dtype)]
    attrs = {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}
    ours, theirs = run_both("Adagrad", np.array(0.1, dtype), t, [x, g, h], attrs, 2 * n)
    tol = 1e-5 if dtype == np.float32 else 1e-6
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    if dtype == np.float64:
        r = 0.1 / (1 + t * f32(0.1))
        gr = f32(0.01) * x[0] + g[0]
        h_new = h[0] + gr * gr
        np.testing.assert_allclose(ours[0], x[0] - r * gr / (np.sqrt(h_new) + f32(1e-5)), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ours[n], h_new, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("t", [0, 3])
def test_adam(dtype, n, t):
    x, g, v, h = tensors(n, dtype), tensors(n, dtype), tensors(n, dtype), [np.abs(a) for a in tensors(n, dtype)]
    attrs = {"alpha": 0.85, "beta": 0.95, "epsilon": 1e-4, "norm_coefficient": 0.02, "norm_coefficient_post": 0.01}
    ours, theirs = run_both("Adam", np.array(0.05, dtype), t, [x, g, v, h], attrs, 3 * n)
    tol = 1e-5 if dtype == np.float32 else 1e-6
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b.astype(a.dtype), rtol=tol, atol=tol)
    assert all(a.dtype == dtype for a in ours)
    if dtype == np.float64:
        alpha, beta = f32(0.85), f32(0.95)
        gr = f32(0.02) * x[0] + g[0]
        v_new = alpha * v[0] + (1 - alpha) * gr
        h_new = beta * h[0] + (1 - beta) * gr * gr
        r = 0.05 * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else 0.05
        x_new = (1 - f32(0.01)) * (x[0] - r * v_new / (np.sqrt(h_new) + f32(1e-4)))
        for got, want in zip(ours[::n], (x_new, v_new, h_new)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("t", [0, 7])
def test_momentum(mode, n, t):
    x, g, v = tensors(n, np.float64), tensors(n, np.float64), tensors(n, np.float64)
    attrs = {"alpha": 0.9, "beta": 0.5, "mode": mode, "norm_coefficient": 0.001}
    ours, theirs = run_both("Momentum", np.array(0.1), t, [x, g, v], attrs, 2 * n)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    gr = f32(0.001) * x[0] + g[0]
    v_new = f32(0.9) * v[0] + (f32(0.5) if t > 0 else 1.0) * gr
    x_new = x[0] - 0.1 * (gr + f32(0.9) * v_new if mode == "nesterov" else v_new)
    np.testing.assert_allclose(ours[0], x_new, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours[n], v_new, rtol=1e-12, atol=1e-12)


def test_momentum_rejects_unknown_mode_and_bad_inputs():
    with pytest.raises((ValueError, RuntimeError), match=r"mode is 'heavy', expected"):
        run_both("Momentum", np.array(0.1), 1, [tensors(1, np.float64)] * 3,
                 {"alpha": 0.9, "beta": 0.5, "mode": "heavy", "norm_coefficient": 0.0}, 2)
    x = tensors(1, np.float64)
    with pytest.raises((ValueError, RuntimeError), match=r"expected double\[3, 4\] like input 2"):
        run_both("Adagrad", np.array(0.1), 1, [x, [np.zeros((3, 5))], x], {}, 2)
