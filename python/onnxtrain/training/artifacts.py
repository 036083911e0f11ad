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
import warnings
from collections.abc import Sequence
from typing import Any, Optional, Union

import onnx

from onnxtrain._logging import logger
from onnxtrain.training.onnxblock import _artifact_builder, _graph_utils
from onnxtrain.training.onnxblock import blocks as _blocks
from onnxtrain.training.onnxblock import loss as _loss
from onnxtrain.training.onnxblock import model_accessor as _accessor
from onnxtrain.training.onnxblock import optim as _optim



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


def _loss_options(loss: Any) -> Optional[dict]:
    """The C++ loss builder's options for ``loss``, or None when the loss is a block to build
    in Python (a custom block, or a loss block the C++ builder does not have)."""
    if loss is None:
        return {"loss": "none"}
    if isinstance(loss, LossType):
        loss = _LOSSES[loss]()
    if isinstance(loss, _loss._Loss):
        return loss._options()
    if isinstance(loss, _blocks.Block):
        return None
    raise TypeError(f"loss must be a LossType, an onnxblock Block (such as an onnxblock.loss object) or None, got "
                    f"{type(loss).__name__}")


def _optimizer_options(optimizer: Any) -> dict:
    if optimizer is None:
        return {"optimizer": None}
    if isinstance(optimizer, OptimType):
        optimizer = _OPTIMIZERS[optimizer]()
    if isinstance(optimizer, _optim._Optimizer):
        return optimizer._options()
    raise TypeError(
        f"optimizer must be an OptimType, an onnxblock.optim.AdamW/SGD block or None, got {type(optimizer).__name__}"
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
    clip_grad: Optional[Union[float, "_optim.ClipGradNorm"]] = None,
) -> None:
    """Writes the training artifacts of ``model`` into ``artifact_directory``.

    Args:
        model: an ``onnx.ModelProto`` or the path of a model file (models with external
            data and over 2 GB work; give their path).
        requires_grad: the initializers to train. ``None``: every floating-point initializer
            not in ``frozen_params`` that the loss depends on.
        frozen_params: initializers kept fixed (in the checkpoint, without gradients).
            Initializers in neither list stay constants of the models, with a warning.
        loss: a ``LossType``, an ``onnxblock.loss`` block (``MSELoss``,
            ``CrossEntropyLoss(ignore_index=...)``, ``HuberLoss(delta=...)``, ...), a custom
            ``onnxblock.Block`` (called with ``loss_input_names``, default: all model
            outputs; it returns the loss name, optionally followed by outputs to keep), or
            ``None`` when the model's first output (or ``loss_input_names[0]``) already is
            the loss. A loss that is not a scalar is differentiated through its sum.
        optimizer: an ``OptimType`` or an ``onnxblock.optim`` block (``AdamW``, ``SGD``);
            ``None`` writes no optimizer model.
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
        loss_input_names: the model output(s) that feed the loss (default: the first; for a
            custom block, all).
        clip_grad: onnxtrain's extra (default: no clipping). An
            ``onnxblock.optim.ClipGradNorm`` (or its ``max_norm``): the optimizer model scales
            the gradients to a global L2 norm of at most ``max_norm`` before each update, as
            ``torch.nn.utils.clip_grad_norm_``. The same as ``optimizer=AdamW(clip_grad=...)``;
            give it in one place only.

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
    options = _artifact_builder.base_options(
        requires_grad=_names("requires_grad", requires_grad),
        frozen_params=_names("frozen_params", frozen_params),
        additional_output_names=_names("additional_output_names", additional_output_names),
        loss_input_names=_names("loss_input_names", loss_input_names),
        prefix=prefix,
        nominal_checkpoint=bool(nominal_checkpoint),
    )
    options.update(_optimizer_options(optimizer))
    if clip_grad is not None:
        if optimizer is None:
            raise ValueError("generate_artifacts: clip_grad needs an optimizer (clipping happens in the optimizer model)")
        if options.get("max_grad_norm") is not None:
            raise ValueError("generate_artifacts: clip_grad is given twice, here and in the optimizer block; keep one")
        options.update(_optim._clip_options(clip_grad))
    directory = os.fspath(artifact_directory) if artifact_directory is not None else os.getcwd()
    if not isinstance(model, (onnx.ModelProto, str, os.PathLike)):
        raise TypeError(f"model must be an onnx.ModelProto or a path, got {type(model).__name__}")

    cpp_loss = _loss_options(loss)
    if cpp_loss is not None:
        options.update(cpp_loss)
        found = _artifact_builder.generate(model, directory, options)
    else:
        with _accessor.base(model) as accessor:
            assert isinstance(loss, _blocks.Block)  # _loss_options returned None: a block to build here
            _build_loss(accessor, loss, options)
            found = _artifact_builder.generate(accessor, directory, options)
    for message in found:
        warnings.warn(message, stacklevel=2)
    written = [f"{prefix}{name}" for name in ("training_model.onnx", "eval_model.onnx")]
    if options["optimizer"] is not None:
        written.append(f"{prefix}optimizer_model.onnx")
    written.append(f"{prefix}checkpoint")
    if nominal_checkpoint:
        written.append(f"{prefix}nominal_checkpoint")
    logger.info("generated artifacts in %s: %s (loss %s, optimizer %s)", directory, ", ".join(written),
                type(loss).__name__ if isinstance(loss, _blocks.Block) else getattr(loss, "name", None),
                options["optimizer"])


def _build_loss(accessor: _accessor.ModelAccessor, loss: _blocks.Block, options: dict) -> None:
    """Appends the loss block to the base and points the options at its output. A loss of
    onnxblock.loss takes the first model output by default (as the builtin losses do); any
    other block takes all of them (as onnxruntime's generate_artifacts passes them)."""
    model = accessor.model
    inputs = options["loss_input_names"]
    if not inputs:
        outputs = [o.name for o in model.graph.output]
        if not outputs:
            raise ValueError("generate_artifacts: the model has no outputs to feed the loss")
        inputs = outputs[:1] if isinstance(loss, _loss._Loss) else outputs
    who = type(loss).__name__
    _graph_utils.require_values(model, inputs, f"generate_artifacts(loss={who}(...)): loss_input_names")
    names = _graph_utils.output_names(loss(*inputs), who)
    _graph_utils.require_values(model, names, f"{who}.build returned an output that")
    loss_name = names[0]
    if loss_name != "loss" and "loss" not in _graph_utils.value_names(model.graph):
        # The builtin losses' output name, so that training loops see the same interface.
        model.graph.node.append(onnx.helper.make_node("Identity", [loss_name], ["loss"], name="loss::Identity"))
        loss_name = "loss"
    options["loss"] = "none"
    options["loss_input_names"] = [loss_name]
    options["additional_output_names"] = names[1:] + options["additional_output_names"]


__all__ = ["LossType", "OptimType", "generate_artifacts"]
