#include "ir/onnx_io.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "core/dispatch.h"
#include "core/file.h"
#include "ir/opset.h"
#include "onnx/onnx-ml.pb.h"

namespace onnxtrain::ir {
namespace {

namespace fs = std::filesystem;

// Maps files read as external data, so that several tensors share one mapping.
class ExternalData {
 public:
  explicit ExternalData(fs::path base_dir) : base_dir_(std::move(base_dir)) {}

  Tensor read(const std::string& tensor_name, DType dtype, Shape shape, const std::string& location, size_t offset,
              std::optional<size_t> length) {
    if (location.empty() || fs::path(location).is_absolute() || location.find("..") != std::string::npos) {
      throw Error("tensor '" + tensor_name + "': external data location '" + location +
                      "' must be a relative path inside the model's folder",
                  ErrorKind::kInvalidModel);
    }
    const MappedFile& file = map(base_dir_ / location, tensor_name);
    const size_t bytes = tensor_bytes(dtype, shape);
    if (length && *length != bytes) {
      throw Error("tensor '" + tensor_name + "': external data length " + std::to_string(*length) +
                      " does not match its shape " + shape_string(shape) + " (" + std::to_string(bytes) + " bytes)",
                  ErrorKind::kInvalidModel);
    }
    if (offset > file.size || bytes > file.size - offset) {
      throw Error("tensor '" + tensor_name + "': external data file '" + (base_dir_ / location).string() +
                      "' is too short (" + std::to_string(file.size) + " bytes, need " + std::to_string(offset) +
                      " + " + std::to_string(bytes) + ")",
                  ErrorKind::kInvalidModel);
    }
    // Copy out of the mapping: a tensor must stay valid and aligned after the file changes.
    Tensor tensor = Tensor::empty(dtype, std::move(shape));
    if (bytes) std::memcpy(tensor.raw_data(), file.data + offset, bytes);
    return tensor;
  }

 private:
  struct MappedFile {
    const std::byte* data = nullptr;
    size_t size = 0;
    std::shared_ptr<void> mapping;
  };

  const MappedFile& map(const fs::path& path, const std::string& tensor_name) {
    auto it = files_.find(path.string());
    if (it != files_.end()) return it->second;
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      throw Error("tensor '" + tensor_name + "': cannot open external data file '" + path.string() + "'",
                  ErrorKind::kIO);
    }
    struct stat st {};
    ::fstat(fd, &st);
    MappedFile file;
    file.size = static_cast<size_t>(st.st_size);
    if (file.size > 0) {
      void* p = ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw Error("cannot map external data file '" + path.string() + "'", ErrorKind::kIO);
      }
      const size_t size = file.size;
      file.mapping = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size); });
      file.data = static_cast<const std::byte*>(p);
    }
    ::close(fd);
    return files_.emplace(path.string(), std::move(file)).first->second;
  }

  fs::path base_dir_;
  std::unordered_map<std::string, MappedFile> files_;
};

struct Reader {
  ExternalData* external = nullptr;

