#include "training/ort_checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "core/file.h"
#include "training/flatbuffer.h"

namespace onnxtrain::training {
namespace fs = std::filesystem;
using flatbuffer::Table;
using flatbuffer::Vector;

namespace {

constexpr std::string_view kIdentifier = "ODTC";
constexpr const char* kGroupName = "group0";
constexpr uint64_t kMaxNominalBytes = uint64_t{1} << 31;  // what one flatbuffer can hold

// Field indices of the schema (see the header).
namespace field {
enum Checkpoint { kVersion, kModuleState, kOptimizerGroups, kPropertyBag };
enum ModuleState { kRequiresGrad, kFrozen, kNominal, kExternalData };
enum OptimizerGroup { kGroupName, kStep, kInitialLearningRate, kOptimizerStates };
enum ParameterState { kParamName, kMomentums };
enum PropertyBag { kInts, kFloats, kStrings };
enum Property { kName, kValue };
enum Tensor { kTensorName, kDocString, kDims, kDataType, kRawData, kStringData, kExternalDataOffset };
}  // namespace field

// onnxtrain's moment names and ORT's slots for them (an ORT file keeps ORT's names).
constexpr std::pair<std::string_view, std::string_view> kMomentNames[] = {
    {"exp_avg", "momentum0"}, {"exp_avg_sq", "momentum1"}, {"momentum_buffer", "momentum0"}};

std::string moment_to_ort(const std::string& name) {
  for (const auto& [ours, ort] : kMomentNames) {
    if (name == ours) return std::string(ort);
  }
  return name;
}

// ---- reading -------------------------------------------------------------------------

// The external data file, read a tensor at a time (it may be larger than memory allows
// twice over): opened when the first tensor needs it.
class ExternalDataFile {
 public:
  explicit ExternalDataFile(fs::path path) : path_(std::move(path)) {}

  const fs::path& path() const { return path_; }

  // Reads `bytes` bytes at `offset` into `out`; `fail` reports what is wrong.
  template <typename Fail>
  void read(uint64_t offset, uint64_t bytes, void* out, const std::string& what, Fail&& fail) {
    if (!in_.is_open()) {
      std::error_code error;
      size_ = fs::file_size(path_, error);
      if (error) {
        fail("its tensors lie in the external data file '" + path_.string() +
             "', which cannot be read: " + error.message());
      }
      in_.open(path_, std::ios::binary);
      if (!in_) fail("cannot open its external data file '" + path_.string() + "': " + std::strerror(errno));
    }
    if (offset > size_ || bytes > size_ - offset) {
      fail(what + " lies at bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") of '" +
           path_.string() + "', which holds " + std::to_string(size_) + " bytes");
    }
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
    if (!in_) fail("cannot read " + what + " from '" + path_.string() + "'");
  }

 private:
  fs::path path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

class OrtCheckpointReader {
 public:
  // `external`: the checkpoint's external data file, absent when read from bytes.
  OrtCheckpointReader(std::span<const std::byte> bytes, const std::string& what, std::optional<fs::path> external)
      : in_(bytes, what) {
    if (external) external_.emplace(std::move(*external));
  }

  CheckpointState read() {
    const Table root = in_.root(kIdentifier);
    const auto version = in_.scalar<int32_t>(root, field::kVersion, 0);
    if (version < 1 || version > kOrtCheckpointVersion) {
      in_.fail("checkpoint version " + std::to_string(version) + " is not one onnxtrain reads (1 to " +
               std::to_string(kOrtCheckpointVersion) + ", what onnxruntime-training 1.19.2 writes)");
    }
    CheckpointState state;
    Table module;
    if (in_.table(root, field::kModuleState, module, "the module state")) read_module(module, state);
    read_optimizer(root, state);
    Table bag;
    if (in_.table(root, field::kPropertyBag, bag, "the property bag")) read_properties(bag, state);
    return state;
  }

