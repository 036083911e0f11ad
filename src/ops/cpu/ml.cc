// Classical machine-learning ops on tensors: TfIdfVectorizer (default domain) and, of
// ai.onnx.ml, Binarizer, ArrayFeatureExtractor and LabelEncoder (the tree ensembles are in
// ml_trees.cc). Strings are not a tensor type onnxtrain supports, so the string forms of
// these ops are refused.
#include "ops/cpu/ml.h"

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

using ml::doubles_of;
using ml::kMl;

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
