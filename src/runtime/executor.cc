#include "runtime/executor.h"

#include <omp.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <utility>

#include "core/allocator.h"
#include "core/parallel.h"
#include "ir/onnx_io.h"
#include "ir/shape_inference.h"
#include "ops/kernel_registry.h"
#include "passes/pipeline.h"

namespace onnxtrain::runtime {
namespace {

ValueMetadata metadata_of(const ir::ValueInfo& info) {
  ValueMetadata metadata = ir::metadata_of(info.name, {info.dtype, info.shape});
  metadata.element_dtype = info.element_dtype;
  metadata.optional = info.optional;
  return metadata;
}

std::string describe_type(const ir::ValueInfo& info) {
  if (info.dtype == DType::kSequence) {
    return std::string(info.optional ? "optional " : "") + "sequence of " +
           std::string(dtype_name(info.element_dtype)) + " tensors";
  }
  std::string text = (info.optional ? "optional " : "") + std::string(dtype_name(info.dtype));
  if (!info.shape) return text;
  text += "[";
  for (size_t i = 0; i < info.shape->size(); ++i) {
    const ir::Dim& d = (*info.shape)[i];
    text += (i ? ", " : "") + (d.value ? std::to_string(*d.value) : d.param.empty() ? "?" : d.param);
  }
  return text + "]";
}

std::string describe_tensor(const Tensor& t) {
  if (t.is_sequence()) return "a sequence of " + std::string(dtype_name(t.sequence().element_dtype)) + " tensors";
  if (t.is_none()) return "an optional without a value";
  return std::string(dtype_name(t.dtype())) + shape_string(t.shape());
}

// Hands freed memory back to the system: the large blocks Storage keeps for reuse, and the
// heap's free pages. A recording run allocates every intermediate buffer on its own; what
// it freed would otherwise stay resident beside the arena that replaces it.
void release_freed_memory() {
  Storage::release_kept_blocks();
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// `destination` holding `value`: the same buffer, or a copy of it.
Tensor copy_into(const std::string& name, const Tensor& value, const Tensor& destination) {
  if (value.dtype() != destination.dtype() || value.shape() != destination.shape()) {
    throw Error("output '" + name + "' is " + describe_tensor(value) + ", but its destination is " +
                    describe_tensor(destination),
                ErrorKind::kInvalidArgument);
  }
  if (value.raw_data() != destination.raw_data()) {
    Tensor target = destination;
    std::memcpy(target.raw_data(), value.raw_data(), value.nbytes());
  }
  return destination;
}

// What a run hands its caller for `value`: the tensor itself when the run allocated it
// for the caller (a fresh heap buffer nothing else holds), otherwise a copy — arena
// views, feeds and constants stay where they are. A sequence is shared as it is: its
// tensors are read-only (a loop building one would otherwise copy it every iteration).
Tensor handed_out(const Tensor& value) {
  if (is_container(value.dtype())) return value;  // immutable, and never in the arena
  const bool owned =
      value.storage() && value.storage()->origin() == StorageOrigin::kHeap && value.storage().use_count() == 1;
  return owned ? value : value.clone();
}

}  // namespace

// steps compute goes to `computed`, which a staged run keeps in its RunState.
class Executor::Frame final : public BufferSource {
 public:
  Frame(const Executor& executor, FrameState& scratch, std::vector<Tensor>& computed, BufferArena& arena)
      : executor_(executor),
        arena_(arena),
        state_(scratch),
        computed_(computed),
        values_(scratch.values),
        destinations_(scratch.destinations) {
    const size_t count = executor.value_names_.size();
    computed_.resize(count);
    values_.assign(count, nullptr);
    destinations_.clear();
  }
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;
  ~Frame() override {
    state_.step_inputs.clear();
    state_.step_outputs.clear();
  }

  // Value v, or nullptr when it is not there (not computed, or dead).
  const Tensor* value(int v) const { return values_[static_cast<size_t>(v)]; }
  // Feeds and constants are read where they are, not copied into the frame.
  void bind(int v, const Tensor* tensor) { values_[static_cast<size_t>(v)] = tensor; }
  void store(int v, Tensor tensor) {
    computed_[static_cast<size_t>(v)] = std::move(tensor);
    values_[static_cast<size_t>(v)] = &computed_[static_cast<size_t>(v)];
  }
  void release(int v) {
    computed_[static_cast<size_t>(v)] = Tensor();
    values_[static_cast<size_t>(v)] = nullptr;
  }
  void release_all() {
    for (Tensor& t : computed_) t = Tensor();
    values_.assign(values_.size(), nullptr);
  }
  // Where graph output `value` must end up, or nullptr.
  void set_destination(int value, const Tensor* destination, bool aliases_feed) {
    destinations_.resize(values_.size(), {nullptr, false});
    destinations_[static_cast<size_t>(value)] = {destination, aliases_feed};
  }
  void enter(const Step& step, size_t index) {
    step_ = &step;
    arena_.set_step(index);
  }

