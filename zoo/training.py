"""Small models trained in the training tests and benches, with their torch twins and fixed
data; and `with_loss`, which puts a cross-entropy loss on a zoo model's logits.

Each ``TrainingCase`` holds a torch module (fixed seed), its training-mode ONNX export
(TorchScript, opset 17, dynamic batch) whose output feeds the loss, and a data stream: the
same batches in the same order for onnxtrain and for torch. Dropout is 0 so both compute
the same function; BatchNorm uses batch statistics in both.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper

from zoo import build_model


@dataclasses.dataclass
class TrainingCase:
    name: str
    module: Any  # torch.nn.Module producing the loss input (logits)
    onnx_path: Path
    input_name: str
    batches: Callable[[int], list[tuple[np.ndarray, np.ndarray]]]  # steps -> [(inputs, labels)]


def _flat_logits(module: Any, vocab: int) -> Any:
    """A language model whose logits come flat, [batch*seq, vocab], as cross-entropy takes them."""
    from torch import nn

    class FlatLogits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, input_ids):  # type: ignore[no-untyped-def]
            return self.inner(input_ids).reshape(-1, vocab)

    return FlatLogits()


def _export(module: Any, example: np.ndarray, input_name: str, path: Path) -> None:
    import torch

    module.train()
    torch.onnx.export(
        module, (torch.from_numpy(example),), str(path), dynamo=False, opset_version=17,
        input_names=[input_name], output_names=["logits"],
        dynamic_axes={input_name: {0: "batch"}, "logits": {0: "rows"}},
        training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
    )


def _classification_batches(shape: tuple[int, ...], classes: int, seed: int) -> Callable[[int], list]:
    """Random inputs labelled by a fixed random linear teacher: learnable, so training
    converges instead of amplifying rounding differences as fitting noise would."""
    def batches(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(seed)
        teacher = rng.standard_normal((int(np.prod(shape[1:])), classes)).astype(np.float32)
        out = []
        for _ in range(steps):
            x = rng.standard_normal(shape).astype(np.float32)
            out.append((x, np.argmax(x.reshape(shape[0], -1) @ teacher, axis=1).astype(np.int64)))
        return out
    return batches


def _token_batches(batch: int, seq: int, vocab: int, seed: int) -> Callable[[int], list]:
    """Sequences of a fixed random successor table (token t is followed by next[t]) from
    random starts: a language the model can learn."""
    def batches(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(seed)
        successor = rng.permutation(vocab)
        out = []
        for _ in range(steps):
            tokens = np.empty((batch, seq + 1), dtype=np.int64)
            tokens[:, 0] = rng.integers(0, vocab, batch)
            for t in range(seq):
                tokens[:, t + 1] = successor[tokens[:, t]]
            out.append((tokens[:, :-1].copy(), tokens[:, 1:].reshape(-1).copy()))
        return out
    return batches


# What bench/training_step.py times beyond the parity models (issue 13's trio): a Llama-style
# decoder of opset-23 nodes, an LSTM next-token model, a GRU classifier and a QAT CNN, at
# sizes where kernels, not call overhead, decide.
LLAMA = dict(vocab=512, width=128, layers=2, hidden=352, q_heads=4, kv_heads=2, max_positions=64)
LLAMA_BATCH, LLAMA_SEQ = 8, 64
LSTM_VOCAB = 512


def training_module(name: str) -> Any:
    """The torch module of case `name` (fixed seeds): its output is the loss's input."""
    import torch

    if name in ("mlp", "cnn"):
        return build_model(name, "train").module
    if name == "gpt":
        return _flat_logits(build_model("gpt2", "train").module, 128)
    if name == "llama":
        from zoo.llama import LlamaConfig, TinyLlama

        return TinyLlama(LlamaConfig(**LLAMA))
    from zoo.nets import GruClassifier, LstmLanguageModel, QATNet

    torch.manual_seed(5)
    if name == "lstm":
        return LstmLanguageModel(LSTM_VOCAB, embedding=64, hidden=256)
    if name == "gru":
        return GruClassifier(features=40, hidden=128, classes=12)
    if name == "qat":
        return QATNet(channels=16, size=28, classes=10)
    raise ValueError(name)


