"""Conv and ConvTranspose against onnxruntime (and onnx.reference where onnxruntime has no
kernel). Tolerances: float32 rtol 1e-4/atol 1e-5 (oneDNN sums in another order than the
reference over up to a few hundred products), float64 1e-10 (against onnx.reference;
onnxruntime has no float64 Conv), float16 2e-3 against the float32 result rounded to
float16 (onnxtrain computes float16 in float32), bfloat16 3e-2 against float32."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

from op_harness import check_op

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def conv(x, w, b=None, *, constants=(), reference="onnxruntime", opset=17, rtol=1e-4, atol=1e-5, **attrs):
    inputs = {"x": x, "w": w}
    if b is not None:
        inputs["b"] = b
    return check_op("Conv", inputs, attrs, constants=constants, reference=reference, opset=opset, rtol=rtol, atol=atol)


def conv_transpose(x, w, b=None, *, constants=(), reference="onnxruntime", rtol=1e-4, atol=1e-5, **attrs):
    inputs = {"x": x, "w": w}
    if b is not None:
        inputs["b"] = b
    return check_op("ConvTranspose", inputs, attrs, constants=constants, reference=reference, rtol=rtol, atol=atol)


def float32_expected(op_type, inputs, attrs, dtype=np.float16):
    """onnxruntime's float32 result on the same values, cast to `dtype`: what a kernel that
    computes 16-bit floats in float32 must return (and, for float64 inputs that hold float32
    values, the float64 result up to float32 rounding)."""
    from op_harness import make_model, run_reference

    wide = {k: v.astype(np.float32) for k, v in inputs.items()}
    return [r.astype(dtype) for r in run_reference(make_model(op_type, wide, attrs), wide, "onnxruntime")]


# ---- Conv ----


@pytest.mark.parametrize("constant_w", [False, True])
def test_conv2d_3x3_with_bias(constant_w):
    conv(randn(2, 8, 10, 9), randn(16, 8, 3, 3), randn(16), constants=["w"] if constant_w else (), pads=[1, 1, 1, 1])


def test_conv2d_runs_again_with_another_shape():
    w = randn(4, 3, 3, 3)
    conv(randn(1, 3, 8, 8), w, constants=["w"])
    conv(randn(3, 3, 5, 7), w, constants=["w"])


def test_conv1d_strides_dilations_pads():
    conv(randn(2, 4, 20), randn(6, 4, 3), randn(6), strides=[2], dilations=[2], pads=[1, 2])


def test_conv3d():
    conv(randn(1, 3, 6, 7, 8), randn(4, 3, 2, 3, 3), randn(4), strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 1])


def test_conv2d_asymmetric_strides_and_pads():
    conv(randn(2, 3, 11, 13), randn(5, 3, 3, 2), strides=[3, 2], pads=[2, 0, 1, 1], dilations=[1, 2])


def test_grouped_conv():
    conv(randn(2, 8, 9, 9), randn(12, 2, 3, 3), randn(12), group=4, pads=[1, 1, 1, 1])


def test_depthwise_conv():
    conv(randn(2, 32, 14, 14), randn(32, 1, 3, 3), randn(32), group=32, pads=[1, 1, 1, 1], constants=["w"])


def test_pointwise_conv():
    conv(randn(2, 16, 7, 7), randn(24, 16, 1, 1), constants=["w"])


@pytest.mark.parametrize("strides", [[1, 1], [2, 2], [2, 1]])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("constant_w", [False, True])
def test_pointwise_conv_as_matmul(strides, bias, constant_w):
    """1x1 convolutions with 16 or more output pixels run as W x X[n] (strided: X subsampled)."""
    x = randn(3, 24, 9, 10)
    w = randn(40, 24, 1, 1)
    b = randn(40) if bias else None
    conv(x, w, b, strides=strides, constants=("w",) if constant_w else ())


# The product adds the bias and applies the fused Relu itself (oneDNN post-ops: a bias per
# output channel broadcast along the pixels): odd channel counts, strides, batch 1 and 3,
# weights constant or fed, one and two threads.
@pytest.mark.parametrize("strides", [[1, 1], [2, 2], [2, 1]])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("constant_w", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_conv_as_matmul_fused_relu(strides, bias, batch, constant_w, threads):
    x, w, b = randn(batch, 23, 9, 10), randn(37, 23, 1, 1), randn(37)
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    graph = helper.make_graph(
        [helper.make_node("Conv", inputs, ["c"], strides=strides), helper.make_node("Relu", ["c"], ["y"])],
        "pointwise_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
        + ([] if constant_w else [helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape))]),
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ([numpy_helper.from_array(w, "w")] if constant_w else []) + ([numpy_helper.from_array(b, "b")] if bias else []))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    feeds = {"x": x} if constant_w else {"x": x, "w": w}
    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxtrain.InferenceSession(model, sess_options=options)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for _ in range(2):  # the second run reuses the prepared product
        np.testing.assert_allclose(session.run(None, feeds)[0], theirs, rtol=1e-5, atol=1e-5)


def test_pointwise_conv_with_few_pixels_and_fused_relu():
    """Below 16 output pixels the blocked convolution serves; both paths give the Relu fusion."""
    for shape in [(1, 32, 4, 4), (1, 32, 8, 8)]:
        check_relu_after_pointwise(randn(*shape), randn(48, 32, 1, 1), randn(48))


def check_relu_after_pointwise(x, w, b):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2]), helper.make_node("Relu", ["c"], ["y"])],
        "pointwise_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    ours = onnxtrain.InferenceSession(model).run(None, {"x": x})[0]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert (ours >= 0).all()


# Up to 8 output pixels with constant weights: im2col and the packed weights streamed once
# (conv.cc, "convolutions with few output pixels"); from 9 pixels on, oneDNN again.
@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 64, 2, 2), (40, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # ResNet's last stage; 40 = 2.5 blocks of 16
    ((1, 32, 4, 4), (48, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((2, 16, 2, 2), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),  # batch 2: 8 pixels
    ((1, 8, 1, 1), (5, 8, 1, 1), {}),  # one pixel
    ((1, 12, 7, 6), (20, 12, 3, 2), {"pads": [2, 0, 1, 1], "strides": [3, 2], "dilations": [2, 2]}),
    ((1, 6, 9), (7, 6, 3), {"pads": [1, 0], "strides": [3]}),  # 1-D, 3 pixels
    ((1, 4, 3, 3, 3), (6, 4, 2, 2, 2), {}),  # 3-D, 2 x 2 x 2 pixels
    ((1, 16, 3, 3), (32, 16, 1, 1), {}),  # 9 pixels: oneDNN
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_with_few_output_pixels(x_shape, w_shape, attrs, bias):
    b = randn(w_shape[0]) if bias else None
    conv(randn(*x_shape), randn(*w_shape), b, constants=["w"], **attrs)


def test_conv_with_few_output_pixels_zero_pads_even_next_to_inf():
    """Padding contributes zeros, whatever the input holds (no 0 * inf)."""
    x = randn(1, 4, 2, 2)
    x[0, :, 0, 0] = np.inf
    conv(x, randn(8, 4, 3, 3), constants=["w"], pads=[1, 1, 1, 1])


def test_conv_with_few_output_pixels_fused_relu_and_changing_shapes():
    """One session: 2 x 2 (streamed), 8 x 8 (oneDNN), 2 x 2 again; the Relu fuses into both."""
    w, b = randn(24, 16, 3, 3), randn(24)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    ours = onnxtrain.InferenceSession(model)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for size in (2, 8, 2):
        x = randn(1, 16, size, size)
        np.testing.assert_allclose(ours.run(None, {"x": x})[0], theirs.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


# First layers: few input channels, up to 8 outputs (oneDNN's AVX2 kernel with 8-channel
# blocks, reordered back to NCHW by ChannelBlocks), padding on every side.
@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((2, 3, 32, 32), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),  # the small CNN's first layer
    ((3, 1, 28, 20), (5, 1, 5, 5), {"pads": [2, 1, 0, 2]}),  # 5 outputs, asymmetric pads, 18-wide rows
    ((1, 2, 7, 9), (8, 2, 3, 2), {}),  # rows shorter than a vector, no padding
    ((1, 3, 6, 40), (4, 3, 1, 1), {}),  # 1x1
    ((1, 3, 9, 9), (8, 3, 3, 3), {"auto_pad": "SAME_UPPER"}),
    ((1, 3, 12, 12), (9, 3, 3, 3), {"pads": [1, 1, 1, 1]}),  # 9 outputs: 16-channel blocks
    ((1, 4, 12, 12), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("constant_w", [False, True])
def test_first_layers(x_shape, w_shape, attrs, bias, constant_w):
    b = randn(w_shape[0]) if bias else None
    conv(randn(*x_shape), randn(*w_shape), b, constants=["w"] if constant_w else (), **attrs)


def test_first_layer_fused_relu():
    x, w, b = randn(2, 3, 20, 20), randn(8, 3, 3, 3), randn(8)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    ours = onnxtrain.InferenceSession(model).run(None, {"x": x})[0]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_first_layer_three_channels_stride_two():
    conv(randn(1, 3, 32, 32), randn(16, 3, 7, 7), randn(16), strides=[2, 2], pads=[3, 3, 3, 3], constants=["w", "b"])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("strides", [[1, 1], [2, 2], [3, 2]])
def test_conv_auto_pad(auto_pad, strides):
    conv(randn(1, 2, 9, 8), randn(3, 2, 4, 3), auto_pad=auto_pad, strides=strides, kernel_shape=[4, 3])


def test_conv_float64_matches_float32_semantics():
    x, w, b = randn(2, 6, 9, 10, dtype=np.float64), randn(4, 3, 3, 2, dtype=np.float64), randn(4, dtype=np.float64)
    conv(x, w, b, group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1], rtol=1e-10, atol=1e-12,
         reference="onnx.reference")


def test_conv_float64_1d_and_3d():
    kwargs = dict(rtol=1e-10, atol=1e-12, reference="onnx.reference")
    conv(randn(1, 2, 15, dtype=np.float64), randn(3, 2, 4, dtype=np.float64), pads=[2, 1], **kwargs)
    conv(randn(1, 2, 4, 5, 6, dtype=np.float64), randn(2, 2, 2, 2, 3, dtype=np.float64), auto_pad="SAME_UPPER",
         **kwargs)




def test_conv_float16():
    x, w, b = randn(1, 4, 8, 8, dtype=np.float16), randn(6, 4, 3, 3, dtype=np.float16), randn(6, dtype=np.float16)
    attrs = {"pads": [1, 1, 1, 1]}
    expected = float32_expected("Conv", {"x": x, "w": w, "b": b}, attrs)
    for constants in [(), ["w"]]:
        check_op("Conv", {"x": x, "w": w, "b": b}, attrs, constants=constants, expected=expected, rtol=2e-3, atol=2e-3)


def check_bfloat16(op_type, inputs, attrs, *, opset, rtol, atol):
    """Runs a bfloat16 node and compares with onnxruntime's float32 result on the same values.
    The Python binding cannot feed or type bfloat16 arrays yet, so the inputs are
    initializers and the output (uint16 bits) is widened here."""
    from op_harness import make_model, run_onnxtrain

    expected = float32_expected(op_type, inputs, attrs, np.float32)[0]
    out = np.asarray(run_onnxtrain(make_model(op_type, inputs, attrs, opset=opset, constants=list(inputs)), {})[0])
    widened = (out.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(widened, expected, rtol=rtol, atol=atol)


def test_conv_bfloat16():
    import ml_dtypes

    inputs = {"x": randn(1, 4, 8, 8).astype(ml_dtypes.bfloat16), "w": randn(6, 4, 3, 3).astype(ml_dtypes.bfloat16)}
    check_bfloat16("Conv", inputs, {"pads": [1, 1, 1, 1]}, opset=22, rtol=2e-2, atol=5e-2)


def test_conv_empty_batch():
    inputs = {"x": randn(0, 3, 5, 5), "w": randn(4, 3, 3, 3), "b": randn(4)}
    check_op("Conv", inputs, {}, expected=[np.empty((0, 4, 3, 3), np.float32)])


def test_conv_opset_1():
    conv(randn(1, 2, 5, 5), randn(3, 2, 3, 3), opset=1, pads=[1, 1, 1, 1], reference="onnx.reference")


def test_conv_dynamic_shapes_reuse_one_session():
    import onnxtrain
    from onnx import TensorProto, helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = onnxtrain.InferenceSession(model.SerializeToString())
    import onnxruntime as ort

    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    w = randn(4, 3, 3, 3)
    for shape in [(1, 3, 8, 8), (2, 3, 5, 9), (1, 3, 8, 8)]:
        x = randn(*shape)
        np.testing.assert_allclose(session.run(None, {"x": x, "w": w})[0], reference.run(None, {"x": x, "w": w})[0],
                                   rtol=1e-4, atol=1e-5)


def test_conv_rejects_channel_mismatch():
    with pytest.raises((ValueError, RuntimeError), match=r"expects 6 input channels.*has 4"):
        conv(randn(1, 4, 5, 5), randn(2, 3, 3, 3), group=2, reference="onnx.reference")


def test_conv_rejects_bias_of_wrong_size():
    with pytest.raises((ValueError, RuntimeError), match=r"B is float\[3\], expected float\[2\]"):
        conv(randn(1, 3, 5, 5), randn(2, 3, 3, 3), randn(3), reference="onnx.reference")


def test_conv_rejects_kernel_larger_than_input():
    with pytest.raises((ValueError, RuntimeError), match=r"larger than the padded input"):
        conv(randn(1, 1, 2, 2), randn(1, 1, 3, 3), reference="onnx.reference")


def test_conv_rejects_wrong_pads_length():
    with pytest.raises((ValueError, RuntimeError), match=r"pads \[1, 1\] has 2 values, expected 4"):
        conv(randn(1, 1, 5, 5), randn(1, 1, 3, 3), pads=[1, 1], reference="onnx.reference")


def test_conv_rejects_integer_input():
    x = rng.integers(0, 5, (1, 1, 4, 4)).astype(np.int32)
    with pytest.raises((ValueError, RuntimeError), match=r"unsupported element type int32"):
        conv(x, x[:, :, :3, :3].copy(), reference="onnx.reference")


# ---- ConvTranspose ----


@pytest.mark.parametrize("constant_w", [False, True])
def test_conv_transpose_2d(constant_w):
    conv_transpose(randn(2, 4, 5, 6), randn(4, 3, 3, 3), randn(3), constants=["w"] if constant_w else (),
                   strides=[2, 2], pads=[1, 1, 1, 1])


def test_conv_transpose_output_padding():
    conv_transpose(randn(1, 2, 4, 4), randn(2, 3, 3, 3), randn(3), strides=[2, 2], pads=[1, 1, 1, 1],
                   output_padding=[1, 1])


def test_conv_transpose_output_padding_without_pads():
    conv_transpose(randn(1, 2, 3, 3), randn(2, 2, 3, 3), randn(2), strides=[3, 2], output_padding=[1, 1])


def test_conv_transpose_output_shape():
    conv_transpose(randn(1, 1, 3, 3), randn(1, 2, 3, 3), strides=[3, 2], output_shape=[10, 8],
                   reference="onnx.reference")


def test_conv_transpose_output_shape_smaller_than_full():
    conv_transpose(randn(1, 2, 4, 4), randn(2, 2, 3, 3), randn(2), strides=[2, 2], output_shape=[8, 8])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_auto_pad(auto_pad):
    conv_transpose(randn(1, 2, 3, 3), randn(2, 3, 3, 3), strides=[2, 2], auto_pad=auto_pad,
                   reference="onnx.reference")


def test_conv_transpose_groups_and_dilations():
    conv_transpose(randn(2, 6, 5, 4), randn(6, 2, 3, 2), randn(4), group=2, dilations=[2, 1], strides=[1, 2])


def test_conv_transpose_depthwise():
    conv_transpose(randn(1, 8, 6, 6), randn(8, 1, 4, 4), group=8, strides=[2, 2], pads=[1, 1, 1, 1],
                   constants=["w"])


def test_conv_transpose_1d_and_3d():
    conv_transpose(randn(2, 3, 7), randn(3, 2, 3), randn(2), strides=[2], pads=[1, 0])
    conv_transpose(randn(1, 2, 3, 4, 3), randn(2, 2, 2, 3, 2), strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 1])


def test_conv_transpose_float64():
    # onnxruntime has no float64 ConvTranspose and onnx.reference mishandles groups: compare
    # with onnxruntime's float32 result on float32-representable values.
    inputs = {"x": randn(2, 4, 5, 4).astype(np.float64), "w": randn(4, 3, 3, 3).astype(np.float64),
              "b": randn(6).astype(np.float64)}
    attrs = {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}
    expected = float32_expected("ConvTranspose", inputs, attrs, np.float64)
    check_op("ConvTranspose", inputs, attrs, expected=expected, rtol=1e-5, atol=1e-5)
    conv_transpose(randn(1, 1, 3, 3, dtype=np.float64), randn(1, 2, 3, 3, dtype=np.float64), strides=[3, 2],
                   output_shape=[10, 8], reference="onnx.reference", rtol=1e-10, atol=1e-12)


def test_conv_transpose_float16():
    inputs = {"x": randn(1, 3, 4, 4, dtype=np.float16), "w": randn(3, 2, 3, 3, dtype=np.float16),
              "b": randn(2, dtype=np.float16)}
    attrs = {"strides": [2, 2]}
    expected = float32_expected("ConvTranspose", inputs, attrs)
    check_op("ConvTranspose", inputs, attrs, expected=expected, rtol=2e-3, atol=2e-3)


def test_conv_transpose_rejects_channel_mismatch():
    with pytest.raises((ValueError, RuntimeError), match=r"must have X's 3 input channels"):
        conv_transpose(randn(1, 3, 4, 4), randn(2, 2, 3, 3), reference="onnx.reference")


def test_conv_transpose_rejects_bad_output_shape_length():
    with pytest.raises((ValueError, RuntimeError), match=r"output_shape \[5\] has 1 values, expected 2"):
        conv_transpose(randn(1, 1, 3, 3), randn(1, 1, 3, 3), output_shape=[5], reference="onnx.reference")
