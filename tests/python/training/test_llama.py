"""Training a tiny Llama-style decoder end to end against PyTorch, through the opset-23 ops:
every RMSNorm is one ``RMSNormalization`` node, every rotary embedding one
``RotaryEmbedding`` node and every causal grouped-query attention one ``Attention`` node.

The decoder (zoo/llama.py: vocabulary 64, width 32, 4 query heads over 2 key/value heads of size 8, 2
layers, SwiGLU MLP of width 64, sequences of 8, batches of 2) is a torch module. torch has
no rotary op to export as RotaryEmbedding (and torch 2.9's dynamo exporter fails at
opset_version=23 in its version converter), so the ONNX graph is written here with
onnx.helper from the module's own weights, in two layouts: 3-D ([B, S, H * D], fixed shapes)
and 4-D ([B, H, S, D], symbolic batch and length). generate_artifacts (cross-entropy, AdamW
in torch's mode) and the training API then train it for 100 steps while PyTorch trains the
module with torch.optim.AdamW: every step's loss must match within rtol 1e-8 in float64
(onnxtrain's kernels of the three ops take float64 beyond the spec's types; measured:
3.5e-13 at most over the 100 steps, either layout) and 1e-3 in float32 (measured: 6.8e-6);
the loss falls from 4.03 to 0.78. The trained parameters, exported for inference, give the
trained torch module's logits (in onnxruntime too, float32: 3.7e-5 apart at most). The 4-D
model also takes another batch size and length: loss and every gradient as torch.autograd's.
One thread on both sides. The float32 artifacts also run in stock onnxruntime (1.23 has CPU
kernels of the three ops in float32): its training graph gives onnxtrain's loss and
gradients (measured: 4.8e-7 apart at most), its eval graph the same loss."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

import onnxtrain  # noqa: E402
from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.api import CheckpointState, Module  # noqa: E402
from onnxtrain.training.onnxblock import optim  # noqa: E402
from zoo.llama import LlamaConfig, TinyLlama  # noqa: E402
from zoo.llama import to_onnx as zoo_to_onnx  # noqa: E402
from zoo.training import train_artifacts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 100
LR = 1e-2
BATCH, SEQ = 2, 8
VOCAB = LlamaConfig().vocab


def to_onnx(net: TinyLlama, dtype: np.dtype, layout: str) -> tuple[onnx.ModelProto, list[str]]:
    return zoo_to_onnx(net, dtype, layout, BATCH, SEQ)


def batches(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Sequences that follow t -> (5 t + 3) mod VOCAB from a random start, with a few tokens
    replaced at random; the labels are the next tokens, [BATCH * SEQ]."""
    rng = np.random.default_rng(7)
    out = []
    for _ in range(steps):
        tokens = np.empty((BATCH, SEQ + 1), dtype=np.int64)
        tokens[:, 0] = rng.integers(0, VOCAB, BATCH)
        for t in range(SEQ):
            tokens[:, t + 1] = (5 * tokens[:, t] + 3) % VOCAB
        noise = rng.random(tokens.shape) < 0.1
        tokens[noise] = rng.integers(0, VOCAB, int(noise.sum()))
        out.append((tokens[:, :SEQ].copy(), tokens[:, 1:].reshape(-1).copy()))
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):  # type: ignore[no-untyped-def]
    """exported(dtype, layout): the folder of the model's training artifacts (written once per
    module) and its trainable names."""
    written: dict[tuple[str, str], tuple[Path, list[str]]] = {}

    def get(dtype: str, layout: str) -> tuple[Path, list[str]]:
        if (dtype, layout) not in written:
            folder = tmp_path_factory.mktemp(f"llama-{dtype}-{layout}")
            model, trainable = to_onnx(TinyLlama(), np.dtype(dtype), layout)
            ops = {n.op_type for n in model.graph.node}
            assert {"Attention", "RMSNormalization", "RotaryEmbedding"} <= ops, ops
            assert model.opset_import[0].version == 23
            onnx.save(model, str(folder / "llama.onnx"))
            with pytest.warns(UserWarning, match="stay constants"):  # the rotary caches and shape constants
                artifacts.generate_artifacts(str(folder / "llama.onnx"), requires_grad=trainable, frozen_params=None,
                                             loss=artifacts.LossType.CrossEntropyLoss,
                                             optimizer=optim.AdamW(eps=1e-8, weight_decay=0.01, mode="torch"),
                                             artifact_directory=folder)
            written[dtype, layout] = folder, trainable
        return written[dtype, layout]

    return get


def onnxtrain_losses(folder: Path) -> tuple[list[float], Module]:
    """Every step's loss, and the trained module."""
    return train_artifacts(folder, batches(STEPS), LR)


