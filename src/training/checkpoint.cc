#include <onnxtrain/checkpoint.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "core/checksum.h"
#include "core/json.h"
#include "ir/onnx_io.h"
#include "training/ort_checkpoint.h"
#include "training/safetensors.h"

namespace onnxtrain {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// The "onnxtrain" entry of the safetensors "__metadata__" is a JSON string of this version.
constexpr int64_t kFormatVersion = 1;
constexpr const char* kStateKey = "onnxtrain";
constexpr const char* kOptimizerPrefix = "optimizer/";

std::string moment_tensor_name(const std::string& parameter, const std::string& moment) {
  return kOptimizerPrefix + parameter + "/" + moment;
}

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + " " + shape_string(t.shape());
}

// ---- loading -------------------------------------------------------------------------

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw Error("checkpoint '" + path.string() + "': " + what, ErrorKind::kIO);
}

// Reads the typed state of one checkpoint file; every problem names the file.
// A tensor's CRC-32C as 8 hex digits.
std::string checksum_text(const Tensor& tensor) {
  const uint32_t crc = crc32c({static_cast<const std::byte*>(tensor.raw_data()), tensor.nbytes()});
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

class StateReader {
 public:
  StateReader(fs::path path, safetensors::Contents contents, bool verify) : path_(std::move(path)), verify_(verify) {
    for (auto& [name, tensor] : contents.tensors) {
      file_order_.push_back(name);
      tensors_.emplace(std::move(name), std::move(tensor));
    }
    metadata_ = std::move(contents.metadata);
  }

  CheckpointState read() {
    const auto entry = metadata_.find(kStateKey);
    if (entry == metadata_.end()) return read_plain_safetensors();
    json state;
    try {
      state = parse_bounded_json(entry->second);
    } catch (const std::exception& e) {
      fail(path_, std::string("the onnxtrain metadata is not valid JSON: ") + e.what());
    }
    if (!state.is_object()) fail(path_, "the onnxtrain metadata is not a JSON object");
    check_version(state);
    if (verify_ && state.contains("checksums")) verify_checksums(state["checksums"]);
    CheckpointState result;
    result.set_nominal(field(state, "nominal", &json::is_boolean, "a boolean").get<bool>());
    read_parameters(state, result);
    if (state.contains("optimizer")) read_optimizer(state["optimizer"], result);
    if (state.contains("properties")) read_properties(state["properties"], result);
    if (!tensors_.empty()) {
      fail(path_, "tensor '" + tensors_.begin()->first + "' is neither a parameter nor optimizer state");
    }
    return result;
  }

 private:
  const json& field(const json& object, const char* key, bool (json::*is)() const noexcept, const char* expected) {
    const auto it = object.find(key);
    if (it == object.end() || !((*it).*is)()) {
      fail(path_, std::string("the onnxtrain metadata's \"") + key + "\" is missing or not " + expected);
    }
    return *it;
  }

  // Each tensor's bytes against the CRC-32C saved with it: a flipped bit in the data, which
  // the safetensors layout cannot notice, names the tensor.
  void verify_checksums(const json& checksums) {
    if (!checksums.is_object()) fail(path_, "the onnxtrain metadata's \"checksums\" is not an object");
    for (const auto& [name, tensor] : tensors_) {
      const auto it = checksums.find(name);
      if (it == checksums.end() || !it->is_string())
        fail(path_, "tensor '" + name + "' has no checksum in the metadata");
      const std::string computed = checksum_text(tensor);
      if (it->get<std::string>() != computed) {
        fail(path_, "tensor '" + name + "' is corrupt: its data has CRC-32C " + computed + ", the metadata says " +
                        it->get<std::string>() + " (load with verify=False to read it anyway)");
      }
    }
  }

  void check_version(const json& state) {
    const json& version = field(state, "version", &json::is_number_integer, "an integer");
    if (version.get<int64_t>() > kFormatVersion) {
      fail(path_, "written by a newer onnxtrain (checkpoint format " + version.dump() + "); this one reads up to " +
                      std::to_string(kFormatVersion));
    }
  }

  // A safetensors file from elsewhere: every tensor is a parameter, in file order.
  CheckpointState read_plain_safetensors() {
    CheckpointState result;
    for (const std::string& name : file_order_) {
      Tensor tensor = take_tensor(name, "the file");
      const bool requires_grad = is_floating(tensor.dtype());
      result.add_parameter(name, std::move(tensor), requires_grad);
    }
    return result;
  }

  Tensor take_tensor(const std::string& name, const std::string& what) {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) fail(path_, what + " has no tensor '" + name + "' in the file");
    Tensor tensor = std::move(it->second);
    tensors_.erase(it);
    return tensor;
  }

  void read_parameters(const json& state, CheckpointState& result) {
    const json& list = field(state, "parameters", &json::is_array, "a list");
    for (const json& entry : list) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) {
        fail(path_, "a parameter entry of the onnxtrain metadata has no name: " + entry.dump());
      }
      const std::string name = entry["name"].get<std::string>();
      const std::string what = "parameter '" + name + "'";
      if (result.has_parameter(name)) fail(path_, what + " is listed twice");
      if (!entry.contains("requires_grad") || !entry["requires_grad"].is_boolean()) {
        fail(path_, what + ": requires_grad is missing or not a boolean");
      }
      const bool requires_grad = entry["requires_grad"].get<bool>();
      Tensor data = result.is_nominal() ? nominal_tensor(entry, what) : take_tensor(name, what);
      if (requires_grad && !is_floating(data.dtype())) {
        fail(path_, what + " requires a gradient but holds " + std::string(dtype_name(data.dtype())));
      }
      result.add_parameter(name, std::move(data), requires_grad);
    }
  }

  // A nominal checkpoint states each parameter's element type and shape; the data is zeros.
  Tensor nominal_tensor(const json& entry, const std::string& what) {
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(path_, what + ": no dtype");
    const DType dtype = safetensors::dtype_from_code(entry["dtype"].get<std::string>());
    if (dtype == DType::kUndefined) fail(path_, what + ": unknown dtype " + entry["dtype"].dump());
    if (!entry.contains("shape") || !entry["shape"].is_array()) fail(path_, what + ": no shape");
    Shape shape;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(path_, what + ": invalid shape " + entry["shape"].dump());
      }
      shape.push_back(d.get<int64_t>());
    }
    try {
      tensor_bytes(dtype, shape);  // the one checked size computation: overflow, or over 2^62 bytes
    } catch (const Error& e) {
      fail(path_, what + ": invalid shape " + entry["shape"].dump() + ": " + e.what());
    }
    return Tensor::zeros(dtype, std::move(shape));
  }

  void read_optimizer(const json& optimizer, CheckpointState& result) {
    if (!optimizer.is_object()) fail(path_, "the optimizer state is not an object");
    OptimizerState state;
    const json& step = field(optimizer, "step", &json::is_number_integer, "an integer");
    state.step = step.get<int64_t>();
    if (state.step < 0) fail(path_, "the optimizer step " + step.dump() + " is negative");
    state.learning_rate =
        read_double(field(optimizer, "learning_rate", &json::is_primitive, "a number"), "the learning rate");
    const json& moments = field(optimizer, "moments", &json::is_array, "a list");
    for (const json& m : moments) {
      if (!m.is_object() || !m.contains("parameter") || !m["parameter"].is_string() || !m.contains("name") ||
          !m["name"].is_string() || !m.contains("tensor") || !m["tensor"].is_string()) {
        fail(path_, "an optimizer moment entry lacks its parameter, name or tensor: " + m.dump());
      }
      const std::string parameter = m["parameter"].get<std::string>();
      const std::string name = m["name"].get<std::string>();
      const std::string what = "optimizer moment '" + name + "' of parameter '" + parameter + "'";
      if (!result.has_parameter(parameter)) fail(path_, what + ": there is no such parameter");
      auto& slots = state.moments[parameter];
      if (slots.contains(name)) fail(path_, what + " is listed twice");
      slots.emplace(name, take_tensor(m["tensor"].get<std::string>(), what));
    }
    result.set_optimizer_state(std::move(state));
  }

  void read_properties(const json& properties, CheckpointState& result) {
    if (!properties.is_object()) fail(path_, "the properties are not an object");
    for (const auto& [name, entry] : properties.items()) {
      const std::string what = "property '" + name + "'";
      if (!entry.is_object() || !entry.contains("type") || !entry["type"].is_string() || !entry.contains("value")) {
        fail(path_, what + " lacks its type or value");
      }
      const std::string type = entry["type"].get<std::string>();
      const json& value = entry["value"];
      if (type == "int" && value.is_number_integer()) {
        result.properties()[name] = value.get<int64_t>();
      } else if (type == "float") {
        result.properties()[name] = read_double(value, what);
      } else if (type == "string" && value.is_string()) {
        result.properties()[name] = value.get<std::string>();
      } else {
        fail(path_,
             what + " has type '" + type + "' and value " + value.dump() + " (properties are int, float or string)");
      }
    }
  }

  // Finite numbers are JSON numbers; NaN and the infinities are the strings "nan", "inf", "-inf".
  double read_double(const json& value, const std::string& what) {
    if (value.is_number()) return value.get<double>();
    if (value == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (value == "inf") return std::numeric_limits<double>::infinity();
    if (value == "-inf") return -std::numeric_limits<double>::infinity();
    fail(path_, what + " is not a number: " + value.dump());
  }

  fs::path path_;
  bool verify_;
  std::map<std::string, Tensor> tensors_;
  std::vector<std::string> file_order_;
  std::map<std::string, std::string> metadata_;
};

