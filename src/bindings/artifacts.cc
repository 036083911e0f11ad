// onnxtrain._C: training artifacts. The Python layer (onnxtrain/training/artifacts.py)
// turns LossType / OptimType / option objects into the plain options dict read here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <onnxtrain/artifacts.h>
#include <onnxtrain/error.h>
#include <onnxtrain/inference_session.h>

#include <tuple>
#include <type_traits>

#include "bindings/bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace onnxtrain::bindings {
namespace {

template <typename T>
void read(const nb::dict& options, const char* key, T& value) {
  if (!options.contains(key)) return;
  nb::object item = options[key];
  if (item.is_none()) return;
  if (!nb::try_cast(item, value)) {
    throw Error(std::string("generate_artifacts: option '") + key + "' has the wrong type",
                ErrorKind::kInvalidArgument);
  }
}

template <typename Enum>
Enum read_choice(const nb::dict& options, const char* key, std::initializer_list<std::pair<const char*, Enum>> choices,
                 Enum fallback) {
  std::string text;
  read(options, key, text);
  if (text.empty()) return fallback;
  std::string known;
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  throw Error(std::string("generate_artifacts: ") + key + " '" + text + "' is not one of: " + known,
              ErrorKind::kInvalidArgument);
}

LossOptions loss_options(const nb::dict& o) {
  LossOptions loss;
  loss.kind = read_choice<LossKind>(o, "loss",
                                    {{"none", LossKind::kNone},
                                     {"mse", LossKind::kMSE},
                                     {"cross_entropy", LossKind::kCrossEntropy},
                                     {"bce_with_logits", LossKind::kBCEWithLogits},
                                     {"l1", LossKind::kL1},
                                     {"huber", LossKind::kHuber},
                                     {"smooth_l1", LossKind::kSmoothL1},
                                     {"nll", LossKind::kNLL},
                                     {"kl_div", LossKind::kKLDiv}},
                                    LossKind::kNone);
  loss.reduction = read_choice<Reduction>(o, "reduction",
                                          {{"mean", Reduction::kMean},
                                           {"sum", Reduction::kSum},
                                           {"none", Reduction::kNone},
                                           {"batchmean", Reduction::kBatchMean}},
                                          Reduction::kMean);
  read(o, "weight", loss.weight);
  read(o, "pos_weight", loss.pos_weight);
  int64_t ignore_index = 0;
  if (o.contains("ignore_index") && !o["ignore_index"].is_none()) {
    read(o, "ignore_index", ignore_index);
    loss.ignore_index = ignore_index;
  }
  read(o, "label_smoothing", loss.label_smoothing);
  read(o, "delta", loss.delta);
  read(o, "beta", loss.beta);
  read(o, "log_target", loss.log_target);
  return loss;
}

TakenName read_taken(const nb::dict& o, const char* key) {
  return read_choice<TakenName>(
      o, key, {{"error", TakenName::kError}, {"fresh", TakenName::kFresh}, {"share", TakenName::kShare}},
      TakenName::kError);
}

ArtifactOptions artifact_options(const nb::dict& o) {
  ArtifactOptions options;
  read(o, "requires_grad", options.requires_grad);
  read(o, "frozen_params", options.frozen_params);
  read(o, "loss_input_names", options.loss_input_names);
  read(o, "additional_output_names", options.additional_output_names);
  read(o, "prefix", options.prefix);
  read(o, "nominal_checkpoint", options.nominal_checkpoint);
  options.loss = loss_options(o);

  if (o.contains("optimizer") && o["optimizer"].is_none()) {
    options.optimizer.reset();
    return options;
  }
  OptimizerOptions& optimizer = *options.optimizer;
  optimizer.kind = read_choice<OptimizerKind>(
      o, "optimizer", {{"adamw", OptimizerKind::kAdamW}, {"sgd", OptimizerKind::kSGD}}, OptimizerKind::kAdamW);
  read(o, "learning_rate", optimizer.learning_rate);
  read(o, "beta1", optimizer.beta1);
  read(o, "beta2", optimizer.beta2);
  read(o, "epsilon", optimizer.epsilon);
  read(o, "weight_decay", optimizer.weight_decay);
  read(o, "bias_correction", optimizer.bias_correction);
  optimizer.adam_mode =
      read_choice<AdamWMode>(o, "adam_mode", {{"torch", AdamWMode::kTorch}, {"huggingface", AdamWMode::kHuggingFace}},
                             AdamWMode::kHuggingFace);
  read(o, "momentum", optimizer.momentum);
  read(o, "dampening", optimizer.dampening);
  read(o, "nesterov", optimizer.nesterov);
  read(o, "sgd_weight_decay", optimizer.sgd_weight_decay);
  if (o.contains("max_grad_norm") && !o["max_grad_norm"].is_none()) {
    double max_grad_norm = 0;
    read(o, "max_grad_norm", max_grad_norm);
    optimizer.max_grad_norm = max_grad_norm;
  }
  return options;
}

}  // namespace

