// Classical machine-learning ops on tensors: TfIdfVectorizer (default domain) and, of
// ai.onnx.ml, Binarizer, ArrayFeatureExtractor, TreeEnsemble, TreeEnsembleRegressor and
// LabelEncoder. Strings are not a tensor
// type onnxtrain supports, so the string forms of these ops are refused.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr const char* kMl = "ai.onnx.ml";

// A float-typed tensor attribute as doubles; empty when absent.
std::vector<double> doubles_of(const KernelInfo& info, std::string_view name) {
  const Tensor* t = info.tensor_attribute(name);
  if (t == nullptr) return {};
  std::vector<double> out(static_cast<size_t>(t->numel()));
  dispatch<ONNXTRAIN_NUMERIC_TYPES>(t->dtype(), name, [&]<typename T>() {
    const T* v = t->data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(static_cast<compute_type_t<T>>(v[i]));
  });
  return out;
}

// ---------------------------------------------------------------------------------------
// TfIdfVectorizer (X [C] or [B, C] of int32/int64) => float [output_size] or [B, output_size]:
// counts, per row, the n-grams of the pool (n in [min_gram_length, max_gram_length]) whose
// items are skip_distance apart (1 .. max_skip_count + 1; unigrams once), at the output
// index ngram_indexes gives each, then weighs them by `mode`.

struct TfIdf {
  int64_t min_n = 1, max_n = 1, max_skip = 0, output_size = 0;
  enum class Mode { kTf, kIdf, kTfIdf } mode = Mode::kTf;
  std::vector<double> weights;
  std::map<std::vector<int64_t>, int64_t> grams;  // n-gram -> output index
};

TfIdf tfidf_from(const KernelInfo& info) {
  TfIdf p;
  p.min_n = info.int_attribute("min_gram_length");
  p.max_n = info.int_attribute("max_gram_length");
  p.max_skip = info.int_attribute("max_skip_count");
  if (p.min_n < 1 || p.max_n < p.min_n || p.max_skip < 0) {
    info.fail("expected 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got " +
              std::to_string(p.min_n) + ", " + std::to_string(p.max_n) + ", " + std::to_string(p.max_skip));
  }
  const std::string mode = info.string_attribute("mode");
  if (mode == "TF") {
    p.mode = TfIdf::Mode::kTf;
  } else if (mode == "IDF") {
    p.mode = TfIdf::Mode::kIdf;
  } else if (mode == "TFIDF") {
    p.mode = TfIdf::Mode::kTfIdf;
  } else {
    info.fail("mode is '" + mode + "', expected TF, IDF or TFIDF");
  }
  if (info.has_attribute("pool_strings")) info.fail("pool_strings: string tensors are not supported");
  const std::vector<int64_t> pool = info.ints_attribute("pool_int64s");
  const std::vector<int64_t> counts = info.ints_attribute("ngram_counts");
  const std::vector<int64_t> indexes = info.ints_attribute("ngram_indexes");
  const std::vector<float> weights = info.floats_attribute("weights", std::vector<float>{});
  p.weights.assign(weights.begin(), weights.end());
  for (int64_t i : indexes) {
    if (i < 0) info.fail("ngram_indexes holds " + std::to_string(i) + ", expected indexes >= 0");
    p.output_size = std::max(p.output_size, i + 1);
  }
  if (!p.weights.empty() && static_cast<int64_t>(p.weights.size()) < p.output_size) {
    info.fail("weights has " + std::to_string(p.weights.size()) + " values, expected one per output (" +
              std::to_string(p.output_size) + ")");
  }
  // ngram_counts[n - 1] is where the n-grams start in the pool; ids count across all sizes.
  size_t id = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    const int64_t n = static_cast<int64_t>(s) + 1;
    const int64_t begin = counts[s], end = s + 1 < counts.size() ? counts[s + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end < begin || end > static_cast<int64_t>(pool.size()) || (end - begin) % n != 0) {
      info.fail("ngram_counts " + std::to_string(s) + " gives pool items [" + std::to_string(begin) + ", " +
                std::to_string(end) + "), not a whole number of " + std::to_string(n) + "-grams of the pool's " +
                std::to_string(pool.size()));
    }
    for (int64_t at = begin; at < end; at += n, ++id) {
      if (n < p.min_n || n > p.max_n) continue;
      if (id >= indexes.size()) info.fail("ngram_indexes has fewer entries than the pool has n-grams");
      p.grams.emplace(std::vector<int64_t>(pool.begin() + at, pool.begin() + at + n), indexes[id]);
    }
  }
  return p;
}

template <typename I>
void count_row(const TfIdf& p, const I* x, int64_t c, std::vector<int64_t>& counts) {
  std::vector<int64_t> gram;
  for (int64_t start = 0; start < c; ++start) {
    for (int64_t skip = 1; skip <= p.max_skip + 1; ++skip) {
      gram.clear();
      for (int64_t n = 1; n <= p.max_n && start + (n - 1) * skip < c; ++n) {
        gram.push_back(static_cast<int64_t>(x[start + (n - 1) * skip]));
        if (n < p.min_n || (n == 1 && skip > 1)) continue;  // unigrams count once
        const auto hit = p.grams.find(gram);
        if (hit != p.grams.end()) ++counts[static_cast<size_t>(hit->second)];
      }
    }
  }
}

