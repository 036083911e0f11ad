// BitwiseAnd, BitwiseOr, BitwiseXor (broadcasting) and BitwiseNot (opset 18), on every
// integer type, through the shared elementwise loops.
#include "core/dispatch.h"
#include "ops/cpu/elementwise.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

template <typename Op>
KernelFactory bitwise_binary(const char* name, Op op) {
  return [name, op](const KernelInfo&) {
    return make_kernel([name, op](KernelContext& ctx) {
      elementwise::require_same_dtype(ctx, 0, 1);
      dispatch<ONNXTRAIN_INT_TYPES>(ctx.input(0).dtype(), name, [&]<typename T>() {
        elementwise::binary<T, T, T>(ctx, [op](T a, T b) { return static_cast<T>(op(a, b)); });
      });
    });
  };
}

const KernelRegistration kBitwiseAnd{"", "BitwiseAnd", 18, kLatestOpset,
                                     bitwise_binary("BitwiseAnd", [](auto a, auto b) { return a & b; })};
const KernelRegistration kBitwiseOr{"", "BitwiseOr", 18, kLatestOpset,
                                    bitwise_binary("BitwiseOr", [](auto a, auto b) { return a | b; })};
const KernelRegistration kBitwiseXor{"", "BitwiseXor", 18, kLatestOpset,
                                     bitwise_binary("BitwiseXor", [](auto a, auto b) { return a ^ b; })};

const KernelRegistration kBitwiseNot{"", "BitwiseNot", 18, kLatestOpset, [](const KernelInfo&) {
                                       return make_kernel([](KernelContext& ctx) {
                                         dispatch<ONNXTRAIN_INT_TYPES>(
                                             ctx.input(0).dtype(), "BitwiseNot", [&]<typename T>() {
                                               elementwise::unary<T>(ctx, [](T x) { return static_cast<T>(~x); });
                                             });
                                       });
                                     }};

}  // namespace
}  // namespace onnxtrain
