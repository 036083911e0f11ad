"""A Llama-style decoder as a torch module and as an opset-23 ONNX graph written from its
weights: every RMSNorm one ``RMSNormalization`` node, every rotary embedding one
``RotaryEmbedding`` node and every causal grouped-query attention one ``Attention`` node.

torch has no rotary op to export as RotaryEmbedding (and torch 2.9's dynamo exporter fails at
opset_version=23 in its version converter), so ``to_onnx`` writes the graph with onnx.helper,
in two layouts: 3-D ([B, S, H * D], fixed shapes) and 4-D ([B, H, S, D], symbolic batch and
length). tests/python/training/test_llama.py trains the tiny default against PyTorch;
bench/training_step.py times a larger one (``zoo.training.make_case("llama")``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 64
    width: int = 32
    layers: int = 2
    hidden: int = 64  # the SwiGLU MLP's width
    q_heads: int = 4
    kv_heads: int = 2
    eps: float = 1e-6
    theta: float = 10000.0
    max_positions: int = 16  # rows of the rotary caches

    @property
    def head(self) -> int:
        return self.width // self.q_heads


def rotary_caches(c: LlamaConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position * theta^(-2i / head): [max_positions, head / 2], in float64."""
    inv_freq = c.theta ** (-np.arange(0, c.head, 2, dtype=np.float64) / c.head)
    angles = np.arange(c.max_positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles), np.sin(angles)


class Block(torch.nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = torch.nn.Parameter(1 + 0.1 * torch.randn(c.width))
        self.q = torch.nn.Linear(c.width, c.q_heads * c.head, bias=False)
        self.k = torch.nn.Linear(c.width, c.kv_heads * c.head, bias=False)
        self.v = torch.nn.Linear(c.width, c.kv_heads * c.head, bias=False)
        self.o = torch.nn.Linear(c.q_heads * c.head, c.width, bias=False)
        self.mlp_norm = torch.nn.Parameter(1 + 0.1 * torch.randn(c.width))
        self.gate = torch.nn.Linear(c.width, c.hidden, bias=False)
        self.up = torch.nn.Linear(c.width, c.hidden, bias=False)
        self.down = torch.nn.Linear(c.hidden, c.width, bias=False)


class TinyLlama(torch.nn.Module):
    """Pre-norm decoder: embedding -> layers x (RMSNorm -> causal GQA attention with rotary
    q/k -> residual; RMSNorm -> SwiGLU -> residual) -> RMSNorm -> head, logits [B * S, vocab]."""

    def __init__(self, config: LlamaConfig = LlamaConfig()) -> None:
        super().__init__()
        self.config = c = config
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(c.vocab, c.width)
        self.layers = torch.nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = torch.nn.Parameter(1 + 0.1 * torch.randn(c.width))
        self.head = torch.nn.Linear(c.width, c.vocab, bias=False)
        cos, sin = rotary_caches(c)
        self.register_buffer("cos", torch.from_numpy(cos), persistent=False)
        self.register_buffer("sin", torch.from_numpy(sin), persistent=False)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, S, H, D], halves rotated (not interleaved)
        seq, half = x.shape[1], self.config.head // 2
        cos, sin = self.cos.to(x.dtype)[:seq, None, :], self.sin.to(x.dtype)[:seq, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([cos * x1 - sin * x2, sin * x1 + cos * x2], dim=-1)

    def attention(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        batch, seq, _ = x.shape
        q = self.rotate(block.q(x).view(batch, seq, c.q_heads, c.head)).transpose(1, 2)
        k = self.rotate(block.k(x).view(batch, seq, c.kv_heads, c.head)).transpose(1, 2)
        v = block.v(x).view(batch, seq, c.kv_heads, c.head).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return block.o(y.transpose(1, 2).reshape(batch, seq, c.q_heads * c.head))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        c = self.config
        rms = torch.nn.functional.rms_norm
        h = self.embed(input_ids)
        for block in self.layers:
            h = h + self.attention(block, rms(h, (c.width,), block.attn_norm, c.eps))
            x = rms(h, (c.width,), block.mlp_norm, c.eps)
            h = h + block.down(torch.nn.functional.silu(block.gate(x)) * block.up(x))
        return self.head(rms(h, (c.width,), self.norm, c.eps)).reshape(-1, c.vocab)


class GraphWriter:
    """Nodes and initializers of a graph being written."""

    def __init__(self, dtype: np.dtype, eps: float) -> None:
        self.dtype = dtype
        self.eps = eps
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
        return self.node("RMSNormalization", [x, scale], name, axis=-1, epsilon=self.eps, stash_type=stash)


def to_onnx(net: TinyLlama, dtype: np.dtype, layout: str, batch: int = 2,
            seq: int = 8) -> tuple[onnx.ModelProto, list[str]]:
    """The ONNX graph of `net` (opset 23) with the module's weights as initializers, each
    Linear's weight stored transposed ([in, out]) under the parameter's name for MatMul.

    layout "3d": fixed [batch, seq] input, RotaryEmbedding and Attention on [B, S, H * D] with
    num_heads / q_num_heads, kv_num_heads, constant position ids. layout "4d": input
    [batch, seq] of symbolic sizes, heads split into [B, H, S, D] by Reshape + Transpose as
    torch's exporters write it, position ids computed from the input's shape.
    Returns the model and the trainable initializers' names."""
    c = net.config
    g = GraphWriter(dtype, c.eps)
    cos, sin = rotary_caches(c)
    rope = [g.constant(cos.astype(dtype), "rope.cos"), g.constant(sin.astype(dtype), "rope.sin")]
    if layout == "3d":
        rope.append(g.constant(np.tile(np.arange(seq, dtype=np.int64), (batch, 1)), "rope.positions"))
    else:
        shape = g.node("Shape", ["input_ids"], "input_shape")
        length = g.node("Gather", [shape, g.constant(np.array(1, dtype=np.int64), "one")], "seq", axis=0)
        positions = g.node("Range", [g.constant(np.array(0, dtype=np.int64), "zero"), length, "one"], "positions")
        row = g.node("Unsqueeze", [positions, g.constant(np.array([0], dtype=np.int64), "axis0")], "positions_row")
        rope.append(g.node("Expand", [row, shape], "rope.positions"))
        g.constant(np.array([0, 0, -1, c.head], dtype=np.int64), "split_heads")
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
            q = g.node("RotaryEmbedding", [q, *rope], f"{p}.q_rot", num_heads=c.q_heads)
            k = g.node("RotaryEmbedding", [k, *rope], f"{p}.k_rot", num_heads=c.kv_heads)
            y = g.node("Attention", [q, k, v], f"{p}.attn", is_causal=1, q_num_heads=c.q_heads,
                       kv_num_heads=c.kv_heads)
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
    g.node("Reshape", [logits, g.constant(np.array([-1, c.vocab], dtype=np.int64), "logits_shape")], "logits")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    dims = [batch, seq] if layout == "3d" else ["batch", "seq"]
    graph = helper.make_graph(g.nodes, f"tiny_llama_{layout}",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, dims)],
                              [helper.make_tensor_value_info("logits", elem, [None, c.vocab])], g.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=11), g.trainable
