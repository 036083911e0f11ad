#include <onnxtrain/packed.h>
#include <onnxtrain/tensor.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/dispatch.h"

namespace onnxtrain {

int64_t shape_size(std::span<const int64_t> shape) noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t tensor_bytes(DType dtype, std::span<const int64_t> shape) {
  constexpr uint64_t kMaxBytes = uint64_t{1} << 62;
  uint64_t elements = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) throw Error("negative dimension in shape " + shape_string(shape), ErrorKind::kInvalidArgument);
    overflow |= __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements);
  }
  uint64_t bits = 0;
  overflow |= __builtin_mul_overflow(elements, static_cast<uint64_t>(dtype_bits(dtype)), &bits);
  const uint64_t bytes = bits / 8 + (bits % 8 != 0);
  if (overflow || bytes > kMaxBytes) {
    throw Error("a " + std::string(dtype_name(dtype)) + " tensor of shape " + shape_string(shape) +
                    " is too large (more than 2^62 bytes)",
                ErrorKind::kInvalidArgument);
  }
  return static_cast<size_t>(bytes);
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

namespace {

std::atomic<uint64_t> heap_allocations{0};

// Blocks of this size or more are mapped from the system and unmapped when released. From
// the heap, they would stay resident after their release: glibc raises its mmap threshold to
// the largest block freed so far, and then keeps such blocks in its heap, where buffers of
// different lifetimes (a run's gradients handed to the caller, the next run's) fragment it
// (ResNet-18's gradient model, batch 16, one thread: the heap grew by 50 MB beyond the live
// buffers over a few runs).
constexpr size_t kMappedBytes = size_t{1} << 20;
// Where the data starts in its mapping. Buffers that all start on a page boundary map
// their first lines to the same cache sets and evict each other when a kernel streams
// several at once (ResNet-18's gradient step, 2 threads: 101-113 ms with page-aligned
// buffers, 84 ms 64 bytes in, where glibc's own mapped blocks start too).
constexpr size_t kMappedOffset = 64;

// Mapped blocks, and the released ones kept for reuse: a training step asks for blocks of
// the same sizes as the step before (its gradients), and a fresh mapping would fault in
// every page again (ResNet-18's gradient step, 2 threads: 90 -> 108 ms). Keeps at most
// kKeptBytes, the most recently released first.
class MappedBlocks {
 public:
  static MappedBlocks& instance() {
    static MappedBlocks* blocks = new MappedBlocks;  // never destroyed: storages may outlive statics
    return *blocks;
  }

  void* take(size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
        if (it->second != bytes) continue;
        void* data = it->first;
        kept_bytes_ -= bytes;
        kept_.erase(std::next(it).base());
        return data;
      }
    }
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
    return data;
  }

  void unmap_kept() noexcept {
    std::vector<std::pair<void*, size_t>> unmap;
    {
      std::lock_guard lock(mutex_);
      unmap.swap(kept_);
      kept_bytes_ = 0;
    }
    for (const auto& [block, size] : unmap) munmap(block, size);
  }

  void give_back(void* data, size_t bytes) noexcept {
    std::vector<std::pair<void*, size_t>> unmap;
    {
      std::lock_guard lock(mutex_);
      kept_.emplace_back(data, bytes);
      kept_bytes_ += bytes;
      while (kept_bytes_ > kKeptBytes) {
        unmap.push_back(kept_.front());
        kept_bytes_ -= kept_.front().second;
        kept_.erase(kept_.begin());
      }
    }
    for (const auto& [block, size] : unmap) munmap(block, size);
  }

 private:
  static constexpr size_t kKeptBytes = size_t{256} << 20;
  std::mutex mutex_;
  std::vector<std::pair<void*, size_t>> kept_;  // oldest first
  size_t kept_bytes_ = 0;
};

}  // namespace

uint64_t Storage::heap_allocation_count() noexcept {
  return heap_allocations.load(std::memory_order_relaxed);
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (bytes >= kMappedBytes) {
    const size_t mapped = bytes + kMappedOffset;
    void* block = MappedBlocks::instance().take(mapped);
    return std::make_shared<Storage>(static_cast<std::byte*>(block) + kMappedOffset, bytes, StorageOrigin::kHeap,
                                     [block, mapped] { MappedBlocks::instance().give_back(block, mapped); });
  }
  constexpr size_t kAlignment = 64;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* data = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (data == nullptr) {
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  return std::make_shared<Storage>(static_cast<std::byte*>(data), bytes, StorageOrigin::kHeap,
                                   [data] { std::free(data); });
}

void Storage::release_kept_blocks() noexcept {
  MappedBlocks::instance().unmap_kept();
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, std::shared_ptr<void> keep_alive) {
  return std::make_shared<Storage>(static_cast<std::byte*>(data), bytes, StorageOrigin::kExternal,
                                   [keep_alive = std::move(keep_alive)] {});
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t byte_offset)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)), offset_(byte_offset) {
  const size_t bytes = tensor_bytes(dtype_, shape_);
  if (!is_supported(dtype_)) {
    throw Error("unsupported tensor element type " + std::string(dtype_name(dtype_)), ErrorKind::kNotImplemented);
  }
  if (storage_ && (offset_ > storage_->bytes() || bytes > storage_->bytes() - offset_)) {
    throw Error("tensor of shape " + shape_string(shape_) + " does not fit its buffer");
  }
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  if (!is_supported(dtype)) {
    throw Error("unsupported tensor element type " + std::string(dtype_name(dtype)), ErrorKind::kNotImplemented);
  }
  const size_t bytes = tensor_bytes(dtype, shape);
  return Tensor(dtype, std::move(shape), Storage::allocate(bytes));
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor tensor = empty(dtype, std::move(shape));
  std::memset(tensor.raw_data(), 0, tensor.nbytes());
  return tensor;
}

