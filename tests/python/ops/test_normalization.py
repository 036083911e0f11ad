"""BatchNormalization, LayerNormalization, InstanceNormalization, GroupNormalization and
LpNormalization against onnxruntime (onnx.reference where onnxruntime lacks a version or a
type). Tolerances: float32 rtol 1e-4 / atol 1e-5 (statistics summed in another order over up
to ~10^4 values), float64 1e-10, float16 1e-2 (rounding of the float16 output)."""

import numpy as np
import pytest

from op_harness import check_op

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-4, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-12)
F16 = dict(rtol=1e-2, atol=1e-2)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def positive(*shape, dtype=np.float32):
    return (rng.random(shape) + 0.5).astype(dtype)


def bn_inputs(shape, dtype=np.float32, param_dtype=None):
    c = shape[1]
    p = param_dtype or dtype
    return {"x": randn(*shape, dtype=dtype) * 2 + 1, "scale": randn(c, dtype=p), "b": randn(c, dtype=p),
            "mean": randn(c, dtype=p), "var": positive(c, dtype=p)}


# ---- BatchNormalization ----


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 7), (2, 4, 5, 6), (1, 3, 2, 3, 4)])
def test_batchnorm_inference(shape):
    check_op("BatchNormalization", bn_inputs(shape), {"epsilon": 1e-3}, opset=15, **F32)


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batchnorm_inference_opsets(opset):
    check_op("BatchNormalization", bn_inputs((2, 3, 4, 4)), opset=opset, **F32)


def test_batchnorm_constant_parameters():
    inputs = bn_inputs((2, 8, 5, 5))
    check_op("BatchNormalization", inputs, constants=["scale", "b", "mean", "var"], opset=15, **F32)


def test_batchnorm_float64_and_float16():
    check_op("BatchNormalization", bn_inputs((2, 3, 4, 5), np.float64), opset=15, **F64)
    check_op("BatchNormalization", bn_inputs((2, 3, 4, 5), np.float16), opset=15, **F16)


def test_batchnorm_mixed_parameter_types_opset15():
    # X float16 with float32 scale/bias/statistics (T, T1, T2 of opset 15).
    check_op("BatchNormalization", bn_inputs((2, 3, 4, 5), np.float16, np.float32), opset=15,
             reference="onnx.reference", **F16)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4, 5, 6), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm_training_mode(shape, dtype):
    tol = F32 if dtype == np.float32 else F64
    check_op("BatchNormalization", bn_inputs(shape, dtype), {"training_mode": 1, "momentum": 0.8, "epsilon": 1e-4},
             n_outputs=3, opset=15, reference="onnx.reference", **tol)


def test_batchnorm_training_mode_float16():
    check_op("BatchNormalization", bn_inputs((3, 4, 5, 6), np.float16), {"training_mode": 1}, n_outputs=3, opset=15,
             reference="onnx.reference", rtol=2e-2, atol=2e-2)


def test_batchnorm_spatial_zero_opset7():
    # spatial=0: statistics per channel and position.
    x = randn(2, 3, 4)
    stats = {"scale": randn(3, 4), "b": randn(3, 4), "mean": randn(3, 4), "var": positive(3, 4)}
    expected = (x - stats["mean"]) / np.sqrt(stats["var"] + 1e-5) * stats["scale"] + stats["b"]
    check_op("BatchNormalization", {"x": x, **stats}, {"spatial": 0}, opset=7, expected=[expected], **F32)


def test_batchnorm_empty_batch():
    check_op("BatchNormalization", bn_inputs((0, 3, 4, 4)), opset=15, expected=[np.empty((0, 3, 4, 4), np.float32)])


def test_batchnorm_rejects_wrong_parameter_size():
    inputs = bn_inputs((2, 3, 4))
    inputs["mean"] = randn(4)
    with pytest.raises((ValueError, RuntimeError), match=r"input_mean \[4\] must hold 3 values \(one per channel"):
        check_op("BatchNormalization", inputs, opset=15)


