// FP8 quantization of activations on the GPU, the input side of the FP8 GEMMs.
// Every FP8 byte and every scale is bit-identical to the CPU reference
// (numerics/quantize.h, as cpu::quantize_activations calls it; docs/numerics.md):
//
//   kTensor  dynamic, one scale          ScaleRule::runtime   scales [1]
//   kToken   dynamic, one scale per row  ScaleRule::runtime   scales [m]   (kChannel: the same)
//            (+ FBGEMM's optional upper bound on the per-token amax)
//   kGroup   dynamic, 1 × g cells        ScaleRule::vllm_group scales [m, cdiv(k, g)]
//   static   the caller's scale (device float [1]), nothing written to `scales`
//
// code = fp8(clamp(x / scale, ±max)) with a true IEEE division. NaN inputs keep
// their sign; ±inf under a dynamic scale (amax = inf, so scale = inf) gives
// inf/inf, which the x86 CPU reference turns into its negative "default NaN":
// code 0xFF, reproduced here.
//
// Inputs are row-major [m, k], BF16 (the GPU activation type) or float32.
// Everything is asynchronous on `stream`; argument errors throw fp8lm::Error
// before anything is launched. Rows of up to 32,768 elements are held in
// registers; longer rows (up to 2^30) are re-read from memory (L2) in each pass.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "numerics/fp8_format.h"
#include "backend/cuda/quant/row_quant_params.h"
#include "backend/cuda/quant/scale_rule.h"
#include "numerics/quantize.h"

namespace fp8lm::cuda {

// How an activation is quantized (the GPU side of weights::LinearWeight::activation).
struct Fp8ActQuant {
  Granularity granularity = Granularity::kToken;  // kTensor, kToken (= kChannel) or kGroup
  int64_t group_size = 128;                        // kGroup: elements per 1 × g cell
  Fp8Format format = Fp8Format::kE4M3;
  // kToken: FBGEMM's bound on each token's amax (0 = none): scale =
  // max(min(amax / max, ub / max), floor), as cpu::quantize_activations.
  float token_scale_upper_bound = 0.0f;
  // Static per-tensor quantization with this device scale (float [1], finite,
  // > 0); granularity is then ignored and no scale is written.
  const float* static_scale = nullptr;

  static Fp8ActQuant tensor() { return {Granularity::kTensor}; }
  static Fp8ActQuant token(float upper_bound = 0.0f) {
    return {Granularity::kToken, 128, Fp8Format::kE4M3, upper_bound};
  }
  static Fp8ActQuant group(int64_t g = 128) { return {Granularity::kGroup, g}; }
  static Fp8ActQuant static_tensor(const float* device_scale) {
    return {Granularity::kTensor, 128, Fp8Format::kE4M3, 0.0f, device_scale};
  }

  // Floats written to `scales` for an [m, k] input (0 for static).
  int64_t scale_count(int64_t m, int64_t k) const;
};

// The scale rule quantize_fp8_dynamic applies for q (kTensor, kToken: fp8lm's
// runtime rule, and FBGEMM's token bound as a cap; kGroup: vLLM's group rule),
// for kernels that quantize their input themselves (the decode GEMV).
Fp8ScaleRule dynamic_scale_rule(const Fp8ActQuant& q);

// ---- plain quantization ------------------------------------------------------
// scales: device floats, scale_count(m, k) of them (kTensor: also its scratch).
void quantize_fp8_dynamic(const __nv_bfloat16* x, int64_t m, int64_t k, const Fp8ActQuant& q,
                          uint8_t* codes, float* scales, cudaStream_t stream);
void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const Fp8ActQuant& q,
                          uint8_t* codes, float* scales, cudaStream_t stream);

// scale: device float [1] (finite, > 0).
void quantize_fp8_static(const __nv_bfloat16* x, int64_t m, int64_t k, const float* scale,
                         uint8_t* codes, cudaStream_t stream, Fp8Format format = Fp8Format::kE4M3);
void quantize_fp8_static(const float* x, int64_t m, int64_t k, const float* scale,
                         uint8_t* codes, cudaStream_t stream, Fp8Format format = Fp8Format::kE4M3);

// ---- quantization fused into the producer ---------------------------------------
// The parameters for quantizing a producer's [m, k] output as q says into codes and scales,
// checked as quantize_fp8_dynamic / quantize_fp8_static check theirs (fp8lm::Error names what
// is wrong). One pass only: static, per token or per group — a dynamic per-tensor scale needs
// every row's amax first and is refused.
// The producer that uses them: model_kernels.h's rms_norm / add_rms_norm with a RowQuantOutput.
RowParams row_quant_params(const char* op, int64_t m, int64_t k, const Fp8ActQuant& q, uint8_t* codes,
                           float* scales);

namespace detail {
// Launch shape of the row kernels, for tests and benchmarks (not thread-safe;
// results do not depend on it). max_threads: 32…512 threads per row; rows
// longer than max_threads × 64 elements, or all rows when force_streaming,
// take the kernel that re-reads the row in each pass instead of keeping it in
// registers.
struct RowKernelTuning {
  int max_threads = 512;
  bool force_streaming = false;
};
RowKernelTuning& row_kernel_tuning();

// The device side of silu.h on its own, called by test_cuda_quant only (the
// model's SiLU·mul is model_kernels' silu_mul): exp_f32 of the float32 bit
// patterns first … first + n − 1 (NaN patterns give +qNaN), and silu_mul_f32
// element by element.
void exp_f32_bit_range(uint32_t first, size_t n, float* out, cudaStream_t stream);
void silu_mul_f32_array(const float* gate, const float* up, size_t n, float* out, cudaStream_t stream);
}  // namespace detail

}  // namespace fp8lm::cuda
