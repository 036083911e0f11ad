"""onnxblock.blocks: every block's output against numpy, run in onnxtrain and onnxruntime;
ForwardBlock, the base contexts and infer_shapes_on_base."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxtrain.training import onnxblock
from onnxtrain.training.onnxblock import blocks
from tests.python.training.onnxblock.onnxblock_helpers import input_model, run_both

rng = np.random.default_rng(0)
A = rng.standard_normal((2, 3)).astype(np.float32)
B = rng.uniform(0.5, 2.0, (2, 3)).astype(np.float32)
C = rng.standard_normal((3, 4)).astype(np.float32)
FEEDS = {"a": A, "b": B, "c": C}


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


CASES = [
    ("Add", lambda: blocks.Add(), ("a", "b"), A + B),
    ("Sub", lambda: blocks.Sub(), ("a", "b"), A - B),
    ("Mul", lambda: blocks.Mul(), ("a", "b"), A * B),
    ("Div", lambda: blocks.Div(), ("a", "b"), A / B),
    ("Pow-inputs", lambda: blocks.Pow(), ("b", "a"), B**A),
    ("Pow-exponent", lambda: blocks.Pow(3.0), ("a",), A**3),
    ("Neg", lambda: blocks.Neg(), ("a",), -A),
    ("Abs", lambda: blocks.Abs(), ("a",), np.abs(A)),
    ("ReduceMean", lambda: blocks.ReduceMean(), ("a",), A.mean(keepdims=True)),
    ("ReduceMean-nokeep", lambda: blocks.ReduceMean(keepdims=False), ("a",), A.mean()),
    ("ReduceMean-axes", lambda: blocks.ReduceMean(keepdims=False, axes=[1]), ("a",), A.mean(axis=1)),
    ("ReduceSum", lambda: blocks.ReduceSum(), ("a",), A.sum(keepdims=True)),
    ("ReduceSum-axes", lambda: blocks.ReduceSum(axes=[0]), ("a",), A.sum(axis=0, keepdims=True)),
    ("Sigmoid", lambda: blocks.Sigmoid(), ("a",), sigmoid(A)),
    ("Log", lambda: blocks.Log(), ("b",), np.log(B)),
    ("Exp", lambda: blocks.Exp(), ("a",), np.exp(A)),
    ("Sqrt", lambda: blocks.Sqrt(), ("b",), np.sqrt(B)),
    ("Relu", lambda: blocks.Relu(), ("a",), np.maximum(A, 0)),
    ("Softplus", lambda: blocks.Softplus(), ("a",), np.log1p(np.exp(A))),
    ("Softmax", lambda: blocks.Softmax(axis=1), ("a",), np.exp(log_softmax(A, 1))),
    ("LogSoftmax", lambda: blocks.LogSoftmax(axis=1), ("a",), log_softmax(A, 1)),
    ("MatMul", lambda: blocks.MatMul(), ("a", "c"), A @ C),
    ("Identity", lambda: blocks.Identity(), ("a",), A),
    ("Cast", lambda: blocks.Cast(onnx.TensorProto.DOUBLE), ("a",), A.astype(np.float64)),
    ("Clip", lambda: blocks.Clip(-0.5, 0.5), ("a",), np.clip(A, -0.5, 0.5)),
    ("Clip-min", lambda: blocks.Clip(clip_min=0.0), ("a",), np.maximum(A, 0)),
    ("Clip-max", lambda: blocks.Clip(clip_max=0.1), ("a",), np.minimum(A, 0.1)),
    ("Clip-none", lambda: blocks.Clip(), ("a",), A),
    ("PassThrough", lambda: blocks.PassThrough(), ("a",), A),
    ("Constant-float", lambda: blocks.Constant(0.4), (), np.float32(0.4)),
    ("Constant-array", lambda: blocks.Constant(np.arange(6, dtype=np.float64).reshape(2, 3)), (),
     np.arange(6, dtype=np.float64).reshape(2, 3)),
    ("Constant-dtype", lambda: blocks.Constant([1, 2], dtype=onnx.TensorProto.FLOAT), (),
     np.array([1, 2], np.float32)),
]


class Forward(onnxblock.ForwardBlock):
    """Wraps one block so that its output becomes the model's."""

    def __init__(self, block, inputs) -> None:
        super().__init__()
        self.block = block
        self.inputs = inputs

    def build(self):
        return self.block(*self.inputs)


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("name,make,inputs,expected", CASES, ids=[c[0] for c in CASES])
def test_block_matches_numpy(name, make, inputs, expected, opset) -> None:
    forward = Forward(make(), inputs)
    with onnxblock.base(input_model(FEEDS, opset)) as accessor:
        output = forward()
        assert accessor.model.graph.output[0].name == output
    model = forward.to_model_proto()
    onnx.checker.check_model(model, full_check=True)
    [result] = run_both(model, {k: FEEDS[k] for k in (i.name for i in model.graph.input)})
    assert result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)


class Composite(onnxblock.Block):
    """Blocks stacking blocks: mean((a - b)^2 * 0.5) + |c|.sum()."""

    def __init__(self) -> None:
        super().__init__()
        self.seen_base = None

    def build(self, a, b, c):
        self.seen_base = self.base
        difference = blocks.Sub()(a, b)
        half = blocks.Mul()(blocks.Pow(2.0)(difference), blocks.Constant(0.5)())
        return blocks.Add()(blocks.ReduceMean(keepdims=False)(half),
                            blocks.ReduceSum(keepdims=False)(blocks.Abs()(c)))


def test_blocks_stack_on_the_base() -> None:
    model = input_model(FEEDS)
    block = Composite()
    assert block.base is None
    with onnxblock.base(model) as accessor:
        output = block("a", "b", "c")
        assert block.seen_base is accessor.model and block.base is accessor.model
        inferred = block.infer_shapes_on_base()
        accessor.model.graph.output.append(onnx.helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, []))
        built = accessor.model
    assert not model.graph.node  # the base is a copy
    assert any(v.name == output for v in inferred.graph.value_info)
    [result] = run_both(built, FEEDS)
    np.testing.assert_allclose(result, np.mean((A - B) ** 2 * 0.5) + np.abs(C).sum(), rtol=1e-6)


def test_empty_base_and_forward_block_outputs() -> None:
    class Constants(onnxblock.ForwardBlock):
        def build(self):
            one = blocks.Constant(1.0)()
            return one, blocks.Add()(one, blocks.Constant(2.0)())

    block = Constants()
    with onnxblock.empty_base(opset_version=18) as accessor:
        outputs = block()
        assert [o.name for o in accessor.model.graph.output] == list(outputs)
    model = block.to_model_proto()
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 18)]
    assert run_both(model, {}) == [np.float32(1.0), np.float32(3.0)]


def test_infer_shapes_on_base_with_external_data(tmp_path) -> None:
    weight = np.arange(4096, dtype=np.float32).reshape(64, 64)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 64])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(weight, "w")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, tmp_path / "model.onnx", save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    class Forward(onnxblock.ForwardBlock):
        def build(self, y):
            return blocks.Sigmoid()(y)

    block = Forward()
    with onnxblock.base(str(tmp_path / "model.onnx")) as accessor:
        assert accessor.has_path
        output = block("y")
        assert any(v.name == "y" for v in block.infer_shapes_on_base().graph.value_info)
        inferred = block.infer_shapes_on_base()
        [info] = [v for v in inferred.graph.output if v.name == output]
        assert [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim] == ["n", 64]
        tensor = accessor.model.graph.initializer[0]
        assert tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.raw_data  # data stays on disk
