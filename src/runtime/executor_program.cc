// Planning an executor's runs: a kernel per node (create_steps), the subgraphs of control-flow
// nodes compiled into executors of their own (compile_subgraph), and the programs that run a
// set of outputs in stages, with every value's lifetime over all stages (make_program).
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "ops/kernel_registry.h"
#include "passes/value_reads.h"
#include "runtime/executor.h"

namespace onnxtrain::runtime {
namespace {

int64_t node_opset(const ir::Model& model, const ir::Node& node) {
  return node.opset ? node.opset : model.opset(node.domain).value_or(0);
}

// A body compiled once, at its node's kernel creation: an executor of the body, with the
// values it reads from enclosing scopes as extra inputs, fed from the node's implicit inputs.
class CompiledSubgraph final : public Subgraph {
 public:
  CompiledSubgraph(const ir::Graph& body, std::unique_ptr<Executor> executor,
                   std::vector<std::pair<std::string, size_t>> outer)
      : body_(body), executor_(std::move(executor)), outer_(std::move(outer)) {
    std::vector<std::string> feeds;
    for (const ir::ValueInfo& input : body_.inputs) feeds.push_back(input.name);
    for (const auto& [name, k] : outer_) feeds.push_back(name);
    binding_ = executor_->bind(feeds, {});  // names looked up once, not per iteration
  }

  const ir::Graph& graph() const override { return body_; }

  std::vector<Tensor> run(KernelContext& context, std::span<const Tensor> inputs) override {
    if (inputs.size() != body_.inputs.size()) {
      context.fail("subgraph '" + body_.name + "' takes " + std::to_string(body_.inputs.size()) + " inputs, given " +
                   std::to_string(inputs.size()));
    }
    NamedTensors feeds;
    feeds.reserve(inputs.size() + outer_.size());
    for (const Tensor& input : inputs) feeds.emplace_back(std::string(), input);
    const size_t first_implicit = context.node().inputs.size();
    for (const auto& [name, k] : outer_) feeds.emplace_back(std::string(), context.input(first_implicit + k));
    return executor_->run(binding_, feeds, {});
  }

 private:
  const ir::Graph& body_;
  std::unique_ptr<Executor> executor_;
  std::vector<std::pair<std::string, size_t>> outer_;  // body input name, index in the node's implicit inputs
  Executor::Binding binding_;                          // the body's inputs, then outer_
};

// The values of one run, and the BufferSource its kernels allocate from. Its vectors live
// in the executor between runs (FrameState), so that a run allocates none of them; what the

}  // namespace

void Executor::create_steps() {
  const auto& registry = KernelRegistry::global();
  const ir::Graph& graph = model_.graph;
  std::set<std::string> overridable;
  for (const auto& v : graph.inputs) overridable.insert(v.name);
  auto constant = [&](std::string_view name) -> const Tensor* {
    if (overridable.contains(std::string(name))) return nullptr;
    return graph.initializer(name);
  };

  const std::unordered_map<std::string, size_t> reads = passes::count_reads(graph);
  auto readers = [&](std::string_view name) -> size_t {
    auto it = reads.find(std::string(name));
    return it == reads.end() ? 0 : it->second;
  };

  std::vector<std::string> missing;
  for (size_t index : ir::topological_order(graph)) {
    const ir::Node& node = graph.nodes[index];
    const int64_t opset = node_opset(model_, node);
    const KernelDef* def = registry.find(node.domain, node.op_type, opset, device_);
    if (def == nullptr) {
      const std::string op = (node.domain.empty() ? "" : node.domain + "::") + node.op_type;
      const std::string entry = op + " (opset " + std::to_string(opset) + ", " + node.describe() + ")";
      if (missing.size() < 20) missing.push_back(entry);
      continue;
    }
    Step step;
    step.node = &node;
    for (const auto& in : node.inputs) step.inputs.push_back(in.empty() ? -1 : value_id(in));
    for (const auto& out : node.outputs) step.outputs.push_back(out.empty() ? -1 : value_id(out));
    // What its subgraphs read from this graph (or from scopes around it) follows its inputs.
    const std::vector<std::string> implicit = ir::outer_scope_reads(node);
    for (const auto& name : implicit) {
      const int id = value_id(name);
      if (id < 0) {
        throw Error(node.describe() + ": a subgraph reads '" + name + "', which no enclosing graph defines",
                    ErrorKind::kInvalidModel);
      }
      step.inputs.push_back(id);
    }
    KernelInfo info(node, opset, constant, readers);
    info.set_subgraph_compiler([this, implicit](const ir::Graph& body) { return compile_subgraph(body, implicit); });
    step.kernel = def->create(info);
    step.packed_types = def->constraints.packed_types;
    step.containers = def->constraints.containers;
    steps_.push_back(std::move(step));
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    throw Error("onnxtrain has no kernel for these ops:" + list, ErrorKind::kNotImplemented);
  }
}

std::unique_ptr<Subgraph> Executor::compile_subgraph(const ir::Graph& body,
                                                     const std::vector<std::string>& implicit) const {
  ir::Model model;
  model.ir_version = model_.ir_version;
  model.opset_imports = model_.opset_imports;
  model.functions = model_.functions;
  model.graph = body;
  std::vector<std::pair<std::string, size_t>> outer;
  for (const std::string& name : ir::free_values(body)) {
    const auto k = std::find(implicit.begin(), implicit.end(), name);
    if (k == implicit.end()) {
      throw Error("subgraph '" + body.name + "' reads '" + name + "', which no enclosing graph defines",
                  ErrorKind::kInvalidModel);
    }
    ir::ValueInfo input;
    input.name = name;
    model.graph.inputs.push_back(std::move(input));
    outer.emplace_back(name, static_cast<size_t>(k - implicit.begin()));
  }
  SessionOptions options = options_;
  options.enable_profiling = false;
  options.optimized_model_filepath.clear();
  auto executor = std::make_unique<Executor>(std::move(model), options);
  executor->plan_limit_ = 16;
  return std::make_unique<CompiledSubgraph>(body, std::move(executor), std::move(outer));
}

const Executor::Program& Executor::program_for(const std::vector<std::string>& output_names) {
  if (auto it = programs_.find(output_names); it != programs_.end()) return it->second;
  return programs_.emplace(output_names, make_program({output_names})).first->second;
}

Executor::Program Executor::make_program(const std::vector<std::vector<std::string>>& stage_outputs) {
  Program program;
  program.id = programs_.size() + staged_programs_.size();
  // Walk back from each stage's outputs: a step runs in the first stage that needs one of
  // its outputs; what an earlier stage computed is there already.
  std::vector<int> stage_of_step(steps_.size(), -1);
  for (size_t stage = 0; stage < stage_outputs.size(); ++stage) {
    std::vector<bool> needed(value_names_.size(), false);
    std::vector<int>& outputs = program.stage_outputs.emplace_back();
    for (const auto& name : stage_outputs[stage]) {
      const int id = value_id(name);
      if (id < 0 || !is_graph_output_[static_cast<size_t>(id)]) {
        std::string known;
        for (const auto& m : output_metadata_) known += (known.empty() ? "" : ", ") + m.name;
        throw Error("'" + name + "' is not an output of the model (outputs: " + known + ")",
                    ErrorKind::kInvalidArgument);
      }
      needed[static_cast<size_t>(id)] = true;
      outputs.push_back(id);
    }
    for (size_t s = steps_.size(); s-- > 0;) {
      const Step& step = steps_[s];
      const bool runs = std::any_of(step.outputs.begin(), step.outputs.end(),
                                    [&](int v) { return v >= 0 && needed[static_cast<size_t>(v)]; });
      if (!runs || stage_of_step[s] >= 0) continue;
      stage_of_step[s] = static_cast<int>(stage);
      for (int v : step.inputs) {
        if (v >= 0) needed[static_cast<size_t>(v)] = true;
      }
    }
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (stage_of_step[s] == static_cast<int>(stage)) program.steps.push_back(s);
    }
    program.stage_end.push_back(program.steps.size());
  }

