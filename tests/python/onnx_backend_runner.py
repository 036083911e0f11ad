"""Runs ONNX's backend node tests through onnxtrain's Python API.

The node tests ship inside the `onnx` package: one folder per test under
`onnx/backend/test/data/node/`, each with a `model.onnx` and `test_data_set_*/`
holding `input_<i>.pb` / `output_<i>.pb` TensorProtos. For every test this module

1. decides whether it applies to the backend: every node (also inside subgraphs, and
   inside model-local functions the runtime would inline) needs a registered kernel
   for the model's opset, every element type must be supported, and inputs/outputs
   must be tensors; otherwise the test is *skipped* with the reason;
2. runs it: `InferenceSession(model path)`, `run(None, feeds)`;
3. compares like ONNX's own backend runner: same count, dtype and shape; floats within
   rtol/atol (NaN equals NaN); integers and booleans exactly. Random outputs (listed in
   backend_expectations.RANDOM_PROPERTY_CHECKS) are checked for properties instead.

Both `test_onnx_backend.py` and `tools/backend_report.py` use `BackendTestRunner`,
which runs each test once and remembers the outcome. With `isolate=True` tests run in
worker processes, so a crash or a hang fails one test instead of the whole run.

For developing this harness without onnxtrain, set
`ONNXTRAIN_BACKEND_STANDIN=onnxruntime`: onnxruntime then stands in for onnxtrain,
its CPU kernel registry playing supported_ops() (or, with
`onnxruntime-all-schemas`, every ONNX schema counted as a kernel).
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import functools
import json
import os
import queue
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, Protocol, cast

import backend_expectations as expectations
import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.loader import DATA_DIR

NODE_DIR = Path(DATA_DIR) / "node"
STANDIN_ENV = "ONNXTRAIN_BACKEND_STANDIN"
#: until_version of a kernel whose opset range is open-ended.
OPEN_VERSION = 2**31 - 1
#: Names of integer attributes that hold an element type (Cast.to, EyeLike.dtype, ...).
DTYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype", "output_datatype", "stash_type"})
FLOAT_DTYPES = frozenset(
    np.dtype(t)
    for t in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
              ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz,
              ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn)
)
EXPANDED_SUFFIX = re.compile(r"_expanded(_ver\d+)?$")

Status = Literal["passed", "failed", "skipped"]
Array = np.ndarray[Any, np.dtype[Any]]


# --- the backend under test -------------------------------------------------------


class Session(Protocol):
    """The part of onnxtrain.InferenceSession the harness uses."""

    def run(
        self, output_names: Sequence[str] | None, feeds: Mapping[str, Array]
    ) -> Sequence[Any]: ...


class Backend(Protocol):
    """The part of the onnxtrain module the harness uses."""

    def InferenceSession(self, model: str | bytes) -> Session: ...  # noqa: N802

    def supported_ops(self) -> Iterable[tuple[str, str, int, int]]: ...


class OnnxRuntimeStandIn:
    """onnxruntime dressed as onnxtrain's Python API, for developing this harness.

    supported_ops() is onnxruntime's CPU kernel registry, or with all_schemas=True
    every ONNX schema (so that every test counts as applicable).
    """

    #: onnx 1.19 writes IR version 12; onnxruntime 1.23 reads up to 11. The node
    #: tests use nothing of IR 12, so the stand-in relabels them rather than fail.
    MAX_IR_VERSION = 11
    #: onnxruntime 1.23 refuses models importing ai.onnx opset 24 or later.
    MAX_ONNX_OPSET = 23

    def __init__(self, *, all_schemas: bool = False) -> None:
        import onnxruntime

        onnxruntime.set_default_logger_severity(4)  # errors come back as exceptions
        self._ort = onnxruntime
        self._all_schemas = all_schemas
        registry = "all ONNX schemas" if all_schemas else "its CPU kernels"
        self.label = (
            f"onnxruntime {onnxruntime.__version__} with {registry} (stand-in for onnxtrain)"
        )

    def InferenceSession(self, model: str | bytes) -> Session:  # noqa: N802
        options = self._ort.SessionOptions()
        options.intra_op_num_threads = 1  # node tests are tiny; threads only cost
        options.log_severity_level = 4
        proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
        proto.ir_version = min(proto.ir_version, self.MAX_IR_VERSION)
        session = self._ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return cast(Session, session)

    def supported_ops(self) -> list[tuple[str, str, int, int]]:
        if self._all_schemas:
            return schema_op_ranges()
        return [
            (domain, op, since, min(until, self.MAX_ONNX_OPSET) if domain == "" else until)
            for domain, op, since, until in self._kernels_and_inlined_functions()
        ]

    def _kernels_and_inlined_functions(self) -> list[tuple[str, str, int, int]]:
        """onnxruntime's CPU kernels, plus what it runs without one: Constant (folded
        into an initializer) and ops whose ONNX schema is a function (inlined)."""
        from onnxruntime.capi import _pybind_state

        ops = [
            (kernel.domain, kernel.op_name, *kernel.version_range)
            for kernel in _pybind_state.get_all_opkernel_def()
            if kernel.provider == "CPUExecutionProvider"
        ]
        ops.append(("", "Constant", 1, OPEN_VERSION))
        functions = {
            (schema.domain, schema.name, schema.since_version)
            for schema in onnx.defs.get_all_schemas_with_history()
            # onnx's type stubs lack these two OpSchema properties.
            if schema.has_function or schema.has_context_dependent_function  # type: ignore[attr-defined]
        }
        ops += [op for op in schema_op_ranges() if op[:3] in functions]
        return ops


def schema_op_ranges() -> list[tuple[str, str, int, int]]:
    """Every ONNX schema version as (domain, op, since, until), until inclusive."""
    versions: dict[tuple[str, str], list[int]] = defaultdict(list)
    for schema in onnx.defs.get_all_schemas_with_history():
        versions[(schema.domain, schema.name)].append(schema.since_version)
    ranges = []
    for (domain, op_type), sinces in versions.items():
        sinces.sort()
        untils = [since - 1 for since in sinces[1:]] + [OPEN_VERSION]
        ranges += [(domain, op_type, s, u) for s, u in zip(sinces, untils)]
    return ranges


def load_backend() -> Backend:
    """onnxtrain, or the stand-in named by $ONNXTRAIN_BACKEND_STANDIN.

    Raises ImportError when onnxtrain cannot be imported.
    """
    standin = os.environ.get(STANDIN_ENV, "")
    if standin in ("onnxruntime", "onnxruntime-all-schemas"):
        return OnnxRuntimeStandIn(all_schemas=standin.endswith("all-schemas"))
    if standin:
        raise ValueError(
            f"{STANDIN_ENV}={standin!r}: known stand-ins are 'onnxruntime' and "
            "'onnxruntime-all-schemas'"
        )
    import onnxtrain

    return onnxtrain  # type: ignore[return-value]


def backend_label(backend: Backend) -> str:
    """A one-line name and version of the backend, for reports."""
    if isinstance(backend, OnnxRuntimeStandIn):
        return backend.label
    return f"onnxtrain {getattr(backend, '__version__', '(unknown version)')}"


def normalize_domain(domain: str) -> str:
    """'ai.onnx' and '' both name the default ONNX domain."""
    return "" if domain == "ai.onnx" else domain


class KernelTable:
    """The (domain, op_type, opset range) entries of a backend's kernel registry."""

    def __init__(self, entries: Iterable[tuple[str, str, int, int]]) -> None:
        self._ranges: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        for domain, op_type, since, until in entries:
            self._ranges[(normalize_domain(domain), op_type)].append((since, until))

    def covers(self, domain: str, op_type: str, version: int) -> bool:
        ranges = self._ranges.get((normalize_domain(domain), op_type), [])
        return any(since <= version <= until for since, until in ranges)


