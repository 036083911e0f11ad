"""Gradient rules of Scan and Loop (rules/control.cc): the forward loop also saves the state
entering each iteration, and the backward is a loop of the same kind running the other way,
whose body is the gradient of the forward body.

Checked: central differences in float64 (gradcheck.py, rtol / atol 1e-6) with static and
symbolic shapes, on onnxtrain and (where it has the float64 kernels) onnxruntime; torch.autograd
running the same recurrences in float64 (rtol 1e-9) on onnxtrain and on onnxruntime without its
graph optimizations (its MatMul fusions have no float64 kernels); the gradient models in
float32 on onnxruntime against onnxtrain (1e-5); and the error for a body op without a
gradient rule."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxtrain

from .gradcheck import C, F, GradCase, check_or_skip, gradient_params, make_model, make_session

D = TensorProto.DOUBLE
RUNTIMES = ("onnxruntime", "onnxtrain")


def vi(name: str, shape=None, dtype: int = D):
    return helper.make_tensor_value_info(name, dtype, shape)


# --- Scan


def rnn_body(W: str, R: str, b: str):
    """An Elman RNN step with a second state, the running sum of h:
    h' = tanh(x_t W + h R + b), s' = s + h'; scan outputs h' and h' * s."""
    nodes = [
        helper.make_node("MatMul", ["rnn_x", W], ["rnn_xw"]),
        helper.make_node("MatMul", ["rnn_h", R], ["rnn_hr"]),
        helper.make_node("Add", ["rnn_xw", "rnn_hr"], ["rnn_pre"]),
        helper.make_node("Add", ["rnn_pre", b], ["rnn_pre_b"]),
        helper.make_node("Tanh", ["rnn_pre_b"], ["rnn_h2"]),
        helper.make_node("Add", ["rnn_s", "rnn_h2"], ["rnn_s2"]),
        helper.make_node("Mul", ["rnn_h2", "rnn_s"], ["rnn_hs"]),
        # onnxruntime 1.23 gives zeros for a Scan's final state when the body gives the same
        # value as a scan output too: a copy (the shared case is checked on onnxtrain below).
        helper.make_node("Identity", ["rnn_h2"], ["rnn_y"]),
    ]
    return helper.make_graph(
        nodes, "rnn", [vi("rnn_h"), vi("rnn_s"), vi("rnn_x")], [vi("rnn_h2"), vi("rnn_s2"), vi("rnn_y"), vi("rnn_hs")]
    )


def scan_rnn_nodes(input_direction: int, output_directions: tuple[int, int]):
    """x [batch, time, features] scanned along axis 1; h0, s0 [batch, hidden]; W, R, b read
    from the enclosing graph. Outputs: final h, final s, the h's stacked along axis 1, the
    h * s stacked along axis 0."""

    def nodes(inputs: list[str], outputs: list[str]):
        h0, s0, x, W, R, b = inputs
        return [
            helper.make_node(
                "Scan", [h0, s0, x], outputs, body=rnn_body(W, R, b), num_scan_inputs=1, scan_input_axes=[1],
                scan_input_directions=[input_direction], scan_output_axes=[1, 0],
                scan_output_directions=list(output_directions),
            )
        ]

    return nodes


def cumsum_nodes(shared: bool):
    """acc' = acc + x_t, scan output acc' (the state output itself where `shared`, else a
    copy): a cumulative sum, whose final value is scaled by a weight outside the Scan."""

    def nodes(inputs: list[str], outputs: list[str]):
        return _cumsum_nodes(inputs, outputs, shared)

    return nodes


def _cumsum_nodes(inputs: list[str], outputs: list[str], shared: bool):
    acc0, x, w = inputs
    copy = [] if shared else [helper.make_node("Identity", ["cs_acc2"], ["cs_y"])]
    body = helper.make_graph(
        [helper.make_node("Add", ["cs_acc", "cs_x"], ["cs_acc2"]), *copy], "cumsum", [vi("cs_acc"), vi("cs_x")],
        [vi("cs_acc2"), vi("cs_acc2" if shared else "cs_y")],
    )
    return [
        helper.make_node("Scan", [acc0, x], ["cs_final", "cs_all"], body=body, num_scan_inputs=1),
        helper.make_node("Mul", ["cs_final", w], [outputs[0]]),
        helper.make_node("Identity", ["cs_all"], [outputs[1]]),
    ]


