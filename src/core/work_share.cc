#include "core/work_share.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "core/parallel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace onnxtrain::detail {
namespace {

void relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// One share_work call: its items and the first exception they threw.
struct Job {
  int64_t n = 0, grain = 1;
  int threads = 1;
  void (*run)(void*, int64_t, int) = nullptr;
  void* context = nullptr;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // written by the thread that set `failed`

  // Claims and runs items until none is left.
  void work(int slot) {
    while (true) {
      const int64_t first = next.fetch_add(grain, std::memory_order_relaxed);
      if (first >= n) return;
      for (int64_t i = first, last = std::min(n, first + grain); i < last; ++i) {
        try {
          run(context, i, slot);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
    }
  }
};

// The helpers and the job they may join. The caller that publishes a job (current_ from
// null to its job) owns the pool until it withdraws it; helpers count themselves in active_
// before they look at current_, so once the owner has withdrawn the job and seen active_
// at 0, no helper can reach it any more (and the next job cannot be mistaken for it).
class HelperPool {
 public:
  static constexpr int kMaxHelpers = 63;

  HelperPool() {
    pthread_atfork(nullptr, nullptr, [] { instance().after_fork(); });
  }

  static HelperPool& instance() {
    static HelperPool pool;  // helpers are detached and never stop: nothing to join at exit
    return pool;
  }

  // Runs the job on this thread and whatever helpers come; false when another job holds
  // the pool (then nothing ran).
  bool run(Job& job) {
    Job* none = nullptr;
    if (!current_.compare_exchange_strong(none, &job)) return false;
    grow(std::min(job.threads - 1, kMaxHelpers));
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    job.work(0);
    current_.store(nullptr);
    // Only helpers in the middle of an item (or about to see that there is none) remain.
    for (int spins = 0; active_.load() != 0; ++spins) {
      if (spins < 4096) {
        relax();
      } else {
        std::this_thread::yield();
      }
    }
    return true;
  }

 private:
  // Called by the pool's owner only.
  void grow(int wanted) {
    for (; helpers_ < wanted; ++helpers_) {
      const int index = helpers_;
      const uint32_t seen = generation_.load(std::memory_order_acquire);
      std::thread([this, index, seen] { serve(index, seen); }).detach();
    }
  }

  void serve(int index, uint32_t seen) {
    omp_set_num_threads(1);  // parallel_for inside an item runs inline
    while (true) {
      wait_for_job(seen);
      seen = generation_.load(std::memory_order_acquire);
      active_.fetch_add(1);
      Job* job = current_.load();
      if (job != nullptr && index + 1 < job->threads) job->work(index + 1);
      active_.fetch_sub(1);
    }
  }

  // Waits for the next job: spinning for 200 us, then asleep until the generation changes.
  // A helper that slept after each job (it spun 50 us from its last item, which can end 70 us
  // before the job does) had to be woken for the next: on a busy machine the woken thread
  // waited for a core while the caller did all the work, and yielding the core while
  // waiting did the same. Longer spins would take a core from the OpenMP team of the op
  // that follows.
  void wait_for_job(uint32_t seen) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (int spins = 0; generation_.load(std::memory_order_acquire) == seen; ++spins) {
      relax();
      if (spins % 64 == 63 && std::chrono::steady_clock::now() > until) {
        generation_.wait(seen, std::memory_order_acquire);
        return;
      }
    }
  }

  // In a forked child only the forking thread lives: no helper, no job in flight.
  void after_fork() {
    current_.store(nullptr);
    active_.store(0);
    helpers_ = 0;
  }

  std::atomic<Job*> current_{nullptr};
  std::atomic<int> active_{0};
  std::atomic<uint32_t> generation_{0};
  int helpers_ = 0;  // started so far; changed by the pool's owner only
};

}  // namespace

void share_work(int64_t n, int64_t grain, int threads, void (*run)(void*, int64_t, int), void* context) {
  if (n <= 0) return;
  Job job;
  job.n = n;
  job.grain = std::max<int64_t>(grain, 1);
  job.threads = static_cast<int>(std::min<int64_t>(threads, (n + job.grain - 1) / job.grain));
  job.run = run;
  job.context = context;
  {
    ThreadScope one(1);
    if (job.threads <= 1 || !HelperPool::instance().run(job)) job.work(0);
  }
  if (job.failed.load()) std::rethrow_exception(job.error);
}

}  // namespace onnxtrain::detail
