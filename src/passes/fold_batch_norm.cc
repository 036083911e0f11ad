#include "passes/fold_batch_norm.h"

#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/dispatch.h"
#include "passes/value_reads.h"

namespace onnxtrain::passes {
namespace {

// The graph's constants: initializers that are not graph inputs.
class Constants {
 public:
  explicit Constants(ir::Graph& graph) : graph_(graph) {
    std::unordered_set<std::string> inputs;
    for (const ir::ValueInfo& v : graph.inputs) inputs.insert(v.name);
    for (size_t i = 0; i < graph.initializers.size(); ++i) {
      if (!inputs.contains(graph.initializers[i].first)) index_[graph.initializers[i].first] = i;
    }
  }
  Tensor* find(const std::string& name) {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &graph_.initializers[it->second].second;
  }

 private:
  ir::Graph& graph_;
  std::unordered_map<std::string, size_t> index_;
};

bool is_folding_float(const Tensor& t) {
  return t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64;
}

// W' and B' (see the header), computed in double.
template <typename T>
void fold(Tensor& w, Tensor& b, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var,
          double epsilon) {
  const int64_t m = w.dim(0);
  const int64_t per_channel = m ? w.numel() / m : 0;
  T* wp = w.data<T>();
  T* bp = b.data<T>();
  for (int64_t c = 0; c < m; ++c) {
    const double k =
        static_cast<double>(scale.data<T>()[c]) / std::sqrt(static_cast<double>(var.data<T>()[c]) + epsilon);
    for (int64_t i = 0; i < per_channel; ++i)
      wp[c * per_channel + i] = static_cast<T>(static_cast<double>(wp[c * per_channel + i]) * k);
    bp[c] = static_cast<T>((static_cast<double>(bp[c]) - static_cast<double>(mean.data<T>()[c])) * k +
                           static_cast<double>(bias.data<T>()[c]));
  }
}

}  // namespace

size_t fold_batch_norm_into_conv(ir::Model& model) {
  ir::Graph& graph = model.graph;
  const std::unordered_map<std::string, size_t> reads = count_reads(graph);
  auto read_once = [&](const std::string& name) {
    auto it = reads.find(name);
    return it != reads.end() && it->second == 1;
  };
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const std::string& out : graph.nodes[i].outputs) producer[out] = i;
  }
  Constants constants(graph);
  std::vector<bool> removed(graph.nodes.size(), false);
  std::vector<std::pair<std::string, Tensor>> added;
  std::unordered_set<std::string> replaced;  // initializers the folded nodes no longer read
  size_t folded = 0;
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    const ir::Node& bn = graph.nodes[index];
    const ir::Attribute* training = bn.attribute("training_mode");
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() != 5 ||
        (training && training->i) || (bn.outputs.size() > 1 && !bn.outputs[1].empty()) ||
        (bn.outputs.size() > 2 && !bn.outputs[2].empty())) {
      continue;
    }
    auto p = producer.find(bn.inputs[0]);
    if (p == producer.end() || !read_once(bn.inputs[0])) continue;
    ir::Node& conv = graph.nodes[p->second];
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.inputs.size() < 2 || !read_once(conv.inputs[1]))
      continue;
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    Tensor* w = constants.find(conv.inputs[1]);
    Tensor* b = has_bias ? constants.find(conv.inputs[2]) : nullptr;
    const Tensor* params[4];
    bool usable = w && is_folding_float(*w) && w->rank() >= 3 && (!has_bias || (b && read_once(conv.inputs[2])));
    for (int k = 0; k < 4 && usable; ++k) {
      params[k] = constants.find(bn.inputs[1 + k]);
      usable = params[k] && params[k]->dtype() == w->dtype() && params[k]->numel() == w->dim(0);
    }
    if (!usable || (b && (b->dtype() != w->dtype() || b->numel() != w->dim(0)))) continue;

    Tensor folded_w = w->clone();
    Tensor folded_b = b ? b->clone() : Tensor::zeros(w->dtype(), {w->dim(0)});
    const ir::Attribute* epsilon = bn.attribute("epsilon");
    dispatch<float, double>(w->dtype(), "BatchNormalization folding", [&]<typename T>() {
      fold<T>(folded_w, folded_b, *params[0], *params[1], *params[2], *params[3], epsilon ? epsilon->f : 1e-5);
    });
    replaced.insert(conv.inputs.begin() + 1, conv.inputs.end());
    replaced.insert(bn.inputs.begin() + 1, bn.inputs.end());
    const std::string w_name = conv.inputs[1] + "/folded_" + bn.outputs[0];
    const std::string b_name = w_name + "/bias";
    added.emplace_back(w_name, std::move(folded_w));
    added.emplace_back(b_name, std::move(folded_b));
    conv.inputs.resize(3);
    conv.inputs[1] = w_name;
    conv.inputs[2] = b_name;
    conv.outputs[0] = bn.outputs[0];
    removed[index] = true;
    ++folded;
  }
  if (folded == 0) return 0;
  erase_nodes(graph, removed);
  for (auto& named : added) graph.initializers.push_back(std::move(named));
  // The unfolded weights and the normalizations' parameters, which nothing reads any more.
  const std::unordered_map<std::string, size_t> still_read = count_reads(graph);
  std::erase_if(graph.initializers,
                [&](const auto& named) { return replaced.contains(named.first) && !still_read.contains(named.first); });
  return folded;
}

}  // namespace onnxtrain::passes
