#include "backend/factory/make_ops.h"

#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_rank_group.h"
#include "common/error.h"
#ifdef FP8LM_WITH_CUDA  // the CUDA backend exists only in a -DFP8LM_CUDA=ON build
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/comm/nccl_group.h"
#endif

namespace fp8lm::backend {

std::unique_ptr<Ops> make_ops(const BackendOptions& options) {
  if (options.device == Device::kCpu) return std::make_unique<cpu::CpuOps>(options.threads, options.kernels, options.cpu_pad_decode_batches);
#ifdef FP8LM_WITH_CUDA
  return std::make_unique<cuda::CudaOps>(cuda::CudaOpsOptions{
      .device = options.cuda_device, .cuda_graphs = options.cuda_graphs, .decode_kernel = options.decode_kernel});
#else
  throw Error("--device cuda: this fp8lm was built without the CUDA backend (configure with -DFP8LM_CUDA=ON)");
#endif
}

}  // namespace fp8lm::backend

namespace fp8lm::backend {
std::unique_ptr<RankGroup> make_rank_group(const BackendOptions& options, int size) {
  if (size < 2) throw Error("a tensor-parallel group of " + std::to_string(size) + " ranks: it takes 2 or more");
  if (options.device == Device::kCpu) return cpu::make_thread_rank_group(size, options.threads, options.kernels, options.cpu_pad_decode_batches);
#ifdef FP8LM_WITH_CUDA
  return cuda::make_nccl_rank_group(size, options.cuda_graphs);
#else
  throw Error("--device cuda: this fp8lm was built without the CUDA backend (configure with -DFP8LM_CUDA=ON)");
#endif
}

}  // namespace fp8lm::backend
