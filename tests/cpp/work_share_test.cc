#include "core/work_share.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace onnxtrain {
namespace {

// Every item once, every slot below the thread count, and a slot never on two threads at
// once.
void expect_each_item_once(int64_t n, int64_t grain, int threads) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::vector<std::atomic<int>> in_slot(static_cast<size_t>(threads));
  std::atomic<bool> slots_ok{true};
  share_work(n, grain, threads, [&](int64_t item, int slot) {
    if (slot < 0 || slot >= threads || in_slot[static_cast<size_t>(slot)].fetch_add(1) != 0) slots_ok = false;
    ++seen[static_cast<size_t>(item)];
    if (omp_get_max_threads() != 1) slots_ok = false;  // items run with one OpenMP thread
    in_slot[static_cast<size_t>(slot)].fetch_sub(1);
  });
  EXPECT_TRUE(slots_ok) << "n " << n << " grain " << grain << " threads " << threads;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "item " << i << " of " << n;
}

TEST(WorkShare, RunsEachItemOnceOnValidSlots) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t n : {0, 1, 2, 7, 64, 1001})
      for (int64_t grain : {1, 3, 100}) expect_each_item_once(n, grain, threads);
}

TEST(WorkShare, RangesCoverEachIndexOnce) {
  for (int threads : {1, 2, 3})
    for (int64_t n : {0, 1, 5, 64, 1001})
      for (int64_t grain : {1, 7, 5000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        share_ranges(n, grain, threads, [&](int64_t begin, int64_t end) {
          EXPECT_TRUE(end - begin >= std::min(grain, n) || end == n) << begin << ".." << end;
          for (int64_t i = begin; i < end; ++i) ++seen[static_cast<size_t>(i)];
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "index " << i << " of " << n;
      }
}

TEST(WorkShare, ManyJobsInARow) {
  // Jobs back to back: helpers still in one job must not run items of the next as the old.
  for (int round = 0; round < 2000; ++round) expect_each_item_once(1 + round % 13, 1, 2);
}

TEST(WorkShare, RethrowsTheFirstExceptionAfterEveryItem) {
  std::atomic<int> ran{0};
  EXPECT_THROW(share_work(50, 1, 2,
                          [&](int64_t item, int) {
                            ++ran;
                            if (item % 10 == 3) throw std::runtime_error("item failed");
                          }),
               std::runtime_error);
  EXPECT_EQ(ran, 50);
}

TEST(WorkShare, NestedAndConcurrentCallsRunAlone) {
  std::atomic<int64_t> total{0};
  share_work(4, 1, 2, [&](int64_t, int) {
    share_work(10, 1, 2, [&](int64_t item, int slot) {
      EXPECT_EQ(slot, 0);  // the pool is taken: the inner call runs on its caller
      total += item;
    });
  });
  EXPECT_EQ(total, 4 * 45);
  std::vector<std::thread> callers;
  std::atomic<int64_t> sum{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int round = 0; round < 200; ++round) share_work(20, 1, 2, [&](int64_t item, int) { sum += item; });
    });
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(sum, 4 * 200 * 190);
}

}  // namespace
}  // namespace onnxtrain
