// Shape kernels: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Trilu, EyeLike, Shape, Size,
// Range, ConstantOfShape, Constant (copy.cc holds the ops that copy parts of their inputs).
//
// Ops whose result is the input's bytes in the same order (Reshape, Flatten, Squeeze,
// Unsqueeze, and Transpose when it happens to be contiguous) return views.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/data_movement.h"
#include "ops/cpu/layout.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using data_movement::int64_values;
using data_movement::optional_ints;
using data_movement::output_strided;
using data_movement::required_ints;
using data_movement::StridedView;

// ---------------------------------------------------------------------------------------
// Reshape, Flatten, Squeeze, Unsqueeze: views.

Shape reshape_target(const KernelContext& ctx, const Shape& in, const std::vector<int64_t>& requested,
                     bool allow_zero) {
  Shape out(requested.size());
  int64_t infer = -1;
  int64_t known = 1;
  bool has_zero = false;
  for (size_t d = 0; d < requested.size(); ++d) {
    const int64_t r = requested[d];
    if (r == -1) {
      if (infer >= 0) ctx.fail("shape " + shape_string(requested) + " has more than one -1");
      infer = static_cast<int64_t>(d);
      continue;
    }
    if (r < -1) ctx.fail("shape " + shape_string(requested) + " has a negative dimension other than -1");
    if (r == 0 && !allow_zero) {
      if (d >= in.size()) {
        ctx.fail("shape " + shape_string(requested) + " copies dimension " + std::to_string(d) + " (0) but the input " +
                 shape_string(in) + " has rank " + std::to_string(in.size()));
      }
      out[d] = in[d];
    } else {
      out[d] = r;
      has_zero |= r == 0;
    }
    known *= out[d];
  }
  const int64_t total = shape_size(in);
  if (infer >= 0) {
    if (has_zero) ctx.fail("shape " + shape_string(requested) + " has both 0 (allowzero=1) and -1");
    if (known == 0 || total % known != 0) {
      ctx.fail("cannot reshape " + shape_string(in) + " (" + std::to_string(total) + " elements) to " +
               shape_string(requested) + ": the -1 cannot be inferred");
    }
    out[static_cast<size_t>(infer)] = total / known;
  }
  if (shape_size(out) != total) {
    ctx.fail("cannot reshape " + shape_string(in) + " (" + std::to_string(total) + " elements) to " +
             shape_string(requested) + " (" + std::to_string(shape_size(out)) + " elements)");
  }
  return out;
}

// Reshape-5+: the shape is input 1; allowzero (14+) makes 0 a real zero-size dimension.
const KernelRegistration kReshape{
    "", "Reshape", 5, kLatestOpset, {.host_inputs = {1}, .packed_types = true}, [](const KernelInfo& info) {
      const bool allow_zero = info.bool_attribute("allowzero", false);
      return make_kernel([allow_zero](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const std::vector<int64_t> requested = required_ints(ctx, 1, "shape");
        ctx.set_output(0, x.reshaped(reshape_target(ctx, x.shape(), requested, allow_zero)));
      });
    }};

const KernelRegistration kFlatten{"", "Flatten", 1, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
                                    const int64_t axis = info.int_attribute("axis", 1);
                                    return make_kernel([axis](KernelContext& ctx) {
                                      const Tensor& x = ctx.input(0);
                                      const auto rank = static_cast<int64_t>(x.rank());
                                      if (axis < -rank || axis > rank) {
                                        ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " +
                                                 std::to_string(rank) + " (expected " + std::to_string(-rank) + ".." +
                                                 std::to_string(rank) + ")");
                                      }
                                      const auto split = static_cast<size_t>(axis < 0 ? axis + rank : axis);
                                      const Shape& s = x.shape();
                                      const int64_t outer = shape_size(std::span(s).first(split));
                                      const int64_t inner = shape_size(std::span(s).subspan(split));
                                      ctx.set_output(0, x.reshaped({outer, inner}));
                                    });
                                  }};

// Squeeze/Unsqueeze take `axes` as an attribute before opset 13 and as input 1 from 13.
std::optional<std::vector<int64_t>> axes_of(const KernelContext& ctx,
                                            const std::optional<std::vector<int64_t>>& attribute) {
  return attribute ? attribute : optional_ints(ctx, 1);
}

