#include "runtime/profiler.h"

#include <unistd.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "core/file.h"

namespace onnxtrain::runtime {
namespace {

// onnxruntime lists each value as {"float": [2, 3]}.
nlohmann::json type_shapes(const std::vector<std::pair<DType, Shape>>& values) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [dtype, shape] : values) list.push_back({{std::string(dtype_name(dtype)), shape}});
  return list;
}

}  // namespace

Profiler::Profiler(std::string file_prefix) : file_prefix_(std::move(file_prefix)), start_(Clock::now()) {}

int64_t Profiler::since_start(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - start_).count();
}

void Profiler::record_run(Clock::time_point start, Clock::time_point end) {
  std::lock_guard lock(mutex_);
  events_.push_back({"Session", "model_run", "", {}, {}, since_start(start), since_start(end) - since_start(start)});
}

void Profiler::record_node(const ir::Node& node, std::span<const Tensor* const> inputs, std::span<const Tensor> outputs,
                           Clock::time_point start, Clock::time_point end) {
  Event e{"Node",
          (node.name.empty() ? node.op_type : node.name) + "_kernel_time",
          node.op_type,
          {},
          {},
          since_start(start),
          since_start(end) - since_start(start)};
  for (const Tensor* t : inputs) {
    if (t) e.inputs.emplace_back(t->dtype(), t->shape());
  }
  for (const Tensor& t : outputs) {
    if (t.defined()) e.outputs.emplace_back(t.dtype(), t.shape());
  }
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(e));
}

std::string Profiler::write() {
  std::vector<Event> events;
  {
    std::lock_guard lock(mutex_);
    events.swap(events_);
  }
  const int pid = static_cast<int>(getpid());
  nlohmann::json trace = nlohmann::json::array();
  for (const Event& e : events) {
    nlohmann::json event = {{"cat", e.category}, {"pid", pid}, {"tid", pid},     {"dur", e.duration_us},
                            {"ts", e.start_us},  {"ph", "X"},  {"name", e.name}, {"args", nlohmann::json::object()}};
    if (e.category == "Node") {
      event["args"] = {{"op_name", e.op_type},
                       {"provider", "CPUExecutionProvider"},
                       {"input_type_shape", type_shapes(e.inputs)},
                       {"output_type_shape", type_shapes(e.outputs)}};
    }
    trace.push_back(std::move(event));
  }
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d_%H-%M-%S", &local);
  std::filesystem::path path = file_prefix_ + "_" + stamp + ".json";
  for (int n = 1; std::filesystem::exists(path); ++n) {  // two profiles in one second
    path = file_prefix_ + "_" + stamp + "_" + std::to_string(n) + ".json";
  }
  write_file_atomically(path, trace.dump(1));
  return path.string();
}

}  // namespace onnxtrain::runtime
