// Convolutions: Conv and ConvTranspose over 1 to 3 spatial dimensions, with groups
// (depthwise included), strides, dilations, explicit pads and auto_pad.
//
// float32 and bfloat16 run on oneDNN's convolution / deconvolution primitives, in the
// layouts oneDNN prefers (blocked, e.g. nChw16c): the input is reordered in and the output
// out per run, and a constant weight tensor is reordered once per shape. float16 runs
// there through float32; float64 runs a direct loop.
#include "ops/cpu/conv.h"

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "core/dispatch.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/pool.h"
#include "ops/cpu/weight_stream.h"
#include "ops/cpu/window.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using onednn::memory;

using window::AutoPad;

// ---- oneDNN path ----

// A prepared convolution: the primitive, the layouts it computes in, and the constant
// weights already in its layout.
struct PreparedConv {
  onednn::Primitive primitive;
  memory::desc src, weights, dst;
  Tensor packed_weights;  // defined when W is constant
  // The per-run layout changes, where the primitive's layouts differ from the plain ones.
  std::optional<onednn::Reorder> src_in, weights_in, dst_out;
  // dst_out as a change of channel blocking (block 0 when it is another change, or none).
  onednn::ChannelBlocks dst_blocks;
};

template <typename PrimitiveDesc>
PreparedConv finish_prepare(const PrimitiveDesc& pd, dnnl::primitive primitive, const memory::desc& src_user,
                            const memory::desc& weights_user, const memory::desc& bias, const memory::desc& dst_user,
                            const void* constant_weights, onednn::PackedConstant& packed, int threads) {
  PreparedConv p;
  p.primitive = onednn::Primitive(std::move(primitive), pd, threads);
  p.src = pd.src_desc();
  p.weights = pd.weights_desc();
  p.dst = pd.dst_desc();
  p.primitive.add_argument(DNNL_ARG_SRC, p.src);
  p.primitive.add_argument(DNNL_ARG_WEIGHTS, p.weights);
  p.primitive.add_argument(DNNL_ARG_DST, p.dst);
  if (bias) p.primitive.add_argument(DNNL_ARG_BIAS, bias);
  if (constant_weights) {
    p.packed_weights = packed.in_layout(weights_user, constant_weights, p.weights);
  } else if (p.weights != weights_user) {
    p.weights_in.emplace(weights_user, p.weights, threads);
  }
  if (p.src != src_user) p.src_in.emplace(src_user, p.src, threads);
  if (p.dst != dst_user) p.dst_out.emplace(p.dst, dst_user, threads);
  p.dst_blocks = onednn::ChannelBlocks::between(p.dst, dst_user);
  return p;
}

// The channel-blocked layout (nCw16c, nChw16c, nCdhw16c) for a tensor of `rank` dims.
memory::format_tag blocked_tag(size_t rank) {
  switch (rank) {
    case 3:
      return memory::format_tag::nCw16c;
    case 4:
      return memory::format_tag::nChw16c;
    default:
      return memory::format_tag::nCdhw16c;
  }
}

// Creates the primitive descriptor for `layout` (src and dst descriptors); empty when oneDNN
// has no implementation or only its reference one.
template <typename PrimitiveDesc, typename Desc>
PrimitiveDesc try_pd(const Desc& desc, const dnnl::primitive_attr& attr) {
  try {
    PrimitiveDesc pd(desc, attr, onednn::engine(), true);
    if (pd && !onednn::is_reference(pd)) return pd;
  } catch (const dnnl::error&) {
  }
  return PrimitiveDesc();
}

// Multiply-adds of the whole convolution, times two.
double conv_flops(const ConvGeometry& g, bool transpose) {
  const double outputs = static_cast<double>(shape_size(g.out_shape));
  const double per_output = static_cast<double>(shape_size(g.kernel)) * static_cast<double>(transpose ? g.m : g.c) /
                            static_cast<double>(g.group);
  return 2.0 * (transpose ? static_cast<double>(g.n * g.c * shape_size(g.in)) : outputs) * per_output;
}

