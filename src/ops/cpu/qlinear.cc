// The integer products of quantized models: MatMulInteger and QLinearMatMul (numpy's
// batched matrix product) and ConvInteger and QLinearConv (matrix products over image
// patches).
//
// Each computes C = (A - a_zero_point)(B - b_zero_point) exactly, in int32 (8-bit
// operands, sums wrapping like two's complement as onnxruntime's do). MatMulInteger and
// ConvInteger output C; QLinearMatMul and QLinearConv requantize it:
//   y = saturate(round((C + bias) * a_scale * b_scale / y_scale) + y_zero_point),
// the multiplier in the scales' type, the product in float, rounding to nearest even (as
// onnxruntime). Zero points and scales of A are per tensor or per row, those of B per
// tensor or per column (per output channel for convolutions).
//
// The product runs on oneDNN's int8 matmul where that is exact: on CPUs with VNNI, whose
// dot-product instructions sum 8-bit products in 32 bits. Without VNNI oneDNN sums pairs in
// saturating 16-bit arithmetic, so a plain loop serves there, and for small products.
// oneDNN takes unsigned or signed A but only signed B: an unsigned B is shifted by -128 and
// its zero point with it, which leaves B - b_zero_point unchanged. The zero points then
// enter as corrections, C = A B - za colsum(B) - rowsum(A) zb + K za zb.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/conv.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using onednn::memory;

// True when oneDNN's int8 products are exact on this CPU (see the top of the file).
bool onednn_int8_is_exact() {
  static const bool exact = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto has = [isa](dnnl::cpu_isa wanted) {
      const auto bits = static_cast<unsigned>(wanted);
      return (isa & bits) == bits;
    };
    return has(dnnl::cpu_isa::avx512_core_vnni) || has(dnnl::cpu_isa::avx2_vnni);
  }();
  return exact;
}

// Products smaller than this (m * k * n) run the plain loop: oneDNN's call costs more.
constexpr double kMinOnednnWork = 32768;

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// An 8-bit matrix: element (r, c) at data[r * row_stride + c * col_stride].
struct Matrix8 {
  DType dtype = DType::kUInt8;
  const void* data = nullptr;
  int64_t row_stride = 0, col_stride = 1;

  int32_t at(int64_t r, int64_t c) const {
    const int64_t i = r * row_stride + c * col_stride;
    return dtype == DType::kUInt8 ? static_cast<const uint8_t*>(data)[i] : static_cast<const int8_t*>(data)[i];
  }

  // The sum of row r's first k elements.
  int64_t row_sum(int64_t r, int64_t k) const {
    auto sum = [&](const auto* row) {
      int64_t total = 0;
      for (int64_t c = 0; c < k; ++c) total += row[c * col_stride];
      return total;
    };
    const int64_t offset = r * row_stride;
    return dtype == DType::kUInt8 ? sum(static_cast<const uint8_t*>(data) + offset)
                                  : sum(static_cast<const int8_t*>(data) + offset);
  }
};

// Zero points: one for all, or one per row of A / per column of B.
struct ZeroPoint {
  std::vector<int32_t> values{0};
  int32_t at(int64_t i) const { return values.size() == 1 ? values[0] : values[static_cast<size_t>(i)]; }
  bool zero() const {
    return std::all_of(values.begin(), values.end(), [](int32_t v) { return v == 0; });
  }
};

// The zero point input `index` (absent: 0), of a's type, scalar or `count` values (one per
// row or column; `what` names them).
ZeroPoint read_zero_point(KernelContext& ctx, size_t index, DType type, int64_t count, const char* name,
                          const char* what) {
  ZeroPoint zp;
  if (!ctx.has_input(index)) return zp;
  const Tensor& t = ctx.input(index);
  if (t.dtype() != type) {
    ctx.fail(std::string(name) + " is " + std::string(dtype_name(t.dtype())) + ", expected " +
             std::string(dtype_name(type)) + " like its operand");
  }
  if (t.numel() != 1 && t.numel() != count) {
    ctx.fail(std::string(name) + " has shape " + shape_string(t.shape()) + "; expected a scalar or " +
             std::to_string(count) + " values (one per " + what + ")");
  }
  zp.values.resize(static_cast<size_t>(t.numel()));
  const Matrix8 m{type, t.raw_data(), 1, 1};
  for (int64_t i = 0; i < t.numel(); ++i) zp.values[static_cast<size_t>(i)] = m.at(i, 0);
  return zp;
}

