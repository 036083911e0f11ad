"""onnxblock.loss: every loss block's value and gradient against torch.nn.functional (rtol
1e-5), through a TrainingBlock whose training model runs in onnxtrain and in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from onnxtrain.training import onnxblock  # noqa: E402
from onnxtrain.training.artifacts import generate_artifacts  # noqa: E402
from onnxtrain.training.onnxblock import loss as L  # noqa: E402
from tests.python.training.onnxblock.onnxblock_helpers import (  # noqa: E402
    parameter_model, run_both, training_feeds)

pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")

F = torch.nn.functional
rng = np.random.default_rng(0)
N, C = 6, 3
SCORES = rng.standard_normal((N, C)).astype(np.float32)
SPATIAL = rng.standard_normal((3, 4, 2)).astype(np.float32)
REGRESSION = rng.standard_normal((N, C)).astype(np.float32)
BINARY = rng.uniform(0, 1, (N, C)).astype(np.float32)
LABELS = np.array([0, 2, 1, 2, 0, 1], np.int64)
LABELS_IGNORED = np.array([0, -100, 1, 2, -100, 1], np.int64)
SPATIAL_LABELS = np.array([[0, 3], [-100, 1], [2, 2]], np.int64)
PROBABILITIES = np.exp(REGRESSION) / np.exp(REGRESSION).sum(axis=1, keepdims=True)
PROBABILITIES[0, 1] = 0.0  # 0 log 0 = 0
LOG_PROBABILITIES = np.log(np.exp(REGRESSION) / np.exp(REGRESSION).sum(axis=1, keepdims=True)).astype(np.float32)
PROBABILITIES = PROBABILITIES.astype(np.float32)
CLASS_WEIGHT = [0.3, 1.0, 2.5]
SPATIAL_WEIGHT = [0.5, 1.0, 2.0, 1.5]
ELEMENT_WEIGHT = [0.5, 1.0, 3.0]
POS_WEIGHT = [2.0, 0.5, 1.5]


def weight(values):
    return torch.tensor(values, dtype=torch.float32)


CASES = []  # (id, block, torch loss of (input, target), input, target name, target)
for r in ("mean", "sum", "none"):
    CASES += [
        (f"mse-{r}", L.MSELoss(r), lambda x, t, r=r: F.mse_loss(x, t, reduction=r), SCORES, "target", REGRESSION),
        (f"l1-{r}", L.L1Loss(r), lambda x, t, r=r: F.l1_loss(x, t, reduction=r), SCORES, "target", REGRESSION),
        (f"bce-{r}", L.BCEWithLogitsLoss(reduction=r),
         lambda x, t, r=r: F.binary_cross_entropy_with_logits(x, t, reduction=r), SCORES, "target", BINARY),
        (f"bce-weights-{r}", L.BCEWithLogitsLoss(ELEMENT_WEIGHT, r, POS_WEIGHT),
         lambda x, t, r=r: F.binary_cross_entropy_with_logits(x, t, weight(ELEMENT_WEIGHT), reduction=r,
                                                              pos_weight=weight(POS_WEIGHT)),
         SCORES, "target", BINARY),
        (f"ce-{r}", L.CrossEntropyLoss(reduction=r), lambda x, t, r=r: F.cross_entropy(x, t, reduction=r),
         SCORES, "labels", LABELS),
        (f"ce-weight-ignore-{r}", L.CrossEntropyLoss(CLASS_WEIGHT, r, ignore_index=-100),
         lambda x, t, r=r: F.cross_entropy(x, t, weight(CLASS_WEIGHT), reduction=r), SCORES, "labels",
         LABELS_IGNORED),
        (f"ce-smoothing-{r}", L.CrossEntropyLoss(reduction=r, label_smoothing=0.1),
         lambda x, t, r=r: F.cross_entropy(x, t, reduction=r, label_smoothing=0.1), SCORES, "labels", LABELS),
        (f"ce-smoothing-weight-ignore-{r}", L.CrossEntropyLoss(CLASS_WEIGHT, r, -100, label_smoothing=0.2),
         lambda x, t, r=r: F.cross_entropy(x, t, weight(CLASS_WEIGHT), reduction=r, label_smoothing=0.2),
         SCORES, "labels", LABELS_IGNORED),
        (f"ce-smoothing-ignore-spatial-{r}", L.CrossEntropyLoss(SPATIAL_WEIGHT, r, -100, label_smoothing=0.3),
         lambda x, t, r=r: F.cross_entropy(x, t, weight(SPATIAL_WEIGHT), reduction=r, label_smoothing=0.3),
         SPATIAL, "labels", SPATIAL_LABELS),
        (f"ce-smoothing-ignore-{r}", L.CrossEntropyLoss(reduction=r, ignore_index=-100, label_smoothing=0.1),
         lambda x, t, r=r: F.cross_entropy(x, t, reduction=r, label_smoothing=0.1), SCORES, "labels",
         LABELS_IGNORED),
        (f"nll-{r}", L.NLLLoss(reduction=r), lambda x, t, r=r: F.nll_loss(x, t, reduction=r), SCORES, "labels",
         LABELS),
        (f"nll-weight-ignore-spatial-{r}", L.NLLLoss(SPATIAL_WEIGHT, r, ignore_index=-100),
         lambda x, t, r=r: F.nll_loss(x, t, weight(SPATIAL_WEIGHT), reduction=r), SPATIAL, "labels",
         SPATIAL_LABELS),
        (f"huber-{r}", L.HuberLoss(r), lambda x, t, r=r: F.huber_loss(x, t, reduction=r), SCORES, "target",
         REGRESSION),
        (f"huber-delta-{r}", L.HuberLoss(r, delta=0.3),
         lambda x, t, r=r: F.huber_loss(x, t, reduction=r, delta=0.3), SCORES, "target", REGRESSION),
        (f"smoothl1-{r}", L.SmoothL1Loss(r), lambda x, t, r=r: F.smooth_l1_loss(x, t, reduction=r), SCORES,
         "target", REGRESSION),
        (f"smoothl1-beta-{r}", L.SmoothL1Loss(r, beta=0.4),
         lambda x, t, r=r: F.smooth_l1_loss(x, t, reduction=r, beta=0.4), SCORES, "target", REGRESSION),
        (f"smoothl1-beta0-{r}", L.SmoothL1Loss(r, beta=0.0),
         lambda x, t, r=r: F.smooth_l1_loss(x, t, reduction=r, beta=0.0), SCORES, "target", REGRESSION),
    ]
for r in ("mean", "batchmean", "sum", "none"):
    CASES += [
        (f"kldiv-{r}", L.KLDivLoss(r), lambda x, t, r=r: F.kl_div(x, t, reduction=r), SCORES, "target",
         PROBABILITIES),
        (f"kldiv-log-target-{r}", L.KLDivLoss(r, log_target=True),
         lambda x, t, r=r: F.kl_div(x, t, reduction=r, log_target=True), SCORES, "target", LOG_PROBABILITIES),
    ]


class LossOf(onnxblock.TrainingBlock):
    """The loss of the model output ``p``, differentiated with respect to ``p_value``."""

    def __init__(self, loss) -> None:
        super().__init__()
        self.loss = loss
        self.requires_grad("p_value")

    def build(self, output):
        return self.loss(output)


def torch_value_and_grad(loss_fn, x, target):
    tensor = torch.tensor(x, requires_grad=True)
    value = loss_fn(tensor, torch.tensor(target))
    value.sum().backward()
    return value.detach().numpy(), tensor.grad.numpy()


@pytest.mark.parametrize("name,block,loss_fn,x,target_name,target", CASES, ids=[c[0] for c in CASES])
def test_loss_value_and_gradient_match_torch(name, block, loss_fn, x, target_name, target) -> None:
    training_block = LossOf(block)
    with onnxblock.base(parameter_model({"p": x})):
        training_block("p")
    training, evaluation = training_block.to_model_proto()
    onnx.checker.check_model(training)
    expected, expected_grad = torch_value_and_grad(loss_fn, x, target)
    value, grad = run_both(training, training_feeds(training, {target_name: target}, {"p_value": x}))
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)
    [eval_value] = run_both(evaluation, {target_name: target, "p_value": x})
    np.testing.assert_allclose(eval_value, expected, rtol=1e-5, atol=1e-7)


def test_target_types_follow_the_input() -> None:
    model = parameter_model({"p": SPATIAL.astype(np.float64)})
    with onnxblock.base(model) as accessor:
        L.HuberLoss()("p")
        L.NLLLoss()("p", labels_name="classes")
        inputs = {i.name: i.type.tensor_type for i in accessor.model.graph.input}
    assert inputs["target"].elem_type == onnx.TensorProto.DOUBLE
    assert [d.dim_value for d in inputs["target"].shape.dim] == [3, 4, 2]
    assert inputs["classes"].elem_type == onnx.TensorProto.INT64
    assert [d.dim_value for d in inputs["classes"].shape.dim] == [3, 2]


def test_bce_gradient_at_zero_logits(tmp_path) -> None:
    """softplus(-x) keeps the exact gradient sigmoid(x) - t at x = 0, both through the block
    and through generate_artifacts' direct use of the C++ builder for BCEWithLogitsLoss."""
    zeros = np.zeros((N, C), np.float32)
    _, expected_grad = torch_value_and_grad(F.binary_cross_entropy_with_logits, zeros, BINARY)
    block = LossOf(L.BCEWithLogitsLoss())
    with onnxblock.base(parameter_model({"p": zeros})):
        block("p")
    training, _ = block.to_model_proto()
    _, grad = run_both(training, training_feeds(training, {"target": BINARY}, {"p_value": zeros}))
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)

    generate_artifacts(parameter_model({"p": zeros}), requires_grad=["p_value"], loss=L.BCEWithLogitsLoss(),
                       artifact_directory=tmp_path)
    training = onnx.load(tmp_path / "training_model.onnx")
    _, grad = run_both(training, training_feeds(training, {"target": BINARY}, {"p_value": zeros}))
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("block", [L.MSELoss(), L.CrossEntropyLoss(CLASS_WEIGHT, ignore_index=-100),
                                   L.BCEWithLogitsLoss(pos_weight=POS_WEIGHT), L.L1Loss("sum")],
                         ids=["mse", "ce", "bce", "l1"])