PreparedConv prepare_conv(const ConvGeometry& g, memory::data_type type, bool has_bias, bool transpose, bool relu,
                          const void* constant_weights, onednn::PackedConstant& packed, int threads) {
  const int used = onednn::threads_for(conv_flops(g, transpose), onednn::kFlopsPerThread, threads);
  onednn::ThreadScope scope(used);
  dnnl::primitive_attr attr = onednn::primitive_attr();
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  const memory::dims src_dims = [&] {
    memory::dims d = {g.n, g.c};
    d.insert(d.end(), g.in.begin(), g.in.end());
    return d;
  }();
  const memory::dims dst_dims = to_dims(g.out_shape);
  const memory::desc src_user = onednn::plain_desc(src_dims, type);
  const memory::desc dst_user = onednn::plain_desc(dst_dims, type);
  const memory::desc weights_user = weights_desc(g, type, transpose);
  const memory::desc bias = has_bias ? onednn::plain_desc({g.m}, type) : memory::desc();
  const memory::desc weights_any = onednn::any_desc(weights_user.dims(), type);
  const auto prop = dnnl::prop_kind::forward_inference;
  const memory::dims strides = to_dims(g.strides), dilation = dilation_dims(g);
  const memory::dims pad_l = to_dims(g.pad_begin), pad_r = to_dims(g.pad_end);
  // Layouts to try, best first. Measured on AVX-512 (oneDNN 2.6): channel-blocked src/dst
  // (jit direct and depthwise kernels) beat the NHWC brgemm kernels oneDNN picks for
  // format_tag::any, reorders included. With few input channels (a network's first
  // layer) the jit kernel reads plain NCHW input and writes blocked output.
  std::vector<std::pair<memory::desc, memory::desc>> layouts;
  const memory::desc dst_blocked(dst_dims, type, blocked_tag(dst_dims.size()));
  // Only a handful of output pixels (deep layers at batch 1: 4 x 4, 2 x 2): the weights
  // dominate, and the NHWC brgemm kernel of format_tag::any streams them faster (ResNet-18
  // at batch 1 on one thread: 5.0 ms against 5.7 ms). With more pixels (ResNet-18 at
  // batch 8) the blocked kernel wins.
  const bool few_pixels = g.n * shape_size(g.out) <= 16;
  const bool many_channels = g.c >= 16 && g.m >= 16;
  if (many_channels && !few_pixels) {
    layouts.emplace_back(memory::desc(src_dims, type, blocked_tag(src_dims.size())), dst_blocked);
  } else if (!many_channels && g.m >= 16 && g.group == 1) {  // few input channels: read X as it is
    layouts.emplace_back(src_user, dst_blocked);
  } else if (!many_channels && g.group == 1 && dst_dims.size() == 4) {
    // Fewer than 16 output channels too: the AVX2 kernel's 8-channel blocks waste none
    // (the small CNN's first layer, 3 -> 8 channels at 32 x 32: 11.7 us against 15.1 us with
    // format_tag::any's NHWC brgemm and its reorders, batch 1, one thread).
    layouts.emplace_back(src_user, memory::desc(dst_dims, type, memory::format_tag::nChw8c));
  }
  layouts.emplace_back(onednn::any_desc(src_dims, type), onednn::any_desc(dst_dims, type));
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto& [src, dst] = layouts[i];
    const bool last = i + 1 == layouts.size();
    if (transpose) {
      dnnl::deconvolution_forward::desc desc(prop, dnnl::algorithm::deconvolution_direct, src, weights_any, bias, dst,
                                             strides, dilation, pad_l, pad_r);
      auto pd = last ? dnnl::deconvolution_forward::primitive_desc(desc, attr, onednn::engine())
                     : try_pd<dnnl::deconvolution_forward::primitive_desc>(desc, attr);
      if (pd)
        return finish_prepare(pd, dnnl::deconvolution_forward(pd), src_user, weights_user, bias, dst_user,
                              constant_weights, packed, used);
    } else {
      dnnl::convolution_forward::desc desc(prop, dnnl::algorithm::convolution_direct, src, weights_any, bias, dst,
                                           strides, dilation, pad_l, pad_r);
      auto pd = last ? dnnl::convolution_forward::primitive_desc(desc, attr, onednn::engine())
                     : try_pd<dnnl::convolution_forward::primitive_desc>(desc, attr);
      if (pd)
        return finish_prepare(pd, dnnl::convolution_forward(pd), src_user, weights_user, bias, dst_user,
                              constant_weights, packed, used);
    }
  }
  throw Error("no oneDNN convolution for this shape", ErrorKind::kRuntime);  // unreachable: the last try throws
}

