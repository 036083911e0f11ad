#include "autodiff/recurrent_body.h"

#include <onnxtrain/error.h>
#include <onnxtrain/gradient.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "autodiff/gradient_builder.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {
namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Activation {
  std::string name;  // lower case
  float alpha = 0, beta = 0;
};

// The forward node's attributes, with the spec's (and onnxruntime's) defaults.
struct Config {
  Cell cell = Cell::kLstm;
  int64_t hidden = 0;
  int64_t directions = 1;
  bool reverse = false;
  std::vector<Activation> activations;  // per direction: f, g[, h]
  std::optional<float> clip;
  bool input_forget = false;
  bool linear_before_reset = false;
  int64_t layout = 0;
  DType dtype = DType::kFloat32;

  int64_t gates() const { return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4; }
  size_t per_direction() const { return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 2 : 3; }
  const Activation& activation(int64_t direction, size_t k) const {
    return activations[static_cast<size_t>(direction) * per_direction() + k];
  }
};

struct ActivationDefaults {
  const char* name;
  bool uses_alpha, uses_beta;
  float alpha, beta;
};

// As src/ops/cpu/recurrent.cc reads them (onnxruntime's defaults).
constexpr ActivationDefaults kActivations[] = {
    {"relu", false, false, 0, 0},         {"tanh", false, false, 0, 0},
    {"sigmoid", false, false, 0, 0},      {"affine", true, true, 0, 0},
    {"leakyrelu", true, false, 0.01f, 0}, {"thresholdedrelu", true, false, 0, 0},
    {"scaledtanh", true, true, 0, 0},     {"hardsigmoid", true, true, 0.2f, 0.5f},
    {"elu", true, false, 1.0f, 0},        {"softsign", false, false, 0, 0},
    {"softplus", false, false, 0, 0},
};

Config read_config(const ir::Node& node, Cell cell, DType dtype) {
  auto fail = [&](const std::string& message) {
    throw Error("gradient of " + node.describe() + ": " + message, ErrorKind::kInvalidModel);
  };
  Config c;
  c.cell = cell;
  c.dtype = dtype;
  std::vector<std::string> names;
  std::vector<float> alphas, betas;
  for (const ir::Attribute& a : node.attributes) {
    if (a.name == "hidden_size") c.hidden = a.i;
    if (a.name == "direction") {
      if (a.s == "bidirectional") {
        c.directions = 2;
      } else if (a.s == "reverse") {
        c.reverse = true;
      } else if (a.s != "forward") {
        fail("direction is '" + a.s + "', expected forward, reverse or bidirectional");
      }
    }
    if (a.name == "activations") names = a.strings;
    if (a.name == "activation_alpha") alphas = a.floats;
    if (a.name == "activation_beta") betas = a.floats;
    if (a.name == "clip") c.clip = a.f;
    if (a.name == "input_forget") c.input_forget = a.i != 0;
    if (a.name == "linear_before_reset") c.linear_before_reset = a.i != 0;
    if (a.name == "layout") c.layout = a.i;
  }
  if (c.hidden <= 0) fail("hidden_size is missing or not positive");
  if (c.layout != 0 && c.layout != 1) fail("layout is " + std::to_string(c.layout) + ", expected 0 or 1");
  if (cell != Cell::kLstm) c.input_forget = false;
  if (cell != Cell::kGru) c.linear_before_reset = false;
  if (names.empty()) {
    if (cell == Cell::kRnn) names = {"Tanh"};
    if (cell == Cell::kGru) names = {"Sigmoid", "Tanh"};
    if (cell == Cell::kLstm) names = {"Sigmoid", "Tanh", "Tanh"};
  }
  if (names.size() == c.per_direction() && c.directions == 2) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  if (names.size() != c.per_direction() * static_cast<size_t>(c.directions)) {
    fail("activations has " + std::to_string(names.size()) + " names, expected " +
         std::to_string(c.per_direction() * static_cast<size_t>(c.directions)));
  }
  size_t next_alpha = 0, next_beta = 0;
  for (const std::string& name : names) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const ActivationDefaults* found = nullptr;
    for (const ActivationDefaults& a : kActivations) {
      if (lower == a.name) found = &a;
    }
    if (found == nullptr) fail("activation '" + name + "' is not one of the recurrent nets' activations");
    Activation a{lower, found->alpha, found->beta};
    if (found->uses_alpha && next_alpha < alphas.size()) a.alpha = alphas[next_alpha++];
    if (found->uses_beta && next_beta < betas.size()) a.beta = betas[next_beta++];
    c.activations.push_back(a);
  }
  return c;
}

