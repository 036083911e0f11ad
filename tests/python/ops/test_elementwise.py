"""Elementwise kernels (arithmetic, Pow, Mod, BitShift, Min/Max/Sum/Mean, comparisons,
logic, Where, unary math, IsNaN/IsInf, Identity, Clip) against onnxruntime, or against
onnx.reference where onnxruntime has no kernel for the type or opset.

Tolerances: float32 rtol 1e-5/atol 1e-6 (1e-5/1e-5 for the transcendental functions,
where onnxruntime's vectorized approximations and libm differ by a few ulp); float64
1e-12; float16 1e-3 (half an ulp is 4.9e-4; onnxtrain computes in float32 and rounds
once); bfloat16 1e-2 against onnx.reference (half an ulp is 2e-3). Integers and bools
exactly."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import check_op, make_model, run_reference

rng = np.random.default_rng(0)

FLOATS = [np.float32, np.float64, np.float16]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]
INTS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTS

TOLERANCE = {np.float32: (1e-5, 1e-6), np.float64: (1e-12, 1e-12), np.float16: (1e-3, 1e-3)}


def values(shape, dtype, low=-5, high=5, nonzero=False):
    """Random values of `dtype` in [low, high) (ints: integers there; unsigned: from 0)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        x = rng.uniform(low, high, shape).astype(dtype)
    else:
        lo = max(low, 0) if dtype.kind == "u" else low
        x = rng.integers(lo, high, shape).astype(dtype)
    if nonzero:
        x[x == 0] = 1
    return np.asarray(x)


def check(op, inputs, attrs=None, *, opset=17, n_outputs=1, constants=(), rtol=None, atol=None, expected=None,
          reference=None):
    """check_op against `reference`, by default onnxruntime, falling back to onnx.reference
    when onnxruntime has no kernel for this type or opset. Tolerances default to the first
    input's type."""
    first = next(v for v in inputs.values() if v is not None)
    default_rtol, default_atol = TOLERANCE.get(first.dtype.type, (0, 0))
    if expected is None:
        model = make_model(op, inputs, attrs, n_outputs=n_outputs, opset=opset, constants=constants)
        feeds = {k: v for k, v in inputs.items() if v is not None and k not in constants}
        try:
            expected = run_reference(model, feeds, reference or "onnxruntime")
        except Exception:  # no onnxruntime kernel for this type or opset
            expected = run_reference(model, feeds, "onnx.reference")
    return check_op(
        op,
        inputs,
        attrs,
        opset=opset,
        n_outputs=n_outputs,
        constants=constants,
        expected=expected,
        rtol=default_rtol if rtol is None else rtol,
        atol=default_atol if atol is None else atol,
    )


def run(op, inputs, attrs=None, *, opset=17, n_outputs=1):
    model = make_model(op, inputs, attrs, n_outputs=n_outputs, opset=opset)
    return onnxtrain.InferenceSession(model.SerializeToString()).run(None, inputs)