# --- test cases and their applicability -------------------------------------------


@dataclass(frozen=True)
class Applicability:
    """Why a test does not apply to the backend; no reasons means it applies."""

    reasons: tuple[str, ...] = ()
    missing_ops: tuple[str, ...] = ()

    @property
    def applicable(self) -> bool:
        return not self.reasons

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class Outcome:
    """The result of one backend test."""

    name: str
    status: Status
    op: str
    reason: str = ""
    missing_ops: tuple[str, ...] = ()
    seconds: float = 0.0

    @staticmethod
    def from_json(text: str) -> Outcome:
        fields = json.loads(text)
        fields["missing_ops"] = tuple(fields["missing_ops"])
        return Outcome(**fields)


def all_case_names() -> list[str]:
    """The names of all node tests, sorted."""
    return sorted(p.name for p in NODE_DIR.iterdir() if (p / "model.onnx").is_file())


@functools.cache
def load_model(name: str) -> onnx.ModelProto:
    return onnx.load(str(NODE_DIR / name / "model.onnx"))


@functools.cache
def primary_op(name: str) -> str:
    """The op a test is about: its only node, or for an *_expanded test the op of the
    test it expands (its graph is that op's function body)."""
    nodes = load_model(name).graph.node
    if len(nodes) == 1:
        return op_label(nodes[0].domain, nodes[0].op_type)
    base = EXPANDED_SUFFIX.sub("", name)
    if base != name and (NODE_DIR / base / "model.onnx").is_file():
        return primary_op(base)
    return "(multi-node)"


