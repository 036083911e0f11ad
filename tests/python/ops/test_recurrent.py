"""RNN, GRU and LSTM against onnxruntime 1.23 (float32, layout 0: its CPU kernels refuse
layout 1), onnx.reference (the cases it implements: no clip, input_forget or
sequence_lens) and the spec in numpy (recurrent_reference.py; float64, layout 1, every
attribute). Tolerances: float32 rtol 1e-5 / atol 1e-5, float64 1e-10."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from op_harness import check_op
from recurrent_reference import GATES, recurrent

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-10)
NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def make_inputs(
    cell: str,
    *,
    seq: int = 5,
    batch: int = 3,
    input_size: int = 4,
    hidden: int = 3,
    directions: int = 1,
    layout: int = 0,
    bias: bool = True,
    lens: list[int] | None = None,
    initial: bool = False,
    peepholes: bool = False,
    dtype=np.float32,
    scale: float = 0.6,
) -> dict[str, np.ndarray | None]:
    g = GATES[cell]
    normal = lambda *shape: (rng.standard_normal(shape) * scale).astype(dtype)  # noqa: E731
    x = normal(seq, batch, input_size) if layout == 0 else normal(batch, seq, input_size)
    state_shape = (directions, batch, hidden) if layout == 0 else (batch, directions, hidden)
    inputs = {
        "X": x,
        "W": normal(directions, g * hidden, input_size),
        "R": normal(directions, g * hidden, hidden),
        "B": normal(directions, 2 * g * hidden) if bias else None,
        "sequence_lens": None if lens is None else np.array(lens, np.int32),
        "initial_h": normal(*state_shape) if initial else None,
    }
    if cell == "LSTM":
        inputs["initial_c"] = normal(*state_shape) if initial else None
        inputs["P"] = normal(directions, 3 * hidden) if peepholes else None
    # Trailing omitted inputs are dropped, as exporters write them.
    while list(inputs.values())[-1] is None:
        inputs.popitem()
    return inputs


def run_case(cell, inputs, attrs, *, reference="onnxruntime", tol=F32, opset=14):
    n_outputs = 3 if cell == "LSTM" else 2
    hidden = inputs["R"].shape[-1]
    attrs = {"hidden_size": hidden, **attrs}
    if reference == "numpy":
        expected = recurrent(cell, inputs, attrs)
        return check_op(cell, inputs, attrs, n_outputs=n_outputs, opset=opset, expected=expected, **tol)
    return check_op(cell, inputs, attrs, n_outputs=n_outputs, opset=opset, reference=reference, **tol)


DIRECTIONS = ["forward", "reverse", "bidirectional"]
CELLS = ["RNN", "GRU", "LSTM"]


@pytest.mark.parametrize("cell,direction", itertools.product(CELLS, DIRECTIONS))
@pytest.mark.parametrize("bias,initial", [(True, True), (False, False)])
def test_against_onnxruntime(cell, direction, bias, initial):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(cell, directions=dirs, bias=bias, initial=initial, peepholes=initial)
    run_case(cell, inputs, {"direction": direction})


@pytest.mark.parametrize("cell", ["RNN", "GRU"])
def test_against_onnx_reference(cell):
    # onnx.reference 1.19 runs one direction, forward only, and no LSTM Y_c.
    inputs = make_inputs(cell, initial=True)
    run_case(cell, inputs, {}, reference="onnx.reference")


@pytest.mark.parametrize("cell,direction", itertools.product(CELLS, DIRECTIONS))
@pytest.mark.parametrize("lens", [[5, 2, 0], [1, 5, 3], [0, 0, 0]])
def test_sequence_lens(cell, direction, lens):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(cell, directions=dirs, lens=lens, initial=True)
    run_case(cell, inputs, {"direction": direction}, reference="numpy")
    if 0 not in lens:  # onnxruntime zeroes Y_h of empty rows instead of passing initial_h
        run_case(cell, inputs, {"direction": direction})


@pytest.mark.parametrize("cell", CELLS)
def test_clip(cell):
    inputs = make_inputs(cell, initial=True, scale=2.0)
    run_case(cell, inputs, {"clip": 0.7})
    run_case(cell, make_inputs(cell, directions=2, scale=2.0), {"clip": 1.1, "direction": "bidirectional"})


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(lbr, direction):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs("GRU", directions=dirs, initial=True)
    run_case("GRU", inputs, {"linear_before_reset": lbr, "direction": direction})


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_input_forget_and_peepholes(direction):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs("LSTM", directions=dirs, initial=True, peepholes=True)
    run_case("LSTM", inputs, {"input_forget": 1, "direction": direction})


ACTIVATION_CASES = [
    (["Relu"], [], []),
    (["Sigmoid"], [], []),
    (["Affine"], [0.7], [0.2]),
    (["LeakyRelu"], [0.3], []),
    (["ThresholdedRelu"], [0.2], []),
    (["ScaledTanh"], [1.3], [0.8]),
    (["HardSigmoid"], [0.3], [0.4]),
    (["Elu"], [0.9], []),
    (["Softsign"], [], []),
    (["Softplus"], [], []),
]


@pytest.mark.parametrize("names,alpha,beta", ACTIVATION_CASES)
def test_rnn_activations(names, alpha, beta):
    inputs = make_inputs("RNN", initial=True)
    attrs = {"activations": names}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    run_case("RNN", inputs, attrs)


def test_activations_alpha_beta_consumed_in_order():
    # LSTM bidirectional: f g h per direction; alphas go to the functions that take one.
    inputs = make_inputs("LSTM", directions=2, initial=True)
    attrs = {
        "direction": "bidirectional",
        "activations": ["HardSigmoid", "LeakyRelu", "Softsign", "Sigmoid", "ScaledTanh", "Tanh"],
        "activation_alpha": [0.25, 0.1, 1.2],
        "activation_beta": [0.45, 0.9],
    }
    run_case("LSTM", inputs, attrs)
    gru_attrs = {
        "direction": "bidirectional",
        "activations": ["Sigmoid", "Elu", "HardSigmoid", "Softplus"],
        "activation_alpha": [0.8, 0.3],
        "activation_beta": [0.5],
    }
    run_case("GRU", make_inputs("GRU", directions=2, initial=True), gru_attrs)


@pytest.mark.parametrize("cell,direction", itertools.product(CELLS, DIRECTIONS))
def test_layout_1(cell, direction):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(cell, directions=dirs, layout=1, initial=True, peepholes=True, lens=[4, 5, 1])
    attrs = {"direction": direction, "layout": 1}
    ours = run_case(cell, inputs, attrs, reference="numpy")
    # onnxruntime runs layout 0 only: the same problem transposed.
    time_major = dict(inputs)
    time_major["X"] = inputs["X"].transpose(1, 0, 2)
    for name in ("initial_h", "initial_c"):
        if inputs.get(name) is not None:
            time_major[name] = inputs[name].transpose(1, 0, 2)
    hidden = inputs["R"].shape[-1]
    from op_harness import make_model, run_reference

    model = make_model(cell, time_major, {"hidden_size": hidden, "direction": direction}, n_outputs=len(ours),
                       opset=14)
    theirs = run_reference(model, {k: v for k, v in time_major.items() if v is not None}, "onnxruntime")
    np.testing.assert_allclose(ours[0], theirs[0].transpose(2, 0, 1, 3), **F32)
    for a, b in zip(ours[1:], theirs[1:]):
        np.testing.assert_allclose(a, b.transpose(1, 0, 2), **F32)


@pytest.mark.parametrize("cell,direction", itertools.product(CELLS, DIRECTIONS))
def test_float64(cell, direction):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(cell, directions=dirs, dtype=np.float64, initial=True, peepholes=True, lens=[5, 3, 1])
    attrs = {"direction": direction, "clip": 0.9}
    if cell == "GRU":
        attrs["linear_before_reset"] = 1
    if cell == "LSTM":
        attrs["input_forget"] = 1
    run_case(cell, inputs, attrs, reference="numpy", tol=F64)


@pytest.mark.parametrize("cell", CELLS)
def test_batch_1_and_hidden_size_omitted(cell):
    inputs = make_inputs(cell, batch=1, seq=7, hidden=5)
    check_op(cell, inputs, {"hidden_size": 5}, n_outputs=3 if cell == "LSTM" else 2, opset=14, **F32)
    # without hidden_size (onnxruntime requires it): R's last axis
    check_op(cell, inputs, {}, n_outputs=3 if cell == "LSTM" else 2, opset=14, expected=recurrent(cell, inputs, {}),
             **F32)


@pytest.mark.parametrize("cell", CELLS)
def test_only_some_outputs(cell):
    from op_harness import make_model, run_onnxtrain

    inputs = make_inputs(cell, initial=True)
    hidden = inputs["R"].shape[-1]
    model = make_model(cell, inputs, {"hidden_size": hidden}, n_outputs=2, opset=14)
    model.graph.node[0].output[0] = ""
    del model.graph.output[0]
    (yh,) = run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None})
    np.testing.assert_allclose(yh, recurrent(cell, inputs, {"hidden_size": hidden})[1], **F32)


def test_bad_shapes_are_errors():
    import onnxtrain
    from op_harness import make_model, run_onnxtrain

    inputs = make_inputs("LSTM")
    inputs["W"] = inputs["W"][:, :-1]
    model = make_model("LSTM", inputs, {"hidden_size": 3}, n_outputs=3, opset=14)
    with pytest.raises(onnxtrain.Error if hasattr(onnxtrain, "Error") else Exception, match="W"):
        run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None})


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("seq,batch", [(0, 3), (4, 0)])
def test_empty_sequence_or_batch(cell, seq, batch):
    inputs = make_inputs(cell, seq=seq, batch=batch, initial=True)
    run_case(cell, inputs, {}, reference="numpy")


@pytest.mark.parametrize(
    "attrs,match",
    [
        ({"direction": "sideways"}, "direction"),
        ({"activations": ["Tanh", "Nope"]}, "activation"),
        ({"activations": ["Tanh"]}, "activations has 1"),
        ({"layout": 2}, "layout"),
        ({"clip": -1.0}, "clip"),
        ({"hidden_size": 4}, "W"),
        ({"direction": "bidirectional"}, "W"),
    ],
)
def test_bad_attributes_are_errors(attrs, match):
    from op_harness import make_model, run_onnxtrain

    inputs = make_inputs("GRU")
    model = make_model("GRU", inputs, {"hidden_size": 3, **attrs}, n_outputs=2, opset=14)
    with pytest.raises(Exception, match=match):
        run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None})


def test_bad_sequence_lens_is_an_error():
    from op_harness import make_model, run_onnxtrain

    inputs = make_inputs("RNN", lens=[1, 9, 2])
    model = make_model("RNN", inputs, {"hidden_size": 3}, n_outputs=2, opset=14)
    with pytest.raises(Exception, match="sequence_lens"):
        run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None})


@pytest.mark.parametrize("cell", CELLS)
def test_gradient_op_checks_its_output_gradients(cell):
    # org.onnxtrain::{cell}Grad fed a dY of the wrong shape: an error naming it, no crash.
    from op_harness import run_onnxtrain
    import onnx
    from onnx import helper

    inputs = make_inputs(cell, initial=True)
    hidden = inputs["R"].shape[-1]
    names = list(inputs) + ([""] * (8 - len(inputs)) if cell == "LSTM" else [""] * (6 - len(inputs)))
    names = [n if n in inputs and inputs[n] is not None else "" for n in names] + ["dY"]
    node = helper.make_node(f"{cell}Grad", names, ["dX"], domain="org.onnxtrain", hidden_size=hidden)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    feeds["dY"] = np.ones((2, 2, 2, 2), np.float32)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                      for k, v in feeds.items()], [helper.make_empty_tensor_value_info("dX")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("org.onnxtrain", 1)],
                              ir_version=8)
    with pytest.raises(Exception, match="dY"):
        run_onnxtrain(model, feeds)


@pytest.mark.parametrize("cell", CELLS)
def test_bidirectional_large_enough_to_run_directions_side_by_side(cell):
    # Work enough that the two directions run on two threads (when the session has two).
    inputs = make_inputs(cell, seq=16, batch=8, input_size=32, hidden=64, directions=2, initial=True,
                         lens=[16, 3, 0, 9, 16, 1, 12, 5], scale=0.2)
    run_case(cell, inputs, {"direction": "bidirectional"}, reference="numpy", tol=dict(rtol=1e-4, atol=1e-5))


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("batch", [3, 4, 16, 17, 40])
def test_batches_around_the_streamed_product_limit(cell, batch):
    # From 4 to 16 rows a step's product streams packed weights; otherwise sgemm.
    inputs = make_inputs(cell, seq=4, batch=batch, input_size=6, hidden=20, initial=True, scale=0.3)
    attrs = {"linear_before_reset": 0} if cell == "GRU" else {}
    run_case(cell, inputs, attrs)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("batch", [2, 8, 20])
def test_constant_weights(cell, lbr, batch):
    # R an initializer: the kernel packs it once when it is created (float32, 4 to 16 rows).
    if cell != "GRU" and lbr:
        pytest.skip("linear_before_reset is GRU's")
    inputs = make_inputs(cell, batch=batch, directions=2, initial=True, lens=None)
    attrs = {"hidden_size": inputs["R"].shape[-1], "direction": "bidirectional"}
    if cell == "GRU":
        attrs["linear_before_reset"] = lbr
    check_op(cell, inputs, attrs, n_outputs=3 if cell == "LSTM" else 2, opset=14, constants=["W", "R", "B"], **F32)


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_batch_split_into_row_ranges_on_threads(cell, direction):
    # Work enough (over 2 x kPartFlops in recurrent.h) that a session with two threads splits
    # the batch into row ranges run side by side; an odd batch splits unevenly, and rows of
    # other lengths (0 included) end at other steps.
    lens = [20, 3, 0, 9, 20, 1, 12, 5, 20, 7, 20, 2, 11, 20, 4, 16, 19]
    inputs = make_inputs(cell, seq=20, batch=17, input_size=24, hidden=160, initial=True, lens=lens, scale=0.1)
    attrs = {"linear_before_reset": 1} if cell == "GRU" else {}
    # numpy: for a row of length 0 onnxruntime zeroes Y_h, the spec (and onnxtrain) keep initial_h.
    run_case(cell, inputs, {"direction": direction, **attrs}, reference="numpy", tol=dict(rtol=1e-4, atol=1e-5))
    # And against onnxruntime where no row is empty.
    inputs["sequence_lens"] = np.maximum(inputs["sequence_lens"], 1)
    run_case(cell, inputs, {"direction": direction, **attrs})
