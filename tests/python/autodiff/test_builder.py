"""The gradient builder's contract: where it starts, what it adds, what it refuses."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def run(m: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def linear_loss() -> onnx.ModelProto:
    """loss = sum(relu(x @ W + b))"""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2) / 6 - 0.3, "W")
    b = numpy_helper.from_array(np.array([0.1, -0.2], np.float32), "b")
    return model(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
            helper.make_node("Add", ["xw", "b"], ["h"], name="add"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("ReduceSum", ["r"], ["loss"], keepdims=0, name="sum"),
        ],
        [helper.make_tensor_value_info("x", F, ["batch", 3])],
        [helper.make_tensor_value_info("loss", F, [])],
        [w, b],
    )


X = np.array([[1.0, -2.0, 0.5], [0.3, 0.2, -0.1], [2.0, 1.0, 1.0]], np.float32)


def expected_linear_grads(x: np.ndarray) -> dict[str, np.ndarray]:
    m = linear_loss()
    w = numpy_helper.to_array(m.graph.initializer[0])
    b = numpy_helper.to_array(m.graph.initializer[1])
    mask = (x @ w + b > 0).astype(np.float32)
    return {"W_grad": x.T @ mask, "b_grad": mask.sum(0), "x_grad": mask @ w.T}


def test_loss_of_the_only_output_is_seeded_with_one() -> None:
    g = onnxtrain.build_gradient_graph(linear_loss(), ["W", "b", "x"])
    assert [o.name for o in g.graph.output] == ["loss", "W_grad", "b_grad", "x_grad"]
    out = run(g, {"x": X})
    for name, value in expected_linear_grads(X).items():
        np.testing.assert_allclose(out[name], value, rtol=1e-6, err_msg=name)


def test_dynamic_batch_stays_dynamic() -> None:
    g = onnxtrain.build_gradient_graph(linear_loss(), ["W", "b", "x"])
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
        out = run(g, {"x": x})
        for name, value in expected_linear_grads(x).items():
            np.testing.assert_allclose(out[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_accepts_model_proto_bytes_and_path(tmp_path) -> None:
    m = linear_loss()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    results = [
        onnxtrain.build_gradient_graph(source, ["W"])
        for source in (m, m.SerializeToString(), path, str(path))
    ]
    assert all(isinstance(r, onnx.ModelProto) for r in results)
    assert all(r.SerializeToString() == results[0].SerializeToString() for r in results)


def test_named_loss_among_several_outputs() -> None:
    m = linear_loss()
    m.graph.output.insert(0, helper.make_tensor_value_info("h", F, None))
    with pytest.raises(ValueError, match="2 outputs"):
        onnxtrain.build_gradient_graph(m, ["W"])
    g = onnxtrain.build_gradient_graph(m, ["W"], "loss")
    np.testing.assert_allclose(run(g, {"x": X})["W_grad"], expected_linear_grads(X)["W_grad"], rtol=1e-6)


def test_incoming_gradients_for_several_outputs() -> None:
    m = linear_loss()
    m.graph.output.insert(0, helper.make_tensor_value_info("h", F, ["batch", 2]))
    g = onnxtrain.build_gradient_graph(m, ["x"], outputs=["h", "loss"])
    inputs = {i.name: i for i in g.graph.input}
    assert "h_grad" in inputs and "loss_grad" in inputs
    assert [d.dim_param or d.dim_value for d in inputs["h_grad"].type.tensor_type.shape.dim] == ["batch", 2]
    w = numpy_helper.to_array(m.graph.initializer[0])
    b = numpy_helper.to_array(m.graph.initializer[1])
    dh = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    dloss = np.float32(0.5)
    out = run(g, {"x": X, "h_grad": dh, "loss_grad": np.array(dloss)})
    mask = (X @ w + b > 0).astype(np.float32)
    np.testing.assert_allclose(out["x_grad"], (dh + dloss * mask) @ w.T, rtol=1e-5)


def test_non_scalar_loss_is_refused() -> None:
    m = linear_loss()
    m.graph.output.insert(0, helper.make_tensor_value_info("h", F, ["batch", 2]))
    with pytest.raises(ValueError, match="must be a scalar"):
        onnxtrain.build_gradient_graph(m, ["W"], "h")


def test_unknown_names_are_refused() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        onnxtrain.build_gradient_graph(linear_loss(), ["nope"])
    with pytest.raises(ValueError, match="'nope'"):
        onnxtrain.build_gradient_graph(linear_loss(), ["W"], "nope")
    with pytest.raises(ValueError, match="appears twice"):
        onnxtrain.build_gradient_graph(linear_loss(), ["W", "W"])
    with pytest.raises(TypeError):
        onnxtrain.build_gradient_graph(linear_loss(), "W")


def test_integer_values_have_no_gradient() -> None:
    m = model(
        [helper.make_node("Gather", ["table", "ids"], ["rows"]), helper.make_node("ReduceSum", ["rows"], ["loss"], keepdims=0)],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("loss", F, [])],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "table")],
    )
    with pytest.raises(ValueError, match="only floating-point"):
        onnxtrain.build_gradient_graph(m, ["ids"])
    g = onnxtrain.build_gradient_graph(m, ["table"])
    out = run(g, {"ids": np.array([1, 1], np.int64)})
    np.testing.assert_array_equal(out["table_grad"], [[0, 0, 0], [2, 2, 2], [0, 0, 0], [0, 0, 0]])


def test_piecewise_constant_ops_give_zero_gradients() -> None:
    """Round, Floor, Ceil and Sign have a zero gradient almost everywhere: a requested
    gradient through them is an output of zeros, as torch gives (issue 15)."""
    for op in ("Round", "Floor", "Ceil", "Sign"):
        m = model([helper.make_node(op, ["x"], ["r"]), helper.make_node("Mul", ["r", "x"], ["y"])],
                  [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, [3])])
        g = onnxtrain.build_gradient_graph(m, ["x"], ["y"])
        assert "x_grad" in [o.name for o in g.graph.output], op
        x = np.array([1.2, -2.7, 3.5], np.float32)
        out = run(g, {"x": x, "y_grad": np.ones(3, np.float32)})
        r = {"Round": np.round, "Floor": np.floor, "Ceil": np.ceil, "Sign": np.sign}[op](x)
        np.testing.assert_array_equal(out["x_grad"], r, err_msg=op)  # d(r * x)/dx = r + x * 0
        only = model([helper.make_node(op, ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [3])],
                     [helper.make_tensor_value_info("y", F, [3])])
        out = run(onnxtrain.build_gradient_graph(only, ["x"], ["y"]), {"x": x, "y_grad": np.ones(3, np.float32)})
        np.testing.assert_array_equal(out["x_grad"], np.zeros(3, np.float32), err_msg=op)


def test_absent_gradients_are_absent_not_zeros() -> None:
    """`unused` does not reach the loss; `x` reaches it only through an integer Cast."""
    m = model(
        [
            helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
            helper.make_node("Cast", ["xi"], ["xf"], to=F),
            helper.make_node("Mul", ["xf", "y"], ["p"]),
            helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0),
            helper.make_node("Neg", ["unused"], ["other"]),
        ],
        [helper.make_tensor_value_info(n, F, [3]) for n in ("x", "y", "unused")],
        [helper.make_tensor_value_info("loss", F, []), helper.make_tensor_value_info("other", F, [3])],
    )
    g = onnxtrain.build_gradient_graph(m, ["x", "y", "unused"], "loss")
    assert [o.name for o in g.graph.output] == ["loss", "other", "y_grad"]
    out = run(g, {"x": np.array([1.5, 2.0, -1.2], np.float32), "y": np.ones(3, np.float32), "unused": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out["y_grad"], [1, 2, -1])


def test_fan_out_contributions_are_summed() -> None:
    m = model(
        [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Add", ["sq", "x"], ["s"]),
         helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)],
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("loss", F, [])],
    )
    x = np.array([1.0, -2.0, 3.0], np.float32)
    out = run(onnxtrain.build_gradient_graph(m, ["x"]), {"x": x})
    np.testing.assert_allclose(out["x_grad"], 2 * x + 1)


def test_missing_rule_names_the_op_the_node_and_the_path() -> None:
    m = model(
        [
            helper.make_node("Exp", ["x"], ["e"], name="exp"),
            helper.make_node("LpNormalization", ["e"], ["c"], name="running_total"),
            helper.make_node("ReduceSum", ["c"], ["loss"], keepdims=0, name="sum"),
        ],
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("loss", F, [])],
        [numpy_helper.from_array(np.array(0, np.int64), "axis")],
    )
    with pytest.raises(RuntimeError) as error:
        onnxtrain.build_gradient_graph(m, ["x"])
    message = str(error.value)
    assert "LpNormalization" in message and "running_total" in message
    assert "'x' -> Exp 'exp' -> 'e' -> LpNormalization 'running_total' -> 'c' -> ReduceSum 'sum' -> 'loss'" in message


def test_ops_off_the_path_need_no_rule() -> None:
    m = model(
        [helper.make_node("CumSum", ["y", "axis"], ["c"]), helper.make_node("Mul", ["x", "c"], ["p"]),
         helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)],
        [helper.make_tensor_value_info(n, F, [3]) for n in ("x", "y")],
        [helper.make_tensor_value_info("loss", F, [])],
        [numpy_helper.from_array(np.array(0, np.int64), "axis")],
    )
    out = run(onnxtrain.build_gradient_graph(m, ["x"]), {"x": np.ones(3, np.float32), "y": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out["x_grad"], [1, 2, 3])


def test_name_clash_is_refused() -> None:
    m = linear_loss()
    m.graph.node[0].output[0] = "W_grad"
    m.graph.node[1].input[0] = "W_grad"
    with pytest.raises(ValueError, match="W_grad"):
        onnxtrain.build_gradient_graph(m, ["W"])


def test_old_opsets_are_refused() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [])],
              [helper.make_tensor_value_info("y", F, [])], opset=12)
    with pytest.raises(RuntimeError, match="opset 13"):
        onnxtrain.build_gradient_graph(m, ["x"])


def test_functions_are_model_local_and_plain_onnx() -> None:
    g = onnxtrain.build_gradient_graph(linear_loss(), ["W", "b"])
    assert {(o.domain, o.version) for o in g.opset_import} >= {("org.onnxtrain", 1)}
    used = {n.op_type for n in g.graph.node if n.domain == "org.onnxtrain"}
    assert used == {f.name for f in g.functions} == {"ReluGrad", "ReduceToShape"}
    for f in g.functions:
        assert f.domain == "org.onnxtrain"
        assert all(n.domain in ("", "ai.onnx") for n in f.node), f.name
        assert [(o.domain, o.version) for o in f.opset_import] == [("", 17)]
    onnx.checker.check_model(g, full_check=True)


def test_no_functions_when_none_is_needed() -> None:
    m = model([helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
              [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("loss", F, [])])
    g = onnxtrain.build_gradient_graph(m, ["x"])
    assert not g.functions and all(o.domain in ("", "ai.onnx") for o in g.opset_import)


def test_forward_nodes_gain_the_outputs_their_rules_need() -> None:
    m = model(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)],
        [helper.make_tensor_value_info("x", F, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("loss", F, [])],
    )
    g = onnxtrain.build_gradient_graph(m, ["x"])
    pool = next(n for n in g.graph.node if n.op_type == "MaxPool")
    assert len(pool.output) == 2 and pool.output[1]
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    grad = run(g, {"x": x})["x_grad"]
    np.testing.assert_array_equal(grad[0, 0], [[0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 0, 1]])


def test_shapes_are_taken_beside_the_forward_pass() -> None:
    """Rules that need a forward value's shape read it right after the value is made, so
    the value itself need not live until the backward pass."""
    m = model(
        [helper.make_node("Relu", ["s"], ["t"]), helper.make_node("Mul", ["x", "t"], ["xt"]),
         helper.make_node("ReduceSum", ["xt"], ["loss"], keepdims=0)],
        [helper.make_tensor_value_info("x", F, ["batch", 3]), helper.make_tensor_value_info("s", F, ["batch", 1])],
        [helper.make_tensor_value_info("loss", F, [])],
    )
    g = onnxtrain.build_gradient_graph(m, ["s"])
    names = [n.output[0] for n in g.graph.node]
    shape_node = next(n for n in g.graph.node if n.op_type == "Shape" and n.input[0] == "t")
    assert names.index("t") < names.index(shape_node.output[0]) < names.index("xt")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    s = np.array([[0.5], [-1.0]], np.float32)
    np.testing.assert_allclose(run(g, {"x": x, "s": s})["s_grad"], x.sum(1, keepdims=True) * (s > 0))


def test_fixed_shapes_are_constants() -> None:
    """The shape of an initializer or of an input declared with fixed dimensions is known
    when the graph is built: no Shape node computes it at run time."""
    g = onnxtrain.build_gradient_graph(linear_loss(), ["b"])
    assert not [n for n in g.graph.node if n.op_type == "Shape" and n.input[0] == "b"]
    np.testing.assert_allclose(run(g, {"x": X})["b_grad"], expected_linear_grads(X)["b_grad"], rtol=1e-6)


def test_gradient_of_a_gradient_model() -> None:
    """The functions a gradient model calls are differentiated through their bodies."""
    m = model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
              [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("loss", F, [])])
    g = onnxtrain.build_gradient_graph(m, ["x"], outputs=["y"])
    gg = onnxtrain.build_gradient_graph(g, ["y_grad"], outputs=["x_grad"])
    out = run(gg, {"x": np.array([1.0, -1.0, 2.0], np.float32), "y_grad": np.ones(3, np.float32),
                   "x_grad_grad": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out["y_grad_grad"], [1, 0, 1])


def test_dropout_in_training_mode_uses_the_forward_mask() -> None:
    ratio = 0.25
    m = model(
        [helper.make_node("Dropout", ["x", "ratio", "training"], ["y"], name="drop"),
         helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
        [helper.make_tensor_value_info("x", F, [4, 50])],
        [helper.make_tensor_value_info("loss", F, [])],
        [numpy_helper.from_array(np.array(ratio, np.float32), "ratio"),
         numpy_helper.from_array(np.array(True), "training")],
    )
    g = onnxtrain.build_gradient_graph(m, ["x"])
    drop = next(n for n in g.graph.node if n.op_type == "Dropout")
    assert len(drop.output) == 2 and drop.output[1], "the rule needs the mask from the forward pass"
    g.graph.output.append(helper.make_tensor_value_info(drop.output[1], TensorProto.BOOL, None))
    out = run(g, {"x": np.ones((4, 50), np.float32)})
    mask = out[drop.output[1]]
    assert 0 < mask.sum() < mask.size
    np.testing.assert_allclose(out["x_grad"], mask / (1 - ratio), rtol=1e-6)


def test_a_value_read_only_where_no_gradient_flows_gets_none() -> None:
    # s = Slice(x) lies on a path to the loss, but CastLike reads it only for its type: the
    # Slice must not be differentiated (its rule would Pad an absent gradient).
    nodes = [
        helper.make_node("Slice", ["x", "starts", "ends"], ["s"]),
        helper.make_node("CastLike", ["c", "s"], ["c_like"]),
        helper.make_node("Mul", ["x", "c_like"], ["y"]),
        helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0),
    ]
    initializers = [numpy_helper.from_array(np.array([0], np.int64), "starts"),
                    numpy_helper.from_array(np.array([1], np.int64), "ends"),
                    numpy_helper.from_array(np.array(2.0, np.float64), "c")]
    g = onnxtrain.build_gradient_graph(
        model(nodes, [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("loss", F, [])],
              initializers), ["x"])
    onnx.checker.check_model(g, full_check=True)
    assert not any(n.op_type == "Pad" for n in g.graph.node)
    out = run(g, {"x": np.array([1, 2, 3], np.float32)})
    np.testing.assert_array_equal(out["x_grad"], [2, 2, 2])
