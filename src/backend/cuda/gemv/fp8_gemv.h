// FP8 weight-streaming GEMM for decode sizes (m = 1 … 16 rows of activations):
//   y[m, n] = x[m, k] · Wᵀ (+ bias),  W: E4M3 codes [n, k] row-major with float32 scales.
//
// At these sizes a linear layer is bound by reading its weights once, and cuBLASLt's FP8
// paths read them far below the copy bandwidth (docs/benchmarks.md, issue 8). This kernel
// streams every weight byte once with 16-byte loads, expands the codes in registers and
// multiplies them on the tensor cores (mma.sync m16n8k16, float32 accumulators) against
// activations staged in shared memory, with the weights as the 16-row operand so that
// m ≤ 8 costs one MMA per 16 × 16 weights (two for m ≤ 16).
//
// Numerics (the CPU reference's, src/backend/cpu/linear.cpp; docs/numerics.md):
//   * W8A16 (x in BF16): y = Σ_k x · (code_w · s_w). The codes become exact BF16 values,
//     the products are exact and summed in float32; the weight scale multiplies each
//     128-wide K block's sum (block scales) or the whole sum (tensor / channel scales).
//   * W8A8 (x as E4M3 codes + scales): per 128-wide K block b, the float32 sum
//     Σ code_x · code_w, then × s_x(b) × s_w(b), summed over blocks in float32
//     (when neither scale varies along K the sum runs over the whole K range first, as
//     the CPU does). Codes expand exactly to FP16 (weights as value × 2^-8, undone on the
//     float32 sum), so every product is exact.
//   * Output: the float32 sum plus bias, rounded once to BF16 (nearest-even).
//   * Deterministic: a fixed split of K and a fixed summation order (no atomics on data);
//     the same inputs give the same bytes on every run.
// The tensor cores' float32 accumulation is not IEEE round-to-nearest (it truncates
// after aligning each step's products); its error stays within the same k·2^-24·Σ|terms|
// bound as a float32 loop, which is what tests/cuda/test_cuda_gemv.cpp checks.
// NaN weight codes (0x7F / 0xFF) are not propagated: weights never hold them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/quant/scale_rule.h"

namespace fp8lm::cuda {

constexpr int64_t kMaxGemvRows = 16;

// Scale grid of the weights (dequantization multipliers, float32, row-major):
enum class WeightScaleLayout : uint8_t {
  kTensor,    // [1]
  kChannel,   // [n]: one per output row
  kBlock128,  // [cdiv(n, 128), cdiv(k, 128)]: one per 128 × 128 block
};

// Scale grid of E4M3 activations (W8A8); kNone = BF16 activations (W8A16).
enum class ActivationScaleLayout : uint8_t {
  kNone,
  kTensor,    // [1]
  kToken,     // [m]: one per row of x
  kGroup128,  // [m, cdiv(k, 128)]: one per 1 × 128 group along K
};

struct Fp8GemvArgs {
  int64_t m = 0, n = 0, k = 0;  // 1 ≤ m ≤ kMaxGemvRows

  // Weights: E4M3 codes [n, k] row-major and their scales.
  const uint8_t* w = nullptr;
  const float* w_scale = nullptr;
  WeightScaleLayout w_layout = WeightScaleLayout::kTensor;

  // Activations, one of:
  //   W8A16: x = BF16 [m, k] row-major, x_layout = kNone;
  //   W8A8:  x_codes = E4M3 [m, k] row-major with x_scale in x_layout's grid;
  //   W8A8 quantized here: x = BF16 [m, k] and quantize_x set. The GEMV quantizes x as
  //     it stages it, writing nothing: x_layout kToken / kGroup128 / kTensor with x_scale
  //     null takes dynamic scales under x_rule (each row's, each 1 × 128 group's, or all
  //     of x's amax); kTensor with x_scale given is static. The codes and scales are
  //     exactly those quantize_fp8_dynamic / quantize_fp8_static write (the same device
  //     functions, quantize_device.cuh), so the result is bit-identical to quantizing
  //     first and passing x_codes — without the separate kernel and its round trip.
  const __nv_bfloat16* x = nullptr;
  const uint8_t* x_codes = nullptr;
  const float* x_scale = nullptr;
  ActivationScaleLayout x_layout = ActivationScaleLayout::kNone;
  bool quantize_x = false;
  Fp8ScaleRule x_rule;  // quant_kernels.h dynamic_scale_rule of the activation scheme

