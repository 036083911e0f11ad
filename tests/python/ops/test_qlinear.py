"""MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv against onnxruntime 1.23 and
onnx.reference.

Integer results are exact (int32 sums of 8-bit products), so compared exactly; requantized
ones (QLinear*) too: both onnxtrain and onnxruntime multiply in float32 and round to nearest
even. Sizes cover both of onnxtrain's paths: products of fewer than 32768 multiply-adds run
its plain loop, larger ones oneDNN's int8 matmul (on CPUs with VNNI)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

rng = np.random.default_rng(11)

PAIRS = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8), (np.int8, np.uint8)]
SHAPES = [((3, 5), (5, 4)), ((64, 96), (96, 80)), ((2, 3, 33, 40), (40, 50)), ((4, 20, 30), (4, 30, 12)),
          ((3, 40, 50), (3, 50, 30)), ((7,), (7, 9)), ((6, 7), (7,))]


def onnx_type(t):
    return helper.np_dtype_to_tensor_dtype(np.dtype(t))


def ints(dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def node_model(op, inputs, constants, attrs=None, opset=21):
    """One node; inputs named in `constants` become initializers. None: an omitted input."""
    names = [n if v is not None else "" for n, v in inputs.items()]
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, onnx_type(v.dtype), v.shape) for n, v in inputs.items()
                    if v is not None and n not in constants]
    inits = [numpy_helper.from_array(v, n) for n, v in inputs.items() if v is not None and n in constants]
    graph = helper.make_graph([node], op, graph_inputs, [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    feeds = {n: v for n, v in inputs.items() if v is not None and n not in constants}
    return model, feeds


def compare(op, inputs, constants=(), attrs=None, reference="onnxruntime", opset=21, threads=None):
    model, feeds = node_model(op, inputs, constants, attrs, opset)
    options = onnxtrain.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    ours = onnxtrain.InferenceSession(model.SerializeToString(), sess_options=options).run(None, feeds)[0]
    if reference == "onnxruntime":
        import onnxruntime as ort

        theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    else:
        from onnx.reference import ReferenceEvaluator

        theirs = ReferenceEvaluator(model).run(None, feeds)[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (ours.dtype, ours.shape, theirs.dtype,
                                                                      theirs.shape)
    np.testing.assert_array_equal(ours, theirs)
    return ours


def zero_point(dtype, count=None):
    shape = () if count is None else (count,)
    return rng.integers(-20 if dtype == np.int8 else 100, 21 if dtype == np.int8 else 156, size=shape).astype(dtype)


# ---- MatMulInteger ----


@pytest.mark.parametrize("a_type,b_type", PAIRS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("a_shape,b_shape", SHAPES, ids=str)
@pytest.mark.parametrize("constant_b", [False, True])
def test_matmul_integer(a_type, b_type, a_shape, b_shape, constant_b):
    a, b = ints(a_type, a_shape), ints(b_type, b_shape)
    inputs = {"a": a, "b": b, "a_zero_point": zero_point(a_type), "b_zero_point": zero_point(b_type)}
    reference = "onnxruntime" if (a_type, b_type) != (np.int8, np.uint8) else "onnx.reference"
    compare("MatMulInteger", inputs, ("b", "a_zero_point", "b_zero_point") if constant_b else (), reference=reference)


@pytest.mark.parametrize("a_type,b_type", PAIRS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("m,k,n", [(3, 4, 5), (48, 64, 40)])
def test_matmul_integer_zero_points_per_row_and_column(a_type, b_type, m, k, n):
    # Against numpy's int64 product (onnx.reference cannot broadcast a zero point per row).
    a, b = ints(a_type, (m, k)), ints(b_type, (k, n))
    for a_zp, b_zp in [(zero_point(a_type, m), zero_point(b_type)), (zero_point(a_type), zero_point(b_type, n)),
                       (zero_point(a_type, m), zero_point(b_type, n)), (None, None), (None, zero_point(b_type, n))]:
        inputs = {"a": a, "b": b, "a_zero_point": a_zp, "b_zero_point": b_zp}
        model, feeds = node_model("MatMulInteger", inputs, ("b",))
        (ours,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
        za = 0 if a_zp is None else a_zp.astype(np.int64).reshape(-1, 1)
        zb = 0 if b_zp is None else b_zp.astype(np.int64)
        expected = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
        assert ours.dtype == np.int32
        np.testing.assert_array_equal(ours, expected)


def test_matmul_integer_folded_batch_with_per_row_zero_points():
    # A [2, 3, 40, 50] x a constant B: the batch folds into 240 rows, the zero point per row
    # of each matrix repeats.
    a, b = ints(np.uint8, (2, 3, 40, 50)), ints(np.int8, (50, 30))
    inputs = {"a": a, "b": b, "a_zero_point": zero_point(np.uint8, 40), "b_zero_point": zero_point(np.int8, 30)}
    expected = ((a.astype(np.int64) - inputs["a_zero_point"][:, None]) @
                (b.astype(np.int64) - inputs["b_zero_point"])).astype(np.int32)
    model, feeds = node_model("MatMulInteger", inputs, ("b", "a_zero_point", "b_zero_point"))
    (ours,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("a_type,b_type", PAIRS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("m", [1, 2, 4])
def test_matmul_integer_few_rows_constant_b(a_type, b_type, m):
    # One to four rows times a constant B (the AVX-512 VNNI path where there is one): k not
    # a multiple of 4, n of five blocks of 16 and a partial one; zero points per row, per
    # column and for all.
    a, b = ints(a_type, (m, 37)), ints(b_type, (37, 75))
    for a_zp, b_zp in [(zero_point(a_type), zero_point(b_type)), (zero_point(a_type, m), zero_point(b_type, 75))]:
        inputs = {"a": a, "b": b, "a_zero_point": a_zp, "b_zero_point": b_zp}
        model, feeds = node_model("MatMulInteger", inputs, ("b", "b_zero_point"))
        (ours,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
        za = a_zp.astype(np.int64).reshape(-1, 1) if a_zp.ndim else int(a_zp)
        expected = (a.astype(np.int64) - za) @ (b.astype(np.int64) - b_zp.astype(np.int64))
        np.testing.assert_array_equal(ours, expected.astype(np.int32))
    if (a_type, b_type) != (np.int8, np.uint8):
        inputs = {"a": a, "a_scale": np.array(0.02, np.float32), "a_zero_point": zero_point(a_type),
                  "b": b, "b_scale": np.array(0.015, np.float32), "b_zero_point": zero_point(b_type),
                  "y_scale": np.array(0.3, np.float32), "y_zero_point": zero_point(a_type)}
        compare("QLinearMatMul", inputs, ("b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"))


def test_matmul_integer_extreme_values_are_exact():
    # Every product at its largest magnitude: 255 * -128 summed 512 times (what 16-bit
    # saturating intermediate sums would get wrong).
    for rows in (64, 1):
        a = np.full((rows, 512), 255, np.uint8)
        b = np.full((512, 64), -128, np.int8)
        out = compare("MatMulInteger", {"a": a, "b": b}, ("b",))
        assert out[0, 0] == 255 * -128 * 512


# ---- QLinearMatMul ----


# (onnxruntime has no int8 x uint8 QLinearMatMul; onnx.reference wraps instead of saturating.)
@pytest.mark.parametrize("a_type,b_type", PAIRS[:3], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("a_shape,b_shape", SHAPES[:4], ids=str)
def test_qlinear_matmul(a_type, b_type, a_shape, b_shape):
    y_type = a_type
    a, b = ints(a_type, a_shape), ints(b_type, b_shape)
    k = a_shape[-1]
    inputs = {"a": a, "a_scale": np.array(0.02, np.float32), "a_zero_point": zero_point(a_type),
              "b": b, "b_scale": np.array(0.015, np.float32), "b_zero_point": zero_point(b_type),
              "y_scale": np.array(0.05 * np.sqrt(k), np.float32), "y_zero_point": zero_point(y_type)}
    compare("QLinearMatMul", inputs, ("b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"))


def test_qlinear_matmul_per_column_b_and_per_row_a():
    a, b = ints(np.uint8, (40, 64)), ints(np.int8, (64, 32))
    inputs = {"a": a, "a_scale": np.linspace(0.01, 0.03, 40).astype(np.float32),
              "a_zero_point": zero_point(np.uint8, 40),
              "b": b, "b_scale": np.linspace(0.005, 0.02, 32).astype(np.float32),
              "b_zero_point": np.zeros(32, np.int8),
              "y_scale": np.array(0.7, np.float32), "y_zero_point": np.array(128, np.uint8)}
    model, feeds = node_model("QLinearMatMul", inputs, ("b",))
    (ours,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    acc = (a.astype(np.int64) - inputs["a_zero_point"][:, None]) @ b.astype(np.int64)
    multiplier = (inputs["a_scale"][:, None] * inputs["b_scale"][None, :]) / np.float32(0.7)
    expected = np.clip(np.rint(acc.astype(np.float32) * multiplier.astype(np.float32)) + 128, 0, 255)
    np.testing.assert_array_equal(ours, expected.astype(np.uint8))


@pytest.mark.parametrize("scale_type", [np.float16])
def test_qlinear_matmul_16bit_scales(scale_type):
    # Opset 21's float16 scales: the multiplier rounds in float16 as onnx.reference's numpy does.
    a, b = ints(np.uint8, (4, 6)), ints(np.uint8, (6, 3))
    inputs = {"a": a, "a_scale": np.array(0.0066, scale_type), "a_zero_point": np.array(113, np.uint8),
              "b": b, "b_scale": np.array(0.00705, scale_type), "b_zero_point": np.array(114, np.uint8),
              "y_scale": np.array(0.0107, scale_type), "y_zero_point": np.array(118, np.uint8)}
    compare("QLinearMatMul", inputs, reference="onnx.reference")


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("a_type,b_type", PAIRS, ids=lambda t: np.dtype(t).name)
def test_integer_matmul_threads(a_type, b_type, threads):
    # On several threads a constant B's product runs in blocks of rows (at least 16, about
    # four per thread, a shorter last one) shared among the threads; the zero point
    # corrections and the requantization in shared ranges of rows. Zero points for all and
    # per row / column.
    for m in (33, 77, 200):
        a, b = ints(a_type, (m, 70)), ints(b_type, (70, 45))
        for a_zp, b_zp in [(zero_point(a_type), zero_point(b_type)), (zero_point(a_type, m), zero_point(b_type, 45))]:
            inputs = {"a": a, "b": b, "a_zero_point": a_zp, "b_zero_point": b_zp}
            model, feeds = node_model("MatMulInteger", inputs, ("b", "b_zero_point"))
            options = onnxtrain.SessionOptions()
            options.intra_op_num_threads = threads
            session = onnxtrain.InferenceSession(model.SerializeToString(), sess_options=options)
            za = a_zp.astype(np.int64).reshape(-1, 1) if a_zp.ndim else int(a_zp)
            expected = ((a.astype(np.int64) - za) @ (b.astype(np.int64) - b_zp.astype(np.int64))).astype(np.int32)
            for _ in range(2):  # the prepared blocks reused
                np.testing.assert_array_equal(session.run(None, feeds)[0], expected)
        if (a_type, b_type) != (np.int8, np.uint8):
            inputs = {"a": a, "a_scale": np.array(0.02, np.float32), "a_zero_point": zero_point(a_type),
                      "b": b, "b_scale": np.array(0.015, np.float32), "b_zero_point": zero_point(b_type),
                      "y_scale": np.array(0.3, np.float32), "y_zero_point": zero_point(a_type)}
            compare("QLinearMatMul", inputs, ("b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"),
                    threads=threads)


# ---- ConvInteger and QLinearConv ----

CONV_CASES = [
    dict(x=(1, 3, 7, 7), w=(4, 3, 3, 3), attrs={}),
    dict(x=(2, 8, 12, 10), w=(16, 8, 3, 3), attrs={"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    dict(x=(1, 6, 9, 9), w=(6, 2, 3, 3), attrs={"group": 3, "pads": [1, 2, 0, 1], "dilations": [2, 1]}),
    dict(x=(1, 32, 14, 14), w=(64, 32, 1, 1), attrs={}),
    dict(x=(2, 4, 11), w=(5, 4, 3), attrs={"auto_pad": "SAME_UPPER"}),
    dict(x=(1, 16, 20, 20), w=(32, 16, 3, 3), attrs={"pads": [1, 1, 1, 1]}),
    # 81 pixels and 20 channels: 16 x 16 tiles of the requantization and the edges of both
    dict(x=(2, 8, 9, 9), w=(20, 8, 3, 3), attrs={"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: str(c["x"]) + str(c["w"]))
@pytest.mark.parametrize("w_type", [np.uint8, np.int8], ids=lambda t: np.dtype(t).name)
def test_conv_integer(case, w_type):
    x, w = ints(np.uint8, case["x"]), ints(w_type, case["w"])
    inputs = {"x": x, "w": w, "x_zero_point": zero_point(np.uint8), "w_zero_point": zero_point(w_type)}
    compare("ConvInteger", inputs, ("w",), case["attrs"], reference="onnxruntime" if w_type == np.uint8 else
            "onnx.reference", opset=10)


def test_conv_integer_per_channel_weight_zero_points():
    x, w = ints(np.int8, (1, 4, 6, 6)), ints(np.int8, (6, 4, 3, 3))
    inputs = {"x": x, "w": w, "x_zero_point": np.array(3, np.int8), "w_zero_point": zero_point(np.int8, 6)}
    model, feeds = node_model("ConvInteger", inputs, ("w", "w_zero_point"), {"pads": [1, 1, 1, 1]}, opset=10)
    (ours,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    import torch

    xs = torch.tensor(x.astype(np.int64) - 3).double()
    ws = torch.tensor(w.astype(np.int64) - inputs["w_zero_point"][:, None, None, None]).double()
    expected = torch.nn.functional.conv2d(xs, ws, padding=1).numpy().astype(np.int32)
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: str(c["x"]) + str(c["w"]))
@pytest.mark.parametrize("x_type,w_type", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)],
                         ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(case, x_type, w_type, per_channel):
    x, w = ints(x_type, case["x"]), ints(w_type, case["w"])
    m = case["w"][0]
    w_scale = np.linspace(0.002, 0.01, m).astype(np.float32) if per_channel else np.array(0.005, np.float32)
    w_zp = np.zeros(m, w_type) if per_channel else (zero_point(w_type) if w_type == np.uint8 else np.array(0, w_type))
    inputs = {"x": x, "x_scale": np.array(0.03, np.float32), "x_zero_point": zero_point(x_type),
              "w": w, "w_scale": w_scale, "w_zero_point": w_zp,
              "y_scale": np.array(0.4, np.float32), "y_zero_point": zero_point(x_type),
              "B": rng.integers(-2000, 2000, size=m).astype(np.int32)}
    compare("QLinearConv", inputs, ("w", "w_scale", "w_zero_point", "B"), case["attrs"], opset=10)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_qlinear_conv_threads(threads):
    # oneDNN's int8 convolution in bands of output rows over a batch of images, the bands
    # shared among the threads (each with its own buffers).
    x, w = ints(np.uint8, (3, 16, 21, 19)), ints(np.int8, (24, 16, 3, 3))
    inputs = {"x": x, "x_scale": np.array(0.03, np.float32), "x_zero_point": zero_point(np.uint8),
              "w": w, "w_scale": np.linspace(0.002, 0.01, 24).astype(np.float32), "w_zero_point": np.zeros(24, np.int8),
              "y_scale": np.array(0.4, np.float32), "y_zero_point": zero_point(np.uint8),
              "B": rng.integers(-2000, 2000, size=24).astype(np.int32)}
    compare("QLinearConv", inputs, ("w", "w_scale", "w_zero_point", "B"), {"pads": [1, 1, 1, 1]}, opset=10,
            threads=threads)
    conv_inputs = {"x": x, "w": w, "x_zero_point": inputs["x_zero_point"], "w_zero_point": np.array(0, np.int8)}
    compare("ConvInteger", conv_inputs, ("w",), {"pads": [1, 1, 1, 1], "strides": [2, 1]}, reference="onnx.reference",
            opset=10, threads=threads)


def test_integer_ops_errors():
    a = np.zeros((2, 3), np.uint8)
    cases = [
        ("MatMulInteger", {"a": a, "b": np.zeros((4, 2), np.uint8)}, r"inner dimensions do not match"),
        ("MatMulInteger", {"a": a, "b": np.zeros((3, 2), np.int16)}, r"B is int16, expected int8 or uint8"),
        ("MatMulInteger", {"a": a, "b": np.zeros((3, 2), np.uint8), "a_zero_point": np.zeros(3, np.uint8)},
         r"a_zero_point has shape \[3\]; expected a scalar or 2 values \(one per row of A\)"),
        ("MatMulInteger", {"a": a, "b": np.zeros((3, 2), np.uint8), "a_zero_point": np.zeros(1, np.int8)},
         r"a_zero_point is int8, expected uint8 like its operand"),
        ("ConvInteger", {"x": np.zeros((1, 2, 3, 3), np.uint8), "w": np.zeros((1, 3, 2, 2), np.uint8)},
         r"W \[1, 3, 2, 2\] expects 3 input channels"),
    ]
    for op, inputs, message in cases:
        model, feeds = node_model(op, inputs, (), opset=10)
        with pytest.raises((ValueError, RuntimeError), match=message):
            onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
