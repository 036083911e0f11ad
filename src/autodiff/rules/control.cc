// Gradient rules of the control-flow ops. The gradient of a subgraph is a subgraph: the
// gradient model of the subgraph, built by the same gradient builder over it as a model of its
// own (the values it reads from outside as inputs), which recomputes the forward values it
// needs. Everything emitted is standard ONNX, so the gradient graphs run in onnxruntime too.
//
// If: for the outer-scope values the branches read that need a gradient (w...),
//   w_grad... = If(cond, then: d(then_branch)/dw given dY, else: d(else_branch)/dw given dY)
// The gradient branches read the incoming gradients dY and the w from the enclosing graph. A w
// that a branch does not reach gets zeros there (computed outside the If and read from it).
//
// Scan (opset 9+): the forward Scan is rewritten to emit also, as extra scan outputs, the
// states entering each iteration (those the gradient reads). The backward is a Scan over the
// same sequence in the opposite order,
//   dS0..., dW..., dX... = Scan(dS_final..., zeros(W)..., S_entering..., X..., dY...)
// whose body is the gradient of the forward body: it recomputes the forward body from the
// saved entering state and the iteration's slices of X, carries the state gradients (given
// the gradient of the state leaving an iteration, the one entering it), accumulates the
// gradients of the outer-scope values W the body reads as carried state, and gives each
// iteration's gradients of X as scan outputs, stacked along X's axes and directions.
//
// Loop: the same, in the form Loop has. The forward Loop also emits, as extra scan outputs,
// the carried values entering each iteration; their length is the number of iterations T,
// however the loop ended. The backward is a Loop of T iterations: iteration u is forward
// iteration t = T - 1 - u, whose entering values and scan-output gradients it Gathers at t.
// The iteration number and the condition get no gradient; the carried values the gradient
// reads must keep one shape across iterations (they are stacked).
//
// An absent gradient of a final state is zeros; an absent one of a scan output is not fed.
#include <onnxtrain/error.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

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
      if (f.domain == kOnnxtrainDomain) g.use_function(f);
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

ir::Node make_node(std::string op_type, std::vector<std::string> inputs, std::vector<std::string> outputs,
                   std::vector<ir::Attribute> attributes = {}) {
  ir::Node node;
  node.op_type = std::move(op_type);
  node.inputs = std::move(inputs);
  node.outputs = std::move(outputs);
  node.attributes = std::move(attributes);
  return node;
}

ir::Attribute graph_attr(std::string name, std::shared_ptr<ir::Graph> graph) {
  ir::Attribute a;
  a.name = std::move(name);
  a.type = ir::AttributeType::kGraph;
  a.g = std::move(graph);
  return a;
}

// A subgraph's input or output named `name`, typed like `like` (element type `dtype` where
// `like` does not say).
ir::ValueInfo typed(std::string name, const ir::ValueInfo& like, DType dtype) {
  ir::ValueInfo v;
  v.name = std::move(name);
  v.dtype = like.dtype == DType::kUndefined ? dtype : like.dtype;
  v.shape = like.shape;
  return v;
}

ir::ValueInfo typed(std::string name, const ir::ValueType* like) {
  ir::ValueInfo v;
  v.name = std::move(name);
  if (like) {
    v.dtype = like->dtype;
    v.shape = like->shape;
  }
  return v;
}

// What is known of a loop body's input or output `declared`, which iterates over the outer
// value `outer` (that without its scan axis `axis` where given): the body's declaration,
// completed from the outer value's inferred type. onnxruntime's Scan needs its body's output
// shapes.
ir::ValueInfo known_type(const GradientContext& g, const ir::ValueInfo& declared, const std::string& outer,
                         std::optional<int64_t> axis = std::nullopt) {
  ir::ValueInfo v = declared;
  const ir::ValueType* t = outer.empty() ? nullptr : g.type_of(outer);
  if (t == nullptr) return v;
  if (v.dtype == DType::kUndefined) v.dtype = t->dtype;
  if (v.shape || !t->shape) return v;
  std::vector<ir::Dim> shape = *t->shape;
  if (axis) {
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t at = *axis < 0 ? *axis + rank : *axis;
    if (at < 0 || at >= rank) return v;
    shape.erase(shape.begin() + at);
  }
  v.shape = std::move(shape);
  return v;
}