// Runs a prepared convolution on caller buffers in the plain layouts, reordering through
// scratch memory where the primitive computes in other layouts; with `y_in_primitive_layout`
// y receives the primitive's own output layout (p.dst) instead.
void run_conv(KernelContext& ctx, PreparedConv& p, const void* x, const void* w, const void* bias, void* y,
              bool y_in_primitive_layout = false) {
  Tensor src_buffer, weights_buffer, dst_buffer;
  if (p.src_in) {
    src_buffer = onednn::scratch_bytes(ctx, p.src.get_size());
    p.src_in->run(x, src_buffer.raw_data());
    x = src_buffer.raw_data();
  }
  if (p.packed_weights.defined()) {
    w = p.packed_weights.raw_data();
  } else if (p.weights_in) {
    weights_buffer = onednn::scratch_bytes(ctx, p.weights.get_size());
    p.weights_in->run(w, weights_buffer.raw_data());
    w = weights_buffer.raw_data();
  }
  const bool reorder_out = p.dst_out && !y_in_primitive_layout;
  if (reorder_out) dst_buffer = onednn::scratch_bytes(ctx, p.dst.get_size());
  void* dst = reorder_out ? dst_buffer.raw_data() : y;
  if (bias) {
    p.primitive.run(ctx, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
  } else {
    p.primitive.run(ctx, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}});
  }
  if (reorder_out) p.dst_out->run(dst_buffer.raw_data(), y);
}

// ---- 1x1 convolutions as matrix products ----

// A 1x1 convolution without padding or groups (ResNet's downsampling shortcuts): in NCHW
// it is Y[n] = W X[n] with X[n] a [C, pixels] matrix, subsampled first when strided. As a
// oneDNN matmul it reads and writes the plain layouts, where the convolution primitive
// would reorder X into channel blocks and Y back (ResNet-18 at batch 1: 27 us against
// 10-19 us for onnxruntime per shortcut, reorders included).
bool is_pointwise(const ConvGeometry& g) {
  // With fewer output pixels the product is too thin for oneDNN's matmul kernels (ResNet-18's
  // last shortcut at batch 1, 2 x 2 pixels: 83 us against 48 us for the blocked convolution).
  constexpr int64_t kMinPixels = 16;
  if (g.group != 1 || shape_size(g.out) < kMinPixels) return false;
  bool strided = false;
  for (size_t i = 0; i < g.spatial(); ++i) {
    if (g.kernel[i] != 1 || g.pad_begin[i] != 0 || g.pad_end[i] != 0) return false;
    strided = strided || g.strides[i] != 1;
  }
  return !strided || g.spatial() == 2;
}

// dst [N, M, P] = W [1, M, C] x X [N, C, P], on as many threads as its size is worth; empty
// when oneDNN has only its reference kernel for it (the convolution primitive serves then).
// The bias and the ReLU come after: oneDNN's fast matmul kernels take a bias per column
// only; a bias per row sent ResNet-18's first shortcut to the reference kernel (8 ms).
std::optional<onednn::Primitive> prepare_pointwise(const ConvGeometry& g, memory::data_type type, int threads) {
  const int64_t pixels = shape_size(g.out);
  const int used = onednn::threads_for(conv_flops(g, false), onednn::kFlopsPerThread, threads);
  onednn::ThreadScope scope(used);
  const memory::desc w = onednn::plain_desc({1, g.m, g.c}, type);
  const memory::desc x = onednn::plain_desc({g.n, g.c, pixels}, type);
  const memory::desc y = onednn::plain_desc({g.n, g.m, pixels}, type);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(w, x, y), onednn::primitive_attr(), onednn::engine());
  if (onednn::is_reference(pd)) return std::nullopt;
  onednn::Primitive primitive(dnnl::matmul(pd), pd, used);
  primitive.add_argument(DNNL_ARG_SRC, w);
  primitive.add_argument(DNNL_ARG_WEIGHTS, x);
  primitive.add_argument(DNNL_ARG_DST, y);
  return primitive;
}

