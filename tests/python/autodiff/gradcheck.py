"""Gradient checking by central differences in float64.

A case is one node (or a few) with random float64 inputs. The checker builds the
gradient graph with ``onnxtrain.build_gradient_graph`` (starting from every floating-point
output, fed random incoming gradients R), runs it, and compares each gradient with
central differences of f = sum_o sum(out_o * R_o) computed on the forward model.

Runtimes: ``onnxruntime`` (the stock inference package: it inlines the org.onnxtrain
functions), ``reference`` (``onnx.reference``, numpy float64, for ops onnxruntime has no
float64 kernel for) and ``onnxtrain``. A runtime that lacks a kernel skips the case;
every case must run on at least one of them (see test_rules.py).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxtrain

RUNTIMES = ("onnxruntime", "onnxruntime-float32", "reference", "onnxtrain")


class Unsupported(Exception):
    """The runtime has no kernel for an op of the model."""


def make_session(model: onnx.ModelProto, runtime: str) -> Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]:
    """A function feeds -> outputs running `model` on `runtime`; raises Unsupported when
    the runtime lacks a kernel."""
    data = model.SerializeToString()
    if runtime == "onnxruntime":
        import onnxruntime as ort

        try:
            session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types
            if "NOT_IMPLEMENTED" in str(e):
                raise Unsupported(str(e)) from e
            raise
        return lambda feeds: session.run(None, dict(feeds))
    if runtime == "reference":
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        return lambda feeds: list(evaluator.run(None, dict(feeds)))
    if runtime == "onnxtrain":
        try:
            session = onnxtrain.InferenceSession(data)
        except RuntimeError as e:
            if "no kernel" in str(e):
                raise Unsupported(str(e)) from e
            raise
        return lambda feeds: session.run(None, dict(feeds))
    raise ValueError(f"unknown runtime {runtime!r}")


@dataclasses.dataclass
class Input:
    """A graph input: a random float64 array of `shape` drawn from U(low, high) (or N(0, 1)
    when low is None), or a fixed `value`. `constant` makes it an initializer;
    `grad=False` keeps it out of wrt."""

    shape: tuple[int, ...] = ()
    low: float | None = None
    high: float | None = None
    value: np.ndarray | None = None
    constant: bool = False
    grad: bool = True
    away_from: Sequence[float] = ()  # points where the function has a kink

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        if self.value is not None:
            return np.asarray(self.value)
        if self.low is None:
            x = rng.standard_normal(self.shape)
        else:
            x = rng.uniform(self.low, self.high, self.shape)
        for point in self.away_from:  # keep values clear of a kink
            x = np.where(np.abs(x - point) < 0.05, x + np.where(x >= point, 0.1, -0.1), x)
        return np.asarray(x, dtype=np.float64)


def F(*shape: int, low: float | None = None, high: float | None = None, **kw: Any) -> Input:
    """A random float64 input."""
    return Input(tuple(shape), low, high, **kw)


def C(value: Any, dtype: Any = None, **kw: Any) -> Input:
    """A fixed input (an initializer unless constant=False), never differentiated."""
    kw.setdefault("constant", True)
    return Input(value=np.asarray(value, dtype=dtype), grad=False, **kw)


def V(value: Any, dtype: Any = None, **kw: Any) -> Input:
    """A fixed graph input (fed at run time), never differentiated."""
    return Input(value=np.asarray(value, dtype=dtype), grad=False, **kw)


def declared_shape(shape: tuple[int, ...], mode: str, name: str) -> list[Any] | None:
    if mode == "static":
        return list(shape)
    if mode == "dynamic":  # every dimension symbolic
        return [f"{name}_d{i}" for i in range(len(shape))]
    if mode == "unknown":  # not even the rank
        return None
    raise ValueError(mode)


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, np.ndarray],
    specs: Mapping[str, Input],
    outputs: Sequence[str],
    opset: int,
    shapes: str = "static",
) -> onnx.ModelProto:
    graph_inputs = []
    initializers = []
    for name, value in inputs.items():
        if specs[name].constant:
            initializers.append(numpy_helper.from_array(value, name))
            continue
        dtype = helper.np_dtype_to_tensor_dtype(value.dtype)
        graph_inputs.append(helper.make_tensor_value_info(name, dtype, declared_shape(value.shape, shapes, name)))
    graph = helper.make_graph(
        list(nodes), "gradcheck", graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outputs], initializers
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def numeric_gradient(
    run: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]],
    feeds: Mapping[str, np.ndarray],
    name: str,
    seeds: Sequence[np.ndarray | None],
    eps: float,
) -> np.ndarray:
    def f(values: Mapping[str, np.ndarray]) -> float:
        outs = run(values)
        return float(sum(np.sum(o * s) for o, s in zip(outs, seeds) if s is not None))

    x = feeds[name]
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        values = dict(feeds)
        plus = x.copy()
        plus[index] += eps
        values[name] = plus
        f_plus = f(values)
        minus = x.copy()
        minus[index] -= eps
        values[name] = minus
        grad[index] = (f_plus - f(values)) / (2 * eps)
    return grad


@dataclasses.dataclass
class GradCase:
    """One gradient check. `nodes` builds the graph from the input and output names."""

    id: str
    op: str
    inputs: dict[str, Input]
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    n_outputs: int = 1
    opset: int = 17
    seed: int = 0
    rtol: float = 1e-6
    atol: float = 1e-6
    shapes: tuple[str, ...] = ("static", "dynamic")
    nodes: Callable[[list[str], list[str]], list[onnx.NodeProto]] | None = None
    eps: float = 1e-6
    # Indices of the outputs to start from; None: every floating-point output.
    seed_outputs: Sequence[int] | None = None
    # Runtimes to check on (onnxruntime has bugs on a few exotic attribute variants).
    runtimes: Sequence[str] = RUNTIMES
    forward_runtime: str | None = None  # for the finite differences; default: the best one

    def build(self) -> tuple[list[onnx.NodeProto], list[str], dict[str, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        values = {name: spec.sample(rng) for name, spec in self.inputs.items()}
        names = list(self.inputs)
        input_names = ["" if name.startswith("_") else name for name in names]
        outputs = [f"y{i}" for i in range(self.n_outputs)]
        if self.nodes is not None:
            nodes = self.nodes(input_names, outputs)
        else:
            while input_names and input_names[-1] == "":
                input_names.pop()
            nodes = [helper.make_node(self.op, input_names, outputs, **self.attrs)]
        values = {k: v for k, v in values.items() if not k.startswith("_")}
        return nodes, outputs, values

    def wrt(self) -> list[str]:
        return [name for name, spec in self.inputs.items() if spec.grad and not name.startswith("_")]


def to_float32(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model in float32: inputs, initializers and Cast targets."""
    model = copy.deepcopy(model)
    for value in list(model.graph.input) + list(model.graph.output):
        if value.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE:
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for i, init in enumerate(model.graph.initializer):
        if init.data_type == onnx.TensorProto.DOUBLE:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == "to" and a.i == onnx.TensorProto.DOUBLE:
                a.i = onnx.TensorProto.FLOAT
    return model