  Tensor allocate_output(size_t output_index, DType dtype, Shape shape) override {
    const int value = step_->outputs.at(output_index);
    if (value >= 0 && executor_.is_graph_output_[static_cast<size_t>(value)]) {
      const Destination* d = destination(value);
      if (d && !d->second && fits(*d->first, dtype, shape)) return *d->first;
      return Tensor::empty(dtype, std::move(shape));  // handed to the caller: not from the arena
    }
    return allocate_scratch(dtype, std::move(shape));
  }

  Tensor allocate_output_in_place(size_t output_index, size_t input_index, DType dtype, Shape shape) override {
    const int out = step_->outputs.at(output_index);
    const int in = input_index < step_->inputs.size() ? step_->inputs[input_index] : -1;
    if (const Destination* d = out >= 0 ? destination(out) : nullptr; d && d->second && in >= 0 && dies_here(in)) {
      const Tensor& source = *values_[static_cast<size_t>(in)];
      if (source.raw_data() == d->first->raw_data() && fits(*d->first, dtype, shape)) return *d->first;
    }
    if (in >= 0 && out >= 0 && !executor_.is_graph_output_[static_cast<size_t>(out)] && dies_here(in)) {
      const Tensor& source = *values_[static_cast<size_t>(in)];
      const size_t bytes = tensor_bytes(dtype, shape);
      const auto& storage = source.storage();
      if (storage && storage->origin() == StorageOrigin::kArena && storage.use_count() == 1 &&
          source.byte_offset() + bytes <= storage->bytes()) {
        return Tensor(dtype, std::move(shape), storage, source.byte_offset());
      }
    }
    return allocate_output(output_index, dtype, std::move(shape));
  }

  Tensor allocate_scratch(DType dtype, Shape shape) override {
    const size_t bytes = tensor_bytes(dtype, shape);
    return Tensor(dtype, std::move(shape), arena_.allocate(bytes));
  }

  void set_release_list(const std::vector<int>* release) { release_ = release; }

 private:
  using Destination = std::pair<const Tensor*, bool>;  // the tensor, and whether it aliases a feed
  const Destination* destination(int value) const {
    if (destinations_.empty() || destinations_[static_cast<size_t>(value)].first == nullptr) return nullptr;
    return &destinations_[static_cast<size_t>(value)];
  }
  static bool fits(const Tensor& t, DType dtype, const Shape& shape) {
    return t.dtype() == dtype && t.shape() == shape;
  }

  bool dies_here(int value) const {
    return release_ && std::find(release_->begin(), release_->end(), value) != release_->end();
  }