// ---- saving --------------------------------------------------------------------------

json write_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

json write_properties(const Properties& properties) {
  json out = json::object();
  for (const auto& [name, value] : properties) {
    if (const auto* i = std::get_if<int64_t>(&value))
      out[name] = {{"type", "int"}, {"value", *i}};
    else if (const auto* d = std::get_if<double>(&value))
      out[name] = {{"type", "float"}, {"value", write_double(*d)}};
    else
      out[name] = {{"type", "string"}, {"value", std::get<std::string>(value)}};
  }
  return out;
}

void save(const CheckpointState& state, const fs::path& path, bool include_optimizer_state, bool nominal) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  json parameters = json::array();
  for (const Parameter& p : state.parameters()) {
    json entry = {{"name", p.name}, {"requires_grad", p.requires_grad}};
    if (!p.data.defined()) {
      throw Error("cannot save '" + path.string() + "': parameter '" + p.name + "' holds no data",
                  ErrorKind::kInvalidArgument);
    }
    if (nominal) {
      entry["dtype"] = safetensors::dtype_code(p.data.dtype());
      entry["shape"] = p.data.shape();
    } else {
      tensors.emplace_back(p.name, p.data);
    }
    parameters.push_back(std::move(entry));
  }
  json meta = {{"version", kFormatVersion}, {"nominal", nominal}, {"parameters", std::move(parameters)}};

  if (include_optimizer_state && !nominal && state.has_optimizer_state()) {
    const OptimizerState& optimizer = state.optimizer_state();
    json moments = json::array();
    for (const auto& [parameter, slots] : optimizer.moments) {
      if (!state.has_parameter(parameter)) {
        throw Error("cannot save '" + path.string() + "': the optimizer state names parameter '" + parameter +
                        "', which the checkpoint does not hold",
                    ErrorKind::kInvalidArgument);
      }
      for (const auto& [name, tensor] : slots) {
        std::string tensor_name = moment_tensor_name(parameter, name);
        if (state.has_parameter(tensor_name)) {
          throw Error("cannot save '" + path.string() + "': optimizer moment '" + name + "' of '" + parameter +
                          "' would be stored as '" + tensor_name + "', which is also a parameter's name",
                      ErrorKind::kInvalidArgument);
        }
        moments.push_back({{"parameter", parameter}, {"name", name}, {"tensor", tensor_name}});
        tensors.emplace_back(std::move(tensor_name), tensor);
      }
    }
    meta["optimizer"] = {{"step", optimizer.step},
                         {"learning_rate", write_double(optimizer.learning_rate)},
                         {"moments", std::move(moments)}};
  }
  meta["properties"] = write_properties(state.properties());
  json checksums = json::object();
  for (const auto& [name, tensor] : tensors) checksums[name] = checksum_text(tensor);
  meta["checksums"] = std::move(checksums);

  std::map<std::string, std::string> metadata{{"format", "pt"}};
  try {
    metadata[kStateKey] = meta.dump();
  } catch (const json::exception& e) {
    throw Error("cannot save '" + path.string() + "': a name or string property is not valid UTF-8 (" +
                    std::string(e.what()) + ")",
                ErrorKind::kInvalidArgument);
  }
  safetensors::write(path, tensors, metadata);
}