// C [m, n] (row stride n) = (A - za)(B - zb) for A [m, k] and B [k, n]. Keeps what it can
// prepare across runs: oneDNN primitives per shape, and for a B that stays the same
// (constant weights), B in oneDNN's layout and its column sums.
class IntegerGemm {
 public:
  // `b_constant`: B is the same on every run.
  explicit IntegerGemm(bool b_constant = false) : b_constant_(b_constant) {}

  void run(KernelContext& ctx, const Matrix8& a, const Matrix8& b, int64_t m, int64_t k, int64_t n,
           const ZeroPoint& za, const ZeroPoint& zb, int32_t* c) {
    if (m == 0 || n == 0) return;
    const double work = static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
    if (k == 0 || !onednn_int8_is_exact() || work < kMinOnednnWork) {
      run_loop(a, b, m, k, n, za, zb, c);
      return;
    }
    run_onednn(ctx, a, b, m, k, n, za, zb, c);
  }

 private:
  // B as signed bytes in a plain [k, n] layout, with its zero point shift (-128 for an
  // unsigned B, 0 otherwise).
  static Tensor signed_b(const Matrix8& b, int64_t k, int64_t n, int32_t& shift) {
    shift = b.dtype == DType::kUInt8 ? -128 : 0;
    Tensor out = Tensor::empty(DType::kInt8, {k, n});
    int8_t* o = out.data<int8_t>();
    for (int64_t r = 0; r < k; ++r)
      for (int64_t col = 0; col < n; ++col) o[r * n + col] = static_cast<int8_t>(b.at(r, col) + shift);
    return out;
  }

  void run_onednn(KernelContext& ctx, const Matrix8& a, const Matrix8& b, int64_t m, int64_t k, int64_t n,
                  const ZeroPoint& za, const ZeroPoint& zb, int32_t* c) {
    int32_t shift = 0;
    Tensor b_signed;
    const int8_t* b_data = nullptr;
    if (b_constant_) {
      if (!constant_b_.defined()) constant_b_ = signed_b(b, k, n, constant_shift_);
      b_data = constant_b_.data<int8_t>();
      shift = constant_shift_;
    } else {
      b_signed = signed_b(b, k, n, shift);
      b_data = b_signed.data<int8_t>();
    }
    const memory::data_type a_type = a.dtype == DType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8;
    const memory::desc a_md({m, k}, a_type, {a.row_stride, a.col_stride});
    const memory::desc b_md = onednn::plain_desc({k, n}, memory::data_type::s8);
    const memory::desc c_md = onednn::plain_desc({m, n}, memory::data_type::s32);
    key_.assign({m, k, n, static_cast<int64_t>(a.dtype), a.row_stride, a.col_stride});
    PreparedMatmul& prepared = cache_.get(key_, [&] {
      return prepare_matmul(memory::data_type::s8, a_md, b_md, c_md, {}, {}, b_constant_ ? b_data : nullptr,
                            packed_b_, ctx.num_threads());
    });
    run_matmul(ctx, prepared, a.data, b_data, c);
    correct(a, b_data, m, k, n, za, zb, shift, c);
  }

