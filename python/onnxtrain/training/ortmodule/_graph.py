"""One exported graph of an ORTModule: the module exported for one input schema and mode,
its gradient model, and the TrainingAgent that runs them as forward and backward."""

from __future__ import annotations

import io
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import onnx
import torch
from torch.utils import _pytree as pytree

from onnxtrain.training.agent import TrainingAgent
from onnxtrain.autodiff import build_gradient_graph
from onnxtrain.training.ortmodule.options import logger

_OPSET = 17
_FLOAT_TYPES = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
)
_MODULE_PREFIX = "module."  # the exported wrapper holds the user's module as `module`


class ExportError(RuntimeError):
    """torch.onnx.export could not export the module."""


class GradientError(RuntimeError):
    """The exported graph could not be differentiated or run (an op without a gradient rule
    or a kernel)."""


@dataclass(frozen=True)
class InputSchema:
    """What decides the exported graph: the structure of (args, kwargs), each tensor's dtype,
    rank and requires_grad, each other value, the mode and which weights train."""

    spec: Any
    leaves: tuple
    training: bool
    trainable: frozenset

    @staticmethod
    def of(args: tuple, kwargs: dict, training: bool, trainable: frozenset) -> tuple[InputSchema, list]:
        flat, spec = pytree.tree_flatten((args, kwargs))
        leaves = []
        for value in flat:
            if isinstance(value, torch.Tensor):
                leaves.append(("tensor", value.dtype, value.dim(), value.requires_grad, value.device.type))
            else:
                try:
                    hash(value)
                    leaves.append(("value", type(value), value))
                except TypeError:
                    leaves.append(("value", type(value), repr(value)))
        return InputSchema(spec, tuple(leaves), training, trainable), flat


class _FlatModule(torch.nn.Module):
    """The user's module with tensors in and tensors out, for the exporter: the schema's
    non-tensor values are fixed, the output structure is recorded while tracing."""

    def __init__(self, module: torch.nn.Module, spec: Any, flat: list) -> None:
        super().__init__()
        self.module = module
        self._spec = spec
        self._flat = list(flat)
        self._tensor_positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        self.output_spec: Any = None
        self.output_leaves: list = []

    def forward(self, *tensors: torch.Tensor) -> tuple:
        flat = list(self._flat)
        for position, tensor in zip(self._tensor_positions, tensors):
            flat[position] = tensor
        args, kwargs = pytree.tree_unflatten(flat, self._spec)
        out = self.module(*args, **kwargs)
        leaves, self.output_spec = pytree.tree_flatten(out)
        self.output_leaves = [None if isinstance(v, torch.Tensor) else v for v in leaves]
        return tuple(v for v in leaves if isinstance(v, torch.Tensor))


def _strip_module_prefix(model: onnx.ModelProto, names: list[str]) -> None:
    """Renames the graph inputs `names` ("module.fc.weight") to the user's module names."""
    renamed = {n: n[len(_MODULE_PREFIX):] for n in names}
    for value in model.graph.input:
        value.name = renamed.get(value.name, value.name)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]


def _relax_output_shapes(model: onnx.ModelProto) -> None:
    """Every output dimension symbolic, and no intermediate value_info: a new batch or
    sequence length must not clash with sizes the tracer saw."""
    for i, output in enumerate(model.graph.output):
        for d, dim in enumerate(output.type.tensor_type.shape.dim):
            dim.Clear()
            dim.dim_param = f"output_{i}_dim{d}"
    del model.graph.value_info[:]


def _batch_norm_statistics(model: onnx.ModelProto) -> dict[str, str]:
    """Training-mode BatchNormalization nodes: {running-statistic input: its updated value},
    made graph outputs so that the torch buffers get them."""
    updates = {}
    for node in model.graph.node:
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx"):
            continue
        training = any(a.name == "training_mode" and a.i == 1 for a in node.attribute)
        if not training or len(node.output) < 3:
            continue
        for k in (1, 2):
            if node.output[k]:
                updates[node.input[2 + k]] = node.output[k]
    for name in updates.values():
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return updates


@dataclass
class ExportedGraph:
    """A module exported for one schema, and the agents that run it."""

    forward_model: onnx.ModelProto
    input_names: list[str]  # per tensor leaf of the inputs
    used_inputs: frozenset  # those the graph reads (the exporter drops the others)
    weight_names: list[str]  # graph inputs fed from the module's state (module names)
    output_names: list[str]  # per tensor output
    statistics: dict[str, str]  # buffer name -> graph output with its new value
    output_spec: Any
    output_leaves: list
    differentiable: list[bool]  # per tensor output
    export_seconds: float
    inference: TrainingAgent | None = None
    training: TrainingAgent | None = None
    grad_names: dict[str, str] = field(default_factory=dict)  # weight or input name -> its gradient output
    build_seconds: float = 0.0

    @property
    def graph_outputs(self) -> list[str]:
        return self.output_names + list(self.statistics.values())


