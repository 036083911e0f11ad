// What the integer products of quantized models share (qlinear.cc: MatMulInteger and
// QLinearMatMul; qlinear_conv.cc: ConvInteger and QLinearConv): 8-bit operands and their
// zero points, the exact int32 product (IntegerGemm) and the requantization of QLinear ops.
// See qlinear.cc for the arithmetic.
#pragma once

#include <onnxtrain/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/work_share.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel.h"

namespace onnxtrain::qlinear {

using onednn::memory;

// True when oneDNN's int8 products are exact on this CPU (see the top of the file).
inline bool onednn_int8_is_exact() {
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
inline constexpr double kMinOnednnWork = 32768;

inline bool is_8bit(DType t) {
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
inline ZeroPoint read_zero_point(KernelContext& ctx, size_t index, DType type, int64_t count, const char* name,
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

// ---- A few rows times a constant B on AVX-512 VNNI (qlinear.cc) ----
// A product of one to four rows (a linear layer at batch 1) costs oneDNN's matmul more in its
// call than in its kernel: 1 x 768 x 768 took 12 us against onnxruntime's 9.5.

// Rows of A that vnni_rows takes at most.
inline constexpr int64_t kVnniRows = 4;

// True on CPUs (and OSes) with AVX-512 VNNI, which vnni_rows needs.
inline bool has_avx512_vnni() {
  static const bool has = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bits = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_vnni);
    return (isa & bits) == bits;
  }();
  return has;
}

// B (signed bytes, [k, n] row-major) in vnni_rows' layout: [ceil(n / 16)][ceil(k / 4)][16][4]
// (16 columns by 4 rows, a column's 4 bytes together), zeros past k and n.
Tensor pack_for_vnni(const int8_t* b, int64_t k, int64_t n);

// c [m, n] (row stride ldc) = A B exactly in int32, A [m, k] unsigned bytes whose rows
// are groups of four bytes (an int32 each, ceil(k / 4) a row, zeros past k), B packed by
// pack_for_vnni, 1 <= m <= kVnniRows; on AVX-512 VNNI only.
void vnni_rows(const int32_t* a_groups, int64_t m, int64_t k, const int8_t* packed, int64_t n, int32_t* c, int64_t ldc);

// C [m, n] (row stride n) = (A - za)(B - zb) for A [m, k] and B [k, n]. Keeps what it can
// prepare across runs: oneDNN primitives per shape, and for a B that stays the same
// (constant weights), B in oneDNN's layout and its column sums.
class IntegerGemm {
 public:
  // `b_constant`: B is the same on every run.
  explicit IntegerGemm(bool b_constant = false) : b_constant_(b_constant) {}

  // With `column_add` (QLinear ops, which add it while requantizing): when A has one zero
  // point for all rows, its term -za colsum(B) is the same for every row; it is left out of
  // C and handed back there (n values; empty when C is complete), so that oneDNN runs
  // without a zero point, which cost 8% of a 128 x 768 x 3072 product.
  void run(KernelContext& ctx, const Matrix8& a, const Matrix8& b, int64_t m, int64_t k, int64_t n, const ZeroPoint& za,
           const ZeroPoint& zb, int32_t* c, std::vector<int32_t>* column_add = nullptr) {
    if (column_add) column_add->clear();
    if (m == 0 || n == 0) return;
    if (b_constant_ && m <= kVnniRows && k > 0 && has_avx512_vnni()) {
      run_vnni(a, b, m, k, n, za, zb, c, column_add);
      return;
    }
    const double work = static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
    if (k == 0 || !onednn_int8_is_exact() || work < kMinOnednnWork) {
      run_loop(a, b, m, k, n, za, zb, c);
      return;
    }
    run_onednn(ctx, a, b, m, k, n, za, zb, c, column_add);
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

  // vnni_rows computes Au B' with Au = A as unsigned bytes (a signed A shifted by 128, its
  // zero point with it): then C = Au B' - (za + a_shift) colsum(B') (handed back in
  // column_add where it is the same for every row), and B's zero points as corrections.
  void run_vnni(const Matrix8& a, const Matrix8& b, int64_t m, int64_t k, int64_t n, const ZeroPoint& za,
                const ZeroPoint& zb, int32_t* c, std::vector<int32_t>* column_add) {
    if (!constant_b_.defined()) constant_b_ = signed_b(b, k, n, constant_shift_);
    if (!vnni_b_.defined()) vnni_b_ = pack_for_vnni(constant_b_.data<int8_t>(), k, n);
    const int8_t* b_data = constant_b_.data<int8_t>();
    const int32_t a_shift = a.dtype == DType::kInt8 ? 128 : 0;
    // A as unsigned bytes, each row zero-padded to whole groups of four.
    const int64_t quads = (k + 3) / 4;
    a_groups_.assign(static_cast<size_t>(m * quads), 0);
    for (int64_t r = 0; r < m; ++r) {
      auto* row = reinterpret_cast<uint8_t*>(a_groups_.data() + r * quads);
      if (a_shift == 0 && a.col_stride == 1) {
        std::memcpy(row, static_cast<const uint8_t*>(a.data) + r * a.row_stride, static_cast<size_t>(k));
        continue;
      }
      for (int64_t p = 0; p < k; ++p) row[p] = static_cast<uint8_t>(a.at(r, p) + a_shift);
    }
    vnni_rows(a_groups_.data(), m, k, vnni_b_.data<int8_t>(), n, c, n);
    const std::vector<int32_t>& sums = column_sums(b_data, k, n);
    const auto times_sums = [&](int32_t factor, int64_t j) {  // wrapping
      return static_cast<uint32_t>(factor) * static_cast<uint32_t>(sums[static_cast<size_t>(j)]);
    };
    if (column_add && za.values.size() == 1) {
      column_add->resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j)
        (*column_add)[static_cast<size_t>(j)] = static_cast<int32_t>(0u - times_sums(za.values[0] + a_shift, j));
    } else {
      for (int64_t r = 0; r < m; ++r) {
        auto* row = reinterpret_cast<uint32_t*>(c + r * n);
        for (int64_t j = 0; j < n; ++j) row[j] -= times_sums(za.at(r) + a_shift, j);
      }
    }
    correct(a, b_data, m, k, n, za, zb, constant_shift_, 0, true, 1, c);
  }

  // oneDNN computes (A - za) B' with B' = B + shift, za one value for all of A (given to
  // it as the source's zero point, so it folds it into the product) unless `column_add`
  // takes that term; per-row zero points of A and B's zero points are corrections after it.
  void run_onednn(KernelContext& ctx, const Matrix8& a, const Matrix8& b, int64_t m, int64_t k, int64_t n,
                  const ZeroPoint& za, const ZeroPoint& zb, int32_t* c, std::vector<int32_t>* column_add) {
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
    const bool a_per_row = za.values.size() > 1;
    const bool fold = column_add && !a_per_row && za.values[0] != 0;
    const int32_t a_zero_point = a_per_row || fold ? 0 : za.values[0];
    const memory::data_type a_type = a.dtype == DType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8;
    const memory::desc a_md({m, k}, a_type, {a.row_stride, a.col_stride});
    const memory::desc b_md = onednn::plain_desc({k, n}, memory::data_type::s8);
    const memory::desc c_md = onednn::plain_desc({m, n}, memory::data_type::s32);
    const int threads = ctx.num_threads();
    key_.assign({m, k, n, static_cast<int64_t>(a.dtype), a.row_stride, a.col_stride, a_zero_point, threads});
    if (b_constant_ && threads > 1 && m >= 2 * kMinBlockRows) {
      RowBlocks& blocks = blocks_.get(key_, [&] { return plan_row_blocks(a_type, a, m, k, n, a_zero_point, threads); });
      run_row_blocks(ctx, blocks, a, m, n, b_md, b_data, c);
    } else {
      PreparedMatmul& prepared = cache_.get(key_, [&] {
        dnnl::primitive_attr attr;
        if (a_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {a_zero_point});
        return prepare_matmul(memory::data_type::s8, a_md, b_md, c_md, {}, attr, b_constant_ ? b_data : nullptr,
                              packed_b_, threads);
      });
      run_matmul(ctx, prepared, a.data, b_data, c);
    }
    if (fold) {  // -za colsum(B'), wrapping
      const std::vector<int32_t>& sums = column_sums(b_data, k, n);
      column_add->resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const uint32_t term = static_cast<uint32_t>(za.values[0]) * static_cast<uint32_t>(sums[static_cast<size_t>(j)]);
        (*column_add)[static_cast<size_t>(j)] = static_cast<int32_t>(0u - term);
      }
    }
    correct(a, b_data, m, k, n, za, zb, shift, a_per_row ? 0 : za.values[0], false, threads, c);
  }

  // A constant B's product on several threads, in blocks of rows, each a one-thread oneDNN
  // matmul claimed by the threads as they come (work_share.h). oneDNN's own threads split
  // the rows up front and wait for each other: on a busy 2-core machine (load 6) the
  // 128 x 768 x 3072 product on two threads took 15-40 ms against onnxruntime's 1.6.
  static constexpr int64_t kMinBlockRows = 16;

  struct RowBlockShape {
    dnnl::matmul primitive;
    memory::desc weights;                               // B's layout for it
    std::vector<std::unordered_map<int, memory>> args;  // one set per thread
  };

  struct RowBlocks {
    int64_t rows = 0;                   // of every block but the last
    std::vector<RowBlockShape> shapes;  // for blocks of `rows` rows, then for a shorter last one
    size_t scratchpad_bytes = 0;
  };

  // About four blocks per thread (a helper that comes late still finds work), of at least
  // kMinBlockRows rows.
  static RowBlocks plan_row_blocks(memory::data_type a_type, const Matrix8& a, int64_t m, int64_t k, int64_t n,
                                   int32_t a_zero_point, int threads) {
    RowBlocks plan;
    plan.rows = std::max(kMinBlockRows, (m + 4 * threads - 1) / (4 * threads));
    onednn::ThreadScope one(1);
    dnnl::primitive_attr attr;
    if (a_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {a_zero_point});
    for (const int64_t rows : {plan.rows, m % plan.rows}) {
      if (rows == 0) continue;
      const memory::desc a_md({rows, k}, a_type, {a.row_stride, a.col_stride});
      const memory::desc c_md = onednn::plain_desc({rows, n}, memory::data_type::s32);
      const dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(a_md, onednn::any_desc({k, n}, memory::data_type::s8), c_md), onednn::primitive_attr(attr),
          onednn::engine());
      RowBlockShape shape{dnnl::matmul(pd), pd.weights_desc(), {}};
      const memory::desc scratchpad = pd.scratchpad_desc();
      plan.scratchpad_bytes = std::max(plan.scratchpad_bytes, scratchpad.get_size());
      for (int t = 0; t < threads; ++t) {
        std::unordered_map<int, memory> args;
        for (const auto& [arg, desc] :
             {std::pair{DNNL_ARG_SRC, a_md}, std::pair{DNNL_ARG_WEIGHTS, shape.weights}, std::pair{DNNL_ARG_DST, c_md}})
          args.emplace(arg, memory(desc, onednn::engine(), DNNL_MEMORY_NONE));
        if (scratchpad.get_size() > 0)
          args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad, onednn::engine(), DNNL_MEMORY_NONE));
        shape.args.push_back(std::move(args));
      }
      plan.shapes.push_back(std::move(shape));
    }
    return plan;
  }

  void run_row_blocks(KernelContext& ctx, RowBlocks& plan, const Matrix8& a, int64_t m, int64_t n,
                      const memory::desc& b_md, const int8_t* b, int32_t* c) {
    std::vector<const void*> weights;
    for (const RowBlockShape& shape : plan.shapes)
      weights.push_back(packed_b_.in_layout(b_md, b, shape.weights).raw_data());
    const auto threads = static_cast<int>(plan.shapes[0].args.size());
    const size_t slot_bytes = (plan.scratchpad_bytes + 63) / 64 * 64;
    Tensor scratchpads = onednn::scratch_bytes(ctx, std::max<size_t>(1, slot_bytes * static_cast<size_t>(threads)));
    const auto* a_bytes = static_cast<const uint8_t*>(a.data);  // 8-bit elements
    share_work((m + plan.rows - 1) / plan.rows, 1, threads, [&](int64_t block, int slot) {
      const int64_t first = block * plan.rows;
      const size_t which = m - first < plan.rows ? 1 : 0;
      std::unordered_map<int, memory>& args = plan.shapes[which].args[static_cast<size_t>(slot)];
      args.at(DNNL_ARG_SRC).set_data_handle(const_cast<uint8_t*>(a_bytes + first * a.row_stride));
      args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(weights[which]));
      args.at(DNNL_ARG_DST).set_data_handle(c + first * n);
      if (slot_bytes > 0) {
        args.at(DNNL_ARG_SCRATCHPAD)
            .set_data_handle(static_cast<std::byte*>(scratchpads.raw_data()) + static_cast<size_t>(slot) * slot_bytes);
      }
      onednn::execute(plan.shapes[which].primitive, args);
    });
  }

  // Turns C = (A - za0) B' (za0: the zero point of A already accounted for, by oneDNN or by
  // the caller's column_add; 0 for per-row ones; all of them with `a_done`) into
  // (A - za)(B - zb) = (A - za) B' - (A - za) 1 zb' with zb' = zb + shift:
  //   C[r, j] += -(za[r] - za0) colsum(B')[j] - (rowsum(A)[r] - k za[r]) zb'[j].
  void correct(const Matrix8& a, const int8_t* b, int64_t m, int64_t k, int64_t n, const ZeroPoint& za,
               const ZeroPoint& zb, int32_t shift, int32_t za0, bool a_done, int threads, int32_t* c) {
    const bool a_per_row = za.values.size() > 1;
    const bool b_shifted = std::any_of(zb.values.begin(), zb.values.end(), [&](int32_t v) { return v + shift != 0; });
    if ((a_done || !a_per_row) && !b_shifted) return;
    std::vector<int32_t> zb_shifted(static_cast<size_t>(n));
    for (int64_t col = 0; col < n; ++col) zb_shifted[static_cast<size_t>(col)] = zb.at(col) + shift;
    const std::vector<int32_t>& columns = a_per_row && !a_done ? column_sums(b, k, n) : no_sums_;
    const int32_t* zbs = zb_shifted.data();
    const int32_t* sums = columns.data();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(n + k, 1));
    share_ranges(m, grain, threads, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int32_t zar = za.at(r);
        const auto row = static_cast<int32_t>(b_shifted ? a.row_sum(r, k) - k * zar : 0);
        const int32_t a_shift = a_done ? 0 : zar - za0;
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
  Tensor constant_b_;              // a constant B as signed bytes, made on the first oneDNN or VNNI run
  Tensor vnni_b_;                  // and packed for vnni_rows
  std::vector<int32_t> a_groups_;  // vnni_rows' A
  int32_t constant_shift_ = 0;
  std::vector<int32_t> column_sums_;
  const std::vector<int32_t> no_sums_;
  std::vector<int64_t> key_;
  onednn::ShapeCache<PreparedMatmul> cache_;
  onednn::ShapeCache<RowBlocks> blocks_;
  onednn::PackedConstant packed_b_;
};