// Appends standard-ONNX nodes to one graph (the function's, or a Scan body), with value
// names unique across all of them.
class Writer {
 public:
  Writer(ir::Graph& graph, int& counter, DType dtype) : graph_(graph), counter_(counter), dtype_(dtype) {}

  std::vector<std::string> node_n(std::string op, std::vector<std::string> inputs, size_t outputs,
                                  std::vector<ir::Attribute> attributes = {}) {
    ir::Node n;
    n.name = "rnn_body/" + op + "_" + std::to_string(counter_++);
    n.op_type = std::move(op);
    n.inputs = std::move(inputs);
    n.attributes = std::move(attributes);
    for (size_t k = 0; k < outputs; ++k) n.outputs.push_back(n.name + ":" + std::to_string(k));
    graph_.nodes.push_back(n);
    return n.outputs;
  }
  std::string node(std::string op, std::vector<std::string> inputs, std::vector<ir::Attribute> attributes = {}) {
    return node_n(std::move(op), std::move(inputs), 1, std::move(attributes))[0];
  }
  // Renames the output of the last node.
  void name_last(const std::string& name) { graph_.nodes.back().outputs[0] = name; }

  std::string constant(Tensor value) { return node("Constant", {}, {ir::attr("value", std::move(value))}); }
  std::string ints(const std::vector<int64_t>& values) {
    return constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values));
  }
  std::string int_scalar(int64_t value) { return constant(Tensor::scalar<int64_t>(value)); }
  std::string scalar(double value) {
    if (dtype_ == DType::kFloat64) return constant(Tensor::scalar<double>(value));
    return constant(Tensor::scalar<float>(static_cast<float>(value)));
  }
  std::string unsqueeze(const std::string& x, int64_t axis) { return node("Unsqueeze", {x, ints({axis})}); }
  std::string squeeze(const std::string& x, int64_t axis) { return node("Squeeze", {x, ints({axis})}); }
  // x[..., begin:end] along `axis`.
  std::string slice(const std::string& x, int64_t begin, int64_t end, int64_t axis) {
    return node("Slice", {x, ints({begin}), ints({end}), ints({axis})});
  }
  // x[index] along axis 0 (Slice and Squeeze: Gather's gradient needs opset 16).
  std::string pick(const std::string& x, int64_t index) { return squeeze(slice(x, index, index + 1, 0), 0); }
  std::string add(const std::string& a, const std::string& b) { return node("Add", {a, b}); }
  std::string mul(const std::string& a, const std::string& b) { return node("Mul", {a, b}); }
  // Zeros of the element type and the run-time shape `shape`.
  std::string zeros(const std::string& shape) {
    return node("ConstantOfShape", {shape}, {ir::attr("value", Tensor::zeros(dtype_, {1}))});
  }

 private:
  ir::Graph& graph_;
  int& counter_;
  DType dtype_;
};

