// The C++ training API: Module, Optimizer and LinearLRScheduler on artifacts of a linear
// model — gradients by hand, accumulation and lazy reset, updates in place, convergence,
// export for inference and the errors. Python tests compare the same API with PyTorch.
#include <gtest/gtest.h>
#include <onnxtrain/artifacts.h>
#include <onnxtrain/checkpoint.h>
#include <onnxtrain/error.h>
#include <onnxtrain/inference_session.h>
#include <onnxtrain/training.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/onnx_io.h"

namespace onnxtrain {
namespace {

namespace fs = std::filesystem;

// y = x W + b with x [batch, 2], W [2, 1], b [1]; the target comes from W* = (2, -3), b* = 0.5.
ir::Model linear_model() {
  ir::Model model;
  model.ir_version = 8;
  model.opset_imports = {{"", 17}};
  ir::Graph& g = model.graph;
  g.name = "linear";
  g.inputs = {{"x", DType::kFloat32, std::vector<ir::Dim>{{std::nullopt, "batch"}, {2, ""}}, "", ""}};
  g.outputs = {{"y", DType::kFloat32, std::vector<ir::Dim>{{std::nullopt, "batch"}, {1, ""}}, "", ""}};
  g.initializers = {{"W", Tensor::from_vector<float>({2, 1}, {0.0f, 0.0f})},
                    {"b", Tensor::from_vector<float>({1}, {0.0f})}};
  ir::Node matmul;
  matmul.op_type = "MatMul";
  matmul.inputs = {"x", "W"};
  matmul.outputs = {"xW"};
  ir::Node add;
  add.op_type = "Add";
  add.inputs = {"xW", "b"};
  add.outputs = {"y"};
  g.nodes = {matmul, add};
  return model;
}

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("onnxtrain-training-" + std::string(test->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ir::save_model(linear_model(), dir_ / "linear.onnx");
    ArtifactOptions options;
    options.requires_grad = {"W", "b"};
    options.loss.kind = LossKind::kMSE;
    options.optimizer = OptimizerOptions{};
    options.optimizer->kind = OptimizerKind::kSGD;
    options.optimizer->learning_rate = 0.1;
    generate_artifacts(dir_ / "linear.onnx", dir_, options);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A batch of 4 points and their targets under W* = (2, -3), b* = 0.5.
  static std::vector<Tensor> batch(float shift) {
    std::vector<float> x = {1, 0, 0, 1, 1, 1, -1, 2};
    std::vector<float> t;
    for (size_t i = 0; i < 8; ++i) x[i] += shift * static_cast<float>(i % 3);
    for (size_t r = 0; r < 4; ++r) t.push_back(2 * x[2 * r] - 3 * x[2 * r + 1] + 0.5f);
    return {Tensor::from_vector<float>({4, 2}, x), Tensor::from_vector<float>({4, 1}, t)};
  }

  fs::path dir_;
};

TEST_F(TrainingTest, GradientsAreMeanSquaredErrorsAndAccumulateUntilReset) {
  CheckpointState state = load_checkpoint(dir_ / "checkpoint");
  Module module(dir_ / "training_model.onnx", state, dir_ / "eval_model.onnx");
  EXPECT_EQ(module.input_names(true), (std::vector<std::string>{"x", "target"}));
  const auto data = batch(0.0f);
  const std::vector<Tensor> loss = module.train_step(data);
  // With W = 0 and b = 0 the prediction is 0: loss = mean(t^2), dL/db = -2 mean(t),
  // dL/dW_k = -2 mean(t x_k).
  const auto x = data[0].values<float>();
  const auto t = data[1].values<float>();
  float mean_t2 = 0, dW0 = 0, dW1 = 0, db = 0;
  for (size_t r = 0; r < 4; ++r) {
    mean_t2 += t[r] * t[r] / 4;
    dW0 += -2 * t[r] * x[2 * r] / 4;
    dW1 += -2 * t[r] * x[2 * r + 1] / 4;
    db += -2 * t[r] / 4;
  }
  EXPECT_NEAR(loss[0].item_as_double(), mean_t2, 1e-5);
  EXPECT_NEAR(state.parameter("W").grad.values<float>()[0], dW0, 1e-5);
  EXPECT_NEAR(state.parameter("W").grad.values<float>()[1], dW1, 1e-5);
  EXPECT_NEAR(state.parameter("b").grad.values<float>()[0], db, 1e-5);

  module.train_step(data);  // adds
  EXPECT_NEAR(state.parameter("b").grad.values<float>()[0], 2 * db, 1e-5);
  module.lazy_reset_grad();
  module.train_step(data);  // overwrites
  EXPECT_NEAR(state.parameter("b").grad.values<float>()[0], db, 1e-5);
}

TEST_F(TrainingTest, SgdConvergesUpdatingTheStateInPlace) {
  CheckpointState state = load_checkpoint(dir_ / "checkpoint");
  Module module(dir_ / "training_model.onnx", state, dir_ / "eval_model.onnx");
  Optimizer optimizer(dir_ / "optimizer_model.onnx", module);
  EXPECT_DOUBLE_EQ(optimizer.learning_rate(), 0.1);
  const void* weights = state.parameter("W").data.raw_data();
  for (int step = 0; step < 300; ++step) {
    module.train_step(batch(static_cast<float>(step % 5) * 0.3f));
    optimizer.step();
    module.lazy_reset_grad();
  }
  EXPECT_EQ(state.parameter("W").data.raw_data(), weights);  // no new buffers: updated in place
  EXPECT_EQ(optimizer.step_count(), 300);
  EXPECT_NEAR(state.parameter("W").data.values<float>()[0], 2.0f, 1e-3);
  EXPECT_NEAR(state.parameter("W").data.values<float>()[1], -3.0f, 1e-3);
  EXPECT_NEAR(state.parameter("b").data.values<float>()[0], 0.5f, 1e-3);
  EXPECT_LT(module.eval_step(batch(0.0f))[0].item_as_double(), 1e-6);

  module.export_model_for_inferencing(dir_ / "inference.onnx", {"y"});
  InferenceSession session(dir_ / "inference.onnx");
  ASSERT_EQ(session.inputs().size(), 1u);
  const Tensor y = session.run({{"x", Tensor::from_vector<float>({1, 2}, {1.0f, 1.0f})}})[0];
  EXPECT_NEAR(y.values<float>()[0], 2.0f - 3.0f + 0.5f, 1e-3);
}

TEST_F(TrainingTest, ParametersAsOneBuffer) {
  CheckpointState state = load_checkpoint(dir_ / "checkpoint");
  Module module(dir_ / "training_model.onnx", state);
  EXPECT_EQ(module.parameters_size(true), 3);
  module.copy_buffer_to_parameters(Tensor::from_vector<float>({3}, {1, 2, 3}), true);
  EXPECT_EQ(state.parameter("b").data.values<float>()[0], 3.0f);
  const Tensor flat = module.contiguous_parameters(false);
  EXPECT_EQ(std::vector<float>(flat.values<float>().begin(), flat.values<float>().end()),
            (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(module.copy_buffer_to_parameters(Tensor::from_vector<float>({2}, {1, 2}), true), Error);
}

TEST_F(TrainingTest, LinearScheduleWarmsUpThenDecays) {
  CheckpointState state = load_checkpoint(dir_ / "checkpoint");
  Module module(dir_ / "training_model.onnx", state);
  Optimizer optimizer(dir_ / "optimizer_model.onnx", module);
  LinearLRScheduler scheduler(optimizer, 2, 4, 1.0);
  std::vector<double> rates = {optimizer.learning_rate()};
  for (int i = 0; i < 5; ++i) {
    module.train_step(batch(0.0f));
    optimizer.step();
    scheduler.step();
    rates.push_back(optimizer.learning_rate());
  }
  EXPECT_EQ(rates, (std::vector<double>{0.0, 0.5, 1.0, 0.5, 0.0, 0.0}));
}

TEST_F(TrainingTest, MistakesAreClearErrors) {
  CheckpointState state = load_checkpoint(dir_ / "checkpoint");
  Module module(dir_ / "training_model.onnx", state);
  Optimizer optimizer(dir_ / "optimizer_model.onnx", module);
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { optimizer.step(); }).find("no gradients have been computed yet"), std::string::npos);
  EXPECT_NE(message([&] { module.eval_step(batch(0.0f)); }).find("no eval model"), std::string::npos);
  EXPECT_NE(message([&] { module.train_step({batch(0.0f)[0]}); }).find("takes 2 inputs (x, target), got 1"),
            std::string::npos);
  EXPECT_NE(message([&] {
              module.train_step({Tensor::zeros(DType::kFloat32, {4, 3}), batch(0.0f)[1]});
            }).find("input 'x'"),
            std::string::npos);

  CheckpointState other;
  other.add_parameter("W", Tensor::zeros(DType::kFloat32, {3, 1}), true);
  other.add_parameter("b", Tensor::zeros(DType::kFloat32, {1}), true);
  EXPECT_NE(message([&] {
              Module(dir_ / "training_model.onnx", other);
            }).find("parameter 'W' is float[3, 1] in the checkpoint, but training_model.onnx takes float[2, 1]"),
            std::string::npos);
  CheckpointState stranger;
  stranger.add_parameter("fc.weight", Tensor::zeros(DType::kFloat32, {2}), true);
  EXPECT_NE(message([&] { Module(dir_ / "training_model.onnx", stranger); }).find("does not have"), std::string::npos);
}

}  // namespace
}  // namespace onnxtrain
