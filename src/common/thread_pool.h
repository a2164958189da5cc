// A small fixed pool of worker threads (the CPU backend's ops, perplexity). The calling
// thread works too: a pool of `threads` runs tasks on `threads` threads in all.
// Tasks are handed out by an atomic counter, so which thread runs a task
// varies; ops keep results deterministic by making each task own its outputs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fp8lm {

class ThreadPool {
 public:
  // threads ≥ 1 (fp8lm::Error otherwise); 1 = everything on the caller.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Runs fn(task, thread) for every task in [0, tasks) and returns when all are
  // done; thread ∈ [0, size()) indexes per-thread scratch. Not reentrant: one
  // parallel_for at a time per pool. The first exception thrown by a task is
  // rethrown here (the remaining tasks are skipped).
  void parallel_for(int64_t tasks, const std::function<void(int64_t task, int thread)>& fn);

 private:
  void worker_loop(int thread);
  void run_tasks(int thread);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // The current job, guarded by mutex_ except for the atomic counter.
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t tasks_ = 0;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::atomic<int64_t> next_{0};
};

}  // namespace fp8lm
