// The persistent decode kernel's host side that needs no GPU: the instruction list and the CTAs'
// queues (build_schedule), the buffers' sizes, and what the kernel refuses. Tested without a
// GPU (tests/cuda/test_cuda_persistent_schedule.cpp).
#include <algorithm>
#include <string>

#include "backend/cuda/persistent/decode_program.h"
#include "common/error.h"

namespace fp8lm::cuda::persistent {

Schedule build_schedule(const ModelShape& s, int rows, int ctas) {
  if (rows < 1 || rows > kMaxRows || ctas < 1)
    throw Error("persistent decode: a schedule of " + std::to_string(rows) + " rows on " + std::to_string(ctas) +
                " CTAs");
  if (const std::string why = unsupported_shape(s, rows); !why.empty()) throw Error("persistent decode: " + why);
  Schedule out;
  out.ctas = ctas;
  const int pairs = rows * s.kv_heads;
  out.attention_splits = std::clamp(ctas / pairs, 1, kMaxSplits);  // one wave of attention
  const int qkv_tiles = (s.q_heads + 2 * s.kv_heads) * s.head_dim / kTileRows;
  out.phase_count[0] = qkv_tiles;
  out.phase_count[1] = pairs * out.attention_splits;
  out.phase_count[2] = s.hidden / kTileRows;
  out.phase_count[3] = s.intermediate / 8;  // a tile: 8 gate rows and their 8 up rows
  out.phase_count[4] = s.hidden / kTileRows;
  out.lm_head_tiles = s.vocab / kTileRows;
  std::vector<std::vector<int32_t>> queues(static_cast<size_t>(ctas));
  int next = 0;  // the CTA that takes the next instruction
  auto add = [&](Op op, int layer, int a, int b, int c) {
    queues[size_t(next)].push_back(int32_t(out.instructions.size()));
    out.instructions.push_back({uint8_t(op), 0, uint16_t(layer), a, b, c});
    next = (next + 1) % ctas;
  };
  for (int l = 0; l < s.layers; ++l) {
    for (int t = 0; t < qkv_tiles; ++t) add(Op::kQkv, l, t, 0, 0);
    // Splits of one (row, KV head) on different CTAs, pairs side by side.
    for (int sp = 0; sp < out.attention_splits; ++sp)
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < s.kv_heads; ++h) add(Op::kAttention, l, r, h, sp);
    for (int t = 0; t < out.phase_count[2]; ++t) add(Op::kO, l, t, 0, 0);
    for (int t = 0; t < out.phase_count[3]; ++t) add(Op::kGateUp, l, t, 0, 0);
    for (int t = 0; t < out.phase_count[4]; ++t) add(Op::kDown, l, t, 0, 0);
  }
  for (int t = 0; t < out.lm_head_tiles; ++t) add(Op::kLmHead, 0, t, 0, 0);
  out.queue_start.push_back(0);
  for (const std::vector<int32_t>& q : queues) {
    out.queue.insert(out.queue.end(), q.begin(), q.end());
    out.queue_start.push_back(int32_t(out.queue.size()));
  }
  return out;
}

int64_t counter_count(const ModelShape& shape) {
  // Phases per layer, merges per (row, KV head), row amaxes of attn and act per layer, the end.
  return int64_t(shape.layers) * kPhasesPerLayer + int64_t(kMaxRows) * shape.kv_heads +
         2 * int64_t(shape.layers) * kMaxRows + 1;
}

int64_t partial_floats(const ModelShape& shape, int rows, int splits) {
  const int group = shape.q_heads / shape.kv_heads;
  return int64_t(rows) * shape.kv_heads * splits * ((group * (shape.head_dim + 2) + 3) / 4 * 4);
}

std::string unsupported_shape(const ModelShape& s, int rows) {
  if (rows < 1 || rows > kMaxRows)
    return std::to_string(rows) + " rows (it runs 1 to " + std::to_string(kMaxRows) + ")";
  if (s.layers < 1 || s.layers > 65535) return std::to_string(s.layers) + " layers";
  if (s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128)
    return "head_dim " + std::to_string(s.head_dim) + " (it runs 32, 64 and 128)";
  if (s.kv_heads < 1 || s.q_heads % s.kv_heads != 0 || s.q_heads / s.kv_heads > kMaxGroup)
    return std::to_string(s.q_heads) + " query heads over " + std::to_string(s.kv_heads) + " KV heads (groups of at most " +
           std::to_string(kMaxGroup) + ")";
  for (const auto& [n, what] : {std::pair{s.hidden, "hidden size"}, std::pair{s.intermediate, "intermediate size"},
                                std::pair{s.vocab, "vocabulary"}})
    if (n <= 0 || n % kTileRows != 0)
      return std::string(what) + " " + std::to_string(n) + " (a multiple of " + std::to_string(kTileRows) + " runs)";
  return {};
}

std::string unsupported_linear(const DeviceLinear& l, const char* what) {
  if (l.n % kTileRows != 0 || row_bytes(l) % 64 != 0 || l.k % 8 != 0)
    return std::string(what) + " of " + std::to_string(l.n) + " x " + std::to_string(l.k) +
           " (it runs n a multiple of 16 and rows of a multiple of 64 bytes)";
  return {};
}

}  // namespace fp8lm::cuda::persistent
