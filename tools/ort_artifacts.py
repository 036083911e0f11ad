"""Generates the onnxruntime-training 1.19.2 fixtures of tests/python/training/ort_artifacts/.

Run it in ORT-training's own virtualenv (scripts/setup_ort_training.sh makes it), never in
the project's .venv, where stock onnxruntime provides the same module name:

    ~/.cache/onnxtrain/ort-training-1.19.2/bin/python tools/ort_artifacts.py OUT_DIR

For each case (a tiny model, a loss, an optimizer) it writes into OUT_DIR/<case>/:
- what ORT's `generate_artifacts` writes: training_model.onnx, eval_model.onnx,
  optimizer_model.onnx, checkpoint (an ODTC flatbuffer; `nominal_checkpoint` for the MLP);
- checkpoint_step5: the state ORT saved after 5 training steps, with optimizer state and
  properties (an int, a float, a string);
- reference.json: the inputs of each step, ORT's loss after each of STEPS steps, and the
  parameters after the last one.
and OUT_DIR/ops.md, the op histogram of each case's training and optimizer models.

The models are small (KBs), the inputs seeded, so the run is the same on any machine.
"""

from __future__ import annotations

import base64
import collections
import json
import sys
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


def trainable(model: onnx.ModelProto, frozen: set[str]) -> tuple[list[str], list[str]]:
    floats = [t.name for t in model.graph.initializer if t.data_type == F and t.dims]
    return [n for n in floats if n not in frozen], [n for n in floats if n in frozen]


def cases():
    """(name, model, frozen, loss, optimizer, inputs(rng) -> list of feeds)."""
    from onnxruntime.training import artifacts

    rng = np.random.default_rng(16)
    loss, optim = artifacts.LossType, artifacts.OptimType
    batch = 5

    def classes(n):
        return lambda r: [r.standard_normal((batch, 6)).astype(np.float32), r.integers(0, n, batch).astype(np.int64)]

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

    return [
        ("mlp_crossentropy_adamw", mlp(rng), set(), loss.CrossEntropyLoss, optim.AdamW, classes(4)),
        ("mlp_mse_sgd", mlp(rng), set(), loss.MSELoss, optim.SGD, regression((batch, 6), (batch, 4))),
        ("mlp_bcewithlogits_adamw", mlp(rng), {"fc1.bias"}, loss.BCEWithLogitsLoss, optim.AdamW,
         regression((batch, 6), (batch, 4), binary=True)),
        ("mlp_l1_sgd", mlp(rng), set(), loss.L1Loss, optim.SGD, regression((batch, 6), (batch, 4))),
        ("cnn_mse_sgd", cnn(rng), {"bn.running_mean", "bn.running_var"}, loss.MSELoss, optim.SGD,
         regression((batch, 2, 4, 4), (batch, 3))),
        ("gpt_crossentropy_adamw", gpt(rng), set(), loss.CrossEntropyLoss, optim.AdamW, tokens),
    ]


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


def write_table(out: Path, rows: dict[str, dict[str, collections.Counter]]) -> None:
    lines = ["# Ops in onnxruntime-training 1.19.2's artifacts", "",
             "Written by `tools/ort_artifacts.py` (run in ORT-training's own venv). Each case is a tiny",
             "model, a loss and an optimizer given to `onnxruntime.training.artifacts.generate_artifacts`;",
             "the counts are the nodes of the file named.", ""]
    ops = sorted({op for files in rows.values() for hist in files.values() for op in hist})
    for file in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        present = [op for op in ops if any(files[file][op] for files in rows.values())]
        lines += [f"## {file}", "", "| op | " + " | ".join(rows) + " |", "|---|" + "---|" * len(rows)]
        for op in present:
            lines.append(f"| `{op}` | " + " | ".join(str(files[file][op] or "") for files in rows.values()) + " |")
        lines.append("")
    (out / "ops.md").write_text("\n".join(lines))


def main(out: Path) -> None:
    from onnxruntime.training import artifacts

    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for name, model, frozen, loss, optim, make_inputs in cases():
        directory = out / name
        directory.mkdir(exist_ok=True)
        requires_grad, frozen_params = trainable(model, frozen)
        onnx.save(model, str(directory / "model.onnx"))
        artifacts.generate_artifacts(model, requires_grad=requires_grad, frozen_params=frozen_params, loss=loss,
                                     optimizer=optim, artifact_directory=str(directory),
                                     nominal_checkpoint=name.startswith("mlp_crossentropy"))
        (directory / "model.onnx").unlink()
        rows[name] = {f: histogram(directory / f)
                      for f in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")}
        reference = reference_run(directory, make_inputs)
        (directory / "reference.json").write_text(json.dumps(reference))
        print(f"{name}: losses {reference['losses'][0]:.5f} .. {reference['losses'][-1]:.5f}")
    write_table(out, rows)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
