// Executor: runs a loaded model. Kernels are created once; each input-shape signature gets
// a MemoryPlan on its first run, and later runs with that signature allocate nothing but
// their outputs.
//
// A run is one stage, or several: a staged run stops after the steps its first outputs
// need (a forward pass), keeps in a RunState exactly the values later stages read, and
// resumes from there (the backward pass). Each pending run has its own state and arena, so
// several may be in flight at once.
#pragma once

#include <onnxtrain/inference_session.h>

#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ops/kernel.h"
#include "runtime/memory_plan.h"
#include "runtime/profiler.h"

namespace onnxtrain {
class Allocator;
}

namespace onnxtrain::runtime {

// An arena a run holds: from a memory plan's pool, or none while the run records the plan.
struct ArenaLease {
  std::shared_ptr<const MemoryPlan> plan;
  std::shared_ptr<Storage> arena;
};

class RunState;
class Stages;

class Executor {
  struct Program;

 public:
  Executor(ir::Model model, SessionOptions options);

  std::vector<Tensor> run(const NamedTensors& feeds, const std::vector<std::string>& output_names);
  // Runs like run(), but output i is written into destinations[i] when that is defined (it
  // must have the output's dtype and shape) and the returned tensor is that destination. A
  // destination may share its buffer with a feed — an update in place, such as a parameter
  // or a gradient accumulator: the producer then writes into it directly when it computes
  // in place and nothing later reads the feed; otherwise the result is copied in at the end.
  std::vector<Tensor> run(const NamedTensors& feeds, const std::vector<std::string>& output_names,
                          const std::vector<Tensor>& destinations);

  // Feeds and outputs named once, for runs that pass the feeds in that order: a training
  // step runs tens of kernels in tens of microseconds, too short to look names up each time.
  class Binding {
   private:
    friend class Executor;
    std::vector<size_t> inputs;  // per feed position: its entry in graph_inputs_
    const Program* program = nullptr;
  };
  Binding bind(const std::vector<std::string>& feed_names, const std::vector<std::string>& output_names);
  // run(feeds, output_names, destinations) for the bound names; feeds[i] is the value of
  // the binding's feed i (its name is not read).
  std::vector<Tensor> run(const Binding& binding, const NamedTensors& feeds, const std::vector<Tensor>& destinations);

  // Staged runs. Stage k returns stage_outputs[k] (graph outputs) and runs the steps those
  // need that no earlier stage ran; what a later stage reads from an earlier one stays in
  // the RunState, not copied. A stage is fed the graph inputs its steps read that no
  // earlier stage was fed; feeds are checked per stage.
  Stages stages(const std::vector<std::vector<std::string>>& stage_outputs);
  std::unique_ptr<RunState> start(const Stages& stages);
  // Runs the state's next stage. Feeds are read in place: a feed that a later stage reads
  // must stay alive and unchanged until that stage has run.
  std::vector<Tensor> run_stage(RunState& state, const NamedTensors& feeds);

  // Writes the profile (SessionOptions::enable_profiling) and returns its path; "" without.
  std::string end_profiling();

  const std::vector<ValueMetadata>& inputs() const { return input_metadata_; }
  const std::vector<ValueMetadata>& outputs() const { return output_metadata_; }

 private:
  struct Step {
    const ir::Node* node = nullptr;
    std::unique_ptr<OpKernel> kernel;
    std::vector<int> inputs;    // value ids, -1 for an omitted optional input
    std::vector<int> outputs;   // value ids, -1 for an omitted optional output
    bool packed_types = false;  // the kernel takes packed 4-bit inputs (KernelConstraints)
    bool containers = false;    // the kernel takes sequences and empty optionals (KernelConstraints)
  };
  struct GraphInput {
    int value = -1;
    const ir::ValueInfo* info = nullptr;
    bool required = true;  // false when an initializer gives a default
  };
  // What one set of requested outputs needs, in one or more stages: the steps to run, in
  // order, and when values die.
  struct Program {
    size_t id = 0;  // distinguishes the programs in a plan signature
    std::vector<size_t> steps;
    std::vector<size_t> stage_end;                  // per stage: one past its last entry of `steps`
    std::vector<std::vector<int>> stage_outputs;    // per stage: value ids
    std::vector<std::vector<size_t>> stage_inputs;  // per stage: the graph inputs it reads first
    std::vector<std::vector<int>> release_after;    // per entry of `steps`
    std::vector<int> last_stage;                    // per value id: the last stage that reads it, or -1
    const std::vector<int>& outputs() const { return stage_outputs.front(); }
  };
  // A memory plan and the arenas that serve it: one per run in flight.
  struct PlannedArena {
    std::shared_ptr<const MemoryPlan> plan;
    std::vector<std::shared_ptr<Storage>> idle;
  };
  class Frame;
  friend class RunState;
  friend class Stages;

