// Einsum: numpy's einsum over any number of operands, reduced to the pieces the rest of
// the engine already does well.
//
//   1. Each operand becomes a strided view with one entry per distinct label; a label
//      repeated inside one operand (a diagonal, 'ii->i') merges into one entry whose
//      stride is the sum of the strides.
//   2. Labels that only one operand has and the output does not are summed out at once.
//   3. Operands contract left to right, two at a time, as one batched matrix product:
//      the shared labels still needed later are the batch, the shared labels needed no
//      more are contracted (K), the labels of one side only are its rows (M) or columns
//      (N). Operands are copied into [batch, M, K] / [batch, K, N] order unless their
//      memory already is in that order (or its transpose, which oneDNN reads as is).
//   4. What remains is summed down to the output labels and written in output order.
//
// float32 (and float16/bfloat16, computed in float32) products run on oneDNN's matmul;
// other types on the blocked loop shared with MatMul.
#include <cctype>
#include <cstring>
#include <numeric>

#include "core/dispatch.h"
#include "ops/cpu/onednn.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr int kEllipsisLabel = 52;  // labels 0-51 are letters; ellipsis axes follow

int letter_label(char c) {
  return std::islower(static_cast<unsigned char>(c)) ? c - 'a' + 26 : c - 'A';
}
char label_letter(int label) {
  return label < 26 ? static_cast<char>('A' + label) : static_cast<char>('a' + label - 26);
}

// One side of the equation as written: its letters, and where "..." stands (-1 if absent).
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;  // index in `letters` before which the ellipsis axes go
};

Term parse_term(const KernelInfo& info, const std::string& text, const std::string& equation) {
  Term term;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (text.compare(i, 3, "...") != 0 || term.ellipsis_at >= 0) {
        info.fail("equation '" + equation + "': '" + text + "' has a stray '.' (only one '...' per term is allowed)");
      }
      term.ellipsis_at = static_cast<int>(term.letters.size());
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      term.letters.push_back(letter_label(c));
    } else {
      info.fail("equation '" + equation + "' has the character '" + std::string(1, c) +
                "'; terms hold letters and '...' only");
    }
  }
  return term;
}

struct Equation {
  std::vector<Term> inputs;
  Term output;
  bool explicit_output = false;
};

Equation parse_equation(const KernelInfo& info, const std::string& raw) {
  std::string eq;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) eq += c;
  Equation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(parse_term(info, lhs.substr(start, comma - start), raw));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) {
    e.explicit_output = true;
    e.output = parse_term(info, eq.substr(arrow + 2), raw);
    std::vector<int> seen = e.output.letters;
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
      info.fail("equation '" + raw + "': the output repeats a label");
    }
  }
  return e;
}

// A strided view of an operand in the compute type C: one entry per distinct label.
template <typename C>
struct View {
  const C* data = nullptr;
  std::vector<int> labels;
  std::vector<int64_t> dims, strides;
  Tensor owner;  // keeps an intermediate buffer alive

  int find(int label) const {
    auto it = std::find(labels.begin(), labels.end(), label);
    return it == labels.end() ? -1 : static_cast<int>(it - labels.begin());
  }
  bool has(int label) const { return find(label) >= 0; }
};

// Walks a multi-index over `dims` in row-major order from a linear position, tracking
// the offset under `strides`.
struct Odometer {
  const std::vector<int64_t>& dims;
  const std::vector<int64_t>& strides;
  std::vector<int64_t> index;
  int64_t offset = 0;

  Odometer(const std::vector<int64_t>& d, const std::vector<int64_t>& s, int64_t start) : dims(d), strides(s) {
    index.assign(dims.size(), 0);
    for (size_t i = dims.size(); i-- > 0;) {
      index[i] = start % dims[i];
      start /= dims[i];
      offset += index[i] * strides[i];
    }
  }
  void next() {
    for (size_t i = dims.size(); i-- > 0;) {
      offset += strides[i];
      if (++index[i] < dims[i]) return;
      offset -= strides[i] * dims[i];
      index[i] = 0;
    }
  }
};

template <typename C>
View<C> contiguous_view(Tensor buffer, std::vector<int> labels, std::vector<int64_t> dims) {
  View<C> v;
  v.data = buffer.data<C>();
  v.labels = std::move(labels);
  v.strides.assign(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) v.strides[i - 1] = v.strides[i] * dims[i];
  v.dims = std::move(dims);
  v.owner = std::move(buffer);
  return v;
}

