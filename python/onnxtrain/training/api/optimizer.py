"""Optimizer: applies the optimizer model (AdamW or SGD) to a Module's parameters."""

from __future__ import annotations

import numbers
import os

from onnxtrain import _C
from onnxtrain._logging import logger
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
        logger.info("loaded optimizer model %s (learning rate %g, step %d)", os.fspath(optimizer_uri),
                    self._optimizer.learning_rate(), self._optimizer.step_count())

    def step(self) -> None:
        """Applies the gradients of the last training call(s) to the parameters, in place."""
        self._optimizer.step()

    def set_learning_rate(self, learning_rate: float) -> None:
        """Sets the learning rate of the next steps (kept in the checkpoint's optimizer state)."""
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real):
            raise TypeError(f"set_learning_rate: learning_rate must be a number, got {type(learning_rate).__name__}")
        self._optimizer.set_learning_rate(float(learning_rate))

    def get_learning_rate(self) -> float:
        """The learning rate of the next step."""
        return self._optimizer.learning_rate()