def op_label(domain: str, op_type: str, version: int | None = None) -> str:
    """'Abs', 'ai.onnx.ml::LabelEncoder', with '-<opset>' when a version is given."""
    domain = normalize_domain(domain)
    label = f"{domain}::{op_type}" if domain else op_type
    return label if version is None else f"{label}-{version}"


def tolerance(name: str) -> tuple[float, float]:
    """(rtol, atol) for comparing a test's float outputs."""
    default = (expectations.DEFAULT_RTOL, expectations.DEFAULT_ATOL)
    return expectations.TOLERANCES.get(name, default)


def applicability(name: str, kernels: KernelTable) -> Applicability:
    """Decides whether a test applies to a backend with these kernels."""
    model = load_model(name)
    reasons = []
    if name in expectations.NOT_COMPARABLE:
        reasons.append(f"not comparable: {expectations.NOT_COMPARABLE[name]}")
    non_tensors = non_tensor_values(model.graph)
    if non_tensors:
        reasons.append("not a tensor: " + ", ".join(non_tensors))
    unsupported = sorted(element_type_names(model) - expectations.SUPPORTED_DTYPES)
    if unsupported:
        reasons.append("unsupported dtype: " + ", ".join(unsupported))
    missing = missing_kernels(model, kernels)
    if missing:
        reasons.append("no kernel: " + ", ".join(missing))
    return Applicability(tuple(reasons), tuple(missing))


def held_type(value_type: onnx.TypeProto) -> bool:
    """True for the types the engine holds: tensors, sequences of tensors, optionals of either."""
    kind = value_type.WhichOneof("value")
    if kind == "optional_type":
        value_type = value_type.optional_type.elem_type
        kind = value_type.WhichOneof("value")
    if kind == "sequence_type":
        return value_type.sequence_type.elem_type.WhichOneof("value") == "tensor_type"
    return kind == "tensor_type"


def non_tensor_values(graph: onnx.GraphProto) -> list[str]:
    """Graph inputs and outputs that the engine does not hold (maps, sequences of sequences)."""
    found = []
    for role, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            if not held_type(value.type):
                kind = value.type.WhichOneof("value")
                found.append(f"{role} '{value.name}' is {str(kind).removesuffix('_type')}")
    return found


def container_values(graph: onnx.GraphProto) -> list[str]:
    """Graph inputs and outputs that are sequences or optionals."""
    return [
        value.name
        for value in [*graph.input, *graph.output]
        if value.type.WhichOneof("value") in ("sequence_type", "optional_type")
    ]


