// CheckpointState: everything training needs to keep between runs — parameters, their
// gradients, the optimizer's state and user properties — and its file, the checkpoint.
//
//   onnxtrain::CheckpointState state = onnxtrain::load_checkpoint("checkpoint");
//   onnxtrain::Parameter& w = state.parameter("fc1.weight");
//   state.properties()["epoch"] = int64_t{3};
//   onnxtrain::save_checkpoint(state, "checkpoint", /*include_optimizer_state=*/true);
//
// The file is one safetensors file (https://github.com/huggingface/safetensors), so any
// safetensors reader sees the parameters under their own names:
//   safetensors.numpy.load_file("checkpoint")  ->  {"fc1.weight": array, ...}
//   torch_module.load_state_dict(safetensors.torch.load_file("checkpoint"), strict=False)
// Layout:
// - each parameter: a tensor named after it;
// - each optimizer moment, when saved: a tensor "optimizer/<parameter>/<moment>";
// - gradients are never saved;
// - "__metadata__" holds "format": "pt" (what safetensors.torch writes) and "onnxtrain": a
//   JSON string with the typed state: format version, the parameters in order with their
//   requires_grad flags, which tensors are optimizer moments, step, learning rate,
//   properties with their types, whether the checkpoint is nominal, and the CRC-32C of each
//   tensor's bytes ("checksums": {tensor name: 8 hex digits}).
// A nominal checkpoint holds no tensor data at all: the names, shapes, element types and
// requires_grad flags of the parameters live in that metadata.
//
// A safetensors file without onnxtrain metadata (saved by PyTorch, say) loads too: each of
// its tensors becomes a parameter, trainable when it holds floating-point values.
#pragma once

#include <onnxtrain/tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace onnxtrain {

// A model parameter: an initializer that the checkpoint owns.
struct Parameter {
  std::string name;  // do not rename a parameter held by a CheckpointState
  Tensor data;
  Tensor grad;  // undefined until a gradient has been computed
  bool requires_grad = true;
};

// The optimizer's state, shared by AdamW ("exp_avg", "exp_avg_sq") and SGD ("momentum_buffer").
struct OptimizerState {
  int64_t step = 0;
  double learning_rate = 0.0;
  // moments[parameter name][moment name], e.g. moments["fc1.weight"]["exp_avg"].
  std::map<std::string, std::map<std::string, Tensor, std::less<>>, std::less<>> moments;
};

// A property's value: an integer, a floating-point number or a string — nothing else.
using PropertyValue = std::variant<int64_t, double, std::string>;
using Properties = std::map<std::string, PropertyValue, std::less<>>;

class CheckpointState {
 public:
  CheckpointState() = default;

  // The parameters in the order they were added (the model's initializer order). The
  // references stay valid until the next add_parameter().
  std::span<Parameter> parameters() noexcept { return parameters_; }
  std::span<const Parameter> parameters() const noexcept { return parameters_; }
  bool has_parameter(std::string_view name) const noexcept { return find_parameter(name) != nullptr; }
  // nullptr when there is no parameter of that name.
  Parameter* find_parameter(std::string_view name) noexcept;
  const Parameter* find_parameter(std::string_view name) const noexcept;
  // Throws an Error (kInvalidArgument) naming the parameter when there is none.
  Parameter& parameter(std::string_view name);
  const Parameter& parameter(std::string_view name) const;

  // Adds a parameter that owns `data` (no copy). Throws an Error for an empty or taken
  // name, undefined data, and requires_grad on a tensor that is not floating-point.
  Parameter& add_parameter(std::string name, Tensor data, bool requires_grad);
  // Copies `value` into the parameter's buffer, in place, so that sessions bound to the
  // parameter see the new values. Throws an Error (kInvalidArgument) naming the parameter
  // with the shape and element type it expected when `value` has others.
  void set_parameter_data(std::string_view name, const Tensor& value);

