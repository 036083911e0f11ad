// Tensor: a typed, shaped view of a reference-counted buffer.
#pragma once

#include <onnxtrain/device.h>
#include <onnxtrain/dtype.h>
#include <onnxtrain/error.h>
#include <onnxtrain/float16.h>
#include <onnxtrain/float8.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace onnxtrain {

using Shape = std::vector<int64_t>;

// Number of elements of a shape (1 for a scalar).
int64_t shape_size(std::span<const int64_t> shape) noexcept;
// The bytes of a dense `dtype` tensor of `shape`, checked: a negative dimension, or a size
// that overflows or exceeds 2^62 bytes, throws Error (kInvalidArgument) naming the shape. Every
// buffer size and offset computed from a shape that did not come from a live tensor goes
// through it.
size_t tensor_bytes(DType dtype, std::span<const int64_t> shape);
// "[2, 3, 4]"
std::string shape_string(std::span<const int64_t> shape);

// Where a buffer's bytes came from; the runtime uses it to decide what may be reused or
// must be copied before it leaves a session.
// kArena: a runtime-managed intermediate buffer, valid only during a run.
enum class StorageOrigin { kHeap, kArena, kExternal };

// A block of bytes on a device. Destroying the last reference runs the release function.
class Storage {
 public:
  Storage(std::byte* data, size_t bytes, StorageOrigin origin, std::function<void()> release,
          Device device = Device::cpu())
      : data_(data), bytes_(bytes), origin_(origin), device_(device), release_(std::move(release)) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release_) release_();
  }

  std::byte* data() const noexcept { return data_; }
  size_t bytes() const noexcept { return bytes_; }
  StorageOrigin origin() const noexcept { return origin_; }
  // Where the bytes live: data() is a host pointer only on the CPU.
  Device device() const noexcept { return device_; }

  // A fresh 64-byte-aligned heap block. Blocks of 1 MiB or more are mapped from the
  // system; released ones are kept (up to 256 MiB) for allocations of the same size.
  static std::shared_ptr<Storage> allocate(size_t bytes);
  // Returns the kept released blocks to the system.
  static void release_kept_blocks() noexcept;
  // How many blocks allocate() has handed out so far (for tests of the memory plan).
  static uint64_t heap_allocation_count() noexcept;
  // Borrowed memory; `keep_alive` is held until the storage is released.
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, std::shared_ptr<void> keep_alive);

 private:
  std::byte* data_;
  size_t bytes_;
  StorageOrigin origin_;
  Device device_;
  std::function<void()> release_;
};

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::kFloat64;
  else if constexpr (std::is_same_v<T, Float16>)
    return DType::kFloat16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DType::kBFloat16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DType::kInt8;
  else if constexpr (std::is_same_v<T, int16_t>)
    return DType::kInt16;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::kInt64;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::kUInt8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return DType::kUInt16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return DType::kUInt32;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return DType::kUInt64;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::kBool;
  else if constexpr (std::is_same_v<T, Float8E4M3FN>)
    return DType::kFloat8E4M3FN;
  else if constexpr (std::is_same_v<T, Float8E4M3FNUZ>)
    return DType::kFloat8E4M3FNUZ;
  else if constexpr (std::is_same_v<T, Float8E5M2>)
    return DType::kFloat8E5M2;
  else if constexpr (std::is_same_v<T, Float8E5M2FNUZ>)
    return DType::kFloat8E5M2FNUZ;
  else if constexpr (std::is_same_v<T, Float8E8M0>)
    return DType::kFloat8E8M0;
  else
    static_assert(sizeof(T) == 0, "no DType for this C++ type");
}

struct TensorSequence;

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t byte_offset = 0);

  // A new, uninitialized heap tensor.
  static Tensor empty(DType dtype, Shape shape);
  // A new heap tensor filled with zeros.
  static Tensor zeros(DType dtype, Shape shape);
  // A new heap tensor holding a copy of `values`.
  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  template <typename T>
  static Tensor scalar(T value) {
    return from_vector<T>({}, std::vector<T>{value});
  }
  // ONNX's seq(tensor): a value of dtype kSequence and shape [] holding `tensors`, each of
  // `element_dtype`. Elements in a run's arena are copied (the arena is reused once the run
  // ends); others are shared, not copied. Throws when an element has another dtype.
  static Tensor sequence(DType element_dtype, std::vector<Tensor> tensors);
  // An optional without a value (dtype kNone). A present optional is its value itself.
  static Tensor none();

  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  int64_t dim(int64_t axis) const;  // negative axes count from the end
  size_t rank() const noexcept { return shape_.size(); }
  int64_t numel() const noexcept { return shape_size(shape_); }
  size_t nbytes() const noexcept { return dtype_bytes(dtype_, static_cast<size_t>(numel())); }
  bool defined() const noexcept { return dtype_ != DType::kUndefined; }
  bool is_sequence() const noexcept { return dtype_ == DType::kSequence; }
  bool is_none() const noexcept { return dtype_ == DType::kNone; }
  // The tensors of a sequence value; throws Error (kInvalidArgument) for any other value.
  const TensorSequence& sequence() const;

  void* raw_data() noexcept { return storage_ ? storage_->data() + offset_ : nullptr; }
  const void* raw_data() const noexcept { return storage_ ? storage_->data() + offset_ : nullptr; }

  template <typename T>
  T* data() {
    check_type<T>();
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    check_type<T>();
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  std::span<const T> values() const {
    return {data<T>(), static_cast<size_t>(numel())};
  }

  // The same bytes under another shape of equal element count.
  Tensor reshaped(Shape shape) const;
  // A deep copy into a new heap buffer (of every element, for a sequence).
  Tensor clone() const;
  // Copies the elements of `source` (same dtype and element count) into this tensor.
  void copy_from(const Tensor& source);

  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }
  size_t byte_offset() const noexcept { return offset_; }
  Device device() const noexcept { return storage_ ? storage_->device() : Device::cpu(); }

  // Reads a scalar or 1-element tensor of any integer type as int64.
  int64_t item_as_int64() const;
  // Reads any numeric tensor as int64 values (for shape-like inputs).
  std::vector<int64_t> to_int64_vector() const;
  // Reads a scalar or 1-element tensor of any numeric type as double.
  double item_as_double() const;

 private:
  template <typename T>
  void check_type() const {
    if (dtype_of<std::remove_cv_t<T>>() != dtype_) throw_type_mismatch(dtype_of<std::remove_cv_t<T>>());
  }
  [[noreturn]] void throw_type_mismatch(DType requested) const;

  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  std::shared_ptr<const TensorSequence> sequence_;  // dtype kSequence only
};

// The tensors of a sequence value. Immutable once made: the sequence ops make new
// sequences, which share the tensors they keep.
struct TensorSequence {
  DType element_dtype = DType::kUndefined;
  std::vector<Tensor> tensors;
};

template <typename T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor tensor = empty(dtype_of<T>(), std::move(shape));
  if (static_cast<size_t>(tensor.numel()) != values.size()) {
    throw Error("Tensor::from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                    shape_string(tensor.shape()),
                ErrorKind::kInvalidArgument);
  }
  T* out = tensor.data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return tensor;
}

}  // namespace onnxtrain