def check_bfloat16(op, inputs, attrs=None, *, opset=22, rtol=1e-2, atol=1e-2, out_type=TensorProto.FLOAT):
    """Runs `op` on bfloat16 values: float32 inputs are cast to bfloat16 inside the model and
    the result cast to `out_type`, so that neither feeds nor outputs are bfloat16 arrays.
    Compares with onnx.reference on the same model."""
    names = list(inputs)
    nodes = []
    for name, value in inputs.items():
        to = TensorProto.BFLOAT16 if value.dtype == np.float32 else helper.np_dtype_to_tensor_dtype(value.dtype)
        nodes.append(helper.make_node("Cast", [name], [name + "_b"], to=to))
    nodes.append(helper.make_node(op, [n + "_b" for n in names], ["op_out"], **(attrs or {})))
    nodes.append(helper.make_node("Cast", ["op_out"], ["out"], to=out_type))
    graph = helper.make_graph(
        nodes,
        "bf16",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("out", out_type, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    from onnx.reference import ReferenceEvaluator

    expected = ReferenceEvaluator(model).run(None, inputs)[0]
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    if ours.dtype.kind == "f":
        np.testing.assert_allclose(ours, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(ours, expected)


def raises(op, inputs, attrs=None, *, match, opset=17, n_outputs=1):
    with pytest.raises((ValueError, RuntimeError), match=match):
        run(op, inputs, attrs, opset=opset, n_outputs=n_outputs)


# ---- Add, Sub, Mul, Div ----

ARITHMETIC = ["Add", "Sub", "Mul", "Div"]

SHAPE_PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), ()),
    ((), (3, 4)),
    ((), ()),
    ((2, 3, 4), (4,)),
    ((2, 3, 4), (3, 1)),
    ((2, 1, 4), (1, 3, 1)),
    ((1,), (5,)),
    ((5, 1, 1, 3), (1, 4, 2, 1)),
    ((2, 3, 4, 5), (1, 3, 1, 5)),
    ((1, 1, 6), (6,)),
    ((0, 3), (3,)),
    ((2, 0), (1, 0)),
    ((70, 1000), (1000,)),  # rows in parallel
    ((300, 1), (1, 300)),
    ((200000,), (200000,)),  # flat, in parallel
    ((200000,), (1,)),
]


@pytest.mark.parametrize("op", ARITHMETIC)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_arithmetic_broadcasts(op, shapes):
    a = values(shapes[0], np.float32)
    b = values(shapes[1], np.float32, nonzero=True)
    check(op, {"a": a, "b": b})


@pytest.mark.parametrize("op", ARITHMETIC)
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda t: np.dtype(t).name)
def test_arithmetic_types(op, dtype):
    a = values((2, 3, 4), dtype, 0, 100)
    b = values((3, 1), dtype, 1, 10)
    check(op, {"a": a, "b": b})


@pytest.mark.parametrize("op", ARITHMETIC)
@pytest.mark.parametrize("opset", [7, 13, 14])
def test_arithmetic_opsets(op, opset):
    check(op, {"a": values((2, 3), np.float32), "b": values((3,), np.float32, nonzero=True)}, opset=opset)


@pytest.mark.parametrize("op", ARITHMETIC)
def test_arithmetic_bfloat16(op):
    check_bfloat16(op, {"a": values((2, 3, 4), np.float32), "b": values((4,), np.float32, 1, 3)})


@pytest.mark.parametrize("op", ARITHMETIC)
def test_arithmetic_constant_operand(op):
    check(op, {"a": values((4, 5), np.float32), "b": values((5,), np.float32, 1, 2)}, constants=["b"])


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 0, -128], np.int8)
    b = np.array([2, 2, -2, -2, 3, -1], np.int8)
    # -128 / -1 overflows int8 and wraps to -128 (as in onnxruntime and numpy).
    check("Div", {"a": a, "b": b}, expected=[np.array([3, -3, -3, 3, 0, -128], np.int8)])


def test_integer_overflow_wraps():
    big = np.iinfo(np.int32).max
    check("Add", {"a": np.array([big, 1], np.int32), "b": np.array([1, 1], np.int32)},
          expected=[np.array([np.iinfo(np.int32).min, 2], np.int32)])
    check("Mul", {"a": np.array([2**62], np.int64), "b": np.array([4], np.int64)}, expected=[np.array([0], np.int64)])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_division_by_zero_raises(dtype):
    raises("Div", {"a": np.array([1, 2], dtype), "b": np.array([1, 0], dtype)}, match="division by zero")


def test_float_division_by_zero_gives_inf():
    check("Div", {"a": np.array([1, -1, 0], np.float32), "b": np.zeros(3, np.float32)})


def test_arithmetic_rejects_mixed_types():
    raises("Add", {"a": np.ones(3, np.float32), "b": np.ones(3, np.float64)}, match="element type double, expected float")


def test_arithmetic_rejects_shapes_that_do_not_broadcast():
    raises("Mul", {"a": np.ones((2, 3), np.float32), "b": np.ones((4,), np.float32)}, match="do not broadcast")


