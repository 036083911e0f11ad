"""ORTModule: a torch.nn.Module whose forward and backward run in onnxtrain.

The first call exports the module (torch.onnx.export, training mode, every input dimension
symbolic), differentiates it with onnxtrain's gradient builder and from then on runs the
forward and the backward as two partial runs of one onnxtrain plan inside one
torch.autograd.Function. Tensors cross by DLPack, without copies; parameters are read from
the module at every call, so torch.optim, load_state_dict and ``.data`` assignments are
seen; gradients come back to autograd, which accumulates them into ``.grad``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils.dlpack import to_dlpack

from onnxtrain.training.ortmodule import _graph, _label_sparsity
from onnxtrain.training.ortmodule.options import DebugOptions, FallbackPolicy, RuntimeOptions, logger

_SUPPORTED_DTYPES = frozenset(
    {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
     torch.int64, torch.uint8, torch.bool}
)


class _Fallback(Exception):
    def __init__(self, policy: FallbackPolicy, reason: str) -> None:
        super().__init__(reason)
        self.policy = policy
        self.reason = reason


class _Run(torch.autograd.Function):
    """Forward and backward of one exported graph. Inputs after `step`: the input tensors,
    then the trainable weights (the same tensor may come twice when weights are tied)."""

    @staticmethod
    def forward(ctx: Any, step: _Step, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        graph = step.graph
        outputs, state = graph.training.run_forward(step.feeds(tensors))
        ctx.step = step
        ctx.state = state
        user_outputs = outputs[: len(graph.output_names)]
        step.write_statistics(outputs[len(graph.output_names):])
        ctx.mark_non_differentiable(*[o for o, d in zip(user_outputs, graph.differentiable) if not d])
        return tuple(user_outputs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        step = ctx.step
        graph = step.graph
        fed = {}
        for name, differentiable, grad in zip(graph.output_names, graph.differentiable, grad_outputs):
            if differentiable:
                fed[f"{name}_grad"] = to_dlpack(grad.detach().contiguous())
        state, ctx.state = ctx.state, None
        grads = dict(zip(graph.grad_names.values(), graph.training.run_backward(fed, state)))
        by_name = {name: grads.get(out) for name, out in graph.grad_names.items()}
        inputs = [by_name.get(name) for name in step.input_names]
        weights = [by_name.get(name) for name in step.trainable_names]
        return (None, *inputs, *weights)


class _Step:
    """One call's bindings: which graph, the input tensors' names, the weights to feed."""

    def __init__(self, graph: _graph.ExportedGraph, module: torch.nn.Module, state: dict[str, torch.Tensor],
                 inputs: list[torch.Tensor], trainable: list[str]) -> None:
        self.graph = graph
        self.input_names = graph.input_names
        self.trainable_names = trainable
        self._module = module
        self._inputs = inputs
        self._state = state
        self.trainable = [state[n] for n in trainable]

    def feeds(self, tensors: tuple[torch.Tensor, ...] | None = None) -> dict[str, Any]:
        """The engine's feeds as DLPack capsules: torch's own ``__dlpack__`` method, which the
        engine would call otherwise, costs some 3 µs a tensor in checks, to_dlpack 0.2."""
        feeds = {}
        inputs = self._inputs if tensors is None else tensors[: len(self.input_names)]
        for name, tensor in zip(self.input_names, inputs):
            if name in self.graph.used_inputs:
                feeds[name] = to_dlpack(tensor.detach().contiguous())
        for name in self.graph.weight_names:
            feeds[name] = to_dlpack(self._state[name].detach().contiguous())
        return feeds

    def write_statistics(self, values: list[torch.Tensor]) -> None:
        """BatchNormalization's running statistics, back into the module's buffers as torch
        updates them: with the module's own momentum (ONNX holds it as a float32; None is a
        cumulative average) and the unbiased batch variance."""
        if not values:
            return
        outputs = dict(zip(self.graph.statistic_outputs, values))
        owners = {}
        with torch.no_grad():
            for statistic in self.graph.statistics:
                owner = statistic.buffer.rpartition(".")[0]
                if owner not in owners:
                    owners[owner] = self._module.get_submodule(owner)
                    if owners[owner].num_batches_tracked is not None:
                        owners[owner].num_batches_tracked.add_(1)
                bn = owners[owner]
                momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
                old = self._state[statistic.buffer]
                onnx_momentum = statistic.momentum
                batch = (outputs[statistic.output] - old * onnx_momentum) / (1.0 - onnx_momentum)
                if statistic.count:
                    n = int(outputs[statistic.count]) // statistic.channels
                    batch = batch * (n / max(n - 1, 1))
                old.copy_(old * (1.0 - momentum) + batch * momentum)


def _module_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = dict(module.named_parameters(remove_duplicate=False))
    state.update(module.named_buffers(remove_duplicate=False))
    return state


def _structure(modules: list[torch.nn.Module]) -> list:
    """What a call reads of the module's structure, as a list that compares by identity: per
    submodule its mode, its children, parameters (with requires_grad) and buffers, by name
    and object id. The caller keeps the objects alive, so an id is not reused meanwhile."""
    key: list = []
    for m in modules:
        key.append(m.training)
        for name, child in m._modules.items():
            key += (name, id(child))
        for name, p in m._parameters.items():
            key += (name, id(p), p is not None and p.requires_grad)
        for name, b in m._buffers.items():
            key += (name, id(b))
    return key


class _ModuleState:
    """The wrapped module's submodules, their modes, its parameters and buffers by name and
    the trainable ones, walked once and kept while its structure stays as it was: a call
    checks that with one pass over the submodules' own dicts (``_structure``) instead of the
    named_modules walks that building these costs. A replaced parameter, buffer or
    submodule, a requires_grad or a train/eval change builds them again; in-place updates
    and ``.data`` assignments keep the same objects, which are read at every call."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.modules = list(module.modules())
        self.structure = _structure(self.modules)
        self.tensors = _module_state(module)
        self.modes = tuple(m.training for m in self.modules)
        self.trainable = [n for n, p in module.named_parameters(remove_duplicate=False) if p.requires_grad]
        self.trainable_set = frozenset(self.trainable)

    def holds_for(self, module: torch.nn.Module) -> bool:
        return bool(self.modules) and self.modules[0] is module and _structure(self.modules) == self.structure


