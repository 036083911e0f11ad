"""The training API of API.md §3: Module, Optimizer, LinearLRScheduler and OrtValue on
artifacts from generate_artifacts — gradients, accumulation, parameters as one buffer,
DLPack tensors, export for inference, resume and the errors users meet."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

import onnxruntime  # noqa: E402

from onnxtrain import OrtValue  # noqa: E402
from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer  # noqa: E402
from zoo.training import make_case, trainable_names  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*stay constants")


@pytest.fixture(scope="module")
def mlp_case(tmp_path_factory):
    return make_case("mlp", tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="module")
def mlp_artifacts(mlp_case, tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlp_artifacts")
    artifacts.generate_artifacts(
        str(mlp_case.onnx_path), requires_grad=trainable_names(mlp_case),
        loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
        artifact_directory=folder, nominal_checkpoint=True)
    return folder


def load(folder: Path, eval_model: bool = True, threads: int | None = None):
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    options = None
    if threads is not None:
        from onnxtrain import SessionOptions

        options = SessionOptions()
        options.intra_op_num_threads = threads
    module = Module(folder / "training_model.onnx", state, folder / "eval_model.onnx" if eval_model else None,
                    session_options=options)
    return state, module


def torch_grads(case, inputs, labels) -> dict[str, np.ndarray]:
    module = case.module
    module.zero_grad()
    loss = torch.nn.functional.cross_entropy(module(torch.from_numpy(inputs)), torch.from_numpy(labels))
    loss.backward()
    return {n: p.grad.numpy().copy() for n, p in module.named_parameters()}


def test_names_follow_the_mode(mlp_artifacts):
    _, module = load(mlp_artifacts)
    assert module.training and module.input_names() == ["x", "labels"] and module.output_names() == ["loss"]
    assert module.eval() is module and not module.training
    assert module.input_names() == ["x", "labels"]


def test_gradients_accumulate_until_lazy_reset(mlp_case, mlp_artifacts):
    state, module = load(mlp_artifacts)
    (x1, y1), (x2, y2) = mlp_case.batches(2)
    assert all(p.grad is None for _, p in state.parameters)
    module(x1, y1)
    g1 = torch_grads(mlp_case, x1, y1)
    for name, p in state.parameters:
        np.testing.assert_allclose(p.grad, g1[name], rtol=1e-4, atol=1e-6)
    module(x2, y2)  # adds
    g2 = torch_grads(mlp_case, x2, y2)
    for name, p in state.parameters:
        np.testing.assert_allclose(p.grad, g1[name] + g2[name], rtol=1e-4, atol=1e-6)
    module.lazy_reset_grad()
    module(x2, y2)  # overwrites
    for name, p in state.parameters:
        np.testing.assert_allclose(p.grad, g2[name], rtol=1e-4, atol=1e-6)


def test_eval_gives_the_loss_and_no_gradient(mlp_case, mlp_artifacts):
    state, module = load(mlp_artifacts)
    x, y = mlp_case.batches(1)[0]
    loss = module.eval()(x, y)
    expected = torch.nn.functional.cross_entropy(mlp_case.module(torch.from_numpy(x)), torch.from_numpy(y)).item()
    assert loss.shape == () and loss.dtype == np.float32
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert all(p.grad is None for _, p in state.parameters)
    with pytest.raises(ValueError, match="no gradients have been computed"):
        Optimizer(mlp_artifacts / "optimizer_model.onnx", module).step()


def test_contiguous_parameters_round_trip(mlp_artifacts):
    state, module = load(mlp_artifacts)
    sizes = {name: p.data.size for name, p in state.parameters}
    assert module.get_parameters_size() == module.get_parameters_size(False) == sum(sizes.values())
    flat = module.get_contiguous_parameters()
    assert isinstance(flat, OrtValue) and flat.shape() == [sum(sizes.values())]
    expected = np.concatenate([p.data.ravel() for _, p in state.parameters])
    np.testing.assert_array_equal(flat.numpy(), expected)
    module.copy_buffer_to_parameters(OrtValue.ortvalue_from_numpy(flat.numpy() * 2))
    np.testing.assert_array_equal(module.get_contiguous_parameters().numpy(), expected * 2)
    module.copy_buffer_to_parameters(torch.from_numpy(expected))  # any DLPack tensor
    np.testing.assert_array_equal(module.get_contiguous_parameters().numpy(), expected)
    with pytest.raises(ValueError, match="buffer holds 3 elements"):
        module.copy_buffer_to_parameters(np.zeros(3, np.float32))


def test_nominal_checkpoint_gets_values_from_a_buffer(mlp_case, mlp_artifacts):
    full_state, full = load(mlp_artifacts)
    state = CheckpointState.load_checkpoint(mlp_artifacts / "nominal_checkpoint")
    module = Module(mlp_artifacts / "training_model.onnx", state, mlp_artifacts / "eval_model.onnx")
    module.copy_buffer_to_parameters(full.get_contiguous_parameters())
    x, y = mlp_case.batches(1)[0]
    np.testing.assert_array_equal(module(x, y), full(x, y))


def test_torch_tensors_in_and_out_share_memory(mlp_case, mlp_artifacts):
    _, module = load(mlp_artifacts)
    x, y = mlp_case.batches(1)[0]
    tx, ty = torch.from_numpy(x).requires_grad_(False), torch.from_numpy(y)
    loss = module(tx, ty)
    assert isinstance(loss, torch.Tensor)
    np.testing.assert_allclose(loss.numpy(), module(x, y), rtol=0)
    out = module(OrtValue.ortvalue_from_numpy(x), OrtValue.ortvalue_from_numpy(y))
    assert isinstance(out, OrtValue)
    # The OrtValue's DLPack view is the same memory as its numpy view: no copy on the way.
    assert torch.from_dlpack(out).data_ptr() == out.numpy().ctypes.data


def test_export_for_inference_runs_in_onnxruntime(mlp_case, mlp_artifacts, tmp_path):
    state, module = load(mlp_artifacts)
    optimizer = Optimizer(mlp_artifacts / "optimizer_model.onnx", module)
    for x, y in mlp_case.batches(3):
        module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
    module.export_model_for_inferencing(tmp_path / "inference.onnx", ["logits"])
    model = onnx.load(str(tmp_path / "inference.onnx"))
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["x"] and [o.name for o in model.graph.output] == ["logits"]
    x = mlp_case.batches(4)[3][0]
    logits = onnxruntime.InferenceSession(str(tmp_path / "inference.onnx")).run(None, {"x": x})[0]
    reference = onnxruntime.InferenceSession(str(mlp_case.onnx_path))
    feeds = {"x": x}
    # The same forward with the trained weights, computed by the original model in onnxruntime.
    weights = {name: p.data for name, p in state.parameters}
    trained = onnx.load(str(mlp_case.onnx_path))
    for init in trained.graph.initializer:
        if init.name in weights:
            init.CopyFrom(onnx.numpy_helper.from_array(weights[init.name], init.name))
    expected = onnxruntime.InferenceSession(trained.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(logits, expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(expected, reference.run(None, feeds)[0])  # the export holds the trained weights
    with pytest.raises(ValueError, match="no node of eval_model.onnx computes 'nope'"):
        module.export_model_for_inferencing(tmp_path / "bad.onnx", ["nope"])
    assert not (tmp_path / "bad.onnx").exists()


def test_linear_lr_scheduler(mlp_case, mlp_artifacts):
    _, module = load(mlp_artifacts)
    optimizer = Optimizer(mlp_artifacts / "optimizer_model.onnx", module)
    scheduler = LinearLRScheduler(optimizer, warmup_step_count=2, total_step_count=6, initial_lr=0.1)
    rates = [optimizer.get_learning_rate()]
    for x, y in mlp_case.batches(7):
        module(x, y)
        optimizer.step()
        scheduler.step()
        rates.append(optimizer.get_learning_rate())
    np.testing.assert_allclose(rates, [0.0, 0.05, 0.1, 0.075, 0.05, 0.025, 0.0, 0.0])


def test_checkpoint_loads_into_the_torch_model(mlp_case, mlp_artifacts, tmp_path):
    from safetensors.torch import load_file

    state, module = load(mlp_artifacts)
    optimizer = Optimizer(mlp_artifacts / "optimizer_model.onnx", module)
    x, y = mlp_case.batches(1)[0]
    module(x, y)
    optimizer.step()
    CheckpointState.save_checkpoint(state, tmp_path / "trained", include_optimizer_state=True)
    tensors = load_file(str(tmp_path / "trained"))
    weights = {k: v for k, v in tensors.items() if not k.startswith("optimizer/")}
    twin = make_case("mlp", tmp_path / "twin").module
    missing, unexpected = twin.load_state_dict(weights, strict=False)
    assert not unexpected and not missing
    torch_logits = twin(torch.from_numpy(x)).detach().numpy()
    module.export_model_for_inferencing(tmp_path / "inference.onnx", ["logits"])
    ours = onnxruntime.InferenceSession(str(tmp_path / "inference.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, torch_logits, rtol=1e-5, atol=1e-6)


RESUME_SCRIPT = textwrap.dedent("""
    import sys, json, numpy as np
    sys.path[:0] = {paths!r}
    from zoo.training import make_case
    from onnxtrain import SessionOptions
    from onnxtrain.training.api import CheckpointState, Module, Optimizer
    import pathlib
    folder, checkpoint, start, stop, save = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    case_batches = make_case("mlp", pathlib.Path(folder) / "case").batches(stop)
    state = CheckpointState.load_checkpoint(checkpoint)
    options = SessionOptions(); options.intra_op_num_threads = 1
    module = Module(folder + "/training_model.onnx", state, session_options=options)
    optimizer = Optimizer(folder + "/optimizer_model.onnx", module)
    losses = []
    for x, y in case_batches[start:stop]:
        losses.append(float(module(x, y)))
        optimizer.step()
        module.lazy_reset_grad()
    if save != "-":
        CheckpointState.save_checkpoint(state, save, include_optimizer_state=True)
    print(json.dumps(losses))
