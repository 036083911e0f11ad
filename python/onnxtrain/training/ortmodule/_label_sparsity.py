"""Label sparsity: when most labels of a SoftmaxCrossEntropyLoss are its ignore_index (the
padding of a language model's batch), compute the loss on the valid rows only.

The pass gathers the rows whose label is valid right before the loss, and where that is
exact it moves the gather above the ops that produce the logits — a Reshape to
``[-1, classes]`` of a MatMul with a 2-D weight (the LM head) — so the head multiplies the
valid rows only. Loss and gradients equal the dense graph's: a mean over the valid labels
is the mean over the gathered ones, and the gather's gradient scatters back to the rows it
took.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

_LABEL_PATH_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Cast", "Identity"})


@dataclass(frozen=True)
class SparseLoss:
    """A loss the pass rewrote: its node, the graph input with its labels, their density,
    and whether the gather moved above the logits' MatMul."""

    node: str
    labels: str
    density: float
    before_matmul: bool


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output if out}


def _consumers(graph: onnx.GraphProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            counts[name] = counts.get(name, 0) + 1
    for output in graph.output:
        counts[output.name] = counts.get(output.name, 0) + 1
    return counts


def _label_source(name: str, producers: dict[str, onnx.NodeProto], inputs: set[str]) -> str | None:
    """The graph input the labels come from through shape-only ops, or None."""
    while name not in inputs:
        node = producers.get(name)
        if node is None or node.op_type not in _LABEL_PATH_OPS:
            return None
        name = node.input[0]
    return name


def _constant_ints(name: str, producers: dict[str, onnx.NodeProto], graph: onnx.GraphProto) -> list[int] | None:
    node = producers.get(name)
    if node is not None and node.op_type == "Constant":
        for attribute in node.attribute:
            if attribute.name == "value":
                return onnx.numpy_helper.to_array(attribute.t).astype(np.int64).tolist()
    for init in graph.initializer:
        if init.name == name:
            return onnx.numpy_helper.to_array(init).astype(np.int64).tolist()
    return None


def _attribute(node: onnx.NodeProto, name: str, default=None):
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _rank(model: onnx.ModelProto, name: str) -> int | None:
    for value in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if value.name == name and value.type.tensor_type.HasField("shape"):
            return len(value.type.tensor_type.shape.dim)
    return None


def sparse_losses(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, str]]:
    """The losses the pass can rewrite, with the graph input their labels come from."""
    graph = model.graph
    producers = _producers(graph)
    inputs = {i.name for i in graph.input}
    consumers = _consumers(graph)
    found = []
    for node in graph.node:
        if node.op_type != "SoftmaxCrossEntropyLoss" or node.domain not in ("", "ai.onnx"):
            continue
        if _attribute(node, "ignore_index") is None or _attribute(node, "reduction", b"mean") == b"none":
            continue
        if len(node.output) > 1 and node.output[1] and consumers.get(node.output[1]):
            continue  # its log-probabilities are read: their shape must stay
        source = _label_source(node.input[1], producers, inputs)
        if source is not None:
            found.append((node, source))
    return found


def apply(model: onnx.ModelProto, densities: dict[str, float], threshold: float) -> tuple[onnx.ModelProto, list[SparseLoss]]:
    """``model`` with the losses whose label density (per graph input, in ``densities``) is
    below ``threshold`` computed on the valid rows; the rewritten losses."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(result)
    graph = result.graph
    rewritten = []
    for node, labels in sparse_losses(result):
        density = densities.get(labels)
        if density is None or density >= threshold:
            continue
        moved = _gather_valid_rows(graph, inferred, node)
        rewritten.append(SparseLoss(node.name or node.output[0], labels, density, moved))
    if rewritten:
        _remove_dead_nodes(graph)
    return result, rewritten


def _gather_valid_rows(graph: onnx.GraphProto, inferred: onnx.ModelProto, loss: onnx.NodeProto) -> bool:
    producers = _producers(graph)
    consumers = _consumers(graph)
    prefix = f"{loss.output[0]}_valid"
    logits, labels = loss.input[0], loss.input[1]
    ignore = int(_attribute(loss, "ignore_index"))
    new = [
        helper.make_node("Constant", [], [f"{prefix}_ignore"], value=helper.make_tensor(
            f"{prefix}_ignore", _label_type(inferred, labels), [], [ignore])),
        helper.make_node("Equal", [labels, f"{prefix}_ignore"], [f"{prefix}_ignored"]),
        helper.make_node("Not", [f"{prefix}_ignored"], [f"{prefix}_mask"]),
        helper.make_node("NonZero", [f"{prefix}_mask"], [f"{prefix}_nonzero"]),
        helper.make_node("Constant", [], [f"{prefix}_flat"], value=helper.make_tensor(
            f"{prefix}_flat", onnx.TensorProto.INT64, [1], [-1])),
        helper.make_node("Reshape", [f"{prefix}_nonzero", f"{prefix}_flat"], [f"{prefix}_rows"]),
        helper.make_node("Gather", [labels, f"{prefix}_rows"], [f"{prefix}_labels"], axis=0),
    ]
    rows = f"{prefix}_rows"
    moved = False
    reshape = producers.get(logits)
    matmul = producers.get(reshape.input[0]) if reshape is not None and reshape.op_type == "Reshape" else None
    shape = _constant_ints(reshape.input[1], producers, graph) if matmul is not None else None
    if (
        matmul is not None and matmul.op_type == "MatMul" and shape is not None and len(shape) == 2 and shape[0] == -1
        and consumers.get(reshape.input[0]) == 1 and consumers.get(logits) == 1
        and _rank(inferred, matmul.input[1]) == 2
    ):
        # Reshape(MatMul(h, W), [-1, C]) rows == MatMul(Reshape(h, [-1, D]), W) rows.
        hidden, weight = matmul.input
        new += [
            helper.make_node("Shape", [hidden], [f"{prefix}_hidden_shape"], start=-1),
            helper.make_node("Concat", [f"{prefix}_flat", f"{prefix}_hidden_shape"], [f"{prefix}_hidden_2d"], axis=0),
            helper.make_node("Reshape", [hidden, f"{prefix}_hidden_2d"], [f"{prefix}_hidden_rows"]),
            helper.make_node("Gather", [f"{prefix}_hidden_rows", rows], [f"{prefix}_hidden"], axis=0),
            helper.make_node("MatMul", [f"{prefix}_hidden", weight], [f"{prefix}_logits"]),
        ]
        moved = True
    else:
        new.append(helper.make_node("Gather", [logits, rows], [f"{prefix}_logits"], axis=0))
    position = list(graph.node).index(loss)
    for offset, node in enumerate(new):
        graph.node.insert(position + offset, node)
    loss.input[0] = f"{prefix}_logits"
    loss.input[1] = f"{prefix}_labels"
    return moved


def _label_type(model: onnx.ModelProto, name: str) -> int:
    for value in list(model.graph.input) + list(model.graph.value_info):
        if value.name == name:
            return value.type.tensor_type.elem_type
    return onnx.TensorProto.INT64


def _remove_dead_nodes(graph: onnx.GraphProto) -> None:
    while True:
        used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if not any(out in used for out in n.output if out)]
        if not dead:
            return
        for node in dead:
            graph.node.remove(node)
