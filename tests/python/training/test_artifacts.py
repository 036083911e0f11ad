"""generate_artifacts: the four files, checked against PyTorch and stock onnxruntime.

A small MLP is built in torch and exported with the TorchScript exporter (opset 17). For
every loss and reduction, the eval model's loss must equal torch.nn.functional's and the
training model's accumulated gradients torch.autograd's; the optimizer model must take the
same steps as torch.optim; every artifact must give the same results in onnxruntime, which
inlines the org.onnxtrain function bodies that onnxtrain runs as fused kernels.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
from onnxtrain import _C
from onnxtrain.training import LossType, OptimType, generate_artifacts
from onnxtrain.training.onnxblock import loss as L
from onnxtrain.training.onnxblock import optim

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

BODY_DOMAIN = "org.onnxtrain.body"
PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
BATCH, FEATURES, HIDDEN, CLASSES = 6, 4, 8, 3


# ---- the model -------------------------------------------------------------------------


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> tuple[MLP, Path]:
    torch.manual_seed(0)
    module = MLP()
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (torch.randn(2, FEATURES),), str(path), dynamo=False, opset_version=17,
            input_names=["input"], output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )
    names = {i.name for i in onnx.load(str(path)).graph.initializer}
    assert set(PARAMS) <= names, names
    return module, path


def parameters(module: MLP) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def sessions(path: Path, ort_optimizations: bool = True) -> tuple:
    options = ort.SessionOptions()
    if not ort_optimizations:
        # onnxruntime 1.23 fuses MatMul(Transpose) of doubles into a float-only FusedMatMul.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return (onnxtrain.InferenceSession(str(path)),
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]))


def run_both(path: Path, feeds: dict, ort_optimizations: bool = True) -> list[np.ndarray]:
    """Runs in onnxtrain and onnxruntime; checks they agree; returns onnxtrain's outputs."""
    ours_session, theirs_session = sessions(path, ort_optimizations)
    ours = ours_session.run(None, feeds)
    theirs = theirs_session.run(None, feeds)
    names = [o.name for o in ours_session.get_outputs()]
    assert names == [o.name for o in theirs_session.get_outputs()]
    for name, a, b in zip(names, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{path.name} output {name}: onnxruntime")
    return ours


def to_body_domain(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with its org.onnxtrain functions in a domain onnxtrain has no kernels
    for, so that it runs their standard-ONNX bodies."""
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    for node in moved.graph.node:
        if node.domain == "org.onnxtrain":
            node.domain = BODY_DOMAIN
    for function in moved.functions:
        function.domain = BODY_DOMAIN
        for node in function.node:
            if node.domain == "org.onnxtrain":
                node.domain = BODY_DOMAIN
    for opset in moved.opset_import:
        if opset.domain == "org.onnxtrain":
            opset.domain = BODY_DOMAIN
    return moved


def run_body(path: Path, feeds: dict) -> list[np.ndarray]:
    model = to_body_domain(onnx.load(str(path)))
    return onnxtrain.InferenceSession(model.SerializeToString()).run(None, feeds)


# ---- losses against torch --------------------------------------------------------------

rng = np.random.default_rng(0)
X = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
REGRESSION_TARGET = rng.standard_normal((BATCH, CLASSES)).astype(np.float32)
BINARY_TARGET = rng.uniform(0, 1, (BATCH, CLASSES)).astype(np.float32)
LABELS = np.array([0, 2, 1, 2, 0, 1], dtype=np.int64)
LABELS_IGNORED = np.array([0, -100, 1, 2, -100, 1], dtype=np.int64)
LABELS_CLASS_1_IGNORED = np.array([0, 1, 1, 2, 0, 2], dtype=np.int64)
CLASS_WEIGHT = [0.3, 1.0, 2.5]
POS_WEIGHT = [2.0, 0.5, 1.5]
ELEMENT_WEIGHT = [0.5, 1.0, 3.0]

F = torch.nn.functional

LOSS_CASES = []
for reduction in ("mean", "sum", "none"):
    LOSS_CASES += [
        (f"mse-{reduction}", L.MSELoss(reduction), "target", REGRESSION_TARGET,
         lambda y, t, r=reduction: F.mse_loss(y, t, reduction=r)),
        (f"l1-{reduction}", L.L1Loss(reduction), "target", REGRESSION_TARGET,
         lambda y, t, r=reduction: F.l1_loss(y, t, reduction=r)),
        (f"bce-{reduction}", L.BCEWithLogitsLoss(reduction=reduction), "target", BINARY_TARGET,
         lambda y, t, r=reduction: F.binary_cross_entropy_with_logits(y, t, reduction=r)),
        (f"bce-weights-{reduction}", L.BCEWithLogitsLoss(ELEMENT_WEIGHT, reduction, POS_WEIGHT), "target", BINARY_TARGET,
         lambda y, t, r=reduction: F.binary_cross_entropy_with_logits(
             y, t, weight=torch.tensor(ELEMENT_WEIGHT), pos_weight=torch.tensor(POS_WEIGHT), reduction=r)),
        (f"ce-{reduction}", L.CrossEntropyLoss(reduction=reduction), "labels", LABELS,
         lambda y, t, r=reduction: F.cross_entropy(y, t, reduction=r)),
        (f"ce-ignore-{reduction}", L.CrossEntropyLoss(reduction=reduction, ignore_index=-100), "labels", LABELS_IGNORED,
         lambda y, t, r=reduction: F.cross_entropy(y, t, reduction=r, ignore_index=-100)),
        (f"ce-weights-ignore-{reduction}", L.CrossEntropyLoss(CLASS_WEIGHT, reduction, ignore_index=1), "labels",
         LABELS_CLASS_1_IGNORED,
         lambda y, t, r=reduction: F.cross_entropy(y, t, weight=torch.tensor(CLASS_WEIGHT), reduction=r,
                                                   ignore_index=1)),
    ]


def model_feeds(module: MLP, label_name: str, label: np.ndarray) -> dict[str, np.ndarray]:
    return {"input": X, label_name: label, **parameters(module)}


def torch_loss_and_grads(module: MLP, loss_fn, label: np.ndarray):
    module.zero_grad()
    value = loss_fn(module(torch.from_numpy(X)), torch.from_numpy(label))
    (value.sum() if value.dim() else value).backward()
    grads = {name: p.grad.numpy().copy() for name, p in module.named_parameters()}
    return value.detach().numpy(), grads


@pytest.mark.parametrize("case", LOSS_CASES, ids=[c[0] for c in LOSS_CASES])
def test_loss_and_gradients_match_torch(case, mlp, tmp_path) -> None:
    _, loss, label_name, label, loss_fn = case
    module, model_path = mlp
    generate_artifacts(str(model_path), requires_grad=PARAMS, loss=loss, optimizer=OptimType.AdamW,
                       artifact_directory=tmp_path, additional_output_names=["output"])
    expected_loss, expected_grads = torch_loss_and_grads(module, loss_fn, label)
    expected_output = module(torch.from_numpy(X)).detach().numpy()

    feeds = model_feeds(module, label_name, label)
    eval_loss, eval_output = run_both(tmp_path / "eval_model.onnx", feeds)
    np.testing.assert_allclose(eval_loss, expected_loss, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(eval_output, expected_output, rtol=1e-5, atol=1e-6)

    training_feeds = {**feeds, "lazy_reset_grad": np.array(True)}
    for p in PARAMS:
        training_feeds[f"{p}_grad.accumulation.buffer"] = np.zeros_like(feeds[p])
    train_loss, train_output, *grads = run_both(tmp_path / "training_model.onnx", training_feeds)
    np.testing.assert_allclose(train_loss, expected_loss, rtol=1e-5, atol=1e-7)
    for name, grad in zip(PARAMS, grads):
        np.testing.assert_allclose(grad, expected_grads[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_interface_names(mlp, tmp_path) -> None:
    _, model_path = mlp
    generate_artifacts(str(model_path), requires_grad=PARAMS, loss=LossType.CrossEntropyLoss,
                       optimizer=OptimType.AdamW, artifact_directory=tmp_path, prefix="mlp_")
    eval_model = onnx.load(str(tmp_path / "mlp_eval_model.onnx"))
    training = onnx.load(str(tmp_path / "mlp_training_model.onnx"))
    optimizer = onnx.load(str(tmp_path / "mlp_optimizer_model.onnx"))
    assert (tmp_path / "mlp_checkpoint").exists()
    assert [i.name for i in eval_model.graph.input] == ["input", "labels", *PARAMS]
    assert [o.name for o in eval_model.graph.output] == ["loss"]
    assert [i.name for i in training.graph.input] == [
        "input", "labels", *PARAMS, *[f"{p}_grad.accumulation.buffer" for p in PARAMS], "lazy_reset_grad"]
    assert [o.name for o in training.graph.output] == ["loss", *[f"{p}_grad.accumulation.out" for p in PARAMS]]
    assert not training.graph.initializer and not eval_model.graph.initializer
    expected_inputs = ["learning_rate", "step"]
    expected_outputs = []
    for p in PARAMS:
        expected_inputs += [p, f"{p}_grad", f"{p}.exp_avg", f"{p}.exp_avg_sq"]
        expected_outputs += [f"{p}.out", f"{p}.exp_avg.out", f"{p}.exp_avg_sq.out"]
    assert [i.name for i in optimizer.graph.input] == expected_inputs
    assert [o.name for o in optimizer.graph.output] == expected_outputs
    props = {p.key: p.value for p in optimizer.metadata_props}
    assert props == {"onnxtrain.optimizer": "AdamW", "onnxtrain.moments": "exp_avg,exp_avg_sq"}
    for model in (eval_model, training, optimizer):
        onnx.checker.check_model(model)


# ---- gradient accumulation -------------------------------------------------------------


def test_accumulation_adds_until_reset(mlp, tmp_path) -> None:
    module, model_path = mlp
    generate_artifacts(model_path, requires_grad=PARAMS, loss=LossType.MSELoss, optimizer=OptimType.SGD,
                       artifact_directory=tmp_path)
    _, single = torch_loss_and_grads(module, F.mse_loss, REGRESSION_TARGET)
    other_target = REGRESSION_TARGET + 1
    _, second = torch_loss_and_grads(module, F.mse_loss, other_target)
    session, reference = sessions(tmp_path / "training_model.onnx")
    for s in (session, reference):
        buffers = {p: np.zeros_like(v) for p, v in parameters(module).items()}

        def step(target, reset):
            feeds = {"input": X, "target": target, "lazy_reset_grad": np.array(reset), **parameters(module)}
            feeds.update({f"{p}_grad.accumulation.buffer": buffers[p] for p in PARAMS})
            _, *grads = s.run(None, feeds)
            buffers.update(zip(PARAMS, grads))

        step(REGRESSION_TARGET, False)  # into zero buffers: the gradient itself
        step(other_target, False)
        for p in PARAMS:
            np.testing.assert_allclose(buffers[p], single[p] + second[p], rtol=1e-4, atol=1e-6, err_msg=p)
        step(other_target, True)  # reset: overwrites
        for p in PARAMS:
            np.testing.assert_allclose(buffers[p], second[p], rtol=1e-4, atol=1e-6, err_msg=p)


# ---- optimizer model against torch.optim -----------------------------------------------


def adamw_huggingface(params, grads, state, lr, betas, eps, weight_decay, bias_correction, step):
    """Hugging Face's AdamW (onnxruntime-training's adam_mode=1) in torch, one op per step of
    ORT's Eigen expressions, its scalars computed in the parameters' type as ORT's in float."""
    S = np.float32 if params[0].dtype == torch.float32 else np.float64
    lr_s, beta1, beta2 = S(lr), S(betas[0]), S(betas[1])
    bc1 = S(1) - S(np.float64(beta1) ** step) if bias_correction else S(1)
    bc2 = S(1) - S(np.float64(beta2) ** step) if bias_correction else S(1)
    rate = lr_s * (np.sqrt(bc2) / bc1)
    keep1, keep2, lr_wd = S(1) - beta1, S(1) - beta2, lr_s * S(weight_decay)
    for p, g in zip(params, grads):
        m, v = state.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
        m.copy_(m * float(beta1) + g * float(keep1))
        v.copy_(v * float(beta2) + (g * float(keep2)) * g)
        p.sub_((m * float(rate)) / (v.sqrt() + float(S(eps))))
        p.sub_(p * float(lr_wd))


def adamw_without_bias_correction(params, grads, state, lr, betas, eps, weight_decay):
    for p, g in zip(params, grads):
        m, v = state.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
        p.mul_(1 - lr * weight_decay)
        m.lerp_(g, 1 - betas[0])
        v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
        p.addcdiv_(m, v.sqrt().add_(eps), value=-lr)


OPTIMIZER_CASES = [
    ("adamw-torch", optim.AdamW(mode="torch", eps=1e-8, weight_decay=0.01), {}),
    ("adamw-torch-no-decay", optim.AdamW(weight_decay=0.0, betas=(0.8, 0.99), eps=1e-6, mode="torch"), {}),
    ("adamw-torch-no-bias-correction", optim.AdamW(bias_correction=False, weight_decay=0.05, mode="torch"), {}),
    ("adamw-huggingface", optim.AdamW(), {}),
    ("adamw-huggingface-decay", optim.AdamW(weight_decay=0.05, betas=(0.8, 0.99), eps=1e-8), {}),
    ("adamw-huggingface-no-bias-correction", optim.AdamW(bias_correction=False, weight_decay=0.01), {}),
    ("sgd", optim.SGD(), {}),
    ("sgd-weight-decay", optim.SGD(weight_decay=0.1), {}),
    ("sgd-momentum", optim.SGD(momentum=0.9), {}),
    ("sgd-dampening", optim.SGD(momentum=0.8, dampening=0.3, weight_decay=0.01), {}),
    ("sgd-nesterov", optim.SGD(momentum=0.9, nesterov=True, weight_decay=0.02), {}),
]


def torch_steps(spec, params: dict[str, np.ndarray], grads: list[dict[str, np.ndarray]], lr: float):
    """Parameters and moments after each step of torch.optim (single-tensor code path)."""
    tensors = {k: torch.tensor(v) for k, v in params.items()}
    huggingface = isinstance(spec, optim.AdamW) and spec.mode == "huggingface"
    if isinstance(spec, optim.AdamW) and spec.bias_correction and not huggingface:
        opt = torch.optim.AdamW(tensors.values(), lr=lr, betas=spec.betas, eps=spec.eps,
                                weight_decay=spec.weight_decay, foreach=False)
    elif isinstance(spec, optim.SGD):
        opt = torch.optim.SGD(tensors.values(), lr=lr, momentum=spec.momentum, dampening=spec.dampening,
                              nesterov=spec.nesterov, weight_decay=spec.weight_decay, foreach=False)
    else:
        opt = None
    manual_state: dict = {}
    results = []
    for step, step_grads in enumerate(grads, start=1):
        with torch.no_grad():
            if huggingface:
                adamw_huggingface(list(tensors.values()), [torch.tensor(step_grads[k]) for k in tensors], manual_state,
                                  lr, spec.betas, spec.eps, spec.weight_decay, spec.bias_correction, step)
            elif opt is None:
                adamw_without_bias_correction(list(tensors.values()), [torch.tensor(step_grads[k]) for k in tensors],
                                              manual_state, lr, spec.betas, spec.eps, spec.weight_decay)
            else:
                for k, t in tensors.items():
                    t.grad = torch.tensor(step_grads[k])
                opt.step()
        snapshot = {}
        for k, t in tensors.items():
            snapshot[k] = t.detach().numpy().copy()
            if opt is None:
                m, v = manual_state[id(t)]
                snapshot[f"{k}.exp_avg"], snapshot[f"{k}.exp_avg_sq"] = m.numpy().copy(), v.numpy().copy()
            else:
                for torch_name in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                    if opt.state[t].get(torch_name) is not None:
                        snapshot[f"{k}.{torch_name}"] = opt.state[t][torch_name].numpy().copy()
        results.append(snapshot)
    return results


def optimizer_steps(session, params, grads, lr, moments):
    params = dict(params)
    state = {f"{p}.{m}": np.zeros_like(v) for p, v in params.items() for m in moments}
    names = [o.name for o in session.get_outputs()]
    # The learning rate is double when every parameter is, float otherwise.
    lr_dtype = np.float64 if all(v.dtype == np.float64 for v in params.values()) else np.float32
    assert session.get_inputs()[0].type == ("tensor(double)" if lr_dtype == np.float64 else "tensor(float)")
    results = []
    for step, step_grads in enumerate(grads, start=1):
        feeds = {"learning_rate": np.array(lr, lr_dtype), "step": np.array(step, np.int64), **params, **state}
        feeds.update({f"{p}_grad": g for p, g in step_grads.items()})
        outputs = dict(zip(names, session.run(None, feeds)))
        params = {p: outputs[f"{p}.out"] for p in params}
        state = {k: outputs[f"{k}.out"] for k in state}
        results.append({**params, **state})
    return results


def random_grads(params, steps, seed=1):
    r = np.random.default_rng(seed)
    return [{k: r.standard_normal(v.shape).astype(v.dtype) for k, v in params.items()} for _ in range(steps)]


@pytest.mark.parametrize("case", OPTIMIZER_CASES, ids=[c[0] for c in OPTIMIZER_CASES])
def test_optimizer_matches_torch(case, mlp, tmp_path) -> None:
    _, spec, _ = case
    module, model_path = mlp
    generate_artifacts(model_path, requires_grad=PARAMS, loss=LossType.MSELoss, optimizer=spec,
                       artifact_directory=tmp_path)
    path = tmp_path / "optimizer_model.onnx"
    model = onnx.load(str(path))
    moments = [m for m in {p.key: p.value for p in model.metadata_props}["onnxtrain.moments"].split(",") if m]
    params = parameters(module)
    grads = random_grads(params, 5)
    lr = 0.01
    expected = torch_steps(spec, params, grads, lr)
    fused = optimizer_steps(sessions(path)[0], params, grads, lr, moments)
    theirs = optimizer_steps(sessions(path)[1], params, grads, lr, moments)
    body = optimizer_steps(onnxtrain.InferenceSession(to_body_domain(model).SerializeToString()), params, grads, lr,
                           moments)
    for step in range(5):
        assert set(fused[step]) == set(expected[step])
        for key in expected[step]:
            where = f"step {step + 1}, {key}"
            np.testing.assert_allclose(fused[step][key], expected[step][key], rtol=1e-5, atol=1e-7,
                                       err_msg=f"{where}: onnxtrain vs torch.optim")
            np.testing.assert_allclose(theirs[step][key], expected[step][key], rtol=1e-5, atol=1e-7,
                                       err_msg=f"{where}: onnxruntime vs torch.optim")
            np.testing.assert_allclose(body[step][key], fused[step][key], rtol=1e-6, atol=1e-7,
                                       err_msg=f"{where}: function body vs fused kernel")


# ---- float64 parameters ----------------------------------------------------------------


def linear_model(dtype=TensorProto.DOUBLE, np_dtype=np.float64) -> onnx.ModelProto:
    r = np.random.default_rng(3)
    w = numpy_helper.from_array(r.standard_normal((4, 3)).astype(np_dtype), "w")
    b = numpy_helper.from_array(r.standard_normal(3).astype(np_dtype), "b")
    steps = numpy_helper.from_array(np.array([2, 3], np.int64), "shape_constant")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", dtype, ["batch", 4])],
                              [helper.make_tensor_value_info("y", dtype, ["batch", 3])], [w, b, steps])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_float64_training_and_sgd(tmp_path) -> None:
    model = linear_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the int64 initializer stays a constant silently
        generate_artifacts(model, loss=L.MSELoss("sum"), optimizer=optim.SGD(momentum=0.9, nesterov=True),
                           artifact_directory=tmp_path)
    w = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    x = np.random.default_rng(4).standard_normal((5, 4))
    t = np.random.default_rng(5).standard_normal((5, 3))
    feeds = {"x": x, "target": t, "w": w, "b": b, "lazy_reset_grad": np.array(True),
             "w_grad.accumulation.buffer": np.zeros_like(w), "b_grad.accumulation.buffer": np.zeros_like(b)}
    loss, dw, db = run_both(tmp_path / "training_model.onnx", feeds, ort_optimizations=False)
    residual = x @ w + b - t
    np.testing.assert_allclose(loss, (residual ** 2).sum(), rtol=1e-12)
    np.testing.assert_allclose(dw, 2 * x.T @ residual, rtol=1e-12)
    np.testing.assert_allclose(db, 2 * residual.sum(0), rtol=1e-12)
    assert dw.dtype == np.float64

    path = tmp_path / "optimizer_model.onnx"
    params = {"w": w, "b": b}
    grads = random_grads(params, 5)
    expected = torch_steps(optim.SGD(momentum=0.9, nesterov=True), params, grads, 0.1)
    for session in (*sessions(path), onnxtrain.InferenceSession(to_body_domain(onnx.load(str(path))).SerializeToString())):
        got = optimizer_steps(session, params, grads, 0.1, ["momentum_buffer"])
        for key in expected[-1]:
            np.testing.assert_allclose(got[-1][key], expected[-1][key], rtol=1e-6, err_msg=key)
    np.testing.assert_allclose(  # the float32 learning rate is the only rounding
        expected[-1]["w"], optimizer_steps(sessions(path)[0], params, grads, 0.1, ["momentum_buffer"])[-1]["w"],
        rtol=1e-6)