// act(x) in ops whose gradients the builder has and onnxruntime runs in float and double.
std::string activate(Writer& w, const Activation& a, const std::string& x) {
  const std::string& n = a.name;
  if (n == "relu") return w.node("Relu", {x});
  if (n == "tanh") return w.node("Tanh", {x});
  if (n == "sigmoid") return w.node("Sigmoid", {x});
  if (n == "affine") return w.add(w.mul(x, w.scalar(a.alpha)), w.scalar(a.beta));
  if (n == "leakyrelu") {
    return w.node("Where", {w.node("Less", {x, w.scalar(0)}), w.mul(x, w.scalar(a.alpha)), x});
  }
  if (n == "thresholdedrelu") return w.node("Where", {w.node("Greater", {x, w.scalar(a.alpha)}), x, w.scalar(0)});
  if (n == "scaledtanh") return w.mul(w.node("Tanh", {w.mul(x, w.scalar(a.beta))}), w.scalar(a.alpha));
  if (n == "hardsigmoid") {
    const std::string v = w.add(w.mul(x, w.scalar(a.alpha)), w.scalar(a.beta));
    return w.node("Max", {w.node("Min", {v, w.scalar(1)}), w.scalar(0)});
  }
  if (n == "elu") {
    // exp of min(x, 0): the branch Where drops must not overflow, or its zero gradient times
    // an infinite exp would be NaN.
    const std::string e = w.node("Exp", {w.node("Min", {x, w.scalar(0)})});
    const std::string negative = w.mul(w.node("Sub", {e, w.scalar(1)}), w.scalar(a.alpha));
    return w.node("Where", {w.node("Less", {x, w.scalar(0)}), negative, x});
  }
  if (n == "softsign") return w.node("Div", {x, w.add(w.node("Abs", {x}), w.scalar(1))});
  // softplus, stably: max(x, 0) + log(1 + exp(-|x|)).
  const std::string tail = w.node("Log", {w.add(w.node("Exp", {w.node("Neg", {w.node("Abs", {x})})}), w.scalar(1))});
  return w.add(w.node("Max", {x, w.scalar(0)}), tail);
}

std::string clip_then_activate(Writer& w, const Config& c, const Activation& a, const std::string& x) {
  if (!c.clip) return activate(w, a, x);
  const std::string clipped = w.node("Min", {w.node("Max", {x, w.scalar(-*c.clip)}), w.scalar(*c.clip)});
  return activate(w, a, clipped);
}

// ONNX's checker wants a shape on every graph input and output, subgraphs' too: `rank`
// dimensions of unknown size.
ir::ValueInfo typed(std::string name, DType dtype, size_t rank) {
  ir::ValueInfo v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = std::vector<ir::Dim>(rank);
  return v;
}

// The values one direction's Scan body reads from the function's graph.
struct DirectionValues {
  std::string rt;             // R^T [H, GH] (GRU: the z and r gates only)
  std::string rt_h;           // GRU: Rh^T [H, H]
  std::string rb;             // the recurrent bias added to h R^T (GRU: z and r), or ""
  std::string rb_h;           // GRU: Rbh, or ""
  std::string p_i, p_o, p_f;  // LSTM's peepholes, or ""
};

