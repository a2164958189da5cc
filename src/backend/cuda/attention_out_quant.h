// The attention output quantized for the projection that reads it next (o_proj) inside the
// attention kernels, instead of by a separate quantization kernel (issue 19: "activation
// quantization fused into the producing kernel").
//
// With per-token (or 1 × g group) scales a row's cells span the output of every query head, and
// the heads of one row are written by several CTAs (one per KV head, or per KV head and packed
// row tile). So each writer, once its stores of a row are done, adds the heads it wrote to the
// row's counter; the writer whose addition completes the row (num_heads) reads the whole row
// back from L2 and quantizes it with one warp — the codes and scales quantize_fp8_dynamic /
// quantize_fp8_static would write from the same BF16 row, bit for bit — and sets the counter
// back to zero for the next call. The BF16 output is still written (observers read it).
#pragma once

#include <cstdint>

#include "backend/cuda/row_quant_params.h"

namespace fp8lm::cuda {

// Counters for this many output rows at most (zeroed once when allocated; every call leaves the
// ones it used at zero). A step with more rows quantizes with the separate kernel.
inline constexpr int64_t kAttentionOutQuantRows = 65536;

struct AttentionOutQuant {
  unsigned* counters = nullptr;  // kAttentionOutQuantRows zeroed counters; null: not fused
  int heads = 0;                 // a row is complete when this many heads arrived: num_heads
  RowParams p{};                 // k = num_heads × head_dim (row_quant_params)
};

// Whether the warp quantizer covers p: a static scale, or dynamic per token, or dynamic per
// group of g = 8 × 2^i ≤ 256 elements dividing the row (one cell per whole lanes' vectors); rows
// of whole 16-byte vectors.
inline bool attention_out_quant_covers(const RowParams& p) {
  if (p.k <= 0 || p.k % 8 != 0 || p.codes == nullptr) return false;
  if (p.mode == RowQuantMode::kStatic) return p.static_scale != nullptr;
  if (p.mode != RowQuantMode::kDynamic || p.scales == nullptr) return false;
  if (p.ngroups == 1) return true;
  const int lanes = p.group / 8;
  return p.group % 8 == 0 && lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0 && p.k % p.group == 0;
}

}  // namespace fp8lm::cuda
