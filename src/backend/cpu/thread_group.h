// The collectives of tensor parallelism between ranks that are threads of one process: the CPU
// ranks that run a split model without GPUs (issue 22), where NCCL's all-reduce and all-gather
// serve GPU ranks. Every rank of the group calls each collective in the same order, each from
// its own thread; a call returns once every rank's part is done.
//
// Deterministic: the all-reduce adds the ranks' values in rank order from rank 0, in float32, so
// every rank gets the same bytes on every run.
//
// A rank that fails between collectives would leave the others waiting for it for ever: abort()
// (from any thread) makes every waiting and every later collective throw instead.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace fp8lm::cpu {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  int size() const { return size_; }

  // data (the same length on every rank) becomes the element-wise sum over the ranks.
  void all_reduce_sum(int rank, std::span<float> data);

  // Each rank's `local` [rows, cols_r] (rows the same on every rank) side by side in rank order:
  // out [rows, Σ cols_r] on every rank.
  void all_gather_cols(int rank, std::span<const float> local, int64_t rows, int64_t cols, std::span<float> out);

  // Every collective waiting now and every later one throws fp8lm::Error with `why`.
  void abort(const std::string& why);

 private:
  void check_rank(int rank, const char* op) const;
  // Waits until every rank has arrived (the group's barrier), or throws once aborted.
  void arrive_and_wait();
  int size_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  std::string aborted_;  // why, once aborted
  std::vector<const float*> posted_;
  std::vector<int64_t> rows_, cols_;
};

}  // namespace fp8lm::cpu