// The Scan body of one step of direction d: states h (and c), scan inputs xw_t [N, GH] (X W^T
// plus the biases that do not meet the state) and, with sequence_lens, valid_t [N, 1].
std::shared_ptr<ir::Graph> step_body(const Config& c, int64_t d, const DirectionValues& v, bool masked, int& counter) {
  auto body = std::make_shared<ir::Graph>();
  body->name = "rnn_step_" + std::to_string(d);
  Writer w(*body, counter, c.dtype);
  const std::string tag = "_" + std::to_string(d) + "_" + std::to_string(counter++);
  const std::string h_prev = "h_prev" + tag, c_prev = "c_prev" + tag, xw = "xw_t" + tag, valid = "valid_t" + tag;
  const bool lstm = c.cell == Cell::kLstm;
  body->inputs.push_back(typed(h_prev, c.dtype, 2));
  if (lstm) body->inputs.push_back(typed(c_prev, c.dtype, 2));
  body->inputs.push_back(typed(xw, c.dtype, 2));
  if (masked) body->inputs.push_back(typed(valid, DType::kBool, 2));
  const int64_t H = c.hidden;
  auto gate = [&](const std::string& x, int64_t k) { return w.slice(x, k * H, (k + 1) * H, 1); };
  std::string h_new, c_new;
  if (c.cell == Cell::kRnn) {
    const std::string pre = w.add(xw, w.node("MatMul", {h_prev, v.rt}));
    h_new = clip_then_activate(w, c, c.activation(d, 0), pre);
  } else if (c.cell == Cell::kGru) {
    std::string hr = w.node("MatMul", {h_prev, v.rt});
    if (!v.rb.empty()) hr = w.add(hr, v.rb);
    const std::string z = clip_then_activate(w, c, c.activation(d, 0), w.add(gate(xw, 0), gate(hr, 0)));
    const std::string r = clip_then_activate(w, c, c.activation(d, 0), w.add(gate(xw, 1), gate(hr, 1)));
    std::string recurrent;
    if (c.linear_before_reset) {
      std::string lin = w.node("MatMul", {h_prev, v.rt_h});
      if (!v.rb_h.empty()) lin = w.add(lin, v.rb_h);
      recurrent = w.mul(r, lin);
    } else {
      recurrent = w.node("MatMul", {w.mul(r, h_prev), v.rt_h});
      if (!v.rb_h.empty()) recurrent = w.add(recurrent, v.rb_h);
    }
    const std::string ht = clip_then_activate(w, c, c.activation(d, 1), w.add(gate(xw, 2), recurrent));
    const std::string one_minus_z = w.node("Sub", {w.scalar(1), z});
    h_new = w.add(w.mul(one_minus_z, ht), w.mul(z, h_prev));
  } else {
    const std::string gates = w.add(xw, w.node("MatMul", {h_prev, v.rt}));  // i o f c
    std::string i_pre = gate(gates, 0), o_pre = gate(gates, 1);
    if (!v.p_i.empty()) i_pre = w.add(i_pre, w.mul(v.p_i, c_prev));
    const std::string i = clip_then_activate(w, c, c.activation(d, 0), i_pre);
    std::string f;
    if (c.input_forget) {
      f = w.node("Sub", {w.scalar(1), i});  // the f gate's weights and peephole go unused
    } else {
      std::string f_pre = gate(gates, 2);
      if (!v.p_f.empty()) f_pre = w.add(f_pre, w.mul(v.p_f, c_prev));
      f = clip_then_activate(w, c, c.activation(d, 0), f_pre);
    }
    const std::string g = clip_then_activate(w, c, c.activation(d, 1), gate(gates, 3));
    c_new = w.add(w.mul(f, c_prev), w.mul(i, g));
    if (!v.p_o.empty()) o_pre = w.add(o_pre, w.mul(v.p_o, c_new));
    const std::string o = clip_then_activate(w, c, c.activation(d, 0), o_pre);
    h_new = w.mul(o, activate(w, c.activation(d, 2), c_new));
  }
  std::string h_out = h_new, c_out = c_new, y;
  if (masked) {
    // Past a row's length its state stays and its Y is zero.
    h_out = w.node("Where", {valid, h_new, h_prev});
    if (lstm) c_out = w.node("Where", {valid, c_new, c_prev});
    y = w.node("Where", {valid, h_new, w.scalar(0)});
  } else {
    y = w.node("Identity", {h_new});
    h_out = w.node("Identity", {h_new});
    if (lstm) c_out = w.node("Identity", {c_new});
  }
  body->outputs.push_back(typed(h_out, c.dtype, 2));
  if (lstm) body->outputs.push_back(typed(c_out, c.dtype, 2));
  body->outputs.push_back(typed(y, c.dtype, 2));
  return body;
}

// Graph input names, in the gradient node's order.
const std::vector<std::string> kForwardInputs = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
const std::vector<std::string> kForwardOutputs = {"Y", "Y_h", "Y_c"};

