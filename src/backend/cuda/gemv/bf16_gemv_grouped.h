// The grouped GEMV for BF16 weights (MoE experts in BF16): fp8_gemv_grouped's slots (fp8_gemv.h
// Fp8GemvGroups) over BF16 [n, k] matrices, y = x · Wᵀ (+ bias) per slot.
//
// Why its own kernel: the BF16 dense layers use cuBLASLt at every size, which has no form over
// device-side groups; an MoE decode step touches few rows per expert (top-k of many experts:
// at batch 64 on Qwen3-30B-A3B about 4 rows an expert), so the block is bound by reading the
// touched experts' weights once, which CUDA cores do at these row counts: each warp streams
// 4 weight rows with 16-byte loads and multiplies them by the slot's rows of x (read through
// L1), float32 sums (fused multiply-add, K in lane order then a warp tree), rounded once to
// BF16. It is the BF16 reference the FP8 grouped path is measured against.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8lm::cuda {

struct Bf16GemvGroupedArgs {
  int64_t m = 0;  // the most rows a slot holds, 1 … 16
  int64_t n = 0, k = 0;  // k % 8 == 0
  const int32_t* slots = nullptr;  // Fp8GemvGroups::slots
  int max_slots = 0;
  const __nv_bfloat16* const* w = nullptr;     // per expert: [n, k], 16-byte aligned
  const __nv_bfloat16* const* bias = nullptr;  // per expert: [n], or a null table
  const __nv_bfloat16* x = nullptr;            // [*, k], 16-byte aligned
  const int32_t* x_rows = nullptr;             // grouped row i reads x row x_rows[i]; null: row i
  __nv_bfloat16* y = nullptr;                  // [grouped rows, n]
  bool programmatic_launch = false;            // Hopper PDL, as Fp8GemvArgs
};

// Throws fp8lm::Error naming a bad argument.
void bf16_gemv_grouped(const Bf16GemvGroupedArgs& a, cudaStream_t stream);

}  // namespace fp8lm::cuda
