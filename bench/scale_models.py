"""The models of bench/training_scale.py and bench/inference_scale.py, at realistic sizes, and
their matmul/convolution FLOPs counted from the shapes.

- ``mlp``: 1024-4096-4096-1000, ReLU;
- ``resnet18``, ``resnet50``: torchvision's, random init;
- ``gpt``: a decoder, d_model 512, 8 heads, 4 layers, vocabulary 8192: token embedding +
  learned positions, pre-LN blocks of causal self-attention and a 4x GELU MLP, final LN, LM
  head; its logits are flat, [batch * seq, vocab], in training (cross-entropy over every position);
- ``bert``: an encoder, d 768, 12 heads, 6 layers, vocabulary 8192: embeddings + LN, post-LN
  blocks of self-attention and a 4x GELU MLP, then the first token's state through a tanh
  pooler into 10 classes (BertForSequenceClassification's head: one label per sequence).

Every model is built with torch seed 0 in float32, dropout-free, and exported with the
TorchScript exporter (``dynamo=False``, opset 17) at fixed shapes. torch is imported on first
use only: the runtimes' measurement processes import this module without it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np

VOCAB = 8192
BERT_CLASSES = 10
GPT = {"d_model": 512, "heads": 8, "layers": 4}
BERT = {"d_model": 768, "heads": 12, "layers": 6}
MLP_WIDTHS = (1024, 4096, 4096, 1000)


@dataclasses.dataclass(frozen=True)
class Spec:
    """One model at one shape: `seq_len` for gpt and bert, `image` (side) for the ResNets."""

    model: str
    batch: int
    classes: int
    seq_len: int = 0
    image: int = 0

    def label(self) -> str:
        size = f" T{self.seq_len}" if self.seq_len else f" {self.image}x{self.image}" if self.image else ""
        return f"{self.model} b{self.batch}{size}"

    def input_name(self) -> str:
        return "input_ids" if self.seq_len else "x"


TRAINING = {"mlp": Spec("mlp", 256, 1000), "resnet18": Spec("resnet18", 16, 100, image=112),
            "gpt": Spec("gpt", 8, VOCAB, seq_len=256), "bert": Spec("bert", 8, BERT_CLASSES, seq_len=128)}
INFERENCE = {"mlp": [Spec("mlp", 16, 1000), Spec("mlp", 1, 1000)],
             "resnet18": [Spec("resnet18", 1, 1000, image=224)],
             "resnet50": [Spec("resnet50", 1, 1000, image=224), Spec("resnet50", 8, 1000, image=224)],
             "gpt": [Spec("gpt", 1, VOCAB, seq_len=256), Spec("gpt", 8, VOCAB, seq_len=256)],
             "bert": [Spec("bert", 1, BERT_CLASSES, seq_len=128), Spec("bert", 8, BERT_CLASSES, seq_len=128)]}


def resized(spec: Spec, batch: int | None, seq_len: int | None) -> Spec:
    """`spec` with the batch and (for the sequence models) the sequence length overridden."""
    return dataclasses.replace(spec, batch=batch or spec.batch,
                               seq_len=(seq_len or spec.seq_len) if spec.seq_len else 0)


# ---- FLOPs: 2 per multiply-add of the matmuls and convolutions ----


def _linear(rows: int, inputs: int, outputs: int) -> float:
    return 2.0 * rows * inputs * outputs


def _conv(batch: int, c_in: int, c_out: int, side_out: int, kernel: int) -> float:
    return 2.0 * batch * c_out * side_out * side_out * c_in * kernel * kernel


def _side(side: int, kernel: int, stride: int, pad: int) -> int:
    return (side + 2 * pad - kernel) // stride + 1


def _resnet_flops(spec: Spec) -> float:
    """torchvision's ResNet: basic blocks (18) or bottlenecks with the stride on the 3x3 (50)."""
    bottleneck = spec.model == "resnet50"
    n, side = spec.batch, _side(spec.image, 7, 2, 3)
    flops = _conv(n, 3, 64, side, 7)
    side, c_in = _side(side, 3, 2, 1), 64  # max pool
    for stage, blocks in enumerate((3, 4, 6, 3) if bottleneck else (2, 2, 2, 2)):
        width = 64 << stage
        c_out = width * 4 if bottleneck else width
        for block in range(blocks):
            stride = 2 if stage and not block else 1
            out = _side(side, 3, stride, 1)
            if bottleneck:
                flops += _conv(n, c_in, width, side, 1) + _conv(n, width, width, out, 3)
                flops += _conv(n, width, c_out, out, 1)
            else:
                flops += _conv(n, c_in, width, out, 3) + _conv(n, width, width, out, 3)
            if stride != 1 or c_in != c_out:
                flops += _conv(n, c_in, c_out, out, 1)  # the downsample
            side, c_in = out, c_out
    return flops + _linear(n, c_in, spec.classes)