  Tensor tensor(const onnx::TensorProto& proto) const {
    const std::string& name = proto.name();
    const DType dtype = dtype_from_onnx(proto.data_type());
    if (!is_supported(dtype)) {
      throw Error("tensor '" + name + "' has element type " + std::to_string(proto.data_type()) +
                      ", which onnxtrain does not support",
                  ErrorKind::kNotImplemented);
    }
    Shape shape(proto.dims().begin(), proto.dims().end());
    for (int64_t d : shape) {
      if (d < 0) throw Error("tensor '" + name + "' has a negative dimension", ErrorKind::kInvalidModel);
    }
    if (proto.has_segment()) {
      throw Error("tensor '" + name + "' is segmented, which onnxtrain does not support", ErrorKind::kNotImplemented);
    }
    if (proto.data_location() == onnx::TensorProto::EXTERNAL) return external_tensor(proto, dtype, std::move(shape));

    Tensor out = Tensor::empty(dtype, shape);
    const size_t n = static_cast<size_t>(out.numel());
    if (proto.has_raw_data()) {
      if (proto.raw_data().size() != out.nbytes()) {
        throw Error("tensor '" + name + "': raw_data holds " + std::to_string(proto.raw_data().size()) +
                        " bytes, its shape " + shape_string(shape) + " needs " + std::to_string(out.nbytes()),
                    ErrorKind::kInvalidModel);
      }
      if (n) std::memcpy(out.raw_data(), proto.raw_data().data(), out.nbytes());
      return out;
    }
    if (is_narrow_float(dtype) || is_packed(dtype)) {
      // One byte per int32: a float8 element's bits, or two packed 4-bit elements.
      const size_t bytes = out.nbytes();
      if (static_cast<size_t>(proto.int32_data_size()) != bytes) {
        throw Error("tensor '" + name + "' holds " + std::to_string(proto.int32_data_size()) +
                        " int32_data entries, its shape " + shape_string(shape) + " needs " + std::to_string(bytes),
                    ErrorKind::kInvalidModel);
      }
      auto* dst = static_cast<uint8_t*>(out.raw_data());
      for (size_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(proto.int32_data(static_cast<int>(i)));
      return out;
    }
    dispatch<ONNXTRAIN_ALL_TYPES>(dtype, "tensor '" + name + "'", [&]<typename T>() {
      T* dst = out.data<T>();
      auto fill = [&](const auto& field, auto convert) {
        if (static_cast<size_t>(field.size()) != n) {
          throw Error("tensor '" + name + "' holds " + std::to_string(field.size()) + " values, its shape " +
                          shape_string(shape) + " needs " + std::to_string(n),
                      ErrorKind::kInvalidModel);
        }
        for (size_t i = 0; i < n; ++i) dst[i] = convert(field[static_cast<int>(i)]);
      };
      if constexpr (std::is_same_v<T, float>) {
        fill(proto.float_data(), [](float v) { return v; });
      } else if constexpr (std::is_same_v<T, double>) {
        fill(proto.double_data(), [](double v) { return v; });
      } else if constexpr (std::is_same_v<T, int64_t>) {
        fill(proto.int64_data(), [](int64_t v) { return v; });
      } else if constexpr (std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>) {
        fill(proto.uint64_data(), [](uint64_t v) { return static_cast<T>(v); });
      } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        fill(proto.int32_data(), [](int32_t v) {
          T h;
          h.bits = static_cast<uint16_t>(v);
          return h;
        });
      } else {
        fill(proto.int32_data(), [](int32_t v) { return static_cast<T>(v); });
      }
    });
    return out;
  }