 private:
  void read_module(Table module, CheckpointState& state) {
    has_external_data_ = in_.scalar<uint8_t>(module, field::kExternalData, 0) != 0;
    if (has_external_data_ && !external_) {
      in_.fail(
          "its tensors lie in an external data file, which is found beside the checkpoint's path: load it "
          "from its file, not from bytes");
    }
    state.set_external_data(has_external_data_);
    nominal_ = in_.scalar<uint8_t>(module, field::kNominal, 0) != 0;
    state.set_nominal(nominal_);
    for (const auto& [list, requires_grad] :
         {std::pair{field::kRequiresGrad, true}, std::pair{field::kFrozen, false}}) {
      const Vector tensors = in_.vector(module, list, 4, "the parameter list");
      for (uint32_t i = 0; i < tensors.size; ++i) {
        auto [name, data] = read_tensor(in_.table_at(tensors, i, "a parameter"), nominal_);
        if (state.has_parameter(name)) in_.fail("parameter '" + name + "' is stored twice");
        if (requires_grad && !is_floating(data.dtype())) {
          in_.fail("parameter '" + name + "' requires a gradient but holds " + std::string(dtype_name(data.dtype())));
        }
        state.add_parameter(std::move(name), std::move(data), requires_grad);
      }
    }
  }

  void read_optimizer(Table root, CheckpointState& state) {
    const Vector groups = in_.vector(root, field::kOptimizerGroups, 4, "the optimizer groups");
    if (groups.size == 0) return;
    if (groups.size > 1) {
      in_.fail(std::to_string(groups.size) +
               " optimizer groups; onnxruntime-training writes one and onnxtrain keeps one");
    }
    const Table group = in_.table_at(groups, 0, "the optimizer group");
    OptimizerState optimizer;
    optimizer.step = in_.scalar<int64_t>(group, field::kStep, 0);
    optimizer.learning_rate = in_.scalar<float>(group, field::kInitialLearningRate, 0.0f);
    if (optimizer.step < 0) in_.fail("the optimizer step is negative (" + std::to_string(optimizer.step) + ")");
    const Vector parameters = in_.vector(group, field::kOptimizerStates, 4, "the optimizer states");
    for (uint32_t i = 0; i < parameters.size; ++i) {
      const Table entry = in_.table_at(parameters, i, "a parameter's optimizer state");
      const std::string parameter = in_.string(entry, field::kParamName, "a parameter name");
      const Parameter* p = state.find_parameter(parameter);
      if (p == nullptr) in_.fail("the optimizer state names parameter '" + parameter + "', which the checkpoint lacks");
      auto& slots = optimizer.moments[parameter];
      const Vector momentums = in_.vector(entry, field::kMomentums, 4, "the momentums");
      for (uint32_t k = 0; k < momentums.size; ++k) {
        auto [name, data] = read_tensor(in_.table_at(momentums, k, "a momentum"), false);
        if (data.dtype() != p->data.dtype() || data.shape() != p->data.shape()) {
          in_.fail("momentum '" + name + "' of '" + parameter + "' is " + std::string(dtype_name(data.dtype())) +
                   shape_string(data.shape()) + ", the parameter " + std::string(dtype_name(p->data.dtype())) +
                   shape_string(p->data.shape()));
        }
        if (!slots.emplace(name, std::move(data)).second) {
          in_.fail("momentum '" + name + "' of '" + parameter + "' is stored twice");
        }
      }
    }
    state.set_optimizer_state(std::move(optimizer));
  }

  void read_properties(Table bag, CheckpointState& state) {
    const auto each = [&](int list, const char* what, auto read_value) {
      const Vector entries = in_.vector(bag, list, 4, what);
      for (uint32_t i = 0; i < entries.size; ++i) {
        const Table entry = in_.table_at(entries, i, what);
        const std::string name = in_.string(entry, field::kName, "a property name");
        if (name.empty()) in_.fail(std::string(what) + " without a name");
        state.properties()[name] = read_value(entry);
      }
    };
    each(field::kInts, "an int property",
         [&](Table e) { return PropertyValue{in_.scalar<int64_t>(e, field::kValue, 0)}; });
    each(field::kFloats, "a float property",
         [&](Table e) { return PropertyValue{static_cast<double>(in_.scalar<float>(e, field::kValue, 0.0f))}; });
    each(field::kStrings, "a string property",
         [&](Table e) { return PropertyValue{in_.string(e, field::kValue, "a string property")}; });
  }

