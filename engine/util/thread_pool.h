// A fork-join thread pool for the CPU forward pass, built to stay fast on a shared machine.
//
// Why not OpenMP: its workers spin at every barrier (libgomp's default spins for a long time,
// and its wait policy can only be set by environment variable before the program starts). On a
// machine where other processes compete for the cores, a descheduled worker makes its partners
// spin away their time slices at each of the ~200 barriers of a forward pass: measured on this
// project's 2-core machine under load, decode fell from 45 to 3 tokens/s with two OpenMP threads.
//
// Here:
//   - tasks are claimed one at a time from a shared counter, so a thread that the OS takes away
//     holds up at most the one task it is running; the others finish everything else;
//   - the caller runs tasks too, and waits for stragglers by yielding its core to them;
//   - idle workers spin only briefly (a forward pass issues its loops back to back), then sleep
//     on a futex (std::atomic::wait) until the next loop is published.
// A loop of one task runs inline on the caller and wakes nobody (decode of one session has many).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace streamd {

class ThreadPool {
 public:
  // threads >= 1: the caller plus threads - 1 workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task, thread) for every task in [0, n_tasks) and returns when all have run; thread
  // is 0 for the caller and 1..threads-1 for the workers, so callers can index per-thread
  // scratch space. One caller at a time (the pool is not reentrant: fn must not call
  // ParallelFor). n_tasks < 2^24. A template, not std::function: a forward pass makes ~300
  // calls per step, and none of them allocates.
  template <class Fn>
  void ParallelFor(int64_t n_tasks, Fn&& fn) {
    Run(n_tasks, &fn, [](void* f, int64_t task, int thread) {
      (*static_cast<std::remove_reference_t<Fn>*>(f))(task, thread);
    });
  }

 private:
  using Trampoline = void (*)(void* fn, int64_t task, int thread);
  struct Job {
    void* fn = nullptr;
    Trampoline call = nullptr;
    std::atomic<int64_t> done{0};
  };

  void Run(int64_t n_tasks, void* fn, Trampoline call);

  // Claims tasks of the current job and runs them until none is left.
  void RunTasks(int thread);
  // Runs the jobs published after generation `seen_gen`.
  void WorkerLoop(int thread, uint64_t seen_gen);

  // The current job's claim state: [generation:16 | n_tasks:24 | next task:24]. A claim is one
  // compare-exchange of the whole word, so a worker that succeeds holds a task of the job that
  // is current at that moment, however late it woke up; that job cannot end (nor its Job, on the
  // caller's stack, die) before the task is done.
  std::atomic<uint64_t> state_{0};
  std::atomic<Job*> job_{nullptr};
  std::atomic<uint32_t> wake_{0};  // bumped per job; sleeping workers wait on it
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace streamd
