#include "engine/util/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstdlib>

#include "kernels/common/check.h"

namespace streamd {
namespace {

constexpr int kFieldBits = 24;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;

// Spin iterations an idle worker waits for the next loop before it sleeps: a pause is ~40-140
// cycles, so this is some tens of microseconds, longer than the gap between the loops of one
// forward pass and far shorter than an OS time slice.
constexpr int kSpinIterations = 2000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

inline uint64_t Pack(uint64_t gen, uint64_t n_tasks, uint64_t next) {
  return (gen << (2 * kFieldBits)) | (n_tasks << kFieldBits) | next;
}
inline uint64_t GenOf(uint64_t state) { return state >> (2 * kFieldBits); }
inline int64_t TasksOf(uint64_t state) {
  return static_cast<int64_t>((state >> kFieldBits) & kFieldMask);
}
inline int64_t NextOf(uint64_t state) { return static_cast<int64_t>(state & kFieldMask); }

}  // namespace

ThreadPool::ThreadPool(int threads) {
  // The generation a worker starts from is read here, not when its thread first runs: a thread
  // the OS starts late would otherwise take a job published meanwhile for one it had seen, and
  // skip it (the caller then ran it alone).
  const uint64_t gen = GenOf(state_.load(std::memory_order_acquire));
  for (int t = 1; t < threads; ++t) {
    workers_.emplace_back([this, t, gen] { WorkerLoop(t, gen); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::Run(int64_t n_tasks, void* fn, Trampoline call) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || workers_.empty()) {
    for (int64_t t = 0; t < n_tasks; ++t) call(fn, t, 0);
    return;
  }
  STREAMD_CHECK_MSG(static_cast<uint64_t>(n_tasks) <= kFieldMask,
                    "more tasks than a round can count");  // far beyond any forward pass
  Job job;
  job.fn = fn;
  job.call = call;
  job_.store(&job, std::memory_order_relaxed);
  const uint64_t gen = (GenOf(state_.load(std::memory_order_relaxed)) + 1) & 0xffff;
  state_.store(Pack(gen, static_cast<uint64_t>(n_tasks), 0), std::memory_order_seq_cst);
  wake_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_.notify_all();
  RunTasks(0);
  // Stragglers: a worker still running a task (perhaps descheduled). Give it the core.
  for (int spin = 0; job.done.load(std::memory_order_acquire) < n_tasks; ++spin) {
    if (spin < kSpinIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::RunTasks(int thread) {
  uint64_t s = state_.load(std::memory_order_acquire);
  while (NextOf(s) < TasksOf(s)) {
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // s was reloaded
    }
    Job* job = job_.load(std::memory_order_relaxed);  // ordered by the acquire above
    job->call(job->fn, NextOf(s), thread);
    job->done.fetch_add(1, std::memory_order_acq_rel);  // the last access to *job
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int thread, uint64_t seen_gen) {
  while (true) {
    // Wait for a new job: spin briefly, then sleep until the next one is published.
    int spin = 0;
    while (GenOf(state_.load(std::memory_order_acquire)) == seen_gen) {
      if (stop_.load(std::memory_order_relaxed)) return;
      if (++spin < kSpinIterations) {
        CpuRelax();
        continue;
      }
      const uint32_t w = wake_.load(std::memory_order_seq_cst);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (GenOf(state_.load(std::memory_order_seq_cst)) == seen_gen &&
          !stop_.load(std::memory_order_seq_cst)) {
        wake_.wait(w, std::memory_order_seq_cst);
      }
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      spin = 0;
    }
    seen_gen = GenOf(state_.load(std::memory_order_acquire));
    RunTasks(thread);
  }
}

}  // namespace streamd