def check_case_float32(case: GradCase, shapes: str) -> None:
    """onnxruntime in float32, for ops it has no float64 kernel for: the gradient model
    against central differences of the float32 forward (eps 1e-2, loose tolerance)."""
    nodes, outputs, values = case.build()
    specs = {k: v for k, v in case.inputs.items() if not k.startswith("_")}
    model = to_float32(make_model(nodes, values, specs, outputs, case.opset, shapes))
    values = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in values.items()}
    feeds = {k: v for k, v in values.items() if not specs[k].constant}
    forward = make_session(model, "onnxruntime")
    forward_outputs = forward(feeds)
    rng = np.random.default_rng(case.seed + 1)
    float_outputs = [
        o
        for k, (o, v) in enumerate(zip(outputs, forward_outputs))
        if np.asarray(v).dtype.kind == "f" and (case.seed_outputs is None or k in case.seed_outputs)
    ]
    seeds = [
        rng.standard_normal(np.shape(v)).astype(np.float32) if o in float_outputs else None
        for o, v in zip(outputs, forward_outputs)
    ]
    gradient_model = onnxtrain.build_gradient_graph(model, case.wrt(), outputs=float_outputs)
    run = make_session(gradient_model, "onnxruntime")
    grad_feeds = dict(feeds)
    for o, s in zip(outputs, seeds):
        if s is not None:
            grad_feeds[f"{o}_grad"] = s
    results = dict(zip([o.name for o in gradient_model.graph.output], run(grad_feeds)))
    for name in case.wrt():
        numeric = numeric_gradient(
            lambda f: [np.asarray(o, np.float64) for o in forward(f)], feeds, name,
            [None if s is None else s.astype(np.float64) for s in seeds], 1e-2,
        )
        grad_name = f"{name}_grad"
        if np.allclose(numeric, 0, atol=1e-4) and grad_name not in results:
            continue
        assert grad_name in results, f"no gradient for {name}; outputs: {list(results)}"
        np.testing.assert_allclose(results[grad_name], numeric, rtol=2e-2, atol=2e-3, err_msg=grad_name)


