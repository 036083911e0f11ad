// Linear quantization: QuantizeLinear, DequantizeLinear (opsets 10 to 24: per tensor, per
// axis and blocked; 8-, 16- and 4-bit integers, float8 and float4 targets) and
// DynamicQuantizeLinear.
//
//   QuantizeLinear:   y = saturate(round(x / scale) + zero_point), round to nearest even
//   DequantizeLinear: y = (x - zero_point) * scale
//
// The division happens in the `precision` attribute's type when it is given, else in the
// type x and scale promote to (float16 only when both are float16, bfloat16 when both are
// bfloat16, double for int32 x, float otherwise), as onnx.reference does; the product of
// DequantizeLinear in float, rounded once to the output type. A float8/float4 target takes
// the quotient plus the zero point rounded to nearest even, saturating per the `saturate`
// attribute. NaN quantizes to the zero point for integer targets (ONNX leaves it undefined).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/convert.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/multiversion.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// Where the scale and zero point of x's element (o, d, i) are, x seen as [outer, D, inner]
// around the quantization axis: at o * outer_stride + (d / block) * axis_stride +
// i * inner_stride of their (equal) shapes. Per tensor all strides are 0; per axis only
// axis_stride is 1; blocked, the scale is [outer, ceil(D / block), inner].
struct Granularity {
  int64_t outer = 1, axis = 1, inner = 1;
  int64_t block = 1;
  int64_t outer_stride = 0, axis_stride = 0, inner_stride = 0;
  int64_t row_index(int64_t o, int64_t d) const { return o * outer_stride + (d / block) * axis_stride; }
};

struct QuantAttributes {
  int64_t axis = 1;
  int64_t block_size = 0;
  bool per_axis = false;  // opset 13+: a 1-D scale quantizes along `axis`
};

Granularity granularity(KernelContext& ctx, const Shape& x, const Shape& scale, const QuantAttributes& attrs) {
  Granularity g;
  const int64_t count = shape_size(scale);
  if (count == 1 && scale.size() <= 1) {  // per tensor: one row of every element
    g.inner = shape_size(x);
    return g;
  }
  const auto rank = static_cast<int64_t>(x.size());
  if (rank == 0) ctx.fail("the scale has shape " + shape_string(scale) + "; a scalar x takes a scalar scale");
  const int64_t axis = normalize_axis(ctx, attrs.axis, rank);
  const auto a = static_cast<size_t>(axis);
  g.outer = shape_size(std::span(x).first(a));
  g.axis = x[a];
  g.inner = shape_size(std::span(x).subspan(a + 1));
  if (attrs.block_size == 0) {
    if (!attrs.per_axis || scale.size() != 1 || scale[0] != x[a]) {
      ctx.fail("the scale has shape " + shape_string(scale) + "; expected a scalar" +
               (attrs.per_axis ? " or a 1-D tensor of x's " + std::to_string(x[a]) + " elements on axis " +
                                     std::to_string(axis) + " (x is " + shape_string(x) + ")"
                               : std::string(" in this opset")) +
               ", or block_size for blocked quantization");
    }
    g.axis_stride = 1;
    return g;
  }
  if (attrs.block_size < 0) ctx.fail("block_size is " + std::to_string(attrs.block_size) + ", expected 0 or more");
  Shape expected = x;
  expected[a] = (x[a] + attrs.block_size - 1) / attrs.block_size;
  if (scale != expected) {
    ctx.fail("the scale has shape " + shape_string(scale) + "; blocks of " + std::to_string(attrs.block_size) +
             " on axis " + std::to_string(axis) + " of x " + shape_string(x) + " need " + shape_string(expected));
  }
  g.block = attrs.block_size;
  g.inner_stride = 1;
  g.axis_stride = g.inner;
  g.outer_stride = expected[a] * g.inner;
  return g;
}

// The scale as float (float, float16, bfloat16 and float8e8m0 convert exactly), in scratch.
Tensor scale_values(KernelContext& ctx, const Tensor& scale) {
  Tensor out = ctx.allocate_scratch(DType::kFloat32, scale.shape());
  float* values = out.data<float>();
  convert::dispatch_element<convert::Standard<float>, convert::Standard<Float16>, convert::Standard<BFloat16>,
                            convert::Narrow<Float8E8M0>>(
      scale.dtype(), ctx.node().op_type + " scale", [&]<typename E>() {
        for (int64_t i = 0; i < scale.numel(); ++i) values[i] = static_cast<float>(E::read(scale.raw_data(), i));
      });
  return out;
}

