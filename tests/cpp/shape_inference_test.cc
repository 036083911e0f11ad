#include "ir/shape_inference.h"

#include <gtest/gtest.h>

#include "autodiff/gradient_context.h"
#include "ir/functions.h"
#include "ir/onnx_io.h"
#include "ir/shape_rules.h"
#include "ops/kernel_registry.h"
#include "test_util.h"

namespace onnxtrain {
namespace {

using namespace onnxtrain::testing;

std::string text(const ir::ValueType& t) {
  std::string s(dtype_name(t.dtype));
  if (!t.shape) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < t.shape->size(); ++i) {
    const ir::Dim& d = (*t.shape)[i];
    s += (i ? "," : "") + (d.value ? std::to_string(*d.value) : d.param.empty() ? "?" : d.param);
  }
  return s + "]";
}

onnx::TensorProto int64s(const std::string& name, std::vector<int64_t> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(7);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

TEST(ShapeInference, KeepsSymbolicDimensionsThroughAnAttentionBlock) {
  onnx::ModelProto m = model(17);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"batch", "seq", "64"});
  *g->add_input() = tensor_value("w", 1, {"64", "192"});
  *g->add_initializer() = int64s("heads", {0, 0, 4, 16});
  *g->add_initializer() = int64s("axes", {2});
  *g->add_node() = node("MatMul", {"x", "w"}, {"qkv"});
  onnx::NodeProto split = node("Split", {"qkv"}, {"q", "k", "v"});
  auto* axis = split.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(-1);
  *g->add_node() = split;
  *g->add_node() = node("Reshape", {"q", "heads"}, {"q4"});
  onnx::NodeProto perm = node("Transpose", {"q4"}, {"qt"});
  auto* p = perm.add_attribute();
  p->set_name("perm");
  p->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : {0, 2, 1, 3}) p->add_ints(v);
  *g->add_node() = perm;
  *g->add_node() = node("Shape", {"qt"}, {"shape"});
  *g->add_node() = node("ReduceSum", {"x", "axes"}, {"summed"});
  *g->add_node() = node("Less", {"x", "summed"}, {"mask"});
  *g->add_output() = tensor_value("qt", 1, {});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();

  const auto types = ir::infer_types(ir::load_model(as_span(bytes_of(m))));
  EXPECT_EQ(text(types.at("qkv")), "float[batch,seq,192]");
  EXPECT_EQ(text(types.at("k")), "float[batch,seq,64]");
  EXPECT_EQ(text(types.at("q4")), "float[batch,seq,4,16]");
  EXPECT_EQ(text(types.at("qt")), "float[batch,4,seq,16]");
  EXPECT_EQ(text(types.at("shape")), "int64[4]");
  EXPECT_EQ(text(types.at("summed")), "float[batch,seq,1]");
  EXPECT_EQ(text(types.at("mask")), "bool[batch,seq,64]");
}

TEST(ShapeInference, ConvolutionAndPoolingArithmetic) {
  onnx::ModelProto m = model(17);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"N", "3", "32", "32"});
  *g->add_input() = tensor_value("w", 1, {"16", "3", "3", "3"});
  onnx::NodeProto conv = node("Conv", {"x", "w"}, {"y"});
  for (const char* name : {"pads", "strides"}) {
    auto* a = conv.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    const std::vector<int64_t> v =
        std::string(name) == "pads" ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{2, 2};
    for (int64_t x : v) a->add_ints(x);
  }
  *g->add_node() = conv;
  onnx::NodeProto pool = node("MaxPool", {"y"}, {"p"});
  auto* k = pool.add_attribute();
  k->set_name("kernel_shape");
  k->set_type(onnx::AttributeProto::INTS);
  k->add_ints(2);
  k->add_ints(2);
  auto* s = pool.add_attribute();
  s->set_name("strides");
  s->set_type(onnx::AttributeProto::INTS);
  s->add_ints(2);
  s->add_ints(2);
  *g->add_node() = pool;
  *g->add_node() = node("GlobalAveragePool", {"p"}, {"gap"});
  *g->add_node() = node("Flatten", {"gap"}, {"flat"});
  const auto types = ir::infer_types(ir::load_model(as_span(bytes_of(m))));
  EXPECT_EQ(text(types.at("y")), "float[N,16,16,16]");
  EXPECT_EQ(text(types.at("p")), "float[N,16,8,8]");
  EXPECT_EQ(text(types.at("gap")), "float[N,16,1,1]");
  EXPECT_EQ(text(types.at("flat")), "float[N,16]");
}

