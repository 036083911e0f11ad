"""Shared helpers of the onnxblock tests: tiny base models and running a model in onnxtrain
and in stock onnxruntime, which must agree."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxtrain

NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int64): TensorProto.INT64}


def input_model(inputs: dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    """A model with the given graph inputs (static shapes) and no nodes or outputs."""
    graph = helper.make_graph([], "base", [
        helper.make_tensor_value_info(name, NP_TO_ONNX[value.dtype], value.shape) for name, value in inputs.items()
    ], [])
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


def parameter_model(values: dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    """A model whose outputs are its initializers passed through Identity, so that the
    gradient of a loss on output ``name`` is the gradient with respect to ``name + "_value"``."""
    nodes, outputs, initializers = [], [], []
    for name, value in values.items():
        initializers.append(onnx.numpy_helper.from_array(value, name + "_value"))
        nodes.append(helper.make_node("Identity", [name + "_value"], [name]))
        outputs.append(helper.make_tensor_value_info(name, NP_TO_ONNX[value.dtype], value.shape))
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(helper.make_graph(nodes, "parameters", [], outputs, initializers),
                              opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


def run_both(model: onnx.ModelProto, feeds: dict, rtol: float = 1e-5, atol: float = 1e-6) -> list[np.ndarray]:
    """Runs ``model`` in onnxtrain and onnxruntime; checks they agree; returns onnxtrain's."""
    data = model.SerializeToString()
    ours = onnxtrain.InferenceSession(data).run(None, feeds)
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for index, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {index}: onnxtrain vs onnxruntime")
    assert len(ours) == len(theirs)
    return ours


def training_feeds(model: onnx.ModelProto, feeds: dict, parameters: dict[str, np.ndarray]) -> dict:
    """Feeds of an onnxtrain training model: inputs, parameters, zero gradient buffers, reset."""
    result = {**feeds, **parameters, "lazy_reset_grad": np.array(True)}
    for name, value in parameters.items():
        result[f"{name}_grad.accumulation.buffer"] = np.zeros_like(value)
    names = {i.name for i in model.graph.input}
    assert set(result) == names, (sorted(result), sorted(names))
    return result
