// Matrix products: MatMul (numpy semantics, batched with broadcasting) and Gemm
// (transA/transB, alpha, beta, C broadcast). float32 and bfloat16 run on oneDNN's matmul;
// float16 runs there through float32; float64 and integers run a plain blocked loop.
#include "ops/cpu/matmul.h"

#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/weight_stream.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using onednn::memory;

std::string dtype_string(DType t) {
  return std::string(dtype_name(t));
}

void check_same_dtype(KernelContext& ctx, const Tensor& a, const Tensor& b, const char* a_name, const char* b_name) {
  if (a.dtype() != b.dtype()) {
    ctx.fail(std::string(a_name) + " is " + dtype_string(a.dtype()) + " but " + b_name + " is " +
             dtype_string(b.dtype()) + "; they must have the same element type");
  }
}

// Collapses the broadcast batch dimensions of a and b (both padded to the output's
// batch rank). Adjacent dims that broadcast the same way merge into one; when b has no
// batch dims the batch folds into a's rows, making one large 2-D product.
void collapse_batch(const Shape& a_batch, const Shape& b_batch, const Shape& out_batch, MatmulProblem& p) {
  const int64_t m = p.batch.m, k = p.batch.k, n = p.batch.n;
  const bool b_single = shape_size(b_batch) == 1;
  if (b_single) {
    const int64_t rows = shape_size(out_batch) * m;
    p.a = {rows, k};
    p.b = {k, n};
    p.c = {rows, n};
    p.batch.m = rows;
    p.batch.a_offsets = {0};
    p.batch.b_offsets = {0};
    return;
  }
  // kind: 0 both full, 1 a broadcast, 2 b broadcast
  std::vector<std::array<int64_t, 3>> merged;  // {a, b, out} per merged dim
  std::vector<int> kinds;
  for (size_t i = 0; i < out_batch.size(); ++i) {
    if (out_batch[i] == 1) continue;
    const int kind = a_batch[i] == 1 ? 1 : (b_batch[i] == 1 ? 2 : 0);
    if (!kinds.empty() && kinds.back() == kind) {
      auto& d = merged.back();
      d[0] *= a_batch[i];
      d[1] *= b_batch[i];
      d[2] *= out_batch[i];
    } else {
      merged.push_back({a_batch[i], b_batch[i], out_batch[i]});
      kinds.push_back(kind);
    }
  }
  p.a.clear();
  p.b.clear();
  p.c.clear();
  for (const auto& d : merged) {
    p.a.push_back(d[0]);
    p.b.push_back(d[1]);
    p.c.push_back(d[2]);
  }
  if (merged.empty()) {  // every batch dim is 1
    p.a.push_back(1);
    p.b.push_back(1);
    p.c.push_back(1);
  }
  p.a.insert(p.a.end(), {m, k});
  p.b.insert(p.b.end(), {k, n});
  p.c.insert(p.c.end(), {m, n});

  // Offsets of each output batch entry's matrices in a and b.
  const size_t rank = p.c.size() - 2;
  const int64_t batches = shape_size(std::span(p.c).first(rank));
  p.batch.a_offsets.resize(static_cast<size_t>(batches));
  p.batch.b_offsets.resize(static_cast<size_t>(batches));
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rest = bi, a_index = 0, b_index = 0, a_scale = 1, b_scale = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t index = rest % p.c[d];
      rest /= p.c[d];
      if (p.a[d] != 1) a_index += index * a_scale;
      if (p.b[d] != 1) b_index += index * b_scale;
      a_scale *= p.a[d];
      b_scale *= p.b[d];
    }
    p.batch.a_offsets[static_cast<size_t>(bi)] = a_index * m * k;
    p.batch.b_offsets[static_cast<size_t>(bi)] = b_index * k * n;
  }
}

}  // namespace

