#include <gtest/gtest.h>
#include <onnxtrain/gradient.h>
#include <onnxtrain/inference_session.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "ir/function_text.h"
#include "ir/functions.h"
#include "ir/onnx_io.h"
#include "test_util.h"

namespace onnxtrain {
namespace {

using namespace onnxtrain::testing;

void set_initializer(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(1);
  for (int64_t d : dims) t->add_dims(d);
  for (float f : v) t->add_float_data(f);
}

// loss = sum(relu(x * w + b)), x: [batch, 2], w: [2], b: [] (broadcast).
onnx::ModelProto scaled_relu_loss() {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"batch", "2"});
  *g->add_output() = tensor_value("loss", 1, {});
  set_initializer(g, "w", {2}, {2.0f, -1.0f});
  set_initializer(g, "b", {}, {0.5f});
  *g->add_node() = node("Mul", {"x", "w"}, {"xw"}, "mul");
  *g->add_node() = node("Add", {"xw", "b"}, {"h"}, "add");
  *g->add_node() = node("Relu", {"h"}, {"r"}, "relu");
  auto* sum = g->add_node();
  *sum = node("ReduceSum", {"r"}, {"loss"}, "sum");
  auto* keep = sum->add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  return m;
}

std::vector<float> values(const Tensor& t) {
  return {t.data<float>(), t.data<float>() + t.numel()};
}

TEST(GradientGraph, MatchesHandDerivedGradientsInOnnxtrain) {
  GradientRequest request;
  request.wrt = {"w", "b", "x"};
  const std::string bytes = build_gradient_graph(as_span(bytes_of(scaled_relu_loss())), request);
  InferenceSession session(as_span(bytes));
  // h = x * w + b = [[2.5, -1.5], [-1.5, 0.5], [4.5, -0.5]]: ReLU passes (0,0), (1,1), (2,0).
  const Tensor x = Tensor::from_vector<float>({3, 2}, {1, 2, -1, 0, 2, 1});
  const auto out = session.run({{"x", x}}, {"loss", "w_grad", "b_grad", "x_grad"});
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 2.5f + 0.5f + 4.5f);
  EXPECT_EQ(values(out[1]), (std::vector<float>{1 + 2, 0}));
  EXPECT_EQ(out[2].rank(), 0u);  // reduced back to b's shape
  EXPECT_FLOAT_EQ(out[2].data<float>()[0], 3.0f);
  EXPECT_EQ(values(out[3]), (std::vector<float>{2, 0, 0, -1, 2, 0}));
}

TEST(GradientGraph, IncomingGradientsBecomeInputs) {
  GradientRequest request;
  request.wrt = {"x"};
  request.outputs = {"h"};
  onnx::ModelProto m = scaled_relu_loss();
  *m.mutable_graph()->add_output() = tensor_value("h", 1, {"batch", "2"});
  const ir::Model result = ir::load_model(as_span(build_gradient_graph(as_span(bytes_of(m)), request)));
  const auto has_input = [&](const std::string& name) {
    for (const auto& v : result.graph.inputs) {
      if (v.name == name) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_input("h_grad"));
  InferenceSession session(as_span(ir::serialize_model(result)));
  const auto out = session.run(
      {{"x", Tensor::from_vector<float>({1, 2}, {1, 1})}, {"h_grad", Tensor::from_vector<float>({1, 2}, {3, 4})}},
      {"x_grad"});
  EXPECT_EQ(values(out[0]), (std::vector<float>{6, -4}));
}

TEST(GradientGraph, MissingRuleErrorNamesOpNodeAndPath) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"3"});
  *g->add_output() = tensor_value("loss", 1, {});
  set_initializer(g, "axis", {}, {});
  g->mutable_initializer(0)->set_data_type(7);
  g->mutable_initializer(0)->add_int64_data(0);
  *g->add_node() = node("LpNormalization", {"x"}, {"c"}, "running");
  *g->add_node() = node("ReduceSum", {"c"}, {"loss"}, "sum");
  GradientRequest request;
  request.wrt = {"x"};
  try {
    build_gradient_graph(as_span(bytes_of(m)), request);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("LpNormalization"), std::string::npos) << message;
    EXPECT_NE(message.find("'x' -> LpNormalization 'running' -> 'c' -> ReduceSum 'sum' -> 'loss'"), std::string::npos)
        << message;
    EXPECT_EQ(e.kind(), ErrorKind::kNotImplemented);
  }
}