const KernelRegistration kTfIdfVectorizer{
    "", "TfIdfVectorizer", 9, kLatestOpset, [](const KernelInfo& info) {
      const TfIdf p = tfidf_from(info);
      return make_kernel([p](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() > 2) ctx.fail("X must be [C] or [B, C], got " + shape_string(x.shape()));
        const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, c = x.rank() == 0 ? 1 : x.dim(-1);
        Tensor& y =
            ctx.allocate_output(0, DType::kFloat32, x.rank() == 2 ? Shape{rows, p.output_size} : Shape{p.output_size});
        float* out = y.data<float>();
        dispatch<int32_t, int64_t>(x.dtype(), "TfIdfVectorizer", [&]<typename I>() {
          parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
            std::vector<int64_t> counts(static_cast<size_t>(p.output_size));
            for (int64_t r = begin; r < end; ++r) {
              std::fill(counts.begin(), counts.end(), 0);
              count_row(p, x.data<I>() + r * c, c, counts);
              for (int64_t i = 0; i < p.output_size; ++i) {
                const auto f = static_cast<double>(counts[static_cast<size_t>(i)]);
                const double w = p.weights.empty() ? 1.0 : p.weights[static_cast<size_t>(i)];
                const double v = p.mode == TfIdf::Mode::kTf    ? f
                                 : p.mode == TfIdf::Mode::kIdf ? (f > 0 ? w : 0.0)
                                                               : w * f;
                out[r * p.output_size + i] = static_cast<float>(v);
              }
            }
          });
        });
      });
    }};

// ---------------------------------------------------------------------------------------
// Binarizer: 1 where x > threshold, else 0, of X's type.

const KernelRegistration kBinarizer{kMl, "Binarizer", 1, kLatestOpset, [](const KernelInfo& info) {
                                      const double threshold = info.float_attribute("threshold", 0.0f);
                                      return make_kernel([threshold](KernelContext& ctx) {
                                        const Tensor& x = ctx.input(0);
                                        Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
                                        dispatch<float, double, int32_t, int64_t>(
                                            x.dtype(), "Binarizer", [&]<typename T>() {
                                              const T* in = x.data<T>();
                                              T* out = y.data<T>();
                                              for (int64_t i = 0; i < x.numel(); ++i) {
                                                out[i] = static_cast<double>(in[i]) > threshold ? T(1) : T(0);
                                              }
                                            });
                                      });
                                    }};

// ---------------------------------------------------------------------------------------
// ArrayFeatureExtractor (X [..., F], Y indices) => [..., len(Y)] (a 1-D X gives [1, len(Y)]):
// the features Y of the last axis.

const KernelRegistration kArrayFeatureExtractor{
    kMl, "ArrayFeatureExtractor", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        if (x.rank() == 0) ctx.fail("X must have rank 1 or more, got a scalar");
        if (indices.dtype() != DType::kInt64) {
          ctx.fail("Y must be int64, got " + std::string(dtype_name(indices.dtype())));
        }
        const int64_t features = x.dim(-1), picked = indices.numel();
        const int64_t* idx = indices.data<int64_t>();
        for (int64_t i = 0; i < picked; ++i) {
          if (idx[i] < 0 || idx[i] >= features) {
            ctx.fail("index " + std::to_string(idx[i]) + " is out of range for the last axis of X " +
                     shape_string(x.shape()) + " (expected 0.." + std::to_string(features - 1) + ")");
          }
        }
        Shape shape = x.rank() == 1 ? Shape{1, picked} : x.shape();
        shape.back() = picked;
        Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
        const int64_t rows = features == 0 ? 0 : x.numel() / features;
        const size_t bytes = dtype_bytes(x.dtype(), 1);
        const auto* in = static_cast<const std::byte*>(x.raw_data());
        auto* out = static_cast<std::byte*>(y.raw_data());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < picked; ++i) {
            std::memcpy(out + (r * picked + i) * bytes, in + (r * features + idx[i]) * bytes, bytes);
          }
        }
      });
    }};

// ---------------------------------------------------------------------------------------
// TreeEnsemble (ai.onnx.ml opset 5) (X [N, F]) => [N, n_targets]: each tree sends a row from
// its root through interior nodes (feature, mode, split) to a leaf (target, weight); the
// leaves' weights aggregate per target (sum, average, min or max), then post_transform.

enum class SplitMode : uint8_t { kLeq, kLt, kGte, kGt, kEq, kNeq, kMember };

