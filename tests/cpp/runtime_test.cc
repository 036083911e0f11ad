#include <gtest/gtest.h>
#include <onnxtrain/inference_session.h>

#include "core/allocator.h"
#include "ir/onnx_io.h"
#include "ops/kernel.h"
#include "ops/kernel_registry.h"
#include "passes/fold_batch_norm.h"
#include "passes/fuse_conv_pool.h"
#include "passes/fuse_conv_relu.h"
#include "runtime/executor.h"
#include "runtime/memory_plan.h"
#include "test_util.h"

namespace onnxtrain {
namespace {

using namespace onnxtrain::testing;

TEST(MemoryPlan, ReusesBytesOnlyBetweenBuffersThatNeverLiveTogether) {
  // a: steps 0-1, b: 1-2, c: 2-3 (a and c may share), d: 0-3 (shares with nobody)
  const MemoryPlan plan({{100, 0, 1}, {100, 1, 2}, {100, 2, 3}, {50, 0, 3}});
  auto overlap = [&](size_t i, size_t j) {
    return plan.offset(i) < plan.offset(j) + plan.bytes(j) && plan.offset(j) < plan.offset(i) + plan.bytes(i);
  };
  EXPECT_FALSE(overlap(0, 1));
  EXPECT_FALSE(overlap(1, 2));
  EXPECT_FALSE(overlap(0, 3));
  EXPECT_FALSE(overlap(1, 3));
  EXPECT_FALSE(overlap(2, 3));
  EXPECT_EQ(plan.offset(0), plan.offset(2));  // a is dead when c is born
  EXPECT_LE(plan.arena_bytes(), 128u * 2 + 64);
}

onnx::ModelProto chain_model() {
  // y = relu(relu(x + x) + x) : intermediates that can live in the arena
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"batch", "3"});
  *g->add_output() = tensor_value("y", 1, {"batch", "3"});
  *g->add_node() = node("Add", {"x", "x"}, {"a"});
  *g->add_node() = node("Relu", {"a"}, {"b"});
  *g->add_node() = node("Add", {"b", "x"}, {"c"});
  *g->add_node() = node("Relu", {"c"}, {"y"});
  return m;
}

std::vector<float> run_chain(InferenceSession& session, std::vector<float> x) {
  const auto rows = static_cast<int64_t>(x.size() / 3);
  auto out = session.run({{"x", Tensor::from_vector<float>({rows, 3}, x)}});
  return {out[0].values<float>().begin(), out[0].values<float>().end()};
}

TEST(InferenceSession, PlannedRunsMatchTheFirstRunAndShapesMayChange) {
  InferenceSession session(as_span(bytes_of(chain_model())));
  const std::vector<float> x = {-1, 0, 1, 2, -3, 4};
  const std::vector<float> expected = {0, 0, 3, 6, 0, 12};
  EXPECT_EQ(run_chain(session, x), expected);                               // records the plan
  EXPECT_EQ(run_chain(session, x), expected);                               // served from the arena
  EXPECT_EQ(run_chain(session, {1, 1, 1}), (std::vector<float>{3, 3, 3}));  // a new signature
  EXPECT_EQ(run_chain(session, x), expected);
}

TEST(InferenceSession, SteadyStateRunsAllocateOnlyTheirOutputs) {
  InferenceSession session(as_span(bytes_of(chain_model())));
  const Tensor x = Tensor::from_vector<float>({2, 3}, {-1, 0, 1, 2, -3, 4});
  session.run({{"x", x}});  // records and plans
  session.run({{"x", x}});
  const uint64_t before = Storage::heap_allocation_count();
  session.run({{"x", x}});
  EXPECT_EQ(Storage::heap_allocation_count() - before, 1u);  // the output y alone
}

