// The CUTLASS FP8 GEMM's ping-pong configuration (cutlass_fp8_gemm.h): 64 × 128 × 128 tiles,
// no cluster, two consumer warp groups on alternate tiles (one's epilogue runs under the
// other's MMAs), a persistent grid: twice the tiles of the 128-row configurations at small m.
#include "backend/cuda/gemm/cutlass_fp8_gemm_kernel.cuh"

namespace fp8lm::cuda::cutlass_fp8 {
namespace {

using Config = Kernel<cute::Shape<cute::_64, cute::_128, cute::_128>, cute::Shape<cute::_1, cute::_1, cute::_1>,
                      cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::epilogue::TmaWarpSpecialized,
                      cutlass::gemm::PersistentScheduler>;

}  // namespace

Plan pingpong_64x128_plan(const CutlassFp8GemmArgs& a) { return plan_of<Config>(a); }

void pingpong_64x128_run(const CutlassFp8GemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail) {
  run_of<Config>(a, workspace, stream, fail);
}

}  // namespace fp8lm::cuda::cutlass_fp8