def test_batchnorm_rejects_integer_input():
    inputs = bn_inputs((2, 3, 4))
    inputs["x"] = np.ones((2, 3, 4), np.int32)
    with pytest.raises((ValueError, RuntimeError), match=r"X has element type int32, expected float"):
        check_op("BatchNormalization", inputs, opset=15, reference="onnx.reference")


# ---- LayerNormalization ----


@pytest.mark.parametrize("shape,axis", [((4, 8), -1), ((2, 3, 16), -1), ((2, 3, 4, 5), 2), ((2, 3, 4, 5), -3),
                                        ((2, 3, 4), 0), ((5, 768), 1)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layernorm(shape, axis, with_bias):
    normalized = shape[axis:]
    inputs = {"x": randn(*shape) * 3 + 2, "scale": randn(*normalized)}
    if with_bias:  # (a trailing empty input name crashes onnxruntime: leave B out instead)
        inputs["b"] = randn(*normalized)
    check_op("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-3}, n_outputs=3, **F32)


def test_layernorm_only_y():
    check_op("LayerNormalization", {"x": randn(3, 10), "scale": randn(10), "b": randn(10)}, **F32)


def test_layernorm_broadcast_scale():
    # Scale of shape [5] over the normalized shape [4, 5] broadcasts (as ONNX's Mul would).
    inputs = {"x": randn(2, 4, 5), "scale": randn(5), "b": randn(1, 5)}
    check_op("LayerNormalization", inputs, {"axis": 1}, n_outputs=3, reference="onnx.reference", **F32)


def test_layernorm_float64():
    inputs = {"x": randn(3, 4, 6, dtype=np.float64), "scale": randn(6, dtype=np.float64), "b": randn(6, dtype=np.float64)}
    # Mean and InvStdDev are float (the stash type) even for float64 X.
    check_op("LayerNormalization", inputs, n_outputs=3, rtol=1e-6, atol=1e-7)


def test_layernorm_float16():
    inputs = {"x": randn(3, 4, 6, dtype=np.float16), "scale": randn(6, dtype=np.float16), "b": randn(6, dtype=np.float16)}
    check_op("LayerNormalization", inputs, n_outputs=3, **F16)


def test_layernorm_rejects_bad_axis():
    with pytest.raises((ValueError, RuntimeError), match=r"axis 3 is out of range for rank 2 \(expected -2..1\)"):
        check_op("LayerNormalization", {"x": randn(2, 3), "scale": randn(3)}, {"axis": 3}, reference="onnx.reference")


def test_layernorm_rejects_bad_scale():
    with pytest.raises((ValueError, RuntimeError), match=r"Scale \[4\] does not broadcast to the normalized shape \[3\]"):
        check_op("LayerNormalization", {"x": randn(2, 3), "scale": randn(4)}, reference="onnx.reference")


# ---- InstanceNormalization ----


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 4, 6, 7), (1, 2, 3, 4, 5)])
def test_instancenorm(shape):
    c = shape[1]
    check_op("InstanceNormalization", {"x": randn(*shape) * 2 + 1, "scale": randn(c), "b": randn(c)}, {"epsilon": 1e-3},
             **F32)


def test_instancenorm_float64_float16():
    check_op("InstanceNormalization", {"x": randn(2, 3, 8, dtype=np.float64), "scale": randn(3, dtype=np.float64),
                                       "b": randn(3, dtype=np.float64)}, reference="onnx.reference", **F64)
    check_op("InstanceNormalization", {"x": randn(2, 3, 8, dtype=np.float16), "scale": randn(3, dtype=np.float16),
                                       "b": randn(3, dtype=np.float16)}, **F16)


def test_instancenorm_opset1():
    check_op("InstanceNormalization", {"x": randn(2, 3, 8), "scale": randn(3), "b": randn(3)}, opset=1,
             reference="onnx.reference", **F32)


def test_instancenorm_rejects_wrong_scale():
    with pytest.raises((ValueError, RuntimeError), match=r"scale \[2\] must hold 3 values"):
        check_op("InstanceNormalization", {"x": randn(2, 3, 8), "scale": randn(2), "b": randn(3)})


# ---- GroupNormalization ----


