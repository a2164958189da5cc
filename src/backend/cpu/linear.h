// The CPU backend's linear layer: y[M, N] = x[M, K] · Wᵀ (+ bias), for every
// weight storage and quantization scheme fp8lm reads (docs/numerics.md):
//
//   * BF16 / F16 / F32 weights: converted to float32 a tile at a time.
//   * FP8 weights, activation kNone (W8A16, weight-only): each weight tile is
//     dequantized on the fly (code × scale, exact products) and multiplied with
//     the float32 input. The FP8 bytes are never expanded into a full copy.
//   * FP8 weights with quantized activations (W8A8, as the GPU's FP8 GEMMs do):
//     x is quantized with fp8lm's own quantizer (dynamic per tensor / token /
//     group or static per tensor), then y = Σ_blocks (Σ_k code_x · code_w) · s_x · s_w,
//     each K block of the scale grids (128 for block/group schemes) summed on its
//     own in float32 and then scaled ("per-block promotion", DeepSeek / vLLM).
//
// Work is split into fixed tiles of outputs, independent of the thread count,
// so results are identical for any number of threads.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/linear_plan.h"
#include "common/thread_pool.h"
#include "numerics/quantize.h"
#include "spec/quant_scheme.h"
#include "weights/linear_weight.h"

namespace fp8lm::cpu {

// The input quantized as the W8A8 path does it (exposed for tests and for
// the GPU backend's comparisons): x[m, k] with the plan's activation quantizer.
// Throws for a plan without one (not W8A8).
QuantizedMatrix quantize_activations(const float* x, int64_t m, const LinearPlan& p, int64_t k,
                                     KernelChoice kernels = KernelChoice::kAuto);
// The same with the quantizer taken from w.activation (must not be kNone).
QuantizedMatrix quantize_activations(const float* x, int64_t m, const weights::LinearWeight& w,
                                     KernelChoice kernels = KernelChoice::kAuto);

// Which inner loops to use (the same choice as the numerics kernels); kAuto = the
// widest this CPU runs.
const LinearKernels& select_linear_kernels(KernelChoice choice);

// y[m, n] = x[m, k] · Wᵀ + bias, computed as p says; p must be plan_linear(w)
// (w is not validated again). x has m·K floats, y has m·N floats (overwritten).
// pool may be null (single thread). Throws fp8lm::Error on bad sizes.
void linear(std::span<const float> x, int64_t m, const weights::LinearWeight& w, const LinearPlan& p,
            std::span<float> y, ThreadPool* pool = nullptr, KernelChoice kernels = KernelChoice::kAuto);
// Convenience for tests and benchmarks: plan_linear(w) (which validates w, with
// weights::validate's errors), then the above.
void linear(std::span<const float> x, int64_t m, const weights::LinearWeight& w, std::span<float> y,
            ThreadPool* pool = nullptr, KernelChoice kernels = KernelChoice::kAuto);

}  // namespace fp8lm::cpu
