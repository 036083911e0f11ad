// Attention (opset 23; opset 24's nonpad_kv_seqlen too) as one fused kernel:
//   Y = softmax(softcap(scale * Q K^T + bias)) V
// with Q, K, V in 4-D ([batch, heads, sequence, head_size]) or 3-D ([batch, sequence,
// heads * head_size]) layout, grouped-query heads (query head h reads key/value head
// h / (q_heads / kv_heads)), a boolean or additive mask broadcast to
// [batch, q_heads, q_sequence, total_sequence] (a shorter last axis is padded with
// "masked"), is_causal (key j is hidden from query i when j > i + past_sequence), the
// KV cache (present = concat(past, new) along the sequence) and the four
// qk_matmul_output modes.
//
// Each task takes a block of query rows of one head and keeps their score rows in a small
// buffer: the scores never exist for the whole tensor, so memory stays O(rows x total)
// per thread. The block's two products run as GEMMs (oneDNN's sgemm for float32); keys a
// causal or padding mask hides from the whole block are left out of both. The 16-bit
// types compute in float, float64 in double.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dispatch.h"
#include "core/work_share.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// Element offset of row `s` of head `h` in batch `b`.
struct HeadLayout {
  int64_t batch = 0, head = 0, row = 0;
  int64_t at(int64_t b, int64_t h, int64_t s) const { return b * batch + h * head + s * row; }
};

HeadLayout layout_4d(int64_t heads, int64_t seq, int64_t size) {
  return {heads * seq * size, seq * size, size};
}
HeadLayout layout_3d(int64_t heads, int64_t seq, int64_t size) {
  return {seq * heads * size, size, heads * size};
}

struct AttentionDims {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_seq = 0, kv_seq = 0, past = 0, head_size = 0, v_head_size = 0;
  bool three_d = false;
  int64_t total() const { return past + kv_seq; }
};

bool is_float(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 || d == DType::kBFloat16;
}

// The mask as an additive bias of A (a boolean false becomes -inf), read through
// broadcast strides over [batch, q_heads, q_seq, mask_total].
template <typename A>
struct MaskBias {
  std::vector<A> values;
  int64_t strides[4] = {0, 0, 0, 0};
  int64_t total = 0;  // the mask's last axis; keys at or past it are masked
  const A* row(int64_t b, int64_t h, int64_t i) const {
    return values.data() + b * strides[0] + h * strides[1] + i * strides[2];
  }
};

// e^x for a softmax's x = s - max s <= 0 (or NaN, which it returns): vector_math::exp's
// range reduction and polynomial without its overflow and subnormal cases, one scaling by
// 2^n instead of two. Results under 2^-126 (x < -87) become 0: next to the row's maximum,
// e^0 = 1, they are lost in the sum anyway. A third fewer operations per lane.
ONNXTRAIN_VECTOR_INLINE float softmax_exp(float x) {
  const float clamped = x < -87.0f ? -87.0f : x;
  float n;
  const float y = vector_math::exp_split(clamped, n) * vector_math::pow2(static_cast<int32_t>(n));  // n in [-126, 0]
  return x < -87.0f ? 0.0f : y;
}

// s[j] = e^(s[j] - max s) over n >= 1 entries, in place; returns their sum. A row of -inf
// becomes NaN (0 / 0 once divided), as the spec's Softmax. Compiled for each x86 level: at
// the baseline's 4 lanes this row loop (then in scalar code) took half of a 1 x 8 x 128 x 64
// Attention.
template <typename A>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] A exponentiate(A* __restrict s, int64_t n) {
  const A m = onednn::lane_max(s, n);
  // Two passes: the map alone vectorizes without masks (28 cycles per 16 lanes fused with
  // the sum).
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (std::is_same_v<A, float>) {
      s[j] = softmax_exp(s[j] - m);
    } else {
      s[j] = std::exp(s[j] - m);
    }
  }
  return onednn::lane_sum<A>(n, [&](int64_t j) { return s[j]; });
}

// x[j] *= factor (nothing to do for 1).
template <typename A>
ONNXTRAIN_MULTIVERSIONED void scale_row(A* __restrict x, int64_t n, A factor) {
  if (factor == A(1)) return;
  for (int64_t j = 0; j < n; ++j) x[j] *= factor;
}

