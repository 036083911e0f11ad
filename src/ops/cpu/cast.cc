// Cast and CastLike: element type conversion between every pair of types a Tensor holds,
// float8 and the packed 4-bit types included, by the rules of convert.h. `saturate` (opset
// 19+) and `round_mode` (opset 24+, float8e8m0 targets) choose what overflowing float8
// results become.
#include <string>

#include "ops/cpu/convert.h"
#include "ops/cpu/elementwise.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// `out` = `x` converted element by element from From to To (convert.h's element kinds). A
// function template, not a branch inside the dispatching lambdas: clang checks the discarded
// `if constexpr` branch of a nested generic lambda.
template <typename From, typename To>
void convert_elements(const Tensor& x, Tensor& out, const convert::Options& options) {
  if constexpr (From::kStandard && To::kStandard) {
    using F = typename From::Type;
    using T = typename To::Type;
    elementwise::map(x.data<F>(), out.data<T>(), x.numel(), [](auto v) { return convert::to_standard<T>(v); });
  } else {
    const void* in = x.raw_data();
    convert::parallel_pairs(x.numel(), elementwise::kGrain, [&](int64_t begin, int64_t end) {
      convert::write_range<To>(
          out.raw_data(), begin, end, [in](int64_t i) { return From::read(in, i); }, options);
    });
  }
}

// Output 0 = input 0 converted to `to`.
void cast(KernelContext& ctx, DType to, const convert::Options& options) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == to) {
    ctx.set_output(0, x);
    return;
  }
  const std::string& op = ctx.node().op_type;
  convert::dispatch_element<ONNXTRAIN_ALL_ELEMENTS>(x.dtype(), op + " input", [&]<typename From>() {
    convert::dispatch_element<ONNXTRAIN_ALL_ELEMENTS>(to, op + " target", [&]<typename To>() {
      // A buffer of its own: threads writing a narrower type over the input would overwrite
      // elements other threads have yet to read.
      Tensor& out = ctx.allocate_output(0, to, x.shape());
      convert_elements<From, To>(x, out, options);
    });
  });
}

convert::Options cast_options(const KernelInfo& info) {
  convert::Options options;
  options.saturate = info.int_attribute("saturate", 1) != 0;
  const std::string round = info.string_attribute("round_mode", "up");
  using Round = narrow_float::E8M0::Round;
  if (round == "up") {
    options.round = Round::kUp;
  } else if (round == "down") {
    options.round = Round::kDown;
  } else if (round == "nearest") {
    options.round = Round::kNearest;
  } else {
    info.fail("attribute 'round_mode' is '" + round + "', expected 'up', 'down' or 'nearest'");
  }
  return options;
}

const KernelRegistration kCast{
    "", "Cast", 6, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
      const int64_t code = info.int_attribute("to");
      const DType to = dtype_from_onnx(static_cast<int32_t>(code));
      if (!is_supported(to)) {
        info.fail("attribute 'to' is element type " + std::to_string(code) +
                  ", which onnxtrain cannot hold (strings are not supported)");
      }
      return make_kernel([to, options = cast_options(info)](KernelContext& ctx) { cast(ctx, to, options); });
    }};

const KernelRegistration kCastLike{
    "", "CastLike", 15, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
      return make_kernel(
          [options = cast_options(info)](KernelContext& ctx) { cast(ctx, ctx.input(1).dtype(), options); });
    }};

}  // namespace
}  // namespace onnxtrain
