"""MatMul, Gemm and Einsum against onnxruntime. Tolerances: float32 rtol 1e-5 / atol 1e-5
for sums of up to ~100 products (oneDNN and MLAS sum in different orders), float64 1e-12,
integers exact, float16 against the float32 result rounded to float16 (onnxtrain computes
float16 in float32) at 2e-3."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

from op_harness import check_op, make_model, run_onnxtrain, run_reference

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-12, atol=1e-12)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def randint(*shape, dtype=np.int64):
    return rng.integers(-5, 6, shape).astype(dtype)


def float16_expected(op_type, inputs, attrs=None, opset=17):
    wide = {k: v.astype(np.float32) for k, v in inputs.items()}
    return [r.astype(np.float16) for r in run_reference(make_model(op_type, wide, attrs, opset=opset), wide, "onnxruntime")]


def check_bfloat16(op_type, inputs, attrs=None, *, opset=17, rtol=2e-2, atol=2e-2):
    """bfloat16 through onnxtrain against onnxruntime's float32 result on the same values.
    The Python binding cannot feed or type bfloat16 arrays yet, so the inputs are
    initializers and the output's uint16 bits are widened here."""
    import ml_dtypes

    values = {k: v.astype(ml_dtypes.bfloat16) for k, v in inputs.items()}
    wide = {k: v.astype(np.float32) for k, v in values.items()}
    expected = run_reference(make_model(op_type, wide, attrs, opset=opset), wide, "onnxruntime")[0]
    out = np.asarray(run_onnxtrain(make_model(op_type, values, attrs, opset=opset, constants=list(values)), {})[0])
    widened = (out.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(widened, expected, rtol=rtol, atol=atol)


# ---- MatMul ----

SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),  # batch folds into rows
    ((4,), (4, 5)),  # 1-D A: a row vector, dropped from the output
    ((3, 4), (4,)),  # 1-D B: a column vector
    ((4,), (4,)),  # dot product: a scalar
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),  # batch broadcasting both ways
    ((1, 3, 4), (6, 4, 2)),
    ((6, 3, 4), (1, 4, 2)),
    ((2, 3, 1, 3, 4), (3, 2, 4, 5)),
    ((7,), (3, 7, 2)),
    ((3, 2, 7), (7,)),
]


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("constant_b", [False, True])
def test_matmul_float32(a_shape, b_shape, constant_b):
    check_op("MatMul", {"a": randn(*a_shape), "b": randn(*b_shape)}, constants=["b"] if constant_b else (), **F32)


@pytest.mark.parametrize("a_shape,b_shape", SHAPES[:7])
def test_matmul_float64(a_shape, b_shape):
    check_op("MatMul", {"a": randn(*a_shape, dtype=np.float64), "b": randn(*b_shape, dtype=np.float64)}, **F64)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_integers(dtype):
    a = rng.integers(0, 9, (2, 3, 4)).astype(dtype)
    b = rng.integers(0, 9, (4, 5)).astype(dtype)
    check_op("MatMul", {"a": a, "b": b}, opset=13, reference="onnx.reference")


@pytest.mark.parametrize("constant_b", [False, True])
def test_matmul_float16(constant_b):
    inputs = {"a": randn(2, 5, 16, dtype=np.float16), "b": randn(16, 7, dtype=np.float16)}
    check_op("MatMul", inputs, constants=["b"] if constant_b else (), expected=float16_expected("MatMul", inputs),
             rtol=2e-3, atol=2e-3)


def test_matmul_bfloat16():
    check_bfloat16("MatMul", {"a": randn(3, 8, 32), "b": randn(32, 5)}, rtol=2e-2, atol=5e-2)


def test_matmul_large_blocks():
    check_op("MatMul", {"a": randn(130, 300), "b": randn(300, 1100)}, rtol=1e-4, atol=1e-4)
    check_op("MatMul", {"a": randn(33, 300, dtype=np.float64), "b": randn(300, 1100, dtype=np.float64)}, **F64)


def test_matmul_empty():
    check_op("MatMul", {"a": randn(0, 4), "b": randn(4, 5)}, **F32)
    check_op("MatMul", {"a": randn(3, 0), "b": randn(0, 5)}, expected=[np.zeros((3, 5), np.float32)])


