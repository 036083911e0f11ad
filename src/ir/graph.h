// onnxtrain's own graph IR: what the runtime, the passes and autodiff work on.
// Values are named as in ONNX; producer/consumer maps are derived (see GraphIndex).
#pragma once

#include <onnxtrain/tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onnxtrain::ir {

struct Graph;

// Values match onnx.AttributeProto.AttributeType.
enum class AttributeType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kTensors = 9,
  kGraphs = 10,
  kSparseTensor = 11,
  kSparseTensors = 12,
  kTypeProto = 13,
  kTypeProtos = 14,
};

struct Attribute {
  std::string name;
  AttributeType type = AttributeType::kUndefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  std::string ref_attr_name;  // inside a function body: refers to the caller's attribute
  std::string doc_string;
  // Attributes onnxtrain does not interpret (sparse tensors, type protos), serialized.
  std::string opaque_proto;
};

// Attributes for nodes that passes, the gradient builder and the artifact builders emit.
Attribute attr(std::string name, int64_t value);
Attribute attr(std::string name, int value);
Attribute attr(std::string name, float value);
Attribute attr(std::string name, std::vector<int64_t> values);
Attribute attr(std::string name, std::vector<float> values);
Attribute attr(std::string name, std::string value);
Attribute attr(std::string name, const char* value);
Attribute attr(std::string name, Tensor value);

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain
  std::string overload;
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  std::vector<Attribute> attributes;
  std::string doc_string;
  // The opset of `domain` this node follows; 0 means the model's import. Nodes inlined from a
  // function keep the function's own import here. Not saved.
  int64_t opset = 0;

  const Attribute* attribute(std::string_view attribute_name) const;
  // "Conv 'conv1'" — how errors refer to a node.
  std::string describe() const;
};

// One dimension: a fixed size, a symbolic name ("batch"), or unknown.
struct Dim {
  std::optional<int64_t> value;
  std::string param;
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  std::optional<std::vector<Dim>> shape;  // nullopt: rank unknown
  std::string doc_string;
  // The serialized onnx.TypeProto when it is not a tensor type (sequence, map, optional).
  std::string opaque_type_proto;
  // Of those, what the runtime holds: seq(tensor) has dtype kSequence and its tensors'
  // element_dtype; optional(T) is T with `optional` set. Other types (maps, sequences of
  // sequences) keep dtype kUndefined.
  DType element_dtype = DType::kUndefined;
  bool optional = false;
};

struct Graph {
  std::string name;
  std::string doc_string;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_info;
  std::vector<std::pair<std::string, Tensor>> initializers;  // in file order

  const Tensor* initializer(std::string_view value_name) const;
};

struct OpsetImport {
  std::string domain;
  int64_t version = 0;
};

// A model-local function (onnx.FunctionProto).
struct Function {
  std::string name;
  std::string domain;
  std::string overload;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> attribute_names;
  std::vector<Attribute> attribute_defaults;
  std::vector<Node> nodes;
  std::vector<OpsetImport> opset_imports;
  std::vector<ValueInfo> value_info;
  std::string doc_string;
};

struct Model {
  int64_t ir_version = 0;
  std::vector<OpsetImport> opset_imports;
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc_string;
  std::vector<std::pair<std::string, std::string>> metadata_props;
  Graph graph;
  std::vector<Function> functions;

  // The opset version imported for `domain` ("" and "ai.onnx" are the same); nullopt if none.
  std::optional<int64_t> opset(std::string_view op_domain) const;
  const Function* function(std::string_view function_domain, std::string_view function_name) const;
};

// "" and "ai.onnx" name the same domain.
inline std::string_view canonical_domain(std::string_view domain) {
  return domain == "ai.onnx" ? std::string_view{} : domain;
}

// The values that `node`'s graph attributes (If's branches, Loop's and Scan's bodies, and
// the graphs nested in those) read from scopes outside them, in first-read order: a control
// flow node's implicit inputs.
std::vector<std::string> outer_scope_reads(const Node& node);
// Renames, in `node`'s graph attributes (copied, not shared), the values they read from
// outside themselves: a function call's body inlined with its values renamed.
void rename_outer_scope_reads(Node& node, const std::function<std::string(const std::string&)>& rename);
// The values `graph` reads that it does not define itself (inputs, initializers, outputs of
// its nodes), nested graphs included, in first-read order.
std::vector<std::string> free_values(const Graph& graph);

// Nodes in an order where every node follows the producers of its inputs (and of the
// outer-scope values its subgraphs read). Throws an Error
// naming a node on a cycle, or an input that nothing produces.
std::vector<size_t> topological_order(const Graph& graph);

}  // namespace onnxtrain::ir