def make_case(name: str, folder: Path, dtype: str = "float32") -> TrainingCase:
    """``mlp``, ``cnn`` or ``gpt`` (GPT-2, 2 layers, 64 wide, vocabulary 128), in float32 or
    float64 (weights and float inputs); and, in float32, the bench's ``llama``, ``lstm``,
    ``gru`` and ``qat`` (training_module)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{dtype}.onnx"
    module = training_module(name)
    batches, input_name = {
        "mlp": (_classification_batches((16, 32), 10, seed=11), "x"),
        "cnn": (_classification_batches((8, 3, 32, 32), 10, seed=12), "x"),
        "gpt": (_token_batches(4, 16, 128, seed=13), "input_ids"),
        "llama": (_token_batches(LLAMA_BATCH, LLAMA_SEQ, LLAMA["vocab"], seed=14), "input_ids"),
        "lstm": (_token_batches(16, 32, LSTM_VOCAB, seed=15), "input_ids"),
        "gru": (_classification_batches((16, 50, 40), 12, seed=16), "x"),
        "qat": (_classification_batches((32, 1, 28, 28), 10, seed=17), "x"),
    }[name]
    if dtype == "float64":
        module = module.double()
        batches = _as_float64(batches)
    module.train()
    if name == "llama":  # no torch exporter writes its opset-23 nodes (zoo/llama.py)
        from zoo.llama import to_onnx

        onnx.save(to_onnx(module, np.dtype(dtype), "4d")[0], str(path))
    else:
        _export(module, batches(1)[0][0], input_name, path)
    return TrainingCase(name, module, path, input_name, batches)


def _as_float64(batches: Callable[[int], list]) -> Callable[[int], list]:
    def converted(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(x.astype(np.float64) if x.dtype == np.float32 else x, y) for x, y in batches(steps)]
    return converted


def trainable_names(case: TrainingCase) -> list[str]:
    """The initializers that are the torch module's parameters (not buffers)."""
    import onnx

    params = {n for n, _ in case.module.named_parameters()}
    model = onnx.load(str(case.onnx_path), load_external_data=False)
    return [i.name for i in model.graph.initializer if i.name in params]


def torch_losses(case: TrainingCase, optimizer: Callable[[Any], Any], steps: int) -> list[float]:
    import torch

    torch.manual_seed(0)
    opt = optimizer(case.module.parameters())
    losses = []
    for inputs, labels in case.batches(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(case.module(torch.from_numpy(inputs)), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_artifacts(folder: Path, batches: list[tuple[np.ndarray, np.ndarray]], lr: float) -> tuple[list[float], Any]:
    """Trains the artifacts in `folder` (generate_artifacts' files) on `batches`, one step each,
    on one thread, as torch_losses trains the torch twin: every step's loss, and the Module."""
    from onnxtrain import SessionOptions
    from onnxtrain.training.api import CheckpointState, Module, Optimizer

    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    options = SessionOptions()
    options.intra_op_num_threads = 1
    module = Module(folder / "training_model.onnx", state, folder / "eval_model.onnx", session_options=options)
    optimizer = Optimizer(folder / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(lr)
    losses = []
    for inputs, labels in batches:
        losses.append(float(module(inputs, labels)))
        optimizer.step()
        module.lazy_reset_grad()
    return losses, module


def with_loss(model: onnx.ModelProto) -> onnx.ModelProto:
    """Adds `labels` (int64, the logits' shape without the class axis) and a scalar
    `loss` = mean cross-entropy of the logits (classes on the last axis)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    logits = graph.output[0].name
    rank = len(graph.output[0].type.tensor_type.shape.dim)
    label_dims = [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim][:-1]
    graph.input.append(helper.make_tensor_value_info("labels", onnx.TensorProto.INT64, label_dims))
    scores = logits
    if rank == 3:  # [batch, seq, classes] -> [batch, classes, seq]
        graph.node.append(helper.make_node("Transpose", [logits], ["scores"], perm=[0, 2, 1], name="loss/Transpose"))
        scores = "scores"
    graph.node.append(helper.make_node("SoftmaxCrossEntropyLoss", [scores, "labels"], ["loss"], name="loss/SCE"))
    graph.output.append(helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []))
    return model