def test_matmul_opset_1():
    check_op("MatMul", {"a": randn(3, 4), "b": randn(4, 2)}, opset=1, **F32)


def test_matmul_rejects_inner_dimension_mismatch():
    with pytest.raises((ValueError, RuntimeError), match=r"A \[3, 4\] has 4 columns but B \[5, 2\] has 5 rows"):
        check_op("MatMul", {"a": randn(3, 4), "b": randn(5, 2)})


def test_matmul_rejects_batch_mismatch():
    with pytest.raises((ValueError, RuntimeError), match=r"batch dimensions do not broadcast.*2 vs 3"):
        check_op("MatMul", {"a": randn(2, 3, 4), "b": randn(3, 4, 2)})


# A constant 2-D B times up to 16 rows of A (its leading axes flattened) streams the packed B
# (ops/cpu/weight_stream.h); 17 rows go to oneDNN.
@pytest.mark.parametrize("a_shape", [(70,), (3, 70), (2, 4, 70), (2, 8, 70), (17, 70), (1, 16, 70)])
def test_matmul_few_rows_constant_b(a_shape):
    check_op("MatMul", {"a": randn(*a_shape), "b": randn(70, 37)}, constants=["b"], **F32)


def test_matmul_rejects_mixed_types():
    with pytest.raises((ValueError, RuntimeError), match=r"A is float but B is double"):
        check_op("MatMul", {"a": randn(2, 3), "b": randn(3, 2, dtype=np.float64)}, reference="onnx.reference")


# ---- Gemm ----


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (5,), (1, 5), (3, 1), (3, 5), (1, 1)])
def test_gemm_float32(trans_a, trans_b, c_shape):
    a = randn(*((4, 3) if trans_a else (3, 4)))
    b = randn(*((5, 4) if trans_b else (4, 5)))
    inputs = {"a": a, "b": b, "c": randn(*c_shape) if c_shape else None}
    check_op("Gemm", inputs, {"transA": trans_a, "transB": trans_b, "alpha": 0.75, "beta": 1.5}, **F32)


def test_gemm_constant_weights_and_bias():
    inputs = {"a": randn(8, 16), "b": randn(12, 16), "c": randn(12)}
    for _ in range(2):  # the second run uses the packed weights
        check_op("Gemm", inputs, {"transB": 1}, constants=["b", "c"], **F32)


# Up to 16 rows times a constant B stream the packed B (ops/cpu/weight_stream.h), 8 rows
# at a time (16 with AVX-512); 17 rows, a C that is not one bias row, and alpha != 1 go to oneDNN.
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 16, 17])
@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (37,), (1, 37), "full"])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_gemm_few_rows_constant_b(rows, trans_a, trans_b, c_shape, alpha):
    k, n = 70, 37  # 37 outputs: two full blocks of 16 and a partial one
    a = randn(*((k, rows) if trans_a else (rows, k)))
    b = randn(*((n, k) if trans_b else (k, n)))
    c = None if c_shape is None else randn(*((rows, n) if c_shape == "full" else c_shape))
    check_op("Gemm", {"a": a, "b": b, "c": c}, {"transA": trans_a, "transB": trans_b, "alpha": alpha},
             constants=["b"], **F32)


# Deep streamed products: 8 rows a pass, 16 with AVX-512 once the weights reach 12 MB (200
# or 3100 outputs: 0.8 or 12.8 MB), the rows interleaved first, the weights prefetched 256
# depth steps ahead (past 1030 steps and past the end of the last block), ranges of blocks
# shared between threads.
@pytest.mark.parametrize("rows", [2, 9, 12, 16])
@pytest.mark.parametrize("n", [200, 3100])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_few_rows_deep_constant_b(rows, n, trans_b, threads):
    k = 1030  # n: 12 blocks of 16 and one of 8, or 193 and one of 12
    a, b, c = randn(rows, k), randn(*((n, k) if trans_b else (k, n))), randn(n)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=trans_b)], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxtrain.InferenceSession(model, sess_options=options)
    expected = a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64) + c
    for _ in range(2):  # the second run reuses the packed weights
        np.testing.assert_allclose(session.run(None, {"a": a})[0], expected, rtol=1e-5, atol=1e-4)


