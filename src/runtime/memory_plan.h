// Buffer reuse across the intermediate values of one run.
//
// The first run for an input-shape signature records every buffer request (size, the step
// that asked, the step at which its last reference died). MemoryPlan then packs those
// lifetimes into one arena, reusing bytes between buffers that are never alive together.
// Later runs with that signature are served from the arena in the same request order, with
// no allocation; a request that does not fit its slot falls back to the heap and marks the
// plan stale, so the next run records again.
#pragma once

#include <onnxtrain/tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace onnxtrain {

class MemoryPlan {
 public:
  struct Request {
    size_t bytes = 0;
    size_t first_step = 0;
    size_t last_step = 0;  // inclusive
  };

  explicit MemoryPlan(const std::vector<Request>& requests);

  size_t arena_bytes() const { return arena_bytes_; }
  size_t request_count() const { return offsets_.size(); }
  size_t offset(size_t request) const { return offsets_[request]; }
  size_t bytes(size_t request) const { return bytes_[request]; }

 private:
  std::vector<size_t> offsets_;
  std::vector<size_t> bytes_;
  size_t arena_bytes_ = 0;
};

// Hands out buffers for one run: records requests, or serves them from a plan's arena.
class BufferArena {
 public:
  // Recording mode.
  BufferArena();
  // Serving mode; `arena` holds plan->arena_bytes() bytes.
  BufferArena(std::shared_ptr<const MemoryPlan> plan, std::shared_ptr<Storage> arena);

  void set_step(size_t step) { state_->step = step; }
  std::shared_ptr<Storage> allocate(size_t bytes);

  bool recording() const { return plan_ == nullptr; }
  // Serving mode: false once a request did not fit the plan.
  bool plan_held() const { return plan_held_; }
  // Recording mode: the requests so far (call after every buffer was released).
  std::vector<MemoryPlan::Request> requests() const { return state_->requests; }

 private:
  struct State {
    size_t step = 0;
    std::vector<MemoryPlan::Request> requests;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::shared_ptr<const MemoryPlan> plan_;
  std::shared_ptr<Storage> arena_;
  size_t next_request_ = 0;
  bool plan_held_ = true;
};

}  // namespace onnxtrain
