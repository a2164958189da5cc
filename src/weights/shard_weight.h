// Tensor-parallel slices of one linear weight (issue 22): the output rows a rank computes
// (column-parallel: q/k/v, gate/up, the vocabulary of the embedding and lm_head) or the part of
// K it reads (row-parallel: o_proj, down_proj), with their scales, as owned copies.
//
// Scales follow the slice. Tensor scales stay; channel scales are sliced with the rows (a K
// slice keeps them all); block (bn × bk) and group (1 × g along K) scales are sliced with their
// cells where the slice starts on a cell boundary (its end may cut the last cell, as a weight's
// own end does). Where a boundary falls inside a cell — a per-rank size that is not a multiple of
// 128 for 128 × 128 blocks, which vLLM and SGLang refuse ("not divisible by block_k=128") — the
// slice gets a grid of its own, anchored at its first row and column: each new cell covers parts
// of up to two original cells along the split; its scale is the largest of theirs, so every value
// still fits; the codes of a part whose scale that is stay as they are (exact), the other parts'
// values (code × their scale) are requantized to the new scale (float32 division, round to
// nearest-even, saturating: the quantizer's cast), and what that changed is measured
// (ShardReport). High-precision weights are copied as they are.
#pragma once

#include <cstdint>

#include "weights/linear_weight.h"

namespace fp8lm::weights {

// What re-scaling a slice changed (all zero where the slice is cell-aligned).
struct ShardReport {
  int64_t cells_rescaled = 0;     // new scale cells that mix parts of two original cells
  int64_t codes_requantized = 0;  // codes moved to a larger scale
  int64_t values_changed = 0;     // of those, the values (code × scale) that changed
  double max_abs_error = 0.0;     // largest |new value − original value|
  double max_rel_error = 0.0;     // largest |new − original| / |original| over nonzero originals
  void add(const ShardReport& o);
};

// Rows [row0, row0 + rows) of w (column-parallel), bias sliced with them.
LinearWeight shard_rows(const LinearWeight& w, int64_t row0, int64_t rows, ShardReport* report = nullptr);

// Columns [col0, col0 + cols) of w along K (row-parallel). The bias is added once after the
// ranks' partial sums are reduced: `keep_bias` on one rank, none on the others.
LinearWeight shard_cols(const LinearWeight& w, int64_t col0, int64_t cols, bool keep_bias,
                        ShardReport* report = nullptr);

}  // namespace fp8lm::weights
