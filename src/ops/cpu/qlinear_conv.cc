// ConvInteger and QLinearConv: integer convolutions as exact int32 products over image
// patches (qlinear.h's IntegerGemm), or a direct loop where patches would cost more; the
// arithmetic is described at the top of qlinear.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/conv.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/qlinear.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using onednn::memory;
using qlinear::check_8bit;
using qlinear::IntegerGemm;
using qlinear::kMinOnednnWork;
using qlinear::Matrix8;
using qlinear::onednn_int8_is_exact;
using qlinear::read_requantize;
using qlinear::read_zero_point;
using qlinear::Requantize;
using qlinear::ZeroPoint;

// ---- ConvInteger and QLinearConv ----

// Sizes of one convolution call as matrix products: per image and group, patches
// [pixels, depth] times weights [depth, per_group].
struct ConvSizes {
  int64_t pixels = 1, taps = 1, plane = 1;         // output pixels, kernel taps, input pixels
  int64_t channels = 0, per_group = 0, depth = 0;  // input channels and outputs per group, taps * channels
  explicit ConvSizes(const ConvGeometry& g) {
    for (size_t i = 0; i < g.spatial(); ++i) {
      pixels *= g.out[i];
      taps *= g.kernel[i];
      plane *= g.in[i];
    }
    channels = g.c / g.group;
    per_group = g.m / g.group;
    depth = taps * channels;
  }
};

// dst[i * dst_row + j] = src[i + j * src_col] for i < rows, j < cols, in parallel blocks of
// 64 rows of 8 x 8 tiles (layout.h: transpose_block).
template <typename U>
void transpose(U* dst, const U* src, int64_t rows, int64_t cols, int64_t dst_row, int64_t src_col) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  parallel_for(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kBlock * cols)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t b = begin; b < end; ++b) {
                   const int64_t r0 = b * kBlock;
                   transpose_block(dst + r0 * dst_row, src + r0, std::min(kBlock, rows - r0), cols, dst_row, src_col);
                 }
               });
}

// The patches of one group as rows, tap-major: patches[p, t * channels + c] is channel c of
// the input pixel under tap t at output pixel p, or `pad` (the input's zero point, which
// adds nothing) outside the input. `x` is the image in NHWC.
template <typename T>
void gather_patches(const ConvGeometry& g, const ConvSizes& s, const T* x, int64_t group, T pad, T* patches) {
  const size_t axes = g.spatial();
  const T* xg = x + group * s.channels;
  std::vector<int64_t> tap_offsets(static_cast<size_t>(s.taps) * axes);  // tap index times dilation, per axis
  for (int64_t t = 0; t < s.taps; ++t) {
    for (int64_t rest = t, i = static_cast<int64_t>(axes) - 1; i >= 0; --i) {
      const auto a = static_cast<size_t>(i);
      tap_offsets[static_cast<size_t>(t) * axes + a] = rest % g.kernel[a] * g.dilations[a];
      rest /= g.kernel[a];
    }
  }
  // Locals: the byte stores below may alias anything reached through a pointer.
  const int64_t channels = s.channels, c = g.c, taps = s.taps, depth = s.depth;
  const size_t bytes = static_cast<size_t>(channels) * sizeof(T);
  const std::vector<int64_t> in = g.in;
  parallel_for(s.pixels, std::max<int64_t>(1, 65536 / std::max<int64_t>(depth, 1)), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> base(axes);  // the input position of tap 0, per axis
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t rest = p, i = static_cast<int64_t>(axes) - 1; i >= 0; --i) {
        const auto a = static_cast<size_t>(i);
        base[a] = rest % g.out[a] * g.strides[a] - g.pad_begin[a];
        rest /= g.out[a];
      }
      T* row = patches + p * depth;
      const int64_t* offsets = tap_offsets.data();
      for (int64_t t = 0; t < taps; ++t, offsets += axes) {
        int64_t pixel = 0;
        bool inside = true;
        for (size_t a = 0; a < axes; ++a) {
          const int64_t at = base[a] + offsets[a];
          inside = inside && at >= 0 && at < in[a];
          pixel = pixel * in[a] + at;
        }
        T* dst = row + t * channels;
        if (inside) {
          std::memcpy(dst, xg + pixel * c, bytes);
        } else {
          std::memset(dst, static_cast<int>(static_cast<uint8_t>(pad)), bytes);
        }
      }
    }
  });
}

