#include "passes/pipeline.h"

#include "passes/fold_batch_norm.h"
#include "passes/fuse_conv_pool.h"
#include "passes/fuse_conv_relu.h"
#include "passes/fuse_gelu.h"
#include "passes/inline_functions.h"
#include "passes/share_recurrent_record.h"

namespace onnxtrain::passes {
namespace {

struct Pass {
  GraphOptimizationLevel level;  // the lowest level that runs it
  void (*apply)(ir::Model&);
};

// In order. GELU is fused before the Conv fusions so that they see final graphs; BatchNorm
// folds into a Conv before Relu and MaxPool fuse into it.
const Pass kPasses[] = {
    {GraphOptimizationLevel::kExtended, [](ir::Model& m) { fuse_gelu(m); }},
    {GraphOptimizationLevel::kBasic, [](ir::Model& m) { fold_batch_norm_into_conv(m); }},
    {GraphOptimizationLevel::kExtended, [](ir::Model& m) { fuse_conv_relu(m); }},
    {GraphOptimizationLevel::kExtended, [](ir::Model& m) { fuse_conv_pool(m); }},
    {GraphOptimizationLevel::kBasic, [](ir::Model& m) { share_recurrent_record(m); }},
};

}  // namespace

void optimize(ir::Model& model, GraphOptimizationLevel level,
              const std::function<bool(const ir::Node&, int64_t)>& has_kernel) {
  inline_functions(model, has_kernel);
  for (const Pass& pass : kPasses) {
    if (static_cast<int>(level) >= static_cast<int>(pass.level)) pass.apply(model);
  }
  constants_to_initializers(model);
}

}  // namespace onnxtrain::passes