// The zero point as double (every integer zero point and every float8 value is exact), in
// scratch; zeros of the scale's shape when it is absent.
Tensor zero_point_values(KernelContext& ctx, const Tensor* zero_point, const Shape& shape) {
  Tensor out = ctx.allocate_scratch(DType::kFloat64, shape);
  double* values = out.data<double>();
  if (zero_point == nullptr) {
    std::fill(values, values + out.numel(), 0.0);
    return out;
  }
  convert::dispatch_element<ONNXTRAIN_ALL_ELEMENTS>(
      zero_point->dtype(), ctx.node().op_type + " zero point", [&]<typename E>() {
        for (int64_t i = 0; i < zero_point->numel(); ++i)
          values[i] = static_cast<double>(E::read(zero_point->raw_data(), i));
      });
  return out;
}

// Runs body(begin, end, scale_index, scale_step) over the rows of x (runs of `inner`
// elements that share one row of the scale), in parallel: elements [begin, end) take scale
// entries scale_index + k * scale_step.
template <typename Body>
void for_each_row(const Granularity& g, const Body& body) {
  const int64_t rows = g.outer * g.axis, inner = g.inner;
  parallel_for(rows, std::max<int64_t>(1, elementwise::kGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t row = begin; row < end; ++row) {
                   body(row * inner, (row + 1) * inner, g.row_index(row / g.axis, row % g.axis), g.inner_stride);
                 }
               });
}

// The scale entry of x's element e.
int64_t scale_index(const Granularity& g, int64_t e) {
  const int64_t row = e / g.inner;
  return g.row_index(row / g.axis, row % g.axis) + (e % g.inner) * g.inner_stride;
}

// ---- QuantizeLinear ----

// The type x / scale is computed in (see the top of the file).
enum class Precision { kFloat, kFloat16, kBFloat16, kDouble };

Precision division_precision(DType x, DType scale, int64_t precision_attribute, const KernelInfo* info) {
  if (precision_attribute != 0) {
    switch (static_cast<DType>(precision_attribute)) {
      case DType::kFloat32:
        return Precision::kFloat;
      case DType::kFloat16:
        return Precision::kFloat16;
      case DType::kBFloat16:
        return Precision::kBFloat16;
      case DType::kFloat64:
        return Precision::kDouble;
      default:
        if (info)
          info->fail("attribute 'precision' is element type " + std::to_string(precision_attribute) +
                     ", expected float, float16 or bfloat16");
        return Precision::kFloat;
    }
  }
  if (x == DType::kInt32) return Precision::kDouble;
  if (x == scale && x == DType::kFloat16) return Precision::kFloat16;
  if (x == scale && x == DType::kBFloat16) return Precision::kBFloat16;
  return Precision::kFloat;
}

// v rounded to P's type, as float (or as double for P = double).
template <Precision P, typename V>
ONNXTRAIN_VECTOR_INLINE auto in_precision(V v) {
  if constexpr (P == Precision::kDouble) {
    return static_cast<double>(v);
  } else if constexpr (P == Precision::kFloat16) {
    return static_cast<float>(Float16(static_cast<float>(v)));
  } else if constexpr (P == Precision::kBFloat16) {
    return static_cast<float>(BFloat16(static_cast<float>(v)));
  } else {
    return static_cast<float>(v);
  }
}

// x / scale in `P`: both operands and the quotient rounded to P's type (onnx.reference
// casts x and the scale to `precision` before it divides), as float or double.
template <Precision P>
ONNXTRAIN_VECTOR_INLINE auto divide(double x, float scale) {
  return in_precision<P>(in_precision<P>(x) / in_precision<P>(scale));
}

template <Precision P>
ONNXTRAIN_VECTOR_INLINE float divide(float x, float scale) {
  static_assert(P != Precision::kDouble);
  return divide<P>(static_cast<double>(x), scale);
}