def test_gemm_few_rows_then_more_in_one_session():
    """A symbolic batch: 1, 8, 13, 17 (oneDNN), 2 rows through the same kernel."""
    b, c = randn(40, 24), randn(24)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"])], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 40])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    session = onnxtrain.InferenceSession(model)
    for rows in (1, 8, 13, 17, 2):
        a = randn(rows, 40)
        np.testing.assert_allclose(session.run(None, {"a": a})[0], a @ b + c, rtol=1e-5, atol=1e-5)


def test_gemm_scalar_c():
    # A rank-0 C as an initializer (the Python binding turns fed 0-d arrays into 1-d ones).
    check_op("Gemm", {"a": randn(3, 4), "b": randn(4, 5), "c": np.array(2.5, np.float32)}, constants=["c"], **F32)


def test_gemm_beta_zero_ignores_c():
    check_op("Gemm", {"a": randn(3, 4), "b": randn(4, 5), "c": randn(3, 5)}, {"beta": 0.0}, **F32)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_float64(trans_b):
    b = randn(*((5, 4) if trans_b else (4, 5)), dtype=np.float64)
    inputs = {"a": randn(4, 3, dtype=np.float64), "b": b, "c": randn(5, dtype=np.float64)}
    check_op("Gemm", inputs, {"transA": 1, "transB": trans_b, "alpha": 2.0, "beta": 0.5}, **F64)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_gemm_integers(dtype):
    inputs = {"a": rng.integers(0, 5, (3, 4)).astype(dtype), "b": rng.integers(0, 5, (5, 4)).astype(dtype),
              "c": rng.integers(0, 5, (5,)).astype(dtype)}
    check_op("Gemm", inputs, {"transB": 1}, opset=13, reference="onnx.reference")


def test_gemm_float16():
    inputs = {"a": randn(6, 8, dtype=np.float16), "b": randn(8, 4, dtype=np.float16), "c": randn(4, dtype=np.float16)}
    attrs = {"alpha": 0.5, "beta": 2.0}
    check_op("Gemm", inputs, attrs, expected=float16_expected("Gemm", inputs, attrs), rtol=2e-3, atol=2e-3)


def test_gemm_bfloat16():
    check_bfloat16("Gemm", {"a": randn(6, 16), "b": randn(4, 16), "c": randn(4)}, {"transB": 1, "beta": 0.5},
                   rtol=2e-2, atol=5e-2)


def test_gemm_opsets():
    inputs = {"a": randn(3, 4), "b": randn(4, 5), "c": randn(3, 5)}
    check_op("Gemm", inputs, {"broadcast": 1}, opset=6, reference="onnx.reference", **F32)
    check_op("Gemm", inputs, opset=7, **F32)
    check_op("Gemm", {"a": randn(3, 4), "b": randn(4, 5), "c": None}, opset=11, **F32)


def test_gemm_rejects_bad_c():
    with pytest.raises((ValueError, RuntimeError), match=r"C \[2, 5\] does not broadcast to the output \[3, 5\]"):
        check_op("Gemm", {"a": randn(3, 4), "b": randn(4, 5), "c": randn(2, 5)})


def test_gemm_rejects_inner_mismatch():
    with pytest.raises((ValueError, RuntimeError), match=r"inner dimensions do not match: A\^T is 3x4 but B is 5x6"):
        check_op("Gemm", {"a": randn(4, 3), "b": randn(5, 6)}, {"transA": 1})


def test_gemm_rejects_non_matrix():
    with pytest.raises((ValueError, RuntimeError), match=r"A and B must be 2-D matrices"):
        check_op("Gemm", {"a": randn(2, 3, 4), "b": randn(4, 5)}, reference="onnx.reference")


# ---- Einsum ----