  std::pair<std::string, Tensor> read_tensor(Table t, bool nominal) {
    std::string name = in_.string(t, field::kTensorName, "a tensor name");
    if (name.empty()) in_.fail("a tensor without a name");
    const std::string what = "tensor '" + name + "'";
    const auto code = in_.scalar<int32_t>(t, field::kDataType, 0);
    const DType dtype = dtype_from_onnx(code);
    if (dtype == DType::kUndefined || !is_supported(dtype) || dtype == DType::kString) {
      in_.fail(what + " has element type " + std::to_string(code) + ", which onnxtrain cannot hold");
    }
    const Vector dims = in_.vector(t, field::kDims, 8, "the dims");
    Shape shape;
    uint64_t bits = dtype_bits(dtype);
    for (uint32_t i = 0; i < dims.size; ++i) {
      const auto d = in_.scalar_at<int64_t>(dims, i);
      if (d < 0 || __builtin_mul_overflow(bits, static_cast<uint64_t>(d), &bits)) {
        in_.fail(what + " has an invalid dimension " + std::to_string(d));
      }
      shape.push_back(d);
    }
    const uint64_t bytes = bits / 8 + (bits % 8 != 0);
    const auto offset = in_.scalar<int64_t>(t, field::kExternalDataOffset, -1);
    const Vector raw = in_.vector(t, field::kRawData, 1, "the raw data");
    if (offset != -1) {
      if (!has_external_data_) {
        in_.fail(what + " has an external data offset, but the module state says the checkpoint has no external data");
      }
      if (offset < 0) in_.fail(what + " has a negative external data offset " + std::to_string(offset));
      if (raw.size != 0 || nominal) in_.fail(what + " has both raw data and an external data offset");
      Tensor tensor = Tensor::empty(dtype, std::move(shape));
      if (bytes != 0) {
        external_->read(static_cast<uint64_t>(offset), bytes, tensor.raw_data(), what,
                        [&](const std::string& message) { in_.fail(message); });
      }
      return {std::move(name), std::move(tensor)};
    }
    if (nominal) {
      if (raw.size != 0) in_.fail(what + " holds data in a nominal checkpoint");
      // ORT writes no dims here; dims that a file could not have held are refused before
      // the zeros are allocated.
      if (bytes > kMaxNominalBytes) in_.fail(what + ": " + shape_string(shape) + " is too large for a nominal tensor");
      return {std::move(name), Tensor::zeros(dtype, std::move(shape))};
    }
    if (raw.size != bytes) {
      in_.fail(what + " holds " + std::to_string(raw.size) + " bytes; " + std::string(dtype_name(dtype)) +
               shape_string(shape) + " needs " + std::to_string(bytes));
    }
    Tensor tensor = Tensor::empty(dtype, std::move(shape));
    if (bytes != 0) std::memcpy(tensor.raw_data(), in_.bytes(raw).data(), bytes);
    return {std::move(name), std::move(tensor)};
  }

