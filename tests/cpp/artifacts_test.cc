// generate_artifacts in C++: the models' interface, loss and gradients of a linear model
// computed by hand, gradient accumulation and optimizer steps written in place into the
// caller's buffers (Executor destinations), the checkpoint, and the errors.
// tests/python/training/test_artifacts.py compares against PyTorch and onnxruntime.
#include <gtest/gtest.h>
#include <onnxtrain/artifacts.h>
#include <onnxtrain/checkpoint.h>
#include <onnxtrain/error.h>
#include <onnxtrain/inference_session.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"

namespace onnxtrain {
namespace {

namespace fs = std::filesystem;

class ArtifactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("onnxtrain-artifacts-" + std::string(test->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ir::save_model(linear_model(), dir_ / "linear.onnx");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // y = x W + b, x [batch, 2]; an unused float initializer "scale" and an int64 "axes".
  static ir::Model linear_model() {
    ir::Model model;
    model.ir_version = 8;
    model.opset_imports = {{"", 17}};
    ir::Graph& g = model.graph;
    g.name = "linear";
    ir::ValueInfo x{"x", DType::kFloat32, std::vector<ir::Dim>{{std::nullopt, "batch"}, {2, ""}}, "", ""};
    ir::ValueInfo y{"y", DType::kFloat32, std::vector<ir::Dim>{{std::nullopt, "batch"}, {2, ""}}, "", ""};
    g.inputs = {x};
    g.outputs = {y};
    g.initializers = {{"W", Tensor::from_vector<float>({2, 2}, {0.5f, -1.0f, 2.0f, 0.25f})},
                      {"b", Tensor::from_vector<float>({2}, {0.1f, -0.2f})},
                      {"scale", Tensor::scalar<float>(3.0f)},
                      {"axes", Tensor::from_vector<int64_t>({1}, {0})}};
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

  ArtifactOptions options() const {
    ArtifactOptions o;
    o.requires_grad = {"W", "b"};
    o.loss.kind = LossKind::kMSE;
    o.warnings = &warnings_;
    return o;
  }

  fs::path dir_;
  mutable std::vector<std::string> warnings_;
};

std::vector<std::string> names(const std::vector<ValueMetadata>& values) {
  std::vector<std::string> result;
  for (const auto& v : values) result.push_back(v.name);
  return result;
}

const Tensor kX = Tensor::from_vector<float>({3, 2}, {1.0f, 2.0f, -1.0f, 0.5f, 3.0f, -2.0f});
const Tensor kTarget = Tensor::from_vector<float>({3, 2}, {0.0f, 1.0f, 1.0f, -1.0f, 2.0f, 0.5f});

// The MSE loss (mean) of y = x W + b and its gradients, by hand.
struct Expected {
  float loss = 0;
  std::vector<float> dW = std::vector<float>(4, 0.0f), db = std::vector<float>(2, 0.0f);
};

Expected mse_by_hand(const Tensor& W, const Tensor& b) {
  Expected e;
  const float* x = kX.data<float>();
  const float* t = kTarget.data<float>();
  for (int n = 0; n < 3; ++n) {
    for (int j = 0; j < 2; ++j) {
      const float y = x[n * 2] * W.data<float>()[j] + x[n * 2 + 1] * W.data<float>()[2 + j] + b.data<float>()[j];
      const float r = y - t[n * 2 + j];
      e.loss += r * r / 6;
      const float dy = 2 * r / 6;
      e.db[j] += dy;
      e.dW[j] += x[n * 2] * dy;
      e.dW[2 + j] += x[n * 2 + 1] * dy;
    }
  }
  return e;
}

void expect_values(const Tensor& t, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size())) << what;
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(t.data<float>()[i], expected[i], 1e-5) << what << "[" << i << "]";
}

TEST_F(ArtifactsTest, WritesTheModelsWithTheirInterface) {
  ArtifactOptions o = options();
  o.frozen_params = {"scale"};
  o.prefix = "p_";
  o.nominal_checkpoint = true;
  generate_artifacts(dir_ / "linear.onnx", dir_ / "out", o);
  for (const char* file : {"p_training_model.onnx", "p_eval_model.onnx", "p_optimizer_model.onnx", "p_checkpoint",
                           "p_nominal_checkpoint"}) {
    EXPECT_TRUE(fs::exists(dir_ / "out" / file)) << file;
  }
  InferenceSession eval(dir_ / "out" / "p_eval_model.onnx");
  EXPECT_EQ(names(eval.inputs()), (std::vector<std::string>{"x", "target", "W", "b", "scale"}));
  EXPECT_EQ(names(eval.outputs()), (std::vector<std::string>{"loss"}));
  InferenceSession training(dir_ / "out" / "p_training_model.onnx");
  EXPECT_EQ(names(training.inputs()),
            (std::vector<std::string>{"x", "target", "W", "b", "scale", "W_grad.accumulation.buffer",
                                      "b_grad.accumulation.buffer", "lazy_reset_grad"}));
  EXPECT_EQ(names(training.outputs()),
            (std::vector<std::string>{"loss", "W_grad.accumulation.out", "b_grad.accumulation.out"}));
  const ir::Model optimizer = ir::load_model(dir_ / "out" / "p_optimizer_model.onnx");
  std::vector<std::string> inputs;
  for (const auto& v : optimizer.graph.inputs) inputs.push_back(v.name);
  EXPECT_EQ(inputs, (std::vector<std::string>{"learning_rate", "step", "W", "W_grad", "W.exp_avg", "W.exp_avg_sq", "b",
                                              "b_grad", "b.exp_avg", "b.exp_avg_sq"}));
  EXPECT_EQ(optimizer.metadata_props,
            (std::vector<std::pair<std::string, std::string>>{{"onnxtrain.optimizer", "AdamW"},
                                                              {"onnxtrain.moments", "exp_avg,exp_avg_sq"}}));
  EXPECT_TRUE(warnings_.empty());  // "axes" is an integer constant: no warning

  const CheckpointState state = load_checkpoint(dir_ / "out" / "p_checkpoint");
  ASSERT_EQ(state.parameters().size(), 3u);
  EXPECT_TRUE(state.parameter("W").requires_grad);
  EXPECT_FALSE(state.parameter("scale").requires_grad);
  EXPECT_EQ(state.optimizer_state().step, 0);
  EXPECT_DOUBLE_EQ(state.optimizer_state().learning_rate, 1e-3);
  EXPECT_TRUE(state.optimizer_state().moments.empty());
  EXPECT_TRUE(load_checkpoint(dir_ / "out" / "p_nominal_checkpoint").is_nominal());
}

TEST_F(ArtifactsTest, LossAndGradientsOfALinearModel) {
  ArtifactOptions o = options();
  o.additional_output_names = {"xW"};  // an intermediate value
  generate_artifacts(dir_ / "linear.onnx", dir_, o);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("'scale'"), std::string::npos) << warnings_[0];
  const Tensor W = Tensor::from_vector<float>({2, 2}, {0.5f, -1.0f, 2.0f, 0.25f});
  const Tensor b = Tensor::from_vector<float>({2}, {0.1f, -0.2f});
  const Expected e = mse_by_hand(W, b);

