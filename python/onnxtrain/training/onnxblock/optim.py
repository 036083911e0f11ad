"""Optimizer blocks, as ``onnxruntime.training.onnxblock.optim`` names them.

Pass one as ``generate_artifacts(..., optimizer=AdamW(weight_decay=0.0))``; the optimizer
model then updates the parameters as ``torch.optim`` does with the same options. As a block
it builds that optimizer model for the parameters it is called with::

    with onnxblock.empty_base():
        adamw = AdamW()
        adamw(training_block.parameters())  # or a list of parameters (TensorProto)
        optimizer_model = adamw.to_model_proto()

The model comes from onnxtrain's C++ optimizer-model builder (one ``org.onnxtrain`` step per
parameter, defined in the model as a function of standard ONNX ops).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

import onnx

from onnxtrain import _C
from onnxtrain.training.onnxblock.blocks import Block

ParameterLike = Union[onnx.TensorProto, onnx.ValueInfoProto, tuple]


def _parameter(parameter: ParameterLike) -> tuple[str, int, list[int]]:
    """(name, ONNX element type, static shape) of a parameter."""
    if isinstance(parameter, onnx.TensorProto):
        return parameter.name, parameter.data_type, list(parameter.dims)
    if isinstance(parameter, onnx.ValueInfoProto):
        tensor = parameter.type.tensor_type
        dims = []
        for dim in tensor.shape.dim:
            if not dim.HasField("dim_value"):
                raise ValueError(f"optimizer: parameter '{parameter.name}' has no static shape")
            dims.append(dim.dim_value)
        return parameter.name, tensor.elem_type, dims
    if isinstance(parameter, tuple) and len(parameter) == 3:
        name, elem_type, dims = parameter
        return str(name), int(elem_type), [int(d) for d in dims]
    raise TypeError("optimizer: parameters are onnx.TensorProto, onnx.ValueInfoProto or (name, elem_type, shape), "
                    f"got {type(parameter).__name__}")


def _merge(base: onnx.ModelProto, model: onnx.ModelProto) -> None:
    """Adds ``model`` to ``base``: everything when the base is empty, else its graph."""
    graph = base.graph
    if not (graph.node or graph.input or graph.output or graph.initializer):
        base.CopyFrom(model)
        return
    versions = {o.domain: o.version for o in base.opset_import}
    for entry in model.opset_import:
        if entry.domain in versions and versions[entry.domain] != entry.version:
            raise ValueError(f"optimizer: the base model imports opset {versions[entry.domain]} of domain "
                             f"'{entry.domain}', the optimizer model {entry.version}; build it on empty_base()")
        if entry.domain not in versions:
            base.opset_import.append(entry)
    taken = {v.name for v in graph.input} | {v.name for v in graph.output} | {o for n in graph.node for o in n.output}
    clash = sorted(taken & ({v.name for v in model.graph.input} | {v.name for v in model.graph.output}))
    if clash:
        raise ValueError(f"optimizer: the base model already has values named {clash[:5]}; build on empty_base()")
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    graph.node.extend(model.graph.node)
    graph.initializer.extend(model.graph.initializer)
    functions = {(f.domain, f.name) for f in base.functions}
    base.functions.extend(f for f in model.functions if (f.domain, f.name) not in functions)
    base.metadata_props.extend(model.metadata_props)


def _trainable(parameters) -> list:
    """The parameters to update: a list, or the (trainable, frozen) pair that
    TrainingBlock.parameters() returns (as onnxruntime's generate_artifacts passes it)."""
    if isinstance(parameters, (onnx.TensorProto, onnx.ValueInfoProto)):
        return [parameters]
    if (isinstance(parameters, tuple) and len(parameters) == 2 and all(isinstance(p, list) for p in parameters)
            and all(isinstance(t, (onnx.TensorProto, onnx.ValueInfoProto)) for t in parameters[0] + parameters[1])):
        return parameters[0]
    return list(parameters)


class _Optimizer(Block):
    """Builds the optimizer model of the parameters it is called with; returns its outputs
    (the updated parameters and moments). ``to_model_proto()`` returns the model."""

    def __init__(self) -> None:
        super().__init__()
        self._model: Optional[onnx.ModelProto] = None

    def _options(self) -> dict:
        raise NotImplementedError

    def build(self, parameters: Sequence[ParameterLike]) -> list[str]:
        trainable = [_parameter(p) for p in _trainable(parameters)]
        model = onnx.load_model_from_string(_C.build_optimizer_model(trainable, self._options()))
        _merge(self.base, model)
        return [o.name for o in model.graph.output]

    def __call__(self, *args, **kwargs) -> list[str]:
        outputs = super().__call__(*args, **kwargs)
        self._model = onnx.ModelProto()
        self._model.CopyFrom(self.base)
        return outputs

    def to_model_proto(self) -> onnx.ModelProto:
        """The optimizer model. Raises RuntimeError before the block was called."""
        if self._model is None:
            raise RuntimeError(f"{type(self).__name__}.to_model_proto(): the block is not built yet; call it with "
                               "the parameters inside `with onnxblock.empty_base():` first")
        return self._model


class AdamW(_Optimizer):
    """torch.optim.AdamW: decoupled weight decay, bias-corrected moments (switchable)."""

    def __init__(
        self,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__()
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair, got {betas!r}")
        self.bias_correction: bool = bool(bias_correction)
        self.betas: tuple[float, float] = (float(betas[0]), float(betas[1]))
        self.eps: float = float(eps)
        self.weight_decay: float = float(weight_decay)

    def _options(self) -> dict:
        return {
            "optimizer": "adamw",
            "bias_correction": self.bias_correction,
            "beta1": self.betas[0],
            "beta2": self.betas[1],
            "epsilon": self.eps,
            "weight_decay": self.weight_decay,
        }

    def __repr__(self) -> str:
        return (f"AdamW(bias_correction={self.bias_correction}, betas={self.betas}, eps={self.eps}, "
                f"weight_decay={self.weight_decay})")


class SGD(_Optimizer):
    """torch.optim.SGD: weight decay added to the gradient, momentum with dampening,
    Nesterov. ``lr`` is the initial learning rate stored in the checkpoint (default 1e-3)."""

    def __init__(
        self,
        lr: Optional[float] = None,
        momentum: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        self.lr: Optional[float] = None if lr is None else float(lr)
        self.momentum: float = float(momentum)
        self.dampening: float = float(dampening)
        self.nesterov: bool = bool(nesterov)
        self.weight_decay: float = float(weight_decay)

    def _options(self) -> dict:
        return {
            "optimizer": "sgd",
            "learning_rate": self.lr,
            "momentum": self.momentum,
            "dampening": self.dampening,
            "nesterov": self.nesterov,
            "sgd_weight_decay": self.weight_decay,
        }

    def __repr__(self) -> str:
        return (f"SGD(lr={self.lr}, momentum={self.momentum}, dampening={self.dampening}, "
                f"nesterov={self.nesterov}, weight_decay={self.weight_decay})")


__all__ = ["AdamW", "SGD"]
