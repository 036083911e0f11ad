"""Optimizer: applies the optimizer model (AdamW or SGD) to a Module's parameters."""

from __future__ import annotations

import os

from onnxtrain import _C
from onnxtrain.training.api.module import Module


class Optimizer:
    """Updates the module's trainable parameters in place with their gradients.

    ``step()`` before any training call raises ValueError: there is nothing to apply.
    """

    def __init__(self, optimizer_uri: str | os.PathLike[str], module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"Optimizer takes a Module, not {type(module).__name__}")
        self._module = module
        self._optimizer = _C.Optimizer(os.fspath(optimizer_uri), module._module)

    def step(self) -> None:
        self._optimizer.step()

    def set_learning_rate(self, learning_rate: float) -> None:
        self._optimizer.set_learning_rate(float(learning_rate))

    def get_learning_rate(self) -> float:
        return self._optimizer.learning_rate()
