// Tensor-parallel ranks on GPUs: rank r a CudaOps on device r, the ranks linked by an NCCL
// communicator (one process, a thread per rank: engine/model_runner.h). NCCL's all-reduce sums
// BF16 in BF16 as vLLM's does; its ring gives every rank the same bytes.
#pragma once

#include <memory>

#include "backend/cuda/rank_link.h"
#include "backend/rank_group.h"

struct ncclComm;  // nccl.h

namespace fp8lm::cuda {

// One rank's NCCL communicator as a RankLink; owns it (destroyed, or aborted once by abort()).
class NcclLink final : public RankLink {
 public:
  NcclLink(ncclComm* comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclLink() override;
  NcclLink(const NcclLink&) = delete;
  NcclLink& operator=(const NcclLink&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(__nv_bfloat16* data, int64_t n, cudaStream_t stream) override;
  void all_gather(const void* local, void* out, int64_t bytes, cudaStream_t stream) override;
  bool capturable() const override { return true; }
  // Ends every operation of the communicator now (ncclCommAbort): a rank waiting in one for a
  // rank that failed returns. Callable from another thread; the link is dead afterwards.
  void abort();

 private:
  ncclComm* comm_;
  int rank_, size_;
  bool aborted_ = false;
};

// `size` ranks on GPUs 0..size-1. Throws fp8lm::Error when the machine has fewer GPUs or NCCL
// cannot be opened (nccl_library.h).
std::unique_ptr<backend::RankGroup> make_nccl_rank_group(int size, bool cuda_graphs);

}  // namespace fp8lm::cuda
