#include "backend/cpu/cpu_rank_group.h"

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_group.h"

namespace fp8lm::cpu {
namespace {

class ThreadRankGroup final : public backend::RankGroup {
 public:
  ThreadRankGroup(int size, int threads, KernelChoice kernels, bool pad)
      : group_(size), threads_(threads), kernels_(kernels), pad_(pad) {}
  int size() const override { return group_.size(); }
  std::unique_ptr<backend::Ops> make_rank(int rank) override {
    auto ops = std::make_unique<CpuOps>(threads_, kernels_, pad_);
    ops->join_group(group_, rank);
    return ops;
  }
  void abort(const std::string& why) override { group_.abort(why); }

 private:
  ThreadGroup group_;
  int threads_;
  KernelChoice kernels_;
  bool pad_;
};

}  // namespace

std::unique_ptr<backend::RankGroup> make_thread_rank_group(int size, int threads, KernelChoice kernels,
                                                           bool pad_decode_batches) {
  return std::make_unique<ThreadRankGroup>(size, threads, kernels, pad_decode_batches);
}

}  // namespace fp8lm::cpu
