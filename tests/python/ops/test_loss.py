"""SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss against onnxruntime, or against
onnx.reference where onnxruntime has no kernel for the type.

Tolerances: float32 rtol 1e-5/atol 1e-6 (onnxtrain sums the per-sample losses in double);
float64 1e-12; float16 rtol/atol 2e-3 and bfloat16 2e-2 against a float32 reference on the
same values (onnxtrain computes in float32 and rounds once)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import check_op, make_model, run_onnxtrain, run_reference

rng = np.random.default_rng(0)

LOSSES = ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"]
TOLERANCE = {np.float32: (1e-5, 1e-6), np.float64: (1e-12, 1e-12)}


def scores(shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def targets(shape, classes, dtype=np.int64, ignore=None, fraction=0.3):
    t = rng.integers(0, classes, shape).astype(dtype)
    if ignore is not None:
        t[rng.random(shape) < fraction] = ignore
    return t


def loss_inputs(x, t, w=None):
    return {"x": x, "t": t, "w": w}


def check_loss(op, x, t, w=None, attrs=None, *, opset=13, log_prob=False, reference="onnxruntime", constants=()):
    rtol, atol = TOLERANCE[x.dtype.type]
    n_outputs = 2 if log_prob else 1
    model = make_model(op, loss_inputs(x, t, w), attrs, n_outputs=n_outputs, opset=opset, constants=constants)
    feeds = {k: v for k, v in loss_inputs(x, t, w).items() if v is not None and k not in constants}
    try:
        expected = run_reference(model, feeds, reference)
    except Exception:  # no onnxruntime kernel for this type
        expected = run_reference(model, feeds, "onnx.reference")
    return check_op(op, loss_inputs(x, t, w), attrs, opset=opset, n_outputs=n_outputs, constants=constants,
                    expected=expected, rtol=rtol, atol=atol)


SHAPES = [(6, 5), (3, 4, 7), (2, 3, 4, 5), (2, 3, 2, 2, 3)]


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_reductions_shapes_and_weights(op, shape, reduction, weighted):
    x = scores(shape)
    t = targets((shape[0],) + shape[2:], shape[1])
    w = rng.uniform(0.2, 2.0, shape[1]).astype(np.float32) if weighted else None
    check_loss(op, x, t, w, {"reduction": reduction})


# Every case the vectorized log-sum-exp reaches: [N, C] rows of one class, one vector of 16
# partial sums, 16 and a tail, several vectors; [N, C, D] with D past one 256-wide column
# block, and float64.
@pytest.mark.parametrize("shape", [(4, 1), (4, 16), (3, 17), (2, 33), (2, 130), (2, 17, 300), (1, 3, 257)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_vector_widths_and_column_blocks(shape, dtype):
    x = scores(shape, dtype) * 4
    t = targets((shape[0],) + shape[2:], shape[1])
    check_loss("SoftmaxCrossEntropyLoss", x, t, None, {"reduction": "none"}, log_prob=True)


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [0, 2, -1, 100])
def test_ignore_index(op, reduction, weighted, ignore_index):
    x = scores((8, 4, 3))
    t = targets((8, 3), 4, ignore=ignore_index)
    w = rng.uniform(0.2, 2.0, 4).astype(np.float32) if weighted else None
    check_loss(op, x, t, w, {"reduction": reduction, "ignore_index": ignore_index})


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 4, 2)], ids=str)
@pytest.mark.parametrize("ignore_index", [None, 1])
def test_softmax_cross_entropy_log_prob_output(reduction, shape, ignore_index):
    x = scores(shape)
    t = targets((shape[0],) + shape[2:], shape[1], ignore=ignore_index)
    attrs = {"reduction": reduction} | ({} if ignore_index is None else {"ignore_index": ignore_index})
    check_loss("SoftmaxCrossEntropyLoss", x, t, None, attrs, log_prob=True)


@pytest.mark.parametrize("op,opset", [(op, v) for op in LOSSES for v in (12, 13)] +
                         [("NegativeLogLikelihoodLoss", 22)])
@pytest.mark.parametrize("target_dtype", [np.int32, np.int64])
def test_every_opset_and_target_type(op, opset, target_dtype):
    x = scores((4, 5, 3))
    t = targets((4, 3), 5, target_dtype, ignore=3)
    check_loss(op, x, t, rng.uniform(0.5, 1.5, 5).astype(np.float32), {"ignore_index": 3}, opset=opset,
               reference="onnx.reference")


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_float64(op, reduction):
    x = scores((5, 6, 2), np.float64)
    check_loss(op, x, targets((5, 2), 6), rng.uniform(0.5, 1.5, 6), {"reduction": reduction})


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_float16(op, reduction):
    x = scores((6, 5, 3), np.float16)
    t = targets((6, 3), 5, ignore=2)
    w = rng.uniform(0.5, 1.5, 5).astype(np.float16)
    attrs = {"reduction": reduction, "ignore_index": 2}
    ours = run_onnxtrain(make_model(op, loss_inputs(x, t, w), attrs, opset=13), {"x": x, "t": t, "w": w})[0]
    wide = {"x": x.astype(np.float32), "t": t, "w": w.astype(np.float32)}
    expected = run_reference(make_model(op, wide, attrs, opset=13), wide, "onnxruntime")[0]
    assert ours.dtype == np.float16
    np.testing.assert_allclose(ours.astype(np.float32), expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_bfloat16(op, reduction):
    x = scores((6, 5, 3)).astype(ml_dtypes.bfloat16)
    t = targets((6, 3), 5, ignore=1)
    attrs = {"reduction": reduction, "ignore_index": 1}
    ours = run_onnxtrain(make_model(op, {"x": x, "t": t}, attrs, opset=13), {"x": x, "t": t})[0]
    wide = {"x": x.astype(np.float32), "t": t}
    expected = run_reference(make_model(op, wide, attrs, opset=13), wide, "onnxruntime")[0]
    assert ours.dtype == x.dtype
    np.testing.assert_allclose(ours.astype(np.float32), expected, rtol=2e-2, atol=2e-2)


def test_softmax_cross_entropy_is_stable_for_large_scores():
    x = np.array([[1e4, 0.0, -1e4], [88.0, 89.0, 90.0], [-1e4, -1e4 + 1, -1e4]], dtype=np.float32)
    t = np.array([1, 2, 0], dtype=np.int64)
    ours = check_loss("SoftmaxCrossEntropyLoss", x, t, None, {"reduction": "none"}, log_prob=True)
    assert np.all(np.isfinite(ours[0])) and np.all(np.isfinite(ours[1][x > -1e4]))
    np.testing.assert_allclose(ours[0][0], 1e4, rtol=1e-6)


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("shape", [(4, 1000), (3, 2000, 5), (64, 10, 300)], ids=str)
def test_many_classes_and_positions(op, shape):
    x = scores(shape)
    t = targets((shape[0],) + shape[2:], shape[1], ignore=7)
    check_loss(op, x, t, rng.uniform(0.5, 1.5, shape[1]).astype(np.float32), {"ignore_index": 7})


@pytest.mark.parametrize("op", LOSSES)
def test_weights_and_labels_as_constants(op):
    x = scores((4, 3))
    check_loss(op, x, targets((4,), 3), rng.uniform(0.5, 1.5, 3).astype(np.float32), {"reduction": "sum"},
               constants=["t", "w"])


@pytest.mark.parametrize("op", LOSSES)
def test_every_target_ignored_gives_nan_mean(op):
    x = scores((3, 4))
    ours = check_loss(op, x, np.full(3, 2, np.int64), None, {"ignore_index": 2})
    assert np.isnan(ours[0])


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction,expected", [("none", np.zeros((0, 3), np.float32)), ("sum", np.float32(0)),
                                                ("mean", np.float32(np.nan))])
def test_empty_batch(op, reduction, expected):
    x = np.zeros((0, 4, 3), np.float32)
    t = np.zeros((0, 3), np.int64)
    ours = check_op(op, {"x": x, "t": t}, {"reduction": reduction}, opset=13, expected=[np.asarray(expected)])
    assert ours[0].shape == np.asarray(expected).shape


def test_dynamic_shapes_reuse_one_session():
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss", "log_prob"])
    graph = helper.make_graph(
        [node], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"]),
         helper.make_tensor_value_info("t", TensorProto.INT64, ["n"])],
        [helper.make_empty_tensor_value_info("loss"), helper.make_empty_tensor_value_info("log_prob")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    session = onnxtrain.InferenceSession(model.SerializeToString())
    for n, c in ((2, 3), (7, 11), (1, 1)):
        x = scores((n, c))
        t = targets((n,), c)
        loss, log_prob = session.run(None, {"x": x, "t": t})
        expected_log_prob = x - np.log(np.sum(np.exp(x - x.max(1, keepdims=True)), 1, keepdims=True)) - x.max(
            1, keepdims=True)
        np.testing.assert_allclose(log_prob, expected_log_prob, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(loss, -np.mean(expected_log_prob[np.arange(n), t]), rtol=1e-5, atol=1e-6)


def run_loss(op, inputs, attrs=None, opset=13, constants=()):
    model = make_model(op, inputs, attrs, opset=opset, constants=constants)
    return run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None and k not in constants})


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("bad", [5, -2, 1000])
def test_target_out_of_range_raises_naming_the_value(op, bad):
    t = np.array([0, bad, 1], np.int64)
    with pytest.raises((ValueError, RuntimeError), match=rf"target value {bad} at flat position 1 of 'labels' is out "
                                                         r"of range: expected a class in \[0, 5\) or ignore_index -1"):
        run_loss(op, {"x": scores((3, 5)), "t": t}, {"ignore_index": -1})


def test_target_out_of_range_without_ignore_index_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"target value 3 at flat position 2 .*expected a class in "
                                                         r"\[0, 3\)$"):
        run_loss("SoftmaxCrossEntropyLoss", {"x": scores((2, 3, 2)), "t": np.array([[0, 1], [3, 2]], np.int32)})


@pytest.mark.parametrize("op", LOSSES)
def test_labels_of_the_wrong_shape_raise(op):
    with pytest.raises((ValueError, RuntimeError), match=r"input 'labels' has shape \[3, 2\]; expected \[3, 4\] for "
                                                         r"scores of shape \[3, 5, 4\]"):
        run_loss(op, {"x": scores((3, 5, 4)), "t": np.zeros((3, 2), np.int64)})


@pytest.mark.parametrize("op", LOSSES)
def test_weights_of_the_wrong_shape_raise(op):
    with pytest.raises((ValueError, RuntimeError), match=r"input 'weights' is float of shape \[4\]; expected float of "
                                                         r"shape \[5\]"):
        run_loss(op, {"x": scores((3, 5)), "t": np.zeros(3, np.int64), "w": np.ones(4, np.float32)})


@pytest.mark.parametrize("op", LOSSES)
def test_rank_one_scores_raise(op):
    with pytest.raises((ValueError, RuntimeError), match=r"input 'scores' must have shape \[N, C\] or "
                                                         r"\[N, C, d1, \.\.\.\], got \[5\]"):
        run_loss(op, {"x": scores((5,)), "t": np.zeros((), np.int64)})


def test_unknown_reduction_raises():
    with pytest.raises((ValueError, RuntimeError), match=r"attribute 'reduction' is 'avg'; expected 'none', 'sum' or "
                                                         r"'mean'"):
        run_loss("NegativeLogLikelihoodLoss", {"x": scores((3, 5)), "t": np.zeros(3, np.int64)}, {"reduction": "avg"})


def test_float_labels_raise():
    with pytest.raises((ValueError, RuntimeError), match=r"input 'labels' must be int32 or int64, got float"):
        run_loss("SoftmaxCrossEntropyLoss", {"x": scores((3, 5)), "t": np.zeros(3, np.float32)})