// ---- float32 matrix products of a block ----
// The block's products are small (32-128 rows, head sizes of 64): oneDNN's sgemm packed
// its operands on every call and ran at 50 GFLOP/s there (72% of a 1 x 8 x 128 x 64
// Attention). These tiles keep kRows x 16 kVectors sums in registers over the whole depth.

using Floats = vector_math::Vector<float, 16>;

// c[r, 16 v + l] = alpha * sum_p a[r, p] b[p, 16 v + l] for r < kRows, v < kVectors; the
// last vector's lanes past `last` are not stored (b must be readable there).
template <int kRows, int kVectors>
ONNXTRAIN_VECTOR_INLINE void product_tile(int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                                          int64_t ldb, float* c, int64_t ldc, int last) {
  Floats sums[kRows][kVectors] = {};
  for (int64_t p = 0; p < k; ++p) {
    Floats row[kVectors];
    for (int v = 0; v < kVectors; ++v) std::memcpy(&row[v], b + p * ldb + 16 * v, sizeof(Floats));
    for (int r = 0; r < kRows; ++r) {
      const float av = a[r * lda + p];
      for (int v = 0; v < kVectors; ++v) sums[r][v] += av * row[v];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      const Floats result = sums[r][v] * alpha;
      float* dst = c + r * ldc + 16 * v;
      if (v + 1 < kVectors || last == 16) {
        std::memcpy(dst, &result, sizeof result);
      } else {
        std::memcpy(dst, &result, static_cast<size_t>(last) * sizeof(float));
      }
    }
  }
}

// kRows rows of c [., n] = alpha * a x b: 32 columns a tile, then 16, then the rest (a
// partial vector where b's rows may be read up to a multiple of 16 columns, else one by one).
template <int kRows>
ONNXTRAIN_VECTOR_INLINE void product_rows(int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                                          const float* b, int64_t ldb, bool b_padded, float* c, int64_t ldc) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) product_tile<kRows, 2>(k, alpha, a, lda, b + j, ldb, c + j, ldc, 16);
  for (; j + 16 <= n; j += 16) product_tile<kRows, 1>(k, alpha, a, lda, b + j, ldb, c + j, ldc, 16);
  if (j == n) return;
  if (b_padded) {
    product_tile<kRows, 1>(k, alpha, a, lda, b + j, ldb, c + j, ldc, static_cast<int>(n - j));
    return;
  }
  for (int r = 0; r < kRows; ++r)
    for (int64_t col = j; col < n; ++col) {
      float sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += a[r * lda + p] * b[p * ldb + col];
      c[r * ldc + col] = alpha * sum;
    }
}

// c [m, n] (row stride ldc) = alpha * a [m, k] (row stride lda) x b [k, n] (row stride
// ldb), in tiles of 4 rows; `b_padded`: b's rows may be read up to n rounded up to 16.
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void product(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                                                       int64_t lda, const float* b, int64_t ldb, bool b_padded,
                                                       float* c, int64_t ldc) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) product_rows<4>(n, k, alpha, a + i * lda, lda, b, ldb, b_padded, c + i * ldc, ldc);
  for (; i < m; ++i) product_rows<1>(n, k, alpha, a + i * lda, lda, b, ldb, b_padded, c + i * ldc, ldc);
}

// kt [k, padded] = the transpose of b [n, k] (row stride ldb), zeros in columns n to
// padded (n rounded up to 16); in layout.h's 8 x 8 register tiles (element by element, the
// stores 2 KB apart took a quarter of a 1 x 8 x 512 x 64 Attention).
void pack_transposed(const float* b, int64_t n, int64_t k, int64_t ldb, float* kt) {
  const int64_t padded = (n + 15) / 16 * 16;
  transpose_block(reinterpret_cast<uint32_t*>(kt), reinterpret_cast<const uint32_t*>(b), k, n, padded, ldb);
  for (int64_t p = 0; p < k; ++p) std::fill(kt + p * padded + n, kt + (p + 1) * padded, 0.0f);
}

