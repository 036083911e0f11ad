"""Module: runs the training and eval models of a set of artifacts on a CheckpointState."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from onnxtrain import _C
from onnxtrain._logging import logger
from onnxtrain._ortvalue import OrtValue
from onnxtrain._session import SessionOptions, _native_options
from onnxtrain.training.api.checkpoint_state import CheckpointState


def _check_device(device: str) -> None:
    kind, _, index = device.partition(":")
    if kind != "cpu" or (index and not index.isdigit()):
        raise RuntimeError(
            f"device '{device}' is not available: this onnxtrain build trains on the CPU ('cpu' or 'cpu:0')"
        )


def _torch_module() -> Any:
    import sys

    return sys.modules.get("torch")


class _Framework:
    """Which kind of tensor a call's inputs were, so that its outputs come back the same way."""

    NUMPY, ORTVALUE, TORCH = range(3)

    @staticmethod
    def of(values: Sequence[Any]) -> int:
        torch = _torch_module()
        if values and all(isinstance(v, OrtValue) for v in values):
            return _Framework.ORTVALUE
        if torch is not None and values and all(isinstance(v, torch.Tensor) for v in values):
            return _Framework.TORCH
        return _Framework.NUMPY


def _as_engine_input(value: Any) -> Any:
    """What the engine reads in place: the array behind an OrtValue, a torch tensor detached
    from autograd (DLPack refuses tensors that require grad), anything else as numpy sees it."""
    if isinstance(value, OrtValue):
        return value.numpy()
    torch = _torch_module()
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise RuntimeError(f"input on device '{value.device}': onnxtrain trains on the CPU")
        return value.detach() if value.is_contiguous() else value.detach().contiguous()
    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        return np.from_dlpack(value)
    return np.asarray(value, order="C")


def _as_framework(array: np.ndarray, framework: int) -> Any:
    if framework == _Framework.ORTVALUE:
        return OrtValue(array)
    if framework == _Framework.TORCH:
        return _torch_module().from_numpy(array)
    return array


class Module:
    """The training model (forward, loss, backward) and eval model of a set of artifacts.

    ``model(*inputs)`` runs the model of the current mode: in training mode it also adds
    the gradients into the state (overwriting them after ``lazy_reset_grad()``). numpy
    inputs give numpy outputs; torch tensors or OrtValues give torch tensors or OrtValues that
    share the engine's memory. One output comes back as itself, several as a tuple.
    """

    def __init__(
        self,
        train_model_uri: str | os.PathLike[str],
        state: CheckpointState,
        eval_model_uri: str | os.PathLike[str] | None = None,
        device: str = "cpu",
        session_options: SessionOptions | None = None,
    ) -> None:
        if not isinstance(state, CheckpointState):
            raise TypeError(f"Module takes a CheckpointState, not {type(state).__name__}")
        _check_device(device)
        if session_options is not None and not isinstance(session_options, SessionOptions):
            raise TypeError(f"session_options must be an onnxtrain.SessionOptions, got {type(session_options).__name__}")
        eval_path = os.fspath(eval_model_uri) if eval_model_uri is not None else ""
        self._state = state
        self._module = _C.Module(os.fspath(train_model_uri), state._state, eval_path, _native_options(session_options))
        self.training = True
        logger.info("loaded training model %s%s: inputs %s", os.fspath(train_model_uri),
                    f" and eval model {eval_path}" if eval_path else "", self._module.input_names(True))

    def train(self, mode: bool = True) -> Module:
        """Training mode (forward, loss and gradients) or, with ``mode=False``, eval mode."""
        self.training = bool(mode)
        return self

    def eval(self) -> Module:
        """Eval mode: forward and loss only, on the eval model."""
        return self.train(False)

    def __call__(self, *user_inputs: Any) -> Any:
        run = self._module.train_step if self.training else self._module.eval_step
        for v in user_inputs:
            if type(v) is not np.ndarray:
                break
        else:
            # The common case, kept short: a step of a small model takes tens of microseconds.
            # The engine reads any C-contiguous array in place and asks for a copy of others.
            outputs = run([v if v.flags.c_contiguous else np.ascontiguousarray(v) for v in user_inputs])
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        framework = _Framework.of(user_inputs)
        outputs = [_as_framework(a, framework) for a in run([_as_engine_input(v) for v in user_inputs])]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def input_names(self) -> list[str]:
        """The user inputs of the current mode's model, in the order ``__call__`` takes them."""
        return self._module.input_names(self.training)

    def output_names(self) -> list[str]:
        """The outputs of the current mode's model, in the order ``__call__`` returns them."""
        return self._module.output_names(self.training)

    def lazy_reset_grad(self) -> None:
        """The next training call overwrites the gradients instead of adding to them."""
        self._module.lazy_reset_grad()

    def get_parameters_size(self, trainable_only: bool = True) -> int:
        """The number of parameter elements (of the trainable parameters, or of all)."""
        return self._module.parameters_size(trainable_only)

    def get_contiguous_parameters(self, trainable_only: bool = False) -> OrtValue:
        """All parameters (or the trainable ones), in model order, in one flat buffer (a copy)."""
        return OrtValue(np.asarray(self._module.contiguous_parameters(trainable_only)))

    def copy_buffer_to_parameters(self, buffer: Any, trainable_only: bool = True) -> None:
        """Writes a buffer laid out as ``get_contiguous_parameters(trainable_only)`` back."""
        self._module.copy_buffer_to_parameters(_as_engine_input(buffer), trainable_only)

    def export_model_for_inferencing(
        self, inference_model_uri: str | os.PathLike[str], graph_output_names: Sequence[str]
    ) -> None:
        """Writes an inference model computing ``graph_output_names`` with the current parameters."""
        if isinstance(graph_output_names, str):
            graph_output_names = [graph_output_names]
        self._module.export_model_for_inferencing(os.fspath(inference_model_uri), list(graph_output_names))
        logger.info("exported inference model %s with outputs %s", os.fspath(inference_model_uri),
                    list(graph_output_names))
