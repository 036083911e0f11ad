// numpy / DLPack arrays <-> onnxtrain::Tensor for the Python module.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <onnxtrain/inference_session.h>
#include <onnxtrain/tensor.h>

#include <string>
#include <vector>

namespace onnxtrain::bindings {

using HostArray = nanobind::ndarray<nanobind::ro, nanobind::c_contig, nanobind::device::cpu>;

// `value` as a HostArray; otherwise an Error (kInvalidArgument) that says `what` got instead:
// the numpy dtype that has no tensor type (strings, objects), the device, or the type.
HostArray host_array(nanobind::handle value, const std::string& what);
// Borrows the array's memory (no copy): valid while the array is alive.
Tensor borrow_array(const HostArray& array, const std::string& what);
// A numpy array that owns `tensor` (no copy). bfloat16 comes out as uint16 bits.
nanobind::object to_numpy(Tensor tensor);
// A torch.Tensor that owns `tensor` (no copy, by DLPack); bfloat16 stays bfloat16.
nanobind::object to_torch(Tensor tensor);

// The feeds of a dict {name: array}, borrowed (no copy): `keep` holds the arrays, and must
// outlive the tensors. Arrays named in `bfloat16_inputs` hold bfloat16 bits as uint16.
NamedTensors borrow_feeds(nanobind::dict feeds, std::vector<HostArray>& keep,
                          const std::vector<std::string>& bfloat16_inputs = {});

}  // namespace onnxtrain::bindings
