"""Runs one ONNX node in onnxtrain and in a reference (onnxruntime or onnx.reference).

An op test states inputs, attributes and the reference in a few lines:

    check_op("Gemm", {"A": a, "B": b, "C": c}, {"transB": 1})
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnxtrain


def make_model(
    op_type: str,
    inputs: Mapping[str, np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    n_outputs: int = 1,
    opset: int = 17,
    domain: str = "",
    constants: Sequence[str] = (),
) -> onnx.ModelProto:
    """A one-node model. Inputs given as None are omitted optional inputs; names listed in
    `constants` become initializers instead of graph inputs."""
    input_names = [name if value is not None else "" for name, value in inputs.items()]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, input_names, outputs, domain=domain, **(attributes or {}))
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
        for name, value in inputs.items()
        if value is not None and name not in constants
    ]
    initializers = [numpy_helper.from_array(inputs[name], name) for name in constants]
    graph = helper.make_graph(
        [node], f"{op_type}_test", graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outputs], initializers
    )
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def feeds_of(inputs: Mapping[str, np.ndarray | None], constants: Sequence[str] = ()) -> dict[str, np.ndarray]:
    return {k: v for k, v in inputs.items() if v is not None and k not in constants}


def run_onnxtrain(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return onnxtrain.InferenceSession(model.SerializeToString()).run(None, dict(feeds))


def run_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], reference: str) -> list[np.ndarray]:
    if reference == "onnxruntime":
        import onnxruntime as ort

        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, dict(feeds))
    if reference == "onnx.reference":
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(model).run(None, dict(feeds)))
    raise ValueError(f"unknown reference {reference!r}")


def check_op(
    op_type: str,
    inputs: Mapping[str, np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    n_outputs: int = 1,
    opset: int = 17,
    constants: Sequence[str] = (),
    reference: str = "onnxruntime",
    expected: Sequence[np.ndarray] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> list[np.ndarray]:
    """Runs the node in onnxtrain and compares every output with the reference (or with
    `expected` when given): same dtype, same shape, values within rtol/atol (exact for
    integers and bools). Returns onnxtrain's outputs."""
    model = make_model(op_type, inputs, attributes, n_outputs=n_outputs, opset=opset, constants=constants)
    feeds = feeds_of(inputs, constants)
    ours = run_onnxtrain(model, feeds)
    theirs = list(expected) if expected is not None else run_reference(model, feeds, reference)
    assert len(ours) == len(theirs), f"{op_type}: {len(ours)} outputs, reference has {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        b = np.asarray(b)
        assert a.dtype == b.dtype, f"{op_type} output {i}: dtype {a.dtype}, expected {b.dtype}"
        assert a.shape == b.shape, f"{op_type} output {i}: shape {a.shape}, expected {b.shape}"
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{op_type} output {i}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{op_type} output {i}")
    return ours
