"""TfIdfVectorizer and the ai.onnx.ml tensor ops (Binarizer, ArrayFeatureExtractor,
TreeEnsemble, TreeEnsembleRegressor, TreeEnsembleClassifier, LabelEncoder) against
onnxruntime where it has them and onnx.reference. The classifier's two-class rules are
onnxruntime's (the spec leaves them open): random ensembles of every shape of weights,
base values and post_transform must give its labels and scores."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

from op_harness import check_op, run_onnxtrain, run_reference

ML = "ai.onnx.ml"
rng = np.random.default_rng(0)


def ml_model(op, inputs, attrs, ml_opset=5):
    node = helper.make_node(op, list(inputs), ["y"], domain=ML, **attrs)
    graph_inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                    for k, v in inputs.items()]
    graph = helper.make_graph([node], op, graph_inputs, [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)],
                             ir_version=10)


def check_ml(op, inputs, attrs, references=("onnx.reference",), ml_opset=5):
    model = ml_model(op, inputs, attrs, ml_opset)
    (ours,) = run_onnxtrain(model, inputs)
    for reference in references:
        (theirs,) = run_reference(model, inputs, reference)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, reference
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6, err_msg=reference)
    return ours


TFIDF = dict(min_gram_length=1, max_gram_length=3, ngram_counts=[0, 4, 8],
             ngram_indexes=[7, 6, 5, 4, 3, 2, 1, 0], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("skip", [0, 1, 3])
@pytest.mark.parametrize("min_n", [1, 2])
@pytest.mark.parametrize("weights", [False, True])
def test_tfidf_vectorizer(mode, skip, min_n, weights):
    x = rng.integers(2, 9, size=(3, 12)).astype(np.int32)
    attrs = {**TFIDF, "mode": mode, "max_skip_count": skip, "min_gram_length": min_n}
    if weights:
        attrs["weights"] = list(np.linspace(0.5, 2.0, 8))
    # onnx.reference 1.19 fails on IDF and TFIDF without weights (len(None)).
    references = ("onnxruntime", "onnx.reference") if weights or mode == "TF" else ("onnxruntime",)
    for reference in references:
        check_op("TfIdfVectorizer", {"x": x}, attrs, opset=9, reference=reference)
        check_op("TfIdfVectorizer", {"x": x[0].astype(np.int64)}, attrs, opset=9, reference=reference)


def test_binarizer():
    x = rng.standard_normal((4, 5)).astype(np.float32)
    check_ml("Binarizer", {"x": x}, {"threshold": 0.3}, references=("onnx.reference", "onnxruntime"), ml_opset=1)


@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 3, 7)])
def test_array_feature_extractor(shape):
    x = rng.standard_normal(shape).astype(np.float32)
    idx = np.array([0, 6, 2, 2], np.int64)
    check_ml("ArrayFeatureExtractor", {"x": x, "idx": idx}, {}, references=("onnx.reference", "onnxruntime"),
             ml_opset=1)


def tree_attrs(aggregate):
    # Tree 0: x0 <= 0.5 ? (x1 in {1, 3} ? leaf0 : leaf1) : leaf2. Tree 1: x2 > 0 ? leaf3 : leaf4.
    return dict(
        nodes_featureids=[0, 1, 2],
        nodes_modes=numpy_helper.from_array(np.array([0, 6, 3], np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array([0.5, np.nan, 0.0], np.float32)),
        nodes_truenodeids=[1, 0, 3], nodes_trueleafs=[0, 1, 1],
        nodes_falsenodeids=[2, 1, 4], nodes_falseleafs=[1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0],
        membership_values=numpy_helper.from_array(np.array([1.0, 3.0, np.nan], np.float32)),
        leaf_targetids=[0, 1, 0, 1, 1],
        leaf_weights=numpy_helper.from_array(np.array([1.0, 10.0, 100.0, 0.5, -2.0], np.float32)),
        tree_roots=[0, 2], n_targets=2, aggregate_function=aggregate,
    )


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble(aggregate):
    x = np.array([[0.0, 1.0, 1.0], [0.0, 2.0, -1.0], [1.0, 3.0, 0.5], [np.nan, 3.0, 0.0]], np.float32)
    y = check_ml("TreeEnsemble", {"x": x}, tree_attrs(aggregate))
    if aggregate == 1:
        np.testing.assert_array_equal(y, [[1.0, 0.5], [0.0, 8.0], [100.0, 0.5], [1.0, -2.0]])


@pytest.mark.parametrize("opset", [2, 4])
@pytest.mark.parametrize("kind", ["int_int", "int_float", "float_int", "float_float"])
def test_label_encoder_attribute_lists(opset, kind):
    keys_int = kind.startswith("int")
    values_int = kind.endswith("int")
    x = (np.array([[3, 7, 1], [9, 3, 0]], np.int64) if keys_int
         else np.array([0.5, -1.0, 2.25, 0.0, 7.0], np.float32))
    attrs = {"keys_int64s": [3, 9, 0]} if keys_int else {"keys_floats": [0.5, 2.25, -0.0]}
    attrs.update({"values_int64s": [30, 90, 5]} if values_int else {"values_floats": [3.5, 9.5, -1.5]})
    attrs.update({"default_int64": 42} if values_int else {"default_float": 0.25})
    check_ml("LabelEncoder", {"x": x}, attrs, references=("onnx.reference", "onnxruntime"), ml_opset=opset)


def test_label_encoder_tensor_attributes_and_nan_key():
    x = np.array([1.5, np.nan, 2.0, -3.0], np.float64)
    attrs = {"keys_tensor": numpy_helper.from_array(np.array([1.5, np.nan, -3.0], np.float64)),
             "values_tensor": numpy_helper.from_array(np.array([10, 20, 30], np.int32)),
             "default_tensor": numpy_helper.from_array(np.array([-7], np.int32))}
    y = check_ml("LabelEncoder", {"x": x}, attrs, references=(), ml_opset=4)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [10, 20, -7, 30])


def test_label_encoder_rejects_strings_and_mismatched_input():
    with pytest.raises((ValueError, RuntimeError), match="string tensors are not supported"):
        check_ml("LabelEncoder", {"x": np.array([1], np.int64)},
                 {"keys_strings": ["a"], "values_int64s": [1]}, references=(), ml_opset=2)
    with pytest.raises((ValueError, RuntimeError), match="expected the keys' type int64"):
        check_ml("LabelEncoder", {"x": np.array([1.0], np.float32)},
                 {"keys_int64s": [1], "values_int64s": [1]}, references=(), ml_opset=2)


def random_regressor(rng, n_trees, n_features, n_targets, depth=3):
    """TreeEnsembleRegressor attributes of random trees: node ids shuffled within each tree,
    every leaf with a weight for each target."""
    att = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                           "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                           "target_treeids", "target_nodeids", "target_ids", "target_weights")}
    modes = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
    for tree in range(n_trees):
        ids = list(rng.permutation(2 ** (depth + 1) - 1))  # node k of a full tree gets ids[k]
        for k in range(2 ** (depth + 1) - 1):
            leaf = k >= 2 ** depth - 1
            att["nodes_treeids"].append(tree)
            att["nodes_nodeids"].append(int(ids[k]))
            att["nodes_featureids"].append(0 if leaf else int(rng.integers(0, n_features)))
            att["nodes_modes"].append("LEAF" if leaf else modes[int(rng.integers(0, 4 if k % 3 else 6))])
            att["nodes_values"].append(0.0 if leaf else float(np.round(rng.standard_normal(), 1)))
            att["nodes_truenodeids"].append(0 if leaf else int(ids[2 * k + 1]))
            att["nodes_falsenodeids"].append(0 if leaf else int(ids[2 * k + 2]))
            att["nodes_missing_value_tracks_true"].append(int(rng.integers(0, 2)))
            if leaf:
                for target in range(n_targets):
                    att["target_treeids"].append(tree)
                    att["target_nodeids"].append(int(ids[k]))
                    att["target_ids"].append(target)
                    att["target_weights"].append(float(rng.standard_normal()))
    return att


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("n_targets", [1, 3])
def test_tree_ensemble_regressor(aggregate, n_targets):
    att = random_regressor(rng, n_trees=5, n_features=4, n_targets=n_targets)
    att.update(n_targets=n_targets, aggregate_function=aggregate, base_values=list(np.linspace(-1, 1, n_targets)))
    x = np.round(rng.standard_normal((50, 4)), 1).astype(np.float32)
    # onnx.reference 1.19 sends a NaN down the false branch of BRANCH_NEQ unless missing
    # values track true; onnxruntime and onnxtrain compare (NaN != v holds): NaN rows are
    # checked against onnxruntime only.
    check_ml("TreeEnsembleRegressor", {"x": x}, att, references=("onnxruntime", "onnx.reference"), ml_opset=3)
    x[::7, 1] = np.nan
    check_ml("TreeEnsembleRegressor", {"x": x}, att, references=("onnxruntime",), ml_opset=3)


@pytest.mark.parametrize("transform", ["LOGISTIC", "SOFTMAX"])
def test_tree_ensemble_regressor_post_transform(transform):
    att = random_regressor(rng, n_trees=3, n_features=3, n_targets=2)
    att.update(n_targets=2, post_transform=transform)
    check_ml("TreeEnsembleRegressor", {"x": rng.standard_normal((20, 3)).astype(np.float32)}, att,
             references=("onnxruntime",), ml_opset=3)


def test_tree_ensemble_regressor_rejects_dangling_branch():
    att = random_regressor(rng, n_trees=1, n_features=2, n_targets=1, depth=1)
    att["nodes_truenodeids"][0] = 99
    with pytest.raises((ValueError, RuntimeError), match="leads to node 99, which does not exist"):
        check_ml("TreeEnsembleRegressor", {"x": np.zeros((1, 2), np.float32)}, att, references=(), ml_opset=3)


def random_classifier(rng, n_trees, n_features, weighted_classes, positive):
    att = random_regressor(rng, n_trees, n_features, n_targets=len(weighted_classes))
    renamed = {}
    for key, value in att.items():
        renamed[key.replace("target_", "class_")] = value
    renamed["class_ids"] = [weighted_classes[i] for i in renamed["class_ids"]]
    if positive:
        renamed["class_weights"] = [abs(w) / n_trees for w in renamed["class_weights"]]
    return renamed


def classifier_model(att):
    node = helper.make_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain=ML, **att)
    graph = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", 1, [None, 4])],
                              [helper.make_empty_tensor_value_info("label"), helper.make_empty_tensor_value_info("scores")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 3)],
                             ir_version=10)


@pytest.mark.parametrize("labels,weighted,positive,base,transform", [
    ([10, 20, 30], [0, 1, 2], True, None, "NONE"),
    ([10, 20, 30], [0, 1, 2], False, [0.1, -0.2, 0.3], "SOFTMAX"),
    ([10, 20, 30], [0, 2], False, None, "LOGISTIC"),
    ([10, 20, 30], [0, 2], False, [0.1, 0.2, 0.3], "NONE"),
    ([0, 1], [0, 1], True, None, "NONE"),
    ([0, 1], [0, 1], False, [0.5, -0.5], "NONE"),
    ([3, 7], [1], True, None, "NONE"),
    ([3, 7], [1], False, [0.25], "LOGISTIC"),
    ([3, 7], [1], False, None, "NONE"),
    ([3, 7], [0], False, [0.1, 0.2], "NONE"),
    ([0, 1], [1], True, [0.2, 0.7], "LOGISTIC"),
    ([0, 1], [0, 1], False, [0.4, -0.3], "SOFTMAX_ZERO"),
    ([4, 9, 2, 5], [0, 3], False, [0.1, 0.2, 0.3, 0.4], "SOFTMAX"),
])
def test_tree_ensemble_classifier_matches_onnxruntime(labels, weighted, positive, base, transform):
    import onnxruntime as ort

    att = random_classifier(rng, 4, 4, weighted, positive)
    att.update(classlabels_int64s=labels, post_transform=transform)
    if base is not None:
        att["base_values"] = base
    model = classifier_model(att)
    x = np.round(rng.standard_normal((60, 4)), 1).astype(np.float32)
    ours = run_onnxtrain(model, {"x": x})
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert ours[0].dtype == np.int64 and ours[1].dtype == np.float32
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)


def test_tree_ensemble_classifier_refuses_string_labels():
    att = random_classifier(rng, 1, 4, [0, 1], True)
    att["classlabels_strings"] = ["a", "b"]
    with pytest.raises((ValueError, RuntimeError), match="classlabels_strings: string tensors are not supported"):
        run_onnxtrain(classifier_model(att), {"x": np.zeros((1, 4), np.float32)})