// y[n, m, p] = relu?(y[n, m, p] + bias[m]).
void add_bias_relu(const ConvGeometry& g, const float* bias, bool relu, float* y) {
  const int64_t pixels = shape_size(g.out);
  parallel_for(g.n * g.m, std::max<int64_t>(1, 16384 / std::max<int64_t>(pixels, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float b = bias ? bias[row % g.m] : 0.0f;
      float* yr = y + row * pixels;
      for (int64_t p = 0; p < pixels; ++p) {
        const float v = yr[p] + b;
        yr[p] = relu && !(v > 0.0f) ? 0.0f : v;
      }
    }
  });
}

// X [N, C, H, W] sampled at the strides of a 1x1 convolution: [N, C, out H, out W].
template <typename T>
void subsample(const ConvGeometry& g, const T* x, T* out) {
  const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1], sh = g.strides[0], sw = g.strides[1];
  parallel_for(g.n * g.c, std::max<int64_t>(1, 16384 / std::max<int64_t>(oh * ow, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x + plane * ih * iw;
      T* op = out + plane * oh * ow;
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t c = 0; c < ow; ++c) op[r * ow + c] = xp[r * sh * iw + c * sw];
    }
  });
}

// ---- convolutions with few output pixels ----

// The deep layers of a CNN at batch 1 have a handful of output pixels (ResNet-18's last
// stage at 64 x 64 input: 2 x 2) and megabytes of weights: with constant weights they run
// as a WeightStream over the input patches (im2col). ResNet-18's 512 x 512 x 3 x 3 layers
// at batch 1, two threads: 222 us, against 278 us with oneDNN and 245 us in onnxruntime;
// with 16 pixels (4 x 4) oneDNN is faster (256 x 256 x 3 x 3: 112 us against 135 us).
bool streams_weights(const ConvGeometry& g) {
  return g.group == 1 && g.n * shape_size(g.out) <= WeightStream::kMaxColumns;
}

class StreamingConv {
 public:
  // `weights` holds W [M, C, kernel...] as M outputs by C * kernel size, packed once for every
  // input shape.
  StreamingConv(const ConvGeometry& g, std::shared_ptr<const WeightStream> weights)
      : g_(g), q_(g), weights_(std::move(weights)) {
    locate_sources();
  }

  void run(KernelContext& ctx, const float* x, const float* bias, bool relu, float* y) const {
    const int64_t pixels = g_.n * q_.out_size(), per_image = q_.out_size();
    Tensor patches = ctx.allocate_scratch(DType::kFloat32, {weights_->depth(), pixels});
    gather_patches(x, patches.data<float>());
    weights_->multiply(
        patches.data<float>(), pixels, pixels, 1, static_cast<int64_t>(onednn::kBytesPerThread), ctx.num_threads(),
        [&](int64_t first, int64_t count, int64_t first_pixel, int64_t n, const WeightStream::Lanes* sums) {
          for (int64_t p = first_pixel; p < first_pixel + n; ++p) {
            float* yp = y + (p / per_image * g_.m + first) * per_image + p % per_image;
            for (int64_t j = 0; j < count; ++j) {
              const float v = sums[p - first_pixel][j] + (bias ? bias[first + j] : 0.0f);
              yp[j * per_image] = relu && !(v > 0.0f) ? 0.0f : v;
            }
          }
        });
  }