def torch_losses(dtype: np.dtype) -> tuple[list[float], TinyLlama]:
    """Every step's loss, and the trained module."""
    net = TinyLlama().to(torch.float64 if dtype == np.float64 else torch.float32).train()
    opt = torch.optim.AdamW(net.parameters(), lr=LR, eps=1e-8, weight_decay=0.01)
    losses = []
    for input_ids, labels in batches(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(input_ids)), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net


def training_feeds(folder: Path, trainable: list[str], input_ids: np.ndarray, labels: np.ndarray) -> dict:
    """The training model's inputs: a batch, the checkpoint's parameters, zero gradient buffers."""
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    feeds = {"input_ids": input_ids, "labels": labels, "lazy_reset_grad": np.array(True)}
    for name in trainable:
        feeds[name] = np.asarray(state.parameters[name].data)
        feeds[f"{name}_grad.accumulation.buffer"] = np.zeros_like(feeds[name])
    return feeds


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-8), ("float32", 1e-3)])
def test_every_step_matches_pytorch(exported, dtype: str, rtol: float, layout: str) -> None:  # type: ignore
    folder, _ = exported(dtype, layout)
    training = onnx.load(str(folder / "training_model.onnx"))
    ops = {n.op_type for n in training.graph.node}
    assert {"Attention", "RMSNormalization", "RotaryEmbedding"} <= ops, ops
    (ours, module), (theirs, net) = onnxtrain_losses(folder), torch_losses(np.dtype(dtype))
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=0)
    assert theirs[-1] < 0.5 * theirs[0]  # it trained, so the comparison means something

    # The trained parameters, exported as an inference model, give the trained torch module's
    # logits, in onnxruntime too where it has the kernels (float32).
    module.export_model_for_inferencing(folder / "inference.onnx", ["logits"])
    input_ids = batches(1)[0][0]
    expected = net(torch.from_numpy(input_ids)).detach().numpy()
    runtimes = [onnxtrain.InferenceSession]
    if dtype == "float32" and importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime as ort

        runtimes.append(lambda path: ort.InferenceSession(path, providers=["CPUExecutionProvider"]))
    for runtime in runtimes:
        logits = runtime(str(folder / "inference.onnx")).run(None, {"input_ids": input_ids})[0]
        np.testing.assert_allclose(logits, expected, rtol=rtol, atol=rtol)


def test_symbolic_shapes_take_another_batch_and_length(exported) -> None:  # type: ignore[no-untyped-def]
    """The 4-D model's dims are symbolic: a batch of 3 sequences of 5 gives torch's loss and
    every parameter's gradient."""
    folder, trainable = exported("float64", "4d")
    rng = np.random.default_rng(3)
    input_ids, labels = rng.integers(0, VOCAB, (3, 5)), rng.integers(0, VOCAB, 15)
    training = onnx.load(str(folder / "training_model.onnx"))
    ours = onnxtrain.InferenceSession(training.SerializeToString()).run(
        None, training_feeds(folder, trainable, input_ids, labels))
    net = TinyLlama().double()
    loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(input_ids)), torch.from_numpy(labels))
    loss.backward()
    np.testing.assert_allclose(ours[0], loss.item(), rtol=1e-12)
    params = dict(net.named_parameters())
    for out, grad in zip(training.graph.output[1:], ours[1:]):
        name = out.name.removesuffix("_grad.accumulation.out")
        expected = params[name].grad.numpy()
        if name.endswith(".weight") and name != "embed.weight":
            expected = expected.T  # stored [in, out] for MatMul
        np.testing.assert_allclose(grad, expected, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("layout", ["3d", "4d"])
def test_artifacts_run_in_onnxruntime(exported, layout: str) -> None:  # type: ignore[no-untyped-def]
    """float32 only: the spec's RotaryEmbedding takes no float64 (onnx.checker refuses the
    float64 models and onnxruntime rejects them as invalid graphs)."""
    ort = pytest.importorskip("onnxruntime")
    folder, trainable = exported("float32", layout)
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        onnx.checker.check_model(str(folder / name), full_check=True)  # strict shape inference included
    training = onnx.load(str(folder / "training_model.onnx"))
    feeds = training_feeds(folder, trainable, *batches(1)[0])
    session = ort.InferenceSession(training.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)
    ours = onnxtrain.InferenceSession(training.SerializeToString()).run(None, feeds)
    assert len(ours) == len(theirs) == 1 + len(trainable)  # the loss and every gradient
    for a, b, out in zip(ours, theirs, training.graph.output):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=out.name)
    evaluation = onnx.load(str(folder / "eval_model.onnx"))
    eval_feeds = {k: v for k, v in feeds.items() if k in {i.name for i in evaluation.graph.input}}
    loss = ort.InferenceSession(evaluation.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, eval_feeds)[0]
    np.testing.assert_allclose(loss, ours[0], rtol=1e-5)