// The forward op in standard ops, writing Y, Y_h (and Y_c) into `graph`, whose inputs are the
// present ones of kForwardInputs.
void expand_forward(const Config& c, const std::vector<bool>& present, ir::Graph& graph, int& counter) {
  Writer w(graph, counter, c.dtype);
  const bool lstm = c.cell == Cell::kLstm;
  const int64_t H = c.hidden, GH = c.gates() * H;
  auto has = [&](size_t i) { return i < present.size() && present[i]; };
  // Time-major X [S, N, I] and states [D, N, H].
  const std::string x =
      c.layout == 0 ? std::string("X") : w.node("Transpose", {"X"}, {ir::attr("perm", std::vector<int64_t>{1, 0, 2})});
  auto states_of = [&](const std::string& s) {
    return c.layout == 0 ? s : w.node("Transpose", {s}, {ir::attr("perm", std::vector<int64_t>{1, 0, 2})});
  };
  const std::string initial_h = has(5) ? states_of("initial_h") : "";
  const std::string initial_c = lstm && has(6) ? states_of("initial_c") : "";
  const std::string x_shape = w.node("Shape", {x});
  std::string zero_state;
  if (initial_h.empty() || (lstm && initial_c.empty())) {
    zero_state = w.zeros(w.node("Concat", {w.slice(x_shape, 1, 2, 0), w.ints({H})}, {ir::attr("axis", int64_t{0})}));
  }
  std::string valid;  // [S, N, 1]: step s is within row n's length
  if (has(4)) {
    const std::string steps =
        w.node("Range", {w.int_scalar(0), w.squeeze(w.slice(x_shape, 0, 1, 0), 0), w.int_scalar(1)});
    const std::string lens = w.node("Cast", {"sequence_lens"}, {ir::attr("to", static_cast<int64_t>(DType::kInt64))});
    valid = w.unsqueeze(w.node("Less", {w.unsqueeze(steps, 1), lens}), 2);
  }
  std::vector<std::string> ys, hs, cs;
  for (int64_t d = 0; d < c.directions; ++d) {
    const bool reverse = c.directions == 2 ? d == 1 : c.reverse;
    DirectionValues v;
    const std::string rt = w.node("Transpose", {w.pick("R", d)});                   // [H, GH]
    std::string xw = w.node("MatMul", {x, w.node("Transpose", {w.pick("W", d)})});  // [S, N, GH]
    std::string wb, rb;
    if (has(3)) {
      const std::string b = w.pick("B", d);
      wb = w.slice(b, 0, GH, 0);
      rb = w.slice(b, GH, 2 * GH, 0);
    }
    if (c.cell == Cell::kGru) {
      v.rt = w.slice(rt, 0, 2 * H, 1);
      v.rt_h = w.slice(rt, 2 * H, 3 * H, 1);
      if (!rb.empty()) {
        v.rb = w.slice(rb, 0, 2 * H, 0);
        v.rb_h = w.slice(rb, 2 * H, 3 * H, 0);
        xw = w.add(xw, wb);
      }
    } else {
      v.rt = rt;
      if (!wb.empty()) xw = w.add(xw, w.add(wb, rb));
    }
    if (lstm && has(7)) {
      const std::string p = w.pick("P", d);
      v.p_i = w.slice(p, 0, H, 0);
      v.p_o = w.slice(p, H, 2 * H, 0);
      v.p_f = w.slice(p, 2 * H, 3 * H, 0);
    }
    std::vector<std::string> inputs = {initial_h.empty() ? zero_state : w.pick(initial_h, d)};
    if (lstm) inputs.push_back(initial_c.empty() ? zero_state : w.pick(initial_c, d));
    inputs.push_back(xw);
    if (!valid.empty()) inputs.push_back(valid);
    const int64_t scan_direction = reverse ? 1 : 0;
    const size_t scans = valid.empty() ? 1 : 2;
    ir::Attribute body;
    body.name = "body";
    body.type = ir::AttributeType::kGraph;
    body.g = step_body(c, d, v, !valid.empty(), counter);
    const std::vector<std::string> out =
        w.node_n("Scan", inputs, lstm ? 3 : 2,
                 {std::move(body), ir::attr("num_scan_inputs", static_cast<int64_t>(scans)),
                  ir::attr("scan_input_directions", std::vector<int64_t>(scans, scan_direction)),
                  ir::attr("scan_output_directions", std::vector<int64_t>{scan_direction})});
    hs.push_back(w.unsqueeze(out[0], 0));
    if (lstm) cs.push_back(w.unsqueeze(out[1], 0));
    ys.push_back(w.unsqueeze(out.back(), 1));
  }
  auto join = [&](const std::vector<std::string>& parts, int64_t axis) {
    return parts.size() == 1 ? parts[0] : w.node("Concat", parts, {ir::attr("axis", axis)});
  };
  auto output = [&](const std::string& value, const std::vector<int64_t>& perm, const std::string& name, size_t rank) {
    if (c.layout == 0)
      w.node("Identity", {value});
    else
      w.node("Transpose", {value}, {ir::attr("perm", perm)});
    w.name_last(name);
    graph.outputs.push_back(typed(name, c.dtype, rank));
  };
  output(join(ys, 1), {2, 0, 1, 3}, "Y", 4);  // [S, D, N, H] or [N, S, D, H]
  output(join(hs, 0), {1, 0, 2}, "Y_h", 3);   // [D, N, H] or [N, D, H]
  if (lstm) output(join(cs, 0), {1, 0, 2}, "Y_c", 3);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char ch : text) {
    hash ^= ch;
    hash *= 1099511628211ull;
  }
  return hash;
}

