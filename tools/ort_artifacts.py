"""Generates the onnxruntime-training 1.19.2 fixtures of tests/python/training/ort_artifacts/
and the table of the ops ORT's artifacts hold.

Run it in ORT-training's own virtualenv (scripts/setup_ort_training.sh makes it), never in
the project's .venv, where stock onnxruntime provides the same module name:

    ~/.cache/onnxtrain/ort-training-1.19.2/bin/python tools/ort_artifacts.py OUT_DIR
        [--cases NAME,...] [--table-only]

Fixtures (FIXTURES below; --cases picks some): for each case (a small model, a loss, an
optimizer) it writes into OUT_DIR/<case>/:
- what ORT's `generate_artifacts` writes: training_model.onnx, eval_model.onnx,
  optimizer_model.onnx, checkpoint (an ODTC flatbuffer; `nominal_checkpoint` for the MLP);
- for the MLP, checkpoint_external with checkpoint_external.data: the same parameters in a
  checkpoint ORT wrote with external data (see external_data_checkpoint);
- checkpoint_step5: the state ORT saved after 5 training steps, with optimizer state and
  properties (an int, a float, a string);
- reference.json: the inputs of each step, ORT's loss after each of STEPS steps, and the
  parameters after the last one.

The op table (always written; --table-only writes nothing else): ORT's generate_artifacts
run on the grid FAMILIES x LOSSES x OPTIMIZERS (an MLP with Dropout, a CNN with BatchNorm,
max and average pooling and Dropout, GPT-2 (LayerNorm, GELU, attention, embeddings, Dropout)
and a LLaMA block (RMSNorm, SiLU, rotary attention), each exported by torch as a user would;
MSE, CrossEntropy, BCEWithLogits, L1 and a custom onnxblock loss; AdamW and SGD). Each
case's op histogram goes into OUT_DIR/ops.json (per case, per file) and OUT_DIR/ops.md (the
same as tables, one per model family). tests/python/training/test_ort_kernels.py checks that
onnxtrain has a kernel for every op in it.

The models are small (KBs), the weights and inputs seeded, so the run is the same on any
machine.
"""

from __future__ import annotations

import argparse
import base64
import collections
import copy
import io
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STEPS = 20
RESUME_STEP = 5
LEARNING_RATE = 0.01
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def weights(rng: np.random.Generator, name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def make_model(nodes, inputs, outputs, initializers) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "model", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def mlp(rng: np.random.Generator, outputs: int = 4) -> onnx.ModelProto:
    """Gemm, Relu, Gemm: input [batch, 6], logits [batch, outputs]."""
    return make_model(
        [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], transB=1),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["output"], transB=1)],
        [helper.make_tensor_value_info("input", F, ["batch", 6])],
        [helper.make_tensor_value_info("output", F, ["batch", outputs])],
        [weights(rng, "fc1.weight", 8, 6), weights(rng, "fc1.bias", 8), weights(rng, "fc2.weight", outputs, 8),
         weights(rng, "fc2.bias", outputs)])


def cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv, BatchNormalization, Relu, MaxPool, Dropout (ratio 0: deterministic), Flatten, Gemm."""
    return make_model(
        [helper.make_node("Conv", ["input", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                          ["n"]),
         helper.make_node("Relu", ["n"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Dropout", ["p", "dropout.ratio", "dropout.training"], ["d"]),
         helper.make_node("Flatten", ["d"], ["f"]),
         helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["output"], transB=1)],
        [helper.make_tensor_value_info("input", F, ["batch", 2, 4, 4])],
        [helper.make_tensor_value_info("output", F, ["batch", 3])],
        [weights(rng, "conv.weight", 4, 2, 3, 3), weights(rng, "conv.bias", 4),
         numpy_helper.from_array(np.ones(4, np.float32), "bn.weight"),
         numpy_helper.from_array(np.zeros(4, np.float32), "bn.bias"),
         numpy_helper.from_array(np.zeros(4, np.float32), "bn.running_mean"),
         numpy_helper.from_array(np.ones(4, np.float32), "bn.running_var"),
         numpy_helper.from_array(np.array(0.0, np.float32), "dropout.ratio"),
         numpy_helper.from_array(np.array(False), "dropout.training"),
         weights(rng, "fc.weight", 3, 16), weights(rng, "fc.bias", 3)])


def gpt(rng: np.random.Generator) -> onnx.ModelProto:
    """One GPT-2 block on token ids [batch, 4]: embeddings, LayerNorm, causal attention with
    2 heads, a GELU MLP, a tied-free output head; logits [batch * 4, vocab]."""
    vocab, seq, d, heads = 11, 4, 8, 2
    hd = d // heads
    mask = np.triu(np.full((seq, seq), -1e4, np.float32), 1)
    nodes = [
        helper.make_node("Gather", ["wte", "input"], ["tok"]),
        helper.make_node("Add", ["tok", "wpe"], ["x0"]),
        helper.make_node("LayerNormalization", ["x0", "ln1.weight", "ln1.bias"], ["h1", "ln1.mean", "ln1.inv_std"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["h1", "attn.qkv.weight"], ["qkv0"]),
        helper.make_node("Add", ["qkv0", "attn.qkv.bias"], ["qkv"]),
        helper.make_node("Split", ["qkv", "split3"], ["q0", "k0", "v0"], axis=-1),
        helper.make_node("Reshape", ["q0", "heads_shape"], ["q1"]),
        helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["k0", "heads_shape"], ["k1"]),
        helper.make_node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["v0", "heads_shape"], ["v1"]),
        helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Add", ["s1", "causal_mask"], ["s"]),
        helper.make_node("Softmax", ["s"], ["a"], axis=-1),
        helper.make_node("MatMul", ["a", "v"], ["o0"]),
        helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o1", "model_shape"], ["o2"]),
        helper.make_node("MatMul", ["o2", "attn.proj.weight"], ["o3"]),
        helper.make_node("Add", ["o3", "attn.proj.bias"], ["o"]),
        helper.make_node("Add", ["x0", "o"], ["x1"]),
        helper.make_node("LayerNormalization", ["x1", "ln2.weight", "ln2.bias"], ["h2", "ln2.mean", "ln2.inv_std"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["h2", "mlp.fc.weight"], ["m0"]),
        helper.make_node("Add", ["m0", "mlp.fc.bias"], ["m1"]),
        # GELU as GPT-2 writes it, with erf (opset 17 has no Gelu op).
        helper.make_node("Div", ["m1", "sqrt2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
        helper.make_node("Add", ["g1", "one"], ["g2"]),
        helper.make_node("Mul", ["m1", "g2"], ["g3"]),
        helper.make_node("Mul", ["g3", "half"], ["g"]),
        helper.make_node("MatMul", ["g", "mlp.proj.weight"], ["m2"]),
        helper.make_node("Add", ["m2", "mlp.proj.bias"], ["m"]),
        helper.make_node("Add", ["x1", "m"], ["x2"]),
        helper.make_node("LayerNormalization", ["x2", "lnf.weight", "lnf.bias"], ["h3", "lnf.mean", "lnf.inv_std"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["h3", "head.weight"], ["l0"]),
        helper.make_node("Reshape", ["l0", "logits_shape"], ["output"]),
    ]
    c = numpy_helper.from_array
    initializers = [
        weights(rng, "wte", vocab, d), weights(rng, "wpe", seq, d, scale=0.1),
        c(np.ones(d, np.float32), "ln1.weight"), c(np.zeros(d, np.float32), "ln1.bias"),
        weights(rng, "attn.qkv.weight", d, 3 * d), weights(rng, "attn.qkv.bias", 3 * d, scale=0.05),
        weights(rng, "attn.proj.weight", d, d), weights(rng, "attn.proj.bias", d, scale=0.05),
        c(np.ones(d, np.float32), "ln2.weight"), c(np.zeros(d, np.float32), "ln2.bias"),
        weights(rng, "mlp.fc.weight", d, 4 * d), weights(rng, "mlp.fc.bias", 4 * d, scale=0.05),
        weights(rng, "mlp.proj.weight", 4 * d, d), weights(rng, "mlp.proj.bias", d, scale=0.05),
        c(np.ones(d, np.float32), "lnf.weight"), c(np.zeros(d, np.float32), "lnf.bias"),
        weights(rng, "head.weight", d, vocab),
        c(np.array([d, d, d], np.int64), "split3"), c(np.array([0, seq, heads, hd], np.int64), "heads_shape"),
        c(np.array([0, seq, d], np.int64), "model_shape"), c(np.array([-1, vocab], np.int64), "logits_shape"),
        c(np.array(1.0 / np.sqrt(hd), np.float32), "scale"), c(mask, "causal_mask"),
        c(np.array(np.sqrt(2.0), np.float32), "sqrt2"), c(np.array(1.0, np.float32), "one"),
        c(np.array(0.5, np.float32), "half"),
    ]
    return make_model(nodes, [helper.make_tensor_value_info("input", I64, ["batch", seq])],
                      [helper.make_tensor_value_info("output", F, ["rows", vocab])], initializers)


# ---- models exported by torch, as users make them -----------------------------------------


def export(module, example, training: bool = True) -> onnx.ModelProto:
    """torch.onnx.export as ORT's on-device training docs do it (opset 17, training mode, no
    constant folding), then what ORT 1.19.2's gradient builder needs of the graph: every
    LayerNormalization with its mean and inv_std outputs (torch writes one output).
    `training=False` exports in eval mode: BatchNormalization then has one output, and ORT
    makes the training form itself (from the training form, ORT 1.19.2 writes an eval model
    it cannot load: a BatchNormalization with three outputs and training_mode 0)."""
    import torch

    buffer = io.BytesIO()
    module.train(training)
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(module, example, buffer, input_names=["input"], output_names=["output"], opset_version=17,
                      training=mode, do_constant_folding=False, dynamo=False)
    model = onnx.load_from_string(buffer.getvalue())
    for node in model.graph.node:
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([node.output[0] + ".mean", node.output[0] + ".inv_std"])
    return model


def torch_roles(module, model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    """(trainable, frozen): the module's parameters, and its float buffers (BatchNorm's running
    statistics), among the model's initializers."""
    present = {t.name for t in model.graph.initializer}
    parameters = [n for n, _ in module.named_parameters() if n in present]
    buffers = [n for n, b in module.named_buffers() if n in present and b.is_floating_point()]
    return parameters, buffers


