// Items of work shared between the calling thread and helper threads that may never come.
//
// parallel_for's OpenMP team splits the work up front and ends in a barrier: each thread
// must run its share, and the caller waits for the last one. On a machine busy with other
// work (two cores, a load of four to six), a helper waits milliseconds for a core, and an
// op of 0.4-2 ms on two threads took 10-25 times its one-thread time, where onnxruntime,
// whose pool withdraws the work its threads have not started, took its one-thread time.
//
// share_work does what onnxruntime's pool does: the caller and up to threads - 1 helpers
// (std::threads kept for the process) claim items from one counter, and once no item is
// left the caller withdraws the work and waits only for helpers in the middle of an item.
// A helper that never got a core costs nothing; on an idle machine the helpers, spinning
// 200 us after each job before they sleep, take their share as a team would.
//
// Items run with one OpenMP thread (parallel_for inside them runs inline; oneDNN's
// primitives should be created for one thread). Only one share_work runs on the helpers at
// a time: another caller meanwhile (a second session, a nested call) runs its items alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace onnxtrain {

namespace detail {
// run(context, item, slot) for each item of [0, n): see share_work.
void share_work(int64_t n, int64_t grain, int threads, void (*run)(void*, int64_t, int), void* context);
}  // namespace detail

// Calls f(item, slot) once for every item in [0, n), items claimed `grain` at a time, on the
// calling thread and up to threads - 1 helpers; `slot` in [0, threads) names the thread
// (the caller is 0), so that each has buffers of its own. The first exception an item
// throws is rethrown once every claimed item has run.
template <typename F>
void share_work(int64_t n, int64_t grain, int threads, F&& f) {
  using Function = std::remove_reference_t<F>;
  detail::share_work(
      n, grain, threads, [](void* context, int64_t item, int slot) { (*static_cast<Function*>(context))(item, slot); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// Calls f(begin, end) over [0, n) in ranges of at least `grain` items, about four per
// thread, shared as share_work's items (parallel_for's form).
template <typename F>
void share_ranges(int64_t n, int64_t grain, int threads, F&& f) {
  if (n <= 0) return;
  const int64_t size = std::max<int64_t>({grain, 1, (n + 4 * threads - 1) / (4 * std::max(threads, 1))});
  share_work((n + size - 1) / size, 1, threads,
             [&](int64_t range, int) { f(range * size, std::min(n, (range + 1) * size)); });
}

}  // namespace onnxtrain