def _transformer_flops(spec: Spec, d_model: int, layers: int) -> float:
    """The blocks: Q, K, V, output projections, the 4x MLP and both attention products over
    the whole T x T square (the causal mask does not skip any of it)."""
    rows = spec.batch * spec.seq_len
    attention = 2 * 2.0 * spec.batch * spec.seq_len * spec.seq_len * d_model
    return layers * (4 * _linear(rows, d_model, d_model) + 2 * _linear(rows, d_model, 4 * d_model) + attention)


def forward_flops(spec: Spec) -> float:
    if spec.model == "mlp":
        return sum(_linear(spec.batch, a, b) for a, b in zip(MLP_WIDTHS, MLP_WIDTHS[1:]))
    if spec.model.startswith("resnet"):
        return _resnet_flops(spec)
    if spec.model == "gpt":
        d = GPT["d_model"]
        return _transformer_flops(spec, d, GPT["layers"]) + _linear(spec.batch * spec.seq_len, d, VOCAB)
    d = BERT["d_model"]
    pooler_and_classifier = _linear(spec.batch, d, d) + _linear(spec.batch, d, spec.classes)
    return _transformer_flops(spec, d, BERT["layers"]) + pooler_and_classifier


def step_flops(spec: Spec) -> float:
    """A training step: forward, and a backward of about twice the forward."""
    return 3 * forward_flops(spec)


# ---- the torch models ----