  flatbuffer::Reader in_;
  std::optional<ExternalDataFile> external_;
  bool has_external_data_ = false;
  bool nominal_ = false;
};

// ---- writing -------------------------------------------------------------------------

// What the checkpoint's tensors hold, in bytes: the parameters, and the moments when saved.
uint64_t tensor_bytes(const CheckpointState& state, bool include_optimizer_state) {
  uint64_t total = 0;
  for (const Parameter& p : state.parameters()) total += p.data.defined() ? p.data.nbytes() : 0;
  if (include_optimizer_state && state.has_optimizer_state()) {
    for (const auto& [name, moments] : state.optimizer_state().moments) {
      for (const auto& [moment, tensor] : moments) total += tensor.nbytes();
    }
  }
  return total;
}

// The external data file being written (under a temporary name until commit()): each
// tensor's bytes at a multiple of 8 (int64, double) or 4 (the others), as ORT aligns them.
class ExternalDataSink {
 public:
  explicit ExternalDataSink(const fs::path& path) : file_(path), out_(file_.temporary_path(), std::ios::binary) {
    if (!out_) fail();
  }

  // Appends the tensor's bytes; returns their offset.
  int64_t append(const Tensor& tensor) {
    const uint64_t alignment = tensor.dtype() == DType::kInt64 || tensor.dtype() == DType::kFloat64 ? 8 : 4;
    static constexpr char kZeros[8] = {};
    if (const uint64_t gap = position_ % alignment; gap != 0) {
      out_.write(kZeros, static_cast<std::streamsize>(alignment - gap));
      position_ += alignment - gap;
    }
    const uint64_t offset = position_;
    out_.write(static_cast<const char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.nbytes()));
    position_ += tensor.nbytes();
    if (!out_) fail();
    return static_cast<int64_t>(offset);
  }

  void commit() {
    out_.close();
    if (!out_) fail();
    file_.commit();
  }

 private:
  [[noreturn]] void fail() const {
    throw Error("cannot write '" + file_.path().string() + "': " + std::strerror(errno), ErrorKind::kIO);
  }

  AtomicFile file_;
  std::ofstream out_;
  uint64_t position_ = 0;
};

class OrtCheckpointWriter {
 public:
  // `external`: where the tensors' bytes go; null: inline.
  explicit OrtCheckpointWriter(ExternalDataSink* external) : external_(external) {}

  std::vector<std::byte> write(const CheckpointState& state, bool include_optimizer_state) {
    external_moments_ = external_ != nullptr && include_optimizer_state &&
                        tensor_bytes(state, true) - tensor_bytes(state, false) >= kOrtExternalDataThreshold;
    flatbuffer::Writer::TableFields fields;
    fields.scalar<int32_t>(field::kVersion, kOrtCheckpointVersion);
    fields.offset(field::kModuleState);
    fields.offset(field::kOptimizerGroups);
    const bool has_properties = !state.properties().empty();
    if (has_properties) fields.offset(field::kPropertyBag);
    const auto root = out_.table(fields);
    out_.set_root(root.position);
    out_.set_offset(root.slot[field::kModuleState], write_module(state));
    const bool with_optimizer = include_optimizer_state && state.has_optimizer_state();
    out_.set_offset(root.slot[field::kOptimizerGroups], write_groups(state, with_optimizer));
    if (has_properties) out_.set_offset(root.slot[field::kPropertyBag], write_properties(state.properties()));
    return out_.bytes();
  }