  InferenceSession eval(dir_ / "eval_model.onnx");
  const auto loss = eval.run({{"x", kX}, {"target", kTarget}, {"W", W}, {"b", b}});
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_NEAR(loss[0].item_as_double(), e.loss, 1e-5);
  EXPECT_EQ(loss[1].shape(), (Shape{3, 2}));
  EXPECT_NEAR(loss[1].data<float>()[0], 1.0f * 0.5f + 2.0f * 2.0f, 1e-6);  // x[0] . W[:, 0]

  InferenceSession training(dir_ / "training_model.onnx");
  const auto out = training.run({{"x", kX},
                                 {"target", kTarget},
                                 {"W", W},
                                 {"b", b},
                                 {"W_grad.accumulation.buffer", Tensor::zeros(DType::kFloat32, {2, 2})},
                                 {"b_grad.accumulation.buffer", Tensor::zeros(DType::kFloat32, {2})},
                                 {"lazy_reset_grad", Tensor::scalar<bool>(true)}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NEAR(out[0].item_as_double(), e.loss, 1e-5);
  expect_values(out[2], e.dW, "dW");
  expect_values(out[3], e.db, "db");
}

TEST_F(ArtifactsTest, AccumulatesIntoTheCallersBuffers) {
  generate_artifacts(dir_ / "linear.onnx", dir_, options());
  runtime::Executor executor(ir::load_model(dir_ / "training_model.onnx"), {});
  const Tensor W = Tensor::from_vector<float>({2, 2}, {0.5f, -1.0f, 2.0f, 0.25f});
  const Tensor b = Tensor::from_vector<float>({2}, {0.1f, -0.2f});
  const Expected e = mse_by_hand(W, b);
  Tensor dW = Tensor::from_vector<float>({2, 2}, {1.0f, 1.0f, 1.0f, 1.0f});
  Tensor db = Tensor::from_vector<float>({2}, {-1.0f, 2.0f});
  const void* dW_memory = dW.raw_data();
  const Tensor keep = Tensor::scalar<bool>(false);
  const Tensor reset = Tensor::scalar<bool>(true);
  auto run = [&](const Tensor& reset_flag) {
    const NamedTensors feeds{{"x", kX},
                             {"target", kTarget},
                             {"W", W},
                             {"b", b},
                             {"W_grad.accumulation.buffer", dW},
                             {"b_grad.accumulation.buffer", db},
                             {"lazy_reset_grad", reset_flag}};
    const auto out =
        executor.run(feeds, {"loss", "W_grad.accumulation.out", "b_grad.accumulation.out"}, {Tensor(), dW, db});
    EXPECT_EQ(out[1].raw_data(), dW_memory);
  };
  run(keep);
  expect_values(dW, {1 + e.dW[0], 1 + e.dW[1], 1 + e.dW[2], 1 + e.dW[3]}, "dW after adding");
  expect_values(db, {-1 + e.db[0], 2 + e.db[1]}, "db after adding");
  run(reset);
  expect_values(dW, e.dW, "dW after a reset");
  const uint64_t allocations = Storage::heap_allocation_count();
  run(keep);
  expect_values(dW, {2 * e.dW[0], 2 * e.dW[1], 2 * e.dW[2], 2 * e.dW[3]}, "dW accumulated twice");
  // Planned: only the loss, handed to the caller, gets memory; the gradients go in place.
  EXPECT_EQ(Storage::heap_allocation_count() - allocations, 1u);
}

TEST_F(ArtifactsTest, AdamWUpdatesTheCallersParametersInPlace) {
  ArtifactOptions o = options();
  o.optimizer->adam_mode = AdamWMode::kTorch;
  o.optimizer->weight_decay = 0.1;
  generate_artifacts(dir_ / "linear.onnx", dir_, o);
  runtime::Executor executor(ir::load_model(dir_ / "optimizer_model.onnx"), {});
  Tensor W = Tensor::from_vector<float>({2, 2}, {0.5f, -1.0f, 2.0f, 0.25f});
  Tensor b = Tensor::from_vector<float>({2}, {0.1f, -0.2f});
  const Tensor gW = Tensor::from_vector<float>({2, 2}, {0.2f, -0.4f, 1.0f, 0.0f});
  const Tensor gb = Tensor::from_vector<float>({2}, {3.0f, -0.5f});
  Tensor mW = Tensor::zeros(DType::kFloat32, {2, 2}), vW = Tensor::zeros(DType::kFloat32, {2, 2});
  Tensor mb = Tensor::zeros(DType::kFloat32, {2}), vb = Tensor::zeros(DType::kFloat32, {2});
  const double lr = 0.01;
  const NamedTensors feeds{{"learning_rate", Tensor::scalar<float>(static_cast<float>(lr))},
                           {"step", Tensor::scalar<int64_t>(1)},
                           {"W", W},
                           {"W_grad", gW},
                           {"W.exp_avg", mW},
                           {"W.exp_avg_sq", vW},
                           {"b", b},
                           {"b_grad", gb},
                           {"b.exp_avg", mb},
                           {"b.exp_avg_sq", vb}};
  const std::vector<std::string> outputs{"W.out", "W.exp_avg.out", "W.exp_avg_sq.out",
                                         "b.out", "b.exp_avg.out", "b.exp_avg_sq.out"};
  const Tensor W0 = W.clone();
  executor.run(feeds, outputs, {W, mW, vW, b, mb, vb});
  // Step 1 with zero moments: m = (1 - beta1) g, v = (1 - beta2) g^2, and the corrected
  // update is lr * g / (|g| + eps), after the decay p *= 1 - lr * wd.
  for (int i = 0; i < 4; ++i) {
    const double g = gW.data<float>()[i];
    const double expected = W0.data<float>()[i] * (1 - lr * 0.1) - lr * g / (std::abs(g) + 1e-8);
    EXPECT_NEAR(W.data<float>()[i], expected, 1e-6) << i;
    EXPECT_NEAR(mW.data<float>()[i], 0.1 * g, 1e-7) << i;
    EXPECT_NEAR(vW.data<float>()[i], 0.001 * g * g, 1e-8) << i;
  }
  // Once planned, a step allocates nothing: every update is written in place.
  NamedTensors next = feeds;
  next[1].second = Tensor::scalar<int64_t>(2);
  const uint64_t allocations = Storage::heap_allocation_count();
  executor.run(next, outputs, {W, mW, vW, b, mb, vb});
  EXPECT_EQ(Storage::heap_allocation_count(), allocations);
}

TEST_F(ArtifactsTest, SgdWithoutMomentumKeepsNoMoments) {
  ArtifactOptions o = options();
  o.optimizer->kind = OptimizerKind::kSGD;
  o.optimizer->learning_rate = 0.5;
  generate_artifacts(dir_ / "linear.onnx", dir_, o);
  const ir::Model optimizer = ir::load_model(dir_ / "optimizer_model.onnx");
  ASSERT_EQ(optimizer.graph.nodes.size(), 2u);
  EXPECT_EQ(optimizer.graph.nodes[0].op_type, "SGDStep");
  EXPECT_EQ(optimizer.metadata_props[1].second, "");
  InferenceSession session(dir_ / "optimizer_model.onnx");
  const auto out = session.run({{"learning_rate", Tensor::scalar<float>(0.5f)},
                                {"step", Tensor::scalar<int64_t>(1)},
                                {"W", Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4})},
                                {"W_grad", Tensor::from_vector<float>({2, 2}, {2, 2, -2, 0})},
                                {"b", Tensor::from_vector<float>({2}, {0, 0})},
                                {"b_grad", Tensor::from_vector<float>({2}, {1, 1})}});
  expect_values(out[0], {0, 1, 4, 4}, "W");
  expect_values(out[1], {-0.5f, -0.5f}, "b");
  EXPECT_DOUBLE_EQ(load_checkpoint(dir_ / "checkpoint").optimizer_state().learning_rate, 0.5);
}

TEST_F(ArtifactsTest, CrossEntropyFromBytesWithoutOptimizer) {
  const std::string bytes = ir::serialize_model(linear_model());
  ArtifactOptions o = options();
  o.loss.kind = LossKind::kCrossEntropy;
  o.loss.ignore_index = -1;
  o.loss.reduction = Reduction::kSum;
  o.optimizer.reset();
  generate_artifacts(std::as_bytes(std::span(bytes.data(), bytes.size())), dir_ / "ce", o);
  EXPECT_FALSE(fs::exists(dir_ / "ce" / "optimizer_model.onnx"));
  EXPECT_FALSE(load_checkpoint(dir_ / "ce" / "checkpoint").has_optimizer_state());
  InferenceSession eval(dir_ / "ce" / "eval_model.onnx");
  EXPECT_EQ(names(eval.inputs()), (std::vector<std::string>{"x", "labels", "W", "b"}));
  EXPECT_EQ(eval.inputs()[1].dtype, DType::kInt64);
  // Scores [[0, 1], [ln 3, 0]] for the labels 1 (ignored in the second row: -1).
  const auto loss = eval.run({{"x", Tensor::from_vector<float>({2, 2}, {0, 1, 1, 0})},
                              {"labels", Tensor::from_vector<int64_t>({2}, {1, -1})},
                              {"W", Tensor::from_vector<float>({2, 2}, {static_cast<float>(std::log(3.0)), 0, 0, 1})},
                              {"b", Tensor::from_vector<float>({2}, {0, 0})}});
  EXPECT_NEAR(loss[0].item_as_double(), std::log(1 + std::exp(-1.0)), 1e-6);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
  }
}

