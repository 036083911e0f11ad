// Intra-op parallelism on OpenMP (the runtime oneDNN uses too); core/work_share.h has the
// pool that withdraws unstarted work, which the kernels that lost most to barriers use.
//
// GCC's OpenMP does not survive fork(): in the child of a process that ran a parallel region,
// the thread that forked hangs in its first region (its team's threads are gone; Python's
// multiprocessing with the "fork" start method, a DataLoader's workers, a pre-forking server
// that ran a model before it forked). Another thread starts a team of its own, so the
// executor runs kernels on a thread made after the fork (run_on_fresh_thread), and on the
// forked thread itself ThreadScope and parallel_for use one thread.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>

namespace onnxtrain {

namespace detail {
// Noted before any OpenMP region may start: a fork() after it leaves the child on one thread.
void note_openmp_use();
}  // namespace detail

// Whether the calling thread is the one that forked this process after it led an OpenMP team:
// a parallel region would hang on it.
bool openmp_lost_to_fork();

// Runs f on a thread this process made after its last fork (one kept for the purpose), where
// OpenMP works, and rethrows what f throws.
void run_on_fresh_thread(const std::function<void()>& f);

// Sets the calling thread's OpenMP thread count for a scope and restores it after: a session
// never leaves the process's thread setting changed (an all-cores session after a 1-thread
// one, or torch's own threads around an ORTModule call).
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : saved_(omp_get_max_threads()) {
    if (openmp_lost_to_fork()) threads = saved_ = 1;  // and 1 it stays on this thread
    if (threads > 1) detail::note_openmp_use();
    if (threads > 0 && threads != omp_get_max_threads()) omp_set_num_threads(threads);
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
  const int64_t threads = openmp_lost_to_fork() ? 1 : omp_get_max_threads();
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  // An exception must not leave an OpenMP region (the process would terminate): the first
  // one thrown is kept, the other chunks still run, and it is rethrown after the region.
  detail::note_openmp_use();
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