std::string prefix_of(const GradientContext& g) {
  if (!g.node().name.empty()) return g.node().name + "_grad/";
  for (const std::string& out : g.node().outputs) {
    if (!out.empty()) return out + "_grad/";
  }
  return "loop_grad/";
}

std::shared_ptr<ir::Graph> body_of(const GradientContext& g) {
  const ir::Attribute* body = g.node().attribute("body");
  if (!body || body->type != ir::AttributeType::kGraph || !body->g) g.fail("the body is missing");
  return body->g;
}

// The gradient of a loop body, as nodes to put in the backward loop's body.
struct BodyGradient {
  std::vector<ir::Node> nodes;  // the body's forward nodes, then its gradient's
  std::vector<std::pair<std::string, Tensor>> initializers;
  std::map<std::string, std::string> inputs;  // a body input -> the name `nodes` read it by
  std::map<std::string, std::string> grads;   // a wrt value -> its gradient; absent: not reached
};

// The gradient of `body` w.r.t. `wrt` (body inputs, and outer values it reads) given the
// incoming gradients `seeds` (body output index, value) of its outputs. Every value it
// defines gets a name new in the whole model (ONNX asks single assignment across subgraphs
// too), the body's inputs included: the caller defines those. The seeds and the outer
// values keep their names.
BodyGradient body_gradient(GradientContext& g, const ir::Graph& body, const std::vector<std::string>& wrt,
                           const std::vector<std::pair<size_t, std::string>>& seeds, const std::string& prefix) {
  BodyGradient result;
  std::map<std::string, std::string> renamed;
  for (const ir::ValueInfo& v : body.inputs) renamed[v.name] = result.inputs[v.name] = g.fresh_name(prefix + v.name);

  ir::Model model;
  model.ir_version = g.model().ir_version;
  model.opset_imports = g.model().opset_imports;
  model.functions = g.model().functions;
  model.graph = body;
  std::set<std::string> defined;
  for (const ir::ValueInfo& v : body.inputs) defined.insert(v.name);
  for (const std::string& name : ir::free_values(body)) {
    model.graph.inputs.push_back(typed(name, g.type_of(name)));
    defined.insert(name);
  }
  GradientRequest request;
  for (const std::string& w : wrt) {
    if (defined.contains(w)) request.wrt.push_back(w);
  }
  std::map<std::string, std::string> seed_of;  // the sub-model's seed input -> the caller's
  for (const auto& [index, seed] : seeds) {
    std::string out = body.outputs.at(index).name;
    if (std::find(request.outputs.begin(), request.outputs.end(), out) != request.outputs.end()) {
      // One value given as two outputs: each gets its own seed through an Identity.
      const std::string copy = g.fresh_name(prefix + out);
      model.graph.nodes.push_back(make_node("Identity", {out}, {copy}));
      out = copy;
    }
    request.outputs.push_back(out);
    seed_of[out + "_grad"] = seed;
  }
  if (request.wrt.empty() || request.outputs.empty()) return result;

  ir::Model gradient;
  try {
    gradient = build_gradient_graph(std::move(model), request);
  } catch (const Error& e) {
    throw Error("gradient of " + g.node().describe() + ": in its body, " + e.what(), e.kind());
  }
  // The org.onnxtrain functions it calls are defined in the enclosing model.
  for (const ir::Function& f : gradient.functions) {
    if (f.domain == kOnnxtrainDomain) g.use_function(f);
  }
  for (const auto& [seed, name] : seed_of) renamed[seed] = name;
  for (const ir::Node& node : gradient.graph.nodes) {
    for (const std::string& out : node.outputs) {
      if (!out.empty() && !renamed.contains(out)) renamed[out] = g.fresh_name(prefix + out);
    }
  }
  for (const auto& [name, tensor] : gradient.graph.initializers) renamed[name] = g.fresh_name(prefix + name);
  const auto rename = [&](const std::string& name) {
    auto it = renamed.find(name);
    return it == renamed.end() ? name : it->second;
  };
  for (ir::Node& node : gradient.graph.nodes) {
    if (!node.name.empty()) node.name = g.fresh_name(prefix + node.name);
    for (std::string& in : node.inputs) in = rename(in);
    for (std::string& out : node.outputs) out = rename(out);
    ir::rename_outer_scope_reads(node, rename);
  }
  for (auto& [name, tensor] : gradient.graph.initializers) name = rename(name);
  for (const std::string& w : request.wrt) {
    for (const ir::ValueInfo& v : gradient.graph.outputs) {
      if (v.name == w + "_grad") result.grads[w] = rename(v.name);
    }
  }
  result.nodes = std::move(gradient.graph.nodes);
  result.initializers = std::move(gradient.graph.initializers);
  return result;
}