KernelFactory squeeze_factory(bool axes_is_input) {
  return [axes_is_input](const KernelInfo& info) {
    std::optional<std::vector<int64_t>> attribute;
    if (!axes_is_input && info.has_attribute("axes")) attribute = info.ints_attribute("axes");
    return make_kernel([attribute](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const auto rank = static_cast<int64_t>(x.rank());
      const std::optional<std::vector<int64_t>> axes = axes_of(ctx, attribute);
      std::vector<bool> drop(x.rank(), false);
      if (!axes) {
        for (size_t d = 0; d < x.rank(); ++d) drop[d] = x.shape()[d] == 1;
      } else {
        for (int64_t a : normalize_axes(ctx, *axes, rank)) {
          if (x.shape()[static_cast<size_t>(a)] != 1) {
            ctx.fail("cannot squeeze axis " + std::to_string(a) + " of shape " + shape_string(x.shape()) +
                     ": its size is " + std::to_string(x.shape()[static_cast<size_t>(a)]) + ", expected 1");
          }
          drop[static_cast<size_t>(a)] = true;
        }
      }
      Shape out;
      for (size_t d = 0; d < x.rank(); ++d) {
        if (!drop[d]) out.push_back(x.shape()[d]);
      }
      ctx.set_output(0, x.reshaped(std::move(out)));
    });
  };
}

const KernelRegistration kSqueeze1{"", "Squeeze", 1, 12, {.packed_types = true}, squeeze_factory(false)};
const KernelRegistration kSqueeze13{
    "", "Squeeze", 13, kLatestOpset, {.host_inputs = {1}, .packed_types = true}, squeeze_factory(true)};

KernelFactory unsqueeze_factory(bool axes_is_input) {
  return [axes_is_input](const KernelInfo& info) {
    std::optional<std::vector<int64_t>> attribute;
    if (!axes_is_input) attribute = info.ints_attribute("axes");
    return make_kernel([attribute](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::optional<std::vector<int64_t>> axes = axes_of(ctx, attribute);
      if (!axes) ctx.fail("input 'axes' is required");
      const auto rank = static_cast<int64_t>(x.rank() + axes->size());
      std::vector<bool> inserted(static_cast<size_t>(rank), false);
      for (int64_t a : normalize_axes(ctx, *axes, rank)) inserted[static_cast<size_t>(a)] = true;
      Shape out;
      size_t next = 0;
      for (int64_t d = 0; d < rank; ++d) out.push_back(inserted[static_cast<size_t>(d)] ? 1 : x.shape()[next++]);
      ctx.set_output(0, x.reshaped(std::move(out)));
    });
  };
}

const KernelRegistration kUnsqueeze1{"", "Unsqueeze", 1, 12, {.packed_types = true}, unsqueeze_factory(false)};
const KernelRegistration kUnsqueeze13{
    "", "Unsqueeze", 13, kLatestOpset, {.host_inputs = {1}, .packed_types = true}, unsqueeze_factory(true)};

// ---------------------------------------------------------------------------------------
// Transpose

const KernelRegistration kTranspose{"", "Transpose", 1, kLatestOpset, [](const KernelInfo& info) {
                                      std::optional<std::vector<int64_t>> perm;
                                      if (info.has_attribute("perm")) perm = info.ints_attribute("perm");
                                      return make_kernel([perm](KernelContext& ctx) {
                                        const Tensor& x = ctx.input(0);
                                        const size_t rank = x.rank();
                                        std::vector<int64_t> p(rank);
                                        if (perm) {
                                          if (perm->size() != rank) {
                                            ctx.fail("perm " + shape_string(*perm) + " has " +
                                                     std::to_string(perm->size()) +
                                                     " entries, expected the input rank " + std::to_string(rank));
                                          }
                                          p = normalize_axes(ctx, *perm, static_cast<int64_t>(rank), "perm");
                                        } else {
                                          for (size_t d = 0; d < rank; ++d) p[d] = static_cast<int64_t>(rank - 1 - d);
                                        }
                                        const std::vector<int64_t> in_strides = contiguous_strides(x.shape());
                                        StridedView view;
                                        for (size_t d = 0; d < rank; ++d) {
                                          view.shape.push_back(x.shape()[static_cast<size_t>(p[d])]);
                                          view.strides.push_back(in_strides[static_cast<size_t>(p[d])]);
                                        }
                                        Shape out_shape = view.shape;
                                        output_strided(ctx, 0, x, std::move(out_shape), view);
                                      });
                                    }};

