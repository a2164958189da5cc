// The grouped CUTLASS FP8 GEMM (cutlass_fp8_grouped_gemm.h): the argument checks, then the scale
// scheme's configuration (cutlass_fp8_grouped_gemm_{outer,block}.cu).
#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm.h"

#include <climits>

#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm_configs.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "common/error.h"

namespace fp8lm::cuda {

std::string cutlass_fp8_grouped_gemm_shape_unsupported(CutlassGroupedScales scales, int64_t n, int64_t k) {
  if (scales != CutlassGroupedScales::kOuter && scales != CutlassGroupedScales::kBlock)
    return "unknown scale scheme " + std::to_string(int(scales));
  if (n < 1 || k < 1) return "the shape must be positive";
  if (n > INT_MAX || k > INT_MAX) return "every dimension must be below 2^31";
  if (k % 16 != 0) return "k = " + std::to_string(k) + " is not a multiple of 16";
  if (n % 8 != 0) return "n = " + std::to_string(n) + " is not a multiple of 8";
  if (scales == CutlassGroupedScales::kBlock && (k % 128 != 0 || n % 128 != 0))
    return "block scales need n and k multiples of 128, got n = " + std::to_string(n) + ", k = " + std::to_string(k);
  return {};
}

std::string cutlass_fp8_grouped_gemm_unsupported(const CutlassFp8GroupedGemmArgs& a) {
  if (std::string why = cutlass_fp8_grouped_gemm_shape_unsupported(a.scales, a.n, a.k); !why.empty()) return why;
  if (a.groups < 1) return "no groups";
  if (a.rows < 0 || a.rows > INT_MAX) return "rows must be in [0, 2^31)";
  if (a.group_start == nullptr || a.x == nullptr || a.x_scale == nullptr || a.w == nullptr || a.w_scale == nullptr ||
      a.y == nullptr)
    return "an operand, scale or table is null";
  if (!aligned16(a.x) || !aligned16(a.y)) return "x and y must be 16-byte aligned";
  return {};
}

size_t cutlass_fp8_grouped_gemm_workspace_bytes(const CutlassFp8GroupedGemmArgs& a) {
  if (!cutlass_fp8_grouped_gemm_unsupported(a).empty()) return 0;
  return a.scales == CutlassGroupedScales::kBlock ? cutlass_grouped::block_workspace_bytes(a)
                                                  : cutlass_grouped::outer_workspace_bytes(a);
}

void cutlass_fp8_grouped_gemm(const CutlassFp8GroupedGemmArgs& a, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  const auto fail = [&](const std::string& why) {
    throw Error(std::string("cutlass fp8 grouped gemm (") +
                (a.scales == CutlassGroupedScales::kBlock ? "block" : "outer") + ") groups=" +
                std::to_string(a.groups) + " rows=" + std::to_string(a.rows) + " n=" + std::to_string(a.n) +
                " k=" + std::to_string(a.k) + ": " + why);
  };
  if (const std::string why = cutlass_fp8_grouped_gemm_unsupported(a); !why.empty()) fail(why);
  const size_t need = cutlass_fp8_grouped_gemm_workspace_bytes(a);
  if (workspace == nullptr || workspace_bytes < need)
    fail("needs a workspace of " + std::to_string(need) + " bytes, got " + std::to_string(workspace_bytes));
  if (a.scales == CutlassGroupedScales::kBlock) cutlass_grouped::block_run(a, workspace, stream, fail);
  else cutlass_grouped::outer_run(a, workspace, stream, fail);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(std::string("launch: ") + cudaGetErrorString(e));
}

}  // namespace fp8lm::cuda
