// The grouped CUTLASS FP8 GEMM with 1 × 128 activation groups and 128 × 128 weight blocks scaled
// in the mainloop (cutlass_fp8_grouped_gemm.h, CutlassGroupedScales::kBlock).
#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm_kernel.cuh"

namespace fp8lm::cuda::cutlass_grouped {

size_t block_workspace_bytes(const CutlassFp8GroupedGemmArgs& a) { return workspace_bytes<BlockConfig>(a); }

void block_run(const CutlassFp8GroupedGemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail) {
  run<BlockConfig>(a, workspace, stream, fail);
}

}  // namespace fp8lm::cuda::cutlass_grouped
