#include "core/parallel.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace onnxtrain {
namespace {

thread_local bool led_team = false;  // this thread started an OpenMP region (or may have)
thread_local bool lost = false;      // ... and then forked: regions would hang on it
std::atomic<int> forks{0};

// Runs in the child right after fork(), before OpenMP's own handlers may have run (LLVM's
// runtime has some): it must not call into OpenMP. The marked thread's setting drops to one
// at its next ThreadScope.
void after_fork_in_child() {
  lost = lost || led_team;
  forks.fetch_add(1, std::memory_order_relaxed);
}

const bool registered = [] {  // when the library loads
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  return true;
}();

// A thread that runs one task at a time for the threads that cannot use OpenMP. Never
// destroyed (its thread is detached): nothing to join when the process exits.
class FreshThread {
 public:
  FreshThread() {
    std::thread([this] { serve(); }).detach();
  }

  // Callers take turns: the next one starts when the last has taken its result.
  void run(const std::function<void()>& f) {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return task_ == nullptr && finished_ == nullptr; });
    task_ = &f;
    ready_.notify_all();
    idle_.wait(lock, [&] { return finished_ == &f; });
    finished_ = nullptr;
    const std::exception_ptr error = std::exchange(error_, nullptr);
    idle_.notify_all();
    if (error) std::rethrow_exception(error);
  }

 private:
  void serve() {
    std::unique_lock lock(mutex_);
    while (true) {
      ready_.wait(lock, [&] { return task_ != nullptr; });
      const std::function<void()>* task = task_;
      lock.unlock();
      std::exception_ptr error;
      try {
        (*task)();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      finished_ = task;
      task_ = nullptr;
      idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_, idle_;
  const std::function<void()>* task_ = nullptr;
  const std::function<void()>* finished_ = nullptr;
  std::exception_ptr error_;
};

}  // namespace

void detail::note_openmp_use() {
  led_team = true;
}

bool openmp_lost_to_fork() {
  return lost;
}

void run_on_fresh_thread(const std::function<void()>& f) {
  // One per fork: a grandchild has none of its parent's threads (the old object is left as it is).
  static std::mutex mutex;
  static FreshThread* fresh = nullptr;
  static int made_after = -1;
  FreshThread* thread = nullptr;
  {
    const std::lock_guard lock(mutex);
    if (fresh == nullptr || made_after != forks.load(std::memory_order_relaxed)) {
      fresh = new FreshThread();
      made_after = forks.load(std::memory_order_relaxed);
    }
    thread = fresh;
  }
  thread->run(f);
}

}  // namespace onnxtrain