 private:
  // ORT stores each list sorted by name.
  static std::vector<const Parameter*> sorted(const CheckpointState& state, bool requires_grad) {
    std::vector<const Parameter*> list;
    for (const Parameter& p : state.parameters()) {
      if (p.requires_grad == requires_grad) list.push_back(&p);
    }
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->name < b->name; });
    return list;
  }

  uint32_t write_module(const CheckpointState& state) {
    flatbuffer::Writer::TableFields fields;
    fields.offset(field::kRequiresGrad);
    fields.offset(field::kFrozen);
    if (state.is_nominal()) fields.scalar<uint8_t>(field::kNominal, 1);
    if (external_ != nullptr) fields.scalar<uint8_t>(field::kExternalData, 1);
    const auto module = out_.table(fields);
    for (const auto& [list, requires_grad] :
         {std::pair{field::kRequiresGrad, true}, std::pair{field::kFrozen, false}}) {
      std::vector<std::pair<std::string, const Tensor*>> tensors;
      for (const Parameter* p : sorted(state, requires_grad)) tensors.emplace_back(p->name, &p->data);
      out_.set_offset(module.slot[list], write_tensors(tensors, state.is_nominal(), true));
    }
    return module.position;
  }

  // ORT puts the parameters in the external data file and keeps the momentums inline;
  // onnxtrain moves them out too when they alone would be more than ORT keeps inline.
  bool external_moments_ = false;

  uint32_t write_groups(const CheckpointState& state, bool with_optimizer) {
    uint32_t vector = 0;
    const auto slots = out_.offsets(with_optimizer ? 1 : 0, vector);
    if (!with_optimizer) return vector;
    const OptimizerState& optimizer = state.optimizer_state();
    flatbuffer::Writer::TableFields fields;
    fields.offset(field::kGroupName);
    fields.scalar<int64_t>(field::kStep, optimizer.step);
    fields.scalar<float>(field::kInitialLearningRate, static_cast<float>(optimizer.learning_rate));
    fields.offset(field::kOptimizerStates);
    const auto group = out_.table(fields);
    out_.set_offset(slots[0], group.position);
    out_.set_offset(group.slot[field::kGroupName], out_.string(kGroupName));

    uint32_t states = 0;
    // An entry per parameter with moments and per trainable one: ORT's optimizer looks up
    // each parameter it trains. A std::map: sorted by name, as ORT writes them.
    std::map<std::string, std::map<std::string, Tensor, std::less<>>, std::less<>> all = optimizer.moments;
    for (const Parameter& p : state.parameters()) {
      if (p.requires_grad) all.try_emplace(p.name);
    }
    const auto entries = out_.offsets(all.size(), states);
    out_.set_offset(group.slot[field::kOptimizerStates], states);
    size_t i = 0;
    for (const auto& [parameter, moments] : all) {
      flatbuffer::Writer::TableFields entry_fields;
      entry_fields.offset(field::kParamName);
      entry_fields.offset(field::kMomentums);
      const auto entry = out_.table(entry_fields);
      out_.set_offset(entries[i++], entry.position);
      out_.set_offset(entry.slot[field::kParamName], out_.string(parameter));
      std::vector<std::pair<std::string, const Tensor*>> tensors;
      for (const auto& [name, tensor] : moments) tensors.emplace_back(moment_to_ort(name), &tensor);
      // ORT's optimizers all expect at least "momentum0" per parameter (its SGD keeps an
      // unused one); onnxtrain's plain SGD keeps none.
      Tensor unused;
      if (tensors.empty()) {
        const Tensor& data = state.parameter(parameter).data;
        unused = Tensor::zeros(data.dtype(), data.shape());
        tensors.emplace_back("momentum0", &unused);
      }
      std::sort(tensors.begin(), tensors.end());
      out_.set_offset(entry.slot[field::kMomentums], write_tensors(tensors, false, external_moments_));
    }
    return vector;
  }

  // `may_go_out`: the tensors go to the external data file when there is one.
  uint32_t write_tensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors, bool nominal,
                         bool may_go_out) {
    uint32_t vector = 0;
    const auto slots = out_.offsets(tensors.size(), vector);
    for (size_t i = 0; i < tensors.size(); ++i)
      out_.set_offset(slots[i], write_tensor(tensors[i].first, *tensors[i].second, nominal, may_go_out));
    return vector;
  }

  uint32_t write_tensor(const std::string& name, const Tensor& tensor, bool nominal, bool may_go_out) {
    if (!tensor.defined()) {
      throw Error("cannot save an ORT checkpoint: tensor '" + name + "' holds no data", ErrorKind::kInvalidArgument);
    }
    flatbuffer::Writer::TableFields fields;
    fields.offset(field::kTensorName);
    fields.offset(field::kDims);
    fields.scalar<int32_t>(field::kDataType, static_cast<int32_t>(tensor.dtype()));
    const bool out = !nominal && may_go_out && external_ != nullptr;
    const bool inline_data = !nominal && !out;
    if (inline_data) fields.offset(field::kRawData);
    if (out) fields.scalar<int64_t>(field::kExternalDataOffset, external_->append(tensor));
    const auto table = out_.table(fields);
    out_.set_offset(table.slot[field::kTensorName], out_.string(name));
    const Shape& shape = tensor.shape();
    out_.set_offset(table.slot[field::kDims], out_.scalars(shape.data(), shape.size(), sizeof(int64_t)));
    if (inline_data) {
      out_.set_offset(table.slot[field::kRawData], out_.scalars(tensor.raw_data(), tensor.nbytes(), 1));
    }
    return table.position;
  }

  uint32_t write_properties(const Properties& properties) {
    flatbuffer::Writer::TableFields fields;
    fields.offset(field::kInts);
    fields.offset(field::kFloats);
    fields.offset(field::kStrings);
    const auto bag = out_.table(fields);
    std::map<int, std::vector<std::pair<std::string, const PropertyValue*>>> by_kind;
    for (const auto& [name, value] : properties) {
      const int kind = static_cast<int>(value.index());  // int64, double, string: the bag's order
      by_kind[kind].emplace_back(name, &value);
    }
    for (const int kind : {field::kInts, field::kFloats, field::kStrings}) {
      const auto& list = by_kind[kind];
      uint32_t vector = 0;
      const auto slots = out_.offsets(list.size(), vector);
      out_.set_offset(bag.slot[kind], vector);
      for (size_t i = 0; i < list.size(); ++i)
        out_.set_offset(slots[i], write_property(list[i].first, *list[i].second));
    }
    return bag.position;
  }

  uint32_t write_property(const std::string& name, const PropertyValue& value) {
    flatbuffer::Writer::TableFields fields;
    fields.offset(field::kName);
    if (const auto* i = std::get_if<int64_t>(&value))
      fields.scalar<int64_t>(field::kValue, *i);
    else if (const auto* d = std::get_if<double>(&value))
      fields.scalar<float>(field::kValue, static_cast<float>(*d));
    else
      fields.offset(field::kValue);
    const auto table = out_.table(fields);
    out_.set_offset(table.slot[field::kName], out_.string(name));
    if (const auto* s = std::get_if<std::string>(&value)) out_.set_offset(table.slot[field::kValue], out_.string(*s));
    return table.position;
  }

  flatbuffer::Writer out_{kIdentifier};
  ExternalDataSink* external_;
};

}  // namespace

