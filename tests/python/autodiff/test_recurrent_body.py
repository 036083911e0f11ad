"""The standard-ONNX bodies of org.onnxtrain::{RNN,GRU,LSTM}Grad (src/autodiff/recurrent_body.h):
a gradient graph of RNN, GRU or LSTM calls a model-local function named for its configuration
("LSTMGrad_<16 hex digits>") whose body is the forward spelled out in Scans and differentiated.

Every case builds the gradient graph with onnxtrain, checks it with onnx.checker (full_check),
runs it in stock onnxruntime (which inlines the body) and in onnxtrain (which must run the
{RNN,GRU,LSTM}Grad kernel: the model as the session runs it, saved through
SessionOptions.optimized_model_filepath, holds that node and no Scan, and the forward turned
into {RNN,GRU,LSTM}Training hands it its record), and compares every
gradient: float64 within rtol 1e-9 / atol 1e-11, float32 within rtol 1e-5 / atol 1e-5.

onnxruntime 1.23 has no float64 RNN, GRU or LSTM kernel, and its MatMul + Transpose fusion
makes a float-only com.microsoft FusedMatMul; so in float64 onnxruntime runs the gradient
node alone (the forward node dropped: the gradient reads only the forward's inputs) at
ORT_ENABLE_BASIC. So it does in float32 where onnxruntime's forward cannot run: a row of
length 0, layout 1 (unsupported there)."""

from __future__ import annotations

import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxtrain

ort = pytest.importorskip("onnxruntime")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
TOLERANCE = {np.float64: (1e-9, 1e-11), np.float32: (1e-5, 1e-5)}


@dataclass
class Case:
    id: str
    cell: str
    direction: str = "forward"
    layout: int = 0
    bias: bool = True
    lens: list[int] | None = None
    initial: bool = True
    peepholes: bool = False
    attrs: dict = field(default_factory=dict)
    seeded: tuple[int, ...] | None = None  # the outputs that get an incoming gradient; all by default
    seq: int = 4
    batch: int = 3
    input_size: int = 3
    hidden: int = 2
    scale: float = 1.0  # of the random inputs (larger: clip and thresholds bite)
    opset: int = 17
    dynamic: bool = False  # the sequence and batch axes declared by name, not size

    @property
    def outputs(self) -> list[str]:
        return ["Y", "Y_h", "Y_c"][: 3 if self.cell == "LSTM" else 2]


def build(case: Case, dtype: type) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The forward model (every present input a graph input) and random feeds for it."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    dirs = 2 if case.direction == "bidirectional" else 1
    g, h = GATES[case.cell], case.hidden
    # The shapes as sizes (for the feeds) and as the model declares them.
    sizes, declared = {}, {}
    for n, s, into in [(case.batch, case.seq, sizes), ("batch", "seq", declared) if case.dynamic
                       else (case.batch, case.seq, declared)]:
        state = [dirs, n, h] if case.layout == 0 else [n, dirs, h]
        into |= {
            "X": [s, n, case.input_size] if case.layout == 0 else [n, s, case.input_size],
            "W": [dirs, g * h, case.input_size],
            "R": [dirs, g * h, h],
            "B": [dirs, 2 * g * h],
            "sequence_lens": [n],
            "initial_h": state,
            "initial_c": state,
            "P": [dirs, 3 * h],
            "Y": [s, dirs, n, h] if case.layout == 0 else [n, s, dirs, h],
            "Y_h": state,
            "Y_c": state,
        }
    present = {"X", "W", "R"}
    present |= {"B"} if case.bias else set()
    present |= {"sequence_lens"} if case.lens is not None else set()
    present |= {"initial_h", "initial_c"} if case.initial else set()
    present |= {"P"} if case.peepholes else set()
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][: 8 if case.cell == "LSTM" else 6]
    inputs = [name if name in present else "" for name in order]
    while inputs[-1] == "":
        inputs.pop()
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    feeds = {
        name: (rng.standard_normal(sizes[name]) * case.scale).astype(dtype)
        for name in inputs if name not in ("", "sequence_lens")
    }
    graph_inputs = [
        helper.make_tensor_value_info(name, onnx.TensorProto.INT32 if name == "sequence_lens" else elem, declared[name])
        for name in inputs if name
    ]
    if case.lens is not None:
        feeds["sequence_lens"] = np.array(case.lens, np.int32)
    outputs = [helper.make_tensor_value_info(name, elem, declared[name]) for name in case.outputs]
    attrs = {"hidden_size": h, "direction": case.direction, **({"layout": 1} if case.layout else {}), **case.attrs}
    node = helper.make_node(case.cell, inputs, case.outputs, name=f"{case.cell.lower()}0", **attrs)
    model = helper.make_model(
        helper.make_graph([node], case.id, graph_inputs, outputs),
        opset_imports=[helper.make_opsetid("", case.opset)],
        ir_version=8,
    )
    return model, feeds


