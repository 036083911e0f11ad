// The shared oneDNN engine and stream, and the small pieces the kernels of the nn family
// (matmul, conv, pool, normalization, softmax, einsum) share: memory descriptors from
// shapes, reorders, 16-bit float conversion, a per-shape cache of prepared primitives,
// reductions that vectorize, and the matrix-product loop for the element types oneDNN
// does not compute (float64, integers).
//
// oneDNN runs on OpenMP, like the rest of the engine: a primitive uses
// omp_get_max_threads() threads, which the session sets from intra_op_num_threads.
#pragma once

#include <omp.h>
#include <onnxtrain/tensor.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel.h"

namespace onnxtrain::onednn {

using dnnl::memory;

// The CPU engine, created on first use.
const dnnl::engine& engine();
// An in-order CPU stream for the calling thread.
dnnl::stream& stream();

// oneDNN's element type for `dtype`, if it has one.
std::optional<memory::data_type> data_type(DType dtype);

// True when oneDNN has optimized (non-reference) kernels for `dtype` on this CPU for the
// common primitives (matmul, convolution, pooling): float32 always; bfloat16 on CPUs with
// AVX-512 (oneDNN emulates or uses native bf16); float16 only on AVX512-FP16 CPUs.
bool computes_natively(DType dtype);

// Row-major strides of `dims`.
memory::dims plain_strides(const memory::dims& dims);

// A descriptor for a row-major tensor.
inline memory::desc plain_desc(const memory::dims& dims, memory::data_type type) {
  return memory::desc(dims, type, plain_strides(dims));
}
// A descriptor whose layout oneDNN chooses (format_tag::any).
inline memory::desc any_desc(const memory::dims& dims, memory::data_type type) {
  return memory::desc(dims, type, memory::format_tag::any);
}

// A oneDNN memory over caller-owned bytes (oneDNN takes a non-const pointer even for
// inputs it only reads).
inline memory wrap(const memory::desc& desc, const void* data) {
  return memory(desc, engine(), const_cast<void*>(data));
}

// Runs a primitive on the thread's stream and waits for it.
void execute(const dnnl::primitive& primitive, const std::unordered_map<int, memory>& args);

// ---- Threads for small work ----
// Spreading a few microseconds of work over threads costs more than it saves: waking the
// other threads and joining them takes microseconds, and far longer when the cores are
// busy with other processes (a descheduled thread holds up the whole primitive). Kernels
// size their thread count by their work.

// Threads for `work` units when each thread should get at least `per_thread` of them:
// between 1 and `available`.
inline int threads_for(double work, double per_thread, int available) {
  const double wanted = work / per_thread;
  return wanted >= available ? available : std::max(1, static_cast<int>(wanted));
}

// Floating-point operations per thread that make a thread worth starting for a oneDNN
// compute primitive (matmul, convolution): about 10 us of work on one core. Joining a
// thread costs a few microseconds; on cores shared with other processes a parallel region
// may also wait for a descheduled thread, so tiny work stays on one thread. Measured on the
// small CNN at batch 8, 2 threads: 1e6 -> 95 us forward, 2e6 -> 150-200 us (its convolutions
// of 2-4 MFLOP then ran on one thread); ResNet-18 at batch 1 did not move.
inline constexpr double kFlopsPerThread = 1e6;
// Bytes per thread for memory-bound primitives (reorders, pooling): about 15 us of copying.
inline constexpr double kBytesPerThread = 128 * 1024;

// ThreadScope (core/parallel.h): oneDNN splits a primitive's work for the thread count when the
// primitive is created and runs its loops with the count when it executes, so both happen
// inside a ThreadScope with the same count.
using onnxtrain::ThreadScope;

// The attributes every Primitive's descriptor is created with (the scratchpad comes from
// the run, see Primitive); `attr` adds to given ones.
dnnl::primitive_attr primitive_attr(dnnl::primitive_attr attr = {});

// A primitive prepared to run many times at little cost: its argument memories are made
// once and pointed at each run's buffers, and its scratchpad comes from the run's arena
// (with the default scratchpad, oneDNN allocates and frees one on every call). It runs on
// the thread count it was created with. Create its descriptor with primitive_attr() and
// inside a ThreadScope of `threads`.
class Primitive {
 public:
  Primitive() = default;
  Primitive(dnnl::primitive primitive, const dnnl::primitive_desc_base& pd, int threads);

  // Declares argument `arg` (DNNL_ARG_SRC, ...) and its layout.
  void add_argument(int arg, const memory::desc& desc);
  // Runs on one buffer per declared argument, given as (arg, data) pairs.
  void run(KernelContext& ctx, std::initializer_list<std::pair<int, const void*>> buffers);

