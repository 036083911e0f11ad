"""onnxtrain's kernels for the com.microsoft training ops against onnxruntime-training 1.19.2.

ort_artifacts/kernels.json was written by tools/ort_kernel_cases.py in ORT-training's venv:
one-node models, their seeded inputs and what ORT's kernels returned ("cases"), and ORT's
optimizer nodes over tensor sequences ("optimizer_cases"). Here onnxtrain runs the same
serialized models. Tolerances: rtol 1e-5, atol 1e-6 (float32; the kernels may sum in another
order); AdamW's adam_mode=1 and SGD bit for bit.

ort_artifacts/ops.json, written by tools/ort_artifacts.py, is the op histogram of the
artifacts ORT 1.19.2 writes for an MLP, a CNN, GPT-2 and a LLaMA block with every loss and
optimizer: every op in it must run in onnxtrain.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxtrain

FIXTURES = Path(__file__).resolve().parent / "ort_artifacts"
RECORD = json.loads((FIXTURES / "kernels.json").read_text())
CASES = RECORD["cases"]
OPTIMIZER_CASES = RECORD["optimizer_cases"]

# ORT ops that training/ort_training_model.cc rewrites when an ORT training model loads, and
# the optimizer nodes the Optimizer reads instead of running.
REWRITTEN = {"InPlaceAccumulatorV2", "GatherGrad", "MaxPoolGrad", "AveragePoolGrad", "AdamWOptimizer",
             "SGDOptimizerV2"}


def array(entry: dict) -> np.ndarray:
    raw = base64.b64decode(entry["base64"])
    return np.frombuffer(raw, dtype=np.dtype(entry["dtype"])).reshape(entry["shape"]).copy()


def as_onnxtrain(model: onnx.ModelProto, outputs: list[dict]) -> onnx.ModelProto:
    """ORT's AveragePoolGrad (dY) takes dX's shape from ORT's static shape inference: here, as
    when an ORT training model loads, it becomes org.onnxtrain::AveragePoolGrad (dY, shape)
    with explicit pads, strides and dilations (X's shape: the recorded dX's)."""
    node = model.graph.node[0]
    if node.op_type != "AveragePoolGrad" or node.domain:
        return model
    spatial = len(helper.get_attribute_value(next(a for a in node.attribute if a.name == "kernel_shape")))
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in ("ceil_mode",)}
    attributes.setdefault("strides", [1] * spatial)
    attributes.setdefault("dilations", [1] * spatial)
    attributes.setdefault("pads", [0] * 2 * spatial)
    shape = numpy_helper.from_array(np.array(outputs[0]["shape"], np.int64), "x_shape")
    replacement = helper.make_node("AveragePoolGrad", [node.input[0], "x_shape"], list(node.output),
                                   domain="org.onnxtrain", **attributes)
    graph = helper.make_graph([replacement], "g", model.graph.input, model.graph.output, [shape])
    return helper.make_model(graph, opset_imports=[*model.opset_import, helper.make_opsetid("org.onnxtrain", 1)],
                             ir_version=8)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_kernel_matches_ort_training(case):
    model = as_onnxtrain(onnx.load_model_from_string(base64.b64decode(case["model"])), case["outputs"])
    session = onnxtrain.InferenceSession(model.SerializeToString())
    outputs = session.run(None, {name: array(entry) for name, entry in case["inputs"].items()})
    expected = [array(e) for e in case["outputs"]]
    assert len(outputs) == len(expected)
    for i, (ours, theirs) in enumerate(zip(outputs, expected)):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, f"output {i}: {ours.dtype}{ours.shape}"
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=f"{case['name']} output {i}")


# ---- ORT's optimizers, as onnxtrain's optimizer steps ----------------------------------------


def step_model(node: onnx.NodeProto, shape: list[int]) -> bytes:
    """onnxtrain's step for one parameter with the hyperparameters of ORT's optimizer node."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    tensor = lambda name: helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)  # noqa: E731
    scalar = lambda name, t: helper.make_tensor_value_info(name, t, [])  # noqa: E731
    if node.op_type == "SGDOptimizerV2":
        step = helper.make_node("SGDStep", ["lr", "p", "g"], ["p_out"], domain="org.onnxtrain",
                                weight_decay=numpy_helper.from_array(np.array(0.0)))
        inputs = [scalar("lr", onnx.TensorProto.FLOAT), tensor("p"), tensor("g")]
        outputs = ["p_out"]
    else:
        double = lambda v: numpy_helper.from_array(np.array(v, np.float64))  # noqa: E731
        step = helper.make_node(
            "AdamWStep", ["lr", "step", "p", "g", "m", "v"], ["p_out", "m_out", "v_out"], domain="org.onnxtrain",
            beta1=double(attrs["alpha"]), beta2=double(attrs["beta"]), epsilon=double(attrs["epsilon"]),
            weight_decay=double(attrs["weight_decay"]), bias_correction=attrs["correct_bias"],
            adam_mode=attrs["adam_mode"])
        inputs = [scalar("lr", onnx.TensorProto.FLOAT), scalar("step", onnx.TensorProto.INT64), tensor("p"),
                  tensor("g"), tensor("m"), tensor("v")]
        outputs = ["p_out", "m_out", "v_out"]
    graph = helper.make_graph([step], "step", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.onnxtrain", 1)],
                             ir_version=8).SerializeToString()


