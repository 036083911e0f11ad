"""Forward and backward as two partial runs, without torch: ``ModuleGraphBuilder`` and
``TrainingAgent``, shaped like ONNX Runtime's ``OrtModuleGraphBuilder`` and ``TrainingAgent``.

::

    builder = ModuleGraphBuilder(model, weights_to_train=["fc.weight"], inputs_requiring_grad=["x"])
    builder.build()
    info = builder.get_graph_info()
    agent = TrainingAgent(builder.get_model(), info)
    outputs, state = agent.run_forward({"x": x, "fc.weight": w, ...})
    grads = agent.run_backward({"y_grad": dy}, state)     # {"fc.weight": ..., "x": ...}

The forward stops at the boundary and keeps in ``state`` only what the backward reads;
several states may be pending at once (a module called twice before one backward).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import onnx

from onnxtrain import _C, _dtypes
from onnxtrain._session import SessionOptions
from onnxtrain.autodiff import build_gradient_graph, model_source

ModelLike = Union[onnx.ModelProto, bytes, str, "os.PathLike[str]"]

_FLOAT_TYPES = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
)


@dataclass
class GraphInfo:
    """What a built gradient model takes and gives.

    ``user_input_names``: graph inputs that are not weights to train (the data), in order;
    ``initializer_names_to_train``: the weights, fed as graph inputs; ``user_output_names``:
    the forward outputs; ``output_grad_names``: per forward output, the backward input that
    carries its gradient (``None`` for an output that has none: an integer output, or one no
    differentiated value reaches); ``weight_grad_names`` / ``input_grad_names``: per weight /
    per input requiring grad, its gradient output, or ``None`` when it gets no gradient.
    """

    user_input_names: list[str] = field(default_factory=list)
    initializer_names_to_train: list[str] = field(default_factory=list)
    user_output_names: list[str] = field(default_factory=list)
    output_grad_names: list[str | None] = field(default_factory=list)
    weight_grad_names: list[str | None] = field(default_factory=list)
    input_names_require_grad: list[str] = field(default_factory=list)
    input_grad_names: list[str | None] = field(default_factory=list)

    @property
    def initializer_grad_names_to_train(self) -> list[str | None]:
        """ONNX Runtime's name for ``weight_grad_names``."""
        return self.weight_grad_names

    @property
    def backward_output_names(self) -> list[str]:
        """The gradient outputs the backward computes, weights first."""
        return [n for n in self.weight_grad_names + self.input_grad_names if n is not None]


def _load(model: ModelLike) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return onnx.load_from_string(bytes(model))
    return onnx.load(os.fspath(model))


def weights_as_inputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """``model`` with the initializers ``names`` turned into graph inputs without data (the
    caller feeds them); an initializer that is a graph input already keeps its entry."""
    wanted = set(names)
    graph = model.graph
    known = {i.name for i in graph.initializer}
    missing = sorted(wanted - known - {i.name for i in graph.input})
    if missing:
        raise ValueError(f"weights {missing} are neither initializers nor inputs of the model")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    inputs = {i.name for i in result.graph.input}
    kept = []
    for init in result.graph.initializer:
        if init.name not in wanted:
            kept.append(init)
            continue
        if init.name not in inputs:
            shape = list(init.dims)
            result.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, shape))
    del result.graph.initializer[:]
    result.graph.initializer.extend(kept)
    return result


class ModuleGraphBuilder:
    """Builds the forward + backward model of an ONNX model for partial runs.

    ``weights_to_train``: initializers (or graph inputs) to differentiate; they become graph
    inputs the caller feeds. ``inputs_requiring_grad``: graph inputs whose gradient the
    backward also returns. Every floating-point output gets a gradient input
    ``<output>_grad``.
    """

    def __init__(
        self,
        model: ModelLike,
        weights_to_train: Sequence[str],
        inputs_requiring_grad: Sequence[str] = (),
    ) -> None:
        if isinstance(weights_to_train, str) or isinstance(inputs_requiring_grad, str):
            raise TypeError("weights_to_train and inputs_requiring_grad are sequences of names, not a str")
        self._source = _load(model)
        self._weights = list(weights_to_train)
        self._inputs_requiring_grad = list(inputs_requiring_grad)
        self._model: onnx.ModelProto | None = None
        self._inference_model: onnx.ModelProto | None = None
        self._info: GraphInfo | None = None

    def build(self) -> None:
        """Builds the gradient model; ``get_model`` and ``get_graph_info`` then give it."""
        source = self._source
        initializers = {i.name for i in source.graph.initializer}
        graph_inputs = [i.name for i in source.graph.input]
        unknown = [n for n in self._inputs_requiring_grad if n not in graph_inputs or n in initializers]
        if unknown:
            raise ValueError(f"inputs_requiring_grad {unknown} are not data inputs of the model (inputs: {graph_inputs})")
        forward = weights_as_inputs(source, self._weights)
        outputs = [o.name for o in forward.graph.output]
        differentiable = [o.name for o in forward.graph.output if o.type.tensor_type.elem_type in _FLOAT_TYPES]
        wrt = self._weights + self._inputs_requiring_grad
        if wrt and differentiable:
            model = build_gradient_graph(forward, wrt, differentiable)
        else:
            model = forward
        produced = {o.name for o in model.graph.output}
        fed = {i.name for i in model.graph.input}
        grad = lambda name: f"{name}_grad" if f"{name}_grad" in produced else None  # noqa: E731
        info = GraphInfo(
            user_input_names=[n for n in graph_inputs if n not in set(self._weights)],
            initializer_names_to_train=list(self._weights),
            user_output_names=outputs,
            output_grad_names=[f"{n}_grad" if f"{n}_grad" in fed else None for n in outputs],
            weight_grad_names=[grad(n) for n in self._weights],
            input_names_require_grad=list(self._inputs_requiring_grad),
            input_grad_names=[grad(n) for n in self._inputs_requiring_grad],
        )
        self._model, self._inference_model, self._info = model, forward, info

    def _built(self) -> None:
        if self._info is None:
            raise RuntimeError("ModuleGraphBuilder: call build() first")

    def get_model(self) -> onnx.ModelProto:
        """The forward + backward model."""
        self._built()
        return self._model

    def get_inference_optimized_model(self) -> onnx.ModelProto:
        """The forward model alone, its weights as graph inputs."""
        self._built()
        return self._inference_model

    def get_graph_info(self) -> GraphInfo:
        """What the built model takes and gives (inputs, weights, outputs, gradient names)."""
        self._built()
        return self._info