// saturate(round(v) + zero_point) into [lo, hi]; NaN gives the zero point.
template <typename V>
ONNXTRAIN_VECTOR_INLINE V quantize_integer(V v, V zero_point, V lo, V hi) {
  if constexpr (std::is_same_v<V, float>) {
    const float bounded = v != v ? 0.0f : std::min(std::max(v, -4194304.0f), 4194304.0f);  // |v| < 2^22
    return std::min(std::max(vector_math::round_to_int(bounded) + zero_point, lo), hi);
  } else {
    return v != v ? zero_point : std::min(std::max(std::nearbyint(v) + zero_point, lo), hi);
  }
}

template <typename Target>
constexpr bool is_integer_target() {
  if constexpr (Target::kPacked) {
    return Target::kDType != DType::kFloat4E2M1;
  } else {
    return std::is_integral_v<typename Target::Type>;
  }
}

// Quantizes x (elements of accessor Source) into out (accessor Target).
template <typename Source, typename Target, Precision P>
void quantize(const Tensor& x, const Granularity& g, const float* scale, const double* zero_point, void* out,
              const convert::Options& options) {
  using V = std::conditional_t<P == Precision::kDouble, double, float>;
  constexpr bool kIntegerTarget = is_integer_target<Target>();
  V lo = 0, hi = 0;
  if constexpr (kIntegerTarget) {
    if constexpr (Target::kPacked) {
      lo = Target::kDType == DType::kInt4 ? -8 : 0;
      hi = Target::kDType == DType::kInt4 ? 7 : 15;
    } else {
      lo = static_cast<V>(std::numeric_limits<typename Target::Type>::lowest());
      hi = static_cast<V>(std::numeric_limits<typename Target::Type>::max());
    }
  }
  const void* in = x.raw_data();
  // Element e with scale entry k.
  auto value = [&](int64_t e, int64_t k) {
    const V zp = static_cast<V>(zero_point[k]);
    const V v = divide<P>(static_cast<V>(Source::read(in, e)), scale[k]);
    if constexpr (kIntegerTarget) {
      return quantize_integer(v, zp, lo, hi);
    } else {
      return v + zp;
    }
  };
  if constexpr (Target::kPacked) {  // pairs of elements, which may straddle two rows
    convert::parallel_pairs(x.numel(), elementwise::kGrain, [&](int64_t begin, int64_t end) {
      convert::write_range<Target>(
          out, begin, end, [&](int64_t e) { return value(e, scale_index(g, e)); }, options);
    });
  } else {
    for_each_row(g, [&](int64_t begin, int64_t end, int64_t index, int64_t step) {
      convert::write_range<Target>(
          out, begin, end, [&](int64_t e) { return value(e, index + (e - begin) * step); }, options);
    });
  }
}

// The output type: output_dtype, else the zero point's type, else uint8.
DType quantized_type(KernelContext& ctx, DType output_dtype) {
  const DType zero_point = ctx.has_input(2) ? ctx.input(2).dtype() : DType::kUndefined;
  if (output_dtype != DType::kUndefined && zero_point != DType::kUndefined && output_dtype != zero_point) {
    ctx.fail("attribute 'output_dtype' is " + std::string(dtype_name(output_dtype)) + " but the zero point is " +
             std::string(dtype_name(zero_point)) + "; they must agree");
  }
  if (zero_point != DType::kUndefined) return zero_point;
  return output_dtype != DType::kUndefined ? output_dtype : DType::kUInt8;
}

void check_zero_point(KernelContext& ctx, const Tensor* zero_point, const Tensor& scale) {
  const bool single = zero_point && zero_point->numel() == 1 && scale.numel() == 1 && zero_point->rank() <= 1 &&
                      scale.rank() <= 1;  // a scalar and a [1]: both per tensor
  if (zero_point && zero_point->shape() != scale.shape() && !single) {
    ctx.fail("the zero point has shape " + shape_string(zero_point->shape()) + " but the scale " +
             shape_string(scale.shape()) + "; they must be equal");
  }
}

#define QUANTIZED_TARGETS                                                                                         \
  convert::Standard<int8_t>, convert::Standard<uint8_t>, convert::Standard<int16_t>, convert::Standard<uint16_t>, \
      convert::Narrow<Float8E4M3FN>, convert::Narrow<Float8E4M3FNUZ>, convert::Narrow<Float8E5M2>,                \
      convert::Narrow<Float8E5M2FNUZ>, convert::Int4, convert::UInt4, convert::Float4E2M1