def test_arithmetic_rejects_bool():
    raises("Add", {"a": np.ones(3, bool), "b": np.ones(3, bool)}, match="unsupported element type bool")


# ---- Pow ----


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 4), ())], ids=str)
def test_pow_floats(dtype, shapes):
    check("Pow", {"x": values(shapes[0], dtype, 0.1, 3), "y": values(shapes[1], dtype, -2, 3)})


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0])
def test_pow_scalar_exponent(exponent):
    check("Pow", {"x": values((1000,), np.float32, -3, 3), "y": np.array(exponent, np.float32)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "base, exponent",
    [(np.float32, np.int32), (np.float32, np.int64), (np.float32, np.uint32), (np.float32, np.uint64),
     (np.float64, np.int8), (np.float16, np.int16), (np.float32, np.float64), (np.float64, np.float32)],
    ids=str,
)
def test_pow_float_base_mixed_exponent(base, exponent):
    check("Pow", {"x": values((3, 4), base, 0.5, 2), "y": values((4,), exponent, -3, 4)}, opset=15)


def test_pow_integer_base():
    x = np.array([2, 3, -2, 5, -1, -1, 0, 1, 7], np.int64)
    y = np.array([10, 3, 3, 0, -3, -4, 5, -5, -1], np.int64)
    check("Pow", {"x": x, "y": y}, opset=15, expected=[np.array([1024, 27, -8, 1, -1, 1, 0, 1, 0], np.int64)])
    # int64 powers stay exact where float64 would round.
    check("Pow", {"x": np.array([3], np.int64), "y": np.array([39], np.int64)}, opset=15,
          expected=[np.array([3**39], np.int64)])


@pytest.mark.parametrize("base", [np.int32, np.int64])
def test_pow_integer_base_float_exponent_truncates(base):
    check("Pow", {"x": np.array([2, 3, -2, 9], base), "y": np.array([0.5, 2.5, 3.0, 0.5], np.float32)}, opset=15)


@pytest.mark.parametrize("opset", [7, 12, 13, 15])
def test_pow_opsets(opset):
    check("Pow", {"x": values((2, 3), np.float32, 0.5, 2), "y": values((3,), np.float32, -1, 2)}, opset=opset)


def test_pow_bfloat16():
    check_bfloat16("Pow", {"x": values((2, 3), np.float32, 0.5, 2), "y": values((3,), np.float32, -1, 2)})


# ---- Mod ----


@pytest.mark.parametrize("dtype", SIGNED, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_signed_integers(dtype, fmod):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 5], dtype)
    b = np.array([3, 3, -3, -3, 3, -3, 4, 1], dtype)
    check("Mod", {"a": a, "b": b}, {"fmod": fmod})


@pytest.mark.parametrize("dtype", UNSIGNED, ids=lambda t: np.dtype(t).name)
def test_mod_unsigned_broadcast(dtype):
    check("Mod", {"a": values((3, 4), dtype, 0, 100), "b": values((4,), dtype, 1, 9)})


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_mod_floats_fmod(dtype):
    check("Mod", {"a": values((3, 4), dtype, -10, 10), "b": values((3, 1), dtype, 1, 4)}, {"fmod": 1}, opset=13)


def test_mod_min_by_minus_one_is_zero():
    check("Mod", {"a": np.array([-128, 5], np.int8), "b": np.array([-1, -1], np.int8)}, {"fmod": 1},
          expected=[np.array([0, 0], np.int8)])


def test_mod_by_zero_raises():
    raises("Mod", {"a": np.array([1, 2], np.int32), "b": np.array([0, 1], np.int32)}, match="division by zero")


def test_mod_float_without_fmod_raises():
    raises("Mod", {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)}, match="fmod=1")


# ---- BitShift ----