TEST(InferenceSession, OutputsOutliveLaterRuns) {
  InferenceSession session(as_span(bytes_of(chain_model())));
  auto first = session.run({{"x", Tensor::from_vector<float>({1, 3}, {1, 2, 3})}});
  auto second = session.run({{"x", Tensor::from_vector<float>({1, 3}, {4, 5, 6})}});
  EXPECT_EQ(first[0].values<float>()[0], 3.0f);
  EXPECT_EQ(second[0].values<float>()[0], 12.0f);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(InferenceSession, BadFeedsNameTheInputAndTheExpectation) {
  InferenceSession session(as_span(bytes_of(chain_model())));
  EXPECT_NE(error_of([&] { session.run({}); }).find("input 'x' (float[batch, 3]) is missing"), std::string::npos);
  EXPECT_NE(error_of([&] {
              session.run({{"x", Tensor::zeros(DType::kFloat64, {1, 3})}});
            }).find("input 'x': got double[1, 3], expected float[batch, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              session.run({{"x", Tensor::zeros(DType::kFloat32, {1, 4})}});
            }).find("dimension 1 is 4, expected 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              session.run({{"x", Tensor::zeros(DType::kFloat32, {3})}});
            }).find("expected rank 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              session.run({{"x", Tensor::zeros(DType::kFloat32, {1, 3})}, {"z", Tensor::zeros(DType::kFloat32, {1})}});
            }).find("'z' is not an input of the model (inputs: x)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              session.run({{"x", Tensor::zeros(DType::kFloat32, {1, 3})}}, {"nope"});
            }).find("'nope' is not an output"),
            std::string::npos);
}

TEST(Executor, BoundRunsMatchNamedRunsAndCheckTheirFeeds) {
  runtime::Executor executor(ir::load_model(as_span(bytes_of(chain_model()))), {});
  const runtime::Executor::Binding binding = executor.bind({"x"}, {"y"});
  const NamedTensors feeds{{"x", Tensor::from_vector<float>({2, 3}, {-1, 0, 1, 2, -3, 4})}};
  for (int run = 0; run < 3; ++run) {  // records, then runs from the plan
    const auto bound = executor.run(binding, feeds, {});
    const auto named = executor.run(feeds, {"y"});
    EXPECT_EQ(std::vector<float>(bound[0].values<float>().begin(), bound[0].values<float>().end()),
              (std::vector<float>{0, 0, 3, 6, 0, 12}));
    EXPECT_EQ(std::vector<float>(named[0].values<float>().begin(), named[0].values<float>().end()),
              (std::vector<float>{0, 0, 3, 6, 0, 12}));
  }
  EXPECT_NE(error_of([&] { executor.run(binding, {}, {}); }).find("0 feeds for a binding of 1"), std::string::npos);
  EXPECT_NE(error_of([&] {
              executor.run(binding, {{"x", Tensor::zeros(DType::kFloat32, {1, 4})}}, {});
            }).find("dimension 1 is 4, expected 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { executor.bind({"z"}, {"y"}); }).find("'z' is not an input of the model"), std::string::npos);
  EXPECT_NE(error_of([&] { executor.bind({"x", "x"}, {"y"}); }).find("input 'x' is fed twice"), std::string::npos);
  EXPECT_NE(error_of([&] { executor.bind({"x"}, {"a"}); }).find("'a' is not an output"), std::string::npos);
}

TEST(Passes, ConvReluFusesOnlyWhenTheRelusTheOnlyReader) {
  auto conv_relu = [](bool conv_is_output) {
    onnx::ModelProto m = model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_value("x", 1, {"1", "1", "4", "4"});
    *g->add_input() = tensor_value("w", 1, {"2", "1", "3", "3"});
    *g->add_output() = tensor_value("y", 1, {"1", "2", "2", "2"});
    if (conv_is_output) *g->add_output() = tensor_value("c", 1, {"1", "2", "2", "2"});
    *g->add_node() = node("Conv", {"x", "w"}, {"c"});
    *g->add_node() = node("Relu", {"c"}, {"y"});
    return ir::load_model(as_span(bytes_of(m)));
  };
  ir::Model fused = conv_relu(false);
  EXPECT_EQ(passes::fuse_conv_relu(fused), 1u);
  ASSERT_EQ(fused.graph.nodes.size(), 1u);
  EXPECT_EQ(fused.graph.nodes[0].op_type, "FusedConv");
  EXPECT_EQ(fused.graph.nodes[0].outputs, std::vector<std::string>{"y"});
  ASSERT_NE(fused.graph.nodes[0].attribute("activation"), nullptr);
  ir::Model kept = conv_relu(true);
  EXPECT_EQ(passes::fuse_conv_relu(kept), 0u);
  EXPECT_EQ(kept.graph.nodes.size(), 2u);
}

// Conv [-> Relu] -> MaxPool; `pool_attributes` adds (name, ints) to the MaxPool (ceil_mode
// as an int).
ir::Model conv_pool(bool relu, bool conv_is_output,
                    const std::vector<std::pair<std::string, std::vector<int64_t>>>& pool_attributes) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"1", "1", "6", "6"});
  *g->add_input() = tensor_value("w", 1, {"2", "1", "3", "3"});
  *g->add_output() = tensor_value("y", 1, {"1", "2", "2", "2"});
  if (conv_is_output) *g->add_output() = tensor_value("c", 1, {"1", "2", "4", "4"});
  *g->add_node() = node("Conv", {"x", "w"}, {"c"});
  if (relu) *g->add_node() = node("Relu", {"c"}, {"r"});
  onnx::NodeProto pool = node("MaxPool", {relu ? "r" : "c"}, {"y"});
  for (const auto& [name, ints] : pool_attributes) {
    onnx::AttributeProto* a = pool.add_attribute();
    a->set_name(name);
    if (name == "ceil_mode") {  // an int
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(ints.at(0));
      continue;
    }
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : ints) a->add_ints(v);
  }
  *g->add_node() = pool;
  return ir::load_model(as_span(bytes_of(m)));
}