  const __nv_bfloat16* bias = nullptr;  // [n] or null
  __nv_bfloat16* y = nullptr;           // [m, n] row-major

  // Scratch for split-K partial sums: at least fp8_gemv_workspace_bytes(*this) bytes, 16-byte
  // aligned, zero-filled once when allocated (each call leaves its counters zeroed again).
  // May be null when that size is 0. Calls of any shape may share one workspace (sized for
  // the largest) as long as they are ordered (one stream).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  // Launch as a programmatic dependent of the kernel before it on the stream (Hopper PDL):
  // the blocks start streaming weights while that kernel finishes and wait for it (all its
  // writes visible) before touching anything else, so the previous kernel must not write
  // w or w_scale. Every fp8_gemv lets its dependents start as soon as it is running.
  bool programmatic_launch = false;
};

// How the work is cut: each block of 8 warps covers rows_per_cta = 16·row_tiles output
// rows (row_tiles ∈ {1, 2, 4, 8}; the other 8 / row_tiles warps split the block's K range)
// and one of k_splits ranges of K (partials summed by the last block to finish).
struct Fp8GemvPlan {
  int row_tiles = 8;
  int k_splits = 1;
};

// The plan fp8_gemv runs for these arguments on the current device: its own choice, or
// `requested` as clamped to what the sizes allow.
Fp8GemvPlan fp8_gemv_plan(const Fp8GemvArgs& a, const Fp8GemvPlan* requested = nullptr);

// Workspace the call needs (0 when the plan does not split K). With `plan` null, for
// the plan fp8_gemv_plan picks.
size_t fp8_gemv_workspace_bytes(const Fp8GemvArgs& a, const Fp8GemvPlan* plan = nullptr);

// y = x · Wᵀ (+ bias) on `stream`. Throws fp8lm::Error naming what is wrong (sizes,
// missing pointers, activation/scale mismatch, workspace too small); `plan` overrides the
// automatic choice (benchmarks and tests), clamped to what the sizes allow.
void fp8_gemv(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvPlan* plan = nullptr);

// ---- The grouped form (MoE experts) --------------------------------------------------------
//
// One launch over many weights of one shape and scheme: slot s multiplies expert[s]'s weights
// by rows first[s] … first[s] + rows[s] − 1 of the grouped rows, writing those rows of y
// [rows, n]. The slot table lives on the device (written by the kernel before, e.g. the MoE
// routing), so nothing comes back to the host and the launch can be recorded in a graph;
// unused slots (s ≥ count) exit at once. Per slot the arithmetic is fp8_gemv's for m = rows[s]
// with the grouped plan: a row's result does not depend on the slot's other rows.
struct Fp8GemvGroups {
  // Device int32 [1 + 3·max_slots]: count, expert[max_slots], first[max_slots], rows[max_slots],
  // every rows[s] in 1 … Fp8GemvArgs::m.
  const int32_t* slots = nullptr;
  int max_slots = 0;
  // Device arrays of device pointers, one per expert: E4M3 codes [n, k] (16-byte aligned),
  // their scales in Fp8GemvArgs::w_layout's grid, and the bias [n] (a null table: none).
  const uint8_t* const* w = nullptr;
  const float* const* w_scale = nullptr;
  const __nv_bfloat16* const* bias = nullptr;
  // Grouped row i reads row x_rows[i] of x / x_codes (and its token / group scales): the
  // gather of the routed rows, done by the GEMV's staging. Null: x is already in grouped
  // order (row i).
  const int32_t* x_rows = nullptr;
  int64_t rows = 0;  // grouped rows (y's)
};

// y = grouped x · W_expertᵀ over every slot. In `a`: m = the most rows a slot holds (≤ 16),
// n, k (k % 16 == 0), w_layout, the activations as for fp8_gemv (a dynamic per-tensor scale is
// refused: it would span one slot), y [g.rows, n], workspace; a.w, a.w_scale, a.bias unused.
size_t fp8_gemv_grouped_workspace_bytes(const Fp8GemvArgs& a, const Fp8GemvGroups& g);
// The plan every slot runs (fp8_gemv with this plan and m = the slot's rows gives its bytes).
Fp8GemvPlan fp8_gemv_grouped_plan(const Fp8GemvArgs& a, const Fp8GemvGroups& g);
void fp8_gemv_grouped(const Fp8GemvArgs& a, const Fp8GemvGroups& g, cudaStream_t stream);

}  // namespace fp8lm::cuda