@pytest.mark.parametrize("dtype", UNSIGNED, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(dtype, direction):
    check("BitShift", {"x": values((3, 4), dtype, 0, 200), "y": values((4,), dtype, 0, 7)}, {"direction": direction})


def test_bitshift_by_the_width_or_more_gives_zero():
    x = np.array([255, 255, 1], np.uint8)
    y = np.array([8, 200, 7], np.uint8)
    check("BitShift", {"x": x, "y": y}, {"direction": "LEFT"}, expected=[np.array([0, 0, 128], np.uint8)])
    check("BitShift", {"x": x, "y": y}, {"direction": "RIGHT"}, expected=[np.array([0, 0, 0], np.uint8)])


def test_bitshift_rejects_bad_direction():
    raises("BitShift", {"x": np.ones(2, np.uint8), "y": np.ones(2, np.uint8)}, {"direction": "UP"},
           match="'direction' is 'UP', expected 'LEFT' or 'RIGHT'")


# ---- Min, Max, Sum, Mean ----

VARIADIC = ["Min", "Max", "Sum", "Mean"]


@pytest.mark.parametrize("op", VARIADIC)
@pytest.mark.parametrize(
    "shapes",
    [[(3, 4)], [(3, 4), (3, 4)], [(3, 1), (1, 4), (4,)], [(4,), (3, 4)], [(2,), (5, 1), (3, 1, 1), ()], [(0, 3), (3,)],
     [(300, 200), (200,), (300, 1)]],
    ids=str,
)
def test_variadic_broadcasts(op, shapes):
    check(op, {f"x{i}": values(s, np.float32) for i, s in enumerate(shapes)})


@pytest.mark.parametrize("op", ["Min", "Max", "Sum"])
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda t: np.dtype(t).name)
def test_variadic_types(op, dtype):
    check(op, {"a": values((3, 4), dtype, 0, 50), "b": values((4,), dtype, 0, 50), "c": values((3, 1), dtype, 0, 50)},
          opset=13)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_mean_types(dtype):
    check("Mean", {"a": values((3, 4), dtype), "b": values((4,), dtype), "c": values((3, 1), dtype)}, opset=13)


@pytest.mark.parametrize("op", VARIADIC)
@pytest.mark.parametrize("opset", [6, 8, 12, 13])
def test_variadic_opsets(op, opset):
    shapes = [(3, 4), (3, 4)] if opset < 8 else [(3, 4), (4,)]  # broadcasting from opset 8
    check(op, {f"x{i}": values(s, np.float32) for i, s in enumerate(shapes)}, opset=opset)


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_min_max_propagate_nan(op):
    a = np.array([1, np.nan, 3, np.nan], np.float32)
    b = np.array([np.nan, 2, 1, np.nan], np.float32)
    check(op, {"a": a, "b": b})


@pytest.mark.parametrize("op", VARIADIC)
def test_variadic_bfloat16(op):
    check_bfloat16(op, {"a": values((3, 4), np.float32), "b": values((4,), np.float32)})


def test_variadic_rejects_mixed_types():
    raises("Sum", {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32), "c": np.ones(3, np.float64)},
           match="input 2 has element type double, expected float")


# ---- comparisons and logic ----

COMPARISONS = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@pytest.mark.parametrize("op", COMPARISONS)
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda t: np.dtype(t).name)
def test_comparisons(op, dtype):
    check(op, {"a": values((3, 4), dtype, 0, 4), "b": values((4,), dtype, 0, 4)}, opset=16)


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons_with_nan(op):
    a = np.array([np.nan, 1, np.nan, np.inf], np.float32)
    b = np.array([np.nan, np.nan, 1, np.inf], np.float32)
    check(op, {"a": a, "b": b}, opset=16)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
@pytest.mark.parametrize("opset", [7, 9, 11, 13, 19])
def test_comparison_opsets(op, opset):
    dtype = np.int32 if opset < 9 else np.float32
    check(op, {"a": values((2, 3), dtype, 0, 3), "b": values((3,), dtype, 0, 3)}, opset=opset)


def test_equal_bool():
    check("Equal", {"a": values((3, 4), bool), "b": values((4,), bool)}, opset=11)


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons_bfloat16(op):
    check_bfloat16(op, {"a": values((3, 4), np.float32, 0, 3).round(), "b": values((4,), np.float32, 0, 3).round()},
                   out_type=TensorProto.BOOL)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (5,)), ((0,), (1,))],
                         ids=str)
