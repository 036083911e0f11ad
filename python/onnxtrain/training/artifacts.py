"""Training artifacts: ``generate_artifacts`` turns a forward ONNX model into the files that
on-device training runs on, as ``onnxruntime.training.artifacts.generate_artifacts`` did.

The artifacts are plain ONNX: ``training_model.onnx`` (forward, loss, gradients accumulated
into per-parameter buffers), ``eval_model.onnx`` (forward and loss), ``optimizer_model.onnx``
(one update step for every trainable parameter) and ``checkpoint`` (a safetensors file with
the parameters and the optimizer's initial state). The ops onnxtrain adds live in the domain
``org.onnxtrain`` as model-local functions of standard ONNX ops, so stock onnxruntime runs
every model too.
"""

from __future__ import annotations

import enum
import os
import tempfile
import warnings
from collections.abc import Sequence
from typing import Any, Optional, Union

import onnx

from onnxtrain import _C
from onnxtrain.training.onnxblock import loss as _loss
from onnxtrain.training.onnxblock import optim as _optim

_PROTOBUF_LIMIT = 2**31 - 1


class LossType(enum.Enum):
    """The builtin losses (default options; pass an ``onnxblock.loss`` object for others)."""

    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(enum.Enum):
    """The builtin optimizers (default options; pass an ``onnxblock.optim`` object for others)."""

    AdamW = 1
    SGD = 2


_LOSSES = {
    LossType.MSELoss: _loss.MSELoss,
    LossType.CrossEntropyLoss: _loss.CrossEntropyLoss,
    LossType.BCEWithLogitsLoss: _loss.BCEWithLogitsLoss,
    LossType.L1Loss: _loss.L1Loss,
}
_OPTIMIZERS = {OptimType.AdamW: _optim.AdamW, OptimType.SGD: _optim.SGD}


def _loss_options(loss: Any) -> dict:
    if loss is None:
        return {"loss": "none"}
    if isinstance(loss, LossType):
        loss = _LOSSES[loss]()
    if isinstance(loss, _loss._Loss):
        return loss._options()
    if callable(getattr(loss, "build", None)):
        raise NotImplementedError(
            f"loss={type(loss).__name__}(...): custom onnxblock loss blocks are not supported yet; "
            "use a LossType or an onnxtrain.training.onnxblock.loss object"
        )
    raise TypeError(f"loss must be a LossType, an onnxblock.loss object or None, got {type(loss).__name__}")


def _optimizer_options(optimizer: Any) -> dict:
    if optimizer is None:
        return {"optimizer": None}
    if isinstance(optimizer, OptimType):
        optimizer = _OPTIMIZERS[optimizer]()
    if isinstance(optimizer, (_optim.AdamW, _optim.SGD)):
        return optimizer._options()
    raise TypeError(
        f"optimizer must be an OptimType, an onnxblock.optim.AdamW/SGD object or None, got {type(optimizer).__name__}"
    )


def _names(argument: str, names: Optional[Sequence[str]]) -> list[str]:
    if names is None:
        return []
    if isinstance(names, str):
        raise TypeError(f"{argument} must be a list of names, not a str")
    return [str(n) for n in names]


def generate_artifacts(
    model: Union[onnx.ModelProto, str, "os.PathLike[str]"],
    requires_grad: Optional[Sequence[str]] = None,
    frozen_params: Optional[Sequence[str]] = None,
    loss: Optional[Union[LossType, Any]] = None,
    optimizer: Optional[Union[OptimType, Any]] = None,
    artifact_directory: Optional[Union[str, "os.PathLike[str]"]] = None,
    prefix: str = "",
    ort_format: bool = False,
    custom_op_library: Optional[Union[str, "os.PathLike[str]"]] = None,
    additional_output_names: Optional[Sequence[str]] = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Optional[Sequence[str]] = None,
) -> None:
    """Writes the training artifacts of ``model`` into ``artifact_directory``.

    Args:
        model: an ``onnx.ModelProto`` or the path of a model file (models with external
            data and over 2 GB work; give their path).
        requires_grad: the initializers to train. ``None``: every floating-point initializer
            not in ``frozen_params`` that the loss depends on.
        frozen_params: initializers kept fixed (in the checkpoint, without gradients).
            Initializers in neither list stay constants of the models, with a warning.
        loss: a ``LossType``, an ``onnxblock.loss`` object (``MSELoss``,
            ``CrossEntropyLoss(ignore_index=...)``, ...) or ``None`` when the model's first
            output (or ``loss_input_names[0]``) already is the loss.
        optimizer: an ``OptimType`` or an ``onnxblock.optim`` object; ``None`` writes no
            optimizer model.
        artifact_directory: where the files go (created if needed; default: the current
            directory).
        prefix: prepended to every file name.
        ort_format: must be ``False``: onnxtrain has no ONNX Runtime flatbuffer format.
        custom_op_library: not used (onnxtrain does not load custom-op libraries); a
            warning says so.
        additional_output_names: model values kept as outputs of the training and eval
            models, after the loss.
        nominal_checkpoint: also write ``nominal_checkpoint`` (names, shapes and types, no
            data).
        loss_input_names: the model output(s) that feed the loss (default: the first).

    Raises:
        ValueError: an unknown or doubly listed name, a non-float trainable parameter, a
            loss input of the wrong type, ``ort_format=True``.
        RuntimeError: the model cannot be differentiated (an op without a gradient rule on
            the way to the loss; the message names it) or the files cannot be written.
    """
    if ort_format:
        raise ValueError(
            "generate_artifacts(ort_format=True): onnxtrain has no ONNX Runtime flatbuffer (.ort) format; its "
            "artifacts are plain ONNX models that onnxtrain and stock onnxruntime both run. Pass ort_format=False."
        )
    if custom_op_library is not None:
        warnings.warn(
            f"custom_op_library={os.fspath(custom_op_library)!r} is ignored: onnxtrain does not load custom-op "
            "libraries; ops it does not know fail when differentiated or run",
            stacklevel=2,
        )
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    options: dict[str, Any] = {
        "requires_grad": _names("requires_grad", requires_grad),
        "frozen_params": _names("frozen_params", frozen_params),
        "additional_output_names": _names("additional_output_names", additional_output_names),
        "loss_input_names": _names("loss_input_names", loss_input_names),
        "prefix": prefix,
        "nominal_checkpoint": bool(nominal_checkpoint),
        **_loss_options(loss),
        **_optimizer_options(optimizer),
    }
    directory = os.fspath(artifact_directory) if artifact_directory is not None else os.getcwd()

    if isinstance(model, onnx.ModelProto):
        if model.ByteSize() <= _PROTOBUF_LIMIT:
            found = _C.generate_artifacts(model.SerializeToString(), directory, options, os.getcwd())
        else:
            # Too large to serialize in one piece: hand C++ a file with external data.
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "model.onnx")
                onnx.save_model(model, path, save_as_external_data=True, location="model.onnx.data")
                found = _C.generate_artifacts(path, directory, options)
    elif isinstance(model, (str, os.PathLike)):
        found = _C.generate_artifacts(os.fspath(model), directory, options)
    else:
        raise TypeError(f"model must be an onnx.ModelProto or a path, got {type(model).__name__}")
    for message in found:
        warnings.warn(message, stacklevel=2)


__all__ = ["LossType", "OptimType", "generate_artifacts"]
