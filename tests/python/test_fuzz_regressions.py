"""The crashes and the wrong result that fuzzing found (issue 15, causes A-G), each as the
smallest input that reproduced it. Each case runs in a child process, so a regression shows as
a failed test naming the signal instead of taking pytest down; the child must end with a clear
onnxtrain error (or, for valid inputs, the right answer)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
from onnxtrain.training.api import CheckpointState

F = TensorProto.FLOAT


def run_isolated(code: str, tmp_path: Path) -> str:
    """Runs `code` in a fresh interpreter; returns its stdout, failing on a signal or exit code."""
    script = tmp_path / "case.py"
    script.write_text(textwrap.dedent(code))
    package_root = str(Path(onnxtrain.__file__).resolve().parent.parent)  # the onnxtrain this test imported
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, f"exit {done.returncode} (negative: killed by that signal)\n{done.stderr[-3000:]}"
    return done.stdout


def refused(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None, match: str, tmp_path: Path) -> None:
    """Loading (and, with feeds, running) `model` raises an onnxtrain error matching `match`."""
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    np.savez(tmp_path / "feeds.npz", **(feeds or {}))
    out = run_isolated(
        f"""
        import numpy as np, onnxtrain
        feeds = dict(np.load("feeds.npz"))
        try:
            session = onnxtrain.InferenceSession("model.onnx")
            if {feeds is not None}:
                session.run(None, feeds)
            print("NO ERROR")
        except (RuntimeError, ValueError, NotImplementedError) as e:
            print("ERROR", e)
        """,
        tmp_path,
    )
    assert out.startswith("ERROR"), out
    assert match in out, out


def model_of(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "case", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


# ---- A: a value named "" -----------------------------------------------------------------


def test_a_initializer_with_an_empty_name(tmp_path):
    model = model_of([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                     [helper.make_tensor_value_info("y", F, [2])], [numpy_helper.from_array(np.ones(2, np.float32), "")])
    refused(model, None, "initializer 0 has an empty name", tmp_path)


def test_a_constant_with_an_empty_output_name(tmp_path):
    const = helper.make_node("Constant", [], [""], name="the_constant",
                             value=numpy_helper.from_array(np.ones(2, np.float32)))
    model = model_of([const, helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                     [helper.make_tensor_value_info("y", F, [2])])
    refused(model, None, "the output of node 'the_constant' (Constant) has an empty name", tmp_path)


# ---- B: external-data offsets that wrap ----------------------------------------------------


@pytest.mark.parametrize("offset, match", [("-1", "is not a non-negative integer"),
                                           ("-64", "is not a non-negative integer"),
                                           ("twelve", "is not a non-negative integer"),
                                           ("99999999999999999999999", "is not a non-negative integer"),
                                           (str(2**64 - 8), "is too short")])
def test_b_external_data_offset(tmp_path, offset, match):
    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    model = model_of([helper.make_node("Add", ["x", "w"], ["y"])], [helper.make_tensor_value_info("x", F, [4])],
                     [helper.make_tensor_value_info("y", F, [4])], [weight])
    onnx.save(model, tmp_path / "model.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    model = onnx.load(tmp_path / "model.onnx", load_external_data=False)
    tensor = model.graph.initializer[0]
    entries = {e.key: e.value for e in tensor.external_data}
    entries["offset"] = offset
    del tensor.external_data[:]
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    out = run_isolated(
        """
        import onnxtrain
        try:
            onnxtrain.InferenceSession("model.onnx")
            print("NO ERROR")
        except RuntimeError as e:
            print("ERROR", e)
        """,
        tmp_path,
    )
    assert out.startswith("ERROR") and match in out and "'w'" in out, out


# ---- C: sizes that overflow ----------------------------------------------------------------


def test_c_range_of_2_to_the_62(tmp_path):
    ints = [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in ((0, "start"), (2**62, "limit"), (1, "delta"))]
    model = model_of([helper.make_node("Range", ["start", "limit", "delta"], ["y"])], [],
                     [helper.make_tensor_value_info("y", TensorProto.INT64, None)], ints)
    refused(model, {}, "too large", tmp_path)
    session_feeds = {"x": np.ones(1, np.float32)}
    shape = numpy_helper.from_array(np.array([2**62, 1, 1], np.int64), "shape")
    model = model_of([helper.make_node("Expand", ["x", "shape"], ["y"])], [helper.make_tensor_value_info("x", F, [1])],
                     [helper.make_tensor_value_info("y", F, None)], [shape])
    refused(model, session_feeds, "too large", tmp_path)


# ---- D: a required input left out ---------------------------------------------------------


@pytest.mark.parametrize("op, inputs, name, attrs", [
    ("Reshape", ["x", ""], "shape", {}),
    ("Slice", ["x", "", "i"], "starts", {}),
    ("Slice", ["x", "i", ""], "ends", {}),
    ("Expand", ["x", ""], "shape", {}),
    ("Tile", ["x", ""], "repeats", {}),
    ("Pad", ["x", ""], "pads", {}),
])
def test_d_required_input_missing(tmp_path, op, inputs, name, attrs):
    i = numpy_helper.from_array(np.array([1], np.int64), "i")
    model = model_of([helper.make_node(op, inputs, ["y"], **attrs)], [helper.make_tensor_value_info("x", F, [3])],
                     [helper.make_tensor_value_info("y", F, None)], [i])
    refused(model, {"x": np.ones(3, np.float32)}, f"('{name}') is missing", tmp_path)


def test_d_constant_of_shape_without_its_input(tmp_path):
    model = model_of([helper.make_node("ConstantOfShape", [""], ["y"])], [],
                     [helper.make_tensor_value_info("y", F, None)])
    refused(model, {}, "('input') is missing", tmp_path)


# ---- E (wrong numbers, no crash) is in test_runtime_fusions.py and ops/test_pool.py ---------


# ---- F: a checkpoint header nested 100,000 deep --------------------------------------------


def write_safetensors_header(path: Path, header: str) -> None:
    text = header.encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text)


@pytest.mark.parametrize("where", ["header", "onnxtrain metadata"])
def test_f_deeply_nested_checkpoint_json(tmp_path, where):
    deep = "[" * 100_000 + "]" * 100_000
    if where == "header":
        header = '{"w": ' + deep + "}"
    else:
        header = json.dumps({"__metadata__": {"onnxtrain": '{"x": ' + deep + "}"}})
    write_safetensors_header(tmp_path / "checkpoint", header)
    out = run_isolated(
        """
        from onnxtrain.training.api import CheckpointState
        try:
            CheckpointState.load_checkpoint("checkpoint")
            print("NO ERROR")
        except RuntimeError as e:
            print("ERROR", str(e)[:500])
        """,
        tmp_path,
    )
    assert out.startswith("ERROR") and "nested more than 64 levels deep" in out, out


# ---- G: a training step on an empty batch --------------------------------------------------


def test_g_training_step_on_an_empty_batch(tmp_path):
    run_isolated(
        """
        import numpy as np, onnx
        from onnx import helper, numpy_helper, TensorProto
        from onnxtrain.training import artifacts
        from onnxtrain.training.api import CheckpointState, Module, Optimizer
        rng = np.random.default_rng(0)
        w = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w")
        b = numpy_helper.from_array(np.zeros(3, np.float32), "b")
        graph = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["logits"], transB=1)], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 3])], [w, b])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        artifacts.generate_artifacts(model, requires_grad=["w", "b"], loss=artifacts.LossType.MSELoss,
                                     optimizer=artifacts.OptimType.SGD, artifact_directory="art")
        state = CheckpointState.load_checkpoint("art/checkpoint")
        module = Module("art/training_model.onnx", state, "art/eval_model.onnx")
        optimizer = Optimizer("art/optimizer_model.onnx", module)
        before = state.parameters["w"].data.copy()
        loss = module(np.zeros((0, 4), np.float32), np.zeros((0, 3), np.float32))
        grad = state.parameters["w"].grad
        assert grad.shape == (3, 4), grad.shape
        # mean over no elements: torch gives a NaN loss; the weight gradient is an empty sum
        print("loss", float(loss), "grad finite", bool(np.isfinite(grad).all() or np.isnan(grad).all()))
        """,
        tmp_path,
    )


def test_g_gemm_with_an_empty_inner_dimension_is_beta_c():
    """Y = alpha A'B' + beta C with an empty sum is beta C (the spec; onnx.reference agrees,
    onnxruntime 1.23 returns C unscaled)."""
    from onnx.reference import ReferenceEvaluator

    a = np.zeros((0, 3), np.float32)
    b = np.zeros((0, 5), np.float32)
    c = np.arange(5, dtype=np.float32)
    model = model_of([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, beta=0.5)],
                     [helper.make_tensor_value_info(n, F, None) for n in ("a", "b", "c")],
                     [helper.make_tensor_value_info("y", F, None)])
    feeds = {"a": a, "b": b, "c": c}
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(expected, np.broadcast_to(0.5 * c, (3, 5)))
    (got,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_array_equal(got, expected)
    for dtype in (np.float64, np.int64):
        typed = {k: v.astype(dtype) for k, v in feeds.items()}
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        typed_model = model_of([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1)],
                               [helper.make_tensor_value_info(n, elem, None) for n in ("a", "b", "c")],
                               [helper.make_tensor_value_info("y", elem, None)])
        (got,) = onnxtrain.InferenceSession(typed_model.SerializeToString()).run(None, typed)
        np.testing.assert_array_equal(got, np.broadcast_to(c.astype(dtype), (3, 5)))


# ---- a nominal checkpoint whose header claims a shape too large to hold ----------------------


def nominal_checkpoint_with_shape(tmp_path: Path, shape: list[int]) -> Path:
    """A nominal checkpoint written by onnxtrain, its parameter's shape then rewritten."""
    from onnxtrain.training import artifacts

    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    artifacts.generate_artifacts(model, requires_grad=["w"], loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.SGD, artifact_directory=tmp_path / "art",
                                 nominal_checkpoint=True)
    path = tmp_path / "art" / "nominal_checkpoint"
    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    state = json.loads(header["__metadata__"]["onnxtrain"])
    assert state["nominal"] and state["parameters"][0]["shape"] == [3, 4]
    state["parameters"][0]["shape"] = shape
    header["__metadata__"]["onnxtrain"] = json.dumps(state)
    write_safetensors_header(path, json.dumps(header))  # a nominal checkpoint holds no data
    return path