TEST_F(ArtifactsTest, ErrorsNameTheCulprit) {
  const fs::path model = dir_ / "linear.onnx";
  const fs::path out = dir_ / "out";
  auto with = [&](const std::function<void(ArtifactOptions&)>& change) {
    return [&, change] {
      ArtifactOptions o = options();
      change(o);
      generate_artifacts(model, out, o);
    };
  };
  expect_error(with([](ArtifactOptions& o) { o.requires_grad = {"V"}; }), "requires_grad: 'V' is not an initializer");
  expect_error(with([](ArtifactOptions& o) { o.frozen_params = {"b"}; }), "'b' is listed both");
  expect_error(with([](ArtifactOptions& o) { o.requires_grad = {"W", "axes"}; }), "parameter 'axes' holds int64");
  expect_error(with([](ArtifactOptions& o) { o.requires_grad = {"W", "scale"}; }), "does not depend on 'scale'");
  expect_error(with([](ArtifactOptions& o) { o.loss_input_names = {"z"}; }), "loss_input_names: 'z'");
  expect_error(with([](ArtifactOptions& o) { o.additional_output_names = {"loss"}; }), "'loss'");
  expect_error(with([](ArtifactOptions& o) { o.loss.ignore_index = 3; }), "no ignore_index");
  expect_error(with([](ArtifactOptions& o) { o.optimizer->beta2 = 1.0; }), "beta2");
  expect_error(with([](ArtifactOptions& o) {
                 o.optimizer->kind = OptimizerKind::kSGD;
                 o.optimizer->nesterov = true;
               }),
               "nesterov");
  EXPECT_FALSE(fs::exists(out / "training_model.onnx"));
  const std::string ort = std::string("\x1c\0\0\0ORTM", 8) + std::string(32, '\0');
  expect_error([&] { generate_artifacts(std::as_bytes(std::span(ort.data(), ort.size())), out, options()); },
               "ONNX Runtime flatbuffer");
}