MatmulProblem matmul_problem(KernelContext& ctx, const Shape& a_shape, const Shape& b_shape) {
  if (a_shape.empty() || b_shape.empty()) {
    ctx.fail("inputs must have rank 1 or more, got A " + shape_string(a_shape) + " and B " + shape_string(b_shape));
  }
  // numpy: a 1-D A is a row vector [1, k], a 1-D B a column vector [k, 1]; the added dim
  // is dropped from the output.
  Shape a = a_shape.size() == 1 ? Shape{1, a_shape[0]} : a_shape;
  Shape b = b_shape.size() == 1 ? Shape{b_shape[0], 1} : b_shape;
  MatmulProblem p;
  p.batch.m = a[a.size() - 2];
  p.batch.k = a.back();
  p.batch.n = b.back();
  p.batch.lda = p.batch.k;
  p.batch.ldb = p.batch.n;
  if (b[b.size() - 2] != p.batch.k) {
    ctx.fail("inner dimensions do not match: A " + shape_string(a_shape) + " has " + std::to_string(p.batch.k) +
             " columns but B " + shape_string(b_shape) + " has " + std::to_string(b[b.size() - 2]) + " rows");
  }
  const size_t rank = std::max(a.size(), b.size()) - 2;
  Shape a_batch(rank, 1), b_batch(rank, 1), out_batch(rank, 1);
  std::copy(a.begin(), a.end() - 2, a_batch.end() - static_cast<int64_t>(a.size() - 2));
  std::copy(b.begin(), b.end() - 2, b_batch.end() - static_cast<int64_t>(b.size() - 2));
  for (size_t i = 0; i < rank; ++i) {
    if (a_batch[i] != b_batch[i] && a_batch[i] != 1 && b_batch[i] != 1) {
      ctx.fail("batch dimensions do not broadcast: A " + shape_string(a_shape) + " and B " + shape_string(b_shape) +
               " (batch axis " + std::to_string(i) + ": " + std::to_string(a_batch[i]) + " vs " +
               std::to_string(b_batch[i]) + ")");
    }
    out_batch[i] = a_batch[i] == 1 ? b_batch[i] : a_batch[i];
  }
  p.out = out_batch;
  if (a_shape.size() > 1) p.out.push_back(p.batch.m);
  if (b_shape.size() > 1) p.out.push_back(p.batch.n);
  collapse_batch(a_batch, b_batch, out_batch, p);
  return p;
}

PreparedMatmul prepare_matmul(memory::data_type type, const memory::desc& a_md, const memory::desc& b_md,
                              const memory::desc& c_md, const memory::desc& bias_md, const dnnl::primitive_attr& attr,
                              const void* constant_b, onednn::PackedConstant& packed, int threads) {
  const memory::dims& c_dims = c_md.dims();
  const double flops = 2.0 * static_cast<double>(shape_size(c_dims)) * static_cast<double>(a_md.dims().back());
  const int used = onednn::threads_for(flops, onednn::kFlopsPerThread, threads);
  onednn::ThreadScope scope(used);
  const memory::desc weights = constant_b ? onednn::any_desc(b_md.dims(), type) : b_md;
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, weights, bias_md, c_md), onednn::primitive_attr(attr),
                                  onednn::engine());
  PreparedMatmul prepared;
  prepared.primitive = onednn::Primitive(dnnl::matmul(pd), pd, used);
  prepared.primitive.add_argument(DNNL_ARG_SRC, a_md);
  prepared.primitive.add_argument(DNNL_ARG_WEIGHTS, pd.weights_desc());
  prepared.primitive.add_argument(DNNL_ARG_DST, c_md);
  if (bias_md) prepared.primitive.add_argument(DNNL_ARG_BIAS, bias_md);
  if (constant_b) prepared.packed_b = packed.in_layout(b_md, constant_b, pd.weights_desc());
  return prepared;
}

void run_matmul(KernelContext& ctx, PreparedMatmul& p, const void* a, const void* b, void* c, const void* bias) {
  const void* weights = p.packed_b.defined() ? p.packed_b.raw_data() : b;
  if (bias) {
    p.primitive.run(ctx, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, c}, {DNNL_ARG_BIAS, bias}});
  } else {
    p.primitive.run(ctx, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, c}});
  }
}