def test_label_axes_follow_the_graph_not_the_output_names(tmp_path) -> None:
    # The output, flattened to [batch * 3], declares its axis "batch" like the input's.
    model = linear_model(TensorProto.FLOAT, np.float32)
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "flat"))
    graph.node.append(helper.make_node("Reshape", ["y", "flat"], ["y_flat"]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("y_flat", TensorProto.FLOAT, ["batch"]))
    generate_artifacts(model, requires_grad=["w", "b"], loss=LossType.MSELoss, optimizer=OptimType.SGD,
                       artifact_directory=tmp_path)
    w, b = (numpy_helper.to_array(model.graph.initializer[i]) for i in (0, 1))
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    loss, = run_both(tmp_path / "eval_model.onnx", {"x": x, "target": np.zeros(6, np.float32), "w": w, "b": b})
    np.testing.assert_allclose(loss, ((x @ w + b) ** 2).mean(), rtol=1e-5)


@pytest.mark.parametrize("mode", ["huggingface", "torch"])
def test_adamw_float64(tmp_path, mode) -> None:
    spec = optim.AdamW(mode=mode, weight_decay=0.01)
    generate_artifacts(linear_model(), loss=LossType.L1Loss, optimizer=spec, artifact_directory=tmp_path)
    path = tmp_path / "optimizer_model.onnx"
    model = linear_model()
    params = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer[:2]}
    grads = random_grads(params, 5)
    expected = torch_steps(spec, params, grads, 1e-3)
    for session in sessions(path):
        got = optimizer_steps(session, params, grads, 1e-3, ["exp_avg", "exp_avg_sq"])
        for key in expected[-1]:
            np.testing.assert_allclose(got[-1][key], expected[-1][key], rtol=1e-12, err_msg=key)


