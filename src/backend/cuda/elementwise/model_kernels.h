// The CUDA backend's per-row model kernels: everything of a decoder layer but
// the GEMMs and attention. Activations are BF16 (__nv_bfloat16), row-major and
// dense unless a row stride `ld` is given; norm weights and RoPE frequencies
// are float32; every kernel computes in float32 and rounds its output once to
// BF16 (round to nearest-even; every NaN becomes 0x7FC0, as fp8lm::float_to_bf16).
// The reference is the CPU backend (backend/cpu/cpu_ops.cpp) on the same values
// widened to float and its result rounded to BF16:
//
//   embedding, gather, add, silu_mul, bf16_to_float, argmax   bit-identical
//   rms_norm, add_rms_norm, head_rms_norm                     bit-identical but where the double sum of squares
//                                                             is inexact (see rms_norm), then ≤ 1 BF16 ulp
//   rope, rope_qk                                             cos/sin from CUDA's sincosf (≤ 2 ulp) vs glibc's
//                                                             (< 1 ulp): see rope
//
// Everything is asynchronous on `stream` and safe to capture in a CUDA graph:
// no allocation, no synchronization, no host reads of device data; token ids,
// row indices and positions are read from device arrays. Argument errors throw
// fp8lm::Error before anything is launched; rows = 0 launches nothing.
// Pointers need only element alignment: 16-byte aligned rows (base and row
// stride) take the vectorized path, anything else a scalar one with the same
// results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "numerics/fp8_format.h"
#include "backend/cuda/quant/quant_kernels.h"

