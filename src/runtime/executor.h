// Executor: runs a loaded model. Kernels are created once; each input-shape signature gets
// a MemoryPlan on its first run, and later runs with that signature allocate nothing but
// their outputs.
#pragma once

#include <onnxtrain/inference_session.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ops/kernel.h"
#include "runtime/memory_plan.h"

namespace onnxtrain::runtime {

class Executor {
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

  const std::vector<ValueMetadata>& inputs() const { return input_metadata_; }
  const std::vector<ValueMetadata>& outputs() const { return output_metadata_; }

 private:
  struct Step {
    const ir::Node* node = nullptr;
    std::unique_ptr<OpKernel> kernel;
    std::vector<int> inputs;   // value ids, -1 for an omitted optional input
    std::vector<int> outputs;  // value ids, -1 for an omitted optional output
  };
  struct GraphInput {
    int value = -1;
    const ir::ValueInfo* info = nullptr;
    bool required = true;  // false when an initializer gives a default
  };
  // What one set of requested outputs needs: the steps to run and when values die.
  struct Program {
    size_t id = 0;  // distinguishes the programs in a plan signature
    std::vector<size_t> steps;
    std::vector<std::vector<int>> release_after;  // per entry of `steps`
    std::vector<int> outputs;
  };
  struct PlannedArena {
    std::shared_ptr<const MemoryPlan> plan;
    std::shared_ptr<Storage> arena;
  };
  class Frame;

  int value_id(const std::string& name) const;
  void create_steps();
  const Program& program_for(const std::vector<std::string>& output_names);
  std::vector<const Tensor*> bind_feeds(const NamedTensors& feeds) const;
  void check_feed(const GraphInput& input, const Tensor& tensor,
                  std::vector<std::pair<std::string_view, int64_t>>& dims) const;

  ir::Model model_;
  SessionOptions options_;
  std::vector<std::string> value_names_;
  std::unordered_map<std::string, int> value_ids_;
  std::vector<Tensor> constants_;  // per value id; undefined unless an initializer
  std::vector<bool> is_graph_output_;
  std::vector<GraphInput> graph_inputs_;
  std::vector<Step> steps_;
  std::vector<ValueMetadata> input_metadata_;
  std::vector<ValueMetadata> output_metadata_;
  std::vector<std::string> output_names_;  // every graph output, in graph order
  // Keyed by the requested output names, and by program id and feed types and shapes: the
  // keys compare without building strings, so that finding them costs a run little.
  std::map<std::vector<std::string>, Program> programs_;
  std::map<std::vector<int64_t>, PlannedArena> plans_;
  std::vector<int64_t> signature_;  // the run's plan key; kept to reuse its capacity
  std::mutex mutex_;
};

}  // namespace onnxtrain::runtime
