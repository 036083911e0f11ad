// Products of a constant float32 matrix with a few columns: the deep convolutions of a CNN
// at batch 1 (a few output pixels, megabytes of weights) and Gemm at small batch. Each
// weight is used once per column, so the time goes into reading the weights: they are
// packed once into blocks of 16 outputs laid out along the depth, and each block streams
// through once while the sums of up to 8 columns (16 with AVX-512) stay in registers.
// oneDNN's kernels, built for larger products, stream them slower and cost about a
// microsecond per call besides (measured figures: conv.cc, matmul.cc).
#pragma once

#include <onnxtrain/tensor.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/parallel.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/vector_math.h"

namespace onnxtrain {

namespace weight_stream {

inline constexpr int64_t kMaxColumns = 8;    // columns per pass on every x86 level, their sums in registers
inline constexpr int64_t kWideColumns = 16;  // columns per pass with AVX-512 on large weights
inline constexpr int64_t kBlock = 16;        // outputs per block: one 64-byte vector
using Lanes = vector_math::Vector<float, kBlock>;
using Product = void (*)(const float*, const float*, int64_t, int64_t, int64_t, Lanes*);

// Columns one pass over a block takes when the weights are `weight_bytes` in all. With
// AVX-512 (the x86-64-v4 versions), 16 sums and the weights fill 17 of the 32 registers, and
// weights larger than the cache share (from memory) go through once for 16 columns (Gemm's
// 16 rows), not twice: 16 x 4096 x 4096 on one thread took 7.5 ms of CPU against 8.1, and
// 16 x 1024 x 4096 1.80 against 1.94. Weights the cache holds run faster 8 columns a pass
// (16 x 768 x 3072: 0.76 ms against 0.84; 16 x 768 x 768: 0.20 against 0.22). A 64-byte
// sum takes 2 of AVX2's 16 registers and 4 of SSE's: there 8 columns fill them.
inline int64_t columns_per_pass(int64_t weight_bytes) {
  constexpr int64_t kWideFrom = 12 << 20;  // bytes of weights
#if ONNXTRAIN_MULTIVERSION
  static const bool wide = __builtin_cpu_supports("x86-64-v4");
#elif defined(__AVX512F__)
  constexpr bool wide = true;
#else
  constexpr bool wide = false;
#endif
  return wide && weight_bytes >= kWideFrom ? kWideColumns : kMaxColumns;
}

// How far ahead (in depth steps of 64 bytes: 16 KB) a pass over 8 or more columns asks for
// its weights. At 16 columns the hardware prefetcher alone left the loop waiting on the
// weights' loads (16 x 4096 x 4096, one thread: 7.7 ms of CPU, 6.7 ms with this, against
// onnxruntime's 7.5 ms); a pass over a few columns is bound by memory either way.
inline constexpr int64_t kPrefetchSteps = 256;

// sums[c] = sum over k of w[k] * columns[k * k_stride + c * c_stride], for one block of 16
// outputs. Compiled per x86 level (multiversion.h): a 64-byte Lanes is one AVX-512
// register, two AVX2 or four SSE ones.
template <int kColumns>
ONNXTRAIN_MULTIVERSIONED void block_product(const float* w, const float* columns, int64_t depth, int64_t k_stride,
                                            int64_t c_stride, Lanes* sums) {
  Lanes acc[kColumns] = {};
  for (int64_t k = 0; k < depth; ++k) {
    Lanes wk;
    std::memcpy(&wk, w + k * kBlock, sizeof wk);
    if constexpr (kColumns >= 8) __builtin_prefetch(w + (k + kPrefetchSteps) * kBlock);
    const float* ck = columns + k * k_stride;
    for (int c = 0; c < kColumns; ++c) acc[c] += wk * ck[c * c_stride];
  }
  std::memcpy(sums, acc, sizeof acc);
}

template <size_t... I>
constexpr std::array<Product, sizeof...(I)> products(std::index_sequence<I...>) {
  return {&block_product<static_cast<int>(I) + 1>...};
}

// block_product for 1 to kWideColumns columns.
inline constexpr auto kProducts = products(std::make_index_sequence<kWideColumns>());

}  // namespace weight_stream

class WeightStream {
 public:
  static constexpr int64_t kMaxColumns = weight_stream::kMaxColumns;
  static constexpr int64_t kBlock = weight_stream::kBlock;
  using Lanes = weight_stream::Lanes;

