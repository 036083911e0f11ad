"""`onnxtrain convert`: ORT 1.19.2's artifacts and ODTC checkpoints to onnxtrain's plain-ONNX
artifacts and safetensors checkpoints, and a checkpoint back to ODTC.

The converted training model must hold no com.microsoft op, run in stock onnxruntime (which
inlines the org.onnxtrain function bodies) and train in onnxtrain to ORT's recorded losses
(rtol 1e-5): ORT's SGD becomes SGDStep, its AdamW (Hugging Face's rule, adam_mode=1)
becomes AdamWStep with adam_mode=1, which computes what ORT's kernel computes.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest

from onnxtrain.training import api, convert
from onnxtrain.training.api import CheckpointState

from test_ort_migration import FIXTURES, array, reference

CASES = ["mlp_crossentropy_adamw", "mlp_mse_sgd", "mlp_bcewithlogits_adamw", "mlp_l1_sgd", "cnn_mse_sgd",
         "gpt_crossentropy_adamw", "mlp_focal_sgd", "cnn_pooling_l1_adamw", "llama_crossentropy_adamw"]


def converted(case, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convert.from_ort(FIXTURES / case, tmp_path / case)
    return tmp_path / case


@pytest.mark.parametrize("case", CASES)
def test_converted_artifacts_are_plain_onnx(case, tmp_path):
    out = converted(case, tmp_path)
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        model = onnx.load(str(out / name))
        assert not [n for n in model.graph.node if n.domain == "com.microsoft"], name
        onnx.checker.check_model(model)
    assert (out / "checkpoint").read_bytes()[4:8] != b"ODTC"


@pytest.mark.parametrize("case", CASES)
def test_converted_training_model_runs_in_stock_onnxruntime(case, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    out = converted(case, tmp_path)
    ref = reference(case)
    state = CheckpointState.load_checkpoint(out / "checkpoint")
    session = ort.InferenceSession(str(out / "training_model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {}
    user = iter(array(x) for x in ref["inputs"][0])
    for i in session.get_inputs():
        if i.name in state.parameters:
            feeds[i.name] = np.asarray(state.parameters[i.name].data)
        elif i.name.endswith("_grad.accumulation.buffer"):
            feeds[i.name] = np.zeros_like(np.asarray(state.parameters[i.name[:-len("_grad.accumulation.buffer")]].data))
        elif i.name == "lazy_reset_grad":
            feeds[i.name] = np.array(True)
        else:
            feeds[i.name] = next(user)
    loss = session.run(None, feeds)[0]
    assert float(loss) == pytest.approx(ref["losses"][0], rel=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_converted_artifacts_train_like_ort(case, tmp_path):
    out = converted(case, tmp_path)
    ref = reference(case)
    state = CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
    optimizer = api.Optimizer(str(out / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(ref["learning_rate"])
    losses = []
    for step in range(len(ref["losses"])):
        losses.append(float(np.asarray(module(*[array(x) for x in ref["inputs"][step]]))))
        optimizer.step()
        module.lazy_reset_grad()
    np.testing.assert_allclose(losses, ref["losses"], rtol=1e-5)


@pytest.mark.parametrize("case", ["mlp_crossentropy_adamw", "mlp_mse_sgd"])
def test_converted_optimizer_model_runs_in_stock_onnxruntime(case, tmp_path):
    """One update by stock onnxruntime (the org.onnxtrain bodies inlined) equals onnxtrain's
    fused kernels' within float rounding, and ORT's own first step bit for bit-ish."""
    ort = pytest.importorskip("onnxruntime")
    import onnxtrain

    out = converted(case, tmp_path)
    state = CheckpointState.load_checkpoint(FIXTURES / case / "checkpoint_step5")
    _, _, moments = state._state.optimizer_state()
    rng = np.random.default_rng(3)
    feeds = {"learning_rate": np.array(0.01, np.float32), "step": np.array(6, np.int64)}
    model = onnx.load(str(out / "optimizer_model.onnx"))
    for i in model.graph.input:
        if i.name in state.parameters:
            feeds[i.name] = np.asarray(state.parameters[i.name].data)
            feeds[i.name + "_grad"] = rng.standard_normal(feeds[i.name].shape).astype(np.float32)
    renamed = {"exp_avg": "momentum0", "exp_avg_sq": "momentum1"}
    for i in model.graph.input:
        name, _, moment = i.name.rpartition(".")
        if moment in renamed:
            feeds[i.name] = moments[name][renamed[moment]]
    theirs = ort.InferenceSession(str(out / "optimizer_model.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = onnxtrain.InferenceSession(str(out / "optimizer_model.onnx")).run(None, feeds)
    for o, a, b in zip(model.graph.output, ours, theirs):
        np.testing.assert_array_equal(a, b, err_msg=o.name)


@pytest.mark.parametrize("case", ["mlp_mse_sgd", "mlp_crossentropy_adamw"])
def test_converted_checkpoint_after_5_steps_resumes(case, tmp_path):
    ref = reference(case)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # both optimizers convert exactly
        convert.from_ort(FIXTURES / case, tmp_path / "out", checkpoint="checkpoint_step5")
    state = CheckpointState.load_checkpoint(tmp_path / "out" / "checkpoint")
    assert state.properties["epoch"] == 3
    module = api.Module(str(tmp_path / "out" / "training_model.onnx"), state)
    optimizer = api.Optimizer(str(tmp_path / "out" / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(ref["learning_rate"])
    losses = []
    for step in range(ref["resume_step"], len(ref["losses"])):
        losses.append(float(np.asarray(module(*[array(x) for x in ref["inputs"][step]]))))
        optimizer.step()
        module.lazy_reset_grad()
    np.testing.assert_allclose(losses, ref["losses"][ref["resume_step"]:], rtol=1e-5)


def test_adamw_moments_are_renamed(tmp_path):
    convert.from_ort(FIXTURES / "mlp_crossentropy_adamw", tmp_path / "out", checkpoint="checkpoint_step5")
    ort_state = CheckpointState.load_checkpoint(FIXTURES / "mlp_crossentropy_adamw" / "checkpoint_step5")
    state = CheckpointState.load_checkpoint(tmp_path / "out" / "checkpoint")
    step, _, moments = state._state.optimizer_state()
    _, _, ort_moments = ort_state._state.optimizer_state()
    assert step == 5
    np.testing.assert_array_equal(moments["fc1.weight"]["exp_avg"], ort_moments["fc1.weight"]["momentum0"])
    np.testing.assert_array_equal(moments["fc1.weight"]["exp_avg_sq"], ort_moments["fc1.weight"]["momentum1"])


def test_adam_mode_0_converts_to_torch_rule_with_a_warning(tmp_path):
    """generate_artifacts never writes adam_mode=0, but a hand-made ORT optimizer model may: it
    becomes onnxtrain's torch rule (the same formula; ORT's kernel rounds it otherwise)."""
    import shutil

    source = tmp_path / "source"
    shutil.copytree(FIXTURES / "mlp_crossentropy_adamw", source)
    model = onnx.load(str(source / "optimizer_model.onnx"))
    for a in model.graph.node[0].attribute:
        if a.name == "adam_mode":
            a.i = 0
    onnx.save(model, str(source / "optimizer_model.onnx"))
    with pytest.warns(UserWarning, match="adam_mode=0"):
        convert.from_ort(source, tmp_path / "out")
    step = [n for n in onnx.load(str(tmp_path / "out" / "optimizer_model.onnx")).graph.node if n.op_type == "AdamWStep"]
    assert step and all(onnx.helper.get_attribute_value(a) == 0 for n in step for a in n.attribute
                        if a.name == "adam_mode")


def test_cli_round_trip(tmp_path):
    assert convert.main(["from-ort", str(FIXTURES / "mlp_mse_sgd"), str(tmp_path / "out")]) == 0
    assert convert.main(["to-ort", str(tmp_path / "out" / "checkpoint"), str(tmp_path / "back")]) == 0
    back = CheckpointState.load_checkpoint(tmp_path / "back")
    assert (tmp_path / "back").read_bytes()[4:8] == b"ODTC"
    ref = reference("mlp_mse_sgd")
    for name, entry in ref["initial_parameters"].items():
        np.testing.assert_array_equal(back.parameters[name].data, array(entry))
    assert convert.main(["from-ort", str(tmp_path / "missing"), str(tmp_path / "x")]) == 1