""")


def test_resume_in_a_new_process_is_bit_exact(mlp_artifacts, tmp_path):
    import json

    script = tmp_path / "resume.py"
    script.write_text(RESUME_SCRIPT.format(paths=sys.path[:3] + [str(Path(__file__).resolve().parents[3])]))

    def run(*args: str) -> list[float]:
        result = subprocess.run([sys.executable, str(script), str(mlp_artifacts), *args], capture_output=True,
                                text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
        return json.loads(result.stdout.strip().splitlines()[-1])

    checkpoint = str(mlp_artifacts / "checkpoint")
    whole = run(checkpoint, "0", "30", "-")
    first = run(checkpoint, "0", "12", str(tmp_path / "after12"))
    rest = run(str(tmp_path / "after12"), "12", "30", "-")
    assert first + rest == whole  # bit for bit


FORK_SCRIPT = """
import os, sys
import numpy as np
from onnxtrain import SessionOptions
from onnxtrain.training.api import CheckpointState, Module, Optimizer

folder = sys.argv[1]
options = SessionOptions()
options.intra_op_num_threads = 2
state = CheckpointState.load_checkpoint(os.path.join(folder, "checkpoint"))
module = Module(os.path.join(folder, "training_model.onnx"), state, session_options=options)
optimizer = Optimizer(os.path.join(folder, "optimizer_model.onnx"), module)
rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 32)).astype(np.float32)
y = rng.integers(0, 10, 4096).astype(np.int64)

