// The paged KV cache's and paged attention's descriptions, shared by every
// backend and the model: what one layer's cache stores, the cache's shape,
// and one sequence's part of a batched attention call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace fp8lm::backend {

// Element type of one layer's KV cache, and its dequantization multipliers.
enum class KvElement : uint8_t { kF32, kBF16, kE4M3, kE5M2 };
struct KvLayerFormat {
  KvElement element = KvElement::kBF16;
  float k_scale = 1.0f;  // FP8 only: real ≈ code × scale
  float v_scale = 1.0f;
};
struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int64_t head_dim = 0;
  int block_size = 16;     // positions per block
  int64_t num_blocks = 0;
};

// One sequence's part of a batched attention call.
struct AttentionSequence {
  int64_t first_row = 0;       // row of its first new token in q/k/v/out
  int64_t num_tokens = 0;      // new tokens this step
  int64_t start_position = 0;  // position of its first new token = tokens already cached
  std::span<const int64_t> block_table;  // blocks holding positions [0, start_position + num_tokens)
};

struct AttentionParams {
  int num_heads = 0;
  int num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;  // softmax scale, 1/sqrt(head_dim)
  std::optional<int64_t> sliding_window;  // a token sees itself and the window − 1 before it
};

}  // namespace fp8lm::backend
