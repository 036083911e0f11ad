"""Activation kernels (Relu, LeakyRelu, Elu, Selu, Celu, ThresholdedRelu, Sigmoid,
HardSigmoid, HardSwish, Softplus, Softsign, Gelu, Mish, PRelu) and Dropout against
onnxruntime, or onnx.reference where onnxruntime has no kernel for the type or opset.

Tolerances: float32 rtol 1e-5/atol 1e-5 (onnxruntime evaluates exp/tanh/erf with its own
vectorized approximations, a few ulp from libm); float64 1e-12 (1e-7 where onnxruntime
computes in float32); float16 1e-3 (half an ulp is 4.9e-4; onnxtrain computes in float32
and rounds once); bfloat16 1e-2 against onnx.reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import check_op, make_model, run_reference

rng = np.random.default_rng(1)

FLOATS = [np.float32, np.float64, np.float16]
TOLERANCE = {np.float32: (1e-5, 1e-5), np.float64: (1e-12, 1e-12), np.float16: (1e-3, 1e-3)}


def randn(*shape, dtype=np.float32, scale=3.0):
    return np.asarray(rng.standard_normal(shape) * scale).astype(dtype)


def check(op, inputs, attrs=None, *, opset=22, n_outputs=1, rtol=None, atol=None, expected=None, reference=None):
    """check_op against `reference`, by default onnxruntime, falling back to onnx.reference
    when onnxruntime has no kernel for this type or opset."""
    first = next(iter(inputs.values()))
    default_rtol, default_atol = TOLERANCE.get(first.dtype.type, (0, 0))
    if expected is None:
        model = make_model(op, inputs, attrs, n_outputs=n_outputs, opset=opset)
        try:
            expected = run_reference(model, inputs, reference or "onnxruntime")
        except Exception:  # no onnxruntime kernel for this type or opset
            expected = run_reference(model, inputs, "onnx.reference")
    return check_op(op, inputs, attrs, opset=opset, n_outputs=n_outputs, expected=expected,
                    rtol=default_rtol if rtol is None else rtol, atol=default_atol if atol is None else atol)


def session(op, inputs, attrs=None, *, opset=22, n_outputs=1, constants=()):
    model = make_model(op, inputs, attrs, n_outputs=n_outputs, opset=opset, constants=constants)
    return onnxtrain.InferenceSession(model.SerializeToString())


def raises(op, inputs, attrs=None, *, match, opset=22, n_outputs=1):
    feeds = {k: v for k, v in inputs.items() if v is not None}
    with pytest.raises((ValueError, RuntimeError), match=match):
        session(op, inputs, attrs, opset=opset, n_outputs=n_outputs).run(None, feeds)


def check_bfloat16(op, inputs, attrs=None, *, opset=22, rtol=1e-2, atol=1e-2):
    """`op` on bfloat16 values cast from the float32 feeds inside the model, result cast back
    to float32. Expected: the reference's float32 result on the bfloat16-rounded inputs,
    rounded to bfloat16 (onnxtrain computes bfloat16 in float32 and rounds once)."""
    import ml_dtypes

    rounded = {k: v.astype(ml_dtypes.bfloat16).astype(np.float32) for k, v in inputs.items()}
    model = make_model(op, rounded, attrs, opset=opset)
    try:
        wide = run_reference(model, rounded, "onnxruntime")[0]
    except Exception:
        wide = run_reference(model, rounded, "onnx.reference")[0]
    expected = wide.astype(ml_dtypes.bfloat16).astype(np.float32)
    nodes = [helper.make_node("Cast", [n], [n + "_b"], to=TensorProto.BFLOAT16) for n in inputs]
    nodes.append(helper.make_node(op, [n + "_b" for n in inputs], ["op_out"], **(attrs or {})))
    nodes.append(helper.make_node("Cast", ["op_out"], ["out"], to=TensorProto.FLOAT))
    graph = helper.make_graph(
        nodes, "bf16", [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    bf16_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    ours = onnxtrain.InferenceSession(bf16_model.SerializeToString()).run(None, inputs)[0]
    np.testing.assert_allclose(ours, expected, rtol=rtol, atol=atol)


# op -> (first opset, attribute variants)
ACTIVATIONS = {
    "Relu": (6, [{}]),
    "LeakyRelu": (6, [{}, {"alpha": 0.2}, {"alpha": -1.5}]),
    "Elu": (6, [{}, {"alpha": 0.5}]),
    "Selu": (6, [{}, {"alpha": 2.0, "gamma": 3.0}]),
    "Celu": (12, [{}, {"alpha": 2.0}]),
    "ThresholdedRelu": (10, [{}, {"alpha": 0.5}, {"alpha": -1.0}]),
    "Sigmoid": (6, [{}]),
    "HardSigmoid": (6, [{}, {"alpha": 0.5, "beta": 0.6}]),
    "HardSwish": (14, [{}]),
    "Softplus": (1, [{}]),
    "Softsign": (1, [{}]),
    "Gelu": (20, [{}, {"approximate": "none"}, {"approximate": "tanh"}]),
    "Mish": (18, [{}]),
}
CASES = [(op, attrs) for op, (_, variants) in ACTIVATIONS.items() for attrs in variants]


def case_id(case):
    op, attrs = case
    return op + "".join(f"-{k}={v}" for k, v in attrs.items())


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_activation(case, dtype):
    op, attrs = case
    opset = 22
    if op == "Celu" and dtype != np.float32:
        opset = 12  # the onnx.reference fallback for Celu handles float32 only at newer opsets
    x = randn(4, 50, dtype=dtype)
    x[0, :4] = [0, -0.0, 1e-4, -1e-4]  # around the kink
    if op in FLOAT64_FORMULAS and dtype != np.float32:
        expected = [FLOAT64_FORMULAS[op](x.astype(np.float64), **attrs).astype(dtype)]
        check(op, {"x": x}, attrs, opset=opset, expected=expected)
        return
    check(op, {"x": x}, attrs, opset=opset)


def celu(x, alpha=1.0):
    return np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha))


def gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))


def softplus(x):
    return np.logaddexp(0, x)


# Ops whose references compute float64 (and, for Celu, float16) in float32: computed here.
FLOAT64_FORMULAS = {
    "Celu": celu,
    "Gelu": gelu,
    "HardSwish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}


@pytest.mark.parametrize("op", list(ACTIVATIONS))
def test_activation_first_and_latest_opsets(op):
    first, _ = ACTIVATIONS[op]
    for opset in sorted({first, 13 if first <= 13 else first, 22, 24}):
        check(op, {"x": randn(3, 7)}, opset=opset)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_activation_bfloat16(case):
    op, attrs = case
    check_bfloat16(op, {"x": randn(4, 9)}, attrs)


@pytest.mark.parametrize("op", list(ACTIVATIONS))
def test_activation_large_empty_and_extreme(op):
    check(op, {"x": randn(100003)})
    check(op, {"x": np.zeros((0, 4), np.float32)})
    extreme = np.array([-1e30, -100, -20, 20, 100, 1e30, np.inf, -np.inf], np.float32)
    # The references compute log(exp(x) + 1), which overflows to inf from x = 89 on.
    with np.errstate(invalid="ignore"):
        wide = extreme.astype(np.float64)
        expected = {"Softplus": softplus(wide), "Mish": wide * np.tanh(softplus(wide))}.get(op)
    check(op, {"x": extreme}, expected=None if expected is None else [expected.astype(np.float32)])


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda t: np.dtype(t).name)
def test_activation_propagates_nan_as_onnxruntime(case, dtype):
    """NaN in, NaN out where onnxruntime gives NaN (Relu gave 0; issue 15), on the vector
    loop and its tail."""
    op, attrs = case
    x = randn(3, 37, dtype=dtype)
    x[0, 0] = x[1, 17] = x[2, 36] = np.nan
    if op in FLOAT64_FORMULAS and dtype != np.float32:  # references that compute float64 in float32
        check(op, {"x": x}, attrs, expected=[FLOAT64_FORMULAS[op](x, **attrs).astype(dtype)])
        return
    check(op, {"x": x}, attrs, opset=22 if op != "Celu" or dtype == np.float32 else 12)


def test_softplus_does_not_overflow():
    x = np.array([-200, -90, 0, 90, 200, 1e30], np.float32)
    expected = np.logaddexp(0, x.astype(np.float64)).astype(np.float32)
    check("Softplus", {"x": x}, expected=[expected])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_relu_integers(dtype):
    check("Relu", {"x": rng.integers(-50, 50, (3, 4)).astype(dtype)}, opset=14)


def test_gelu_rejects_unknown_approximation():
    raises("Gelu", {"x": randn(3)}, {"approximate": "erf"}, opset=20,
           match="'approximate' is 'erf', expected 'none' or 'tanh'")


def test_celu_rejects_zero_alpha():
    raises("Celu", {"x": randn(3)}, {"alpha": 0.0}, opset=12, match="'alpha' is 0")


def test_activation_rejects_integers():
    raises("Sigmoid", {"x": np.ones(3, np.int32)}, match="Sigmoid: unsupported element type int32")


# ---- PRelu ----


@pytest.mark.parametrize(
    "shapes",
    [((3, 4, 5), (5,)), ((3, 4, 5), (4, 1)), ((3, 4, 5), (1,)), ((3, 4, 5), ()), ((3, 4, 5), (3, 4, 5)),
     ((2, 3, 4, 5), (3, 1, 1)), ((0, 5), (5,)), ((400, 300), (300,))],
    ids=str,
)
def test_prelu_broadcasts_the_slope(shapes):
    check("PRelu", {"x": randn(*shapes[0]), "slope": randn(*shapes[1], scale=0.5)}, opset=16)


@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64], ids=lambda t: np.dtype(t).name)
def test_prelu_types(dtype):
    check("PRelu", {"x": randn(3, 4, dtype=dtype), "slope": randn(4, dtype=dtype)}, opset=16)


@pytest.mark.parametrize("opset", [7, 9, 16])
def test_prelu_opsets(opset):
    check("PRelu", {"x": randn(2, 3, 4), "slope": randn(3, 1)}, opset=opset)


def test_prelu_bfloat16():
    check_bfloat16("PRelu", {"x": randn(3, 4), "slope": randn(4)})


def test_prelu_rejects_a_slope_that_would_grow_x():
    raises("PRelu", {"x": randn(3, 4), "slope": randn(2, 3, 4)}, opset=16,
           match="slope\\) has shape \\[2, 3, 4\\], which does not broadcast to X's shape \\[3, 4\\]")


# ---- Dropout ----


@pytest.mark.parametrize("opset", [7, 10])
def test_dropout_before_opset12_is_identity(opset):
    # The mask keeps everything: ones of the data's type before opset 10, true after.
    # (onnxruntime returns an all-zero mask here, and onnx.reference a bool mask at opset 7.)
    x = randn(3, 4)
    mask = np.ones(x.shape, np.float32 if opset < 10 else bool)
    check("Dropout", {"x": x}, {"ratio": 0.3}, opset=opset, n_outputs=2, expected=[x, mask])
    check("Dropout", {"x": x}, opset=opset)


@pytest.mark.parametrize("opset", [12, 13, 22])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_dropout_inference_is_identity(opset, dtype):
    x = randn(3, 4, dtype=dtype)
    check("Dropout", {"x": x}, opset=opset, n_outputs=2)
    check("Dropout", {"x": x, "ratio": np.array(0.7, np.float32)}, opset=opset, n_outputs=2)
    check("Dropout", {"x": x, "ratio": np.array(0.7, np.float32), "training_mode": np.array(False)}, opset=opset,
          n_outputs=2)
    check("Dropout", {"x": x, "ratio": None, "training_mode": np.array(False)}, opset=opset)


def test_dropout_training_with_zero_ratio_is_identity():
    x = randn(3, 4)
    check("Dropout", {"x": x, "ratio": np.array(0.0, np.float32), "training_mode": np.array(True)}, {"seed": 0},
          opset=13, n_outputs=2)


def dropout_training(x, ratio, *, seed=7, opset=13, runs=1):
    inputs = {"x": x, "ratio": np.array(ratio, np.float32), "training_mode": np.array(True)}
    s = session("Dropout", inputs, {"seed": seed}, opset=opset, n_outputs=2)
    return [s.run(None, inputs) for _ in range(runs)]


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.9])
def test_dropout_training_drops_a_share_of_ratio_and_scales_the_rest(ratio):
    x = randn(1000, 200)
    [(y, mask)] = dropout_training(x, ratio)
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    kept = mask.mean()
    sigma = np.sqrt(ratio * (1 - ratio) / x.size)
    assert abs(kept - (1 - ratio)) < 6 * sigma, f"kept {kept}, expected {1 - ratio}"
    np.testing.assert_allclose(y, np.where(mask, x / np.float32(1 - ratio), 0), rtol=1e-6)


def test_dropout_training_masks_are_seeded_and_change_between_runs():
    x = randn(64, 64)
    first = dropout_training(x, 0.5, seed=3, runs=2)
    again = dropout_training(x, 0.5, seed=3, runs=2)
    other = dropout_training(x, 0.5, seed=4, runs=1)
    np.testing.assert_array_equal(first[0][1], again[0][1])  # same seed, same first mask
    np.testing.assert_array_equal(first[1][1], again[1][1])
    assert (first[0][1] != first[1][1]).any()  # the next run draws anew
    assert (first[0][1] != other[0][1]).any()


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_dropout_training_types_and_no_mask_output(dtype):
    x = randn(50, 40, dtype=dtype)
    inputs = {"x": x, "ratio": np.array(0.25, np.float32), "training_mode": np.array(True)}
    (y,) = session("Dropout", inputs, {"seed": 1}, opset=13).run(None, inputs)
    assert y.dtype == x.dtype
    kept = y != 0
    np.testing.assert_allclose(y[kept], (x[kept].astype(np.float32) / 0.75).astype(dtype), rtol=1e-3)


def test_dropout_bfloat16_training():
    x = randn(40, 50)
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("Dropout", ["xb", "r", "t"], ["yb", "mask"], seed=5),
             helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "bf16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape), helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("t", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("mask", TensorProto.BOOL, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    feeds = {"x": x, "r": np.array(0.5, np.float32), "t": np.array(True)}
    y, mask = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    import ml_dtypes

    expected = np.where(mask, x.astype(ml_dtypes.bfloat16).astype(np.float32) * 2, 0)
    np.testing.assert_allclose(y, expected, rtol=1e-2)


def test_dropout_rejects_ratio_out_of_range():
    x = randn(3, 4)
    raises("Dropout", {"x": x, "ratio": np.array(1.0, np.float32), "training_mode": np.array(True)}, opset=13,
           match="input 1 \\(ratio\\) is 1.0+, expected a value in \\[0, 1\\)")
    raises("Dropout", {"x": x, "ratio": np.array(-0.5, np.float32)}, opset=13, match="expected a value in \\[0, 1\\)")


def test_dropout_rejects_bad_training_mode_and_ratio_types():
    x = randn(3, 4)
    raises("Dropout", {"x": x, "ratio": np.array(0.5, np.float32), "training_mode": np.array(1, np.int64)}, opset=13,
           match="input 2 \\(training_mode\\) is a int64 tensor of shape \\[\\], expected a bool scalar")
    raises("Dropout", {"x": x, "ratio": np.array([0.5, 0.5], np.float32)}, opset=13,
           match="input 1 \\(ratio\\) is a float tensor of shape \\[2\\], expected a floating-point scalar")