def _flat_logits(model, vocab):
    import torch

    class FlatLogits(torch.nn.Module):
        """A causal LM's logits as [batch * sequence, vocab], the shape ORT's CrossEntropyLoss takes."""

        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(ids).logits.reshape(-1, vocab)

    return FlatLogits()


VOCAB, SEQUENCE = 32, 8


def torch_mlp(dropout: float):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                               torch.nn.Linear(8, 4)), (torch.randn(5, 6),)


def torch_cnn(dropout: float):
    """Conv, BatchNorm, ReLU, MaxPool, Conv, ReLU, AveragePool, Dropout, Flatten, Linear."""
    import torch

    norm = torch.nn.BatchNorm2d(4)
    # A trained BatchNorm's values: with its fresh ones (weight = running_var = 1, bias =
    # running_mean = 0) torch's exporter merges equal initializers, and ORT 1.19.2 then
    # writes the running statistics, in place through that alias, into weight and bias.
    with torch.no_grad():
        for tensor in (norm.weight, norm.bias, norm.running_mean):
            tensor.copy_(torch.randn(4) * 0.2 + (1 if tensor is norm.weight else 0))
        norm.running_var.copy_(torch.rand(4) + 0.5)
    layers = [torch.nn.Conv2d(2, 4, 3, padding=1), norm, torch.nn.ReLU(), torch.nn.MaxPool2d(2),
              torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AvgPool2d(2)]
    if dropout:
        layers.append(torch.nn.Dropout(dropout))
    layers += [torch.nn.Flatten(), torch.nn.Linear(16, 3)]
    return torch.nn.Sequential(*layers), (torch.randn(5, 2, 8, 8),)


def torch_gpt2(dropout: float):
    """One GPT-2 block from transformers: embeddings, LayerNorm, attention, the tanh GELU MLP.
    Attention dropout is 0: ORT 1.19.2 cannot differentiate the mask-less Dropout torch writes
    there (its gradient builder needs the mask output)."""
    import torch
    import transformers

    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                     attn_pdrop=0.0, resid_pdrop=dropout, embd_pdrop=dropout)
    return _flat_logits(transformers.GPT2LMHeadModel(config), VOCAB), (torch.randint(0, VOCAB, (2, SEQUENCE)),)