def element_type_names(model: onnx.ModelProto) -> set[str]:
    """TensorProto.DataType names used by the graph's values, constants and
    dtype-valued attributes (Cast.to, ...), subgraphs and functions included."""
    codes: set[int] = set()
    graphs = [model.graph, *subgraphs_of(model.graph.node)]
    for function in model.functions:
        graphs += subgraphs_of(function.node)
        codes |= attribute_element_types(function.node)
    for graph in graphs:
        codes |= graph_element_types(graph)
    codes.discard(onnx.TensorProto.UNDEFINED)
    return {onnx.TensorProto.DataType.Name(code) for code in codes}


def graph_element_types(graph: onnx.GraphProto) -> set[int]:
    """Element types of one graph's values, initializers and node attributes."""
    values = [*graph.input, *graph.output, *graph.value_info]
    codes = {v.type.tensor_type.elem_type for v in values if v.type.HasField("tensor_type")}
    codes |= {initializer.data_type for initializer in graph.initializer}
    return codes | attribute_element_types(graph.node)


def attribute_element_types(nodes: Iterable[onnx.NodeProto]) -> set[int]:
    """Element types named by tensor attributes and dtype-valued int attributes."""
    codes = set()
    for node in nodes:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                codes.add(attribute.t.data_type)
            elif attribute.type == onnx.AttributeProto.INT and attribute.name in DTYPE_ATTRIBUTES:
                codes.add(attribute.i)
    return codes


def direct_subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held by one node's attributes (If branches, Loop and Scan bodies)."""
    graphs = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            graphs.append(attribute.g)
        graphs += attribute.graphs
    return graphs


def subgraphs_of(nodes: Iterable[onnx.NodeProto]) -> list[onnx.GraphProto]:
    """All graphs held by the nodes' attributes, nested ones included."""
    found = []
    for node in nodes:
        for graph in direct_subgraphs(node):
            found += [graph, *subgraphs_of(graph.node)]
    return found


def opset_versions(imports: Iterable[onnx.OperatorSetIdProto]) -> dict[str, int]:
    return {normalize_domain(entry.domain): entry.version for entry in imports}


def missing_kernels(model: onnx.ModelProto, kernels: KernelTable) -> list[str]:
    """Labels ('Op-opset') of the nodes no kernel covers. A call to a model-local
    function is covered when every node of its body is (onnxtrain inlines it)."""
    functions = {(f.domain, f.name, f.overload): f for f in model.functions}
    missing: set[str] = set()
    _collect_missing(
        model.graph.node,
        opset_versions(model.opset_import),
        functions,
        kernels,
        missing,
        frozenset(),
    )
    return sorted(missing)


FunctionKey = tuple[str, str, str]


def _collect_missing(
    nodes: Iterable[onnx.NodeProto],
    opsets: Mapping[str, int],
    functions: Mapping[FunctionKey, onnx.FunctionProto],
    kernels: KernelTable,
    missing: set[str],
    calling: frozenset[FunctionKey],
) -> None:
    for node in nodes:
        for graph in direct_subgraphs(node):
            _collect_missing(graph.node, opsets, functions, kernels, missing, calling)
        version = opsets.get(normalize_domain(node.domain), 0)
        if kernels.covers(node.domain, node.op_type, version):
            continue
        key = (node.domain, node.op_type, node.overload)
        function = functions.get(key)
        if function is None or key in calling:
            missing.add(op_label(node.domain, node.op_type, version))
            continue
        body_opsets = {**opsets, **opset_versions(function.opset_import)}
        _collect_missing(function.node, body_opsets, functions, kernels, missing, calling | {key})


# --- running and comparing ----------------------------------------------------------


