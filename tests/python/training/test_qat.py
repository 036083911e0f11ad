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
from zoo.nets import QATNet  # noqa: E402
from zoo.training import train_artifacts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 100
BATCH = 16


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
