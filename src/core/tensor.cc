#include <onnxtrain/tensor.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/dispatch.h"

namespace onnxtrain {

int64_t shape_size(std::span<const int64_t> shape) noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
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
}  // namespace

uint64_t Storage::heap_allocation_count() noexcept { return heap_allocations.load(std::memory_order_relaxed); }

std::shared_ptr<Storage> Storage::allocate(size_t bytes) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  constexpr size_t kAlignment = 64;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* data = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (data == nullptr) {
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  return std::make_shared<Storage>(static_cast<std::byte*>(data), bytes, StorageOrigin::kHeap,
                                   [data] { std::free(data); });
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, std::shared_ptr<void> keep_alive) {
  return std::make_shared<Storage>(static_cast<std::byte*>(data), bytes, StorageOrigin::kExternal,
                                   [keep_alive = std::move(keep_alive)] {});
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t byte_offset)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)), offset_(byte_offset) {
  for (int64_t d : shape_) {
    if (d < 0) throw Error("negative dimension in shape " + shape_string(shape_), ErrorKind::kInvalidArgument);
  }
  if (!is_supported(dtype_)) {
    throw Error("unsupported tensor element type " + std::string(dtype_name(dtype_)),
                ErrorKind::kNotImplemented);
  }
  if (storage_ && offset_ + nbytes() > storage_->bytes()) {
    throw Error("tensor of shape " + shape_string(shape_) + " does not fit its buffer");
  }
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  if (!is_supported(dtype)) {
    throw Error("unsupported tensor element type " + std::string(dtype_name(dtype)),
                ErrorKind::kNotImplemented);
  }
  const int64_t n = shape_size(shape);
  if (n < 0) throw Error("negative dimension in shape " + shape_string(shape), ErrorKind::kInvalidArgument);
  return Tensor(dtype, std::move(shape), Storage::allocate(static_cast<size_t>(n) * dtype_size(dtype)));
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor tensor = empty(dtype, std::move(shape));
  std::memset(tensor.raw_data(), 0, tensor.nbytes());
  return tensor;
}

int64_t Tensor::dim(int64_t axis) const {
  const auto r = static_cast<int64_t>(rank());
  if (axis < -r || axis >= r) {
    throw Error("axis " + std::to_string(axis) + " is out of range for a tensor of rank " +
                    std::to_string(r),
                ErrorKind::kInvalidArgument);
  }
  return shape_[static_cast<size_t>(axis < 0 ? axis + r : axis)];
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_size(shape) != numel()) {
    throw Error("cannot reshape " + shape_string(shape_) + " to " + shape_string(shape),
                ErrorKind::kInvalidArgument);
  }
  return Tensor(dtype_, std::move(shape), storage_, offset_);
}

Tensor Tensor::clone() const {
  Tensor copy = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(copy.raw_data(), raw_data(), nbytes());
  return copy;
}

void Tensor::copy_from(const Tensor& source) {
  if (source.dtype_ != dtype_ || source.numel() != numel()) {
    throw Error("copy_from: cannot copy " + std::string(dtype_name(source.dtype_)) +
                shape_string(source.shape_) + " into " + std::string(dtype_name(dtype_)) +
                shape_string(shape_));
  }
  if (nbytes() && raw_data() != source.raw_data()) std::memmove(raw_data(), source.raw_data(), nbytes());
}

void Tensor::throw_type_mismatch(DType requested) const {
  throw Error("tensor holds " + std::string(dtype_name(dtype_)) + ", not " +
              std::string(dtype_name(requested)));
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  return dispatch<ONNXTRAIN_NUMERIC_TYPES, bool>(dtype_, "to_int64_vector", [&]<typename T>() {
    std::vector<int64_t> out(static_cast<size_t>(numel()));
    const T* in = data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(static_cast<compute_type_t<T>>(in[i]));
    return out;
  });
}

int64_t Tensor::item_as_int64() const {
  if (numel() != 1) {
    throw Error("expected a single value, got a tensor of shape " + shape_string(shape_),
                ErrorKind::kInvalidArgument);
  }
  return to_int64_vector()[0];
}

double Tensor::item_as_double() const {
  if (numel() != 1) {
    throw Error("expected a single value, got a tensor of shape " + shape_string(shape_),
                ErrorKind::kInvalidArgument);
  }
  return dispatch<ONNXTRAIN_NUMERIC_TYPES, bool>(dtype_, "item_as_double", [&]<typename T>() {
    return static_cast<double>(static_cast<compute_type_t<T>>(data<T>()[0]));
  });
}

}  // namespace onnxtrain
