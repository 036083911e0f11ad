"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear against onnxruntime 1.23
(opsets 10 to 21: it implements none later) and onnx.reference (every opset; the only
oracle for float4, float8e8m0 scales, `precision` and DequantizeLinear's `output_dtype`).

Quantized outputs are compared exactly (bit for bit for float8/float4, NaN by NaN-ness);
dequantized ones exactly too: both sides compute (x - zero_point) * scale in float32."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

rng = np.random.default_rng(5)

INTEGER_TARGETS = [np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4]
FLOAT8_TARGETS = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                  ml_dtypes.float8_e5m2fnuz]


def onnx_type(t):
    return helper.np_dtype_to_tensor_dtype(np.dtype(t))


def model_of(nodes, inputs, outputs, initializers=(), opset=21):
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info(n, onnx_type(v.dtype), v.shape)
                                           for n, v in inputs.items()],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(v, n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=11 if opset >= 24 else 10)


def run(model, feeds, reference):
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    if reference == "onnxruntime":
        import onnxruntime as ort

        theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    else:
        from onnx.reference import ReferenceEvaluator

        theirs = ReferenceEvaluator(model, new_ops=REFERENCE_OPSET_23).run(None, feeds)
    return ours, [np.asarray(t) for t in theirs]


def _reference_opset_23():
    """onnx.reference 1.19 implements QuantizeLinear / DequantizeLinear 23 (`precision`,
    DequantizeLinear's `output_dtype`) but registers 21 only: these stand in for both."""
    from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_23
    from onnx.reference.ops.op_quantize_linear import QuantizeLinear_23

    class QuantizeLinear(QuantizeLinear_23):
        op_domain = ""

    class DequantizeLinear(DequantizeLinear_23):
        op_domain = ""

    return [QuantizeLinear, DequantizeLinear]


REFERENCE_OPSET_23 = _reference_opset_23()


def assert_same(ours, theirs):
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    if ours.dtype.kind == "f" and ours.dtype.isbuiltin == 1:
        np.testing.assert_array_equal(ours, theirs)
        return
    if ours.dtype in (np.dtype(t) for t in FLOAT8_TARGETS + [ml_dtypes.float4_e2m1fn]):
        nan = np.isnan(theirs.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(ours.astype(np.float32)), nan)
        ours, theirs = ours[~nan], theirs[~nan]
    np.testing.assert_array_equal(ours.view(np.uint8) if ours.dtype.itemsize == 1 else ours,
                                  theirs.view(np.uint8) if theirs.dtype.itemsize == 1 else theirs)


def quantize_model(x, scale, zero_point, opset, attrs, constants=True, dequantize=False):
    """QuantizeLinear(x, scale[, zero_point]) (and DequantizeLinear of it with the same
    parameters, for runtimes that cannot hand the quantized type to numpy)."""
    names = ["x", "scale"] + (["zero_point"] if zero_point is not None else [])
    params = [("scale", scale)] + ([("zero_point", zero_point)] if zero_point is not None else [])
    nodes = [helper.make_node("QuantizeLinear", names, ["q"], **attrs)]
    outputs = ["q"]
    if dequantize:
        dq_attrs = {k: v for k, v in attrs.items() if k in ("axis", "block_size")}
        nodes.append(helper.make_node("DequantizeLinear", ["q"] + names[1:], ["y"], **dq_attrs))
        outputs = ["y"]
    inputs = {"x": x} if constants else {"x": x, **dict(params)}
    return model_of(nodes, inputs, outputs, params if constants else (), opset), ({"x": x} if constants else
                                                                                   {"x": x, **dict(params)})


def zero_point_of(target, shape, values=True):
    if target in FLOAT8_TARGETS or target == ml_dtypes.float4_e2m1fn:
        return np.zeros(shape, target)
    info = ml_dtypes.iinfo(target)
    low, high = max(int(info.min), -20), min(int(info.max), 20)
    return rng.integers(low, high + 1, size=shape).astype(target) if values else np.zeros(shape, target)


