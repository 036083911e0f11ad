"""InferenceSession's contract: onnxruntime's API shape, and clear errors for bad input."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain


def small_model() -> onnx.ModelProto:
    """y = relu(x @ w + b) with a symbolic batch dimension."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["z"]),
            helper.make_node("Relu", ["z"], ["y"]),
        ],
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_metadata_matches_onnxruntime_shape():
    session = onnxtrain.InferenceSession(small_model().SerializeToString())
    (x,) = session.get_inputs()
    (y,) = session.get_outputs()
    assert (x.name, x.shape, x.type) == ("x", ["batch", 4], "tensor(float)")
    assert (y.name, y.shape, y.type) == ("y", ["batch", 3], "tensor(float)")
    assert "w" not in [i.name for i in session.get_inputs()]


@pytest.mark.parametrize("batch", [1, 5, 64])
def test_runs_any_batch_size_from_a_path(tmp_path, batch):
    model = small_model()
    path = tmp_path / "small.onnx"
    onnx.save(model, path)
    session = onnxtrain.InferenceSession(str(path))
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    for _ in range(3):  # first run plans, the others reuse the plan
        (y,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y, reference(model, x), rtol=1e-5, atol=1e-6)


def test_runs_models_with_external_data(tmp_path):
    model = small_model()
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.onnx.data", size_threshold=0)
    x = np.ones((2, 4), np.float32)
    assert (tmp_path / "ext.onnx.data").exists()
    (y,) = onnxtrain.InferenceSession(tmp_path / "ext.onnx").run(["y"], {"x": x})
    np.testing.assert_allclose(y, reference(small_model(), x), rtol=1e-5, atol=1e-6)


