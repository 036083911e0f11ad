"""What onnxruntime-training users had that onnxtrain adds: gradient clipping (ClipGradNorm,
clip_grad) against torch.nn.utils.clip_grad_norm_, onnxblock.Linear against torch's linear,
ReduceAllL2 against numpy, onnxblock.save_checkpoint / load_checkpoint_to_model, and the
LinearLRScheduler warning."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxtrain import SessionOptions
from onnxtrain.training import artifacts, onnxblock
from onnxtrain.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer
from onnxtrain.training.onnxblock import blocks, optim
from tests.python.training.onnxblock.onnxblock_helpers import input_model, run_both

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
WEIGHTS = {
    "fc1.weight": RNG.standard_normal((16, 8)).astype(np.float32),
    "fc1.bias": RNG.standard_normal(16).astype(np.float32),
    "fc2.weight": RNG.standard_normal((4, 16)).astype(np.float32),
    "fc2.bias": RNG.standard_normal(4).astype(np.float32),
}


def mlp() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                              [numpy_helper.from_array(v, k) for k, v in WEIGHTS.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def torch_mlp() -> "torch.nn.Module":
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with torch.no_grad():
        for (name, value), parameter in zip(WEIGHTS.items(), model.parameters()):
            parameter.copy_(torch.from_numpy(value))
    return model


BATCHES = [(RNG.standard_normal((6, 8)).astype(np.float32), RNG.standard_normal((6, 4)).astype(np.float32))
           for _ in range(8)]


def train_onnxtrain(folder, optimizer, lr: float, **kwargs) -> tuple[list[float], dict[str, np.ndarray]]:
    artifacts.generate_artifacts(mlp(), requires_grad=list(WEIGHTS), loss=artifacts.LossType.MSELoss,
                                 optimizer=optimizer, artifact_directory=folder, **kwargs)
    options = SessionOptions()
    options.intra_op_num_threads = 1
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    module = Module(folder / "training_model.onnx", state, session_options=options)
    opt = Optimizer(folder / "optimizer_model.onnx", module)
    opt.set_learning_rate(lr)
    losses = []
    for x, target in BATCHES:
        losses.append(float(module(x, target)))
        opt.step()
        module.lazy_reset_grad()
    return losses, {name: state.parameters[name].data for name in WEIGHTS}


def train_torch(make_optimizer, max_norm: float | None) -> tuple[list[float], dict[str, np.ndarray]]:
    model = torch_mlp()
    opt = make_optimizer(model.parameters())
    losses, norms = [], []
    for x, target in BATCHES:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(target))
        loss.backward()
        if max_norm is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        opt.step()
        losses.append(float(loss))
    if max_norm is not None:  # the test must exercise both sides of the clip
        assert min(norms) < max_norm < max(norms), norms
    return losses, {name: p.detach().numpy() for name, p in zip(WEIGHTS, model.parameters())}


MAX_NORM = 25.0
CLIPPED = {
    "adamw-block": (lambda: optim.AdamW(clip_grad=optim.ClipGradNorm(MAX_NORM), mode="torch"), {},
                    lambda p: torch.optim.AdamW(p, lr=0.05, eps=1e-6, weight_decay=0.0), 0.05),
    "adamw-argument": (lambda: optim.AdamW(mode="torch"), {"clip_grad": MAX_NORM},
                       lambda p: torch.optim.AdamW(p, lr=0.05, eps=1e-6, weight_decay=0.0), 0.05),
    "sgd-block": (lambda: optim.SGD(optim.ClipGradNorm(MAX_NORM)), {},
                  lambda p: torch.optim.SGD(p, lr=0.05), 0.05),
    "sgd-momentum": (lambda: optim.SGD(clip_grad=MAX_NORM, momentum=0.9), {},
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), 0.05),
}


@pytest.mark.parametrize("case", list(CLIPPED))
def test_gradient_clipping_matches_torch_clip_grad_norm(case, tmp_path) -> None:
    make_block, kwargs, make_torch, lr = CLIPPED[case]
    ours, our_params = train_onnxtrain(tmp_path, make_block(), lr, **kwargs)
    theirs, their_params = train_torch(make_torch, MAX_NORM)
    np.testing.assert_allclose(ours, theirs, rtol=2e-5)
    for name in WEIGHTS:
        np.testing.assert_allclose(our_params[name], their_params[name], rtol=2e-5, atol=2e-6, err_msg=name)
    # Without clipping the run differs: the clip took effect.
    unclipped, _ = train_onnxtrain(tmp_path / "plain", optim.SGD() if "sgd" in case else optim.AdamW(mode="torch"), lr)
    assert not np.allclose(unclipped, ours, rtol=1e-3)


def test_clipped_optimizer_model_is_plain_onnx(tmp_path) -> None:
    artifacts.generate_artifacts(mlp(), requires_grad=list(WEIGHTS), loss=artifacts.LossType.MSELoss,
                                 optimizer=optim.AdamW(clip_grad=optim.ClipGradNorm(1.0), mode="torch"),
                                 artifact_directory=tmp_path)
    model = onnx.load(tmp_path / "optimizer_model.onnx")
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert "ReduceSumSquare" in ops and "Min" in ops and ops.count("AdamWStep") == len(WEIGHTS)
    # Stock onnxruntime runs it (inlining the org.onnxtrain steps) with the same clipped update.
    feeds = {"learning_rate": np.array(0.1, np.float32), "step": np.array(1, np.int64)}
    grads = {}
    for name, value in WEIGHTS.items():
        grads[name] = RNG.standard_normal(value.shape).astype(np.float32)
        feeds.update({name: value, f"{name}_grad": grads[name], f"{name}.exp_avg": np.zeros_like(value),
                      f"{name}.exp_avg_sq": np.zeros_like(value)})
    outputs = dict(zip([o.name for o in model.graph.output],
                       ort.InferenceSession(str(tmp_path / "optimizer_model.onnx")).run(None, feeds)))
    params = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in WEIGHTS.values()]
    for p, g in zip(params, grads.values()):
        p.grad = torch.from_numpy(g.copy())
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    torch.optim.AdamW(params, lr=0.1, eps=1e-6, weight_decay=0.0).step()
    for name, p in zip(WEIGHTS, params):
        np.testing.assert_allclose(outputs[f"{name}.out"], p.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_clip_grad_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_norm must be finite and > 0"):
        optim.ClipGradNorm(0.0)
    with pytest.raises(TypeError, match="clip_grad must be"):
        optim.AdamW(clip_grad="1.0")
    with pytest.raises(ValueError, match="clip_grad is given twice"):
        artifacts.generate_artifacts(mlp(), requires_grad=list(WEIGHTS), loss=artifacts.LossType.MSELoss,
                                     optimizer=optim.AdamW(clip_grad=1.0), clip_grad=2.0, artifact_directory=tmp_path)
    with pytest.raises(ValueError, match="clip_grad needs an optimizer"):
        artifacts.generate_artifacts(mlp(), requires_grad=list(WEIGHTS), loss=artifacts.LossType.MSELoss,
                                     clip_grad=2.0, artifact_directory=tmp_path)


def test_clip_grad_norm_block_and_reduce_all_l2() -> None:
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    norm = np.sqrt((a.astype(np.float64) ** 2).sum() + (b.astype(np.float64) ** 2).sum())

    class Norm(onnxblock.ForwardBlock):
        def build(self, x, y):
            return blocks.ReduceAllL2()(x, y)

    class Clipped(onnxblock.ForwardBlock):
        def build(self, x, y):
            return optim.ClipGradNorm(1.5)(x, y)

    for block, expected in ((Norm(), [np.float32(norm)]),
                            (Clipped(), [a * (1.5 / (norm + 1e-6)), b * (1.5 / (norm + 1e-6))])):
        with onnxblock.base(input_model({"a": a, "b": b})):
            block("a", "b")
        for got, want in zip(run_both(block.to_model_proto(), {"a": a, "b": b}), expected):
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_linear_block_is_torch_linear() -> None:
    x = RNG.standard_normal((5, 6)).astype(np.float32)

    class Layer(onnxblock.ForwardBlock):
        def build(self, name):
            return blocks.Linear(6, 3, alpha=0.5, beta=2.0, rng=np.random.default_rng(1))(name)

    layer = Layer()
    with onnxblock.base(input_model({"x": x})):
        layer("x")
    model = layer.to_model_proto()
    initializers = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weight = next(v for k, v in initializers.items() if k.startswith("linear.weight"))
    bias = next(v for k, v in initializers.items() if k.startswith("linear.bias"))
    assert weight.shape == (6, 3) and bias.shape == (3,)
    assert np.abs(weight).max() <= 1 / np.sqrt(6)  # torch.nn.Linear's initialization range
    expected = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(weight.T.copy()) * 0.5,
                                          torch.from_numpy(bias) * 2.0).numpy()
    for got in run_both(model, {"x": x}):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

    no_bias = blocks.Linear(6, 3, bias=False)
    with onnxblock.base(input_model({"x": x})) as accessor:
        no_bias("x")
        assert len(accessor.model.graph.initializer) == 1


def test_save_checkpoint_and_load_checkpoint_to_model(tmp_path) -> None:
    model = mlp()
    trainable = [t for t in model.graph.initializer if t.name.startswith("fc2")]
    frozen = [t for t in model.graph.initializer if t.name.startswith("fc1")]
    onnxblock.save_checkpoint((trainable, frozen), tmp_path / "checkpoint")
    state = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    assert len(state.parameters) == 4
    for name, value in WEIGHTS.items():
        np.testing.assert_array_equal(state.parameters[name].data, value)
        assert state.parameters[name].requires_grad == name.startswith("fc2")

    onnxblock.save_checkpoint((trainable, frozen), tmp_path / "nominal", nominal_checkpoint=True)
    nominal = CheckpointState.load_checkpoint(tmp_path / "nominal")
    assert len(nominal.parameters) == 4
    assert (tmp_path / "nominal").stat().st_size < (tmp_path / "checkpoint").stat().st_size

    changed = {k: v + 1 for k, v in WEIGHTS.items()}
    for name, value in changed.items():
        state.parameters[name] = value
    CheckpointState.save_checkpoint(state, tmp_path / "changed")
    target = mlp()
    onnxblock.load_checkpoint_to_model(tmp_path / "changed", target)
    for tensor in target.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), changed[tensor.name])
    with pytest.raises(RuntimeError, match="nominal checkpoint"):
        onnxblock.load_checkpoint_to_model(tmp_path / "nominal", mlp())
    with pytest.raises(ValueError, match="more than once"):
        onnxblock.save_checkpoint((trainable, trainable), tmp_path / "twice")
    with pytest.raises(TypeError, match="pair"):
        onnxblock.save_checkpoint(trainable, tmp_path / "bad")


def test_scheduler_warns_when_warmup_exceeds_total(tmp_path) -> None:
    artifacts.generate_artifacts(mlp(), requires_grad=list(WEIGHTS), loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.SGD, artifact_directory=tmp_path)
    state = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    module = Module(tmp_path / "training_model.onnx", state)
    optimizer = Optimizer(tmp_path / "optimizer_model.onnx", module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LinearLRScheduler(optimizer, warmup_step_count=2, total_step_count=10, initial_lr=0.01)
    with pytest.warns(UserWarning, match=r"warmup_step_count \(10\) > total_step_count \(2\)"):
        scheduler = LinearLRScheduler(optimizer, warmup_step_count=10, total_step_count=2, initial_lr=0.01)
    rates = []
    for x, target in BATCHES[:4]:
        rates.append(optimizer.get_learning_rate())
        module(x, target)
        optimizer.step()
        scheduler.step()
    np.testing.assert_allclose(rates, [0.0, 0.001, 0.002, 0.003], atol=1e-12)
