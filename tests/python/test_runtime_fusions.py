"""The executor's own rewrites (src/passes): results equal the unfused graph's.

InferenceSession folds an inference-mode BatchNormalization into the Conv before it, fuses
Conv + Relu into org.onnxtrain::FusedConv (oneDNN's ReLU post-op), a MaxPool after a
convolution into it, and spelled-out GELU into one Gelu node; these run each pattern, rewritten and where something outside the pattern
keeps it as it is, against onnxruntime (float32) and onnx.reference (float64, which
onnxruntime's Conv lacks).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxtrain

rng = np.random.default_rng(3)


def matches_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], dtype: type) -> list[np.ndarray]:
    """onnxtrain's outputs, checked against onnxruntime (float32) or onnx.reference (float64,
    which onnxruntime's Conv lacks)."""
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    if dtype == np.float32:
        theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        tolerance = dict(rtol=1e-5, atol=1e-5)
    else:
        theirs = ReferenceEvaluator(model).run(None, feeds)
        tolerance = dict(rtol=1e-12, atol=1e-12)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, **tolerance)
    return ours


def conv_relu(dtype: type, conv_output_also_read: bool, relu_is_output: bool = True) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(dtype), "W")
    b = numpy_helper.from_array(rng.standard_normal(6).astype(dtype), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    outputs = ["r"] if relu_is_output else []
    if not relu_is_output:
        nodes.append(helper.make_node("Neg", ["r"], ["y"]))
        outputs.append("y")
    if conv_output_also_read:
        outputs.append("c")
    graph = helper.make_graph(nodes, "conv_relu", [helper.make_tensor_value_info("x", elem, ["n", 3, 7, 7])],
                              [helper.make_tensor_value_info(o, elem, None) for o in outputs], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("conv_output_also_read", [False, True], ids=["fused", "not-fused"])
@pytest.mark.parametrize("relu_is_output", [True, False], ids=["relu-output", "relu-read"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_relu(dtype: type, conv_output_also_read: bool, relu_is_output: bool) -> None:
    model = conv_relu(dtype, conv_output_also_read, relu_is_output)
    ours = matches_reference(model, {"x": rng.standard_normal((2, 3, 7, 7)).astype(dtype)}, dtype)
    assert (ours[0] >= 0).all() if relu_is_output else (ours[0] <= 0).all()


def conv_batch_norm(dtype: type, variant: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Conv -> BatchNormalization -> Relu; `variant` keeps the normalization from folding or not."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = 5
    params = {
        "W": rng.standard_normal((m, 2, 3, 3)).astype(dtype),
        "B": rng.standard_normal(m).astype(dtype),
        "scale": rng.uniform(0.5, 2.0, m).astype(dtype),
        "bias": rng.standard_normal(m).astype(dtype),
        "mean": rng.standard_normal(m).astype(dtype),
        "var": rng.uniform(0.1, 3.0, m).astype(dtype),
    }
    if variant == "no-conv-bias":
        del params["B"]
    feeds = {"x": rng.standard_normal((3, 2, 6, 6)).astype(dtype)}
    conv_inputs = ["x", "W"] + (["B"] if "B" in params else [])
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", elem, ["batch", 2, 6, 6])]
    initializers = [numpy_helper.from_array(v, k) for k, v in params.items()]
    if variant == "mean-fed":  # a graph input: not a constant
        inputs.append(helper.make_tensor_value_info("mean", elem, [m]))
        initializers = [i for i in initializers if i.name != "mean"]
        feeds["mean"] = params["mean"]
    outputs = ["y", "c"] if variant == "conv-output-read" else ["y"]
    graph = helper.make_graph(nodes, "conv_bn", inputs, [helper.make_tensor_value_info(o, elem, None) for o in outputs],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), feeds


@pytest.mark.parametrize("variant", ["folds", "no-conv-bias", "mean-fed", "conv-output-read"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_batch_norm(dtype: type, variant: str) -> None:
    model, feeds = conv_batch_norm(dtype, variant)
    matches_reference(model, feeds, dtype)


def conv_pool(dtype: type, channels: tuple[int, int], kernel: int, relu: bool, pool: dict,
              conv_output_read: bool) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    c, m = channels
    w = numpy_helper.from_array(rng.standard_normal((m, c, kernel, kernel)).astype(dtype), "W")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(dtype), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[kernel // 2] * 4)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes.append(helper.make_node("MaxPool", ["r" if relu else "c"], ["y"], **pool))
    outputs = ["y", "c"] if conv_output_read else ["y"]
    graph = helper.make_graph(nodes, "conv_pool", [helper.make_tensor_value_info("x", elem, ["n", c, "h", "w"])],
                              [helper.make_tensor_value_info(o, elem, None) for o in outputs], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


TWO_BY_TWO = {"kernel_shape": [2, 2], "strides": [2, 2]}
STEM = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}  # ResNet's


@pytest.mark.parametrize("channels, kernel, x_hw, pool", [
    ((3, 8), 3, (32, 32), TWO_BY_TWO),  # the small CNN's first layer: 8-channel blocks
    ((8, 16), 3, (16, 16), TWO_BY_TWO),  # 16-channel blocks
    ((5, 20), 3, (9, 7), TWO_BY_TWO),  # odd sizes: the last row and column drop; a partial block
    ((16, 24), 1, (8, 8), TWO_BY_TWO),  # a 1x1 convolution: a matmul in NCHW, pooled after
    ((32, 16), 3, (4, 4), TWO_BY_TWO),  # 4 output pixels: the streamed weights, pooled after
    ((3, 64), 3, (32, 32), STEM),
    ((4, 24), 3, (11, 9), {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [0, 1, 2, 0]}),
    ((4, 16), 3, (6, 6), {"kernel_shape": [2, 2]}),  # stride 1
    ((32, 16), 1, (2, 2), STEM),  # pooled after the streamed weights, windows mostly padding
    # 2x2 windows whose bottom or right padding makes the last window overhang the input: the
    # bounded loop, not the 2x2 fast path (issue 15 E: pads [0,0,1,1] on 5x5 read past the rows)
    ((3, 8), 3, (5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ((3, 8), 3, (5, 6), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 0]}),
    ((8, 16), 3, (6, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 1]}),
    ((8, 16), 3, (4, 4), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}),  # pads, no overhang
    ((32, 16), 3, (3, 3), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}),  # streamed weights
])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_conv_max_pool(channels: tuple[int, int], kernel: int, x_hw: tuple[int, int], pool: dict, relu: bool,
                       batch: int) -> None:
    model = conv_pool(np.float32, channels, kernel, relu, pool, conv_output_read=False)
    matches_reference(model, {"x": rng.standard_normal((batch, channels[0], *x_hw)).astype(np.float32)}, np.float32)


@pytest.mark.parametrize("variant", ["float64", "float64-stem", "conv-output-read", "ceil-mode", "dilated"])
def test_conv_max_pool_other_cases(variant: str) -> None:
    """float64 (the direct loop, pooled after) and pools the fusion leaves alone."""
    dtype = np.float64 if variant.startswith("float64") else np.float32
    pool = dict(STEM if variant == "float64-stem" else TWO_BY_TWO)
    if variant == "ceil-mode":
        pool["ceil_mode"] = 1
    if variant == "dilated":
        pool["dilations"] = [2, 2]
    model = conv_pool(dtype, (3, 8), 3, True, pool, conv_output_read=variant == "conv-output-read")
    matches_reference(model, {"x": rng.standard_normal((2, 3, 9, 9)).astype(dtype)}, dtype)


def test_conv_max_pool_too_large_a_window_is_refused() -> None:
    """The fused node fails the way MaxPool itself does when its window outgrows the input."""
    model = conv_pool(np.float32, (3, 8), 3, False, {"kernel_shape": [5, 5]}, conv_output_read=False)
    session = onnxtrain.InferenceSession(model.SerializeToString())
    with pytest.raises((RuntimeError, ValueError), match="window"):
        session.run(None, {"x": np.ones((1, 3, 3, 3), np.float32)})


@pytest.mark.parametrize("channels, x_hw, pool", [
    ((3, 8), (8, 8), TWO_BY_TWO),  # the fused 2x2 path on 8-channel blocks
    ((8, 16), (7, 7), STEM),  # the bounded window loop on 16-channel blocks
    ((3, 8), (5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
])
def test_conv_max_pool_propagates_nan(channels: tuple[int, int], x_hw: tuple[int, int], pool: dict) -> None:
    """A NaN the convolution gives reaches every window it is in (torch's MaxPool does so;
    onnxruntime 1.23 keeps a number in some windows, so torch is the reference here)."""
    torch = pytest.importorskip("torch")
    model = conv_pool(np.float32, channels, 3, False, pool, conv_output_read=False)
    x = rng.standard_normal((2, channels[0], *x_hw)).astype(np.float32)
    x[0, :, 1, 2] = np.nan
    x[1, 0, -1, -1] = np.nan
    ours = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    weights = {i.name: torch.from_numpy(numpy_helper.to_array(i)) for i in model.graph.initializer}
    conv = torch.nn.functional.conv2d(torch.from_numpy(x), weights["W"], weights["B"], padding=1)
    pads = pool.get("pads", [0, 0, 0, 0])
    conv = torch.nn.functional.pad(conv, (pads[1], pads[3], pads[0], pads[2]), value=-float("inf"))
    theirs = torch.nn.functional.max_pool2d(conv, pool["kernel_shape"], pool.get("strides", [1, 1])).numpy()
    assert np.isnan(theirs).any()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