// ---------------------------------------------------------------------------------------
// Trilu, EyeLike

const KernelRegistration kTrilu{
    "", "Trilu", 14, kLatestOpset, [](const KernelInfo& info) {
      const bool upper = info.bool_attribute("upper", true);
      return make_kernel([upper](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() < 2) ctx.fail("input has shape " + shape_string(x.shape()) + ", expected rank >= 2");
        int64_t k = 0;
        if (ctx.has_input(1)) {
          const std::vector<int64_t> kv = int64_values(ctx, ctx.input(1), "k");
          if (kv.size() != 1) ctx.fail("k has shape " + shape_string(ctx.input(1).shape()) + ", expected a scalar");
          k = kv[0];
        }
        const int64_t rows = x.dim(-2), cols = x.dim(-1);
        Tensor& out = ctx.allocate_output_in_place(0, 0, x.dtype(), x.shape());
        const size_t esize = dtype_size(x.dtype());
        const auto* src = static_cast<const std::byte*>(x.raw_data());
        auto* dst = static_cast<std::byte*>(out.raw_data());
        const int64_t total_rows = x.numel() / std::max<int64_t>(cols, 1);
        parallel_for(total_rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t r = begin; r < end; ++r) {
                         const int64_t i = r % rows;
                         // Kept columns: j >= i + k (upper) or j <= i + k (lower); the rest are zero.
                         const int64_t keep_begin = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
                         const int64_t keep_end = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
                         const size_t row = static_cast<size_t>(r * cols) * esize;
                         auto bytes = [&](int64_t n) { return static_cast<size_t>(n) * esize; };
                         std::memset(dst + row, 0, bytes(keep_begin));
                         if (dst != src)
                           std::memcpy(dst + row + bytes(keep_begin), src + row + bytes(keep_begin),
                                       bytes(keep_end - keep_begin));
                         std::memset(dst + row + bytes(keep_end), 0, bytes(cols - keep_end));
                       }
                     });
      });
    }};

// A tensor attribute's or input's dtype code, checked against what onnxtrain holds.
template <typename Where>
DType dtype_attribute(const Where& where, int64_t code) {
  const DType dtype = dtype_from_onnx(static_cast<int32_t>(code));
  if (!is_supported(dtype)) where.fail("unsupported dtype " + std::to_string(code));
  return dtype;
}

const KernelRegistration kEyeLike{"", "EyeLike", 9, kLatestOpset, [](const KernelInfo& info) {
                                    std::optional<DType> dtype;
                                    if (info.has_attribute("dtype"))
                                      dtype = dtype_attribute(info, info.int_attribute("dtype"));
                                    const int64_t k = info.int_attribute("k", 0);
                                    return make_kernel([dtype, k](KernelContext& ctx) {
                                      const Tensor& x = ctx.input(0);
                                      if (x.rank() != 2)
                                        ctx.fail("input has shape " + shape_string(x.shape()) + ", expected rank 2");
                                      Tensor& out = ctx.allocate_output(0, dtype.value_or(x.dtype()), x.shape());
                                      std::memset(out.raw_data(), 0, out.nbytes());
                                      dispatch<ONNXTRAIN_ALL_TYPES>(out.dtype(), "EyeLike", [&]<typename T>() {
                                        T* o = out.data<T>();
                                        const int64_t rows = x.shape()[0], cols = x.shape()[1];
                                        for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i)
                                          o[i * cols + i + k] = static_cast<T>(1);
                                      });
                                    });
                                  }};

// ---------------------------------------------------------------------------------------
// Shape, Size, Range, ConstantOfShape, Constant

const KernelRegistration kShape{
    "", "Shape", 1, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
      const int64_t start_attribute = info.opset() >= 15 ? info.int_attribute("start", 0) : 0;
      std::optional<int64_t> end_attribute;
      if (info.opset() >= 15 && info.has_attribute("end")) end_attribute = info.int_attribute("end");
      return make_kernel([=](KernelContext& ctx) {
        const Shape& s = ctx.input(0).shape();
        const auto rank = static_cast<int64_t>(s.size());
        auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
        const int64_t start = clamp(start_attribute);
        const int64_t end = std::max(start, clamp(end_attribute.value_or(rank)));
        Tensor& out = ctx.allocate_output(0, DType::kInt64, {end - start});
        std::copy(s.begin() + start, s.begin() + end, out.data<int64_t>());
      });
    }};

