"""Sequences of tensors and optionals: the Sequence* ops, SplitToSequence,
ConcatFromSequence, SequenceMap and the Optional ops against onnxruntime and
onnx.reference; sequences as graph inputs and outputs (lists of arrays), carried through
Loop and If; sequences built from intermediate values that the run's arena reuses; and
the errors for positions out of range, mixed element types and sequences given to ops that
take tensors."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain
from op_harness import run_reference

rng = np.random.default_rng(0)
F = TensorProto.FLOAT
I64 = TensorProto.INT64
BOTH = ("onnxruntime", "onnx.reference")


def seq_type(elem=F):
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None))


def seq(name, elem=F):
    return helper.make_value_info(name, seq_type(elem))


def opt_tensor(name, elem=F, shape=None):
    return helper.make_value_info(name, helper.make_optional_type_proto(helper.make_tensor_type_proto(elem, shape)))


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def run(model, feeds):
    return onnxtrain.InferenceSession(model.SerializeToString()).run(None, dict(feeds))


def assert_same(ours, theirs, where):
    if isinstance(theirs, (list, tuple)) and not isinstance(theirs, np.ndarray):
        assert isinstance(ours, list), f"{where}: got {type(ours).__name__}, expected a list"
        assert len(ours) == len(theirs), f"{where}: {len(ours)} tensors, expected {len(theirs)}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{k}]")
        return
    theirs = np.asarray(theirs)
    assert ours.dtype == theirs.dtype, f"{where}: {ours.dtype} vs {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{where}: {ours.shape} vs {theirs.shape}"
    np.testing.assert_array_equal(ours, theirs, err_msg=where)


def compare(model, feeds, references=BOTH):
    ours = run(model, feeds)
    for reference in references:
        theirs = run_reference(model, feeds, reference)
        assert len(ours) == len(theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{reference} output {i}")
    return ours


def tensors(*shapes, dtype=np.float32):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# ---- building and reading sequences


@pytest.mark.parametrize("position", [None, 0, 1, 2, -1, -2])
def test_insert_at_every_position(position):
    nodes = [helper.make_node("Constant", [], ["p"], value=helper.make_tensor("p", I64, [], [position]))] if (
        position is not None) else []
    nodes.append(helper.make_node("SequenceInsert", ["s", "x"] + (["p"] if position is not None else []), ["out"]))
    model = model_of(nodes, [seq("s"), vi("x", F, [2])], [seq("out")])
    # onnx.reference maps position n to (n + n) % n = 0, the front; the spec's range [-n, n]
    # makes n the back, as onnxruntime has it.
    references = ("onnxruntime",) if position == 2 else BOTH
    out = compare(model, {"s": tensors((2,), (3,)), "x": np.full(2, 7, np.float32)}, references)
    assert len(out[0]) == 3
    assert np.all(out[0][{None: 2, 0: 0, 1: 1, 2: 2, -1: 1, -2: 0}[position]] == 7)


@pytest.mark.parametrize("position", [None, 0, 2, -1, -3])
def test_erase_and_at(position):
    inputs = ["s"] + (["p"] if position is not None else [])
    nodes = [helper.make_node("SequenceErase", inputs, ["erased"]),
             helper.make_node("SequenceLength", ["erased"], ["n"]),
             helper.make_node("SequenceAt", ["s", "q"], ["at"])]
    if position is not None:
        nodes.insert(0, helper.make_node("Constant", [], ["p"], value=helper.make_tensor("p", I64, [], [position])))
    model = model_of(nodes, [seq("s"), vi("q", TensorProto.INT32, [])],
                     [seq("erased"), vi("n", I64, []), vi("at", F, None)])
    compare(model, {"s": tensors((1,), (2, 2), (3,)), "q": np.array(-2, np.int32)})


def test_construct_length_and_empty():
    model = model_of(
        [helper.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]),
         helper.make_node("SequenceLength", ["s"], ["n"]),
         helper.make_node("SequenceEmpty", [], ["e"], dtype=I64),
         helper.make_node("SequenceLength", ["e"], ["m"])],
        [vi("a", F, [2, 3]), vi("b", F, [4])],
        [seq("s"), vi("n", I64, []), seq("e", I64), vi("m", I64, [])])
    out = compare(model, dict(zip("ab", tensors((2, 3), (4,)))))
    assert out[3] == 0 and out[2] == []


@pytest.mark.parametrize("split, keepdims, axis", [
    (None, 1, 0), (None, 0, 1), (None, 0, -1), (np.array(2, np.int64), 1, 1), (np.array([1, 3, 1], np.int64), 1, 1),
    (np.array(3, np.int64), 1, 0),  # 5 rows in parts of 3: the last part has 2
])
def test_split_to_sequence(split, keepdims, axis):
    inputs = ["x"] + (["split"] if split is not None else [])
    node = helper.make_node("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims)
    graph_inputs = [vi("x", F, [5, 5, 2])] + ([vi("split", I64, list(split.shape))] if split is not None else [])
    feeds = {"x": tensors((5, 5, 2))[0]}
    if split is not None:
        feeds["split"] = split
    compare(model_of([node], graph_inputs, [seq("s")]), feeds)


@pytest.mark.parametrize("axis, new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-1, 1), (-3, 1)])
def test_concat_from_sequence(axis, new_axis):
    shapes = [(2, 3)] * 3 if new_axis else [(2, 3), (2, 3), (2, 3)]
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)
    compare(model_of([node], [seq("s")], [vi("y", F, None)]), {"s": tensors(*shapes)})


def test_concat_of_different_lengths_along_the_axis():
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1)
    compare(model_of([node], [seq("s")], [vi("y", F, None)]), {"s": tensors((2, 1), (2, 4), (2, 0))})


def test_sequences_of_other_element_types():
    node = helper.make_node("SequenceAt", ["s", "p"], ["y"])
    for dtype, elem in ((np.int64, I64), (np.float64, TensorProto.DOUBLE), (np.bool_, TensorProto.BOOL)):
        values = [np.arange(4).astype(dtype), np.ones((2, 2), dtype)]
        model = model_of([node], [seq("s", elem), vi("p", I64, [])], [vi("y", elem, None)])
        out = run(model, {"s": values, "p": np.array(1, np.int64)})
        assert_same(out[0], values[1], str(dtype))


def test_sequence_map_with_a_tensor_and_a_sequence():
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Shape", ["c"], ["shape"])], "body",
        [vi("a", F, None), vi("b", F, None)], [vi("c", F, None), vi("shape", I64, [None])])
    node = helper.make_node("SequenceMap", ["s", "t"], ["sums", "shapes"], body=body)
    model = model_of([node], [seq("s"), vi("t", F, [3])], [seq("sums"), seq("shapes", I64)])
    compare(model, {"s": tensors((3,), (2, 3), (1, 1, 3)), "t": tensors((3,))[0]})


# ---- sequences and the run's memory


def test_a_sequence_of_intermediates_survives_the_arena():
    # The sequence holds Relu/Neg outputs; the ops after it would reuse their arena space.
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Neg", ["x"], ["n"]),
        helper.make_node("SequenceConstruct", ["r", "n"], ["s"]),
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Add", ["sq", "x"], ["big"]),
        helper.make_node("SequenceInsert", ["s", "big"], ["s2"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0),
    ]
    model = model_of(nodes, [vi("x", F, ["n"])], [vi("y", F, None), seq("s2")])
    session = onnxtrain.InferenceSession(model.SerializeToString())
    for n in (1000, 1000, 5, 3000):  # recording, planned, then other shapes
        x = rng.standard_normal(n).astype(np.float32)
        y, s2 = session.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.concatenate([np.maximum(x, 0), -x, x * x + x]))
        assert_same(s2, [np.maximum(x, 0), -x, x * x + x], "s2")


def test_outputs_do_not_alias_the_fed_sequence():
    model = model_of([helper.make_node("Identity", ["s"], ["t"])], [seq("s")], [seq("t")])
    fed = tensors((3,), (2,))
    out = run(model, {"s": fed})[0]
    out[0][:] = 0
    assert not np.all(fed[0] == 0)


def test_loop_builds_a_sequence():
    # for i in range(M): s = SequenceInsert(s, x * i); the length is M.
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("SequenceInsert", ["s_in", "xi"], ["s_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond", TensorProto.BOOL, []), seq("s_in")],
        [vi("cond_out", TensorProto.BOOL, []), seq("s_out")])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"]),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)]
    model = model_of(nodes, [vi("M", I64, []), vi("x", F, [2])], [seq("s"), vi("y", F, None)])
    for m in (4, 1, 6):
        x = tensors((2,))[0]
        out = compare(model, {"M": np.array(m, np.int64), "x": x}, references=("onnxruntime",))
        np.testing.assert_allclose(out[1], np.stack([x * i for i in range(m)]), rtol=1e-6)


def test_if_returns_a_sequence_or_a_tensor_optional():
    then_branch = helper.make_graph([helper.make_node("SequenceConstruct", ["a", "a"], ["t"])], "then", [], [seq("t")])
    else_branch = helper.make_graph([helper.make_node("SequenceEmpty", [], ["e"])], "else", [], [seq("e")])
    model = model_of(
        [helper.make_node("If", ["c"], ["s"], then_branch=then_branch, else_branch=else_branch),
         helper.make_node("SequenceLength", ["s"], ["n"])],
        [vi("c", TensorProto.BOOL, []), vi("a", F, [2])], [vi("n", I64, [])])
    a = tensors((2,))[0]
    assert run(model, {"c": np.array(True), "a": a})[0] == 2
    assert run(model, {"c": np.array(False), "a": a})[0] == 0


# ---- optionals


def test_optional_inputs_take_none_or_a_value():
    model = model_of(
        [helper.make_node("OptionalHasElement", ["o"], ["has"]), helper.make_node("Identity", ["o"], ["same"])],
        [opt_tensor("o", F, [2])],
        [vi("has", TensorProto.BOOL, []), opt_tensor("same", F, [2])])
    session = onnxtrain.InferenceSession(model.SerializeToString())
    assert session.get_inputs()[0].type == "optional(tensor(float))"
    has, same = session.run(None, {"o": None})
    assert not has and same is None
    x = tensors((2,))[0]
    has, same = session.run(None, {"o": x})
    assert has and np.array_equal(same, x)
    has, same = session.run(None, {})  # not fed: no value either
    assert not has and same is None


def test_optional_of_nothing_and_get_element():
    model = model_of(
        [helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(F, [])),
         helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
         helper.make_node("Optional", ["x"], ["some"]),
         helper.make_node("OptionalGetElement", ["some"], ["y"])],
        [vi("x", F, [3])], [vi("has_none", TensorProto.BOOL, []), vi("y", F, [3])])
    compare(model, {"x": tensors((3,))[0]}, references=("onnxruntime",))


def test_getting_the_element_of_an_empty_optional_fails():
    model = model_of([helper.make_node("OptionalGetElement", ["o"], ["y"])], [opt_tensor("o", F, [2])],
                     [vi("y", F, [2])])
    with pytest.raises(ValueError, match="the optional input is empty"):
        run(model, {"o": None})


# ---- errors


def error_of(model, feeds):
    with pytest.raises((RuntimeError, ValueError)) as info:
        run(model, feeds)
    return str(info.value)


def test_positions_out_of_range():
    at = model_of([helper.make_node("SequenceAt", ["s", "p"], ["y"])], [seq("s"), vi("p", I64, [])], [vi("y", F, None)])
    message = error_of(at, {"s": tensors((1,), (1,)), "p": np.array(2, np.int64)})
    assert "position 2 is out of range for a sequence of 2 tensors (expected -2..1)" in message
    erase = model_of([helper.make_node("SequenceErase", ["s"], ["t"])], [seq("s")], [seq("t")])
    assert "cannot erase from an empty sequence" in error_of(erase, {"s": []})
    insert = model_of([helper.make_node("SequenceInsert", ["s", "x", "p"], ["t"])],
                      [seq("s"), vi("x", F, [1]), vi("p", I64, [])], [seq("t")])
    assert "expected -1..1" in error_of(insert, {"s": tensors((1,)), "x": tensors((1,))[0],
                                                 "p": np.array(-2, np.int64)})


def test_element_types_must_agree():
    insert = model_of([helper.make_node("SequenceInsert", ["s", "x"], ["t"])],
                      [seq("s", I64), vi("x", I64, [1])], [seq("t", I64)])
    assert "cannot insert a float tensor into a sequence of int64 tensors" in error_of(
        model_of([helper.make_node("SequenceInsert", ["s", "x"], ["t"])], [seq("s", I64), vi("x", F, [1])],
                 [seq("t", I64)]), {"s": [np.ones(1, np.int64)], "x": np.ones(1, np.float32)})
    assert "got a sequence of float tensors, expected a sequence of int64 tensors" in error_of(
        insert, {"s": [np.ones(1, np.float32)], "x": np.ones(1, np.int64)})
    with pytest.raises(ValueError, match="input 's': a sequence of int64 tensors cannot hold an element of type int32"):
        run(insert, {"s": [np.ones(1, np.int64), np.ones(1, np.int32)], "x": np.ones(1, np.int64)})


def test_concat_of_an_empty_sequence_or_mismatched_shapes():
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)
    model = model_of([node], [seq("s")], [vi("y", F, None)])
    assert "cannot concatenate an empty sequence" in error_of(model, {"s": []})
    assert "element 1 has shape [3, 3], incompatible with element 0 [2, 2]" in error_of(
        model, {"s": tensors((2, 2), (3, 3))})


def test_a_sequence_fed_to_a_tensor_op_is_refused():
    # Identity passes the sequence on; Relu takes tensors only.
    model = model_of([helper.make_node("Identity", ["s"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                     [seq("s")], [vi("y", F, None)])
    message = error_of(model, {"s": tensors((2,))})
    assert "input 't' is a sequence, which this op does not take" in message


def test_a_tensor_where_a_sequence_is_declared():
    model = model_of([helper.make_node("SequenceLength", ["s"], ["n"])], [seq("s")], [vi("n", I64, [])])
    assert "input 's': got float[2], expected sequence of float tensors" in error_of(model, {"s": np.ones(2, np.float32)})
