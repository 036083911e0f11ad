"""Building blocks for training graphs, shaped like ``onnxruntime.training.onnxblock``.

- ``Block``: the unit; ``ForwardBlock`` keeps a forward model, ``TrainingBlock`` the
  training and eval models built from it by onnxtrain's C++ gradient builder.
- ``base(model)`` / ``empty_base()``: the model the blocks called inside build on.
- ``blocks``: one-op blocks (``Add``, ``Mul``, ``Constant``, ``ReduceMean``, ...), ``Linear``
  and ``ReduceAllL2``.
- ``loss``: ``MSELoss``, ``CrossEntropyLoss``, ``BCEWithLogitsLoss``, ``L1Loss``,
  ``HuberLoss``, ``SmoothL1Loss``, ``KLDivLoss``, ``NLLLoss`` (as blocks, and as the
  ``loss=`` of ``generate_artifacts``).
- ``optim``: ``AdamW``, ``SGD`` (as blocks building optimizer models, and as the
  ``optimizer=`` of ``generate_artifacts``) and ``ClipGradNorm``.
- ``save_checkpoint(parameters, path)``, ``load_checkpoint_to_model(path, model)``.
"""

from onnxtrain.training.onnxblock import blocks, loss, optim
from onnxtrain.training.onnxblock.blocks import Block, Linear, ReduceAllL2
from onnxtrain.training.onnxblock.checkpoint_utils import load_checkpoint_to_model, save_checkpoint
from onnxtrain.training.onnxblock.model_accessor import base, empty_base
from onnxtrain.training.onnxblock.onnxblock import ForwardBlock, TrainingBlock

__all__ = [
    "Block", "ForwardBlock", "Linear", "ReduceAllL2", "TrainingBlock", "base", "blocks", "empty_base",
    "load_checkpoint_to_model", "loss", "optim", "save_checkpoint",
]
