"""Gradient rules of RNN, GRU and LSTM (org.onnxtrain::{RNN,GRU,LSTM}Grad, backpropagation
through time): central differences in float64 (gradcheck.py, rtol / atol 1e-6) over every
direction, sequence_lens (zeros and short rows), clip, activations with parameters,
peepholes, input_forget, linear_before_reset and layout 1; and torch.autograd through
nn.RNN / nn.GRU / nn.LSTM (float64, rtol 1e-12), their weights mapped to ONNX's gate orders
(LSTM iofc from torch's ifgo, GRU zrh from torch's rzn; torch's GRU is
linear_before_reset=1).

The gradient ops have no standard-ONNX body, so the gradient graphs run on onnxtrain only;
the finite differences run the float64 forward on onnxtrain too (onnxruntime 1.23 has no
float64 RNN, GRU or LSTM, onnx.reference ignores clip and sequence_lens); that forward is
checked against onnxruntime and the spec in tests/python/ops/test_recurrent.py."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import F, GradCase, V, check_or_skip, gradient_params, make_session

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def case(
    cell: str,
    label: str,
    *,
    direction: str = "forward",
    seq: int = 3,
    batch: int = 2,
    input_size: int = 3,
    hidden: int = 2,
    lens: list[int] | None = None,
    layout: int = 0,
    bias: bool = True,
    initial: bool = True,
    peepholes: bool = False,
    attrs: dict | None = None,
    seed_outputs: list[int] | None = None,
) -> GradCase:
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[cell]
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    inputs = {
        "X": F(seq, batch, input_size) if layout == 0 else F(batch, seq, input_size),
        "W": F(dirs, g * hidden, input_size),
        "R": F(dirs, g * hidden, hidden),
        "B" if bias else "_B": F(dirs, 2 * g * hidden),
        "sequence_lens" if lens is not None else "_sequence_lens": V(np.array(lens or [], np.int32)),
        "initial_h" if initial else "_initial_h": F(*state),
    }
    if cell == "LSTM":
        inputs["initial_c" if initial else "_initial_c"] = F(*state)
        inputs["P" if peepholes else "_P"] = F(dirs, 3 * hidden)
    return GradCase(
        id=f"{cell}-{label}",
        op=cell,
        inputs=inputs,
        attrs={"hidden_size": hidden, "direction": direction, **({"layout": 1} if layout else {}), **(attrs or {})},
        n_outputs=3 if cell == "LSTM" else 2,
        opset=14,
        runtimes=("onnxtrain",),
        forward_runtime="onnxtrain",
        seed_outputs=seed_outputs,
    )


CASES = []
for cell in ("RNN", "GRU", "LSTM"):
    for direction in ("forward", "reverse", "bidirectional"):
        CASES.append(case(cell, direction, direction=direction))
        CASES.append(case(cell, f"{direction}-lens", direction=direction, lens=[3, 1], seq=3, batch=2))
    CASES += [
        case(cell, "lens-with-zero", direction="bidirectional", lens=[0, 2, 3], batch=3),
        case(cell, "no-bias-no-initial", bias=False, initial=False),
        case(cell, "layout1", direction="bidirectional", layout=1, lens=[2, 3]),
        case(cell, "batch1", batch=1, seq=4),
        case(cell, "only-Y", direction="bidirectional", seed_outputs=[0]),
        case(cell, "only-Y_h", direction="reverse", seed_outputs=[1]),
        case(cell, "clip", attrs={"clip": 1.7}),
    ]
CASES += [
    case("RNN", "softsign-affine", direction="bidirectional",
         attrs={"activations": ["Softsign", "Affine"], "activation_alpha": [0.8], "activation_beta": [0.3]}),
    case("RNN", "scaledtanh", attrs={"activations": ["ScaledTanh"], "activation_alpha": [1.2],
                                     "activation_beta": [0.7]}),
    case("GRU", "linear-before-reset", direction="bidirectional", attrs={"linear_before_reset": 1}, lens=[2, 3]),
    case("GRU", "softplus-elu", attrs={"activations": ["Softplus", "Elu"], "activation_alpha": [1.0]}),
    case("LSTM", "peepholes", direction="bidirectional", peepholes=True, lens=[3, 2]),
    case("LSTM", "input-forget", direction="reverse", peepholes=True, attrs={"input_forget": 1}),
    case("LSTM", "only-Y_c", peepholes=True, seed_outputs=[2]),
    case("LSTM", "scaledtanh-softsign", peepholes=True,
         attrs={"activations": ["Sigmoid", "ScaledTanh", "Softsign"], "activation_alpha": [1.1],
                "activation_beta": [0.9]}),
]


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(CASES))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
@pytest.mark.parametrize("batch", [3, 8, 20])
def test_float32_gradients_match_float64(cell: str, batch: int) -> None:
    # float32 products (WeightStream for 4 to 16 rows, sgemm otherwise) against the float64 gradients.
    rng = np.random.default_rng(3)
    seq, inp, hidden = 4, 5, 4
    g = 4 if cell == "LSTM" else 3
    values = {
        "X": rng.standard_normal((seq, batch, inp)),
        "W": rng.standard_normal((1, g * hidden, inp)) * 0.5,
        "R": rng.standard_normal((1, g * hidden, hidden)) * 0.5,
    }
    grads = {}
    for dtype, np_type in ((TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT, np.float32)):
        node = helper.make_node(cell, ["X", "W", "R"], ["Y"], hidden_size=hidden)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, dtype, v.shape) for k, v in values.items()],
                                  [helper.make_tensor_value_info("Y", dtype, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
        grad_model = onnxtrain.build_gradient_graph(model, ["X", "W", "R"], outputs=["Y"])
        feeds = {k: v.astype(np_type) for k, v in values.items()}
        feeds["Y_grad"] = np.ones((seq, 1, batch, hidden), np_type)
        outs = make_session(grad_model, "onnxtrain")(feeds)
        grads[np_type] = dict(zip([o.name for o in grad_model.graph.output], outs))
    for name in ("X_grad", "W_grad", "R_grad"):
        assert grads[np.float32][name].dtype == np.float32
        np.testing.assert_allclose(grads[np.float32][name], grads[np.float64][name], rtol=1e-4, atol=1e-5)


# ---- torch.autograd ----


def torch_to_onnx_gates(cell: str, w: np.ndarray) -> np.ndarray:
    """torch's gate blocks (LSTM i f g o, GRU r z n) in ONNX's order (i o f c, z r h)."""
    blocks = np.split(w, GATES[cell], axis=0)
    if cell == "LSTM":
        return np.concatenate([blocks[0], blocks[3], blocks[1], blocks[2]], axis=0)
    if cell == "GRU":
        return np.concatenate([blocks[1], blocks[0], blocks[2]], axis=0)
    return w


@pytest.mark.parametrize("cell", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("with_lens", [False, True])
@pytest.mark.parametrize("large", [False, True])
def test_matches_torch(cell: str, bidirectional: bool, batch_first: bool, with_lens: bool, large: bool) -> None:
    # `large`: enough work that a bidirectional net's directions run on two threads.
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    seq, batch, inp, hidden = (16, 8, 32, 64) if large else (5, 3, 4, 3)
    dirs = 2 if bidirectional else 1
    module = getattr(torch.nn, cell)(inp, hidden, batch_first=batch_first, bidirectional=bidirectional).double()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, seq, inp) if batch_first else (seq, batch, inp))
    h0 = rng.standard_normal((dirs, batch, hidden))
    c0 = rng.standard_normal((dirs, batch, hidden))
    lens = np.array([seq, 2, 4, 7, 1, seq, 9, 3][:batch], np.int32) if with_lens else np.full(batch, seq, np.int32)

    suffixes = [""] + (["_reverse"] if bidirectional else [])
    param = lambda name: np.stack([getattr(module, f"{name}_l0{s}").detach().numpy() for s in suffixes])  # noqa: E731
    W = np.stack([torch_to_onnx_gates(cell, w) for w in param("weight_ih")])
    R = np.stack([torch_to_onnx_gates(cell, w) for w in param("weight_hh")])
    B = np.concatenate([np.stack([torch_to_onnx_gates(cell, b) for b in param("bias_ih")]),
                        np.stack([torch_to_onnx_gates(cell, b) for b in param("bias_hh")])], axis=1)
    layout = 1 if batch_first else 0
    state = lambda s: s.transpose(1, 0, 2) if batch_first else s  # noqa: E731
    values = {"X": x, "W": W, "R": R, "B": B, "sequence_lens": lens, "initial_h": state(h0)}
    if cell == "LSTM":
        values["initial_c"] = state(c0)
    attrs = {"hidden_size": hidden, "layout": layout, "direction": "bidirectional" if bidirectional else "forward"}
    if cell == "GRU":
        attrs["linear_before_reset"] = 1
    outputs = ["Y", "Y_h"] + (["Y_c"] if cell == "LSTM" else [])
    node = helper.make_node(cell, list(values), outputs, **attrs)
    graph_inputs = [helper.make_tensor_value_info(k, TensorProto.INT32 if k == "sequence_lens" else TensorProto.DOUBLE,
                                                  v.shape) for k, v in values.items()]
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info(o, TensorProto.DOUBLE, None)
                                                          for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    wrt = [k for k in values if k != "sequence_lens"]
    grad_model = onnxtrain.build_gradient_graph(model, wrt, outputs=outputs)

    y_shape = (batch, seq, dirs, hidden) if batch_first else (seq, dirs, batch, hidden)
    seeds = {"Y": rng.standard_normal(y_shape), "Y_h": state(rng.standard_normal((dirs, batch, hidden))),
             "Y_c": state(rng.standard_normal((dirs, batch, hidden)))}
    feeds = dict(values)
    for o in outputs:
        feeds[f"{o}_grad"] = seeds[o]
    ours = dict(zip([o.name for o in grad_model.graph.output], make_session(grad_model, "onnxtrain")(feeds)))

    xt = torch.tensor(x, requires_grad=True)
    h0t = torch.tensor(h0, requires_grad=True)
    c0t = torch.tensor(c0, requires_grad=True)
    state_in = (h0t, c0t) if cell == "LSTM" else h0t
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(lens, dtype=torch.int64), batch_first=batch_first,
                                                     enforce_sorted=False)
    out, state_out = module(packed, state_in)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first, total_length=seq)
    hn, cn = state_out if cell == "LSTM" else (state_out, None)
    if batch_first:
        y4 = y.reshape(batch, seq, dirs, hidden)
    else:
        y4 = y.reshape(seq, batch, dirs, hidden).permute(0, 2, 1, 3)
    loss = (y4 * torch.tensor(seeds["Y"])).sum()
    to_state = lambda s: torch.tensor(s.transpose(1, 0, 2) if batch_first else s)  # noqa: E731
    loss = loss + (hn * to_state(seeds["Y_h"])).sum()
    if cn is not None:
        loss = loss + (cn * to_state(seeds["Y_c"])).sum()
    loss.backward()

    tol = dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ours["Y"], y4.detach().numpy(), **tol)
    np.testing.assert_allclose(ours["X_grad"], xt.grad.numpy(), **tol)
    np.testing.assert_allclose(ours["initial_h_grad"], state(h0t.grad.numpy()), **tol)
    if cell == "LSTM":
        np.testing.assert_allclose(ours["initial_c_grad"], state(c0t.grad.numpy()), **tol)
    grads = {"W": "weight_ih", "R": "weight_hh"}
    for onnx_name, torch_name in grads.items():
        expected = np.stack([torch_to_onnx_gates(cell, getattr(module, f"{torch_name}_l0{s}").grad.numpy())
                             for s in suffixes])
        np.testing.assert_allclose(ours[f"{onnx_name}_grad"], expected, **tol)
    expected_b = np.concatenate(
        [np.stack([torch_to_onnx_gates(cell, getattr(module, f"bias_{k}_l0{s}").grad.numpy()) for s in suffixes])
         for k in ("ih", "hh")], axis=1)
    np.testing.assert_allclose(ours["B_grad"], expected_b, **tol)
