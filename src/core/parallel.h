// Intra-op parallelism on OpenMP (the runtime oneDNN uses too).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace onnxtrain {

// Sets the calling thread's OpenMP thread count for a scope and restores it after: a session
// never leaves the process's thread setting changed (an all-cores session after a 1-thread
// one, or torch's own threads around an ORTModule call).
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0 && threads != saved_) omp_set_num_threads(threads);
  }
  ~ThreadScope() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

// Calls f(begin, end) over [0, n) in chunks of at least `grain` items, in parallel when
// there is more than one chunk.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int64_t threads = omp_get_max_threads();
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  // An exception must not leave an OpenMP region (the process would terminate): the first
  // one thrown is kept, the other chunks still run, and it is rethrown after the region.
  std::exception_ptr error;
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks;
    const int64_t end = n * (c + 1) / chunks;
    try {
      f(begin, end);
    } catch (...) {
#pragma omp critical(onnxtrain_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace onnxtrain