EQUATIONS = [
    ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 6, 8)]),  # attention scores: B read transposed
    ("bhqk,bhkd->bhqd", [(2, 3, 5, 6), (2, 3, 6, 8)]),
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),  # trace (implicit output: no labels)
    ("...ii->...i", [(3, 5, 5)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ik,jk->ij", [(3, 4), (5, 4)]),
    ("ki,kj->ij", [(4, 3), (4, 5)]),  # A read transposed
    ("...ij,...jk->...ik", [(2, 3, 3, 4), (2, 3, 4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),  # three operands (bilinear)
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,jk->ik", [(1, 4), (4, 1)]),
    ("bij,bkj->bik", [(2, 1, 4), (2, 3, 4)]),
    ("Ab,bC->AC", [(2, 3), (3, 4)]),  # upper-case labels
    ("i i , i -> i", [(3, 3), (3,)]),  # spaces
]


@pytest.mark.parametrize("equation,shapes", EQUATIONS)
def test_einsum_float32(equation, shapes):
    inputs = {f"x{i}": randn(*s) for i, s in enumerate(shapes)}
    check_op("Einsum", inputs, {"equation": equation}, opset=12, **F32)


@pytest.mark.parametrize("equation,shapes", EQUATIONS[:12])
def test_einsum_float64(equation, shapes):
    inputs = {f"x{i}": randn(*s, dtype=np.float64) for i, s in enumerate(shapes)}
    check_op("Einsum", inputs, {"equation": equation}, opset=12, **F64)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("equation,shapes", [EQUATIONS[0], EQUATIONS[4], EQUATIONS[6], EQUATIONS[16]])
def test_einsum_integers(dtype, equation, shapes):
    inputs = {f"x{i}": randint(*s, dtype=dtype) for i, s in enumerate(shapes)}
    check_op("Einsum", inputs, {"equation": equation}, opset=12)


def test_einsum_ellipsis_broadcasting():
    # numpy broadcasts '...' axes of different ranks; onnxruntime's shape inference refuses.
    a, b = randn(2, 1, 3, 4), randn(3, 4, 5)
    check_op("Einsum", {"a": a, "b": b}, {"equation": "...ij,...jk->...ik"}, opset=12,
             expected=[np.einsum("...ij,...jk->...ik", a, b)], **F32)


def test_einsum_small_integer_types():
    for dtype in [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64]:
        inputs = {"a": rng.integers(0, 4, (2, 3)).astype(dtype), "b": rng.integers(0, 4, (3, 2)).astype(dtype)}
        expected = [np.einsum("ij,jk->ik", inputs["a"], inputs["b"]).astype(dtype)]
        check_op("Einsum", inputs, {"equation": "ij,jk->ik"}, opset=12, expected=expected)


def test_einsum_float16():
    inputs = {"a": randn(2, 3, 8, dtype=np.float16), "b": randn(2, 8, 4, dtype=np.float16)}
    attrs = {"equation": "bij,bjk->bik"}
    check_op("Einsum", inputs, attrs, opset=12, expected=float16_expected("Einsum", inputs, attrs, opset=12),
             rtol=2e-3, atol=2e-3)


def test_einsum_scalar_operand():
    # '->' on a rank-0 initializer (fed 0-d arrays become 1-d in the Python binding).
    check_op("Einsum", {"x": np.array(3.5, np.float32)}, {"equation": "->"}, opset=12, constants=["x"],
             expected=[np.array(3.5, np.float32)])


def test_einsum_empty_axis():
    check_op("Einsum", {"a": randn(3, 0), "b": randn(0, 4)}, {"equation": "ij,jk->ik"}, opset=12,
             expected=[np.zeros((3, 4), np.float32)])


def test_einsum_rejects_size_mismatch():
    with pytest.raises((ValueError, RuntimeError), match=r"label 'j' has size 5 in input 1"):
        check_op("Einsum", {"a": randn(3, 4), "b": randn(5, 2)}, {"equation": "ij,jk->ik"}, opset=12)


def test_einsum_rejects_rank_mismatch():
    with pytest.raises((ValueError, RuntimeError), match=r"has rank 3 but its term .* names 2 axes"):
        check_op("Einsum", {"a": randn(3, 4, 2)}, {"equation": "ij->i"}, opset=12, reference="onnx.reference")


def test_einsum_rejects_unknown_output_label():
    with pytest.raises((ValueError, RuntimeError), match=r"output label 'k' appears in no input"):
        check_op("Einsum", {"a": randn(3, 4)}, {"equation": "ij->k"}, opset=12, reference="onnx.reference")


def test_einsum_rejects_bad_character():
    with pytest.raises((ValueError, RuntimeError), match=r"has the character '1'"):
        check_op("Einsum", {"a": randn(3, 4)}, {"equation": "i1->i"}, opset=12, reference="onnx.reference")