def test_logic(op, shapes):
    check(op, {"a": values(shapes[0], bool), "b": values(shapes[1], bool)}, opset=7)


@pytest.mark.parametrize("shape", [(3, 4), (), (0, 2), (100000,)], ids=str)
def test_not(shape):
    check("Not", {"x": values(shape, bool)}, opset=1)


def test_logic_rejects_numbers():
    raises("And", {"a": np.ones(2, np.int32), "b": np.ones(2, np.int32)}, match="unsupported element type int32")
    raises("Not", {"x": np.ones(2, np.float32)}, match="unsupported element type float")


# ---- Where ----


@pytest.mark.parametrize("dtype", NUMERIC + [np.bool_], ids=lambda t: np.dtype(t).name)
def test_where_types(dtype):
    check("Where", {"c": values((3, 4), bool), "x": values((3, 4), dtype), "y": values((3, 4), dtype)}, opset=16)


@pytest.mark.parametrize(
    "shapes",
    [((3, 4), (3, 4), (3, 4)), ((4,), (3, 1), ()), ((2, 1, 4), (3, 1), (1,)), ((), (2, 3), (3,)), ((3, 1), (1, 5), (3, 5)),
     ((0, 4), (4,), (1, 4)), ((200, 300), (300,), (200, 1))],
    ids=str,
)
def test_where_broadcasts(shapes):
    check("Where", {"c": values(shapes[0], bool), "x": values(shapes[1], np.float32), "y": values(shapes[2], np.float32)},
          opset=9)


def test_where_bfloat16():
    check_bfloat16("Where", {"c": values((3, 4), bool), "x": values((4,), np.float32), "y": values((3, 1), np.float32)})


def test_where_rejects_non_bool_condition():
    raises("Where", {"c": np.ones(3, np.float32), "x": np.ones(3, np.float32), "y": np.ones(3, np.float32)},
           match="input 0 \\(condition\\) has element type float, expected bool")


def test_where_rejects_mixed_types():
    raises("Where", {"c": np.ones(3, bool), "x": np.ones(3, np.float32), "y": np.ones(3, np.int32)},
           match="input 2 has element type int32, expected float")


# ---- unary math ----

# op -> (low, high) of the inputs, inside the function's domain.
UNARY_FLOAT = {
    "Sqrt": (0, 10), "Exp": (-10, 10), "Log": (0.01, 10), "Sin": (-10, 10), "Cos": (-10, 10), "Tan": (-1.5, 1.5),
    "Asin": (-1, 1), "Acos": (-1, 1), "Atan": (-10, 10), "Sinh": (-5, 5), "Cosh": (-5, 5), "Asinh": (-10, 10),
    "Acosh": (1, 10), "Atanh": (-0.99, 0.99), "Tanh": (-10, 10), "Erf": (-3, 3), "Reciprocal": (0.1, 10),
    "Floor": (-10, 10), "Ceil": (-10, 10), "Round": (-10, 10), "Neg": (-10, 10), "Abs": (-10, 10), "Sign": (-2, 2),
}
FIRST_OPSET = {"Sin": 7, "Cos": 7, "Tan": 7, "Asin": 7, "Acos": 7, "Atan": 7, "Sinh": 9, "Cosh": 9, "Asinh": 9,
               "Acosh": 9, "Atanh": 9, "Erf": 9, "Sign": 9, "Round": 11}


@pytest.mark.parametrize("op", list(UNARY_FLOAT))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_unary_math(op, dtype):
    low, high = UNARY_FLOAT[op]
    x = values((3, 50), dtype, low, high)
    # onnxruntime and onnx.reference both compute float64 Erf in float32: take math.erf.
    expected = [np.vectorize(math.erf)(x)] if op == "Erf" and dtype == np.float64 else None
    if dtype == np.float32:
        check(op, {"x": x}, opset=13, rtol=1e-5, atol=1e-5)
    else:
        check(op, {"x": x}, opset=13, expected=expected)


