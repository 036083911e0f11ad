// numpy / DLPack arrays <-> onnxtrain::Tensor for the Python module.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <onnxtrain/inference_session.h>
#include <onnxtrain/tensor.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace onnxtrain::bindings {

using HostArray = nanobind::ndarray<nanobind::ro, nanobind::c_contig, nanobind::device::cpu>;

// `value` as a HostArray; otherwise an Error (kInvalidArgument) that says `what` got instead:
// the numpy dtype that has no tensor type (strings, objects), the device, or the type.
HostArray host_array(nanobind::handle value, const std::string& what);
// Element types numpy has no type of its own for (bfloat16, float8, the 4-bit types) cross as
// their bits: a uint16 array for bfloat16, a uint8 array with one element per byte for the
// others (ml_dtypes' layout; the Python side views them as ml_dtypes types). `typed` names
// such arrays and the ONNX element type whose bits they hold.
using TypedInputs = std::unordered_map<std::string, int32_t>;

// Borrows the array's memory (no copy): valid while the array is alive. With `as` set, the
// array holds the bits of that type; a packed 4-bit type is packed into a copy.
Tensor borrow_array(const HostArray& array, const std::string& what, DType as = DType::kUndefined);
// A numpy array that owns `tensor` (no copy), or the bits of a type numpy lacks (see above;
// the 4-bit types unpacked into a copy).
nanobind::object to_numpy(Tensor tensor);
// to_numpy for a tensor, a list of arrays (copies) for a sequence, None for an empty optional.
nanobind::object to_python(Tensor value);
// True when to_numpy hands out `dtype` as bits.
bool numpy_lacks(DType dtype);
// A torch.Tensor that owns `tensor` (no copy, by DLPack); bfloat16 stays bfloat16.
nanobind::object to_torch(Tensor tensor);

// The feeds of a dict {name: array}, borrowed (no copy): `keep` holds the arrays, and must
// outlive the tensors. A list or tuple of arrays is a sequence (of the element type
// `declared` gives when it is empty; float without), None an optional without a value.
NamedTensors borrow_feeds(nanobind::dict feeds, std::vector<HostArray>& keep, const TypedInputs& typed = {},
                          const std::vector<ValueMetadata>* declared = nullptr);

}  // namespace onnxtrain::bindings