struct Tree {
  struct Interior {
    int64_t feature = 0;
    SplitMode mode = SplitMode::kLeq;
    double split = 0;
    std::vector<double> members;  // kMember
    bool missing_true = false;
    int64_t next[2] = {0, 0};  // [false, true] child: a node index, or ~leaf index
  };
  std::vector<Interior> nodes;
  std::vector<int64_t> roots;  // a node index, or ~leaf index
  // Leaf l adds (leaf_targets[i], leaf_weights[i]) for i in [leaf_begin[l], leaf_begin[l + 1]).
  std::vector<size_t> leaf_begin = {0};
  std::vector<int64_t> leaf_targets;
  std::vector<double> leaf_weights;
  std::vector<double> base_values;  // added after the aggregation; empty: zeros
  int64_t targets = 1;
  int64_t aggregate = 1;       // 0 average, 1 sum, 2 min, 3 max
  int64_t post_transform = 0;  // 0 none, 1 softmax, 2 logistic, 3 softmax_zero
  size_t leaves() const { return leaf_begin.size() - 1; }
};

// Checks what every ensemble needs: known aggregation and post_transform, targets in range.
void check_ensemble(const KernelInfo& info, const Tree& t) {
  if (t.leaf_weights.size() != t.leaf_targets.size()) info.fail("the leaf weights and target ids differ in length");
  if (t.targets < 1) info.fail("n_targets is " + std::to_string(t.targets) + ", expected 1 or more");
  if (t.aggregate < 0 || t.aggregate > 3) {
    info.fail("aggregate_function " + std::to_string(t.aggregate) + " is unknown");
  }
  if (t.post_transform < 0 || t.post_transform > 3) {
    info.fail("post_transform " + std::to_string(t.post_transform) + " is not supported (NONE, SOFTMAX, LOGISTIC, " +
              "SOFTMAX_ZERO are)");
  }
  for (int64_t target : t.leaf_targets) {
    if (target < 0 || target >= t.targets) info.fail("leaf target " + std::to_string(target) + " >= n_targets");
  }
  // Two classes may have one base value (onnxruntime's binary rules).
  const bool binary_base = t.targets == 2 && t.base_values.size() == 1;
  if (!t.base_values.empty() && static_cast<int64_t>(t.base_values.size()) != t.targets && !binary_base) {
    info.fail("base_values has " + std::to_string(t.base_values.size()) + " values, expected n_targets (" +
              std::to_string(t.targets) + ")");
  }
}

bool goes_true(const Tree::Interior& n, double v) {
  if (std::isnan(v) && n.missing_true) return true;
  switch (n.mode) {
    case SplitMode::kLeq:
      return v <= n.split;
    case SplitMode::kLt:
      return v < n.split;
    case SplitMode::kGte:
      return v >= n.split;
    case SplitMode::kGt:
      return v > n.split;
    case SplitMode::kEq:
      return v == n.split;
    case SplitMode::kNeq:
      return v != n.split;
    case SplitMode::kMember:
      return std::find(n.members.begin(), n.members.end(), v) != n.members.end();
  }
  return false;
}

Tree tree_from(const KernelInfo& info) {
  Tree t;
  const std::vector<double> splits = doubles_of(info, "nodes_splits");
  const std::vector<int64_t> features = info.ints_attribute("nodes_featureids");
  const Tensor* modes = info.tensor_attribute("nodes_modes");
  const std::vector<int64_t> true_ids = info.ints_attribute("nodes_truenodeids");
  const std::vector<int64_t> false_ids = info.ints_attribute("nodes_falsenodeids");
  const std::vector<int64_t> true_leafs = info.ints_attribute("nodes_trueleafs");
  const std::vector<int64_t> false_leafs = info.ints_attribute("nodes_falseleafs");
  const std::vector<int64_t> missing = info.ints_attribute("nodes_missing_value_tracks_true", std::vector<int64_t>{});
  const std::vector<double> members = doubles_of(info, "membership_values");
  t.leaf_targets = info.ints_attribute("leaf_targetids");
  t.leaf_weights = doubles_of(info, "leaf_weights");
  for (size_t l = 1; l <= t.leaf_targets.size(); ++l) t.leaf_begin.push_back(l);  // one target each
  t.targets = info.int_attribute("n_targets");
  t.aggregate = info.int_attribute("aggregate_function", 1);
  t.post_transform = info.int_attribute("post_transform", 0);
  const size_t count = features.size();
  if (modes == nullptr || modes->dtype() != DType::kUInt8 || static_cast<size_t>(modes->numel()) != count ||
      splits.size() != count || true_ids.size() != count || false_ids.size() != count || true_leafs.size() != count ||
      false_leafs.size() != count || (!missing.empty() && missing.size() != count)) {
    info.fail("the nodes_* attributes must all have one entry per node (" + std::to_string(count) +
              ", from nodes_featureids); nodes_modes a uint8 tensor");
  }
  check_ensemble(info, t);
  size_t member_at = 0;
  const auto child = [&](int64_t id, bool leaf) {
    const auto limit = static_cast<int64_t>(leaf ? t.leaf_targets.size() : count);
    if (id < 0 || id >= limit) info.fail("a child " + std::string(leaf ? "leaf" : "node") + " index is out of range");
    return leaf ? ~id : id;
  };
  t.nodes.resize(count);
  for (size_t i = 0; i < count; ++i) {
    Tree::Interior& n = t.nodes[i];
    n.feature = features[i];
    if (n.feature < 0) info.fail("nodes_featureids holds a negative feature");
    const uint8_t mode = modes->data<uint8_t>()[i];
    if (mode > 6) info.fail("nodes_modes holds " + std::to_string(mode) + ", expected 0..6");
    n.mode = static_cast<SplitMode>(mode);
    n.split = splits[i];
    n.missing_true = !missing.empty() && missing[i] != 0;
    n.next[1] = child(true_ids[i], true_leafs[i] != 0);
    n.next[0] = child(false_ids[i], false_leafs[i] != 0);
    if (n.mode == SplitMode::kMember) {
      // The members of successive set-membership nodes, each list ended by a NaN.
      while (member_at < members.size() && !std::isnan(members[member_at])) n.members.push_back(members[member_at++]);
      if (member_at++ >= members.size()) info.fail("membership_values has no NaN-ended list for every MEMBER node");
    }
  }
  for (int64_t root : info.ints_attribute("tree_roots")) {
    if (root < 0 || root >= static_cast<int64_t>(count)) info.fail("tree_roots holds an index out of range");
    const Tree::Interior& r = t.nodes[static_cast<size_t>(root)];
    // A tree that is one leaf: both branches lead to the same leaf.
    const bool leaf = true_leafs[static_cast<size_t>(root)] && false_leafs[static_cast<size_t>(root)] &&
                      true_ids[static_cast<size_t>(root)] == false_ids[static_cast<size_t>(root)];
    t.roots.push_back(leaf ? r.next[1] : root);
  }
  return t;
}

