"""Cast and CastLike between every element type onnxtrain holds, against onnxruntime (and
onnx.reference / exact arithmetic where onnxruntime differs or has no kernel).

Values are exact in both types unless a test is about rounding, so results are compared
exactly; the rounding tests state the correctly rounded result. Floating point to
integer out of range is undefined in ONNX: onnxtrain saturates (NaN gives 0)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import check_op, make_model, run_reference

rng = np.random.default_rng(2)

FLOATS = [np.float32, np.float64, np.float16]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]
TYPES = FLOATS + SIGNED + UNSIGNED + [np.bool_]


def name(t):
    return np.dtype(t).name


def onnx_type(t):
    return helper.np_dtype_to_tensor_dtype(np.dtype(t))


def sample(source, target):
    """Values of `source` that `target` can hold exactly (after truncation toward zero)."""
    s, t = np.dtype(source), np.dtype(target)
    if s == np.bool_:
        return np.array([[True, False, True], [False, False, True]])
    values = [0, 1, 2, 3, 100, 127]
    if s.kind in "iu" and t.kind in "iu":
        values += [-1, -100] if s.kind == "i" else []  # wrap into unsigned targets like numpy
    elif s.kind == "f" and t.kind != "u":
        values += [-1, -100, -2.75] if t.kind != "b" else [-0.5]
    if s.kind == "f" and t.kind in "iub":
        values += [2.75, 0.5]
    return np.array(values, s).reshape(-1, 1 if len(values) % 2 else 2)


def check_cast(x, to, *, opset=13, expected=None, attrs=None):
    return check_op("Cast", {"x": x}, {"to": onnx_type(to), **(attrs or {})}, opset=opset, expected=expected, rtol=0,
                    atol=0)


@pytest.mark.parametrize("source", TYPES, ids=name)
@pytest.mark.parametrize("target", TYPES, ids=name)
def test_cast_every_pair(source, target):
    check_cast(sample(source, target), target)


@pytest.mark.parametrize("target", [np.int8, np.uint8, np.int16, np.uint16, np.uint32])
def test_cast_wraps_between_integers(target):
    check_cast(np.array([300, -129, 65536, -1, 2**31 - 1, -(2**31)], np.int32), target)
    check_cast(np.array([2**40 + 5, -(2**40) - 7], np.int64), target)


@pytest.mark.parametrize("source", FLOATS, ids=name)
@pytest.mark.parametrize("target", SIGNED, ids=name)
def test_cast_float_to_int_truncates_toward_zero(source, target):
    x = np.array([-2.9, -2.5, -0.9, -0.0, 0.9, 2.5, 2.9, 99.99], source)
    check_cast(x, target)


@pytest.mark.parametrize("source", [np.float32, np.float64], ids=name)
@pytest.mark.parametrize("target", SIGNED + UNSIGNED, ids=name)
def test_cast_float_to_int_saturates(source, target):
    info = np.iinfo(target)
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, -1.0], source)
    expected = np.array([0, info.max, info.min, info.max, info.min, max(-1, info.min)], target)
    check_cast(x, target, expected=[expected])


def test_cast_to_bool():
    x = np.array([0.0, -0.0, 0.5, -2, np.nan, np.inf], np.float32)
    check_cast(x, np.bool_)
    check_cast(np.array([0, 1, -1, 256], np.int64), np.bool_)


def test_cast_double_to_float16_rounds_once():
    # Just above a tie between two float16 values: rounding through float32 lands on the
    # tie and then rounds to even (down); the correctly rounded result is up.
    ulp = 2.0**-10
    x = np.array([1 + ulp / 2 + 1e-12, 1 + ulp / 2 - 1e-12, 1 + ulp / 2, 1 + 3 * ulp / 2, 65519.99, 65520.0, 1e-8,
                  -(1 + ulp / 2 + 1e-12), np.nan, -np.inf], np.float64)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)
    check_cast(x, np.float16, expected=[expected])


@pytest.mark.parametrize("source", [np.int32, np.int64, np.uint32, np.uint64], ids=name)
def test_cast_large_integers_to_float16_and_float32(source):
    x = np.array([2049, 2051, 65504, 65519, 65520, 2**24 + 1, 2**24 + 3, 2**31 - 1], source)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float64).astype(np.float16)
    check_cast(x, np.float16, expected=[expected])
    check_cast(x, np.float32, expected=[x.astype(np.float32)])


@pytest.mark.parametrize("opset", [6, 9, 13, 19, 21, 23, 24])
def test_cast_opsets(opset):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    check_op("Cast", {"x": x}, {"to": TensorProto.DOUBLE}, opset=opset,
             reference="onnxruntime" if opset <= 23 else "onnx.reference")
    check_op("Cast", {"x": x * 100}, {"to": TensorProto.INT32}, opset=opset,
             reference="onnxruntime" if opset <= 23 else "onnx.reference")


@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_ignores_saturate_outside_float8(saturate):
    # (onnxruntime refuses saturate=0 here; the spec says it only matters for float8 targets.)
    x = np.array([1e6, -3.5], np.float32)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)
    check_cast(x, np.float16, opset=19, attrs={"saturate": saturate}, expected=[expected])


def test_cast_to_the_same_type_and_shapes():
    check_cast(np.arange(6, dtype=np.int64).reshape(2, 3), np.int64)
    check_cast(np.array(2.5, np.float32), np.float64)
    check_cast(np.zeros((0, 4), np.float32), np.int8)
    check_cast(rng.standard_normal(100003).astype(np.float32), np.float16)
    check_cast(rng.standard_normal(100003).astype(np.float16), np.float32)


@pytest.mark.parametrize("to", [TensorProto.STRING, 999])
def test_cast_rejects_types_onnxtrain_cannot_hold(to):
    model = make_model("Cast", {"x": np.ones(2, np.float32)}, {"to": to}, opset=21)
    with pytest.raises((ValueError, RuntimeError), match=f"attribute 'to' is element type {to}, which onnxtrain cannot hold"):
        onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": np.ones(2, np.float32)})


def test_cast_rejects_a_missing_to():
    model = make_model("Cast", {"x": np.ones(2, np.float32)}, opset=21)
    with pytest.raises((ValueError, RuntimeError), match="required attribute 'to' is missing"):
        onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": np.ones(2, np.float32)})


# ---- bfloat16: cast inside the model (feeds and outputs stay numpy types) ----


def run_chain(x, *types, opset=21):
    """x cast through each of `types` in turn, inside one model; returns onnxtrain's result
    and onnx.reference's."""
    nodes, previous = [], "x"
    for i, t in enumerate(types):
        nodes.append(helper.make_node("Cast", [previous], [f"c{i}"], to=t))
        previous = f"c{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", onnx_type(x.dtype), x.shape)],
                              [helper.make_tensor_value_info(previous, types[-1], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    from onnx.reference import ReferenceEvaluator

    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    return ours, ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("other", [t for t in TYPES if t != np.bool_], ids=name)
def test_cast_bfloat16_round_trips(other):
    x = np.array([0, 1, 2, 3, 100, 120, 0.5, 3.25] if np.dtype(other).kind == "f" else [0, 1, 2, 3, 100, 120], other)
    ours, theirs = run_chain(x, TensorProto.BFLOAT16, onnx_type(other))
    np.testing.assert_array_equal(ours, theirs)
    assert ours.dtype == theirs.dtype == x.dtype


def test_cast_bfloat16_rounds_to_nearest_even():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.4e38, -7.1, np.nan, np.inf], np.float32)
    ours, _ = run_chain(x, TensorProto.BFLOAT16, TensorProto.FLOAT)
    np.testing.assert_array_equal(ours, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_cast_bfloat16_and_float16_and_bool():
    x = np.array([0, 1.5, -2.25, 1000, 0.0001], np.float32)
    ours, theirs = run_chain(x, TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.FLOAT)
    np.testing.assert_array_equal(ours, theirs)
    ours, theirs = run_chain(x, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT)
    np.testing.assert_array_equal(ours, theirs)
    ours, theirs = run_chain(x, TensorProto.BFLOAT16, TensorProto.BOOL)
    np.testing.assert_array_equal(ours, theirs)


def test_cast_integers_and_doubles_to_bfloat16_round_once():
    # 2^24 + 2^16 + 1 is above the tie between two bfloat16 values; through float32 it would
    # land on the tie and round to even (down).
    x = np.array([2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2**24 + 2**16], np.int64)
    ours, _ = run_chain(x, TensorProto.BFLOAT16, TensorProto.DOUBLE)
    np.testing.assert_array_equal(ours, [2**24 + 2**17, -(2**24 + 2**17), 2**24])
    d = np.array([1 + 2**-8 + 1e-12], np.float64)
    ours, _ = run_chain(d, TensorProto.BFLOAT16, TensorProto.DOUBLE)
    np.testing.assert_array_equal(ours, [1 + 2**-7])


# ---- CastLike ----


@pytest.mark.parametrize("source", TYPES, ids=name)
@pytest.mark.parametrize("target", [np.float32, np.float16, np.int64, np.uint8, np.bool_], ids=name)
@pytest.mark.parametrize("opset", [15, 21])
def test_castlike(source, target, opset):
    check_op("CastLike", {"x": sample(source, target), "like": np.zeros(3, target)}, opset=opset, rtol=0, atol=0)


def test_castlike_bfloat16_target():
    nodes = [helper.make_node("Cast", ["l"], ["lb"], to=TensorProto.BFLOAT16),
             helper.make_node("CastLike", ["x", "lb"], ["y"]),
             helper.make_node("Cast", ["y"], ["out"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "castlike",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [4]), helper.make_tensor_value_info("l", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    x = np.array([1.0, 1 + 2**-9, 300.7, -2.5], np.float64)
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x, "l": np.zeros(1, np.float32)})[0]
    np.testing.assert_array_equal(ours, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_cast_float_to_bfloat16_bits_match_reference_over_bit_patterns():
    # 2^18 random float32 bit patterns (every exponent: subnormals, overflow to inf, NaN
    # payloads) plus every tie pattern of the low 16 bits: the bfloat16 output's bits
    # equal ml_dtypes' and onnx.reference's (round to nearest even); NaN stays NaN.
    bits = np.random.default_rng(0).integers(0, 2**32, size=2**18, dtype=np.uint64).astype(np.uint32)
    ties = (np.arange(2**15, dtype=np.uint32) << 16) | 0x8000
    x = np.concatenate([bits, ties, ties | 0x80000000]).view(np.float32)
    model = make_model("Cast", {"x": x}, {"to": TensorProto.BFLOAT16}, opset=21)
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    from onnx.reference import ReferenceEvaluator

    theirs = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert ours.dtype == ml_dtypes.bfloat16
    nan = np.isnan(x)
    assert np.isnan(ours.astype(np.float32)[nan]).all()
    np.testing.assert_array_equal(ours.view(np.uint16)[~nan], x[~nan].astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(ours.view(np.uint16)[~nan], np.asarray(theirs).view(np.uint16)[~nan])


# ---- float8, float4 and 4-bit integers (ml_dtypes arrays in and out) ----
#
# onnx.reference is the oracle: it casts with ml_dtypes (rounding to nearest even) and, with
# saturate, clips first. onnxruntime cannot hand these types to numpy. Results are compared
# bit for bit, NaN by NaN-ness (ONNX fixes no NaN payload).

NARROW_FLOATS = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                 ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn]
INT4 = [ml_dtypes.int4, ml_dtypes.uint4]
E8M0 = ml_dtypes.float8_e8m0fnu


def reference_cast(x, to, opset=24, **attrs):
    model = make_model("Cast", {"x": x}, {"to": onnx_type(to), **attrs}, opset=opset)
    model.ir_version = 11
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    return ours, run_reference(model, {"x": x}, "onnx.reference")[0]


def assert_same_bits(ours, theirs):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (ours.dtype, ours.shape, theirs.dtype, theirs.shape)
    if ours.dtype.kind in "fV" and ours.dtype not in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        nan = np.isnan(theirs.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(ours.astype(np.float32)), nan)
        ours, theirs = ours[~nan], theirs[~nan]
    np.testing.assert_array_equal(ours.view(np.uint8 if ours.dtype.itemsize == 1 else f"u{ours.dtype.itemsize}"),
                                  theirs.view(np.uint8 if theirs.dtype.itemsize == 1 else f"u{theirs.dtype.itemsize}"))


def exact_values(source, target):
    """Values of `source` that `target` holds exactly (any value for a bool target), an odd
    count (packing's edge)."""
    if np.dtype(source) == np.bool_:
        return np.array([True, False, True])
    values = [0, 1, -1, 2, 3, -4, 0.5, 1.5, 6, -6, 4, 7]
    keep = []
    for v in values:
        with np.errstate(all="ignore"):
            s = np.array([v], np.float64).astype(source)
            if float(s.astype(np.float64)[0]) != v:
                continue
            if np.dtype(target) != np.bool_ and float(s.astype(target).astype(np.float64)[0]) != v:
                continue
        keep.append(v)
    if len(keep) % 2 == 0:
        keep = keep[:-1]
    return np.array(keep, np.float64).astype(source)


ALL_TYPES = TYPES + NARROW_FLOATS + INT4


NARROW_PAIRS = [(s, t) for s in ALL_TYPES for t in ALL_TYPES if s in NARROW_FLOATS + INT4 or t in NARROW_FLOATS + INT4]


@pytest.mark.parametrize("source,target", NARROW_PAIRS, ids=[f"{name(s)}-{name(t)}" for s, t in NARROW_PAIRS])
def test_cast_every_pair_with_narrow_types(source, target):
    x = exact_values(source, target)
    assert x.size >= 3
    ours, theirs = reference_cast(x, target)
    assert_same_bits(ours, theirs)


@pytest.mark.parametrize("target", NARROW_FLOATS[:4], ids=name)
@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("source", [np.float32, np.float16, ml_dtypes.bfloat16], ids=name)
def test_cast_to_float8_rounds_to_nearest_even_and_saturates(target, saturate, source):
    # Every float16 bit pattern (every tie, subnormal, overflow, Inf and NaN of the float8
    # ranges), as float32, float16 and bfloat16.
    x = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(source)
    ours, theirs = reference_cast(x, target, saturate=saturate)
    assert_same_bits(ours, theirs)


@pytest.mark.parametrize("target", NARROW_FLOATS, ids=name)
def test_cast_double_and_int64_to_narrow_floats_round_once(target):
    # Just above a tie of the target: through an ordinarily rounded float32 the value would
    # land on the tie and round to even.
    f = ml_dtypes.finfo(target)
    one_ulp = float(f.eps)
    x = np.array([1 + one_ulp / 2 + 1e-12, 1 + 3 * one_ulp / 2 - 1e-12, -(1 + one_ulp / 2 + 1e-12)], np.float64)
    ours, _ = reference_cast(x, target)
    np.testing.assert_array_equal(ours.astype(np.float64), [1 + one_ulp, 1 + one_ulp, -(1 + one_ulp)])
    big = np.array([2**40 + 2**36 + 1, 2**40 + 2**36], np.int64)  # 2^40 (1 + 1/16): a tie for 3 mantissa bits
    if float(f.max) > 2**41:
        ours, _ = reference_cast(big, target)
        exact = big.astype(object)
        step = 2.0 ** (40 - (f.nmant))
        assert float(ours.astype(np.float64)[0]) == 2**40 + step * np.ceil(2**36 / step)


@pytest.mark.parametrize("source", NARROW_FLOATS + [E8M0], ids=name)
def test_cast_every_narrow_float_bit_pattern_to_float(source):
    bits = np.arange(256 if np.dtype(source).itemsize == 1 and source != ml_dtypes.float4_e2m1fn else 16, dtype=np.uint8)
    x = bits.view(source)
    for target in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64):
        ours, theirs = reference_cast(x, target)
        assert_same_bits(ours, theirs)


@pytest.mark.parametrize("target", INT4, ids=name)
def test_cast_to_int4_wraps(target):
    # Integers keep their low 4 bits, as between wider integers; floats truncate toward zero
    # first (out of range is undefined in ONNX; onnx.reference and onnxruntime wrap too).
    ints = np.array([-9, -8, 7, 8, 15, 16, 17, 300, -300], np.int32)
    ours, theirs = reference_cast(ints, target)
    assert_same_bits(ours, theirs)
    floats = np.array([-9, -8, -7.9, -0.5, 0.5, 2.5, 7.9, 8, 15, 15.9], np.float32)
    ours, _ = reference_cast(floats, target)
    truncated = np.trunc(floats).astype(np.int64) & 0xF
    np.testing.assert_array_equal(ours.view(np.uint8), truncated)


def test_cast_float_to_float4_saturates_and_maps_nan():
    x = np.array([0.25, 0.75, 1.25, 2.5, 5, 5.5, 6, 7, 1e6, np.inf, -np.inf, np.nan, -0.0, 1e-7, -3], np.float32)
    ours, theirs = reference_cast(x, ml_dtypes.float4_e2m1fn)
    np.testing.assert_array_equal(ours.view(np.uint8), np.asarray(theirs).view(np.uint8))


E8M0_INPUTS = np.array([0, 2.0**-127, 2.0**-126, 1e-40, 0.124, 0.125, 0.25, 0.5, 1.0, 1.1, 1.5, 1.75, 2, 3, 4, 8, 1e38,
                        3.4e38, np.inf, np.nan, -2.0], np.float32)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_float8e8m0(round_mode, saturate):
    # onnx.reference 1.19 tests "up" against mantissa mask 0x4FFFFF (a typo for 0x7FFFFF: 1.25
    # has only bit 0x200000 set and it rounds down); its Inf and zero ignore saturate, where
    # the spec's table saturates (Inf -> 2^127, 0 -> 2^-127) or gives NaN. Compared with the
    # spec's rule on those inputs, with onnx.reference elsewhere.
    ours, theirs = reference_cast(E8M0_INPUTS, E8M0, saturate=saturate, round_mode=round_mode)
    ours_bits, theirs_bits = ours.view(np.uint8).copy(), np.asarray(theirs).view(np.uint8).copy()
    special = np.isinf(E8M0_INPUTS) | (E8M0_INPUTS == 0)
    np.testing.assert_array_equal(ours_bits[~special], theirs_bits[~special])
    expected_special = {0: 0 if saturate else 255, np.inf: 254 if saturate else 255}
    for v, bits in zip(E8M0_INPUTS[special], ours_bits[special]):
        assert bits == expected_special[float(v)], (v, bits)
    one_and_quarter = reference_cast(np.array([1.25], np.float32), E8M0, round_mode="up")[0]
    assert float(one_and_quarter.astype(np.float32)[0]) == 2.0


def test_castlike_narrow_types():
    for like in NARROW_FLOATS + INT4 + [E8M0]:
        x = np.array([1, 2, 0.5, 4, 3], np.float32) if like not in INT4 else np.array([1, 2, -3, 4, 5], np.float32)
        if like == ml_dtypes.uint4:
            x = np.abs(x)
        model = make_model("CastLike", {"x": x, "like": np.zeros(3, like)}, opset=21 if like != E8M0 else 24)
        model.ir_version = 11
        feeds = {"x": x, "like": np.zeros(3, like)}
        ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
        assert_same_bits(ours, run_reference(model, feeds, "onnx.reference")[0])


@pytest.mark.parametrize("dtype", NARROW_FLOATS + INT4 + [E8M0], ids=name)
def test_narrow_types_cross_the_python_boundary(dtype):
    # Identity and Reshape (views) and an odd element count: packing at the boundary.
    x = exact_values(np.float64, dtype).astype(dtype) if dtype != E8M0 else np.array([1, 2, 0.5], np.float64).astype(E8M0)
    x = np.concatenate([x, x[:2]])[:5]
    nodes = [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Reshape", ["i", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx_type(dtype), [5])],
                              [helper.make_tensor_value_info("y", onnx_type(dtype), [1, 5])],
                              [helper.make_tensor("s", TensorProto.INT64, [2], [1, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = onnxtrain.InferenceSession(model.SerializeToString())
    assert session.get_inputs()[0].type == f"tensor({helper.tensor_dtype_to_string(onnx_type(dtype)).split('.')[-1].lower()})"
    (y,) = session.run(None, {"x": x})
    assert y.dtype == np.dtype(dtype) and y.shape == (1, 5)
    np.testing.assert_array_equal(y.reshape(-1).view(np.uint8), x.view(np.uint8))
    # The bits as uint8, fed to an input of the type, stand for it as well.
    (z,) = session.run(None, {"x": x.view(np.uint8)})
    np.testing.assert_array_equal(z.reshape(-1).view(np.uint8), x.view(np.uint8))


def test_narrow_initializers_load_from_raw_and_int32_data():
    # ONNX stores float8 one element per int32_data entry and 4-bit types two per entry
    # (numpy_helper writes raw_data; helper.make_tensor int32_data).
    for dtype, values in [(TensorProto.FLOAT8E4M3FN, [1.0, -2.0, 0.5]), (TensorProto.INT4, [1, -2, 7]),
                          (TensorProto.UINT4, [1, 2, 15]), (TensorProto.FLOAT4E2M1, [1.0, -2.0, 6.0])]:
        for raw in (False, True):
            tensor = helper.make_tensor("c", dtype, [3], values, raw=False)
            if raw:
                from onnx import numpy_helper
                tensor = numpy_helper.from_array(numpy_helper.to_array(tensor), "c")
            node = helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)
            graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                                      [tensor])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
            (y,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {})
            np.testing.assert_array_equal(y, np.array(values, np.float32))


def test_packed_types_reach_only_the_ops_that_take_them():
    x = np.array([[1, 2, 3], [4, 5, 6]], ml_dtypes.int4)
    model = make_model("Transpose", {"x": x}, opset=21)
    with pytest.raises((ValueError, RuntimeError), match=r"input 'x' is int4, a 4-bit type packed two per byte, "
                                                           r"which this op does not take"):
        onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    # float8 is a byte per element: data movement ops take it.
    f = np.array([[1, 2, 3], [4, 5, 6]], ml_dtypes.float8_e4m3fn)
    (t,) = onnxtrain.InferenceSession(make_model("Transpose", {"x": f}, opset=21).SerializeToString()).run(None, {"x": f})
    np.testing.assert_array_equal(t.view(np.uint8), f.T.view(np.uint8))