CheckpointState from_initializers(std::span<const std::pair<std::string, Tensor>> initializers,
                                  std::span<const std::string> trainable, std::span<const std::string> frozen,
                                  const std::string& source) {
  std::unordered_map<std::string_view, bool> requires_grad;
  for (const std::string& name : trainable) requires_grad[name] = true;
  for (const std::string& name : frozen) {
    const auto [it, added] = requires_grad.emplace(name, false);
    if (!added && it->second) {
      throw Error(source + ": '" + name + "' is listed both as trainable and as frozen", ErrorKind::kInvalidArgument);
    }
  }
  CheckpointState state;
  for (const auto& [name, tensor] : initializers) {
    const auto it = requires_grad.find(name);
    if (it == requires_grad.end() || state.has_parameter(name)) continue;
    if (it->second && !is_floating(tensor.dtype())) {
      throw Error(source + ": trainable initializer '" + name + "' holds " + std::string(dtype_name(tensor.dtype())) +
                      " values; only floating-point parameters can have gradients",
                  ErrorKind::kInvalidArgument);
    }
    state.add_parameter(name, tensor.clone(), it->second);
  }
  for (const auto& [name, wanted] : requires_grad) {
    if (!state.has_parameter(name)) {
      throw Error(source + ": '" + std::string(name) + "' is not an initializer of the model",
                  ErrorKind::kInvalidArgument);
    }
  }
  return state;
}

}  // namespace

