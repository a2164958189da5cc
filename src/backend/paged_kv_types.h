// The paged KV cache's and paged attention's descriptions, shared by every
// backend and the model: what one layer's cache stores, the cache's shape,
// and one sequence's part of a batched attention call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "weights/element_type.h"

namespace fp8lm::backend {

// Element type of one layer's KV cache: fp8lm's one element type. A cache
// layer stores F32, BF16, E4M3 or E5M2; validate_kv refuses F16.
using KvElement = ElementType;
// One layer's element type and its dequantization multipliers.
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
  // The last padding_blocks blocks are no sequence's: the padding rows of a
  // decode step (LlamaModel, backend::decode_graph_rows) store their K/V there.
  // The block allocator is given the others only. 0 ≤ padding_blocks < num_blocks.
  int64_t padding_blocks = 0;
  // Multi-head latent attention (DeepSeek-V3): one entry a token and no V — the
  // compressed latent and the roped key part side by side (head_dim =
  // kv_lora_rank + qk_rope_head_dim, num_kv_heads = 1), shared by every query
  // head. An FP8 layer's entry takes its k_scale.
  bool latent = false;
};

// Throws fp8lm::Error naming the problem: a size that is not positive,
// layers.size() != num_layers, an element type a cache layer cannot store, an
// FP8 layer's scale that is not finite and > 0. Every backend's cache checks
// its shape and formats with it.
void validate_kv(const KvCacheShape& shape, const std::vector<KvLayerFormat>& layers);
// K + V bytes of one token position over all layers (no padding), after
// validate_kv: what the KV budget divides memory by. A latent cache holds K only.
uint64_t kv_bytes_per_token(const KvCacheShape& shape, const std::vector<KvLayerFormat>& layers);

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
