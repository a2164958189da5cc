// How a CudaOps that is one rank of a tensor-parallel group reaches the other ranks: the two
// collectives the split model needs, queued on the rank's stream. NCCL serves GPU ranks
// (nccl_group.h); tests put several ranks on one GPU through a link of their own.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8lm::cuda {

class RankLink {
 public:
  virtual ~RankLink() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data (n BF16 values on this rank's device, the same n on every rank) becomes the
  // element-wise sum over the ranks, queued on `stream`.
  virtual void all_reduce_sum(__nv_bfloat16* data, int64_t n, cudaStream_t stream) = 0;
  // out (size() × bytes) = every rank's `bytes` bytes of `local`, in rank order, queued on `stream`.
  virtual void all_gather(const void* local, void* out, int64_t bytes, cudaStream_t stream) = 0;
  // Whether the calls may be captured into a CUDA graph (NCCL's may).
  virtual bool capturable() const = 0;
};

}  // namespace fp8lm::cuda