namespace {

// The element types MatMul/Gemm compute with plain loops.
#define MATMUL_LOOP_TYPES double, int32_t, int64_t, uint32_t, uint64_t

// A constant B times up to 16 rows (a linear layer at small batch) runs as a WeightStream.
// The MLP's 8 x 64 x 64 Gemm: 0.2 us where the oneDNN call took 1.4 us; at 16 rows it is as
// fast as oneDNN on a 768 x 3072 B and 0.4 us faster on small ones (1 and 2 threads).
constexpr int64_t kMaxStreamedRows = 16;

// out [rows, n] = A B (+ bias per column), B packed in `stream` (n outputs, depth k); A is
// [rows, k], or [k, rows] when `a_transposed`.
void stream_rows(KernelContext& ctx, const WeightStream& stream, const float* a, int64_t rows, bool a_transposed,
                 const float* bias, float* out) {
  const int64_t k = stream.depth(), n = stream.outputs();
  // The product reads element p of every row together: rows k floats apart (16 KB at
  // k = 4096) fall in one set of the L1 cache, and 8 or 16 of them with the weights
  // evicted each other. Interleaved ([k][rows]), element p of all rows is one cache line:
  // 16 x 4096 x 4096 on one thread took 9.7 ms of CPU before, 7.9 ms after (16 x 768 x 768:
  // 0.24 ms, 0.22). Short rows share no set, and the copy would cost more than it saves.
  constexpr int64_t kMinInterleavedDepth = 256;
  Tensor interleaved;
  if (!a_transposed && rows > 1 && k >= kMinInterleavedDepth) {
    interleaved = ctx.allocate_scratch(DType::kFloat32, {k, rows});
    float* t = interleaved.data<float>();
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = 0; i < rows; ++i) t[p * rows + i] = a[i * k + p];
    a = t;
    a_transposed = true;
  }
  // Column i of the product is row i of A.
  const int64_t k_stride = a_transposed ? rows : 1, row_stride = a_transposed ? 1 : k;
  stream.multiply(
      a, rows, k_stride, row_stride, static_cast<int64_t>(onednn::kBytesPerThread), ctx.num_threads(),
      [&](int64_t first, int64_t count, int64_t first_row, int64_t count_rows, const WeightStream::Lanes* sums) {
        for (int64_t i = 0; i < count_rows; ++i)
          for (int64_t j = 0; j < count; ++j)
            out[(first_row + i) * n + first + j] = sums[i][j] + (bias ? bias[first + j] : 0.0f);
      });
}

class MatMulKernel final : public OpKernel {
 public:
  // `constant_b`: B when it is a constant that may be packed once (null otherwise).
  explicit MatMulKernel(const Tensor* constant_b) : constant_b_(constant_b) {}

  void compute(KernelContext& ctx) override { multiply(ctx, ctx.input(0), ctx.input(1)); }

  // Output 0 = a @ b, numpy's matmul (a and b may be other than the node's inputs: b only
  // when no constant B was given).
  Tensor& multiply(KernelContext& ctx, const Tensor& a, const Tensor& b) {
    check_same_dtype(ctx, a, b, "A", "B");
    MatmulProblem p = matmul_problem(ctx, a.shape(), b.shape());
    Tensor& out = ctx.allocate_output(0, a.dtype(), p.out);
    if (out.numel() == 0) return out;
    if (p.batch.k == 0) {  // an empty sum
      std::memset(out.raw_data(), 0, out.nbytes());
      return out;
    }
    const DType dtype = a.dtype();
    if (dtype == DType::kFloat32 && constant_b_ && b.rank() == 2 && a.numel() / b.dim(0) <= kMaxStreamedRows) {
      // Every leading axis of A is rows of one product.
      if (!stream_) stream_.emplace(constant_b_->data<float>(), b.dim(1), b.dim(0), 1, b.dim(1));
      stream_rows(ctx, *stream_, a.data<float>(), a.numel() / b.dim(0), false, nullptr, out.data<float>());
      return out;
    }
    if (dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16) {
      run_onednn(ctx, a, b, out, p);
      return out;
    }
    dispatch<MATMUL_LOOP_TYPES>(
        dtype, "MatMul", [&]<typename T>() { onednn::matmul_loop(a.data<T>(), b.data<T>(), out.data<T>(), p.batch); });
    return out;
  }

