// A per-node profile of an executor's runs (SessionOptions::enable_profiling), written as
// Chrome-trace JSON in the shape onnxruntime's profiler writes: one complete ("X") event per
// run ("model_run", category "Session") and per kernel ("<node>_kernel_time", category
// "Node", with the op type and the input and output types and shapes in "args"), times in
// microseconds since the profile started.
#pragma once

#include <onnxtrain/tensor.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::runtime {

class Profiler {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Profiler(std::string file_prefix);

  void record_run(Clock::time_point start, Clock::time_point end);
  void record_node(const ir::Node& node, std::span<const Tensor* const> inputs, std::span<const Tensor> outputs,
                   Clock::time_point start, Clock::time_point end);
  // Writes the events recorded so far to "<prefix>_<date>_<time>.json" (atomically), returns
  // the path and starts over.
  std::string write();

 private:
  struct Event {
    std::string category;
    std::string name;
    std::string op_type;
    std::vector<std::pair<DType, Shape>> inputs;
    std::vector<std::pair<DType, Shape>> outputs;
    int64_t start_us = 0;
    int64_t duration_us = 0;
  };
  int64_t since_start(Clock::time_point t) const;

  std::string file_prefix_;
  Clock::time_point start_;
  std::mutex mutex_;
  std::vector<Event> events_;
};

}  // namespace onnxtrain::runtime
