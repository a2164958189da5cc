#include "common/thread_pool.h"

#include <string>

#include "common/error.h"

namespace fp8lm {

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw Error("thread pool: threads must be >= 1, got " + std::to_string(threads));
  workers_.reserve(size_t(threads - 1));
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::run_tasks(int thread) {
  for (;;) {
    const int64_t task = next_.fetch_add(1, std::memory_order_relaxed);
    if (task >= tasks_) return;
    try {
      (*job_)(task, thread);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(tasks_, std::memory_order_relaxed);  // skip the rest
    }
  }
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_tasks(thread);
    {
      std::lock_guard lock(mutex_);
      --busy_;
    }
    done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t tasks, const std::function<void(int64_t, int)>& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    busy_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_tasks(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    job_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fp8lm
