// FP8 GEMM through CUTLASS (issue 19): Hopper's warp-specialized TMA kernel with the scales
// applied in its epilogue, for per-token activation × per-channel weight scales (FP8_DYNAMIC,
// `--quantization fp8`):
//
//   y[i, j] = bf16(((Σ_k x[i, k] · w[j, k]) · x_scale[i]) · w_scale[j])
//
// x: E4M3 [m, k] row-major, w: E4M3 [n, k] row-major (a linear layer's weight as stored), y BF16
// [m, n] row-major; the products accumulate in float32 with the tensor cores' FP8 accumulator
// promoted to float32 every few K blocks (no fast accumulation), then the two scale products,
// each rounded in float32, in the CPU reference's order. Two configurations (CutlassFp8Config,
// one file each, cutlass_fp8_gemm_<config>.cu), the same scale arithmetic (stream-K sums K in
// ranges whose partial sums are then added: another order, the same bound). Built when the
// CUTLASS headers are found (scripts/build.sh fetches PyPI's pinned `nvidia-cutlass`);
// dispatched where `bench_cuda_gemm` measured a configuration faster than cuBLASLt on the shape
// (linear_plan.cpp's kCutlassMeasured; docs/benchmarks.md, issue 19). Block-scaled dense GEMMs
// run on cuBLASLt (cublaslt_gemm.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "backend/cuda/gemm/cutlass_fp8_gemm_args.h"

namespace fp8lm::cuda {

// "stream-K 128x128", "ping-pong 64x128".
const char* cutlass_fp8_config_name(CutlassFp8Config c);

// Empty where the configuration takes these arguments; else what is wrong with them (k a
// multiple of 16 and n of 8, 16-byte aligned operands: TMA's rows; sizes below 2^31; a known
// configuration).
std::string cutlass_fp8_gemm_unsupported(const CutlassFp8GemmArgs& a);

// Device scratch the call needs (its tile scheduler's), 0 if none.
size_t cutlass_fp8_gemm_workspace_bytes(const CutlassFp8GemmArgs& a);

// Runs on `stream`; throws fp8lm::Error naming the problem for arguments it does not take, or
// for too small a workspace.
void cutlass_fp8_gemm(const CutlassFp8GemmArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace fp8lm::cuda