# ---- function bodies against the fused kernels -----------------------------------------


def training_functions() -> dict[str, onnx.FunctionProto]:
    """The gradient accumulator and the optimizer steps (the rest of the library is autodiff's)."""
    library = {f.name: f for f in onnx.load_from_string(_C.functions(17)).functions}
    return {name: library[name] for name in TRAINING_FUNCTIONS}


def call_model(function: str, inputs: dict[str, np.ndarray], outputs: int, domain: str, **attrs) -> bytes:
    body = onnx.FunctionProto()
    body.CopyFrom(training_functions()[function])
    body.domain = domain
    names = [f"out{i}" for i in range(outputs)]
    graph = helper.make_graph(
        [helper.make_node(function, list(inputs), names, domain=domain, **attrs)], function,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(n) for n in names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)],
                              functions=[body], ir_version=8)
    return model.SerializeToString()


def double(value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.float64))


TRAINING_FUNCTIONS = ("AccumulateGradient", "AdamWStep", "SGDStep", "SGDMomentumStep")

FUNCTION_CALLS = [
    ("AccumulateGradient", "add", lambda r, t: {"grad": r.standard_normal((3, 4)).astype(t),
                                                "buffer": r.standard_normal((3, 4)).astype(t), "reset": np.array(False)},
     1, {}),
    ("AccumulateGradient", "reset", lambda r, t: {"grad": r.standard_normal(5).astype(t),
                                                  "buffer": r.standard_normal(5).astype(t), "reset": np.array(True)},
     1, {}),
    ("AdamWStep", "step3", lambda r, t: {"lr": np.array(0.01, np.float32), "step": np.array(3, np.int64),
                                         "p": r.standard_normal((2, 3)).astype(t), "g": r.standard_normal((2, 3)).astype(t),
                                         "m": r.standard_normal((2, 3)).astype(t),
                                         "v": r.uniform(0, 1, (2, 3)).astype(t)},
     3, {"beta1": double(0.9), "beta2": double(0.999), "epsilon": double(1e-8), "weight_decay": double(0.01),
         "bias_correction": 1, "adam_mode": 0}),
    ("AdamWStep", "vector-and-tail", lambda r, t: {"lr": np.array(0.01, np.float32), "step": np.array(2, np.int64),
                                                   "p": r.standard_normal(37).astype(t),
                                                   "g": r.standard_normal(37).astype(t),
                                                   "m": r.standard_normal(37).astype(t),
                                                   "v": r.uniform(0, 1, 37).astype(t)},
     3, {"beta1": double(0.9), "beta2": double(0.999), "epsilon": double(1e-8), "weight_decay": double(0.01),
         "bias_correction": 1, "adam_mode": 0}),
    ("AdamWStep", "uncorrected", lambda r, t: {"lr": np.array(0.1, np.float32), "step": np.array(1, np.int64),
                                               "p": r.standard_normal(7).astype(t), "g": r.standard_normal(7).astype(t),
                                               "m": np.zeros(7, t), "v": np.zeros(7, t)},
     3, {"beta1": double(0.8), "beta2": double(0.99), "epsilon": double(1e-6), "weight_decay": double(0.0),
         "bias_correction": 0, "adam_mode": 0}),
    *[("AdamWStep", f"huggingface-{label}",
       lambda r, t, step=step, lr_type=lr_type: {
           "lr": np.array(0.01, lr_type), "step": np.array(step, np.int64), "p": r.standard_normal(37).astype(t),
           "g": r.standard_normal(37).astype(t), "m": r.standard_normal(37).astype(t) * (step > 1),
           "v": r.uniform(0, 1, 37).astype(t) * (step > 1)},
       3, {"beta1": double(0.9), "beta2": double(0.999), "epsilon": double(1e-6), "weight_decay": double(wd),
           "bias_correction": correct, "adam_mode": 1})
      for label, step, lr_type, wd, correct in [("step1", 1, np.float32, 0.0, 1), ("step7-decay", 7, np.float32, 0.01, 1),
                                                ("uncorrected", 3, np.float32, 0.01, 0),
                                                ("double-scalars", 4, np.float64, 0.01, 1)]],
    ("SGDStep", "decay", lambda r, t: {"lr": np.array(0.1, np.float32), "p": r.standard_normal((4, 2)).astype(t),
                                       "g": r.standard_normal((4, 2)).astype(t)},
     1, {"weight_decay": double(0.1)}),
    *[("SGDMomentumStep", f"{label}-step{step}",
       lambda r, t, step=step: {"lr": np.array(0.05, np.float32), "step": np.array(step, np.int64),
                                "p": r.standard_normal(6).astype(t), "g": r.standard_normal(6).astype(t),
                                "buf": r.standard_normal(6).astype(t)},
       2, {"momentum": double(0.9), "dampening": double(dampening), "nesterov": nesterov,
           "weight_decay": double(0.01)})
      for label, dampening, nesterov in [("plain", 0.0, 0), ("dampening", 0.2, 0), ("nesterov", 0.0, 1)]
      for step in (1, 2)],
]