  // Packs W (outputs x depth; element (o, k) at w[o * output_stride + k * depth_stride])
  // into [ceil(outputs / 16)][depth][16], zeros past the last output.
  WeightStream(const float* w, int64_t outputs, int64_t depth, int64_t output_stride, int64_t depth_stride)
      : outputs_(outputs), depth_(depth), blocks_((outputs + kBlock - 1) / kBlock) {
    packed_ = Tensor::zeros(DType::kFloat32, {blocks_, depth_, kBlock});
    float* dst = packed_.data<float>();
    const auto pack = [&](int64_t o, int64_t k) {
      dst[((o / kBlock) * depth + k) * kBlock + o % kBlock] = w[o * output_stride + k * depth_stride];
    };
    if (output_stride == 1) {  // read W along its rows either way
      for (int64_t k = 0; k < depth; ++k)
        for (int64_t o = 0; o < outputs; ++o) pack(o, k);
    } else {
      for (int64_t o = 0; o < outputs; ++o)
        for (int64_t k = 0; k < depth; ++k) pack(o, k);
    }
  }

  int64_t outputs() const { return outputs_; }
  int64_t depth() const { return depth_; }

  // For `count` columns, element k of column c at columns[k * k_stride + c * c_stride]:
  // sums[c][j] = sum over k of W(first + j, k) * column (first_column + c)'s element k,
  // handed to store(first, valid, first_column, columns, sums) block by block (valid =
  // outputs in the block) and columns_per_pass() columns at a time (a block's weights, read
  // again for the next columns, come from the cache). Ranges of blocks of at least
  // `bytes_per_thread` weights run on parallel_for's OpenMP team when `threads` > 1. On
  // share_ranges instead, a loaded machine gained (a helper without a core holds nothing up)
  // but a quiet one lost, the helpers spinning after the product on the core that the next
  // op's OpenMP team (oneDNN, parallel_for) wanted: ResNet-18's forward at batch 1 on two
  // threads, whose last convolutions stream their weights, 2.3-2.9 -> 3.8-3.9 ms; the
  // 1024-4096-4096-1000 MLP at batch 16, 5.2 -> 8.0-9.8 ms.
  template <typename Store>
  void multiply(const float* columns, int64_t count, int64_t k_stride, int64_t c_stride, int64_t bytes_per_thread,
                int threads, Store&& store) const {
    const int64_t block_bytes = depth_ * kBlock * static_cast<int64_t>(sizeof(float));
    const int64_t per_pass = weight_stream::columns_per_pass(blocks_ * block_bytes);
    const auto run_blocks = [&](int64_t begin, int64_t end) {
      Lanes sums[weight_stream::kWideColumns];
      for (int64_t b = begin; b < end; ++b)
        for (int64_t c = 0; c < count; c += per_pass) {
          const int64_t n = std::min(per_pass, count - c);
          weight_stream::kProducts[static_cast<size_t>(n - 1)](
              packed_.data<float>() + b * depth_ * kBlock, columns + c * c_stride, depth_, k_stride, c_stride, sums);
          store(b * kBlock, std::min(kBlock, outputs_ - b * kBlock), c, n, static_cast<const Lanes*>(sums));
        }
    };
    const int64_t grain = std::max<int64_t>(1, bytes_per_thread / std::max<int64_t>(block_bytes, 1));
    if (threads <= 1 || grain >= blocks_) {  // one range: no sharing to pay for
      run_blocks(0, blocks_);
      return;
    }
    parallel_for(blocks_, grain, run_blocks);
  }

 private:
  int64_t outputs_, depth_, blocks_;
  Tensor packed_;
};

}  // namespace onnxtrain
