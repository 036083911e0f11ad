// Shapes of the com.microsoft ops of onnxruntime-training's artifacts (their kernels share
// the families of src/ops/cpu; src/training/ort_training_model.h adapts the rest).
#include <algorithm>

#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// (dY, X, scale, ...) => (dX like X, dScale and dB like scale).
void normalization_grad(ShapeContext& c) {
  c.set_like(0, 1);
  c.set_like(1, 2);
  c.set_like(2, 2);
}

// ConvGrad (dY, X, W) => (dX like X, dW like W, dB [M]).
void conv_grad(ShapeContext& c) {
  c.set_like(0, 1);
  c.set_like(1, 2);
  const SymbolicShape* w = c.shape(2);
  c.set(2, c.dtype(2), w && !w->empty() ? std::optional(SymbolicShape{(*w)[0]}) : std::nullopt);
}

// BatchNormInternal (X, scale, B, mean, var) => (Y, running mean, running var, saved mean,
// saved inverse std).
void batch_norm_internal(ShapeContext& c) {
  c.set_like(0, 0);
  for (size_t i = 1; i <= 4; ++i) c.set_like(i, 3);
}

// FusedMatMul, TransposeMatMul: alpha * op(A) @ op(B), op transposing the last two axes; the
// batch axes broadcast.
void fused_matmul(ShapeContext& c) {
  const SymbolicShape* a = c.shape(0);
  const SymbolicShape* b = c.shape(1);
  if (!a || !b || a->size() < 2 || b->size() < 2) return c.set(0, c.dtype(0));
  const bool ta = c.int_attribute("transA").value_or(0), tb = c.int_attribute("transB").value_or(0);
  const SymbolicShape batch_a(a->begin(), a->end() - 2), batch_b(b->begin(), b->end() - 2);
  SymbolicShape out = *broadcast({&batch_a, &batch_b});
  out.push_back(ta ? a->back() : (*a)[a->size() - 2]);
  out.push_back(tb ? (*b)[b->size() - 2] : b->back());
  c.set(0, c.dtype(0), out);
}

void softmax_cross_entropy_loss_grad(ShapeContext& c) {
  c.set_like(0, 1);
}

// The ONNX op's rule, for a com.microsoft op that computes what it computes.
template <const char* kOnnxOp>
void as_onnx(ShapeContext& c) {
  ShapeRuleTable::global().find("", kOnnxOp)(c);
}
constexpr char kSoftmaxCrossEntropyLoss[] = "SoftmaxCrossEntropyLoss";
constexpr char kSplit[] = "Split";

// BiasDropout (data, bias, residual, ratio, training_mode) => (output, mask).
void bias_dropout(ShapeContext& c) {
  c.set_like(0, 0);
  c.set(1, DType::kBool, c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

// SimplifiedLayerNormalizationGrad (dY, X, scale, inv_std_var) => (dX like X, dScale like scale).
void simplified_layer_normalization_grad(ShapeContext& c) {
  c.set_like(0, 1);
  c.set_like(1, 2);
}

// GatherElementsGrad (dY, shape, indices) => dX of the shape input 1 holds.
void gather_elements_grad(ShapeContext& c) {
  std::optional<SymbolicShape> shape;
  if (const auto dims = c.ints(1)) {
    shape.emplace();
    for (int64_t d : *dims) shape->push_back(known(d));
  }
  c.set(0, c.dtype(0), shape);
}

// ConcatTraining => (Concat's output, the pieces' sizes along the axis: int64 [inputs]).
void concat_training(ShapeContext& c) {
  ShapeRuleTable::global().find("", "Concat")(c);
  c.set(1, DType::kInt64, SymbolicShape{known(static_cast<int64_t>(c.input_count()))});
}

// InPlaceAccumulatorV2 (buffer, gradient, overwrite) => (updated flag, buffer).
void in_place_accumulator(ShapeContext& c) {
  c.set(0, DType::kBool, SymbolicShape{known(1)});
  c.set_like(1, 0);
}

// AdamWOptimizer and SGDOptimizerV2 (over sequences) => (updated flag, the updated sequences).
void optimizer_over_sequences(ShapeContext& c) {
  c.set(0, DType::kBool, SymbolicShape{known(1)});
  for (size_t i = 1; i < c.output_count(); ++i) c.set(i, DType::kSequence, SymbolicShape{});
}

const ShapeRuleRegistration kMicrosoftShapes{
    {
        {"Gelu", same_as_input},
        {"FastGelu", same_as_input},
        {"BiasGelu", same_as_input},
        {"Scale", same_as_input},
        {"ReluGrad", same_as_input},
        {"SigmoidGrad", same_as_input},
        {"TanhGrad", same_as_input},
        {"GeluGrad", same_as_input},
        {"FastGeluGrad", same_as_input},
        {"BiasGeluGrad_dX", same_as_input},
        {"SoftmaxGrad_13", same_as_input},
        {"LogSoftmaxGrad_13", same_as_input},
        {"ZeroGradient", same_as_input},
        {"DropoutGrad", same_as_input},
        {"SoftmaxCrossEntropyLossGrad", softmax_cross_entropy_loss_grad},
        {"LayerNormalizationGrad", normalization_grad},
        {"BatchNormalizationGrad", normalization_grad},
        {"ConvGrad", conv_grad},
        {"BatchNormInternal", batch_norm_internal},
        {"FusedMatMul", fused_matmul},
        {"TransposeMatMul", fused_matmul},
        {"InPlaceAccumulatorV2", in_place_accumulator},
        {"AdamWOptimizer", optimizer_over_sequences},
        {"SGDOptimizerV2", optimizer_over_sequences},
        {"QuickGelu", same_as_input},
        {"QuickGeluGrad", same_as_input},
        {"SoftmaxCrossEntropyLossInternal", as_onnx<kSoftmaxCrossEntropyLoss>},
        {"SoftmaxCrossEntropyLossInternalGrad", softmax_cross_entropy_loss_grad},
        {"BiasDropout", bias_dropout},
        {"SimplifiedLayerNormalizationGrad", simplified_layer_normalization_grad},
        {"GatherElementsGrad", gather_elements_grad},
        {"ConcatTraining", concat_training},
        {"SplitTraining", as_onnx<kSplit>},
    },
    "com.microsoft"};

}  // namespace
}  // namespace onnxtrain::ir