 private:
  // patches[k][p], k = (c, kernel tap) in W's order, p = (n, output pixel): the input
  // under each tap, zero in the padding.
  void gather_patches(const float* x, float* patches) const {
    const int64_t per_channel = static_cast<int64_t>(sources_.size());
    parallel_for(g_.c, std::max<int64_t>(1, 8192 / per_channel), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const float* channel = x + c * q_.in_size();
        float* row = patches + c * per_channel;
        for (int64_t i = 0; i < per_channel; ++i) {
          const int64_t source = sources_[static_cast<size_t>(i)];
          const float v = channel[std::max<int64_t>(source, 0)];
          row[i] = source >= 0 ? v : 0.0f;
        }
      }
    });
  }

  // For each (kernel tap, n, output pixel), in patches' order within a channel: the offset
  // of the input element from X[0, c], or -1 in the padding.
  void locate_sources() {
    for (int64_t kd = 0; kd < q_.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < q_.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < q_.kernel[2]; ++kw)
          for (int64_t n = 0; n < g_.n; ++n)
            for (int64_t od = 0; od < q_.out[0]; ++od)
              for (int64_t oh = 0; oh < q_.out[1]; ++oh)
                for (int64_t ow = 0; ow < q_.out[2]; ++ow) {
                  const int64_t id = od * q_.stride[0] - q_.pad_begin[0] + kd * q_.dilation[0];
                  const int64_t ih = oh * q_.stride[1] - q_.pad_begin[1] + kh * q_.dilation[1];
                  const int64_t iw = ow * q_.stride[2] - q_.pad_begin[2] + kw * q_.dilation[2];
                  const bool inside = id >= 0 && id < q_.in[0] && ih >= 0 && ih < q_.in[1] && iw >= 0 && iw < q_.in[2];
                  sources_.push_back(inside ? n * g_.c * q_.in_size() + (id * q_.in[1] + ih) * q_.in[2] + iw : -1);
                }
  }

  ConvGeometry g_;
  window::Window3 q_;
  std::shared_ptr<const WeightStream> weights_;
  std::vector<int64_t> sources_;
};

// ---- the kernels ----

class ConvKernel : public OpKernel {
 public:
  ConvKernel(const KernelInfo& info, bool transpose)
      : attrs_(info, transpose),
        transpose_(transpose),
        relu_(fused_relu(info)),
        pool_(fused_pool(info)),
        constant_w_(info.packable_constant_input(1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    if (x.dtype() != w.dtype()) {
      ctx.fail("X is " + std::string(dtype_name(x.dtype())) + " but W is " + std::string(dtype_name(w.dtype())) +
               "; they must have the same element type");
    }
    ConvGeometry g = transpose_ ? conv_transpose_geometry(ctx, attrs_, x, w) : conv_geometry(ctx, attrs_, x, w);
    const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (bias && (bias->dtype() != x.dtype() || bias->shape() != Shape{g.m})) {
      ctx.fail("B is " + std::string(dtype_name(bias->dtype())) + shape_string(bias->shape()) + ", expected " +
               std::string(dtype_name(x.dtype())) + shape_string(Shape{g.m}) + " (one bias per output channel)");
    }
    const pool::MaxWindow window = pool_ ? pool_window(ctx, g) : pool::MaxWindow{};
    Tensor& out = ctx.allocate_output(0, x.dtype(), pool_ ? Shape{g.n, g.m, window.out_h, window.out_w} : g.out_shape);
    if (out.numel() == 0) return;
    Tensor y = pool_ ? ctx.allocate_scratch(x.dtype(), g.out_shape) : out;  // the convolution's output
    dispatch<float, double, Float16, BFloat16>(x.dtype(), ctx.node().op_type, [&]<typename T>() {
      if constexpr (std::is_same_v<T, double>) {
        run_loop<T>(g, x, w, bias, y);
        if (relu_) apply_relu<T>(y);
      } else if (g.c == 0 || x.numel() == 0) {
        run_loop<T>(g, x, w, bias, y);  // no input: only the bias
        if (relu_) apply_relu<T>(y);
      } else if (run_onednn(ctx, g, x, w, bias, y, pool_ ? &out : nullptr, window)) {  // with the ReLU post-op
        return;                                                                        // pooled already
      }
      if (pool_) pool::max_2d(y.data<T>(), out.data<T>(), g.n * g.m, g.out[0], g.out[1], window);
    });
  }

 private:
  // A MaxPool after the convolution (passes/fuse_conv_pool.h): its window, as given.
  struct PoolAttributes {
    std::vector<int64_t> kernel, strides, pads;
  };

  // org.onnxtrain::FusedConv may carry pool "MaxPool" with pool_kernel_shape, pool_strides
  // and pool_pads.
  static std::optional<PoolAttributes> fused_pool(const KernelInfo& info) {
    const std::string pool = info.string_attribute("pool", "");
    if (pool.empty()) return std::nullopt;
    if (pool != "MaxPool") info.fail("attribute 'pool' is '" + pool + "'; onnxtrain fuses only 'MaxPool'");
    PoolAttributes a{info.ints_attribute("pool_kernel_shape", std::vector<int64_t>{}),
                     info.ints_attribute("pool_strides", std::vector<int64_t>{}),
                     info.ints_attribute("pool_pads", std::vector<int64_t>{})};
    if (a.kernel.size() != 2 || a.strides.size() != 2 || a.pads.size() != 4 ||
        std::any_of(a.kernel.begin(), a.kernel.end(), [](int64_t k) { return k < 1; })) {
      info.fail("the fused pool's window (pool_kernel_shape " + shape_string(a.kernel) + ", pool_strides " +
                shape_string(a.strides) + ", pool_pads " + shape_string(a.pads) +
                ") must be 2 positive sizes, 2 strides and 4 pads");
    }
    window::check_steps_and_pads(info, a.strides, {}, a.pads);
    return a;
  }

  // The fused pool's window over the convolution's output, floor rounding.
  pool::MaxWindow pool_window(KernelContext& ctx, const ConvGeometry& g) const {
    if (g.spatial() != 2)
      ctx.fail("a fused MaxPool needs a 2-D convolution, the output is " + shape_string(g.out_shape));
    const PoolAttributes& a = *pool_;
    pool::MaxWindow window{a.kernel[0], a.kernel[1], a.strides[0], a.strides[1], a.pads[0], a.pads[1], 0, 0};
    const int64_t padded_h = g.out[0] + a.pads[0] + a.pads[2], padded_w = g.out[1] + a.pads[1] + a.pads[3];
    if (padded_h < a.kernel[0] || padded_w < a.kernel[1]) {
      ctx.fail("the fused MaxPool's window " + shape_string(a.kernel) +
               " is larger than the padded convolution output " + shape_string(Shape{padded_h, padded_w}));
    }
    window.out_h = (padded_h - a.kernel[0]) / a.strides[0] + 1;
    window.out_w = (padded_w - a.kernel[1]) / a.strides[1] + 1;
    return window;
  }

  // org.onnxtrain::FusedConv (passes/fuse_conv_relu.h) carries activation "Relu".
  static bool fused_relu(const KernelInfo& info) {
    const std::string activation = info.string_attribute("activation", "");
    if (!activation.empty() && activation != "Relu") {
      info.fail("attribute 'activation' is '" + activation + "'; onnxtrain fuses only 'Relu'");
    }
    return !activation.empty();
  }

  template <typename T>
  static void apply_relu(Tensor& y) {
    using C = compute_type_t<T>;
    T* p = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) p[i] = static_cast<C>(p[i]) > C(0) ? p[i] : T(0.0f);
  }

