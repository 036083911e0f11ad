"""Training a tiny Llama-style decoder end to end against PyTorch, through the opset-23 ops:
every RMSNorm is one ``RMSNormalization`` node, every rotary embedding one
``RotaryEmbedding`` node and every causal grouped-query attention one ``Attention`` node.

The decoder (vocabulary 64, width 32, 4 query heads over 2 key/value heads of size 8, 2
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
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")

import onnxtrain  # noqa: E402
from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.api import CheckpointState, Module  # noqa: E402
from onnxtrain.training.onnxblock import optim  # noqa: E402
from zoo.training import train_artifacts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 100
LR = 1e-2
BATCH, SEQ = 2, 8
VOCAB, WIDTH, LAYERS, HIDDEN = 64, 32, 2, 64
Q_HEADS, KV_HEADS = 4, 2
HEAD = WIDTH // Q_HEADS
EPS = 1e-6
THETA = 10000.0


MAX_POSITIONS = 16  # rows of the rotary caches


def rotary_caches() -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position * theta^(-2i / HEAD): [MAX_POSITIONS, HEAD / 2], in float64."""
    inv_freq = THETA ** (-np.arange(0, HEAD, 2, dtype=np.float64) / HEAD)
    angles = np.arange(MAX_POSITIONS, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles), np.sin(angles)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm = torch.nn.Parameter(1 + 0.1 * torch.randn(WIDTH))
        self.q = torch.nn.Linear(WIDTH, Q_HEADS * HEAD, bias=False)
        self.k = torch.nn.Linear(WIDTH, KV_HEADS * HEAD, bias=False)
        self.v = torch.nn.Linear(WIDTH, KV_HEADS * HEAD, bias=False)
        self.o = torch.nn.Linear(Q_HEADS * HEAD, WIDTH, bias=False)
        self.mlp_norm = torch.nn.Parameter(1 + 0.1 * torch.randn(WIDTH))
        self.gate = torch.nn.Linear(WIDTH, HIDDEN, bias=False)
        self.up = torch.nn.Linear(WIDTH, HIDDEN, bias=False)
        self.down = torch.nn.Linear(HIDDEN, WIDTH, bias=False)


class TinyLlama(torch.nn.Module):
    """Pre-norm decoder: embedding -> LAYERS x (RMSNorm -> causal GQA attention with rotary
    q/k -> residual; RMSNorm -> SwiGLU -> residual) -> RMSNorm -> head, logits [B * S, VOCAB]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = torch.nn.Parameter(1 + 0.1 * torch.randn(WIDTH))
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        cos, sin = rotary_caches()
        self.register_buffer("cos", torch.from_numpy(cos), persistent=False)
        self.register_buffer("sin", torch.from_numpy(sin), persistent=False)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, S, H, D], halves rotated (not interleaved)
        seq = x.shape[1]
        cos, sin = self.cos.to(x.dtype)[:seq, None, :], self.sin.to(x.dtype)[:seq, None, :]
        x1, x2 = x[..., : HEAD // 2], x[..., HEAD // 2 :]
        return torch.cat([cos * x1 - sin * x2, sin * x1 + cos * x2], dim=-1)

    def attention(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.rotate(block.q(x).view(batch, seq, Q_HEADS, HEAD)).transpose(1, 2)
        k = self.rotate(block.k(x).view(batch, seq, KV_HEADS, HEAD)).transpose(1, 2)
        v = block.v(x).view(batch, seq, KV_HEADS, HEAD).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return block.o(y.transpose(1, 2).reshape(batch, seq, Q_HEADS * HEAD))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        rms = torch.nn.functional.rms_norm
        h = self.embed(input_ids)
        for block in self.layers:
            h = h + self.attention(block, rms(h, (WIDTH,), block.attn_norm, EPS))
            x = rms(h, (WIDTH,), block.mlp_norm, EPS)
            h = h + block.down(torch.nn.functional.silu(block.gate(x)) * block.up(x))
        return self.head(rms(h, (WIDTH,), self.norm, EPS)).reshape(-1, VOCAB)


class GraphWriter:
    """Nodes and initializers of a graph being written."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.trainable: list[str] = []

    def weight(self, name: str, value: torch.Tensor) -> str:
        self.constant(value.detach().numpy().astype(self.dtype), name)
        self.trainable.append(name)
        return name

    def constant(self, value: np.ndarray, name: str) -> str:
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attributes) -> str:  # type: ignore[no-untyped-def]
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def linear(self, x: str, layer: torch.nn.Linear, name: str) -> str:
        return self.node("MatMul", [x, self.weight(f"{name}.weight", layer.weight.T)], f"{name}.out")

    def rms(self, x: str, scale: str, name: str) -> str:
        stash = TensorProto.DOUBLE if self.dtype == np.float64 else TensorProto.FLOAT
        return self.node("RMSNormalization", [x, scale], name, axis=-1, epsilon=EPS, stash_type=stash)