class QuantizeLinearKernel final : public OpKernel {
 public:
  explicit QuantizeLinearKernel(const KernelInfo& info)
      : precision_attribute_(info.opset() >= 23 ? info.int_attribute("precision", 0) : 0),
        output_dtype_(info.opset() >= 21 ? dtype_from_onnx(static_cast<int32_t>(info.int_attribute("output_dtype", 0)))
                                         : DType::kUndefined) {
    attrs_.axis = info.int_attribute("axis", 1);
    attrs_.block_size = info.opset() >= 21 ? info.int_attribute("block_size", 0) : 0;
    attrs_.per_axis = info.opset() >= 13;
    options_.saturate = info.int_attribute("saturate", 1) != 0;
    if (precision_attribute_ != 0) division_precision(DType::kFloat32, DType::kFloat32, precision_attribute_, &info);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale_tensor = ctx.input(1);
    const Tensor* zero_point_tensor = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    check_zero_point(ctx, zero_point_tensor, scale_tensor);
    const Granularity g = granularity(ctx, x.shape(), scale_tensor.shape(), attrs_);
    const DType to = quantized_type(ctx, output_dtype_);
    const Tensor scale = scale_values(ctx, scale_tensor);
    const Tensor zero_point = zero_point_values(ctx, zero_point_tensor, scale_tensor.shape());
    Tensor& out = ctx.allocate_output(0, to, x.shape());
    const Precision precision = division_precision(x.dtype(), scale_tensor.dtype(), precision_attribute_, nullptr);
    convert::dispatch_element<convert::Standard<float>, convert::Standard<Float16>, convert::Standard<BFloat16>,
                              convert::Standard<int32_t>>(x.dtype(), "QuantizeLinear x", [&]<typename Source>() {
      convert::dispatch_element<QUANTIZED_TARGETS>(to, "QuantizeLinear output", [&]<typename Target>() {
        auto run = [&]<Precision P>() {
          quantize<Source, Target, P>(x, g, scale.data<float>(), zero_point.data<double>(), out.raw_data(), options_);
        };
        switch (precision) {
          case Precision::kFloat:
            return run.template operator()<Precision::kFloat>();
          case Precision::kFloat16:
            return run.template operator()<Precision::kFloat16>();
          case Precision::kBFloat16:
            return run.template operator()<Precision::kBFloat16>();
          case Precision::kDouble:
            return run.template operator()<Precision::kDouble>();
        }
      });
    });
  }

 private:
  QuantAttributes attrs_;
  int64_t precision_attribute_;
  DType output_dtype_;
  convert::Options options_;
};

const KernelRegistration kQuantizeLinear{
    "", "QuantizeLinear", 10, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
      return std::make_unique<QuantizeLinearKernel>(info);
    }};

// ---- DequantizeLinear ----

// out = (x - zero_point) * scale, in float, stored as Target.
template <typename Source, typename Target>
void dequantize(const Tensor& x, const Granularity& g, const float* scale, const double* zero_point, Tensor& out) {
  using T = typename Target::Type;
  // x - zero_point exactly: in int64 for integers, in float for float8/float4 values.
  using D = std::conditional_t<std::is_integral_v<typename Source::Value>, int64_t, float>;
  const void* in = x.raw_data();
  T* y = out.data<T>();
  for_each_row(g, [&](int64_t begin, int64_t end, int64_t index, int64_t step) {
    if (step == 0) {
      const float s = scale[index];
      const auto zp = static_cast<D>(zero_point[index]);
      for (int64_t e = begin; e < end; ++e) {
        y[e] = elementwise::store<T>(static_cast<float>(static_cast<D>(Source::read(in, e)) - zp) * s);
      }
      return;
    }
    for (int64_t e = begin; e < end; ++e) {
      const int64_t k = index + (e - begin) * step;
      const auto zp = static_cast<D>(zero_point[k]);
      y[e] = elementwise::store<T>(static_cast<float>(static_cast<D>(Source::read(in, e)) - zp) * scale[k]);
    }
  });
}

