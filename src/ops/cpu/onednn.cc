#include "ops/cpu/onednn.h"

#include <cstring>
#include <span>

#include "core/parallel.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/multiversion.h"

namespace onnxtrain::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

// A stream per thread: sessions on different threads may run kernels at once.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

std::optional<memory::data_type> data_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return memory::data_type::f32;
    case DType::kBFloat16:
      return memory::data_type::bf16;
    case DType::kFloat16:
      return memory::data_type::f16;
    case DType::kInt8:
      return memory::data_type::s8;
    case DType::kUInt8:
      return memory::data_type::u8;
    case DType::kInt32:
      return memory::data_type::s32;
    default:
      return std::nullopt;
  }
}

bool computes_natively(DType dtype) {
  static const bool has_bf16 = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  if (dtype == DType::kFloat32) return true;
  if (dtype == DType::kBFloat16) return has_bf16;
  return false;  // oneDNN 2.x has no optimized float16 CPU kernels before AVX512-FP16
}

memory::dims plain_strides(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<memory::dim>(dims[i], 1);
  return strides;
}

void execute(const dnnl::primitive& primitive, const std::unordered_map<int, memory>& args) {
  dnnl::stream& s = stream();
  primitive.execute(s, args);
  s.wait();
}

bool is_reference(const dnnl::primitive_desc_base& pd) {
  const std::string name = pd.impl_info_str();
  return name.rfind("ref", 0) == 0 || name.find("simple") != std::string::npos;
}

void reorder(const memory::desc& source_desc, const void* source, const memory::desc& target_desc, void* target) {
  const ThreadScope scope(0);  // the thread's own count (one on a thread that forked: core/parallel.h)
  memory src = wrap(source_desc, source);
  memory dst = wrap(target_desc, target);
  execute(dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
}

dnnl::primitive_attr primitive_attr(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Primitive::Primitive(dnnl::primitive primitive, const dnnl::primitive_desc_base& pd, int threads)
    : primitive_(std::move(primitive)), threads_(threads) {
  const memory::desc scratchpad = pd.scratchpad_desc();
  scratchpad_bytes_ = scratchpad.get_size();
  if (scratchpad_bytes_ > 0) add_argument(DNNL_ARG_SCRATCHPAD, scratchpad);
}

void Primitive::add_argument(int arg, const memory::desc& desc) {
  args_.insert_or_assign(arg, memory(desc, engine(), DNNL_MEMORY_NONE));
}

void Primitive::run(KernelContext& ctx, std::initializer_list<std::pair<int, const void*>> buffers) {
  for (const auto& [arg, data] : buffers) args_.at(arg).set_data_handle(const_cast<void*>(data));
  Tensor scratchpad;
  if (scratchpad_bytes_ > 0) {
    scratchpad = scratch_bytes(ctx, scratchpad_bytes_);
    args_.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratchpad.raw_data());
  }
  ThreadScope scope(threads_);
  execute(primitive_, args_);
}

namespace {

// The channel-blocked format of a rank-`rank` tensor with blocks of `block` channels.
memory::format_tag channel_blocked_tag(size_t rank, int64_t block) {
  using tag = memory::format_tag;
  switch (rank) {
    case 3:
      return block == 8 ? tag::nCw8c : tag::nCw16c;
    case 4:
      return block == 8 ? tag::nChw8c : tag::nChw16c;
    case 5:
      return block == 8 ? tag::nCdhw8c : tag::nCdhw16c;
    default:
      return tag::undef;
  }
}

using Float8 = vector_math::Vector<float, 8>;

// Blocks [begin, end) of the change `b` (block i: `b.block` channels of image i / blocks),
// one version per x86 level: the baseline would split each 8-float register in two.
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void change_blocks(const ChannelBlocks& b, const float* from, float* to,
                                                             int64_t begin, int64_t end) {
  const int64_t blocks = (b.c + b.block - 1) / b.block, block = b.block, spatial = b.spatial;
  const bool to_plain = b.to_plain;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t first_channel = i % blocks * block, valid = std::min(block, b.c - first_channel);
    const int64_t plain_offset = (i / blocks * b.c + first_channel) * spatial, blocked_offset = i * spatial * block;
    const float* in = from + (to_plain ? blocked_offset : plain_offset);
    float* out = to + (to_plain ? plain_offset : blocked_offset);
    int64_t p = 0;
    // Whole blocks, 8 pixels x 8 channels at a time: load 8 rows of the source, transpose.
    for (; valid == block && p + 8 <= spatial; p += 8)
      for (int64_t g = 0; g < block; g += 8) {
        Float8 r[8];
        for (int64_t q = 0; q < 8; ++q)
          std::memcpy(&r[q], to_plain ? in + (p + q) * block + g : in + (g + q) * spatial + p, sizeof r[q]);
        transpose_8x8(r);
        for (int64_t q = 0; q < 8; ++q)
          std::memcpy(to_plain ? out + (g + q) * spatial + p : out + (p + q) * block + g, &r[q], sizeof r[q]);
      }
    // The other pixels, and a last block of fewer channels (zeros past them when blocking).
    for (; p < spatial; ++p)
      for (int64_t j = 0; j < block; ++j) {
        if (to_plain) {
          if (j < valid) out[j * spatial + p] = in[p * block + j];
        } else {
          out[p * block + j] = j < valid ? in[j * spatial + p] : 0.0f;
        }
      }
  }
}

}  // namespace

