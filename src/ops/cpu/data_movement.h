// What the data-movement kernels (shape.cc, copy.cc) share: reading shape-like integer
// inputs, and one strided copy that serves every element type (these ops move elements
// without looking at them, so they work on element sizes).
#pragma once

#include <onnxtrain/tensor.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ops/cpu/axis.h"
#include "ops/kernel.h"

namespace onnxtrain::data_movement {

// The elements of an integer tensor (int64 or int32) as int64.
std::vector<int64_t> int64_values(const KernelContext& ctx, const Tensor& t, std::string_view what);
// The values of input i, a list of integers (a 1-D tensor, or a scalar as one value): a
// tensor of higher rank is refused (ConstantOfShape of a [3,3,3,3] "shape" would make a
// rank-81 tensor of its 81 values).
std::vector<int64_t> int_list(const KernelContext& ctx, size_t i, const std::string& name);
// The values of an optional 1-D integer input, or nullopt when it is absent.
std::optional<std::vector<int64_t>> optional_ints(const KernelContext& ctx, size_t i);
// The values of a required 1-D integer input; a missing one (an empty name) fails naming it.
std::vector<int64_t> required_ints(const KernelContext& ctx, size_t i, std::string_view name);
// The one value of a scalar or 1-element tensor, as double.
double scalar_value(const KernelContext& ctx, const Tensor& t, std::string_view what);

// A strided view: output index (i_0, ..., i_n) reads element offset + sum i_d * strides[d]
// of the source (strides in elements; 0 broadcasts, negative walks backwards).
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// Drops size-1 axes and merges neighbours that walk the source as one axis, so that the
// copy loops see as few and as long axes as possible.
StridedView collapse(const StridedView& view);
// Copies a strided view of `src` into the contiguous `dst`.
void copy_strided(void* dst, const void* src, const StridedView& view, size_t element_size);
// The shape of `parts` concatenated along `axis`; fails naming the `noun` ("input 2")
// whose element type or other dimensions differ from the first's.
Shape concatenated_shape(const KernelContext& ctx, std::span<const Tensor* const> parts, size_t axis,
                         std::string_view noun);
// Writes `parts` one after another along `axis` into `out`, whose shape is theirs with that
// axis summed (the caller checks the shapes).
void concatenate(std::span<const Tensor* const> parts, size_t axis, Tensor& out);
// Output `i` is `view` of `input`: the input's own bytes when the view is contiguous,
// otherwise a copy.
void output_strided(KernelContext& ctx, size_t i, const Tensor& input, Shape out_shape, const StridedView& view);

}  // namespace onnxtrain::data_movement
