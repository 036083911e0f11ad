"""The training API of ``onnxruntime.training.api``: CheckpointState (and, as they land,
Module, Optimizer and LinearLRScheduler)."""

from onnxtrain.training.api.checkpoint_state import CheckpointState

__all__ = ["CheckpointState"]
