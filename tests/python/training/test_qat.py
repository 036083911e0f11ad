"""Quantization-aware training end to end: a small CNN with fake quantization (QuantizeLinear
-> DequantizeLinear pairs) on its weights (int8, per output channel) and activations (uint8,
per tensor), exported by torch, trained by onnxtrain's generate_artifacts + training API for
100 steps against PyTorch training the same module (torch.fake_quantize_* and its
straight-through gradients).

Both run on one thread in float32 (QuantizeLinear takes no float64). Scales are powers of two,
so x / scale (ONNX) and x * (1 / scale) (torch) are the same number and both quantize alike.
Every loss must match PyTorch's within rtol 1e-3 (measured here: 2.4e-5 at most over the 100
steps of AdamW at lr 1e-2; 2e-7 at lr 1e-3). The artifacts also run in stock onnxruntime: its
training graph gives onnxtrain's loss and gradients."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.api import CheckpointState, Module  # noqa: E402
from onnxtrain.training.onnxblock import optim  # noqa: E402
from zoo.training import train_artifacts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 100
BATCH = 16


class QATNet(torch.nn.Module):
    """conv 3x3 (8 channels) -> ReLU -> max pool -> linear, fake-quantized as QAT does it:
    weights int8 per output channel, activations uint8 per tensor."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)
        self.register_buffer("conv_scale", torch.full((8,), 2.0**-7))
        self.register_buffer("fc_scale", torch.full((10,), 2.0**-8))
        self.register_buffer("zero", torch.zeros(10, dtype=torch.int32))

    @staticmethod
    def act(x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, 0, 255)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(x, 2.0**-5, 128)
        w = torch.fake_quantize_per_channel_affine(self.conv.weight, self.conv_scale, self.zero[:8], 0, -128, 127)
        y = torch.relu(torch.nn.functional.conv2d(x, w, self.conv.bias, padding=1))
        y = self.act(y, 2.0**-5, 0)
        y = torch.nn.functional.max_pool2d(y, 2).flatten(1)
        w = torch.fake_quantize_per_channel_affine(self.fc.weight, self.fc_scale, self.zero, 0, -128, 127)
        return torch.nn.functional.linear(y, w, self.fc.bias)


def batches(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1)
    teacher = rng.standard_normal((64, 10)).astype(np.float32)
    out = []
    for _ in range(steps):
        x = rng.standard_normal((BATCH, 1, 8, 8)).astype(np.float32)
        out.append((x, np.argmax(x.reshape(BATCH, -1) @ teacher, axis=1).astype(np.int64)))
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qat")
    net = QATNet()
    path = folder / "qat.onnx"
    torch.onnx.export(net.train(), (torch.zeros(BATCH, 1, 8, 8),), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model = onnx.load(str(path))
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QuantizeLinear") == 4 and ops.count("DequantizeLinear") == 4, ops
    params = {n for n, _ in net.named_parameters()}
    trainable = [i.name for i in model.graph.initializer if i.name in params]
    assert len(trainable) == 4
    artifacts.generate_artifacts(str(path), requires_grad=trainable, frozen_params=None,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=optim.AdamW(eps=1e-8, weight_decay=0.0,
                                                                                              mode="torch"),
                                 artifact_directory=folder)
    return folder, net


def test_qat_training_follows_pytorch(exported):
    folder, net = exported
    ours, _ = train_artifacts(folder, batches(STEPS), 1e-2)

    torch_net = QATNet().train()
    opt = torch.optim.AdamW(torch_net.parameters(), lr=1e-2, eps=1e-8, weight_decay=0.0)
    theirs = []
    for inputs, labels in batches(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(torch_net(torch.from_numpy(inputs)), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        theirs.append(loss.item())
    np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=0)
    assert theirs[-1] < 0.8 * theirs[0]  # it trained


def test_qat_artifacts_run_in_onnxruntime(exported):
    import onnxruntime as ort

    import onnxtrain

    folder, _ = exported
    training = onnx.load(str(folder / "training_model.onnx"))
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    inputs, labels = batches(1)[0]
    feeds = {"input": inputs, "labels": labels, "lazy_reset_grad": np.array(True)}
    for name in ("conv.weight", "conv.bias", "fc.weight", "fc.bias"):
        feeds[name] = np.asarray(state.parameters[name].data)
        feeds[f"{name}_grad.accumulation.buffer"] = np.zeros_like(feeds[name])
    session = ort.InferenceSession(training.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)
    ours = onnxtrain.InferenceSession(training.SerializeToString()).run(None, feeds)
    assert len(ours) == len(theirs) >= 5  # the loss and four gradients
    for a, b, out in zip(ours, theirs, training.graph.output):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=out.name)
    evaluation = onnx.load(str(folder / "eval_model.onnx"))
    eval_feeds = {k: v for k, v in feeds.items() if k in {i.name for i in evaluation.graph.input}}
    ort.InferenceSession(evaluation.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, eval_feeds)
