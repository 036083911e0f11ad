"""TrainingBlock with a forward model and a custom loss, the weighted-average example of
API.md §2 trained with onnxtrain.training.api, optimizer blocks, models with external data,
and the documented errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training import onnxblock  # noqa: E402
from onnxtrain.training.api import CheckpointState, Module, Optimizer  # noqa: E402
from tests.python.training.onnxblock.onnxblock_helpers import (  # noqa: E402
    input_model, parameter_model, run_both, training_feeds)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

F = torch.nn.functional
rng = np.random.default_rng(0)
X = rng.standard_normal((8, 4)).astype(np.float32)
T1 = rng.standard_normal((8, 3)).astype(np.float32)
T2 = rng.standard_normal((8, 2)).astype(np.float32)
LABELS = rng.integers(0, 3, 8).astype(np.int64)


class TwoHeads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(4, 8)
        self.head1 = torch.nn.Linear(8, 3)
        self.head2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.head1(h), self.head2(h)


@pytest.fixture(scope="module")
def two_heads(tmp_path_factory):
    module = TwoHeads()
    path = tmp_path_factory.mktemp("two_heads") / "model.onnx"
    torch.onnx.export(module, (torch.from_numpy(X),), str(path), input_names=["x"], output_names=["out1", "out2"],
                      dynamic_axes={"x": {0: "batch"}, "out1": {0: "batch"}, "out2": {0: "batch"}},
                      opset_version=17, dynamo=False)
    return module, onnx.load(str(path))


def params_of(module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


# ---- the example of API.md §2, with only its import changed -----------------------------

import onnxtrain.training.onnxblock as example_onnxblock  # noqa: E402  (was onnxruntime.training.onnxblock)


class WeightedAverageLoss(example_onnxblock.Block):
    def __init__(self):
        super().__init__()
        self._loss1 = example_onnxblock.loss.MSELoss()
        self._loss2 = example_onnxblock.loss.MSELoss()
        self._w1 = example_onnxblock.blocks.Constant(0.4)
        self._w2 = example_onnxblock.blocks.Constant(0.6)
        self._add = example_onnxblock.blocks.Add()
        self._mul = example_onnxblock.blocks.Mul()

    def build(self, loss_input_name1, loss_input_name2):
        return self._add(
            self._mul(self._w1(), self._loss1(loss_input_name1, target_name="target1")),
            self._mul(self._w2(), self._loss2(loss_input_name2, target_name="target2")),
        )


def weighted_torch_loss(module, x, t1, t2):
    out1, out2 = module(torch.from_numpy(x))
    return 0.4 * F.mse_loss(out1, torch.from_numpy(t1)) + 0.6 * F.mse_loss(out2, torch.from_numpy(t2))


def test_weighted_average_example_trains_with_the_training_api(two_heads, tmp_path) -> None:
    module, model = two_heads
    artifacts.generate_artifacts(model, requires_grad=[i.name for i in model.graph.initializer],
                                 loss=WeightedAverageLoss(), optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=tmp_path)
    state = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    trainer = Module(tmp_path / "training_model.onnx", state, tmp_path / "eval_model.onnx")
    optimizer = Optimizer(tmp_path / "optimizer_model.onnx", trainer)
    assert trainer.input_names() == ["x", "target1", "target2"] and trainer.output_names() == ["loss"]

    module.zero_grad()
    expected = weighted_torch_loss(module, X, T1, T2)
    expected.backward()
    loss = trainer(X, T1, T2)
    np.testing.assert_allclose(loss, expected.item(), rtol=1e-5)
    for name, p in module.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)

    optimizer.set_learning_rate(0.02)
    losses = [float(loss)]
    optimizer.step()
    for _ in range(30):
        trainer.lazy_reset_grad()
        losses.append(float(trainer(X, T1, T2)))
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(b < a for a, b in zip(losses[:5], losses[1:6])), losses
    trainer.eval()
    np.testing.assert_allclose(trainer(X, T1, T2), losses[-1], rtol=0.2)  # one more step after the last loss


# ---- a custom TrainingBlock: forward model and custom loss -------------------------------

class HeadsWithCustomLoss(onnxblock.TrainingBlock):
    """0.3 huber(out1, target) + cross_entropy(out1, labels, label_smoothing=0.1)
    + mean(sigmoid(out2)); also keeps out2."""

    def __init__(self) -> None:
        super().__init__()
        self.huber = onnxblock.loss.HuberLoss(delta=0.5)
        self.ce = onnxblock.loss.CrossEntropyLoss(label_smoothing=0.1)

    def build(self, out1, out2):
        b = onnxblock.blocks
        huber = b.Mul()(b.Constant(0.3)(), self.huber(out1))
        penalty = b.ReduceMean(keepdims=False)(b.Sigmoid()(out2))
        return b.Add()(b.Add()(huber, self.ce(out1)), penalty), out2


def custom_torch_loss(module, x):
    out1, out2 = module(torch.from_numpy(x))
    return (0.3 * F.huber_loss(out1, torch.from_numpy(T1), delta=0.5)
            + F.cross_entropy(out1, torch.from_numpy(LABELS), label_smoothing=0.1) + torch.sigmoid(out2).mean()), out2


def test_custom_training_block_gradients_match_torch(two_heads) -> None:
    module, model = two_heads
    block = HeadsWithCustomLoss()
    names = [i.name for i in model.graph.initializer]
    for name in names:
        block.requires_grad(name)
    block.requires_grad("body.bias", False)  # frozen
    with onnxblock.base(model):
        loss_name, kept = block("out1", "out2")
    assert kept == "out2"
    trainable, frozen = block.parameters()
    assert [t.name for t in trainable] == [n for n in names if n != "body.bias"]
    assert [t.name for t in frozen] == ["body.bias"]
    assert all(isinstance(t, onnx.TensorProto) for t in trainable + frozen)
    training, evaluation = block.to_model_proto()
    for m in (training, evaluation):
        onnx.checker.check_model(m)
        assert [o.name for o in m.graph.output][:2] == [loss_name, "out2"]

    module.zero_grad()
    expected, out2 = custom_torch_loss(module, X)
    expected.backward()
    params = params_of(module)
    trained = {t.name: params[t.name] for t in trainable}
    feeds = {"x": X, "target": T1, "labels": LABELS, "body.bias": params["body.bias"]}
    loss, kept_out2, *grads = run_both(training, training_feeds(training, feeds, trained))
    np.testing.assert_allclose(loss, expected.item(), rtol=1e-5)
    np.testing.assert_allclose(kept_out2, out2.detach().numpy(), rtol=1e-5, atol=1e-6)
    grad_of = dict(module.named_parameters())
    for t, grad in zip(trainable, grads):
        np.testing.assert_allclose(grad, grad_of[t.name].grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=t.name)
    eval_loss, _ = run_both(evaluation, {**feeds, **trained})
    np.testing.assert_allclose(eval_loss, expected.item(), rtol=1e-5)


# ---- optimizer blocks --------------------------------------------------------------------

def test_optimizer_blocks_build_the_generate_artifacts_optimizer_model(two_heads, tmp_path) -> None:
    _, model = two_heads
    trainable = [i for i in model.graph.initializer if not i.name.startswith("head2")]  # the MSE sees out1 only
    for optimizer in (onnxblock.optim.AdamW(weight_decay=0.0), onnxblock.optim.SGD(lr=0.1, momentum=0.9)):
        folder = tmp_path / type(optimizer).__name__
        artifacts.generate_artifacts(model, requires_grad=[i.name for i in trainable], frozen_params=["head2.weight",
                                     "head2.bias"], loss=onnxblock.loss.MSELoss(), optimizer=optimizer,
                                     artifact_directory=folder)
        written = onnx.load(folder / "optimizer_model.onnx")
        with pytest.raises(RuntimeError, match="not built"):
            optimizer.to_model_proto()
        with onnxblock.empty_base() as accessor:
            outputs = optimizer(trainable)
            built = accessor.model
        assert optimizer.to_model_proto() == built
        with onnxblock.empty_base():  # onnxruntime's form: TrainingBlock.parameters()
            assert optimizer((trainable, [])) == outputs
        onnx.checker.check_model(built)
        assert outputs == [o.name for o in written.graph.output]
        assert built.graph == written.graph
        assert [f.name for f in built.functions] == [f.name for f in written.functions]
        assert {p.key: p.value for p in built.metadata_props} == {p.key: p.value for p in written.metadata_props}
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    assert Optimizer(folder / "optimizer_model.onnx", Module(folder / "training_model.onnx", state))\
        .get_learning_rate() == pytest.approx(0.1)


# ---- models with external data -----------------------------------------------------------

def test_custom_loss_on_a_model_with_external_data(two_heads, tmp_path) -> None:
    module, model = two_heads
    path = tmp_path / "external" / "model.onnx"
    path.parent.mkdir()
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # onnx.save_model moves the tensors of the proto it saves to the data file
    onnx.save_model(copy, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    artifacts.generate_artifacts(str(path), requires_grad=[i.name for i in model.graph.initializer],
                                 loss=WeightedAverageLoss(), artifact_directory=tmp_path / "art")
    training = onnx.load(tmp_path / "art" / "training_model.onnx")
    module.zero_grad()
    expected = weighted_torch_loss(module, X, T1, T2)
    expected.backward()
    params = params_of(module)
    loss, *grads = run_both(training, training_feeds(training, {"x": X, "target1": T1, "target2": T2}, params))
    np.testing.assert_allclose(loss, expected.item(), rtol=1e-5)
    grad_of = dict(module.named_parameters())
    for name, grad in zip(params, grads):
        np.testing.assert_allclose(grad, grad_of[name].grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


# ---- errors --------------------------------------------------------------------------------

class Forward(onnxblock.ForwardBlock):
    def build(self, name):
        return onnxblock.blocks.Abs()(name)


class Training(onnxblock.TrainingBlock):
    def __init__(self, output=None) -> None:
        super().__init__()
        self.output = output

    def build(self, name):
        loss = onnxblock.loss.MSELoss()(name)
        return self.output or loss


def test_models_and_parameters_before_build_raise_runtime_error() -> None:
    with pytest.raises(RuntimeError, match="not built"):
        Forward().to_model_proto()
    with pytest.raises(RuntimeError, match="not built"):
        Training().to_model_proto()
    with pytest.raises(RuntimeError, match="not built"):
        Training().parameters()


def test_blocks_need_a_base() -> None:
    with pytest.raises(RuntimeError, match="no base model"):
        onnxblock.blocks.Add()("a", "b")
    with onnxblock.empty_base():
        with pytest.raises(RuntimeError, match="do not nest"):
            with onnxblock.base(input_model({"a": X})):
                pass


def test_unknown_value_names() -> None:
    with onnxblock.base(parameter_model({"p": T1})):
        with pytest.raises(ValueError, match="'nope' is not a value of the model.*outputs are \\['p'\\]"):
            onnxblock.loss.MSELoss()("nope")
        with pytest.raises(ValueError, match="Add: 'missing' is not a value"):
            onnxblock.blocks.Add()("p", "missing")
    block = Training(output="not_there")
    block.requires_grad("p_value")
    with onnxblock.base(parameter_model({"p": T1})):
        with pytest.raises(ValueError, match="Training.build returned an output that: 'not_there' is not a value"):
            block("p")
    with pytest.raises(ValueError, match="loss_input_names: 'nope' is not a value"):
        artifacts.generate_artifacts(parameter_model({"p": T1}), loss=WeightedAverageLoss(),
                                     loss_input_names=["p", "nope"])


def test_target_name_clash() -> None:
    with onnxblock.base(input_model({"x": X, "target": X})):
        with pytest.raises(ValueError, match="target name 'target' clashes"):
            onnxblock.loss.L1Loss()("x")
    with onnxblock.base(parameter_model({"p": T1, "q": T2})):
        onnxblock.loss.MSELoss()("p", target_name="t")
        onnxblock.loss.HuberLoss()("p", target_name="t")  # the same target, shared
        with pytest.raises(ValueError, match="target name 't' clashes .*another type"):
            onnxblock.loss.MSELoss()("q", target_name="t")
        with pytest.raises(ValueError, match="target name 'p_value' clashes"):
            onnxblock.loss.MSELoss()("q", target_name="p_value")


def test_requires_grad_of_an_unknown_name() -> None:
    block = Training()
    block.requires_grad("p_value")
    block.requires_grad("nonexistent")
    with onnxblock.base(parameter_model({"p": T1})):
        with pytest.raises(ValueError, match=r"requires_grad: \['nonexistent'\] not initializers.*'p_value'"):
            block("p")
    nothing = Training()
    with onnxblock.base(parameter_model({"p": T1})):
        with pytest.raises(ValueError, match="no initializer requires a gradient"):
            nothing("p")


def test_invalid_options() -> None:
    with pytest.raises(ValueError, match="reduction"):
        onnxblock.loss.HuberLoss(reduction="batchmean")
    with pytest.raises(ValueError, match="label_smoothing"):
        onnxblock.loss.CrossEntropyLoss(label_smoothing=1.5)
    with pytest.raises(ValueError, match="delta"):
        onnxblock.loss.HuberLoss(delta=0.0)
    with onnxblock.base(parameter_model({"p": T1})):
        with pytest.raises(ValueError, match="3 classes"):
            onnxblock.loss.CrossEntropyLoss(weight=[1.0, 2.0])("p")
        with pytest.raises(TypeError, match="Pow"):
            onnxblock.blocks.Pow()("p")
    with pytest.raises(TypeError, match="loss must be"):
        artifacts.generate_artifacts(parameter_model({"p": T1}), loss="mse")


class LossAndHead(onnxblock.Block):
    """A custom loss block that also keeps out2."""

    def build(self, out1, out2):
        return onnxblock.loss.L1Loss()(out1), out2


def test_generate_artifacts_outputs_and_default_loss_inputs(two_heads, tmp_path) -> None:
    _, model = two_heads
    names = [i.name for i in model.graph.initializer if not i.name.startswith("head2")]
    artifacts.generate_artifacts(model, requires_grad=names, frozen_params=["head2.weight", "head2.bias"],
                                 loss=LossAndHead(), additional_output_names=["out1"], artifact_directory=tmp_path)
    evaluation = onnx.load(tmp_path / "eval_model.onnx")
    assert [o.name for o in evaluation.graph.output] == ["loss", "out2", "out1"]
    # A loss of onnxblock.loss takes the first output by default, as the builtin losses do.
    artifacts.generate_artifacts(model, requires_grad=names, frozen_params=["head2.weight", "head2.bias"],
                                 loss=onnxblock.loss.HuberLoss(), artifact_directory=tmp_path / "huber")
    evaluation = onnx.load(tmp_path / "huber" / "eval_model.onnx")
    [target] = [i for i in evaluation.graph.input if i.name == "target"]
    assert [d.dim_value for d in target.type.tensor_type.shape.dim] == [0, 3]  # like out1: [batch, 3]


def test_training_block_leaves_the_training_model_as_base(two_heads) -> None:
    _, model = two_heads
    block = Training()
    block.requires_grad("head1.weight")
    with onnxblock.base(model) as accessor:
        with pytest.warns(UserWarning, match="stay constants"):  # the initializers marked neither
            block("out1")
        assert accessor.model == block.to_model_proto()[0]
    trainable, frozen = block.parameters()
    assert [t.name for t in trainable] == ["head1.weight"] and frozen == []


def test_models_over_the_protobuf_limit_go_by_file_and_stay_unchanged(two_heads, tmp_path, monkeypatch) -> None:
    """With the 2 GB limit lowered, the in-memory model takes the path of a large one: saved
    with external data for shape inference, checking and the C++ builder, and left as it was."""
    from onnxtrain.training.onnxblock import model_accessor

    module, model = two_heads
    before = model.SerializeToString()
    monkeypatch.setattr(model_accessor, "_PROTOBUF_LIMIT", 1000)
    artifacts.generate_artifacts(model, requires_grad=[i.name for i in model.graph.initializer],
                                 loss=WeightedAverageLoss(), artifact_directory=tmp_path)
    assert model.SerializeToString() == before
    training = onnx.load(tmp_path / "training_model.onnx")
    module.zero_grad()
    expected = weighted_torch_loss(module, X, T1, T2)
    loss, *_ = run_both(training, training_feeds(training, {"x": X, "target1": T1, "target2": T2},
                                                 params_of(module)))
    np.testing.assert_allclose(loss, expected.item(), rtol=1e-5)