 private:
  void run_onednn(KernelContext& ctx, const Tensor& a, const Tensor& b, Tensor& out, const MatmulProblem& p) {
    const bool native = onednn::computes_natively(a.dtype());
    const DType compute = native ? a.dtype() : DType::kFloat32;
    const memory::data_type type = *onednn::data_type(compute);
    key_.clear();
    onednn::append_key(key_, a);
    onednn::append_key(key_, b);
    PreparedMatmul& prepared = cache_.get(key_, [&] {
      const void* constant = nullptr;
      Tensor converted;
      if (constant_b_) {
        converted = native ? *constant_b_ : onednn::float32_copy(*constant_b_);
        constant = converted.raw_data();
      }
      return prepare_matmul(type, onednn::plain_desc(p.a, type), onednn::plain_desc(p.b, type),
                            onednn::plain_desc(p.c, type), {}, {}, constant, packed_b_, ctx.num_threads());
    });
    if (native) {
      run_matmul(ctx, prepared, a.raw_data(), b.raw_data(), out.raw_data());
      return;
    }
    const Tensor a32 = onednn::to_float32(ctx, a);
    const Tensor b32 = constant_b_ ? Tensor() : onednn::to_float32(ctx, b);
    Tensor c32 = ctx.allocate_scratch(DType::kFloat32, out.shape());
    run_matmul(ctx, prepared, a32.raw_data(), b32.defined() ? b32.raw_data() : nullptr, c32.raw_data());
    onednn::from_float32(c32, out);
  }

  const Tensor* constant_b_;
  std::vector<int64_t> key_;  // the cache key, rebuilt in place each run
  onednn::ShapeCache<PreparedMatmul> cache_;
  onednn::PackedConstant packed_b_;     // B in oneDNN's layouts, shared by cache_'s entries
  std::optional<WeightStream> stream_;  // B packed, made on the first run with few rows
};

const KernelRegistration kMatMul{"", "MatMul", 1, kLatestOpset, [](const KernelInfo& info) {
                                   return std::make_unique<MatMulKernel>(info.packable_constant_input(1));
                                 }};

// ---- Gemm: Y = alpha * A' * B' + beta * C ----

struct GemmShape {
  int64_t m = 0, k = 0, n = 0;
};