@pytest.mark.parametrize("op", list(UNARY_FLOAT))
def test_unary_math_opsets(op):
    low, high = UNARY_FLOAT[op]
    for opset in (FIRST_OPSET.get(op, 6), 22):
        check(op, {"x": values((2, 3), np.float32, low, high)}, opset=opset, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", list(UNARY_FLOAT))
def test_unary_math_bfloat16(op):
    low, high = UNARY_FLOAT[op]
    check_bfloat16(op, {"x": values((3, 7), np.float32, low, high)})


@pytest.mark.parametrize("op", ["Sqrt", "Exp", "Log", "Tanh", "Floor", "Ceil", "Round", "Abs", "Neg", "Sign", "Erf"])
def test_unary_math_special_values(op):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e30], np.float32)
    # onnxruntime's Erf(NaN) is 1.
    check(op, {"x": x}, opset=13, reference="onnx.reference" if op == "Erf" else None)


@pytest.mark.parametrize("op", ["Exp", "Tanh", "Abs", "Neg"])
def test_unary_math_large_and_empty(op):
    check(op, {"x": values((100001,), np.float32)}, rtol=1e-5, atol=1e-5)
    check(op, {"x": values((0, 3), np.float32)})


def test_round_halves_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6], np.float32)
    check("Round", {"x": x}, opset=11, expected=[np.array([0, 2, 2, -0, -2, -2, 2, 3], np.float32)])


@pytest.mark.parametrize("op", ["Neg", "Abs", "Sign"])
@pytest.mark.parametrize("dtype", SIGNED, ids=lambda t: np.dtype(t).name)
def test_unary_signed_integers(op, dtype):
    check(op, {"x": values((3, 4), dtype, -100, 100)}, opset=13)


@pytest.mark.parametrize("op", ["Abs", "Sign"])
@pytest.mark.parametrize("dtype", UNSIGNED, ids=lambda t: np.dtype(t).name)
def test_unary_unsigned_integers(op, dtype):
    check(op, {"x": values((3, 4), dtype, 0, 100)}, opset=13)


def test_neg_and_abs_of_the_minimum_wrap():
    x = np.array([-128, 127], np.int8)
    check("Neg", {"x": x}, expected=[np.array([-128, -127], np.int8)])
    check("Abs", {"x": x}, expected=[np.array([-128, 127], np.int8)])