void bind_artifacts(nb::module_& m) {
  m.def(
      "generate_artifacts",
      [](nb::object model, const std::filesystem::path& directory, nb::dict options_dict,
         const std::filesystem::path& base_dir) {
        ArtifactOptions options = artifact_options(options_dict);
        std::vector<std::string> warnings;
        options.warnings = &warnings;
        if (nb::isinstance<nb::bytes>(model)) {
          auto bytes = nb::cast<nb::bytes>(model);
          std::span<const std::byte> span(static_cast<const std::byte*>(bytes.data()), bytes.size());
          nb::gil_scoped_release release;
          generate_artifacts(span, directory, options, base_dir);
        } else {
          const auto path = nb::cast<std::filesystem::path>(model);
          nb::gil_scoped_release release;
          generate_artifacts(path, directory, options);
        }
        return warnings;
      },
      "model"_a, "directory"_a, "options"_a, "base_dir"_a = std::filesystem::path(),
      "Writes the training artifacts of a serialized model (bytes) or a model file (path); returns the warnings.");

  // For onnxblock.optim: the optimizer model of the given parameters (name, ONNX element
  // type, static shape), with the optimizer options generate_artifacts reads.
  m.def(
      "build_optimizer_model",
      [](const std::vector<std::tuple<std::string, int32_t, std::vector<int64_t>>>& parameters, nb::dict options_dict) {
        const ArtifactOptions options = artifact_options(options_dict);
        if (!options.optimizer) {
          throw Error("build_optimizer_model: no optimizer in the options", ErrorKind::kInvalidArgument);
        }
        std::vector<ValueMetadata> specs;
        for (const auto& [name, code, dims] : parameters) {
          specs.push_back({name, dtype_from_onnx(code), true, dims, std::vector<std::string>(dims.size())});
        }
        const std::string bytes = build_optimizer_model(specs, *options.optimizer);
        return nb::bytes(bytes.data(), bytes.size());
      },
      "parameters"_a, "options"_a,
      "The optimizer model (serialized) updating the given parameters (name, ONNX element type, shape).");

  // For onnxblock.loss: the loss of one value of a model (bytes or path), built apart, with the
  // loss options generate_artifacts reads and the names of its interface: "label_name",
  // "loss_output_name" (empty: the defaults) and what to do when they are taken,
  // "label_taken" / "loss_output_taken" ("error", "fresh", "share").
  m.def(
      "build_loss_model",
      [](nb::object model, const std::string& input_name, nb::dict options_dict,
         const std::filesystem::path& base_dir) {
        const LossOptions options = loss_options(options_dict);
        LossNames names;
        read(options_dict, "label_name", names.label);
        read(options_dict, "loss_output_name", names.output);
        names.label_taken = read_taken(options_dict, "label_taken");
        names.output_taken = read_taken(options_dict, "loss_output_taken");
        const LossModel loss = with_model_source(model, [&](const auto& source) {
          if constexpr (std::is_same_v<std::decay_t<decltype(source)>, std::filesystem::path>) {
            return build_loss_model(source, input_name, options, names);
          } else {
            return build_loss_model(source, input_name, options, names, base_dir);
          }
        });
        return std::make_tuple(nb::bytes(loss.model.data(), loss.model.size()), loss.output, loss.label);
      },
      "model"_a, "input_name"_a, "options"_a, "base_dir"_a = std::filesystem::path(),
      "The loss of the value input_name of a serialized model (bytes) or a model file (path), as a serialized "
      "model of its own (inputs: the loss input and the label; output: the loss); returns (model, loss output "
      "name, label name).");
}

}  // namespace onnxtrain::bindings
