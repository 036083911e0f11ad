"""LinearLRScheduler: linear warm-up from 0 to ``initial_lr``, then linear decay to 0."""

from __future__ import annotations

from onnxtrain import _C
from onnxtrain.training.api.optimizer import Optimizer


class LinearLRScheduler:
    """Sets the optimizer's learning rate from its step count; call ``step()`` after each
    ``optimizer.step()``. A resumed optimizer (step count from the checkpoint) continues
    the schedule where it stopped."""

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int, initial_lr: float) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"LinearLRScheduler takes an Optimizer, not {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._scheduler = _C.LinearLRScheduler(
            optimizer._optimizer, int(warmup_step_count), int(total_step_count), float(initial_lr)
        )

    def step(self) -> None:
        self._scheduler.step()
