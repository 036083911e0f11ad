"""onnxtrain's shape inference against code nobody here wrote: ONNX's backend node tests.

For every node test onnxtrain runs, the graph outputs' declared types are erased and the
model is inferred again, by onnxtrain and by `onnx.shape_inference`. onnxtrain's element
types and shapes must agree with the data the test expects at each graph output, and with
onnx.shape_inference at every value both know of (intermediates of the *_expanded tests
included). Where one side knows less — a size it leaves unknown or symbolic — nothing is
compared; what both state must agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import shape_inference

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx_backend_runner as backend_runner  # noqa: E402

from onnxtrain import _C  # noqa: E402

RUNNER = backend_runner.BackendTestRunner(backend_runner.load_backend(), isolate=False, timeout_s=120)

Type = tuple[int, list[int | str | None] | None]  # (ONNX element type, dims or None)


def erased_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    for output in stripped.graph.output:
        output.type.Clear()
    return stripped


def ours(model: onnx.ModelProto) -> dict[str, Type]:
    return {v["name"]: (v["dtype"], v["shape"]) for v in _C.infer_types(model.SerializeToString())}


def onnx_types(model: onnx.ModelProto) -> dict[str, Type]:
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx's inference has its own gaps; nothing to compare then
        return {}
    types = {}
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        if not info.type.HasField("tensor_type"):
            continue
        t = info.type.tensor_type
        dims = None
        if t.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
        types[info.name] = (t.elem_type, dims)
    return types


def disagreement(mine: Type, theirs: Type) -> str | None:
    """What both state and disagree on, or None."""
    (my_dtype, my_dims), (their_dtype, their_dims) = mine, theirs
    if my_dtype and their_dtype and my_dtype != their_dtype:
        return f"element type {my_dtype} against {their_dtype}"
    if my_dims is None or their_dims is None:
        return None
    if len(my_dims) != len(their_dims):
        return f"shape {my_dims} against {their_dims}"
    for a, b in zip(my_dims, their_dims):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return f"shape {my_dims} against {their_dims}"
    return None


def expected_outputs(name: str, model: onnx.ModelProto) -> dict[str, Type]:
    data_sets = backend_runner.load_data_sets(name)
    if not data_sets:
        return {}
    _, _, outputs = data_sets[0]
    types = {}
    for info, array in zip(model.graph.output, outputs):
        if isinstance(array, np.ndarray):
            types[info.name] = (info.type.tensor_type.elem_type, list(array.shape))
    return types


def applicable_cases() -> list[str]:
    return [name for name in backend_runner.all_case_names() if RUNNER.applicability(name).applicable]


def test_agrees_with_the_node_tests_and_onnx_shape_inference() -> None:
    cases = applicable_cases()
    assert len(cases) > 1000, "the node tests onnxtrain runs were not found"
    problems = []
    compared = 0
    for name in cases:
        model = backend_runner.load_model(name)
        stripped = erased_outputs(model)
        mine = ours(stripped)
        truth = expected_outputs(name, model)
        for value, theirs in [*truth.items(), *onnx_types(stripped).items()]:
            if value not in mine:
                continue
            compared += 1
            why = disagreement(mine[value], theirs)
            if why:
                problems.append(f"{name}: {value}: {why}")
    assert compared > 3000
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:400])


@pytest.mark.parametrize(
    "dims, expected",
    [
        # A size over a name, a name over nothing.
        ((["batch", 3], ["batch", None]), None),
        (([2, 3], [2, 4]), "shape [2, 3] against [2, 4]"),
        (([2, "n"], [2, 5]), None),
        (([2], [2, 1]), "shape [2] against [2, 1]"),
    ],
)
def test_disagreement_compares_only_what_both_state(dims, expected) -> None:
    mine, theirs = dims
    assert disagreement((1, mine), (1, theirs)) == expected
    assert disagreement((1, None), (7, theirs)) == "element type 1 against 7"