TEST(ShapeInference, TransformerOpsOfOpset23) {
  onnx::ModelProto m = model(23);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("q", 1, {"B", "8", "S", "64"});
  *g->add_input() = tensor_value("k", 1, {"B", "2", "4", "64"});
  *g->add_input() = tensor_value("v", 1, {"B", "2", "4", "32"});
  *g->add_input() = tensor_value("past_k", 1, {"B", "2", "6", "64"});
  *g->add_input() = tensor_value("past_v", 1, {"B", "2", "6", "32"});
  *g->add_input() = tensor_value("x3", 10, {"B", "S", "512"});
  *g->add_input() = tensor_value("scale", 10, {"512"});
  *g->add_input() = tensor_value("a", 6, {"3", "1"});
  *g->add_input() = tensor_value("b", 6, {"4"});
  *g->add_input() = tensor_value("cos", 1, {"B", "S", "32"});
  *g->add_input() = tensor_value("sin", 1, {"B", "S", "32"});
  *g->add_node() = node("Attention", {"q", "k", "v", "", "past_k", "past_v"}, {"y", "present_k", "present_v", "qk"});
  *g->add_node() = node("RMSNormalization", {"x3", "scale"}, {"normed"});
  *g->add_node() = node("RotaryEmbedding", {"q", "cos", "sin"}, {"rotated"});
  *g->add_node() = node("LRN", {"q"}, {"lrn"});
  *g->add_node() = node("BitwiseAnd", {"a", "b"}, {"and"});
  const auto types = ir::infer_types(ir::load_model(as_span(bytes_of(m))));
  EXPECT_EQ(text(types.at("y")), "float[B,8,S,32]");
  EXPECT_EQ(text(types.at("present_k")), "float[B,2,10,64]");
  EXPECT_EQ(text(types.at("present_v")), "float[B,2,10,32]");
  EXPECT_EQ(text(types.at("qk")), "float[B,8,S,10]");
  EXPECT_EQ(text(types.at("normed")), "float16[B,S,512]");
  EXPECT_EQ(text(types.at("rotated")), "float[B,8,S,64]");
  EXPECT_EQ(text(types.at("lrn")), "float[B,8,S,64]");
  EXPECT_EQ(text(types.at("and")), "int32[3,4]");
}