class ORTModule(torch.nn.Module):
    """Wraps ``module`` so that its forward and backward run in onnxtrain; use it as the
    module itself (same parameters, state_dict and attributes).

    ``label_sparsity``: compute a cross-entropy loss whose labels are mostly ignore_index
    on the valid rows only (on by default; ``ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER=0`` or
    ``ORTMODULE_ENABLE_COMPUTE_OPTIMIZER=0`` switch it off).
    """

    def __init__(self, module: torch.nn.Module, debug_options: DebugOptions | None = None, *,
                 label_sparsity: bool | None = None) -> None:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ORTModule wraps a torch.nn.Module, got {type(module).__name__}")
        super().__init__()
        if debug_options is not None and not isinstance(debug_options, DebugOptions):
            raise TypeError(f"ORTModule: debug_options must be a DebugOptions, got {type(debug_options).__name__}")
        self._original_module = module
        self._debug_options = debug_options or DebugOptions()
        self._options = RuntimeOptions.from_debug_options(self._debug_options)
        if label_sparsity is not None:
            self._options.label_sparsity = label_sparsity
        logger.setLevel(self._options.log_level.python_level())
        # Per input schema: its graph, or {input shapes: graph} when the trace holds for
        # the traced shapes only.
        self._graphs: dict[_graph.InputSchema, Any] = {}
        self._state_cache: _ModuleState | None = None
        self._fallback_reason: str | None = None
        self.export_count = 0  # how many times the module was exported

    # What users and tools see: the wrapped module.
    @property
    def module(self) -> torch.nn.Module:
        return self._original_module

    @property
    def runs_in_onnxtrain(self) -> bool:
        """False once ORTModule fell back to running the module in PyTorch."""
        return self._fallback_reason is None

    @property
    def fallback_reason(self) -> str | None:
        return self._fallback_reason

    def exported_graphs(self) -> list[_graph.ExportedGraph]:
        """The graphs exported so far (one per input schema, or per shape where the trace
        holds for its shapes only)."""
        graphs = []
        for entry in self._graphs.values():
            graphs += list(entry.values()) if isinstance(entry, dict) else [entry]
        return graphs

    def end_profiling(self) -> list[str]:
        """With ``DebugOptions(profile_prefix=...)``: writes the per-kernel profile of each
        engine's runs so far (training: forward and backward; inference) and returns the paths."""
        paths = []
        for graph in self.exported_graphs():
            for agent in (graph.training, graph.inference):
                path = agent.end_profiling() if agent is not None else ""
                if path:
                    paths.append(path)
        return paths

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules")
            if not modules or "_original_module" not in modules:
                raise
            return getattr(modules["_original_module"], name)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
                         ) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self._original_module.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
                      ) -> Iterator[tuple[str, torch.Tensor]]:
        return self._original_module.named_buffers(prefix, recurse, remove_duplicate)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._original_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self._original_module.load_state_dict(state_dict, strict=strict, assign=assign)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_graphs"] = {}  # engines are rebuilt on the first call after unpickling
        state["_state_cache"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._fallback_reason is not None:
            return self._original_module(*args, **kwargs)
        try:
            return self._run(args, kwargs)
        except _Fallback as fallback:
            if not (self._options.fallback_policy & fallback.policy):
                raise RuntimeError(f"ORTModule: {fallback.reason} (fallback disabled by the policy "
                                   f"{self._options.fallback_policy!r})") from fallback.__cause__
            self._fallback_reason = fallback.reason
            warnings.warn(f"ORTModule falls back to running the module in PyTorch: {fallback.reason}",
                          UserWarning, stacklevel=2)
            return self._original_module(*args, **kwargs)

    def _current_state(self) -> _ModuleState:
        """The module's state, walked again only when its structure changed."""
        state = self._state_cache
        if state is None or not state.holds_for(self._original_module):
            state = self._state_cache = _ModuleState(self._original_module)
        return state

    def _graph_for(self, args: tuple, kwargs: dict, module_state: _ModuleState
                   ) -> tuple[_graph.ExportedGraph, list, list[str]]:
        trainable = module_state.trainable
        schema, flat = _graph.InputSchema.of(args, kwargs, module_state.modes, module_state.trainable_set)
        for leaf in flat:
            if not isinstance(leaf, torch.Tensor):
                continue
            if leaf.device.type != "cpu":
                raise _Fallback(FallbackPolicy.FALLBACK_UNSUPPORTED_DEVICE,
                                f"an input is on device '{leaf.device}'; onnxtrain runs on the CPU")
            if leaf.dtype not in _SUPPORTED_DTYPES:
                raise _Fallback(FallbackPolicy.FALLBACK_UNSUPPORTED_DATA, f"an input has dtype {leaf.dtype}")
        for name, tensor in module_state.tensors.items():
            if not tensor.is_cpu:
                raise _Fallback(FallbackPolicy.FALLBACK_UNSUPPORTED_DEVICE,
                                f"'{name}' is on device '{tensor.device}'; onnxtrain runs on the CPU")
        tensors = [leaf for leaf in flat if isinstance(leaf, torch.Tensor)]
        entry = self._graphs.get(schema)
        shapes = tuple(tuple(t.shape) for t in tensors)
        graph = entry.get(shapes) if isinstance(entry, dict) else entry
        if graph is None:
            prefix = self._options.onnx_prefix if self._options.save_onnx else None
            try:
                graph = _graph.export(self._original_module, schema, flat, prefix)
            except _graph.ExportError as e:
                raise _Fallback(FallbackPolicy.FALLBACK_UNSUPPORTED_TORCH_MODEL, str(e)) from e
            self.export_count += 1
            logger.info("exported the module (%s mode) in %.2f s", "training" if schema.training else "eval",
                        graph.export_seconds)
            if graph.shape_specialized:
                self._graphs.setdefault(schema, {})[shapes] = graph
            else:
                self._graphs[schema] = graph
        return graph, tensors, [n for n in trainable if n in graph.weight_names]

    def _run(self, args: tuple, kwargs: dict) -> Any:
        module_state = self._current_state()
        graph, inputs, trainable = self._graph_for(args, kwargs, module_state)
        inputs_requiring_grad = [
            n for n, t in zip(graph.input_names, inputs) if t.requires_grad and n in graph.used_inputs
        ]
        needs_grad = torch.is_grad_enabled() and bool(trainable or inputs_requiring_grad)
        try:
            if needs_grad and graph.training is None:
                prefix = self._options.onnx_prefix if self._options.save_onnx else None
                _graph.build_training(graph, trainable, inputs_requiring_grad, prefix,
                                      lambda model: self._optimize(model, graph, inputs), self._options.profile_prefix)
            elif not needs_grad and graph.inference is None:
                _graph.build_inference(graph, self._options.profile_prefix)
        except _graph.GradientError as e:
            raise _Fallback(FallbackPolicy.FALLBACK_UNSUPPORTED_ONNX_MODEL, str(e)) from e
        step = _Step(graph, self._original_module, module_state.tensors, inputs, trainable)
        if needs_grad:
            outputs = _Run.apply(step, *inputs, *step.trainable)
        else:
            values, state = graph.inference.run_forward(step.feeds())
            del state
            outputs = values[: len(graph.output_names)]
            step.write_statistics(values[len(graph.output_names):])
        return self._unflatten(graph, outputs)

    def _optimize(self, model: Any, graph: _graph.ExportedGraph, inputs: list[torch.Tensor]) -> Any:
        """The graph passes before differentiation: label sparsity, measured on this batch."""
        if not self._options.label_sparsity:
            return model
        densities = {}
        for node, source in _label_sparsity.sparse_losses(model):
            labels = inputs[graph.input_names.index(source)]
            ignore = next(a.i for a in node.attribute if a.name == "ignore_index")
            densities[source] = float((labels != ignore).float().mean()) if labels.numel() else 1.0
        model, rewritten = _label_sparsity.apply(model, densities, self._options.label_density_threshold)
        graph.sparse_losses = rewritten
        for loss in rewritten:
            logger.info("label sparsity: loss '%s' on the valid rows of '%s' (density %.1f %%)%s", loss.node,
                        loss.labels, 100 * loss.density, ", gathered before the logits' MatMul" if loss.before_matmul
                        else "")
        return model

    @staticmethod
    def _unflatten(graph: _graph.ExportedGraph, outputs: tuple | list) -> Any:
        tensors = iter(outputs)
        leaves = [next(tensors) if leaf is None else leaf for leaf in graph.output_leaves]
        return pytree.tree_unflatten(leaves, graph.output_spec)