// Huber and KLDiv (batchmean over the dynamic batch axis: Shape, Gather, Cast) of y = x W + b
// with W = I and b = 0, so y = x = [[0, 1], [1, 0]].
TEST_F(ArtifactsTest, HuberAndKLDivFromGenerateArtifacts) {
  const Tensor x = Tensor::from_vector<float>({2, 2}, {0, 1, 1, 0});
  const Tensor identity = Tensor::from_vector<float>({2, 2}, {1, 0, 0, 1});
  const Tensor zero = Tensor::from_vector<float>({2}, {0, 0});
  auto loss_of = [&](const LossOptions& loss, const std::string& name, const Tensor& target) {
    ArtifactOptions o = options();
    o.loss = loss;
    generate_artifacts(dir_ / "linear.onnx", dir_ / name, o);
    InferenceSession eval(dir_ / name / "eval_model.onnx");
    EXPECT_EQ(names(eval.inputs()), (std::vector<std::string>{"x", "target", "W", "b"}));
    return eval.run({{"x", x}, {"target", target}, {"W", identity}, {"b", zero}})[0].item_as_double();
  };
  LossOptions huber;
  huber.kind = LossKind::kHuber;
  huber.delta = 0.5;
  // |d| = 1 twice: delta (|d| - delta / 2) = 0.375 each, over 4 elements.
  EXPECT_NEAR(loss_of(huber, "huber", Tensor::zeros(DType::kFloat32, {2, 2})), 0.1875, 1e-6);
  LossOptions kl_div;
  kl_div.kind = LossKind::kKLDiv;
  kl_div.reduction = Reduction::kBatchMean;
  // sum of 0.5 (log 0.5 - y) over the 4 elements, divided by the batch size 2.
  EXPECT_NEAR(loss_of(kl_div, "kl_div", Tensor::from_vector<float>({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f})),
              std::log(0.5) - 0.5, 1e-6);
}