ChannelBlocks ChannelBlocks::between(const memory::desc& from, const memory::desc& to) {
  const memory::dims dims = from.dims();
  if (dims.size() < 3 || dims.size() > 5 || dims != to.dims() || from.data_type() != memory::data_type::f32 ||
      to.data_type() != memory::data_type::f32) {
    return {};
  }
  const memory::desc plain = plain_desc(dims, memory::data_type::f32);
  for (int64_t block : {8, 16}) {
    const memory::desc blocked(dims, memory::data_type::f32, channel_blocked_tag(dims.size(), block));
    const bool to_plain = from == blocked && to == plain;
    if (to_plain || (from == plain && to == blocked)) {
      const int64_t spatial = shape_size(std::span(dims).subspan(2));
      return {dims[0], dims[1], spatial, block, to_plain};
    }
  }
  return {};
}

void ChannelBlocks::run(const float* from, float* to) const {
  const int64_t blocks = (c + block - 1) / block;
  parallel_for(n * blocks, 1, [&](int64_t begin, int64_t end) { change_blocks(*this, from, to, begin, end); });
}

Reorder::Reorder(const memory::desc& from, const memory::desc& to, int threads)
    : blocks_(ChannelBlocks::between(from, to)),
      threads_(threads_for(static_cast<double>(from.get_size()), kBytesPerThread, threads)) {
  if (blocks_.block != 0) return;
  ThreadScope scope(threads_);
  primitive_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
  args_.emplace(DNNL_ARG_FROM, memory(from, engine(), DNNL_MEMORY_NONE));
  args_.emplace(DNNL_ARG_TO, memory(to, engine(), DNNL_MEMORY_NONE));
}

void Reorder::run(const void* source, void* target) {
  ThreadScope scope(threads_);
  if (blocks_.block != 0) {
    blocks_.run(static_cast<const float*>(source), static_cast<float*>(target));
    return;
  }
  args_.at(DNNL_ARG_FROM).set_data_handle(const_cast<void*>(source));
  args_.at(DNNL_ARG_TO).set_data_handle(target);
  execute(primitive_, args_);
}

const Tensor& PackedConstant::in_layout(const memory::desc& from, const void* source, const memory::desc& to) {
  for (const auto& [layout, packed] : layouts_)
    if (layout == to) return packed;
  Tensor packed = Tensor::empty(DType::kUInt8, {static_cast<int64_t>(to.get_size())});
  reorder(from, source, to, packed.raw_data());
  return layouts_.emplace_back(to, std::move(packed)).second;
}

// Converts n elements between float32 and a 16-bit float type with a oneDNN reorder
// (vectorized, F16C / AVX-512 BF16 conversions); false for other types.
bool convert_16bit(DType from, const void* in, DType to, void* out, int64_t n) {
  const auto from_type = data_type(from), to_type = data_type(to);
  const bool sixteen =
      from == DType::kFloat16 || from == DType::kBFloat16 || to == DType::kFloat16 || to == DType::kBFloat16;
  if (!sixteen || !from_type || !to_type || n == 0) return n == 0;
  reorder(plain_desc({n}, *from_type), in, plain_desc({n}, *to_type), out);
  return true;
}

Tensor to_float32(KernelContext& ctx, const Tensor& tensor) {
  Tensor out = ctx.allocate_scratch(DType::kFloat32, tensor.shape());
  if (convert_16bit(tensor.dtype(), tensor.raw_data(), DType::kFloat32, out.raw_data(), tensor.numel())) return out;
  dispatch<double, float>(tensor.dtype(), "to_float32",
                          [&]<typename T>() { convert(tensor.data<T>(), out.data<float>(), tensor.numel()); });
  return out;
}

Tensor float32_copy(const Tensor& tensor) {
  Tensor out = Tensor::empty(DType::kFloat32, tensor.shape());
  if (convert_16bit(tensor.dtype(), tensor.raw_data(), DType::kFloat32, out.raw_data(), tensor.numel())) return out;
  dispatch<double, float>(tensor.dtype(), "float32_copy",
                          [&]<typename T>() { convert(tensor.data<T>(), out.data<float>(), tensor.numel()); });
  return out;
}

void from_float32(const Tensor& values, Tensor& out) {
  if (convert_16bit(DType::kFloat32, values.raw_data(), out.dtype(), out.raw_data(), out.numel())) return;
  dispatch<double, float>(out.dtype(), "from_float32",
                          [&]<typename T>() { convert(values.data<float>(), out.data<T>(), out.numel()); });
}

void BatchedMatmul::run(const float* a, const float* b, float* c, int64_t batch, int64_t m, int64_t k, int64_t n,
                        bool a_t, bool b_t) {
  const auto f32 = memory::data_type::f32;
  const memory::desc a_md({batch, m, k}, f32, a_t ? memory::dims{m * k, 1, m} : memory::dims{m * k, k, 1});
  const memory::desc b_md({batch, k, n}, f32, b_t ? memory::dims{k * n, 1, k} : memory::dims{k * n, n, 1});
  const memory::desc c_md = plain_desc({batch, m, n}, f32);
  const dnnl::matmul& primitive = cache_.get({batch, m, k, n, a_t, b_t}, [&] {
    return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine()));
  });
  execute(primitive, {{DNNL_ARG_SRC, wrap(a_md, a)}, {DNNL_ARG_WEIGHTS, wrap(b_md, b)}, {DNNL_ARG_DST, wrap(c_md, c)}});
}

}  // namespace onnxtrain::onednn