int64_t Tensor::dim(int64_t axis) const {
  const auto r = static_cast<int64_t>(rank());
  if (axis < -r || axis >= r) {
    throw Error("axis " + std::to_string(axis) + " is out of range for a tensor of rank " + std::to_string(r),
                ErrorKind::kInvalidArgument);
  }
  return shape_[static_cast<size_t>(axis < 0 ? axis + r : axis)];
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_size(shape) != numel()) {
    throw Error("cannot reshape " + shape_string(shape_) + " to " + shape_string(shape), ErrorKind::kInvalidArgument);
  }
  return Tensor(dtype_, std::move(shape), storage_, offset_);
}

Tensor Tensor::sequence(DType element_dtype, std::vector<Tensor> tensors) {
  if (!is_supported(element_dtype)) {
    throw Error("a sequence of " + std::string(dtype_name(element_dtype)) + " tensors: not an element type",
                ErrorKind::kInvalidArgument);
  }
  for (Tensor& t : tensors) {
    if (t.dtype() != element_dtype) {
      throw Error("a sequence of " + std::string(dtype_name(element_dtype)) +
                      " tensors cannot hold an element of type " + std::string(dtype_name(t.dtype())),
                  ErrorKind::kInvalidArgument);
    }
    if (t.storage() && t.storage()->origin() == StorageOrigin::kArena) t = t.clone();
  }
  Tensor value;
  value.dtype_ = DType::kSequence;
  value.sequence_ = std::make_shared<const TensorSequence>(TensorSequence{element_dtype, std::move(tensors)});
  return value;
}

Tensor Tensor::none() {
  Tensor value;
  value.dtype_ = DType::kNone;
  return value;
}

const TensorSequence& Tensor::sequence() const {
  if (!is_sequence()) {
    throw Error("expected a sequence, got a " + std::string(dtype_name(dtype_)) + " value",
                ErrorKind::kInvalidArgument);
  }
  return *sequence_;
}

Tensor Tensor::clone() const {
  if (is_none()) return none();
  if (is_sequence()) {
    std::vector<Tensor> copies;
    copies.reserve(sequence_->tensors.size());
    for (const Tensor& t : sequence_->tensors) copies.push_back(t.clone());
    return sequence(sequence_->element_dtype, std::move(copies));
  }
  Tensor copy = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(copy.raw_data(), raw_data(), nbytes());
  return copy;
}

void Tensor::copy_from(const Tensor& source) {
  if (source.dtype_ != dtype_ || source.numel() != numel()) {
    throw Error("copy_from: cannot copy " + std::string(dtype_name(source.dtype_)) + shape_string(source.shape_) +
                " into " + std::string(dtype_name(dtype_)) + shape_string(shape_));
  }
  if (nbytes() && raw_data() != source.raw_data()) std::memmove(raw_data(), source.raw_data(), nbytes());
}

void Tensor::throw_type_mismatch(DType requested) const {
  throw Error("tensor holds " + std::string(dtype_name(dtype_)) + ", not " + std::string(dtype_name(requested)));
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  if (dtype_ == DType::kInt4 || dtype_ == DType::kUInt4) {
    std::vector<int64_t> out(static_cast<size_t>(numel()));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = packed::get_int(raw_data(), static_cast<int64_t>(i), dtype_ == DType::kInt4);
    return out;
  }
  return dispatch<ONNXTRAIN_NUMERIC_TYPES, bool>(dtype_, "to_int64_vector", [&]<typename T>() {
    std::vector<int64_t> out(static_cast<size_t>(numel()));
    const T* in = data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(static_cast<compute_type_t<T>>(in[i]));
    return out;
  });
}

int64_t Tensor::item_as_int64() const {
  if (numel() != 1) {
    throw Error("expected a single value, got a tensor of shape " + shape_string(shape_), ErrorKind::kInvalidArgument);
  }
  return to_int64_vector()[0];
}

double Tensor::item_as_double() const {
  if (numel() != 1) {
    throw Error("expected a single value, got a tensor of shape " + shape_string(shape_), ErrorKind::kInvalidArgument);
  }
  return dispatch<ONNXTRAIN_NUMERIC_TYPES, bool>(dtype_, "item_as_double", [&]<typename T>() {
    return static_cast<double>(static_cast<compute_type_t<T>>(data<T>()[0]));
  });
}

}  // namespace onnxtrain