def test_non_contiguous_inputs_are_accepted():
    x = np.asfortranarray(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32))
    session = onnxtrain.InferenceSession(small_model().SerializeToString())
    np.testing.assert_allclose(session.run(None, {"x": x})[0], reference(small_model(), np.ascontiguousarray(x)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "feeds, message",
    [
        ({}, r"input 'x' \(float\[batch, 4\]\) is missing"),
        ({"x": np.zeros((2, 4), np.float64)}, r"input 'x': got double\[2, 4\], expected float\[batch, 4\]"),
        ({"x": np.zeros((2, 5), np.float32)}, r"input 'x': dimension 1 is 5, expected 4"),
        ({"x": np.zeros((4,), np.float32)}, r"expected rank 2"),
        ({"x": np.zeros((2, 4), np.float32), "extra": np.zeros(1, np.float32)}, r"'extra' is not an input of the model \(inputs: x\)"),
        ({"x": np.array([["a"] * 4])}, r"input 'x': onnxtrain takes numeric arrays"),
    ],
)
def test_bad_feeds_raise_value_errors_that_say_what_was_expected(feeds, message):
    session = onnxtrain.InferenceSession(small_model().SerializeToString())
    with pytest.raises(ValueError, match=message):
        session.run(None, feeds)
    (y,) = session.run(None, {"x": np.zeros((1, 4), np.float32)})  # the session still works
    assert y.shape == (1, 3)


def test_unknown_output_name():
    session = onnxtrain.InferenceSession(small_model().SerializeToString())
    with pytest.raises(ValueError, match=r"'nope' is not an output of the model \(outputs: y\)"):
        session.run(["nope"], {"x": np.zeros((1, 4), np.float32)})


def test_truncated_and_corrupt_models_are_refused(tmp_path):
    data = small_model().SerializeToString()
    for cut in (1, len(data) // 2, len(data) - 3):
        with pytest.raises(RuntimeError, match="not a valid ONNX model"):
            onnxtrain.InferenceSession(data[:cut])
    path = tmp_path / "broken.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match="broken.onnx"):
        onnxtrain.InferenceSession(str(path))
    with pytest.raises(RuntimeError, match="cannot open"):
        onnxtrain.InferenceSession(str(tmp_path / "missing.onnx"))


def test_unknown_ops_are_named_with_their_node():
    model = small_model()
    model.graph.node[2].op_type = "Frobnicate"
    with pytest.raises(RuntimeError, match=r"no kernel for these ops:\s+Frobnicate \(opset 17"):
        onnxtrain.InferenceSession(model.SerializeToString())


def test_a_node_reading_an_unknown_value_is_refused():
    model = small_model()
    model.graph.node[1].input[0] = "ghost"
    with pytest.raises(RuntimeError, match="reads 'ghost'"):
        onnxtrain.InferenceSession(model.SerializeToString())


def test_supported_ops_lists_registered_kernels():
    ops = onnxtrain.supported_ops()
    assert ("", "Add", 7, 24) in ops
    assert all(len(op) == 4 and op[2] <= op[3] for op in ops)


def test_thread_count_option_gives_the_same_result():
    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = 1
    x = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    one = onnxtrain.InferenceSession(small_model().SerializeToString(), sess_options=options).run(None, {"x": x})
    two = onnxtrain.InferenceSession(small_model().SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(one[0], two[0], rtol=1e-6)


def test_a_session_leaves_the_process_thread_count_as_it_was(tmp_path):
    """A 1-thread session does not leave the next all-cores session (or torch) on 1 thread
    (issue 14): the count is set for each run and restored after it."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import numpy as np, torch, onnxtrain
        from onnxtrain import _C
        from test_inference_session import small_model
        torch.set_num_threads(2)
        before, torch_before = _C._openmp_max_threads(), torch.get_num_threads()
        options = onnxtrain.SessionOptions()
        options.intra_op_num_threads = 1
        x = np.ones((64, 4), np.float32)
        onnxtrain.InferenceSession(small_model().SerializeToString(), sess_options=options).run(None, {"x": x})
        after_one = _C._openmp_max_threads()
        onnxtrain.InferenceSession(small_model().SerializeToString()).run(None, {"x": x})
        print(before, after_one, _C._openmp_max_threads(), torch_before, torch.get_num_threads())
        """
    )
    import os

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(onnxtrain.__file__)))
    path = [os.path.dirname(os.path.abspath(__file__)), package_root, os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, OMP_NUM_THREADS="3", PYTHONPATH=os.pathsep.join(path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after_one, after_all, torch_before, torch_after = map(int, done.stdout.split())
    assert before > 1, "the test needs a process default above the 1-thread session's"
    assert after_one == before and after_all == before
    assert torch_before == torch_after == 2


FORK_CHILD_CODE = """
import os, sys
import numpy as np
from onnx import TensorProto, helper
import onnxtrain

run_before_fork = sys.argv[1] == "run"
x = np.random.default_rng(0).standard_normal((4, 8, 64, 64)).astype(np.float32)
w = np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8, 64, 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
options = onnxtrain.SessionOptions()
options.intra_op_num_threads = 2
session = onnxtrain.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                     .SerializeToString(), sess_options=options)
expected = session.run(None, {"x": x})[0] if run_before_fork else None
pid = os.fork()
if pid == 0:
    y = session.run(None, {"x": x})[0]
    same = expected is None or np.array_equal(y, expected)
    print(int(same), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("before_fork", ["run", "load only"])
def test_a_forked_child_runs_instead_of_hanging(before_fork):
    """GCC's OpenMP hangs in a forked child's first parallel region once the parent has run
    one (multiprocessing's "fork" start, DataLoader workers, pre-forking servers): the child of
    a parent that ran on several threads runs its kernels on a thread of its own (with the
    same result); the child of a parent that only loaded the model runs as the parent would."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FORK_CHILD_CODE, before_fork.split()[0]], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"]


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="under ASan (scripts/sanitize.sh) freed memory waits in its quarantine: "
                           "the resident size measures that, not the kernels")
@pytest.mark.parametrize("op", ["MatMul", "Conv"])
def test_constant_weights_are_packed_once_for_every_input_shape(op):
    """A session fed many shapes (every sequence length, every image size) keeps one copy of
    each constant weight per layout, not one per shape: 40 shapes of a 4 MB weight grew the
    process by 158 MB when each shape's primitive packed its own."""
    rng = np.random.default_rng(0)
    if op == "MatMul":
        w = rng.standard_normal((1024, 1024)).astype(np.float32)
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 1024])
        shapes = [(rows, 1024) for rows in range(20, 60)]
    else:
        w = rng.standard_normal((256, 256, 3, 3)).astype(np.float32) * 0.05
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, "h", "w"])
        shapes = [(1, 256, size, size) for size in range(8, 40)]
    graph = helper.make_graph([node], "packed", [x_info], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    session = onnxtrain.InferenceSession(helper.make_model(graph, ir_version=8).SerializeToString())
    session.run(None, {"x": np.ones(shapes[0], np.float32)})
    before = resident_mb()
    for shape in shapes[1:]:
        session.run(None, {"x": np.ones(shape, np.float32)})
    weight_mb = w.nbytes / 2**20
    # Activations and per-shape plans grow too; a copy of the weights per shape would add
    # len(shapes) * weight_mb (160 MB for MatMul, 72 MB for Conv).
    assert resident_mb() - before < 0.3 * len(shapes) * weight_mb


def test_text_from_the_model_never_hides_the_error():
    """Invalid UTF-8 and NUL bytes in a model's names (issue 15: 665 and ~130 fuzz cases)
    reach the message as U+FFFD and \\x00, not as a UnicodeDecodeError or a cut message."""
    model = small_model()
    model.graph.node[2].op_type = "ReluXX"
    data = model.SerializeToString().replace(b"ReluXX", b"Re\xff\x00lu")
    with pytest.raises(RuntimeError) as info:
        onnxtrain.InferenceSession(data)
    assert "Re\ufffd\\x00lu" in str(info.value), str(info.value)



def conv_block_model() -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> MaxPool -> Gelu pieces: every pass has work."""
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "var"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], name="bn"),
            helper.make_node("Relu", ["n"], ["r"], name="relu"),
            helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        ],
        "conv_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 4, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"])
def test_every_optimization_level_computes_the_same_and_saves_what_runs(tmp_path, level):
    model = conv_block_model()
    x = np.random.default_rng(6).standard_normal((2, 3, 8, 8)).astype(np.float32)
    options = onnxtrain.SessionOptions()
    options.graph_optimization_level = getattr(onnxtrain.GraphOptimizationLevel, level)
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    got = onnxtrain.InferenceSession(model.SerializeToString(), sess_options=options).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, reference(model, x), rtol=1e-5, atol=1e-5)
    ops = [n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node]
    expected = {
        "ORT_DISABLE_ALL": ["Conv", "BatchNormalization", "Relu", "MaxPool"],
        "ORT_ENABLE_BASIC": ["Conv", "Relu", "MaxPool"],  # BatchNorm folded into the Conv
        "ORT_ENABLE_EXTENDED": ["FusedConv"],  # Relu and MaxPool fused in as well
        "ORT_ENABLE_ALL": ["FusedConv"],
    }[level]
    assert ops == expected


def test_profiling_writes_a_chrome_trace_per_node(tmp_path):
    import json

    options = onnxtrain.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    options.graph_optimization_level = onnxtrain.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxtrain.InferenceSession(conv_block_model().SerializeToString(), sess_options=options)
    x = np.zeros((2, 3, 8, 8), np.float32)
    for _ in range(3):
        session.run(None, {"x": x})
    path = session.end_profiling()
    assert path.startswith(str(tmp_path / "profile_")) and path.endswith(".json")
    events = json.loads(open(path).read())
    runs = [e for e in events if e["cat"] == "Session"]
    nodes = [e for e in events if e["cat"] == "Node"]
    assert len(runs) == 3 and [e["name"] for e in runs] == ["model_run"] * 3
    assert [e["name"] for e in nodes[:4]] == ["conv_kernel_time", "bn_kernel_time", "relu_kernel_time",
                                             "pool_kernel_time"]
    assert len(nodes) == 12 and all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    assert nodes[0]["args"]["op_name"] == "Conv"
    assert nodes[0]["args"]["input_type_shape"] == [{"float": [2, 3, 8, 8]}, {"float": [4, 3, 3, 3]}]
    assert nodes[3]["args"]["output_type_shape"] == [{"float": [2, 4, 4, 4]}]
    run = runs[0]  # the kernels of a run lie within it
    inside = [e for e in nodes if run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"]]
    assert len(inside) == 4
    # A second end_profiling starts over; without profiling it returns "".
    assert json.loads(open(session.end_profiling()).read()) == []
    assert onnxtrain.InferenceSession(conv_block_model().SerializeToString()).end_profiling() == ""


def test_outputs_the_model_does_not_type_are_inferred():
    model = small_model()
    model.graph.output[0].type.Clear()
    (output,) = onnxtrain.InferenceSession(model.SerializeToString()).get_outputs()
    assert output.type == "tensor(float)" and output.shape == ["batch", 3]