// The view's strides for `order`, with `sizes` as the wanted extents: a view axis of size
// 1 under a larger wanted size broadcasts (stride 0).
template <typename C>
std::vector<int64_t> strides_for(const View<C>& v, const std::vector<int>& order, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const int k = v.find(order[i]);
    s[i] = v.dims[static_cast<size_t>(k)] == sizes[i] ? v.strides[static_cast<size_t>(k)] : 0;
  }
  return s;
}

// Copies the view, in label order `order` and extents `sizes`, into `out` (contiguous),
// converting C to Out.
template <typename C, typename Out>
void gather_into(const View<C>& v, const std::vector<int>& order, const std::vector<int64_t>& sizes, Out* out) {
  const std::vector<int64_t> strides = strides_for(v, order, sizes);
  const int64_t total = shape_size(sizes);
  if (total == 0) return;
  if (order.empty()) {
    out[0] = static_cast<Out>(v.data[0]);
    return;
  }
  const int64_t inner = sizes.back(), step = strides.back();
  const std::vector<int64_t> outer_dims(sizes.begin(), sizes.end() - 1),
      outer_strides(strides.begin(), strides.end() - 1);
  const int64_t rows = total / inner;
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t begin, int64_t end) {
    Odometer it(outer_dims, outer_strides, begin);
    for (int64_t r = begin; r < end; ++r, it.next()) {
      const C* src = v.data + it.offset;
      Out* dst = out + r * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = static_cast<Out>(src[i * step]);
    }
  });
}

// Sums the view over every label not in `keep`; the result keeps the view's label order.
template <typename C>
View<C> reduce(KernelContext& ctx, const View<C>& v, const std::vector<int>& keep) {
  std::vector<int> kept, summed;
  std::vector<int64_t> kept_dims, kept_strides, summed_dims, summed_strides;
  for (size_t i = 0; i < v.labels.size(); ++i) {
    const bool stays = std::find(keep.begin(), keep.end(), v.labels[i]) != keep.end();
    (stays ? kept : summed).push_back(v.labels[i]);
    (stays ? kept_dims : summed_dims).push_back(v.dims[i]);
    (stays ? kept_strides : summed_strides).push_back(v.strides[i]);
  }
  if (summed.empty()) return v;
  Tensor buffer = ctx.allocate_scratch(dtype_of<C>(), kept_dims);
  C* out = buffer.data<C>();
  const int64_t total = shape_size(kept_dims), count = shape_size(summed_dims);
  parallel_for(total, std::max<int64_t>(1, 16384 / std::max<int64_t>(count, 1)), [&](int64_t begin, int64_t end) {
    Odometer it(kept_dims, kept_strides, begin);
    for (int64_t o = begin; o < end; ++o, it.next()) {
      C sum = 0;
      Odometer inner(summed_dims, summed_strides, 0);
      for (int64_t j = 0; j < count; ++j, inner.next()) sum += v.data[it.offset + inner.offset];
      out[o] = sum;
    }
  });
  return contiguous_view<C>(std::move(buffer), std::move(kept), std::move(kept_dims));
}