def _engine_feeds(feeds: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """The feeds as the engine takes them, and the ONNX type codes of those that hold bits:
    ml_dtypes arrays (bfloat16, float8, 4-bit) travel as their bits; everything else goes as
    it is (numpy arrays, OrtValues, DLPack tensors such as torch's, bfloat16 included)."""
    out: dict[str, Any] = {}
    typed: dict[str, int] = {}
    for name, value in feeds.items():
        code = _dtypes.bits_code(value) if isinstance(value, np.ndarray) else 0
        if code:
            value = _dtypes.as_bits(value, code)
            typed[name] = code
        out[name] = value
    return out, typed


class TrainingAgent:
    """Runs a model from ``ModuleGraphBuilder`` (or any gradient model) as a forward run and
    a backward run that resumes from the forward's state.

    ``info`` says which outputs are the forward's and which gradients the backward gives;
    without it, pass ``forward_outputs`` and ``backward_outputs``. ``output_type`` is
    ``"numpy"`` or ``"torch"`` (tensors by DLPack, no copy). ``sess_options``: an
    ``onnxtrain.SessionOptions`` (threads, graph optimization level, profiling — see
    ``end_profiling``); a non-zero ``intra_op_num_threads`` overrides its thread count.
    """

    def __init__(
        self,
        model: ModelLike,
        info: GraphInfo | None = None,
        *,
        forward_outputs: Sequence[str] | None = None,
        backward_outputs: Sequence[str] | None = None,
        intra_op_num_threads: int = 0,
        output_type: str = "numpy",
        sess_options: SessionOptions | None = None,
    ) -> None:
        if output_type not in ("numpy", "torch"):
            raise ValueError(f"output_type must be 'numpy' or 'torch', got {output_type!r}")
        if info is not None:
            forward_outputs = info.user_output_names
            backward_outputs = info.backward_output_names
        if forward_outputs is None or backward_outputs is None:
            raise TypeError("TrainingAgent needs a GraphInfo, or forward_outputs and backward_outputs")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError(f"sess_options must be an onnxtrain.SessionOptions, got {type(sess_options).__name__}")
        source = model_source(model)
        self._info = info
        self._as_torch = output_type == "torch"
        self._forward_outputs = list(forward_outputs)
        self._backward_outputs = list(backward_outputs)
        native = sess_options._native() if sess_options is not None else None
        self._agent = _C.TrainingAgent(source, self._forward_outputs, self._backward_outputs, intra_op_num_threads,
                                       native)

    @property
    def forward_outputs(self) -> list[str]:
        """The graph outputs ``run_forward`` returns, in order."""
        return list(self._forward_outputs)

    @property
    def backward_outputs(self) -> list[str]:
        """The gradient outputs ``run_backward`` computes, in order."""
        return list(self._backward_outputs)

    def end_profiling(self) -> str:
        """With ``SessionOptions.enable_profiling``: writes the per-kernel profile of the forward
        and backward runs so far (Chrome-trace JSON, the shape onnxruntime's profiler writes)
        and returns its path; ``""`` without profiling."""
        return self._agent.end_profiling()

    def run_forward(self, feeds: Mapping[str, Any]) -> tuple[list[Any], Any]:
        """The forward outputs, and the state ``run_backward`` resumes from. Feeds are read
        in place: keep those the backward reads (weights, inputs) unchanged until it ran."""
        engine_feeds, typed = _engine_feeds(feeds)
        return tuple(self._agent.run_forward(engine_feeds, self._as_torch, typed))

    def run_backward(self, output_grads: Mapping[str, Any], state: Any) -> list[Any] | dict[str, Any]:
        """The gradients, in ``backward_outputs`` order — or, with a GraphInfo, a dict from
        each weight / input name to its gradient (those that have one)."""
        grads_in, typed = _engine_feeds(output_grads)
        grads = self._agent.run_backward(grads_in, state, self._as_torch, typed)
        if self._info is None:
            return grads
        names = self._info.initializer_names_to_train + self._info.input_names_require_grad
        grad_names = self._info.weight_grad_names + self._info.input_grad_names
        by_output = dict(zip(self._backward_outputs, grads))
        return {n: by_output[g] for n, g in zip(names, grad_names) if g is not None}