  // An external-data offset or length: decimal digits only (no sign, no spaces), in range.
  static size_t external_data_number(const std::string& tensor_name, const char* key, const std::string& text) {
    size_t value = 0;
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, value);
    if (text.empty() || error != std::errc{} || stop != end) {
      throw Error("tensor '" + tensor_name + "': external data " + key + " '" + text +
                      "' is not a non-negative integer that fits in 64 bits",
                  ErrorKind::kInvalidModel);
    }
    return value;
  }

  Tensor external_tensor(const onnx::TensorProto& proto, DType dtype, Shape shape) const {
    std::string location;
    size_t offset = 0;
    std::optional<size_t> length;
    for (const auto& entry : proto.external_data()) {
      if (entry.key() == "location")
        location = entry.value();
      else if (entry.key() == "offset")
        offset = external_data_number(proto.name(), "offset", entry.value());
      else if (entry.key() == "length")
        length = external_data_number(proto.name(), "length", entry.value());
    }
    if (external == nullptr) {
      throw Error("tensor '" + proto.name() + "' uses external data, which needs the model's path",
                  ErrorKind::kInvalidModel);
    }
    return external->read(proto.name(), dtype, std::move(shape), location, offset, length);
  }

  ValueInfo value_info(const onnx::ValueInfoProto& proto) const {
    ValueInfo info;
    info.name = proto.name();
    info.doc_string = proto.doc_string();
    if (!proto.has_type()) return info;
    if (!proto.type().has_tensor_type()) {
      info.opaque_type_proto = proto.type().SerializeAsString();
      describe_container(proto.type(), info);
      return info;
    }
    const auto& tensor_type = proto.type().tensor_type();
    info.dtype = static_cast<DType>(tensor_type.elem_type());
    if (tensor_type.has_shape()) {
      std::vector<Dim> dims;
      for (const auto& d : tensor_type.shape().dim()) {
        Dim dim;
        if (d.has_dim_value()) dim.value = d.dim_value();
        if (d.has_dim_param()) dim.param = d.dim_param();
        dims.push_back(std::move(dim));
      }
      info.shape = std::move(dims);
    }
    return info;
  }

  // seq(tensor), optional(tensor) and optional(seq(tensor)): the kinds of value the runtime
  // holds besides tensors (a tensor's shape is not kept: it varies between elements).
  static void describe_container(const onnx::TypeProto& type, ValueInfo& info) {
    const onnx::TypeProto* inner = &type;
    if (inner->has_optional_type()) {
      info.optional = true;
      inner = &inner->optional_type().elem_type();
    }
    if (inner->has_tensor_type() && info.optional) {
      info.dtype = dtype_from_onnx(inner->tensor_type().elem_type());
    } else if (inner->has_sequence_type() && inner->sequence_type().elem_type().has_tensor_type()) {
      info.dtype = DType::kSequence;
      info.element_dtype = dtype_from_onnx(inner->sequence_type().elem_type().tensor_type().elem_type());
    } else {
      info.optional = false;  // a map, a sparse tensor, a sequence of sequences: not held
    }
  }

  Attribute attribute(const onnx::AttributeProto& proto) const {
    Attribute a;
    a.name = proto.name();
    a.type = static_cast<AttributeType>(proto.type());
    a.ref_attr_name = proto.ref_attr_name();
    a.doc_string = proto.doc_string();
    a.f = proto.f();
    a.i = proto.i();
    a.s = proto.s();
    a.floats.assign(proto.floats().begin(), proto.floats().end());
    a.ints.assign(proto.ints().begin(), proto.ints().end());
    a.strings.assign(proto.strings().begin(), proto.strings().end());
    if (proto.has_t()) a.t = tensor(proto.t());
    for (const auto& t : proto.tensors()) a.tensors.push_back(tensor(t));
    if (proto.has_g()) a.g = std::make_shared<Graph>(graph(proto.g()));
    for (const auto& g : proto.graphs()) a.graphs.push_back(std::make_shared<Graph>(graph(g)));
    if (proto.has_sparse_tensor() || proto.sparse_tensors_size() || proto.has_tp() || proto.type_protos_size()) {
      a.opaque_proto = proto.SerializeAsString();
    }
    if (a.type == AttributeType::kUndefined && a.ref_attr_name.empty()) {
      throw Error("attribute '" + a.name + "' has no type", ErrorKind::kInvalidModel);
    }
    return a;
  }

  Node node(const onnx::NodeProto& proto) const {
    Node n;
    n.name = proto.name();
    n.op_type = proto.op_type();
    n.domain = proto.domain();
    n.overload = proto.overload();
    n.inputs.assign(proto.input().begin(), proto.input().end());
    n.outputs.assign(proto.output().begin(), proto.output().end());
    n.doc_string = proto.doc_string();
    if (n.op_type.empty()) throw Error("a node named '" + n.name + "' has no op_type", ErrorKind::kInvalidModel);
    for (const auto& a : proto.attribute()) n.attributes.push_back(attribute(a));
    return n;
  }

  // "" is ONNX's "no value" (an omitted optional input or output): it cannot name an
  // initializer, a graph input or output, or a Constant's value.
  static void check_names(const Graph& g) {
    const auto where = [&](const std::string& what) {
      return "graph '" + g.name + "': " + what + " has an empty name";
    };
    for (size_t i = 0; i < g.initializers.size(); ++i) {
      if (g.initializers[i].first.empty())
        throw Error(where("initializer " + std::to_string(i)), ErrorKind::kInvalidModel);
    }
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      if (g.inputs[i].name.empty()) throw Error(where("input " + std::to_string(i)), ErrorKind::kInvalidModel);
    }
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      if (g.outputs[i].name.empty()) throw Error(where("output " + std::to_string(i)), ErrorKind::kInvalidModel);
    }
    for (const Node& n : g.nodes) {
      if (n.op_type == "Constant" && (n.outputs.empty() || n.outputs[0].empty())) {
        throw Error(where("the output of node '" + n.name + "' (Constant)"), ErrorKind::kInvalidModel);
      }
    }
  }

  Graph graph(const onnx::GraphProto& proto) const {
    Graph g;
    g.name = proto.name();
    g.doc_string = proto.doc_string();
    for (const auto& n : proto.node()) g.nodes.push_back(node(n));
    for (const auto& v : proto.input()) g.inputs.push_back(value_info(v));
    for (const auto& v : proto.output()) g.outputs.push_back(value_info(v));
    for (const auto& v : proto.value_info()) g.value_info.push_back(value_info(v));
    for (const auto& t : proto.initializer()) g.initializers.emplace_back(t.name(), tensor(t));
    check_names(g);
    if (proto.sparse_initializer_size()) {
      throw Error("graph '" + g.name + "' has sparse initializers, which onnxtrain does not support yet",
                  ErrorKind::kNotImplemented);
    }
    return g;
  }

  Function function(const onnx::FunctionProto& proto) const {
    Function f;
    f.name = proto.name();
    f.domain = proto.domain();
    f.overload = proto.overload();
    f.inputs.assign(proto.input().begin(), proto.input().end());
    f.outputs.assign(proto.output().begin(), proto.output().end());
    f.attribute_names.assign(proto.attribute().begin(), proto.attribute().end());
    for (const auto& a : proto.attribute_proto()) f.attribute_defaults.push_back(attribute(a));
    for (const auto& n : proto.node()) f.nodes.push_back(node(n));
    for (const auto& o : proto.opset_import()) f.opset_imports.push_back({o.domain(), o.version()});
    for (const auto& v : proto.value_info()) f.value_info.push_back(value_info(v));
    f.doc_string = proto.doc_string();
    return f;
  }

  Model model(const onnx::ModelProto& proto) const {
    Model m;
    m.ir_version = proto.ir_version();
    for (const auto& o : proto.opset_import()) {
      if (canonical_domain(o.domain()).empty() && (o.version() < 1 || o.version() > kNewestOnnxOpset)) {
        throw Error("the model imports opset " + std::to_string(o.version()) +
                        " of the default ONNX domain; onnxtrain knows opsets 1 to " + std::to_string(kNewestOnnxOpset),
                    ErrorKind::kInvalidModel);
      }
      m.opset_imports.push_back({o.domain(), o.version()});
    }
    m.producer_name = proto.producer_name();
    m.producer_version = proto.producer_version();
    m.domain = proto.domain();
    m.model_version = proto.model_version();
    m.doc_string = proto.doc_string();
    for (const auto& p : proto.metadata_props()) m.metadata_props.emplace_back(p.key(), p.value());
    if (!proto.has_graph()) throw Error("the model has no graph", ErrorKind::kInvalidModel);
    m.graph = graph(proto.graph());
    for (const auto& f : proto.functions()) m.functions.push_back(function(f));
    return m;
  }
};