  template <typename T>
  void run_loop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) const {
    using C = compute_type_t<T>;
    if constexpr (std::is_same_v<T, C>) {
      direct_conv<T>(g, x.data<T>(), w.data<T>(), bias ? bias->data<T>() : nullptr, y.data<T>(), transpose_);
    } else {  // only reached with no input elements: the output is the bias
      const int64_t plane = y.numel() / std::max<int64_t>(1, g.n * g.m);
      T* yp = y.data<T>();
      for (int64_t nm = 0; nm < g.n * g.m; ++nm)
        std::fill(yp + nm * plane, yp + (nm + 1) * plane, bias ? bias->data<T>()[nm % g.m] : T(0.0f));
    }
  }

  // True when oneDNN computes the whole output: pads it cannot take (negative ones, from a
  // ConvTranspose output_shape larger than the full result) go through a crop instead.
  static bool needs_crop(const ConvGeometry& g) {
    for (size_t i = 0; i < g.spatial(); ++i)
      if (g.pad_begin[i] < 0 || g.pad_end[i] < 0) return true;
    return false;
  }

  // Writes the convolution into y; with `pooled`, returns true when it wrote the max pool
  // of it (over `window`) there instead, straight from oneDNN's channel blocks.
  bool run_onednn(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor* bias,
                  Tensor& y, Tensor* pooled, const pool::MaxWindow& window) {
    if (!transpose_ && x.dtype() == DType::kFloat32) {
      if (constant_w_ && streams_weights(g)) {
        run_streaming(ctx, g, x, bias, y);
        return false;
      }
      if (is_pointwise(g) && run_pointwise(ctx, g, x, w, bias, y)) return false;
    }
    const bool native = onednn::computes_natively(x.dtype());
    const memory::data_type type = *onednn::data_type(native ? x.dtype() : DType::kFloat32);
    // With negative pads, compute the clamped problem and crop/extend it afterwards.
    ConvGeometry inner = g;
    const bool crop = needs_crop(g);
    if (crop) {
      for (size_t i = 0; i < g.spatial(); ++i) {
        inner.pad_begin[i] = std::max<int64_t>(0, g.pad_begin[i]);
        inner.pad_end[i] = std::max<int64_t>(0, g.pad_end[i]);
        inner.out[i] = g.out[i] - (inner.pad_begin[i] - g.pad_begin[i]) - (inner.pad_end[i] - g.pad_end[i]);
        inner.out_shape[i + 2] = inner.out[i];
      }
    }
    key_.clear();
    onednn::append_key(key_, x);
    onednn::append_key(key_, w);
    key_.insert(key_.end(), inner.out_shape.begin(), inner.out_shape.end());
    key_.insert(key_.end(), inner.pad_begin.begin(), inner.pad_begin.end());
    key_.insert(key_.end(), inner.pad_end.begin(), inner.pad_end.end());
    key_.push_back(bias != nullptr);
    PreparedConv& prepared = cache_.get(key_, [&] {
      Tensor converted;
      const void* constant = nullptr;
      if (constant_w_) {
        converted = native ? *constant_w_ : onednn::float32_copy(*constant_w_);
        constant = converted.raw_data();
      }
      return prepare_conv(inner, type, bias != nullptr, transpose_, relu_, constant, packed_w_, ctx.num_threads());
    });

    const Tensor xs = native ? x : onednn::to_float32(ctx, x);
    const Tensor ws = native || constant_w_ ? w : onednn::to_float32(ctx, w);
    const Tensor bs = !bias ? Tensor() : native ? *bias : onednn::to_float32(ctx, *bias);
    const bool direct = native && !crop;
    const void* bias_data = bias ? bs.raw_data() : nullptr;
    if (pooled && direct && prepared.dst_blocks.block != 0) {
      Tensor blocked = onednn::scratch_bytes(ctx, prepared.dst.get_size());
      run_conv(ctx, prepared, xs.raw_data(), ws.raw_data(), bias_data, blocked.raw_data(), true);
      pool::max_2d_from_channel_blocks(static_cast<const float*>(blocked.raw_data()), pooled->data<float>(), g.n, g.m,
                                       g.out[0], g.out[1], prepared.dst_blocks.block, window);
      return true;
    }
    Tensor ys = direct ? y : ctx.allocate_scratch(native ? x.dtype() : DType::kFloat32, inner.out_shape);
    run_conv(ctx, prepared, xs.raw_data(), ws.raw_data(), bias_data, ys.raw_data());
    if (direct) return false;
    if (crop) {
      dispatch<float, Float16, BFloat16>(ys.dtype(), "ConvTranspose", [&]<typename S>() {
        Tensor full = native ? y : ctx.allocate_scratch(ys.dtype(), g.out_shape);
        place<S>(g, inner, ys, bias ? &bs : nullptr, full);
        if (!native) onednn::from_float32(full, y);
      });
      return false;
    }
    onednn::from_float32(ys, y);
    return false;
  }

  void run_streaming(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const Tensor* bias, Tensor& y) {
    key_.clear();
    onednn::append_key(key_, x);
    key_.insert(key_.end(), g.out_shape.begin(), g.out_shape.end());
    key_.insert(key_.end(), g.pad_begin.begin(), g.pad_begin.end());
    const StreamingConv& conv = streaming_cache_.get(key_, [&] {
      if (!streamed_w_) {
        const int64_t depth = g.c * shape_size(g.kernel);
        streamed_w_ = std::make_shared<const WeightStream>(constant_w_->data<float>(), g.m, depth, depth, 1);
      }
      return StreamingConv(g, streamed_w_);
    });
    conv.run(ctx, x.data<float>(), bias ? bias->data<float>() : nullptr, relu_, y.data<float>());
  }

  // False when oneDNN has no fast matmul for it.
  bool run_pointwise(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor* bias,
                     Tensor& y) {
    key_.clear();
    onednn::append_key(key_, x);
    onednn::append_key(key_, w);
    key_.insert(key_.end(), g.out_shape.begin(), g.out_shape.end());
    std::optional<onednn::Primitive>& primitive =
        pointwise_cache_.get(key_, [&] { return prepare_pointwise(g, memory::data_type::f32, ctx.num_threads()); });
    if (!primitive) return false;
    Tensor sampled;
    const void* xs = x.raw_data();
    if (shape_size(g.out) != shape_size(g.in)) {  // strided (2-D only, see is_pointwise)
      sampled = ctx.allocate_scratch(DType::kFloat32, {g.n, g.c, g.out[0], g.out[1]});
      subsample(g, x.data<float>(), sampled.data<float>());
      xs = sampled.raw_data();
    }
    primitive->run(ctx, {{DNNL_ARG_SRC, w.raw_data()}, {DNNL_ARG_WEIGHTS, xs}, {DNNL_ARG_DST, y.raw_data()}});
    if (bias || relu_) add_bias_relu(g, bias ? bias->data<float>() : nullptr, relu_, y.data<float>());
    return true;
  }

  // Copies the clamped result `part` into `out` at its offset; outputs no input reaches
  // hold the bias.
  template <typename S>
  static void place(const ConvGeometry& g, const ConvGeometry& inner, const Tensor& part, const Tensor* bias,
                    Tensor& out) {
    const window::Window3 qo(g), qi(inner);
    std::array<int64_t, 3> offset{0, 0, 0};
    for (size_t i = 0; i < g.spatial(); ++i) offset[3 - g.spatial() + i] = inner.pad_begin[i] - g.pad_begin[i];
    const S* src = part.data<S>();
    S* dst = out.data<S>();
    const int64_t os = qo.out_size(), is = qi.out_size();
    parallel_for(g.n * g.m, 1, [&](int64_t begin, int64_t end) {
      for (int64_t nm = begin; nm < end; ++nm) {
        const S fill = bias ? bias->data<S>()[nm % g.m] : S(0.0f);
        for (int64_t d = 0; d < qo.out[0]; ++d)
          for (int64_t h = 0; h < qo.out[1]; ++h)
            for (int64_t w = 0; w < qo.out[2]; ++w) {
              const int64_t sd = d - offset[0], sh = h - offset[1], sw = w - offset[2];
              const bool inside = sd >= 0 && sd < qi.out[0] && sh >= 0 && sh < qi.out[1] && sw >= 0 && sw < qi.out[2];
              dst[nm * os + (d * qo.out[1] + h) * qo.out[2] + w] =
                  inside ? src[nm * is + (sd * qi.out[1] + sh) * qi.out[2] + sw] : fill;
            }
      }
    });
  }

  ConvAttributes attrs_;
  bool transpose_;
  bool relu_;
  std::optional<PoolAttributes> pool_;  // a max pool after (and after the ReLU)
  const Tensor* constant_w_;
  std::vector<int64_t> key_;  // the cache key, rebuilt in place each run
  onednn::ShapeCache<PreparedConv> cache_;
  onednn::PackedConstant packed_w_;  // W in oneDNN's layouts, shared by cache_'s entries
  onednn::ShapeCache<std::optional<onednn::Primitive>> pointwise_cache_;
  onednn::ShapeCache<StreamingConv> streaming_cache_;
  std::shared_ptr<const WeightStream> streamed_w_;  // W packed for streaming_cache_'s entries
};

const KernelRegistration kConv{"", "Conv", 1, kLatestOpset,
                               [](const KernelInfo& info) { return std::make_unique<ConvKernel>(info, false); }};
const KernelRegistration kFusedConv{"org.onnxtrain", "FusedConv", 1, kLatestOpset,
                                    [](const KernelInfo& info) { return std::make_unique<ConvKernel>(info, false); }};
const KernelRegistration kConvTranspose{"", "ConvTranspose", 1, kLatestOpset, [](const KernelInfo& info) {
                                          return std::make_unique<ConvKernel>(info, true);
                                        }};

}  // namespace
}  // namespace onnxtrain