def gradient_of(case: Case, dtype: type) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    model, feeds = build(case, dtype)
    seeded = [case.outputs[k] for k in (case.seeded or range(len(case.outputs)))]
    wrt = [i.name for i in model.graph.input if i.name != "sequence_lens"]
    gradient = onnxtrain.build_gradient_graph(model, wrt, outputs=seeded)
    rng = np.random.default_rng(7)
    sizes = {"seq": case.seq, "batch": case.batch}
    for name in seeded:
        dims = next(o for o in model.graph.output if o.name == name).type.tensor_type.shape.dim
        shape = [sizes.get(d.dim_param, d.dim_value) for d in dims]
        feeds[name + "_grad"] = rng.standard_normal(shape).astype(dtype)
    return gradient, feeds


def gradient_node_alone(gradient: onnx.ModelProto, cell: str) -> onnx.ModelProto:
    """The gradient model without the forward node and its outputs."""
    alone = onnx.ModelProto.FromString(gradient.SerializeToString())
    forward = [n for n in alone.graph.node if n.op_type == cell and n.domain == ""]
    for n in forward:
        alone.graph.node.remove(n)
    kept = [o for o in alone.graph.output if o.name.endswith("_grad")]
    del alone.graph.output[:]
    alone.graph.output.extend(kept)
    return alone


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], level) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    values = session.run(None, {k: v for k, v in feeds.items() if k in names})
    return {o.name: v for o, v in zip(session.get_outputs(), values)}


def run_onnxtrain(model: onnx.ModelProto, feeds: dict[str, np.ndarray], saved: Path) -> dict[str, np.ndarray]:
    options = onnxtrain.SessionOptions()
    options.optimized_model_filepath = str(saved)
    session = onnxtrain.InferenceSession(model.SerializeToString(), options)
    values = session.run(None, feeds)
    return {o.name: np.asarray(v) for o, v in zip(model.graph.output, values)}


def check(case: Case, dtype: type, tmp_path: Path) -> None:
    gradient, feeds = gradient_of(case, dtype)
    onnx.checker.check_model(gradient, full_check=True)
    calls = [n for n in gradient.graph.node if n.domain == "org.onnxtrain" and n.op_type.startswith(case.cell + "Grad")]
    assert len(calls) == 1 and re.fullmatch(case.cell + r"Grad_[0-9a-f]{16}", calls[0].op_type), calls
    assert calls[0].op_type in {f.name for f in gradient.functions}

    saved = tmp_path / "as_run.onnx"
    ours = run_onnxtrain(gradient, feeds, saved)
    as_run = onnx.load(saved)
    ops = [n.op_type for n in as_run.graph.node]
    assert case.cell + "Grad" in ops and "Scan" not in ops and calls[0].op_type not in ops, ops
    # The forward hands the gradient its record (passes/share_recurrent_record.h).
    assert case.cell + "Training" in ops and len(as_run.graph.node[ops.index(case.cell + "Grad")].input) > len(
        calls[0].input
    ), ops

    whole = dtype == np.float32 and 0 not in (case.lens or []) and case.layout == 0
    if whole:
        theirs = run_onnxruntime(gradient, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    else:
        theirs = run_onnxruntime(
            gradient_node_alone(gradient, case.cell), feeds, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        )
    rtol, atol = TOLERANCE[dtype]
    grads = [o.name for o in gradient.graph.output if o.name.endswith("_grad")]
    assert len(grads) == len([i for i in gradient.graph.input if i.name in ("X", "W", "R", "B", "P")
                              or i.name.startswith("initial_")])
    for name in grads:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=rtol, atol=atol, err_msg=f"{case.id}: {name}")


