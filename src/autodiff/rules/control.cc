// Gradient rule of If: the gradient of a branch is a branch. For the outer-scope values the
// branches read that need a gradient (w...), the rule emits
//   w_grad... = If(cond, then: d(then_branch)/dw given dY, else: d(else_branch)/dw given dY)
// Each gradient branch is the gradient model of its forward branch (built by the same
// gradient builder over the branch as a model of its own, the values it reads from outside
// as inputs); it recomputes the branch's forward values it needs, and reads the incoming
// gradients dY and the w from the enclosing graph. A w that a branch does not reach gets
// zeros there (computed outside the If and read from it). Loop and Scan have no rule.
#include <algorithm>
#include <map>

#include "autodiff/gradient_builder.h"
#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// The gradient of `branch` w.r.t. `wrt` (the outer values), given the incoming gradients
// `dys` of its outputs ("" where none), as a graph with no inputs whose outputs are the
// gradients in `wrt`'s order; `zeros[k]` names the value to give where the branch does not
// reach wrt[k].
std::shared_ptr<ir::Graph> branch_gradient(GradientContext& g, const ir::Graph& branch,
                                           const std::vector<std::string>& wrt, const std::vector<std::string>& dys,
                                           const std::vector<std::string>& zeros) {
  ir::Model model;
  model.ir_version = g.model().ir_version;
  model.opset_imports = g.model().opset_imports;
  model.functions = g.model().functions;
  model.graph = branch;
  const std::vector<std::string> outer = ir::free_values(branch);
  for (const std::string& name : outer) {
    ir::ValueInfo input;
    input.name = name;
    if (const ir::ValueType* t = g.type_of(name)) {
      input.dtype = t->dtype;
      input.shape = t->shape;
    }
    model.graph.inputs.push_back(std::move(input));
  }
  GradientRequest request;
  for (const std::string& w : wrt) {
    if (std::find(outer.begin(), outer.end(), w) != outer.end()) request.wrt.push_back(w);
  }
  std::vector<std::pair<std::string, std::string>> seeds;  // the sub-model's seed input, dY
  for (size_t i = 0; i < branch.outputs.size() && i < dys.size(); ++i) {
    if (dys[i].empty()) continue;
    request.outputs.push_back(branch.outputs[i].name);
    seeds.emplace_back(branch.outputs[i].name + "_grad", dys[i]);
  }
  auto result = std::make_shared<ir::Graph>();
  std::vector<ir::ValueInfo> grads;
  if (!request.wrt.empty() && !request.outputs.empty()) {
    ir::Model gradient = build_gradient_graph(std::move(model), request);
    // The org.onnxtrain functions it calls are defined in the enclosing model.
    for (const ir::Function& f : gradient.functions) {
      if (f.domain == kOnnxtrainDomain) g.use_function(f.name);
    }
    *result = std::move(gradient.graph);
    // Its seeds are the incoming gradients of the enclosing graph; its inputs are outer values.
    for (ir::Node& node : result->nodes) {
      for (std::string& in : node.inputs) {
        for (const auto& [seed, dy] : seeds) {
          if (in == seed) in = dy;
        }
      }
    }
    for (const ir::ValueInfo& v : result->outputs) grads.push_back(v);
  }
  result->name = branch.name + "_grad";
  result->inputs.clear();
  result->outputs.clear();
  for (size_t k = 0; k < wrt.size(); ++k) {
    ir::ValueInfo out;
    out.name = zeros[k];
    for (const ir::ValueInfo& v : grads) {
      if (v.name == wrt[k] + "_grad") out = v;
    }
    for (const auto& [seed, dy] : seeds) {
      if (out.name == seed) out.name = dy;  // the gradient is an incoming one itself
    }
    result->outputs.push_back(std::move(out));
  }
  // Names unique in the whole model (ONNX asks single assignment across subgraphs too): the
  // branch's values are renamed, and an output read from outside goes through an Identity.
  std::map<std::string, std::string> renamed;
  const std::string prefix = g.node().name.empty() ? g.output(0) + "_grad/" : g.node().name + "_grad/";
  for (const ir::Node& node : result->nodes) {
    for (const std::string& out : node.outputs) {
      if (!out.empty()) renamed.emplace(out, g.fresh_name(prefix + out));
    }
  }
  const auto rename = [&](const std::string& name) {
    auto it = renamed.find(name);
    return it == renamed.end() ? name : it->second;
  };
  for (ir::Node& node : result->nodes) {
    for (std::string& in : node.inputs) in = rename(in);
    for (std::string& out : node.outputs) out = rename(out);
    ir::rename_outer_scope_reads(node, rename);
  }
  for (ir::ValueInfo& out : result->outputs) {
    if (renamed.contains(out.name)) {
      out.name = renamed[out.name];
      continue;
    }
    ir::Node identity;
    identity.op_type = "Identity";
    identity.inputs = {out.name};
    out.name = g.fresh_name(prefix + out.name);
    identity.outputs = {out.name};
    result->nodes.push_back(std::move(identity));
  }
  return result;
}

void if_grad(GradientContext& g) {
  std::vector<std::string> wrt;
  for (const std::string& name : ir::outer_scope_reads(g.node())) {
    if (g.needs_grad_of(name)) wrt.push_back(name);
  }
  if (wrt.empty()) return;
  std::vector<std::string> dys;
  bool any = false;
  for (size_t i = 0; i < g.output_count(); ++i) {
    dys.push_back(g.has_output(i) ? g.grad_of_output(i) : "");
    any = any || !dys.back().empty();
  }
  if (!any) return;
  std::vector<std::string> zeros;
  for (const std::string& w : wrt) zeros.push_back(g.zeros(g.shape_of(w), w));
  const ir::Attribute* then_branch = g.node().attribute("then_branch");
  const ir::Attribute* else_branch = g.node().attribute("else_branch");
  if (!then_branch || !then_branch->g || !else_branch || !else_branch->g) g.fail("a branch is missing");
  ir::Attribute then_grad, else_grad;
  then_grad.name = "then_branch";
  then_grad.type = ir::AttributeType::kGraph;
  then_grad.g = branch_gradient(g, *then_branch->g, wrt, dys, zeros);
  else_grad.name = "else_branch";
  else_grad.type = ir::AttributeType::kGraph;
  else_grad.g = branch_gradient(g, *else_branch->g, wrt, dys, zeros);
  const std::vector<std::string> grads = g.emit_n("If", {g.input(0)}, {then_grad, else_grad}, wrt.size());
  for (size_t k = 0; k < wrt.size(); ++k) g.add_grad(wrt[k], grads[k]);
}

const RuleRegistration kControlRules{{{"If", if_grad}}};

}  // namespace
}  // namespace onnxtrain::autodiff