// ---- CheckpointState -----------------------------------------------------------------

Parameter* CheckpointState::find_parameter(std::string_view name) noexcept {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &parameters_[it->second];
}

const Parameter* CheckpointState::find_parameter(std::string_view name) const noexcept {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &parameters_[it->second];
}

Parameter& CheckpointState::parameter(std::string_view name) {
  return const_cast<Parameter&>(std::as_const(*this).parameter(name));
}

const Parameter& CheckpointState::parameter(std::string_view name) const {
  const Parameter* p = find_parameter(name);
  if (p == nullptr) {
    throw Error("the checkpoint has no parameter '" + std::string(name) + "'", ErrorKind::kInvalidArgument);
  }
  return *p;
}

Parameter& CheckpointState::add_parameter(std::string name, Tensor data, bool requires_grad) {
  if (name.empty()) throw Error("a parameter needs a name", ErrorKind::kInvalidArgument);
  if (has_parameter(name)) {
    throw Error("the checkpoint already has a parameter '" + name + "'", ErrorKind::kInvalidArgument);
  }
  if (!data.defined()) throw Error("parameter '" + name + "' has no data", ErrorKind::kInvalidArgument);
  if (requires_grad && !is_floating(data.dtype())) {
    throw Error("parameter '" + name + "' holds " + std::string(dtype_name(data.dtype())) +
                    " values; only floating-point parameters can require gradients",
                ErrorKind::kInvalidArgument);
  }
  index_.emplace(name, parameters_.size());
  parameters_.push_back(Parameter{std::move(name), std::move(data), Tensor(), requires_grad});
  return parameters_.back();
}

void CheckpointState::set_parameter_data(std::string_view name, const Tensor& value) {
  Parameter& p = parameter(name);
  if (value.dtype() != p.data.dtype() || value.shape() != p.data.shape()) {
    throw Error("parameter '" + p.name + "': expected " + describe(p.data) + ", got " + describe(value),
                ErrorKind::kInvalidArgument);
  }
  p.data.copy_from(value);
}

OptimizerState& CheckpointState::optimizer_state() {
  return const_cast<OptimizerState&>(std::as_const(*this).optimizer_state());
}

const OptimizerState& CheckpointState::optimizer_state() const {
  if (!optimizer_) throw Error("the checkpoint holds no optimizer state", ErrorKind::kInvalidArgument);
  return *optimizer_;
}

void CheckpointState::set_optimizer_state(OptimizerState state) {
  for (const auto& [parameter, slots] : state.moments) {
    if (!has_parameter(parameter)) {
      throw Error("optimizer state for '" + parameter + "', which is not a parameter of the checkpoint",
                  ErrorKind::kInvalidArgument);
    }
  }
  optimizer_ = std::move(state);
}

// ---- files ---------------------------------------------------------------------------

// True when the file starts like an ODTC flatbuffer (a safetensors file starts with its
// header length, whose bytes 4-7 are zero for any header under 4 GB).
static bool starts_like_ort_checkpoint(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<std::byte, 8> head{};
  if (!in.read(reinterpret_cast<char*>(head.data()), head.size())) return false;
  return training::is_ort_checkpoint(head);
}

CheckpointState load_checkpoint(const fs::path& path, bool verify) {
  if (starts_like_ort_checkpoint(path)) return training::read_ort_checkpoint(path);
  return StateReader(path, safetensors::read(path), verify).read();
}

void save_checkpoint(const CheckpointState& state, const fs::path& path, bool include_optimizer_state,
                     CheckpointFormat format) {
  if (format == CheckpointFormat::kOrt) return training::write_ort_checkpoint(state, path, include_optimizer_state);
  save(state, path, include_optimizer_state, /*nominal=*/false);
}

void save_nominal_checkpoint(const CheckpointState& state, const fs::path& path) {
  save(state, path, /*include_optimizer_state=*/false, /*nominal=*/true);
}

CheckpointState checkpoint_from_initializers(std::span<const std::pair<std::string, Tensor>> initializers,
                                             std::span<const std::string> trainable,
                                             std::span<const std::string> frozen) {
  return from_initializers(initializers, trainable, frozen, "parameters");
}

CheckpointState checkpoint_from_model(const fs::path& model_path, std::span<const std::string> trainable,
                                      std::span<const std::string> frozen) {
  const ir::Model model = ir::load_model(model_path);
  return from_initializers(model.graph.initializers, trainable, frozen, "model '" + model_path.string() + "'");
}

CheckpointState checkpoint_from_model(std::span<const std::byte> model_bytes, std::span<const std::string> trainable,
                                      std::span<const std::string> frozen) {
  const ir::Model model = ir::load_model(model_bytes);
  return from_initializers(model.graph.initializers, trainable, frozen, "model");
}

}  // namespace onnxtrain