def sample(shape, spread=3.0):
    x = (rng.standard_normal(shape) * spread).astype(np.float32)
    # Exact ties at scale 0.5 and a saturating value (small enough that x / scale fits int32:
    # onnxruntime and onnx.reference convert through int32 and wrap beyond it).
    x.flat[:4] = [0.0, 0.25, -0.25, 1e6][: x.size]
    return x


# ---- QuantizeLinear ----


@pytest.mark.parametrize("target", INTEGER_TARGETS + FLOAT8_TARGETS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
def test_quantize_against_onnxruntime(target, granularity):
    x = sample((3, 8, 5))
    if granularity == "tensor":
        scale, attrs = np.array(0.5, np.float32), {}
    elif granularity == "axis":
        scale, attrs = np.linspace(0.05, 0.9, 8).astype(np.float32), {"axis": 1}
    else:
        scale, attrs = np.linspace(0.05, 0.9, 3 * 3 * 5).astype(np.float32).reshape(3, 3, 5), {"axis": -2,
                                                                                             "block_size": 3}
    zero_point = zero_point_of(target, scale.shape)
    numpy_type = np.dtype(target).isbuiltin == 1
    model, feeds = quantize_model(x, scale, zero_point, 21, attrs, dequantize=not numpy_type)
    ours, theirs = run(model, feeds, "onnxruntime")
    assert_same(ours[0], theirs[0])
    # The quantized values themselves, against onnx.reference.
    ours, theirs = run(*quantize_model(x, scale, zero_point, 21, attrs), "onnx.reference")
    assert_same(ours[0], theirs[0])


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("target", [np.uint8, np.int8])
def test_quantize_opsets_and_omitted_zero_point(opset, target):
    x = sample((4, 6))
    ours, theirs = run(*quantize_model(x, np.array(0.07, np.float32), np.array(3, target), opset, {}), "onnxruntime")
    assert_same(ours[0], theirs[0])
    ours, theirs = run(*quantize_model(x, np.array(0.07, np.float32), None, opset, {}), "onnxruntime")
    assert ours[0].dtype == np.uint8
    assert_same(ours[0], theirs[0])
    if opset >= 13:  # per axis from opset 13
        scale = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
        ours, theirs = run(*quantize_model(x, scale, np.arange(4).astype(target), opset, {"axis": 0}), "onnxruntime")
        assert_same(ours[0], theirs[0])


@pytest.mark.parametrize("source", [np.float16, ml_dtypes.bfloat16, np.int32])
def test_quantize_other_inputs_and_scales(source):
    # The division happens in the type x and the scale promote to (float16 only when both are).
    # Quotients finite in float16 (onnx.reference turns an infinite one into int32's minimum).
    x = np.clip(sample((5, 7)) * (40 if source == np.int32 else 1), -600, 600).astype(source)
    for scale_type in (np.float32, np.float16, ml_dtypes.bfloat16):
        scale = np.array([0.3, 0.11, 0.07, 0.5, 0.013], scale_type)
        ours, theirs = run(*quantize_model(x, scale, np.array([1, 2, 3, 4, 5], np.int8), 21, {"axis": 0},
                                           constants=False), "onnx.reference")
        assert_same(ours[0], theirs[0])


def test_quantize_precision_attribute():
    x = sample((4, 9))
    scale = np.array(0.0123, np.float32)
    for precision in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16):
        ours, theirs = run(*quantize_model(x, scale, np.array(-3, np.int16), 23, {"precision": precision}),
                           "onnx.reference")
        assert_same(ours[0], theirs[0])


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("target", FLOAT8_TARGETS, ids=lambda t: np.dtype(t).name)
def test_quantize_float8_saturate(saturate, target):
    x = np.array([0, 1, -1, 1e5, -1e5, np.inf, -np.inf, np.nan, 300, 500, 0.001], np.float32)
    model, feeds = quantize_model(x, np.array(0.5, np.float32), None, 21,
                                  {"saturate": saturate, "output_dtype": onnx_type(target)})
    ours, theirs = run(model, feeds, "onnx.reference")
    assert_same(ours[0], theirs[0])