def group_norm_expected(x, scale, bias, groups, epsilon, per_channel):
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, -1).astype(np.float64)
    y = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + epsilon)
    y = y.reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if not per_channel:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    return (y * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype)


@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((2, 8, 4, 4), 2), ((1, 4, 3), 4), ((3, 6), 1)])
@pytest.mark.parametrize("opset", [18, 21])
def test_groupnorm(shape, groups, opset):
    c = shape[1]
    params = groups if opset == 18 else c
    x, scale, bias = randn(*shape) * 2 + 1, randn(params), randn(params)
    expected = group_norm_expected(x, scale, bias, groups, 1e-4, opset >= 21)
    check_op("GroupNormalization", {"x": x, "scale": scale, "bias": bias}, {"num_groups": groups, "epsilon": 1e-4},
             opset=opset, expected=[expected], **F32)


def test_groupnorm_matches_onnx_reference_opset21():
    x, scale, bias = randn(2, 6, 3, 3), randn(6), randn(6)
    check_op("GroupNormalization", {"x": x, "scale": scale, "bias": bias}, {"num_groups": 3}, opset=21,
             reference="onnx.reference", **F32)


def test_groupnorm_float64_float16():
    for dtype, tol in [(np.float64, F64), (np.float16, F16)]:
        x, scale, bias = randn(2, 4, 5, dtype=dtype), randn(4, dtype=dtype), randn(4, dtype=dtype)
        expected = group_norm_expected(x, scale, bias, 2, 1e-5, True)
        check_op("GroupNormalization", {"x": x, "scale": scale, "bias": bias}, {"num_groups": 2}, opset=21,
                 expected=[expected], **tol)


def test_groupnorm_rejects_indivisible_channels():
    with pytest.raises((ValueError, RuntimeError), match=r"5 channels, not a multiple of num_groups 2"):
        check_op("GroupNormalization", {"x": randn(1, 5, 3), "scale": randn(5), "bias": randn(5)}, {"num_groups": 2},
                 opset=21, reference="onnx.reference")


def test_groupnorm18_rejects_per_channel_scale():
    with pytest.raises((ValueError, RuntimeError), match=r"scale \[4\] must hold 2 values \(one per group"):
        check_op("GroupNormalization", {"x": randn(1, 4, 3), "scale": randn(4), "bias": randn(2)}, {"num_groups": 2},
                 opset=18, reference="onnx.reference")


# ---- LpNormalization ----


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lpnormalization(p, axis):
    check_op("LpNormalization", {"x": randn(3, 4, 5)}, {"p": p, "axis": axis}, opset=1, **F32)


def test_lpnormalization_float64():
    check_op("LpNormalization", {"x": randn(3, 4, dtype=np.float64)}, {"p": 2}, opset=1, **F64)


def test_lpnormalization_rejects_p3():
    with pytest.raises((ValueError, RuntimeError), match=r"p is 3, expected 1 or 2"):
        check_op("LpNormalization", {"x": randn(3, 4)}, {"p": 3}, opset=1, reference="onnx.reference")


# ---- RMSNormalization (opset 23) ----
# float32 and float64 against onnxruntime and onnx.reference (both compute float64 in
# double, whatever stash_type says); float16 against onnxruntime; bfloat16 against the
# spec's formula in float64, within the two roundings the spec's body makes.