class AttentionKernel final : public OpKernel {
 public:
  explicit AttentionKernel(const KernelInfo& info)
      : is_causal_(info.bool_attribute("is_causal", false)),
        q_num_heads_(info.int_attribute("q_num_heads", 0)),
        kv_num_heads_(info.int_attribute("kv_num_heads", 0)),
        mode_(info.int_attribute("qk_matmul_output_mode", 0)),
        softcap_(info.float_attribute("softcap", 0.0f)),
        has_scale_(info.has_attribute("scale")),
        scale_(info.float_attribute("scale", 0.0f)) {
    if (mode_ < 0 || mode_ > 3) {
      info.fail("qk_matmul_output_mode is " + std::to_string(mode_) + ", expected 0, 1, 2 or 3");
    }
    if (softcap_ < 0) info.fail("softcap is " + std::to_string(softcap_) + ", expected 0 (none) or more");
  }

  void compute(KernelContext& ctx) override {
    const AttentionDims d = dims(ctx);
    // softmax_precision needs no branch: the softmax always runs in float or double.
    if (ctx.input(0).dtype() == DType::kFloat64) {
      run<double>(ctx, d);
    } else {
      run<float>(ctx, d);
    }
  }

 private:
  AttentionDims dims(KernelContext& ctx) const {
    const Tensor& q = ctx.input(0);
    const Tensor& k = ctx.input(1);
    const Tensor& v = ctx.input(2);
    const char* names[] = {"Q", "K", "V"};
    for (size_t i = 0; i < 3; ++i) {
      const Tensor& t = ctx.input(i);
      if (!is_float(t.dtype())) {
        ctx.fail(std::string(names[i]) + " has element type " + std::string(dtype_name(t.dtype())) +
                 ", expected float, double, float16 or bfloat16");
      }
      if (t.rank() != q.rank() || (t.rank() != 3 && t.rank() != 4)) {
        ctx.fail("Q, K and V must all be 3-D or all 4-D, got " + shape_string(q.shape()) + ", " +
                 shape_string(k.shape()) + " and " + shape_string(v.shape()));
      }
    }
    if (k.dtype() != q.dtype()) {
      ctx.fail("K has element type " + std::string(dtype_name(k.dtype())) + ", expected Q's, " +
               std::string(dtype_name(q.dtype())));
    }
    AttentionDims d;
    d.batch = q.dim(0);
    if (k.dim(0) != d.batch || v.dim(0) != d.batch) {
      ctx.fail("Q, K and V must share the batch size, got " + shape_string(q.shape()) + ", " + shape_string(k.shape()) +
               " and " + shape_string(v.shape()));
    }
    if (q.rank() == 4) {
      d = {d.batch, q.dim(1), k.dim(1), q.dim(2), k.dim(2), 0, q.dim(3), v.dim(3), false};
      if (v.dim(1) != d.kv_heads || v.dim(2) != d.kv_seq) {
        ctx.fail("V " + shape_string(v.shape()) + " must have K's heads and sequence length, K is " +
                 shape_string(k.shape()));
      }
      if (k.dim(3) != d.head_size) {
        ctx.fail("K " + shape_string(k.shape()) + " must have Q's head size " + std::to_string(d.head_size));
      }
      check_head_attribute(ctx, "q_num_heads", q_num_heads_, d.q_heads);
      check_head_attribute(ctx, "kv_num_heads", kv_num_heads_, d.kv_heads);
    } else {
      d = three_d_dims(ctx, q, k, v);
    }
    if (d.kv_heads == 0 || d.q_heads % d.kv_heads != 0) {
      ctx.fail("q_num_heads " + std::to_string(d.q_heads) + " must be a multiple of kv_num_heads " +
               std::to_string(d.kv_heads));
    }
    d.past = past_length(ctx, d);
    return d;
  }

  static void check_head_attribute(KernelContext& ctx, const char* name, int64_t attribute, int64_t heads) {
    if (attribute != 0 && attribute != heads) {
      ctx.fail(std::string(name) + " is " + std::to_string(attribute) + " but the 4-D input has " +
               std::to_string(heads) + " heads");
    }
  }

