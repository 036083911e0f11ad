"""If, Loop and Scan against onnxruntime and onnx.reference: outer-scope values, nested
control flow, loop-carried state, scan outputs, zero iterations, dynamic shapes, and the
errors for malformed bodies and bad conditions or trip counts. onnx.reference runs a Loop
whose cond input is omitted zero times (its `while cond` reads the missing input as
false); onnxtrain follows onnxruntime there (the body's condition output still ends the
loop), so those cases compare with onnxruntime only. onnxruntime refuses Scan bodies
without output shapes and zero-length scans; those compare with onnx.reference or numpy."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import run_reference

rng = np.random.default_rng(0)
F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL
BOTH = ("onnxruntime", "onnx.reference")


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def run(model, feeds):
    return onnxtrain.InferenceSession(model.SerializeToString()).run(None, dict(feeds))


def compare(model, feeds, references=BOTH, rtol=1e-6, atol=1e-6):
    ours = run(model, feeds)
    for reference in references:
        theirs = run_reference(model, feeds, reference)
        assert len(ours) == len(theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            b = np.asarray(b)
            assert a.dtype == b.dtype, f"{reference} output {i}: {a.dtype} vs {b.dtype}"
            assert a.shape == b.shape, f"{reference} output {i}: {a.shape} vs {b.shape}"
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{reference} output {i}")
    return ours


def const(name, value):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value), name))


# ---- If


def if_model(then_shape=(3,), else_shape=(3,), opset=17):
    # Both branches read the outer-scope x and y.
    then_branch = helper.make_graph([helper.make_node("Add", ["x", "y"], ["t"])], "then", [], [vi("t", F, None)])
    else_branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "y"], ["m"]), helper.make_node("ReduceSum", ["m"], ["e"], keepdims=1)],
        "else",
        [],
        [vi("e", F, None)],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["out"], then_branch=then_branch, else_branch=else_branch),
    ]
    zero = onnx.numpy_helper.from_array(np.array(0, np.float32), "zero")
    return model_of(nodes, [vi("x", F, ["n"]), vi("y", F, ["n"])], [vi("out", F, None)], [zero], opset)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_outer_scope_branches_of_different_shapes(sign):
    x = (np.abs(rng.standard_normal(5)) * sign).astype(np.float32)
    y = rng.standard_normal(5).astype(np.float32)
    out = compare(if_model(), {"x": x, "y": y})
    assert out[0].shape == ((5,) if sign > 0 else (1,))


def test_if_dynamic_shapes_reuse_the_session():
    session = onnxtrain.InferenceSession(if_model().SerializeToString())
    for n in (1, 4, 9, 4):
        x = np.abs(rng.standard_normal(n)).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x, "y": y})[0], x + y, rtol=1e-6)
        np.testing.assert_allclose(session.run(None, {"x": -x, "y": y})[0], [np.sum(-x * y)], rtol=1e-5)


def test_if_cond_not_a_bool_scalar():
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t")])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e")])
    node = helper.make_node("If", ["c"], ["out"], then_branch=then_branch, else_branch=else_branch)
    model = model_of([node], [vi("c", B, [2]), vi("x", F, [2])], [vi("out")])
    with pytest.raises(Exception, match="cond is bool\\[2\\], expected a bool scalar"):
        run(model, {"c": np.array([True, False]), "x": np.ones(2, np.float32)})


def test_if_branches_of_different_output_counts_or_types():
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t")])
    two = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"]), helper.make_node("Abs", ["x"], ["f"])], "else", [], [vi("e"), vi("f")]
    )
    node = helper.make_node("If", ["c"], ["out"], then_branch=then_branch, else_branch=two)
    model = model_of([node], [vi("c", B, []), vi("x", F, [2])], [vi("out")])
    with pytest.raises(Exception, match="else_branch has 0 inputs and 2 outputs; this node needs 0 inputs and 1"):
        onnxtrain.InferenceSession(model.SerializeToString())
    ints = helper.make_graph([helper.make_node("Cast", ["x"], ["e"], to=I64)], "else", [], [vi("e", I64)])
    node = helper.make_node("If", ["c"], ["out"], then_branch=then_branch, else_branch=ints)
    model = model_of([node], [vi("c", B, []), vi("x", F, [2])], [vi("out")])
    with pytest.raises(Exception, match="float in then_branch but int64 in else_branch"):
        onnxtrain.InferenceSession(model.SerializeToString())


# ---- Loop


def loop_body(nested_if=False):
    """i, cond, acc -> cond (i < limit - 1), acc + x * i, scan output acc * 2 (and, nested,
    an If on i's parity that reads the outer x)."""
    nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Mul", ["x", "fi"], ["xi"]),
        helper.make_node("Add", ["acc", "xi"], ["acc_out"]),
        helper.make_node("Sub", ["limit", "one"], ["last"]),
        helper.make_node("Less", ["i", "last"], ["cond_out"]),
    ]
    outputs = [vi("cond_out", B, []), vi("acc_out", F, None)]
    if nested_if:
        then_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t")])
        else_branch = helper.make_graph([helper.make_node("Add", ["acc_out", "x"], ["e"])], "else", [], [vi("e")])
        nodes += [
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero_i"], ["even"]),
            helper.make_node("If", ["even"], ["picked"], then_branch=then_branch, else_branch=else_branch),
            helper.make_node("Mul", ["picked", "two_f"], ["scan"]),
        ]
    else:
        nodes.append(helper.make_node("Mul", ["acc_out", "two_f"], ["scan"]))
    outputs.append(vi("scan", F, None))
    return helper.make_graph(nodes, "body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, None)], outputs)


def loop_model(nested_if=False, with_m=True, with_cond=True, opset=17):
    consts = [
        onnx.numpy_helper.from_array(np.array(1, np.int64), "one"),
        onnx.numpy_helper.from_array(np.array(2, np.int64), "two"),
        onnx.numpy_helper.from_array(np.array(0, np.int64), "zero_i"),
        onnx.numpy_helper.from_array(np.array(2, np.float32), "two_f"),
    ]
    node = helper.make_node(
        "Loop",
        ["M" if with_m else "", "cond0" if with_cond else "", "acc0"],
        ["acc_final", "scans"],
        body=loop_body(nested_if),
    )
    inputs = [vi("x", F, ["n"]), vi("limit", I64, []), vi("acc0", F, ["n"])]
    if with_m:
        inputs.insert(0, vi("M", I64, []))
    if with_cond:
        inputs.insert(1 if with_m else 0, vi("cond0", B, []))
    return model_of([node], inputs, [vi("acc_final", F, None), vi("scans", F, None)], consts, opset)


def loop_feeds(n=4, m=5, limit=10, cond=True):
    feeds = {
        "x": rng.standard_normal(n).astype(np.float32),
        "limit": np.array(limit, np.int64),
        "acc0": rng.standard_normal(n).astype(np.float32),
        "M": np.array(m, np.int64),
        "cond0": np.array(cond),
    }
    return feeds


@pytest.mark.parametrize("m,limit", [(5, 10), (10, 3), (1, 10)])
def test_loop_carried_state_and_scan_outputs(m, limit):
    out = compare(loop_model(), loop_feeds(m=m, limit=limit))
    assert out[1].shape == (min(m, limit), 4)


def test_loop_nested_if_reads_outer_and_body_values():
    compare(loop_model(nested_if=True), loop_feeds(m=6, limit=100))


@pytest.mark.parametrize("m,cond", [(0, True), (3, False)])
def test_loop_zero_iterations(m, cond):
    feeds = loop_feeds(m=m, cond=cond)
    out = compare(loop_model(), feeds, references=("onnxruntime",))
    np.testing.assert_array_equal(out[0], feeds["acc0"])
    assert out[1].shape == (0,) or out[1].shape[0] == 0


def test_loop_with_only_a_condition():
    feeds = loop_feeds(limit=7)
    del feeds["M"]
    out = compare(loop_model(with_m=False), feeds)
    assert out[1].shape == (7, 4)


@pytest.mark.parametrize("limit", [2, 10])
def test_loop_with_only_a_trip_count(limit):
    # As in onnxruntime, the body's condition output ends the loop even without a cond input.
    feeds = loop_feeds(m=6, limit=limit)
    del feeds["cond0"]
    out = compare(loop_model(with_cond=False), feeds, references=("onnxruntime",))
    assert out[1].shape == (min(6, limit), 4)


def test_loop_dynamic_shapes():
    session = onnxtrain.InferenceSession(loop_model().SerializeToString())
    for n in (2, 7, 2):
        feeds = loop_feeds(n=n, m=4)
        ours = session.run(None, feeds)
        theirs = run_reference(loop_model(), feeds, "onnxruntime")
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_loop_carried_value_that_grows():
    # Opset 11+: a carried value may change shape between iterations.
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Concat", ["seq", "x"], ["seq_out"], axis=0),
        ],
        "body",
        [vi("i", I64, []), vi("cond", B, []), vi("seq", F, None)],
        [vi("cond_out", B, []), vi("seq_out", F, None)],
    )
    node = helper.make_node("Loop", ["M", "", "seq0"], ["seq_final"], body=body)
    model = model_of([node], [vi("M", I64, []), vi("x", F, [2]), vi("seq0", F, [1])], [vi("seq_final", F, None)])
    feeds = {"M": np.array(3, np.int64), "x": np.array([1, 2], np.float32), "seq0": np.array([0], np.float32)}
    out = compare(model, feeds, references=("onnxruntime",))
    assert out[0].shape == (7,)