def read_tensor(path: Path, value_type: onnx.TypeProto | None = None) -> Any:
    """A data file: a TensorProto as an array; for a sequence a SequenceProto as a list of
    arrays, for an optional an OptionalProto as its value or None."""
    kind = value_type.WhichOneof("value") if value_type is not None else "tensor_type"
    if kind in ("sequence_type", "optional_type"):
        proto = onnx.SequenceProto() if kind == "sequence_type" else onnx.OptionalProto()
        proto.ParseFromString(path.read_bytes())
        return numpy_helper.to_list(proto) if kind == "sequence_type" else numpy_helper.to_optional(proto)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def load_data_sets(name: str) -> list[tuple[str, dict[str, Array], list[Array]]]:
    """(data set name, feeds by input name, expected outputs) for each data set.

    Like ONNX's runner, input_<i>.pb feeds the graph's i-th input."""
    graph = load_model(name).graph
    data_sets = []
    for directory in sorted((NODE_DIR / name).glob("test_data_set_*")):
        inputs = numbered_tensors(directory, "input", graph.input)
        feeds = {graph.input[i].name: tensor for i, tensor in enumerate(inputs)}
        data_sets.append((directory.name, feeds, numbered_tensors(directory, "output", graph.output)))
    return data_sets


def numbered_tensors(directory: Path, prefix: str, values: Sequence[onnx.ValueInfoProto]) -> list[Any]:
    count = len(list(directory.glob(f"{prefix}_*.pb")))
    return [
        read_tensor(directory / f"{prefix}_{i}.pb", values[i].type if i < len(values) else None)
        for i in range(count)
    ]


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()


def execute(name: str, backend: Backend) -> str | None:
    """Runs an applicable test; returns None when it passes, else what went wrong."""
    rtol, atol = tolerance(name)
    output_names = [output.name for output in load_model(name).graph.output]
    try:
        session = backend.InferenceSession(str(NODE_DIR / name / "model.onnx"))
    except Exception as error:  # any error fails the test
        return f"load: {describe_error(error)}"
    random_check = expectations.RANDOM_PROPERTY_CHECKS.get(name)
    for data_set, feeds, expected in load_data_sets(name):
        try:
            actual = session.run(None, feeds)
        except Exception as error:
            return f"run ({data_set}): {describe_error(error)}"
        if random_check is None:
            problem = compare_outputs(expected, actual, output_names, rtol, atol)
        else:
            problem = check_random_outputs(random_check, list(feeds.values()), expected, actual)
        if problem:
            return f"mismatch ({data_set}): {problem}"
    return None


def compare_outputs(
    expected: Sequence[Array],
    actual: Sequence[Any],
    names: Sequence[str],
    rtol: float,
    atol: float,
) -> str | None:
    """None when the outputs match, else a description of the first difference."""
    if not isinstance(actual, (list, tuple)):
        return f"run returned a {type(actual).__name__}, expected a list of arrays"
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    return first_difference(expected, actual, lambda i: f"output {i} '{names[i]}'", rtol, atol)


def first_difference(expected: Sequence[Any], actual: Sequence[Any], label: Callable[[int], str], rtol: float,
                     atol: float) -> str | None:
    """The first pair of values that differ, described after its `label`; None when all match."""
    for i, (want, got) in enumerate(zip(expected, actual)):
        problem = compare_tensor(want, got, rtol, atol)
        if problem:
            return f"{label(i)}: {problem}"
    return None


def compare_tensor(expected: Any, actual: Any, rtol: float, atol: float) -> str | None:
    """Dtype and shape must match; floats within tolerance, others exactly. A sequence (a
    list) matches element by element; an optional without a value is None."""
    if expected is None:
        return None if actual is None else f"got a {type(actual).__name__}, expected None (no value)"
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return f"got a {type(actual).__name__}, expected a list of {len(expected)} arrays"
        if len(actual) != len(expected):
            return f"a sequence of {len(actual)} tensors, expected {len(expected)}"
        return first_difference(expected, actual, lambda k: f"element {k}", rtol, atol)
    if not isinstance(actual, np.ndarray):
        return f"got a {type(actual).__name__}, expected a numpy array"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    if expected.dtype in FLOAT_DTYPES:
        return compare_close(expected.astype(np.float64), actual.astype(np.float64), rtol, atol)
    return describe_differences(expected, actual, actual != expected, "differ")