def steps(count):
    losses = []
    for _ in range(count):
        losses.append(float(module(x, y)))
        optimizer.step()
        module.lazy_reset_grad()
    return losses

steps(2)  # the parent has run on two threads
pid = os.fork()
losses = steps(3)
if pid == 0:
    print(repr(losses), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(repr(losses), os.waitstatus_to_exitcode(status), flush=True)
"""


def test_training_goes_on_in_a_forked_child(mlp_artifacts, tmp_path):
    """A child of fork() trains on from the parent's state (GCC's OpenMP would hang in it:
    core/parallel.h), with the parent's results bit for bit."""
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(mlp_artifacts)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    child, parent = done.stdout.strip().splitlines()
    *parent_losses, status = parent.rsplit(" ", 1)
    assert status == "0"
    assert child == " ".join(parent_losses)


def test_errors_name_what_was_expected(mlp_case, mlp_artifacts, tmp_path):
    state, module = load(mlp_artifacts, eval_model=False)
    x, y = mlp_case.batches(1)[0]
    with pytest.raises(ValueError, match=r"takes 2 inputs \(x, labels\), got 1"):
        module(x)
    with pytest.raises(ValueError, match="input 'x'.*expected"):
        module(x[:, :5].copy(), y)
    with pytest.raises(ValueError, match="input 'labels'.*expected int64"):
        module(x, y.astype(np.float32))
    with pytest.raises(ValueError, match=r"input 'x': expected .*, got a ndarray of dtype <U1"):
        module(np.full(x.shape, "a"), y)
    with pytest.raises(ValueError, match="no eval model"):
        module.eval()(x, y)
    with pytest.raises(RuntimeError, match="device 'cuda:1' is not available"):
        Module(mlp_artifacts / "training_model.onnx", state, device="cuda:1")
    with pytest.raises(RuntimeError, match="missing.onnx"):
        Module(tmp_path / "missing.onnx", state)
    with pytest.raises(TypeError, match="values are int, float or str"):
        state.properties["bad"] = [1, 2]