 private:
  dnnl::primitive primitive_;
  int threads_ = 1;
  size_t scratchpad_bytes_ = 0;
  std::unordered_map<int, memory> args_;
};

// True when oneDNN fell back to its slow reference code (its implementation name, as
// ONEDNN_VERBOSE=1 prints it, starts with "ref" or is a "simple" one).
bool is_reference(const dnnl::primitive_desc_base& pd);

// Copies `source` into the layout of `target_desc` (a reorder), into `target` bytes. For
// one-off copies; a kernel that reorders on every run keeps a Reorder.
void reorder(const memory::desc& source_desc, const void* source, const memory::desc& target_desc, void* target);

// A float32 tensor's change between the plain layout [N][C][spatial] and channel blocks of
// 8 or 16 ([N][C / block][spatial][block], the last block zero-padded): what convolutions
// reorder on every run. In 8 x 8 tiles transposed in registers: the CNN's first layer
// output at batch 8 (8 x 8 x 32 x 32) took 20 us in oneDNN's reorder on two threads.
struct ChannelBlocks {
  int64_t n = 0, c = 0, spatial = 0, block = 0;
  bool to_plain = false;

  // The change from `from` to `to`, if it is one (block 0 otherwise).
  static ChannelBlocks between(const memory::desc& from, const memory::desc& to);
  void run(const float* from, float* to) const;
};

// A reorder primitive between two fixed layouts, created once, with its memories; it
// runs on one thread unless it moves enough bytes for more (of at most `threads`).
// Changes of channel blocking run as ChannelBlocks instead.
class Reorder {
 public:
  Reorder() = default;
  Reorder(const memory::desc& from, const memory::desc& to, int threads);
  void run(const void* source, void* target);

 private:
  dnnl::reorder primitive_;
  ChannelBlocks blocks_;
  int threads_ = 1;
  std::unordered_map<int, memory> args_;
};

// A constant tensor (weights) in the layouts primitives asked for, one copy per layout: the
// primitives a kernel makes for each input shape (every sequence length of a language model)
// share it, where each kept its own copy before (a 4 MB MatMul weight grew the process by
// 158 MB over 40 sequence lengths).
class PackedConstant {
 public:
  // The constant (`source`, laid out as `from`) in layout `to`, reordered on the first request.
  const Tensor& in_layout(const memory::desc& from, const void* source, const memory::desc& to);

 private:
  std::vector<std::pair<memory::desc, Tensor>> layouts_;
};

// A scratch buffer of `bytes` bytes from the run's arena.
inline Tensor scratch_bytes(KernelContext& ctx, size_t bytes) {
  return ctx.allocate_scratch(DType::kUInt8, {static_cast<int64_t>(bytes)});
}

// Element conversion between a storage type and the type arithmetic happens in.
template <typename From, typename To>
void convert(const From* in, To* out, int64_t n) {
  parallel_for(n, 65536, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = static_cast<To>(static_cast<compute_type_t<From>>(in[i]));
  });
}

// A float32 copy of a float16/bfloat16/float64 tensor, in scratch memory.
Tensor to_float32(KernelContext& ctx, const Tensor& tensor);
// A float32 heap copy of a constant 16-bit float tensor, for prepared state that outlives
// a run (scratch memory does not).
Tensor float32_copy(const Tensor& tensor);
// Writes float32 `values` into `out` (any float type) with rounding.
void from_float32(const Tensor& values, Tensor& out);

// Prepared state per input-shape signature, so that preparing (primitive creation,
// weight packing) happens once per shape and each run only executes. Bounded: a model
// whose shapes change on every run does not grow memory without limit.
template <typename Entry>
class ShapeCache {
 public:
  using Key = std::vector<int64_t>;

  Entry* find(const Key& key) {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }
  Entry& insert(Key key, Entry entry) {
    if (entries_.size() >= kCapacity) entries_.clear();
    return entries_.insert_or_assign(std::move(key), std::move(entry)).first->second;
  }
  // The entry for `key`, made by make() on a miss.
  template <typename Make>
  Entry& get(const Key& key, Make&& make) {
    if (Entry* e = find(key)) return *e;
    return insert(key, make());
  }

 private:
  static constexpr size_t kCapacity = 64;
  std::map<Key, Entry> entries_;
};