def cases() -> list[Case]:
    out: list[Case] = []
    for cell in ("RNN", "GRU", "LSTM"):
        for direction in ("forward", "reverse", "bidirectional"):
            out.append(Case(f"{cell}-{direction}", cell, direction))
            out.append(Case(f"{cell}-{direction}-lens", cell, direction, lens=[4, 0, 2]))
        out += [
            Case(f"{cell}-layout1", cell, "bidirectional", layout=1, lens=[3, 4, 1]),
            Case(f"{cell}-layout1-no-initial", cell, "reverse", layout=1, initial=False),
            Case(f"{cell}-no-bias-no-initial", cell, "bidirectional", bias=False, initial=False, lens=[2, 4, 1]),
            Case(f"{cell}-only-Y_h", cell, "bidirectional", seeded=(1,), lens=[1, 3, 4]),
            Case(f"{cell}-only-Y", cell, "reverse", seeded=(0,)),
            Case(f"{cell}-clip", cell, "bidirectional", attrs={"clip": 0.7}, scale=2.0, lens=[4, 2, 3]),
            Case(f"{cell}-batch1-seq1", cell, "forward", batch=1, seq=1),
        ]
    out += [
        Case("RNN-relu", "RNN", "bidirectional", attrs={"activations": ["Relu", "Relu"]}, lens=[4, 0, 3]),
        Case("GRU-hardsigmoid-relu", "GRU", "bidirectional", lens=[4, 1, 0],
             attrs={"activations": ["HardSigmoid", "Relu", "Sigmoid", "Tanh"],
                    "activation_alpha": [0.3], "activation_beta": [0.4]}),
        Case("LSTM-hardsigmoid-relu", "LSTM", "forward", scale=1.5,
             attrs={"activations": ["HardSigmoid", "Relu", "Tanh"], "activation_alpha": [0.25],
                    "activation_beta": [0.45]}),
        Case("LSTM-per-direction-activations", "LSTM", "bidirectional", lens=[3, 4, 2],
             attrs={"activations": ["HardSigmoid", "Tanh", "Softsign", "Sigmoid", "LeakyRelu", "Elu"],
                    "activation_alpha": [0.3, 0.05, 0.8], "activation_beta": [0.5]}),
        Case("GRU-linear-before-reset-forward", "GRU", "forward", attrs={"linear_before_reset": 1}),
        Case("GRU-linear-before-reset-reverse", "GRU", "reverse", attrs={"linear_before_reset": 1}, lens=[2, 4, 0]),
        Case("GRU-linear-before-reset-bidirectional", "GRU", "bidirectional", layout=1, lens=[4, 3, 1],
             attrs={"linear_before_reset": 1}),
        Case("GRU-linear-before-reset-no-bias", "GRU", "bidirectional", bias=False, attrs={"linear_before_reset": 1}),
        Case("LSTM-peepholes", "LSTM", "bidirectional", peepholes=True, lens=[4, 0, 3]),
        Case("LSTM-peepholes-layout1", "LSTM", "forward", peepholes=True, layout=1, initial=False),
        Case("LSTM-input-forget", "LSTM", "bidirectional", attrs={"input_forget": 1}, lens=[1, 4, 2]),
        Case("LSTM-peepholes-input-forget-clip", "LSTM", "reverse", peepholes=True, scale=2.0,
             attrs={"input_forget": 1, "clip": 0.9}),
        # The lowest opset with bodies (their gradients' TanhGrad, SigmoidGrad... need CastLike).
        Case("RNN-opset15", "RNN", "bidirectional", lens=[4, 0, 3], opset=15),
        Case("GRU-opset15", "GRU", "reverse", lens=[2, 4, 1], attrs={"linear_before_reset": 1}, opset=15),
        Case("LSTM-opset15", "LSTM", "bidirectional", peepholes=True, lens=[4, 0, 3], opset=15),
        # The sequence and batch axes by name only.
        Case("RNN-dynamic", "RNN", "forward", bias=False, initial=False, dynamic=True),
        Case("GRU-dynamic", "GRU", "reverse", layout=1, attrs={"linear_before_reset": 1}, dynamic=True),
        Case("LSTM-dynamic", "LSTM", "bidirectional", peepholes=True, lens=[4, 1, 3], dynamic=True),
        Case("LSTM-only-Y_c", "LSTM", "bidirectional", seeded=(2,), peepholes=True, lens=[3, 1, 4]),
    ]
    # Every activation of the spec, with alpha and beta where it takes them.
    for name, alpha, beta in [("Affine", 0.7, 0.2), ("LeakyRelu", 0.1, None), ("ThresholdedRelu", 0.3, None),
                              ("ScaledTanh", 1.3, 0.6), ("HardSigmoid", 0.3, 0.4), ("Elu", 0.9, None),
                              ("Softsign", None, None), ("Softplus", None, None)]:
        attrs: dict = {"activations": [name]}
        if alpha is not None:
            attrs["activation_alpha"] = [alpha]
        if beta is not None:
            attrs["activation_beta"] = [beta]
        out.append(Case(f"RNN-{name}", "RNN", "forward", attrs=attrs, lens=[4, 2, 3], scale=1.5))
    return out