// The leaf a row reaches from `at`.
int64_t leaf_of(const Tree& t, int64_t at, const double* row, int64_t features, const KernelContext& ctx) {
  while (at >= 0) {
    const Tree::Interior& n = t.nodes[static_cast<size_t>(at)];
    if (n.feature >= features)
      ctx.fail("a node splits on feature " + std::to_string(n.feature) + ", X has " + std::to_string(features));
    at = n.next[goes_true(n, row[n.feature]) ? 1 : 0];
  }
  return ~at;
}

void post_transform(std::vector<double>& v, int64_t kind) {
  if (kind == 2) {
    for (double& x : v) x = 1.0 / (1.0 + std::exp(-x));
  } else if (kind == 1 || kind == 3) {
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (double x : v) top = std::max(top, x);
    for (double& x : v) sum += (x = (kind == 3 && x == 0) ? 0.0 : std::exp(x - top));
    for (double& x : v) x = sum > 0 ? x / sum : 0.0;
  }
}

// Runs every row of X [N, F] through the ensemble into an output [N, n_targets] of `dtype`.
void evaluate(const Tree& t, KernelContext& ctx, DType dtype) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) ctx.fail("X must be [N, F], got " + shape_string(x.shape()));
  const int64_t rows = x.dim(0), features = x.dim(1);
  Tensor& y = ctx.allocate_output(0, dtype, {rows, t.targets});
  std::vector<double> row(static_cast<size_t>(features)), sums(static_cast<size_t>(t.targets));
  dispatch<float, double, Float16, int32_t, int64_t>(x.dtype(), ctx.node().op_type, [&]<typename X>() {
    dispatch<float, double, Float16>(dtype, ctx.node().op_type, [&]<typename T>() {
      const X* in = x.data<X>();
      T* out = y.data<T>();
      // A target no leaf reached keeps the output type's extreme under min and max.
      const double extreme = static_cast<double>(std::numeric_limits<compute_type_t<T>>::max());
      const double init = t.aggregate == 2 ? extreme : t.aggregate == 3 ? -extreme : 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t f = 0; f < features; ++f) {
          row[static_cast<size_t>(f)] = static_cast<double>(static_cast<compute_type_t<X>>(in[r * features + f]));
        }
        std::fill(sums.begin(), sums.end(), init);
        for (int64_t root : t.roots) {
          const size_t leaf = static_cast<size_t>(leaf_of(t, root, row.data(), features, ctx));
          for (size_t i = t.leaf_begin[leaf]; i < t.leaf_begin[leaf + 1]; ++i) {
            double& s = sums[static_cast<size_t>(t.leaf_targets[i])];
            const double w = t.leaf_weights[i];
            s = t.aggregate == 2 ? std::min(s, w) : t.aggregate == 3 ? std::max(s, w) : s + w;
          }
        }
        for (size_t k = 0; k < sums.size(); ++k) {
          if (t.aggregate == 0 && !t.roots.empty()) sums[k] /= static_cast<double>(t.roots.size());
          if (!t.base_values.empty()) sums[k] += t.base_values[k];
        }
        post_transform(sums, t.post_transform);
        for (int64_t k = 0; k < t.targets; ++k) {
          out[r * t.targets + k] = static_cast<T>(static_cast<compute_type_t<T>>(sums[static_cast<size_t>(k)]));
        }
      }
    });
  });
}