// What the body depends on, as text: the op, the element type, the opset, which inputs are
// there and every attribute.
std::string configuration(const std::string& op, const ir::Node& forward, const std::vector<bool>& present, DType dtype,
                          int64_t opset) {
  std::string text = op + "|" + std::string(dtype_name(dtype)) + "|" + std::to_string(opset) + "|";
  for (bool p : present) text += p ? '1' : '0';
  std::vector<const ir::Attribute*> attributes;
  for (const ir::Attribute& a : forward.attributes) attributes.push_back(&a);
  std::sort(attributes.begin(), attributes.end(),
            [](const ir::Attribute* x, const ir::Attribute* y) { return x->name < y->name; });
  for (const ir::Attribute* a : attributes) {
    text +=
        "|" + a->name + ":" + std::to_string(static_cast<int>(a->type)) + ":" + std::to_string(a->i) + ":" + a->s + ":";
    uint32_t bits = 0;
    std::memcpy(&bits, &a->f, sizeof bits);
    text += std::to_string(bits);
    for (float f : a->floats) {
      std::memcpy(&bits, &f, sizeof bits);
      text += "," + std::to_string(bits);
    }
    for (int64_t i : a->ints) text += ";" + std::to_string(i);
    for (const std::string& s : a->strings) text += "/" + s;
  }
  return text;
}

// Keeps the nodes that the function's outputs need.
void drop_dead_nodes(ir::Graph& graph, const std::vector<std::string>& outputs) {
  std::set<std::string> live(outputs.begin(), outputs.end());
  std::vector<ir::Node> kept;
  for (auto it = graph.nodes.rbegin(); it != graph.nodes.rend(); ++it) {
    const bool needed =
        std::any_of(it->outputs.begin(), it->outputs.end(), [&](const std::string& o) { return live.contains(o); });
    if (!needed) continue;
    live.insert(it->inputs.begin(), it->inputs.end());
    for (const std::string& read : ir::outer_scope_reads(*it)) live.insert(read);
    kept.push_back(std::move(*it));
  }
  std::reverse(kept.begin(), kept.end());
  graph.nodes = std::move(kept);
}

}  // namespace