def test_loop_negative_trip_count_and_bad_cond():
    with pytest.raises(Exception, match="the trip count M is -1, expected 0 or more"):
        run(loop_model(), loop_feeds(m=-1))
    bad = loop_model()
    bad.graph.input[1].type.tensor_type.elem_type = I64
    feeds = loop_feeds()
    feeds["cond0"] = np.array(1, np.int64)
    with pytest.raises(Exception, match="cond is int64\\[\\], expected a bool scalar"):
        run(bad, feeds)


def test_loop_body_with_wrong_counts():
    model = loop_model()
    body = model.graph.node[0].attribute[0].g
    del body.output[2]  # no scan output for the node's second output
    with pytest.raises(Exception, match="body has 3 inputs and 2 outputs; this node needs 3 inputs and 3 outputs"):
        onnxtrain.InferenceSession(model.SerializeToString())


# ---- Scan (onnx.reference's Scan reads no outer-scope values and only forward directions)


def scan_model(input_axes=None, input_directions=None, output_axes=None, output_directions=None, opset=17,
               part=(3, 3)):
    """State s, scan inputs a and b: s' = s + a_t * w (w from outside), outputs s' and a_t - b_t;
    every per-iteration value is of shape `part` (onnxruntime wants the body's output shapes)."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["a_t", "w"], ["aw"]),
            helper.make_node("Add", ["s", "aw"], ["s_out"]),
            helper.make_node("Sub", ["a_t", "b_t"], ["d"]),
        ],
        "body",
        [vi("s", F, list(part)), vi("a_t", F, list(part)), vi("b_t", F, list(part))],
        [vi("s_out", F, list(part)), vi("d", F, list(part))],
    )
    attrs = {"num_scan_inputs": 2}
    for name, value in (
        ("scan_input_axes", input_axes),
        ("scan_input_directions", input_directions),
        ("scan_output_axes", output_axes),
        ("scan_output_directions", output_directions),
    ):
        if value is not None:
            attrs[name] = value
    node = helper.make_node("Scan", ["s0", "a", "b"], ["s_final", "ds"], body=body, **attrs)
    inputs = [vi("s0", F, list(part)), vi("a", F, None), vi("b", F, None), vi("w", F, None)]
    return model_of([node], inputs, [vi("s_final", F, None), vi("ds", F, None)], opset=opset)


@pytest.mark.parametrize(
    "in_axes,in_dirs,out_axes,out_dirs",
    [
        (None, None, None, None),
        ([1, 0], [0, 1], [0], [1]),
        ([-1, 2], [1, 0], [-1], [0]),
        ([0, 1], [1, 1], [1], [1]),
    ],
)
def test_scan_axes_and_directions(in_axes, in_dirs, out_axes, out_dirs):
    a = rng.standard_normal((3, 3, 3)).astype(np.float32)
    b = rng.standard_normal((3, 3, 3)).astype(np.float32)
    feeds = {"s0": rng.standard_normal((3, 3)).astype(np.float32), "a": a, "b": b,
             "w": rng.standard_normal((3, 3)).astype(np.float32)}
    compare(scan_model(in_axes, in_dirs, out_axes, out_dirs), feeds, references=("onnxruntime",))


def test_scan_against_onnx_reference():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "a_t"], ["y"])],
        "body",
        [vi("s", F, [2]), vi("a_t", F, [2])],
        [vi("s_out", F, [2]), vi("y", F, [2])],
    )
    node = helper.make_node("Scan", ["s0", "a"], ["s_final", "ys"], body=body, num_scan_inputs=1)
    model = model_of([node], [vi("s0", F, [2]), vi("a", F, ["n", 2])], [vi("s_final", F, None), vi("ys", F, None)])
    compare(model, {"s0": np.array([1, 2], np.float32), "a": rng.standard_normal((5, 2)).astype(np.float32)})


@pytest.mark.parametrize("opset", [9, 11, 16, 21])
def test_scan_opsets(opset):
    feeds = {"s0": np.zeros((2,), np.float32), "a": rng.standard_normal((4, 2)).astype(np.float32),
             "b": rng.standard_normal((4, 2)).astype(np.float32), "w": np.full((2,), 0.5, np.float32)}
    compare(scan_model(opset=opset, part=(2,)), feeds, references=("onnxruntime",))


def test_scan_dynamic_lengths_and_mismatch():
    session = onnxtrain.InferenceSession(scan_model(part=(2,)).SerializeToString())
    for n in (1, 5, 3):
        feeds = {"s0": np.zeros((2,), np.float32), "a": rng.standard_normal((n, 2)).astype(np.float32),
                 "b": rng.standard_normal((n, 2)).astype(np.float32), "w": np.ones((2,), np.float32)}
        ours = session.run(None, feeds)
        np.testing.assert_allclose(ours[0], feeds["a"].sum(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours[1], feeds["a"] - feeds["b"], rtol=1e-6)
    feeds["b"] = np.zeros((2, 2), np.float32)
    with pytest.raises(Exception, match="2 long along its scan axis, but an earlier scan input is 3 long"):
        session.run(None, feeds)


def test_scan_zero_length():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a_t"], ["s_out"]), helper.make_node("Identity", ["a_t"], ["y"])],
        "body",
        [vi("s", F, [2]), vi("a_t", F, [2])],
        [vi("s_out", F, [2]), vi("y", F, [2])],
    )
    node = helper.make_node("Scan", ["s0", "a"], ["s_final", "ys"], body=body, num_scan_inputs=1)
    model = model_of([node], [vi("s0", F, [2]), vi("a", F, ["n", 2])], [vi("s_final", F, None), vi("ys", F, None)])
    feeds = {"s0": np.array([1, 2], np.float32), "a": np.zeros((0, 2), np.float32)}
    out = run(model, feeds)
    np.testing.assert_array_equal(out[0], feeds["s0"])
    assert out[1].shape == (0, 2) and out[1].dtype == np.float32


def test_shape_inference_of_control_flow():
    # Scan: the scan outputs gain the scan axis; its length is unknown without input shapes.
    outputs = {v.name: v for v in onnxtrain.InferenceSession(scan_model().SerializeToString()).get_outputs()}
    assert outputs["s_final"].shape == [3, 3] and outputs["s_final"].type == "tensor(float)"
    assert outputs["ds"].shape == [None, 3, 3]
    # If: the branches give [n] and [1]: one axis of unknown size.
    outputs = {v.name: v for v in onnxtrain.InferenceSession(if_model().SerializeToString()).get_outputs()}
    assert outputs["out"].shape == [None] and outputs["out"].type == "tensor(float)"
    # Loop: the body reads the outer x [n]; carried values keep their shape, scan outputs gain
    # a first axis of unknown length.
    outputs = {v.name: v for v in onnxtrain.InferenceSession(loop_model().SerializeToString()).get_outputs()}
    assert outputs["acc_final"].type == outputs["scans"].type == "tensor(float)"
    assert outputs["acc_final"].shape == ["n"] and outputs["scans"].shape == [None, "n"]


def test_loop_growing_state_over_many_iterations():
    # Each iteration meets a new input shape; the body keeps at most 16 memory plans.
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Concat", ["seq", "x"], ["seq_out"], axis=0),
            helper.make_node("ReduceSum", ["seq_out"], ["total"], keepdims=1),
        ],
        "body",
        [vi("i", I64, []), vi("cond", B, []), vi("seq", F, None)],
        [vi("cond_out", B, []), vi("seq_out", F, None), vi("total", F, [1])],
    )
    node = helper.make_node("Loop", ["M", "c", "seq0"], ["seq_final", "totals"], body=body)
    inputs = [vi("M", I64, []), vi("c", B, []), vi("x", F, [2]), vi("seq0", F, [1])]
    model = model_of([node], inputs, [vi("seq_final", F, None), vi("totals", F, None)])
    feeds = {"M": np.array(40, np.int64), "c": np.array(True), "x": np.array([1, 2], np.float32),
             "seq0": np.array([0], np.float32)}
    session = onnxtrain.InferenceSession(model.SerializeToString())
    for _ in range(2):
        out = session.run(None, feeds)
        assert out[0].shape == (81,)
        np.testing.assert_allclose(out[1][:, 0], 3 * np.arange(1, 41))


@pytest.mark.parametrize("limit, iterations", [(10, 5), (3, 3)])
def test_gradient_through_loop_outer_read(limit, iterations):
    # x reaches the output only through the Loop's body (an outer-scope read): the gradient
    # builder must see that path (rules/control.cc differentiates it), not report that x has no
    # gradient. acc_final = acc0 + x * (0 + 1 + ... + (iterations - 1)); M is 5, and the
    # condition i < limit - 1 ends the loop after 3 iterations when limit is 3.
    from onnxtrain.autodiff import build_gradient_graph

    gradient = build_gradient_graph(loop_model(), ["x"], ["acc_final"])
    seed = rng.standard_normal(4).astype(np.float32)
    feeds = {**loop_feeds(limit=limit), "acc_final_grad": seed}
    ours = dict(zip([o.name for o in gradient.graph.output], run(gradient, feeds)))
    np.testing.assert_allclose(ours["x_grad"], seed * sum(range(iterations)), rtol=1e-6)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_gradient_of_if_is_an_if_of_branch_gradients(sign):
    # then: x + y, dx = dy, dy_ = dy; else: sum(x * y), dx = dy * y, dy_ = dy * x.
    from onnxtrain.autodiff import build_gradient_graph

    gradient = build_gradient_graph(if_model(), ["x", "y"], ["out"])
    x = (np.abs(rng.standard_normal(5)) * sign).astype(np.float32)
    y = rng.standard_normal(5).astype(np.float32)
    seed = rng.standard_normal(5 if sign > 0 else 1).astype(np.float32)
    feeds = {"x": x, "y": y, "out_grad": seed}
    ours = dict(zip([o.name for o in gradient.graph.output], run(gradient, feeds)))
    if sign > 0:
        expected = {"x_grad": seed, "y_grad": seed}
    else:
        expected = {"x_grad": seed * y, "y_grad": seed * x}
    for name, value in expected.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-6, atol=1e-6)
    theirs = run_reference(gradient, feeds, "onnxruntime")
    for a, b in zip(run(gradient, feeds), theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_gradient_of_if_with_a_branch_that_does_not_read_the_value():
    # then reads x and w, else reads w only: x's gradient is zeros when cond is false.
    from onnxtrain.autodiff import build_gradient_graph

    then_branch = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [], [vi("t")])
    else_branch = helper.make_graph([helper.make_node("Relu", ["w"], ["e"])], "else", [], [vi("e")])
    nodes = [
        helper.make_node("If", ["c"], ["h"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("ReduceSum", ["h"], ["loss"], keepdims=0),
    ]
    model = model_of(nodes, [vi("c", B, []), vi("x", F, [3]), vi("w", F, [3])], [vi("loss", F, [])])
    gradient = build_gradient_graph(model, ["x", "w"], "loss")
    x = rng.standard_normal(3).astype(np.float32)
    w = np.array([1.0, -2.0, 3.0], np.float32)
    for cond in (True, False):
        out = dict(zip([o.name for o in gradient.graph.output], run(gradient, {"c": np.array(cond), "x": x, "w": w})))
        np.testing.assert_allclose(out["x_grad"], w if cond else np.zeros(3), rtol=1e-6)
        np.testing.assert_allclose(out["w_grad"], x if cond else (w > 0).astype(np.float32), rtol=1e-6)
