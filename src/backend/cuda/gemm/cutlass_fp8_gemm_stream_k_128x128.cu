// The CUTLASS FP8 GEMM with stream-K scheduling (cutlass_fp8_gemm.h): 128 × 128 × 128 tiles,
// clusters of 1 × 2, the cooperative schedule (both consumer warp groups on one tile), K split
// over CTAs where there are fewer tiles than SMs (m = 256 on Llama-3.1-8B's N = 4096 shapes: 64
// tiles for 132 SMs), the partial sums reduced through the workspace.
#include "backend/cuda/gemm/cutlass_fp8_gemm_kernel.cuh"

namespace fp8lm::cuda::cutlass_fp8 {
namespace {

using Config = Kernel<cute::Shape<cute::_128, cute::_128, cute::_128>, cute::Shape<cute::_1, cute::_2, cute::_1>,
                      cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                      cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::gemm::StreamKScheduler>;

}  // namespace

Plan stream_k_128x128_plan(const CutlassFp8GemmArgs& a) { return plan_of<Config>(a); }

void stream_k_128x128_run(const CutlassFp8GemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail) {
  run_of<Config>(a, workspace, stream, fail);
}

}  // namespace fp8lm::cuda::cutlass_fp8