// Writes tensors either inline or into one external data file.
struct Writer {
  size_t threshold = 0;  // 0: everything inline
  std::string data_file_name;
  std::ofstream* data_file = nullptr;
  size_t data_offset = 0;

  void tensor(const std::string& name, const Tensor& t, onnx::TensorProto* proto) {
    proto->set_name(name);
    proto->set_data_type(static_cast<int32_t>(t.dtype()));
    for (int64_t d : t.shape()) proto->add_dims(d);
    if (data_file == nullptr || t.nbytes() < threshold || t.nbytes() == 0) {
      proto->set_raw_data(t.raw_data(), t.nbytes());
      return;
    }
    constexpr size_t kAlignment = 64;  // lets readers map tensors aligned
    const size_t padding = (kAlignment - data_offset % kAlignment) % kAlignment;
    static const char zeros[kAlignment] = {};
    data_file->write(zeros, static_cast<std::streamsize>(padding));
    data_offset += padding;
    data_file->write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
    proto->set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* key, const std::string& value) {
      auto* entry = proto->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    };
    add("location", data_file_name);
    add("offset", std::to_string(data_offset));
    add("length", std::to_string(t.nbytes()));
    data_offset += t.nbytes();
  }

  void value_info(const ValueInfo& info, onnx::ValueInfoProto* proto) {
    proto->set_name(info.name);
    if (!info.doc_string.empty()) proto->set_doc_string(info.doc_string);
    if (!info.opaque_type_proto.empty()) {
      proto->mutable_type()->ParseFromString(info.opaque_type_proto);
      return;
    }
    if (info.dtype == DType::kUndefined && !info.shape) return;
    auto* tensor_type = proto->mutable_type()->mutable_tensor_type();
    tensor_type->set_elem_type(static_cast<int32_t>(info.dtype));
    if (!info.shape) return;
    auto* shape = tensor_type->mutable_shape();
    for (const Dim& d : *info.shape) {
      auto* dim = shape->add_dim();
      if (d.value) dim->set_dim_value(*d.value);
      if (!d.param.empty()) dim->set_dim_param(d.param);
    }
  }

  void attribute(const Attribute& a, onnx::AttributeProto* proto) {
    if (!a.opaque_proto.empty()) {
      proto->ParseFromString(a.opaque_proto);
      return;
    }
    proto->set_name(a.name);
    if (!a.ref_attr_name.empty()) proto->set_ref_attr_name(a.ref_attr_name);
    if (!a.doc_string.empty()) proto->set_doc_string(a.doc_string);
    proto->set_type(static_cast<onnx::AttributeProto::AttributeType>(a.type));
    if (!a.ref_attr_name.empty()) return;  // a reference (inside a function body) carries no value
    switch (a.type) {
      case AttributeType::kFloat:
        proto->set_f(a.f);
        break;
      case AttributeType::kInt:
        proto->set_i(a.i);
        break;
      case AttributeType::kString:
        proto->set_s(a.s);
        break;
      case AttributeType::kTensor:
        tensor("", a.t, proto->mutable_t());
        break;
      case AttributeType::kGraph:
        graph(*a.g, proto->mutable_g());
        break;
      case AttributeType::kFloats:
        for (float v : a.floats) proto->add_floats(v);
        break;
      case AttributeType::kInts:
        for (int64_t v : a.ints) proto->add_ints(v);
        break;
      case AttributeType::kStrings:
        for (const auto& v : a.strings) proto->add_strings(v);
        break;
      case AttributeType::kTensors:
        for (const auto& t : a.tensors) tensor("", t, proto->add_tensors());
        break;
      case AttributeType::kGraphs:
        for (const auto& g : a.graphs) graph(*g, proto->add_graphs());
        break;
      default:
        break;
    }
    if (a.type == AttributeType::kTensor && a.t.defined()) proto->mutable_t()->clear_name();
  }

  void node(const Node& n, onnx::NodeProto* proto) {
    for (const auto& in : n.inputs) proto->add_input(in);
    for (const auto& out : n.outputs) proto->add_output(out);
    if (!n.name.empty()) proto->set_name(n.name);
    proto->set_op_type(n.op_type);
    if (!n.domain.empty()) proto->set_domain(n.domain);
    if (!n.overload.empty()) proto->set_overload(n.overload);
    if (!n.doc_string.empty()) proto->set_doc_string(n.doc_string);
    for (const Attribute& a : n.attributes) attribute(a, proto->add_attribute());
  }

  void graph(const Graph& g, onnx::GraphProto* proto) {
    for (const Node& n : g.nodes) node(n, proto->add_node());
    proto->set_name(g.name);
    for (const auto& [name, t] : g.initializers) tensor(name, t, proto->add_initializer());
    if (!g.doc_string.empty()) proto->set_doc_string(g.doc_string);
    for (const auto& v : g.inputs) value_info(v, proto->add_input());
    for (const auto& v : g.outputs) value_info(v, proto->add_output());
    for (const auto& v : g.value_info) value_info(v, proto->add_value_info());
  }

  void function(const Function& f, onnx::FunctionProto* proto) {
    proto->set_name(f.name);
    for (const auto& in : f.inputs) proto->add_input(in);
    for (const auto& out : f.outputs) proto->add_output(out);
    for (const auto& a : f.attribute_names) proto->add_attribute(a);
    for (const auto& a : f.attribute_defaults) attribute(a, proto->add_attribute_proto());
    for (const Node& n : f.nodes) node(n, proto->add_node());
    if (!f.doc_string.empty()) proto->set_doc_string(f.doc_string);
    for (const auto& o : f.opset_imports) {
      auto* op = proto->add_opset_import();
      op->set_domain(o.domain);
      op->set_version(o.version);
    }
    proto->set_domain(f.domain);
    if (!f.overload.empty()) proto->set_overload(f.overload);
    for (const auto& v : f.value_info) value_info(v, proto->add_value_info());
  }

  void model(const Model& m, onnx::ModelProto* proto) {
    proto->set_ir_version(m.ir_version);
    for (const auto& o : m.opset_imports) {
      auto* op = proto->add_opset_import();
      op->set_domain(o.domain);
      op->set_version(o.version);
    }
    if (!m.producer_name.empty()) proto->set_producer_name(m.producer_name);
    if (!m.producer_version.empty()) proto->set_producer_version(m.producer_version);
    if (!m.domain.empty()) proto->set_domain(m.domain);
    if (m.model_version) proto->set_model_version(m.model_version);
    if (!m.doc_string.empty()) proto->set_doc_string(m.doc_string);
    graph(m.graph, proto->mutable_graph());
    for (const auto& [key, value] : m.metadata_props) {
      auto* p = proto->add_metadata_props();
      p->set_key(key);
      p->set_value(value);
    }
    for (const Function& f : m.functions) function(f, proto->add_functions());
  }
};

