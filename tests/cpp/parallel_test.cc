#include "core/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <thread>
#include <vector>

namespace onnxtrain {
namespace {

// Each index of [0, n) seen once, and each call one of the documented chunks
// [n * c / chunks, n * (c + 1) / chunks).
void expect_each_index_once(int64_t n, int threads, int64_t grain) {
  ThreadScope scope(threads);
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::atomic<int> calls{0};
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  std::atomic<bool> documented{true};
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    ++calls;
    bool found = false;
    for (int64_t c = 0; c < chunks; ++c) found |= begin == n * c / chunks && end == n * (c + 1) / chunks;
    if (!found && chunks > 1) documented = false;
    for (int64_t i = begin; i < end; ++i) ++seen[static_cast<size_t>(i)];
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
  EXPECT_EQ(calls.load(), std::max<int64_t>(chunks, 1));
  EXPECT_TRUE(documented.load());
}

TEST(ParallelFor, RunsEveryIndexOnceInTheDocumentedChunks) {
  for (int threads : {1, 2, 3, 4})
    for (int64_t n : {1, 2, 3, 7, 8, 100, 1001})
      for (int64_t grain : {1, 4, 1000}) expect_each_index_once(n, threads, grain);
}

TEST(ParallelFor, ManyLoopsInARowLoseNoChunk) {
  // Loops follow each other faster than a worker wakes: chunks are claimed by whoever comes.
  ThreadScope scope(4);
  std::atomic<int64_t> sum{0};
  for (int loop = 0; loop < 20000; ++loop) {
    parallel_for(64, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    });
  }
  EXPECT_EQ(sum.load(), 20000 * (63 * 64 / 2));
}

TEST(ParallelFor, AnExceptionInAChunkIsRethrownAfterTheRegion) {
  ThreadScope threads(2);
  std::atomic<int64_t> done{0};
  EXPECT_THROW(parallel_for(1000, 1,
                            [&](int64_t begin, int64_t end) {
                              if (begin == 0) throw std::runtime_error("chunk 0 failed");
                              done += end - begin;
                            }),
               std::runtime_error);
  EXPECT_GT(done.load(), 0);  // the other chunk ran to its end
  // and the workers still run the next loop
  std::atomic<int64_t> next{0};
  parallel_for(1000, 1, [&](int64_t begin, int64_t end) { next += end - begin; });
  EXPECT_EQ(next.load(), 1000);
}

TEST(ParallelFor, InsideAChunkLoopsRunSerially) {
  ThreadScope scope(4);
  std::atomic<int> nested_calls{0};
  parallel_for(4, 1, [&](int64_t, int64_t) {
    parallel_for(100, 1, [&](int64_t begin, int64_t end) {
      ++nested_calls;
      if (begin != 0 || end != 100) ADD_FAILURE() << "a nested loop was split";
    });
  });
  EXPECT_EQ(nested_calls.load(), 4);
  EXPECT_EQ(omp_get_max_threads(), 4);
}

TEST(ParallelFor, ThreadsCallingAtOnceLoseNoChunk) {
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      ThreadScope scope(2 + t % 2);
      for (int loop = 0; loop < 2000; ++loop) {
        std::atomic<int64_t> sum{0};
        parallel_for(100, 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) sum += i;
        });
        if (sum.load() != 4950) ++wrong;
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ParallelFor, TheChunksRunOnSeveralThreadsAtOnce) {
  // Each chunk waits until both have started: on one thread the loop would not finish.
  ThreadScope scope(2);
  std::atomic<int> arrived{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  parallel_for(2, 1, [&](int64_t, int64_t) {
    ++arrived;
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 2);
}

TEST(ParallelFor, TheFreshThreadServesCallersInTurn) {
  std::atomic<int> ran{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) run_on_fresh_thread([&] { ++ran; });
    });
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(ran.load(), 800);
}

TEST(ParallelFor, AForkedChildRunsOnOneThreadOrOnAFreshOne) {
  // GCC's OpenMP hangs in a child's first region once the parent has a team: on the thread
  // that forked, loops run serially; on a fresh thread, in parallel again.
  ThreadScope scope(2);
  std::atomic<int64_t> warm{0};
  parallel_for(100, 1, [&](int64_t begin, int64_t end) { warm += end - begin; });  // a team of two exists
  EXPECT_FALSE(openmp_lost_to_fork());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a hang ends the child with SIGALRM
    std::atomic<int64_t> sum{0};
    std::atomic<int> chunks{0};
    ThreadScope in_child(2);
    for (int loop = 0; loop < 100; ++loop) {
      parallel_for(100, 1, [&](int64_t begin, int64_t end) {
        ++chunks;
        sum += end - begin;
      });
    }
    const bool one_thread = openmp_lost_to_fork() && omp_get_max_threads() == 1 && chunks.load() == 100;
    std::atomic<int> fresh_chunks{0};
    bool fresh_lost = true;
    run_on_fresh_thread([&] {
      ThreadScope on_fresh(2);
      fresh_lost = openmp_lost_to_fork();
      parallel_for(100, 1, [&](int64_t, int64_t) { ++fresh_chunks; });
    });
    bool rethrown = false;
    try {
      run_on_fresh_thread([] { throw std::runtime_error("in the fresh thread"); });
    } catch (const std::runtime_error&) {
      rethrown = true;
    }
    const bool fresh_parallel = !fresh_lost && fresh_chunks.load() == 2 && rethrown;
    _exit(sum.load() == 100 * 100 && one_thread && fresh_parallel ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace onnxtrain
