"""A training graph's recurrent forward hands its record to the gradient
(passes/share_recurrent_record.h): with the graph rewrites on, RNN/GRU/LSTM run as
org.onnxtrain::*Training and {RNN,GRU,LSTM}Grad reads their record instead of running the
forward again. Every output, forward and gradient, must be the same numbers, bit for bit, as
with the rewrites off (the gradient's own forward), on every path the record takes: each cell,
direction, layout, sequence_lens with zeros and short rows, an odd batch that splits into row
ranges on two threads, peepholes and activations that keep the pre-activations, float32 and
float64, one and two threads."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def model(cell: str, dtype: int, *, directions: int, lens: bool, layout: int, peepholes: bool, attrs: dict):
    forward_inputs = ["X", "W", "R", "B", "lens" if lens else "", "h0", *(["c0", "P" if peepholes else ""]
                                                                        if cell == "LSTM" else [])]
    outputs = ["Y", "Y_h", "Y_c"][: 3 if cell == "LSTM" else 2]
    attributes = {"hidden_size": 5, "direction": ["forward", "bidirectional"][directions - 1], "layout": layout,
                  **attrs}
    nodes = [
        helper.make_node(cell, forward_inputs, outputs, **attributes),
        # The gradient seeded with the forward's outputs themselves (grad of 0.5 * sum(out^2)).
        helper.make_node(f"{cell}Grad", forward_inputs + outputs,
                         ["dX", "dW", "dR", "dB", "dh0", *(["dc0", "dP"] if cell == "LSTM" else [])],
                         domain="org.onnxtrain", **attributes),
    ]
    names = [n for n in forward_inputs if n]
    graph = helper.make_graph(
        nodes, cell, [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "lens" else dtype, None)
                      for n in names],
        [helper.make_tensor_value_info(n, dtype, None) for n in [*nodes[0].output, *nodes[1].output]])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("org.onnxtrain", 1)])


def feeds(cell, dtype, *, seq, batch, directions, lens, layout, peepholes, seed=0):
    rng = np.random.default_rng(seed)
    g, hidden, inputs = GATES[cell], 5, 3
    state = (directions, batch, hidden) if layout == 0 else (batch, directions, hidden)
    f = {"X": rng.standard_normal((seq, batch, inputs) if layout == 0 else (batch, seq, inputs)),
         "W": rng.standard_normal((directions, g * hidden, inputs)) * 0.5,
         "R": rng.standard_normal((directions, g * hidden, hidden)) * 0.5,
         "B": rng.standard_normal((directions, 2 * g * hidden)) * 0.5,
         "h0": rng.standard_normal(state) * 0.5}
    if cell == "LSTM":
        f["c0"] = rng.standard_normal(state) * 0.5
        if peepholes:
            f["P"] = rng.standard_normal((directions, 3 * hidden)) * 0.5
    f = {k: v.astype(dtype) for k, v in f.items()}
    if lens:
        f["lens"] = rng.integers(0, seq + 1, batch).astype(np.int32)
        f["lens"][0], f["lens"][-1] = 0, seq
    return f


def run(onnx_model, inputs, threads: int, rewrite: bool, path=None):
    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = threads
    if not rewrite:
        options.graph_optimization_level = onnxtrain.GraphOptimizationLevel.ORT_DISABLE_ALL
    if path is not None:
        options.optimized_model_filepath = str(path)
    return onnxtrain.InferenceSession(onnx_model.SerializeToString(), options).run(None, inputs)


CASES = [
    # cell, directions, lens, layout, peepholes, attrs
    ("LSTM", 1, False, 0, False, {}),
    ("LSTM", 1, True, 0, False, {"direction": "reverse"}),
    ("LSTM", 2, True, 1, False, {}),
    ("LSTM", 2, False, 0, True, {}),
    ("LSTM", 1, True, 0, False, {"clip": 1.5, "input_forget": 1}),
    ("LSTM", 2, True, 0, False, {"activations": ["Sigmoid", "Tanh", "Tanh", "HardSigmoid", "Tanh", "Softsign"]}),
    ("GRU", 1, True, 0, False, {}),
    ("GRU", 2, True, 1, False, {"linear_before_reset": 1}),
    ("GRU", 1, False, 0, False, {"direction": "reverse", "linear_before_reset": 1}),
    ("RNN", 2, True, 0, False, {}),
    ("RNN", 1, False, 1, False, {"activations": ["Relu"]}),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch,seq", [(17, 6), (1, 3), (4, 0)])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}dir-lens{int(c[2])}-layout{c[3]}-p{int(c[4])}-"
                         + "-".join(c[5]) if isinstance(c, tuple) else str(c))
def test_record_gives_the_same_numbers(case, batch, seq, dtype, threads, tmp_path):
    cell, directions, lens, layout, peepholes, attrs = case
    if attrs.get("direction") == "reverse":
        directions = 1
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    m = model(cell, elem, directions=directions, lens=lens, layout=layout, peepholes=peepholes, attrs=attrs)
    f = feeds(cell, dtype, seq=seq, batch=batch, directions=directions, lens=lens, layout=layout, peepholes=peepholes)
    shared = run(m, f, threads, True, tmp_path / "optimized.onnx")
    again = run(m, f, threads, False)
    import onnx

    ops = [(n.domain, n.op_type) for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert ops == [("org.onnxtrain", f"{cell}Training"), ("org.onnxtrain", f"{cell}Grad")]
    for name, a, b in zip([o.name for o in m.graph.output], shared, again):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_large_lstm_splits_rows_on_two_threads():
    """The LSTM language model's sizes (batch 16 splits into two row ranges on two threads)."""
    cell, seq, batch, inputs, hidden = "LSTM", 12, 16, 64, 256
    rng = np.random.default_rng(1)
    f = {"X": rng.standard_normal((seq, batch, inputs)).astype(np.float32),
         "W": (rng.standard_normal((1, 4 * hidden, inputs)) * 0.1).astype(np.float32),
         "R": (rng.standard_normal((1, 4 * hidden, hidden)) * 0.05).astype(np.float32),
         "B": (rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32)}
    nodes = [helper.make_node(cell, ["X", "W", "R", "B"], ["Y"], hidden_size=hidden),
             helper.make_node("LSTMGrad", ["X", "W", "R", "B", "", "", "", "", "Y"], ["dX", "dW", "dR", "dB"],
                              domain="org.onnxtrain", hidden_size=hidden)]
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in f],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                               for n in ["Y", "dX", "dW", "dR", "dB"]])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("org.onnxtrain", 1)])
    for threads in (1, 2):
        for a, b in zip(run(m, f, threads, True), run(m, f, threads, False)):
            np.testing.assert_array_equal(a, b)