namespace fp8lm::cuda {

// ---- embedding / gather ------------------------------------------------------------
// out[r, :] = table[ids[r], :] for r < rows; table [vocab, dim] BF16.
// A device cannot throw: an id < 0, or ≥ vocab when vocab > 0 is given, fills
// its output row with NaN (0x7FC0) instead of reading outside the table.
void embedding_bf16(const __nv_bfloat16* table, const int32_t* ids, int64_t rows, int64_t dim,
                    __nv_bfloat16* out, cudaStream_t stream, int64_t vocab = 0);
// FP8 table: codes [vocab, dim] (E4M3 or E5M2), one float scale per row:
// out[r, c] = bf16(float(code) · row_scales[ids[r]]), the float product as cpu_ops.
// With `shard`: codes and row_scales are a vocabulary shard's, rows [vocab0, vocab0 + vocab) of
// the whole table; an id outside it gives a row of +0 (tensor parallelism: the ranks' rows are
// summed), as embedding_shard_bf16 does for a BF16 table of shard_rows rows.
void embedding_fp8(const uint8_t* codes, const float* row_scales, Fp8Format format, const int32_t* ids,
                   int64_t rows, int64_t dim, __nv_bfloat16* out, cudaStream_t stream, int64_t vocab = 0,
                   int64_t vocab0 = 0, bool shard = false);
void embedding_shard_bf16(const __nv_bfloat16* table, const int32_t* ids, int64_t rows, int64_t dim,
                          __nv_bfloat16* out, cudaStream_t stream, int64_t vocab0, int64_t shard_rows);
// out [rows, blocks × cols] = the `blocks` [rows, cols] matrices of parts (one after another)
// side by side: an all-gather's rank blocks as the columns of one tensor.
void interleave_column_blocks(const __nv_bfloat16* parts, int64_t blocks, int64_t rows, int64_t cols,
                              __nv_bfloat16* out, cudaStream_t stream);
// out[i, :] = x[rows_idx[i], :] for i < n_rows (x has `cols` columns); out-of-range
// indices (< 0, or ≥ x_rows when x_rows > 0) give NaN rows, as embedding.
void gather_rows(const __nv_bfloat16* x, int64_t cols, const int32_t* rows_idx, int64_t n_rows,
                 __nv_bfloat16* out, cudaStream_t stream, int64_t x_rows = 0);

// ---- RMSNorm -------------------------------------------------------------------------
// out = w · (x · inv) per row, inv = 1 / sqrt(float(Σx² / cols) + eps): cpu_ops'
// rms_row, every float operation IEEE-rounded (no FMA, no rsqrt approximation).
// Σx² is accumulated in double, as the CPU does: the squares of BF16 values are
// exact in double and so is their sum while a row's squares span < 2^53 (any
// realistic activation row), which makes the result independent of the
// summation order and bit-identical to the CPU. FP64 is half-rate on Hopper and
// the reduction is one value per thread, so double costs nothing measurable here.
// One CTA per row; rows of up to 32,768 are held in registers,
// longer ones are re-read.
// With `quant`, the normed rows are also quantized for the FP8 linear that reads them:
// codes and scales exactly as quantize_fp8_dynamic / quantize_fp8_static of `out`
// (quant_kernels.h) write them — in the norm kernel itself (no second pass over the
// activations) wherever the row is held in registers. q: static, per token or per group.
struct RowQuantOutput {
  Fp8ActQuant q;
  uint8_t* codes = nullptr;  // [rows, cols], 16-byte aligned for the fused form
  float* scales = nullptr;   // q.scale_count(rows, cols) floats (none for static)
};
void rms_norm(const __nv_bfloat16* x, const float* w, float eps, int64_t rows, int64_t cols, __nv_bfloat16* out,
              cudaStream_t stream, const RowQuantOutput* quant = nullptr);
// The residual add fused with the next norm: h = bf16(h + delta) in place, then
// out = rms_norm(h) of the rounded h. Every element is read before it is
// written, by the same thread, so out may alias delta (or x for rms_norm).
void add_rms_norm(__nv_bfloat16* h, const __nv_bfloat16* delta, const float* w, float eps, int64_t rows,
                  int64_t cols, __nv_bfloat16* out, cudaStream_t stream, const RowQuantOutput* quant = nullptr);
// rms_norm over every head_dim-wide slice of each row, in place, with the
// head_dim weights w (Qwen3's q/k norm). Row r starts at x + r · ld (ld = 0:
// cols). head_dim ≤ 1024. One group of ≤ 32 lanes per head.
void head_rms_norm(__nv_bfloat16* x, int64_t rows, int64_t cols, int64_t head_dim, const float* w, float eps,
                   cudaStream_t stream, int64_t ld = 0);
// The same for q and k in one launch, each with its own weights.
void head_rms_norm_qk(__nv_bfloat16* q, int64_t q_cols, const float* q_w, __nv_bfloat16* k, int64_t k_cols,
                      const float* k_w, int64_t rows, int64_t head_dim, float eps, cudaStream_t stream,
                      int64_t q_ld = 0, int64_t k_ld = 0);

// ---- element-wise ----------------------------------------------------------------------
// acc = bf16(acc + x) over n elements.
void add(__nv_bfloat16* acc, const __nv_bfloat16* x, int64_t n, cudaStream_t stream);
// out = bf16(silu_mul_f32(gate, up)) (numerics/silu.h: the CPU's bits) over n elements.
void silu_mul(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, __nv_bfloat16* out,
              cudaStream_t stream);
// The same from a fused gate_up projection: gate_up [rows, 2·cols], each row's
// first cols elements the gate, the next cols the up; out [rows, cols].
void silu_mul_fused(const __nv_bfloat16* gate_up, int64_t rows, int64_t cols, __nv_bfloat16* out,
                    cudaStream_t stream);
// out = float(x), exact.
void bf16_to_float(const __nv_bfloat16* x, int64_t n, float* out, cudaStream_t stream);

// ---- RoPE ---------------------------------------------------------------------------------
// Rotate-half RoPE over every head_dim slice of row r (at x + r · ld; ld = 0:
// cols), at position positions[r]:
//   (a, b) = (x[i], x[i + half]) → (a·cos_i − b·sin_i, b·cos_i + a·sin_i),  i < half = head_dim / 2,
//   cos_i = cosf(float(position) · inv_freq[i]) · attention_factor (sin the same),
// the float32 operations of RopeTable::cos_sin and cpu_ops' rope, each rounded
// (no FMA). inv_freq: device float [head_dim / 2] (RopeTable::inv_freq()).
// cos/sin come from CUDA's precise sincosf (≤ 2 ulp; glibc's cosf/sinf < 1
// ulp), so they may differ from the CPU's by a few float ulps; the rotation is
// otherwise the same. One CTA per row computes the row's cos/sin once.
void rope(__nv_bfloat16* x, int64_t rows, int64_t cols, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, float attention_factor, cudaStream_t stream, int64_t ld = 0);
// q [rows, q_cols] and k [rows, k_cols] in one launch (half the launches of two ropes).
void rope_qk(__nv_bfloat16* q, int64_t q_cols, __nv_bfloat16* k, int64_t k_cols, int64_t rows, int64_t head_dim,
             const int32_t* positions, const float* inv_freq, float attention_factor, cudaStream_t stream,
             int64_t q_ld = 0, int64_t k_ld = 0);

// ---- greedy sampling ------------------------------------------------------------------------
// out[r] = the index of the largest value of row r (the lowest such index on
// ties, as torch.argmax; −0 and +0 tie; −inf is a value, NaN never wins); −1
// when the row holds nothing but NaN (or cols = 0). Long rows are split over a
// thread-block cluster of up to 8 CTAs that combine through distributed
// shared memory: one launch, no scratch memory.
void argmax_rows(const __nv_bfloat16* logits, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream);
void argmax_rows(const float* logits, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream);

namespace detail {
// Launch choices, for tests and benchmarks (not thread-safe; results never
// depend on them).
struct ModelKernelTuning {
  bool force_streaming_norm = false;  // rms_norm / add_rms_norm: the re-reading kernel for every width
  int argmax_cluster = 0;             // CTAs per argmax row, 1…8 (0: by the row length)
};
ModelKernelTuning& model_kernel_tuning();
}  // namespace detail

}  // namespace fp8lm::cuda