@pytest.mark.parametrize("shape", [[2**31, 2**30], [2**62, 2], [2**40, 2**40], [2**63 - 1, 2**63 - 1, 0]])
def test_nominal_checkpoint_with_an_oversized_shape_is_refused(tmp_path, shape):
    # Its byte size goes through tensor_bytes, the one checked size computation: over 2^62
    # bytes ([2^31, 2^30] float32 is 2^63 bytes, which its own multiplication let through to
    # the allocation) or overflowing 64 bits on the way (even before a 0) is an error naming
    # the file, the parameter and the shape.
    path = nominal_checkpoint_with_shape(tmp_path, shape)
    with pytest.raises(RuntimeError, match=r"nominal_checkpoint': parameter 'w': invalid shape \[.*\]: a float "
                                           r"tensor of shape .* is too large \(more than 2\^62 bytes\)"):
        CheckpointState.load_checkpoint(path)


def test_nominal_checkpoint_with_a_valid_shape_loads_zeros(tmp_path):
    path = nominal_checkpoint_with_shape(tmp_path, [5, 2])
    data = CheckpointState.load_checkpoint(path).parameters["w"].data
    assert data.shape == (5, 2) and data.dtype == np.float32 and not data.any()


# ---- found by tools/graph_fuzz.py: MaxPool dropped NaN ---------------------------------------