def test_every_training_function_has_a_case() -> None:
    assert {c[0] for c in FUNCTION_CALLS} == set(training_functions())


def test_training_kernels_are_registered() -> None:
    registered = {op for domain, op, *_ in onnxtrain.supported_ops() if domain == "org.onnxtrain"}
    assert set(training_functions()) <= registered


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("call", FUNCTION_CALLS, ids=[f"{c[0]}-{c[1]}" for c in FUNCTION_CALLS])
def test_function_body_matches_fused_kernel(call, dtype) -> None:
    function, _, make, outputs, attrs = call
    inputs = make(np.random.default_rng(7), dtype)
    fused = onnxtrain.InferenceSession(call_model(function, inputs, outputs, "org.onnxtrain", **attrs)).run(None, inputs)
    body = onnxtrain.InferenceSession(call_model(function, inputs, outputs, BODY_DOMAIN, **attrs)).run(None, inputs)
    tolerance = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {"rtol": 1e-6, "atol": 1e-7}
    if attrs.get("adam_mode") == 1 and dtype == np.float32:
        # The same float operations in the same order, none fused: bit for bit (so is
        # onnxruntime-training's kernel: test_ort_kernels.py). In float64 Pow may differ by an ulp.
        tolerance = {"rtol": 0, "atol": 0}
    for i, (a, b) in enumerate(zip(fused, body)):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, **tolerance, err_msg=f"output {i}: fused kernel vs inlined body")
    if dtype == np.float16:
        return  # onnxruntime's CPU kernels lack float16 Sqrt/Pow
    theirs = ort.InferenceSession(call_model(function, inputs, outputs, "org.onnxtrain", **attrs),
                                  providers=["CPUExecutionProvider"]).run(None, inputs)
    for i, (a, b) in enumerate(zip(fused, theirs)):
        np.testing.assert_allclose(a, b, **tolerance, err_msg=f"output {i}: fused kernel vs onnxruntime")