def test_quantize_float4_and_output_dtype():
    x = sample((3, 5), spread=4)
    for opset in (23, 24):
        model, feeds = quantize_model(x, np.array(0.5, np.float32), None, opset,
                                      {"output_dtype": TensorProto.FLOAT4E2M1})
        ours, theirs = run(model, feeds, "onnx.reference")
        assert_same(ours[0], theirs[0])
    model, feeds = quantize_model(x, np.array(0.5, np.float32), None, 21, {"output_dtype": TensorProto.INT4})
    ours, theirs = run(model, feeds, "onnx.reference")
    assert_same(ours[0], theirs[0])


def test_quantize_nan_gives_the_zero_point():
    x = np.array([np.nan, 1.0], np.float32)
    ours = onnxtrain.InferenceSession(quantize_model(x, np.array(1, np.float32), np.array(7, np.uint8), 13, {})[0]
                                      .SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ours, [7, 8])


def test_quantize_blocked_with_a_partial_last_block_and_int4():
    # 7 elements per row in blocks of 3: the last block holds one; odd sizes pack across rows.
    x = sample((3, 7))
    scale = np.array([[0.2, 0.4, 0.8]] * 3, np.float32) * np.array([[1], [2], [3]], np.float32)
    for target in (np.int8, ml_dtypes.int4, ml_dtypes.uint4):
        zp = zero_point_of(target, scale.shape)
        ours, theirs = run(*quantize_model(x, scale, zp, 21, {"axis": 1, "block_size": 3}), "onnx.reference")
        assert_same(ours[0], theirs[0])


def test_quantize_errors():
    x = np.ones((2, 3), np.float32)
    cases = [
        (np.ones(2, np.float32), None, {"axis": 1}, r"the scale has shape \[2\]; expected a scalar or a 1-D tensor "
                                                     r"of x's 3 elements on axis 1"),
        (np.ones((2, 2), np.float32), None, {"axis": 1, "block_size": 3},
         r"blocks of 3 on axis 1 of x \[2, 3\] need \[2, 1\]"),
        (np.ones(3, np.float32), np.zeros(2, np.uint8), {"axis": 1},
         r"the zero point has shape \[2\] but the scale \[3\]"),
        (np.ones(3, np.float32), np.zeros(3, np.uint8), {"axis": 1, "output_dtype": TensorProto.INT8},
         r"attribute 'output_dtype' is int8 but the zero point is uint8"),
        (np.ones(3, np.float32), None, {"axis": 5}, r"axis 5 is out of range for rank 2"),
    ]
    for scale, zero_point, attrs, message in cases:
        model, feeds = quantize_model(x, scale, zero_point, 21, attrs)
        with pytest.raises((ValueError, RuntimeError), match=message):
            onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)


# ---- DequantizeLinear ----


def dequantize_model(q, scale, zero_point, opset, attrs):
    """DequantizeLinear of constants (onnxruntime takes no ml_dtypes feeds) and an Identity
    of a fed float (a model needs an input)."""
    names = ["q", "scale"] + (["zero_point"] if zero_point is not None else [])
    params = [("q", q), ("scale", scale)] + ([("zero_point", zero_point)] if zero_point is not None else [])
    nodes = [helper.make_node("DequantizeLinear", names, ["y"], **attrs), helper.make_node("Identity", ["f"], ["g"])]
    f = np.zeros(1, np.float32)
    return model_of(nodes, {"f": f}, ["y"], params, opset), {"f": f}


def quantized_sample(target, shape):
    if target in FLOAT8_TARGETS or target == ml_dtypes.float4_e2m1fn:
        return (rng.standard_normal(shape) * 3).astype(target)
    info = ml_dtypes.iinfo(target)
    return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(target)


