// RotaryEmbedding (opset 23): rotates pairs of each head's first rotary_embedding_dim
// features by the angle of the token's position, y = (c x1 - s x2, s x1 + c x2), with
// the pairs split in halves or interleaved, and copies the rest of the head.
//
// Both layouts ([B, H, S, D], or [B, S, H * D] with num_heads) hold each head's D
// features contiguously, so one loop over (batch, position, head) rows serves both. The
// caches are [B, S, rotary_dim / 2], or [max_position, rotary_dim / 2] read through
// position_ids [B, S]. float64 is accepted beyond the spec's types, so that gradients can
// be checked by finite differences.
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

struct RotaryView {
  int64_t batch = 0, heads = 0, seq = 0, head_size = 0, rotary = 0;
  bool three_d = false;
  // Element offset of the row (b, s, h) in X.
  int64_t row(int64_t b, int64_t s, int64_t h) const {
    return (three_d ? (b * seq + s) * heads + h : (b * heads + h) * seq + s) * head_size;
  }
};

class RotaryEmbeddingKernel final : public OpKernel {
 public:
  explicit RotaryEmbeddingKernel(const KernelInfo& info)
      : num_heads_(info.int_attribute("num_heads", 0)),
        rotary_dim_(info.int_attribute("rotary_embedding_dim", 0)),
        interleaved_(info.bool_attribute("interleaved", false)) {
    if (num_heads_ < 0) info.fail("num_heads is " + std::to_string(num_heads_) + ", expected 0 or more");
    if (rotary_dim_ < 0 || rotary_dim_ % 2 != 0) {
      info.fail("rotary_embedding_dim is " + std::to_string(rotary_dim_) + ", expected an even number (0: head size)");
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const RotaryView v = view(ctx, x);
    const bool has_positions = ctx.has_input(3);
    check_caches(ctx, v, has_positions);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    std::vector<int64_t> positions;
    if (has_positions) positions = read_positions(ctx, v, ctx.input(1).dim(0));
    dispatch<float, double, Float16, BFloat16>(x.dtype(), "RotaryEmbedding", [&]<typename T>() {
      rotate<T>(v, x.data<T>(), ctx.input(1).data<T>(), ctx.input(2).data<T>(), positions, y.data<T>());
    });
  }

 private:
  RotaryView view(KernelContext& ctx, const Tensor& x) const {
    const DType d = x.dtype();
    if (d != DType::kFloat32 && d != DType::kFloat64 && d != DType::kFloat16 && d != DType::kBFloat16) {
      ctx.fail("X has element type " + std::string(dtype_name(d)) + ", expected float, float16 or bfloat16");
    }
    for (size_t i = 1; i < 3; ++i) {
      if (ctx.input(i).dtype() != d) {
        ctx.fail(std::string(i == 1 ? "cos_cache" : "sin_cache") + " has element type " +
                 std::string(dtype_name(ctx.input(i).dtype())) + ", expected X's, " + std::string(dtype_name(d)));
      }
    }
    RotaryView v;
    if (x.rank() == 4) {
      v = {x.dim(0), x.dim(1), x.dim(2), x.dim(3), 0, false};
    } else if (x.rank() == 3) {
      if (num_heads_ == 0) ctx.fail("X " + shape_string(x.shape()) + " is 3-D, which needs the num_heads attribute");
      if (x.dim(2) % num_heads_ != 0) {
        ctx.fail("X " + shape_string(x.shape()) + ": hidden size " + std::to_string(x.dim(2)) +
                 " is not a multiple of num_heads " + std::to_string(num_heads_));
      }
      v = {x.dim(0), num_heads_, x.dim(1), x.dim(2) / num_heads_, 0, true};
    } else {
      ctx.fail("X must be [batch, heads, sequence, head_size] or [batch, sequence, hidden], got " +
               shape_string(x.shape()));
    }
    v.rotary = rotary_dim_ == 0 ? v.head_size : rotary_dim_;
    if (v.rotary > v.head_size || v.rotary % 2 != 0) {
      ctx.fail("rotary_embedding_dim " + std::to_string(v.rotary) + " must be even and at most the head size " +
               std::to_string(v.head_size));
    }
    return v;
  }

  static void check_caches(KernelContext& ctx, const RotaryView& v, bool has_positions) {
    const int64_t half = v.rotary / 2;
    const Tensor& cos = ctx.input(1);
    const Shape want = has_positions ? Shape{cos.rank() == 2 ? cos.dim(0) : -1, half} : Shape{v.batch, v.seq, half};
    for (size_t i = 1; i < 3; ++i) {
      const Tensor& cache = ctx.input(i);
      if (cache.shape() != want || (i == 2 && cache.shape() != cos.shape())) {
        ctx.fail(std::string(i == 1 ? "cos_cache " : "sin_cache ") + shape_string(cache.shape()) + " must be " +
                 (has_positions ? "[max_position, " + std::to_string(half) + "] (with position_ids)"
                                : shape_string(want) + " (batch, sequence, rotary_dim / 2; no position_ids)"));
      }
    }
  }

  static std::vector<int64_t> read_positions(KernelContext& ctx, const RotaryView& v, int64_t max_position) {
    const Tensor& p = ctx.input(3);
    if (p.dtype() != DType::kInt64) {
      ctx.fail("position_ids has element type " + std::string(dtype_name(p.dtype())) + ", expected int64");
    }
    if (p.shape() != Shape{v.batch, v.seq}) {
      ctx.fail("position_ids " + shape_string(p.shape()) +
               " must be [batch, sequence] = " + shape_string(Shape{v.batch, v.seq}));
    }
    std::vector<int64_t> positions(p.data<int64_t>(), p.data<int64_t>() + p.numel());
    for (int64_t pos : positions) {
      if (pos < 0 || pos >= max_position) {
        ctx.fail("position_ids holds " + std::to_string(pos) + ", outside the caches' " + std::to_string(max_position) +
                 " positions");
      }
    }
    return positions;
  }

  template <typename T>
  void rotate(const RotaryView& v, const T* x, const T* cos, const T* sin, const std::vector<int64_t>& positions,
              T* y) const {
    using C = compute_type_t<T>;
    const int64_t half = v.rotary / 2;
    // Element i of the pair: index of its first and second member in the head.
    const int64_t first_step = interleaved_ ? 2 : 1, second_offset = interleaved_ ? 1 : half;
    parallel_for(v.batch * v.seq, std::max<int64_t>(1, 4096 / (v.heads * v.head_size)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t bs = begin; bs < end; ++bs) {
                     const int64_t b = bs / v.seq, s = bs % v.seq;
                     const int64_t cache_row = positions.empty() ? bs : positions[static_cast<size_t>(bs)];
                     const T* c = cos + cache_row * half;
                     const T* sn = sin + cache_row * half;
                     for (int64_t h = 0; h < v.heads; ++h) {
                       const int64_t at = v.row(b, s, h);
                       const T* xr = x + at;
                       T* yr = y + at;
                       for (int64_t i = 0; i < half; ++i) {
                         const int64_t i1 = i * first_step, i2 = i1 + second_offset;
                         const C x1 = static_cast<C>(xr[i1]), x2 = static_cast<C>(xr[i2]);
                         const C ci = static_cast<C>(c[i]), si = static_cast<C>(sn[i]);
                         yr[i1] = static_cast<T>(ci * x1 - si * x2);
                         yr[i2] = static_cast<T>(si * x1 + ci * x2);
                       }
                       for (int64_t d = v.rotary; d < v.head_size; ++d) yr[d] = xr[d];
                     }
                   }
                 });
  }

  int64_t num_heads_, rotary_dim_;
  bool interleaved_;
};

const KernelRegistration kRotaryEmbedding{"", "RotaryEmbedding", 23, kLatestOpset, [](const KernelInfo& info) {
                                            return std::make_unique<RotaryEmbeddingKernel>(info);
                                          }};

}  // namespace
}  // namespace onnxtrain