def test_a_checkpoint_of_another_model_is_refused(mlp_artifacts, tmp_path):
    other = CheckpointState.load_checkpoint(mlp_artifacts / "checkpoint")
    net = torch.nn.Linear(3, 2)
    torch.onnx.export(net, (torch.randn(1, 3),), str(tmp_path / "other.onnx"), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    artifacts.generate_artifacts(str(tmp_path / "other.onnx"), requires_grad=["weight", "bias"],
                                 loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD,
                                 artifact_directory=tmp_path)
    with pytest.raises(ValueError, match="the checkpoint does not have"):
        Module(tmp_path / "training_model.onnx", other)


def test_batchnorm_running_statistics_follow_torch(tmp_path):
    """Training-mode BatchNorm's running mean and variance are state: generate_artifacts
    freezes them into the checkpoint, training updates them in place, and the eval model
    normalizes with them — torch's train()/eval() behaviour. The ONNX spec (and onnxtrain)
    updates the running variance with the biased batch variance, torch with the unbiased one:
    n/(n-1) apart, n = 8*16*16 or more here, hence rtol 1e-3 for the variance."""
    import copy

    case = make_case("cnn", tmp_path / "cnn")
    twin = copy.deepcopy(case.module)
    artifacts.generate_artifacts(str(case.onnx_path), requires_grad=trainable_names(case),
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.SGD,
                                 artifact_directory=tmp_path)
    state = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    running = [name for name, p in state.parameters if "running" in name]
    assert len(running) == 4 and not any(state.parameters[n].requires_grad for n in running)
    module = Module(tmp_path / "training_model.onnx", state, tmp_path / "eval_model.onnx")
    optimizer = Optimizer(tmp_path / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(0.01)
    torch_optimizer = torch.optim.SGD(twin.parameters(), lr=0.01)
    batches = case.batches(6)
    for x, y in batches[:5]:
        module.train()(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        torch_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        torch_optimizer.step()
    buffers = dict(twin.named_buffers())
    for name in running:
        rtol = 1e-3 if name.endswith("running_var") else 1e-5
        np.testing.assert_allclose(state.parameters[name].data, buffers[name].numpy(), rtol=rtol, atol=1e-6)
    x, y = batches[5]
    twin.eval()
    expected = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)), torch.from_numpy(y)).item()
    np.testing.assert_allclose(module.eval()(x, y), expected, rtol=1e-3)
    eval_model = onnx.load(str(tmp_path / "eval_model.onnx"))
    assert all(not any(a.name == "training_mode" and a.i for a in n.attribute)
               for n in eval_model.graph.node if n.op_type == "BatchNormalization")


def test_misuse_raises_at_the_wrong_call(mlp_case, mlp_artifacts):
    """Issue 15: the same gradients applied twice, a non-finite learning rate and a negative
    schedule are errors where they are made, not silently wrong training."""
    _, module = load(mlp_artifacts)
    optimizer = Optimizer(mlp_artifacts / "optimizer_model.onnx", module)
    x, y = mlp_case.batches(1)[0]
    module(x, y)
    optimizer.step()
    with pytest.raises(ValueError, match="applied by the previous step"):
        optimizer.step()
    module(x, y)
    optimizer.step()  # a new training call makes the next step valid again
    for bad in (float("inf"), float("-inf"), float("nan"), -0.5):
        with pytest.raises(ValueError, match="learning rate must be finite and ≥ 0"):
            optimizer.set_learning_rate(bad)
    with pytest.raises(ValueError, match="initial_lr must be finite and ≥ 0"):
        LinearLRScheduler(optimizer, warmup_step_count=1, total_step_count=4, initial_lr=-0.1)
    with pytest.raises(ValueError, match="initial_lr must be finite"):
        LinearLRScheduler(optimizer, warmup_step_count=1, total_step_count=4, initial_lr=float("nan"))
