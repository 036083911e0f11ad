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

from onnxtrain._session import SessionOptions
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
    rank and requires_grad, each other value, the mode of every submodule and which weights
    train."""

    spec: Any
    leaves: tuple
    modes: tuple  # per submodule, in module.modules() order: its training flag
    trainable: frozenset

    @property
    def training(self) -> bool:
        return self.modes[0]

    @staticmethod
    def of(args: tuple, kwargs: dict, modes: tuple, trainable: frozenset) -> tuple[InputSchema, list]:
        """The schema of a call; ``modes``: the training flag of each submodule, in
        ``module.modules()`` order."""
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
        return InputSchema(spec, tuple(leaves), modes, trainable), flat


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


@dataclass(frozen=True)
class Statistic:
    """A BatchNormalization running statistic (a module buffer) and the graph output with
    its updated value. ONNX updates the variance with the batch's population variance where
    torch uses the unbiased one: `count` is the output holding the batch's element count,
    for the correction."""

    buffer: str
    output: str
    momentum: float  # ONNX's: the weight of the old value
    count: str | None = None
    channels: int = 1


def _batch_norm_statistics(model: onnx.ModelProto) -> list[Statistic]:
    """Training-mode BatchNormalization nodes: their updated running statistics become graph
    outputs, so that the torch buffers get them."""
    statistics = []
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    for index, node in enumerate(list(model.graph.node)):
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx"):
            continue
        training = any(a.name == "training_mode" and a.i == 1 for a in node.attribute)
        if not training or len(node.output) < 3 or not node.output[1] or not node.output[2]:
            continue
        momentum = next((a.f for a in node.attribute if a.name == "momentum"), 0.9)
        count = f"{node.output[0]}_element_count"
        model.graph.node.append(onnx.helper.make_node("Size", [node.input[0]], [count]))
        channels = (shapes.get(node.input[3]) or [1])[0]
        statistics.append(Statistic(node.input[3], node.output[1], momentum))
        statistics.append(Statistic(node.input[4], node.output[2], momentum, count, channels))
    for statistic in statistics:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(statistic.output))
        if statistic.count:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(statistic.count))
    return statistics


@dataclass
class ExportedGraph:
    """A module exported for one schema, and the agents that run it."""

    forward_model: onnx.ModelProto
    input_names: list[str]  # per tensor leaf of the inputs
    used_inputs: frozenset  # those the graph reads (the exporter drops the others)
    weight_names: list[str]  # graph inputs fed from the module's state (module names)
    output_names: list[str]  # per tensor output
    statistics: list[Statistic]
    output_spec: Any
    output_leaves: list
    differentiable: list[bool]  # per tensor output
    export_seconds: float
    shape_specialized: bool  # the trace may hold for the traced input shapes only
    inference: TrainingAgent | None = None
    training: TrainingAgent | None = None
    grad_names: dict[str, str] = field(default_factory=dict)  # weight or input name -> its gradient output
    build_seconds: float = 0.0
    sparse_losses: list = field(default_factory=list)  # what the label-sparsity pass rewrote

    @property
    def graph_outputs(self) -> list[str]:
        """The user's outputs, then the statistics' outputs."""
        return self.output_names + self.statistic_outputs

    @property
    def statistic_outputs(self) -> list[str]:
        names = []
        for statistic in self.statistics:
            names += [statistic.output] + ([statistic.count] if statistic.count else [])
        return names


def export(module: torch.nn.Module, schema: InputSchema, flat: list, save_prefix: str | None) -> ExportedGraph:
    wrapper = _FlatModule(module, schema.spec, flat)
    tensors = tuple(v.detach() for v in flat if isinstance(v, torch.Tensor))
    input_names = [f"input_{i}" for i in range(len(tensors))]
    dynamic_axes = {name: {d: f"{name}_dim{d}" for d in range(t.dim())} for name, t in zip(input_names, tensors)}
    # Each submodule exports in the mode it is in (a frozen BatchNorm stays in eval), and the
    # exporter leaves the modes as they were.
    wrapper.train(module.training)
    for submodule, training in zip(module.modules(), schema.modes):
        submodule.training = training
    start = time.perf_counter()
    buffer = io.BytesIO()
    # Tracing runs the module: keep its buffers (BatchNorm statistics) and the RNG as they were.
    saved_buffers = [(b, b.detach().clone()) for b in module.buffers()]
    rng = torch.random.get_rng_state()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.onnx.export(
                wrapper, tensors, buffer, dynamo=False, export_params=False, do_constant_folding=False,
                training=torch.onnx.TrainingMode.PRESERVE, input_names=input_names, dynamic_axes=dynamic_axes, opset_version=_OPSET,
            )
    except Exception as e:
        raise ExportError(f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
    finally:
        with torch.no_grad():
            for b, value in saved_buffers:
                b.copy_(value)
        torch.random.set_rng_state(rng)
    model = onnx.load_from_string(buffer.getvalue())
    # The tracer warns where it turned a tensor into a Python value (a shape into a loop
    # bound, a mask test into a branch): the graph may then hold only for these shapes.
    tracer_warnings = sorted({str(w.message).split(".")[0] for w in caught if issubclass(w.category, torch.jit.TracerWarning)})
    if tracer_warnings:
        logger.info("the export holds for these input shapes only (%s); a new shape exports again",
                    "; ".join(tracer_warnings))
    graph_inputs = [i.name for i in model.graph.input]
    weights = [n for n in graph_inputs if n not in input_names]
    outside = [n for n in weights if not n.startswith(_MODULE_PREFIX)]
    if outside:
        raise ExportError(f"the exported graph takes inputs that are neither arguments nor module state: {outside}")
    _strip_module_prefix(model, weights)
    if save_prefix:
        mode_name = "training" if schema.training else "inference"
        onnx.save(model, f"{save_prefix}_torch_exported_{mode_name}.onnx")
    _relax_output_shapes(model)
    output_count = len(model.graph.output)
    statistics = _batch_norm_statistics(model) if schema.training else []
    output_names = [o.name for o in model.graph.output][:output_count]
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
        shape_specialized=bool(tracer_warnings),
    )


def _session_options(profile_prefix: str) -> SessionOptions | None:
    """The agents' options: with a profile prefix, every kernel is timed."""
    if not profile_prefix:
        return None
    options = SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = profile_prefix
    return options


def build_inference(graph: ExportedGraph, profile_prefix: str = "") -> None:
    try:
        graph.inference = TrainingAgent(
            graph.forward_model, forward_outputs=graph.graph_outputs, backward_outputs=[], output_type="torch",
            sess_options=_session_options(profile_prefix and f"{profile_prefix}_inference"),
        )
    except Exception as e:
        raise GradientError(f"onnxtrain cannot run the exported graph: {e}") from e


def build_training(graph: ExportedGraph, trainable: list[str], inputs_requiring_grad: list[str],
                   save_prefix: str | None, optimize, profile_prefix: str = "") -> None:
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
            output_type="torch", sess_options=_session_options(profile_prefix and f"{profile_prefix}_training"),
        )
    except Exception as e:
        raise GradientError(f"onnxtrain cannot run the gradient graph: {e}") from e
    graph.build_seconds = time.perf_counter() - start
    logger.info("built the training graph: %d nodes, %d gradients, in %.2f s",
                len(gradient.graph.node), len(graph.grad_names), graph.build_seconds)


__all__ = ["ExportError", "ExportedGraph", "GradientError", "InputSchema", "Statistic", "build_inference", "build_training",
           "export"]