onnx::ModelProto parse_model_proto(std::span<const std::byte> bytes, const std::string& where) {
  onnx::ModelProto proto;
  google::protobuf::io::ArrayInputStream array(bytes.data(), static_cast<int>(std::min<size_t>(bytes.size(), INT_MAX)));
  google::protobuf::io::CodedInputStream coded(&array);
  coded.SetTotalBytesLimit(INT_MAX);
  if (bytes.size() > static_cast<size_t>(INT_MAX) || !proto.ParseFromCodedStream(&coded) ||
      !coded.ConsumedEntireMessage()) {
    throw Error(where + " is not a valid ONNX model (the protobuf does not parse: truncated or corrupt?)",
                ErrorKind::kInvalidModel);
  }
  if (!proto.has_graph()) {
    throw Error(where + " is not a valid ONNX model (it has no graph)", ErrorKind::kInvalidModel);
  }
  return proto;
}

size_t total_tensor_bytes(const Graph& g) {
  size_t total = 0;
  for (const auto& [name, t] : g.initializers) total += t.nbytes();
  return total;
}

}  // namespace

Model load_model(const fs::path& path) {
  const std::string bytes = read_file(path);
  ExternalData external(path.parent_path());
  Reader reader{&external};
  const auto proto = parse_model_proto(std::as_bytes(std::span(bytes.data(), bytes.size())), "'" + path.string() + "'");
  try {
    return reader.model(proto);
  } catch (const Error& e) {
    throw Error("'" + path.string() + "': " + e.what(), e.kind());
  }
}