  AttentionDims three_d_dims(KernelContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v) const {
    if (q_num_heads_ <= 0 || kv_num_heads_ <= 0) {
      ctx.fail("3-D Q, K and V need the q_num_heads and kv_num_heads attributes");
    }
    if (q.dim(2) % q_num_heads_ != 0 || k.dim(2) % kv_num_heads_ != 0 || v.dim(2) % kv_num_heads_ != 0) {
      ctx.fail("hidden sizes of Q " + shape_string(q.shape()) + ", K " + shape_string(k.shape()) + " and V " +
               shape_string(v.shape()) + " must be multiples of q_num_heads " + std::to_string(q_num_heads_) +
               " and kv_num_heads " + std::to_string(kv_num_heads_));
    }
    AttentionDims d{
        q.dim(0), q_num_heads_, kv_num_heads_, q.dim(1), k.dim(1), 0, q.dim(2) / q_num_heads_, v.dim(2) / kv_num_heads_,
        true};
    if (v.dim(1) != d.kv_seq) {
      ctx.fail("V " + shape_string(v.shape()) + " must have K's sequence length, K is " + shape_string(k.shape()));
    }
    if (k.dim(2) / kv_num_heads_ != d.head_size) {
      ctx.fail("K " + shape_string(k.shape()) + " must have Q's head size " + std::to_string(d.head_size));
    }
    return d;
  }

  static int64_t past_length(KernelContext& ctx, const AttentionDims& d) {
    const bool has_key = ctx.has_input(4), has_value = ctx.has_input(5);
    if (has_key != has_value) ctx.fail("past_key and past_value must be given together");
    if (!has_key) return 0;
    const Tensor& pk = ctx.input(4);
    const Tensor& pv = ctx.input(5);
    const int64_t past = pk.rank() == 4 ? pk.dim(2) : -1;
    if (pk.shape() != Shape{d.batch, d.kv_heads, past, d.head_size}) {
      ctx.fail("past_key " + shape_string(pk.shape()) + " must be [batch, kv_heads, past, head_size] = [" +
               std::to_string(d.batch) + ", " + std::to_string(d.kv_heads) + ", past, " + std::to_string(d.head_size) +
               "]");
    }
    if (pv.shape() != Shape{d.batch, d.kv_heads, past, d.v_head_size}) {
      ctx.fail("past_value " + shape_string(pv.shape()) + " must be [batch, kv_heads, past, v_head_size] = " +
               shape_string(Shape{d.batch, d.kv_heads, past, d.v_head_size}));
    }
    if (pk.dtype() != ctx.input(1).dtype() || pv.dtype() != ctx.input(2).dtype()) {
      ctx.fail("past_key and past_value must have the element types of K and V");
    }
    return past;
  }