  // A value dies after the last step that reads it; outputs and constants never do. A
  // stage's outputs are read at its end; a later stage reads what an earlier one left.
  const int no_stage = -1;
  std::vector<int> last_use(value_names_.size(), -1);
  program.last_stage.assign(value_names_.size(), no_stage);
  std::vector<int> first_stage(value_names_.size(), std::numeric_limits<int>::max());
  auto read = [&](int v, int stage) {
    program.last_stage[static_cast<size_t>(v)] = std::max(program.last_stage[static_cast<size_t>(v)], stage);
    first_stage[static_cast<size_t>(v)] = std::min(first_stage[static_cast<size_t>(v)], stage);
  };
  for (size_t i = 0, stage = 0; i < program.steps.size(); ++i) {
    while (i >= program.stage_end[stage]) ++stage;
    const Step& step = steps_[program.steps[i]];
    for (int v : step.inputs) {
      if (v < 0) continue;
      last_use[static_cast<size_t>(v)] = static_cast<int>(i);
      read(v, static_cast<int>(stage));
    }
    for (int v : step.outputs) {  // an output nobody reads dies at once
      if (v >= 0) last_use[static_cast<size_t>(v)] = std::max(last_use[static_cast<size_t>(v)], static_cast<int>(i));
    }
  }
  for (size_t stage = 0; stage < program.stage_outputs.size(); ++stage) {
    for (int v : program.stage_outputs[stage]) read(v, static_cast<int>(stage));
  }
  program.release_after.resize(program.steps.size());
  for (size_t v = 0; v < value_names_.size(); ++v) {
    if (last_use[v] < 0 || is_graph_output_[v] || constants_[v].defined()) continue;
    program.release_after[static_cast<size_t>(last_use[v])].push_back(static_cast<int>(v));
  }
  program.stage_inputs.resize(program.stage_end.size());
  for (size_t g = 0; g < graph_inputs_.size(); ++g) {
    const int first = first_stage[static_cast<size_t>(graph_inputs_[g].value)];
    if (first != std::numeric_limits<int>::max()) program.stage_inputs[static_cast<size_t>(first)].push_back(g);
  }
  return program;
}

}  // namespace onnxtrain::runtime