const KernelRegistration kTreeEnsemble{
    kMl, "TreeEnsemble", 5, kLatestOpset, [](const KernelInfo& info) {
      const Tree t = tree_from(info);
      return make_kernel([t](KernelContext& ctx) {
        const DType dtype = ctx.input(0).dtype();
        if (!is_floating(dtype)) {
          ctx.fail("X must be float, double or float16, got " + std::string(dtype_name(dtype)));
        }
        evaluate(t, ctx, dtype);
      });
    }};

// TreeEnsembleRegressor (ai.onnx.ml opsets 1-5) (X [N, F]) => float [N, n_targets]: the
// same ensembles in the older encoding. Nodes are (tree id, node id) pairs with a mode
// string (BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ or LEAF); a
// tree's root is its first node; a leaf adds every target_* entry of its (tree, node).

// A float list attribute, or its *_as_tensor form (opset 3).
std::vector<double> floats_or_tensor(const KernelInfo& info, const std::string& name) {
  if (info.has_attribute(name + "_as_tensor")) return doubles_of(info, name + "_as_tensor");
  const std::vector<float> f = info.floats_attribute(name, std::vector<float>{});
  return {f.begin(), f.end()};
}

// `leaf` names the leaf attributes: "target" (regressor) or "class" (classifier), whose
// n_targets is the count of class labels.
Tree ensemble_from(const KernelInfo& info, const std::string& leaf) {
  Tree t;
  const std::vector<int64_t> tree_ids = info.ints_attribute("nodes_treeids");
  const std::vector<int64_t> node_ids = info.ints_attribute("nodes_nodeids");
  const std::vector<int64_t> features = info.ints_attribute("nodes_featureids");
  const std::vector<std::string> modes =
      info.node().attribute("nodes_modes") ? info.node().attribute("nodes_modes")->strings : std::vector<std::string>{};
  const std::vector<double> values = floats_or_tensor(info, "nodes_values");
  const std::vector<int64_t> true_ids = info.ints_attribute("nodes_truenodeids");
  const std::vector<int64_t> false_ids = info.ints_attribute("nodes_falsenodeids");
  const std::vector<int64_t> missing = info.ints_attribute("nodes_missing_value_tracks_true", std::vector<int64_t>{});
  const size_t count = tree_ids.size();
  if (node_ids.size() != count || features.size() != count || modes.size() != count || values.size() != count ||
      true_ids.size() != count || false_ids.size() != count || (!missing.empty() && missing.size() != count)) {
    info.fail("the nodes_* attributes must all have one entry per node (" + std::to_string(count) +
              ", from nodes_treeids)");
  }
  // Every (tree, node) becomes an interior node index or ~leaf index.
  std::map<std::pair<int64_t, int64_t>, int64_t> index;
  int64_t interior = 0, leaves = 0;
  std::set<int64_t> seen_trees;
  for (size_t i = 0; i < count; ++i) {
    const bool leaf = modes[i] == "LEAF";
    if (!index.emplace(std::pair{tree_ids[i], node_ids[i]}, leaf ? ~leaves : interior).second) {
      info.fail("node " + std::to_string(node_ids[i]) + " of tree " + std::to_string(tree_ids[i]) + " appears twice");
    }
    (leaf ? leaves : interior)++;
    if (seen_trees.insert(tree_ids[i]).second) t.roots.push_back(index.at({tree_ids[i], node_ids[i]}));
  }
  static const std::map<std::string, SplitMode> kModes = {
      {"BRANCH_LEQ", SplitMode::kLeq}, {"BRANCH_LT", SplitMode::kLt}, {"BRANCH_GTE", SplitMode::kGte},
      {"BRANCH_GT", SplitMode::kGt},   {"BRANCH_EQ", SplitMode::kEq}, {"BRANCH_NEQ", SplitMode::kNeq}};
  const auto child = [&](int64_t tree, int64_t node) {
    const auto hit = index.find({tree, node});
    if (hit == index.end()) {
      info.fail("a branch of tree " + std::to_string(tree) + " leads to node " + std::to_string(node) +
                ", which does not exist");
    }
    return hit->second;
  };
  t.nodes.resize(static_cast<size_t>(interior));
  for (size_t i = 0; i < count; ++i) {
    if (modes[i] == "LEAF") continue;
    const auto mode = kModes.find(modes[i]);
    if (mode == kModes.end()) info.fail("nodes_modes holds '" + modes[i] + "', expected BRANCH_* or LEAF");
    Tree::Interior& n = t.nodes[static_cast<size_t>(index.at({tree_ids[i], node_ids[i]}))];
    n.feature = features[i];
    if (n.feature < 0) info.fail("nodes_featureids holds a negative feature");
    n.mode = mode->second;
    n.split = values[i];
    n.missing_true = !missing.empty() && missing[i] != 0;
    n.next[1] = child(tree_ids[i], true_ids[i]);
    n.next[0] = child(tree_ids[i], false_ids[i]);
  }
  const std::vector<int64_t> target_trees = info.ints_attribute(leaf + "_treeids");
  const std::vector<int64_t> target_nodes = info.ints_attribute(leaf + "_nodeids");
  const std::vector<int64_t> target_ids = info.ints_attribute(leaf + "_ids");
  const std::vector<double> weights = floats_or_tensor(info, leaf + "_weights");
  if (target_nodes.size() != target_trees.size() || target_ids.size() != target_trees.size() ||
      weights.size() != target_trees.size()) {
    info.fail(leaf + "_treeids, " + leaf + "_nodeids, " + leaf + "_ids and " + leaf + "_weights differ in length");
  }
  // Group the target entries by leaf.
  std::vector<std::vector<size_t>> by_leaf(static_cast<size_t>(leaves));
  for (size_t i = 0; i < target_trees.size(); ++i) {
    const int64_t at = child(target_trees[i], target_nodes[i]);
    if (at >= 0) info.fail("a " + leaf + " entry names node " + std::to_string(target_nodes[i]) + ", not a leaf");
    by_leaf[static_cast<size_t>(~at)].push_back(i);
  }
  for (const std::vector<size_t>& entries : by_leaf) {
    for (size_t i : entries) {
      t.leaf_targets.push_back(target_ids[i]);
      t.leaf_weights.push_back(weights[i]);
    }
    t.leaf_begin.push_back(t.leaf_targets.size());
  }
  if (leaf == "class") {
    if (info.has_attribute("classlabels_strings")) info.fail("classlabels_strings: string tensors are not supported");
    t.targets = static_cast<int64_t>(info.ints_attribute("classlabels_int64s").size());
  } else {
    t.targets = info.int_attribute("n_targets", 1);
  }
  t.base_values = floats_or_tensor(info, "base_values");
  static const std::map<std::string, int64_t> kAggregates = {{"AVERAGE", 0}, {"SUM", 1}, {"MIN", 2}, {"MAX", 3}};
  static const std::map<std::string, int64_t> kTransforms = {
      {"NONE", 0}, {"SOFTMAX", 1}, {"LOGISTIC", 2}, {"SOFTMAX_ZERO", 3}};
  const std::string aggregate = info.string_attribute("aggregate_function", "SUM");
  const std::string transform = info.string_attribute("post_transform", "NONE");
  t.aggregate = kAggregates.contains(aggregate) ? kAggregates.at(aggregate) : -1;
  t.post_transform = kTransforms.contains(transform) ? kTransforms.at(transform) : -1;
  if (t.aggregate < 0) info.fail("aggregate_function is '" + aggregate + "', expected SUM, AVERAGE, MIN or MAX");
  if (t.post_transform < 0) {
    info.fail("post_transform is '" + transform + "', expected NONE, SOFTMAX, LOGISTIC or SOFTMAX_ZERO");
  }
  check_ensemble(info, t);
  return t;
}