def pool_model(op: str, shape: list[int], **attrs) -> bytes:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                              [helper.make_tensor_value_info("x", F, shape)],
                              [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9).SerializeToString()


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [1, 1], "strides": [2, 2]},  # took oneDNN's path: -FLT_MAX for a NaN
    {"kernel_shape": [2, 1], "strides": [2, 2], "pads": [0, 0, 1, 0]},
    {"kernel_shape": [2, 2], "strides": [2, 2]},  # the 2x2 fast path
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "strides": [1, 1], "dilations": [2, 1]},
])
def test_maxpool_propagates_nan(attrs):
    # onnxtrain's MaxPool kept the largest number of a window holding NaN (or -FLT_MAX when all
    # were NaN), depending on the path; torch gives NaN (onnxruntime too where the fuzzer met
    # it; onnx.reference drops a NaN after the window's first element, so torch is the oracle).
    torch = pytest.importorskip("torch")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = x[1, 2, 4, 5] = x[1, 1, 0, 0] = np.nan
    x[0, 1] = np.nan  # a whole plane
    model = pool_model("MaxPool", list(x.shape), **attrs)
    got = onnxtrain.InferenceSession(model).run(None, {"x": x})[0]
    top, left, bottom, right = attrs.get("pads", [0, 0, 0, 0])
    padded = torch.nn.functional.pad(torch.from_numpy(x), (left, right, top, bottom), value=-np.inf)
    expected = torch.nn.functional.max_pool2d(padded, attrs["kernel_shape"], attrs["strides"],
                                              dilation=attrs.get("dilations", [1, 1])).numpy()
    np.testing.assert_array_equal(got, expected)  # NaN where the reference has NaN, same numbers elsewhere
    assert np.isnan(got).any()


@pytest.mark.parametrize("kernel, strides", [([2, 2], [2, 2]), ([3, 3], [2, 2]), ([2, 3], [1, 1])])
def test_maxpool_with_indices_propagates_nan(kernel, strides):
    # The plain windows of training's MaxPool (with Indices) take a branch-free maximum on
    # planes without NaN and the NaN-aware one on planes with a NaN: both against torch.
    torch = pytest.importorskip("torch")

    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    x[0, 0, 1, 1] = x[1, 2, 4, 5] = x[1, 1, 6, 6] = np.nan  # not at a window's first element
    graph = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=kernel, strides=strides)],
                              "pool", [helper.make_tensor_value_info("x", F, list(x.shape))],
                              [helper.make_tensor_value_info("y", F, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    got, indices = onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    expected = torch.nn.functional.max_pool2d(torch.from_numpy(x), kernel, strides).numpy()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(x.reshape(-1)[indices], got)  # each index points at its maximum (or NaN)
    assert np.isnan(got).sum() >= 2  # x[1, 1, 6, 6] lies outside the 2x2 windows of a 7x7 image


def test_global_maxpool_propagates_nan():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    x[0, 0, 2, 3] = x[1, 2, 0, 0] = np.nan  # a NaN in the middle and in the first place
    got = onnxtrain.InferenceSession(pool_model("GlobalMaxPool", list(x.shape))).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, np.max(x, axis=(2, 3), keepdims=True))