Model load_model(std::span<const std::byte> bytes, const fs::path& base_dir) {
  std::optional<ExternalData> external;
  if (!base_dir.empty()) external.emplace(base_dir);
  Reader reader{external ? &*external : nullptr};
  return reader.model(parse_model_proto(bytes, "the model bytes"));
}

std::string serialize_model(const Model& model) {
  onnx::ModelProto proto;
  Writer writer;
  writer.model(model, &proto);
  std::string out;
  if (proto.ByteSizeLong() > static_cast<size_t>(INT_MAX) || !proto.SerializeToString(&out)) {
    throw Error("the model is larger than protobuf's 2 GB limit; save it to a file with external data",
                ErrorKind::kInvalidArgument);
  }
  return out;
}

void save_model(const Model& model, const fs::path& path, const SaveOptions& options) {
  constexpr size_t kProtobufLimit = size_t{1} << 31;
  Writer writer;
  writer.threshold = options.external_data_threshold;
  if (writer.threshold == 0 && total_tensor_bytes(model.graph) >= kProtobufLimit - (size_t{64} << 20)) {
    writer.threshold = 1024;
  }
  std::optional<AtomicFile> data_file;
  std::ofstream data_stream;
  if (writer.threshold) {
    writer.data_file_name =
        options.external_data_file.empty() ? path.filename().string() + ".data" : options.external_data_file;
    data_file.emplace(path.parent_path() / writer.data_file_name);
    data_stream.open(data_file->temporary_path(), std::ios::binary);
    writer.data_file = &data_stream;
  }
  onnx::ModelProto proto;
  writer.model(model, &proto);
  std::string bytes;
  if (proto.ByteSizeLong() > static_cast<size_t>(INT_MAX) || !proto.SerializeToString(&bytes)) {
    throw Error("cannot serialize the model for '" + path.string() + "' (over 2 GB even with external data)",
                ErrorKind::kInvalidArgument);
  }
  if (data_file) {
    data_stream.close();
    if (!data_stream) throw Error("cannot write '" + data_file->path().string() + "'", ErrorKind::kIO);
    data_file->commit();
  }
  write_file_atomically(path, bytes);
}

}  // namespace onnxtrain::ir