// True when the view, read in `order`, is exactly a dense row-major array of `sizes`.
template <typename C>
bool is_dense(const View<C>& v, const std::vector<int>& order, const std::vector<int64_t>& sizes) {
  if (order.size() != v.labels.size()) return false;
  int64_t expected = 1;
  for (size_t i = order.size(); i-- > 0;) {
    const int k = v.find(order[i]);
    if (v.dims[static_cast<size_t>(k)] != sizes[i]) return false;
    if (sizes[i] != 1 && v.strides[static_cast<size_t>(k)] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

std::vector<int> concat(std::initializer_list<const std::vector<int>*> parts) {
  std::vector<int> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

class EinsumKernel final : public OpKernel {
 public:
  explicit EinsumKernel(const KernelInfo& info)
      : text_(info.string_attribute("equation")), equation_(parse_equation(info, text_)) {
    if (equation_.inputs.size() != info.input_count()) {
      info.fail("equation '" + text_ + "' has " + std::to_string(equation_.inputs.size()) +
                " input terms but the node " + "has " + std::to_string(info.input_count()) + " inputs");
    }
  }

  void compute(KernelContext& ctx) override {
    const DType dtype = ctx.input(0).dtype();
    for (size_t i = 1; i < ctx.input_count(); ++i) {
      if (ctx.input(i).dtype() != dtype) {
        ctx.fail("input " + std::to_string(i) + " is " + std::string(dtype_name(ctx.input(i).dtype())) +
                 " but input 0 is " + std::string(dtype_name(dtype)) + "; all inputs must have one element type");
      }
    }
    dispatch<ONNXTRAIN_NUMERIC_TYPES>(dtype, "Einsum", [&]<typename T>() { run<T>(ctx); });
  }

 private:
  // Label sizes and views of every input; fills `ellipsis_rank` and `size_of`.
  template <typename T>
  std::vector<View<compute_type_t<T>>> bind(KernelContext& ctx, int& ellipsis_rank, std::vector<int64_t>& size_of) {
    using C = compute_type_t<T>;
    ellipsis_rank = 0;
    for (size_t i = 0; i < equation_.inputs.size(); ++i) {
      const Term& t = equation_.inputs[i];
      const int64_t extra = static_cast<int64_t>(ctx.input(i).rank()) - static_cast<int64_t>(t.letters.size());
      if (extra < 0 || (extra > 0 && t.ellipsis_at < 0)) {
        ctx.fail("input " + std::to_string(i) + " " + shape_string(ctx.input(i).shape()) + " has rank " +
                 std::to_string(ctx.input(i).rank()) + " but its term in '" + text_ + "' names " +
                 std::to_string(t.letters.size()) + " axes" + (t.ellipsis_at >= 0 ? " plus '...'" : ""));
      }
      ellipsis_rank = std::max(ellipsis_rank, static_cast<int>(extra));
    }
    size_of.assign(static_cast<size_t>(kEllipsisLabel + ellipsis_rank), -1);
    std::vector<View<C>> views;
    for (size_t i = 0; i < equation_.inputs.size(); ++i) views.push_back(view_of<T>(ctx, i, ellipsis_rank, size_of));
    return views;
  }

  template <typename T>
  View<compute_type_t<T>> view_of(KernelContext& ctx, size_t i, int ellipsis_rank, std::vector<int64_t>& size_of) {
    using C = compute_type_t<T>;
    const Tensor& x = ctx.input(i);
    const Term& t = equation_.inputs[i];
    // The axis labels in order: letters, with the ellipsis axes (right-aligned across
    // operands, numpy style) where "..." stands.
    const int extra = static_cast<int>(x.rank() - t.letters.size());
    std::vector<int> axis_labels;
    for (size_t k = 0; k <= t.letters.size(); ++k) {
      if (static_cast<int>(k) == t.ellipsis_at)
        for (int e = 0; e < extra; ++e) axis_labels.push_back(kEllipsisLabel + ellipsis_rank - extra + e);
      if (k < t.letters.size()) axis_labels.push_back(t.letters[k]);
    }
    View<C> v;
    if constexpr (std::is_same_v<T, C>) {
      v.data = x.data<T>();
    } else {  // 16-bit floats compute in float
      Tensor wide = ctx.allocate_scratch(DType::kFloat32, x.shape());
      onednn::convert(x.data<T>(), wide.data<float>(), x.numel());
      v.data = wide.data<float>();
      v.owner = wide;
    }
    int64_t stride = 1;
    std::vector<int64_t> axis_strides(x.rank());
    for (size_t k = x.rank(); k-- > 0;) {
      axis_strides[k] = stride;
      stride *= x.shape()[k];
    }
    for (size_t k = 0; k < x.rank(); ++k) {
      const int label = axis_labels[k];
      const int64_t d = x.shape()[k];
      const int at = v.find(label);
      if (at >= 0) {  // a repeated label: the diagonal
        if (v.dims[static_cast<size_t>(at)] != d) {
          ctx.fail("input " + std::to_string(i) + " " + shape_string(x.shape()) + " repeats label '" +
                   std::string(1, label_letter(label)) + "' over axes of different sizes");
        }
        v.strides[static_cast<size_t>(at)] += axis_strides[k];
        continue;
      }
      v.labels.push_back(label);
      v.dims.push_back(d);
      v.strides.push_back(axis_strides[k]);
      int64_t& size = size_of[static_cast<size_t>(label)];
      if (size == -1 || size == 1)
        size = d;
      else if (d != size && d != 1) {
        const std::string name =
            label >= kEllipsisLabel ? "an axis under '...'" : "label '" + std::string(1, label_letter(label)) + "'";
        ctx.fail(name + " has size " + std::to_string(d) + " in input " + std::to_string(i) + " " +
                 shape_string(x.shape()) + " but " + std::to_string(size) + " elsewhere (sizes must match or be 1)");
      }
    }
    return v;
  }

  // The output labels: explicit, or numpy's implicit rule (the ellipsis axes, then every
  // letter used exactly once, in alphabetical order).
  std::vector<int> output_labels(KernelContext& ctx, int ellipsis_rank) const {
    std::vector<int> out;
    auto add_ellipsis = [&] {
      for (int e = 0; e < ellipsis_rank; ++e) out.push_back(kEllipsisLabel + e);
    };
    if (equation_.explicit_output) {
      const Term& t = equation_.output;
      for (size_t k = 0; k <= t.letters.size(); ++k) {
        if (static_cast<int>(k) == t.ellipsis_at) add_ellipsis();
        if (k < t.letters.size()) out.push_back(t.letters[k]);
      }
      for (int label : t.letters) {
        bool used = false;
        for (const Term& in : equation_.inputs)
          used = used || std::find(in.letters.begin(), in.letters.end(), label) != in.letters.end();
        if (!used)
          ctx.fail("equation '" + text_ + "': output label '" + std::string(1, label_letter(label)) +
                   "' appears in no input");
      }
      return out;
    }
    add_ellipsis();
    std::vector<int> counts(kEllipsisLabel, 0);
    for (const Term& in : equation_.inputs)
      for (int label : in.letters) ++counts[static_cast<size_t>(label)];
    // ASCII order: upper case before lower case, as numpy sorts.
    for (int label = 0; label < kEllipsisLabel; ++label)
      if (counts[static_cast<size_t>(label)] == 1) out.push_back(label);
    return out;
  }

  template <typename T>
  void run(KernelContext& ctx) {
    using C = compute_type_t<T>;
    int ellipsis_rank = 0;
    std::vector<int64_t> size_of;
    std::vector<View<C>> views = bind<T>(ctx, ellipsis_rank, size_of);
    const std::vector<int> out_labels = output_labels(ctx, ellipsis_rank);
    Shape out_shape;
    for (int label : out_labels) out_shape.push_back(size_of[static_cast<size_t>(label)]);
    Tensor& out = ctx.allocate_output(0, ctx.input(0).dtype(), out_shape);

    // Labels still needed after operand i: the output's and those of later operands.
    auto needed_after = [&](size_t i) {
      std::vector<int> keep = out_labels;
      for (size_t j = i + 1; j < views.size(); ++j)
        keep.insert(keep.end(), views[j].labels.begin(), views[j].labels.end());
      return keep;
    };
    View<C> acc = reduce(ctx, views[0], needed_after(0));
    for (size_t i = 1; i < views.size(); ++i) {
      std::vector<int> keep = needed_after(i);
      std::vector<int> wanted = keep;
      wanted.insert(wanted.end(), acc.labels.begin(), acc.labels.end());
      const View<C> next = reduce(ctx, views[i], wanted);
      acc = contract(ctx, acc, next, keep, size_of);
    }
    acc = reduce(ctx, acc, out_labels);
    if (out.numel() == 0) return;
    gather_into(acc, out_labels, out_shape, out.data<T>());
  }

  // acc x next as one batched matrix product; the result holds the labels batch + rows +
  // columns, in that order.
  template <typename C>
  View<C> contract(KernelContext& ctx, View<C> a, View<C> b, const std::vector<int>& keep,
                   const std::vector<int64_t>& size_of) {
    std::vector<int> keep_a = keep, keep_b = keep;
    keep_a.insert(keep_a.end(), b.labels.begin(), b.labels.end());
    keep_b.insert(keep_b.end(), a.labels.begin(), a.labels.end());
    a = reduce(ctx, a, keep_a);
    b = reduce(ctx, b, keep_b);
    std::vector<int> batch, contracted, rows, cols;
    for (int label : a.labels) {
      const bool shared = b.has(label);
      const bool kept = std::find(keep.begin(), keep.end(), label) != keep.end();
      (shared ? (kept ? batch : contracted) : rows).push_back(label);
    }
    for (int label : b.labels)
      if (!a.has(label)) cols.push_back(label);
    auto sizes = [&](const std::vector<int>& labels) {
      std::vector<int64_t> s;
      for (int l : labels) s.push_back(size_of[static_cast<size_t>(l)]);
      return s;
    };
    const int64_t nb = shape_size(sizes(batch)), m = shape_size(sizes(rows)), k = shape_size(sizes(contracted)),
                  n = shape_size(sizes(cols));
    std::vector<int> out_labels = concat({&batch, &rows, &cols});
    std::vector<int64_t> out_dims = sizes(out_labels);
    Tensor result = ctx.allocate_scratch(dtype_of<C>(), out_dims);
    C* c = result.data<C>();
    if (result.numel() > 0) multiply(ctx, a, b, batch, rows, contracted, cols, sizes, nb, m, k, n, c);
    return contiguous_view<C>(std::move(result), std::move(out_labels), std::move(out_dims));
  }

  template <typename C, typename Sizes>
  void multiply(KernelContext& ctx, const View<C>& a, const View<C>& b, const std::vector<int>& batch,
                const std::vector<int>& rows, const std::vector<int>& contracted, const std::vector<int>& cols,
                const Sizes& sizes, int64_t nb, int64_t m, int64_t k, int64_t n, C* c) {
    const std::vector<int> a_order = concat({&batch, &rows, &contracted});
    const std::vector<int> a_order_t = concat({&batch, &contracted, &rows});
    const std::vector<int> b_order = concat({&batch, &contracted, &cols});
    const std::vector<int> b_order_t = concat({&batch, &cols, &contracted});
    if (k == 1) {  // an outer product per batch entry (elementwise products included)
      const std::vector<int> a_flat = concat({&batch, &rows}), b_flat = concat({&batch, &cols});
      const View<C> ap = a_flat.size() == a.labels.size() && is_dense(a, a_flat, sizes(a_flat))
                             ? a
                             : packed(ctx, a, a_flat, sizes(a_flat));
      const View<C> bp = b_flat.size() == b.labels.size() && is_dense(b, b_flat, sizes(b_flat))
                             ? b
                             : packed(ctx, b, b_flat, sizes(b_flat));
      parallel_for(nb * m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const C av = ap.data[r];
          const C* br = bp.data + (r / m) * n;
          for (int64_t j = 0; j < n; ++j) c[r * n + j] = av * br[j];
        }
      });
      return;
    }
    if constexpr (std::is_same_v<C, float>) {
      // oneDNN reads either operand as is when it is dense in product order or transposed.
      const bool a_t = !is_dense(a, a_order, sizes(a_order)) && is_dense(a, a_order_t, sizes(a_order_t));
      const bool b_t = !is_dense(b, b_order, sizes(b_order)) && is_dense(b, b_order_t, sizes(b_order_t));
      const View<C> ap = a_t || is_dense(a, a_order, sizes(a_order)) ? a : packed(ctx, a, a_order, sizes(a_order));
      const View<C> bp = b_t || is_dense(b, b_order, sizes(b_order)) ? b : packed(ctx, b, b_order, sizes(b_order));
      matmul_.run(ap.data, bp.data, c, nb, m, k, n, a_t, b_t);
    } else {
      const View<C> ap = is_dense(a, a_order, sizes(a_order)) ? a : packed(ctx, a, a_order, sizes(a_order));
      const View<C> bp = is_dense(b, b_order, sizes(b_order)) ? b : packed(ctx, b, b_order, sizes(b_order));
      onednn::MatmulBatch mb{m, k, n, k, n, {}, {}};
      for (int64_t i = 0; i < nb; ++i) {
        mb.a_offsets.push_back(i * m * k);
        mb.b_offsets.push_back(i * k * n);
      }
      onednn::matmul_loop(ap.data, bp.data, c, mb);
    }
  }

  // A dense copy of the view in `order` (broadcast axes expanded).
  template <typename C>
  static View<C> packed(KernelContext& ctx, const View<C>& v, const std::vector<int>& order,
                        const std::vector<int64_t>& sizes) {
    Tensor buffer = ctx.allocate_scratch(dtype_of<C>(), sizes);
    gather_into(v, order, sizes, buffer.data<C>());
    return contiguous_view<C>(std::move(buffer), order, sizes);
  }

  std::string text_;
  Equation equation_;
  onednn::BatchedMatmul matmul_;
};

const KernelRegistration kEinsum{"", "Einsum", 12, kLatestOpset,
                                 [](const KernelInfo& info) { return std::make_unique<EinsumKernel>(info); }};

}  // namespace
}  // namespace onnxtrain
