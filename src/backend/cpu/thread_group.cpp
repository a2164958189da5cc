#include "backend/cpu/thread_group.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace fp8lm::cpu {

ThreadGroup::ThreadGroup(int size)
    : size_(size > 0 ? size : throw Error("thread group: size " + std::to_string(size) + " must be positive")),
      posted_(size_t(size)),
      rows_(size_t(size)),
      cols_(size_t(size)) {}

void ThreadGroup::check_rank(int rank, const char* op) const {
  if (rank < 0 || rank >= size_)
    throw Error(std::string("thread group: ") + op + " from rank " + std::to_string(rank) + " of " +
                std::to_string(size_));
}

void ThreadGroup::arrive_and_wait() {
  std::unique_lock lock(mutex_);
  if (!aborted_.empty()) throw Error("thread group: " + aborted_);
  const uint64_t generation = generation_;
  if (++waiting_ == size_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return;
  }
  arrived_.wait(lock, [&] { return generation_ != generation || !aborted_.empty(); });
  if (generation_ == generation) throw Error("thread group: " + aborted_);
}

void ThreadGroup::abort(const std::string& why) {
  const std::lock_guard lock(mutex_);
  aborted_ = why.empty() ? std::string("aborted") : why;
  arrived_.notify_all();
}

// Both collectives: post this rank's part, wait for all; read every part (each rank writes only
// its own output); wait again, so that no rank's next call reposts a part that another still reads.
// A mismatch between the ranks is seen by every rank after the first wait, so all of them throw.
void ThreadGroup::all_reduce_sum(int rank, std::span<float> data) {
  check_rank(rank, "all_reduce_sum");
  posted_[size_t(rank)] = data.data();
  rows_[size_t(rank)] = int64_t(data.size());
  arrive_and_wait();
  if (std::any_of(rows_.begin(), rows_.end(), [&](int64_t n) { return n != rows_[0]; }))
    throw Error("thread group: all_reduce_sum of " + std::to_string(data.size()) + " values on rank " +
                std::to_string(rank) + ", " + std::to_string(rows_[0]) + " on rank 0");
  std::vector<float> sum(data.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    float s = posted_[0][i];
    for (int r = 1; r < size_; ++r) s += posted_[size_t(r)][i];
    sum[i] = s;
  }
  arrive_and_wait();
  std::copy(sum.begin(), sum.end(), data.begin());
}

void ThreadGroup::all_gather_cols(int rank, std::span<const float> local, int64_t rows, int64_t cols,
                                  std::span<float> out) {
  check_rank(rank, "all_gather_cols");
  if (rows < 0 || cols < 0 || int64_t(local.size()) != rows * cols)
    throw Error("thread group: all_gather_cols of " + std::to_string(local.size()) + " values as [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "]");
  posted_[size_t(rank)] = local.data();
  rows_[size_t(rank)] = rows;
  cols_[size_t(rank)] = cols;
  arrive_and_wait();
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) total += cols_[size_t(r)];
  if (std::any_of(rows_.begin(), rows_.end(), [&](int64_t n) { return n != rows_[0]; }) ||
      int64_t(out.size()) != rows * total)
    throw Error("thread group: all_gather_cols on rank " + std::to_string(rank) + ": " + std::to_string(rows) +
                " rows (rank 0: " + std::to_string(rows_[0]) + "), output of " + std::to_string(out.size()) +
                " values for " + std::to_string(total) + " columns");
  int64_t at = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t c = cols_[size_t(r)];
    for (int64_t i = 0; i < rows; ++i)
      std::copy(posted_[size_t(r)] + i * c, posted_[size_t(r)] + (i + 1) * c, out.begin() + (i * total + at));
    at += c;
  }
  arrive_and_wait();
}

}  // namespace fp8lm::cpu