const KernelRegistration kTreeEnsembleRegressor{
    kMl, "TreeEnsembleRegressor", 1, kLatestOpset, [](const KernelInfo& info) {
      const Tree t = ensemble_from(info, "target");
      return make_kernel([t](KernelContext& ctx) { evaluate(t, ctx, DType::kFloat32); });
    }};

// TreeEnsembleClassifier (ai.onnx.ml opsets 1-5) (X [N, F]) => (Y int64 [N] labels, Z float
// [N, classes] scores). The spec leaves two classes vague; this follows onnxruntime, which
// the tests match on random ensembles. Class weights sum over the trees, base_values add;
// with more than two classes Y is the label of the top score. With two: base values and the
// positive score follow onnxruntime's rules (finalize_classes), a class without a score
// shows 0, and when only one class has weights its score s alone decides (s > 0.5 when every
// weight is positive, else s > 0) with Z [1 - s, s], or [-s, s] (logistic of both under
// LOGISTIC). Only int64 labels (classlabels_int64s): strings are not a tensor type here.
struct Classifier {
  Tree tree;
  std::vector<int64_t> labels;
  bool binary = false;       // two labels, weights for one class only
  bool all_positive = true;  // every class weight >= 0
};

// Z's row from the scores that exist (`has`), and Y's label.
int64_t finalize_classes(const Classifier& c, std::vector<double>& scores, std::vector<char>& has, float* z) {
  const size_t classes = c.labels.size();
  const std::vector<double>& base = c.tree.base_values;
  if (classes > 2) {
    for (size_t k = 0; k < base.size(); ++k) {
      scores[k] = has[k] ? scores[k] + base[k] : base[k];
      has[k] = 1;
    }
    size_t top = classes;
    for (size_t k = 0; k < classes; ++k) {
      if (has[k] && (top == classes || scores[k] > scores[top])) top = k;
    }
    post_transform(scores, c.tree.post_transform);
    for (size_t k = 0; k < classes; ++k) z[k] = static_cast<float>(scores[k]);
    return c.labels[top == classes ? 0 : top];
  }
  size_t count = 2;
  if (base.size() == 2) {
    if (has[1]) {
      scores[1] = base[1] + scores[0];
      scores[0] = -scores[1];
    } else {
      scores[1] += base[1];
      scores[0] += base[0];
    }
  } else {
    if (base.size() == 1) scores[0] += base[0];
    if (!has[1]) count = 1;
  }
  const double positive = count == 2 && has[1] ? scores[1] : (has[0] ? scores[0] : 0.0);
  int kind = -1;  // how Z's second column comes from a single score
  int64_t label = 0;
  if (c.binary) {
    const bool positive_wins = c.all_positive ? positive > 0.5 : positive > 0;
    kind = (c.all_positive ? 0 : 2) + (positive_wins ? 0 : 1);
    label = c.labels[positive_wins ? 1 : 0];
  } else {
    label = positive > 0 ? 1 : 0;
  }
  // onnxruntime writes 0 for a class no tree gave a score, whatever base_values say.
  for (size_t k = 0; k < count; ++k) {
    if (!has[k]) scores[k] = 0;
  }
  if (count == 2) {
    std::vector<double> pair = {scores[0], scores[1]};
    post_transform(pair, c.tree.post_transform);
    z[0] = static_cast<float>(pair[0]), z[1] = static_cast<float>(pair[1]);
  } else if (kind == 0 || kind == 1) {
    z[0] = static_cast<float>(1.0 - scores[0]), z[1] = static_cast<float>(scores[0]);
  } else if (c.tree.post_transform == 2) {
    z[0] = static_cast<float>(1.0 / (1.0 + std::exp(scores[0]))),
    z[1] = static_cast<float>(1.0 / (1.0 + std::exp(-scores[0])));
  } else {
    z[0] = static_cast<float>(-scores[0]), z[1] = static_cast<float>(scores[0]);
  }
  return label;
}

