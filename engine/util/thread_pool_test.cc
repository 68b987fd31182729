#include "engine/util/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace streamd {
namespace {

// Every task runs exactly once, on a valid thread index, over many back-to-back loops of
// random sizes (the pattern of a forward pass), including more threads than this machine has
// cores (workers get descheduled mid-loop).
TEST(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  std::mt19937 rng(std::random_device{}());
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int loop = 0; loop < 2000; ++loop) {
      const int64_t n = static_cast<int64_t>(rng() % 300);
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      std::atomic<int> bad_thread{0};
      pool.ParallelFor(n, [&](int64_t task, int thread) {
        runs[static_cast<size_t>(task)].fetch_add(1);
        if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
      });
      for (int64_t t = 0; t < n; ++t) {
        ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1)
            << "threads " << threads << " loop " << loop << " task " << t << " of " << n;
      }
      ASSERT_EQ(bad_thread.load(), 0);
    }
  }
}

// Results written by the tasks are visible to the caller when ParallelFor returns, and per-thread
// scratch indexed by the thread argument is never shared by two running tasks.
TEST(ThreadPoolTest, PerThreadScratchAndVisibleResults) {
  constexpr int kThreads = 4;
  ThreadPool pool(kThreads);
  std::vector<std::atomic<int>> in_use(kThreads);
  std::atomic<int> overlaps{0};
  for (int loop = 0; loop < 200; ++loop) {
    std::vector<int64_t> out(1000, -1);
    pool.ParallelFor(1000, [&](int64_t task, int thread) {
      if (in_use[static_cast<size_t>(thread)].fetch_add(1) != 0) overlaps.fetch_add(1);
      out[static_cast<size_t>(task)] = task * task;
      in_use[static_cast<size_t>(thread)].fetch_sub(1);
    });
    for (int64_t t = 0; t < 1000; ++t) ASSERT_EQ(out[static_cast<size_t>(t)], t * t);
  }
  EXPECT_EQ(overlaps.load(), 0);
}

// Workers that went to sleep between loops wake up for the next one: a loop after a long pause
// still spreads over several threads.
TEST(ThreadPoolTest, SleepingWorkersWakeForTheNextLoop) {
  ThreadPool pool(3);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers fall asleep
    std::vector<std::atomic<int>> by_thread(3);
    pool.ParallelFor(300, [&](int64_t, int thread) {
      by_thread[static_cast<size_t>(thread)].fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    int used = 0;
    for (auto& c : by_thread) used += c.load() > 0;
    EXPECT_GE(used, 2) << "round " << round;
  }
}

// A worker whose thread starts only after the caller published the first loop still runs it.
// Pinned to one CPU, a new thread cannot run before its creator yields, so the loop is always
// published first; its two tasks can only finish if both run at once.
TEST(ThreadPoolTest, AWorkerThatStartsLateStillRunsTheFirstLoop) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &before)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // this thread; new threads inherit it
  std::atomic<int> started{0}, met{0};
  {
    ThreadPool pool(2);
    pool.ParallelFor(2, [&](int64_t, int) {
      started.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      if (started.load() == 2) met.fetch_add(1);
    });
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(before), &before), 0);
  EXPECT_EQ(met.load(), 2) << "the worker skipped the loop published before it first ran";
}

}  // namespace
}  // namespace streamd