// A body's outputs must be values it computes, each once: an output that is an input, an
// outer value or an earlier output gets an Identity.
void own_outputs(GradientContext& g, ir::Graph& body, const std::string& prefix) {
  std::set<std::string> computed;
  for (const ir::Node& node : body.nodes) computed.insert(node.outputs.begin(), node.outputs.end());
  std::set<std::string> seen;
  for (ir::ValueInfo& out : body.outputs) {
    if (computed.contains(out.name) && seen.insert(out.name).second) continue;
    const std::string copy = g.fresh_name(prefix + "out");
    body.nodes.push_back(make_node("Identity", {out.name}, {copy}));
    out.name = copy;
    seen.insert(copy);
  }
}

// Keeps the nodes of `body` its outputs need (the gradient model recomputes the whole
// forward body; the backward needs only part of it).
void drop_unneeded(ir::Graph& body) {
  std::set<std::string> needed;
  for (const ir::ValueInfo& out : body.outputs) needed.insert(out.name);
  std::vector<bool> keep(body.nodes.size());
  for (size_t i = body.nodes.size(); i-- > 0;) {
    const ir::Node& node = body.nodes[i];
    keep[i] = std::any_of(node.outputs.begin(), node.outputs.end(),
                          [&](const std::string& out) { return !out.empty() && needed.contains(out); });
    if (!keep[i]) continue;
    needed.insert(node.inputs.begin(), node.inputs.end());
    for (std::string& in : ir::outer_scope_reads(node)) needed.insert(std::move(in));
  }
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < body.nodes.size(); ++i) {
    if (keep[i]) kept.push_back(std::move(body.nodes[i]));
  }
  body.nodes = std::move(kept);
  std::erase_if(body.initializers, [&](const auto& init) { return !needed.contains(init.first); });
}

// Zeros of `dtype` and the shape of `like`, inside a body.
std::string body_zeros(GradientContext& g, ir::Graph& body, const std::string& like, DType dtype,
                       const std::string& prefix) {
  const std::string shape = g.fresh_name(prefix + "shape");
  const std::string zeros = g.fresh_name(prefix + "zeros");
  body.nodes.push_back(make_node("Shape", {like}, {shape}));
  body.nodes.push_back(make_node("ConstantOfShape", {shape}, {zeros}, {attr("value", Tensor::zeros(dtype, {1}))}));
  return zeros;
}

// The element type of a loop's state `outer` (the node's input), which its body declares as
// `declared`; "" when it carries no gradient.
DType state_dtype(const GradientContext& g, const std::string& outer, const ir::ValueInfo& declared) {
  const DType dtype = declared.dtype == DType::kUndefined ? g.dtype(outer) : declared.dtype;
  if (dtype == DType::kUndefined) {
    g.fail("the element type of the state '" + declared.name + "' is unknown; declare it in the body's inputs");
  }
  return dtype;
}