class GemmKernel final : public OpKernel {
 public:
  explicit GemmKernel(const KernelInfo& info)
      : trans_a_(info.bool_attribute("transA", false)),
        trans_b_(info.bool_attribute("transB", false)),
        alpha_(info.float_attribute("alpha", 1.0f)),
        beta_(info.float_attribute("beta", 1.0f)),
        exact_c_(info.opset() < 7 && !info.bool_attribute("broadcast", false)),
        constant_b_(info.packable_constant_input(1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    check_same_dtype(ctx, a, b, "A", "B");
    const GemmShape s = shape_of(ctx, a, b);
    const Tensor* c = ctx.has_input(2) && beta_ != 0.0f ? &ctx.input(2) : nullptr;
    if (c) check_c(ctx, a, *c, s);
    Tensor& out = ctx.allocate_output(0, a.dtype(), {s.m, s.n});
    if (out.numel() == 0) return;
    const DType dtype = a.dtype();
    if (s.k == 0) {  // an empty sum (an empty batch's weight gradient): oneDNN would divide by it
      dispatch<ONNXTRAIN_NUMERIC_TYPES>(dtype, "Gemm", [&]<typename T>() { empty_product<T>(c, out); });
      return;
    }
    if (dtype == DType::kFloat32 && streams_b(c, s)) {
      run_streaming(ctx, a, c, out, s);
      return;
    }
    if (dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16) {
      run_onednn(ctx, a, b, c, out, s);
      return;
    }
    dispatch<MATMUL_LOOP_TYPES>(dtype, "Gemm", [&]<typename T>() { run_loop<T>(ctx, a, b, c, out, s); });
  }

 private:
  GemmShape shape_of(KernelContext& ctx, const Tensor& a, const Tensor& b) const {
    if (a.rank() != 2 || b.rank() != 2) {
      ctx.fail("A and B must be 2-D matrices, got A " + shape_string(a.shape()) + " and B " + shape_string(b.shape()));
    }
    GemmShape s;
    s.m = trans_a_ ? a.dim(1) : a.dim(0);
    s.k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b_ ? b.dim(1) : b.dim(0);
    s.n = trans_b_ ? b.dim(0) : b.dim(1);
    if (kb != s.k) {
      ctx.fail("inner dimensions do not match: A" + std::string(trans_a_ ? "^T" : "") + " is " + std::to_string(s.m) +
               "x" + std::to_string(s.k) + " but B" + (trans_b_ ? "^T" : "") + " is " + std::to_string(kb) + "x" +
               std::to_string(s.n));
    }
    return s;
  }

  void check_c(KernelContext& ctx, const Tensor& a, const Tensor& c, const GemmShape& s) const {
    check_same_dtype(ctx, a, c, "A", "C");
    const Shape target{s.m, s.n};
    bool ok = c.rank() <= 2;
    for (size_t i = 0; ok && i < c.rank(); ++i) {
      const int64_t want = target[2 - c.rank() + i];
      ok = c.shape()[i] == want || c.shape()[i] == 1;
    }
    if (exact_c_) ok = c.shape() == target;
    if (!ok) {
      ctx.fail("C " + shape_string(c.shape()) + " does not broadcast to the output " + shape_string(target) +
               (exact_c_ ? " (broadcast=0 requires exactly that shape)" : ""));
    }
  }

  // Writes C broadcast to [m, n] into out (as T).
  template <typename T>
  static void fill_c(const Tensor& c, Tensor& out) {
    const Shape& shape = out.shape();
    const T* pc = c.data<T>();
    T* po = out.data<T>();
    for_each_broadcast_row<1>(shape, {&c.shape()}, [&](int64_t o, const auto& offsets, const auto& strides, int64_t n) {
      const T* x = pc + offsets[0];
      if (strides[0] == 1)
        std::memcpy(po + o, x, static_cast<size_t>(n) * sizeof(T));
      else
        std::fill(po + o, po + o + n, *x);
    });
  }

  // out = beta * C, or zeros without C: the product of an empty inner dimension.
  template <typename T>
  void empty_product(const Tensor* c, Tensor& out) const {
    using C = compute_type_t<T>;
    T* po = out.data<T>();
    if (!c) {
      std::fill(po, po + out.numel(), T(C(0)));
      return;
    }
    fill_c<T>(*c, out);
    for (int64_t i = 0; i < out.numel(); ++i) {
      po[i] = static_cast<T>(static_cast<C>(beta_ * static_cast<double>(static_cast<C>(po[i]))));
    }
  }

  // True when C is a row vector ([n] or [1, n]) added as it is: oneDNN's bias argument.
  bool is_bias(const Tensor& c, const GemmShape& s) const {
    if (alpha_ != 1.0f || beta_ != 1.0f) return false;
    return (c.rank() == 1 && c.dim(0) == s.n) || (c.rank() == 2 && c.dim(0) == 1 && c.dim(1) == s.n);
  }

  bool streams_b(const Tensor* c, const GemmShape& s) const {
    return constant_b_ && s.m <= kMaxStreamedRows && alpha_ == 1.0f && (!c || is_bias(*c, s));
  }

  void run_streaming(KernelContext& ctx, const Tensor& a, const Tensor* c, Tensor& out, const GemmShape& s) {
    if (!stream_) stream_.emplace(constant_b_->data<float>(), s.n, s.k, trans_b_ ? s.k : 1, trans_b_ ? 1 : s.n);
    stream_rows(ctx, *stream_, a.data<float>(), s.m, trans_a_, c ? c->data<float>() : nullptr, out.data<float>());
  }

  void run_onednn(KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor* c, Tensor& out,
                  const GemmShape& s) {
    const bool native = onednn::computes_natively(a.dtype());
    const memory::data_type type = *onednn::data_type(native ? a.dtype() : DType::kFloat32);
    const bool bias = c && native && is_bias(*c, s);
    key_.clear();
    onednn::append_key(key_, a);
    onednn::append_key(key_, b);
    key_.push_back(c != nullptr);
    key_.push_back(bias);
    PreparedMatmul& prepared = cache_.get(key_, [&] {
      // Transposes are strides: A^T is A read column-major.
      const memory::desc a_md({s.m, s.k}, type, trans_a_ ? memory::dims{1, s.m} : memory::dims{s.k, 1});
      const memory::desc b_md({s.k, s.n}, type, trans_b_ ? memory::dims{1, s.k} : memory::dims{s.n, 1});
      dnnl::primitive_attr attr;
      if (alpha_ != 1.0f) attr.set_output_scales(0, {alpha_});
      if (c && !bias) {  // out holds C on entry; the sum post-op adds beta * C
        dnnl::post_ops ops;
        ops.append_sum(beta_);
        attr.set_post_ops(ops);
      }
      Tensor converted;
      const void* constant = nullptr;
      if (constant_b_) {
        converted = native ? *constant_b_ : onednn::float32_copy(*constant_b_);
        constant = converted.raw_data();
      }
      const memory::desc bias_md = bias ? onednn::plain_desc({1, s.n}, type) : memory::desc();
      return prepare_matmul(type, a_md, b_md, onednn::plain_desc({s.m, s.n}, type), bias_md, attr, constant, packed_b_,
                            ctx.num_threads());
    });
    if (bias) {
      run_matmul(ctx, prepared, a.raw_data(), b.raw_data(), out.raw_data(), c->raw_data());
      return;
    }
    if (native) {
      if (c) dispatch<float, BFloat16>(a.dtype(), "Gemm", [&]<typename T>() { fill_c<T>(*c, out); });
      run_matmul(ctx, prepared, a.raw_data(), b.raw_data(), out.raw_data());
      return;
    }
    const Tensor a32 = onednn::to_float32(ctx, a);
    const Tensor b32 = constant_b_ ? Tensor() : onednn::to_float32(ctx, b);
    Tensor c32 = ctx.allocate_scratch(DType::kFloat32, out.shape());
    if (c) fill_c<float>(onednn::to_float32(ctx, *c), c32);
    run_matmul(ctx, prepared, a32.raw_data(), b32.defined() ? b32.raw_data() : nullptr, c32.raw_data());
    onednn::from_float32(c32, out);
  }

  // A contiguous transposed copy of a 2-D matrix, in scratch memory.
  template <typename T>
  static Tensor transposed(KernelContext& ctx, const Tensor& x) {
    const int64_t rows = x.dim(0), cols = x.dim(1);
    Tensor t = ctx.allocate_scratch(x.dtype(), {cols, rows});
    const T* in = x.data<T>();
    T* o = t.data<T>();
    parallel_for(cols, std::max<int64_t>(1, 16384 / std::max<int64_t>(rows, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j)
        for (int64_t i = 0; i < rows; ++i) o[j * rows + i] = in[i * cols + j];
    });
    return t;
  }

  template <typename T>
  void run_loop(KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor* c, Tensor& out,
                const GemmShape& s) const {
    const Tensor at = trans_a_ ? transposed<T>(ctx, a) : a;
    const Tensor bt = trans_b_ ? transposed<T>(ctx, b) : b;
    onednn::MatmulBatch batch{s.m, s.k, s.n, s.k, s.n, {0}, {0}};
    T* po = out.data<T>();
    onednn::matmul_loop(at.data<T>(), bt.data<T>(), po, batch);
    if (alpha_ == 1.0f && !c) return;
    Tensor cb;
    if (c) {
      cb = ctx.allocate_scratch(out.dtype(), out.shape());
      fill_c<T>(*c, cb);
    }
    const T* pc = c ? cb.data<T>() : nullptr;
    // Scales in double so integer results round the way alpha * x + beta * y does.
    const double alpha = alpha_, beta = beta_;
    parallel_for(out.numel(), 32768, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const double v = alpha * static_cast<double>(po[i]) + (pc ? beta * static_cast<double>(pc[i]) : 0.0);
        po[i] = static_cast<T>(v);
      }
    });
  }

  bool trans_a_, trans_b_;
  float alpha_, beta_;
  bool exact_c_;
  const Tensor* constant_b_;
  std::vector<int64_t> key_;  // the cache key, rebuilt in place each run
  onednn::ShapeCache<PreparedMatmul> cache_;
  onednn::PackedConstant packed_b_;     // B in oneDNN's layouts, shared by cache_'s entries
  std::optional<WeightStream> stream_;  // B packed, made on the first run with few rows
};