def to_onnx(net: TinyLlama, dtype: np.dtype, layout: str) -> tuple[onnx.ModelProto, list[str]]:
    """The ONNX graph of TinyLlama (opset 23) with the module's weights as initializers, each
    Linear's weight stored transposed ([in, out]) under the parameter's name for MatMul.

    layout "3d": fixed [BATCH, SEQ] input, RotaryEmbedding and Attention on [B, S, H * D] with
    num_heads / q_num_heads, kv_num_heads, constant position ids. layout "4d": input
    [batch, seq] of symbolic sizes, heads split into [B, H, S, D] by Reshape + Transpose as
    torch's exporters write it, position ids computed from the input's shape.
    Returns the model and the trainable initializers' names."""
    g = GraphWriter(dtype)
    cos, sin = rotary_caches()
    rope = [g.constant(cos.astype(dtype), "rope.cos"), g.constant(sin.astype(dtype), "rope.sin")]
    if layout == "3d":
        rope.append(g.constant(np.tile(np.arange(SEQ, dtype=np.int64), (BATCH, 1)), "rope.positions"))
    else:
        shape = g.node("Shape", ["input_ids"], "input_shape")
        seq = g.node("Gather", [shape, g.constant(np.array(1, dtype=np.int64), "one")], "seq", axis=0)
        positions = g.node("Range", [g.constant(np.array(0, dtype=np.int64), "zero"), seq, "one"], "positions")
        row = g.node("Unsqueeze", [positions, g.constant(np.array([0], dtype=np.int64), "axis0")], "positions_row")
        rope.append(g.node("Expand", [row, shape], "rope.positions"))
        g.constant(np.array([0, 0, -1, HEAD], dtype=np.int64), "split_heads")
        g.constant(np.array([0, 0, -1], dtype=np.int64), "merge_heads")

    def heads(x: str) -> str:  # [B, S, H * D] -> [B, H, S, D]
        split = g.node("Reshape", [x, "split_heads"], f"{x}.split")
        return g.node("Transpose", [split], f"{x}.heads", perm=[0, 2, 1, 3])

    h = g.node("Gather", [g.weight("embed.weight", net.embed.weight), "input_ids"], "embedded")
    for i, block in enumerate(net.layers):
        p = f"layers.{i}"
        x = g.rms(h, g.weight(f"{p}.attn_norm", block.attn_norm), f"{p}.attn_rms")
        q, k, v = (g.linear(x, getattr(block, n), f"{p}.{n}") for n in "qkv")
        if layout == "3d":
            q = g.node("RotaryEmbedding", [q, *rope], f"{p}.q_rot", num_heads=Q_HEADS)
            k = g.node("RotaryEmbedding", [k, *rope], f"{p}.k_rot", num_heads=KV_HEADS)
            y = g.node("Attention", [q, k, v], f"{p}.attn", is_causal=1, q_num_heads=Q_HEADS, kv_num_heads=KV_HEADS)
        else:
            q = g.node("RotaryEmbedding", [heads(q), *rope], f"{p}.q_rot")
            k = g.node("RotaryEmbedding", [heads(k), *rope], f"{p}.k_rot")
            y = g.node("Attention", [q, k, heads(v)], f"{p}.attn4", is_causal=1)
            y = g.node("Transpose", [y], f"{p}.attn_swapped", perm=[0, 2, 1, 3])
            y = g.node("Reshape", [y, "merge_heads"], f"{p}.attn")
        h = g.node("Add", [h, g.linear(y, block.o, f"{p}.o")], f"{p}.h_attn")
        x = g.rms(h, g.weight(f"{p}.mlp_norm", block.mlp_norm), f"{p}.mlp_rms")
        gate = g.linear(x, block.gate, f"{p}.gate")
        silu = g.node("Mul", [gate, g.node("Sigmoid", [gate], f"{p}.gate_sigmoid")], f"{p}.silu")
        swiglu = g.node("Mul", [silu, g.linear(x, block.up, f"{p}.up")], f"{p}.swiglu")
        h = g.node("Add", [h, g.linear(swiglu, block.down, f"{p}.down")], f"{p}.h_mlp")
    logits = g.linear(g.rms(h, g.weight("norm", net.norm), "final_rms"), net.head, "head")
    g.node("Reshape", [logits, g.constant(np.array([-1, VOCAB], dtype=np.int64), "logits_shape")], "logits")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    dims = [BATCH, SEQ] if layout == "3d" else ["batch", "seq"]
    graph = helper.make_graph(g.nodes, f"tiny_llama_{layout}",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, dims)],
                              [helper.make_tensor_value_info("logits", elem, [None, VOCAB])], g.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=11), g.trainable


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