TEST(GradientGraph, BadRequestsAreInvalidArguments) {
  const std::string bytes = bytes_of(scaled_relu_loss());
  auto kind_of = [&](GradientRequest request) {
    try {
      build_gradient_graph(as_span(bytes), request);
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kRuntime;
  };
  EXPECT_EQ(kind_of({{"nope"}, "", {}}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({{}, "", {}}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({{"w"}, "loss", {"loss"}}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({{"w", "w"}, "", {}}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({{"w"}, "nope", {}}), ErrorKind::kInvalidArgument);
}

TEST(GradientGraph, SavesToAFile) {
  const auto dir = std::filesystem::temp_directory_path() / "onnxtrain_autodiff_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "in.onnx", std::ios::binary);
    const std::string bytes = bytes_of(scaled_relu_loss());
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  GradientRequest request;
  request.wrt = {"w"};
  build_gradient_graph(dir / "in.onnx", dir / "out.onnx", request);
  const ir::Model saved = ir::load_model(dir / "out.onnx");
  EXPECT_EQ(saved.graph.outputs.back().name, "w_grad");
  std::filesystem::remove_all(dir);
}

TEST(FunctionText, ParsesNodesAttributesAndReferences) {
  const ir::Function f = ir::parse_function(R"(
    Scale <alpha> (x, , y) => (z) {
      # a comment
      a = Constant <value_float: float = @alpha> ()
      t = Constant <value = int64[2] {1, -9223372036854775807}> ()
      z = Mul <note = "s", list = [1, 2], floats = [0.5, 1e-3]> (x, a)
    }
  )",
                                            "org.onnxtrain");
  EXPECT_EQ(f.name, "Scale");
  EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "", "y"}));
  EXPECT_EQ(f.attribute_names, (std::vector<std::string>{"alpha"}));
  ASSERT_EQ(f.nodes.size(), 3u);
  EXPECT_EQ(f.nodes[0].attributes[0].ref_attr_name, "alpha");
  EXPECT_EQ(f.nodes[0].attributes[0].type, ir::AttributeType::kFloat);
  EXPECT_EQ(f.nodes[1].attributes[0].t.to_int64_vector(), (std::vector<int64_t>{1, -9223372036854775807}));
  const auto& mul = f.nodes[2];
  EXPECT_EQ(mul.attribute("note")->s, "s");
  EXPECT_EQ(mul.attribute("list")->ints, (std::vector<int64_t>{1, 2}));
  EXPECT_FLOAT_EQ(mul.attribute("floats")->floats[1], 1e-3f);
  EXPECT_THROW(ir::parse_function("F (x) => (y) {\n y = Relu (x\n}", "d"), Error);
}

TEST(FunctionLibrary, EveryFunctionHasAFusedKernel) {
  std::set<std::string> kernels;
  for (const OpSupport& op : supported_ops()) {
    if (op.domain == "org.onnxtrain") kernels.insert(op.op_type);
  }
  for (const std::string& name : ir::FunctionLibrary::global().names()) {
    EXPECT_TRUE(kernels.contains(name)) << name;
    for (const ir::Node& n : ir::FunctionLibrary::global().get(name).nodes) {
      EXPECT_TRUE(n.domain.empty()) << name << " uses " << n.domain << "::" << n.op_type;
    }
  }
}

}  // namespace
}  // namespace onnxtrain