  // Adds the zero points' terms to C = A B' (B' = B + shift):
  // (A - za)(B' - zb') = A B' - za colsum(B') - rowsum(A) zb' + k za zb', zb' = zb + shift.
  void correct(const Matrix8& a, const int8_t* b, int64_t m, int64_t k, int64_t n, const ZeroPoint& za,
               const ZeroPoint& zb, int32_t shift, int32_t* c) {
    const bool a_shifted = !za.zero();
    std::vector<int64_t> zb_shifted(static_cast<size_t>(n));
    bool b_shifted = false;
    for (int64_t col = 0; col < n; ++col) {
      zb_shifted[static_cast<size_t>(col)] = static_cast<int64_t>(zb.at(col)) + shift;
      b_shifted = b_shifted || zb_shifted[static_cast<size_t>(col)] != 0;
    }
    if (!a_shifted && !b_shifted) return;
    const std::vector<int64_t>& columns = a_shifted ? column_sums(b, k, n) : no_sums_;
    parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n + k, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t row_sum = b_shifted ? a.row_sum(r, k) : 0;
        const int64_t zar = za.at(r);
        int32_t* cr = c + r * n;
        for (int64_t col = 0; col < n; ++col) {
          const int64_t zbc = zb_shifted[static_cast<size_t>(col)];
          const int64_t column = a_shifted ? columns[static_cast<size_t>(col)] : 0;
          cr[col] = static_cast<int32_t>(cr[col] - zar * column - row_sum * zbc + k * zar * zbc);
        }
      }
    });
  }

  // The column sums of B (kept when B is constant).
  const std::vector<int64_t>& column_sums(const int8_t* b, int64_t k, int64_t n) {
    if (b_constant_ && !column_sums_.empty()) return column_sums_;
    column_sums_.assign(static_cast<size_t>(n), 0);
    for (int64_t r = 0; r < k; ++r)
      for (int64_t col = 0; col < n; ++col) column_sums_[static_cast<size_t>(col)] += b[r * n + col];
    return column_sums_;
  }

  static void run_loop(const Matrix8& a, const Matrix8& b, int64_t m, int64_t k, int64_t n, const ZeroPoint& za,
                       const ZeroPoint& zb, int32_t* c) {
    std::vector<int32_t> a32(static_cast<size_t>(m * k)), b32(static_cast<size_t>(k * n));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t p = 0; p < k; ++p) a32[static_cast<size_t>(r * k + p)] = a.at(r, p) - za.at(r);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t col = 0; col < n; ++col) b32[static_cast<size_t>(p * n + col)] = b.at(p, col) - zb.at(col);
    if (k == 0) {
      std::fill(c, c + m * n, 0);
      return;
    }
    onednn::MatmulBatch batch;
    batch.m = m;
    batch.k = k;
    batch.n = n;
    batch.lda = k;
    batch.ldb = n;
    batch.a_offsets = {0};
    batch.b_offsets = {0};
    onednn::matmul_loop(a32.data(), b32.data(), c, batch);
  }

  bool b_constant_;
  Tensor constant_b_;  // a constant B as signed bytes, made on the first oneDNN run
  int32_t constant_shift_ = 0;
  std::vector<int64_t> column_sums_;
  const std::vector<int64_t> no_sums_;
  std::vector<int64_t> key_;
  onednn::ShapeCache<PreparedMatmul> cache_;
  onednn::PackedConstant packed_b_;
};

// ---- requantization ----

// A scale input as float: float, float16 or bfloat16 (QLinearMatMul-21 and QLinearConv take
// the 16-bit floats).
std::vector<float> read_scale(KernelContext& ctx, size_t index, int64_t count, const char* name, const char* what) {
  const Tensor& t = ctx.input(index);
  if (t.numel() != 1 && t.numel() != count) {
    ctx.fail(std::string(name) + " has shape " + shape_string(t.shape()) + "; expected a scalar or " +
             std::to_string(count) + " values (one per " + what + ")");
  }
  std::vector<float> values(static_cast<size_t>(t.numel()));
  dispatch<float, Float16, BFloat16>(t.dtype(), name, [&]<typename T>() {
    for (int64_t i = 0; i < t.numel(); ++i) values[static_cast<size_t>(i)] = static_cast<float>(t.data<T>()[i]);
  });
  return values;
}

// What QLinearMatMul and QLinearConv do with C: the multiplier per (row, column) and the
// output's zero point and range.
struct Requantize {
  std::vector<float> row_scale, column_scale;  // a_scale (1 or per row), b_scale / y_scale (1 or per column)
  DType scale_type = DType::kFloat32;
  float zero_point = 0, lo = 0, hi = 255;

  // a_scale * b_scale / y_scale, each operation rounded to the scales' type (as numpy
  // computes it in onnx.reference).
  float multiplier(float a, float b, float y) const {
    auto round = [this](float v) {
      if (scale_type == DType::kFloat16) return static_cast<float>(Float16(v));
      if (scale_type == DType::kBFloat16) return static_cast<float>(BFloat16(v));
      return v;
    };
    return round(round(a * b) / y);
  }

  // The multipliers of row r, one per column (or one for all).
  void row_multipliers(int64_t r, const std::vector<float>& b_scale, float y_scale, std::vector<float>& out) const {
    const float a = row_scale.size() == 1 ? row_scale[0] : row_scale[static_cast<size_t>(r)];
    out.resize(b_scale.size());
    for (size_t i = 0; i < b_scale.size(); ++i) out[i] = multiplier(a, b_scale[i], y_scale);
  }

  template <typename T>
  T apply(int32_t c, float multiplier) const {
    const float product = static_cast<float>(c) * multiplier;
    const float v = product != product ? 0.0f : std::clamp(product, -4194304.0f, 4194304.0f);  // |v| < 2^22
    return static_cast<T>(std::clamp(vector_math::round_to_int(v) + zero_point, lo, hi));
  }
};