  const Executor& executor_;
  BufferArena& arena_;
  FrameState& state_;
  std::vector<Tensor>& computed_;
  std::vector<const Tensor*>& values_;
  std::vector<Destination>& destinations_;
  const Step* step_ = nullptr;
  const std::vector<int>* release_ = nullptr;
};

Executor::Executor(ir::Model model, SessionOptions options)
    : model_(std::move(model)), options_(options), allocator_(Allocator::of(device_)) {
  const auto& registry = KernelRegistry::global();
  // A function call stays a node where this device has a kernel for it; others are inlined.
  passes::optimize(model_, options_.graph_optimization_level, [&](const ir::Node& node, int64_t opset) {
    return registry.find(node.domain, node.op_type, opset, device_) != nullptr;
  });
  if (!options_.optimized_model_filepath.empty()) ir::save_model(model_, options_.optimized_model_filepath);
  if (options_.enable_profiling) profiler_ = std::make_unique<Profiler>(options_.profile_file_prefix);

  const ir::Graph& graph = model_.graph;
  auto add_value = [&](const std::string& name) {
    if (name.empty() || value_ids_.contains(name)) return;
    value_ids_.emplace(name, static_cast<int>(value_names_.size()));
    value_names_.push_back(name);
  };
  for (const auto& v : graph.inputs) add_value(v.name);
  for (const auto& [name, tensor] : graph.initializers) add_value(name);
  for (const auto& node : graph.nodes) {
    for (const auto& out : node.outputs) add_value(out);
  }
  constants_.resize(value_names_.size());
  for (const auto& [name, tensor] : graph.initializers) {
    if (name.empty()) throw Error("an initializer has an empty name", ErrorKind::kInvalidModel);
    constants_[static_cast<size_t>(value_id(name))] = tensor;
  }

  std::set<std::string> initializer_names;
  for (const auto& [name, tensor] : graph.initializers) initializer_names.insert(name);
  for (const auto& v : graph.inputs) {
    const bool has_default = initializer_names.contains(v.name);
    graph_inputs_.push_back({value_id(v.name), &v, !has_default && !v.optional});
    if (!has_default) input_metadata_.push_back(metadata_of(v));
    if (!v.opaque_type_proto.empty() && v.dtype == DType::kUndefined) {
      throw Error("graph input '" + v.name +
                      "' is neither a tensor, a sequence of tensors nor an optional of one; onnxtrain runs those only",
                  ErrorKind::kNotImplemented);
    }
  }
  optional_input_.assign(value_names_.size(), false);
  for (const auto& v : graph.inputs) optional_input_[static_cast<size_t>(value_id(v.name))] = v.optional;
  is_graph_output_.assign(value_names_.size(), false);
  // What the model does not declare of its outputs, inference may know.
  const bool undeclared = std::any_of(graph.outputs.begin(), graph.outputs.end(),
                                      [](const ir::ValueInfo& v) { return v.dtype == DType::kUndefined || !v.shape; });
  const auto inferred = undeclared ? ir::infer_types(model_) : std::map<std::string, ir::ValueType>{};
  for (const auto& v : graph.outputs) {
    if (!value_ids_.contains(v.name)) {
      throw Error("graph output '" + v.name + "' is produced by no node", ErrorKind::kInvalidModel);
    }
    is_graph_output_[static_cast<size_t>(value_id(v.name))] = true;
    ir::ValueInfo described = v;
    if (auto it = inferred.find(v.name); it != inferred.end()) {
      if (described.dtype == DType::kUndefined) described.dtype = it->second.dtype;
      if (!described.shape) described.shape = it->second.shape;
    }
    output_metadata_.push_back(metadata_of(described));
    output_names_.push_back(v.name);
  }
  create_steps();
}

int Executor::value_id(const std::string& name) const {
  auto it = value_ids_.find(name);
  return it == value_ids_.end() ? -1 : it->second;
}

size_t Executor::graph_input_index(const std::string& name) const {
  auto input = std::find_if(graph_inputs_.begin(), graph_inputs_.end(),
                            [&](const GraphInput& g) { return g.info->name == name; });
  if (input == graph_inputs_.end()) {
    std::string known;
    for (const auto& m : input_metadata_) known += (known.empty() ? "" : ", ") + m.name;
    throw Error("'" + name + "' is not an input of the model (inputs: " + known + ")", ErrorKind::kInvalidArgument);
  }
  return static_cast<size_t>(input - graph_inputs_.begin());
}

void Executor::check_feed(const GraphInput& input, const Tensor& tensor) {
  const ir::ValueInfo& info = *input.info;
  if (info.optional && tensor.is_none()) return;
  if (tensor.is_sequence() && info.dtype == DType::kSequence) {
    const DType element = tensor.sequence().element_dtype;
    if (info.element_dtype == DType::kUndefined || element == info.element_dtype) return;
    throw Error("input '" + info.name + "': got a sequence of " + std::string(dtype_name(element)) +
                    " tensors, expected a sequence of " + std::string(dtype_name(info.element_dtype)) + " tensors",
                ErrorKind::kInvalidArgument);
  }
  if (info.dtype != DType::kUndefined && tensor.dtype() != info.dtype) {
    throw Error("input '" + info.name + "': got " + describe_tensor(tensor) + ", expected " + describe_type(info),
                ErrorKind::kInvalidArgument);
  }
  if (!info.shape) return;
  if (info.shape->size() != tensor.rank()) {
    throw Error("input '" + info.name + "': got " + describe_tensor(tensor) + " of rank " +
                    std::to_string(tensor.rank()) + ", expected rank " + std::to_string(info.shape->size()) + " (" +
                    describe_type(info) + ")",
                ErrorKind::kInvalidArgument);
  }
  for (size_t i = 0; i < tensor.rank(); ++i) {
    const ir::Dim& d = (*info.shape)[i];
    const int64_t actual = tensor.shape()[i];
    if (d.value && *d.value != actual) {
      throw Error("input '" + info.name + "': dimension " + std::to_string(i) + " is " + std::to_string(actual) +
                      ", expected " + std::to_string(*d.value) + " (" + describe_type(info) + ")",
                  ErrorKind::kInvalidArgument);
    }
    if (d.param.empty()) continue;
    auto it = std::find_if(dims_.begin(), dims_.end(), [&](const auto& named) { return named.first == d.param; });
    if (it == dims_.end()) {
      dims_.emplace_back(d.param, actual);
    } else if (it->second != actual) {
      throw Error("input '" + info.name + "': dimension " + std::to_string(i) + " ('" + d.param + "') is " +
                      std::to_string(actual) + ", but another input gave '" + d.param +
                      "' = " + std::to_string(it->second),
                  ErrorKind::kInvalidArgument);
    }
  }
}

void Executor::bind_feeds(const NamedTensors& feeds) {
  bound_.assign(value_names_.size(), nullptr);
  for (const auto& [name, tensor] : feeds) {
    const int value = graph_inputs_[graph_input_index(name)].value;
    if (bound_[static_cast<size_t>(value)])
      throw Error("input '" + name + "' is fed twice", ErrorKind::kInvalidArgument);
    bound_[static_cast<size_t>(value)] = &tensor;
  }
}

void Executor::bind_feeds(const Binding& binding, const NamedTensors& feeds) {
  if (feeds.size() != binding.inputs.size()) {
    throw Error(
        "run: " + std::to_string(feeds.size()) + " feeds for a binding of " + std::to_string(binding.inputs.size()),
        ErrorKind::kInvalidArgument);
  }
  bound_.assign(value_names_.size(), nullptr);
  for (size_t i = 0; i < feeds.size(); ++i) {
    bound_[static_cast<size_t>(graph_inputs_[binding.inputs[i]].value)] = &feeds[i].second;
  }
}

// Checks the bound feeds, and that every input the stage reads first is fed (here or, for
// those in fed_before, by an earlier stage) or has a default.
void Executor::check_feeds(const Program& program, size_t stage, const std::vector<bool>& fed_before) {
  for (size_t g = 0; g < graph_inputs_.size(); ++g) {
    const GraphInput& input = graph_inputs_[g];
    const Tensor* tensor = bound_[static_cast<size_t>(input.value)];
    if (tensor == nullptr) continue;
    if (!fed_before.empty() && fed_before[g]) {
      throw Error("input '" + input.info->name + "' was fed to an earlier stage of this run",
                  ErrorKind::kInvalidArgument);
    }
    check_feed(input, *tensor);
  }
  for (size_t g : program.stage_inputs[stage]) {
    const GraphInput& input = graph_inputs_[g];
    if (!input.required || bound_[static_cast<size_t>(input.value)] || (!fed_before.empty() && fed_before[g])) continue;
    throw Error("input '" + input.info->name + "' (" + describe_type(*input.info) + ") is missing" +
                    (program.stage_end.size() > 1 ? " from stage " + std::to_string(stage) + " of the run" : ""),
                ErrorKind::kInvalidArgument);
  }
}

Executor::Binding Executor::bind(const std::vector<std::string>& feed_names,
                                 const std::vector<std::string>& output_names) {
  std::lock_guard lock(mutex_);
  Binding binding;
  for (const std::string& name : feed_names) {
    const size_t index = graph_input_index(name);
    if (std::find(binding.inputs.begin(), binding.inputs.end(), index) != binding.inputs.end()) {
      throw Error("input '" + name + "' is fed twice", ErrorKind::kInvalidArgument);
    }
    binding.inputs.push_back(index);
  }
  binding.program = &program_for(output_names.empty() ? output_names_ : output_names);
  return binding;
}

std::vector<Tensor> Executor::run(const NamedTensors& feeds, const std::vector<std::string>& output_names) {
  return run(feeds, output_names, {});
}

std::vector<Tensor> Executor::run(const NamedTensors& feeds, const std::vector<std::string>& output_names,
                                  const std::vector<Tensor>& destinations) {
  std::lock_guard lock(mutex_);
  const Program& program = program_for(output_names.empty() ? output_names_ : output_names);
  bind_feeds(feeds);
  return run_program(program, destinations);
}

std::vector<Tensor> Executor::run(const Binding& binding, const NamedTensors& feeds,
                                  const std::vector<Tensor>& destinations) {
  std::lock_guard lock(mutex_);
  bind_feeds(binding, feeds);
  return run_program(*binding.program, destinations);
}

void Executor::bind_frame(Frame& frame, const std::vector<Tensor>* held) const {
  for (size_t v = 0; v < bound_.size(); ++v) {
    if (held && (*held)[v].defined())
      frame.bind(static_cast<int>(v), &(*held)[v]);
    else if (bound_[v])
      frame.bind(static_cast<int>(v), bound_[v]);
    else if (constants_[v].defined())
      frame.bind(static_cast<int>(v), &constants_[v]);
    else if (optional_input_[v])
      frame.bind(static_cast<int>(v), &none_);  // an optional input not fed has no value
  }
}

void Executor::sign(const Program& program) {
  // The plan key: the program, then each feed's dtype and shape (-1 for an absent feed).
  signature_.assign(1, static_cast<int64_t>(program.id));
  for (const GraphInput& input : graph_inputs_) {
    const Tensor* t = bound_[static_cast<size_t>(input.value)];
    if (t == nullptr) {
      signature_.push_back(-1);
      continue;
    }
    signature_.push_back(static_cast<int64_t>(t->dtype()));
    signature_.push_back(static_cast<int64_t>(t->rank()));
    signature_.insert(signature_.end(), t->shape().begin(), t->shape().end());
  }
}

BufferArena Executor::lease_arena(ArenaLease& lease) {
  auto planned = plans_.find(signature_);
  if (planned == plans_.end()) return BufferArena();
  lease.plan = planned->second.plan;
  std::vector<std::shared_ptr<Storage>>& idle = planned->second.idle;
  if (idle.empty()) {
    lease.arena = allocator_.allocate(lease.plan->arena_bytes());
  } else {
    lease.arena = std::move(idle.back());
    idle.pop_back();
  }
  return BufferArena(lease.plan, lease.arena);
}

void Executor::return_arena(const std::vector<int64_t>& signature, BufferArena& arena, ArenaLease& lease,
                            bool complete) {
  ArenaLease done = std::exchange(lease, {});
  if (arena.recording()) {
    if (!complete) return;  // a run that stopped early recorded part of its requests only
    if (plans_.size() >= plan_limit_) return;
    auto plan = std::make_shared<const MemoryPlan>(arena.requests());
    release_freed_memory();  // before the arena takes the recorded buffers' place
    plans_[signature] = {plan, {allocator_.allocate(plan->arena_bytes())}};
    return;
  }
  auto planned = plans_.find(signature);
  if (planned == plans_.end() || planned->second.plan != done.plan) return;  // replaced meanwhile
  if (arena.plan_held()) {
    planned->second.idle.push_back(std::move(done.arena));
  } else {
    plans_.erase(planned);  // shapes inside the graph changed: record again next run
  }
}

void Executor::refuse_unexpected_inputs(const Step& step, std::span<const Tensor* const> inputs) const {
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k] == nullptr) continue;
    const DType dtype = inputs[k]->dtype();
    if (!step.containers && is_container(dtype)) {
      throw Error(step.node->describe() + ": input '" + value_names_[static_cast<size_t>(step.inputs[k])] + "' is " +
                      (dtype == DType::kSequence ? "a sequence" : "an optional without a value") +
                      ", which this op does not take (it takes tensors)",
                  ErrorKind::kInvalidModel);
    }
    if (step.packed_types || !is_packed(dtype)) continue;
    throw Error(step.node->describe() + ": input '" + value_names_[static_cast<size_t>(step.inputs[k])] + "' is " +
                    std::string(dtype_name(inputs[k]->dtype())) +
                    ", a 4-bit type packed two per byte, which this op does not take (the ops that do: Cast, "
                    "CastLike, QuantizeLinear, DequantizeLinear, Identity, Reshape, Flatten, Squeeze, Unsqueeze, "
                    "Shape, Size)",
                ErrorKind::kNotImplemented);
  }
}

