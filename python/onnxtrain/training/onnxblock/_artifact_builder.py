"""The C++ artifact builder (``_C.generate_artifacts``) as ``generate_artifacts`` and the
onnxblock training blocks both call it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Union

import onnx

from onnxtrain import _C
from onnxtrain.training.onnxblock import model_accessor as _accessor

def base_options(requires_grad: Sequence[str] = (), frozen_params: Sequence[str] = (),
                  additional_output_names: Sequence[str] = (), loss_input_names: Sequence[str] = (),
                  prefix: str = "", nominal_checkpoint: bool = False) -> dict[str, Any]:
    """The C++ builder's options: no loss added, no optimizer, unless updated."""
    return {
        "requires_grad": list(requires_grad),
        "frozen_params": list(frozen_params),
        "additional_output_names": list(additional_output_names),
        "loss_input_names": list(loss_input_names),
        "prefix": prefix,
        "nominal_checkpoint": nominal_checkpoint,
        "loss": "none",
        "optimizer": None,
    }


def generate(model: Union[onnx.ModelProto, str, "os.PathLike[str]", _accessor.ModelAccessor], directory: str,
              options: dict) -> list[str]:
    """Runs the C++ artifact builder on ``model``; returns its warnings."""
    if isinstance(model, _accessor.ModelAccessor):
        if model.has_path or model.model.ByteSize() > _accessor._PROTOBUF_LIMIT:
            with model.saved() as path:
                return _C.generate_artifacts(path, directory, options)
        model = model.model
    if isinstance(model, onnx.ModelProto):
        if model.ByteSize() <= _accessor._PROTOBUF_LIMIT:
            return _C.generate_artifacts(model.SerializeToString(), directory, options, os.getcwd())
        # Too large to serialize in one piece: hand C++ a file with external data (and leave
        # the caller's model as it was).
        with _accessor.saved_with_external_data(model) as path:
            return _C.generate_artifacts(path, directory, options)
    return _C.generate_artifacts(os.fspath(model), directory, options)