// The requantization of a QLinear op: scales at inputs a_scale, b_scale, y_scale and the
// output zero point at y_zero_point (inputs 1, 4, 6, 7 of QLinearMatMul and QLinearConv).
Requantize read_requantize(KernelContext& ctx, int64_t rows, int64_t columns, const char* row_what,
                           const char* column_what, std::vector<float>& b_scale, float& y_scale) {
  Requantize q;
  q.row_scale = read_scale(ctx, 1, rows, "the scale of input 0", row_what);
  b_scale = read_scale(ctx, 4, columns, "the scale of the second operand", column_what);
  const std::vector<float> y = read_scale(ctx, 6, 1, "y_scale", "tensor");
  y_scale = y[0];
  q.scale_type = ctx.input(1).dtype();
  const Tensor& zp = ctx.input(7);
  if (!is_8bit(zp.dtype()) || zp.numel() != 1) {
    ctx.fail("y_zero_point is " + std::string(dtype_name(zp.dtype())) + shape_string(zp.shape()) +
             ", expected a scalar int8 or uint8");
  }
  q.zero_point = static_cast<float>(Matrix8{zp.dtype(), zp.raw_data(), 1, 1}.at(0, 0));
  q.lo = zp.dtype() == DType::kInt8 ? -128.0f : 0.0f;
  q.hi = zp.dtype() == DType::kInt8 ? 127.0f : 255.0f;
  return q;
}

void check_8bit(KernelContext& ctx, const Tensor& t, const char* name) {
  if (!is_8bit(t.dtype())) {
    ctx.fail(std::string(name) + " is " + std::string(dtype_name(t.dtype())) + ", expected int8 or uint8");
  }
}

// ---- MatMulInteger and QLinearMatMul ----

class IntegerMatMulKernel final : public OpKernel {
 public:
  // `quantized`: QLinearMatMul (inputs a, a_scale, a_zero_point, b, b_scale, b_zero_point,
  // y_scale, y_zero_point); else MatMulInteger (a, b, a_zero_point, b_zero_point).
  IntegerMatMulKernel(const KernelInfo& info, bool quantized)
      : quantized_(quantized), b_index_(quantized ? 3 : 1), gemm_(is_constant_matrix(info.packable_constant_input(b_index_))) {}

  // One constant matrix (a batch of them is not one B for every product).
  static bool is_constant_matrix(const Tensor* b) { return b != nullptr && b->rank() <= 2; }

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(b_index_);
    check_8bit(ctx, a, "A");
    check_8bit(ctx, b, "B");
    const MatmulProblem p = matmul_problem(ctx, a.shape(), b.shape());
    const int64_t rows = a.rank() >= 2 ? a.dim(-2) : 1;  // of one matrix of A
    const ZeroPoint za = read_zero_point(ctx, 2, a.dtype(), rows, "a_zero_point", "row of A");
    const ZeroPoint zb =
        read_zero_point(ctx, quantized_ ? 5 : 3, b.dtype(), p.batch.n, "b_zero_point", "column of B");
    const onednn::MatmulBatch& batch = p.batch;
    const auto batches = static_cast<int64_t>(batch.a_offsets.size());
    Tensor c = quantized_ ? ctx.allocate_scratch(DType::kInt32, p.out) : ctx.allocate_output(0, DType::kInt32, p.out);
    int32_t* cp = c.data<int32_t>();
    for (int64_t i = 0; i < batches; ++i) {
      const Matrix8 am{a.dtype(), static_cast<const std::byte*>(a.raw_data()) + batch.a_offsets[static_cast<size_t>(i)],
                       batch.lda, 1};
      const Matrix8 bm{b.dtype(), static_cast<const std::byte*>(b.raw_data()) + batch.b_offsets[static_cast<size_t>(i)],
                       batch.ldb, 1};
      // Folded batches make A's rows run over several matrices: zero points per row repeat.
      ZeroPoint za_rows = za;
      if (za.values.size() > 1 && batch.m != rows) {
        za_rows.values.resize(static_cast<size_t>(batch.m));
        for (int64_t r = 0; r < batch.m; ++r) za_rows.values[static_cast<size_t>(r)] = za.at(r % rows);
      }
      gemm_.run(ctx, am, bm, batch.m, batch.k, batch.n, za_rows, zb, cp + i * batch.m * batch.n);
    }
    if (quantized_) requantize(ctx, c, rows, batch.n);
  }

 private:
  void requantize(KernelContext& ctx, const Tensor& c, int64_t rows, int64_t n) {
    std::vector<float> b_scale;
    float y_scale = 1;
    const Requantize q = read_requantize(ctx, rows, n, "row of A", "column of B", b_scale, y_scale);
    Tensor& out = ctx.allocate_output(0, ctx.input(7).dtype(), c.shape());
    const int32_t* cp = c.data<int32_t>();
    const int64_t total_rows = n == 0 ? 0 : c.numel() / n;
    dispatch<int8_t, uint8_t>(out.dtype(), "QLinearMatMul output", [&]<typename T>() {
      T* y = out.data<T>();
      parallel_for(total_rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
        std::vector<float> multipliers;
        for (int64_t r = begin; r < end; ++r) {
          q.row_multipliers(r % rows, b_scale, y_scale, multipliers);
          for (int64_t col = 0; col < n; ++col) {
            const float mult = multipliers.size() == 1 ? multipliers[0] : multipliers[static_cast<size_t>(col)];
            y[r * n + col] = q.apply<T>(cp[r * n + col], mult);
          }
        }
      });
    });
  }

  bool quantized_;
  size_t b_index_;
  IntegerGemm gemm_;
};

