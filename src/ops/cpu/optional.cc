// OptionalHasElement and OptionalGetElement on tensors: onnxtrain's values are tensors, so an
// optional here is a tensor input that is given or omitted (""). OptionalHasElement says
// which; OptionalGetElement hands the tensor on and refuses an omitted one. Values of optional
// or sequence type (the Optional op's output) are not run (a graph using them is refused).
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

const KernelRegistration kOptionalHasElement{"", "OptionalHasElement", 15, kLatestOpset, [](const KernelInfo& info) {
                                               return make_kernel([](KernelContext& ctx) {
                                                 Tensor& out = ctx.allocate_output(0, DType::kBool, {});
                                                 *static_cast<bool*>(out.raw_data()) = ctx.has_input(0);
                                               });
                                             }};

const KernelRegistration kOptionalGetElement{"", "OptionalGetElement", 15, kLatestOpset, [](const KernelInfo& info) {
                                               return make_kernel([](KernelContext& ctx) {
                                                 if (!ctx.has_input(0))
                                                   ctx.fail("the optional input is empty; there is no element to get");
                                                 ctx.set_output(0, ctx.input(0));
                                               });
                                             }};

}  // namespace
}  // namespace onnxtrain
