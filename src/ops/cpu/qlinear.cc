// The integer products of quantized models: MatMulInteger and QLinearMatMul (numpy's
// batched matrix product) here, ConvInteger and QLinearConv (matrix products over image
// patches) in qlinear_conv.cc.
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
#include "ops/cpu/qlinear.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/work_share.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {

namespace qlinear {

Tensor pack_for_vnni(const int8_t* b, int64_t k, int64_t n) {
  const int64_t quads = (k + 3) / 4, blocks = (n + 15) / 16;
  Tensor packed = Tensor::zeros(DType::kInt8, {blocks * quads * 64});
  int8_t* out = packed.data<int8_t>();
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) out[((j / 16) * quads + p / 4) * 64 + (j % 16) * 4 + p % 4] = b[p * n + j];
  return packed;
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

// kRows rows times kBlocks blocks of 16 columns (from `first_block`): kRows x kBlocks sums
// of 16 lanes in registers over all of k, one vpdpbusd (four u8 x s8 products added into
// each int32 lane) per block and quad of k; `groups` holds each row's quads as int32.
template <int kRows, int kBlocks>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void vnni_tile(const int32_t* groups, int64_t quads,
                                                                             const int8_t* packed, int64_t first_block,
                                                                             int64_t n, int32_t* c, int64_t ldc) {
  __m512i sums[kRows][kBlocks];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kBlocks; ++t) sums[r][t] = _mm512_setzero_si512();
  const int8_t* block = packed + first_block * quads * 64;
  for (int64_t q = 0; q < quads; ++q) {
    __m512i w[kBlocks];
    for (int t = 0; t < kBlocks; ++t) w[t] = _mm512_loadu_si512(block + (t * quads + q) * 64);
    for (int r = 0; r < kRows; ++r) {
      const __m512i a = _mm512_set1_epi32(groups[r * quads + q]);
      for (int t = 0; t < kBlocks; ++t) sums[r][t] = _mm512_dpbusd_epi32(sums[r][t], a, w[t]);
    }
  }
  for (int t = 0; t < kBlocks; ++t) {
    const int64_t j = (first_block + t) * 16;
    const auto mask = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1);
    for (int r = 0; r < kRows; ++r) _mm512_mask_storeu_epi32(c + r * ldc + j, mask, sums[r][t]);
  }
}

template <int kRows>
void vnni_row_tiles(const int32_t* groups, int64_t quads, const int8_t* packed, int64_t n, int32_t* c, int64_t ldc) {
  const int64_t blocks = (n + 15) / 16;
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) vnni_tile<kRows, 4>(groups, quads, packed, b, n, c, ldc);
  for (; b < blocks; ++b) vnni_tile<kRows, 1>(groups, quads, packed, b, n, c, ldc);
}

}  // namespace

void vnni_rows(const int32_t* a_groups, int64_t m, int64_t k, const int8_t* packed, int64_t n, int32_t* c,
               int64_t ldc) {
  const int64_t quads = (k + 3) / 4;
  switch (m) {
    case 1:
      return vnni_row_tiles<1>(a_groups, quads, packed, n, c, ldc);
    case 2:
      return vnni_row_tiles<2>(a_groups, quads, packed, n, c, ldc);
    case 3:
      return vnni_row_tiles<3>(a_groups, quads, packed, n, c, ldc);
    default:
      return vnni_row_tiles<4>(a_groups, quads, packed, n, c, ldc);
  }
}
#else
void vnni_rows(const int32_t*, int64_t, int64_t, const int8_t*, int64_t, int32_t*, int64_t) {
  throw Error("vnni_rows needs AVX-512 VNNI", ErrorKind::kNotImplemented);
}
#endif

}  // namespace qlinear

namespace {

using qlinear::check_8bit;
using qlinear::IntegerGemm;
using qlinear::Matrix8;
using qlinear::read_requantize;
using qlinear::read_zero_point;
using qlinear::Requantize;
using qlinear::ZeroPoint;

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
    std::vector<std::vector<int32_t>> column_adds(static_cast<size_t>(batches));  // QLinearMatMul's, per product
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
      std::vector<int32_t>& add = column_adds[static_cast<size_t>(i)];
      int32_t* ci = cp + i * batch.m * batch.n;
      gemm_.run(ctx, am, bm, batch.m, batch.k, batch.n, za_rows, zb, ci, &add);
      if (!quantized_ && !add.empty()) add_to_rows(ctx, ci, batch.m, batch.n, add.data());
    }
    if (quantized_) requantize(ctx, c, rows, batch.m, batch.n, column_adds);
  }

 private:
  // c[r, j] += add[j] for r < m, wrapping: A's zero point term, taken out of oneDNN's call
  // (whose zero point cost 0.13 ms of a 128 x 768 x 3072 product; this pass 0.03 ms).
  static void add_to_rows(KernelContext& ctx, int32_t* c, int64_t m, int64_t n, const int32_t* add) {
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(n, 1));
    share_ranges(m, grain, ctx.num_threads(), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) add_row(c + r * n, n, add);
    });
  }

  static ONNXTRAIN_MULTIVERSIONED void add_row(int32_t* __restrict c, int64_t n, const int32_t* __restrict add) {
    auto* out = reinterpret_cast<uint32_t*>(c);
    for (int64_t j = 0; j < n; ++j) out[j] += static_cast<uint32_t>(add[j]);
  }

  // Output 0 from C: row r of C belongs to product r / product_rows, whose column_adds (if
  // any) it adds.
  void requantize(KernelContext& ctx, const Tensor& c, int64_t rows, int64_t product_rows, int64_t n,
                  const std::vector<std::vector<int32_t>>& column_adds) {
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
      const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
      share_ranges(total_rows, grain, ctx.num_threads(), [&](int64_t begin, int64_t end) {
        std::vector<float> own;
        for (int64_t r = begin; r < end; ++r) {
          if (per_row) q.row_multipliers(r % rows, b_scale, y_scale, own);
          const std::vector<int32_t>& add = column_adds[static_cast<size_t>(r / std::max<int64_t>(product_rows, 1))];
          q.row(cp + r * n, n, add.empty() ? nullptr : add.data(), per_row ? own : shared, y + r * n);
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

}  // namespace
}  // namespace onnxtrain