const KernelRegistration kMatMulInteger{"", "MatMulInteger", 10, kLatestOpset, [](const KernelInfo& info) {
                                          return std::make_unique<IntegerMatMulKernel>(info, false);
                                        }};
const KernelRegistration kQLinearMatMul{"", "QLinearMatMul", 10, kLatestOpset, [](const KernelInfo& info) {
                                          return std::make_unique<IntegerMatMulKernel>(info, true);
                                        }};

// ---- ConvInteger and QLinearConv ----

// Sizes of one convolution call as matrix products: per image and group, patches
// [pixels, depth] times weights [depth, per_group].
struct ConvSizes {
  int64_t pixels = 1, taps = 1, plane = 1;  // output pixels, kernel taps, input pixels
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

// X[image] from NCHW into NHWC (channels last), so that a patch's channels are contiguous.
template <typename T>
void to_channels_last(const ConvGeometry& g, const ConvSizes& s, const T* x, int64_t image, T* out) {
  const T* xi = x + image * g.c * s.plane;
  parallel_for(s.plane, std::max<int64_t>(1, 65536 / std::max<int64_t>(g.c, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      for (int64_t c = 0; c < g.c; ++c) out[p * g.c + c] = xi[c * s.plane + p];
  });
}

// The patches of one group as rows, tap-major: patches[p, t * channels + c] is channel c of
// the input pixel under tap t at output pixel p, or `pad` (the input's zero point, which
// adds nothing) outside the input. `x` is the image in NHWC.
template <typename T>
void gather_patches(const ConvGeometry& g, const ConvSizes& s, const T* x, int64_t group, T pad, T* patches) {
  const size_t axes = g.spatial();
  const T* xg = x + group * s.channels;
  parallel_for(s.pixels, std::max<int64_t>(1, 65536 / std::max<int64_t>(s.depth, 1)), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> out_index(axes), tap(axes);
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t rest = p, i = static_cast<int64_t>(axes) - 1; i >= 0; --i) {
        out_index[static_cast<size_t>(i)] = rest % g.out[static_cast<size_t>(i)];
        rest /= g.out[static_cast<size_t>(i)];
      }
      T* row = patches + p * s.depth;
      for (int64_t t = 0; t < s.taps; ++t) {
        for (int64_t rest = t, i = static_cast<int64_t>(axes) - 1; i >= 0; --i) {
          tap[static_cast<size_t>(i)] = rest % g.kernel[static_cast<size_t>(i)];
          rest /= g.kernel[static_cast<size_t>(i)];
        }
        int64_t pixel = 0;
        bool inside = true;
        for (size_t i = 0; i < axes; ++i) {
          const int64_t at = out_index[i] * g.strides[i] - g.pad_begin[i] + tap[i] * g.dilations[i];
          inside = inside && at >= 0 && at < g.in[i];
          pixel = pixel * g.in[i] + at;
        }
        T* dst = row + t * s.channels;
        if (inside) {
          std::memcpy(dst, xg + pixel * g.c, static_cast<size_t>(s.channels) * sizeof(T));
        } else {
          std::fill(dst, dst + s.channels, pad);
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
      for (int64_t t = 0; t < s.taps; ++t) out[(t * s.channels + c) * s.per_group + m] = in[(m * s.channels + c) * s.taps + t];
  return b;
}

// Writes product [pixels, per_group] transposed into out [per_group, pixels] (rows of `ld`
// elements), each value through f(value, channel): tiles of 16 x 16 keep both sides in cache.
template <typename T, typename F>
void transpose_out(const int32_t* product, int64_t pixels, int64_t per_group, T* out, const F& f) {
  constexpr int64_t kTile = 16;
  const int64_t channel_tiles = (per_group + kTile - 1) / kTile;
  parallel_for(channel_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t m0 = tile * kTile, m1 = std::min(per_group, m0 + kTile);
      for (int64_t p0 = 0; p0 < pixels; p0 += kTile) {
        const int64_t p1 = std::min(pixels, p0 + kTile);
        for (int64_t m = m0; m < m1; ++m)
          for (int64_t p = p0; p < p1; ++p) out[m * pixels + p] = f(product[p * per_group + m], m);
      }
    }
  });
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
    if (weights_.size() != static_cast<size_t>(g.group) || !w_constant_) {
      weights_.clear();
      for (int64_t group = 0; group < g.group; ++group) weights_.push_back(tap_major_weights(w, s, group));
    }
    if (gemms_.size() != static_cast<size_t>(g.group)) gemms_ = std::vector<IntegerGemm>(g.group, IntegerGemm(w_constant_));
    Tensor channels_last = ctx.allocate_scratch(x.dtype(), {s.plane, g.c});
    Tensor patches = ctx.allocate_scratch(x.dtype(), {s.pixels, s.depth});
    Tensor product = ctx.allocate_scratch(DType::kInt32, {s.pixels, s.per_group});
    const int32_t* pp = product.data<int32_t>();
    for (int64_t image = 0; image < g.n; ++image) {
      dispatch<int8_t, uint8_t>(x.dtype(), "X", [&]<typename T>() {
        to_channels_last(g, s, x.data<T>(), image, channels_last.data<T>());
      });
      for (int64_t group = 0; group < g.group; ++group) {
        dispatch<int8_t, uint8_t>(x.dtype(), "X", [&]<typename T>() {
          gather_patches(g, s, channels_last.data<T>(), group, static_cast<T>(zx.at(0)), patches.data<T>());
        });
        ZeroPoint zw_group;
        zw_group.values.assign(1, zw.at(0));
        if (zw.values.size() > 1) {
          zw_group.values.assign(zw.values.begin() + group * s.per_group, zw.values.begin() + (group + 1) * s.per_group);
        }
        const Tensor& b = weights_[static_cast<size_t>(group)];
        gemms_[static_cast<size_t>(group)].run(ctx, Matrix8{x.dtype(), patches.raw_data(), s.depth, 1},
                                               Matrix8{b.dtype(), b.raw_data(), s.per_group, 1}, s.pixels, s.depth,
                                               s.per_group, zx, zw_group, product.data<int32_t>());
        const int64_t first = image * g.m + group * s.per_group;  // the first output plane
        if (!quantized_) {
          transpose_out(pp, s.pixels, s.per_group, out.data<int32_t>() + first * s.pixels,
                        [](int32_t v, int64_t) { return v; });
          continue;
        }
        const int32_t* bias_values = bias ? bias->data<int32_t>() + group * s.per_group : nullptr;
        const float* mult = multipliers.data();
        const bool per_channel = multipliers.size() > 1;
        dispatch<int8_t, uint8_t>(out.dtype(), "QLinearConv output", [&]<typename T>() {
          transpose_out(pp, s.pixels, s.per_group, out.data<T>() + first * s.pixels, [&](int32_t v, int64_t m) {
            const float multiplier = per_channel ? mult[group * s.per_group + m] : mult[0];
            return q.apply<T>(v + (bias_values ? bias_values[m] : 0), multiplier);
          });
        });
      }
    }
  }

 private:
  bool quantized_;
  size_t w_index_;
  ConvAttributes attrs_;
  bool w_constant_;
  std::vector<Tensor> weights_;     // per group: W as B, tap-major (kept when W is constant)
  std::vector<IntegerGemm> gemms_;  // per group: each keeps its weights prepared
};

const KernelRegistration kConvInteger{"", "ConvInteger", 10, kLatestOpset, [](const KernelInfo& info) {
                                        return std::make_unique<IntegerConvKernel>(info, false);
                                      }};
const KernelRegistration kQLinearConv{"", "QLinearConv", 10, kLatestOpset, [](const KernelInfo& info) {
                                        return std::make_unique<IntegerConvKernel>(info, true);
                                      }};

}  // namespace
}  // namespace onnxtrain
