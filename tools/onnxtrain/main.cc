// The onnxtrain command line: `onnxtrain inspect model.onnx`,
// `onnxtrain gen-artifacts model.onnx --out artifacts --loss cross-entropy`. The Python
// package's console script (python/onnxtrain/_cli.py) is the front door: it adds `train` and
// `--version` and runs this binary for the other commands.
#include <onnxtrain/artifacts.h>
#include <onnxtrain/error.h>
#include <onnxtrain/inference_session.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/onnx_io.h"
#include "ir/shape_inference.h"
#include "ops/kernel_registry.h"

namespace {

using onnxtrain::ir::Model;

std::string type_text(const onnxtrain::ir::ValueInfo& v) {
  std::string text(onnxtrain::dtype_name(v.dtype));
  if (!v.shape) return text + "[?]";
  text += "[";
  for (size_t i = 0; i < v.shape->size(); ++i) {
    const auto& d = (*v.shape)[i];
    text += (i ? ", " : "") + (d.value ? std::to_string(*d.value) : d.param.empty() ? "?" : d.param);
  }
  return text + "]";
}

void count_ops(const Model& model, const std::vector<onnxtrain::ir::Node>& nodes, std::map<std::string, int>& histogram,
               std::map<std::string, std::string>& missing) {
  const auto& registry = onnxtrain::KernelRegistry::global();
  for (const auto& node : nodes) {
    const std::string op = (node.domain.empty() ? "" : node.domain + "::") + node.op_type;
    ++histogram[op];
    const int64_t opset = model.opset(node.domain).value_or(0);
    if (registry.find(node.domain, node.op_type, opset) != nullptr) continue;
    if (const auto* f = model.function(node.domain, node.op_type)) {
      count_ops(model, f->nodes, histogram, missing);  // inlined at load
      continue;
    }
    missing[op] = "opset " + std::to_string(opset);
  }
}

int inspect(const std::string& path) {
  const Model model = onnxtrain::ir::load_model(path);
  std::printf("model: %s\n", path.c_str());
  std::printf("producer: %s %s, ir_version %lld\n", model.producer_name.c_str(), model.producer_version.c_str(),
              static_cast<long long>(model.ir_version));
  std::printf("opsets:");
  for (const auto& o : model.opset_imports) {
    std::printf(" %s=%lld", o.domain.empty() ? "ai.onnx" : o.domain.c_str(), static_cast<long long>(o.version));
  }
  std::printf("\n\ninputs:\n");
  for (const auto& v : model.graph.inputs) {
    if (model.graph.initializer(v.name) == nullptr) std::printf("  %s: %s\n", v.name.c_str(), type_text(v).c_str());
  }
  std::printf("outputs (declared, or inferred where the model leaves the shape out):\n");
  const auto inferred = onnxtrain::ir::infer_types(model);
  for (const auto& v : model.graph.outputs) {
    onnxtrain::ir::ValueInfo shown = v;
    if (auto it = inferred.find(v.name); !v.shape && it != inferred.end()) {
      shown.dtype = it->second.dtype;
      shown.shape = it->second.shape;
    }
    std::printf("  %s: %s\n", v.name.c_str(), type_text(shown).c_str());
  }

  int64_t parameters = 0;
  size_t bytes = 0;
  for (const auto& [name, t] : model.graph.initializers) {
    parameters += t.numel();
    bytes += t.nbytes();
  }
  std::printf("\nparameters: %lld in %zu initializers, %.2f MB\n", static_cast<long long>(parameters),
              model.graph.initializers.size(), static_cast<double>(bytes) / 1e6);

  std::map<std::string, int> histogram;
  std::map<std::string, std::string> missing;
  count_ops(model, model.graph.nodes, histogram, missing);
  std::vector<std::pair<std::string, int>> ops(histogram.begin(), histogram.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::printf("\nops (%zu nodes):\n", model.graph.nodes.size());
  for (const auto& [op, n] : ops) std::printf("  %6d  %s\n", n, op.c_str());
  std::printf("\nops without a kernel: %s\n", missing.empty() ? "none" : "");
  for (const auto& [op, opset] : missing) std::printf("  %s (%s)\n", op.c_str(), opset.c_str());
  return 0;
}

constexpr const char* kGenArtifactsUsage =
    "usage: onnxtrain gen-artifacts MODEL.onnx --out DIR [options]\n"
    "Writes training_model.onnx, eval_model.onnx, optimizer_model.onnx and checkpoint into DIR.\n"
    "options:\n"
    "  --requires-grad a,b        initializers to train (default: every floating-point initializer\n"
    "                             not frozen that the loss depends on)\n"
    "  --frozen c,d               initializers kept fixed (in the checkpoint, without gradients)\n"
    "  --loss KIND                none (default: the model's first output is the loss), mse,\n"
    "                             cross-entropy, bce-with-logits, l1\n"
    "  --reduction R              mean (default), sum, none\n"
    "  --ignore-index N           cross-entropy: label value that is ignored\n"
    "  --class-weight w1,w2,...   cross-entropy: class weights; bce-with-logits: element weights\n"
    "  --pos-weight w1,w2,...     bce-with-logits: weights of the positive examples\n"
    "  --loss-input NAME          the model output that feeds the loss (default: the first)\n"
    "  --additional-output a,b    model values kept as outputs after the loss\n"
    "  --optimizer KIND           adamw (default), sgd, none\n"
    "  --lr X                     initial learning rate stored in the checkpoint (default 1e-3)\n"
    "  --weight-decay X           AdamW: decoupled; SGD: added to the gradient (default 0 for both)\n"
    "  --beta1 X --beta2 X --eps X, --no-bias-correction   AdamW options (defaults 0.9, 0.999, 1e-6:\n"
    "                             onnxruntime-training's)\n"
    "  --adamw-mode M             AdamW's update rule: huggingface (default: onnxruntime-training's)\n"
    "                             or torch (torch.optim.AdamW's)\n"
    "  --clip-grad-norm X         scale the gradients to a global L2 norm of at most X before the update\n"
    "  --momentum X --dampening X --nesterov               SGD options\n"
    "  --prefix P                 prepended to every file name\n"
    "  --nominal-checkpoint       also write nominal_checkpoint (shapes and types, no data)\n";

// A mistake on the command line: reported with the command's usage, exit code 1.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin) names.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

double parse_number(const std::string& option, const std::string& text) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw UsageError(option + ": '" + text + "' is not a number");
}

int64_t parse_integer(const std::string& option, const std::string& text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw UsageError(option + ": '" + text + "' is not an integer");
  }
  return value;
}

