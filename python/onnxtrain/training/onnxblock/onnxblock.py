"""``ForwardBlock`` and ``TrainingBlock``: blocks that turn what they build into models.

``ForwardBlock`` keeps the forward model whose outputs are what ``build`` returns.
``TrainingBlock`` keeps the training model (forward, loss and the gradients of the
parameters marked by ``requires_grad``) and the eval model (forward and loss), built by
onnxtrain's C++ artifact builder, the one ``generate_artifacts`` uses: the training model
takes the gradient accumulation buffers and ``lazy_reset_grad`` and returns the accumulated
gradients, as ``onnxtrain.training.api.Module`` expects.
"""

from __future__ import annotations

import abc
import os
import tempfile
import warnings
from typing import Any, Optional

import onnx

from onnxtrain.training.onnxblock import _artifact_builder, _graph_utils
from onnxtrain.training.onnxblock import model_accessor as _accessor
from onnxtrain.training.onnxblock.blocks import Block

_FLOATING = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def _run_build(block: Block, args: tuple, kwargs: dict) -> tuple[_accessor.ModelAccessor, list[str]]:
    """Runs ``block.build`` on the base; returns the accessor and the output names."""
    accessor = _accessor.current()
    block.base = accessor.model
    accessor.depth += 1
    try:
        output = block.build(*args, **kwargs)
    finally:
        accessor.depth -= 1
    who = type(block).__name__
    names = _graph_utils.output_names(output, who)
    _graph_utils.register_graph_outputs(block.base, names, f"{who}.build returned an output that")
    if accessor.depth == 0:
        accessor.check()
    return accessor, names


class ForwardBlock(Block):
    """A block that builds a forward model: the names ``build`` returns become the graph
    outputs (and only they); ``to_model_proto()`` returns the model."""

    def __init__(self) -> None:
        super().__init__()
        self._model: Optional[onnx.ModelProto] = None

    @abc.abstractmethod
    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Appends the forward graph to ``self.base``; returns its output name(s)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        accessor, names = _run_build(self, args, kwargs)
        self._model = onnx.ModelProto()
        self._model.CopyFrom(accessor.model)
        return names[0] if len(names) == 1 else tuple(names)

    def to_model_proto(self) -> onnx.ModelProto:
        """The forward model. Raises RuntimeError before the block was called."""
        if self._model is None:
            raise RuntimeError(f"{type(self).__name__}.to_model_proto(): the block is not built yet; call it inside "
                               "`with onnxblock.base(model):` first")
        return self._model


class TrainingBlock(Block):
    """A block whose ``build`` returns the loss to differentiate (optionally followed by more
    outputs to keep). ``requires_grad(name)`` marks the initializers that get gradients
    (none by default); calling the block builds the training and eval models."""

    def __init__(self) -> None:
        super().__init__()
        self._requires_grad: dict[str, bool] = {}
        self._parameters: Optional[tuple[list[onnx.TensorProto], list[onnx.TensorProto]]] = None
        self._training_model: Optional[onnx.ModelProto] = None
        self._eval_model: Optional[onnx.ModelProto] = None

    @abc.abstractmethod
    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Appends forward and loss to ``self.base``; returns the loss name (or the loss name
        followed by other outputs to keep)."""

    def requires_grad(self, argument_name: str, value: bool = True) -> None:
        """Marks the initializer ``argument_name`` as trained (``value=True``) or frozen (a
        parameter without gradient). The name is checked when the block is called."""
        if not isinstance(argument_name, str):
            raise TypeError(f"requires_grad: expected an initializer name, got {type(argument_name).__name__}")
        self._requires_grad[argument_name] = bool(value)

    def parameters(self) -> tuple[list[onnx.TensorProto], list[onnx.TensorProto]]:
        """``(trainable, frozen)``: the initializers marked ``requires_grad(name)`` and those
        marked ``requires_grad(name, False)`` (inputs of the models, without gradients; the
        initializers marked neither stay constants of the models, as in
        ``generate_artifacts``). Raises RuntimeError before the block was called."""
        if self._parameters is None:
            raise RuntimeError(f"{type(self).__name__}.parameters(): the block is not built yet; call it inside "
                               "`with onnxblock.base(model):` first")
        return self._parameters

    def to_model_proto(self) -> tuple[onnx.ModelProto, onnx.ModelProto]:
        """``(training_model, eval_model)``. Raises RuntimeError before the block was called."""
        if self._training_model is None or self._eval_model is None:
            raise RuntimeError(f"{type(self).__name__}.to_model_proto(): the block is not built yet; call it inside "
                               "`with onnxblock.base(model):` first")
        return self._training_model, self._eval_model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        accessor, names = _run_build(self, args, kwargs)
        trainable, frozen = self._split_parameters(accessor.model)
        if not trainable:
            raise ValueError(f"{type(self).__name__}: no initializer requires a gradient; mark the parameters to "
                             "train with block.requires_grad(name) before calling the block")
        training, evaluation = _build_models(accessor, names, [t.name for t in trainable], [t.name for t in frozen])
        self._parameters = (trainable, frozen)
        self._training_model, self._eval_model = training, evaluation
        if not accessor.has_path:
            accessor.model.CopyFrom(training)  # as onnxruntime's: the base becomes the training model
        return names[0] if len(names) == 1 else tuple(names)

    def _split_parameters(self, model: onnx.ModelProto) -> tuple[list[onnx.TensorProto], list[onnx.TensorProto]]:
        """The initializers marked trainable and those marked frozen, in the model's order.
        Initializers marked neither stay constants of the models (the C++ builder warns
        about floating-point ones)."""
        initializers: dict[str, onnx.TensorProto] = {}
        for tensor in model.graph.initializer:
            initializers.setdefault(tensor.name, tensor)
        unknown = [name for name in self._requires_grad if name not in initializers]
        if unknown:
            known = list(initializers)
            shown = known if len(known) <= 20 else known[:20] + ["..."]
            raise ValueError(f"{type(self).__name__}.requires_grad: {unknown} not initializers (parameters) of the "
                             f"model; its initializers: {shown}")
        trainable: list[onnx.TensorProto] = []
        frozen: list[onnx.TensorProto] = []
        for name, tensor in initializers.items():
            if name not in self._requires_grad:
                continue
            if self._requires_grad[name] and tensor.data_type not in _FLOATING:
                raise ValueError(f"{type(self).__name__}.requires_grad: '{name}' holds "
                                 f"{onnx.helper.tensor_dtype_to_string(tensor.data_type)} values; only "
                                 "floating-point parameters can be trained")
            (trainable if self._requires_grad[name] else frozen).append(tensor)
        return trainable, frozen


def _build_models(accessor: _accessor.ModelAccessor, outputs: list[str], trainable: list[str],
                  frozen: list[str]) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The training and eval models of the base whose output ``outputs[0]`` is the loss, by
    the C++ artifact builder."""
    options = _artifact_builder.base_options(loss_input_names=[outputs[0]], additional_output_names=outputs[1:],
                                      requires_grad=trainable, frozen_params=frozen)
    with tempfile.TemporaryDirectory(prefix="onnxblock-") as folder:
        for message in _artifact_builder.generate(accessor, folder, options):
            warnings.warn(message, stacklevel=3)
        return (onnx.load_model(os.path.join(folder, "training_model.onnx")),
                onnx.load_model(os.path.join(folder, "eval_model.onnx")))


__all__ = ["ForwardBlock", "TrainingBlock"]
