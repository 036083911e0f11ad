"""Building blocks for training graphs, shaped like ``onnxruntime.training.onnxblock``.

- ``Block``: the unit; ``ForwardBlock`` keeps a forward model, ``TrainingBlock`` the
  training and eval models built from it by onnxtrain's C++ gradient builder.
- ``base(model)`` / ``empty_base()``: the model the blocks called inside build on.
- ``blocks``: one-op blocks (``Add``, ``Mul``, ``Constant``, ``ReduceMean``, ...).
- ``loss``: ``MSELoss``, ``CrossEntropyLoss``, ``BCEWithLogitsLoss``, ``L1Loss``,
  ``HuberLoss``, ``SmoothL1Loss``, ``KLDivLoss``, ``NLLLoss`` (as blocks, and as the
  ``loss=`` of ``generate_artifacts``).
- ``optim``: ``AdamW``, ``SGD`` (as blocks building optimizer models, and as the
  ``optimizer=`` of ``generate_artifacts``).
"""

from onnxtrain.training.onnxblock import blocks, loss, optim
from onnxtrain.training.onnxblock.blocks import Block
from onnxtrain.training.onnxblock.model_accessor import base, empty_base
from onnxtrain.training.onnxblock.onnxblock import ForwardBlock, TrainingBlock

__all__ = ["Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "empty_base", "loss", "optim"]
