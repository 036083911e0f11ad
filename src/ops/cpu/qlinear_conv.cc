// ConvInteger and QLinearConv: integer convolutions as exact int32 products over image
// patches (qlinear.h's IntegerGemm), or a direct loop where patches would cost more; the
// arithmetic is described at the top of qlinear.cc.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/work_share.h"
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

// Bytes16 rows r[i] become columns (r[i][j] -> r[j][i]): four rounds of interleaving row i
// with row i + 8, each rotating the index bits by one.
using Bytes16 = vector_math::Vector<uint8_t, 16>;
ONNXTRAIN_VECTOR_INLINE void transpose_16x16(Bytes16 r[16]) {
  for (int round = 0; round < 4; ++round) {
    Bytes16 u[16];
    for (int i = 0; i < 8; ++i) {
      u[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      u[2 * i + 1] =
          __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    }
    for (int i = 0; i < 16; ++i) r[i] = u[i];
  }
}

// A product c [pixels, m] plus add[j], requantized into the output's channel planes:
// y[j * plane + p] for channel j and pixel p (`multiplier` and `add` hold m values). In
// tiles of 16 pixels x 16 channels, requantized along the channels and transposed in
// registers; the edges one by one.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void requantize_to_planes(const int32_t* __restrict c, int64_t m,
                                                                    int64_t pixels, const int32_t* __restrict add,
                                                                    const float* __restrict multiplier,
                                                                    float zero_point, float lo, float hi,
                                                                    T* __restrict y, int64_t plane) {
  constexpr int64_t kTile = 16;
  using Ints = vector_math::Vector<int32_t, kTile>;
  using Floats = vector_math::Vector<float, kTile>;
  const int64_t full_m = m / kTile * kTile, full_pixels = pixels / kTile * kTile;
  for (int64_t j0 = 0; j0 < full_m; j0 += kTile) {
    Ints bias;
    Floats scale;
    std::memcpy(&bias, add + j0, sizeof bias);
    std::memcpy(&scale, multiplier + j0, sizeof scale);
    for (int64_t p0 = 0; p0 < full_pixels; p0 += kTile) {
      Bytes16 rows[kTile];
      for (int64_t i = 0; i < kTile; ++i) {
        Ints acc, lanes;
        std::memcpy(&acc, c + (p0 + i) * m + j0, sizeof acc);
        qlinear::requantize_lanes(acc + bias, scale, zero_point, lo, hi, lanes);
        qlinear::low_bytes(lanes, rows[i]);
      }
      transpose_16x16(rows);
      for (int64_t j = 0; j < kTile; ++j) std::memcpy(y + (j0 + j) * plane + p0, &rows[j], sizeof rows[j]);
    }
  }
  const auto one = [&](int64_t p, int64_t j) {
    y[j * plane + p] = qlinear::requantized<T>(c[p * m + j] + add[j], multiplier[j], zero_point, lo, hi);
  };
  for (int64_t p = 0; p < full_pixels; ++p)
    for (int64_t j = full_m; j < m; ++j) one(p, j);
  for (int64_t p = full_pixels; p < pixels; ++p)
    for (int64_t j = 0; j < m; ++j) one(p, j);
}

// The whole product c [pixels, m] requantized into planes (see requantize_to_planes), on
// threads by tiles of pixels.
template <typename T>
void requantize_product(const Requantize& q, const int32_t* c, int64_t pixels, int64_t m,
                        const std::vector<int32_t>& add, const std::vector<float>& multiplier, T* y, int64_t plane) {
  const int64_t tiles = (pixels + 15) / 16;
  parallel_for(tiles, std::max<int64_t>(1, 4096 / std::max<int64_t>(m, 1)), [&](int64_t begin, int64_t end) {
    const int64_t first = begin * 16, last = std::min(end * 16, pixels);
    requantize_to_planes<T>(c + first * m, m, last - first, add.data(), multiplier.data(), q.zero_point, q.lo, q.hi,
                            y + first, plane);
  });
}