def test_builtin_losses_take_the_cpp_builder_and_agree_with_the_block(block, tmp_path) -> None:
    """generate_artifacts adds the four builtin losses with the C++ loss builder directly; the
    same block called in a TrainingBlock gives the same loss and gradient."""
    assert block._options() is not None
    target_name, target = ("labels", LABELS_IGNORED) if isinstance(block, L.CrossEntropyLoss) else ("target", BINARY)
    generate_artifacts(parameter_model({"p": SCORES}), requires_grad=["p_value"], loss=block,
                       artifact_directory=tmp_path)
    cpp = onnx.load(tmp_path / "training_model.onnx")
    python = LossOf(block)
    with onnxblock.base(parameter_model({"p": SCORES})):
        python("p")
    results = [run_both(m, training_feeds(m, {target_name: target}, {"p_value": SCORES}))
               for m in (cpp, python.to_model_proto()[0])]
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("block,loss_fn,target", [
    (L.HuberLoss("none", delta=0.5), lambda x, t: F.huber_loss(x, t, reduction="none", delta=0.5), REGRESSION),
    (L.CrossEntropyLoss(label_smoothing=0.1), lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), LABELS),
    (L.KLDivLoss("batchmean"), lambda x, t: F.kl_div(x, t, reduction="batchmean"), PROBABILITIES),
], ids=["huber-none", "ce-smoothing", "kldiv-batchmean"])
def test_python_losses_in_generate_artifacts(block, loss_fn, target, tmp_path) -> None:
    """Losses generate_artifacts does not hand to the C++ builder directly are called as
    blocks and named "loss"; a loss without reduction is differentiated through its sum."""
    assert block._options() is None
    target_name = "labels" if target is LABELS else "target"
    generate_artifacts(parameter_model({"p": SCORES}), requires_grad=["p_value"], loss=block,
                       artifact_directory=tmp_path)
    training = onnx.load(tmp_path / "training_model.onnx")
    assert training.graph.output[0].name == "loss"
    expected, expected_grad = torch_value_and_grad(loss_fn, SCORES, target)
    value, grad = run_both(training, training_feeds(training, {target_name: target}, {"p_value": SCORES}))
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)