TEST(Passes, MaxPoolFusesIntoTheConvolutionBeforeIt) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> stem = {
      {"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}};
  for (bool relu : {false, true}) {
    ir::Model fused = conv_pool(relu, false, stem);
    if (relu) EXPECT_EQ(passes::fuse_conv_relu(fused), 1u);
    EXPECT_EQ(passes::fuse_conv_pool(fused), 1u);
    ASSERT_EQ(fused.graph.nodes.size(), 1u);
    const ir::Node& conv = fused.graph.nodes[0];
    EXPECT_EQ(conv.op_type, "FusedConv");
    EXPECT_EQ(conv.outputs, std::vector<std::string>{"y"});
    ASSERT_NE(conv.attribute("pool"), nullptr);
    EXPECT_EQ(conv.attribute("pool")->s, "MaxPool");
    ASSERT_NE(conv.attribute("pool_kernel_shape"), nullptr);
    EXPECT_EQ(conv.attribute("pool_kernel_shape")->ints, (std::vector<int64_t>{3, 3}));
    EXPECT_EQ(conv.attribute("pool_strides")->ints, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(conv.attribute("pool_pads")->ints, (std::vector<int64_t>{1, 1, 1, 1}));
    EXPECT_EQ(conv.attribute("activation") != nullptr, relu);
  }
  ir::Model defaults = conv_pool(false, false, {{"kernel_shape", {2, 2}}});  // stride 1, no pads
  EXPECT_EQ(passes::fuse_conv_pool(defaults), 1u);
  EXPECT_EQ(defaults.graph.nodes[0].attribute("pool_strides")->ints, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(defaults.graph.nodes[0].attribute("pool_pads")->ints, (std::vector<int64_t>{0, 0, 0, 0}));
  ir::Model read = conv_pool(false, true, stem);  // the convolution's output is needed
  EXPECT_EQ(passes::fuse_conv_pool(read), 0u);
  for (const auto& other : std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>>{
           {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}, {"dilations", {2, 2}}},
           {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}, {"ceil_mode", {1}}},
           {{"kernel_shape", {2}}}}) {  // 1-D
    ir::Model kept = conv_pool(false, false, other);
    EXPECT_EQ(passes::fuse_conv_pool(kept), 0u);
    EXPECT_EQ(kept.graph.nodes.size(), 2u);
  }
}

TEST(Passes, BatchNormalizationFoldsIntoAConvWithConstantParameters) {
  auto conv_bn = [](bool training) {
    onnx::ModelProto m = model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_value("x", 1, {"1", "1", "4", "4"});
    *g->add_output() = tensor_value("y", 1, {"1", "2", "2", "2"});
    const std::vector<std::pair<std::string, std::vector<int64_t>>> params = {
        {"w", {2, 1, 3, 3}}, {"scale", {2}}, {"bias", {2}}, {"mean", {2}}, {"var", {2}}};
    for (const auto& [name, dims] : params) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(1);
      int64_t n = 1;
      for (int64_t d : dims) {
        t->add_dims(d);
        n *= d;
      }
      for (int64_t i = 0; i < n; ++i) t->add_float_data(1.0f);
    }
    *g->add_node() = node("Conv", {"x", "w"}, {"c"});
    onnx::NodeProto bn = node("BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"y"});
    if (training) {
      auto* a = bn.add_attribute();
      a->set_name("training_mode");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(1);
    }
    *g->add_node() = bn;
    return ir::load_model(as_span(bytes_of(m)));
  };
  ir::Model folded = conv_bn(false);
  EXPECT_EQ(passes::fold_batch_norm_into_conv(folded), 1u);
  ASSERT_EQ(folded.graph.nodes.size(), 1u);
  EXPECT_EQ(folded.graph.nodes[0].op_type, "Conv");
  EXPECT_EQ(folded.graph.nodes[0].outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(folded.graph.nodes[0].inputs.size(), 3u);  // gains a bias
  EXPECT_EQ(folded.graph.initializers.size(), 2u);     // the folded weights and bias only
  ir::Model training = conv_bn(true);
  EXPECT_EQ(passes::fold_batch_norm_into_conv(training), 0u);
  EXPECT_EQ(training.graph.nodes.size(), 2u);
}

TEST(KernelInfo, PacksOnlyConstantsNoOtherNodeReads) {
  ir::Node conv;
  conv.op_type = "Conv";
  conv.inputs = {"x", "W"};
  const Tensor w = Tensor::zeros(DType::kFloat32, {4, 3, 3, 3});
  auto constants = [&](std::string_view name) { return name == "W" ? &w : nullptr; };
  auto only_here = [](std::string_view) { return size_t{1}; };
  auto also_elsewhere = [](std::string_view name) { return name == "W" ? size_t{2} : size_t{1}; };
  EXPECT_EQ(KernelInfo(conv, 17, constants, only_here).packable_constant_input(1), &w);
  EXPECT_EQ(KernelInfo(conv, 17, constants, also_elsewhere).packable_constant_input(1), nullptr);
  EXPECT_EQ(KernelInfo(conv, 17, constants, also_elsewhere).constant_input(1), &w);
  EXPECT_EQ(KernelInfo(conv, 17, constants, only_here).packable_constant_input(0), nullptr);  // not a constant
}

TEST(InferenceSession, SymbolicDimensionsMustAgreeAcrossInputs) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("a", 1, {"n"});
  *g->add_input() = tensor_value("b", 1, {"n"});
  *g->add_output() = tensor_value("c", 1, {"n"});
  *g->add_node() = node("Add", {"a", "b"}, {"c"});
  InferenceSession session(as_span(bytes_of(m)));
  const std::string message = error_of([&] {
    session.run({{"a", Tensor::zeros(DType::kFloat32, {2})}, {"b", Tensor::zeros(DType::kFloat32, {1})}});
  });
  EXPECT_NE(message.find("('n') is 1, but another input gave 'n' = 2"), std::string::npos) << message;
}

TEST(InferenceSession, UnknownOpsAreListedWithTheirNodes) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"2"});
  *g->add_output() = tensor_value("y", 1, {"2"});
  *g->add_node() = node("NoSuchOp", {"x"}, {"y"}, "mystery");
  const std::string message = error_of([&] { InferenceSession session(as_span(bytes_of(m))); });
  EXPECT_NE(message.find("no kernel"), std::string::npos) << message;
  EXPECT_NE(message.find("NoSuchOp (opset 17, NoSuchOp 'mystery')"), std::string::npos) << message;
}