def rms_expected(x, scale, axis, epsilon=1e-5):
    """The spec's function body in float64 (for the 16-bit types)."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    xf = x.astype(np.float64)
    return xf / np.sqrt(np.mean(xf * xf, axis=axes, keepdims=True) + epsilon) * scale.astype(np.float64)


@pytest.mark.parametrize("reference", ["onnxruntime", "onnx.reference"])
@pytest.mark.parametrize("shape, axis", [((4, 6), -1), ((4, 6), 0), ((4, 6), 1), ((2, 3, 5), 1), ((2, 3, 5), -2),
                                         ((2, 3, 4, 5), 0), ((2, 3, 4, 5), 2), ((2, 3, 4, 5), -1)])
def test_rmsnorm(shape, axis, reference):
    scale = randn(*shape[axis % len(shape):])
    check_op("RMSNormalization", {"x": randn(*shape) * 3, "scale": scale}, {"axis": axis, "epsilon": 1e-3}, opset=23,
             reference=reference, **F32)


def test_rmsnorm_default_attributes_large_rows():
    check_op("RMSNormalization", {"x": randn(8, 1000), "scale": randn(1000)}, opset=23, **F32)


@pytest.mark.parametrize("scale_shape", [(1,), (1, 5), (5,), (3, 1), (3, 5), (2, 3, 5), (2, 1, 5)])
def test_rmsnorm_scale_broadcasts_unidirectionally(scale_shape):
    # Shapes of scale that span leading axes too: Mul broadcasts scale against all of X.
    check_op("RMSNormalization", {"x": randn(2, 3, 5), "scale": randn(*scale_shape)}, {"axis": -1}, opset=23,
             reference="onnx.reference", **F32)


def test_rmsnorm_constant_scale():
    check_op("RMSNormalization", {"x": randn(3, 7), "scale": randn(7)}, constants=["scale"], opset=23, **F32)


def test_rmsnorm_float64_stash_double():
    x, scale = randn(3, 4, 5, dtype=np.float64), randn(4, 5, dtype=np.float64)
    # onnx.reference refuses stash_type 11 but computes in X's type (double) anyway.
    from op_harness import make_model, run_reference

    model = make_model("RMSNormalization", {"x": x, "scale": scale}, {"axis": 1}, opset=23)
    expected = run_reference(model, {"x": x, "scale": scale}, "onnx.reference")
    check_op("RMSNormalization", {"x": x, "scale": scale}, {"axis": 1, "stash_type": 11}, opset=23,
             expected=expected, **F64)


@pytest.mark.parametrize("reference", ["onnxruntime", "onnx.reference"])
def test_rmsnorm_float64_default_stash(reference):
    # Both references compute float64 in double under stash_type 1; so does onnxtrain.
    x, scale = randn(3, 16, dtype=np.float64), randn(16, dtype=np.float64)
    check_op("RMSNormalization", {"x": x, "scale": scale}, opset=23, reference=reference, **F64)


@pytest.mark.parametrize("dtype, tol", [(np.float16, 1e-3), ("bfloat16", 8e-3)])
def test_rmsnorm_16_bit_types(dtype, tol):
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    x, scale = randn(4, 3, 8).astype(np_dtype), randn(8).astype(np_dtype)
    # Two roundings (normalized, then the product), each within half an ulp of the type.
    from op_harness import make_model, run_onnxtrain

    (y,) = run_onnxtrain(make_model("RMSNormalization", {"x": x, "scale": scale}, opset=23), {"x": x, "scale": scale})
    assert y.dtype == np_dtype
    # numpy's tolerance arithmetic is unreliable in bfloat16: compare in float64.
    np.testing.assert_allclose(y.astype(np.float64), rms_expected(x, scale, -1), rtol=2 * tol, atol=2 * tol)


def test_rmsnorm_float16_against_onnxruntime():
    x, scale = randn(4, 32).astype(np.float16), randn(32).astype(np.float16)
    check_op("RMSNormalization", {"x": x, "scale": scale}, opset=23, **F16)


def test_rmsnorm_rejects_bad_axis_scale_and_stash():
    with pytest.raises((ValueError, RuntimeError), match=r"axis 2 is out of range for rank 2 \(expected -2..1\)"):
        check_op("RMSNormalization", {"x": randn(2, 3), "scale": randn(3)}, {"axis": 2}, opset=23,
                 reference="onnx.reference")
    with pytest.raises((ValueError, RuntimeError), match=r"scale \[4\] does not broadcast to X \[2, 3\]"):
        check_op("RMSNormalization", {"x": randn(2, 3), "scale": randn(4)}, opset=23, reference="onnx.reference")
    with pytest.raises((ValueError, RuntimeError), match=r"stash_type is 10"):
        check_op("RMSNormalization", {"x": randn(2, 3), "scale": randn(3)}, {"stash_type": 10}, opset=23,
                 reference="onnx.reference")