// The outer-scope values the node's body reads that need a gradient.
std::vector<std::string> outer_wrt(const GradientContext& g) {
  std::vector<std::string> wrt;
  for (const std::string& name : ir::outer_scope_reads(g.node())) {
    if (g.needs_grad_of(name)) wrt.push_back(name);
  }
  return wrt;
}

// Where the backward body has the accumulators of the outer values' gradients: for each w the
// body reaches, acc_out = acc_in + (its gradient in this iteration).
struct Accumulators {
  std::vector<std::string> values;  // the outer values w
  std::vector<std::string> in, out;
};

Accumulators accumulate(GradientContext& g, ir::Graph& bwd, const BodyGradient& sub,
                        const std::vector<std::string>& outer, const std::string& prefix) {
  Accumulators acc;
  for (const std::string& w : outer) {
    auto it = sub.grads.find(w);
    if (it == sub.grads.end()) continue;
    acc.values.push_back(w);
    acc.in.push_back(g.fresh_name(prefix + w + "_acc"));
    acc.out.push_back(g.fresh_name(prefix + w + "_acc"));
    bwd.nodes.push_back(make_node("Add", {acc.in.back(), it->second}, {acc.out.back()}));
    bwd.outputs.push_back(typed(acc.out.back(), g.type_of(w)));
  }
  return acc;
}

// The body's nodes that compute its outputs, and the values they read from outside.
std::set<std::string> finish_body(GradientContext& g, ir::Graph& bwd, const std::string& prefix) {
  own_outputs(g, bwd, prefix);
  drop_unneeded(bwd);
  const std::vector<std::string> reads = ir::free_values(bwd);
  return {reads.begin(), reads.end()};
}

// The forward body with, as extra outputs, the values of `inputs` (its input indices)
// entering each iteration; `types[i]` is what is known of input i.
std::shared_ptr<ir::Graph> saving_body(GradientContext& g, const ir::Graph& body, const std::vector<size_t>& inputs,
                                       const std::vector<ir::ValueInfo>& types, const std::string& prefix) {
  auto saving = std::make_shared<ir::Graph>(body);
  for (size_t i : inputs) {
    const ir::ValueInfo& v = body.inputs[i];
    const std::string name = g.fresh_name(prefix + v.name + "_entering");
    saving->nodes.push_back(make_node("Identity", {v.name}, {name}));
    saving->outputs.push_back(typed(name, types[i], v.dtype));
  }
  return saving;
}