const KernelRegistration kGemm{"", "Gemm", 6, kLatestOpset,
                               [](const KernelInfo& info) { return std::make_unique<GemmKernel>(info); }};

// ---- com.microsoft::FusedMatMul: alpha * op(A) @ op(B), op a transpose of the last two axes ----
// onnxruntime-training's gradient graphs use it for MatMul's input gradients. A transposed
// operand is copied transposed (O(size), against the product's O(m n k)), then the product
// runs as MatMul's (oneDNN for the float types), and alpha scales the result.
// transBatchA/B (transposes that move the batch axes) are refused.

// `t` with its last two axes swapped, in a scratch buffer.
Tensor transposed_last_two(KernelContext& ctx, const Tensor& t) {
  Shape shape = t.shape();
  const size_t r = shape.size();
  std::swap(shape[r - 1], shape[r - 2]);
  Tensor out = ctx.allocate_scratch(t.dtype(), shape);
  const int64_t rows = t.dim(static_cast<int64_t>(r) - 2), cols = t.dim(static_cast<int64_t>(r) - 1);
  const int64_t matrices = rows * cols == 0 ? 0 : t.numel() / (rows * cols);
  dispatch_by_size(dtype_size(t.dtype()), [&]<typename U>() {
    const U* in = static_cast<const U*>(t.raw_data());
    U* o = static_cast<U*>(out.raw_data());
    parallel_for(matrices, 1, [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        const U* src = in + m * rows * cols;
        U* dst = o + m * rows * cols;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
      }
    });
  });
  return out;
}