// ---- requantization ----

// A scale input as float: float, float16 or bfloat16 (QLinearMatMul-21 and QLinearConv take
// the 16-bit floats).
inline std::vector<float> read_scale(KernelContext& ctx, size_t index, int64_t count, const char* name,
                                     const char* what) {
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

// saturate(round(acc * multiplier) + zero_point) as T, rounding to nearest even; a NaN
// product counts as 0. Rounding commutes with clamping to whole numbers, so the product is
// clamped to the output's range less the zero point first, and then rounded.
template <typename T>
ONNXTRAIN_VECTOR_INLINE T requantized(int32_t acc, float multiplier, float zero_point, float lo, float hi) {
  const float product = static_cast<float>(acc) * multiplier;
  const float v = product != product ? 0.0f : std::min(std::max(product, lo - zero_point), hi - zero_point);
  return static_cast<T>(static_cast<int32_t>(vector_math::round_to_int(v) + zero_point));
}

// requantized() on 16 lanes, in int32 (each lane within T's range), written with vector
// selects (the scalar form's compile to mask juggling on 4-lane registers). Adding
// 1.5 * 2^23 to v (|v| < 2^22) leaves round(v) in the low bits of the sum's mantissa: an
// integer subtraction gets it, the zero point added. (Through references: 64-byte vectors
// passed by value warn of an ABI change on targets without AVX-512.)
ONNXTRAIN_VECTOR_INLINE void requantize_lanes(const vector_math::Vector<int32_t, 16>& acc,
                                              const vector_math::Vector<float, 16>& multiplier, float zero_point,
                                              float lo, float hi, vector_math::Vector<int32_t, 16>& out) {
  using Floats = vector_math::Vector<float, 16>;
  const Floats zero{}, low = zero + (lo - zero_point), high = zero + (hi - zero_point);
  const Floats product = __builtin_convertvector(acc, Floats) * multiplier;
  Floats v = product == product ? product : zero;
  v = v < low ? low : v;
  v = high < v ? high : v;
  const Floats shifted = v + 12582912.0f;
  std::memcpy(&out, &shifted, sizeof out);
  out -= 0x4B400000 - static_cast<int32_t>(zero_point);
}

// The low byte of each of 16 int32 lanes, as 16 bytes (a byte shuffle: GCC turns the
// narrowing conversion into element-wise moves where shuffles follow it).
ONNXTRAIN_VECTOR_INLINE void low_bytes(const vector_math::Vector<int32_t, 16>& lanes,
                                       vector_math::Vector<uint8_t, 16>& out) {
  vector_math::Vector<uint8_t, 64> bytes;
  std::memcpy(&bytes, &lanes, sizeof bytes);
  out = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
}

// y[j] = saturate(round((c[j] + add[j]) * multiplier) + zero_point) for j < n, the
// multiplier per column or one for all: 16 columns at a time (requantize_lanes), the rest
// one by one.
template <typename T, bool kPerColumn>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void requantize_row(const int32_t* __restrict c, int64_t n,
                                                              const int32_t* __restrict add,
                                                              const float* __restrict multiplier, float zero_point,
                                                              float lo, float hi, T* __restrict y) {
  using Ints = vector_math::Vector<int32_t, 16>;
  using Floats = vector_math::Vector<float, 16>;
  const Floats one_multiplier = Floats{} + multiplier[0];
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    Ints acc, more{}, lanes;
    Floats scale = one_multiplier;
    std::memcpy(&acc, c + j, sizeof acc);
    if (add) std::memcpy(&more, add + j, sizeof more);
    if (kPerColumn) std::memcpy(&scale, multiplier + j, sizeof scale);
    requantize_lanes(acc + more, scale, zero_point, lo, hi, lanes);
    vector_math::Vector<uint8_t, 16> bytes;
    low_bytes(lanes, bytes);
    std::memcpy(y + j, &bytes, sizeof bytes);
  }
  for (; j < n; ++j) {
    const int32_t acc = add ? c[j] + add[j] : c[j];
    y[j] = requantized<T>(acc, kPerColumn ? multiplier[j] : multiplier[0], zero_point, lo, hi);
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
inline Requantize read_requantize(KernelContext& ctx, int64_t rows, int64_t columns, const char* row_what,
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

inline void check_8bit(KernelContext& ctx, const Tensor& t, const char* name) {
  if (!is_8bit(t.dtype())) {
    ctx.fail(std::string(name) + " is " + std::string(dtype_name(t.dtype())) + ", expected int8 or uint8");
  }
}

}  // namespace onnxtrain::qlinear