  bool has_optimizer_state() const noexcept { return optimizer_.has_value(); }
  // Throws an Error when there is no optimizer state.
  OptimizerState& optimizer_state();
  const OptimizerState& optimizer_state() const;
  // Replaces the optimizer state. Throws an Error when a moment names an unknown parameter.
  void set_optimizer_state(OptimizerState state);
  void clear_optimizer_state() noexcept { optimizer_.reset(); }

  // User properties, saved with the checkpoint.
  Properties& properties() noexcept { return properties_; }
  const Properties& properties() const noexcept { return properties_; }

  // True when loaded from a nominal checkpoint: the parameters have their shapes and
  // element types but hold zeros until real values are copied in. Saving writes the data
  // it holds either way; save_nominal_checkpoint writes a nominal one.
  bool is_nominal() const noexcept { return nominal_; }
  void set_nominal(bool nominal) noexcept { nominal_ = nominal; }

  // onnxruntime-training's format only: true when loaded from an ODTC checkpoint whose
  // tensors lie in its external data file ("<checkpoint>.data", as ORT writes checkpoints
  // of 1800 MiB or more). Saving such a state in ORT's format writes the tensors there too,
  // as ORT does; set it to write a smaller state so.
  bool has_external_data() const noexcept { return external_data_; }
  void set_external_data(bool external) noexcept { external_data_ = external; }

 private:
  std::vector<Parameter> parameters_;
  std::unordered_map<std::string, size_t> index_;
  std::optional<OptimizerState> optimizer_;
  Properties properties_;
  bool nominal_ = false;
  bool external_data_ = false;
};

// The file formats a checkpoint can be saved in: onnxtrain's safetensors file, or the ODTC
// flatbuffer of onnxruntime-training 1.19.2 (src/training/ort_checkpoint.h), for going back
// to ORT (gradients are never saved; AdamW's moments exp_avg/exp_avg_sq are ORT's
// momentum0/momentum1; property floats are stored as float32).
enum class CheckpointFormat { kSafetensors, kOrt };

// Reads a checkpoint — full or nominal — or any safetensors file, or an ODTC checkpoint that
// onnxruntime-training wrote (told apart by its file identifier, bytes 4-7 "ODTC"). Everything is checked:
// a truncated file, a corrupt header, offsets outside the data or not tiling it, byte
// counts that do not match shape x element size, and onnxtrain metadata that does not fit
// the tensors throw an Error naming the file and, where there is one, the tensor. With
// `verify`, each tensor's bytes are checked against the CRC-32C saved with it (files saved by
// onnxtrain since format checksums; other safetensors files have none to check).
CheckpointState load_checkpoint(const std::filesystem::path& path, bool verify = true);

// Writes the parameters, properties and, when asked and present, the optimizer state,
// atomically: a process killed while saving leaves the previous file as it was.
void save_checkpoint(const CheckpointState& state, const std::filesystem::path& path,
                     bool include_optimizer_state = false, CheckpointFormat format = CheckpointFormat::kSafetensors);

// Writes a nominal checkpoint: parameter names, shapes, element types and requires_grad
// flags, and the properties; no tensor data, no optimizer state.
void save_nominal_checkpoint(const CheckpointState& state, const std::filesystem::path& path);

// A state holding copies of a model's initializers: those named in `trainable` (with
// requires_grad) and in `frozen` (without), in the model's initializer order; the others
// stay constants of the model and are left out. Throws an Error naming the parameter when
// a name is not an initializer, appears in both lists, or a trainable one is not
// floating-point.
CheckpointState checkpoint_from_initializers(std::span<const std::pair<std::string, Tensor>> initializers,
                                             std::span<const std::string> trainable,
                                             std::span<const std::string> frozen);
// The same for an ONNX model file (external data is read beside it) ...
CheckpointState checkpoint_from_model(const std::filesystem::path& model_path, std::span<const std::string> trainable,
                                      std::span<const std::string> frozen);
// ... and for a serialized ONNX model.
CheckpointState checkpoint_from_model(std::span<const std::byte> model_bytes, std::span<const std::string> trainable,
                                      std::span<const std::string> frozen);

}  // namespace onnxtrain