def scan_with_loop_nodes(inputs: list[str], outputs: list[str]):
    """A Scan whose body runs a Loop: for each x_t, h' = tanh(h W + x_t) twice."""
    h0, x, W = inputs
    inner = helper.make_graph(
        [
            helper.make_node("MatMul", ["in_h", W], ["in_hw"]),
            helper.make_node("Add", ["in_hw", "ns_x"], ["in_pre"]),
            helper.make_node("Tanh", ["in_pre"], ["in_h2"]),
            helper.make_node("Identity", ["in_c"], ["in_c2"]),
        ],
        "inner", [vi("in_i", [], TensorProto.INT64), vi("in_c", [], TensorProto.BOOL), vi("in_h")],
        [vi("in_c2", [], TensorProto.BOOL), vi("in_h2")],
    )
    body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["ns_two"], value=helper.make_tensor("t", TensorProto.INT64, [], [2])),
            helper.make_node("Loop", ["ns_two", "", "ns_h"], ["ns_h2"], body=inner),
            helper.make_node("Identity", ["ns_h2"], ["ns_y"]),
        ],
        # onnxruntime's Scan needs its body's output shapes, which it does not infer through a Loop.
        "outer", [vi("ns_h"), vi("ns_x")], [vi("ns_h2", [2, 3]), vi("ns_y", [2, 3])],
    )
    return [helper.make_node("Scan", [h0, x], outputs, body=body, num_scan_inputs=1)]


def rnn_inputs():
    return {"h0": F(2, 3), "s0": F(2, 3), "x": F(2, 4, 2), "W": F(2, 3), "R": F(3, 3, low=-0.5, high=0.5), "b": F(3)}


SCAN = [
    GradCase(id=f"Scan-rnn-in{d}-out{o[0]}{o[1]}", op="Scan", inputs=rnn_inputs(), nodes=scan_rnn_nodes(d, o),
             n_outputs=4, runtimes=RUNTIMES)
    for d, o in ((0, (0, 0)), (1, (0, 1)), (1, (1, 0)))
] + [
    GradCase(id="Scan-cumsum", op="Scan", inputs={"acc0": F(3), "x": F(5, 3), "w": F(3)}, nodes=cumsum_nodes(False),
             n_outputs=2, runtimes=RUNTIMES),
    # One body value as the state and the scan output (onnxruntime runs that forward wrong).
    GradCase(id="Scan-cumsum-shared-output", op="Scan", inputs={"acc0": F(3), "x": F(5, 3), "w": F(3)},
             nodes=cumsum_nodes(True), n_outputs=2, runtimes=("onnxtrain",), forward_runtime="onnxtrain"),
    GradCase(id="Scan-with-Loop-inside", op="Scan", inputs={"h0": F(2, 3), "x": F(3, 2, 3), "W": F(3, 3)},
             nodes=scan_with_loop_nodes, n_outputs=2, runtimes=RUNTIMES),
    # Only the final state reaches the outputs: the scan outputs get no incoming gradient.
    GradCase(id="Scan-rnn-final-state-only", op="Scan", inputs=rnn_inputs(), nodes=scan_rnn_nodes(0, (0, 0)),
             n_outputs=4, seed_outputs=[0], runtimes=RUNTIMES),
    # Only a scan output: the final states' gradients are zeros.
    GradCase(id="Scan-rnn-scan-output-only", op="Scan", inputs=rnn_inputs(), nodes=scan_rnn_nodes(1, (1, 0)),
             n_outputs=4, seed_outputs=[3], runtimes=RUNTIMES),
]


# --- Loop


def loop_graph(name: str, nodes, inputs, outputs):
    return helper.make_graph(nodes, name, inputs, outputs)


