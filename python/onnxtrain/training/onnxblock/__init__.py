"""Building blocks for training artifacts, shaped like ``onnxruntime.training.onnxblock``.

``loss`` holds the loss options (``MSELoss``, ``CrossEntropyLoss``, ``BCEWithLogitsLoss``,
``L1Loss``) and ``optim`` the optimizer options (``AdamW``, ``SGD``) that
``generate_artifacts`` accepts as ``loss=`` and ``optimizer=``.
"""

from onnxtrain.training.onnxblock import loss, optim

__all__ = ["loss", "optim"]
