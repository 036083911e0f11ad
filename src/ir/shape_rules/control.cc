// The shapes of If, Loop and Scan (src/ops/cpu/control_flow.cc): their bodies are inferred
// with what the node knows of the body's inputs and what the inference around it knows of
// the values the body reads from outside. Where iterations or branches may differ, the dimensions they may
// change are unknown.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

const Graph* graph_attribute(const ShapeContext& c, std::string_view name) {
  const Attribute* a = c.node().attribute(name);
  return a && a->type == AttributeType::kGraph ? a->g.get() : nullptr;
}

// The types of `body`'s outputs, given what is known of its inputs (nullptr: what it declares).
std::vector<ValueType> body_outputs(const ShapeContext& c, const Graph& body,
                                    const std::vector<std::optional<ValueType>>& inputs) {
  std::vector<ValueType> declared;
  for (const ValueInfo& v : body.outputs) declared.push_back({v.dtype, v.shape});
  Graph g = body;
  for (size_t i = 0; i < g.inputs.size() && i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    if (g.inputs[i].dtype == DType::kUndefined) g.inputs[i].dtype = inputs[i]->dtype;
    if (!g.inputs[i].shape) g.inputs[i].shape = inputs[i]->shape;
  }
  for (const std::string& name : free_values(body)) {
    ValueInfo outer;
    outer.name = name;
    if (const ValueType* t = c.scope_value(name)) {
      outer.dtype = t->dtype;
      outer.shape = t->shape;
    }
    g.inputs.push_back(std::move(outer));
  }
  try {
    ShapeInference inference(g, c.opset());
    inference.infer_graph(g);
    std::vector<ValueType> inferred;
    for (const ValueInfo& v : g.outputs) {
      const ValueType* t = inference.find(v.name);
      inferred.push_back(t ? *t : ValueType{v.dtype, v.shape});
    }
    return inferred;
  } catch (const Error&) {
    return declared;  // a malformed body: the kernel reports it
  }
}

// What holds for both of two values: the element type they agree on, and their dimensions
// where equal.
ValueType either(const ValueType& a, const ValueType& b) {
  ValueType t;
  t.dtype = a.dtype == b.dtype ? a.dtype : (a.dtype == DType::kUndefined ? b.dtype : a.dtype);
  if (!a.shape || !b.shape || a.shape->size() != b.shape->size()) return t;
  SymbolicShape shape(a.shape->size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (dims_equal((*a.shape)[i], (*b.shape)[i])) shape[i] = (*a.shape)[i];
  }
  t.shape = std::move(shape);
  return t;
}

std::optional<ValueType> input_type(const ShapeContext& c, size_t i) {
  return c.input(i) ? std::optional(*c.input(i)) : std::nullopt;
}

void if_rule(ShapeContext& c) {
  const Graph* then_branch = graph_attribute(c, "then_branch");
  const Graph* else_branch = graph_attribute(c, "else_branch");
  if (!then_branch || !else_branch) return;
  const std::vector<ValueType> a = body_outputs(c, *then_branch, {});
  const std::vector<ValueType> b = body_outputs(c, *else_branch, {});
  for (size_t i = 0; i < c.output_count() && i < a.size() && i < b.size(); ++i) {
    const ValueType t = either(a[i], b[i]);
    c.set(i, t.dtype, t.shape);
  }
}

// A scan output: the per-iteration `part` with an axis of `length` inserted at `axis`.
void set_scanned(ShapeContext& c, size_t output, const ValueType& part, int64_t axis, const Dim& length) {
  if (!part.shape) return c.set(output, part.dtype);
  const auto rank = static_cast<int64_t>(part.shape->size()) + 1;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return c.set(output, part.dtype);
  SymbolicShape shape = *part.shape;
  shape.insert(shape.begin() + axis, length);
  c.set(output, part.dtype, std::move(shape));
}