  // present = concat(past, new) along the sequence, [batch, kv_heads, total, size], in
  // output `index` when the graph reads it, else in scratch (the past still counts).
  static Tensor present(KernelContext& ctx, const AttentionDims& d, size_t index, size_t past_input,
                        const Tensor& fresh, int64_t size) {
    const Shape shape{d.batch, d.kv_heads, d.total(), size};
    Tensor out = ctx.has_output(index) ? ctx.allocate_output(index, fresh.dtype(), shape)
                                       : ctx.allocate_scratch(fresh.dtype(), shape);
    const size_t bytes = dtype_size(fresh.dtype());
    const HeadLayout from = d.three_d ? layout_3d(d.kv_heads, d.kv_seq, size) : layout_4d(d.kv_heads, d.kv_seq, size);
    const auto* src = static_cast<const std::byte*>(fresh.raw_data());
    const auto* past = d.past ? static_cast<const std::byte*>(ctx.input(past_input).raw_data()) : nullptr;
    auto* dst = static_cast<std::byte*>(out.raw_data());
    const size_t row = static_cast<size_t>(size) * bytes;
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t h = 0; h < d.kv_heads; ++h) {
        std::byte* head = dst + static_cast<size_t>((b * d.kv_heads + h) * d.total()) * row;
        if (past) std::memcpy(head, past + static_cast<size_t>((b * d.kv_heads + h) * d.past) * row, d.past * row);
        for (int64_t s = 0; s < d.kv_seq; ++s) {
          std::memcpy(head + static_cast<size_t>(d.past + s) * row, src + static_cast<size_t>(from.at(b, h, s)) * bytes,
                      row);
        }
      }
    }
    return out;
  }

  // `t` as A values: itself when it already is, else a converted copy (same layout).
  template <typename A>
  static const A* as(KernelContext& ctx, const Tensor& t, Tensor& holder) {
    if (t.dtype() == dtype_of<A>()) return t.data<A>();
    holder = ctx.allocate_scratch(dtype_of<A>(), t.shape());
    A* out = holder.data<A>();
    dispatch<float, double, Float16, BFloat16>(t.dtype(), "Attention", [&]<typename T>() {
      const T* in = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<A>(static_cast<compute_type_t<T>>(in[i]));
    });
    return out;
  }

  template <typename A>
  static MaskBias<A> mask_bias(KernelContext& ctx, const AttentionDims& d) {
    MaskBias<A> bias;
    if (!ctx.has_input(3)) return bias;
    const Tensor& m = ctx.input(3);
    const Shape target{d.batch, d.q_heads, d.q_seq, m.rank() ? m.shape().back() : 1};
    bool ok = m.rank() >= 1 && m.rank() <= 4 && m.shape().back() <= d.total();
    for (size_t i = 0; ok && i + 1 < m.rank(); ++i) {
      const int64_t dim = m.shape()[i], want = target[4 - m.rank() + i];
      ok = dim == want || dim == 1;
    }
    if (!ok) {
      ctx.fail("attn_mask " + shape_string(m.shape()) + " must broadcast to [batch, q_heads, q_sequence, ≤ total] = " +
               shape_string(Shape{d.batch, d.q_heads, d.q_seq, d.total()}));
    }
    bias.total = target[3];
    int64_t stride = 1;
    for (size_t i = m.rank(); i-- > 0;) {
      const size_t axis = 4 - m.rank() + i;
      bias.strides[axis] = m.shape()[i] == 1 && axis != 3 ? 0 : stride;
      stride *= m.shape()[i];
    }
    bias.values.resize(static_cast<size_t>(m.numel()));
    if (m.dtype() == DType::kBool) {
      const bool* p = m.data<bool>();
      for (size_t i = 0; i < bias.values.size(); ++i)
        bias.values[i] = p[i] ? A(0) : -std::numeric_limits<A>::infinity();
      return bias;
    }
    if (!is_float(m.dtype())) {
      ctx.fail("attn_mask has element type " + std::string(dtype_name(m.dtype())) +
               ", expected bool (True attends) or a float type (added to the scores)");
    }
    dispatch<float, double, Float16, BFloat16>(m.dtype(), "Attention", [&]<typename T>() {
      const T* p = m.data<T>();
      for (size_t i = 0; i < bias.values.size(); ++i)
        bias.values[i] = static_cast<A>(static_cast<compute_type_t<T>>(p[i]));
    });
    return bias;
  }

  // Keys at or past the batch entry's nonpad_kv_seqlen (opset 24) are masked.
  static std::vector<int64_t> valid_lengths(KernelContext& ctx, const AttentionDims& d) {
    std::vector<int64_t> lengths(static_cast<size_t>(d.batch), d.total());
    if (!ctx.has_input(6)) return lengths;
    const Tensor& t = ctx.input(6);
    if (t.dtype() != DType::kInt64 || t.shape() != Shape{d.batch}) {
      ctx.fail("nonpad_kv_seqlen must be int64 [batch] = [" + std::to_string(d.batch) + "], got " +
               std::string(dtype_name(t.dtype())) + " " + shape_string(t.shape()));
    }
    for (int64_t b = 0; b < d.batch; ++b) lengths[static_cast<size_t>(b)] = std::min(d.total(), t.data<int64_t>()[b]);
    return lengths;
  }

  template <typename A>
  void run(KernelContext& ctx, const AttentionDims& d) {
    const Tensor& q = ctx.input(0);
    const bool cache = d.past > 0 || ctx.has_input(4) || ctx.has_output(1) || ctx.has_output(2);
    Tensor present_key, present_value;
    if (cache) {
      present_key = present(ctx, d, 1, 4, ctx.input(1), d.head_size);
      present_value = present(ctx, d, 2, 5, ctx.input(2), d.v_head_size);
    }
    const Tensor& k = cache ? present_key : ctx.input(1);
    const Tensor& v = cache ? present_value : ctx.input(2);
    const HeadLayout q_layout =
        d.three_d ? layout_3d(d.q_heads, d.q_seq, d.head_size) : layout_4d(d.q_heads, d.q_seq, d.head_size);
    const bool kv_3d = d.three_d && !cache;
    const HeadLayout k_layout =
        kv_3d ? layout_3d(d.kv_heads, d.total(), d.head_size) : layout_4d(d.kv_heads, d.total(), d.head_size);
    const HeadLayout v_layout =
        kv_3d ? layout_3d(d.kv_heads, d.total(), d.v_head_size) : layout_4d(d.kv_heads, d.total(), d.v_head_size);
    const HeadLayout y_layout =
        d.three_d ? layout_3d(d.q_heads, d.q_seq, d.v_head_size) : layout_4d(d.q_heads, d.q_seq, d.v_head_size);
    const Shape y_shape = d.three_d ? Shape{d.batch, d.q_seq, d.q_heads * d.v_head_size}
                                    : Shape{d.batch, d.q_heads, d.q_seq, d.v_head_size};
    Tensor& y = ctx.allocate_output(0, q.dtype(), y_shape);
    Tensor* qk =
        ctx.has_output(3) ? &ctx.allocate_output(3, q.dtype(), Shape{d.batch, d.q_heads, d.q_seq, d.total()}) : nullptr;
    if (y.numel() == 0 && (!qk || qk->numel() == 0)) return;
    Tensor q_holder, k_holder, v_holder;
    Inputs<A> in{
        as<A>(ctx, q, q_holder), as<A>(ctx, k, k_holder), as<A>(ctx, v, v_holder), q_layout, k_layout, v_layout,
        mask_bias<A>(ctx, d),    valid_lengths(ctx, d)};
    const A scale = has_scale_ ? static_cast<A>(scale_) : A(1) / std::sqrt(static_cast<A>(d.head_size));
    dispatch<float, double, Float16, BFloat16>(q.dtype(), "Attention", [&]<typename T>() {
      attend<A, T>(ctx, d, in, scale, y.data<T>(), y_layout, qk ? qk->data<T>() : nullptr);
    });
  }

  template <typename A>
  struct Inputs {
    const A *q, *k, *v;
    HeadLayout q_layout, k_layout, v_layout;
    MaskBias<A> mask;
    std::vector<int64_t> lengths;
  };

  static constexpr int64_t kRowBlock = 64;

  // Every (batch, head, block of query rows) is one task, claimed by the threads as they come
  // (work_share.h).
  template <typename A, typename T>
  void attend(KernelContext& ctx, const AttentionDims& d, const Inputs<A>& in, A scale, T* y,
              const HeadLayout& y_layout, T* qk) const {
    const int64_t blocks = (d.q_seq + kRowBlock - 1) / kRowBlock;
    const int64_t tasks = d.batch * d.q_heads * blocks;
    const int64_t work = std::max<int64_t>(1, kRowBlock * d.total() * (d.head_size + d.v_head_size));
    // Each thread's buffers, from the run's arena (with heap vectors, zeroed on every run,
    // the bench's alternating 1 x 8 x 128 x 64 row measured 1.01-1.13 of onnxruntime's time,
    // now 0.98-1.00): the block's scores and output rows, its rows' 1 / sum, and (float32)
    // K^T of the key/value head in use, [head_size, total rounded up to 16], transposed
    // once for the run of tasks that read it.
    const int64_t padded = (d.total() + 15) / 16 * 16;
    const int64_t score_size = kRowBlock * d.total(), out_size = kRowBlock * d.v_head_size;
    const int64_t key_size = std::is_same_v<A, float> ? d.head_size * padded : 0;
    const int64_t slot = (score_size + out_size + kRowBlock + key_size + 15) / 16 * 16;
    const int threads = std::max(1, ctx.num_threads());
    Tensor buffers = ctx.allocate_scratch(dtype_of<A>(), {threads * slot});
    std::vector<int64_t> packed(static_cast<size_t>(threads), -1);  // b * kv_heads + kv_h of each slot's key_t
    share_work(tasks, std::max<int64_t>(1, 65536 / work), threads, [&](int64_t task, int thread) {
      A* scores = buffers.data<A>() + thread * slot;
      A* out = scores + score_size;
      A* inverse_sums = out + out_size;
      A* key_t = inverse_sums + kRowBlock;
      const int64_t block = task % blocks, bh = task / blocks;
      const int64_t b = bh / d.q_heads, h = bh % d.q_heads;
      const int64_t i0 = block * kRowBlock, i1 = std::min(d.q_seq, i0 + kRowBlock);
      const int64_t kv = b * d.kv_heads + h / (d.q_heads / d.kv_heads);
      if constexpr (std::is_same_v<A, float>) {
        int64_t& packed_kv = packed[static_cast<size_t>(thread)];
        if (kv != packed_kv) {
          pack_transposed(in.k + in.k_layout.at(b, kv % d.kv_heads, 0), d.total(), d.head_size, in.k_layout.row, key_t);
          packed_kv = kv;
        }
      }
      const Packed<A> keys{key_t, padded};
      if constexpr (std::is_same_v<A, T>) {  // Y's rows themselves (row stride y_layout.row)
        attend_block<A, T>(d, in, scale, b, h, i0, i1, scores, y + y_layout.at(b, h, i0), y_layout.row, inverse_sums,
                           keys, qk);
        return;
      }
      attend_block<A, T>(d, in, scale, b, h, i0, i1, scores, out, d.v_head_size, inverse_sums, keys, qk);
      for (int64_t i = i0; i < i1; ++i)
        store_row(y + y_layout.at(b, h, i), out + (i - i0) * d.v_head_size, d.v_head_size);
    });
  }

  template <typename T, typename A>
  static void store_row(T* dst, const A* src, int64_t n) {
    if (dst == nullptr) return;
    for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<T>(static_cast<compute_type_t<T>>(src[j]));
  }

  // c [m, n] (row stride ldc) = alpha * a [m, k] (row stride lda) x b, where b is [k, n]
  // or, with b_t, the transpose of [n, k] (row stride ldb). float32 runs product()'s tiles,
  // b_t's b read from `b_transposed` (pack_transposed's); double runs plain loops whose
  // inner loop is contiguous.
  template <typename A>
  struct Packed {
    const A* data = nullptr;
    int64_t stride = 0;
  };

  template <typename A>
  static void gemm(bool b_t, int64_t m, int64_t n, int64_t k, A alpha, const A* a, int64_t lda, const A* b, int64_t ldb,
                   A* c, int64_t ldc, const Packed<A>& b_transposed = {}) {
    if (m == 0 || n == 0) return;
    if constexpr (std::is_same_v<A, float>) {
      if (b_t) {
        product(m, n, k, alpha, a, lda, b_transposed.data, b_transposed.stride, true, c, ldc);
      } else {
        product(m, n, k, alpha, a, lda, b, ldb, false, c, ldc);
      }
      return;
    }
    for (int64_t i = 0; i < m; ++i) {
      const A* ar = a + i * lda;
      A* cr = c + i * ldc;
      if (b_t) {
        for (int64_t j = 0; j < n; ++j) {
          const A* br = b + j * ldb;
          cr[j] = alpha * onednn::lane_sum<A>(k, [&](int64_t p) { return ar[p] * br[p]; });
        }
        continue;
      }
      for (int64_t j = 0; j < n; ++j) cr[j] = A(0);
      for (int64_t p = 0; p < k; ++p) {
        const A av = alpha * ar[p];
        const A* br = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
      }
    }
  }

  // Keys at or past `visible` are masked whatever their scores; `computed` is how many
  // scores the row needs (all of them when qk_matmul_output wants the raw ones).
  struct RowPlan {
    int64_t visible = 0, computed = 0;
  };

  template <typename A>
  RowPlan plan_row(const AttentionDims& d, const Inputs<A>& in, int64_t b, int64_t i, bool raw_needed) const {
    int64_t visible = std::max<int64_t>(0, in.lengths[static_cast<size_t>(b)]);
    if (is_causal_) visible = std::min(visible, i + d.past + 1);
    if (!in.mask.values.empty()) visible = std::min(visible, in.mask.total);
    return {visible, raw_needed ? d.total() : visible};
  }

  // Query rows [i0, i1) of head h: scores = scale Q K^T (one product for the block), then
  // per row bias, softcap and e^(s - max), then out = P V (one product), each row scaled by
  // 1 / sum after the product (head_size values where normalizing P took a score row).
  template <typename A, typename T>
  void attend_block(const AttentionDims& d, const Inputs<A>& in, A scale, int64_t b, int64_t h, int64_t i0, int64_t i1,
                    A* s, A* out, int64_t out_row, A* inverse_sums, const Packed<A>& key_t, T* qk) const {
    const int64_t total = d.total(), rows = i1 - i0;
    const int64_t kv_h = h / (d.q_heads / d.kv_heads);
    const bool raw_needed = qk && mode_ == 0;
    // Visibility only grows with i, so the last row needs the most scores.
    const int64_t cols = plan_row(d, in, b, i1 - 1, raw_needed).computed;
    gemm<A>(true, rows, cols, d.head_size, scale, in.q + in.q_layout.at(b, h, i0), in.q_layout.row,
            in.k + in.k_layout.at(b, kv_h, 0), in.k_layout.row, s, total, key_t);
    int64_t used = 0;
    for (int64_t i = i0; i < i1; ++i) {
      T* qk_row = qk ? qk + ((b * d.q_heads + h) * d.q_seq + i) * total : nullptr;
      used = std::max(used, finish_row(d, in, b, h, i, s + (i - i0) * total, plan_row(d, in, b, i, raw_needed), cols,
                                       qk_row, inverse_sums[i - i0]));
    }
    gemm<A>(false, rows, d.v_head_size, used, A(1), s, total, in.v + in.v_layout.at(b, kv_h, 0), in.v_layout.row, out,
            out_row);
    for (int64_t i = 0; i < rows; ++i) scale_row(out + i * out_row, d.v_head_size, inverse_sums[i]);
    if (softcap_ > 0) return;
    for (int64_t i = i0; i < i1; ++i) {  // every key masked: NaN, as the spec's softmax (0 / 0)
      if (plan_row(d, in, b, i, raw_needed).visible > 0) continue;
      std::fill_n(out + (i - i0) * out_row, d.v_head_size, std::numeric_limits<A>::quiet_NaN());
    }
  }

  // One score row, its products done (the first `cols` of them): bias, softcap,
  // e^(s - max) and the qk_matmul_output the mode asks for; `inverse_sum` is what the row of
  // P V is to be scaled by (1 where the row was normalized here for output 3). Returns how
  // many leading keys can have a non-zero probability.
  template <typename A, typename T>
  int64_t finish_row(const AttentionDims& d, const Inputs<A>& in, int64_t b, int64_t h, int64_t i, A* s,
                     const RowPlan& plan, int64_t cols, T* qk_row, A& inverse_sum) const {
    const int64_t total = d.total();
    // Keys past `cols` are masked for every row of the block (or not computed): only an
    // output or softcap (which makes their -inf finite) needs the whole row.
    const int64_t width = qk_row || softcap_ > 0 ? total : cols;
    if (qk_row && mode_ == 0) store_row(qk_row, s, total);
    if (!in.mask.values.empty()) {
      const A* m = in.mask.row(b, h, i);
      const int64_t n = std::min(plan.visible, in.mask.total);
      for (int64_t j = 0; j < n; ++j) s[j] += m[j];
    }
    std::fill(s + plan.visible, s + width, -std::numeric_limits<A>::infinity());
    if (qk_row && mode_ == 1) store_row(qk_row, s, total);
    if (softcap_ > 0) {
      const A cap = static_cast<A>(softcap_);
      for (int64_t j = 0; j < total; ++j) s[j] = cap * tanh_of(s[j] / cap);
    }
    if (qk_row && mode_ == 2) store_row(qk_row, s, total);
    inverse_sum = width > 0 ? A(1) / exponentiate(s, width) : A(1);
    if (qk_row && mode_ == 3) {
      scale_row(s, total, inverse_sum);
      inverse_sum = A(1);
      store_row(qk_row, s, total);
    }
    // Masked keys have probability 0, unless softcap turned their -inf into -softcap.
    return softcap_ > 0 ? total : plan.visible;
  }

  // e^x and tanh x: vector_math's branch-free float versions (so that the loops
  // vectorize), libm's for double.
  template <typename A>
  static A exp_of(A x) {
    if constexpr (std::is_same_v<A, float>) return vector_math::exp(x);
    return std::exp(x);
  }
  template <typename A>
  static A tanh_of(A x) {
    if constexpr (std::is_same_v<A, float>) return vector_math::tanh(x);
    return std::tanh(x);
  }

  bool is_causal_;
  int64_t q_num_heads_, kv_num_heads_, mode_;
  float softcap_;
  bool has_scale_;
  float scale_;
};

const KernelRegistration kAttention{"", "Attention", 23, kLatestOpset,
                                    [](const KernelInfo& info) { return std::make_unique<AttentionKernel>(info); }};

}  // namespace
}  // namespace onnxtrain