TEST(InferenceSession, InlinesLocalFunctionsWithoutAKernel) {
  onnx::ModelProto m = model();
  auto* lo = m.add_opset_import();
  lo->set_domain("local");
  lo->set_version(1);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"3"});
  *g->add_output() = tensor_value("y", 1, {"3"});
  onnx::NodeProto call = node("DoubleRelu", {"x"}, {"y"}, "call");
  call.set_domain("local");
  *g->add_node() = call;
  auto* f = m.add_functions();
  f->set_name("DoubleRelu");
  f->set_domain("local");
  f->add_input("a");
  f->add_output("c");
  *f->add_node() = node("Add", {"a", "a"}, {"s"});
  *f->add_node() = node("Relu", {"s"}, {"c"});
  InferenceSession session(as_span(bytes_of(m)));
  auto out = session.run({{"x", Tensor::from_vector<float>({3}, {-1, 0.5f, 2})}});
  EXPECT_EQ(std::vector<float>(out[0].values<float>().begin(), out[0].values<float>().end()),
            (std::vector<float>{0, 1, 4}));
}

TEST(InferenceSession, PassThroughOutputsAreCopies) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"2"});
  *g->add_output() = tensor_value("x", 1, {"2"});
  InferenceSession session(as_span(bytes_of(m)));
  Tensor x = Tensor::from_vector<float>({2}, {1, 2});
  auto out = session.run({{"x", x}});
  EXPECT_NE(out[0].raw_data(), x.raw_data());
  EXPECT_EQ(out[0].values<float>()[1], 2.0f);
}

