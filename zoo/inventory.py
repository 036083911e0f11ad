"""The ops of the zoo's exports: what onnxtrain must run (``python -m zoo`` prints them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zoo import get_case, list_cases

OpKey = tuple[str, str, int]  # (domain, op_type, opset of that domain)


def _iter_ops(nodes: Any, opsets: dict[str, int]) -> Iterator[OpKey]:
    """Every (domain, op_type, opset) in ``nodes``, recursing into subgraph attributes."""
    import onnx

    for node in nodes:
        domain = "" if node.domain == "ai.onnx" else node.domain
        yield domain, node.op_type, opsets.get(domain, -1)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_ops(attr.g.node, opsets)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _iter_ops(g.node, opsets)


def model_ops(path: Path | str) -> set[OpKey]:
    """The (domain, op_type, opset) set of a model, including its local functions' bodies
    (each with the function's own opset imports)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    ops = set(_iter_ops(model.graph.node, opsets))
    for function in model.functions:
        f_opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in function.opset_import}
        ops |= set(_iter_ops(function.node, f_opsets))
    return ops


def op_inventory(cases: list[str] | None = None) -> dict[str, set[OpKey]]:
    """Per case id, the set of (domain, op_type, opset) of every node (exports as needed)."""
    return {cid: model_ops(get_case(cid).onnx_path) for cid in (cases or list_cases())}


def training_nodes(path: Path | str) -> list[str]:
    """Human-readable summary of the Dropout and BatchNormalization nodes of a model."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    lines = []
    for node in model.graph.node:
        if node.op_type not in ("Dropout", "BatchNormalization"):
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        used_outputs = sum(1 for o in node.output if o)
        lines.append(f"{node.op_type} inputs={len(node.input)} outputs={used_outputs} attrs={attrs}")
    return lines


def _attribute_text(attr: Any) -> str:
    import onnx

    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return f"{attr.name}=<graph>"
    if attr.type == onnx.AttributeProto.TENSOR:
        t = attr.t
        return f"{attr.name}=<tensor {onnx.TensorProto.DataType.Name(t.data_type)}{list(t.dims)}>"
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, float):
        value = float(f"{value:.6g}")
    return f"{attr.name}={value}"


def attribute_variants(path: Path | str) -> dict[str, set[str]]:
    """Per op type of the main graph, the distinct ``name=value`` attribute sets (with the
    number of inputs), e.g. ``{"Gemm": {"in=3 alpha=1.0 beta=1.0 transB=1"}}``."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    variants: dict[str, set[str]] = {}
    for node in model.graph.node:
        attrs = " ".join(sorted(_attribute_text(a) for a in node.attribute))
        present = sum(1 for i in node.input if i)
        variants.setdefault(node.op_type, set()).add(f"in={present} {attrs}".strip())
    return variants
