// The CUTLASS FP8 GEMM's configurations behind cutlass_fp8_gemm.h's dispatch: each one's plan
// (whether CUTLASS implements the arguments, and the scratch it needs) and its launch, defined
// in cutlass_fp8_gemm_<config>.cu. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

#include "backend/cuda/gemm/cutlass_fp8_gemm_args.h"

namespace fp8lm::cuda::cutlass_fp8 {

struct Plan {
  bool implementable = false;
  size_t workspace_bytes = 0;
};
using FailFn = std::function<void(const std::string&)>;

Plan stream_k_128x128_plan(const CutlassFp8GemmArgs& a);
void stream_k_128x128_run(const CutlassFp8GemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail);
Plan pingpong_64x128_plan(const CutlassFp8GemmArgs& a);
void pingpong_64x128_run(const CutlassFp8GemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail);

}  // namespace fp8lm::cuda::cutlass_fp8