void Executor::run_steps(const Program& program, size_t begin, size_t end, Frame& frame, int threads) {
  if (openmp_lost_to_fork()) {  // this thread forked the process after it ran OpenMP (core/parallel.h)
    run_on_fresh_thread([&] {
      const ThreadScope thread_scope(options_.intra_op_num_threads);
      run_steps(program, begin, end, frame, omp_get_max_threads());
    });
    return;
  }
  const ExecutionContext execution{device_, threads, nullptr};
  const auto run_start = profiler_ ? Profiler::Clock::now() : Profiler::Clock::time_point{};
  std::vector<const Tensor*>& inputs = frame_state_.step_inputs;
  std::vector<Tensor>& outputs = frame_state_.step_outputs;
  for (size_t i = begin; i < end; ++i) {
    const Step& step = steps_[program.steps[i]];
    inputs.assign(step.inputs.size(), nullptr);
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int v = step.inputs[k];
      if (v < 0) continue;
      inputs[k] = frame.value(v);
      if (inputs[k] == nullptr) {
        throw Error(step.node->describe() + ": input '" + value_names_[static_cast<size_t>(v)] +
                        "' was not computed (an optional output that its producer did not give)",
                    ErrorKind::kInvalidModel);
      }
    }
    if (!step.packed_types || !step.containers) refuse_unexpected_inputs(step, inputs);
    outputs.assign(step.outputs.size(), Tensor());
    frame.enter(step, i);
    frame.set_release_list(&program.release_after[i]);
    KernelContext context(*step.node, inputs, outputs, frame, execution);
    const auto step_start = profiler_ ? Profiler::Clock::now() : Profiler::Clock::time_point{};
    try {
      step.kernel->compute(context);
      if (profiler_) profiler_->record_node(*step.node, inputs, outputs, step_start, Profiler::Clock::now());
    } catch (const Error& e) {
      const std::string where = step.node->describe();
      if (std::string_view(e.what()).starts_with(where)) throw;
      throw Error(where + ": " + e.what(), e.kind());
    } catch (const std::bad_alloc&) {
      throw Error(step.node->describe() + ": out of memory", ErrorKind::kRuntime);
    } catch (const std::exception& e) {
      throw Error(step.node->describe() + ": " + e.what(), ErrorKind::kRuntime);
    }
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      const int v = step.outputs[k];
      if (v < 0) continue;
      if (!outputs[k].defined()) {
        throw Error(step.node->describe() + " did not produce its output '" + value_names_[static_cast<size_t>(v)] +
                    "'");
      }
      frame.store(v, std::move(outputs[k]));
    }
    inputs.clear();
    for (int v : program.release_after[i]) frame.release(v);
  }
  if (profiler_) profiler_->record_run(run_start, Profiler::Clock::now());
}