// Every op that onnxtrain runs or differentiates has a shape rule, or (an org.onnxtrain op)
// a function body that inference reads through.
TEST(ShapeInference, EveryOpWithAKernelOrAGradientRuleHasAShapeRule) {
  const ir::ShapeRuleTable& rules = ir::ShapeRuleTable::global();
  const ir::FunctionLibrary& library = ir::FunctionLibrary::global();
  auto covered = [&](const std::string& domain, const std::string& op) {
    if (rules.find(domain, op) != nullptr) return true;
    if (ir::canonical_domain(domain).empty() && op == "Constant") return true;  // the inference reads its value
    return domain == ir::kOnnxtrainDomain && library.contains(op);
  };
  std::vector<std::string> missing;
  for (const KernelDef& def : KernelRegistry::global().all()) {
    if (!covered(def.domain, def.op_type)) missing.push_back("kernel " + def.domain + "::" + def.op_type);
  }
  for (const std::string domain : {"", "org.onnxtrain", "com.microsoft"}) {
    for (const std::string& op : autodiff::RuleTable::global().op_types(domain)) {
      if (!covered(domain, op)) missing.push_back("gradient rule " + domain + "::" + op);
    }
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  EXPECT_TRUE(missing.empty()) << ::testing::PrintToString(missing);
}

// An org.onnxtrain call is inferred through its body: ReluGrad (dY, Y) has dY's type and shape.
TEST(ShapeInference, ReadsThroughFunctionBodies) {
  onnx::ModelProto m = model(17);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("dy", 11, {"batch", "7"});
  *g->add_input() = tensor_value("y", 11, {"batch", "7"});
  onnx::NodeProto call = node("ReluGrad", {"dy", "y"}, {"dx"});
  call.set_domain("org.onnxtrain");
  *g->add_node() = call;
  auto* import = m.add_opset_import();
  import->set_domain("org.onnxtrain");
  import->set_version(1);
  const auto types = ir::infer_types(ir::load_model(as_span(bytes_of(m))));
  EXPECT_EQ(text(types.at("dx")), "double[batch,7]");
}

// What a model declares is kept where inference knows less, and gives way where it knows more.
TEST(ShapeInference, MergesDeclaredAndInferredShapesPerDimension) {
  onnx::ModelProto m = model(17);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"batch", "8"});
  *g->add_node() = node("Relu", {"x"}, {"y"});
  *g->add_value_info() = tensor_value("y", 1, {"N", ""});
  const auto types = ir::infer_types(ir::load_model(as_span(bytes_of(m))));
  EXPECT_EQ(text(types.at("y")), "float[batch,8]");
}

TEST(ShapeInference, QuantizationOps) {
  onnx::ModelProto m = model(21);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"B", "16"});
  *g->add_input() = tensor_value("s", 1, {});
  *g->add_input() = tensor_value("z", 22, {});  // int4
  *g->add_input() = tensor_value("a8", 2, {"B", "16"});
  *g->add_input() = tensor_value("w8", 3, {"16", "8"});
  *g->add_input() = tensor_value("z8", 2, {});
  *g->add_input() = tensor_value("img", 2, {"N", "3", "10", "10"});
  *g->add_input() = tensor_value("k", 3, {"4", "3", "3", "3"});
  *g->add_node() = node("QuantizeLinear", {"x", "s", "z"}, {"q4"});
  *g->add_node() = node("QuantizeLinear", {"x", "s"}, {"q_default"});
  *g->add_node() = node("DequantizeLinear", {"q4", "s", "z"}, {"dq"});
  *g->add_node() = node("DynamicQuantizeLinear", {"x"}, {"dy", "dy_scale", "dy_zero_point"});
  *g->add_node() = node("MatMulInteger", {"a8", "w8"}, {"mm"});
  *g->add_node() = node("QLinearMatMul", {"a8", "s", "z8", "w8", "s", "z8", "s", "z8"}, {"qmm"});
  *g->add_node() = node("ConvInteger", {"img", "k"}, {"conv"});
  *g->add_node() = node("QLinearConv", {"img", "s", "z8", "k", "s", "z8", "s", "z8"}, {"qconv"});
  const auto types = ir::infer_types(ir::load_model(as_span(bytes_of(m))));
  EXPECT_EQ(text(types.at("q4")), "int4[B,16]");
  EXPECT_EQ(text(types.at("q_default")), "uint8[B,16]");
  EXPECT_EQ(text(types.at("dq")), "float[B,16]");
  EXPECT_EQ(text(types.at("dy")), "uint8[B,16]");
  EXPECT_EQ(text(types.at("dy_scale")), "float[]");
  EXPECT_EQ(text(types.at("dy_zero_point")), "uint8[]");
  EXPECT_EQ(text(types.at("mm")), "int32[B,8]");
  EXPECT_EQ(text(types.at("qmm")), "uint8[B,8]");
  EXPECT_EQ(text(types.at("conv")), "int32[N,4,8,8]");
  EXPECT_EQ(text(types.at("qconv")), "uint8[N,4,8,8]");
}

}  // namespace
}  // namespace onnxtrain