namespace staged {

onnx::ModelProto two_stage_model() {
  // Stage 0: a = relu(x + x). Stage 1: y = a * g + x, with g fed only to stage 1.
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"batch", "3"});
  *g->add_input() = tensor_value("g", 1, {"batch", "3"});
  *g->add_output() = tensor_value("a", 1, {"batch", "3"});
  *g->add_output() = tensor_value("y", 1, {"batch", "3"});
  *g->add_node() = node("Add", {"x", "x"}, {"s"});
  *g->add_node() = node("Relu", {"s"}, {"a"});
  *g->add_node() = node("Mul", {"a", "g"}, {"m"});
  *g->add_node() = node("Add", {"m", "x"}, {"y"});
  return m;
}

std::vector<float> values(const Tensor& t) {
  return {t.values<float>().begin(), t.values<float>().end()};
}

TEST(Executor, StagedRunsKeepWhatLaterStagesReadAndMayBePendingTogether) {
  runtime::Executor executor(ir::load_model(as_span(bytes_of(two_stage_model()))), {});
  const runtime::Stages stages = executor.stages({{"a"}, {"y"}});
  for (int round = 0; round < 3; ++round) {  // records the plan, then runs from its arenas
    auto first = executor.start(stages);
    auto second = executor.start(stages);
    // Stage 0 needs no 'g'; the caller's x may go away: the state keeps what stage 1 reads.
    auto a1 = executor.run_stage(*first, {{"x", Tensor::from_vector<float>({1, 3}, {-1, 1, 2})}});
    auto a2 = executor.run_stage(*second, {{"x", Tensor::from_vector<float>({1, 3}, {3, -4, 5})}});
    EXPECT_EQ(values(a1[0]), (std::vector<float>{0, 2, 4}));
    EXPECT_EQ(values(a2[0]), (std::vector<float>{6, 0, 10}));
    auto y2 = executor.run_stage(*second, {{"g", Tensor::from_vector<float>({1, 3}, {1, 1, 1})}});
    auto y1 = executor.run_stage(*first, {{"g", Tensor::from_vector<float>({1, 3}, {2, 2, 2})}});
    EXPECT_EQ(values(y1[0]), (std::vector<float>{-1, 5, 10}));
    EXPECT_EQ(values(y2[0]), (std::vector<float>{9, -4, 15}));
    EXPECT_EQ(first->next_stage(), 2u);
  }
  auto dropped = executor.start(stages);  // a forward whose backward never comes
  executor.run_stage(*dropped, {{"x", Tensor::zeros(DType::kFloat32, {1, 3})}});
  dropped.reset();
  // A plain run of the first output needs no 'g' either.
  EXPECT_EQ(values(executor.run({{"x", Tensor::from_vector<float>({1, 3}, {1, 1, 1})}}, {"a"})[0]),
            (std::vector<float>{2, 2, 2}));
}