@pytest.mark.parametrize("case", OPTIMIZER_CASES, ids=[c["name"] for c in OPTIMIZER_CASES])
def test_optimizer_step_matches_ort_training(case):
    """ORT's AdamWOptimizer (adam_mode 1, what generate_artifacts writes) and SGDOptimizerV2 are
    reproduced bit for bit by AdamWStep with adam_mode=1 and SGDStep; adam_mode 0 (torch's rule,
    which ORT computes in float in another order) to float rounding."""
    node = onnx.load_model_from_string(base64.b64decode(case["model"])).graph.node[0]
    seq = {name: [array(t) for t in entry["sequence"]] for name, entry in case["inputs"].items() if "sequence" in entry}
    lr = array(case["inputs"]["learning_rate"]).reshape(())
    expected = {i: [array(t) for t in entry["sequence"]] for i, entry in enumerate(case["outputs"]) if "sequence" in entry}
    exact = node.op_type == "SGDOptimizerV2" or any(a.name == "adam_mode" and a.i == 1 for a in node.attribute)
    check = np.testing.assert_array_equal if exact else (
        lambda a, b, err_msg: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=err_msg))
    for k, param in enumerate(seq["params"]):
        session = onnxtrain.InferenceSession(step_model(node, list(param.shape)))
        if node.op_type == "SGDOptimizerV2":
            (p,) = session.run(None, {"lr": lr, "p": param, "g": seq["gradients"][k]})
            check(p, expected[1][k], err_msg=f"param {k}")
            continue
        p, m, v = session.run(None, {"lr": lr, "step": array(case["inputs"]["step"]).reshape(()), "p": param,
                                     "g": seq["gradients"][k], "m": seq["first_order_moments"][k],
                                     "v": seq["second_order_moments"][k]})
        for what, ours, theirs in (("param", p, expected[1][k]), ("m", m, expected[2][k]), ("v", v, expected[3][k])):
            check(ours, theirs, err_msg=f"{what} {k}")


