"""On-device training, shaped like ``onnxruntime.training``: change the import line only.

``onnxtrain.training.api`` holds the training state and loop (``CheckpointState``, ...);
``ModuleGraphBuilder`` and ``TrainingAgent`` run a gradient model as a forward and a
backward partial run; ``onnxtrain.training.ortmodule`` trains PyTorch modules with them.
"""

from onnxtrain.training import api
from onnxtrain.training import artifacts, onnxblock
from onnxtrain.training.agent import GraphInfo, ModuleGraphBuilder, TrainingAgent
from onnxtrain.training.artifacts import LossType, OptimType, generate_artifacts

__all__ = ["api"]
__all__ += ["LossType", "OptimType", "artifacts", "generate_artifacts", "onnxblock"]
__all__ += ["GraphInfo", "ModuleGraphBuilder", "TrainingAgent"]