def loop_matmul_nodes(inputs: list[str], outputs: list[str]):
    """Three iterations of v' = tanh(v W), W read from the enclosing graph."""
    v0, W, M, cond = inputs
    body = loop_graph(
        "mm",
        [
            helper.make_node("MatMul", ["mm_v", W], ["mm_vw"]),
            helper.make_node("Tanh", ["mm_vw"], ["mm_v2"]),
            helper.make_node("Identity", ["mm_c"], ["mm_c2"]),
        ],
        [vi("mm_i", [], TensorProto.INT64), vi("mm_c", [], TensorProto.BOOL), vi("mm_v")],
        [vi("mm_c2", [], TensorProto.BOOL), vi("mm_v2")],
    )
    return [helper.make_node("Loop", [M, cond, v0], outputs, body=body)]


def loop_scan_output_nodes(inputs: list[str], outputs: list[str]):
    """v' = tanh(v W + x[i]) (x read at the iteration number), u' = u * v'; scan outputs sin(v')
    and v' (the carried value itself)."""
    v0, u0, x, W, M, cond = inputs
    body = loop_graph(
        "so",
        [
            helper.make_node("MatMul", ["so_v", W], ["so_vw"]),
            helper.make_node("Gather", [x, "so_i"], ["so_xi"], axis=0),
            helper.make_node("Add", ["so_vw", "so_xi"], ["so_pre"]),
            helper.make_node("Tanh", ["so_pre"], ["so_v2"]),
            helper.make_node("Mul", ["so_u", "so_v2"], ["so_u2"]),
            helper.make_node("Sin", ["so_v2"], ["so_sin"]),
            helper.make_node("Identity", ["so_c"], ["so_c2"]),
        ],
        [vi("so_i", [], TensorProto.INT64), vi("so_c", [], TensorProto.BOOL), vi("so_v"), vi("so_u")],
        [vi("so_c2", [], TensorProto.BOOL), vi("so_v2"), vi("so_u2"), vi("so_sin"), vi("so_v2")],
    )
    return [helper.make_node("Loop", [M, cond, v0, u0], outputs, body=body)]


def loop_early_exit_nodes(inputs: list[str], outputs: list[str]):
    """No trip count: v' = 1.5 v + tanh(v W), k' = k + 1 (an integer counter), while
    max|v'| < 4; the loop's length depends on the data. Scan output v' * a."""
    v0, W, a, limit, k0, cond = inputs
    body = loop_graph(
        "ee",
        [
            helper.make_node("MatMul", ["ee_v", W], ["ee_vw"]),
            helper.make_node("Tanh", ["ee_vw"], ["ee_t"]),
            helper.make_node("Constant", [], ["ee_three_halves"], value=helper.make_tensor("c", D, [], [1.5])),
            helper.make_node("Mul", ["ee_v", "ee_three_halves"], ["ee_v15"]),
            helper.make_node("Add", ["ee_v15", "ee_t"], ["ee_v2"]),
            helper.make_node("Abs", ["ee_v2"], ["ee_abs"]),
            helper.make_node("ReduceMax", ["ee_abs"], ["ee_max"], keepdims=0),
            helper.make_node("Less", ["ee_max", limit], ["ee_c2"]),
            helper.make_node("Constant", [], ["ee_one"], value=helper.make_tensor("o", TensorProto.INT64, [], [1])),
            helper.make_node("Add", ["ee_k", "ee_one"], ["ee_k2"]),
            helper.make_node("Mul", ["ee_v2", a], ["ee_y"]),
        ],
        [vi("ee_i", [], TensorProto.INT64), vi("ee_c", [], TensorProto.BOOL), vi("ee_v"),
         vi("ee_k", [], TensorProto.INT64)],
        [vi("ee_c2", [], TensorProto.BOOL), vi("ee_v2"), vi("ee_k2", [], TensorProto.INT64), vi("ee_y")],
    )
    return [helper.make_node("Loop", ["", cond, v0, k0], outputs, body=body)]


M3 = C(np.array(3, np.int64))
TRUE = C(np.array(True))

LOOP = [
    GradCase(id="Loop-matmul-tanh", op="Loop", inputs={"v0": F(2, 3), "W": F(3, 3), "M": M3, "cond": TRUE},
             nodes=loop_matmul_nodes, runtimes=RUNTIMES),
    GradCase(id="Loop-scan-outputs", op="Loop",
             inputs={"v0": F(2, 3), "u0": F(2, 3), "x": F(4, 2, 3), "W": F(3, 3, low=-0.6, high=0.6),
                     "M": C(np.array(4, np.int64)), "cond": TRUE},
             nodes=loop_scan_output_nodes, n_outputs=4, runtimes=RUNTIMES),
    GradCase(id="Loop-early-exit", op="Loop",
             inputs={"v0": F(2, 2, low=0.2, high=0.5), "W": F(2, 2), "a": F(2), "limit": C(np.array(4.0)),
                     "k0": C(np.array(0, np.int64)), "cond": TRUE},
             nodes=loop_early_exit_nodes, n_outputs=3, runtimes=RUNTIMES),
]


