"""The training API of ``onnxruntime.training.api``: CheckpointState, Module, Optimizer and
LinearLRScheduler."""

from onnxtrain._ortvalue import OrtValue
from onnxtrain.training.api.checkpoint_state import CheckpointState
from onnxtrain.training.api.lr_scheduler import LinearLRScheduler
from onnxtrain.training.api.module import Module
from onnxtrain.training.api.optimizer import Optimizer

__all__ = ["CheckpointState", "LinearLRScheduler", "Module", "Optimizer", "OrtValue"]