def export(module: torch.nn.Module, schema: InputSchema, flat: list, save_prefix: str | None) -> ExportedGraph:
    wrapper = _FlatModule(module, schema.spec, flat)
    tensors = tuple(v.detach() for v in flat if isinstance(v, torch.Tensor))
    input_names = [f"input_{i}" for i in range(len(tensors))]
    dynamic_axes = {name: {d: f"{name}_dim{d}" for d in range(t.dim())} for name, t in zip(input_names, tensors)}
    mode = torch.onnx.TrainingMode.TRAINING if schema.training else torch.onnx.TrainingMode.EVAL
    start = time.perf_counter()
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                wrapper, tensors, buffer, dynamo=False, export_params=False, do_constant_folding=False,
                training=mode, input_names=input_names, dynamic_axes=dynamic_axes, opset_version=_OPSET,
            )
    except Exception as e:
        raise ExportError(f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
    model = onnx.load_from_string(buffer.getvalue())
    mode_name = "training" if schema.training else "inference"
    if save_prefix:
        onnx.save(model, f"{save_prefix}_torch_exported_{mode_name}.onnx")
    graph_inputs = [i.name for i in model.graph.input]
    weights = [n for n in graph_inputs if n not in input_names]
    outside = [n for n in weights if not n.startswith(_MODULE_PREFIX)]
    if outside:
        raise ExportError(f"the exported graph takes inputs that are neither arguments nor module state: {outside}")
    _strip_module_prefix(model, weights)
    _relax_output_shapes(model)
    statistics = _batch_norm_statistics(model) if schema.training else {}
    output_names = [o.name for o in model.graph.output][: len(model.graph.output) - len(statistics)]
    differentiable = [o.type.tensor_type.elem_type in _FLOAT_TYPES for o in model.graph.output[: len(output_names)]]
    return ExportedGraph(
        forward_model=model,
        input_names=input_names,
        used_inputs=frozenset(n for n in input_names if n in graph_inputs),
        weight_names=[n[len(_MODULE_PREFIX):] for n in weights],
        output_names=output_names,
        statistics=statistics,
        output_spec=wrapper.output_spec,
        output_leaves=wrapper.output_leaves,
        differentiable=differentiable,
        export_seconds=time.perf_counter() - start,
    )


def build_inference(graph: ExportedGraph) -> None:
    try:
        graph.inference = TrainingAgent(
            graph.forward_model, forward_outputs=graph.graph_outputs, backward_outputs=[], output_type="torch"
        )
    except Exception as e:
        raise GradientError(f"onnxtrain cannot run the exported graph: {e}") from e


def build_training(graph: ExportedGraph, trainable: list[str], inputs_requiring_grad: list[str],
                   save_prefix: str | None, optimize) -> None:
    """The gradient model w.r.t. the trainable weights (module names) and the inputs that
    require grad, with one `<output>_grad` input per differentiable output."""
    start = time.perf_counter()
    model = optimize(graph.forward_model)
    if save_prefix:
        onnx.save(model, f"{save_prefix}_pre_grad_optimized_training.onnx")
    wrt = trainable + inputs_requiring_grad
    outputs = [n for n, d in zip(graph.output_names, graph.differentiable) if d]
    try:
        gradient = build_gradient_graph(model, wrt, outputs) if wrt and outputs else model
    except Exception as e:
        raise GradientError(f"onnxtrain cannot differentiate the exported graph: {e}") from e
    if save_prefix:
        onnx.save(gradient, f"{save_prefix}_training.onnx")
    produced = {o.name for o in gradient.graph.output}
    graph.grad_names = {w: f"{w}_grad" for w in wrt if f"{w}_grad" in produced}
    try:
        graph.training = TrainingAgent(
            gradient, forward_outputs=graph.graph_outputs, backward_outputs=list(graph.grad_names.values()),
            output_type="torch",
        )
    except Exception as e:
        raise GradientError(f"onnxtrain cannot run the gradient graph: {e}") from e
    graph.build_seconds = time.perf_counter() - start
    logger.info("built the training graph: %d nodes, %d gradients, in %.2f s",
                len(gradient.graph.node), len(graph.grad_names), graph.build_seconds)


__all__ = ["ExportError", "ExportedGraph", "GradientError", "InputSchema", "build_inference", "build_training",
           "export"]
