"""Gradient graphs: ``build_gradient_graph`` turns a forward ONNX model into one that also
computes gradients, as plain ONNX that any runtime can run."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Union

import onnx

from onnxtrain import _C

ModelLike = Union[onnx.ModelProto, bytes, str, "os.PathLike[str]"]


def build_gradient_graph(
    model: ModelLike,
    wrt: Sequence[str],
    outputs: str | Sequence[str] | None = None,
) -> onnx.ModelProto:
    """Returns ``model`` extended with the gradients of ``wrt``.

    Args:
        model: an ``onnx.ModelProto``, its serialized bytes, or the path of a model file
            (external data is read beside it).
        wrt: the values to differentiate: initializers (parameters), graph inputs, or any
            other floating-point value of the graph.
        outputs: where the gradient starts.

            - ``None``: the model's only output is a scalar loss, seeded with 1.
            - a ``str``: the name of the scalar loss output, seeded with 1.
            - a sequence of names: outputs whose incoming gradients the caller feeds; the
              model gets one new input ``<output>_grad`` per output, of its type and shape.

    Returns:
        The forward model (some nodes may gain optional outputs their gradients need,
        e.g. MaxPool's Indices) plus one output ``<value>_grad`` per value of ``wrt`` that
        has a gradient. A value that does not reach the outputs through floating-point
        values has no gradient, and no output: it is absent, not zeros. Ops onnxtrain adds
        that standard ONNX lacks live in the domain ``org.onnxtrain`` and are defined in
        the model as functions of standard ONNX ops.

    Raises:
        ValueError: an unknown name, a non-scalar loss, or an integer value in ``wrt``.
        RuntimeError: a differentiated value reaches an op without a gradient rule (the
            message names the op, the node and the path to the output), or the model is
            malformed.
    """
    if isinstance(wrt, str):
        raise TypeError("wrt must be a sequence of value names, not a str")
    loss = ""
    start: list[str] = []
    if isinstance(outputs, str):
        loss = outputs
    elif outputs is not None:
        start = list(outputs)
        if not start:
            raise ValueError("outputs is empty: pass None to start from the model's only output")
    result = _C.build_gradient_graph(model_source(model), list(wrt), loss, start)
    return onnx.load_from_string(result)


def model_source(model: ModelLike) -> bytes | str:
    """What the engine loads a model from: its serialized bytes, or its path (external data
    is then read beside it)."""
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    return os.fspath(model)