# ---- the rest of the interface ---------------------------------------------------------


def read_checkpoint_metadata(path: Path) -> dict:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return header, json.loads(header["__metadata__"]["onnxtrain"])


def test_checkpoint_and_nominal_checkpoint(mlp, tmp_path) -> None:
    module, model_path = mlp
    generate_artifacts(model_path, requires_grad=["fc2.weight", "fc2.bias"], frozen_params=["fc1.weight", "fc1.bias"],
                       loss=LossType.CrossEntropyLoss, optimizer=optim.SGD(lr=0.25, momentum=0.5),
                       artifact_directory=tmp_path, nominal_checkpoint=True)
    header, meta = read_checkpoint_metadata(tmp_path / "checkpoint")
    assert [(p["name"], p["requires_grad"]) for p in meta["parameters"]] == [
        ("fc1.weight", False), ("fc1.bias", False), ("fc2.weight", True), ("fc2.bias", True)]
    assert meta["optimizer"]["step"] == 0 and meta["optimizer"]["moments"] == []
    assert float(meta["optimizer"]["learning_rate"]) == 0.25
    from onnxtrain.training.api import CheckpointState

    state = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    for name, value in parameters(module).items():
        np.testing.assert_array_equal(state.parameters[name].data, value)
    assert not state.parameters["fc1.weight"].requires_grad
    _, nominal = read_checkpoint_metadata(tmp_path / "nominal_checkpoint")
    assert nominal["nominal"] is True
    assert os.path.getsize(tmp_path / "nominal_checkpoint") < os.path.getsize(tmp_path / "checkpoint")
    nominal_state = CheckpointState.load_checkpoint(tmp_path / "nominal_checkpoint")
    assert nominal_state.parameters["fc1.weight"].data.shape == (HIDDEN, FEATURES)
    # Frozen parameters are inputs of both models, without gradients.
    training = onnx.load(str(tmp_path / "training_model.onnx"))
    assert "fc1.weight" in [i.name for i in training.graph.input]
    assert [o.name for o in training.graph.output] == [
        "loss", "fc2.weight_grad.accumulation.out", "fc2.bias_grad.accumulation.out"]