def compare_close(expected: Array, actual: Array, rtol: float, atol: float) -> str | None:
    """Like numpy.testing.assert_allclose(actual, expected): |a - e| <= atol + rtol * |e|,
    NaN equal to NaN, infinities equal to themselves."""
    bad = ~np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        abs_diff = np.abs(actual - expected)[bad]
        rel_diff = abs_diff / np.abs(expected[bad])
    max_abs = np.nanmax(abs_diff, initial=0)
    max_rel = np.nanmax(rel_diff, initial=0)
    limits = (
        f"beyond rtol={rtol:g}, atol={atol:g} "
        f"(max abs diff {max_abs:.3g}, max rel diff {max_rel:.3g})"
    )
    return describe_differences(expected, actual, bad, limits)


def describe_differences(expected: Array, actual: Array, bad: Array, how: str) -> str | None:
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"{int(bad.sum())} of {bad.size} values {how}; first at {first}: "
        f"got {actual[first]!r}, expected {expected[first]!r}"
    )


# --- random outputs, checked by property ---------------------------------------------

#: Sigmas a count may stray from its expectation before a random check fails: a false
#: alarm about once in 10^9 checks.
RANDOM_SIGMAS = 6.0


def _within_sigmas(count: float, mean: float, variance: float) -> str | None:
    """None when a count is within RANDOM_SIGMAS standard deviations (+1 for rounding)."""
    limit = RANDOM_SIGMAS * float(np.sqrt(variance)) + 1.0
    if abs(count - mean) <= limit:
        return None
    return f"count {count:g} is more than {limit:.3g} from its expectation {mean:.3g}"


def _check_zero_or_one(inputs: Sequence[Array], outputs: Sequence[Array]) -> str | None:
    y = outputs[0].astype(np.float64)
    if not np.isin(y, (0.0, 1.0)).all():
        return "values other than 0 and 1"
    return None


def _check_bernoulli(inputs: Sequence[Array], outputs: Sequence[Array]) -> str | None:
    problem = _check_zero_or_one(inputs, outputs)
    if problem:
        return problem
    p, y = inputs[0].astype(np.float64), outputs[0].astype(np.float64)
    if (y[p == 0] != 0).any() or (y[p == 1] != 1).any():
        return "a 1 where p = 0 or a 0 where p = 1"
    return _within_sigmas(float(y.sum()), float(p.sum()), float((p * (1 - p)).sum()))


def _check_dropout(inputs: Sequence[Array], outputs: Sequence[Array]) -> str | None:
    x = inputs[0].astype(np.float64)
    ratio = float(inputs[1]) if len(inputs) > 1 else 0.5
    y = outputs[0].astype(np.float64)
    scaled = x / (1 - ratio)
    kept = np.isclose(y, scaled, rtol=1e-6, atol=0) & (x != 0)
    if not (kept | (y == 0)).all():
        return "an output that is neither 0 nor x / (1 - ratio)"
    if len(outputs) > 1:
        mask = outputs[1]
        if mask.dtype != np.bool_:
            return f"mask of dtype {mask.dtype}, expected bool"
        if not np.allclose(np.where(mask, scaled, 0.0), y, rtol=1e-6, atol=0):
            return "output differs from where(mask, x / (1 - ratio), 0)"
        kept_count = float(mask.sum())
    else:
        kept_count = float(kept.sum())  # a kept zero reads as dropped: a slight undercount
        kept_count += float((x == 0).sum()) * (1 - ratio)
    n = x.size
    return _within_sigmas(kept_count, n * (1 - ratio), n * ratio * (1 - ratio))