CASES = cases()


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_body_matches_kernel(case: Case, dtype: type, tmp_path: Path) -> None:
    check(case, dtype, tmp_path)


@pytest.mark.parametrize("cell", ["RNN", "GRU", "LSTM"])
def test_opset_14_keeps_the_kernel_op_without_a_body(cell: str) -> None:
    gradient, _ = gradient_of(Case("old", cell, "forward", opset=14), np.float32)
    ops = [(n.domain, n.op_type) for n in gradient.graph.node]
    assert ("org.onnxtrain", cell + "Grad") in ops, ops
    assert not any(f.name.startswith(cell + "Grad") for f in gradient.functions)


def test_one_function_per_configuration() -> None:
    """Two LSTMs of one configuration share a function; another configuration gets its own."""
    model, _ = build(Case("shared", "LSTM", "forward"), np.float32)
    node = model.graph.node[0]
    twin = onnx.NodeProto.FromString(node.SerializeToString())
    twin.name, twin.output[:] = "lstm1", ["Y1", "Y_h1", "Y_c1"]
    other = onnx.NodeProto.FromString(node.SerializeToString())
    other.name, other.output[:] = "lstm2", ["Y2", "Y_h2", "Y_c2"]
    other.attribute.append(helper.make_attribute("clip", 2.0))
    model.graph.node.extend([twin, other])
    for name in ("Y1", "Y_h1", "Y_c1", "Y2", "Y_h2", "Y_c2"):
        model.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    gradient = onnxtrain.build_gradient_graph(model, ["W"], outputs=["Y_h", "Y_h1", "Y_h2"])
    calls = [n.op_type for n in gradient.graph.node if n.domain == "org.onnxtrain" and "LSTMGrad" in n.op_type]
    assert len(calls) == 3 and sorted(Counter(calls).values()) == [1, 2], calls
    assert sorted(f.name for f in gradient.functions if f.name.startswith("LSTMGrad")) == sorted(set(calls))


