#include "bindings/tensor_conversion.h"

#include <nanobind/stl/string.h>
#include <onnxtrain/packed.h>

#include <algorithm>

namespace nb = nanobind;

namespace onnxtrain::bindings {
namespace {

DType dtype_from_dlpack(nb::dlpack::dtype t) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes != 1) return DType::kUndefined;
  switch (code) {
    case Code::Float:
      return t.bits == 32   ? DType::kFloat32
             : t.bits == 64 ? DType::kFloat64
             : t.bits == 16 ? DType::kFloat16
                            : DType::kUndefined;
    case Code::Bfloat:
      return t.bits == 16 ? DType::kBFloat16 : DType::kUndefined;
    case Code::Int:
      return t.bits == 8    ? DType::kInt8
             : t.bits == 16 ? DType::kInt16
             : t.bits == 32 ? DType::kInt32
             : t.bits == 64 ? DType::kInt64
                            : DType::kUndefined;
    case Code::UInt:
      return t.bits == 8    ? DType::kUInt8
             : t.bits == 16 ? DType::kUInt16
             : t.bits == 32 ? DType::kUInt32
             : t.bits == 64 ? DType::kUInt64
                            : DType::kUndefined;
    case Code::Bool:
      return t.bits == 8 ? DType::kBool : DType::kUndefined;
    default:
      return DType::kUndefined;
  }
}

nb::dlpack::dtype dlpack_from_dtype(DType dtype, bool has_bfloat16 = false) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, int bits) {
    nb::dlpack::dtype t;
    t.code = static_cast<uint8_t>(code);
    t.bits = static_cast<uint8_t>(bits);
    t.lanes = 1;
    return t;
  };
  switch (dtype) {
    case DType::kFloat32:
      return make(Code::Float, 32);
    case DType::kFloat64:
      return make(Code::Float, 64);
    case DType::kFloat16:
      return make(Code::Float, 16);
    case DType::kBFloat16:
      return make(has_bfloat16 ? Code::Bfloat : Code::UInt, 16);  // numpy has none
    case DType::kInt8:
      return make(Code::Int, 8);
    case DType::kInt16:
      return make(Code::Int, 16);
    case DType::kInt32:
      return make(Code::Int, 32);
    case DType::kInt64:
      return make(Code::Int, 64);
    case DType::kUInt8:
      return make(Code::UInt, 8);
    case DType::kUInt16:
      return make(Code::UInt, 16);
    case DType::kUInt32:
      return make(Code::UInt, 32);
    case DType::kUInt64:
      return make(Code::UInt, 64);
    case DType::kBool:
      return make(Code::Bool, 8);
    default:
      throw Error("cannot hand a " + std::string(dtype_name(dtype)) + " tensor to Python");
  }
}

// str(object.name), or "?" when Python cannot give it (the error is cleared).
std::string attribute_text(PyObject* object, const char* name) {
  nb::object attribute = nb::steal(PyObject_GetAttrString(object, name));
  nb::object text = attribute ? nb::steal(PyObject_Str(attribute.ptr())) : nb::object();
  Py_ssize_t size = 0;
  const char* data = text ? PyUnicode_AsUTF8AndSize(text.ptr(), &size) : nullptr;
  if (data == nullptr) {
    PyErr_Clear();
    return "?";
  }
  return std::string(data, static_cast<size_t>(size));
}

}  // namespace

HostArray host_array(nb::handle value, const std::string& what) {
  HostArray array;
  if (nb::try_cast(value, array)) return array;
  PyErr_Clear();  // numpy's refused DLPack export (a string array) may leave its error set
  std::string got = "a " + attribute_text(reinterpret_cast<PyObject*>(Py_TYPE(value.ptr())), "__name__");
  if (nb::hasattr(value, "dtype")) got += " of dtype " + attribute_text(value.ptr(), "dtype");
  if (nb::hasattr(value, "device")) got += " on device " + attribute_text(value.ptr(), "device");
  throw Error(what +
                  ": expected a C-contiguous CPU array of numbers or bools (numpy, or a DLPack tensor such as "
                  "torch's), got " +
                  got,
              ErrorKind::kInvalidArgument);
}

bool numpy_lacks(DType dtype) {
  return dtype == DType::kBFloat16 || is_narrow_float(dtype) || is_packed(dtype);
}