const KernelRegistration kTreeEnsembleClassifier{
    kMl, "TreeEnsembleClassifier", 1, kLatestOpset, [](const KernelInfo& info) {
      Classifier c;
      c.tree = ensemble_from(info, "class");
      c.labels = info.ints_attribute("classlabels_int64s");
      if (c.labels.size() < 2) info.fail("classlabels_int64s needs 2 or more labels");
      std::set<int64_t> weighted(c.tree.leaf_targets.begin(), c.tree.leaf_targets.end());
      c.binary = c.labels.size() == 2 && weighted.size() == 1;
      for (double w : c.tree.leaf_weights) c.all_positive = c.all_positive && w >= 0;
      if (c.tree.aggregate != 1) info.fail("a classifier sums its trees: aggregate_function must be SUM");
      return make_kernel([c](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() != 2) ctx.fail("X must be [N, F], got " + shape_string(x.shape()));
        const int64_t rows = x.dim(0), features = x.dim(1), classes = static_cast<int64_t>(c.labels.size());
        Tensor& y = ctx.allocate_output(0, DType::kInt64, {rows});
        Tensor& z = ctx.allocate_output(1, DType::kFloat32, {rows, classes});
        std::vector<double> row(static_cast<size_t>(features)), scores(static_cast<size_t>(classes));
        std::vector<char> has(static_cast<size_t>(classes));
        dispatch<float, double, int32_t, int64_t>(x.dtype(), "TreeEnsembleClassifier", [&]<typename X>() {
          const X* in = x.data<X>();
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t f = 0; f < features; ++f)
              row[static_cast<size_t>(f)] = static_cast<double>(in[r * features + f]);
            std::fill(scores.begin(), scores.end(), 0.0);
            std::fill(has.begin(), has.end(), 0);
            for (int64_t root : c.tree.roots) {
              const size_t leaf = static_cast<size_t>(leaf_of(c.tree, root, row.data(), features, ctx));
              for (size_t i = c.tree.leaf_begin[leaf]; i < c.tree.leaf_begin[leaf + 1]; ++i) {
                const auto k = static_cast<size_t>(c.tree.leaf_targets[i]);
                scores[k] += c.tree.leaf_weights[i];
                has[k] = 1;
              }
            }
            y.data<int64_t>()[r] = finalize_classes(c, scores, has, z.data<float>() + r * classes);
          }
        });
      });
    }};

// ---------------------------------------------------------------------------------------
// LabelEncoder (opsets 2-4) over numbers: each element of X maps through keys -> values, or
// to the default. Keys and values come from keys_int64s / keys_floats, values_int64s /
// values_floats, or (opset 4) keys_tensor / values_tensor with default_tensor. A NaN key
// matches NaN elements. String keys and values are refused: strings are not a tensor type
// onnxtrain supports.