void scan_grad(GradientContext& g) {
  if (g.opset() < 9) {
    g.fail("Scan-8 (a batch axis and sequence_lens) has no gradient rule; convert the model to opset 9 or later");
  }
  const std::shared_ptr<ir::Graph> body = body_of(g);
  const auto scans = static_cast<size_t>(g.attr_int("num_scan_inputs", 0));
  if (scans < 1 || scans > g.input_count() || body->inputs.size() != g.input_count() ||
      body->outputs.size() < g.input_count() - scans) {
    g.fail("the body's inputs and outputs do not match the node's");
  }
  const size_t states = g.input_count() - scans;
  const size_t outs = body->outputs.size() - states;
  const std::vector<int64_t> in_axes = g.attr_ints("scan_input_axes", std::vector<int64_t>(scans, 0));
  const std::vector<int64_t> in_dirs = g.attr_ints("scan_input_directions", std::vector<int64_t>(scans, 0));
  const std::vector<int64_t> out_axes = g.attr_ints("scan_output_axes", std::vector<int64_t>(outs, 0));
  const std::vector<int64_t> out_dirs = g.attr_ints("scan_output_directions", std::vector<int64_t>(outs, 0));
  if (in_axes.size() != scans || in_dirs.size() != scans || out_axes.size() != outs || out_dirs.size() != outs) {
    g.fail("a scan_input_* or scan_output_* attribute does not have one entry per scan input or output");
  }
  const std::string prefix = prefix_of(g);
  std::vector<ir::ValueInfo> state_types, x_types, y_types;
  for (size_t k = 0; k < states; ++k) state_types.push_back(known_type(g, body->inputs[k], g.input(k)));
  for (size_t j = 0; j < scans; ++j) {
    x_types.push_back(known_type(g, body->inputs[states + j], g.input(states + j), in_axes[j]));
  }
  for (size_t k = 0; k < outs; ++k) {
    y_types.push_back(known_type(g, body->outputs[states + k], g.output(states + k), out_axes[k]));
  }

  // The floating-point states carry gradients back through the iterations.
  std::vector<size_t> carried;
  std::vector<DType> dtypes(states);
  for (size_t k = 0; k < states; ++k) {
    dtypes[k] = state_dtype(g, g.input(k), body->inputs[k]);
    if (is_floating(dtypes[k])) carried.push_back(k);
  }
  std::vector<std::string> dfinal(states), dy(outs);
  bool any = false;
  for (size_t k : carried) any = !(dfinal[k] = g.grad_of_output(k)).empty() || any;
  for (size_t k = 0; k < outs; ++k) any = !(dy[k] = g.grad_of_output(states + k)).empty() || any;
  if (!any) return;

  const std::vector<std::string> outer = outer_wrt(g);
  bool wanted = !outer.empty();
  for (size_t i = 0; i < g.input_count(); ++i) wanted = wanted || g.needs_grad(i);
  if (!wanted) return;
  std::vector<std::string> wrt = outer;
  std::vector<std::pair<size_t, std::string>> seeds;
  std::vector<std::string> dstate(states), dy_seed(outs);
  for (size_t k : carried) {
    wrt.push_back(body->inputs[k].name);
    dstate[k] = g.fresh_name(prefix + body->outputs[k].name + "_grad");
    seeds.emplace_back(k, dstate[k]);
  }
  for (size_t j = 0; j < scans; ++j) {
    if (g.needs_grad(states + j)) wrt.push_back(body->inputs[states + j].name);
  }
  for (size_t k = 0; k < outs; ++k) {
    if (dy[k].empty()) continue;
    dy_seed[k] = g.fresh_name(prefix + body->outputs[states + k].name + "_grad");
    seeds.emplace_back(states + k, dy_seed[k]);
  }
  BodyGradient sub = body_gradient(g, *body, wrt, seeds, prefix);

  // The backward body: carried state gradients, then accumulators; scan outputs dX.
  auto bwd = std::make_shared<ir::Graph>();
  bwd->name = body->name + "_grad";
  bwd->nodes = std::move(sub.nodes);
  bwd->initializers = std::move(sub.initializers);
  for (size_t k : carried) {
    const std::string& in = body->inputs[k].name;
    auto it = sub.grads.find(in);
    const std::string grad =
        it != sub.grads.end() ? it->second : body_zeros(g, *bwd, sub.inputs.at(in), dtypes[k], prefix);
    bwd->outputs.push_back(typed(grad, state_types[k], dtypes[k]));
  }
  const Accumulators acc = accumulate(g, *bwd, sub, outer, prefix);
  std::vector<size_t> dxs;
  for (size_t j = 0; j < scans; ++j) {
    const ir::ValueInfo& x = body->inputs[states + j];
    auto it = sub.grads.find(x.name);
    if (!g.needs_grad(states + j) || it == sub.grads.end()) continue;
    dxs.push_back(j);
    bwd->outputs.push_back(typed(it->second, x_types[j], x.dtype));
  }
  if (bwd->outputs.empty()) return;
  const std::set<std::string> reads = finish_body(g, *bwd, prefix);

  for (size_t k : carried) bwd->inputs.push_back(typed(dstate[k], state_types[k], dtypes[k]));
  for (size_t i = 0; i < acc.values.size(); ++i) bwd->inputs.push_back(typed(acc.in[i], g.type_of(acc.values[i])));
  // Scanned: the saved entering states, X and dY, where the backward body reads them (at
  // least one, which gives the length).
  std::vector<size_t> saved, xs, dys;
  for (size_t k = 0; k < states; ++k) {
    if (reads.contains(sub.inputs.at(body->inputs[k].name))) saved.push_back(k);
  }
  for (size_t j = 0; j < scans; ++j) {
    if (reads.contains(sub.inputs.at(body->inputs[states + j].name))) xs.push_back(j);
  }
  for (size_t k = 0; k < outs; ++k) {
    if (!dy_seed[k].empty() && reads.contains(dy_seed[k])) dys.push_back(k);
  }
  if (saved.empty() && xs.empty() && dys.empty()) xs.push_back(0);
  for (size_t k : saved) bwd->inputs.push_back(typed(sub.inputs.at(body->inputs[k].name), state_types[k], dtypes[k]));
  for (size_t j : xs) {
    const ir::ValueInfo& x = body->inputs[states + j];
    bwd->inputs.push_back(typed(sub.inputs.at(x.name), x_types[j], x.dtype));
  }
  for (size_t k : dys) bwd->inputs.push_back(typed(dy_seed[k], y_types[k], g.dtype(dy[k])));

  std::vector<std::string> stacks;
  if (!saved.empty()) {
    std::vector<ir::Attribute> attributes{graph_attr("body", saving_body(g, *body, saved, state_types, prefix))};
    for (const char* name : {"scan_output_axes", "scan_output_directions"}) {
      if (!g.has_attribute(name)) continue;
      std::vector<int64_t> values = g.attr_ints(name);
      values.resize(outs + saved.size(), 0);
      attributes.push_back(attr(name, values));
    }
    stacks = g.extend_node(std::move(attributes), states + outs, saved.size(), prefix + "entering_state");
  }

  std::vector<std::string> inputs;
  for (size_t k : carried)
    inputs.push_back(!dfinal[k].empty() ? dfinal[k] : g.zeros(g.shape_of(g.input(k)), g.input(k)));
  for (const std::string& w : acc.values) inputs.push_back(g.zeros(g.shape_of(w), w));
  std::vector<int64_t> axes, directions, dx_axes, dx_directions;
  for (size_t i = 0; i < saved.size(); ++i) {
    inputs.push_back(stacks[i]);
    axes.push_back(0);
    directions.push_back(1);
  }
  for (size_t j : xs) {
    inputs.push_back(g.input(states + j));
    axes.push_back(in_axes[j]);
    directions.push_back(1 - in_dirs[j]);
  }
  for (size_t k : dys) {
    inputs.push_back(dy[k]);
    axes.push_back(out_axes[k]);
    directions.push_back(1 - out_dirs[k]);
  }
  for (size_t j : dxs) {
    dx_axes.push_back(in_axes[j]);
    dx_directions.push_back(1 - in_dirs[j]);
  }
  const size_t scanned = saved.size() + xs.size() + dys.size();
  std::vector<ir::Attribute> attributes{graph_attr("body", bwd), attr("num_scan_inputs", static_cast<int64_t>(scanned)),
                                        attr("scan_input_axes", axes), attr("scan_input_directions", directions)};
  if (!dxs.empty()) {
    attributes.push_back(attr("scan_output_axes", dx_axes));
    attributes.push_back(attr("scan_output_directions", dx_directions));
  }
  const std::vector<std::string> grads =
      g.emit_n("Scan", std::move(inputs), std::move(attributes), carried.size() + acc.values.size() + dxs.size());
  size_t at = 0;
  for (size_t k : carried) g.set_input_grad(k, grads[at++]);
  for (const std::string& w : acc.values) g.add_grad(w, grads[at++]);
  for (size_t j : dxs) g.set_input_grad(states + j, grads[at++]);
}

