"""On-device training, shaped like ``onnxruntime.training``: change the import line only.

``onnxtrain.training.api`` holds the training state and loop (``CheckpointState``, ...).
"""

from onnxtrain.training import api

__all__ = ["api"]