class FusedMatMulKernel final : public OpKernel {
 public:
  explicit FusedMatMulKernel(const KernelInfo& info)
      : trans_a_(info.bool_attribute("transA", false)),
        trans_b_(info.bool_attribute("transB", false)),
        alpha_(info.float_attribute("alpha", 1.0f)),
        matmul_(trans_b_ ? nullptr : info.packable_constant_input(1)) {
    if (info.bool_attribute("transBatchA", false) || info.bool_attribute("transBatchB", false)) {
      info.fail("transBatchA and transBatchB are not supported");
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    check_same_dtype(ctx, a, b, "A", "B");
    if (a.rank() < 2 || b.rank() < 2) ctx.fail("A and B need 2 axes at least");
    const int64_t k_a = trans_a_ ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
    const int64_t k_b = trans_b_ ? b.dim(b.rank() - 1) : b.dim(b.rank() - 2);
    if (k_a != k_b) {
      ctx.fail("op(A) " + shape_string(a.shape()) + " and op(B) " + shape_string(b.shape()) +
               " do not chain (inner sizes " + std::to_string(k_a) + " and " + std::to_string(k_b) + ")");
    }
    Tensor& y =
        matmul_.multiply(ctx, trans_a_ ? transposed_last_two(ctx, a) : a, trans_b_ ? transposed_last_two(ctx, b) : b);
    if (alpha_ == 1.0f) return;
    dispatch<float, double, Float16, BFloat16>(y.dtype(), "FusedMatMul", [&]<typename T>() {
      using C = compute_type_t<T>;
      T* v = y.data<T>();
      const C alpha = static_cast<C>(alpha_);
      parallel_for(y.numel(), 32768, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) v[i] = static_cast<T>(alpha * C(v[i]));
      });
    });
  }

 private:
  bool trans_a_, trans_b_;
  float alpha_;
  MatMulKernel matmul_;
};

const KernelRegistration kMicrosoftFusedMatMul{
    "com.microsoft", "FusedMatMul", 1, kLatestOpset,
    [](const KernelInfo& info) { return std::make_unique<FusedMatMulKernel>(info); }};

// TransposeMatMul: FusedMatMul's older name, the same attributes.
const KernelRegistration kMicrosoftTransposeMatMul{
    "com.microsoft", "TransposeMatMul", 1, kLatestOpset,
    KernelRegistry::global().find("com.microsoft", "FusedMatMul", 1)->create};

}  // namespace
}  // namespace onnxtrain