#: The property checks of backend_expectations.RANDOM_PROPERTY_CHECKS: what each verifies
#: (for the report) and the function. Dtypes, shapes and output counts are checked first.
RANDOM_CHECKS: dict[str, tuple[str, Callable[[Sequence[Array], Sequence[Array]], str | None]]] = {
    "bernoulli": (
        "values 0 or 1; 0 where p = 0, 1 where p = 1; count of ones within 6 sigma of sum(p)",
        _check_bernoulli,
    ),
    "zero_or_one": ("values 0 or 1 (ONNX's function body draws 1 with probability 1 - p)",
                    _check_zero_or_one),
    "dropout": (
        "each output 0 or x / (1 - ratio); mask consistent with the output; kept count within "
        "6 sigma of n (1 - ratio)",
        _check_dropout,
    ),
}


def check_random_outputs(
    check: str,
    inputs: Sequence[Array],
    expected: Sequence[Array],
    actual: Sequence[Any],
) -> str | None:
    """None when random outputs have the expected count, dtypes and shapes and pass the
    property check `check`, else what is wrong."""
    if not isinstance(actual, (list, tuple)):
        return f"run returned a {type(actual).__name__}, expected a list of arrays"
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (want, got) in enumerate(zip(expected, actual)):
        if not isinstance(got, np.ndarray):
            return f"output {i}: got a {type(got).__name__}, expected a numpy array"
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"output {i}: {got.dtype}{got.shape}, expected {want.dtype}{want.shape}"
    problem = RANDOM_CHECKS[check][1](inputs, actual)
    return f"random check '{check}': {problem}" if problem else None


def random_check_description(name: str) -> str | None:
    """What a random test's outputs are checked for, or None for a test compared by value."""
    check = expectations.RANDOM_PROPERTY_CHECKS.get(name)
    return None if check is None else RANDOM_CHECKS[check][0]


def run_case(name: str, backend: Backend, kernels: KernelTable) -> Outcome:
    """Decides applicability, then runs one test in this process."""
    fit = applicability(name, kernels)
    if not fit.applicable:
        return Outcome(name, "skipped", primary_op(name), fit.reason, fit.missing_ops)
    start = time.perf_counter()
    problem = execute(name, backend)
    seconds = time.perf_counter() - start
    status: Status = "passed" if problem is None else "failed"
    return Outcome(name, status, primary_op(name), problem or "", seconds=seconds)


# --- crash-proof execution in worker processes --------------------------------------


class _WorkerLostError(Exception):
    """The worker died or hung while running a test."""


class IsolatedWorker:
    """A child process running tests one at a time; replaced after a crash or hang.

    Protocol: the parent writes a test name per line to the child's stdin; the child
    answers with one JSON Outcome per line on the stdout it was started with. The
    child points its own fd 1 at stderr, so prints from native code cannot interleave.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = b""

    def run(self, name: str) -> Outcome:
        process = self._ensure_started()
        assert process.stdin is not None and self._stderr is not None
        stderr_start = self._stderr.seek(0, os.SEEK_END)
        start = time.perf_counter()
        try:
            process.stdin.write(f"{name}\n".encode())
            process.stdin.flush()
            return Outcome.from_json(self._read_line(start + self.timeout_s))
        except (_WorkerLostError, BrokenPipeError) as lost:
            reason = self._post_mortem(lost, stderr_start)
            return Outcome(
                name, "failed", primary_op(name), reason, seconds=time.perf_counter() - start
            )

    def close(self) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        if self._stderr is None:
            # Kept open across restarts; closed with the worker.
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._buffer = b""
        self._process = subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        return self._process

    def _read_line(self, deadline: float) -> str:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise _WorkerLostError(f"timed out after {self.timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise _WorkerLostError("crashed")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def _post_mortem(self, lost: Exception, stderr_start: int) -> str:
        """Stops the worker and says how it ended, with the end of its stderr."""
        assert self._process is not None and self._stderr is not None
        if self._process.poll() is None:
            self._process.kill()
        code = self._process.wait()
        self._process = None
        how = str(lost) if isinstance(lost, _WorkerLostError) else "crashed"
        if code < 0 and how == "crashed":
            how = f"crashed ({signal.Signals(-code).name})"
        elif how == "crashed":
            how = f"crashed (exit code {code})"
        self._stderr.seek(stderr_start)
        last_words = crash_summary(self._stderr.read().decode(errors="replace"))
        return how + (": " + " | ".join(last_words) if last_words else "")


def crash_summary(stderr: str) -> list[str]:
    """The informative lines of a dead worker's stderr: with a faulthandler dump, the
    lines before it, its first line and the innermost Python frame; else the tail."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is None:
        return lines[-5:]
    frame = next((line for line in lines[fatal:] if line.startswith("File ")), None)
    return [*lines[max(0, fatal - 3) : fatal + 1], *([frame] if frame else [])]