  int value_id(const std::string& name) const;
  void create_steps();
  // A graph attribute of a node of this graph, compiled into an executor of its own whose
  // extra inputs are the outer-scope values it reads (`implicit`: the node's implicit inputs).
  std::unique_ptr<Subgraph> compile_subgraph(const ir::Graph& body, const std::vector<std::string>& implicit) const;
  const Program& program_for(const std::vector<std::string>& output_names);
  Program make_program(const std::vector<std::vector<std::string>>& stage_outputs);
  size_t graph_input_index(const std::string& name) const;
  // Fills bound_ from named feeds, or from feeds in a binding's order, and checks them.
  void bind_feeds(const NamedTensors& feeds);
  void bind_feeds(const Binding& binding, const NamedTensors& feeds);
  void check_feeds(const Program& program, size_t stage, const std::vector<bool>& fed_before);
  void check_feed(const GraphInput& input, const Tensor& tensor);
  void sign(const Program& program);  // signature_ from the bound feeds
  // Puts in the frame what a run reads without computing it: what an earlier stage `held`,
  // the bound feeds, the constants, and none for an optional input not fed.
  void bind_frame(Frame& frame, const std::vector<Tensor>* held) const;
  std::vector<Tensor> run_program(const Program& program, const std::vector<Tensor>& destinations);
  // Throws when a packed 4-bit input, a sequence or an empty optional reaches a kernel that
  // does not declare it takes them.
  void refuse_unexpected_inputs(const Step& step, std::span<const Tensor* const> inputs) const;
  // Runs program.steps[begin, end) on the frame's values.
  void run_steps(const Program& program, size_t begin, size_t end, Frame& frame, int threads);
  // The arena for a run with signature_: served from its plan, or recording one.
  BufferArena lease_arena(ArenaLease& lease);
  // After a run: records the plan, hands the arena back, or drops a plan that no longer fits.
  void return_arena(const std::vector<int64_t>& signature, BufferArena& arena, ArenaLease& lease, bool complete);

  ir::Model model_;
  SessionOptions options_;
  std::unique_ptr<Profiler> profiler_;  // with SessionOptions::enable_profiling
  Device device_ = Device::cpu();       // where the kernels run and the arenas live
  Allocator& allocator_;
  std::vector<std::string> value_names_;
  std::unordered_map<std::string, int> value_ids_;
  std::vector<Tensor> constants_;  // per value id; undefined unless an initializer
  std::vector<bool> is_graph_output_;
  std::vector<bool> optional_input_;  // per value id: an input of optional type
  const Tensor none_ = Tensor::none();
  std::vector<GraphInput> graph_inputs_;
  std::vector<Step> steps_;
  std::vector<ValueMetadata> input_metadata_;
  std::vector<ValueMetadata> output_metadata_;
  std::vector<std::string> output_names_;  // every graph output, in graph order
  // Keyed by the requested output names, and by program id and feed types and shapes: the
  // keys compare without building strings, so that finding them costs a run little.
  std::map<std::vector<std::string>, Program> programs_;
  std::map<std::vector<std::vector<std::string>>, Program> staged_programs_;
  std::map<std::vector<int64_t>, PlannedArena> plans_;
  // The most plans kept: a loop body whose carried values grow meets a new signature each
  // iteration, and past this many runs them from the heap instead of recording more.
  size_t plan_limit_ = std::numeric_limits<size_t>::max();
  std::mutex mutex_;
  // Per run, kept between runs to reuse their capacity (runs hold mutex_).
  std::vector<int64_t> signature_;                          // the plan key
  std::vector<const Tensor*> bound_;                        // per value id: the feed, or nullptr
  std::vector<std::pair<std::string_view, int64_t>> dims_;  // symbolic dimensions of the feeds
  // What a run's Frame holds (see executor.cc).
  struct FrameState {
    std::vector<Tensor> computed;                              // per value id: what the steps produced
    std::vector<const Tensor*> values;                         // per value id: computed, fed or constant
    std::vector<std::pair<const Tensor*, bool>> destinations;  // per value id: where it goes, aliases a feed
    std::vector<const Tensor*> step_inputs;
    std::vector<Tensor> step_outputs;
  };
  FrameState frame_state_;
};

// A staged program of an executor, from Executor::stages.
class Stages {
 private:
  friend class Executor;
  const Executor::Program* program = nullptr;
};

// The values a staged run keeps between its stages, and the arena they live in. Made by
// Executor::start and handed back to Executor::run_stage; it must not outlive its
// executor. Dropping it before the last stage frees what it holds (a forward whose
// backward never comes).
class RunState {
 public:
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;
  ~RunState();

  // The index of the stage that runs next; stage_count() once the run is complete.
  size_t next_stage() const { return next_stage_; }
  size_t stage_count() const { return program_->stage_end.size(); }

 private:
  friend class Executor;
  RunState(Executor& executor, const Executor::Program& program) : executor_(&executor), program_(&program) {}

  Executor* executor_;
  const Executor::Program* program_;
  size_t next_stage_ = 0;
  std::vector<Tensor> held_;  // per value id: what an earlier stage computed, or a feed it kept
  std::vector<bool> fed_;     // per graph input: fed by an earlier stage
  std::vector<std::pair<std::string_view, int64_t>> dims_;  // symbolic dimensions the feeds gave
  std::vector<int64_t> signature_;
  BufferArena arena_;
  ArenaLease lease_;
};

}  // namespace onnxtrain::runtime