def torch_llama(dropout: float):
    """One LLaMA block from transformers: RMSNorm, rotary attention, the SiLU-gated MLP. Its only
    Dropout is attention's, which stays 0 (as GPT-2's); `dropout` is unused."""
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
    return _flat_logits(transformers.LlamaForCausalLM(config), VOCAB), (torch.randint(0, VOCAB, (2, SEQUENCE)),)


def torch_model(family, dropout: float, seed: int, training: bool = True):
    """(onnx model, trainable, frozen) of a torch model family, with weights from `seed`."""
    import torch

    torch.manual_seed(seed)
    module, example = family(dropout)
    model = export(module, example, training)
    trainable, frozen = torch_roles(module, model)
    return model, trainable, frozen


# ---- a custom onnxblock loss ------------------------------------------------------------


def focal_loss(gamma: float = 2.0):
    """The focal loss, -mean((1 - p_t)^gamma log p_t) with p_t the softmax probability of the
    label, as a custom onnxblock Block would build it: LogSoftmax, then the label's
    log-probability by GatherElements. Its label input is "labels" (int64 [batch])."""
    from onnxruntime.training import onnxblock
    from onnxruntime.training.onnxblock import _graph_utils

    class FocalLoss(onnxblock.Block):
        def build(self, logits: str) -> str:
            graph = self.base.graph
            if not _graph_utils.node_arg_exists(self.base, "labels"):
                labels = copy.deepcopy(_graph_utils.get_output_from_output_name(self.base, logits))
                labels.name = "labels"
                labels.type.tensor_type.elem_type = TensorProto.INT64
                del labels.type.tensor_type.shape.dim[-1]
                graph.input.append(labels)
            n = {k: _graph_utils.generate_graph_name("focal." + k) for k in
                 ("log_p", "axes", "index", "log_pt", "pt", "one", "q", "gamma", "weight", "weighted", "mean", "loss")}
            graph.initializer.extend([numpy_helper.from_array(np.array([1], np.int64), n["axes"]),
                                      numpy_helper.from_array(np.array(1.0, np.float32), n["one"]),
                                      numpy_helper.from_array(np.array(gamma, np.float32), n["gamma"])])
            graph.node.extend([
                helper.make_node("LogSoftmax", [logits], [n["log_p"]], axis=-1),
                helper.make_node("Unsqueeze", ["labels", n["axes"]], [n["index"]]),
                helper.make_node("GatherElements", [n["log_p"], n["index"]], [n["log_pt"]], axis=1),
                helper.make_node("Exp", [n["log_pt"]], [n["pt"]]),
                helper.make_node("Sub", [n["one"], n["pt"]], [n["q"]]),
                helper.make_node("Pow", [n["q"], n["gamma"]], [n["weight"]]),
                helper.make_node("Mul", [n["weight"], n["log_pt"]], [n["weighted"]]),
                helper.make_node("ReduceMean", [n["weighted"]], [n["mean"]], keepdims=0),
                helper.make_node("Neg", [n["mean"]], [n["loss"]])])
            return n["loss"]

    return FocalLoss()


def trainable(model: onnx.ModelProto, frozen: set[str]) -> tuple[list[str], list[str]]:
    floats = [t.name for t in model.graph.initializer if t.data_type == F and t.dims]
    return [n for n in floats if n not in frozen], [n for n in floats if n in frozen]


