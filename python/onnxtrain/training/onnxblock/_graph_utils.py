"""Small edits of an ``onnx.ModelProto`` that the blocks share: fresh names, nodes,
constants, looking values up and registering graph outputs."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

_counter = itertools.count()


def value_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name the graph defines or declares."""
    names = defined_names(graph)
    names.update(v.name for v in graph.output)
    names.update(v.name for v in graph.value_info)
    names.discard("")
    return names


def defined_names(graph: onnx.GraphProto) -> set[str]:
    """The values that exist when the graph runs: inputs, initializers, node outputs."""
    names = {v.name for v in graph.input}
    names.update(t.name for t in graph.initializer)
    names.update(t.values.name for t in graph.sparse_initializer)
    for node in graph.node:
        names.update(node.output)
    names.discard("")
    return names


def unique_name(model: onnx.ModelProto, hint: str) -> str:
    """A value or node name that ``model`` does not use yet, starting with ``hint``."""
    taken = value_names(model.graph) | {n.name for n in model.graph.node}
    while True:
        name = f"{hint}::{next(_counter)}"
        if name not in taken:
            return name


def require_values(model: onnx.ModelProto, names: Iterable[str], who: str) -> None:
    """Raises ValueError naming ``who`` when one of ``names`` is no value of ``model``."""
    defined = defined_names(model.graph)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{who}: value names are str, got {type(name).__name__} ({name!r})")
        if name not in defined:
            outputs = [o.name for o in model.graph.output]
            raise ValueError(f"{who}: '{name}' is not a value of the model (not a graph input, initializer or node "
                             f"output); the model's outputs are {outputs}")


def opset(model: onnx.ModelProto, domain: str = "") -> int:
    for entry in model.opset_import:
        if entry.domain in (domain, "ai.onnx" if domain == "" else domain):
            return entry.version
    if domain == "":
        raise ValueError("the base model imports no default ONNX opset")
    return 0


def add_node(model: onnx.ModelProto, op_type: str, inputs: Sequence[str], outputs: int = 1, domain: str = "",
             **attributes: Any) -> Any:
    """Appends one node; returns its output name (or the list of names when outputs > 1)."""
    names = [unique_name(model, f"onnxblock::{op_type}::output") for _ in range(outputs)]
    model.graph.node.append(
        helper.make_node(op_type, list(inputs), names, name=unique_name(model, f"onnxblock::{op_type}"),
                         domain=domain or None, **attributes))
    return names[0] if outputs == 1 else names


def add_constant(model: onnx.ModelProto, value: Any, elem_type: Optional[int] = None) -> str:
    """A Constant node holding ``value`` (a float, int or array), of ``elem_type`` when given
    (default: float32 for Python floats, the array's own type otherwise). Constants are nodes,
    not initializers, so generate_artifacts never takes them for parameters."""
    if elem_type is not None:
        array = np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(elem_type))
    elif isinstance(value, float):
        array = np.asarray(value, dtype=np.float32)
    elif isinstance(value, bool):
        array = np.asarray(value, dtype=np.bool_)
    elif isinstance(value, int):
        array = np.asarray(value, dtype=np.int64)
    else:
        array = np.asarray(value)
        if array.dtype == np.float64 and not isinstance(value, np.ndarray):
            array = array.astype(np.float32)
    tensor = numpy_helper.from_array(array, unique_name(model, "onnxblock::Constant::value"))
    return add_node(model, "Constant", [], value=tensor)


def find_type(inferred: onnx.ModelProto, name: str) -> Optional[onnx.TypeProto]:
    """The type of ``name`` in a shape-inferred model, or None when it is unknown."""
    graph = inferred.graph
    for info in itertools.chain(graph.input, graph.output, graph.value_info):
        if info.name == name and info.type.HasField("tensor_type"):
            return info.type
    for tensor in graph.initializer:
        if tensor.name == name:
            return helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and list(node.output) == [name]:
            for attribute in node.attribute:
                if attribute.name == "value":
                    return helper.make_tensor_type_proto(attribute.t.data_type, list(attribute.t.dims))
    return None


def tensor_type(inferred: onnx.ModelProto, name: str, who: str) -> onnx.TypeProto:
    """Like find_type, but a ValueError naming ``who`` when the type is unknown."""
    found = find_type(inferred, name)
    if found is None or found.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
        raise ValueError(f"{who}: the type of '{name}' is unknown (ONNX shape inference does not find it); "
                         "declare it in the model's value_info or outputs")
    return found


def register_graph_outputs(model: onnx.ModelProto, names: Sequence[str], who: str) -> None:
    """Makes ``names`` the graph outputs of ``model``, typed as shape inference finds them."""
    require_values(model, names, who)
    inferred = onnx.shape_inference.infer_shapes(model) if model.ByteSize() < 2**31 - 1 else model
    outputs = []
    for name in names:
        found = find_type(inferred, name)
        info = onnx.ValueInfoProto(name=name)
        if found is not None:
            info.type.CopyFrom(found)
        outputs.append(info)
    del model.graph.output[:]
    model.graph.output.extend(outputs)


def output_names(output: Any, who: str) -> list[str]:
    """A block's returned output name(s) as a list."""
    if isinstance(output, str):
        return [output]
    if isinstance(output, (list, tuple)) and output and all(isinstance(n, str) for n in output):
        return list(output)
    raise TypeError(f"{who}.build must return an output name (str) or a tuple of them, got {output!r}")