// Numbers of one attribute, kept as integers or as doubles by their element type.
struct Numbers {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  size_t size() const { return is_integer(dtype) ? ints.size() : reals.size(); }
};

Numbers numbers_of(const KernelInfo& info, const char* prefix) {
  const std::string p(prefix);
  Numbers n;
  if (info.has_attribute(p + "_strings")) info.fail(p + "_strings: string tensors are not supported");
  if (const Tensor* t = info.tensor_attribute(p + "_tensor")) {
    n.dtype = t->dtype();
    if (n.dtype == DType::kString) info.fail(p + "_tensor: string tensors are not supported");
    if (is_integer(n.dtype)) {
      n.ints = t->to_int64_vector();
    } else {
      n.reals = doubles_of(info, p + "_tensor");
    }
  } else if (info.has_attribute(p + "_int64s")) {
    n.dtype = DType::kInt64;
    n.ints = info.ints_attribute(p + "_int64s");
  } else if (info.has_attribute(p + "_floats")) {
    n.dtype = DType::kFloat32;
    const std::vector<float> f = info.floats_attribute(p + "_floats");
    n.reals.assign(f.begin(), f.end());
  } else {
    info.fail("needs " + p + "_int64s, " + p + "_floats or " + p + "_tensor");
  }
  return n;
}

struct LabelEncoding {
  Numbers keys, values;
  int64_t default_int = -1;
  double default_real = -0.0;
  std::unordered_map<int64_t, size_t> by_int;
  std::unordered_map<double, size_t> by_real;  // 0.0 and -0.0 hash alike
  std::optional<size_t> nan_key;
};

LabelEncoding label_encoding_from(const KernelInfo& info) {
  LabelEncoding e;
  e.keys = numbers_of(info, "keys");
  e.values = numbers_of(info, "values");
  if (e.keys.size() != e.values.size()) {
    info.fail(std::to_string(e.keys.size()) + " keys but " + std::to_string(e.values.size()) + " values");
  }
  if (const Tensor* d = info.tensor_attribute("default_tensor")) {
    if (d->numel() != 1 || d->dtype() != e.values.dtype) {
      info.fail("default_tensor must be one value of the values' type " + std::string(dtype_name(e.values.dtype)));
    }
    if (is_integer(d->dtype())) {
      e.default_int = d->item_as_int64();
    } else {
      e.default_real = d->item_as_double();
    }
  } else {
    e.default_int = info.int_attribute("default_int64", -1);
    e.default_real = info.float_attribute("default_float", -0.0f);
  }
  for (size_t i = 0; i < e.keys.size(); ++i) {
    if (is_integer(e.keys.dtype)) {
      e.by_int.emplace(e.keys.ints[i], i);
    } else if (std::isnan(e.keys.reals[i])) {
      if (!e.nan_key) e.nan_key = i;
    } else {
      e.by_real.emplace(e.keys.reals[i], i);
    }
  }
  return e;
}

const KernelRegistration kLabelEncoder{
    kMl, "LabelEncoder", 2, kLatestOpset, [](const KernelInfo& info) {
      const LabelEncoding e = label_encoding_from(info);
      return make_kernel([e](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.dtype() != e.keys.dtype) {
          ctx.fail("X is " + std::string(dtype_name(x.dtype())) + ", expected the keys' type " +
                   std::string(dtype_name(e.keys.dtype)));
        }
        Tensor& y = ctx.allocate_output(0, e.values.dtype, x.shape());
        // The index of the value each element maps to; keys.size() for the default.
        std::vector<size_t> hits(static_cast<size_t>(x.numel()), e.keys.size());
        dispatch<ONNXTRAIN_NUMERIC_TYPES>(x.dtype(), "LabelEncoder", [&]<typename K>() {
          const K* in = x.data<K>();
          for (size_t i = 0; i < hits.size(); ++i) {
            if constexpr (std::is_integral_v<K>) {
              const auto hit = e.by_int.find(static_cast<int64_t>(in[i]));
              if (hit != e.by_int.end()) hits[i] = hit->second;
            } else {
              const double v = static_cast<double>(static_cast<compute_type_t<K>>(in[i]));
              if (std::isnan(v)) {
                if (e.nan_key) hits[i] = *e.nan_key;
                continue;
              }
              const auto hit = e.by_real.find(v);
              if (hit != e.by_real.end()) hits[i] = hit->second;
            }
          }
        });
        dispatch<ONNXTRAIN_NUMERIC_TYPES>(y.dtype(), "LabelEncoder values", [&]<typename V>() {
          V* out = y.data<V>();
          for (size_t i = 0; i < hits.size(); ++i) {
            const bool found = hits[i] < e.keys.size();
            if constexpr (std::is_integral_v<V>) {
              out[i] = static_cast<V>(found ? e.values.ints[hits[i]] : e.default_int);
            } else {
              out[i] = static_cast<V>(static_cast<compute_type_t<V>>(found ? e.values.reals[hits[i]] : e.default_real));
            }
          }
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
