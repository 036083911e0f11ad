"""Checkpoints from onnxblock's parameters, as ``onnxruntime.training.onnxblock`` has them:
``save_checkpoint(training_block.parameters(), path)`` and ``load_checkpoint_to_model``.

The file is onnxtrain's checkpoint (one safetensors file), which
``CheckpointState.load_checkpoint`` reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxtrain import _C, _dtypes
from onnxtrain._logging import logger


def save_checkpoint(
    parameters: tuple[Sequence[onnx.TensorProto], Sequence[onnx.TensorProto]],
    path_to_checkpoint: Union[str, "os.PathLike[str]"],
    nominal_checkpoint: bool = False,
) -> None:
    """Saves ``(trainable, frozen)`` parameters (what ``TrainingBlock.parameters()`` returns)
    as a checkpoint, atomically; ``nominal_checkpoint=True`` keeps only their names, shapes and
    types. The checkpoint has no optimizer state (the Optimizer starts one at step 0).

    Raises:
        TypeError: ``parameters`` is not a pair of lists of ``onnx.TensorProto``.
        ValueError: a name given twice, or a trainable parameter that is not floating-point.
        RuntimeError: the file cannot be written.
    """
    if parameters is None:
        raise TypeError("save_checkpoint: no parameters given; pass (trainable, frozen), as "
                        "TrainingBlock.parameters() returns them")
    if not (isinstance(parameters, (tuple, list)) and len(parameters) == 2
            and all(isinstance(p, (tuple, list)) for p in parameters)):
        raise TypeError("save_checkpoint: parameters must be a pair (trainable, frozen) of lists of onnx.TensorProto")
    trainable, frozen = (list(p) for p in parameters)
    for tensor in trainable + frozen:
        if not isinstance(tensor, onnx.TensorProto):
            raise TypeError(f"save_checkpoint: parameters are onnx.TensorProto, got {type(tensor).__name__}")
    names = [t.name for t in trainable + frozen]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"save_checkpoint: parameters {doubled} are given more than once")
    # The checkpoint builder reads initializers of a model: a graph of the parameters alone.
    graph = helper.make_graph([], "parameters", [], [], initializer=trainable + frozen)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    state = _C.checkpoint_from_model(model.SerializeToString(), [t.name for t in trainable],
                                     [t.name for t in frozen])
    path = os.fspath(path_to_checkpoint)
    if nominal_checkpoint:
        _C.save_nominal_checkpoint(state, path)
    else:
        _C.save_checkpoint(state, path, False)
    logger.info("saved %scheckpoint %s: %d trainable and %d frozen parameters",
                "nominal " if nominal_checkpoint else "", path, len(trainable), len(frozen))


def load_checkpoint_to_model(path_to_checkpoint: Union[str, "os.PathLike[str]"], model: onnx.ModelProto) -> None:
    """Writes the checkpoint's parameter values into the initializers of ``model`` that have
    their names (in place), e.g. to run an inference model with trained weights.

    Raises:
        ValueError: a parameter whose shape or type differs from the initializer's.
        RuntimeError: the checkpoint cannot be read, or is nominal (it holds no values).
    """
    state = _C.load_checkpoint(os.fspath(path_to_checkpoint), True)
    if state.is_nominal:
        raise RuntimeError(f"{os.fspath(path_to_checkpoint)} is a nominal checkpoint: it holds no values to load")
    replaced = 0
    for index, initializer in enumerate(model.graph.initializer):
        if not state.has_parameter(initializer.name):
            continue
        # Types numpy lacks (bfloat16, float8, 4-bit) come out as bits: view them as ml_dtypes.
        data = _dtypes.from_bits(np.asarray(state.parameter_data(initializer.name)),
                                 state.parameter_dtype(initializer.name))
        tensor = numpy_helper.from_array(data, initializer.name)
        if tensor.data_type != initializer.data_type or list(tensor.dims) != list(initializer.dims):
            raise ValueError(
                f"load_checkpoint_to_model: parameter '{initializer.name}' is "
                f"{helper.tensor_dtype_to_string(tensor.data_type)}{list(tensor.dims)} in the checkpoint, but "
                f"{helper.tensor_dtype_to_string(initializer.data_type)}{list(initializer.dims)} in the model")
        model.graph.initializer[index].CopyFrom(tensor)
        replaced += 1
    logger.info("loaded %d parameters of %s into the model", replaced, os.fspath(path_to_checkpoint))


__all__ = ["load_checkpoint_to_model", "save_checkpoint"]
