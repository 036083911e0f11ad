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
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/conv.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/multiversion.h"
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

bool is_8bit(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8;
}

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

  void run(KernelContext& ctx, const Matrix8& a, const Matrix8& b, int64_t m, int64_t k, int64_t n, const ZeroPoint& za,
           const ZeroPoint& zb, int32_t* c) {
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

  // oneDNN computes (A - za) B' with B' = B + shift, za one value for all of A (given to
  // it as the source's zero point, so it folds it into the product); per-row zero points
  // of A and B's zero points are corrections after it.
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
    const int32_t a_zero_point = za.values.size() == 1 ? za.values[0] : 0;
    const memory::data_type a_type = a.dtype == DType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8;
    const memory::desc a_md({m, k}, a_type, {a.row_stride, a.col_stride});
    const memory::desc b_md = onednn::plain_desc({k, n}, memory::data_type::s8);
    const memory::desc c_md = onednn::plain_desc({m, n}, memory::data_type::s32);
    key_.assign({m, k, n, static_cast<int64_t>(a.dtype), a.row_stride, a.col_stride, a_zero_point});
    PreparedMatmul& prepared = cache_.get(key_, [&] {
      dnnl::primitive_attr attr;
      if (a_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {a_zero_point});
      return prepare_matmul(memory::data_type::s8, a_md, b_md, c_md, {}, attr, b_constant_ ? b_data : nullptr,
                            packed_b_, ctx.num_threads());
    });
    run_matmul(ctx, prepared, a.data, b_data, c);
    correct(a, b_data, m, k, n, za, zb, shift, c);
  }

  // Turns C = (A - za0) B' (za0: the zero point oneDNN applied, 0 for per-row ones) into
  // (A - za)(B - zb) = (A - za) B' - (A - za) 1 zb' with zb' = zb + shift:
  //   C[r, j] += -(za[r] - za0) colsum(B')[j] - (rowsum(A)[r] - k za[r]) zb'[j].
  void correct(const Matrix8& a, const int8_t* b, int64_t m, int64_t k, int64_t n, const ZeroPoint& za,
               const ZeroPoint& zb, int32_t shift, int32_t* c) {
    const bool a_per_row = za.values.size() > 1;
    std::vector<int32_t> zb_shifted(static_cast<size_t>(n));
    bool b_shifted = false;
    for (int64_t col = 0; col < n; ++col) {
      zb_shifted[static_cast<size_t>(col)] = zb.at(col) + shift;
      b_shifted = b_shifted || zb_shifted[static_cast<size_t>(col)] != 0;
    }
    if (!a_per_row && !b_shifted) return;
    const std::vector<int32_t>& columns = a_per_row ? column_sums(b, k, n) : no_sums_;
    const int32_t* zbs = zb_shifted.data();
    const int32_t* sums = columns.data();
    parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n + k, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int32_t zar = za.at(r);
        const auto row = static_cast<int32_t>(b_shifted ? a.row_sum(r, k) - k * zar : 0);
        const int32_t a_shift = a_per_row ? zar : 0;
        add_corrections(c + r * n, n, a_shift, sums, row, b_shifted ? zbs : nullptr);
      }
    });
  }

  // c[j] -= a_shift * sums[j] + row * zbs[j] (either term left out when its pointer is null
  // or its factor 0); wrapping int32 arithmetic.
  static void add_corrections(int32_t* __restrict c, int64_t n, int32_t a_shift, const int32_t* __restrict sums,
                              int32_t row, const int32_t* __restrict zbs) {
    const auto a = static_cast<uint32_t>(a_shift), rw = static_cast<uint32_t>(row);
    auto* out = reinterpret_cast<uint32_t*>(c);
    if (a_shift != 0)
      for (int64_t j = 0; j < n; ++j) out[j] -= a * static_cast<uint32_t>(sums[j]);
    if (zbs != nullptr && row != 0)
      for (int64_t j = 0; j < n; ++j) out[j] -= rw * static_cast<uint32_t>(zbs[j]);
  }

  // The column sums of B (kept when B is constant).
  const std::vector<int32_t>& column_sums(const int8_t* b, int64_t k, int64_t n) {
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
  std::vector<int32_t> column_sums_;
  const std::vector<int32_t> no_sums_;
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

// y[j] = saturate(round((c[j] + add[j]) * multiplier) + zero_point) for j < n, the
// multiplier per column or one for all, rounding to nearest even; a loop the compiler
// vectorizes (locals only, restrict pointers: byte stores would otherwise alias them all).
template <typename T, bool kPerColumn>
ONNXTRAIN_MULTIVERSIONED void requantize_row(const int32_t* __restrict c, int64_t n, const int32_t* __restrict add,
                                             const float* __restrict multiplier, float zero_point, float lo, float hi,
                                             T* __restrict y) {
  const float one_multiplier = multiplier[0];
  for (int64_t j = 0; j < n; ++j) {
    const int32_t acc = add ? c[j] + add[j] : c[j];
    const float product = static_cast<float>(acc) * (kPerColumn ? multiplier[j] : one_multiplier);
    const float v = product != product ? 0.0f : std::min(std::max(product, -4194304.0f), 4194304.0f);  // < 2^22
    y[j] = static_cast<T>(static_cast<int32_t>(std::min(std::max(vector_math::round_to_int(v) + zero_point, lo), hi)));
  }
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

  // y[j] = saturate(round((c[j] + add[j]) * multiplier[j]) + zero_point) over a row, add
  // and multiplier per column (`add` may be null).
  template <typename T>
  void row(const int32_t* c, int64_t n, const int32_t* add, const std::vector<float>& multiplier, T* y) const {
    if (multiplier.size() == 1) {
      requantize_row<T, false>(c, n, add, multiplier.data(), zero_point, lo, hi, y);
    } else {
      requantize_row<T, true>(c, n, add, multiplier.data(), zero_point, lo, hi, y);
    }
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
      : quantized_(quantized),
        b_index_(quantized ? 3 : 1),
        gemm_(is_constant_matrix(info.packable_constant_input(b_index_))) {}

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
    const ZeroPoint zb = read_zero_point(ctx, quantized_ ? 5 : 3, b.dtype(), p.batch.n, "b_zero_point", "column of B");
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
    const bool per_row = q.row_scale.size() > 1;
    std::vector<float> shared;  // the multipliers of every row when A's scale is one value
    if (!per_row) q.row_multipliers(0, b_scale, y_scale, shared);
    dispatch<int8_t, uint8_t>(out.dtype(), "QLinearMatMul output", [&]<typename T>() {
      T* y = out.data<T>();
      parallel_for(total_rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
        std::vector<float> own;
        for (int64_t r = begin; r < end; ++r) {
          if (per_row) q.row_multipliers(r % rows, b_scale, y_scale, own);
          q.row(cp + r * n, n, nullptr, per_row ? own : shared, y + r * n);
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
