// The block-scaled CUTLASS FP8 GEMM (cutlass_fp8_gemm.h, CutlassFp8BlockGemmArgs): 128 × 128 ×
// 128 tiles, clusters of 1 × 2, the cooperative FP8 blockwise schedule (the scales applied in
// the mainloop, once per 128-wide K block), a persistent grid.
#include "backend/cuda/cutlass_fp8_gemm_kernel.cuh"

namespace fp8lm::cuda::cutlass_fp8 {
namespace {

using Config = BlockKernel<cute::Shape<cute::_128, cute::_128, cute::_128>, cute::Shape<cute::_1, cute::_2, cute::_1>,
                           cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                           cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::gemm::PersistentScheduler>;

}  // namespace

Plan block_cooperative_128x128_plan(const CutlassFp8BlockGemmArgs& a) { return plan_of<Config>(a); }

void block_cooperative_128x128_run(const CutlassFp8BlockGemmArgs& a, void* workspace, cudaStream_t stream,
                                   const FailFn& fail) {
  run_of<Config>(a, workspace, stream, fail);
}

}  // namespace fp8lm::cuda::cutlass_fp8