@pytest.mark.parametrize("case", OPTIMIZER_CASES, ids=[c["name"] for c in OPTIMIZER_CASES])
def test_ort_optimizer_node_runs_as_it_is(case):
    """The recorded node itself, over tensor sequences, in an InferenceSession: its sequence
    outputs and, as with ORT's kernel, the fed arrays updated in place."""
    node = onnx.load_model_from_string(base64.b64decode(case["model"])).graph.node[0]
    exact = node.op_type == "SGDOptimizerV2" or any(a.name == "adam_mode" and a.i == 1 for a in node.attribute)
    check = np.testing.assert_array_equal if exact else (
        lambda a, b, err_msg: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=err_msg))
    feeds = {name: [array(t) for t in entry["sequence"]] if "sequence" in entry else array(entry)
             for name, entry in case["inputs"].items()}
    session = onnxtrain.InferenceSession(base64.b64decode(case["model"]))
    outputs = session.run(None, feeds)
    assert outputs[0].dtype == np.bool_ and outputs[0].tolist() == [True]
    updated = [name for name in feeds if isinstance(feeds[name], list) and name != "gradients"]
    for i, entry in enumerate(case["outputs"][1:], start=1):
        expected = [array(t) for t in entry["sequence"]]
        for k, (ours, fed, theirs) in enumerate(zip(outputs[i], feeds[updated[i - 1]], expected)):
            check(ours, theirs, err_msg=f"output {i} tensor {k}")
            check(fed, theirs, err_msg=f"{updated[i - 1]} {k} in place")


def test_ort_optimizer_model_file_runs_and_skips_on_a_false_signal():
    """ORT's optimizer_model.onnx as generate_artifacts wrote it (only the flag as output): the
    fed parameters and moments change in place; update_signal false leaves them."""
    model = onnx.load(str(FIXTURES / "mlp_crossentropy_adamw" / "optimizer_model.onnx"))
    rng = np.random.default_rng(3)
    params = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    feeds = {"learning_rate": np.array([0.01], np.float32), "step": np.array([1], np.int64),
             "params": [p.copy() for p in params], "gradients": [np.ones_like(p) for p in params],
             "first_order_moments": [np.zeros_like(p) for p in params],
             "second_order_moments": [np.zeros_like(p) for p in params]}
    (flag,) = onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert flag.tolist() == [True]
    for before, after in zip(params, feeds["params"]):  # the first step of AdamW moves by lr
        np.testing.assert_allclose(before - after, 0.01, rtol=1e-4)
    node = model.graph.node[0]
    node.input.append("update_signal")
    model.graph.input.append(helper.make_tensor_value_info("update_signal", onnx.TensorProto.BOOL, [1]))
    kept = [p.copy() for p in feeds["params"]]
    (flag,) = onnxtrain.InferenceSession(model.SerializeToString()).run(
        None, {**feeds, "update_signal": np.array([False])})
    assert flag.tolist() == [False]
    for before, after in zip(kept, feeds["params"]):
        np.testing.assert_array_equal(before, after)


# ---- BiasDropout: no CPU kernel in ORT 1.19.2 (a GPU fusion); against Add, Dropout, Add ------


def bias_dropout(inputs: dict, outputs: int = 2, **attributes) -> bytes:
    names = [n if v is not None else "" for n, v in inputs.items()]
    node = helper.make_node("BiasDropout", names, ["out", "mask"][:outputs], domain="com.microsoft", **attributes)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                      for n, v in inputs.items() if v is not None],
        [helper.make_empty_tensor_value_info(o) for o in ["out", "mask"][:outputs]])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8).SerializeToString()