TEST_F(ArtifactsTest, LossModelNamesItsInterfaceAsAsked) {
  const fs::path model = dir_ / "linear.onnx";
  LossOptions mse;
  mse.kind = LossKind::kMSE;
  const LossModel plain = build_loss_model(model, "y", mse);
  EXPECT_EQ(plain.output, "loss");
  EXPECT_EQ(plain.label, "target");
  const std::string bytes = plain.model;
  const ir::Model loss = ir::load_model(std::as_bytes(std::span(bytes.data(), bytes.size())));
  ASSERT_EQ(loss.graph.inputs.size(), 2u);
  EXPECT_EQ(loss.graph.inputs[0].name, "y");
  const ir::ValueInfo& target = loss.graph.inputs[1];
  EXPECT_EQ(target.name, "target");
  ASSERT_TRUE(target.shape && target.shape->size() == 2);
  EXPECT_EQ((*target.shape)[0].param, "");  // y's axis "batch" is not passed on
  EXPECT_EQ((*target.shape)[1].value, 2);
  ASSERT_EQ(loss.graph.outputs.size(), 1u);
  EXPECT_EQ(loss.graph.outputs[0].name, "loss");
  EXPECT_EQ(loss.graph.nodes.back().outputs[0], "loss");

  LossNames fresh{"t", TakenName::kError, "y", TakenName::kFresh};
  EXPECT_EQ(build_loss_model(model, "y", mse, fresh).output, "y_1");
  LossNames shared{"x", TakenName::kShare, "", TakenName::kError};
  EXPECT_EQ(build_loss_model(model, "y", mse, shared).label, "x");

  auto with_names = [&](LossNames names) { return [&, names] { build_loss_model(model, "y", mse, names); }; };
  expect_error(with_names({"x", TakenName::kError, "", TakenName::kError}), "already has a value named 'x'");
  expect_error(with_names({"xW", TakenName::kShare, "", TakenName::kError}), "'xW' to share is no graph input");
  expect_error(with_names({"", TakenName::kError, "y", TakenName::kError}), "already has a value named 'y'");
  expect_error([&] { build_loss_model(model, "nope", mse); }, "'nope' is not a value of the model");
  LossOptions nll;
  nll.kind = LossKind::kNLL;
  nll.weight = {1, 2, 3};
  expect_error([&] { build_loss_model(model, "y", nll); }, "3 class weights for the 2 classes of 'y'");
  LossOptions smoothed;
  smoothed.kind = LossKind::kMSE;
  smoothed.label_smoothing = 0.1;
  expect_error([&] { build_loss_model(model, "y", smoothed); }, "no label_smoothing");
}

}  // namespace
}  // namespace onnxtrain