std::vector<Tensor> Executor::run_program(const Program& program, const std::vector<Tensor>& destinations) {
  if (!destinations.empty() && destinations.size() != program.outputs().size()) {
    throw Error("run: " + std::to_string(destinations.size()) + " destinations for " +
                    std::to_string(program.outputs().size()) + " outputs",
                ErrorKind::kInvalidArgument);
  }
  dims_.clear();
  check_feeds(program, 0, {});
  sign(program);
  const ThreadScope thread_scope(options_.intra_op_num_threads);  // restored when the run returns
  const int threads = omp_get_max_threads();

  ArenaLease lease;
  BufferArena arena = lease_arena(lease);
  std::vector<Tensor> results;
  {
    Frame frame(*this, frame_state_, frame_state_.computed, arena);
    for (size_t i = 0; i < destinations.size(); ++i) {
      if (!destinations[i].defined()) continue;
      const bool aliases_feed = std::any_of(graph_inputs_.begin(), graph_inputs_.end(), [&](const GraphInput& input) {
        const Tensor* feed = bound_[static_cast<size_t>(input.value)];
        return feed && feed->storage() == destinations[i].storage();
      });
      frame.set_destination(program.outputs()[i], &destinations[i], aliases_feed);
    }
    bind_frame(frame, nullptr);
    try {
      run_steps(program, 0, program.steps.size(), frame, threads);
      for (size_t i = 0; i < program.outputs().size(); ++i) {
        const int v = program.outputs()[i];
        const Tensor& t = *frame.value(v);
        if (i < destinations.size() && destinations[i].defined()) {
          results.push_back(copy_into(value_names_[static_cast<size_t>(v)], t, destinations[i]));
        } else {
          results.push_back(handed_out(t));
        }
      }
    } catch (...) {
      arena.set_step(program.steps.size());
      frame.release_all();
      return_arena(signature_, arena, lease, false);
      throw;
    }
    arena.set_step(program.steps.size());  // what the frame still holds dies at the end
    frame.release_all();
  }
  return_arena(signature_, arena, lease, true);
  return results;
}