def fixtures():
    """(name, model, trainable, frozen, loss, optimizer, inputs(rng) -> list of feeds)."""
    from onnxruntime.training import artifacts

    rng = np.random.default_rng(16)
    loss, optim = artifacts.LossType, artifacts.OptimType
    batch = 5

    def classes(n, features=6):
        return lambda r: [r.standard_normal((batch, features)).astype(np.float32),
                          r.integers(0, n, batch).astype(np.int64)]

    def regression(shape_in, shape_out, binary=False):
        def make(r):
            target = r.standard_normal(shape_out).astype(np.float32)
            if binary:
                target = (target > 0).astype(np.float32)
            return [r.standard_normal(shape_in).astype(np.float32), target]
        return make

    def tokens(r):
        ids = r.integers(0, 11, (2, 5))
        return [ids[:, :4].astype(np.int64), ids[:, 1:].reshape(-1).astype(np.int64)]

    def torch_tokens(r):
        ids = r.integers(0, VOCAB, (2, SEQUENCE + 1))
        return [ids[:, :-1].astype(np.int64), ids[:, 1:].reshape(-1).astype(np.int64)]

    def hand_made(name, model, frozen, *rest):
        return (name, model, *trainable(model, frozen), *rest)

    cases = [
        hand_made("mlp_crossentropy_adamw", mlp(rng), set(), loss.CrossEntropyLoss, optim.AdamW, classes(4)),
        hand_made("mlp_mse_sgd", mlp(rng), set(), loss.MSELoss, optim.SGD, regression((batch, 6), (batch, 4))),
        hand_made("mlp_bcewithlogits_adamw", mlp(rng), {"fc1.bias"}, loss.BCEWithLogitsLoss, optim.AdamW,
                  regression((batch, 6), (batch, 4), binary=True)),
        hand_made("mlp_l1_sgd", mlp(rng), set(), loss.L1Loss, optim.SGD, regression((batch, 6), (batch, 4))),
        hand_made("cnn_mse_sgd", cnn(rng), {"bn.running_mean", "bn.running_var"}, loss.MSELoss, optim.SGD,
                  regression((batch, 2, 4, 4), (batch, 3))),
        hand_made("gpt_crossentropy_adamw", gpt(rng), set(), loss.CrossEntropyLoss, optim.AdamW, tokens),
    ]
    # Exported by torch, no Dropout (ORT's and onnxtrain's random masks differ): the custom
    # loss (GatherElementsGrad), average pooling (AveragePoolGrad), a LLaMA block
    # (SimplifiedLayerNormalization(Grad), QuickGelu(Grad), ConcatTraining, SplitTraining).
    cases += [
        hand_made("mlp_focal_sgd", mlp(np.random.default_rng(116)), set(), focal_loss(), optim.SGD, classes(4)),
        ("cnn_pooling_l1_adamw", *torch_model(torch_cnn, 0.0, 216, training=False), loss.L1Loss, optim.AdamW,
         regression((batch, 2, 8, 8), (batch, 3))),
        ("llama_crossentropy_adamw", *torch_model(torch_llama, 0.0, 316), loss.CrossEntropyLoss, optim.AdamW,
         torch_tokens),
    ]
    return cases


# The grid exports in training mode, as ORT's docs do (Dropout then has its mask output). The
# CNN's eval model from that export does not load in ORT 1.19.2 (see export); its training
# model, which the table is about, does.
FAMILIES = {"mlp": torch_mlp, "cnn": torch_cnn, "gpt2": torch_gpt2, "llama": torch_llama}


def grid():
    """The op table's cases: (family, name, model, trainable, frozen, loss, optimizer)."""
    from onnxruntime.training import artifacts

    losses = {"mse": artifacts.LossType.MSELoss, "crossentropy": artifacts.LossType.CrossEntropyLoss,
              "bcewithlogits": artifacts.LossType.BCEWithLogitsLoss, "l1": artifacts.LossType.L1Loss,
              "focal": None}
    optimizers = {"adamw": artifacts.OptimType.AdamW, "sgd": artifacts.OptimType.SGD}
    for index, (family, make) in enumerate(FAMILIES.items()):
        model, trainable_names, frozen = torch_model(make, 0.1, 416 + index)
        for loss_name, loss in losses.items():
            for optimizer_name, optimizer in optimizers.items():
                yield (family, f"{family}_{loss_name}_{optimizer_name}", copy.deepcopy(model), trainable_names, frozen,
                       focal_loss() if loss is None else loss, optimizer)


def histogram(path: Path) -> collections.Counter:
    model = onnx.load(str(path))
    return collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model.graph.node)


def to_list(array: np.ndarray) -> dict:
    """An array as JSON: its little-endian bytes in base64, exact and compact."""
    array = np.array(array, order="C")  # np.ascontiguousarray would make a 0-d array 1-d
    return {"dtype": str(array.dtype), "shape": list(array.shape),
            "base64": base64.b64encode(array.astype(array.dtype.newbyteorder("<")).tobytes()).decode()}