def check_case(case: GradCase, runtime: str, shapes: str) -> None:
    if runtime == "onnxruntime-float32":
        try:  # only where onnxruntime has no float64 kernel
            make_session(make_model(*_model_parts(case), case.opset, shapes), "onnxruntime")
        except Unsupported:
            check_case_float32(case, shapes)
            return
        raise Unsupported("onnxruntime runs this case in float64")
    nodes, outputs, values = case.build()
    specs = {k: v for k, v in case.inputs.items() if not k.startswith("_")}
    model = make_model(nodes, values, specs, outputs, case.opset, shapes)
    feeds = {k: v for k, v in values.items() if not specs[k].constant}

    # Forward on the best runtime available for float64, for the finite differences.
    forward = None
    for candidate in [case.forward_runtime] if case.forward_runtime else ["onnxruntime", "reference"]:
        if runtime == "reference" and candidate == "onnxtrain":
            continue  # keep the check independent of onnxtrain's kernels
        try:
            forward = make_session(model, candidate)
            forward_outputs = forward(feeds)
            break
        except Unsupported:
            continue
    if forward is None:
        raise Unsupported("no runtime for the finite differences runs the forward model")
    rng = np.random.default_rng(case.seed + 1)
    float_outputs = [
        o
        for k, (o, v) in enumerate(zip(outputs, forward_outputs))
        if np.asarray(v).dtype.kind == "f" and (case.seed_outputs is None or k in case.seed_outputs)
    ]
    seeds = [rng.standard_normal(np.shape(v)) if o in float_outputs else None for o, v in zip(outputs, forward_outputs)]

    gradient_model = onnxtrain.build_gradient_graph(model, case.wrt(), outputs=float_outputs)
    run = make_session(gradient_model, runtime)  # may raise Unsupported
    grad_feeds = dict(feeds)
    for o, s in zip(outputs, seeds):
        if s is not None:
            grad_feeds[f"{o}_grad"] = s
    results = dict(zip([o.name for o in gradient_model.graph.output], run(grad_feeds)))
    for o, expected in zip(outputs, forward_outputs):
        np.testing.assert_allclose(results[o], expected, rtol=1e-6, atol=1e-9, err_msg=f"forward output {o}")

    for name in case.wrt():
        assert not specs[name].constant, "differentiated inputs must be graph inputs"
        numeric = numeric_gradient(forward, feeds, name, seeds, case.eps)
        grad_name = f"{name}_grad"
        if not np.any(numeric):
            # A gradient that is identically zero may be absent.
            if grad_name in results:
                np.testing.assert_allclose(results[grad_name], numeric, atol=case.atol)
            continue
        assert grad_name in results, f"no gradient for {name}; outputs: {list(results)}"
        analytic = results[grad_name]
        assert analytic.shape == numeric.shape, f"{grad_name}: shape {analytic.shape}, expected {numeric.shape}"
        np.testing.assert_allclose(analytic, numeric, rtol=case.rtol, atol=case.atol, err_msg=grad_name)



def _model_parts(case: GradCase):
    nodes, outputs, values = case.build()
    specs = {k: v for k, v in case.inputs.items() if not k.startswith("_")}
    return nodes, values, specs, outputs


def gradient_params(cases: Sequence[GradCase]) -> list:
    """One pytest param per (case, shapes, runtime) a case asks for."""
    params = []
    for c in cases:
        for shapes in c.shapes:
            for runtime in c.runtimes:
                if runtime == "reference" and shapes == "dynamic":
                    continue  # the reference evaluator ignores declared shapes
                params.append(pytest.param(c, shapes, runtime, id=f"{c.id}-{shapes}-{runtime}"))
    return params


def check_or_skip(case: GradCase, runtime: str, shapes: str) -> None:
    """check_case, skipping (with the first line of the reason) where the runtime cannot run it."""
    try:
        check_case(case, runtime, shapes)
    except Unsupported as e:
        pytest.skip(f"{runtime}: {str(e).splitlines()[0][:160]}")
