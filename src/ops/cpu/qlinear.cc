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

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
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
      gemm_.run(ctx, am, bm, batch.m, batch.k, batch.n, za_rows, zb, cp + i * batch.m * batch.n,
                quantized_ ? &column_adds[static_cast<size_t>(i)] : nullptr);
    }
    if (quantized_) requantize(ctx, c, rows, batch.m, batch.n, column_adds);
  }

 private:
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
      parallel_for(total_rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
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
