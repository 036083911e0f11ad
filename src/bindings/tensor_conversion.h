// numpy / DLPack arrays <-> onnxtrain::Tensor for the Python module.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <onnxtrain/tensor.h>

namespace onnxtrain::bindings {

using HostArray = nanobind::ndarray<nanobind::ro, nanobind::c_contig, nanobind::device::cpu>;

// Borrows the array's memory (no copy): valid while the array is alive.
Tensor borrow_array(const HostArray& array, const std::string& what);
// A numpy array that owns `tensor` (no copy). bfloat16 comes out as uint16 bits.
nanobind::object to_numpy(Tensor tensor);

}  // namespace onnxtrain::bindings