void loop_rule(ShapeContext& c) {
  const Graph* body = graph_attribute(c, "body");
  if (!body || c.input_count() < 2) return;
  const size_t carried = c.input_count() - 2;
  std::vector<std::optional<ValueType>> inputs(2 + carried);
  for (size_t i = 0; i < carried; ++i) inputs[2 + i] = input_type(c, 2 + i);
  const std::vector<ValueType> out = body_outputs(c, *body, inputs);
  if (out.size() != 1 + c.output_count()) return;
  for (size_t k = 0; k < carried && k < c.output_count(); ++k) {
    // Zero iterations give the initial value; others what the body gives.
    c.set(k, inputs[2 + k] ? either(*inputs[2 + k], out[1 + k]).dtype : out[1 + k].dtype,
          inputs[2 + k] ? either(*inputs[2 + k], out[1 + k]).shape : std::nullopt);
  }
  for (size_t k = carried; k < c.output_count(); ++k) set_scanned(c, k, out[1 + k], 0, Dim{});
}

// Scan-8: sequence_lens first and a batch axis on every input and output; the states keep
// their shapes, the scan outputs' are left unknown.
void scan8_rule(ShapeContext& c, const Graph& body) {
  const std::optional<int64_t> m = c.int_attribute("num_scan_inputs");
  if (!m || c.input_count() < 1 + static_cast<size_t>(*m)) return;
  const size_t states = c.input_count() - 1 - static_cast<size_t>(*m);
  for (size_t k = 0; k < c.output_count(); ++k) {
    if (k < states) {
      c.set_like(k, 1 + k);
    } else if (k < body.outputs.size()) {
      c.set(k, body.outputs[k].dtype);
    }
  }
}

void scan_rule(ShapeContext& c) {
  const Graph* body = graph_attribute(c, "body");
  if (body && c.opset() == 8) return scan8_rule(c, *body);
  const std::optional<int64_t> m = c.int_attribute("num_scan_inputs");
  if (!body || !m || *m < 1 || static_cast<size_t>(*m) > c.input_count()) return;
  const auto scans = static_cast<size_t>(*m);
  const size_t states = c.input_count() - scans;
  if (c.output_count() < states) return;
  const std::vector<int64_t> in_axes = c.ints_attribute("scan_input_axes").value_or(std::vector<int64_t>(scans, 0));
  const size_t outs = c.output_count() - states;
  const std::vector<int64_t> out_axes = c.ints_attribute("scan_output_axes").value_or(std::vector<int64_t>(outs, 0));
  if (in_axes.size() != scans || out_axes.size() != outs) return;
  std::vector<std::optional<ValueType>> inputs(states + scans);
  for (size_t i = 0; i < states; ++i) inputs[i] = input_type(c, i);
  Dim length;
  for (size_t j = 0; j < scans; ++j) {
    const SymbolicShape* s = c.shape(states + j);
    if (!s) {
      inputs[states + j] = ValueType{c.dtype(states + j), std::nullopt};
      continue;
    }
    const std::optional<size_t> axis = axis_index(in_axes[j], s->size());
    if (!axis) return;
    if (!length.value && length.param.empty()) length = (*s)[*axis];
    SymbolicShape slice = *s;
    slice.erase(slice.begin() + static_cast<std::ptrdiff_t>(*axis));
    inputs[states + j] = ValueType{c.dtype(states + j), std::move(slice)};
  }
  const std::vector<ValueType> out = body_outputs(c, *body, inputs);
  if (out.size() != c.output_count()) return;
  for (size_t k = 0; k < states; ++k) {
    const ValueType t = inputs[k] ? either(*inputs[k], out[k]) : ValueType{out[k].dtype, std::nullopt};
    c.set(k, t.dtype, t.shape);
  }
  for (size_t k = 0; k < outs; ++k) set_scanned(c, states + k, out[states + k], out_axes[k], length);
}

const ShapeRuleRegistration kControlShapes{{{"If", if_rule}, {"Loop", loop_rule}, {"Scan", scan_rule}}};

}  // namespace
}  // namespace onnxtrain::ir
