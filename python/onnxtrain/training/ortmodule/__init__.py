"""The PyTorch frontend, shaped like ``onnxruntime.training.ortmodule``: change the import
line only.

::

    from onnxtrain.training.ortmodule import ORTModule, DebugOptions, LogLevel
    model = ORTModule(model)          # then train it as before: loss.backward(), torch.optim, ...
"""

from onnxtrain.training.ortmodule.options import DebugOptions, FallbackPolicy, LogLevel
from onnxtrain.training.ortmodule.ortmodule import ORTModule

__all__ = ["DebugOptions", "FallbackPolicy", "LogLevel", "ORTModule"]
