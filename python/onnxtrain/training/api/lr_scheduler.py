"""LinearLRScheduler: linear warm-up from 0 to ``initial_lr``, then linear decay to 0."""

from __future__ import annotations

import numbers
import warnings

from onnxtrain import _C
from onnxtrain.training.api.optimizer import Optimizer


class LinearLRScheduler:
    """Sets the optimizer's learning rate from its step count ``t``: ``initial_lr * t /
    warmup_step_count`` during the warm-up, then a linear decay that reaches 0 at
    ``total_step_count`` (and stays there). Call ``step()`` after each ``optimizer.step()``.
    A resumed optimizer (step count from the checkpoint) continues the schedule where it
    stopped.

    This is the documented meaning of the arguments. onnxruntime-training 1.19.2's Python
    class hands them to its engine swapped (warm-up = ``total_step_count``), so code tuned
    against it may pass ``warmup_step_count > total_step_count``: that warns, and runs as
    asked (the rate rises over the whole warm-up and is 0 from its end). See
    docs/differences.md.

    Raises:
        TypeError: ``optimizer`` is not an ``Optimizer``, a step count not an int, ``initial_lr`` not a number.
        ValueError: a negative step count, or an ``initial_lr`` that is negative or not finite.
    """

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int, initial_lr: float) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"LinearLRScheduler takes an Optimizer, not {type(optimizer).__name__}")
        for name, count in (("warmup_step_count", warmup_step_count), ("total_step_count", total_step_count)):
            if isinstance(count, bool) or not isinstance(count, numbers.Integral):
                raise TypeError(f"LinearLRScheduler: {name} must be an int, got {type(count).__name__}")
        if isinstance(initial_lr, bool) or not isinstance(initial_lr, numbers.Real):
            raise TypeError(f"LinearLRScheduler: initial_lr must be a number, got {type(initial_lr).__name__}")
        if int(warmup_step_count) > int(total_step_count):
            warnings.warn(
                f"LinearLRScheduler: warmup_step_count ({warmup_step_count}) > total_step_count ({total_step_count}): "
                "the learning rate rises over the warm-up and is 0 from its end, never decaying. onnxtrain follows "
                "the documented meaning of the two counts; onnxruntime-training 1.19.2's Python class swapped them, so "
                "code written for it may pass them swapped (see docs/differences.md)",
                stacklevel=2,
            )
        self._optimizer = optimizer
        self._scheduler = _C.LinearLRScheduler(
            optimizer._optimizer, int(warmup_step_count), int(total_step_count), float(initial_lr)
        )

    def step(self) -> None:
        """Sets the learning rate for the optimizer's next step."""
        self._scheduler.step()