std::vector<double> parse_numbers(const std::string& option, const std::string& text) {
  std::vector<double> values;
  for (const std::string& item : split_names(text)) values.push_back(parse_number(option, item));
  return values;
}

template <typename T>
T parse_choice(const std::string& option, const std::string& text, const std::map<std::string, T>& choices) {
  if (auto it = choices.find(text); it != choices.end()) return it->second;
  std::string known;
  for (const auto& [name, value] : choices) known += (known.empty() ? "" : ", ") + name;
  throw UsageError(option + ": '" + text + "' is not one of " + known);
}

int gen_artifacts(const std::vector<std::string>& args) {
  using namespace onnxtrain;
  std::string model;
  std::filesystem::path out;
  ArtifactOptions options;
  OptimizerOptions optimizer;
  bool use_optimizer = true;
  std::optional<double> weight_decay;
  std::vector<std::string> warnings;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string option = args[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = option.find('='); option.starts_with("--") && eq != std::string::npos) {
      inline_value = option.substr(eq + 1);
      option.resize(eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) throw UsageError(option + " needs a value");
      return args[++i];
    };
    auto flag = [&] {
      if (inline_value) throw UsageError(option + " takes no value");
    };
    if (option == "--help" || option == "-h") {
      std::printf("%s", kGenArtifactsUsage);
      return 0;
    } else if (option == "--out" || option == "-o") {
      out = value();
    } else if (option == "--requires-grad") {
      options.requires_grad = split_names(value());
    } else if (option == "--frozen") {
      options.frozen_params = split_names(value());
    } else if (option == "--loss") {
      options.loss.kind = parse_choice<LossKind>(option, value(),
                                                 {{"none", LossKind::kNone},
                                                  {"mse", LossKind::kMSE},
                                                  {"cross-entropy", LossKind::kCrossEntropy},
                                                  {"bce-with-logits", LossKind::kBCEWithLogits},
                                                  {"l1", LossKind::kL1}});
    } else if (option == "--reduction") {
      options.loss.reduction = parse_choice<Reduction>(
          option, value(), {{"mean", Reduction::kMean}, {"sum", Reduction::kSum}, {"none", Reduction::kNone}});
    } else if (option == "--ignore-index") {
      options.loss.ignore_index = parse_integer(option, value());
    } else if (option == "--class-weight") {
      options.loss.weight = parse_numbers(option, value());
    } else if (option == "--pos-weight") {
      options.loss.pos_weight = parse_numbers(option, value());
    } else if (option == "--loss-input") {
      options.loss_input_names = split_names(value());
    } else if (option == "--additional-output") {
      options.additional_output_names = split_names(value());
    } else if (option == "--optimizer") {
      const std::string kind = value();
      use_optimizer = kind != "none";
      if (use_optimizer) {
        optimizer.kind =
            parse_choice<OptimizerKind>(option, kind, {{"adamw", OptimizerKind::kAdamW}, {"sgd", OptimizerKind::kSGD}});
      }
    } else if (option == "--lr") {
      optimizer.learning_rate = parse_number(option, value());
    } else if (option == "--weight-decay") {
      weight_decay = parse_number(option, value());
    } else if (option == "--beta1") {
      optimizer.beta1 = parse_number(option, value());
    } else if (option == "--beta2") {
      optimizer.beta2 = parse_number(option, value());
    } else if (option == "--eps") {
      optimizer.epsilon = parse_number(option, value());
    } else if (option == "--adamw-mode") {
      optimizer.adam_mode = parse_choice<AdamWMode>(
          option, value(), {{"huggingface", AdamWMode::kHuggingFace}, {"torch", AdamWMode::kTorch}});
    } else if (option == "--no-bias-correction") {
      flag();
      optimizer.bias_correction = false;
    } else if (option == "--clip-grad-norm") {
      optimizer.max_grad_norm = parse_number(option, value());
    } else if (option == "--momentum") {
      optimizer.momentum = parse_number(option, value());
    } else if (option == "--dampening") {
      optimizer.dampening = parse_number(option, value());
    } else if (option == "--nesterov") {
      flag();
      optimizer.nesterov = true;
    } else if (option == "--prefix") {
      options.prefix = value();
    } else if (option == "--nominal-checkpoint") {
      flag();
      options.nominal_checkpoint = true;
    } else if (option.starts_with("-")) {
      throw UsageError("unknown option " + option);
    } else if (model.empty()) {
      model = option;
    } else {
      throw UsageError("more than one model given ('" + model + "', '" + option + "')");
    }
  }
  if (model.empty()) throw UsageError("no model given");
  if (out.empty()) throw UsageError("--out DIR is required");
  if (weight_decay)
    (optimizer.kind == OptimizerKind::kAdamW ? optimizer.weight_decay : optimizer.sgd_weight_decay) = *weight_decay;
  if (use_optimizer)
    options.optimizer = optimizer;
  else
    options.optimizer.reset();
  options.warnings = &warnings;
  generate_artifacts(model, out, options);
  for (const std::string& w : warnings) std::fprintf(stderr, "onnxtrain gen-artifacts: warning: %s\n", w.c_str());
  std::printf("wrote %s: %straining_model.onnx, %seval_model.onnx%s, %scheckpoint%s\n", out.string().c_str(),
              options.prefix.c_str(), options.prefix.c_str(),
              use_optimizer ? (", " + options.prefix + "optimizer_model.onnx").c_str() : "", options.prefix.c_str(),
              options.nominal_checkpoint ? (", " + options.prefix + "nominal_checkpoint").c_str() : "");
  return 0;
}

