"""onnxtrain: run and train ONNX models on a C++ engine.

The inference API follows onnxruntime's::

    import onnxtrain
    session = onnxtrain.InferenceSession("model.onnx")
    outputs = session.run(None, {"input": array})

On-device training lives in ``onnxtrain.training`` (shaped like ``onnxruntime.training``).
``onnxtrain.set_log_level("INFO")`` (or ``ONNXTRAIN_LOG_LEVEL=INFO``) shows what it does.
"""

from onnxtrain._logging import get_log_level, set_log_level
from onnxtrain._ortvalue import OrtValue
from onnxtrain._session import GraphOptimizationLevel, InferenceSession, NodeArg, SessionOptions, supported_ops
from onnxtrain.autodiff import build_gradient_graph

__all__ = [
    "GraphOptimizationLevel", "InferenceSession", "NodeArg", "OrtValue", "SessionOptions", "build_gradient_graph", "get_log_level",
    "set_log_level", "supported_ops",
]
__version__ = "0.1.0"