// Appends shape and dtype to a cache key; -1 separates shapes.
inline void append_key(std::vector<int64_t>& key, const Tensor& t) {
  key.push_back(static_cast<int64_t>(t.dtype()));
  key.insert(key.end(), t.shape().begin(), t.shape().end());
  key.push_back(-1);
}

// ---- Reductions that vectorize ----
// GCC keeps a float sum or max in source order unless told otherwise (-ffast-math), so a
// plain accumulation loop stays scalar. Sixteen independent partial results (one AVX-512
// register of floats) let it use vector instructions, and sum more accurately too.

inline constexpr int kLanes = 16;

// kLanes values of A in one vector.
template <typename A>
using LaneVector = vector_math::Vector<A, kLanes>;

// op over all lanes, halving the vector in registers: through an array, the scalar reads
// of vector-written lanes stalled on store forwarding (softmax over 16 positions: 60 ns
// per row, 22 ns this way).
template <typename A, typename Op>
A fold_lanes(LaneVector<A> v, Op op) {
  static_assert(kLanes == 16);
  v = op(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  v = op(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return v[0];
}

// The sum of f(i) for i in [0, n), in A.
template <typename A, typename F>
A lane_sum(int64_t n, F&& f) {
  A lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += f(i + l);
  for (; i < n; ++i) lanes[0] += f(i);
  LaneVector<A> v;
  std::memcpy(&v, lanes, sizeof v);
  return fold_lanes<A>(v, [](auto a, auto b) { return a + b; });
}

// The maximum of x[0..n) (n >= 1). A NaN after the first element is skipped (a select,
// not a branch, keeps the loop vectorizable): callers whose results go through x itself,
// like softmax's exp(x - max), still produce NaN.
template <typename A>
A lane_max(const A* x, int64_t n) {
  LaneVector<A> lanes;
  for (int l = 0; l < kLanes; ++l) lanes[l] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    LaneVector<A> v;
    std::memcpy(&v, x + i, sizeof v);
    lanes = v > lanes ? v : lanes;
  }
  for (; i < n; ++i) lanes[0] = x[i] > lanes[0] ? x[i] : lanes[0];
  return fold_lanes<A>(lanes, [](auto a, auto b) { return b > a ? b : a; });
}

// ---- Matrix products shared by MatMul, Gemm and Einsum ----

// A batch of row-major matrix products c[i] = a[a_offsets[i]] x b[b_offsets[i]], with
// a: M x K (row stride lda), b: K x N (row stride ldb), c: M x N contiguous per batch.
struct MatmulBatch {
  int64_t m = 0, k = 0, n = 0;
  int64_t lda = 0, ldb = 0;
  std::vector<int64_t> a_offsets, b_offsets;  // element offsets, one per batch entry
};

// The plain loop for types oneDNN does not compute (float64, integers): for each row of
// c, accumulate a[i, p] * b[p, :] over p, in cache-sized blocks of p and columns; the
// inner loop is contiguous, so the compiler vectorizes it. Rows run in parallel.
template <typename T>
void matmul_loop(const T* a, const T* b, T* c, const MatmulBatch& batch) {
  const int64_t m = batch.m, k = batch.k, n = batch.n;
  const int64_t batches = static_cast<int64_t>(batch.a_offsets.size());
  constexpr int64_t kBlockK = 128, kBlockN = 1024;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, k * n));
  parallel_for(batches * m, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row % m, bi = row / m;
      const T* ar = a + batch.a_offsets[static_cast<size_t>(bi)] + i * batch.lda;
      const T* bm = b + batch.b_offsets[static_cast<size_t>(bi)];
      T* cr = c + row * n;
      for (int64_t j = 0; j < n; ++j) cr[j] = T(0);
      for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
        const int64_t j1 = std::min(n, j0 + kBlockN);
        for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
          const int64_t p1 = std::min(k, p0 + kBlockK);
          for (int64_t p = p0; p < p1; ++p) {
            const T av = ar[p];
            const T* br = bm + p * batch.ldb;
            for (int64_t j = j0; j < j1; ++j) cr[j] += av * br[j];
          }
        }
      }
    }
  });
}

// A float32 batched matmul on oneDNN for Einsum: c[i] = a[i] x b[i] for i < batch, with
// a [batch, m, k] and b [batch, k, n] dense, each either row-major or (a_t / b_t)
// transposed in its last two axes; c is dense row-major.
class BatchedMatmul {
 public:
  void run(const float* a, const float* b, float* c, int64_t batch, int64_t m, int64_t k, int64_t n, bool a_t,
           bool b_t);

 private:
  ShapeCache<dnnl::matmul> cache_;
};

}  // namespace onnxtrain::onednn