def reference_run(directory: Path, make_inputs) -> dict:
    """STEPS steps of ORT's own Module/Optimizer; the state after RESUME_STEP steps is saved."""
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    initial = {name: to_list(np.asarray(p.data)) for name, p in state.parameters}
    module = api.Module(str(directory / "training_model.onnx"), state, str(directory / "eval_model.onnx"),
                        device="cpu")
    optimizer = api.Optimizer(str(directory / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LEARNING_RATE)
    rng = np.random.default_rng(1)
    steps, losses = [], []
    module.train()
    for step in range(STEPS):
        if step == RESUME_STEP:
            state.properties["epoch"] = 3
            state.properties["best_loss"] = 0.25
            state.properties["note"] = "saved by onnxruntime-training 1.19.2"
            api.CheckpointState.save_checkpoint(state, str(directory / "checkpoint_step5"),
                                                include_optimizer_state=True)
        feeds = make_inputs(rng)
        loss = module(*feeds)
        optimizer.step()
        module.lazy_reset_grad()
        steps.append([to_list(f) for f in feeds])
        losses.append(float(np.asarray(loss)))
    module.eval()
    eval_feeds = make_inputs(np.random.default_rng(2))
    eval_loss = float(np.asarray(module(*eval_feeds)))
    parameters = {name: to_list(np.asarray(p.data)) for name, p in state.parameters}
    contiguous = to_list(module.get_contiguous_parameters(trainable_only=False).numpy())
    # The exported inference model, run by the onnxruntime of this venv on the eval input.
    import onnxruntime

    exported = str(directory / "inference.onnx")
    module.export_model_for_inferencing(exported, ["output"])
    inference = onnxruntime.InferenceSession(exported, providers=["CPUExecutionProvider"])
    prediction = inference.run(["output"], {"input": eval_feeds[0]})[0]
    Path(exported).unlink()
    return {"learning_rate": LEARNING_RATE, "resume_step": RESUME_STEP, "inputs": steps, "losses": losses,
            "eval_inputs": [to_list(f) for f in eval_feeds], "eval_loss_after": eval_loss,
            "initial_parameters": initial, "parameters": parameters, "contiguous_parameters": contiguous,
            "inference_output": to_list(prediction),
            "input_names": module.input_names(), "output_names": module.output_names()}


def external_data_checkpoint(directory: Path) -> None:
    """checkpoint_external (and checkpoint_external.data): ORT's own checkpoint with external
    data, holding the initial parameters of `directory`'s checkpoint.

    ORT 1.19.2 writes a checkpoint's parameters to "<checkpoint>.data" when they total 1800
    MiB or more, and whenever it saves a state it loaded from such a checkpoint. A fixture of
    KBs is made the second way: the parameters are written here in ODTC with the module
    state's has_external_data set (by the flatbuffers code generated from ORT's schema that
    ships with ORT), ORT loads that and saves it again.
    """
    import flatbuffers
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs import Checkpoint, ModuleState, Tensor
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    builder = flatbuffers.Builder(1024)

    def tensor(name: str, value: np.ndarray) -> int:
        fb_name = builder.CreateString(name)
        raw = builder.CreateNumpyVector(np.ascontiguousarray(value).view(np.uint8).ravel())
        Tensor.TensorStartDimsVector(builder, value.ndim)
        for d in reversed(value.shape):
            builder.PrependInt64(d)
        dims = builder.EndVector()
        Tensor.TensorStart(builder)
        Tensor.TensorAddName(builder, fb_name)
        Tensor.TensorAddDims(builder, dims)
        Tensor.TensorAddDataType(builder, helper.np_dtype_to_tensor_dtype(value.dtype))
        Tensor.TensorAddRawData(builder, raw)
        return Tensor.TensorEnd(builder)

    lists = []
    for requires_grad in (True, False):
        tensors = [tensor(n, np.asarray(p.data)) for n, p in sorted(state.parameters) if p.requires_grad == requires_grad]
        ModuleState.ModuleStateStartRequiresGradParamsVector(builder, len(tensors))
        for t in reversed(tensors):
            builder.PrependUOffsetTRelative(t)
        lists.append(builder.EndVector())
    ModuleState.ModuleStateStart(builder)
    ModuleState.ModuleStateAddRequiresGradParams(builder, lists[0])
    ModuleState.ModuleStateAddFrozenParams(builder, lists[1])
    ModuleState.ModuleStateAddHasExternalData(builder, True)
    module = ModuleState.ModuleStateEnd(builder)
    Checkpoint.CheckpointStart(builder)
    Checkpoint.CheckpointAddVersion(builder, 2)
    Checkpoint.CheckpointAddModuleState(builder, module)
    builder.Finish(Checkpoint.CheckpointEnd(builder), b"ODTC")
    flagged = directory / "checkpoint_flagged"
    flagged.write_bytes(builder.Output())
    flagged.with_name(flagged.name + ".data").write_bytes(b"")
    loaded = api.CheckpointState.load_checkpoint(str(flagged))
    api.CheckpointState.save_checkpoint(loaded, str(directory / "checkpoint_external"))
    flagged.unlink()
    flagged.with_name(flagged.name + ".data").unlink()


FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")


def write_table(out: Path, rows: dict[str, tuple[str, dict[str, collections.Counter]]]) -> None:
    """ops.json: {case: {file: {op: count}}}; ops.md: the same as tables, one per family and
    model file (the optimizer models in one table: they depend on the optimizer only)."""
    (out / "ops.json").write_text(json.dumps(
        {name: {f: dict(sorted(hist[f].items())) for f in FILES} for name, (_, hist) in rows.items()}, indent=1) + "\n")
    lines = ["# Ops in onnxruntime-training 1.19.2's artifacts", "",
             "Written by `tools/ort_artifacts.py` (run in ORT-training's own venv), with `ops.json`. Each",
             "case is a model exported by torch (opset 17, training mode), a loss and an optimizer given",
             "to `onnxruntime.training.artifacts.generate_artifacts`; the counts are the nodes of the file",
             "named. `focal` is a custom onnxblock loss (LogSoftmax, GatherElements).", ""]

    def table(title: str, names: list[str], file: str) -> None:
        ops = sorted({op for name in names for op in rows[name][1][file]})
        lines.extend([f"## {title}", "", "| op | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)])
        for op in ops:
            lines.append(f"| `{op}` | " + " | ".join(str(rows[n][1][file][op] or "") for n in names) + " |")
        lines.append("")

    for family in FAMILIES:
        names = [n for n, (f, _) in rows.items() if f == family]
        for file in FILES[:2]:
            table(f"{family}: {file}", names, file)
    firsts = {}
    for name, (_, hist) in rows.items():
        firsts.setdefault(name.rsplit("_", 1)[1], name)
    table("optimizer_model.onnx", list(firsts.values()), FILES[2])
    (out / "ops.md").write_text("\n".join(lines))


def generate(directory: Path, model, trainable_names, frozen, loss, optimizer, nominal: bool = False) -> None:
    from onnxruntime.training import artifacts

    directory.mkdir(parents=True, exist_ok=True)
    artifacts.generate_artifacts(model, requires_grad=trainable_names, frozen_params=frozen, loss=loss,
                                 optimizer=optimizer, artifact_directory=str(directory), nominal_checkpoint=nominal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cases", help="comma-separated fixture names (default: all)")
    parser.add_argument("--table-only", action="store_true", help="write ops.json and ops.md only")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        chosen = set(args.cases.split(",")) if args.cases else None
        for name, model, trainable_names, frozen, loss, optim, make_inputs in fixtures():
            if chosen is not None and name not in chosen:
                continue
            directory = out / name
            generate(directory, model, trainable_names, frozen, loss, optim, nominal=name == "mlp_crossentropy_adamw")
            if name == "mlp_crossentropy_adamw":
                external_data_checkpoint(directory)
            reference = reference_run(directory, make_inputs)
            (directory / "reference.json").write_text(json.dumps(reference))
            print(f"{name}: losses {reference['losses'][0]:.5f} .. {reference['losses'][-1]:.5f}")
    import tempfile

    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for family, name, model, trainable_names, frozen, loss, optim in grid():
            directory = Path(scratch) / name
            generate(directory, model, trainable_names, frozen, loss, optim)
            rows[name] = (family, {f: histogram(directory / f) for f in FILES})
            print(f"{name}: {sum(rows[name][1]['training_model.onnx'].values())} training nodes")
    write_table(out, rows)


if __name__ == "__main__":
    main()
