// The collectives of tensor parallelism between ranks that are threads of one process: the CPU
// ranks that run a split model without GPUs (issue 22), where NCCL's all-reduce and all-gather
// serve GPU ranks. Every rank of the group calls each collective in the same order, each from
// its own thread; a call returns once every rank's part is done.
//
// Deterministic: the all-reduce adds the ranks' values in rank order from rank 0, in float32, so
// every rank gets the same bytes on every run.
#pragma once

#include <barrier>
#include <cstdint>
#include <span>
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

 private:
  void check_rank(int rank, const char* op) const;
  int size_;
  std::barrier<> barrier_;
  std::vector<const float*> posted_;
  std::vector<int64_t> rows_, cols_;
};

}  // namespace fp8lm::cpu