TEST(Executor, StagedRunsCheckTheirFeedsPerStage) {
  runtime::Executor executor(ir::load_model(as_span(bytes_of(two_stage_model()))), {});
  const runtime::Stages stages = executor.stages({{"a"}, {"y"}});
  auto state = executor.start(stages);
  EXPECT_NE(
      error_of([&] { executor.run_stage(*state, {}); }).find("input 'x' (float[batch, 3]) is missing from stage 0"),
      std::string::npos);
  state = executor.start(stages);
  const Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  executor.run_stage(*state, {{"x", x}});
  EXPECT_NE(error_of([&] {
              executor.run_stage(*state, {{"g", Tensor::zeros(DType::kFloat32, {1, 3})}});
            }).find("dimension 0 ('batch') is 1, but another input gave 'batch' = 2"),
            std::string::npos);
  state = executor.start(stages);
  executor.run_stage(*state, {{"x", x}});
  EXPECT_NE(error_of([&] {
              executor.run_stage(*state, {{"x", x}, {"g", x}});
            }).find("'x' was fed to an earlier stage"),
            std::string::npos);
  state = executor.start(stages);
  executor.run_stage(*state, {{"x", x}});
  executor.run_stage(*state, {{"g", x}});
  EXPECT_NE(error_of([&] { executor.run_stage(*state, {}); }).find("has run all its 2 stages"), std::string::npos);
}

}  // namespace staged

TEST(KernelRegistry, AnswersPerDeviceAndDeclaresHostInputs) {
  const auto& registry = KernelRegistry::global();
  const Device cuda{DeviceKind::kCuda, 0};
  EXPECT_NE(registry.find("", "Relu", 14), nullptr);
  EXPECT_EQ(registry.find("", "Relu", 14, cuda), nullptr);
  const KernelDef* reshape = registry.find("", "Reshape", 14, Device::cpu(), DType::kFloat32);
  ASSERT_NE(reshape, nullptr);
  EXPECT_EQ(reshape->constraints.host_inputs, std::vector<size_t>{1});
  EXPECT_EQ(Tensor::zeros(DType::kFloat32, {2}).device(), Device::cpu());
  EXPECT_EQ(cuda.to_string(), "cuda:0");
  EXPECT_NE(error_of([&] { Allocator::of(cuda); }).find("no allocator for device cuda:0"), std::string::npos);
  EXPECT_EQ(Allocator::of(Device::cpu()).allocate(128)->device(), Device::cpu());
}

}  // namespace
}  // namespace onnxtrain
