"""Writes the seed corpora of the fuzz targets (scripts/fuzz.sh), one folder per target:

    fuzz_model/          ONNX models: an MLP, a CNN (Conv, BatchNormalization, MaxPool with
                         padding, Relu, Gemm), a transformer block (MatMul, Softmax,
                         LayerNormalization, Gelu, Transpose, Reshape, Gather), shape ops, and
                         the training, eval and optimizer models generate_artifacts makes
    fuzz_checkpoint/     checkpoints: full with optimizer state and properties, nominal, a
                         plain safetensors file, and ODTC flatbuffers (onnxruntime-training's
                         format: saved by onnxtrain and by ORT 1.19.2)
    fuzz_function_text/  every org.onnxtrain function body in the sources
    fuzz_graph/          byte strings for tests/fuzz/fuzz_graph.py's generators: lengths from
                         4 to 2048 bytes, both modes (generated graph, schema node)

usage: python tools/fuzz_seeds.py OUT_DIR
Nothing here is committed: the script makes the same seeds on any machine.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def model(nodes, inputs, outputs, initializers, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "seed", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def mlp() -> onnx.ModelProto:
    return model(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1)],
        [helper.make_tensor_value_info("x", F, ["batch", 8])], [helper.make_tensor_value_info("logits", F, ["batch", 4])],
        [weight("w1", 16, 8), weight("b1", 16), weight("w2", 4, 16), weight("b2", 4)])


def cnn() -> onnx.ModelProto:
    return model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
         helper.make_node("Relu", ["n"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1)],
        [helper.make_tensor_value_info("x", F, [1, 3, 5, 5])], [helper.make_tensor_value_info("logits", F, [1, 4])],
        [weight("w", 8, 3, 3, 3), weight("b", 8), weight("scale", 8), weight("bias", 8), weight("mean", 8),
         numpy_helper.from_array(np.ones(8, np.float32), "var"), weight("fc", 4, 72), weight("fcb", 4)])


def transformer_block() -> onnx.ModelProto:
    d, heads = 8, 2
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("LayerNormalization", ["e", "ln_g", "ln_b"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "wq"], ["q"]),
        helper.make_node("MatMul", ["n", "wk"], ["k"]),
        helper.make_node("Reshape", ["q", "heads_shape"], ["qh"]),
        helper.make_node("Reshape", ["k", "heads_shape"], ["kh"]),
        helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attention"], axis=-1),
        helper.make_node("ReduceMean", ["attention", "axes"], ["pooled"], keepdims=0),
        helper.make_node("Gelu", ["n"], ["g"]),
        helper.make_node("ReduceSum", ["g", "axes"], ["total"], keepdims=0),
    ]
    return model(
        nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 4])],
        [helper.make_tensor_value_info("pooled", F, None), helper.make_tensor_value_info("total", F, None)],
        [weight("table", 16, d), weight("ln_g", d), weight("ln_b", d), weight("wq", d, d), weight("wk", d, d),
         numpy_helper.from_array(np.array([0, 0, heads, d // heads], np.int64), "heads_shape"),
         numpy_helper.from_array(np.array([-1], np.int64), "axes")],
        opset=20)


def shape_ops() -> onnx.ModelProto:
    ints = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)  # noqa: E731
    return model(
        [helper.make_node("Slice", ["x", "starts", "ends"], ["s"]),
         helper.make_node("Expand", ["s", "expand"], ["e"]),
         helper.make_node("Tile", ["e", "repeats"], ["t"]),
         helper.make_node("Pad", ["t", "pads"], ["p"]),
         helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
         helper.make_node("ConstantOfShape", ["expand"], ["c"]),
         helper.make_node("Concat", ["p", "p"], ["y"], axis=0)],
        [helper.make_tensor_value_info("x", F, [4, 3])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("r", TensorProto.INT64, None),
         helper.make_tensor_value_info("c", F, None)],
        [ints("starts", [1, 0]), ints("ends", [3, 3]), ints("expand", [2, 2, 3]), ints("repeats", [1, 2, 1]),
         ints("pads", [0, 0, 1, 0, 0, 1]), ints("start", 0), ints("limit", 6), ints("delta", 2)])


def write_models(out: Path, work: Path) -> None:
    from onnxtrain.training import artifacts

    for name, m in {"mlp": mlp(), "cnn": cnn(), "transformer": transformer_block(), "shape_ops": shape_ops()}.items():
        (out / f"{name}.onnx").write_bytes(m.SerializeToString())
    for loss, optimizer in ((artifacts.LossType.CrossEntropyLoss, artifacts.OptimType.AdamW),
                            (artifacts.LossType.MSELoss, artifacts.OptimType.SGD)):
        folder = work / f"art-{loss.name}"
        base = cnn() if loss == artifacts.LossType.MSELoss else mlp()
        statistics = [i.name for i in base.graph.initializer if i.name in ("mean", "var")]
        artifacts.generate_artifacts(base, requires_grad=[i.name for i in base.graph.initializer
                                                          if i.name not in statistics],
                                     frozen_params=statistics, loss=loss, optimizer=optimizer,
                                     artifact_directory=folder)
        for file in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
            (out / f"{loss.name}-{file}").write_bytes((folder / file).read_bytes())


def write_checkpoints(out: Path, work: Path) -> None:
    from onnxtrain.training import artifacts
    from onnxtrain.training.api import CheckpointState, Module, Optimizer

    folder = work / "ckpt"
    artifacts.generate_artifacts(mlp(), requires_grad=["w1", "b1", "w2"], frozen_params=["b2"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=folder, nominal_checkpoint=True)
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    module = Module(folder / "training_model.onnx", state)
    optimizer = Optimizer(folder / "optimizer_model.onnx", module)
    module(rng.standard_normal((3, 8)).astype(np.float32), np.array([0, 1, 3], np.int64))
    optimizer.step()
    state.properties["epoch"] = 2
    state.properties["loss"] = 0.25
    state.properties["note"] = "seed"
    CheckpointState.save_checkpoint(state, out / "full", include_optimizer_state=True)
    CheckpointState.save_checkpoint(state, out / "parameters")
    (out / "nominal").write_bytes((folder / "nominal_checkpoint").read_bytes())
    # onnxruntime-training's ODTC flatbuffer: as onnxtrain writes it, and as ORT 1.19.2 did.
    CheckpointState.save_checkpoint(state, out / "ort_full", include_optimizer_state=True, format="ort")
    ort = ROOT / "tests" / "python" / "training" / "ort_artifacts" / "mlp_crossentropy_adamw"
    for name in ("checkpoint_step5", "nominal_checkpoint"):
        (out / f"ort_{name}").write_bytes((ort / name).read_bytes())
    from safetensors.numpy import save_file

    save_file({"a": np.ones((2, 3), np.float32), "b": np.arange(4, dtype=np.int64)}, str(out / "plain"))


def write_function_texts(out: Path) -> None:
    sources = sorted((ROOT / "src").rglob("*.cc"))
    count = 0
    for source in sources:
        for text in re.findall(r'R"\((.*?)\)"', source.read_text(), flags=re.S):
            if "=>" in text:
                (out / f"{source.stem}-{count}.txt").write_text(text)
                count += 1
    if count == 0:
        raise SystemExit("fuzz_seeds.py: found no function texts in src/")


def write_graph_seeds(out: Path) -> None:
    # fuzz_graph reads its choices from the bytes: byte 4 picks the mode (even: a generated graph,
    # odd: a schema node), the rest the graph. Random bytes of a few lengths reach most paths.
    for i, length in enumerate([4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048] * 2):
        data = bytearray(rng.integers(0, 256, size=length, dtype=np.uint8).tobytes())
        if length > 4:
            data[4] = i % 2
        (out / f"bytes-{i:02d}").write_bytes(bytes(data))


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    folders = {name: out / name for name in ("fuzz_model", "fuzz_checkpoint", "fuzz_function_text", "fuzz_graph")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        write_models(folders["fuzz_model"], Path(work))
        write_checkpoints(folders["fuzz_checkpoint"], Path(work))
    write_function_texts(folders["fuzz_function_text"])
    write_graph_seeds(folders["fuzz_graph"])
    for name, folder in folders.items():
        print(f"{name}: {len(list(folder.iterdir()))} seeds in {folder}")


if __name__ == "__main__":
    main()