const KernelRegistration kSize{"", "Size", 1, kLatestOpset, {.packed_types = true}, [](const KernelInfo&) {
                                 return make_kernel([](KernelContext& ctx) {
                                   Tensor& out = ctx.allocate_output(0, DType::kInt64, {});
                                   *out.data<int64_t>() = ctx.input(0).numel();
                                 });
                               }};

const KernelRegistration kRange{
    "", "Range", 11, kLatestOpset, {.host_inputs = {0, 1, 2}}, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const DType dtype = ctx.input(0).dtype();
        for (size_t i = 0; i < 3; ++i) {
          const Tensor& t = ctx.input(i);
          if (t.numel() != 1)
            ctx.fail("input " + std::to_string(i) + " has shape " + shape_string(t.shape()) + ", expected a scalar");
          if (t.dtype() != dtype) {
            ctx.fail("input " + std::to_string(i) + " is " + std::string(dtype_name(t.dtype())) + ", expected " +
                     std::string(dtype_name(dtype)) + " like input 0");
          }
        }
        dispatch<float, double, int16_t, int32_t, int64_t>(dtype, "Range", [&]<typename T>() {
          const T start = ctx.input(0).data<T>()[0];
          const T limit = ctx.input(1).data<T>()[0];
          const T delta = ctx.input(2).data<T>()[0];
          if (delta == T(0)) ctx.fail("delta must not be 0");
          const double count =
              std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
          const auto n = static_cast<int64_t>(std::max(count, 0.0));
          T* out = ctx.allocate_output(0, dtype, {n}).template data<T>();
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
        });
      });
    }};

const KernelRegistration kConstantOfShape{
    "", "ConstantOfShape", 9, kLatestOpset, {.host_inputs = {0}}, [](const KernelInfo& info) {
      Tensor value = Tensor::scalar<float>(0.0f);
      if (const Tensor* t = info.tensor_attribute("value")) {
        if (t->numel() != 1) info.fail("value has shape " + shape_string(t->shape()) + ", expected one element");
        value = *t;
      }
      return make_kernel([value](KernelContext& ctx) {
        const Shape shape = required_ints(ctx, 0, "input");
        for (int64_t d : shape) {
          if (d < 0) ctx.fail("shape " + shape_string(shape) + " has a negative dimension");
        }
        Tensor& out = ctx.allocate_output(0, value.dtype(), shape);
        dispatch_by_size(dtype_size(value.dtype()), [&]<typename U>() {
          U bits;
          std::memcpy(&bits, value.raw_data(), sizeof(U));
          U* o = static_cast<U*>(out.raw_data());
          parallel_for(out.numel(), 65536, [&](int64_t begin, int64_t end) { std::fill(o + begin, o + end, bits); });
        });
      });
    }};

// The constants_to_initializers pass folds most Constant nodes; this kernel runs the rest.
const KernelRegistration kConstant{
    "", "Constant", 1, kLatestOpset, [](const KernelInfo& info) {
      const ir::Node& node = info.node();
      if (node.attributes.size() != 1) {
        info.fail("expected exactly one value attribute, got " + std::to_string(node.attributes.size()));
      }
      const ir::Attribute& a = node.attributes[0];
      Tensor value;
      if (a.name == "value") {
        value = a.t;
      } else if (a.name == "value_float") {
        value = Tensor::scalar<float>(a.f);
      } else if (a.name == "value_floats") {
        value = Tensor::from_vector<float>({static_cast<int64_t>(a.floats.size())}, a.floats);
      } else if (a.name == "value_int") {
        value = Tensor::scalar<int64_t>(a.i);
      } else if (a.name == "value_ints") {
        value = Tensor::from_vector<int64_t>({static_cast<int64_t>(a.ints.size())}, a.ints);
      } else if (a.name == "value_string" || a.name == "value_strings") {
        info.fail("attribute '" + a.name + "': string tensors are not supported");
      } else if (a.name == "sparse_value") {
        info.fail("attribute 'sparse_value': sparse tensors are not supported");
      } else {
        info.fail("unknown attribute '" + a.name + "' (expected value, value_float(s), value_int(s))");
      }
      if (!value.defined()) info.fail("attribute '" + a.name + "' holds no tensor");
      return make_kernel([value](KernelContext& ctx) { ctx.set_output(0, value); });
    }};

}  // namespace
}  // namespace onnxtrain
