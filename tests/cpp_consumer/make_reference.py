"""Writes the consumer's model and reference numbers: a two-layer MLP (Gemm, Relu, Gemm)
as model.onnx, and reference.txt with an input, labels, onnxruntime's output for that input
and the losses torch gives for three AdamW steps (lr 0.05, weight decay 0.01) of mean
cross-entropy from the model's weights.

    python make_reference.py <out dir>
"""

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import TensorProto, helper, numpy_helper


def mlp(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    weights = {
        "w1": rng.standard_normal((3, 5)).astype(np.float32),
        "b1": rng.standard_normal(5).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((5, 2)).astype(np.float32),
        "b2": rng.standard_normal(2).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model, weights


def torch_losses(weights: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray, steps: int) -> list[float]:
    params = {k: torch.tensor(v, dtype=torch.float32, requires_grad=True) for k, v in weights.items()}
    optimizer = torch.optim.AdamW(params.values(), lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    xt, yt = torch.tensor(x), torch.tensor(labels)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        hidden = torch.relu(xt @ params["w1"] + params["b1"])
        loss = torch.nn.functional.cross_entropy(hidden @ params["w2"] + params["b2"], yt)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    model, weights = mlp(rng)
    onnx.save(model, out / "model.onnx")
    x = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 1, 1, 0], dtype=np.int64)
    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    output = session.run(None, {"x": x})[0]
    losses = torch_losses(weights, x, labels, 3)
    lines = [" ".join(f"{v:.9g}" for v in a.ravel()) for a in (x, labels, output, np.array(losses))]
    (out / "reference.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
