#include "ir/graph.h"

#include <unordered_map>
#include <unordered_set>

namespace onnxtrain::ir {

const Attribute* Node::attribute(std::string_view attribute_name) const {
  for (const Attribute& a : attributes) {
    if (a.name == attribute_name) return &a;
  }
  return nullptr;
}

std::string Node::describe() const {
  std::string text = domain.empty() ? op_type : domain + "::" + op_type;
  return text + (name.empty() ? " (unnamed node, first output '" + (outputs.empty() ? "" : outputs[0]) + "')"
                              : " '" + name + "'");
}

const Tensor* Graph::initializer(std::string_view value_name) const {
  for (const auto& [name, tensor] : initializers) {
    if (name == value_name) return &tensor;
  }
  return nullptr;
}

std::optional<int64_t> Model::opset(std::string_view op_domain) const {
  for (const OpsetImport& o : opset_imports) {
    if (canonical_domain(o.domain) == canonical_domain(op_domain)) return o.version;
  }
  return std::nullopt;
}

const Function* Model::function(std::string_view function_domain, std::string_view function_name) const {
  for (const Function& f : functions) {
    if (f.domain == function_domain && f.name == function_name) return &f;
  }
  return nullptr;
}

namespace {

void add_free_values(const Graph& graph, std::vector<std::string>& reads, std::unordered_set<std::string>& seen) {
  std::unordered_set<std::string_view> defined;
  for (const ValueInfo& v : graph.inputs) defined.insert(v.name);
  for (const auto& [name, tensor] : graph.initializers) defined.insert(name);
  for (const Node& node : graph.nodes) {
    for (const std::string& out : node.outputs) defined.insert(out);
  }
  auto read = [&](const std::string& name) {
    if (name.empty() || defined.contains(name) || seen.contains(name)) return;
    seen.insert(name);
    reads.push_back(name);
  };
  for (const Node& node : graph.nodes) {
    for (const std::string& in : node.inputs) read(in);
    for (const std::string& in : outer_scope_reads(node)) read(in);
  }
  for (const ValueInfo& v : graph.outputs) read(v.name);
}

}  // namespace

std::vector<std::string> free_values(const Graph& graph) {
  std::vector<std::string> reads;
  std::unordered_set<std::string> seen;
  add_free_values(graph, reads, seen);
  return reads;
}

std::vector<std::string> outer_scope_reads(const Node& node) {
  std::vector<std::string> reads;
  std::unordered_set<std::string> seen;
  for (const Attribute& a : node.attributes) {
    if (a.g) add_free_values(*a.g, reads, seen);
    for (const auto& g : a.graphs) add_free_values(*g, reads, seen);
  }
  return reads;
}

namespace {

void rename_free_values(Graph& graph, const std::function<std::string(const std::string&)>& rename) {
  std::unordered_set<std::string> defined;
  for (const ValueInfo& v : graph.inputs) defined.insert(v.name);
  for (const auto& [name, tensor] : graph.initializers) defined.insert(name);
  for (const Node& node : graph.nodes) defined.insert(node.outputs.begin(), node.outputs.end());
  const auto outer = [&](const std::string& name) {
    return name.empty() || defined.contains(name) ? name : rename(name);
  };
  for (Node& node : graph.nodes) {
    for (std::string& in : node.inputs) in = outer(in);
    rename_outer_scope_reads(node, outer);
  }
  for (ValueInfo& v : graph.outputs) v.name = outer(v.name);
}

}  // namespace

void rename_outer_scope_reads(Node& node, const std::function<std::string(const std::string&)>& rename) {
  for (Attribute& a : node.attributes) {
    if (a.g) {
      a.g = std::make_shared<Graph>(*a.g);
      rename_free_values(*a.g, rename);
    }
    for (auto& g : a.graphs) {
      g = std::make_shared<Graph>(*g);
      rename_free_values(*g, rename);
    }
  }
}

std::vector<size_t> topological_order(const Graph& graph) {
  std::unordered_set<std::string_view> available;
  for (const ValueInfo& v : graph.inputs) available.insert(v.name);
  for (const auto& [name, tensor] : graph.initializers) available.insert(name);

  std::unordered_map<std::string_view, size_t> producer;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const std::string& out : graph.nodes[i].outputs) {
      if (!out.empty()) producer.emplace(out, i);
    }
  }
  // Count, per node, the inputs that a node of this graph still has to produce.
  std::vector<size_t> pending(graph.nodes.size(), 0);
  std::unordered_map<std::string_view, std::vector<size_t>> waiting;
  std::vector<size_t> ready;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    std::vector<std::string> reads = graph.nodes[i].inputs;
    for (const Attribute& a : graph.nodes[i].attributes) {
      if (!a.g && a.graphs.empty()) continue;
      const std::vector<std::string> outer = outer_scope_reads(graph.nodes[i]);
      reads.insert(reads.end(), outer.begin(), outer.end());
      break;
    }
    for (const std::string& in : reads) {
      if (in.empty() || available.contains(in)) continue;
      const auto made = producer.find(in);
      if (made == producer.end()) {
        throw Error(graph.nodes[i].describe() + " reads '" + in +
                        "', which is neither a graph input, an initializer nor a node output",
                    ErrorKind::kInvalidModel);
      }
      ++pending[i];
      waiting[made->first].push_back(i);  // a key that outlives `reads`
    }
    if (pending[i] == 0) ready.push_back(i);
  }
  std::vector<size_t> order;
  order.reserve(graph.nodes.size());
  // Keep file order where possible: it is usually already topological.
  for (size_t head = 0; head < ready.size(); ++head) {
    const size_t i = ready[head];
    order.push_back(i);
    for (const std::string& out : graph.nodes[i].outputs) {
      auto it = waiting.find(out);
      if (it == waiting.end()) continue;
      for (size_t consumer : it->second) {
        if (--pending[consumer] == 0) ready.push_back(consumer);
      }
      waiting.erase(it);
    }
  }
  if (order.size() != graph.nodes.size()) {
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (pending[i] != 0) {
        throw Error("the graph has a cycle through " + graph.nodes[i].describe(), ErrorKind::kInvalidModel);
      }
    }
  }
  return order;
}

Attribute attr(std::string name, int64_t value) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttributeType::kInt;
  a.i = value;
  return a;
}

Attribute attr(std::string name, int value) {
  return attr(std::move(name), static_cast<int64_t>(value));
}

Attribute attr(std::string name, float value) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttributeType::kFloat;
  a.f = value;
  return a;
}

Attribute attr(std::string name, std::vector<int64_t> values) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttributeType::kInts;
  a.ints = std::move(values);
  return a;
}

Attribute attr(std::string name, std::vector<float> values) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttributeType::kFloats;
  a.floats = std::move(values);
  return a;
}

Attribute attr(std::string name, std::string value) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttributeType::kString;
  a.s = std::move(value);
  return a;
}

Attribute attr(std::string name, const char* value) {
  return attr(std::move(name), std::string(value));
}

Attribute attr(std::string name, Tensor value) {
  Attribute a;
  a.name = std::move(name);
  a.type = AttributeType::kTensor;
  a.t = std::move(value);
  return a;
}

}  // namespace onnxtrain::ir
