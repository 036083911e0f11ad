"""Optimizer blocks, as ``onnxruntime.training.onnxblock.optim`` names them.

Pass one as ``generate_artifacts(..., optimizer=AdamW(weight_decay=0.01))``; the optimizer
model then updates the parameters as onnxruntime-training 1.19.2 does with the same options
(its defaults too); ``AdamW(mode="torch")`` and ``SGD`` follow ``torch.optim``.
``ClipGradNorm`` clips the gradients first. As a block it builds that optimizer model for
the parameters it is called with::

    with onnxblock.empty_base():
        adamw = AdamW()
        adamw(training_block.parameters())  # or a list of parameters (TensorProto)
        optimizer_model = adamw.to_model_proto()

The model comes from onnxtrain's C++ optimizer-model builder (one ``org.onnxtrain`` step per
parameter, defined in the model as a function of standard ONNX ops).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional, Union

import onnx

from onnxtrain import _C
from onnxtrain.training.onnxblock import _graph_utils
from onnxtrain.training.onnxblock import blocks as _blocks
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


class ClipGradNorm(Block):
    """Gradient clipping by global L2 norm, as ``torch.nn.utils.clip_grad_norm_``: every
    gradient is scaled by ``min(1, max_norm / (norm + 1e-6))``, where ``norm`` is the L2 norm
    of all the gradients together.

    Pass it as ``clip_grad`` of ``AdamW`` or ``SGD`` (as with onnxruntime-training):
    ``AdamW(clip_grad=ClipGradNorm(1.0))``; the optimizer model then clips before it updates.
    Called as a block, ``ClipGradNorm(max_norm)(*gradient_names)`` appends the clipping to the
    base model in standard ONNX ops and returns the clipped gradients' names (one name for one
    gradient, else a tuple).
    """

    def __init__(self, max_norm: float) -> None:
        super().__init__()
        max_norm = float(max_norm)
        if not math.isfinite(max_norm) or max_norm <= 0:
            raise ValueError(f"ClipGradNorm: max_norm must be finite and > 0, got {max_norm}")
        self.max_norm: float = max_norm

    def build(self, *gradient_names: str) -> Union[str, tuple[str, ...]]:
        if not gradient_names:
            raise TypeError("ClipGradNorm takes the names of the gradients to clip, got none")
        self._inputs(gradient_names)
        norm = _blocks.ReduceAllL2()(*gradient_names)
        denominator = _graph_utils.add_node(self.base, "Add", [norm, _graph_utils.add_constant(self.base, 1e-6)])
        ratio = _graph_utils.add_node(
            self.base, "Div", [_graph_utils.add_constant(self.base, self.max_norm), denominator])
        coefficient = _graph_utils.add_node(self.base, "Min", [ratio, _graph_utils.add_constant(self.base, 1.0)])
        clipped = []
        for name in gradient_names:
            elem_type = self._elem_type(name)
            scale = coefficient
            if elem_type != onnx.TensorProto.FLOAT:
                scale = _graph_utils.add_node(self.base, "Cast", [coefficient], to=elem_type)
            clipped.append(_graph_utils.add_node(self.base, "Mul", [name, scale]))
        return clipped[0] if len(clipped) == 1 else tuple(clipped)

    def __repr__(self) -> str:
        return f"ClipGradNorm(max_norm={self.max_norm})"


def _clip_options(clip_grad: Union[ClipGradNorm, float, None]) -> dict:
    if clip_grad is None:
        return {"max_grad_norm": None}
    if isinstance(clip_grad, ClipGradNorm):
        return {"max_grad_norm": clip_grad.max_norm}
    if isinstance(clip_grad, (int, float)) and not isinstance(clip_grad, bool):
        return {"max_grad_norm": ClipGradNorm(clip_grad).max_norm}
    raise TypeError(f"clip_grad must be an onnxblock.optim.ClipGradNorm (or its max_norm), got "
                    f"{type(clip_grad).__name__}")


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


_ADAMW_MODES = ("huggingface", "torch")


class AdamW(_Optimizer):
    """AdamW: decoupled weight decay, bias-corrected moments (switchable).

    The defaults are onnxruntime-training 1.19.2's: its update rule, ``mode="huggingface"``
    (Hugging Face's AdamW, which ORT's ``generate_artifacts`` writes: epsilon is added to
    ``sqrt(v)`` before the bias correction, which scales the learning rate, and the weight
    decay comes after the update; computed as ORT's kernel computes it, so float32 runs match
    ORT's bit for bit), ``eps=1e-6`` and ``weight_decay=0.0``. ``mode="torch"`` is
    ``torch.optim.AdamW``'s rule (epsilon added to the bias-corrected ``sqrt(v)``, weight
    decay before the update); torch's own defaults are ``eps=1e-8, weight_decay=0.01``.
    ``clip_grad``: a ``ClipGradNorm`` that clips the gradients before each update (a float is
    taken as its ``max_norm``).
    """

    def __init__(
        self,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        clip_grad: Union[ClipGradNorm, float, None] = None,
        *,
        mode: str = "huggingface",
    ) -> None:
        super().__init__()
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair, got {betas!r}")
        if mode not in _ADAMW_MODES:
            raise ValueError(f"AdamW: mode must be 'huggingface' (onnxruntime-training's rule) or 'torch' "
                             f"(torch.optim.AdamW's), got {mode!r}")
        self.mode: str = mode
        self.bias_correction: bool = bool(bias_correction)
        self.betas: tuple[float, float] = (float(betas[0]), float(betas[1]))
        self.eps: float = float(eps)
        self.weight_decay: float = float(weight_decay)
        _clip_options(clip_grad)  # checks it now rather than when the model is built
        self.clip_grad: Union[ClipGradNorm, float, None] = clip_grad

    def _options(self) -> dict:
        return {
            "optimizer": "adamw",
            "adam_mode": self.mode,
            "bias_correction": self.bias_correction,
            "beta1": self.betas[0],
            "beta2": self.betas[1],
            "epsilon": self.eps,
            "weight_decay": self.weight_decay,
            **_clip_options(self.clip_grad),
        }

    def __repr__(self) -> str:
        return (f"AdamW(bias_correction={self.bias_correction}, betas={self.betas}, eps={self.eps}, "
                f"weight_decay={self.weight_decay}, clip_grad={self.clip_grad!r}, mode={self.mode!r})")


class SGD(_Optimizer):
    """SGD. With its defaults, plain ``param -= lr * grad`` as onnxruntime-training 1.19.2's
    SGD (which has only ``clip_grad``).

    onnxtrain's extras, keyword-only and off by default, follow torch.optim.SGD: ``momentum``
    with ``dampening``, ``nesterov``, ``weight_decay`` added to the gradient. ``lr`` is the
    initial learning rate stored in the checkpoint (default: 1e-3, as onnxruntime-training's).
    """

    def __init__(
        self,
        clip_grad: Union[ClipGradNorm, float, None] = None,
        *,
        lr: Optional[float] = None,
        momentum: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        _clip_options(clip_grad)
        self.clip_grad: Union[ClipGradNorm, float, None] = clip_grad
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
            **_clip_options(self.clip_grad),
        }

    def __repr__(self) -> str:
        return (f"SGD(clip_grad={self.clip_grad!r}, lr={self.lr}, momentum={self.momentum}, "
                f"dampening={self.dampening}, nesterov={self.nesterov}, weight_decay={self.weight_decay})")


__all__ = ["AdamW", "ClipGradNorm", "SGD"]