def worker_main() -> int:
    """The child side of IsolatedWorker."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    faulthandler.enable()  # a crash leaves the Python stack in the report
    backend = load_backend()
    kernels = KernelTable(backend.supported_ops())
    for line in sys.stdin:
        name = line.strip()
        try:
            outcome = run_case(name, backend, kernels)
        except Exception as error:  # a harness error fails one test only
            outcome = Outcome(name, "failed", "(unknown)", f"harness: {describe_error(error)}")
        channel.write(json.dumps(dataclasses.asdict(outcome)) + "\n")
    return 0


# --- the runner both the tests and the report use -----------------------------------


class BackendTestRunner:
    """Runs each backend test at most once, in this process or in worker processes,
    and remembers the outcomes.

    isolate: run tests in worker processes, so that a crash or a hang (timeout_s)
    fails that test only. jobs: how many workers run at once (with isolate only).
    """

    def __init__(
        self, backend: Backend, *, isolate: bool = False, jobs: int = 1, timeout_s: float = 120.0
    ) -> None:
        self.backend = backend
        self.kernels = KernelTable(backend.supported_ops())
        self.isolate = isolate
        self.jobs = max(1, jobs) if isolate else 1
        self.timeout_s = timeout_s
        self._outcomes: dict[str, Outcome] = {}
        self._applicability: dict[str, Applicability] = {}
        self._workers: list[IsolatedWorker] = []

    def __enter__(self) -> BackendTestRunner:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            worker.close()

    def applicability(self, name: str) -> Applicability:
        if name not in self._applicability:
            self._applicability[name] = applicability(name, self.kernels)
        return self._applicability[name]

    def outcome(self, name: str) -> Outcome:
        return self.outcomes([name])[0]

    def outcomes(
        self, names: Sequence[str], progress: Callable[[Outcome], None] | None = None
    ) -> list[Outcome]:
        """The outcomes of these tests, running those not run yet."""
        pending = [name for name in dict.fromkeys(names) if name not in self._outcomes]
        to_run = []
        for name in pending:
            fit = self.applicability(name)
            if fit.applicable:
                to_run.append(name)
            else:
                self._record(
                    Outcome(name, "skipped", primary_op(name), fit.reason, fit.missing_ops),
                    progress,
                )
        if self.isolate:
            self._run_isolated(to_run, progress)
        else:
            for name in to_run:
                self._record(run_case(name, self.backend, self.kernels), progress)
        return [self._outcomes[name] for name in names]

    def _record(self, outcome: Outcome, progress: Callable[[Outcome], None] | None) -> None:
        self._outcomes[outcome.name] = outcome
        if progress:
            progress(outcome)

    def _run_isolated(
        self, names: Sequence[str], progress: Callable[[Outcome], None] | None
    ) -> None:
        while len(self._workers) < min(self.jobs, len(names)):
            self._workers.append(IsolatedWorker(self.timeout_s))
        todo: queue.SimpleQueue[str] = queue.SimpleQueue()
        for name in names:
            todo.put(name)
        lock = threading.Lock()

        def drain(worker: IsolatedWorker) -> None:
            while True:
                try:
                    name = todo.get_nowait()
                except queue.Empty:
                    return
                outcome = worker.run(name)
                with lock:
                    self._record(outcome, progress)

        threads = [threading.Thread(target=drain, args=(w,)) for w in self._workers[: len(names)]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="serve IsolatedWorker requests")
    args = parser.parse_args()
    if args.worker:
        return worker_main()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
