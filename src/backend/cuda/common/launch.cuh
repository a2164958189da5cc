// Kernel launches as programmatic dependents (Hopper PDL), shared by the kernel files (.cu only).
//
// Inside a decode step every kernel is short (2–40 µs) and each waits for the one before, so the
// gaps between kernels — launch, block scheduling, the ramp of the first loads — are a large part
// of the step. With a programmatic launch the next kernel's blocks are scheduled while the
// current kernel still runs; they stop at griddepcontrol.wait until it has completed and its
// writes are visible. The GEMV uses the time before its wait to start streaming its weights
// (constants), so its ramp overlaps the kernel before it.
//
// The contract every kernel launched through launch_dependent() keeps:
//   * pdl_wait() comes before its first access (read or write) to memory that another kernel
//     of the stream writes or reads — only constants (weights, tables) may be read before it,
//     and what was written before the step's kernels began: the step's metadata (copied in
//     ahead of its first kernel) and the KV cache of earlier steps' positions;
//   * pdl_release() may come anywhere (early is better: it lets the next kernel's blocks in);
//     a kernel that never calls it releases its dependents when it exits.
// Waits are transitive (a kernel completes only after its own wait returned), so ordering over
// a chain of such kernels is that of plain launches. Kernels launched the plain way ignore both
// calls: pdl_wait() returns at once when there is no programmatic predecessor.
//
// FP8LM_CUDA_PDL=0 in the environment launches everything the plain way (for A/B measurements).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/env_switch.h"

namespace fp8lm::cuda {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Whether launches are programmatic (read once from FP8LM_CUDA_PDL; default on).
inline bool pdl_enabled() {
  static const bool on = env_switch_on("FP8LM_CUDA_PDL");
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the kernel
// before it on the stream when `programmatic` and pdl_enabled(); the kernel keeps the contract above.
template <typename... Params, typename... Args>
void launch_maybe_dependent(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = programmatic && pdl_enabled() ? 1 : 0;
  FP8LM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  launch_maybe_dependent(true, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace fp8lm::cuda