def test_unlisted_initializers_stay_constants_with_a_warning(mlp, tmp_path) -> None:
    module, model_path = mlp
    with pytest.warns(UserWarning, match=r"'fc1\.weight', 'fc1\.bias', 'fc2\.bias'"):
        generate_artifacts(model_path, requires_grad=["fc2.weight"], loss=LossType.MSELoss,
                           optimizer=OptimType.AdamW, artifact_directory=tmp_path)
    eval_model = onnx.load(str(tmp_path / "eval_model.onnx"))
    assert [i.name for i in eval_model.graph.input] == ["input", "target", "fc2.weight"]
    assert {i.name for i in eval_model.graph.initializer} == {"fc1.weight", "fc1.bias", "fc2.bias"}
    loss, = run_both(tmp_path / "eval_model.onnx",
                     {"input": X, "target": REGRESSION_TARGET, "fc2.weight": parameters(module)["fc2.weight"]})
    np.testing.assert_allclose(loss, F.mse_loss(module(torch.from_numpy(X)), torch.from_numpy(REGRESSION_TARGET))
                               .detach().numpy(), rtol=1e-5)


def test_model_proto_with_loss_none_and_external_data(mlp, tmp_path) -> None:
    module, model_path = mlp
    # A forward model that computes its own loss, saved with external data.
    model = onnx.load(str(model_path))
    graph = model.graph
    graph.input.append(helper.make_tensor_value_info("target", TensorProto.FLOAT, ["batch", CLASSES]))
    graph.node.extend([helper.make_node("Sub", ["output", "target"], ["diff"]),
                       helper.make_node("Mul", ["diff", "diff"], ["square"]),
                       helper.make_node("ReduceMean", ["square"], ["my_loss"], keepdims=0)])
    graph.output.insert(0, helper.make_tensor_value_info("my_loss", TensorProto.FLOAT, []))
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save_model(model, str(folder / "with_loss.onnx"), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    assert (folder / "weights.bin").exists()
    generate_artifacts(folder / "with_loss.onnx", optimizer=OptimType.AdamW, artifact_directory=tmp_path / "a",
                       additional_output_names=["output"])
    training = onnx.load(str(tmp_path / "a" / "training_model.onnx"))
    assert [o.name for o in training.graph.output] == [
        "my_loss", "output", *[f"{p}_grad.accumulation.out" for p in PARAMS]]
    feeds = {"input": X, "target": REGRESSION_TARGET, "lazy_reset_grad": np.array(True), **parameters(module)}
    feeds.update({f"{p}_grad.accumulation.buffer": np.zeros_like(v) for p, v in parameters(module).items()})
    loss, _, *grads = run_both(tmp_path / "a" / "training_model.onnx", feeds)
    expected_loss, expected = torch_loss_and_grads(module, F.mse_loss, REGRESSION_TARGET)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    for name, grad in zip(PARAMS, grads):
        np.testing.assert_allclose(grad, expected[name], rtol=1e-4, atol=1e-6)
    # The same model as a ModelProto (external data loaded by onnx.load).
    generate_artifacts(onnx.load(str(folder / "with_loss.onnx")), loss_input_names=["my_loss"],
                       optimizer=None, artifact_directory=tmp_path / "b")
    assert not (tmp_path / "b" / "optimizer_model.onnx").exists()
    assert (tmp_path / "b" / "training_model.onnx").exists()


def expect_error(tmp_path, exception, match, model, **kwargs) -> None:
    kwargs.setdefault("loss", LossType.MSELoss)
    kwargs.setdefault("optimizer", OptimType.AdamW)
    with pytest.raises(exception, match=match):
        generate_artifacts(model, artifact_directory=tmp_path / "out", **kwargs)
    assert not (tmp_path / "out" / "training_model.onnx").exists()


def test_errors(mlp, tmp_path) -> None:
    _, path = mlp
    expect_error(tmp_path, ValueError, "requires_grad: 'fc3.weight' is not an initializer", path,
                 requires_grad=["fc3.weight"])
    expect_error(tmp_path, ValueError, "frozen_params: 'nope' is not an initializer", path, frozen_params=["nope"])
    expect_error(tmp_path, ValueError, "'fc1.bias' is listed both in requires_grad and in frozen_params", path,
                 requires_grad=["fc1.bias"], frozen_params=["fc1.bias"])
    expect_error(tmp_path, ValueError, "ort_format=True.*no ONNX Runtime flatbuffer", path, ort_format=True)
    expect_error(tmp_path, ValueError, "loss_input_names: 'logits' is not an output", path,
                 loss_input_names=["logits"])
    expect_error(tmp_path, ValueError, "MSE loss takes one input", path, loss_input_names=["output", "output"])
    expect_error(tmp_path, ValueError, "additional_output_names: 'nothing'", path, additional_output_names=["nothing"])
    expect_error(tmp_path, ValueError, "parameter 'shape_constant' holds int64", linear_model(),
                 requires_grad=["w", "shape_constant"])
    expect_error(tmp_path, TypeError, "requires_grad must be a list", path, requires_grad="fc1.weight")
    # Custom losses are onnxblock.Block subclasses (tests/python/training/onnxblock); an
    # object that merely has a build method is not one.
    expect_error(tmp_path, TypeError, "loss must be a LossType, an onnxblock Block", path,
                 loss=type("MyLoss", (), {"build": lambda self, x: x})())
    with pytest.raises(ValueError, match="reduction must be one of"):
        L.MSELoss("average")


def test_loss_type_errors(tmp_path) -> None:
    # Cross-entropy needs [batch, classes]; the trainable parameter must reach the loss.
    model = linear_model(TensorProto.FLOAT, np.float32)
    graph = model.graph
    graph.node.append(helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0))
    graph.node.append(helper.make_node("ArgMax", ["y"], ["index"], axis=1))
    graph.output.extend([helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
                         helper.make_tensor_value_info("index", TensorProto.INT64, ["batch", 1])])
    expect_error(tmp_path, ValueError, "scores 'total' have rank 0", model, loss=LossType.CrossEntropyLoss,
                 loss_input_names=["total"])
    expect_error(tmp_path, ValueError, "its input 'index' holds int64", model, loss=LossType.MSELoss,
                 loss_input_names=["index"])
    unused = numpy_helper.from_array(np.ones(3, np.float32), "unused")
    graph.initializer.append(unused)
    expect_error(tmp_path, ValueError, "does not depend on 'unused'", model, requires_grad=["w", "unused"])
    # Without requires_grad, an initializer the loss does not reach is frozen, with a warning.
    with pytest.warns(UserWarning, match="does not depend on 'unused'"):
        generate_artifacts(model, loss=LossType.MSELoss, optimizer=OptimType.SGD, artifact_directory=tmp_path / "ok")
    _, meta = read_checkpoint_metadata(tmp_path / "ok" / "checkpoint")
    assert [(p["name"], p["requires_grad"]) for p in meta["parameters"]] == [
        ("w", True), ("b", True), ("unused", False)]