constexpr const char* kUsage =
    "usage: onnxtrain [--help] [--version] COMMAND [ARGS]\n"
    "commands:\n"
    "  inspect MODEL.onnx         opsets, inputs, outputs, parameters, op histogram, ops without a kernel\n"
    "  gen-artifacts MODEL.onnx   training artifacts (training, eval and optimizer models, checkpoint)\n"
    "  train                      train artifacts on an .npz data set, or the built-in digits demo\n"
    "                             (Python: the `onnxtrain` console script of the Python package)\n"
    "`onnxtrain COMMAND --help` describes a command.\n";

constexpr const char* kInspectUsage =
    "usage: onnxtrain inspect MODEL.onnx\n"
    "Prints the model's opsets, its inputs and outputs with their types and shapes, the parameter\n"
    "count and size, the op histogram and the ops onnxtrain has no kernel for.\n";

int inspect_command(const std::vector<std::string>& args) {
  std::string model;
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kInspectUsage);
      return 0;
    }
    if (arg.starts_with("-")) throw UsageError("unknown option " + arg);
    if (!model.empty()) throw UsageError("more than one model given ('" + model + "', '" + arg + "')");
    model = arg;
  }
  if (model.empty()) throw UsageError("no model given");
  return inspect(model);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  const char* command_usage = command == "inspect" ? kInspectUsage : kGenArtifactsUsage;
  try {
    if (command == "inspect") return inspect_command(args);
    if (command == "gen-artifacts") return gen_artifacts(args);
    if (command == "--help" || command == "-h" || command == "help") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (command == "--version") {
#ifdef ONNXTRAIN_VERSION
      std::printf("onnxtrain %s\n", ONNXTRAIN_VERSION);
      return 0;
#else
      // The build defines ONNXTRAIN_VERSION from project(VERSION); a build that does not
      // says so rather than print a number that may be stale.
      std::fprintf(stderr, "onnxtrain: this build does not know its version (ONNXTRAIN_VERSION is not defined)\n");
      return 1;
#endif
    }
    if (command == "train") {
      std::fprintf(stderr,
                   "onnxtrain train: this command is part of the Python package; install it (pip install onnxtrain)\n"
                   "and run the `onnxtrain` console script, or `python -m onnxtrain train`\n");
      return 2;
    }
    std::fprintf(stderr, "onnxtrain: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "onnxtrain %s: error: %s\n\n%s", command.c_str(), e.what(), command_usage);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnxtrain %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