@functools.cache
def _transformers() -> types.SimpleNamespace:
    """The transformer modules, defined on first use (torch is imported here). Every
    reshape uses the model's own sizes, so the exported graph holds no shape arithmetic."""
    import torch
    from torch import nn

    class SelfAttention(nn.Module):
        def __init__(self, d_model: int, heads: int, seq_len: int, causal: bool) -> None:
            super().__init__()
            self.d_model, self.heads, self.seq_len = d_model, heads, seq_len
            self.scale = (d_model // heads) ** -0.5
            self.query, self.key, self.value, self.output = (nn.Linear(d_model, d_model) for _ in range(4))
            self.register_buffer("mask", torch.triu(torch.full((seq_len, seq_len), -1e9), 1) if causal else None)

        def split(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, d] -> [B, heads, T, d / heads]
            return x.reshape(-1, self.seq_len, self.heads, self.d_model // self.heads).transpose(1, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = q @ k.transpose(-2, -1) * self.scale
            if self.mask is not None:
                scores = scores + self.mask
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(-1, self.seq_len, self.d_model)
            return self.output(context)

    class Block(nn.Module):
        """A decoder's block (pre-LN, causal) or an encoder's layer (post-LN, no mask)."""

        def __init__(self, d_model: int, heads: int, seq_len: int, decoder: bool) -> None:
            super().__init__()
            self.decoder = decoder
            self.attention = SelfAttention(d_model, heads, seq_len, causal=decoder)
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.decoder:
                x = x + self.attention(self.norm1(x))
                return x + self.mlp(self.norm2(x))
            x = self.norm1(x + self.attention(x))
            return self.norm2(x + self.mlp(x))

    class Transformer(nn.Module):
        """Token embedding + learned positions, the blocks, one LayerNorm (after the blocks in
        the decoder, on the embeddings in the encoder) and the head."""

        def __init__(self, spec: Spec, config: dict[str, int], decoder: bool) -> None:
            super().__init__()
            d, self.decoder = config["d_model"], decoder
            self.tokens = nn.Embedding(VOCAB, d)
            self.positions = nn.Parameter(torch.randn(spec.seq_len, d) * 0.02)
            self.blocks = nn.Sequential(*(Block(d, config["heads"], spec.seq_len, decoder)
                                          for _ in range(config["layers"])))
            self.norm = nn.LayerNorm(d)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            x = self.tokens(input_ids) + self.positions
            if self.decoder:
                return self.head(self.norm(self.blocks(x)))
            return self.head(self.blocks(self.norm(x)))

    class Gpt(Transformer):
        def __init__(self, spec: Spec, flat: bool) -> None:
            super().__init__(spec, GPT, decoder=True)
            self.flat = flat
            self.lm_head = nn.Linear(GPT["d_model"], VOCAB, bias=False)

        def head(self, x: torch.Tensor) -> torch.Tensor:
            logits = self.lm_head(x)
            return logits.reshape(-1, VOCAB) if self.flat else logits

    class Bert(Transformer):
        def __init__(self, spec: Spec) -> None:
            super().__init__(spec, BERT, decoder=False)
            self.pooler = nn.Sequential(nn.Linear(BERT["d_model"], BERT["d_model"]), nn.Tanh())
            self.classifier = nn.Linear(BERT["d_model"], spec.classes)

        def head(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.pooler(x[:, 0]))

    return types.SimpleNamespace(Gpt=Gpt, Bert=Bert)


def build_module(spec: Spec, train: bool) -> Any:
    """The torch module of `spec` (seed 0), in training or eval mode."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if spec.model == "mlp":
        layers: list[nn.Module] = []
        for a, b in zip(MLP_WIDTHS, MLP_WIDTHS[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        module = nn.Sequential(*layers[:-1])
    elif spec.model.startswith("resnet"):
        import torchvision

        module = getattr(torchvision.models, spec.model)(weights=None, num_classes=spec.classes)
    elif spec.model == "gpt":
        module = _transformers().Gpt(spec, flat=train)
    else:
        module = _transformers().Bert(spec)
    return module.train(train)


def make_batches(spec: Spec, count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """`count` random (input, labels) batches: labels per sequence position for gpt
    (flat, as its training logits), one per sample otherwise."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        if spec.seq_len:
            x = rng.integers(0, VOCAB, (spec.batch, spec.seq_len), dtype=np.int64)
        elif spec.image:
            x = rng.standard_normal((spec.batch, 3, spec.image, spec.image), dtype=np.float32)
        else:
            x = rng.standard_normal((spec.batch, MLP_WIDTHS[0]), dtype=np.float32)
        rows = spec.batch * spec.seq_len if spec.model == "gpt" else spec.batch
        batches.append((x, rng.integers(0, spec.classes, rows, dtype=np.int64)))
    return batches


def export(module: Any, spec: Spec, example: np.ndarray, path: Path) -> None:
    """The TorchScript export (opset 17) at the example's shape, in the module's mode; a
    training-mode export keeps every node (no constant folding) for the autodiff."""
    import torch

    mode = torch.onnx.TrainingMode.TRAINING if module.training else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter's
        warnings.filterwarnings("ignore", message=".*num_batches_tracked")  # BatchNorm's counter, not exported
        torch.onnx.export(module, (torch.from_numpy(example),), str(path), dynamo=False, opset_version=17,
                          input_names=[spec.input_name()], output_names=["logits"], training=mode,
                          do_constant_folding=not module.training)


def trainable_names(module: Any, path: Path) -> list[str]:
    """The exported initializers that are the module's parameters (not its buffers)."""
    import onnx

    parameters = {name for name, _ in module.named_parameters()}
    return [i.name for i in onnx.load(str(path), load_external_data=False).graph.initializer if i.name in parameters]


def write_gemm(folder: Path, size: int) -> None:
    """folder/model.onnx: one float32 MatMul, size x size x size, its weight constant; folder/feeds.npz."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((size, size), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])], [weight])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(folder / "model.onnx"))
    np.savez(folder / "feeds.npz", x=rng.standard_normal((size, size), dtype=np.float32))