Stages Executor::stages(const std::vector<std::vector<std::string>>& stage_outputs) {
  if (stage_outputs.empty()) throw Error("stages: no stage given", ErrorKind::kInvalidArgument);
  std::lock_guard lock(mutex_);
  Stages stages;
  auto it = staged_programs_.find(stage_outputs);
  if (it == staged_programs_.end()) it = staged_programs_.emplace(stage_outputs, make_program(stage_outputs)).first;
  stages.program = &it->second;
  return stages;
}

std::unique_ptr<RunState> Executor::start(const Stages& stages) {
  if (stages.program == nullptr)
    throw Error("start: the stages are not from Executor::stages", ErrorKind::kInvalidArgument);
  auto state = std::unique_ptr<RunState>(new RunState(*this, *stages.program));
  state->fed_.assign(graph_inputs_.size(), false);
  return state;
}

std::string Executor::end_profiling() {
  return profiler_ ? profiler_->write() : std::string();
}

std::vector<Tensor> Executor::run_stage(RunState& state, const NamedTensors& feeds) {
  if (state.executor_ != this)
    throw Error("run_stage: the run state belongs to another executor", ErrorKind::kInvalidArgument);
  const Program& program = *state.program_;
  const size_t stage = state.next_stage_;
  if (stage >= program.stage_end.size()) {
    throw Error("run_stage: this run has run all its " + std::to_string(program.stage_end.size()) +
                    " stages (a backward pass runs once per forward)",
                ErrorKind::kInvalidArgument);
  }
  std::lock_guard lock(mutex_);
  bind_feeds(feeds);
  dims_ = state.dims_;
  check_feeds(program, stage, state.fed_);
  state.dims_ = dims_;
  if (stage == 0) {
    sign(program);
    state.signature_ = signature_;
    state.arena_ = lease_arena(state.lease_);
  }
  const ThreadScope thread_scope(options_.intra_op_num_threads);
  const int threads = omp_get_max_threads();
  const size_t begin = stage == 0 ? 0 : program.stage_end[stage - 1];
  const size_t end = program.stage_end[stage];
  const bool last = stage + 1 == program.stage_end.size();

  std::vector<Tensor> results;
  Frame frame(*this, frame_state_, state.held_, state.arena_);
  bind_frame(frame, &state.held_);
  try {
    run_steps(program, begin, end, frame, threads);
    // A later stage may read an output too: the caller and the state then share it.
    for (int v : program.stage_outputs[stage]) results.push_back(handed_out(*frame.value(v)));
  } catch (...) {
    state.arena_.set_step(program.steps.size());
    frame.release_all();
    state.next_stage_ = program.stage_end.size();  // a failed stage ends the run
    return_arena(state.signature_, state.arena_, state.lease_, false);
    throw;
  }
  ++state.next_stage_;
  state.arena_.set_step(end);
  if (last) {
    frame.release_all();
    return_arena(state.signature_, state.arena_, state.lease_, true);
    return results;
  }
  // Keep what later stages read: the values computed so far, and the feeds (by reference).
  for (size_t v = 0; v < bound_.size(); ++v) {
    const bool read_later = program.last_stage[v] > static_cast<int>(stage);
    if (!read_later) {
      state.held_[v] = Tensor();
    } else if (!state.held_[v].defined() && bound_[v]) {
      state.held_[v] = *bound_[v];
    }
  }
  for (size_t g = 0; g < graph_inputs_.size(); ++g) {
    if (bound_[static_cast<size_t>(graph_inputs_[g].value)]) state.fed_[g] = true;
  }
  return results;
}

RunState::~RunState() {
  if (next_stage_ >= program_->stage_end.size()) return;  // complete: nothing held
  std::lock_guard lock(executor_->mutex_);
  arena_.set_step(program_->steps.size());
  for (Tensor& t : held_) t = Tensor();
  if (next_stage_ > 0) executor_->return_arena(signature_, arena_, lease_, false);
}

}  // namespace onnxtrain::runtime
