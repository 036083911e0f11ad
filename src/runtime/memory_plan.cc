#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace onnxtrain {
namespace {

constexpr size_t kAlignment = 64;

size_t aligned(size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

MemoryPlan::MemoryPlan(const std::vector<Request>& requests)
    : offsets_(requests.size(), 0), bytes_(requests.size(), 0) {
  // Greedy by size, largest first: each buffer takes the lowest offset that does not
  // overlap a placed buffer whose lifetime intersects its own.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) byte ranges alive with the current one
  for (size_t r : order) {
    const Request& request = requests[r];
    const size_t size = aligned(request.bytes);
    busy.clear();
    for (size_t p : placed) {
      const Request& other = requests[p];
      if (other.first_step <= request.last_step && request.first_step <= other.last_step) {
        busy.emplace_back(offsets_[p], offsets_[p] + aligned(other.bytes));
      }
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    offsets_[r] = offset;
    bytes_[r] = request.bytes;
    arena_bytes_ = std::max(arena_bytes_, offset + size);
    placed.push_back(r);
  }
}

BufferArena::BufferArena() = default;

BufferArena::BufferArena(std::shared_ptr<const MemoryPlan> plan, std::shared_ptr<Storage> arena)
    : plan_(std::move(plan)), arena_(std::move(arena)) {}

std::shared_ptr<Storage> BufferArena::allocate(size_t bytes) {
  if (plan_ == nullptr) {
    const size_t index = state_->requests.size();
    state_->requests.push_back({bytes, state_->step, state_->step});
    auto heap = Storage::allocate(bytes);
    std::byte* data = heap->data();
    // Note the step at which the last reference dies; the heap block goes with it.
    return std::make_shared<Storage>(data, bytes, StorageOrigin::kArena,
                                     [heap = std::move(heap), state = state_, index]() mutable {
                                       state->requests[index].last_step = state->step;
                                       heap.reset();
                                     });
  }
  const size_t index = next_request_++;
  if (plan_held_ && index < plan_->request_count() && bytes <= plan_->bytes(index)) {
    return std::make_shared<Storage>(arena_->data() + plan_->offset(index), bytes, StorageOrigin::kArena,
                                     std::function<void()>{});
  }
  plan_held_ = false;
  return Storage::allocate(bytes);
}

}  // namespace onnxtrain