def test_lstm_artifacts_train_one_step_in_onnxruntime(tmp_path: Path) -> None:
    """generate_artifacts' training and optimizer models of an LSTM run in stock onnxruntime,
    one AdamW step, as onnxtrain's Module and Optimizer run them (float32, rtol 1e-5)."""
    from onnxtrain.training import artifacts
    from onnxtrain.training.api import CheckpointState, Module, Optimizer
    from onnxtrain.training.onnxblock import optim

    rng = np.random.default_rng(3)
    s, n, i, h = 5, 3, 4, 6
    params = {
        "W": (rng.standard_normal((1, 4 * h, i)) * 0.3).astype(np.float32),
        "R": (rng.standard_normal((1, 4 * h, h)) * 0.3).astype(np.float32),
        "B": (rng.standard_normal((1, 8 * h)) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=h),
        helper.make_node("Squeeze", ["Y_h"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "lstm", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [s, n, i])],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [n, h])],
        [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folder = tmp_path / "artifacts"
    artifacts.generate_artifacts(model, requires_grad=list(params), loss=artifacts.LossType.MSELoss,
                                 optimizer=optim.AdamW(), artifact_directory=folder)
    training = onnx.load(folder / "training_model.onnx")
    assert any(n.op_type.startswith("LSTMGrad_") for n in training.graph.node)
    onnx.checker.check_model(training, full_check=True)
    x = rng.standard_normal((s, n, i)).astype(np.float32)
    target = rng.standard_normal((n, h)).astype(np.float32)
    lr = 0.01

    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    module = Module(folder / "training_model.onnx", state, folder / "eval_model.onnx")
    optimizer = Optimizer(folder / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(lr)
    our_loss = float(module(x, target))
    optimizer.step()
    ours = {k: np.asarray(state.parameters[k].data) for k in params}

    feeds = {"X": x, "target": target, **params, "lazy_reset_grad": np.array(True)}
    for k, v in params.items():
        feeds[f"{k}_grad.accumulation.buffer"] = np.zeros_like(v)
    trained = run_onnxruntime(training, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    optimizer_model = onnx.load(folder / "optimizer_model.onnx")
    step_feeds = {"learning_rate": np.array(lr, np.float32), "step": np.array(1, np.int64)}
    for k, v in params.items():
        step_feeds |= {k: v, f"{k}_grad": trained[f"{k}_grad.accumulation.out"],
                       f"{k}.exp_avg": np.zeros_like(v), f"{k}.exp_avg_sq": np.zeros_like(v)}
    stepped = run_onnxruntime(optimizer_model, step_feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    np.testing.assert_allclose(float(trained["loss"]), our_loss, rtol=1e-5)
    for k in params:
        assert not np.array_equal(stepped[f"{k}.out"], params[k])
        np.testing.assert_allclose(stepped[f"{k}.out"], ours[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_lstm_inside_a_loop() -> None:
    """An LSTM in a Loop's body: its gradient function is defined in the enclosing model, and
    the gradient graph runs the same in onnxruntime and onnxtrain (float32)."""
    s, n, i, h = 3, 2, 3, 2
    f32 = onnx.TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("LSTM", ["X", "W", "R"], ["", "Y_h"], hidden_size=h, direction="reverse"),
            helper.make_node("Add", ["acc_in", "Y_h"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", f32, [1, n, h]),
        ],
        [helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", f32, [1, n, h])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "cond", "acc0"], ["acc"], body=body)],
        "loop",
        [
            helper.make_tensor_value_info("X", f32, [s, n, i]),
            helper.make_tensor_value_info("W", f32, [1, 4 * h, i]),
            helper.make_tensor_value_info("R", f32, [1, 4 * h, h]),
            helper.make_tensor_value_info("trip", onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc0", f32, [1, n, h]),
        ],
        [helper.make_tensor_value_info("acc", f32, [1, n, h])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    gradient = onnxtrain.build_gradient_graph(model, ["X", "W", "R"], outputs=["acc"])
    assert any(f.name.startswith("LSTMGrad_") for f in gradient.functions)
    onnx.checker.check_model(gradient, full_check=True)
    rng = np.random.default_rng(11)
    feeds = {
        "X": rng.standard_normal((s, n, i)).astype(np.float32),
        "W": rng.standard_normal((1, 4 * h, i)).astype(np.float32),
        "R": rng.standard_normal((1, 4 * h, h)).astype(np.float32),
        "trip": np.array(2, np.int64),
        "cond": np.array(True),
        "acc0": np.zeros((1, n, h), np.float32),
        "acc_grad": rng.standard_normal((1, n, h)).astype(np.float32),
    }
    theirs = run_onnxruntime(gradient, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    ours = onnxtrain.InferenceSession(gradient.SerializeToString()).run(None, feeds)
    for output, value in zip(gradient.graph.output, ours):
        np.testing.assert_allclose(np.asarray(value), theirs[output.name], rtol=1e-5, atol=1e-5, err_msg=output.name)