// The bias (zeros when there is none) and the multipliers of channels [first, first + count),
// one value per channel.
void channel_terms(const Tensor* bias, const std::vector<float>& multipliers, int64_t first, int64_t count,
                   std::vector<int32_t>& add, std::vector<float>& multiplier) {
  add.assign(static_cast<size_t>(count), 0);
  if (bias) std::copy_n(bias->data<int32_t>() + first, count, add.begin());
  multiplier.assign(static_cast<size_t>(count), multipliers[0]);
  if (multipliers.size() > 1) std::copy_n(multipliers.begin() + first, count, multiplier.begin());
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
    std::vector<int32_t> add;  // QLinearConv's bias and multipliers per channel of a group
    std::vector<float> multiplier;
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
        channel_terms(bias, multipliers, group * s.per_group, s.per_group, add, multiplier);
        dispatch<int8_t, uint8_t>(out.dtype(), "QLinearConv output", [&]<typename T>() {
          requantize_product(q, pp, s.pixels, s.per_group, add, multiplier, out.data<T>() + first * s.pixels, s.pixels);
        });
      }
    }
  }

 private:
  // oneDNN's int8 convolution, which needs no patches: where it is exact (VNNI) and takes
  // the zero points (W signed with zero point 0; X's applied by oneDNN, padding counting as
  // it). False where it does not serve.
  //
  // It runs in bands of output rows (along the first spatial axis), each band a task on one
  // thread: the band's input rows transposed to NHWC, convolved into an int32 buffer small
  // enough to stay in the cache, and requantized (or transposed) from there into the output
  // planes. The whole image at once left 800 KB of int32 products (64 x 56 x 56) to read
  // back from L3 (60 us of 0.63 ms), and on two threads cost four parallel regions a run
  // where the bands take one. The threads claim bands as they come (work_share.h): in an
  // OpenMP team, each waiting for the other on a busy machine, the 1 x 64 x 56 x 56 row on
  // two threads took 13-16 ms against onnxruntime's 0.58.
  bool run_direct(KernelContext& ctx, const ConvGeometry& g, const ConvSizes& s, const ZeroPoint& zx,
                  const ZeroPoint& zw, const Tensor* bias, const Requantize& q, const std::vector<float>& multipliers,
                  Tensor& out) {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(w_index_);
    const double work = static_cast<double>(g.n) * static_cast<double>(s.pixels) * static_cast<double>(g.m) *
                        static_cast<double>(s.depth);
    if (!onednn_int8_is_exact() || w.dtype() != DType::kInt8 || !zw.zero() || work < kMinOnednnWork) return false;
    const int threads = std::max(1, ctx.num_threads());
    direct_key_.assign({threads});
    onednn::append_key(direct_key_, x);
    DirectPlan* plan = direct_.find(direct_key_);
    if (plan == nullptr) {
      DirectPlan made = plan_direct(g, x, threads);
      if (made.convs.empty()) return false;  // only oneDNN's reference kernel: the product path serves
      plan = &direct_.insert(direct_key_, std::move(made));
    }
    std::vector<const void*> weights(plan->convs.size());
    std::vector<Tensor> reordered;  // W in the primitives' layouts for this run, when it is not constant
    for (size_t i = 0; i < weights.size(); ++i) {
      const BandConv& conv = plan->convs[i];
      if (w_constant_) {
        weights[i] = packed_w_.in_layout(plan->weights_user, w.raw_data(), conv.weights).raw_data();
        continue;
      }
      reordered.push_back(Tensor::empty(DType::kUInt8, {static_cast<int64_t>(conv.weights.get_size())}));
      onednn::reorder(plan->weights_user, w.raw_data(), conv.weights, reordered.back().raw_data());
      weights[i] = reordered.back().raw_data();
    }
    std::vector<int32_t> add;
    std::vector<float> multiplier;
    if (quantized_) channel_terms(bias, multipliers, 0, g.m, add, multiplier);
    // Each thread's input rows, products and oneDNN scratchpad.
    const int64_t in_bytes = plan->max_in_rows * plan->in_row * g.c;
    const int64_t dst_bytes = plan->max_out_rows * plan->out_row * g.m * 4;
    const int64_t slot_bytes = (in_bytes + dst_bytes + static_cast<int64_t>(plan->scratchpad_bytes) + 63) / 64 * 64;
    Tensor buffers = onednn::scratch_bytes(ctx, static_cast<size_t>(slot_bytes * plan->threads));
    const int32_t zero_point = zx.at(0);
    const auto bands = static_cast<int64_t>(plan->bands.size());
    dispatch<int8_t, uint8_t>(x.dtype(), "X", [&]<typename T>() {
      share_work(g.n * bands, 1, plan->threads, [&](int64_t task, int slot) {
        std::byte* buffer = static_cast<std::byte*>(buffers.raw_data()) + slot * slot_bytes;
        auto* src = reinterpret_cast<T*>(buffer);
        auto* dst = reinterpret_cast<int32_t*>(buffer + in_bytes);
        std::byte* scratchpad = buffer + in_bytes + dst_bytes;
        const int64_t image = task / bands;
        const Band& band = plan->bands[static_cast<size_t>(task % bands)];
        BandConv& conv = plan->convs[band.conv];
        const T* x_image = x.data<T>() + image * g.c * s.plane;
        transpose(src, x_image + band.first_in * plan->in_row, band.in_rows * plan->in_row, g.c, g.c, s.plane);
        std::unordered_map<int, memory>& args = conv.args[static_cast<size_t>(slot)];
        args.at(DNNL_ARG_SRC).set_data_handle(src);
        args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(weights[band.conv]));
        args.at(DNNL_ARG_DST).set_data_handle(dst);
        args.at(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC).set_data_handle(const_cast<int32_t*>(&zero_point));
        if (plan->scratchpad_bytes > 0) args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratchpad);
        onednn::execute(conv.primitive, args);
        const int64_t first = band.first_out * plan->out_row, pixels = band.out_rows * plan->out_row;
        if (quantized_) {
          dispatch<int8_t, uint8_t>(out.dtype(), "QLinearConv output", [&]<typename Y>() {
            requantize_to_planes<Y>(dst, g.m, pixels, add.data(), multiplier.data(), q.zero_point, q.lo, q.hi,
                                    out.data<Y>() + image * g.m * s.pixels + first, s.pixels);
          });
        } else {
          transpose(out.data<int32_t>() + image * g.m * s.pixels + first, dst, g.m, pixels, s.pixels, g.m);
        }
      });
    });
    return true;
  }

  // Output rows [first_out, first_out + out_rows) along the first spatial axis, from input
  // rows [first_in, first_in + in_rows) (padding outside the input).
  struct Band {
    int64_t first_out = 0, out_rows = 0, first_in = 0, in_rows = 0;
    size_t conv = 0;  // its primitive in DirectPlan::convs
  };

  struct BandConv {
    dnnl::convolution_forward primitive;
    memory::desc weights;                               // W's layout for it
    std::vector<std::unordered_map<int, memory>> args;  // one set per thread
  };

  struct DirectPlan {
    std::vector<Band> bands;      // of one image
    std::vector<BandConv> convs;  // one per shape of band (first, middle, last)
    memory::desc weights_user;
    int64_t in_row = 1, out_row = 1;  // pixels of one row of the input and of the output
    int64_t max_in_rows = 0, max_out_rows = 0;
    size_t scratchpad_bytes = 0;
    int threads = 1;
  };

  // Bands of about 128 KB of products, and at least four per thread over the batch; no
  // convs where oneDNN has only its reference kernel or a band would lie all in padding.
  static DirectPlan plan_direct(const ConvGeometry& g, const Tensor& x, int threads) {
    DirectPlan plan;
    plan.threads = threads;
    for (size_t a = 1; a < g.spatial(); ++a) {
      plan.in_row *= g.in[a];
      plan.out_row *= g.out[a];
    }
    const int64_t out_rows = g.out[0];
    const int64_t by_size = std::max<int64_t>(1, 32768 / std::max<int64_t>(g.m * plan.out_row, 1));
    int64_t count = std::max((out_rows + by_size - 1) / by_size, (4 * threads + g.n - 1) / g.n);
    count = std::min(count, out_rows);
    const int64_t rows = (out_rows + count - 1) / count;
    const int64_t extent = (g.kernel[0] - 1) * g.dilations[0] + 1;
    std::map<std::array<int64_t, 4>, size_t> shapes;  // (in rows, pad before, pad after, out rows) -> conv
    std::vector<std::array<int64_t, 4>> conv_shapes;
    for (int64_t first = 0; first < out_rows; first += rows) {
      Band band;
      band.first_out = first;
      band.out_rows = std::min(rows, out_rows - first);
      const int64_t start = first * g.strides[0] - g.pad_begin[0];
      const int64_t end = (first + band.out_rows - 1) * g.strides[0] - g.pad_begin[0] + extent;
      band.first_in = std::max<int64_t>(0, start);
      band.in_rows = std::min(g.in[0], end) - band.first_in;
      if (band.in_rows <= 0) return {};
      const std::array<int64_t, 4> shape{band.in_rows, band.first_in - start, end - band.first_in - band.in_rows,
                                         band.out_rows};
      auto [it, added] = shapes.try_emplace(shape, conv_shapes.size());
      if (added) conv_shapes.push_back(shape);
      band.conv = it->second;
      plan.max_in_rows = std::max(plan.max_in_rows, band.in_rows);
      plan.max_out_rows = std::max(plan.max_out_rows, band.out_rows);
      plan.bands.push_back(band);
    }
    plan.weights_user = weights_desc(g, memory::data_type::s8, false);
    for (const auto& shape : conv_shapes) {
      std::optional<BandConv> conv = band_conv(g, x, shape, plan);
      if (!conv) return {};
      plan.convs.push_back(std::move(*conv));
    }
    return plan;
  }

  // The one-thread primitive of one band shape (in rows, pad before, pad after, out rows).
  static std::optional<BandConv> band_conv(const ConvGeometry& g, const Tensor& x, const std::array<int64_t, 4>& shape,
                                           DirectPlan& plan) {
    using tag = memory::format_tag;
    const size_t rank = g.spatial() + 2;
    const tag channels_last = rank == 3 ? tag::nwc : rank == 4 ? tag::nhwc : tag::ndhwc;
    memory::dims src_dims{1, g.c, shape[0]}, dst_dims{1, g.m, shape[3]};
    src_dims.insert(src_dims.end(), g.in.begin() + 1, g.in.end());
    dst_dims.insert(dst_dims.end(), g.out.begin() + 1, g.out.end());
    std::vector<int64_t> pad_begin = g.pad_begin, pad_end = g.pad_end;
    pad_begin[0] = shape[1];
    pad_end[0] = shape[2];
    const memory::desc src(src_dims, *onednn::data_type(x.dtype()), channels_last);
    const memory::desc dst(dst_dims, memory::data_type::s32, channels_last);
    const memory::desc weights_any(plan.weights_user.dims(), memory::data_type::s8, tag::any);
    onednn::ThreadScope scope(1);
    dnnl::primitive_attr attr;
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                        weights_any, dst, to_dims(g.strides), dilation_dims(g), to_dims(pad_begin),
                                        to_dims(pad_end)),
        onednn::primitive_attr(attr), onednn::engine(), true);
    if (!pd || onednn::is_reference(pd)) return std::nullopt;
    BandConv conv{dnnl::convolution_forward(pd), pd.weights_desc(), {}};
    const memory::desc scratchpad = pd.scratchpad_desc();
    plan.scratchpad_bytes = std::max(plan.scratchpad_bytes, scratchpad.get_size());
    const memory::desc zero_point({1}, memory::data_type::s32, {1});
    for (int t = 0; t < plan.threads; ++t) {
      std::unordered_map<int, memory> args;
      for (const auto& [arg, desc] :
           {std::pair{DNNL_ARG_SRC, src}, std::pair{DNNL_ARG_WEIGHTS, conv.weights}, std::pair{DNNL_ARG_DST, dst},
            std::pair{DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zero_point}})
        args.emplace(arg, memory(desc, onednn::engine(), DNNL_MEMORY_NONE));
      if (scratchpad.get_size() > 0)
        args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad, onednn::engine(), DNNL_MEMORY_NONE));
      conv.args.push_back(std::move(args));
    }
    return conv;
  }

  bool quantized_;
  size_t w_index_;
  ConvAttributes attrs_;
  bool w_constant_;
  std::vector<int64_t> direct_key_;
  onednn::ShapeCache<DirectPlan> direct_;
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