RecurrentGradientFunction recurrent_gradient_function(const ir::Node& forward, const std::vector<std::string>& inputs,
                                                      DType dtype, int64_t opset) {
  const Cell cell = forward.op_type == "RNN" ? Cell::kRnn : forward.op_type == "GRU" ? Cell::kGru : Cell::kLstm;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    throw Error("gradient of " + forward.describe() + ": X is " + std::string(dtype_name(dtype)) +
                    ", expected float or double (declare its type when it is not known)",
                ErrorKind::kNotImplemented);
  }
  const Config c = read_config(forward, cell, dtype);
  const bool lstm = cell == Cell::kLstm;
  const size_t forward_inputs = lstm ? 8 : 6, forward_outputs = lstm ? 3 : 2;
  std::vector<bool> present(forward_inputs + forward_outputs);
  for (size_t i = 0; i < present.size() && i < inputs.size(); ++i) present[i] = !inputs[i].empty();

  // The forward, spelled out, as a model of its own.
  ir::Model model;
  model.ir_version = 8;
  model.opset_imports = {{"", opset}};
  model.graph.name = forward.op_type + "_expanded";
  int counter = 0;
  GradientRequest request;
  for (size_t i = 0; i < forward_inputs; ++i) {
    if (!present[i]) continue;
    const size_t rank = i == 4 ? 1 : i == 3 || i == 7 ? 2 : 3;
    model.graph.inputs.push_back(typed(kForwardInputs[i], i == 4 ? DType::kInt32 : dtype, rank));
    if (i != 4) request.wrt.push_back(kForwardInputs[i]);
  }
  expand_forward(c, present, model.graph, counter);
  for (size_t k = 0; k < forward_outputs; ++k) {
    if (present[forward_inputs + k]) request.outputs.push_back(kForwardOutputs[k]);
  }
  if (request.outputs.empty()) {
    throw Error("gradient of " + forward.describe() + ": no output has a gradient", ErrorKind::kInvalidModel);
  }
  ir::Model gradient = build_gradient_graph(std::move(model), request);

  RecurrentGradientFunction result;
  ir::Function& f = result.function;
  const std::string op = forward.op_type + "Grad";
  f.name = ir::kernel_function_name(op, fnv1a(configuration(op, forward, present, dtype, opset)));
  f.domain = std::string(ir::kOnnxtrainDomain);
  f.doc_string = "org.onnxtrain::" + op + " (onnxtrain runs its kernel) for one configuration of " + forward.op_type +
                 "'s attributes and inputs: the forward spelled out in standard ops and differentiated.";
  for (size_t i = 0; i < forward_inputs; ++i) f.inputs.push_back(kForwardInputs[i]);
  for (size_t k = 0; k < forward_outputs; ++k) f.inputs.push_back(kForwardOutputs[k] + "_grad");
  for (const ir::Attribute& a : forward.attributes) f.attribute_names.push_back(a.name);
  f.opset_imports = {{"", opset}, {std::string(ir::kOnnxtrainDomain), 1}};
  ir::Graph& body = gradient.graph;
  for (auto& [name, tensor] : body.initializers) {
    ir::Node constant;
    constant.name = "rnn_body/constant_" + name;
    constant.op_type = "Constant";
    constant.outputs = {name};
    constant.attributes = {ir::attr("value", tensor)};
    body.nodes.insert(body.nodes.begin(), std::move(constant));
  }
  std::set<std::string> computed;
  for (const ir::ValueInfo& v : body.outputs) computed.insert(v.name);
  // Gradients of absent inputs (and any that does not reach the outputs) are zeros.
  Writer w(body, counter, dtype);
  const std::vector<size_t> of_input = {0, 1, 2, 3, 5, 6, 7};
  const size_t count = lstm ? 7 : 5;
  const int64_t D = c.directions, H = c.hidden, GH = c.gates() * H;
  for (size_t k = 0; k < count; ++k) {
    const std::string name = kForwardInputs[of_input[k]] + "_grad";
    f.outputs.push_back(name);
    if (computed.contains(name)) continue;
    std::string shape;
    if (present[of_input[k]]) {
      shape = w.node("Shape", {kForwardInputs[of_input[k]]});
    } else if (of_input[k] == 3) {
      shape = w.ints({D, 2 * GH});
    } else if (of_input[k] == 7) {
      shape = w.ints({D, 3 * H});
    } else {  // initial_h, initial_c: [D, N, H] or [N, D, H]
      const std::string n = w.slice(w.node("Shape", {"X"}), c.layout == 0 ? 1 : 0, c.layout == 0 ? 2 : 1, 0);
      const std::vector<std::string> parts = c.layout == 0 ? std::vector<std::string>{w.ints({D}), n, w.ints({H})}
                                                           : std::vector<std::string>{n, w.ints({D}), w.ints({H})};
      shape = w.node("Concat", parts, {ir::attr("axis", int64_t{0})});
    }
    w.zeros(shape);
    w.name_last(name);
  }
  drop_dead_nodes(body, f.outputs);
  f.nodes = std::move(body.nodes);
  for (const ir::Function& called : gradient.functions) {
    if (called.domain == ir::kOnnxtrainDomain) result.library_calls.push_back(called.name);
  }
  return result;
}

}  // namespace onnxtrain::autodiff
