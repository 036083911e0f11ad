"""onnxtrain's kernels for the com.microsoft training ops against onnxruntime-training 1.19.2.

ort_artifacts/kernels.json was written by tools/ort_kernel_cases.py in ORT-training's venv:
one-node models, their seeded inputs and what ORT's kernels returned. Here onnxtrain runs the
same serialized models. Tolerances: rtol 1e-5, atol 1e-6 (float32; the kernels may sum in
another order).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

import onnxtrain

CASES = json.loads((Path(__file__).resolve().parent / "ort_artifacts" / "kernels.json").read_text())["cases"]


def array(entry: dict) -> np.ndarray:
    raw = base64.b64decode(entry["base64"])
    return np.frombuffer(raw, dtype=np.dtype(entry["dtype"])).reshape(entry["shape"]).copy()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_kernel_matches_ort_training(case):
    session = onnxtrain.InferenceSession(base64.b64decode(case["model"]))
    outputs = session.run(None, {name: array(entry) for name, entry in case["inputs"].items()})
    expected = [array(e) for e in case["outputs"]]
    assert len(outputs) == len(expected)
    for i, (ours, theirs) in enumerate(zip(outputs, expected)):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, f"output {i}: {ours.dtype}{ours.shape}"
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=f"{case['name']} output {i}")


def test_every_com_microsoft_op_of_the_artifacts_is_covered():
    """The ops of ORT's training models (ops.md) have a case here or are rewritten on load."""
    table = (Path(__file__).resolve().parent / "ort_artifacts" / "ops.md").read_text()
    ops = {line.split("`")[1].split("::")[1] for line in table.splitlines() if line.startswith("| `com.microsoft::")}
    covered = {onnxtrain_op(c) for c in CASES}
    rewritten = {"InPlaceAccumulatorV2", "GatherGrad", "AdamWOptimizer", "SGDOptimizerV2"}
    assert ops - covered - rewritten == set()


def onnxtrain_op(case: dict) -> str:
    import onnx

    return onnx.load_model_from_string(base64.b64decode(case["model"])).graph.node[0].op_type