Tensor borrow_array(const HostArray& array, const std::string& what, DType as) {
  const DType dtype = dtype_from_dlpack(array.dtype());
  if (dtype == DType::kUndefined) {
    throw Error(what + ": unsupported array element type (code " + std::to_string(array.dtype().code) + ", " +
                    std::to_string(array.dtype().bits) + " bits)",
                ErrorKind::kInvalidArgument);
  }
  Shape shape(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) shape[i] = static_cast<int64_t>(array.shape(i));
  const size_t bytes = tensor_bytes(dtype, shape);
  Tensor tensor(dtype, std::move(shape), Storage::borrow(const_cast<void*>(array.data()), bytes, nullptr));
  if (as == DType::kUndefined || as == dtype) return tensor;
  if (!numpy_lacks(as)) {
    throw Error(what + ": an array of " + std::string(dtype_name(dtype)) + " cannot stand for " +
                    std::string(dtype_name(as)) + " (only bfloat16, float8 and 4-bit types cross as bits)",
                ErrorKind::kInvalidArgument);
  }
  const size_t element_bytes = is_packed(as) ? 1 : dtype_size(as);  // ml_dtypes: a byte per 4-bit element
  if (!is_integer(dtype) || dtype_size(dtype) != element_bytes) {
    throw Error(what + ": " + std::string(dtype_name(as)) + " data must come as uint" +
                    std::to_string(8 * element_bytes) + " bits (ml_dtypes' layout), got " +
                    std::string(dtype_name(dtype)),
                ErrorKind::kInvalidArgument);
  }
  if (!is_packed(as)) return Tensor(as, tensor.shape(), tensor.storage());
  Tensor out = Tensor::empty(as, tensor.shape());
  const auto* in = static_cast<const uint8_t*>(tensor.raw_data());
  packed::write(out.raw_data(), 0, tensor.numel(), [in](int64_t i) { return in[i]; });
  return out;
}

nb::object to_numpy(Tensor tensor) {
  constexpr size_t kNumpyMaxDims = 64;  // NPY_MAXDIMS of numpy 2
  if (tensor.rank() > kNumpyMaxDims) {
    throw Error("a result of shape " + shape_string(tensor.shape()) + " has " + std::to_string(tensor.rank()) +
                    " dimensions; numpy arrays hold at most 64",
                ErrorKind::kInvalidArgument);
  }
  if (is_packed(tensor.dtype())) {
    Tensor bytes = Tensor::empty(DType::kUInt8, tensor.shape());
    uint8_t* out = bytes.data<uint8_t>();
    for (int64_t i = 0; i < tensor.numel(); ++i) out[i] = packed::get(tensor.raw_data(), i);
    tensor = std::move(bytes);
  } else if (numpy_lacks(tensor.dtype())) {
    const DType bits = dtype_size(tensor.dtype()) == 2 ? DType::kUInt16 : DType::kUInt8;
    tensor = Tensor(bits, tensor.shape(), tensor.storage(), tensor.byte_offset());
  }
  auto* owned = new Tensor(std::move(tensor));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(owned->shape().begin(), owned->shape().end());
  nb::ndarray<nb::numpy> array(owned->raw_data(), shape.size(), shape.data(), owner, nullptr,
                               dlpack_from_dtype(owned->dtype()));
  return nb::cast(array, nb::rv_policy::reference);
}

nb::object to_torch(Tensor tensor) {
  auto* owned = new Tensor(std::move(tensor));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(owned->shape().begin(), owned->shape().end());
  nb::ndarray<nb::pytorch> array(owned->raw_data(), shape.size(), shape.data(), owner, nullptr,
                                 dlpack_from_dtype(owned->dtype(), true));
  return nb::cast(array, nb::rv_policy::reference);
}

nb::object to_python(Tensor value) {
  if (value.is_none()) return nb::none();
  if (!value.is_sequence()) return to_numpy(std::move(value));
  // A sequence's tensors may be shared with feeds, constants or other sequences: the
  // caller gets arrays of its own.
  nb::list elements;
  for (const Tensor& t : value.sequence().tensors) elements.append(to_numpy(t.clone()));
  return elements;
}

NamedTensors borrow_feeds(nb::dict feeds, std::vector<HostArray>& keep, const TypedInputs& typed,
                          const std::vector<ValueMetadata>* declared) {
  NamedTensors tensors;
  for (auto [key, value] : feeds) {
    const std::string name = nb::cast<std::string>(key);
    const auto typed_entry = typed.find(name);
    const DType as = typed_entry == typed.end() ? DType::kUndefined : dtype_from_onnx(typed_entry->second);
    if (value.is_none()) {
      tensors.emplace_back(name, Tensor::none());
      continue;
    }
    if (!nb::isinstance<nb::list>(value) && !nb::isinstance<nb::tuple>(value)) {
      HostArray array = host_array(value, "input '" + name + "'");
      tensors.emplace_back(name, borrow_array(array, "input '" + name + "'", as));
      keep.push_back(array);
      continue;
    }
    std::vector<Tensor> elements;
    size_t k = 0;
    for (nb::handle element : value) {
      const std::string what = "input '" + name + "', element " + std::to_string(k++);
      HostArray array = host_array(element, what);
      elements.push_back(borrow_array(array, what, as));
      keep.push_back(array);
    }
    DType element_dtype = elements.empty() ? DType::kFloat32 : elements.front().dtype();
    if (elements.empty() && declared) {
      for (const ValueMetadata& m : *declared) {
        if (m.name == name && m.element_dtype != DType::kUndefined) element_dtype = m.element_dtype;
      }
    }
    try {
      tensors.emplace_back(name, Tensor::sequence(element_dtype, std::move(elements)));
    } catch (const Error& e) {
      throw Error("input '" + name + "': " + e.what(), e.kind());
    }
  }
  return tensors;
}

}  // namespace onnxtrain::bindings
