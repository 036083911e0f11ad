// Inference and three training steps through the installed C++ API, checked against
// reference numbers that run.sh computes with onnxruntime (the model's output) and
// torch (the losses of three AdamW steps from the same weights).
//
//   consumer <model.onnx> <reference.txt> <work dir>
//
// reference.txt holds whitespace-separated numbers: the input x [4, 3], the labels [4],
// the model's output for x [4, 2], then the loss of each of the three training steps.
// Exits 0 when everything matches within the tolerances below, 1 (with a message) otherwise.
#include <onnxtrain/artifacts.h>
#include <onnxtrain/checkpoint.h>
#include <onnxtrain/error.h>
#include <onnxtrain/inference_session.h>
#include <onnxtrain/training.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr int kBatch = 4, kFeatures = 3, kClasses = 2, kSteps = 3;

struct Reference {
  std::vector<float> x, output, losses;
  std::vector<int64_t> labels;
};

Reference read_reference(const std::filesystem::path& path) {
  std::ifstream in(path);
  Reference r;
  const auto read = [&](auto& values, int count) {
    for (int i = 0; i < count; ++i) {
      typename std::decay_t<decltype(values)>::value_type v;
      if (!(in >> v)) throw std::runtime_error("reference file " + path.string() + " is too short");
      values.push_back(v);
    }
  };
  read(r.x, kBatch * kFeatures);
  read(r.labels, kBatch);
  read(r.output, kBatch * kClasses);
  read(r.losses, kSteps);
  return r;
}

// |actual - expected| <= atol + rtol * |expected|, else a message naming the value.
bool close(const char* what, int index, float actual, float expected, float rtol, float atol) {
  if (std::fabs(actual - expected) <= atol + rtol * std::fabs(expected)) return true;
  std::fprintf(stderr, "%s[%d] = %.8g, expected %.8g\n", what, index, actual, expected);
  return false;
}

bool check_inference(const std::filesystem::path& model, const Reference& r) {
  onnxtrain::InferenceSession session(model);
  const auto outputs = session.run({{"x", onnxtrain::Tensor::from_vector<float>({kBatch, kFeatures}, r.x)}});
  const auto y = outputs.at(0).values<float>();
  bool ok = y.size() == r.output.size();
  for (size_t i = 0; ok && i < y.size(); ++i)
    ok = close("output", static_cast<int>(i), y[i], r.output[i], 1e-5f, 1e-6f);
  std::printf("inference: %s\n", ok ? "matches onnxruntime" : "MISMATCH");
  return ok;
}

bool check_training(const std::filesystem::path& model, const std::filesystem::path& work, const Reference& r) {
  onnxtrain::ArtifactOptions options;
  options.loss.kind = onnxtrain::LossKind::kCrossEntropy;
  onnxtrain::OptimizerOptions adamw;  // torch.optim.AdamW's rule and settings, spelled out
  adamw.adam_mode = onnxtrain::AdamWMode::kTorch;
  adamw.learning_rate = 0.05;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.999;
  adamw.epsilon = 1e-8;
  adamw.weight_decay = 0.01;
  options.optimizer = adamw;
  onnxtrain::generate_artifacts(model, work, options);

  onnxtrain::CheckpointState state = onnxtrain::load_checkpoint(work / "checkpoint");
  onnxtrain::Module module(work / "training_model.onnx", state, work / "eval_model.onnx");
  onnxtrain::Optimizer optimizer(work / "optimizer_model.onnx", module);
  const onnxtrain::Tensor x = onnxtrain::Tensor::from_vector<float>({kBatch, kFeatures}, r.x);
  const onnxtrain::Tensor labels = onnxtrain::Tensor::from_vector<int64_t>({kBatch}, r.labels);
  bool ok = true;
  for (int step = 0; step < kSteps; ++step) {
    const float loss = module.train_step({x, labels}).at(0).values<float>()[0];
    optimizer.step();
    module.lazy_reset_grad();
    std::printf("step %d: loss %.7f (torch %.7f)\n", step + 1, loss, r.losses[static_cast<size_t>(step)]);
    ok = close("loss", step, loss, r.losses[static_cast<size_t>(step)], 1e-5f, 1e-6f) && ok;
  }
  std::printf("training: %s\n", ok ? "matches torch" : "MISMATCH");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <model.onnx> <reference.txt> <work dir>\n", argv[0]);
    return 2;
  }
  try {
    const Reference reference = read_reference(argv[2]);
    const bool inference = check_inference(argv[1], reference);
    const bool training = check_training(argv[1], argv[3], reference);
    return inference && training ? 0 : 1;
  } catch (const onnxtrain::Error& e) {
    std::fprintf(stderr, "onnxtrain error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