def test_dynamic_dimensions_are_read_when_the_model_runs() -> None:
    """KLDiv's batchmean divides by the batch size and label smoothing by the class count;
    where the model leaves them dynamic, the loss reads them from its input (Shape)."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["p"])], "dynamic",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "classes"])],
        [onnx.helper.make_tensor_value_info("p", onnx.TensorProto.FLOAT, ["batch", "classes"])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    with onnxblock.base(model) as accessor:
        smoothed = L.CrossEntropyLoss(reduction="mean", ignore_index=-100, label_smoothing=0.2)("p")
        batchmean = L.KLDivLoss("batchmean")("p")
        built = accessor.model
    assert sum(n.op_type == "Shape" for n in built.graph.node) == 2
    del built.graph.output[:]
    built.graph.output.extend([onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [])
                               for n in (smoothed, batchmean)])
    values = run_both(built, {"x": SCORES, "labels": LABELS_IGNORED, "target": PROBABILITIES})
    x = torch.tensor(SCORES)
    expected = [F.cross_entropy(x, torch.tensor(LABELS_IGNORED), label_smoothing=0.2),
                F.kl_div(x, torch.tensor(PROBABILITIES), reduction="batchmean")]
    for value, want in zip(values, expected):
        np.testing.assert_allclose(value, want.numpy(), rtol=1e-5, atol=1e-7)