def test_ort_format_file_is_rejected(tmp_path) -> None:
    path = tmp_path / "model.ort"
    path.write_bytes(b"\x1c\x00\x00\x00ORTM" + bytes(64))
    expect_error(tmp_path, ValueError, "ONNX Runtime flatbuffer", path)


# ---- the command line ------------------------------------------------------------------


def cli() -> Path | None:
    package = Path(onnxtrain.__file__).resolve().parent
    for candidate in (package / "bin" / "onnxtrain", package.parents[1] / "onnxtrain"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def test_cli_gen_artifacts(mlp, tmp_path) -> None:
    tool = cli()
    if tool is None:
        pytest.skip("the onnxtrain command-line tool is not built beside this package")
    module, model_path = mlp
    out = tmp_path / "cli"
    done = subprocess.run(
        [str(tool), "gen-artifacts", str(model_path), "--out", str(out), "--requires-grad", "fc2.weight,fc2.bias",
         "--frozen", "fc1.weight,fc1.bias", "--loss", "cross-entropy", "--ignore-index", "-100", "--optimizer", "sgd",
         "--lr", "0.5", "--momentum", "0.9", "--nesterov", "--weight-decay", "0.01", "--prefix", "x_",
         "--nominal-checkpoint", "--additional-output", "output"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint", "nominal_checkpoint"):
        assert (out / f"x_{name}").exists(), name
    optimizer = onnx.load(str(out / "x_optimizer_model.onnx"))
    assert {p.key: p.value for p in optimizer.metadata_props}["onnxtrain.moments"] == "momentum_buffer"
    node = optimizer.graph.node[0]
    assert node.op_type == "SGDMomentumStep"
    attrs = {a.name: a for a in node.attribute}
    assert attrs["nesterov"].i == 1 and numpy_helper.to_array(attrs["weight_decay"].t) == 0.01
    _, meta = read_checkpoint_metadata(out / "x_checkpoint")
    assert float(meta["optimizer"]["learning_rate"]) == 0.5
    feeds = model_feeds(module, "labels", LABELS_IGNORED)
    loss, output = run_both(out / "x_eval_model.onnx", feeds)
    np.testing.assert_allclose(
        loss, F.cross_entropy(module(torch.from_numpy(X)), torch.from_numpy(LABELS_IGNORED)).detach().numpy(),
        rtol=1e-5)

    failed = subprocess.run([str(tool), "gen-artifacts", str(model_path), "--out", str(out / "bad"),
                             "--requires-grad", "fc9.weight"], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert "'fc9.weight' is not an initializer" in failed.stderr
    usage = subprocess.run([str(tool), "gen-artifacts", str(model_path), "--loss", "hinge", "--out", str(out)],
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 1 and "--loss: 'hinge' is not one of" in usage.stderr
    helped = subprocess.run([str(tool), "gen-artifacts", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--requires-grad" in helped.stdout
