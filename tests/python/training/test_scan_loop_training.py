"""Training through Scan and Loop end to end: an Elman RNN written as a Scan (and the same RNN
as a Loop that Gathers the time step at its iteration number), its final state and the mean
of its outputs into a linear head and cross-entropy; generate_artifacts and 15 steps of the
training API's AdamW on one batch against torch running the same recurrence. Every step's loss within
rtol 1e-6 in float64 and 1e-4 in float32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")

from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.onnxblock import optim  # noqa: E402
from zoo.training import train_artifacts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BATCH, TIME, FEATURES, HIDDEN, CLASSES = 4, 5, 3, 6, 4
STEPS = 15
LR = 2e-2


def initial_weights(dtype: type) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    shapes = {"W": (FEATURES, HIDDEN), "R": (HIDDEN, HIDDEN), "b": (HIDDEN,), "V": (HIDDEN, CLASSES), "c": (CLASSES,)}
    return {k: (rng.standard_normal(s) * 0.5).astype(dtype) for k, s in shapes.items()}


def rnn_step(h: str, x_t: str, out: str, prefix: str) -> list[onnx.NodeProto]:
    return [
        helper.make_node("MatMul", [x_t, "W"], [f"{prefix}xw"]),
        helper.make_node("MatMul", [h, "R"], [f"{prefix}hr"]),
        helper.make_node("Add", [f"{prefix}xw", f"{prefix}hr"], [f"{prefix}pre"]),
        helper.make_node("Add", [f"{prefix}pre", "b"], [f"{prefix}pre_b"]),
        helper.make_node("Tanh", [f"{prefix}pre_b"], [out]),
    ]


def rnn_model(kind: str, dtype: type) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    h0 = helper.make_node("Constant", [], ["h0"], value=numpy_helper.from_array(np.zeros((BATCH, HIDDEN), dtype)))
    if kind == "scan":
        body = helper.make_graph(
            rnn_step("s_h", "s_x", "s_h2", "s_"), "step",
            [helper.make_tensor_value_info(n, elem, None) for n in ("s_h", "s_x")],
            [helper.make_tensor_value_info(n, elem, None) for n in ("s_h2", "s_h2")],
        )
        loop = [helper.make_node("Scan", ["h0", "x"], ["h", "hs"], body=body, num_scan_inputs=1,
                                 scan_input_axes=[1], scan_output_axes=[1])]
        time_axis = 1
    else:
        body = helper.make_graph(
            [helper.make_node("Gather", ["x_tbf", "l_i"], ["l_x"], axis=0), *rnn_step("l_h", "l_x", "l_h2", "l_"),
             helper.make_node("Identity", ["l_c"], ["l_c2"])],
            "step",
            [helper.make_tensor_value_info("l_i", TensorProto.INT64, []),
             helper.make_tensor_value_info("l_c", TensorProto.BOOL, []),
             helper.make_tensor_value_info("l_h", elem, None)],
            [helper.make_tensor_value_info("l_c2", TensorProto.BOOL, []),
             helper.make_tensor_value_info("l_h2", elem, None),
             helper.make_tensor_value_info("l_h2", elem, None)],
        )
        loop = [
            helper.make_node("Transpose", ["x"], ["x_tbf"], perm=[1, 0, 2]),
            helper.make_node("Constant", [], ["trips"], value=numpy_helper.from_array(np.array(TIME, np.int64))),
            helper.make_node("Loop", ["trips", "", "h0"], ["h", "hs"], body=body),
        ]
        time_axis = 0
    nodes = [
        h0,
        *loop,
        helper.make_node("ReduceMean", ["hs"], ["mean"], axes=[time_axis], keepdims=0),
        helper.make_node("Add", ["h", "mean"], ["features"]),
        helper.make_node("MatMul", ["features", "V"], ["fv"]),
        helper.make_node("Add", ["fv", "c"], ["logits"]),
    ]
    weights = [numpy_helper.from_array(v, k) for k, v in initial_weights(dtype).items()]
    graph = helper.make_graph(nodes, f"rnn-{kind}", [helper.make_tensor_value_info("x", elem, [BATCH, TIME, FEATURES])],
                              [helper.make_tensor_value_info("logits", elem, [BATCH, CLASSES])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class TorchRnn(torch.nn.Module):
    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.params = torch.nn.ParameterDict({k: torch.nn.Parameter(torch.tensor(v)) for k, v in weights.items()})

    def forward(self, x):  # type: ignore[no-untyped-def]
        p = self.params
        h = torch.zeros(BATCH, HIDDEN, dtype=x.dtype)
        hs = []
        for t in range(TIME):
            h = torch.tanh(x[:, t] @ p["W"] + h @ p["R"] + p["b"])
            hs.append(h)
        return (h + torch.stack(hs, 1).mean(1)) @ p["V"] + p["c"]


def batches(dtype: type) -> list[tuple[np.ndarray, np.ndarray]]:
    """One batch, fitted step after step (the loss then falls, so the comparison means something)."""
    rng = np.random.default_rng(8)
    x, labels = rng.standard_normal((BATCH, TIME, FEATURES)).astype(dtype), rng.integers(0, CLASSES, BATCH)
    return [(x, labels)] * STEPS


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-6), (np.float32, 1e-4)], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", ["scan", "loop"])
def test_rnn_trains_as_in_torch(kind: str, dtype: type, rtol: float, tmp_path: Path) -> None:
    model = rnn_model(kind, dtype)
    artifacts.generate_artifacts(
        model, requires_grad=["W", "R", "b", "V", "c"], loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=optim.AdamW(eps=1e-8, weight_decay=0.01, mode="torch"), artifact_directory=tmp_path)
    data = batches(dtype)
    ours, _ = train_artifacts(tmp_path, data, LR)

    module = TorchRnn(initial_weights(dtype))
    opt = torch.optim.AdamW(module.parameters(), lr=LR, weight_decay=0.01, eps=1e-8)
    theirs = []
    for x, labels in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        theirs.append(loss.item())
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=0)
    assert theirs[-1] < 0.5 * theirs[0]  # it trained
