"""A short slice of the differential graph fuzzer (tools/graph_fuzz.py): random valid ONNX
graphs run by onnxtrain and onnxruntime, each case in a worker process so a crash is caught.
Fails on a crash, on an error onnxruntime does not raise, or on outputs that differ beyond the
fuzzer's tolerances (float32 rtol 1e-4/atol 1e-5, float64 1e-9/1e-12, integers exact) where
the difference is not one of onnxruntime's documented deviations from the spec."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxtrain

pytest.importorskip("onnxruntime")

TOOL = Path(__file__).resolve().parents[2] / "tools" / "graph_fuzz.py"


@pytest.fixture(scope="module")
def graph_fuzz():
    spec = importlib.util.spec_from_file_location("graph_fuzz", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["graph_fuzz"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def worker_finds_this_onnxtrain(monkeypatch):
    # The worker is a fresh interpreter: it must import the onnxtrain this test imported.
    package_root = str(Path(onnxtrain.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))


def test_thirty_random_graphs_agree_with_onnxruntime(graph_fuzz, tmp_path):
    summary = graph_fuzz.fuzz(seed=0, cases=30, seconds=None, out=tmp_path)
    failures = [f for f in summary["findings"] if f["status"] in graph_fuzz.FAILURES]
    assert not failures, json.dumps(failures, indent=1, default=str)[:4000]
    assert summary["cases"] == 30
    assert summary["counts"].get("ok", 0) >= 20, summary["counts"]  # most cases really ran on both


def test_cases_are_valid_and_deterministic(graph_fuzz):
    supported = {op for domain, op, *_ in onnxtrain.supported_ops() if domain in ("", "ai.onnx")}
    for index in range(10):
        model, feeds = graph_fuzz.generate(3, index, supported)
        again, feeds_again = graph_fuzz.generate(3, index, supported)
        assert model.SerializeToString() == again.SerializeToString()
        assert feeds.keys() == feeds_again.keys() and all(np.array_equal(feeds[k], feeds_again[k]) for k in feeds)
        onnx.checker.check_model(model, full_check=True)
        assert {n.op_type for n in model.graph.node} <= supported


def test_a_crash_is_caught_and_the_case_saved(graph_fuzz, tmp_path, monkeypatch):
    # A worker that dies in onnxtrain's stage stands for a segfault: the driver must survive,
    # report a crash and keep the model and inputs.
    monkeypatch.setenv("GRAPH_FUZZ_TEST_ABORT", "1")
    summary = graph_fuzz.fuzz(seed=0, cases=2, seconds=None, out=tmp_path)
    crashes = [f for f in summary["findings"] if f["status"] == "crash"]
    assert len(crashes) == 2, summary
    folder = Path(crashes[0]["folder"])
    assert (folder / "model.onnx").exists() and (folder / "inputs.npz").exists()
    assert "died with -6" in crashes[0]["detail"]  # SIGABRT


def test_onnxruntime_dying_in_its_child_process_is_not_a_finding(graph_fuzz):
    # LpNormalization of an empty tensor kills onnxruntime 1.23 with SIGFPE. In its child
    # process that is the case's `ort_crash`; this process lives on, and the restarted child
    # runs the next case.
    from onnx import helper

    def model(shape):
        x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)
        y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
        graph = helper.make_graph([helper.make_node("LpNormalization", ["x"], ["y"], axis=0)], "lp", [x], [y])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9).SerializeToString()

    onnxruntime = graph_fuzz.IsolatedOnnxruntime(timeout=120)
    try:
        died = graph_fuzz.check_case(model([0, 3]), {"x": np.zeros((0, 3), np.float32)}, onnxruntime=onnxruntime)
        assert died["status"] == "ort_crash", died
        assert "onnxruntime died" in died["detail"]
        ran = graph_fuzz.check_case(model([2, 3]), {"x": np.arange(6, dtype=np.float32).reshape(2, 3)},
                                    onnxruntime=onnxruntime)
        assert ran == {"status": "ok"}
        refused = graph_fuzz.check_case(b"not a model", {}, onnxruntime=onnxruntime)
        assert refused["status"] == "ort_refused" and "onnxtrain" in refused, refused
    finally:
        onnxruntime.stop()


def test_an_ill_conditioned_case_where_onnxtrain_is_nearer_the_reference_is_onnxruntimes(graph_fuzz):
    # LayerNormalization of nearly constant rows far from 0: onnxruntime takes the variance as
    # E[x^2] - E[x]^2 and loses it to cancellation; onnxtrain and onnx.reference do not, but
    # differ from each other in the last bits (the normalized values are ~300x the rows' spread).
    from onnx import helper, numpy_helper

    x = (np.full((3, 1, 8), 77.0) + np.linspace(-1e-3, 1e-3, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-2)], "ln",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 1, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((1, 8), np.float32), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    result = graph_fuzz.check_case(model.SerializeToString(), {"x": x})
    assert result["status"] == "ort_deviation", result
    assert result["reference"].startswith(("agrees with onnxtrain", "nearer onnxtrain")), result
    assert not graph_fuzz.nearer(np.float32([1.0, 2.0]), np.float32([1.0, 2.5]), np.float32([1.0, 2.1]))
    assert graph_fuzz.nearer(np.float32([1.0, np.nan]), np.float32([1.01, np.nan]), np.float32([1.1, np.nan]))
