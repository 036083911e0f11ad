// Shapes of the classical machine-learning ops (src/ops/cpu/ml.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// TfIdfVectorizer: float [max(ngram_indexes) + 1], with X's batch axis when X is [B, C].
void tfidf_vectorizer(ShapeContext& c) {
  Dim size;
  if (const auto indexes = c.ints_attribute("ngram_indexes"); indexes && !indexes->empty()) {
    size = known(*std::max_element(indexes->begin(), indexes->end()) + 1);
  }
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, DType::kFloat32);
  c.set(0, DType::kFloat32, x->size() == 2 ? SymbolicShape{(*x)[0], size} : SymbolicShape{size});
}

// ArrayFeatureExtractor: X's shape ([1, F] for a 1-D X) with a last axis of Y's size.
void array_feature_extractor(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const SymbolicShape* y = c.shape(1);
  if (!x || x->empty()) return c.set(0, c.dtype(0));
  SymbolicShape out = x->size() == 1 ? SymbolicShape{known(1), Dim{}} : *x;
  const auto picked = y ? product(*y, 0, y->size()) : std::nullopt;
  out.back() = picked ? known(*picked) : Dim{};
  c.set(0, c.dtype(0), out);
}

// TreeEnsemble: [N, n_targets] of X's type.
void tree_ensemble(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const auto targets = c.int_attribute("n_targets");
  c.set(0, c.dtype(0), SymbolicShape{x && x->size() == 2 ? (*x)[0] : Dim{}, targets ? known(*targets) : Dim{}});
}

// LabelEncoder: X's shape, of the values' type.
void label_encoder(ShapeContext& c) {
  DType dtype = DType::kUndefined;
  if (const Attribute* t = c.node().attribute("values_tensor"); t && t->type == AttributeType::kTensor) {
    dtype = t->t.dtype();
  } else if (c.ints_attribute("values_int64s")) {
    dtype = DType::kInt64;
  } else if (c.node().attribute("values_floats")) {
    dtype = DType::kFloat32;
  }
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, dtype);
  c.set(0, dtype, *x);
}

// TreeEnsembleRegressor: float [N, n_targets].
void tree_ensemble_regressor(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  c.set(0, DType::kFloat32,
        SymbolicShape{x && x->size() == 2 ? (*x)[0] : Dim{}, known(c.int_attribute("n_targets").value_or(1))});
}

// TreeEnsembleClassifier: int64 labels [N] and float scores [N, classes].
void tree_ensemble_classifier(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const Dim rows = x && x->size() == 2 ? (*x)[0] : Dim{};
  const auto labels = c.ints_attribute("classlabels_int64s");
  c.set(0, DType::kInt64, SymbolicShape{rows});
  c.set(1, DType::kFloat32, SymbolicShape{rows, labels ? known(static_cast<int64_t>(labels->size())) : Dim{}});
}

const ShapeRuleRegistration kTfIdfShapes{{{"TfIdfVectorizer", tfidf_vectorizer}}};
const ShapeRuleRegistration kMlShapes{{
                                          {"Binarizer", same_as_input},
                                          {"ArrayFeatureExtractor", array_feature_extractor},
                                          {"TreeEnsemble", tree_ensemble},
                                          {"TreeEnsembleRegressor", tree_ensemble_regressor},
                                          {"TreeEnsembleClassifier", tree_ensemble_classifier},
                                          {"LabelEncoder", label_encoder},
                                      },
                                      "ai.onnx.ml"};

}  // namespace
}  // namespace onnxtrain::ir