def decomposed(data, bias, residual, ratio, training) -> np.ndarray:
    """Dropout(data + bias) + residual in stock onnxruntime, its standard ops."""
    ort = pytest.importorskip("onnxruntime")
    f = onnx.TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["data", "bias"], ["sum"]),
             helper.make_node("Dropout", ["sum", "ratio", "training"], ["dropped"]),
             helper.make_node("Add", ["dropped", "residual"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("data", f, data.shape),
                                           helper.make_tensor_value_info("bias", f, bias.shape),
                                           helper.make_tensor_value_info("residual", f, residual.shape),
                                           helper.make_tensor_value_info("ratio", f, []),
                                           helper.make_tensor_value_info("training", onnx.TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("out", f, data.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"data": data, "bias": bias, "residual": residual, "ratio": np.array(ratio, np.float32),
                              "training": np.array(training)})[0]


RNG = np.random.default_rng(17)


@pytest.mark.parametrize("bias_shape", [(4,), (2, 3, 4)])
@pytest.mark.parametrize("training,ratio", [(False, 0.3), (True, 0.0)])
def test_bias_dropout_without_dropping_matches_ort_decomposed(bias_shape, training, ratio):
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    bias = RNG.standard_normal(bias_shape).astype(np.float32)
    residual = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    feeds = {"data": data, "bias": bias, "residual": residual, "ratio": np.array(ratio, np.float32),
             "training_mode": np.array(training)}
    out, mask = onnxtrain.InferenceSession(bias_dropout(feeds)).run(None, feeds)
    np.testing.assert_array_equal(out, decomposed(data, bias, residual, ratio, training))
    assert mask.dtype == np.bool_ and mask.all()
    # Without residual, ratio or training_mode (inference: a copy of data + bias).
    (plain,) = onnxtrain.InferenceSession(bias_dropout({"data": data, "bias": bias}, 1)).run(
        None, {"data": data, "bias": bias})
    np.testing.assert_array_equal(plain, decomposed(data, bias, np.zeros_like(data), 0.0, False))


@pytest.mark.parametrize("residual", [True, False])
def test_bias_dropout_in_training_drops_and_scales(residual):
    data = RNG.standard_normal((128, 64)).astype(np.float32)
    bias = RNG.standard_normal(64).astype(np.float32)
    res = RNG.standard_normal((128, 64)).astype(np.float32) if residual else None
    feeds = {"data": data, "bias": bias, "residual": res, "ratio": np.array(0.25, np.float32),
             "training_mode": np.array(True)}
    session = onnxtrain.InferenceSession(bias_dropout(feeds, seed=3))
    run_feeds = {k: v for k, v in feeds.items() if v is not None}
    out, mask = session.run(None, run_feeds)
    expected = np.where(mask, (data + bias) / np.float32(0.75), np.float32(0)) + (res if residual else 0)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert abs(mask.mean() - 0.75) < 0.02  # 8192 draws: 5 standard deviations
    again, mask2 = session.run(None, run_feeds)
    assert not np.array_equal(mask, mask2)  # a new mask each run


def test_bias_dropout_errors():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="bias is float\\[2\\]"):
        onnxtrain.InferenceSession(bias_dropout({"data": data, "bias": np.zeros(2, np.float32)}, 1)).run(
            None, {"data": data, "bias": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="ratio.*\\[0, 1\\)"):
        feeds = {"data": data, "bias": np.zeros(3, np.float32), "residual": None, "ratio": np.array(1.0, np.float32)}
        onnxtrain.InferenceSession(bias_dropout(feeds, 1)).run(None, {k: v for k, v in feeds.items() if v is not None})


# ---- the op table ------------------------------------------------------------------------


def test_every_op_of_ort_artifacts_runs_in_onnxtrain():
    """Every op of ops.json (ORT 1.19.2's artifacts for an MLP, a CNN, GPT-2 and a LLaMA block with
    each loss and optimizer) has an onnxtrain kernel, or is rewritten when ORT's models load; and
    each com.microsoft op with a kernel is checked against ORT above."""
    table = json.loads((FIXTURES / "ops.json").read_text())
    ops = {op for files in table.values() for histogram in files.values() for op in histogram}
    kernels = {(domain, op) for domain, op, *_ in onnxtrain.supported_ops()}
    missing, unchecked = [], []
    recorded = {onnx.load_model_from_string(base64.b64decode(c["model"])).graph.node[0].op_type
                for c in CASES + OPTIMIZER_CASES}
    for op in sorted(ops):
        domain, _, name = op.rpartition("::")
        if name in REWRITTEN:
            continue
        if (domain, name) not in kernels:
            missing.append(op)
        elif domain == "com.microsoft" and name not in recorded:
            unchecked.append(op)
    assert not missing, f"no onnxtrain kernel: {missing}"
    assert not unchecked, f"not checked against ORT: {unchecked}"
    assert {"SimplifiedLayerNormalizationGrad", "GatherElementsGrad", "AveragePoolGrad", "QuickGeluGrad",
            "ConcatTraining", "SplitTraining"} <= {op.rpartition("::")[2] for op in ops}