// Group `group`'s weights as the product's B, tap-major like the patches:
// b[t * channels + c, m] = W[group * per_group + m, c, t].
Tensor tap_major_weights(const Tensor& w, const ConvSizes& s, int64_t group) {
  Tensor b = Tensor::empty(w.dtype(), {s.depth, s.per_group});
  const auto* in = static_cast<const uint8_t*>(w.raw_data()) + group * s.per_group * s.depth;
  auto* out = static_cast<uint8_t*>(b.raw_data());
  for (int64_t m = 0; m < s.per_group; ++m)
    for (int64_t c = 0; c < s.channels; ++c)
      for (int64_t t = 0; t < s.taps; ++t)
        out[(t * s.channels + c) * s.per_group + m] = in[(m * s.channels + c) * s.taps + t];
  return b;
}

class IntegerConvKernel final : public OpKernel {
 public:
  // `quantized`: QLinearConv (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
  // y_zero_point, B); else ConvInteger (x, w, x_zero_point, w_zero_point).
  IntegerConvKernel(const KernelInfo& info, bool quantized)
      : quantized_(quantized),
        w_index_(quantized ? 3 : 1),
        attrs_(info, false),
        w_constant_(info.constant_input(w_index_) != nullptr) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(w_index_);
    check_8bit(ctx, x, "X");
    check_8bit(ctx, w, "W");
    const ConvGeometry g = conv_geometry(ctx, attrs_, x, w);
    const ConvSizes s(g);
    const ZeroPoint zx = read_zero_point(ctx, 2, x.dtype(), 1, "x_zero_point", "tensor");
    const ZeroPoint zw = read_zero_point(ctx, quantized_ ? 5 : 3, w.dtype(), g.m, "w_zero_point", "output channel");
    const Tensor* bias = quantized_ && ctx.has_input(8) ? &ctx.input(8) : nullptr;
    if (bias && (bias->dtype() != DType::kInt32 || bias->numel() != g.m)) {
      ctx.fail("B is " + std::string(dtype_name(bias->dtype())) + shape_string(bias->shape()) + ", expected int32[" +
               std::to_string(g.m) + "] (one bias per output channel)");
    }
    Requantize q;
    std::vector<float> multipliers;
    if (quantized_) {
      std::vector<float> w_scale;
      float y_scale = 1;
      q = read_requantize(ctx, 1, g.m, "tensor", "output channel", w_scale, y_scale);
      q.row_multipliers(0, w_scale, y_scale, multipliers);
    }
    Tensor& out = ctx.allocate_output(0, quantized_ ? ctx.input(7).dtype() : DType::kInt32, g.out_shape);
    if (out.numel() == 0) return;
    if (run_direct(ctx, g, s, zx, zw, bias, q, multipliers, out)) return;
    if (weights_.size() != static_cast<size_t>(g.group) || !w_constant_) {
      weights_.clear();
      for (int64_t group = 0; group < g.group; ++group) weights_.push_back(tap_major_weights(w, s, group));
    }
    if (gemms_.size() != static_cast<size_t>(g.group))
      gemms_ = std::vector<IntegerGemm>(g.group, IntegerGemm(w_constant_));
    Tensor channels_last = ctx.allocate_scratch(x.dtype(), {s.plane, g.c});
    Tensor patches = ctx.allocate_scratch(x.dtype(), {s.pixels, s.depth});
    Tensor product = ctx.allocate_scratch(DType::kInt32, {s.pixels, s.per_group});
    Tensor requantized = ctx.allocate_scratch(out.dtype(), {s.pixels, s.per_group});  // QLinearConv's, unused else
    const int32_t* pp = product.data<int32_t>();
    for (int64_t image = 0; image < g.n; ++image) {
      dispatch<int8_t, uint8_t>(x.dtype(), "X", [&]<typename T>() {  // NCHW -> NHWC
        transpose(channels_last.data<T>(), x.data<T>() + image * g.c * s.plane, s.plane, g.c, g.c, s.plane);
      });
      for (int64_t group = 0; group < g.group; ++group) {
        dispatch<int8_t, uint8_t>(x.dtype(), "X", [&]<typename T>() {
          gather_patches(g, s, channels_last.data<T>(), group, static_cast<T>(zx.at(0)), patches.data<T>());
        });
        ZeroPoint zw_group;
        zw_group.values.assign(1, zw.at(0));
        if (zw.values.size() > 1) {
          zw_group.values.assign(zw.values.begin() + group * s.per_group,
                                 zw.values.begin() + (group + 1) * s.per_group);
        }
        const Tensor& b = weights_[static_cast<size_t>(group)];
        gemms_[static_cast<size_t>(group)].run(ctx, Matrix8{x.dtype(), patches.raw_data(), s.depth, 1},
                                               Matrix8{b.dtype(), b.raw_data(), s.per_group, 1}, s.pixels, s.depth,
                                               s.per_group, zx, zw_group, product.data<int32_t>());
        // product [pixels, per_group] -> the output's planes of this group [per_group, pixels].
        const int64_t first = image * g.m + group * s.per_group;
        if (!quantized_) {
          transpose(out.data<int32_t>() + first * s.pixels, pp, s.per_group, s.pixels, s.pixels, s.per_group);
          continue;
        }
        const int32_t* bias_values = bias ? bias->data<int32_t>() + group * s.per_group : nullptr;
        std::vector<float> group_multipliers(multipliers);
        if (multipliers.size() > 1) {
          group_multipliers.assign(multipliers.begin() + group * s.per_group,
                                   multipliers.begin() + (group + 1) * s.per_group);
        }
        dispatch<int8_t, uint8_t>(out.dtype(), "QLinearConv output", [&]<typename T>() {
          T* rq = requantized.data<T>();
          parallel_for(s.pixels, std::max<int64_t>(1, 16384 / std::max<int64_t>(s.per_group, 1)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t p = begin; p < end; ++p)
                           q.row(pp + p * s.per_group, s.per_group, bias_values, group_multipliers,
                                 rq + p * s.per_group);
                       });
          transpose(out.data<T>() + first * s.pixels, rq, s.per_group, s.pixels, s.pixels, s.per_group);
        });
      }
    }
  }

 private:
  // oneDNN's int8 convolution, which needs no patches: where it is exact (VNNI) and takes
  // the zero points (W signed with zero point 0; X's applied by oneDNN, padding counting as
  // it). In NHWC, the image transposed in and the result out. False where it does not serve.
  bool run_direct(KernelContext& ctx, const ConvGeometry& g, const ConvSizes& s, const ZeroPoint& zx,
                  const ZeroPoint& zw, const Tensor* bias, const Requantize& q, const std::vector<float>& multipliers,
                  Tensor& out) {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(w_index_);
    const double work = static_cast<double>(g.n) * static_cast<double>(s.pixels) * static_cast<double>(g.m) *
                        static_cast<double>(s.depth);
    if (!onednn_int8_is_exact() || w.dtype() != DType::kInt8 || !zw.zero() || work < kMinOnednnWork) return false;
    const int64_t plane_out = s.pixels;
    direct_key_.clear();
    onednn::append_key(direct_key_, x);
    DirectConv* direct = direct_.find(direct_key_);
    if (direct == nullptr) {
      DirectConv made = prepare_direct(ctx, g, x);
      if (!made.primitive) return false;  // only oneDNN's reference kernel: the product path serves
      direct = &direct_.insert(direct_key_, std::move(made));
    }
    const DType x_type = x.dtype();
    Tensor src = ctx.allocate_scratch(x_type, {g.n, s.plane, g.c});
    Tensor dst = ctx.allocate_scratch(DType::kInt32, {g.n, plane_out, g.m});
    dispatch<int8_t, uint8_t>(x_type, "X", [&]<typename T>() {  // NCHW -> NHWC
      for (int64_t image = 0; image < g.n; ++image) {
        transpose(src.data<T>() + image * s.plane * g.c, x.data<T>() + image * g.c * s.plane, s.plane, g.c, g.c,
                  s.plane);
      }
    });
    const Tensor weights = w_constant_ ? Tensor() : direct_weights(*direct, w);
    const int32_t zero_point = zx.at(0);
    // One image per call: oneDNN 2.6's brgconv took 1.5 to 4 ms per image for a batch of 8
    // (64 x 56 x 56, 3 x 3), against 0.5 ms for one.
    const void* weights_data = w_constant_ ? direct->packed_weights.raw_data() : weights.raw_data();
    for (int64_t image = 0; image < g.n; ++image) {
      direct->primitive->run(ctx,
                             {{DNNL_ARG_SRC, static_cast<const std::byte*>(src.raw_data()) + image * s.plane * g.c},
                              {DNNL_ARG_WEIGHTS, weights_data},
                              {DNNL_ARG_DST, dst.data<int32_t>() + image * plane_out * g.m},
                              {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, &zero_point}});
    }
    const int32_t* product = dst.data<int32_t>();
    for (int64_t image = 0; image < g.n; ++image) {
      const int32_t* pi = product + image * plane_out * g.m;
      if (!quantized_) {
        transpose(out.data<int32_t>() + image * g.m * plane_out, pi, g.m, plane_out, plane_out, g.m);
        continue;
      }
      dispatch<int8_t, uint8_t>(out.dtype(), "QLinearConv output", [&]<typename T>() {
        Tensor requantized = ctx.allocate_scratch(out.dtype(), {plane_out, g.m});
        T* rq = requantized.data<T>();
        const int32_t* bias_values = bias ? bias->data<int32_t>() : nullptr;
        parallel_for(plane_out, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.m, 1)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t p = begin; p < end; ++p)
                         q.row(pi + p * g.m, g.m, bias_values, multipliers, rq + p * g.m);
                     });
        transpose(out.data<T>() + image * g.m * plane_out, rq, g.m, plane_out, plane_out, g.m);
      });
    }
    return true;
  }

  struct DirectConv {
    std::optional<onednn::Primitive> primitive;
    memory::desc weights_user, weights;
    Tensor packed_weights;  // W in the primitive's layout (with oneDNN's zero point compensation)
  };

  DirectConv prepare_direct(KernelContext& ctx, const ConvGeometry& g, const Tensor& x) {
    using tag = memory::format_tag;
    const size_t rank = g.spatial() + 2;
    const tag channels_last = rank == 3 ? tag::nwc : rank == 4 ? tag::nhwc : tag::ndhwc;
    memory::dims src_dims{1, g.c}, dst_dims{1, g.m};  // one image (see run_direct)
    src_dims.insert(src_dims.end(), g.in.begin(), g.in.end());
    dst_dims.insert(dst_dims.end(), g.out.begin(), g.out.end());
    const memory::desc src(src_dims, *onednn::data_type(x.dtype()), channels_last);
    const memory::desc dst(dst_dims, memory::data_type::s32, channels_last);
    DirectConv d;
    d.weights_user = weights_desc(g, memory::data_type::s8, false);
    const memory::desc weights_any(d.weights_user.dims(), memory::data_type::s8, tag::any);
    const double flops = 2.0 * static_cast<double>(shape_size(dst_dims)) * static_cast<double>(g.c / g.group) *
                         static_cast<double>(shape_size(g.kernel));
    const int threads = onednn::threads_for(flops, onednn::kFlopsPerThread, ctx.num_threads());
    onednn::ThreadScope scope(threads);
    dnnl::primitive_attr attr;
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                        weights_any, dst, to_dims(g.strides), dilation_dims(g), to_dims(g.pad_begin),
                                        to_dims(g.pad_end)),
        onednn::primitive_attr(attr), onednn::engine(), true);
    if (!pd || onednn::is_reference(pd)) return d;
    d.weights = pd.weights_desc();
    d.primitive.emplace(dnnl::convolution_forward(pd), pd, threads);
    d.primitive->add_argument(DNNL_ARG_SRC, src);
    d.primitive->add_argument(DNNL_ARG_WEIGHTS, d.weights);
    d.primitive->add_argument(DNNL_ARG_DST, dst);
    d.primitive->add_argument(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, memory::desc({1}, memory::data_type::s32, {1}));
    if (w_constant_) d.packed_weights = packed_w_.in_layout(d.weights_user, ctx.input(w_index_).raw_data(), d.weights);
    return d;
  }

  // W (not constant) in the primitive's layout, for this run.
  static Tensor direct_weights(const DirectConv& d, const Tensor& w) {
    Tensor out = Tensor::empty(DType::kUInt8, {static_cast<int64_t>(d.weights.get_size())});
    onednn::reorder(d.weights_user, w.raw_data(), d.weights, out.raw_data());
    return out;
  }

  bool quantized_;
  size_t w_index_;
  ConvAttributes attrs_;
  bool w_constant_;
  std::vector<int64_t> direct_key_;
  onednn::ShapeCache<DirectConv> direct_;
  onednn::PackedConstant packed_w_;  // W in the direct convolution's layouts
  std::vector<Tensor> weights_;      // per group: W as B, tap-major (kept when W is constant)
  std::vector<IntegerGemm> gemms_;   // per group: each keeps its weights prepared
};

const KernelRegistration kConvInteger{"", "ConvInteger", 10, kLatestOpset, [](const KernelInfo& info) {
                                        return std::make_unique<IntegerConvKernel>(info, false);
                                      }};
const KernelRegistration kQLinearConv{"", "QLinearConv", 10, kLatestOpset, [](const KernelInfo& info) {
                                        return std::make_unique<IntegerConvKernel>(info, true);
                                      }};

}  // namespace
}  // namespace onnxtrain
