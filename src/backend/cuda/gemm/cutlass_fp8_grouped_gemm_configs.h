// The grouped CUTLASS FP8 GEMM's two configurations behind cutlass_fp8_grouped_gemm.h's dispatch,
// defined in cutlass_fp8_grouped_gemm_{outer,block}.cu. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm_args.h"

namespace fp8lm::cuda::cutlass_grouped {

using FailFn = std::function<void(const std::string&)>;

size_t outer_workspace_bytes(const CutlassFp8GroupedGemmArgs& a);
void outer_run(const CutlassFp8GroupedGemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail);
size_t block_workspace_bytes(const CutlassFp8GroupedGemmArgs& a);
void block_run(const CutlassFp8GroupedGemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail);

}  // namespace fp8lm::cuda::cutlass_grouped