fs::path ort_external_data_path(const fs::path& checkpoint) {
  fs::path data = checkpoint;
  data += ".data";
  return data;
}

bool is_ort_checkpoint(std::span<const std::byte> head) {
  return flatbuffer::Reader::has_identifier(head, kIdentifier);
}

CheckpointState read_ort_checkpoint(std::span<const std::byte> bytes, const std::string& what) {
  return OrtCheckpointReader(bytes, what, std::nullopt).read();
}

CheckpointState read_ort_checkpoint(const fs::path& path) {
  const std::string bytes = read_file(path);
  return OrtCheckpointReader(std::as_bytes(std::span(bytes.data(), bytes.size())),
                             "ORT checkpoint '" + path.string() + "'", ort_external_data_path(path))
      .read();
}

void write_ort_checkpoint(const CheckpointState& state, const fs::path& path, bool include_optimizer_state) {
  const auto write = [&](ExternalDataSink* external) {
    const std::vector<std::byte> bytes = OrtCheckpointWriter(external).write(state, include_optimizer_state);
    if (external != nullptr) external->commit();  // the data first: the checkpoint points into it
    write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  };
  const bool external =
      !state.is_nominal() &&
      (state.has_external_data() || tensor_bytes(state, include_optimizer_state) >= kOrtExternalDataThreshold);
  if (!external) return write(nullptr);
  ExternalDataSink data(ort_external_data_path(path));
  write(&data);
}

}  // namespace onnxtrain::training