@pytest.mark.parametrize("source", INTEGER_TARGETS + FLOAT8_TARGETS + [np.int32], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
def test_dequantize(source, granularity):
    q = quantized_sample(source, (2, 9, 3))
    if granularity == "tensor":
        scale, attrs = np.array(0.37, np.float32), {}
    elif granularity == "axis":
        scale, attrs = np.linspace(0.01, 2, 9).astype(np.float32), {"axis": 1}
    else:
        scale, attrs = np.linspace(0.01, 2, 2 * 3 * 3).astype(np.float32).reshape(2, 3, 3), {"axis": 1,
                                                                                           "block_size": 4}
    zero_point = None if source == np.int32 or source in FLOAT8_TARGETS else zero_point_of(source, scale.shape)
    ours, theirs = run(*dequantize_model(q, scale, zero_point, 21, attrs), "onnxruntime"
                       if source != np.int32 or granularity == "tensor" else "onnx.reference")
    assert_same(ours[0], theirs[0])
    ours, theirs = run(*dequantize_model(q, scale, zero_point, 21, attrs), "onnx.reference")
    assert_same(ours[0], theirs[0])


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
def test_dequantize_opsets(opset):
    q = quantized_sample(np.uint8, (5, 4))
    ours, theirs = run(*dequantize_model(q, np.array(0.25, np.float32), np.array(128, np.uint8), opset, {}),
                       "onnxruntime")
    assert_same(ours[0], theirs[0])
    if opset >= 13:
        ours, theirs = run(*dequantize_model(q, np.array([1, 2, 3, 4], np.float32) / 8, np.arange(4, dtype=np.uint8),
                                             opset, {"axis": 1}), "onnxruntime")
        assert_same(ours[0], theirs[0])


@pytest.mark.parametrize("scale_type", [np.float16, ml_dtypes.bfloat16])
def test_dequantize_16bit_scales_and_output_dtype(scale_type):
    q = quantized_sample(np.int8, (4, 6))
    scale = np.array([0.1, 0.2, 0.3, 0.4], scale_type)
    ours, theirs = run(*dequantize_model(q, scale, np.array([1, 2, 3, 4], np.int8), 21, {"axis": 0}),
                       "onnx.reference")
    assert ours[0].dtype == np.dtype(scale_type)
    assert_same(ours[0], theirs[0])
    for output in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16):
        ours, theirs = run(*dequantize_model(q, scale, None, 23, {"axis": 0, "output_dtype": output}),
                           "onnx.reference")
        assert_same(ours[0], theirs[0])


def test_dequantize_float4_and_e8m0_scales():
    q = quantized_sample(ml_dtypes.float4_e2m1fn, (4, 8))
    ours, theirs = run(*dequantize_model(q, np.array(0.5, np.float32), None, 23, {}), "onnx.reference")
    assert_same(ours[0], theirs[0])
    # MX: float4 values with a power-of-two (float8e8m0) scale per block of 4.
    scale = np.array([[0.25, 2], [4, 0.125], [1, 8], [0.5, 16]], np.float32).astype(ml_dtypes.float8_e8m0fnu)
    ours, theirs = run(*dequantize_model(q, scale, None, 24, {"axis": 1, "block_size": 4,
                                                                "output_dtype": TensorProto.FLOAT}), "onnx.reference")
    assert_same(ours[0], theirs[0])


def test_dequantize_errors():
    q = np.zeros((2, 3), np.int8)
    with pytest.raises((ValueError, RuntimeError), match=r"x is int8 but the zero point is uint8"):
        model, feeds = dequantize_model(q, np.array(1, np.float32), np.array(0, np.uint8), 21, {})
        onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    scale = np.array(1, ml_dtypes.float8_e8m0fnu)
    with pytest.raises((ValueError, RuntimeError), match=r"the output type is float8e8m0 \(the scale's type\)"):
        model, feeds = dequantize_model(q, scale, None, 24, {})
        onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)


# ---- DynamicQuantizeLinear ----


@pytest.mark.parametrize("shape,spread,shift", [((3, 4), 1, 0), ((7, 5, 3), 10, 3), ((100,), 1, -5), ((1, 1), 0, 0)])
def test_dynamic_quantize_linear(shape, spread, shift):
    x = (rng.standard_normal(shape) * spread + shift).astype(np.float32)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"])
    model = model_of([node], {"x": x}, ["y", "scale", "zero_point"], opset=11)
    ours, theirs = run(model, {"x": x}, "onnxruntime")
    for a, b in zip(ours, theirs):
        assert_same(np.asarray(a), b)