// `value` shaped as the body input `declared` ([1] where it declares one dimension).
ir::Node as_declared(GradientContext& g, const std::string& value, const ir::ValueInfo& declared,
                     const std::string& name) {
  if (declared.shape && declared.shape->size() == 1) return make_node("Reshape", {value, g.ints({1})}, {name});
  return make_node("Identity", {value}, {name});
}

void loop_grad(GradientContext& g) {
  const std::shared_ptr<ir::Graph> body = body_of(g);
  if (g.input_count() < 2 || body->inputs.size() != g.input_count() || body->outputs.size() + 1 < g.input_count()) {
    g.fail("the body's inputs and outputs do not match the node's");
  }
  const size_t values = g.input_count() - 2;
  const size_t outs = body->outputs.size() - 1 - values;
  const std::string prefix = prefix_of(g);

  std::vector<size_t> carried;
  std::vector<DType> dtypes(values);
  for (size_t k = 0; k < values; ++k) {
    dtypes[k] = state_dtype(g, g.input(2 + k), body->inputs[2 + k]);
    if (is_floating(dtypes[k])) carried.push_back(k);
  }
  std::vector<std::string> dfinal(values), dy(outs);
  bool any = false;
  for (size_t k : carried) any = !(dfinal[k] = g.grad_of_output(k)).empty() || any;
  for (size_t k = 0; k < outs; ++k) any = !(dy[k] = g.grad_of_output(values + k)).empty() || any;
  if (!any) return;

  const std::vector<std::string> outer = outer_wrt(g);
  bool wanted = !outer.empty();
  for (size_t k : carried) wanted = wanted || g.needs_grad(2 + k);
  if (!wanted) return;
  std::vector<std::string> wrt = outer;
  std::vector<std::pair<size_t, std::string>> seeds;
  std::vector<std::string> dvalue(values), dy_seed(outs);
  for (size_t k : carried) {
    wrt.push_back(body->inputs[2 + k].name);
    dvalue[k] = g.fresh_name(prefix + body->outputs[1 + k].name + "_grad");
    seeds.emplace_back(1 + k, dvalue[k]);
  }
  for (size_t k = 0; k < outs; ++k) {
    if (dy[k].empty()) continue;
    dy_seed[k] = g.fresh_name(prefix + body->outputs[1 + values + k].name + "_grad");
    seeds.emplace_back(1 + values + k, dy_seed[k]);
  }
  BodyGradient sub = body_gradient(g, *body, wrt, seeds, prefix);

  // The backward body: (u, cond, carried value gradients, accumulators) ->
  // (cond, the carried values' gradients entering forward iteration T - 1 - u, accumulators).
  auto bwd = std::make_shared<ir::Graph>();
  bwd->name = body->name + "_grad";
  bwd->nodes = std::move(sub.nodes);
  bwd->initializers = std::move(sub.initializers);
  const std::string u = g.fresh_name(prefix + "u");
  const std::string cond = g.fresh_name(prefix + "cond");
  const std::string cond_out = g.fresh_name(prefix + "cond_out");
  bwd->nodes.push_back(make_node("Identity", {cond}, {cond_out}));
  ir::ValueInfo cond_info;
  cond_info.name = cond_out;
  cond_info.dtype = DType::kBool;
  cond_info.shape = std::vector<ir::Dim>{};
  bwd->outputs.push_back(cond_info);
  for (size_t k : carried) {
    const std::string& in = body->inputs[2 + k].name;
    auto it = sub.grads.find(in);
    const std::string grad =
        it != sub.grads.end() ? it->second : body_zeros(g, *bwd, sub.inputs.at(in), dtypes[k], prefix);
    bwd->outputs.push_back(typed(grad, body->inputs[2 + k], dtypes[k]));
  }
  const Accumulators acc = accumulate(g, *bwd, sub, outer, prefix);
  const std::set<std::string> reads = finish_body(g, *bwd, prefix);

  ir::ValueInfo u_info;
  u_info.name = u;
  u_info.dtype = DType::kInt64;
  u_info.shape = std::vector<ir::Dim>{};
  ir::ValueInfo cond_in = cond_info;
  cond_in.name = cond;
  bwd->inputs = {u_info, cond_in};
  for (size_t k : carried) bwd->inputs.push_back(typed(dvalue[k], body->inputs[2 + k], dtypes[k]));
  for (size_t i = 0; i < acc.values.size(); ++i) bwd->inputs.push_back(typed(acc.in[i], g.type_of(acc.values[i])));

  // The forward saves the entering values the backward body reads (the iteration number
  // when it reads none: the saved stack's length is the number of iterations).
  std::vector<size_t> saved;
  for (size_t k = 0; k < values; ++k) {
    if (reads.contains(sub.inputs.at(body->inputs[2 + k].name))) saved.push_back(2 + k);
  }
  if (saved.empty()) saved.push_back(0);
  const std::vector<std::string> stacks =
      g.extend_node({graph_attr("body", saving_body(g, *body, saved, body->inputs, prefix))}, values + outs,
                    saved.size(), prefix + "entering_value");
  const std::string trips = g.emit("Gather", {g.shape_of(stacks[0]), g.int_scalar(0)});
  const std::string last = g.emit("Sub", {trips, g.int_scalar(1)});

  // Forward iteration t = T - 1 - u: its number, condition (true, or it would not have
  // run), entering values and scan outputs' gradients.
  std::vector<ir::Node> prologue;
  const std::string t = g.fresh_name(prefix + "t");
  prologue.push_back(make_node("Sub", {last, u}, {t}));
  const std::string& iter = sub.inputs.at(body->inputs[0].name);
  if (reads.contains(iter)) prologue.push_back(as_declared(g, t, body->inputs[0], iter));
  const std::string& cond_read = sub.inputs.at(body->inputs[1].name);
  if (reads.contains(cond_read)) prologue.push_back(as_declared(g, cond, body->inputs[1], cond_read));
  for (size_t i = 0; i < saved.size(); ++i) {
    if (saved[i] == 0) continue;
    prologue.push_back(make_node("Gather", {stacks[i], t}, {sub.inputs.at(body->inputs[saved[i]].name)}));
  }
  for (size_t k = 0; k < outs; ++k) {
    if (!dy_seed[k].empty() && reads.contains(dy_seed[k])) {
      prologue.push_back(make_node("Gather", {dy[k], t}, {dy_seed[k]}));
    }
  }
  bwd->nodes.insert(bwd->nodes.begin(), std::make_move_iterator(prologue.begin()),
                    std::make_move_iterator(prologue.end()));

  std::vector<std::string> inputs{trips, g.emit("Constant", {}, {attr("value", Tensor::scalar<bool>(true))})};
  for (size_t k : carried) {
    inputs.push_back(!dfinal[k].empty() ? dfinal[k]
                                        : g.zeros(g.shape_of(g.require_output(k, "final")), g.input(2 + k)));
  }
  for (const std::string& w : acc.values) inputs.push_back(g.zeros(g.shape_of(w), w));
  const std::vector<std::string> grads =
      g.emit_n("Loop", std::move(inputs), {graph_attr("body", bwd)}, carried.size() + acc.values.size());
  size_t at = 0;
  for (size_t k : carried) g.set_input_grad(2 + k, grads[at++]);
  for (const std::string& w : acc.values) g.add_grad(w, grads[at++]);
}

const RuleRegistration kControlRules{{{"If", if_grad}, {"Scan", scan_grad}, {"Loop", loop_grad}}};

}  // namespace
}  // namespace onnxtrain::autodiff