@pytest.mark.parametrize("case, shapes, runtime", gradient_params(SCAN + LOOP))
def test_gradient(case: GradCase, shapes: str, runtime: str) -> None:
    check_or_skip(case, runtime, shapes)


def test_early_exit_loop_ends_early() -> None:
    """The data-dependent case really stops before its counter would (k counts iterations)."""
    case = LOOP[2]
    nodes, outputs, values = case.build()
    specs = {k: v for k, v in case.inputs.items()}
    model = make_model(nodes, values, specs, outputs, case.opset)
    feeds = {k: v for k, v in values.items() if not specs[k].constant}
    _, k, ys = make_session(model, "onnxtrain")(feeds)
    assert 2 <= int(k) <= 6 and ys.shape[0] == int(k)


# --- against torch


def model_of(case: GradCase, shapes: str = "static") -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[str]]:
    nodes, outputs, values = case.build()
    model = make_model(nodes, values, case.inputs, outputs, case.opset, shapes)
    feeds = {k: v for k, v in values.items() if not case.inputs[k].constant}
    return model, feeds, outputs


def unfused_onnxruntime(model: onnx.ModelProto):
    """onnxruntime without its graph optimizations, whose MatMul fusions have no float64
    kernels; None where it lacks a kernel (Cos in float64)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        if "NOT_IMPLEMENTED" in str(e):
            return None
        raise
    return lambda feeds: session.run(None, dict(feeds))


def gradients(model: onnx.ModelProto, wrt: list[str], feeds: dict, seeds: dict, runtime: str) -> dict[str, np.ndarray]:
    """The gradients `runtime` computes with the gradient model; {} where onnxruntime (unfused)
    lacks a kernel."""
    grad_model = onnxtrain.build_gradient_graph(model, wrt, outputs=list(seeds))
    run = unfused_onnxruntime(grad_model) if runtime == "onnxruntime-unfused" else make_session(grad_model, runtime)
    if run is None:
        return {}
    outputs = run({**feeds, **{f"{o}_grad": s for o, s in seeds.items()}})
    return dict(zip([o.name for o in grad_model.graph.output], outputs))


def torch_rnn(t, x, h, s, W, R, b, input_direction: int, output_directions: tuple[int, int]):
    hs, prods = [], []
    steps = range(x.shape[1] - 1, -1, -1) if input_direction else range(x.shape[1])
    for step in steps:
        h2 = t.tanh(x[:, step] @ W + h @ R + b)
        prods.append(h2 * s)
        hs.append(h2)
        h, s = h2, s + h2
    if output_directions[0]:
        hs = hs[::-1]
    if output_directions[1]:
        prods = prods[::-1]
    return h, s, t.stack(hs, 1), t.stack(prods, 0)


@pytest.mark.parametrize("index", range(3))
def test_scan_rnn_matches_torch(index: int) -> None:
    torch = pytest.importorskip("torch")
    case = SCAN[index]
    direction = 1 if "in1" in case.id else 0
    out_dirs = (int(case.id[-2]), int(case.id[-1]))
    model, feeds, outputs = model_of(case)
    rng = np.random.default_rng(3)
    forward = make_session(model, "onnxtrain")(feeds)
    seeds = {o: rng.standard_normal(v.shape) for o, v in zip(outputs, forward)}
    wrt = list(feeds)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in feeds.items()}
    p = params
    results = torch_rnn(torch, p["x"], p["h0"], p["s0"], p["W"], p["R"], p["b"], direction, out_dirs)
    for o, r, v in zip(outputs, results, forward):
        np.testing.assert_allclose(v, r.detach().numpy(), rtol=1e-12, atol=1e-12, err_msg=o)
    torch.autograd.backward(list(results), [torch.tensor(seeds[o]) for o in outputs])
    for runtime in ("onnxtrain", "onnxruntime-unfused"):
        ours = gradients(model, wrt, feeds, seeds, runtime)
        assert ours or runtime != "onnxtrain"
        for name in wrt if ours else []:
            np.testing.assert_allclose(ours[f"{name}_grad"], params[name].grad.numpy(), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{runtime}: {name}")


def test_loops_match_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)

    def matmul_tanh(p):
        v = p["v0"]
        for _ in range(3):
            v = torch.tanh(v @ p["W"])
        return [v]

    def scan_outputs(p):
        v, u, sins, vs = p["v0"], p["u0"], [], []
        for i in range(4):
            v = torch.tanh(v @ p["W"] + p["x"][i])
            u = u * v
            sins.append(torch.sin(v))
            vs.append(v)
        return [v, u, torch.stack(sins), torch.stack(vs)]

    def early_exit(p):
        v, ys = p["v0"], []
        while True:
            v = 1.5 * v + torch.tanh(v @ p["W"])
            ys.append(v * p["a"])
            if not float(v.abs().max().detach()) < 4.0:
                break
        return [v, torch.stack(ys)]

    for case, recurrence, seeded in zip(LOOP, (matmul_tanh, scan_outputs, early_exit), ([0], [0, 1, 2, 3], [0, 2])):
        model, feeds, outputs = model_of(case, "dynamic")
        forward = make_session(model, "onnxtrain")(feeds)
        seeds = {outputs[k]: rng.standard_normal(forward[k].shape) for k in seeded}
        wrt = case.wrt()
        params = {k: torch.tensor(v, requires_grad=True) for k, v in feeds.items() if k in wrt}
        results = recurrence(params)
        for k, r in zip(seeded, results):
            np.testing.assert_allclose(forward[k], r.detach().numpy(), rtol=1e-12, atol=1e-12)
        torch.autograd.backward(results, [torch.tensor(seeds[outputs[k]]) for k in seeded])
        for runtime in ("onnxtrain", "onnxruntime-unfused"):
            ours = gradients(model, wrt, feeds, seeds, runtime)
            assert ours or runtime != "onnxtrain"
            for name in wrt if ours else []:
                np.testing.assert_allclose(ours[f"{name}_grad"], params[name].grad.numpy(), rtol=1e-9, atol=1e-12,
                                           err_msg=f"{case.id} on {runtime}: {name}")


# --- float32 on onnxruntime


def graph_to_float32(graph: onnx.GraphProto) -> None:
    """float64 -> float32 in `graph`'s declared types, initializers and constants, and in the
    graphs its nodes hold."""
    for value in list(graph.input) + list(graph.output):
        if value.type.tensor_type.elem_type == D:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    for init in graph.initializer:
        if init.data_type == D:
            init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init).astype(np.float32), init.name))
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                graph_to_float32(a.g)
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == D:
                a.t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(a.t).astype(np.float32), a.t.name))


FLOAT32_CASES = ("Scan-rnn-in1-out01", "Scan-cumsum", "Scan-with-Loop-inside", "Loop-scan-outputs", "Loop-early-exit")


@pytest.mark.parametrize("case", [c for c in SCAN + LOOP if c.id in FLOAT32_CASES], ids=lambda c: c.id)
def test_float32_gradient_models_run_in_onnxruntime(case: GradCase) -> None:
    model, feeds, outputs = model_of(case, "dynamic")
    graph_to_float32(model.graph)
    feeds = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in feeds.items()}
    forward = make_session(model, "onnxtrain")(feeds)
    rng = np.random.default_rng(5)
    seeds = {o: rng.standard_normal(np.shape(v)).astype(np.float32) for o, v in zip(outputs, forward)
             if np.asarray(v).dtype == np.float32}
    wrt = case.wrt()
    ours = gradients(model, wrt, feeds, seeds, "onnxtrain")
    theirs = gradients(model, wrt, feeds, seeds, "onnxruntime")
    for name in wrt:
        assert ours[f"{name}_grad"].dtype == np.float32
        np.testing.assert_allclose(ours[f"{name}_grad"], theirs[f"{name}_grad"], rtol=1e-5, atol=1e-5, err_msg=name)


# --- errors


@pytest.mark.parametrize("op", ["Scan", "Loop"])
def test_body_op_without_rule_is_named(op: str) -> None:
    """A body op with no gradient rule (Hardmax) on the path: the error names it and the loop."""
    inner = [helper.make_node("Hardmax", ["nr_v"], ["nr_h"]), helper.make_node("Mul", ["nr_h", "w"], ["nr_v2"])]
    if op == "Scan":
        inner.append(helper.make_node("Identity", ["nr_x"], ["nr_y"]))
        body = helper.make_graph(inner, "b", [vi("nr_v"), vi("nr_x")], [vi("nr_v2"), vi("nr_y")])
        node = helper.make_node("Scan", ["v0", "x"], ["v", "ys"], body=body, num_scan_inputs=1, name="the_scan")
        inputs = [vi("v0", [3]), vi("x", [2, 3]), vi("w", [3])]
    else:
        inner.append(helper.make_node("Identity", ["nr_c"], ["nr_c2"]))
        body = helper.make_graph(inner, "b", [vi("nr_i", [], TensorProto.INT64), vi("nr_c", [], TensorProto.BOOL),
                                              vi("nr_v")], [vi("nr_c2", [], TensorProto.BOOL), vi("nr_v2")])
        node = helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body, name="the_loop")
        inputs = [vi("M", [], TensorProto.INT64), vi("v0", [3]), vi("w", [3])]
    graph = helper.make_graph([node], "g", inputs, [vi("v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(RuntimeError) as error:
        onnxtrain.build_gradient_graph(model, ["w"], outputs=["v"])
    message = str(error.value)
    assert "Hardmax" in message and ("the_scan" if op == "Scan" else "the_loop") in message, message


@pytest.mark.parametrize("kind", ["Scan", "Loop"])
def test_staged_forward_and_backward_runs(kind: str) -> None:
    """ModuleGraphBuilder + TrainingAgent (ORTModule's path): forward and backward as two
    partial runs of one plan; the backward loop reads the entering states the forward loop
    saved, which the run state keeps from the forward stage."""
    torch = pytest.importorskip("torch")
    from onnx import numpy_helper

    from onnxtrain.training import ModuleGraphBuilder, TrainingAgent

    case = SCAN[0] if kind == "Scan" else LOOP[0]
    model, feeds, outputs = model_of(case)
    weights = ["W", "R", "b"] if kind == "Scan" else ["W"]
    graph = model.graph
    for name in weights:  # the weights become initializers, as in an exported module
        index = next(i for i, v in enumerate(graph.input) if v.name == name)
        del graph.input[index]
        graph.initializer.append(numpy_helper.from_array(feeds.pop(name), name))
    for output in graph.output:  # the outputs ModuleGraphBuilder differentiates are typed
        output.type.tensor_type.elem_type = D
    values = {**feeds, **{i.name: numpy_helper.to_array(i) for i in graph.initializer}}
    builder = ModuleGraphBuilder(model, weights, [n for n in feeds if n not in ("M", "cond")])
    builder.build()
    agent = TrainingAgent(builder.get_model(), builder.get_graph_info())
    rng = np.random.default_rng(6)
    for _ in range(2):
        forward, state = agent.run_forward({**feeds, **{w: values[w] for w in weights}})
        seeds = {f"{o}_grad": rng.standard_normal(v.shape) for o, v in zip(outputs, forward)}
        grads = agent.run_backward(seeds, state)
        params = {k: torch.tensor(v, requires_grad=True) for k, v in values.items() if v.dtype == np.float64}
        p = params
        if kind == "Scan":
            results = torch_rnn(torch, p["x"], p["h0"], p["s0"], p["W"], p["R"], p["b"], 0, (0, 0))
        else:
            v = p["v0"]
            for _ in range(3):
                v = torch.tanh(v @ p["W"])
            results = (v,)
        torch.autograd.backward(list(results), [torch.tensor(seeds[f"{o}_grad"]) for o in outputs])
        for o, r in zip(forward, results):
            np.testing.assert_allclose(o, r.detach().numpy(), rtol=1e-12, atol=1e-12)
        for name, grad in grads.items():
            np.testing.assert_allclose(grad, params[name].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
        assert set(weights) <= set(grads)
