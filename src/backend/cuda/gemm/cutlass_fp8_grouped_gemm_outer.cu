// The grouped CUTLASS FP8 GEMM with per-row × per-channel scales in the epilogue
// (cutlass_fp8_grouped_gemm.h, CutlassGroupedScales::kOuter).
#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm_kernel.cuh"

namespace fp8lm::cuda::cutlass_grouped {

size_t outer_workspace_bytes(const CutlassFp8GroupedGemmArgs& a) { return workspace_bytes<OuterConfig>(a); }

void outer_run(const CutlassFp8GroupedGemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail) {
  run<OuterConfig>(a, workspace, stream, fail);
}

}  // namespace fp8lm::cuda::cutlass_grouped