class DequantizeLinearKernel final : public OpKernel {
 public:
  explicit DequantizeLinearKernel(const KernelInfo& info)
      : output_dtype_(info.opset() >= 23 ? dtype_from_onnx(static_cast<int32_t>(info.int_attribute("output_dtype", 0)))
                                         : DType::kUndefined) {
    attrs_.axis = info.int_attribute("axis", 1);
    attrs_.block_size = info.opset() >= 21 ? info.int_attribute("block_size", 0) : 0;
    attrs_.per_axis = info.opset() >= 13;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale_tensor = ctx.input(1);
    const Tensor* zero_point_tensor = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    check_zero_point(ctx, zero_point_tensor, scale_tensor);
    if (zero_point_tensor && zero_point_tensor->dtype() != x.dtype()) {
      ctx.fail("x is " + std::string(dtype_name(x.dtype())) + " but the zero point is " +
               std::string(dtype_name(zero_point_tensor->dtype())) + "; they must have the same element type");
    }
    const Granularity g = granularity(ctx, x.shape(), scale_tensor.shape(), attrs_);
    const DType to = output_dtype_ != DType::kUndefined ? output_dtype_ : scale_tensor.dtype();
    if (to != DType::kFloat32 && to != DType::kFloat16 && to != DType::kBFloat16) {
      ctx.fail("the output type is " + std::string(dtype_name(to)) +
               (output_dtype_ != DType::kUndefined ? " (output_dtype)" : " (the scale's type)") +
               ", expected float, float16 or bfloat16");
    }
    const Tensor scale = scale_values(ctx, scale_tensor);
    const Tensor zero_point = zero_point_values(ctx, zero_point_tensor, scale_tensor.shape());
    Tensor& out = ctx.allocate_output(0, to, x.shape());
    convert::dispatch_element<convert::Standard<int8_t>, convert::Standard<uint8_t>, convert::Standard<int16_t>,
                              convert::Standard<uint16_t>, convert::Standard<int32_t>, ONNXTRAIN_FLOAT8_ELEMENTS,
                              ONNXTRAIN_PACKED_ELEMENTS>(x.dtype(), "DequantizeLinear x", [&]<typename Source>() {
      convert::dispatch_element<convert::Standard<float>, convert::Standard<Float16>, convert::Standard<BFloat16>>(
          to, "DequantizeLinear output", [&]<typename Target>() {
            dequantize<Source, Target>(x, g, scale.data<float>(), zero_point.data<double>(), out);
          });
    });
  }

 private:
  QuantAttributes attrs_;
  DType output_dtype_;
};

const KernelRegistration kDequantizeLinear{
    "", "DequantizeLinear", 10, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
      return std::make_unique<DequantizeLinearKernel>(info);
    }};

// ---- DynamicQuantizeLinear ----

// uint8 quantization of a float tensor with the scale and zero point its range gives:
// scale = (max(0, max x) - min(0, min x)) / 255 (1 when that range is 0, as onnxruntime
// does), zero_point = round(clip(-min(0, min x) / scale, 0, 255)).
const KernelRegistration kDynamicQuantizeLinear{
    "", "DynamicQuantizeLinear", 11, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.dtype() != DType::kFloat32) {
          ctx.fail("x is " + std::string(dtype_name(x.dtype())) + ", expected float");
        }
        const float* in = x.data<float>();
        float lo = 0.0f, hi = 0.0f;
        for (int64_t i = 0; i < x.numel(); ++i) {
          lo = std::min(lo, in[i]);
          hi = std::max(hi, in[i]);
        }
        const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
        const float zero_point = vector_math::round_to_int(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
        Tensor& y = ctx.allocate_output(0, DType::kUInt8, x.shape());
        uint8_t* q = y.data<uint8_t>();
        elementwise::map(in, q, x.numel(), [scale, zero_point](float v) {
          return static_cast<uint8_t>(quantize_integer(v / scale, zero_point, 0.0f, 255.0f));
        });
        *ctx.allocate_output(1, DType::kFloat32, {}).data<float>() = scale;
        *ctx.allocate_output(2, DType::kUInt8, {}).data<uint8_t>() = static_cast<uint8_t>(zero_point);
      });
    }};

}  // namespace
}  // namespace onnxtrain