def test_unary_math_rejects_integers():
    raises("Sqrt", {"x": np.ones(3, np.int32)}, match="Sqrt: unsupported element type int32 \\(expected one of: float")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_isnan(dtype):
    x = np.array([0, np.nan, np.inf, -np.inf, 1, -np.nan], dtype)
    check("IsNaN", {"x": x}, opset=13)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("negative, positive", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_isinf(dtype, negative, positive):
    x = np.array([0, np.nan, np.inf, -np.inf, 1, -1e300 if dtype == np.float64 else -np.inf], dtype)
    check("IsInf", {"x": x}, {"detect_negative": negative, "detect_positive": positive}, opset=10)


@pytest.mark.parametrize("op", ["IsNaN", "IsInf"])
def test_isnan_isinf_bfloat16_and_opset20(op):
    x = np.array([0, np.nan, np.inf, -np.inf, 1], np.float32)
    check_bfloat16(op, {"x": x}, opset=20, out_type=TensorProto.BOOL)


@pytest.mark.parametrize("dtype", NUMERIC + [np.bool_], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("opset", [1, 13, 21])
def test_identity(dtype, opset):
    check("Identity", {"x": values((3, 4), dtype)}, opset=opset)


def test_identity_empty_and_scalar():
    check("Identity", {"x": np.zeros((0, 5), np.float32)})
    check("Identity", {"x": np.array(3.5, np.float32)})


# ---- Clip ----


@pytest.mark.parametrize("attrs", [{}, {"min": -1.0}, {"max": 0.5}, {"min": -1.0, "max": 1.0}, {"min": 1.0, "max": -1.0}],
                         ids=str)
def test_clip_opset6_attributes(attrs):
    check("Clip", {"x": values((3, 4), np.float32)}, attrs, opset=6)


@pytest.mark.parametrize(
    "bounds",
    [(None, None), (-1.0, None), (None, 0.5), (-1.0, 1.0), (1.0, -1.0), (2.0, 2.0)],
    ids=str,
)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_clip_bounds_as_inputs(bounds, dtype):
    lo, hi = (None if b is None else np.array(b, dtype) for b in bounds)
    check("Clip", {"x": values((3, 4), dtype), "min": lo, "max": hi}, opset=13)


@pytest.mark.parametrize("dtype", INTS, ids=lambda t: np.dtype(t).name)
def test_clip_integers(dtype):
    lo = np.array(2, dtype)
    hi = np.array(7, dtype)
    check("Clip", {"x": values((3, 4), dtype, 0, 10), "min": lo, "max": hi}, opset=12)
    check("Clip", {"x": values((3, 4), dtype, 0, 10), "min": None, "max": hi}, opset=13)


def test_clip_constant_bounds_and_nan():
    x = np.array([np.nan, -5, 0.25, 5], np.float32)
    check("Clip", {"x": x, "min": np.array(-1, np.float32), "max": np.array(1, np.float32)}, opset=11,
          constants=["min", "max"])


def test_clip_one_element_bounds():
    # onnxruntime accepts one-element bounds of rank 1 too.
    check("Clip", {"x": values((3, 4), np.float32), "min": np.array([-1], np.float32), "max": np.array([1], np.float32)},
          opset=13)


def test_clip_bfloat16():
    check_bfloat16("Clip", {"x": values((3, 4), np.float32), "min": np.array(-1, np.float32),
                            "max": np.array(1, np.float32)}, opset=13)


def test_clip_rejects_non_scalar_bounds():
    raises("Clip", {"x": np.ones(4, np.float32), "min": np.zeros(2, np.float32)}, opset=13,
           match="input 1 \\(min\\) has shape \\[2\\], expected a scalar")


def test_clip_rejects_bounds_of_another_type():
    raises("Clip", {"x": np.ones(4, np.float32), "min": np.array(0, np.float64)}, opset=13,
           match="input 1 has element type double, expected float")


# ---- nodes in a graph: in-place reuse of intermediate buffers ----


def test_chain_reuses_buffers_correctly():
    """Intermediates die at their consumers, so outputs take their buffers; the same value
    fed twice (Mul(t, t)) and a broadcast operand in position 1 must still read right."""
    nodes = [
        helper.make_node("Neg", ["x"], ["n"]),
        helper.make_node("Add", ["b", "n"], ["s"]),  # output in place over input 1
        helper.make_node("Mul", ["s", "s"], ["m"]),
        helper.make_node("Greater", ["m", "b"], ["c"]),
        helper.make_node("Where", ["c", "m", "s"], ["w"]),
        helper.make_node("Exp", ["w"], ["e"]),
        helper.make_node("Neg", ["e"], ["f"]),
        helper.make_node("Sum", ["b", "f", "n"], ["y"]),  # the full-shape inputs are not first
        helper.make_node("Clip", ["y", "lo"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [5]),
         helper.make_tensor_value_info("lo", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": values((4, 5), np.float32, -1, 1), "b": values((5,), np.float32, -1, 1), "lo": np.array(-2, np.float32)}
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    theirs = run_reference(model, feeds, "onnxruntime")[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert feeds["x"].min() >= -1  # the feeds themselves are never written


@pytest.mark.parametrize("op", VARIADIC)
def test_variadic_reads_a_repeated_intermediate_input_before_overwriting_it(op):
    """Sum(n, y, n) with n an intermediate that dies here: the output must not take n's
    buffer, since the second pass still reads n."""
    # z feeds another node: a graph output never takes an input's buffer.
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node(op, ["n", "y", "n"], ["s"]),
             helper.make_node("Neg", ["s"], ["z"])]
    graph = helper.make_graph(
        nodes, "repeated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"x": values((3, 4), np.float32), "y": values((4,), np.float32)}
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(ours, run_reference(model, feeds, "onnxruntime")[0], rtol=1e-6)
